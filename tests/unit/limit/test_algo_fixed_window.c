/*
 * fixed-window against a literal count of admitted units per window index,
 * and its documented weak spot: 2x the limit across a boundary.
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
#define MAXADM 4000

static uint64_t rng;

struct adm {
    int64_t t, q;
};
static struct adm adm[MAXADM];
static size_t nadm;

/* Units admitted in window idx, counted from the full history. */
static int64_t model_used(int64_t idx, int64_t period)
{
    int64_t used = 0;
    for (size_t i = 0; i < nadm; i++)
        if (adm[i].t / period == idx)
            used += adm[i].q;
    return used;
}

static void test_against_model(void **unused)
{
    for (int round = 0; round < 20; round++) {
        struct algo_params p;
        int64_t n = test_rand_range(&rng, 1, 50);
        int64_t period = test_rand_range(&rng, 1, 1000) * MS + test_rand_range(&rng, 0, 999);
        int64_t st[2];
        assert_int_equal(algo_params_init(&p, ALGO_FIXED_WINDOW, 0, n, period, 0), 0);
        assert_int_equal(algo_state_size(&p), sizeof(st));
        algo_init(&p, st);
        int64_t now = test_rand_range(&rng, 0, 100 * period);
        nadm = 0;
        for (int step = 0; step < 2000; step++) {
            struct algo_result r;
            int64_t q = test_rand_range(&rng, 0, n / 2 + 1);
            now += test_rand_range(&rng, 0, period / 7);
            int64_t idx = now / period;
            int64_t used = model_used(idx, period);
            int64_t end = (idx + 1) * period - now;
            assert_int_equal(algo_decide(&p, st, q, now, &r), 0);
            if (q > n) {
                assert_int_equal(r.limited, 1);
            } else if (used + q <= n) {
                assert_int_equal(r.limited, 0);
                if (q > 0) {
                    adm[nadm].t = now;
                    adm[nadm++].q = q;
                }
                used += q;
            } else {
                assert_int_equal(r.limited, 1);
                assert_int_equal(r.retry_after_ns, end);
            }
            assert_int_equal(r.remaining, n - used);
            assert_int_equal(r.reset_after_ns, used ? end : 0);
        }
    }
}

/* The weak spot, asserted: n at the last ns of a window and n at the first
 * ns of the next are all admitted, 2n within 2 ns. */
static void test_double_at_boundary(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    int64_t st[2];
    const int64_t n = 100, period = 60000 * MS;
    assert_int_equal(algo_params_init(&p, ALGO_FIXED_WINDOW, 0, n, period, 0), 0);
    algo_init(&p, st);
    assert_int_equal(algo_decide(&p, st, n, period - 1, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_int_equal(r.reset_after_ns, 1);
    assert_int_equal(algo_decide(&p, st, n, period, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_int_equal(algo_decide(&p, st, 1, period + 1, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(r.retry_after_ns, period - 1);
}

/* Refund lowers the counter but never below zero; a debt poured by consume
 * is forgiven at the next boundary. */
static void test_refund_and_debt(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    int64_t st[2];
    assert_int_equal(algo_params_init(&p, ALGO_FIXED_WINDOW, 0, 5, 1000, 0), 0);
    algo_init(&p, st);
    assert_int_equal(algo_decide(&p, st, 3, 10, &r), 0);
    assert_int_equal(algo_refund(&p, st, 100, 20), 0);
    assert_int_equal(algo_decide(&p, st, 0, 30, &r), 0);
    assert_int_equal(r.remaining, 5);
    assert_int_equal(algo_drained(&p, st, 30), 1);
    assert_int_equal(algo_consume(&p, st, 12, 40), 0);
    assert_int_equal(algo_decide(&p, st, 1, 50, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(algo_consume(&p, st, 12, 5), 0); /* dated before: same window */
    assert_int_equal(algo_decide(&p, st, 1, 1000, &r), 0);
    assert_int_equal(r.limited, 0);
}

/* A phase moves every boundary earlier by that much (calendar alignment):
 * with phase 300, windows of 1000 are [700, 1700), [1700, 2700)...; only
 * fixed-window takes one, within [0, period). */
static void test_phase(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    int64_t st[2];
    assert_int_equal(algo_params_init(&p, ALGO_FIXED_WINDOW, 0, 2, 1000, 0), 0);
    assert_int_equal(algo_params_set_phase(&p, 1000), -SLUICE_EINVAL);
    assert_int_equal(algo_params_set_phase(&p, -1), -SLUICE_EINVAL);
    assert_int_equal(algo_params_set_phase(&p, 300), 0);
    algo_init(&p, st);
    assert_int_equal(algo_decide(&p, st, 2, 699, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_int_equal(r.reset_after_ns, 1);
    assert_int_equal(algo_decide(&p, st, 2, 700, &r), 0); /* a new window at 700 */
    assert_int_equal(r.limited, 0);
    assert_int_equal(algo_decide(&p, st, 1, 1000, &r), 0); /* not at 1000 */
    assert_int_equal(r.limited, 1);
    assert_int_equal(r.retry_after_ns, 700);
    assert_int_equal(algo_drained(&p, st, 1699), 0);
    assert_int_equal(algo_drained(&p, st, 1700), 1);
    struct algo_params g;
    assert_int_equal(algo_params_init(&g, ALGO_GCRA, 1, 2, 1000, 0), 0);
    assert_int_equal(algo_params_set_phase(&g, 1), -SLUICE_EINVAL);
}

int main(void)
{
    rng = test_seed("test_algo_fixed_window");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_double_at_boundary),
        cmocka_unit_test(test_refund_and_debt),
        cmocka_unit_test(test_phase),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
