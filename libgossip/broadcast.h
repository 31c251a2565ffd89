/*
 * broadcast_*: a bounded retransmit queue of encoded messages (after memberlist's
 * TransmitLimitedQueue).
 *
 * Each item is sent at most `limit` times (the caller passes
 * RetransmitMult * ceil(log10(N + 1))), least transmitted first and, among
 * equals, newest first, so fresh news spreads before old news is repeated.
 * A message about a member replaces any queued message about the same member
 * (key = name hash), since only the newest state matters.  Drop policy when
 * full: the item transmitted most, oldest among those, is dropped and counted.
 * The array is kept sorted by (transmits asc, age asc) with insertion sort:
 * after a fill only the few taken items move.
 */
#ifndef GOSSIP_BROADCAST_H
#define GOSSIP_BROADCAST_H

#include <stddef.h>
#include <stdint.h>

struct broadcast_item {
    uint64_t key; /* 0 = never replaced */
    uint64_t id;  /* insertion order */
    uint32_t transmits;
    uint64_t last_packet; /* the packet it was last put in */
    size_t len;
    uint8_t data[];
};

struct broadcast_queue {
    struct broadcast_item **v;
    size_t n, cap, max;
    uint64_t next_id;
    uint64_t dropped;
};

void broadcast_init(struct broadcast_queue *q, size_t max);
void broadcast_free(struct broadcast_queue *q);
/* Queues a copy of data.  Returns 0, or -GOSSIP_ENOMEM.  When the queue was
 * full an item was dropped first (q->dropped counts it). */
int broadcast_push(struct broadcast_queue *q, uint64_t key, const uint8_t *data, size_t len);
/*
 * Appends whole items to buf[*len..cap) while they fit, incrementing their
 * transmit counts and retiring those that reach limit.  Adds the number of
 * items appended to *nmsgs.  packet_id (nonzero) names the packet being
 * filled: an item already put in that packet by an earlier call is skipped,
 * so a packet can be filled in several passes.
 */
void broadcast_fill(struct broadcast_queue *q, uint32_t limit, uint64_t packet_id, uint8_t *buf,
                    size_t cap, size_t *len, size_t *nmsgs);
#endif
