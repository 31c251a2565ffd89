/*
 * sliding-window against a model that sums the admitted history by
 * sub-window index, and its documented error bound measured over randomized
 * traffic: any span of (precision-1) sub-windows admits at most count, any
 * span of one period at most count + the largest single sub-window's
 * admissions.  The measured worst over-admission per precision is printed.
 */
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

#define MS     1000000LL
#define MAXADM 6000

static uint64_t rng;

static int64_t adm_t[MAXADM]; /* one entry per admitted unit */
static size_t nadm;

static int64_t model_sum(int64_t c, int64_t w, int64_t prec)
{
    int64_t s = 0;
    for (size_t i = 0; i < nadm; i++) {
        int64_t b = adm_t[i] / w;
        if (b > c - prec && b <= c)
            s++;
    }
    return s;
}

/* Most units admitted in any half-open span of length len. */
static int64_t worst_span(int64_t len)
{
    int64_t worst = 0;
    size_t j = 0;
    for (size_t i = 0; i < nadm; i++) {
        if (j < i)
            j = i;
        while (j < nadm && adm_t[j] < adm_t[i] + len)
            j++;
        if ((int64_t)(j - i) > worst)
            worst = (int64_t)(j - i);
    }
    return worst;
}

/* gap 0: bursty arrivals; otherwise uniform gaps in [0, 2*gap] (steady demand). */
static void run(int64_t n, int64_t period, int64_t prec, int steps, int64_t gap, int64_t *over,
                int check)
{
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_WINDOW, 0, n, period, prec), 0);
    int64_t w = p.interval_ns;
    void *st = calloc(1, algo_state_size(&p));
    algo_init(&p, st);
    int64_t now = test_rand_range(&rng, 0, 3 * period);
    nadm = 0;
    for (int step = 0; step < steps && nadm + (size_t)n < MAXADM; step++) {
        struct algo_result r;
        int64_t q = gap > 0 ? 1 : test_rand_range(&rng, 0, 3);
        /* bursty arrivals: mostly dense, sometimes a long gap */
        if (gap > 0)
            now += test_rand_range(&rng, 0, 2 * gap);
        else
            now += test_rand_range(&rng, 0, 9) == 0 ? test_rand_range(&rng, 0, period)
                                                    : test_rand_range(&rng, 0, w / 3 + 1);
        int64_t c = now / w;
        int64_t sum = model_sum(c, w, prec);
        assert_int_equal(algo_decide(&p, st, q, now, &r), 0);
        if (check) {
            assert_int_equal(r.limited, q > 0 && sum + q > n);
            assert_int_equal(r.remaining, n - (r.limited ? sum : sum + q));
        }
        if (!r.limited)
            for (int64_t k = 0; k < q; k++)
                adm_t[nadm++] = now;
    }
    /* the documented bound */
    int64_t maxsub = 0;
    for (size_t i = 0, j; i < nadm; i = j) {
        for (j = i; j < nadm && adm_t[j] / w == adm_t[i] / w; j++)
            ;
        if ((int64_t)(j - i) > maxsub)
            maxsub = (int64_t)(j - i);
    }
    int64_t eff = w * prec; /* the effective period */
    if (prec > 1)
        assert_true(worst_span((prec - 1) * w) <= n);
    int64_t worst = worst_span(eff);
    assert_true(worst <= n + maxsub);
    *over = worst - n;
    algo_free(&p, st);
    free(st);
}

static void test_against_model(void **unused)
{
    for (int round = 0; round < 15; round++) {
        int64_t over;
        run(test_rand_range(&rng, 1, 40), test_rand_range(&rng, 10, 1000) * MS,
            test_rand_range(&rng, 1, 30), 1500, 0, &over, 1);
    }
}

/* Worst over-admission vs precision, printed (a measurement, the bound is
 * asserted inside run()). */
static void test_error_bound_vs_precision(void **unused)
{
    static const int64_t precs[] = {2, 5, 10, 50};
    const int64_t n = 100;
    for (size_t i = 0; i < sizeof(precs) / sizeof(precs[0]); i++) {
        int64_t worst = 0;
        for (int round = 0; round < 3; round++) {
            int64_t over;
            /* demand 1.5x the limit, spread evenly */
            run(n, 1000 * MS, precs[i], 3000, 1000 * MS / (n * 3 / 2), &over, 0);
            if (over > worst)
                worst = over;
        }
        fprintf(stderr,
                "sliding-window precision %3lld, steady demand 1.5x: worst over-admission %lld of "
                "%lld (%.1f%%)\n",
                (long long)precs[i], (long long)worst, (long long)n,
                100.0 * (double)worst / (double)n);
    }
}

/* Retry-after waits for exactly enough old sub-windows to leave. */
static void test_retry_after(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_WINDOW, 0, 10, 1000, 10), 0); /* w = 100 */
    void *st = calloc(1, algo_state_size(&p));
    algo_init(&p, st);
    assert_int_equal(algo_decide(&p, st, 4, 50, &r), 0);  /* sub-window 0 */
    assert_int_equal(algo_decide(&p, st, 6, 350, &r), 0); /* sub-window 3 */
    assert_int_equal(algo_decide(&p, st, 5, 420, &r), 0);
    assert_int_equal(r.limited, 1);
    /* 5 fit once sub-window 3 leaves: at (3 + 10) * 100 */
    assert_int_equal(r.retry_after_ns, 1300 - 420);
    assert_int_equal(algo_decide(&p, st, 4, 420, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(r.retry_after_ns, 1000 - 420); /* sub-window 0 leaves */
    assert_int_equal(r.reset_after_ns, 1300 - 420);
    assert_int_equal(algo_refund(&p, st, 7, 430), 0); /* newest first: 6 from sw 3, 1 from sw 0 */
    assert_int_equal(algo_decide(&p, st, 0, 430, &r), 0);
    assert_int_equal(r.remaining, 7);
    assert_int_equal(r.reset_after_ns, 1000 - 430);
    algo_free(&p, st);
    free(st);
}

int main(void)
{
    rng = test_seed("test_algo_sliding_window");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_error_bound_vs_precision),
        cmocka_unit_test(test_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
