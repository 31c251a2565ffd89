/*
 * sliding-window: Sentinel's LeapArray.  Time is cut into sub-windows of
 * width w = floor(period / precision); sub-window i is [i*w, (i+1)*w).  A
 * key keeps one counter per sub-window for the last `precision` of them, in
 * a circular array indexed by i % precision.  At time now (sub-window c) a
 * request for qty is admitted when the counters of c-precision+1 .. c sum to
 * at most count - qty.
 *
 * Why it over-admits, and by how much: the oldest counted sub-window only
 * partly overlaps [now - period, now], while the sub-window before it (no
 * longer counted) still partly does.  So any span of (precision-1)*w admits
 * at most count, and any span of period at most count plus one sub-window's
 * admissions.  Memory: 8 + 8*precision bytes per key.
 */
#include "algo.h"

/* Per-counter cap: precision counters of this size still sum below 2^61. */
#define ALGO_SW_BUCKET_MAX (ALGO_DEBT_BOUND / ALGO_PRECISION_MAX)

struct algo_sw_state {
    int64_t head;     /* newest sub-window index the counters describe */
    int64_t counts[]; /* precision counters, counts[i % precision] */
};

/* Sub-window i's count as seen from sub-window c (c >= head). */
static int64_t algo_sliding_window__bucket(const struct algo_params *p,
                                           const struct algo_sw_state *s, int64_t i, int64_t c)
{
    if (i < 0 || i > s->head || i <= s->head - p->precision || i <= c - p->precision)
        return 0;
    return s->counts[i % p->precision];
}

/* The current sub-window (never before head) and now's offset into it. */
static int64_t algo_sliding_window__now(const struct algo_params *p, const struct algo_sw_state *s,
                                        int64_t now, int64_t *off)
{
    int64_t c = now / p->interval_ns;
    if (c < s->head)
        c = s->head;                 /* the clock went back: keep the newer state */
    *off = now - c * p->interval_ns; /* c*w <= some earlier now: fits */
    return c;
}

/* ns from now until the start of sub-window c + k, saturating. */
static int64_t algo_sliding_window__until(const struct algo_params *p, int64_t k, int64_t off)
{
    int64_t r;
    if (__builtin_sub_overflow(k * p->interval_ns, off, &r)) /* k <= precision */
        return INT64_MAX;
    return r;
}

static void algo_sliding_window__advance(const struct algo_params *p, struct algo_sw_state *s,
                                         int64_t c)
{
    if (c <= s->head)
        return;
    if (c - s->head >= p->precision) {
        for (int64_t i = 0; i < p->precision; i++)
            s->counts[i] = 0;
    } else {
        for (int64_t i = s->head + 1; i <= c; i++)
            s->counts[i % p->precision] = 0;
    }
    s->head = c;
}

static int64_t algo_sliding_window__sum(const struct algo_params *p, const struct algo_sw_state *s,
                                        int64_t c)
{
    int64_t sum = 0;
    for (int64_t i = c - p->precision + 1; i <= c; i++)
        sum += algo_sliding_window__bucket(p, s, i, c);
    return sum;
}

static size_t algo_sliding_window_state_size(const struct algo_params *p)
{
    return sizeof(struct algo_sw_state) + (size_t)p->precision * sizeof(int64_t);
}

static void algo_sliding_window_init(const struct algo_params *p, void *state)
{
    struct algo_sw_state *s = state;
    s->head = 0;
    for (int64_t i = 0; i < p->precision; i++)
        s->counts[i] = 0;
}

static int algo_sliding_window_eval(const struct algo_params *p, void *state, int64_t qty,
                                    int64_t now, int apply, struct algo_result *out)
{
    struct algo_sw_state *s = state;
    int64_t off;
    int64_t c = algo_sliding_window__now(p, s, now, &off);
    int64_t sum = algo_sliding_window__sum(p, s, c);
    out->limited = 0;
    out->limit = p->limit;
    out->retry_after_ns = ALGO_NEVER;
    if (qty > p->limit) {
        out->limited = 1;
    } else if (qty > 0) {
        if (sum <= p->limit - qty) {
            sum += qty;
            if (apply) {
                algo_sliding_window__advance(p, s, c);
                s->counts[c % p->precision] += qty; /* sum <= count: fits */
            }
        } else {
            /* Sub-windows leave the period oldest first; with no other
             * traffic, find the first boundary after which qty fits. */
            int64_t left = sum;
            out->limited = 1;
            for (int64_t j = 1; j <= p->precision; j++) {
                left -= algo_sliding_window__bucket(p, s, c - p->precision + j, c);
                if (left <= p->limit - qty) {
                    out->retry_after_ns = algo_sliding_window__until(p, j, off);
                    break;
                }
            }
        }
    }
    out->remaining = sum < p->limit ? p->limit - sum : 0;
    out->reset_after_ns = 0;
    for (int64_t k = c; k > c - p->precision; k--) {
        if (k == c && qty > 0 && !out->limited) {
            /* the units just taken sit in sub-window c */
            out->reset_after_ns = algo_sliding_window__until(p, p->precision, off);
            break;
        }
        if (algo_sliding_window__bucket(p, s, k, c) > 0) {
            out->reset_after_ns = algo_sliding_window__until(p, k + p->precision - c, off);
            break;
        }
    }
    return 0;
}

static int algo_sliding_window_refund(const struct algo_params *p, void *state, int64_t qty,
                                      int64_t now)
{
    struct algo_sw_state *s = state;
    int64_t off;
    int64_t c = algo_sliding_window__now(p, s, now, &off);
    algo_sliding_window__advance(p, s, c);
    for (int64_t i = c; i > c - p->precision && i >= 0 && qty > 0; i--) {
        int64_t *n = &s->counts[i % p->precision];
        int64_t take = *n < qty ? *n : qty;
        *n -= take;
        qty -= take;
    }
    return 0;
}

static int algo_sliding_window_over(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t off;
    int64_t c = algo_sliding_window__now(p, state, now, &off);
    return algo_sliding_window__sum(p, state, c) > p->limit;
}

static int algo_sliding_window_drained(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t off;
    int64_t c = algo_sliding_window__now(p, state, now, &off);
    return algo_sliding_window__sum(p, state, c) == 0;
}

/* Units admitted elsewhere count in at_ns's sub-window while it is in the
 * period; each counter saturates at ALGO_SW_BUCKET_MAX. */
static int algo_sliding_window_consume(const struct algo_params *p, void *state, int64_t qty,
                                       int64_t at)
{
    struct algo_sw_state *s = state;
    int64_t a = at / p->interval_ns;
    int64_t *n;
    algo_sliding_window__advance(p, s, a);
    if (a <= s->head - p->precision)
        return 0;
    n = &s->counts[a % p->precision];
    *n = qty >= ALGO_SW_BUCKET_MAX - *n ? ALGO_SW_BUCKET_MAX : *n + qty;
    return 0;
}

/* precision 0 means the default; sub-windows must be at least 1 ns. */
static int algo_sliding_window_params(struct algo_params *q, int64_t burst, int64_t precision)
{
    (void)burst;
    if (precision == 0)
        precision = ALGO_PRECISION_DEFAULT;
    if (precision < 1 || precision > ALGO_PRECISION_MAX)
        return -SLUICE_EINVAL;
    if (q->count > ALGO_DEBT_BOUND / 2)
        return -SLUICE_ERANGE;
    q->precision = precision;
    q->interval_ns = q->period_ns / precision;
    if (q->interval_ns < 1)
        return -SLUICE_ERANGE;
    q->limit = q->count;
    return 0;
}

const struct algo_ops algo_sliding_window_ops = {
    .name = "sliding-window",
    .flags = ALGO_F_GLOBAL,
    .carry = ALGO_CARRY_USED,
    .params = algo_sliding_window_params,
    .state_size = algo_sliding_window_state_size,
    .init = algo_sliding_window_init,
    .eval = algo_sliding_window_eval,
    .refund = algo_sliding_window_refund,
    .drained = algo_sliding_window_drained,
    .consume = algo_sliding_window_consume,
    .over = algo_sliding_window_over,
    .free = NULL,
};
