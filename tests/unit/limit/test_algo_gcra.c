/*
 * The gcra adapter: it must answer exactly as the redis-cell arithmetic in
 * gcra.c (the reference here), leave the state alone on a peek or an
 * earliest-fit query, bound refunds at a full key, and carry a consumed debt
 * until the rate repays it.
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
#include "gcra.h"
#include "testutil.h"

#define MS 1000000LL

static uint64_t rng;

static void test_matches_gcra_core(void **unused)
{
    for (int round = 0; round < 30; round++) {
        struct algo_params p;
        struct gcra_params g;
        int64_t burst = test_rand_range(&rng, 0, 30);
        int64_t count = test_rand_range(&rng, 1, 100);
        int64_t period = test_rand_range(&rng, 1, 100000) * MS;
        int64_t st, ref = GCRA_TAT_FULL;
        assert_int_equal(algo_params_init(&p, ALGO_GCRA, burst, count, period, 0), 0);
        assert_int_equal(gcra_params_init(&g, burst, count, period), 0);
        assert_int_equal(algo_state_size(&p), sizeof(int64_t));
        algo_init(&p, &st);
        int64_t now = test_rand_range(&rng, 0, 1000 * MS);
        for (int step = 0; step < 2000; step++) {
            struct algo_result a;
            struct gcra_result b;
            int64_t q = test_rand_range(&rng, 0, burst + 2);
            now += test_rand_range(&rng, 0, 2 * period / count);
            assert_int_equal(algo_decide(&p, &st, q, now, &a), 0);
            assert_int_equal(gcra_decide(&ref, &g, q, now, &b), 0);
            assert_int_equal(a.limited, b.limited);
            assert_int_equal(a.remaining, b.remaining);
            assert_int_equal(a.retry_after_ns, b.limited ? b.retry_after_ns : ALGO_NEVER);
            assert_int_equal(a.reset_after_ns, b.reset_after_ns);
            assert_int_equal(st, ref);
        }
    }
}

static void test_refund_bounds(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    int64_t st;
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, 4, 1, 1000 * MS, 0), 0); /* limit 5 */
    algo_init(&p, &st);
    int64_t now = 10000 * MS;
    assert_int_equal(algo_decide(&p, &st, 3, now, &r), 0);
    assert_int_equal(r.remaining, 2);
    assert_int_equal(algo_refund(&p, &st, 1, now), 0);
    assert_int_equal(algo_decide(&p, &st, 0, now, &r), 0);
    assert_int_equal(r.remaining, 3);
    assert_int_equal(algo_refund(&p, &st, 1000, now), 0); /* not beyond full */
    assert_int_equal(algo_decide(&p, &st, 0, now, &r), 0);
    assert_int_equal(r.remaining, 5);
    assert_int_equal(algo_decide(&p, &st, 6, now, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(algo_drained(&p, &st, now), 1);
}

static void test_debt_repaid_at_rate(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    int64_t st, delay;
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, 4, 1, 1000 * MS, 0), 0);
    algo_init(&p, &st);
    int64_t now = 10000 * MS;
    assert_int_equal(algo_consume(&p, &st, 20, now), 0); /* 15 beyond the limit */
    assert_int_equal(algo_earliest_fit(&p, &st, 1, now, &delay), 0);
    assert_int_equal(delay, 16000 * MS);
    assert_int_equal(algo_decide(&p, &st, 1, now + delay - 1, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(algo_decide(&p, &st, 1, now + delay, &r), 0);
    assert_int_equal(r.limited, 0);
}

int main(void)
{
    rng = test_seed("test_algo_gcra");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_gcra_core),
        cmocka_unit_test(test_refund_bounds),
        cmocka_unit_test(test_debt_repaid_at_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
