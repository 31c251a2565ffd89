/*
 * delta: the wire codec of global-limit replication (see replica.h for what
 * the fields mean and how they are merged).
 *
 * One codec serves both channels: a DELTA packet (gossip payload) carries
 * the origin's own changed slots; a STATE packet (one anti-entropy chunk)
 * carries every slot of some keys, each naming its node.  A slot whose node
 * name is empty belongs to the packet's origin (saves the name in deltas).
 *
 * Times travel relative to the packet's now_ns and are saturated to int64:
 * a round trip is exact while |now_ns - t| < 2^63.
 *
 * Encoding uses msgpack-c's packer into a caller-owned bounded buffer.
 * Decoding walks the bytes with a small bounded reader (no allocation): every
 * length and count is checked against what is left, every integer against
 * its range, and the whole packet is validated before the first callback, so
 * a malformed packet is rejected as a whole and changes nothing.
 */
#ifndef SLUICE_DELTA_H
#define SLUICE_DELTA_H

#include <stddef.h>
#include <stdint.h>

#define DELTA_VERSION   1
#define DELTA_NAME_MAX  64     /* = GOSSIP_NAME_MAX */
#define DELTA_KEY_MAX   65535u /* = TABLE_MAX_KEY */
#define DELTA_SLOTS_MAX 1024u  /* slots per entry a decoder accepts */
#define DELTA_HEADER    17u    /* bytes reserved for the packet header */

enum delta_type {
    DELTA_T_DELTA = 0, /* gossip payload: the origin's changed slots */
    DELTA_T_STATE = 1, /* anti-entropy chunk: all slots of some keys */
};

/* A limit as it travels: enough for a peer that never saw the key to build
 * its state (algo_params_init(kind, burst, count, period_ns, precision)). */
struct delta_entry {
    const char *key;
    size_t klen; /* 1..DELTA_KEY_MAX */
    uint8_t kind;
    uint8_t policy;
    int64_t burst, count, period_ns, precision;
    /* STATE chunks of gcra keys: the sender's TAT (its merged view), which a
     * receiver may take as a lower bound of the cluster's state. */
    int has_tat;
    int64_t tat_ns;
};

/* One node's slot of one key (replica.h, "Slots"). */
struct delta_slot {
    const char *node; /* not NUL-terminated; node_len 0 = the packet's origin */
    size_t node_len;  /* 0..DELTA_NAME_MAX */
    uint64_t epoch;
    int64_t count;         /* >= 0, units admitted by node in this epoch */
    int64_t at_ns;         /* origin clock at the last increase of count */
    int64_t vtat_ns;       /* origin's own-consumption horizon */
    int64_t stamp_ns;      /* origin clock when this record was made */
    uint64_t demand_milli; /* origin's demand estimate, units/s * 1000 */
};

/* Builder of one packet into buf[0..cap).  The writer borrows buf. */
struct delta_writer {
    uint8_t *buf;
    size_t cap, len;
    uint32_t nentries;
    uint8_t type;
    int64_t now_ns;
};

/* Starts a packet.  cap must be > DELTA_HEADER for anything to fit. */
void delta_writer_init(struct delta_writer *w, uint8_t *buf, size_t cap, enum delta_type type,
                       int64_t now_ns);

/*
 * Appends one entry with n slots.  -SLUICE_ETOOBIG if it does not fit (the
 * writer is unchanged, the caller flushes and retries in a new packet);
 * -SLUICE_EINVAL for a key or node name out of bounds or n > DELTA_SLOTS_MAX.
 */
int delta_writer_add(struct delta_writer *w, const struct delta_entry *e,
                     const struct delta_slot *slots, size_t n);

/* Writes the header; returns the packet's length (0 if cap was too small). */
size_t delta_writer_finish(struct delta_writer *w);

/* Called once per (entry, slot) pair; pointers are valid during the call. */
typedef void (*delta_slot_fn)(void *ud, const struct delta_entry *e, const struct delta_slot *s);

/*
 * Validates buf[0..len) completely, then calls fn for every slot in order.
 * Fills *type and *now_ns (the origin's clock when it sent) if non-NULL.
 * Fails with -SLUICE_EPROTO (malformed, truncated, trailing bytes, out of
 * range) or -SLUICE_EINVAL (unknown version), before any callback.
 */
int delta_decode(const uint8_t *buf, size_t len, enum delta_type *type, int64_t *now_ns,
                 delta_slot_fn fn, void *ud);

#endif
