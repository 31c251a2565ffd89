/*
 * limiter facade: CL.THROTTLE semantics as a client sees them, argument
 * errors, key memory following the keys actually limited, the overflow
 * policies and their counters, and a seeded comparison with the GCRA core
 * applied per key by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "gcra.h"
#include "limiter.h"
#include "sluice/error.h"
#include "testutil.h"

#define S GCRA_NS_PER_SEC

static struct limiter *mk(size_t max_keys, enum limiter_overflow ov)
{
    struct limiter_config cfg = {max_keys, ov};
    struct limiter *lim;
    assert_int_equal(limiter_create(&lim, &cfg), 0);
    return lim;
}

static struct limiter_throttle_result th(struct limiter *lim, const char *key, int64_t burst,
                                         int64_t count, int64_t period, int64_t q, int64_t now)
{
    struct limiter_throttle_result r;
    assert_int_equal(limiter_throttle(lim, key, strlen(key), burst, count, period, q, now, &r), 0);
    return r;
}

#define ASSERT_REPLY(r, l, lim, rem, retry, reset)                                                 \
    do {                                                                                           \
        assert_int_equal((r).limited, (l));                                                        \
        assert_int_equal((r).limit, (lim));                                                        \
        assert_int_equal((r).remaining, (rem));                                                    \
        assert_int_equal((r).retry_after_s, (retry));                                              \
        assert_int_equal((r).reset_after_s, (reset));                                              \
    } while (0)

static void test_cl_throttle(void **state)
{
    (void)state;
    struct limiter *lim;
    struct limiter_throttle_result r;
    struct limiter_stats st;
    int64_t t0 = 1000 * S;

    assert_int_equal(limiter_create(&lim, NULL), 0);
    r = th(lim, "user123", 15, 30, 60, 1, t0);
    ASSERT_REPLY(r, 0, 16, 15, -1, 2);
    for (int i = 0; i < 15; i++)
        r = th(lim, "user123", 15, 30, 60, 1, t0);
    ASSERT_REPLY(r, 0, 16, 0, -1, 32);
    r = th(lim, "user123", 15, 30, 60, 1, t0);
    ASSERT_REPLY(r, 1, 16, 0, 2, 32);
    /* another key is independent; a key with a NUL byte is its own key */
    r = th(lim, "user124", 15, 30, 60, 1, t0);
    ASSERT_REPLY(r, 0, 16, 15, -1, 2);
    assert_int_equal(limiter_throttle(lim, "user123\0x", 9, 15, 30, 60, 1, t0, &r), 0);
    ASSERT_REPLY(r, 0, 16, 15, -1, 2);
    limiter_get_stats(lim, &st);
    assert_int_equal(st.keys, 3);
    /* a quantity that can never fit */
    r = th(lim, "user124", 15, 30, 60, 17, t0);
    ASSERT_REPLY(r, 1, 16, 15, -1, 2);
    /* the clock going backwards counts as no time passing */
    r = th(lim, "user123", 15, 30, 60, 1, t0 - 100 * S);
    ASSERT_REPLY(r, 1, 16, 0, 2, 32);
    /* after 2 s one unit is back */
    r = th(lim, "user123", 15, 30, 60, 1, t0 + 2 * S);
    ASSERT_REPLY(r, 0, 16, 0, -1, 32);
    /* parameters come with each call: a bigger burst on the same state */
    r = th(lim, "user123", 31, 30, 60, 0, t0 + 2 * S);
    ASSERT_REPLY(r, 0, 32, 16, -1, 32);
    limiter_get_stats(lim, &st);
    assert_true(st.keys == 2 || st.keys == 3); /* user124 drained at t0 + 2 s */
    assert_int_equal(st.decisions, 23);
    assert_int_equal(st.limited, 3);
    limiter_destroy(lim);
}

static void test_errors(void **state)
{
    (void)state;
    struct limiter *lim = mk(0, LIMITER_OVERFLOW_EVICT);
    struct limiter_throttle_result r;
    struct limiter_stats st;
    static char big[70000];

    assert_int_equal(limiter_throttle(lim, "k", 1, -1, 1, 1, 1, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(limiter_throttle(lim, "k", 1, 1, 0, 1, 1, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(limiter_throttle(lim, "k", 1, 1, 1, 0, 1, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(limiter_throttle(lim, "k", 1, 1, 1, -3, 1, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(limiter_throttle(lim, "k", 1, 1, 1, 1, -1, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(limiter_throttle(lim, "k", 1, 1, 1, INT64_MAX, 1, 0, &r), -SLUICE_ERANGE);
    assert_int_equal(limiter_throttle(lim, "k", 1, INT64_MAX, 1, 1, 1, 0, &r), -SLUICE_ERANGE);
    assert_int_equal(limiter_throttle(lim, "k", 1, 0, INT64_MAX, 1, 1, 0, &r), -SLUICE_ERANGE);
    assert_int_equal(limiter_throttle(lim, big, sizeof(big), 1, 1, 1, 1, 0, &r), -SLUICE_ETOOBIG);
    /* huge quantity: an answer, not an error */
    assert_int_equal(limiter_throttle(lim, "k", 1, 1, 1, 1, INT64_MAX, 0, &r), 0);
    ASSERT_REPLY(r, 1, 2, 2, -1, 0);
    limiter_get_stats(lim, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.decisions, 1);
    limiter_destroy(lim);
}

/* Keys exist only while limited: peeks create nothing, drained keys go. */
static void test_memory_follows_limited_keys(void **state)
{
    (void)state;
    struct limiter *lim = mk(0, LIMITER_OVERFLOW_EVICT);
    struct limiter_throttle_result r;
    struct limiter_stats st;
    char k[32];

    r = th(lim, "peek", 5, 10, 1, 0, 0);
    ASSERT_REPLY(r, 0, 6, 6, -1, 0);
    limiter_get_stats(lim, &st);
    assert_int_equal(st.keys, 0);

    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof(k), "user:%d", i);
        th(lim, k, 5, 10, 1, 3, 0); /* 3 units at 10/s: drained after 0.3 s */
    }
    limiter_get_stats(lim, &st);
    assert_int_equal(st.keys, 5000);
    /* not yet drained: maintenance frees nothing */
    assert_int_equal(limiter_maintain(lim, 3 * S / 10 - 1, 1 << 20), 0);
    /* touching a drained key removes it */
    r = th(lim, "user:7", 5, 10, 1, 0, 3 * S / 10);
    ASSERT_REPLY(r, 0, 6, 6, -1, 0);
    limiter_get_stats(lim, &st);
    assert_true(st.keys <= 4999); /* the call's own reclaim step may free more */
    assert_int_equal(st.reclaimed, 5000 - st.keys);
    /* the periodic sweep frees the rest */
    for (int i = 0; i < 100 && st.keys > 0; i++) {
        limiter_maintain(lim, 3 * S / 10, 1024);
        limiter_get_stats(lim, &st);
    }
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.reclaimed, 5000);
    limiter_destroy(lim);
}

static void fill(struct limiter *lim, int n)
{
    char k[32];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "full:%d", i);
        struct limiter_throttle_result r = th(lim, k, 0, 1, 60, 1, 0);
        assert_int_equal(r.limited, 0);
    }
}

static void test_overflow_policies(void **state)
{
    (void)state;
    struct limiter *lim;
    struct limiter_throttle_result r;
    struct limiter_stats st;

    lim = mk(10, LIMITER_OVERFLOW_DENY);
    fill(lim, 10);
    r = th(lim, "new", 0, 1, 60, 1, S);
    ASSERT_REPLY(r, 1, 1, 0, 60, 60);
    r = th(lim, "full:3", 0, 1, 60, 1, S); /* known keys keep their state */
    ASSERT_REPLY(r, 1, 1, 0, 59, 59);
    limiter_get_stats(lim, &st);
    assert_int_equal(st.overflow_denied, 1);
    assert_int_equal(st.keys, 10);
    /* once the old keys drained they make room */
    r = th(lim, "new", 0, 1, 60, 1, 61 * S);
    assert_int_equal(r.limited, 0);
    limiter_destroy(lim);

    lim = mk(10, LIMITER_OVERFLOW_ALLOW);
    fill(lim, 10);
    r = th(lim, "new", 0, 1, 60, 1, S);
    ASSERT_REPLY(r, 0, 1, 0, -1, 60);
    r = th(lim, "new", 0, 1, 60, 1, S); /* stateless: allowed again */
    assert_int_equal(r.limited, 0);
    limiter_get_stats(lim, &st);
    assert_int_equal(st.overflow_allowed, 2);
    assert_int_equal(st.keys, 10);
    limiter_destroy(lim);

    lim = mk(10, LIMITER_OVERFLOW_EVICT);
    fill(lim, 10);
    r = th(lim, "new", 0, 1, 60, 1, S);
    assert_int_equal(r.limited, 0);
    r = th(lim, "new", 0, 1, 60, 1, S); /* kept: now limited */
    assert_int_equal(r.limited, 1);
    limiter_get_stats(lim, &st);
    assert_int_equal(st.evicted, 1);
    assert_int_equal(st.keys, 10);
    limiter_destroy(lim);
}

/* The facade must give, key by key, what the GCRA core gives on a private
 * state per key (reclaim and the clock clamp must be invisible). */
static void test_random_against_core(void **state)
{
    (void)state;
    uint64_t rng = test_seed("limiter_random");
    struct limiter *lim = mk(0, LIMITER_OVERFLOW_EVICT);
    enum { NKEYS = 32 };
    int64_t tats[NKEYS], now = 0;
    struct gcra_params p;
    char k[16];

    for (int i = 0; i < NKEYS; i++)
        tats[i] = GCRA_TAT_FULL;
    for (int step = 0; step < 100000; step++) {
        int key = (int)test_rand_range(&rng, 0, NKEYS - 1);
        int64_t burst = key % 4, count = 1 + key % 3, period = 1 + key % 5;
        int64_t q = test_rand_range(&rng, 0, 3);
        struct limiter_throttle_result r;
        struct gcra_result g;
        struct gcra_cell_reply c;

        now += test_rand_range(&rng, 0, S / 2);
        if (test_rand_range(&rng, 0, 50) == 0)
            limiter_maintain(lim, now, (size_t)test_rand_range(&rng, 0, 64));
        snprintf(k, sizeof(k), "key%d", key);
        assert_int_equal(limiter_throttle(lim, k, strlen(k), burst, count, period, q, now, &r), 0);
        assert_int_equal(gcra_params_init(&p, burst, count, period * S), 0);
        assert_int_equal(gcra_decide(&tats[key], &p, q, now, &g), 0);
        gcra_to_cell(&g, &c);
        assert_int_equal(r.limited, c.limited);
        assert_int_equal(r.limit, c.limit);
        assert_int_equal(r.remaining, c.remaining);
        assert_int_equal(r.retry_after_s, c.retry_after_s);
        assert_int_equal(r.reset_after_s, c.reset_after_s);
    }
    limiter_destroy(lim);
}

struct listing {
    int seen[100];
    int64_t tat[100];
};

static void list_cb(void *ud, const char *key, size_t klen, int64_t tat)
{
    struct listing *l = ud;
    int i;
    char buf[16];
    assert_true(klen < sizeof(buf));
    memcpy(buf, key, klen);
    buf[klen] = 0;
    assert_int_equal(sscanf(buf, "s%d", &i), 1);
    assert_true(i >= 0 && i < 100);
    l->seen[i]++;
    l->tat[i] = tat;
}

static void test_scan(void **state)
{
    (void)state;
    struct limiter *lim = mk(0, LIMITER_OVERFLOW_EVICT);
    struct listing l;
    uint64_t cursor = 0;
    char k[16];
    int calls = 0;

    memset(&l, 0, sizeof(l));
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "s%d", i);
        th(lim, k, 9, 1, 1, 1 + i % 3, 0); /* TAT = (1 + i % 3) s */
    }
    do {
        cursor = limiter_scan(lim, cursor, 7, list_cb, &l);
        calls++;
    } while (cursor != 0 && calls < 1000);
    assert_int_equal(cursor, 0);
    assert_true(calls > 1);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(l.seen[i], 1); /* no changes: exactly once */
        assert_true(l.tat[i] == (1 + i % 3) * S);
    }
    limiter_destroy(lim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cl_throttle),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_memory_follows_limited_keys),
        cmocka_unit_test(test_overflow_policies),
        cmocka_unit_test(test_random_against_core),
        cmocka_unit_test(test_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
