/*
 * gcra: the default algorithm, a thin adapter from the algo interface to the
 * redis-cell arithmetic in gcra.c.  The per-key state is the theoretical
 * arrival time (TAT), 8 bytes; GCRA_TAT_FULL is a fresh key.
 */
#include "algo.h"

static size_t algo_gcra_state_size(const struct algo_params *p)
{
    return sizeof(int64_t);
}

static void algo_gcra_init(const struct algo_params *p, void *state)
{
    *(int64_t *)state = GCRA_TAT_FULL;
}

static int algo_gcra_eval(const struct algo_params *p, void *state, int64_t qty, int64_t now,
                          int apply, struct algo_result *out)
{
    int64_t *tat = state;
    int64_t work = *tat; /* gcra_decide writes only on success */
    struct gcra_result r;
    int rc = gcra_decide(&work, &p->gcra, qty, now, &r);
    if (rc < 0)
        return rc;
    if (apply)
        *tat = work;
    out->limited = r.limited;
    out->limit = r.limit;
    out->remaining = r.remaining;
    out->retry_after_ns = r.limited ? r.retry_after_ns : ALGO_NEVER;
    out->reset_after_ns = r.reset_after_ns;
    return 0;
}

/* Moves the TAT back by qty emission intervals, never before now (full). */
static int algo_gcra_refund(const struct algo_params *p, void *state, int64_t qty, int64_t now)
{
    int64_t *tat = state;
    int64_t dec, back;
    if (*tat <= now)
        return 0;
    if (__builtin_mul_overflow(qty, p->gcra.emission_ns, &dec) ||
        __builtin_sub_overflow(*tat, dec, &back) || back < now)
        back = now;
    *tat = back;
    return 0;
}

static int algo_gcra_drained(const struct algo_params *p, const void *state, int64_t now)
{
    return gcra_is_drained(*(const int64_t *)state, now);
}

/* As if admitted locally at at_ns: the TAT moves by qty intervals from
 * max(TAT, at_ns), past the tolerance if need be (a debt). */
static int algo_gcra_consume(const struct algo_params *p, void *state, int64_t qty, int64_t at)
{
    return gcra_consume(state, &p->gcra, qty, at);
}

/* Over when the TAT lies beyond the tolerance (burst+1 intervals) ahead. */
static int algo_gcra_over(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t tat = *(const int64_t *)state, ahead;
    if (tat <= now || __builtin_sub_overflow(tat, now, &ahead))
        return 0;
    return ahead > p->gcra.tolerance_ns;
}

/* burst >= 0; redis-cell's arithmetic, including its refusal of an
 * emission interval that truncates to zero. */
static int algo_gcra_params(struct algo_params *q, int64_t burst, int64_t precision)
{
    (void)precision;
    int rc = algo__bucket_burst(q, burst);
    if (rc < 0)
        return rc;
    rc = gcra_params_init(&q->gcra, burst, q->count, q->period_ns);
    if (rc < 0)
        return rc;
    q->interval_ns = q->gcra.emission_ns;
    return 0;
}

const struct algo_ops algo_gcra_ops = {
    .name = "gcra",
    .flags = ALGO_F_GLOBAL | ALGO_F_BURST,
    .carry = ALGO_CARRY_ABSOLUTE,
    .params = algo_gcra_params,
    .state_size = algo_gcra_state_size,
    .init = algo_gcra_init,
    .eval = algo_gcra_eval,
    .refund = algo_gcra_refund,
    .drained = algo_gcra_drained,
    .consume = algo_gcra_consume,
    .over = algo_gcra_over,
    .free = NULL,
};
