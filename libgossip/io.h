/*
 * The seam between libgossip's protocol core and an adapter (libuv, simulator).
 *
 * Why sans-I/O: the core never reads a clock nor touches a socket, so the same
 * code runs in the daemon and, deterministically, in a simulator that packs a
 * hundred nodes into one process with a simulated clock.
 *
 * An adapter:
 *   1. creates the node with gossip_node_create(&cfg, &io, &node), io.ctx
 *      pointing at the adapter's own state;
 *   2. hands every received datagram to gossip_node_receive;
 *   3. calls gossip_node_tick when the clock reaches gossip_node_next_deadline
 *      (one timer suffices), and re-reads the deadline after every call into
 *      the node, and whenever io.wakeup is called;
 *   4. sends what io.send is given.  Datagrams are already sealed.
 *
 * Time is an int64 count of nanoseconds on any monotonic clock; it must not go
 * backwards between calls on one node.
 */
#ifndef GOSSIP_IO_H
#define GOSSIP_IO_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip.h"

struct gossip_io {
    void *ctx;
    /* Fire and forget: a nonzero return is counted (stats.send_errors), never
     * retried.  buf is valid only during the call. */
    int (*send)(void *ctx, const struct gossip_addr *to, const uint8_t *buf, size_t len);
    /* Fills buf with random bytes (need not be cryptographic: it picks peers
     * and jitters; nonces come from the keyring). */
    void (*random)(void *ctx, void *buf, size_t len);
    /* Optional: the application made work due (join, leave, broadcast) outside
     * receive/tick; the adapter should call gossip_node_tick soon (re-arm its
     * timer with gossip_node_next_deadline). */
    void (*wakeup)(void *ctx);
};

/*
 * Creates a node.  cfg and io are copied (cfg->name too); cfg->keyring and
 * io->ctx stay owned by the caller and must outlive the node.  now_ns is the
 * adapter clock at creation.  Fails with -GOSSIP_EINVAL (no name, name longer
 * than GOSSIP_NAME_MAX, no send/random, mtu too small) or -GOSSIP_ENOMEM.
 * The caller owns *out (gossip_node_destroy).
 */
int gossip_node_create(const struct gossip_config *cfg, const struct gossip_io *io, int64_t now_ns,
                       struct gossip_node **out);

/*
 * Processes one datagram from `from` (untrusted).  Returns 0 when accepted or
 * -(GOSSIP_E...) when dropped; drops are also counted by reason in the stats.
 * May call io.send and the application callbacks.
 */
int gossip_node_receive(struct gossip_node *node, const struct gossip_addr *from,
                        const uint8_t *pkt, size_t len, int64_t now_ns);

/* Runs every timer due at now_ns (probes, gossip, suspicion, push-pull). */
void gossip_node_tick(struct gossip_node *node, int64_t now_ns);

/* Absolute time (ns) at which gossip_node_tick must next be called. */
int64_t gossip_node_next_deadline(const struct gossip_node *node);

#endif
