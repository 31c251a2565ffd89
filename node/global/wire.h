/*
 * wire: the codec of global-limit messages (global/replica.h), sent as
 * libgossip direct messages (sealed and authenticated there).
 *
 * Two messages, each a batch of entries for many keys:
 *  - REPORT, from a node to the owner of each key in it: the limit, this
 *    node's demand, what it admitted, its frozen share and flags.
 *  - LEASE, from an owner to one node: the node's share of each key's
 *    limit, and whether its bucket may start full (the key is cold).
 * Nothing on the wire is an absolute time: a host's clock, however wrong,
 * changes only what that host admits.  Every value is a count, a rate or a
 * fraction; report periods are durations.
 *
 * A message is one msgpack array with a fixed-size header (the entry count
 * is an array32 patched when the batch is finished), so a writer fills
 * entries and always knows exactly how much room is left:
 *
 *   batch  = fixarray(4) [ version:uint  type:uint  life:uint64  entries ]
 *            +------+------+------+-------------+-------------------------+
 *            | 0x94 | 0x01 | type | 0xcf + 8 B  | 0xdd + 4 B count, ...   |
 *            +------+------+------+-------------+-------------------------+
 *   life   = REPORT: the sender's life id; LEASE: the life id of the
 *            receiver the owner answers (a lease for an older life of the
 *            same name is dropped by the receiver)
 *   report = fixarray(11) [ key:bin kind:uint policy:uint burst:int
 *            count:int period_ns:int precision:int demand_milli:uint
 *            admitted:uint frozen_share:uint period_ms:uint flags:uint ]
 *   lease  = fixarray(3)  [ key:bin share:uint flags:uint ]
 *
 * Shares are fixed point, WIRE_ONE (2^32) = the whole limit.  Integers use
 * msgpack's smallest encoding: a report for "user:42" is about 30 bytes, a
 * lease about 16.  Unknown versions, types or extra bytes are errors.
 */
#ifndef SLUICE_WIRE_H
#define SLUICE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION 1
#define WIRE_HEADER  17
#define WIRE_KEY_MAX 4096
#define WIRE_ONE     ((uint64_t)1 << 32)

enum wire_type { WIRE_REPORT = 1, WIRE_LEASE = 2 };

/* Report flags. */
#define WIRE_R_YOUNG 0x01u /* the sender started recently: it has no past */
#define WIRE_R_IDLE  0x02u /* the sender's bucket for the key is full */
#define WIRE_R_GONE  0x04u /* the sender dropped the key */
/* Lease flags. */
#define WIRE_L_COLD    0x01u /* the key is cold cluster-wide: start full */
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
};

struct wire_lease {
    const char *key;
    size_t klen;
    uint64_t share; /* WIRE_ONE-based, <= WIRE_ONE */
    uint64_t flags;
};

struct wire_writer {
    uint8_t *buf;
    size_t cap, len;
    uint32_t n;
    uint8_t type;
    uint64_t life;
};

/* Starts a batch in buf (cap bytes, at least WIRE_HEADER). */
void wire_writer_init(struct wire_writer *w, uint8_t *buf, size_t cap, enum wire_type type,
                      uint64_t life);
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
