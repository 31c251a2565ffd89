/*
 * commands_lease: concurrency limits over the socket: SL.LEASE, SL.RELEASE,
 * SL.RENEW (a cap on what is in flight, not on a rate).  The command table
 * (commands.c) routes them here; the semaphores are limit/concurrency.h's,
 * the waiting queue acquire.h's.
 *
 * Grammar (words case-insensitive, integers strict decimal):
 *
 *   SL.LEASE key [CONCURRENCY n | POLICY name] [QTY q] [TTL ms]
 *                [TIMEOUT ms] [SCOPE local|global] [DETACH]
 *       Takes q units (default 1) of key, whose limit is n units held at
 *       once (CONCURRENCY), a named concurrency policy's (POLICY, or with
 *       neither: the concurrency policy whose match prefix is the longest
 *       prefix of key).  TTL: how long the lease lives unless renewed
 *       (default the policy's ttl, 30 s inline; at most 24 h).  TIMEOUT:
 *       wait up to ms for room, in arrival order behind the key's other
 *       waiters (default 0: answer at once).  A lease ends when released,
 *       when its TTL passes, or when the connection that took it closes,
 *       unless DETACH (then only SL.RELEASE or its TTL end it; leases taken
 *       without a connection, over HTTP, are always detached).
 *   SL.RELEASE key id       :1 released, :0 no such lease (never made,
 *                           already ended, or another key's)
 *   SL.RENEW key id [TTL ms]
 *                           the lease now expires ms from now (default:
 *                           the TTL it was granted with); answers the new
 *                           TTL in ms, or -2 for no such lease (PTTL's
 *                           convention)
 *
 * SL.LEASE's reply (durations in milliseconds, rounded up):
 *   RESP2  *7 [limited, limit, remaining, retry_after_ms, id, ttl_ms,
 *              waited_ms]
 *   RESP3  %8 {limited, limit, remaining, retry_after_ms, id, ttl_ms,
 *              waited_ms, policy (null inline)}
 *   limited 0: granted, id is the lease (a positive integer), ttl_ms its
 *   TTL; limited 1: refused, id 0 and ttl_ms -1, retry_after_ms the time
 *   until the key's earliest lease expires (the longest a unit can stay
 *   taken without a release), -1 when q can never fit.  remaining: units
 *   free on the key after the call.
 *
 * Scope.  On a clustered node a key is global when its policy's scope (or
 * SCOPE, or the cluster's default scope for an inline limit without one)
 * says so: the node then hands out only the slots the key's owner lent it
 * (global/slots.h), and the cluster as a whole holds at most n (plus the
 * bound stated there).  On a node running alone every key is local.
 */
#ifndef SLUICE_COMMANDS_LEASE_H
#define SLUICE_COMMANDS_LEASE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "acquire.h"
#include "commands_sl.h"
#include "concurrency.h"
#include "limiter.h"
#include "resp.h"
#include "server.h"

#define COMMANDS_LEASE_DEFAULT_TTL_MS ((int64_t)30000)

struct commands_lease;
struct cluster;

/* Creates the lease layer on loop (its expiry timer), over lim (for the
 * policies) and acq (for waiters), all borrowed.  max_key: the longest key.
 * -SLUICE_ENOMEM. */
int commands_lease_create(uv_loop_t *loop, struct limiter *lim, struct acquire *acq, size_t max_key,
                          struct commands_lease **out);
/* Global keys go through cl's slots (NULL: every key is local). */
void commands_lease_set_cluster(struct commands_lease *l, struct cluster *cl);
/* Stops the expiry timer (after server_close, which released every
 * connection's leases); then run the loop, then destroy.  Idempotent. */
void commands_lease_close(struct commands_lease *l);
void commands_lease_destroy(struct commands_lease *l);

/* The handlers, rows of the command table (commands_sl_fn: they find the
 * layer through commands_sl_leases).  c may be NULL (HTTP, tests): the
 * lease is then detached and SL.LEASE never waits. */
int commands_lease_lease(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_lease_release(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_lease_renew(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out);

/* The concurrency table's counters as it keeps them (keys, leases and
 * units held now; leases granted, released, expired, ended by a
 * disconnect), which commands_lease_counters' rows read in place, and the
 * commands' own. */
struct commands_lease_stats {
    struct conc_stats conc;  /* its refused is not shown: SL.LEASE's refused below is */
    uint64_t waiting;        /* SL.LEASE requests waiting now */
    uint64_t refused;        /* SL.LEASE answered limited */
    uint64_t global_granted; /* leases granted on global keys */
    uint64_t global_refused; /* SL.LEASE on global keys answered limited */
};
/* Fills *out (all zero for a NULL l).  Never fails. */
void commands_lease_get_stats(const struct commands_lease *l, struct commands_lease_stats *out);
/* INFO's "# Leases" section, with the global slots' counters when
 * clustered (CRLF lines, then a blank line). */
void commands_lease_info(const struct commands_lease *l, struct resp_buf *text);
/* struct commands_lease_stats' rows for INFO's "# Leases" and /metrics. */
extern const struct counter_table commands_lease_counters;

#endif
