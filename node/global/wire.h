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
 *    falls until the next lease).
 * Nothing on the wire is an absolute time: a host's clock, however wrong,
 * changes only what that host admits.  Every value is a count, a rate or a
 * fraction; report periods are durations.
 *
 * A message is one msgpack array with a fixed-size header (the entry count
 * is an array32 patched when the batch is finished), so a writer fills
 * entries and always knows exactly how much room is left:
 *
 *   batch  = fixarray(5) [ version:uint type:uint life:uint64 from:uint64 entries ]
 *            +------+------+------+------------+------------+-------------------+
 *            | 0x95 | 0x02 | type | 0xcf + 8 B | 0xcf + 8 B | 0xdd + 4 B count, |
 *            +------+------+------+------------+------------+-------------------+
 *   life   = REPORT: the sender's life id; LEASE: the life id of the
 *            receiver the owner answers (a lease for an older life of the
 *            same name is dropped by the receiver)
 *   from   = the sender's life id (a node remembers which life of its
 *            owner leased it, see leased_by)
 *   report = fixarray(15) [ key:bin kind:uint policy:uint burst:int
 *            count:int period_ns:int precision:int demand_milli:uint
 *            admitted:uint frozen_share:uint period_ms:uint flags:uint
 *            tokens_milli:uint granted_milli:uint leased_by:uint ]
 *   lease  = fixarray(8)  [ key:bin share:uint flags:uint grant_milli:uint
 *            free:uint level_milli:int demand_milli:uint seen:uint ]
 *
 * Shares are fixed point, WIRE_ONE (2^32) = the whole limit; units are in
 * thousandths.  Integers use msgpack's smallest encoding: a report for
 * "user:42" is about 40 bytes, a lease about 20.  Unknown versions, types
 * or extra bytes are errors (versions 1 and 2 are not spoken: a cluster is
 * upgraded all at once).
 */
#ifndef SLUICE_WIRE_H
#define SLUICE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION  3
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

struct wire_report {
    const char *key;
    size_t klen;
    uint8_t kind, policy;
    int64_t burst, count, period_ns, precision;
    uint64_t demand_milli; /* requested units per second x 1000 */
    uint64_t admitted;     /* units this life admitted for the key */
    uint64_t frozen_share; /* WIRE_ONE-based; 0 = none yet */
    uint64_t period_ms;    /* when the owner should expect the next report */
    uint64_t flags;
    uint64_t tokens_milli;  /* units left in the sender's bucket x 1000 */
    uint64_t granted_milli; /* grants received for the key, running total x 1000,
                               mod 2^32 */
    uint64_t leased_by;     /* wire_life_tag of the owner life whose settled lease the
                               sender last took for the key; 0: none yet */
};

struct wire_lease {
    const char *key;
    size_t klen;
    uint64_t share; /* WIRE_ONE-based, <= WIRE_ONE */
    uint64_t flags;
    uint64_t grant_milli;  /* units granted to this life for the key, running total x 1000,
                              mod 2^32 */
    uint64_t free;         /* units the receiver may admit beyond its bucket until
                              its next lease (availability first: see replica.h) */
    int64_t level_milli;   /* the cluster's bucket as the owner knows it: units
                              left x 1000, negative in debt */
    uint64_t demand_milli; /* the demand of the key's other nodes, units/s x 1000 */
    uint64_t seen;         /* the receiver's admitted count in the report the level
                              includes, mod 2^32 */
    uint64_t owner_life;   /* decoding: the batch's from (the owner's life); not written */
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
 * into the buffer, valid during the call). */
struct wire_handler {
    void *ud;
    void (*report)(void *ud, uint64_t life, const struct wire_report *e);
    void (*lease)(void *ud, uint64_t life, const struct wire_lease *e);
};

/*
 * Decodes a batch.  The whole batch is checked before any entry is handed
 * over, so a malformed batch delivers nothing.  Returns the number of
 * entries, or -SLUICE_EPROTO (malformed, trailing bytes, bad values),
 * -SLUICE_EINVAL (unknown version or type).  h may be NULL (validate only).
 */
int wire_decode(const uint8_t *buf, size_t len, const struct wire_handler *h);

#endif
