/*
 * readiness: whether this node's view of the cluster can be trusted, with
 * the reason when it cannot (/ready, INFO cluster_state).
 *
 * /health says the process runs (liveness).  Readiness says more: a
 * clustered node is not ready when it is alone (no seed ever answered, or
 * no other member is alive), partitioned from a majority of the members it
 * has seen in the last ten minutes, refused by its peers (their packets
 * fail authentication here: another cluster key or label), or not yet
 * synced (the replica has not recovered the cluster's state for global
 * keys).  A node started with --join but no --gossip-bind is not ready
 * either: it runs alone although seeds were named.  A node with neither is
 * ready (it is meant to run alone).
 *
 * The same checks log one warning per kind, at most once a minute, naming
 * the fix (seeds that never answer, --join without --gossip-bind, packets
 * sent and never answered: a wrong cluster key or label on this side).
 *
 * The object borrows the cluster (may be NULL); the daemon owns the object
 * and calls readiness_tick from its maintenance timer.
 */
#ifndef SLUICE_READINESS_H
#define SLUICE_READINESS_H

#include <stdint.h>

struct cluster;
struct readiness;

struct readiness_config {
    struct cluster *cluster; /* borrowed; NULL: the node runs alone */
    const char *join;        /* --join as given (copied); NULL or "": no seeds */
};

/* Fails with -SLUICE_ENOMEM. */
int readiness_create(const struct readiness_config *cfg, int64_t now_ns, struct readiness **out);
void readiness_destroy(struct readiness *r);

/* Re-evaluates (at most every 250 ms) and logs the warnings that are due. */
void readiness_tick(struct readiness *r, int64_t now_ns);

/* The daemon is shutting down and drains (SIGTERM with a drain period):
 * not ready from now on, whatever the cluster says, with the reason
 * "draining: ...", so probes and health checks send traffic elsewhere
 * while the daemon still answers.  NULL ok; never undone. */
void readiness_set_draining(struct readiness *r);

/* 1 when ready.  NULL is ready (no readiness tracking). */
int readiness_ready(const struct readiness *r);

/* "ok" or "not_ready" (INFO cluster_state). */
const char *readiness_state(const struct readiness *r);

/* Why not ready, as "<code>: <detail>" with code one of alone,
 * partitioned, refused, not_synced, draining; "none" when ready.  Owned by r, valid
 * until the next readiness_tick. */
const char *readiness_reason(const struct readiness *r);

#endif
