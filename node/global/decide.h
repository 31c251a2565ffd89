/*
 * decide: the one decision entry.  Every front end that decides a key
 * (CL.THROTTLE, SL.THROTTLE / PEEK / CHARGE, SL.MULTI's global keys,
 * SL.ACQUIRE's global keys, the HTTP endpoint, Envoy's rate limit service)
 * hands it a request (a key, its limit or policy, a quantity, what to do)
 * and one reading of the loop's monotonic clock, and gets one answer back.
 * It is where the paths meet:
 *
 *   request --> cluster_is_global? --yes--> cluster_decide_global (replica)
 *                     |                        | -SLUICE_EFULL: the on-full
 *                     no                       |   answer (limiter_overflow_answer)
 *                     v                        v
 *               the limiter           limiter_settle_policy: dry run,
 *        (limiter_*_policy settle     policy counters (the same step the
 *         inside, as below)           limiter runs for its own keys)
 *
 * so a dry-run refusal is counted in dry_run_would_limit, a full table is
 * answered, and a policy's counters move the same way whichever side
 * decided.  The clock: a local key is decided at now_ns, a global one at
 * the cluster's clock for the same reading (cluster_clock_ns).
 *
 * What stays outside: SL.MULTI's all-local check-then-charge is one
 * limiter call (limiter_multi), and SL.ACQUIRE's local waiters are paced by
 * limiter_acquire_fit / limiter_acquire_take at their due times; both are
 * operations of several keys or of a schedule, not one decision.
 *
 * Nothing here allocates or keeps state: struct decide names the limiter
 * and the cluster (NULL when not clustered) the caller owns.  Runs on the
 * loop thread.  Functions return 0 or a negative enum sluice_err.
 */
#ifndef SLUICE_DECIDE_H
#define SLUICE_DECIDE_H

#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "limiter.h"

struct cluster;
struct limiter;
struct policy;

struct decide {
    struct limiter *lim;
    struct cluster *cl; /* NULL: every key is local */
};

enum decide_op {
    DECIDE_TAKE = 0,   /* take qty units if they fit (qty 0 peeks) */
    DECIDE_CHARGE = 1, /* post-paid: count qty units (see decide_run) */
};

struct decide_req {
    const char *key;
    size_t klen;
    const struct policy *pol;    /* the policy covering the key, or NULL */
    const struct algo_params *p; /* the inline limit when pol is NULL */
    int64_t cl_burst, cl_count;  /* when pol and p are NULL: CL.THROTTLE's */
    int64_t cl_period_s;         /* inline GCRA limit (burst, count per period) */
    int scope;                   /* inline: enum policy_scope given, -1: default */
    int64_t qty;                 /* >= 0 */
    enum decide_op op;
    /* A global key only: the reading to decide at when it is earlier than
     * now_ns (a paced SL.ACQUIRE waiter's slot, that its timer woke after:
     * acquire.h), so the lateness stays in the key's refill instead of
     * being lost from the schedule; 0 or later: now_ns.  A local key's
     * waiter is charged at its slot by the acquire layer itself
     * (limiter_acquire_take). */
    int64_t at_ns;
};

/* A look-ahead hint for deciding q soon (server_hint_fn): the table that
 * will decide it is asked for q's key, stage 0 its bucket, stage 1 its
 * entry; *h carries the hash between them.  Changes nothing. */
void decide_prefetch(const struct decide *d, const struct decide_req *q, int stage, uint32_t *h);

/* 1 when q's key is decided by the cluster (cluster_is_global on its
 * policy, scope and algorithm).  Never fails. */
int decide_is_global(const struct decide *d, const struct decide_req *q);

/* The clock q is decided on for a reading now_ns: now_ns for a local key,
 * the cluster's clock for a global one (a caller aligning a window to the
 * wall clock needs it). */
int64_t decide_clock(const struct decide *d, int global, int64_t now_ns);

/*
 * Decides q at now_ns (a global key at q->at_ns when that is earlier) and
 * fills *out (durations in ns, the cluster's
 * remaining for a global key).  DECIDE_CHARGE counts qty whatever the key
 * holds (limiter_charge) on a local key; on a global key it is counted as
 * an admission the node reports to the key's owner, so every node sees it,
 * as far as the replica admits it now (a charge the replica refuses is
 * counted as demand only and answered limited: the replica has no call
 * that counts units past what it admits).  Fails, nothing changed, with
 * -SLUICE_EINVAL (bad limit or quantity), -SLUICE_ERANGE (an inline limit
 * whose nanoseconds overflow), -SLUICE_ETOOBIG (key) or -SLUICE_ENOMEM.
 */
int decide_run_slow(const struct decide *d, const struct decide_req *q, int64_t now_ns,
                    struct algo_result *out);
static inline int decide_run(const struct decide *d, const struct decide_req *q, int64_t now_ns,
                             struct algo_result *out)
{
    /* The hot path inlined into the caller: CL.THROTTLE's inline limit on
     * a node that is not clustered is one call into the limiter. */
    if (d->cl == NULL && q->pol == NULL && q->p == NULL && q->op == DECIDE_TAKE)
        return limiter_decide_cell(d->lim, q->key, q->klen, q->cl_burst, q->cl_count,
                                   q->cl_period_s, q->qty, now_ns, out);
    return decide_run_slow(d, q, now_ns, out);
}

#endif
