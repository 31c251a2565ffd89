/*
 * token-bucket: capacity burst+1 tokens, refilled continuously at count
 * tokens per period (Guava SmoothBursty without borrowing from the future).
 *
 * Exact arithmetic: a token is period_ns "grains", and time refills count
 * grains per nanosecond, so tokens * period_ns is an integer at every
 * instant and no rounding accumulates (a float bucket drifts after enough
 * small refills).  capacity * period_ns < 2^61 (checked by
 * algo_params_init) leaves room for a debt of the same magnitude.
 */
#include "algo.h"

struct algo_tb_state {
    int64_t grains;  /* tokens * period_ns; may be negative (debt) */
    int64_t last_ns; /* time of the last refill */
};

static int64_t algo_token_bucket__ceil_div(int64_t a, int64_t b)
{
    /* a >= 0, b > 0; no a + b - 1 overflow. */
    return a / b + (a % b != 0);
}

/* The state's grains as of now (never rewinding), without storing them. */
/* a + b for a wait and a lateness, both >= 0, saturating: a view from far
 * before the last refill must not overflow (UBSan's signed overflow). */
static int64_t algo_token_bucket__add_wait(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static void algo_token_bucket__view(const struct algo_params *p, const struct algo_tb_state *s,
                                    int64_t now, int64_t *grains, int64_t *at)
{
    int64_t g = s->grains;
    int64_t t = s->last_ns;
    if (now > t) {
        int64_t add;
        int64_t room = p->scaled_cap - g; /* <= 2^62: no overflow */
        if (room <= 0) {
            /* Already full: time adds nothing. */
        } else if (__builtin_mul_overflow(now - t, p->count, &add) || add >= room) {
            g = p->scaled_cap;
        } else {
            g += add;
        }
        t = now;
    }
    *grains = g;
    *at = t;
}

static size_t algo_token_bucket_state_size(const struct algo_params *p)
{
    return sizeof(struct algo_tb_state);
}

static void algo_token_bucket_init(const struct algo_params *p, void *state)
{
    struct algo_tb_state *s = state;
    s->grains = p->scaled_cap;
    s->last_ns = 0;
}

static int algo_token_bucket_eval(const struct algo_params *p, void *state, int64_t qty,
                                  int64_t now, int apply, struct algo_result *out)
{
    struct algo_tb_state *s = state;
    int64_t g, t;
    algo_token_bucket__view(p, s, now, &g, &t);
    /* Seen before its last refill (a waiter charged at its due time), the
     * bucket holds what it held then: its waits count from then. */
    int64_t late = 0;
    if (t > now && __builtin_sub_overflow(t, now, &late))
        late = INT64_MAX;
    out->limited = 0;
    out->limit = p->limit;
    out->retry_after_ns = ALGO_NEVER;
    if (qty > p->limit) {
        out->limited = 1;
    } else if (qty > 0) {
        int64_t need = qty * p->period_ns; /* <= scaled_cap: fits */
        if (g >= need) {
            g -= need;
            if (apply) {
                s->grains = g;
                s->last_ns = t;
            }
        } else {
            out->limited = 1;
            out->retry_after_ns =
                algo_token_bucket__add_wait(algo_token_bucket__ceil_div(need - g, p->count), late);
        }
    }
    out->remaining = g > 0 ? g / p->period_ns : 0;
    out->reset_after_ns =
        algo_token_bucket__add_wait(algo_token_bucket__ceil_div(p->scaled_cap - g, p->count), late);
    return 0;
}

static int algo_token_bucket_refund(const struct algo_params *p, void *state, int64_t qty,
                                    int64_t now)
{
    struct algo_tb_state *s = state;
    int64_t g, t, add;
    algo_token_bucket__view(p, s, now, &g, &t);
    if (__builtin_mul_overflow(qty, p->period_ns, &add) || add >= p->scaled_cap - g)
        g = p->scaled_cap;
    else
        g += add;
    s->grains = g;
    s->last_ns = t;
    return 0;
}

static int algo_token_bucket_drained(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t g, t;
    algo_token_bucket__view(p, state, now, &g, &t);
    return g == p->scaled_cap;
}

/*
 * Units admitted elsewhere at at_ns.  Dated before the state's last refill,
 * they are charged as of that refill: the bucket cannot know whether it was
 * full in between, so it repays the debt from then on (conservative by the
 * delivery delay, never lenient).
 */
static int algo_token_bucket_consume(const struct algo_params *p, void *state, int64_t qty,
                                     int64_t at)
{
    struct algo_tb_state *s = state;
    int64_t g, t, take;
    algo_token_bucket__view(p, s, at, &g, &t);
    if (__builtin_mul_overflow(qty, p->period_ns, &take))
        take = ALGO_DEBT_BOUND;
    s->grains = algo_sat_add(g, take > ALGO_DEBT_BOUND ? -ALGO_DEBT_BOUND : -take);
    s->last_ns = t;
    return 0;
}

static int algo_token_bucket_over(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t g, t;
    algo_token_bucket__view(p, state, now, &g, &t);
    return g < 0;
}

/* burst >= 0, and (burst+1)*period_ns below the debt bound (tokens are
 * held in units of 1/period_ns). */
static int algo_token_bucket_params(struct algo_params *q, int64_t burst, int64_t precision)
{
    (void)precision;
    int rc = algo__bucket_burst(q, burst);
    if (rc < 0)
        return rc;
    if (__builtin_mul_overflow(q->limit, q->period_ns, &q->scaled_cap) ||
        q->scaled_cap >= ALGO_DEBT_BOUND)
        return -SLUICE_ERANGE;
    return 0;
}

const struct algo_ops algo_token_bucket_ops = {
    .name = "token-bucket",
    .flags = ALGO_F_GLOBAL | ALGO_F_BURST,
    .carry = ALGO_CARRY_TIME_TO_FULL,
    .params = algo_token_bucket_params,
    .state_size = algo_token_bucket_state_size,
    .init = algo_token_bucket_init,
    .eval = algo_token_bucket_eval,
    .refund = algo_token_bucket_refund,
    .drained = algo_token_bucket_drained,
    .consume = algo_token_bucket_consume,
    .over = algo_token_bucket_over,
    .free = NULL,
};
