/*
 * rls meta: google.protobuf.Struct values, the metadata a descriptor of the
 * YAML config carries, and their encoding into a RateLimitResponse's
 * dynamic_metadata (field 6), as envoyproxy/ratelimit answers with
 * RESPONSE_DYNAMIC_METADATA (src/service/ratelimit.go):
 *
 *   dynamic_metadata = {
 *     "domain":      the request's domain,
 *     "descriptors": [ { "entries":    ["KEY=VALUE", ...],
 *                        "limit":      "requests_per_unit:N unit:UNIT"
 *                                      (the request's override, if any),
 *                        "hitsAddend": the descriptor's hits_addend
 *                                      (if set) }, ... ],
 *     "hitsAddend":  the request's hits_addend (if not 0),
 *     "metadata":    the merged `metadata` of the limits of every descriptor
 *                    answered OK (if any)
 *   }
 *
 * Merging goes in descriptor order: the first value of a field wins, except
 * that two structs under one name merge field by field, recursively.
 *
 * Values are built by the config loader and owned by their config; the
 * encoder only reads them.  Nothing here does I/O.
 */
#ifndef SLUICE_RLS_META_H
#define SLUICE_RLS_META_H

#include <stddef.h>
#include <stdint.h>

/* One google.protobuf.Value. */
enum rls_meta_kind {
    RLS_META_NULL,
    RLS_META_NUMBER,
    RLS_META_STRING,
    RLS_META_BOOL,
    RLS_META_STRUCT,
    RLS_META_LIST,
};

struct rls_meta {
    enum rls_meta_kind kind;
    double number;          /* NUMBER */
    int boolean;            /* BOOL */
    char *string;           /* STRING */
    char **keys;            /* STRUCT: n field names, each once, in file order */
    struct rls_meta *items; /* STRUCT: the n values; LIST: the n items */
    size_t n;
};

/* Bounds of one config file's metadata (YAML aliases included), so that no
 * file makes a value, or an answer, explode. */
#define RLS_META_MAX_DEPTH 32
#define RLS_META_MAX_NODES 16384
/* An answer's dynamic_metadata is at most this many bytes. */
#define RLS_META_MAX_BYTES (1u << 20)

/* Frees what m holds (not m itself); NULL ok. */
void rls_meta_clear(struct rls_meta *m);

/* A growing output buffer; failed once a write would pass max. */
struct rls_meta_buf {
    uint8_t *p;
    size_t len, cap, max;
    int failed;
};

/* One request descriptor, as the encoder needs it (borrowed). */
struct rls_meta_desc {
    const char *const *keys;
    const char *const *values;
    size_t nentries;
    int has_limit; /* the request's limit override */
    uint32_t limit_rpu;
    int limit_unit; /* envoy.type.v3.RateLimitUnit's number */
    int has_hits;   /* the descriptor's hits_addend is set */
    uint64_t hits;
};

/*
 * Writes the Struct above (its fields, without tag or length) into b (reset
 * first; b->max bounds it).  passed[] holds the metadata of the limits of
 * the descriptors answered OK, in descriptor order (NULL entries are
 * skipped); each must be a STRUCT.  Fails with -SLUICE_ENOMEM (no memory)
 * or -SLUICE_ETOOBIG (past b->max); b->p is the caller's to free either
 * way.
 */
int rls_meta_encode(struct rls_meta_buf *b, const char *domain, uint32_t hits_addend,
                    const struct rls_meta_desc *descs, size_t ndescs,
                    const struct rls_meta *const *passed, size_t npassed);

/* Appends varint v (protobuf base-128) to b. */
void rls_meta_put_varint(struct rls_meta_buf *b, uint64_t v);

#endif
