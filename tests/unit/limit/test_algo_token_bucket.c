/*
 * token-bucket against two independent references: GCRA (the same limit
 * expressed as a theoretical arrival time; when period is a multiple of
 * count both are exact and must agree on every decision and retry time),
 * and the token-bucket bound checked by brute force over every pair of
 * admissions: at most capacity + elapsed*count/period in any span.  Plus
 * the absence of drift over a long run.
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
#define MAXADM 3000

static uint64_t rng;

static void test_agrees_with_gcra(void **unused)
{
    for (int round = 0; round < 30; round++) {
        struct algo_params tb, gc;
        int64_t burst = test_rand_range(&rng, 0, 20);
        int64_t count = test_rand_range(&rng, 1, 50);
        int64_t period = count * test_rand_range(&rng, 1, 100) * MS; /* exact interval */
        int64_t tbs[2], tat;
        assert_int_equal(algo_params_init(&tb, ALGO_TOKEN_BUCKET, burst, count, period, 0), 0);
        assert_int_equal(algo_params_init(&gc, ALGO_GCRA, burst, count, period, 0), 0);
        algo_init(&tb, tbs);
        algo_init(&gc, &tat);
        int64_t now = test_rand_range(&rng, 0, 1000 * MS);
        for (int step = 0; step < 3000; step++) {
            struct algo_result a, b;
            int64_t q = test_rand_range(&rng, 0, burst + 2);
            now += test_rand_range(&rng, 0, 2 * period / count);
            assert_int_equal(algo_decide(&tb, tbs, q, now, &a), 0);
            assert_int_equal(algo_decide(&gc, &tat, q, now, &b), 0);
            assert_int_equal(a.limited, b.limited);
            assert_int_equal(a.retry_after_ns, b.retry_after_ns);
            assert_int_equal(a.reset_after_ns, b.reset_after_ns);
            assert_int_equal(a.limit, b.limit);
        }
    }
}

static void test_bound_brute_force(void **unused)
{
    static int64_t adm[MAXADM];
    for (int round = 0; round < 20; round++) {
        struct algo_params p;
        int64_t burst = test_rand_range(&rng, 0, 10);
        int64_t count = test_rand_range(&rng, 1, 30);
        int64_t period = test_rand_range(&rng, 1, 1000) * MS + test_rand_range(&rng, 0, 999);
        int64_t st[2];
        size_t n = 0;
        assert_int_equal(algo_params_init(&p, ALGO_TOKEN_BUCKET, burst, count, period, 0), 0);
        algo_init(&p, st);
        int64_t now = 0;
        for (int step = 0; step < 4000 && n < MAXADM; step++) {
            struct algo_result r;
            now += test_rand_range(&rng, 0, period / count);
            assert_int_equal(algo_decide(&p, st, 1, now, &r), 0);
            if (!r.limited)
                adm[n++] = now;
        }
        /* in [adm[i], adm[j]]: j-i+1 units <= capacity + refill over the span */
        for (size_t i = 0; i < n; i++) {
            for (size_t j = i; j < n; j++) {
                __int128 units = (__int128)(j - i + 1) * period;
                __int128 allowed =
                    (__int128)(burst + 1) * period + (__int128)(adm[j] - adm[i]) * count;
                assert_true(units <= allowed);
            }
        }
        assert_true(n > 0);
    }
}

/* 1/3 token per ... : count 3 per 1 s is 333333333.33 ns per token; taking
 * everything once per second for 100000 s must admit exactly
 * capacity + 3 per second, with no token lost to rounding. */
static void test_no_drift(void **unused)
{
    struct algo_params p;
    int64_t st[2], total = 0;
    const int64_t secs = 100000;
    assert_int_equal(algo_params_init(&p, ALGO_TOKEN_BUCKET, 4, 3, 1000 * MS, 0), 0);
    algo_init(&p, st);
    for (int64_t s = 0; s <= secs; s++) {
        struct algo_result r;
        int64_t t = s * 1000 * MS;
        assert_int_equal(algo_decide(&p, st, 0, t, &r), 0);
        if (r.remaining > 0) {
            int64_t take = r.remaining;
            assert_int_equal(algo_decide(&p, st, take, t, &r), 0);
            assert_int_equal(r.limited, 0);
            total += take;
        }
    }
    assert_int_equal(total, 5 + 3 * secs);
}

/* Refund never exceeds capacity; consume creates a debt repaid at the rate. */
static void test_refund_and_debt(void **unused)
{
    struct algo_params p;
    struct algo_result r;
    int64_t st[2];
    assert_int_equal(algo_params_init(&p, ALGO_TOKEN_BUCKET, 4, 1, 1000, 0), 0); /* cap 5 */
    algo_init(&p, st);
    assert_int_equal(algo_decide(&p, st, 2, 0, &r), 0);
    assert_int_equal(r.remaining, 3);
    assert_int_equal(algo_refund(&p, st, 50, 0), 0);
    assert_int_equal(algo_decide(&p, st, 0, 0, &r), 0);
    assert_int_equal(r.remaining, 5);
    assert_int_equal(algo_consume(&p, st, 15, 0), 0); /* 10 in debt */
    assert_int_equal(algo_decide(&p, st, 1, 0, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(r.retry_after_ns, 11 * 1000);
    assert_int_equal(r.reset_after_ns, 15 * 1000);
    assert_int_equal(algo_decide(&p, st, 1, 11 * 1000, &r), 0);
    assert_int_equal(r.limited, 0);
}

int main(void)
{
    rng = test_seed("test_algo_token_bucket");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agrees_with_gcra),
        cmocka_unit_test(test_bound_brute_force),
        cmocka_unit_test(test_no_drift),
        cmocka_unit_test(test_refund_and_debt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
