/*
 * wire: the codec of global-limit messages (global/replica.h), sent as
 * libgossip direct messages (sealed and authenticated there).
 *
 * Two messages, each a batch of entries for many keys:
 *  - REPORT, from a node to the owner of each key in it: the limit, this
 *    node's demand, what it admitted, its frozen share, the units left in
 *    its bucket, the grants it has received, and flags.
 *  - LEASE, from an owner to one node: the node's share of each key's
 *    limit, and the units the owner has granted it from the cluster's
 *    bucket so far (a running total, so a lost lease loses no grant), the
 *    units it may admit on the cluster's credit before its next lease
 *    (free), the cluster's level as the owner knows it and the demand of
 *    the key's other nodes (so the receiver can tell how fast the level
 *    falls until the next lease), and for a thin key the odds that a
 *    request on free units passes.  A lease entry flagged WIRE_L_NOTICE
 *    is a notice to a member that does not report the key: only its odds,
 *    free units and level count (replica_owner.c, "Thin keys").
 * Nothing on the wire is an absolute time: a host's clock, however wrong,
 * changes only what that host admits.  Every value is a count, a rate or a
 * fraction; report periods are durations.
 *
 * A message is one msgpack array with a fixed-size header (the entry count
 * is an array32 patched when the batch is finished), so a writer fills
 * entries and always knows exactly how much room is left.  Each entry is a
 * msgpack map whose keys are small integers (tarantool's SWIM does the
 * same), packed with msgpack-c, so any msgpack reader reads a message:
 *
 *   batch  = fixarray(5) [ version:uint type:uint life:uint64 from:uint64 entries ]
 *            +------+------+------+------------+------------+-------------------+
 *            | 0x95 | 0x04 | type | 0xcf + 8 B | 0xcf + 8 B | 0xdd + 4 B count, |
 *            +------+------+------+------------+------------+-------------------+
 *   life   = REPORT: the sender's life id; LEASE: the life id of the
 *            receiver the owner answers (a lease for an older life of the
 *            same name is dropped by the receiver)
 *   from   = the sender's life id (a node remembers which life of its
 *            owner leased it, see leased_by)
 *   entry  = map { 1: key:bin, id: value, ... }
 *            +------+------+---------------+----+-------+----+-------+-----
 *            | 0x8N | 0x01 | 0xc4 len key  | id | value | id | value | ...
 *            +------+------+---------------+----+-------+----+-------+-----
 *   report = the fields of WIRE_REPORT_FIELDS below, by id
 *   lease  = the fields of WIRE_LEASE_FIELDS below, by id
 *
 * Each field is declared once, in the lists below: its id on the wire, its
 * member in the struct, its C type, whether it is unsigned or signed and
 * the largest value a reader accepts.  A field whose value is 0 is left out
 * (a reader takes a missing field as 0); a field id a reader does not know
 * is skipped.  So a field is added with a new id and no version change: an
 * older node ignores it, a newer one reads 0 from an older node.  The
 * version changes only when a field's meaning does; a node drops (and
 * counts) a message of another version (README, "Rolling upgrades").
 *
 * Shares are fixed point, WIRE_ONE (2^32) = the whole limit; units are in
 * thousandths.  Integers use msgpack's smallest encoding: a report for
 * "user:42" is about 50 bytes (about 38 once its owner knows the limit:
 * the limit's fields are left out, replica_node.c), a lease about 30.  Bad values, a map key
 * that is not an unsigned integer, a field twice or trailing bytes are
 * errors.
 */
#ifndef SLUICE_WIRE_H
#define SLUICE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION  4
#define WIRE_HEADER   26
#define WIRE_KEY_MAX  4096
#define WIRE_ONE      ((uint64_t)1 << 32)
#define WIRE_FREE_MAX 65535 /* a lease's free units */

enum wire_type { WIRE_REPORT = 1, WIRE_LEASE = 2, WIRE_SLOTS = 3 /* global/slots.h */ };

/* Report flags. */
#define WIRE_R_YOUNG 0x01u /* the sender started recently: it has no past */
#define WIRE_R_IDLE  0x02u /* the sender's bucket for the key is full */
#define WIRE_R_GONE  0x04u /* the sender dropped the key */
#define WIRE_R_NEED  0x08u /* the sender is out of units and free units: lease now */
/* Lease flags (0x01 was version 1's "cold"; grants replace it). */
#define WIRE_L_SETTLED 0x02u /* the owner's view is complete and settled */
#define WIRE_L_NOTICE                                                                              \
    0x04u /* a notice to a node that does not report the key                                       \
             (replica_owner.c, "Thin keys"): not a lease */
#define WIRE_L_THIN                                                                                \
    0x08u /* a thin key: the cluster's bucket keeps the whole                                      \
             limit, the receiver gives back what it holds */

/*
 * The fields after the key (id 1, a bin of 1..WIRE_KEY_MAX bytes):
 * X(id, member, C type, WIRE_U or WIRE_I, largest value accepted).  Ids
 * are never reused; a new field takes the next one.
 */
#define WIRE_U 0 /* an unsigned integer, at most the bound */
#define WIRE_I 1 /* a signed integer (an int64) */

#define WIRE_REPORT_FIELDS(X)                                                                      \
    X(2, kind, uint8_t, WIRE_U, 255)                                                               \
    X(3, policy, uint8_t, WIRE_U, 255)                                                             \
    X(4, burst, int64_t, WIRE_I, 0)                                                                \
    X(5, count, int64_t, WIRE_I, 0)                                                                \
    X(6, period_ns, int64_t, WIRE_I, 0)                                                            \
    X(7, precision, int64_t, WIRE_I, 0)                                                            \
    /* requested units per second x 1000 */                                                        \
    X(8, demand_milli, uint64_t, WIRE_U, UINT64_MAX)                                               \
    /* units this life admitted for the key */                                                     \
    X(9, admitted, uint64_t, WIRE_U, UINT64_MAX)                                                   \
    /* WIRE_ONE-based; 0 = none yet */                                                             \
    X(10, frozen_share, uint64_t, WIRE_U, WIRE_ONE)                                                \
    /* when the owner should expect the next report */                                             \
    X(11, period_ms, uint64_t, WIRE_U, UINT32_MAX)                                                 \
    X(12, flags, uint64_t, WIRE_U, 255)                                                            \
    /* units left in the sender's bucket x 1000 */                                                 \
    X(13, tokens_milli, uint64_t, WIRE_U, UINT64_MAX)                                              \
    /* grants received for the key, running total x 1000, mod 2^32 */                              \
    X(14, granted_milli, uint64_t, WIRE_U, UINT32_MAX)                                             \
    /* wire_life_tag of the owner life whose settled lease the sender last                         \
     * took for the key; 0: none yet */                                                            \
    X(15, leased_by, uint64_t, WIRE_U, UINT32_MAX)                                                 \
    /* units this life admitted on credit (first touches and free units),                          \
     * running total mod 2^32 */                                                                   \
    X(16, credit, uint64_t, WIRE_U, UINT32_MAX)                                                    \
    /* units this life admitted on credit since its previous report, mod                           \
     * 2^32, sent after a silence: what an owner that dropped the sender's                         \
     * record meanwhile has not counted (what it spent of the units it                             \
     * held, the owner counts by its tokens) */                                                    \
    X(17, unreported, uint64_t, WIRE_U, UINT32_MAX)                                                \
    /* the cluster's level as the sender's last settled lease told it,                             \
     * projected to now (units left x 1000, plus 1; 0: not known) */                               \
    X(18, known_milli, uint64_t, WIRE_U, UINT64_MAX)                                               \
    /* the key's demand over the cluster as the sender's last settled                              \
     * lease told it, its own included (units/s x 1000, plus 1; 0: not                             \
     * known) */                                                                                   \
    X(19, known_demand_milli, uint64_t, WIRE_U, UINT64_MAX)

#define WIRE_LEASE_FIELDS(X)                                                                       \
    /* WIRE_ONE-based */                                                                           \
    X(2, share, uint64_t, WIRE_U, WIRE_ONE)                                                        \
    X(3, flags, uint64_t, WIRE_U, 255)                                                             \
    /* units granted to this life for the key, running total x 1000, mod 2^32 */                   \
    X(4, grant_milli, uint64_t, WIRE_U, UINT32_MAX)                                                \
    /* units the receiver may admit beyond its bucket until its next lease                         \
     * (availability first: see replica.h) */                                                      \
    X(5, free, uint64_t, WIRE_U, WIRE_FREE_MAX)                                                    \
    /* the cluster's bucket as the owner knows it: units left x 1000,                              \
     * negative in debt */                                                                         \
    X(6, level_milli, int64_t, WIRE_I, 0)                                                          \
    /* the demand of the key's other nodes, units/s x 1000 */                                      \
    X(7, demand_milli, uint64_t, WIRE_U, UINT64_MAX)                                               \
    /* the receiver's admitted count in the report the level includes,                             \
     * mod 2^32 */                                                                                 \
    X(8, seen, uint64_t, WIRE_U, UINT32_MAX)                                                       \
    /* the odds that a request on free units is refused anyway, in                                 \
     * 1/65535 (a thin key's chance, replica_owner.c); 0: never */                                 \
    X(9, refuse_q, uint64_t, WIRE_U, 65535)                                                        \
    /* the receiver's credit count in that report (wire report field 16),                          \
     * mod 2^32: what it admitted on the cluster's credit since, a grant                           \
     * does not cover (left out when 0, as from an older owner: the                                \
     * receiver then counts all its credit, at most all it admitted since) */                      \
    X(10, seen_credit, uint64_t, WIRE_U, UINT32_MAX)

#define WIRE_MEMBER_(id, member, type, sign, max) type member;

struct wire_report {
    const char *key;
    size_t klen;
    WIRE_REPORT_FIELDS(WIRE_MEMBER_)
};

struct wire_lease {
    const char *key;
    size_t klen;
    WIRE_LEASE_FIELDS(WIRE_MEMBER_)
    uint64_t owner_life; /* decoding: the batch's from (the owner's life); not written */
};

struct wire_writer {
    uint8_t *buf;
    size_t cap, len;
    uint32_t n;
    uint8_t type;
    uint64_t life, from;
};

/* Starts a batch in buf (cap bytes, at least WIRE_HEADER) from the sender's
 * life `from`. */
void wire_writer_init(struct wire_writer *w, uint8_t *buf, size_t cap, enum wire_type type,
                      uint64_t life, uint64_t from);

/* A life id in the 32 bits a report spends on leased_by; never 0. */
uint64_t wire_life_tag(uint64_t life);
/* Appends one entry.  -SLUICE_ETOOBIG when it does not fit (the writer is
 * unchanged: finish and start another batch), -SLUICE_EINVAL for a bad
 * entry (empty or long key, wrong batch type). */
int wire_add_report(struct wire_writer *w, const struct wire_report *e);
int wire_add_lease(struct wire_writer *w, const struct wire_lease *e);
/* Writes the header; returns the batch's length (0 if the buffer was too
 * small for a header). */
size_t wire_writer_finish(struct wire_writer *w);

/* What a decoder hands over: the type, the life, and each entry (pointers
 * into the buffer, valid during the call).  peek, if set, sees each entry's
 * key while the batch is being checked, before any report or lease call: a
 * chance to bring into the cache what the entries will touch (a receiver's
 * key lookups are cache misses at a million keys).  It must not act on the
 * entry: a batch found malformed after it is still dropped whole. */
struct wire_handler {
    void *ud;
    void (*report)(void *ud, uint64_t life, const struct wire_report *e);
    void (*lease)(void *ud, uint64_t life, const struct wire_lease *e);
    void (*peek)(void *ud, uint8_t type, const char *key, size_t klen);
};

/*
 * Decodes a batch.  The whole batch is checked (peek seeing each entry)
 * before any entry is handed over, so a malformed batch delivers nothing.
 * Returns the number of entries, or -SLUICE_EPROTO (malformed, trailing
 * bytes, bad values), -SLUICE_EINVAL (unknown version or type).  h may be
 * NULL (validate only).
 */
int wire_decode(const uint8_t *buf, size_t len, const struct wire_handler *h);

#endif
