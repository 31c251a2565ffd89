/*
 * libgossip's libuv adapter: runs one gossip node on a libuv loop.
 *
 * The protocol core does no I/O (libgossip/io.h); this adapter gives it one
 * UDP socket, one timer armed at the core's next deadline, uv_hrtime() as its
 * clock, libsodium's random bytes, and name resolution for seed lists such as
 * a Kubernetes headless Service ("sluice.ns.svc:7946"), re-resolved
 * periodically so pods that appear later are joined.
 *
 * Typical use:
 *
 *   struct gossip_config cfg;
 *   gossip_config_default(&cfg);
 *   cfg.name = "node1";
 *   cfg.keyring = kr;                  // borrowed, must outlive the adapter
 *   struct gossip_addr bind;
 *   gossip_addr_parse("127.0.0.1:7946", &bind);
 *   struct gossip_uv *g;
 *   if (gossip_uv_start(loop, &cfg, &bind, &g) == 0) {
 *       gossip_uv_join_names(g, "seed1:7946,seed2:7946", 30000);
 *       ... uv_run(loop) ...; gossip_node_broadcast(gossip_uv_node(g), ...);
 *       gossip_uv_stop(g, on_closed, ud);   // then let the loop run
 *   }
 *
 * Everything runs on the loop's thread; no function here is thread-safe.
 * Functions return 0 or a negative enum gossip_err.
 */
#ifndef GOSSIP_UV_H
#define GOSSIP_UV_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "gossip/gossip.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gossip_uv; /* opaque */

/*
 * Binds a UDP socket to *bind (IPv4, or IPv6 only: a "::" socket does not take
 * IPv4 traffic), creates the node with cfg and starts receiving and ticking.
 * bind's port may be 0 (the kernel picks one; see gossip_uv_local_addr).
 * When cfg->advertise has no family, the bound address is advertised; binding
 * a wildcard address (0.0.0.0 or ::) then fails with -GOSSIP_EINVAL, since
 * peers could not reach "0.0.0.0".  cfg is copied (the node copies its name);
 * cfg->keyring stays the caller's.
 * Fails with -GOSSIP_EINVAL, -GOSSIP_EIO (socket or bind failed, e.g. port in
 * use), -GOSSIP_ENOMEM, or the node's creation error; nothing is left open
 * (except if libuv refuses the bound socket, a should-not-happen case whose
 * handles finish closing on the loop's next run).
 * On success the caller owns *out and must end it with gossip_uv_stop.
 */
int gossip_uv_start(uv_loop_t *loop, const struct gossip_config *cfg,
                    const struct gossip_addr *bind, struct gossip_uv **out);

/*
 * The node driven by the adapter, for the application API in gossip/gossip.h
 * (join, leave, broadcast, members, stats).  Borrowed: valid until
 * gossip_uv_stop.  Calls that make work due wake the adapter by themselves.
 */
struct gossip_node *gossip_uv_node(struct gossip_uv *h);

/* The address the socket is bound to (useful after binding port 0). */
int gossip_uv_local_addr(const struct gossip_uv *h, struct gossip_addr *out);

/*
 * Resolves a comma-separated list of "host:port" or "[v6]:port" entries (at
 * most 32, names or numbers) with uv_getaddrinfo now and then every
 * interval_ms (0: once), and joins every resolved address of the socket's
 * family that is not already a live member's address (this node's own
 * included).  Replaces any previous list.  Resolution failures are counted
 * (stats.dns_failures) and retried at the next interval, never fatal.
 * -GOSSIP_EINVAL for an empty or malformed list (a missing port, an entry
 * longer than 255 bytes), -GOSSIP_ENOMEM.
 */
int gossip_uv_join_names(struct gossip_uv *h, const char *list, int64_t interval_ms);

/*
 * Stops: destroys the node at once (call gossip_node_leave and let the loop
 * run a gossip interval or two before, for a graceful exit), closes the socket
 * and timers, cancels lookups.  Handles close asynchronously: the adapter's
 * memory is freed, and on_closed(ud) (optional) called, from the loop once
 * the last one is closed; keep running the loop until then.  May be called
 * from a gossip callback (on_event, on_payload...): the stop then completes
 * as soon as the core returns.  NULL is a no-op; a second call is ignored.
 */
void gossip_uv_stop(struct gossip_uv *h, void (*on_closed)(void *ud), void *ud);

/* Adapter-level counters (the node's own are in gossip_node_stats). */
struct gossip_uv_stats {
    uint64_t recv_errors;    /* recv callback reported an error */
    uint64_t recv_truncated; /* datagram larger than the receive buffer */
    uint64_t send_queued;    /* try_send would block: copied and queued */
    uint64_t send_errors;    /* failed or dropped sends (queue full, no route) */
    uint64_t dns_lookups, dns_failures, dns_joined;
};

/* Copies the counters.  Never fails. */
void gossip_uv_stats(const struct gossip_uv *h, struct gossip_uv_stats *out);

#ifdef __cplusplus
}
#endif
#endif
