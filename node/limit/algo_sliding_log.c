/*
 * sliding-log: the exact "at most N actions per period".
 *
 * A key keeps the timestamps of its last admitted units, oldest first, in a
 * ring of at most N = count entries; an entry admitted at t counts while
 * now < t + period.  A request for q fits when live + q <= N; when it does
 * not, it must wait until the (live + q - N)-th oldest live entry ages out
 * (for a full ring: the q-th oldest).  Unlike the Redis sorted-set recipe,
 * a denied request records nothing, so memory never exceeds N timestamps and
 * a flood of denied calls cannot grow it.
 *
 * The ring starts empty (no allocation for a key that is only peeked) and
 * doubles up to N entries; algo_free() releases it.  Allocation is the only
 * way a decision can fail (-SLUICE_ENOMEM), and then nothing changed.
 */
#include "algo.h"

#include <stdlib.h>

struct algo_sl_state {
    int64_t *ring;  /* cap entries, owned by the state; NULL when cap == 0 */
    uint32_t cap;   /* allocated entries, <= count */
    uint32_t start; /* index of the oldest entry */
    uint32_t len;   /* entries held (some may have aged out) */
    uint32_t unused_;
};

static int64_t algo_sliding_log__at(const struct algo_sl_state *s, uint32_t i)
{
    return s->ring[(s->start + i) % s->cap];
}

/* How many of the oldest entries have aged out at now (binary search: the
 * ring is sorted). */
static uint32_t algo_sliding_log__expired(const struct algo_params *p,
                                          const struct algo_sl_state *s, int64_t now)
{
    int64_t limit = now - p->period_ns; /* now >= 0, period > 0: fits */
    uint32_t lo = 0, hi = s->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (algo_sliding_log__at(s, mid) <= limit)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void algo_sliding_log__drop_oldest(struct algo_sl_state *s, uint32_t n)
{
    s->start = s->cap ? (s->start + n) % s->cap : 0;
    s->len -= n;
}

/* Makes room for `need` entries (need <= count).  -SLUICE_ENOMEM leaves s
 * untouched. */
static int algo_sliding_log__reserve(const struct algo_params *p, struct algo_sl_state *s,
                                     uint32_t need)
{
    uint64_t ncap;
    int64_t *ring;
    if (need <= s->cap)
        return 0;
    ncap = s->cap ? (uint64_t)s->cap * 2 : 4;
    while (ncap < need)
        ncap *= 2;
    if (ncap > (uint64_t)p->count)
        ncap = (uint64_t)p->count;
    ring = malloc(ncap * sizeof(*ring));
    if (ring == NULL)
        return -SLUICE_ENOMEM;
    for (uint32_t i = 0; i < s->len; i++)
        ring[i] = algo_sliding_log__at(s, i);
    free(s->ring);
    s->ring = ring;
    s->cap = (uint32_t)ncap;
    s->start = 0;
    return 0;
}

/* Appends n entries at t (t >= newest, len + n <= cap). */
static void algo_sliding_log__push(struct algo_sl_state *s, int64_t t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        s->ring[(s->start + s->len + i) % s->cap] = t;
    s->len += n;
}

static int64_t algo_sliding_log__until(int64_t t, int64_t period, int64_t now)
{
    int64_t end;
    if (__builtin_add_overflow(t, period, &end))
        return INT64_MAX;
    return end - now; /* both >= 0: fits */
}

static size_t algo_sliding_log_state_size(const struct algo_params *p)
{
    return sizeof(struct algo_sl_state);
}

static void algo_sliding_log_init(const struct algo_params *p, void *state)
{
    struct algo_sl_state *s = state;
    s->ring = NULL;
    s->cap = s->start = s->len = s->unused_ = 0;
}

static int algo_sliding_log_eval(const struct algo_params *p, void *state, int64_t qty, int64_t now,
                                 int apply, struct algo_result *out)
{
    struct algo_sl_state *s = state;
    uint32_t expired = algo_sliding_log__expired(p, s, now);
    int64_t live = (int64_t)(s->len - expired);
    int64_t newest = s->len ? algo_sliding_log__at(s, s->len - 1) : 0;
    out->limited = 0;
    out->limit = p->limit;
    out->retry_after_ns = ALGO_NEVER;
    if (qty > p->limit) {
        out->limited = 1;
    } else if (qty > 0) {
        if (live + qty <= p->count) {
            /* Keep the ring sorted even if the clock went back. */
            int64_t t = now > newest ? now : newest;
            if (apply) {
                int rc = algo_sliding_log__reserve(p, s, (uint32_t)(live + qty));
                if (rc < 0)
                    return rc;
                algo_sliding_log__drop_oldest(s, expired);
                algo_sliding_log__push(s, t, (uint32_t)qty);
            }
            live += qty;
            newest = t;
        } else {
            uint32_t k = (uint32_t)(live + qty - p->count); /* 1..live */
            out->limited = 1;
            out->retry_after_ns = algo_sliding_log__until(algo_sliding_log__at(s, expired + k - 1),
                                                          p->period_ns, now);
        }
    }
    out->remaining = p->count - live;
    out->reset_after_ns = live > 0 ? algo_sliding_log__until(newest, p->period_ns, now) : 0;
    return 0;
}

/* Gives back the newest entries: the units most recently taken. */
static int algo_sliding_log_refund(const struct algo_params *p, void *state, int64_t qty,
                                   int64_t now)
{
    struct algo_sl_state *s = state;
    uint32_t expired = algo_sliding_log__expired(p, s, now);
    algo_sliding_log__drop_oldest(s, expired);
    s->len -= qty < (int64_t)s->len ? (uint32_t)qty : s->len;
    return 0;
}

static int algo_sliding_log_drained(const struct algo_params *p, const void *state, int64_t now)
{
    const struct algo_sl_state *s = state;
    return algo_sliding_log__expired(p, s, now) == s->len;
}

/*
 * Records qty units admitted elsewhere at at_ns (or at the newest entry's
 * time if later, to keep the ring sorted), keeping only the newest count
 * entries: the debt of a log is capped at count.  Local use only; see
 * algo.h for why the log cannot be global.
 */
static int algo_sliding_log_consume(const struct algo_params *p, void *state, int64_t qty,
                                    int64_t at)
{
    struct algo_sl_state *s = state;
    int64_t newest = s->len ? algo_sliding_log__at(s, s->len - 1) : 0;
    int64_t t = at > newest ? at : newest;
    uint32_t expired = algo_sliding_log__expired(p, s, t);
    uint32_t n = qty < p->count ? (uint32_t)qty : (uint32_t)p->count;
    uint32_t keep = s->len - expired;
    uint32_t total = keep + n > (uint32_t)p->count ? (uint32_t)p->count : keep + n;
    int rc = algo_sliding_log__reserve(p, s, total);
    if (rc < 0)
        return rc;
    algo_sliding_log__drop_oldest(s, expired);
    if (keep + n > total)
        algo_sliding_log__drop_oldest(s, keep + n - total);
    algo_sliding_log__push(s, t, n);
    return 0;
}

static void algo_sliding_log_free(const struct algo_params *p, void *state)
{
    struct algo_sl_state *s = state;
    free(s->ring);
    algo_sliding_log_init(p, state);
}

/* One timestamp per unit: count is bounded by ALGO_SLIDING_LOG_MAX. */
static int algo_sliding_log_params(struct algo_params *q, int64_t burst, int64_t precision)
{
    (void)burst;
    (void)precision;
    if (q->count > ALGO_SLIDING_LOG_MAX)
        return -SLUICE_ERANGE;
    q->limit = q->count;
    return 0;
}

const struct algo_ops algo_sliding_log_ops = {
    .name = "sliding-log",
    .why_local = "exactness needs every timestamp",
    .flags = 0,
    .carry = ALGO_CARRY_ABSOLUTE,
    .params = algo_sliding_log_params,
    .state_size = algo_sliding_log_state_size,
    .init = algo_sliding_log_init,
    .eval = algo_sliding_log_eval,
    .refund = algo_sliding_log_refund,
    .drained = algo_sliding_log_drained,
    .consume = algo_sliding_log_consume,
    .free = algo_sliding_log_free,
};
