/*
 * fixed-window: at most count units per window; window k is
 * [k*period, (k+1)*period) on the caller's clock, and its counter starts at
 * zero.  The cheapest algorithm and the least accurate: a burst at the end of
 * one window and another at the start of the next admit 2*count within a span
 * far shorter than period (tests/unit/limit/test_algo_fixed_window.c shows it).
 */
#include "algo.h"

struct algo_fw_state {
    int64_t window; /* index of the window `used` belongs to; -1 fresh */
    int64_t used;   /* units taken in it; may exceed count (debt) */
};

/* The caller's time shifted by the phase (algo_params_set_phase), so that
 * windows are [k*period, (k+1)*period) in shifted time. */
static int64_t algo_fixed_window__t(const struct algo_params *p, int64_t now)
{
    return algo_sat_add(now, p->phase_ns);
}

/* ns from now to the end of window w, where w >= now's window. */
static int64_t algo_fixed_window__end(const struct algo_params *p, int64_t w, int64_t now)
{
    int64_t idx = now / p->period_ns;
    int64_t ahead, r;
    if (__builtin_mul_overflow(w - idx, p->period_ns, &ahead) ||
        __builtin_add_overflow(ahead, p->period_ns - now % p->period_ns, &r))
        return INT64_MAX;
    return r;
}

static void algo_fixed_window__view(const struct algo_params *p, const struct algo_fw_state *s,
                                    int64_t now, int64_t *w, int64_t *used)
{
    int64_t idx = now / p->period_ns;
    if (idx > s->window) {
        *w = idx;
        *used = 0;
    } else {
        /* Same window, or the clock went back: keep the newer window. */
        *w = s->window;
        *used = s->used;
    }
}

static size_t algo_fixed_window_state_size(const struct algo_params *p)
{
    return sizeof(struct algo_fw_state);
}

static void algo_fixed_window_init(const struct algo_params *p, void *state)
{
    struct algo_fw_state *s = state;
    s->window = -1;
    s->used = 0;
}

static int algo_fixed_window_eval(const struct algo_params *p, void *state, int64_t qty,
                                  int64_t now, int apply, struct algo_result *out)
{
    struct algo_fw_state *s = state;
    int64_t w, used;
    now = algo_fixed_window__t(p, now);
    algo_fixed_window__view(p, s, now, &w, &used);
    out->limited = 0;
    out->limit = p->limit;
    out->retry_after_ns = ALGO_NEVER;
    if (qty > p->limit) {
        out->limited = 1;
    } else if (qty > 0) {
        if (used <= p->limit - qty) {
            used += qty;
            if (apply) {
                s->window = w;
                s->used = used;
            }
        } else {
            /* Every window starts empty, so the next boundary fits qty. */
            out->limited = 1;
            out->retry_after_ns = algo_fixed_window__end(p, w, now);
        }
    }
    out->remaining = used < p->limit ? p->limit - used : 0;
    out->reset_after_ns = used > 0 ? algo_fixed_window__end(p, w, now) : 0;
    return 0;
}

static int algo_fixed_window_refund(const struct algo_params *p, void *state, int64_t qty,
                                    int64_t now)
{
    struct algo_fw_state *s = state;
    int64_t w, used;
    now = algo_fixed_window__t(p, now);
    algo_fixed_window__view(p, s, now, &w, &used);
    s->window = w;
    s->used = used > qty ? used - qty : 0;
    return 0;
}

static int algo_fixed_window_over(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t w, used;
    algo_fixed_window__view(p, state, algo_fixed_window__t(p, now), &w, &used);
    return used > p->limit;
}

static int algo_fixed_window_drained(const struct algo_params *p, const void *state, int64_t now)
{
    int64_t w, used;
    algo_fixed_window__view(p, state, algo_fixed_window__t(p, now), &w, &used);
    return used == 0;
}

/* Units admitted elsewhere count in at_ns's window; an ended window is gone. */
static int algo_fixed_window_consume(const struct algo_params *p, void *state, int64_t qty,
                                     int64_t at)
{
    struct algo_fw_state *s = state;
    int64_t idx = algo_fixed_window__t(p, at) / p->period_ns;
    if (idx < s->window)
        return 0;
    if (idx > s->window) {
        s->window = idx;
        s->used = 0;
    }
    s->used = algo_sat_add(s->used, qty);
    return 0;
}

/* Counters saturate at ALGO_DEBT_BOUND; keep the limit below. */
static int algo_fixed_window_params(struct algo_params *q, int64_t burst, int64_t precision)
{
    (void)burst;
    (void)precision;
    if (q->count > ALGO_DEBT_BOUND / 2)
        return -SLUICE_ERANGE;
    q->limit = q->count;
    return 0;
}

/* algo_params_set_phase's work (ALGO_KNOB_PHASE): 0 <= phase < period. */
static int algo_fixed_window_knob(struct algo_params *q, enum algo_knob knob, const int64_t *v)
{
    if (knob != ALGO_KNOB_PHASE || v[0] < 0 || v[0] >= q->period_ns)
        return -SLUICE_EINVAL;
    q->phase_ns = v[0];
    return 0;
}

const struct algo_ops algo_fixed_window_ops = {
    .name = "fixed-window",
    .flags = ALGO_F_GLOBAL,
    .carry = ALGO_CARRY_USED,
    .params = algo_fixed_window_params,
    .state_size = algo_fixed_window_state_size,
    .init = algo_fixed_window_init,
    .eval = algo_fixed_window_eval,
    .refund = algo_fixed_window_refund,
    .drained = algo_fixed_window_drained,
    .consume = algo_fixed_window_consume,
    .over = algo_fixed_window_over,
    .free = NULL,
    .knob = algo_fixed_window_knob,
};
