/*
 * rls config: envoyproxy/ratelimit's YAML configuration, read as is.
 *
 * A config is every *.yaml / *.yml file of one directory, each holding one
 * domain and its descriptor tree.  Loading is all or nothing: on error
 * nothing is returned and the message names the file and line.  A loaded
 * config is immutable; the service swaps whole configs on reload.
 *
 * Matching follows envoyproxy/ratelimit (src/config/config_impl.go): each
 * request entry looks for a child "key_value", then a wildcard child whose
 * value contains '*', then the default child "key" (no value); a limit
 * applies only when found at the request's last entry; the walk stops at an
 * entry with no match or with no children.
 */
#ifndef SLUICE_RLS_CONFIG_H
#define SLUICE_RLS_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "meta.h"
#include "rls.h"

struct rls_config;

/* A rate_limit block of the file; owned by its config. */
struct rls_limit {
    uint32_t requests_per_unit;
    enum rls_unit unit; /* RLS_UNIT_UNKNOWN when unlimited */
    int unlimited;
    int shadow_mode;     /* over-limit answers become OK (counted as usual) */
    int quota_mode;      /* over its limit, refuses only when every quota-mode
                          * descriptor of the request is over (rls service) */
    int detailed_metric; /* statistics per request descriptor (rls service) */
    const char *name;    /* "" when unnamed */
    const char *const *replaces;
    size_t nreplaces;
    const char *full_key; /* "domain.key_value.key", for messages */
    /* The descriptor's `metadata` (a STRUCT), or NULL when it has none:
     * what an answer's dynamic_metadata carries when this limit passes. */
    const struct rls_meta *metadata;
};

/* One descriptor entry of a request (borrowed, not NUL-terminated). */
struct rls_entry {
    const char *key;
    size_t klen;
    const char *value;
    size_t vlen;
};

/* Bounds of one file, so that no config can exhaust memory or stack. */
#define RLS_CONFIG_MAX_FILE_BYTES (4u << 20)
#define RLS_CONFIG_MAX_DEPTH      32
#define RLS_CONFIG_MAX_FILES      1024

/*
 * Reads every *.yaml and *.yml file in dir (sorted by name; hidden files and
 * other names ignored) into a new config.  Fails with -SLUICE_ECONFIG (err
 * says "FILE:LINE: why"), -SLUICE_EIO (the directory or a file cannot be
 * read) or -SLUICE_ENOMEM; *out is then untouched.  An empty directory is a
 * valid config with no domains.  With MERGE_DOMAIN_CONFIG true in the
 * environment (envoyproxy/ratelimit's variable: 1, t, T, true, TRUE, True)
 * a file whose domain is already loaded adds its descriptors to it instead
 * of being refused as a duplicate domain (a descriptor both define is
 * still refused: "duplicate descriptor composite key").
 */
int rls_config_load_dir(const char *dir, struct rls_config **out, char *err, size_t errlen);

/* Whether the environment variable name holds a true value as
 * envoyproxy/ratelimit's settings read it (Go's strconv.ParseBool: 1, t,
 * T, true, TRUE, True); unset or anything else is false. */
int rls_config_env_true(const char *name);

/* An empty config, to which files are added with rls_config_add_buffer.
 * -SLUICE_ENOMEM. */
int rls_config_create(struct rls_config **out);

/*
 * Adds one file's text (name is used in messages).  Fails with
 * -SLUICE_ECONFIG (err: "name:LINE: why") or -SLUICE_ENOMEM, and then cfg
 * may hold part of the file: discard it.
 */
int rls_config_add_buffer(struct rls_config *cfg, const char *name, const char *buf, size_t len,
                          char *err, size_t errlen);

void rls_config_free(struct rls_config *cfg);

/* Number of domains loaded. */
size_t rls_config_domains(const struct rls_config *cfg);

/* 1 when cfg holds domain (dlen bytes), else 0. */
int rls_config_has_domain(const struct rls_config *cfg, const char *domain, size_t dlen);

/* The limit for one descriptor of domain, or NULL when none applies (an
 * unknown domain included).  The pointer lives as long as cfg.  Never fails.
 * shared, when not NULL, has room for n pointers: shared[i] is set to the
 * wildcard pattern entry i matched under share_threshold (every value it
 * matches shares one counter, as in envoyproxy/ratelimit), else NULL; the
 * patterns live as long as cfg. */
const struct rls_limit *rls_config_match(const struct rls_config *cfg, const char *domain,
                                         size_t dlen, const struct rls_entry *entries, size_t n,
                                         const char **shared);

#endif
