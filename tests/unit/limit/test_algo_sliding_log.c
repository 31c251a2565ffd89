/*
 * sliding-log against a brute-force model that keeps every admitted
 * timestamp; and its exactness: never more than N admitted in ANY half-open
 * span of one period, checked over all spans, where the fixed window over
 * the same traffic admits 2N.
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
#define MAXADM 20000

static uint64_t rng;

/* Every admitted unit's timestamp, in order; refunds remove the newest. */
static int64_t adm[MAXADM];
static size_t nadm;

static int64_t model_live(int64_t now, int64_t period, size_t *first)
{
    size_t i = 0;
    while (i < nadm && adm[i] + period <= now)
        i++;
    *first = i;
    return (int64_t)(nadm - i);
}

/* No span [t, t + period) holds more than n admitted units. */
static int64_t worst_span(const int64_t *ts, size_t n, int64_t period)
{
    int64_t worst = 0;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (j < i)
            j = i;
        while (j < n && ts[j] < ts[i] + period)
            j++;
        if ((int64_t)(j - i) > worst)
            worst = (int64_t)(j - i);
    }
    return worst;
}

static void test_against_model(void **unused)
{
    for (int round = 0; round < 20; round++) {
        struct algo_params p;
        int64_t n = test_rand_range(&rng, 1, 30);
        int64_t period = test_rand_range(&rng, 1, 1000) * MS;
        assert_int_equal(algo_params_init(&p, ALGO_SLIDING_LOG, 0, n, period, 0), 0);
        void *st = calloc(1, algo_state_size(&p));
        algo_init(&p, st);
        int64_t now = test_rand_range(&rng, 0, 10 * period);
        nadm = 0;
        for (int step = 0; step < 2000 && nadm + (size_t)n < MAXADM; step++) {
            struct algo_result r;
            int64_t q = test_rand_range(&rng, 0, n + 1);
            size_t first;
            now += test_rand_range(&rng, 0, period / 5);
            if (test_rand_range(&rng, 0, 15) == 0) {
                int64_t back = test_rand_range(&rng, 1, 3);
                int64_t live = model_live(now, period, &first);
                assert_int_equal(algo_refund(&p, st, back, now), 0);
                nadm -= (size_t)(back < live ? back : live);
                continue;
            }
            int64_t live = model_live(now, period, &first);
            assert_int_equal(algo_decide(&p, st, q, now, &r), 0);
            if (q > n) {
                assert_int_equal(r.limited, 1);
                assert_int_equal(r.retry_after_ns, ALGO_NEVER);
            } else if (live + q <= n) {
                assert_int_equal(r.limited, 0);
                for (int64_t k = 0; k < q; k++)
                    adm[nadm++] = now;
                live += q;
            } else {
                int64_t k = live + q - n; /* the k-th oldest live entry must age out */
                assert_int_equal(r.limited, 1);
                assert_int_equal(r.retry_after_ns, adm[first + (size_t)k - 1] + period - now);
            }
            assert_int_equal(r.remaining, n - live);
            assert_int_equal(r.reset_after_ns, live ? adm[nadm - 1] + period - now : 0);
        }
        /* exact: no period-long span ever held more than n */
        assert_true(worst_span(adm, nadm, period) <= n);
        algo_free(&p, st);
        free(st);
    }
}

/* The fixed window's weak spot, and the log's answer to it: N units at the
 * end of one window and N at the start of the next. */
static void test_boundary_burst(void **unused)
{
    const int64_t n = 10, period = 1000 * MS;
    struct algo_params fw, sl;
    int64_t fws[2], *sls;
    int64_t fw_ok = 0, sl_ok = 0;
    assert_int_equal(algo_params_init(&fw, ALGO_FIXED_WINDOW, 0, n, period, 0), 0);
    assert_int_equal(algo_params_init(&sl, ALGO_SLIDING_LOG, 0, n, period, 0), 0);
    sls = calloc(1, algo_state_size(&sl));
    algo_init(&fw, fws);
    algo_init(&sl, sls);
    for (int64_t t = period - n; t < period + n; t++) { /* 2n ns around a boundary */
        struct algo_result r;
        assert_int_equal(algo_decide(&fw, fws, 1, t, &r), 0);
        fw_ok += !r.limited;
        assert_int_equal(algo_decide(&sl, sls, 1, t, &r), 0);
        sl_ok += !r.limited;
    }
    assert_int_equal(fw_ok, 2 * n); /* the documented 2x */
    assert_int_equal(sl_ok, n);
    algo_free(&sl, sls);
    free(sls);
}

/* Denied calls record nothing: after a flood of denials the key drains one
 * period after the last ADMITTED unit (the sorted-set recipe would not). */
static void test_denials_add_nothing(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_LOG, 0, 3, 100 * MS, 0), 0);
    void *st = calloc(1, algo_state_size(&p));
    algo_init(&p, st);
    for (int i = 0; i < 3; i++)
        assert_int_equal(algo_decide(&p, st, 1, 0, &r), 0);
    for (int64_t t = 1; t < 100 * MS; t += MS) {
        assert_int_equal(algo_decide(&p, st, 1, t, &r), 0);
        assert_int_equal(r.limited, 1);
    }
    assert_int_equal(algo_drained(&p, st, 100 * MS), 1);
    assert_int_equal(algo_decide(&p, st, 3, 100 * MS, &r), 0);
    assert_int_equal(r.limited, 0);
    algo_free(&p, st);
    free(st);
}

/* Quantity q on a full ring waits for the q-th oldest entry. */
static void test_quantity_waits_for_qth_oldest(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_LOG, 0, 4, 1000, 0), 0);
    void *st = calloc(1, algo_state_size(&p));
    algo_init(&p, st);
    for (int64_t t = 0; t < 4; t++)
        assert_int_equal(algo_decide(&p, st, 1, t * 100, &r), 0); /* at 0,100,200,300 */
    assert_int_equal(algo_decide(&p, st, 3, 500, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(r.retry_after_ns, 200 + 1000 - 500); /* third oldest, at 200 */
    assert_int_equal(algo_decide(&p, st, 3, 1200, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_int_equal(r.remaining, 0);
    algo_free(&p, st);
    free(st);
}

int main(void)
{
    rng = test_seed("test_algo_sliding_log");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_boundary_burst),
        cmocka_unit_test(test_denials_add_nothing),
        cmocka_unit_test(test_quantity_waits_for_qth_oldest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
