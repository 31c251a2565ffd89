/*
 * Properties every algorithm of algo.h must have, checked over randomized
 * sequences on a fake clock for each algorithm:
 *  - a peek (quantity 0) changes nothing;
 *  - earliest_fit is exact: qty fits at now + delay and not one ns earlier,
 *    and equals the retry_after of a denied decision;
 *  - reset_after is exact: the key is drained then, and not one ns earlier;
 *  - remaining stays within [0, limit]; a refund never goes beyond a fresh
 *    key, and a huge refund drains it;
 *  - any int64 argument is answered without undefined behaviour.
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

#define MS 1000000LL

static uint64_t rng;

static void make(struct algo_params *p, enum algo_kind kind, int64_t burst, int64_t count,
                 int64_t period, int64_t precision)
{
    assert_int_equal(algo_params_init(p, kind, burst, count, period, precision), 0);
}

/* A copy of the state that includes the sliding log's ring contents is not
 * needed: eval with qty 0 must not touch the struct at all. */
static void check_properties(const struct algo_params *p)
{
    size_t sz = algo_state_size(p);
    void *st = calloc(1, sz);
    void *copy = malloc(sz);
    int64_t now = test_rand_range(&rng, 0, 1000 * MS);
    algo_init(p, st);
    for (int step = 0; step < 3000; step++) {
        struct algo_result r, r2;
        int64_t qty = test_rand_range(&rng, 0, p->limit + 1);
        int64_t delay;
        now += test_rand_range(&rng, 0, p->period_ns / 4);

        /* peek changes nothing */
        memcpy(copy, st, sz);
        assert_int_equal(algo_decide(p, st, 0, now, &r), 0);
        assert_int_equal(r.limited, 0);
        assert_memory_equal(copy, st, sz);
        assert_true(r.remaining >= 0 && r.remaining <= p->limit);

        /* reset_after is exact */
        assert_true(r.reset_after_ns >= 0);
        assert_int_equal(algo_drained(p, st, now + r.reset_after_ns), 1);
        if (r.reset_after_ns > 0)
            assert_int_equal(algo_drained(p, st, now + r.reset_after_ns - 1), 0);

        /* earliest_fit is exact */
        assert_int_equal(algo_earliest_fit(p, st, qty, now, &delay), 0);
        assert_memory_equal(copy, st, sz);
        if (qty > p->limit) {
            assert_int_equal(delay, ALGO_NEVER);
        } else if (delay > 0) {
            int64_t d2;
            assert_int_equal(algo_earliest_fit(p, st, qty, now + delay, &d2), 0);
            assert_int_equal(d2, 0);
            assert_int_equal(algo_earliest_fit(p, st, qty, now + delay - 1, &d2), 0);
            assert_true(d2 > 0);
        }

        assert_int_equal(algo_decide(p, st, qty, now, &r2), 0);
        assert_true(r2.remaining >= 0 && r2.remaining <= p->limit);
        assert_int_equal(r2.limit, p->limit);
        if (qty > p->limit) {
            assert_int_equal(r2.limited, 1);
            assert_int_equal(r2.retry_after_ns, ALGO_NEVER);
        } else if (delay == 0) {
            assert_int_equal(r2.limited, 0);
            assert_int_equal(r2.retry_after_ns, ALGO_NEVER);
        } else {
            assert_int_equal(r2.limited, 1);
            assert_int_equal(r2.retry_after_ns, delay);
            assert_memory_equal(copy, st, sz); /* a denial changes nothing */
        }

        /* occasional bounded refunds */
        if (test_rand_range(&rng, 0, 9) == 0) {
            assert_int_equal(algo_refund(p, st, test_rand_range(&rng, 1, 3), now), 0);
            assert_int_equal(algo_decide(p, st, 0, now, &r), 0);
            assert_true(r.remaining <= p->limit);
        }
    }
    /* a refund of everything is a fresh key */
    assert_int_equal(algo_refund(p, st, INT64_MAX, now), 0);
    assert_int_equal(algo_drained(p, st, now), 1);
    algo_free(p, st);
    free(copy);
    free(st);
}

static void test_properties_all(void **unused)
{
    struct algo_params p;
    for (int round = 0; round < 4; round++) {
        int64_t burst = test_rand_range(&rng, 0, 20);
        int64_t count = test_rand_range(&rng, 1, 40);
        int64_t period = test_rand_range(&rng, 1, 2000) * MS + test_rand_range(&rng, 0, 999);
        make(&p, ALGO_GCRA, burst, count, period, 0);
        check_properties(&p);
        make(&p, ALGO_TOKEN_BUCKET, burst, count, period, 0);
        check_properties(&p);
        make(&p, ALGO_FIXED_WINDOW, 0, count, period, 0);
        check_properties(&p);
        make(&p, ALGO_SLIDING_WINDOW, 0, count, period, test_rand_range(&rng, 1, 20));
        check_properties(&p);
        make(&p, ALGO_SLIDING_LOG, 0, count, period, 0);
        check_properties(&p);
    }
}

static void test_params_refused(void **unused)
{
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, -1, 1, 1, 0), -SLUICE_EINVAL);
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, 0, 0, 1, 0), -SLUICE_EINVAL);
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, 0, 1, 0, 0), -SLUICE_EINVAL);
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, 0, 10, 5, 0), -SLUICE_ERANGE);
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, INT64_MAX, 1, 1000, 0), -SLUICE_ERANGE);
    assert_int_equal(algo_params_init(&p, ALGO_TOKEN_BUCKET, INT64_MAX / 2, 1, 1000, 0),
                     -SLUICE_ERANGE);
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_WINDOW, 0, 1, 1000, 1001), -SLUICE_EINVAL);
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_WINDOW, 0, 1, 5, 10), -SLUICE_ERANGE);
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_LOG, 0, ALGO_SLIDING_LOG_MAX + 1, 1, 0),
                     -SLUICE_ERANGE);
    assert_int_equal(algo_params_init(&p, (enum algo_kind)99, 0, 1, 1, 0), -SLUICE_EINVAL);
    /* an unvalidated params struct is refused by every call */
    memset(&p, 0, sizeof(p));
    int64_t st[4] = {0};
    struct algo_result r;
    assert_int_equal(algo_decide(&p, st, 1, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(algo_state_size(&p), 0);
}

static void test_names(void **unused)
{
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        enum algo_kind back;
        assert_int_equal(algo_from_name(algo_name((enum algo_kind)k), &back), 0);
        assert_int_equal((int)back, k);
    }
    enum algo_kind x;
    assert_int_equal(algo_from_name("leaky", &x), -SLUICE_EINVAL);
    assert_int_equal(algo_can_be_global(ALGO_GCRA), 1);
    assert_int_equal(algo_can_be_global(ALGO_SLIDING_LOG), 0);
}

/* Extreme arguments: every call returns 0 or a negative code, never UB
 * (the sanitizer build turns UB into a failure). */
static void test_extreme_arguments(void **unused)
{
    static const int64_t vals[] = {INT64_MIN,     INT64_MIN + 1, -1,       0, 1, 2, 999,
                                   INT64_MAX / 2, INT64_MAX - 1, INT64_MAX};
    const size_t nv = sizeof(vals) / sizeof(vals[0]);
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        struct algo_params p;
        if (algo_params_init(&p, (enum algo_kind)k, 3, 4, 1000, 5) < 0)
            fail();
        void *st = calloc(1, algo_state_size(&p));
        algo_init(&p, st);
        for (size_t i = 0; i < nv; i++) {
            for (size_t j = 0; j < nv; j++) {
                struct algo_result r;
                int64_t d;
                int rc = algo_decide(&p, st, vals[i], vals[j], &r);
                assert_true(rc == 0 || rc == -SLUICE_EINVAL || rc == -SLUICE_ERANGE);
                rc = algo_earliest_fit(&p, st, vals[i], vals[j], &d);
                assert_true(rc == 0 || rc == -SLUICE_EINVAL || rc == -SLUICE_ERANGE);
                rc = algo_consume(&p, st, vals[i], vals[j]);
                assert_true(rc == 0 || rc == -SLUICE_EINVAL);
                rc = algo_refund(&p, st, vals[j], vals[i]);
                assert_true(rc == 0 || rc == -SLUICE_EINVAL);
                (void)algo_drained(&p, st, vals[j]);
            }
        }
        algo_free(&p, st);
        free(st);
        /* and huge params */
        for (size_t i = 0; i < nv; i++)
            for (size_t j = 0; j < nv; j++)
                (void)algo_params_init(&p, (enum algo_kind)k, vals[i], vals[j], vals[(i + j) % nv],
                                       vals[j]);
    }
}

/* Debt: consumption beyond the limit makes the key refuse until repaid. */
static void test_consume_debt(void **unused)
{
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        struct algo_params p;
        struct algo_result r;
        assert_int_equal(algo_params_init(&p, (enum algo_kind)k, 9, 10, 1000 * MS, 10), 0);
        void *st = calloc(1, algo_state_size(&p));
        algo_init(&p, st);
        int64_t now = 5000 * MS;
        assert_int_equal(algo_consume(&p, st, 25, now), 0);
        assert_int_equal(algo_decide(&p, st, 1, now, &r), 0);
        assert_int_equal(r.limited, 1);
        assert_int_equal(r.remaining, 0);
        assert_true(r.retry_after_ns > 0);
        algo_free(&p, st);
        free(st);
    }
}

/* Every algorithm's options table holds together: they fit
 * ALGO_OPTIONS_MAX, their slots a knob's values, each config key and SL.*
 * word names one option, and each is found by both. */
static void test_options_table(void **unused)
{
    (void)unused;
    size_t n = 0;
    const struct algo_option *o;
    enum algo_kind k;
    while ((o = algo_option_at(n, &k)) != NULL) {
        assert_true((unsigned)k < ALGO_KIND_COUNT_);
        assert_true(o->slot >= 0 && o->slot < ALGO_KNOB_VALUES);
        assert_true(o->min <= o->max);
        assert_int_equal(algo_option_find(o->conf, strlen(o->conf), 0), (int)n);
        assert_int_equal(algo_option_find(o->word, strlen(o->word), 1), (int)n);
        struct algo_params p;
        assert_int_equal(algo_params_init(&p, k, 1, 10, 1000 * MS, 0), 0);
        int64_t v = algo_option_value(&p, o); /* the default is a value it accepts */
        assert_true(v >= o->min && v <= o->max);
        n++;
    }
    assert_true(n <= ALGO_OPTIONS_MAX);
}

int main(void)
{
    rng = test_seed("test_algo_common");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_properties_all), cmocka_unit_test(test_params_refused),
        cmocka_unit_test(test_names),          cmocka_unit_test(test_extreme_arguments),
        cmocka_unit_test(test_consume_debt),   cmocka_unit_test(test_options_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
