/*
 * warmup: a token bucket that warms up (Guava's SmoothWarmingUp), for
 * resources that cannot take the full rate from cold (caches, connection
 * pools, a JIT).  See algo.h for the contract; the model, in Guava's terms:
 *
 *   stable   = period / count            ns per unit at the full rate
 *   cold     = cold_factor * stable      ns per unit when fully cold
 *   W        = warmup                    ns of saturating demand to warm up
 *   threshold = W / 2 / stable           stored units where warm begins
 *   max      = threshold + 2 W / (stable + cold)
 *
 *   ns per unit
 *        cold |                  /
 *             |                /.   taking units above the threshold costs
 *             |              /  .   the area under this line; the area from
 *      stable |____________/    .   threshold to max is exactly W
 *             +------------+----+-> stored units
 *             0      threshold  max
 *
 * Stored units fill at one per W / max ns of idleness (a key idle for W
 * goes from warm to cold).  A request is admitted when the schedule (the
 * time the next unit is free) is at most burst stable intervals ahead of
 * now, whatever its quantity (Guava's acquire(n): a quantity larger than
 * the burst is not refused, the requests after it wait); it then pays its
 * cost forward, moving the schedule on by the area
 * under the line for the stored units it takes plus `stable` for each unit
 * beyond them.  With burst 0 this is Guava's tryAcquire exactly: the first
 * request after idleness always passes, and the ones after it wait out its
 * cost.  A fresh key is cold (stored = max).
 *
 * Arithmetic is in doubles (the model is a continuous area); every time
 * stored in the state is an int64 clamped to [0, ALGO_DEBT_BOUND], so any
 * int64 input stays defined.
 */
#include "algo.h"

#include <math.h>
#include <stddef.h>

#include "num.h"

struct algo_wu_state {
    int64_t next_ns; /* when the next unit is free (the schedule) */
    double cold;     /* stored units / max, 0..1: the degree of coldness, so a
                      * change of rate keeps it (Guava's setRate rescales the
                      * stored permits by new max / old max) */
};

/* A non-negative duration in ns as an int64, clamped to the debt bound. */
static int64_t algo_warmup__ns(double x)
{
    if (!(x > 0)) /* also NaN */
        return 0;
    if (x >= (double)ALGO_DEBT_BOUND)
        return ALGO_DEBT_BOUND;
    return (int64_t)ceil(x);
}

/* ns per unit at `stored` stored units above the threshold. */
static double algo_warmup__interval(const struct algo_params *p, double above)
{
    return p->wu_stable + above * p->wu_slope;
}

/* The cost, ns, of taking qty units with `stored` stored. */
static double algo_warmup__cost(const struct algo_params *p, double stored, double qty)
{
    double spend = qty < stored ? qty : stored;
    double fresh = qty - spend;
    double above = stored - p->wu_threshold;
    double t = 0;
    if (above > 0) {
        double a = above < spend ? above : spend;
        /* Trapezoid under the line from above-a to above. */
        t = a * (algo_warmup__interval(p, above) + algo_warmup__interval(p, above - a)) / 2;
        spend -= a;
    }
    return t + (spend + fresh) * p->wu_stable;
}

/* The state as of now: idleness since the schedule refills stored units. */
static void algo_warmup__view(const struct algo_params *p, const struct algo_wu_state *s,
                              int64_t now, int64_t *next, double *stored)
{
    *next = s->next_ns;
    *stored = s->cold < 1 ? s->cold * p->wu_max : p->wu_max;
    if (!(*stored > 0)) /* also NaN */
        *stored = 0;
    if (now > *next) {
        double add = (double)(now - *next) / p->wu_cooldown;
        *stored = *stored + add < p->wu_max ? *stored + add : p->wu_max;
        *next = now;
    }
}

/* Takes qty units at now from (next, stored): the schedule moves on. */
static void algo_warmup__take(const struct algo_params *p, int64_t now, int64_t *next,
                              double *stored, int64_t qty)
{
    double q = (double)qty;
    int64_t cost = algo_warmup__ns(algo_warmup__cost(p, *stored, q));
    int64_t from = *next > now ? *next : now;
    *next = num_add_sat(from, cost);
    *stored -= q < *stored ? q : *stored;
}

static size_t algo_warmup_state_size(const struct algo_params *p)
{
    return sizeof(struct algo_wu_state);
}

static void algo_warmup_init(const struct algo_params *p, void *state)
{
    struct algo_wu_state *s = state;
    (void)p;
    s->next_ns = 0;
    s->cold = 1; /* a fresh key is cold */
}

static int algo_warmup_eval(const struct algo_params *p, void *state, int64_t qty, int64_t now,
                            int apply, struct algo_result *out)
{
    struct algo_wu_state *s = state;
    int64_t next;
    double stored;
    algo_warmup__view(p, s, now, &next, &stored);
    /* How far ahead of now the schedule may be for a request to pass. */
    double tol = (double)p->burst * p->wu_stable;
    out->limited = 0;
    out->limit = p->limit;
    out->retry_after_ns = ALGO_NEVER;
    if (qty > 0) {
        double ahead = (double)(next - now);
        if (ahead <= tol) {
            algo_warmup__take(p, now, &next, &stored, qty);
            if (apply) {
                s->next_ns = next;
                s->cold = stored / p->wu_max;
            }
        } else {
            out->limited = 1;
            out->retry_after_ns = algo_warmup__ns(ahead - tol);
            if (out->retry_after_ns == 0)
                out->retry_after_ns = 1;
        }
    }
    /* Units that would pass now, one at a time, at the stable cost (the
     * warm-up can only make the true number smaller). */
    double ahead = (double)(next - now);
    double rem = ahead <= tol ? floor((tol - ahead) / p->wu_stable) + 1 : 0;
    out->remaining = rem >= (double)p->limit ? p->limit : (int64_t)rem;
    /* Back to fresh (cold): the schedule caught up, then the stored units
     * refilled. */
    out->reset_after_ns = algo_sat_add(next > now ? next - now : 0,
                                       algo_warmup__ns((p->wu_max - stored) * p->wu_cooldown));
    return 0;
}

/* Gives back qty units: the schedule moves back by their stable cost, not
 * before now (a refund cannot make a key colder than it is). */
static int algo_warmup_refund(const struct algo_params *p, void *state, int64_t qty, int64_t now)
{
    struct algo_wu_state *s = state;
    int64_t next;
    double stored;
    algo_warmup__view(p, s, now, &next, &stored);
    int64_t back = algo_warmup__ns((double)qty * p->wu_stable);
    s->next_ns = next - back > now ? next - back : now;
    s->cold = stored / p->wu_max;
    return 0;
}

static int algo_warmup_drained(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t next;
    double stored;
    algo_warmup__view(p, state, now, &next, &stored);
    return next <= now && stored >= p->wu_max;
}

/* Units taken elsewhere at at_ns, without a limit check (not global; kept
 * for the contract: the state pays their cost as if taken here). */
static int algo_warmup_consume(const struct algo_params *p, void *state, int64_t qty, int64_t at)
{
    struct algo_wu_state *s = state;
    int64_t next;
    double stored;
    algo_warmup__view(p, s, at, &next, &stored);
    algo_warmup__take(p, at, &next, &stored, qty);
    s->next_ns = next;
    s->cold = stored / p->wu_max;
    return 0;
}

/* Over when the schedule lies further ahead than one admitted unit can
 * leave it (burst stable intervals of tolerance plus a fully cold unit's
 * cost): units beyond what the key admits are owed. */
static int algo_warmup_over(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t next;
    double stored;
    algo_warmup__view(p, state, now, &next, &stored);
    return (double)(next - now) > (double)(p->burst + p->cold_factor) * p->wu_stable;
}

/* Fills the model's derived values from period, count, warmup and the cold
 * factor (q->warmup_ns and q->cold_factor set). */
static int algo_warmup__derive(struct algo_params *q)
{
    double stable = (double)q->period_ns / (double)q->count;
    double cold = (double)q->cold_factor * stable;
    double w = (double)q->warmup_ns;
    q->wu_stable = stable;
    q->wu_threshold = 0.5 * w / stable;
    q->wu_max = q->wu_threshold + 2.0 * w / (stable + cold);
    q->wu_slope = (cold - stable) / (q->wu_max - q->wu_threshold);
    q->wu_cooldown = w / q->wu_max;
    if (!(q->wu_max > 0) || !isfinite(q->wu_max) || !(q->wu_cooldown > 0) || !isfinite(q->wu_slope))
        return -SLUICE_ERANGE;
    return 0;
}

/* burst >= 0 as the buckets'; the warm-up defaults to one period and the
 * cold factor to 3 (algo_params_set_warmup changes them). */
static int algo_warmup_params(struct algo_params *q, int64_t burst, int64_t precision)
{
    (void)precision;
    int rc = algo__bucket_burst(q, burst);
    if (rc < 0)
        return rc;
    q->warmup_ns = q->period_ns;
    q->cold_factor = ALGO_COLD_FACTOR_DEFAULT;
    return algo_warmup__derive(q);
}

/* algo_params_set_warmup's work (ALGO_KNOB_WARMUP), once algo.c has
 * checked q: the pair is derived on a copy, so q is unchanged on error. */
static int algo_warmup_knob(struct algo_params *q, enum algo_knob knob, const int64_t *v)
{
    if (knob != ALGO_KNOB_WARMUP)
        return -SLUICE_EINVAL;
    int64_t warmup_ns = v[0], cold_factor = v[1];
    struct algo_params t = *q;
    if (warmup_ns < 1 || cold_factor < 1 || cold_factor > ALGO_COLD_FACTOR_MAX)
        return -SLUICE_EINVAL;
    t.warmup_ns = warmup_ns;
    t.cold_factor = cold_factor;
    int rc = algo_warmup__derive(&t);
    if (rc < 0)
        return rc;
    *q = t;
    return 0;
}

/* The knob's values as limits spell them: WARMUP ms, COLD f. */
static const struct algo_option algo_warmup__options[] = {
    {.conf = "warmup",
     .word = "WARMUP",
     .shown = "warmup_ms",
     .knob = ALGO_KNOB_WARMUP,
     .slot = 0,
     .off = offsetof(struct algo_params, warmup_ns),
     .type = ALGO_VALUE_NS,
     .min = 1,
     .max = INT64_MAX},
    {.conf = "cold_factor",
     .word = "COLD",
     .shown = "cold_factor",
     .knob = ALGO_KNOB_WARMUP,
     .slot = 1,
     .off = offsetof(struct algo_params, cold_factor),
     .type = ALGO_VALUE_INT,
     .min = 1,
     .max = ALGO_COLD_FACTOR_MAX},
};

const struct algo_ops algo_warmup_ops = {
    .name = "warmup",
    .why_local = "the warm-up is one node's history of demand",
    .flags = ALGO_F_BURST,
    .carry = ALGO_CARRY_ABSOLUTE,
    .params = algo_warmup_params,
    .state_size = algo_warmup_state_size,
    .init = algo_warmup_init,
    .eval = algo_warmup_eval,
    .refund = algo_warmup_refund,
    .drained = algo_warmup_drained,
    .consume = algo_warmup_consume,
    .over = algo_warmup_over,
    .free = NULL,
    .knob = algo_warmup_knob,
    .options = algo_warmup__options,
    .noptions = sizeof(algo_warmup__options) / sizeof(algo_warmup__options[0]),
};
