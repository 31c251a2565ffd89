/*
 * A deterministic network simulator for libgossip nodes.
 *
 * Many nodes run in one process on a simulated clock: an event queue (binary
 * heap ordered by time, ties by insertion) holds packet deliveries and node
 * timers, and every random choice, the nodes' included, comes from the seed.
 * The same seed gives the same run, so a failing test replays exactly.
 *
 * The network: per-link drop probability, delay (fixed + uniform jitter, which
 * reorders), duplication; partitions (nodes in different groups cannot talk);
 * one-way blocks; slow nodes (their packet processing runs late while their
 * timers fire on time, to exercise Lifeguard); kill and restart (a new node object with the same
 * name and address, state wiped, higher incarnation).  Node i listens at
 * 10.x.y.z:7946 where x.y.z is i in base 256.
 */
#ifndef GOSSIP_SIM_H
#define GOSSIP_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gossip_sim; /* opaque */

struct gossip_sim_link {
    double drop;       /* probability a packet is lost, 0..1 */
    double duplicate;  /* probability it is delivered twice */
    int64_t delay_ns;  /* fixed one-way delay */
    int64_t jitter_ns; /* plus uniform 0..jitter */
};

/* Creates an empty simulation; link may be NULL (no loss, 1 ms, 0.5 ms jitter).
 * -GOSSIP_EINVAL / -GOSSIP_ENOMEM.  The caller owns *out. */
int gossip_sim_create(struct gossip_sim **out, uint64_t seed, const struct gossip_sim_link *link);
/* Destroys every node and pending event.  NULL is a no-op. */
void gossip_sim_destroy(struct gossip_sim *s);

/* Adds and starts a node from cfg (copied; cfg->advertise is overwritten
 * with the node's simulated address; the keyring stays the caller's).
 * Returns its index (>= 0) or a negative error. */
int gossip_sim_add(struct gossip_sim *s, const struct gossip_config *cfg);
size_t gossip_sim_count(const struct gossip_sim *s);
/* The live node object, NULL while killed.  Owned by the simulator. */
struct gossip_node *gossip_sim_node(struct gossip_sim *s, int i);
const struct gossip_addr *gossip_sim_addr(const struct gossip_sim *s, int i);
/* Node i joins through node seed's address. */
int gossip_sim_join(struct gossip_sim *s, int i, int seed);

int64_t gossip_sim_now(const struct gossip_sim *s);
/* Processes every event up to now + ns; the clock ends at now + ns. */
void gossip_sim_run(struct gossip_sim *s, int64_t ns);

/* Destroys node i (a crash: no leave); packets to it vanish. */
int gossip_sim_kill(struct gossip_sim *s, int i);
/* Starts a fresh node object with i's config, name and address, and an
 * incarnation one above the last one i had; it joins through `seed`. */
int gossip_sim_restart(struct gossip_sim *s, int i, int seed);
/* As gossip_sim_restart, but the new life starts from incarnation 0, as a
 * process that remembers nothing (its clock went back, or a fresh host
 * took the name): it must learn its name's incarnation from the cluster. */
int gossip_sim_restart_fresh(struct gossip_sim *s, int i, int seed);

/* Default link for every pair without an override. */
void gossip_sim_set_default_link(struct gossip_sim *s, const struct gossip_sim_link *link);
/* Directional override for packets from -> to. */
int gossip_sim_set_link(struct gossip_sim *s, int from, int to, const struct gossip_sim_link *link);
/* Partition groups: nodes with different groups cannot exchange packets.
 * All nodes start in group 0. */
void gossip_sim_set_group(struct gossip_sim *s, int i, int group);
/* Blocks (1) or unblocks (0) packets from -> to only. */
int gossip_sim_block(struct gossip_sim *s, int from, int to, int blocked);
/* Node i processes each received packet lag_ns late while its timers keep
 * firing on time, like a node starved of CPU whose socket queue backs up
 * (0 = normal). */
void gossip_sim_set_slow(struct gossip_sim *s, int i, int64_t lag_ns);
/* Node i stops for ns from now, as a process under SIGSTOP: its timer does
 * not fire and the packets sent to it wait; at the thaw its timer fires
 * late and the waiting packets are handled in the order they arrived. */
void gossip_sim_freeze(struct gossip_sim *s, int i, int64_t ns);

/* Sees every packet accepted by the network (before loss), e.g. to record
 * and replay it later.  NULL removes the tap. */
void gossip_sim_set_tap(struct gossip_sim *s,
                        void (*tap)(void *ud, int from, int to, const uint8_t *pkt, size_t len),
                        void *ud);
/* Delivers raw bytes to node `to` as if from node `from`'s address, now. */
int gossip_sim_inject(struct gossip_sim *s, int from, int to, const uint8_t *pkt, size_t len);

/* Bytes sent and received by node i since it was added (all its lives). */
void gossip_sim_bytes(const struct gossip_sim *s, int i, uint64_t *sent, uint64_t *received);
/* Count of events processed (a cost measure). */
uint64_t gossip_sim_events(const struct gossip_sim *s);

#ifdef __cplusplus
}
#endif
#endif
