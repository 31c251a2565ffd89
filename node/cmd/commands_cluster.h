/*
 * commands_cluster: the command layer's cluster commands (decisions on
 * global keys go through global/decide.h).  commands.c keeps the command table and calls in
 * here; everything takes the daemon's struct cluster, which is NULL on a
 * node running alone (the functions then answer as such a node should).
 *
 *   SL.MEMBERS     one entry per member known, self included:
 *                  [name, address, state, last heard ms ago (-1: never,
 *                  0 for self), incarnation, is-self 0/1]
 *   SL.KEY key     this node's view of a global key, as field/value pairs:
 *                  scope, algorithm, burst, count, period_ms, policy,
 *                  remaining, debt_ms, reset_after_ms, share, synced, and
 *                  "slots": one [node, epoch, count, demand, share,
 *                  reachable, phantom, age_ms] per node that admitted
 *                  units; nil when the node holds no global state for key
 *   INFO cluster   the "# Cluster" section (readiness: cluster_state and
 *                  cluster_state_reason; membership, gossip traffic and
 *                  drops, synced, and the replica's counters)
 *
 * Every function appends exactly one reply (or, for the INFO section, text)
 * to the caller's buffer and returns SERVER_CONTINUE unless said otherwise.
 */
#ifndef SLUICE_COMMANDS_CLUSTER_H
#define SLUICE_COMMANDS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "limiter.h"
#include "resp.h"

int commands_cluster_members(struct cluster *cl, size_t argc, const char **argv,
                             const size_t *argvlen, struct resp_buf *out);
int commands_cluster_key(struct cluster *cl, size_t argc, const char **argv, const size_t *argvlen,
                         struct resp_buf *out);

/* Appends the INFO "# Cluster" section (with its trailing blank line) to a
 * text buffer: cluster_enabled, then cluster_state (ok or not_ready) and
 * cluster_state_reason from ready (NULL: ok, none), then, when cl is not
 * NULL, membership, gossip and replica figures. */
struct readiness;
void commands_cluster_info(struct cluster *cl, const struct readiness *ready,
                           struct resp_buf *text);

#endif
