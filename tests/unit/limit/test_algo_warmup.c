/*
 * warmup (Guava's SmoothWarmingUp) against a reference model written here
 * from Guava's documentation, on a fake clock: the cost of taking stored
 * units is integrated numerically over the interval function (the
 * implementation uses the closed-form trapezoid), and the schedule is kept
 * as in the documentation (a request passes when the next free time is at
 * most burst stable intervals ahead; it pays its cost forward).  Randomized
 * rounds mix cold starts, saturating runs (warm-up), pauses (cool-down),
 * quantities above 1, peeks and refunds.  Then the documented shape: from
 * cold under saturating demand, admitted per second rises from about
 * rate/cold_factor to the rate over the warm-up period.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algo.h"
#include "testutil.h"

#define MS ((int64_t)1000000)
#define S  ((int64_t)1000000000)

static uint64_t rng;

/* ---- the reference model ---- */

struct model {
    double stable, cold, warmup, threshold, max, cooldown;
    int64_t burst, limit;
    int64_t next; /* ns, as the implementation keeps it */
    double stored;
};

static void model_init(struct model *m, int64_t burst, int64_t count, int64_t period,
                       int64_t warmup, int64_t factor)
{
    /* Guava: stableInterval = 1/rate; coldInterval = coldFactor * stable;
     * thresholdPermits = 0.5 * warmupPeriod / stableInterval;
     * maxPermits = threshold + 2 * warmupPeriod / (stable + cold). */
    memset(m, 0, sizeof(*m));
    m->stable = (double)period / (double)count;
    m->cold = (double)factor * m->stable;
    m->warmup = (double)warmup;
    m->threshold = 0.5 * m->warmup / m->stable;
    m->max = m->threshold + 2.0 * m->warmup / (m->stable + m->cold);
    m->cooldown = m->warmup / m->max; /* Guava's coolDownIntervalMicros */
    m->burst = burst;
    m->limit = burst + 1;
    m->stored = m->max; /* starts cold */
}

/* ns per unit at x stored units. */
static double model_interval(const struct model *m, double x)
{
    if (x <= m->threshold)
        return m->stable;
    return m->stable + (x - m->threshold) * (m->cold - m->stable) / (m->max - m->threshold);
}

/* Integral of f over [a, b] by the midpoint rule on slices. */
static double model_integral(const struct model *m, double a, double b)
{
    double t = 0;
    int slices = 1024;
    double h = (b - a) / slices;
    for (int i = 0; i < slices && b > a; i++)
        t += model_interval(m, a + (i + 0.5) * h) * h;
    return t;
}

/* Integral of the interval from stored-take to stored, split at the
 * threshold (the midpoint rule is then exact on each linear piece), then
 * the units beyond the stored ones at the stable rate. */
static double model_cost(const struct model *m, double qty)
{
    double take = qty < m->stored ? qty : m->stored;
    double lo = m->stored - take, hi = m->stored, k = m->threshold;
    double t = lo < k ? model_integral(m, lo, hi < k ? hi : k) : 0;
    t += hi > k ? model_integral(m, lo > k ? lo : k, hi) : 0;
    return t + (qty - take) * m->stable;
}

static void model_resync(struct model *m, int64_t now)
{
    if (now > m->next) {
        m->stored = fmin(m->max, m->stored + (double)(now - m->next) / m->cooldown);
        m->next = now;
    }
}

/* How far the decision at now is from the boundary, ns (> 0: passes). */
static double model_margin(struct model *m, int64_t now)
{
    model_resync(m, now);
    return (double)m->burst * m->stable - (double)(m->next - now);
}

static void model_take(struct model *m, int64_t now, int64_t qty)
{
    double c = model_cost(m, (double)qty);
    m->next = (m->next > now ? m->next : now) + (int64_t)ceil(c);
    m->stored -= fmin((double)qty, m->stored);
}

/* ---- model against implementation ---- */

static void check_close(int64_t got, int64_t want, int64_t tol, const char *what, int round,
                        int step)
{
    if (llabs(got - want) > tol)
        fail_msg("round %d step %d: %s %lld, the model says %lld", round, step, what,
                 (long long)got, (long long)want);
}

static void test_against_model(void **unused)
{
    (void)unused;
    for (int round = 0; round < 40; round++) {
        int64_t burst = test_rand_range(&rng, 0, 5);
        int64_t count = test_rand_range(&rng, 1, 200);
        int64_t period = test_rand_range(&rng, 1, 10) * S;
        int64_t warmup = test_rand_range(&rng, 1, 20) * S / 2;
        int64_t factor = test_rand_range(&rng, 1, 6);
        struct algo_params p;
        assert_int_equal(algo_params_init(&p, ALGO_WARMUP, burst, count, period, 0), 0);
        assert_int_equal(algo_params_set_warmup(&p, warmup, factor), 0);
        void *st = calloc(1, algo_state_size(&p));
        assert_non_null(st);
        algo_init(&p, st);
        struct model m;
        model_init(&m, burst, count, period, warmup, factor);
        int64_t now = test_rand_range(&rng, 0, 1000) * MS;
        int64_t stable = period / count;
        for (int step = 0; step < 1500; step++) {
            /* Mostly saturating (warms up), sometimes a pause long enough
             * to cool down partly or fully. */
            int64_t r = test_rand_range(&rng, 0, 99);
            if (r < 70)
                now += test_rand_range(&rng, 0, stable);
            else if (r < 95)
                now += test_rand_range(&rng, 0, 4 * stable);
            else
                now += test_rand_range(&rng, 0, 2 * warmup);
            int64_t op = test_rand_range(&rng, 0, 9);
            struct algo_result res;
            if (op == 0) { /* refund */
                int64_t q = test_rand_range(&rng, 1, 3);
                assert_int_equal(algo_refund(&p, st, q, now), 0);
                model_resync(&m, now);
                int64_t back = (int64_t)ceil((double)q * m.stable);
                m.next = m.next - back > now ? m.next - back : now;
                continue;
            }
            int64_t q = op == 1 ? 0 : test_rand_range(&rng, 1, burst + 2);
            assert_int_equal(algo_decide(&p, st, q, now, &res), 0);
            double margin = model_margin(&m, now);
            assert_int_equal(res.limit, m.limit);
            /* q above burst + 1 is decided as any other and pays its
             * cost forward, as Guava's acquire(n). */
            int want_limited = q > 0 && margin < 0;
            if (fabs(margin) <= 4.0) {
                /* Within rounding of the boundary: the implementation's call;
                 * the model follows it. */
                want_limited = res.limited;
            }
            if (res.limited != want_limited)
                fail_msg("round %d step %d: qty %lld at %lld: limited %d, the model says %d "
                         "(margin %.1f ns)",
                         round, step, (long long)q, (long long)now, res.limited, want_limited,
                         margin);
            if (q > 0 && !want_limited)
                model_take(&m, now, q);
            if (res.limited)
                check_close(res.retry_after_ns, (int64_t)ceil(-margin),
                            16 + (int64_t)(-margin / 1e6), "retry_after", round, step);
            double ahead = (double)(m.next - now), tol = (double)m.burst * m.stable;
            int64_t rem = ahead <= tol ? (int64_t)floor((tol - ahead) / m.stable) + 1 : 0;
            if (rem > m.limit)
                rem = m.limit;
            double d = fmod(fabs(tol - ahead), m.stable);
            double near = d < m.stable - d ? d : m.stable - d; /* to a whole unit */
            if (res.remaining != rem && near > 16 + fabs(tol - ahead) / 1e6)
                fail_msg("round %d step %d: remaining %lld, the model says %lld", round, step,
                         (long long)res.remaining, (long long)rem);
            int64_t reset =
                (m.next > now ? m.next - now : 0) + (int64_t)ceil((m.max - m.stored) * m.cooldown);
            check_close(res.reset_after_ns, reset, 16 + reset / 1000000, "reset_after", round,
                        step);
        }
        /* A long idle cools the key to a fresh one: once the schedule has
         * passed and idleness has refilled every stored unit (the model's
         * time to fresh, with its rounding margin). */
        model_resync(&m, now);
        int64_t fresh =
            (m.next > now ? m.next - now : 0) + (int64_t)ceil((m.max - m.stored) * m.cooldown);
        assert_int_equal(algo_drained(&p, st, now + fresh + 16 + fresh / 1000000), 1);
        free(st);
    }
}

/* ---- the documented shape ---- */

/* Admitted in each second of saturating demand (a request every 1 ms) from
 * cold: rate 100/s, warm-up 10 s, cold factor 3, burst 0. */
static void test_shape_from_cold(void **unused)
{
    (void)unused;
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_WARMUP, 0, 100, S, 0), 0);
    assert_int_equal(algo_params_set_warmup(&p, 10 * S, 3), 0);
    int64_t st[2];
    algo_init(&p, st);
    int per_s[14] = {0};
    for (int64_t t = 0; t < 14 * S; t += MS) {
        struct algo_result r;
        assert_int_equal(algo_decide(&p, st, 1, t, &r), 0);
        per_s[t / S] += !r.limited;
    }
    printf("  admitted per second from cold:");
    for (int i = 0; i < 14; i++)
        printf(" %d", per_s[i]);
    printf("\n");
    /* The first second runs at about rate/cold_factor (a cold unit costs
     * 30 ms), the rate rises monotonically (give or take one) while the
     * stored units above the threshold are used up, and after the warm-up
     * period it is the full 100/s. */
    assert_true(per_s[0] >= 33 && per_s[0] <= 40);
    for (int i = 1; i < 14; i++)
        assert_true(per_s[i] + 1 >= per_s[i - 1]);
    assert_true(per_s[4] < 60);
    for (int i = 11; i < 14; i++)
        assert_true(per_s[i] >= 99 && per_s[i] <= 101);
    /* The area under the cost line from the threshold to max is the warm-up
     * period: the units between them, 2 W / (stable + cold) = 500, take
     * 10 s of saturating demand.  Requests every 1 ms arrive up to 1 ms
     * after the schedule, and that slack refills a tenth of a unit each
     * time (one unit per W / max = 10 ms of idleness), as in Guava: so a
     * little under 500 in the first 10 s. */
    int first10 = 0;
    for (int i = 0; i < 10; i++)
        first10 += per_s[i];
    assert_true(first10 >= 430 && first10 <= 520);

    /* Idle for the warm-up period: cold again, and the first second is
     * slow again. */
    int64_t t0 = 14 * S + 10 * S;
    int again = 0;
    for (int64_t t = t0; t < t0 + S; t += MS) {
        struct algo_result r;
        assert_int_equal(algo_decide(&p, st, 1, t, &r), 0);
        again += !r.limited;
    }
    assert_true(again >= 33 && again <= 40);
}

/* Idleness refills stored units at max / W a second: below the threshold
 * (half the warm-up of idleness) the key stays warm; past it, it is partly
 * cold, and the next second admits between the cold and the warm rate. */
static void test_partial_cool_down(void **unused)
{
    (void)unused;
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_WARMUP, 0, 100, S, 0), 0);
    assert_int_equal(algo_params_set_warmup(&p, 8 * S, 3), 0);
    int64_t st[2];
    algo_init(&p, st);
    int64_t t = 0;
    for (; t < 20 * S; t += MS) {
        struct algo_result r;
        assert_int_equal(algo_decide(&p, st, 1, t, &r), 0);
    }
    int n = 0;
    t += 3 * S; /* under half the warm-up: still warm */
    for (int64_t e = t + S; t < e; t += MS) {
        struct algo_result r;
        assert_int_equal(algo_decide(&p, st, 1, t, &r), 0);
        n += !r.limited;
    }
    assert_true(n >= 99);
    t += 4 * S; /* stored units refill past the threshold */
    n = 0;
    for (int64_t e = t + S; t < e; t += MS) {
        struct algo_result r;
        assert_int_equal(algo_decide(&p, st, 1, t, &r), 0);
        n += !r.limited;
    }
    printf("  partly cooled: %d admitted in the next second\n", n);
    assert_true(n > 40 && n < 100);
}

static void test_parameters(void **unused)
{
    (void)unused;
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_WARMUP, 4, 10, S, 0), 0);
    assert_int_equal(p.warmup_ns, S); /* one period by default */
    assert_int_equal(p.cold_factor, 3);
    assert_int_equal(p.limit, 5);
    assert_int_equal(algo_params_set_warmup(&p, 0, 3), -SLUICE_EINVAL);
    assert_int_equal(algo_params_set_warmup(&p, S, 0), -SLUICE_EINVAL);
    assert_int_equal(algo_params_set_warmup(&p, S, ALGO_COLD_FACTOR_MAX + 1), -SLUICE_EINVAL);
    assert_int_equal(algo_params_set_warmup(&p, INT64_MAX, ALGO_COLD_FACTOR_MAX), 0);
    assert_int_equal(algo_params_init(&p, ALGO_WARMUP, -1, 10, S, 0), -SLUICE_EINVAL);
    struct algo_params g;
    assert_int_equal(algo_params_init(&g, ALGO_GCRA, 4, 10, S, 0), 0);
    assert_int_equal(algo_params_set_warmup(&g, S, 3), -SLUICE_EINVAL);
    assert_false(algo_can_be_global(ALGO_WARMUP));
    assert_true(algo_has_burst(ALGO_WARMUP));
    enum algo_kind k;
    assert_int_equal(algo_from_name("warmup", &k), 0);
    assert_int_equal(k, ALGO_WARMUP);
    /* Extreme times stay defined: a cold unit of a huge warm-up, qty at the
     * limit, now near INT64_MAX. */
    assert_int_equal(algo_params_init(&p, ALGO_WARMUP, 1000, 1, INT64_MAX / 2, 0), 0);
    assert_int_equal(algo_params_set_warmup(&p, INT64_MAX, ALGO_COLD_FACTOR_MAX), 0);
    int64_t st[2];
    algo_init(&p, st);
    struct algo_result r;
    assert_int_equal(algo_decide(&p, st, 1001, INT64_MAX - 1, &r), 0);
    assert_int_equal(algo_decide(&p, st, 1001, INT64_MAX, &r), 0);
    assert_true(r.retry_after_ns >= 0 || r.retry_after_ns == ALGO_NEVER);
    assert_true(r.reset_after_ns >= 0);
    assert_int_equal(algo_refund(&p, st, INT64_MAX, INT64_MAX), 0);
    assert_int_equal(algo_consume(&p, st, INT64_MAX, 0), 0);
}

/* warmup's options as limits spell them: found by config key and SL.*
 * word, set one at a time with the other value kept, refused on another
 * algorithm or out of range with the params unchanged. */
static void test_options(void **unused)
{
    (void)unused;
    int w = algo_option_find("warmup", 6, 0), c = algo_option_find("cold_factor", 11, 0);
    assert_true(w >= 0 && w < ALGO_OPTIONS_MAX && c >= 0 && c < ALGO_OPTIONS_MAX);
    assert_int_equal(algo_option_find("WARMUP", 6, 1), w);
    assert_int_equal(algo_option_find("cold", 4, 1), c);                /* words in any case */
    assert_int_equal(algo_option_find("WARMUP", 6, 0), -SLUICE_ENOENT); /* keys are exact */
    assert_int_equal(algo_option_find("COLD_FACTOR", 11, 1), -SLUICE_ENOENT);
    enum algo_kind k;
    const struct algo_option *o = algo_option_at((size_t)w, &k);
    assert_int_equal(k, ALGO_WARMUP);
    assert_int_equal(o->type, ALGO_VALUE_NS);
    assert_string_equal(o->shown, "warmup_ms");
    char buf[64];
    assert_string_equal(algo_option_list(ALGO_WARMUP, 0, "", buf, sizeof(buf)),
                        "warmup and cold_factor");
    assert_string_equal(algo_option_list(ALGO_WARMUP, 1, "RATE", buf, sizeof(buf)),
                        "RATE, WARMUP and COLD");

    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_WARMUP, 4, 10, S, 0), 0);
    int64_t vals[ALGO_OPTIONS_MAX] = {0};
    int given[ALGO_OPTIONS_MAX] = {0};
    vals[c] = 5;
    given[c] = 1;
    assert_int_equal(algo_params_set_options(&p, vals, given), 0);
    assert_int_equal(p.cold_factor, 5);
    assert_int_equal(p.warmup_ns, S); /* kept */
    assert_int_equal(algo_option_value(&p, algo_option_at((size_t)c, NULL)), 5);
    vals[w] = 10 * S;
    given[w] = 1;
    given[c] = 0;
    assert_int_equal(algo_params_set_options(&p, vals, given), 0);
    assert_int_equal(p.warmup_ns, 10 * S);
    assert_int_equal(p.cold_factor, 5);
    /* The same as the setter by name. */
    struct algo_params q;
    assert_int_equal(algo_params_init(&q, ALGO_WARMUP, 4, 10, S, 0), 0);
    assert_int_equal(algo_params_set_warmup(&q, 10 * S, 5), 0);
    assert_memory_equal(&p, &q, sizeof(p));
    /* Out of range: p unchanged. */
    vals[c] = ALGO_COLD_FACTOR_MAX + 1;
    given[c] = 1;
    assert_int_equal(algo_params_set_options(&p, vals, given), -SLUICE_EINVAL);
    assert_memory_equal(&p, &q, sizeof(p));
    /* Another algorithm's option. */
    struct algo_params g;
    assert_int_equal(algo_params_init(&g, ALGO_GCRA, 4, 10, S, 0), 0);
    vals[c] = 2;
    assert_int_equal(algo_params_set_options(&g, vals, given), -SLUICE_EINVAL);
}

int main(void)
{
    rng = test_seed("test_algo_warmup");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),     cmocka_unit_test(test_shape_from_cold),
        cmocka_unit_test(test_partial_cool_down), cmocka_unit_test(test_parameters),
        cmocka_unit_test(test_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
