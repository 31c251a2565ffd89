/* decide: the one decision entry (see decide.h). */
#include "decide.h"

#include "cluster.h"
#include "limiter.h"
#include "policy.h"
#include "sluice/error.h"

/* The limit of q: its policy's, its inline one, or CL.THROTTLE's GCRA
 * (the limiter keeps the last one built). */
static int decide__params(const struct decide *d, const struct decide_req *q,
                          const struct algo_params **out)
{
    if (q->pol != NULL) {
        *out = &q->pol->algo;
        return 0;
    }
    if (q->p != NULL) {
        *out = q->p;
        return 0;
    }
    return limiter_cell_params(d->lim, q->cl_burst, q->cl_count, q->cl_period_s, out);
}

int decide_is_global(const struct decide *d, const struct decide_req *q)
{
    if (d->cl == NULL)
        return 0;
    enum algo_kind kind = q->pol != NULL ? q->pol->algo.kind
                          : q->p != NULL ? q->p->kind
                                         : ALGO_GCRA;
    return cluster_is_global(d->cl, q->pol, q->scope, kind);
}

void decide_prefetch(const struct decide *d, const struct decide_req *q, int stage, uint32_t *h)
{
    if (decide_is_global(d, q))
        cluster_prefetch(d->cl, q->key, q->klen, stage, h);
    else
        limiter_prefetch(d->lim, q->key, q->klen, stage, h);
}

int64_t decide_clock(const struct decide *d, int global, int64_t now_ns)
{
    return global ? cluster_clock_ns(d->cl, now_ns) : now_ns;
}

/* A global key: the replica decides; a full table is answered as a local
 * key's; a charge is an admission as far as the replica takes it. */
static int decide__global(const struct decide *d, const struct decide_req *q,
                          const struct algo_params *p, int64_t now_ns, struct algo_result *out)
{
    if (q->qty < 0 || q->klen == 0)
        return -SLUICE_EINVAL;
    int rc = cluster_decide_global(d->cl, q->pol, q->key, q->klen, p, q->qty, now_ns, out);
    if (rc == -SLUICE_EFULL)
        return limiter_overflow_answer(d->lim, p, q->qty, cluster_on_full_allow(d->cl),
                                       decide_clock(d, 1, now_ns), out);
    if (rc < 0)
        return rc;
    if (q->op == DECIDE_CHARGE && out->limited && q->qty > 0)
        cluster_note_demand(d->cl, q->key, q->klen, q->qty);
    return 0;
}

/* Everything but decide_run's hot path (decide.h). */
int decide_run_slow(const struct decide *d, const struct decide_req *q, int64_t now_ns,
                    struct algo_result *out)
{
    const struct algo_params *p;
    int rc = decide__params(d, q, &p);
    if (rc < 0)
        return rc;
    int global = d->cl != NULL && cluster_is_global(d->cl, q->pol, q->scope, p->kind);
    if (global) {
        int64_t at = q->at_ns > 0 && q->at_ns < now_ns ? q->at_ns : now_ns;
        rc = decide__global(d, q, p, at, out);
        if (rc == 0)
            limiter_settle_policy(d->lim, q->pol, q->qty, out, NULL);
        return rc;
    }
    if (q->op == DECIDE_CHARGE)
        return q->pol != NULL
                   ? limiter_charge_policy(d->lim, q->key, q->klen, q->pol, q->qty, now_ns, out)
                   : limiter_charge(d->lim, q->key, q->klen, p, q->qty, now_ns, out);
    if (q->pol != NULL)
        return limiter_decide_policy(d->lim, q->key, q->klen, q->pol, q->qty, now_ns, out, NULL);
    if (q->p == NULL) /* CL.THROTTLE's inline limit: the GCRA fast path */
        return limiter_decide_cell(d->lim, q->key, q->klen, q->cl_burst, q->cl_count,
                                   q->cl_period_s, q->qty, now_ns, out);
    return limiter_decide(d->lim, q->key, q->klen, p, q->qty, now_ns, out);
}
