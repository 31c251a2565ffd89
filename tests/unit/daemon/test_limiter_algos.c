/*
 * limiter with every algorithm: each one through the key table matches the
 * algorithm applied to a private state by hand; a key keeps its state when
 * the parameters change and starts afresh when the algorithm changes; the
 * sliding log's ring is freed whenever a key goes (ASan's leak check fails
 * the test otherwise); policies decide CL.THROTTLE on their prefixes;
 * dry-run policies always allow and count; and SL.MULTI's all-or-nothing
 * rule checked against a model over random traffic.
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
#include "config.h"
#include "limiter.h"
#include "policy.h"
#include "sluice/error.h"
#include "testutil.h"

#define MS ((int64_t)1000000)
#define S  ((int64_t)1000000000)

static struct algo_params mkp(enum algo_kind k, int64_t burst, int64_t count, int64_t period_ns,
                              int64_t precision)
{
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, k, burst, count, period_ns, precision), 0);
    /* These checks are about the limiter (state kept, carried, reclaimed),
     * with bucket arithmetic: a warmup limit with cold factor 1 is one, its
     * warm-up has its own tests (test_algo_warmup). */
    if (k == ALGO_WARMUP)
        assert_int_equal(algo_params_set_warmup(&p, period_ns, 1), 0);
    return p;
}

static struct algo_result dec(struct limiter *lim, const char *key, const struct algo_params *p,
                              int64_t q, int64_t now)
{
    struct algo_result r;
    assert_int_equal(limiter_decide(lim, key, strlen(key), p, q, now, &r), 0);
    return r;
}

/* Every algorithm through the limiter answers exactly as the algorithm on a
 * state of its own, over random traffic on a few keys. */
static void test_matches_algorithm(void **state)
{
    (void)state;
    uint64_t rng = test_seed("limiter_algos_matches");
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        struct algo_params p = mkp((enum algo_kind)k, 3, 5, 100 * MS, 4);
        struct limiter *lim;
        assert_int_equal(limiter_create(&lim, NULL), 0);
        int64_t model[3][2 + ALGO_PRECISION_MAX];
        for (int i = 0; i < 3; i++)
            algo_init(&p, model[i]);
        int64_t now = 10 * S;
        for (int step = 0; step < 3000; step++) {
            int i = (int)test_rand_range(&rng, 0, 2);
            int64_t q = test_rand_range(&rng, 0, 3);
            char key[8];
            snprintf(key, sizeof(key), "k%d", i);
            now += test_rand_range(&rng, 0, 30 * MS);
            struct algo_result want, got = dec(lim, key, &p, q, now);
            assert_int_equal(algo_decide(&p, model[i], q, now, &want), 0);
            assert_int_equal(got.limited, want.limited);
            assert_int_equal(got.remaining, want.remaining);
            assert_int_equal(got.limit, want.limit);
            assert_int_equal(got.retry_after_ns, want.retry_after_ns);
            assert_int_equal(got.reset_after_ns, want.reset_after_ns);
        }
        for (int i = 0; i < 3; i++)
            algo_free(&p, model[i]);
        limiter_destroy(lim); /* frees any ring still held */
    }
}

/* Changing a key's limit keeps what it used: a key at its limit stays
 * limited under a larger burst until the new room appears, and a smaller
 * limit applies at once. */
static void test_params_change_keeps_state(void **state)
{
    (void)state;
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        struct limiter *lim;
        assert_int_equal(limiter_create(&lim, NULL), 0);
        struct algo_params a = mkp((enum algo_kind)k, 4, 5, 10 * S, 5);
        int64_t now = 100 * S;
        for (int i = 0; i < 5; i++)
            assert_int_equal(dec(lim, "key", &a, 1, now).limited, 0);
        assert_int_equal(dec(lim, "key", &a, 1, now).limited, 1);
        /* Same algorithm, a smaller count (and burst): still limited. */
        struct algo_params b = mkp((enum algo_kind)k, 2, 3, 10 * S, 5);
        struct algo_result r = dec(lim, "key", &b, 1, now);
        assert_int_equal(r.limited, 1);
        /* A different period (a new shape for the windows and the bucket):
         * the windows and the log stay limited (the used units are carried);
         * gcra and the buckets (warmup's schedule too) keep their time to
         * full, which at half the rate is fewer units, but not none. */
        struct algo_params c = mkp((enum algo_kind)k, 4, 5, 20 * S, 4);
        if (algo_has_burst((enum algo_kind)k)) {
            r = dec(lim, "key", &c, 0, now);
            assert_true(r.remaining < r.limit);
            assert_true(r.remaining > 0);
        } else {
            r = dec(lim, "key", &c, 1, now);
            assert_int_equal(r.limited, 1);
        }
        struct limiter_stats st;
        limiter_get_stats(lim, &st);
        assert_int_equal(st.keys, 1);
        limiter_destroy(lim);
    }
}

/* Another algorithm on the same key starts from a fresh key of it, and the
 * old state's memory is released (the log's ring: ASan would report it). */
static void test_algorithm_change_reinitialises(void **state)
{
    (void)state;
    struct limiter *lim;
    assert_int_equal(limiter_create(&lim, NULL), 0);
    struct algo_params log = mkp(ALGO_SLIDING_LOG, 0, 100, 60 * S, 0);
    struct algo_params fw = mkp(ALGO_FIXED_WINDOW, 0, 2, 60 * S, 0);
    int64_t now = 5 * S;
    for (int i = 0; i < 100; i++)
        assert_int_equal(dec(lim, "k", &log, 1, now).limited, 0);
    assert_int_equal(dec(lim, "k", &log, 1, now).limited, 1);
    /* An inline limit of another algorithm: the key starts as that
     * algorithm's state, carrying what it used (100, at most the new
     * limit): never a fresh quota. */
    struct algo_result r = dec(lim, "k", &fw, 1, now);
    assert_int_equal(r.limited, 1);
    assert_int_equal(r.remaining, 0);
    struct limiter_stats st;
    limiter_get_stats(lim, &st);
    assert_int_equal(st.reinitialised, 1);
    /* CL.THROTTLE is GCRA: it carries the window's use too. */
    struct limiter_throttle_result t;
    assert_int_equal(limiter_throttle(lim, "k", 1, 1, 1, 60, 1, now, &t), 0);
    assert_int_equal(t.limited, 1);
    /* And the gcra algorithm shares CL.THROTTLE's state. */
    struct algo_params g = mkp(ALGO_GCRA, 1, 1, 60 * S, 0);
    assert_int_equal(dec(lim, "k", &g, 1, now).limited, 1);
    /* An untouched key of another algorithm is fresh under the new one. */
    assert_int_equal(dec(lim, "fresh", &g, 0, now).remaining, 2);
    /* A log key reset and a log key left to the destructor: both freed. */
    for (int i = 0; i < 10; i++)
        dec(lim, "log2", &log, 1, now);
    assert_int_equal(limiter_reset(lim, "log2", 4), 1);
    assert_int_equal(limiter_reset(lim, "log2", 4), 0);
    for (int i = 0; i < 10; i++)
        dec(lim, "log3", &log, 1, now);
    limiter_destroy(lim);
}

/* A policy reload that changes a key's algorithm carries the fraction the
 * key had used: for every ordered pair of algorithms, a key that used none,
 * half or all of a limit of 10 under A has, under B (a limit of 20), 20, 10
 * or 0 left (one either way where warmup's nanosecond rounding meets a
 * whole unit). */
static struct policy_set *one_policy(enum algo_kind k, int64_t limit)
{
    static const char *const names[] = {"gcra",           "token-bucket", "fixed-window",
                                        "sliding-window", "sliding-log",  "warmup"};
    char text[256];
    int bucket = algo_has_burst(k);
    snprintf(text, sizeof(text), "[policy p]\nalgorithm = %s\nrate = %lld per 60s\n%s%s%s",
             names[k], (long long)limit, bucket ? "burst = " : "", bucket ? "" : "",
             k == ALGO_WARMUP ? "" : "");
    size_t n = strlen(text);
    if (bucket)
        snprintf(text + n, sizeof(text) - n, "%lld\n", (long long)(limit - 1));
    if (k == ALGO_WARMUP) {
        n = strlen(text);
        snprintf(text + n, sizeof(text) - n, "cold_factor = 1\n");
    }
    struct config cfg;
    char err[256];
    struct policy_set *set;
    if (config_load_buffer("t.conf", text, strlen(text), &cfg, err, sizeof(err)) < 0)
        fail_msg("config: %s\n%s", err, text);
    assert_int_equal(policy_set_build(cfg.policies, cfg.npolicies, &set), 0);
    config_free(&cfg);
    return set;
}

static void test_algorithm_change_carries_fraction(void **state)
{
    (void)state;
    static const int64_t used[3] = {0, 5, 10};
    static const int64_t left[3] = {20, 10, 0};
    for (int a = 0; a < ALGO_KIND_COUNT_; a++) {
        for (int b = 0; b < ALGO_KIND_COUNT_; b++) {
            if (a == b)
                continue;
            for (int u = 0; u < 3; u++) {
                struct limiter *lim;
                assert_int_equal(limiter_create(&lim, NULL), 0);
                struct policy_set *sa = one_policy((enum algo_kind)a, 10);
                struct policy_set *sb = one_policy((enum algo_kind)b, 20);
                int64_t now = 1000 * S;
                limiter_set_policies(lim, sa);
                const struct policy *pa = policy_set_at(sa, 0);
                struct algo_result r;
                for (int64_t i = 0; i < used[u]; i++)
                    assert_int_equal(limiter_decide_policy(lim, "k", 1, pa, 1, now, &r, NULL), 0);
                limiter_set_policies(lim, sb); /* the reload */
                const struct policy *pb = policy_set_at(sb, 0);
                assert_int_equal(pb->has_prev, 1);
                assert_int_equal(limiter_decide_policy(lim, "k", 1, pb, 0, now, &r, NULL), 0);
                int slack = a == ALGO_WARMUP || b == ALGO_WARMUP;
                if (r.remaining < left[u] - slack || r.remaining > left[u] + slack)
                    fail_msg("%s -> %s after %lld of 10 used: %lld of 20 left, want %lld",
                             algo_name((enum algo_kind)a), algo_name((enum algo_kind)b),
                             (long long)used[u], (long long)r.remaining, (long long)left[u]);
                /* An exhausted key stays limited; any other admits. */
                assert_int_equal(limiter_decide_policy(lim, "k", 1, pb, 1, now, &r, NULL), 0);
                assert_int_equal(r.limited, u == 2);
                policy_set_release(sa);
                policy_set_release(sb);
                limiter_destroy(lim);
            }
        }
    }
}

/* Drained keys leave the table; peeks create nothing; refunds give back. */
static void test_memory_and_refund(void **state)
{
    (void)state;
    struct limiter *lim;
    struct limiter_stats st;
    assert_int_equal(limiter_create(&lim, NULL), 0);
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        struct algo_params p = mkp((enum algo_kind)k, 1, 2, 1 * S, 2);
        int64_t now = 50 * S + k * 1000 * S; /* the limiter's clock never goes back */
        dec(lim, "peek", &p, 0, now);
        limiter_get_stats(lim, &st);
        assert_int_equal(st.keys, 0);
        dec(lim, "k", &p, 2, now);
        assert_int_equal(dec(lim, "k", &p, 1, now).limited, 1);
        assert_int_equal(limiter_refund(lim, "k", 1, &p, 1, now), 0);
        assert_int_equal(dec(lim, "k", &p, 1, now).limited, 0);
        limiter_get_stats(lim, &st);
        assert_int_equal(st.keys, 1);
        /* Long after, the key is gone (maintenance frees it). */
        limiter_maintain(lim, now + 100 * S, 1 << 20);
        limiter_get_stats(lim, &st);
        assert_int_equal(st.keys, 0);
    }
    limiter_destroy(lim);
}

static struct policy_set *mkset(const char *text)
{
    struct config cfg;
    char err[256];
    struct policy_set *set;
    int rc = config_load_buffer("test.conf", text, strlen(text), &cfg, err, sizeof(err));
    if (rc < 0)
        fail_msg("config: %s", err);
    assert_int_equal(policy_set_build(cfg.policies, cfg.npolicies, &set), 0);
    config_free(&cfg);
    return set;
}

/* A policy's prefix overrides CL.THROTTLE's own limit; dry-run allows. */
static void test_policies_override_cl_throttle(void **state)
{
    (void)state;
    struct limiter *lim;
    struct limiter_throttle_result t;
    struct limiter_stats st;
    assert_int_equal(limiter_create(&lim, NULL), 0);
    struct policy_set *set = mkset("[policy strict]\nalgorithm = fixed-window\n"
                                   "rate = 2 per 60s\nmatch = strict:\n"
                                   "[policy trial]\nalgorithm = gcra\nburst = 0\n"
                                   "rate = 1 per 60s\nmatch = trial:\ndry_run = true\n");
    limiter_set_policies(lim, set);
    policy_set_release(set);
    int64_t now = 1000 * S;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(limiter_throttle(lim, "strict:a", 8, 100, 100, 1, 1, now, &t), 0);
        assert_int_equal(t.limited, 0);
        assert_int_equal(t.limit, 2);
    }
    assert_int_equal(limiter_throttle(lim, "strict:a", 8, 100, 100, 1, 1, now, &t), 0);
    assert_int_equal(t.limited, 1);
    assert_true(t.retry_after_s >= 1);
    /* Not covered: the client's own limit. */
    assert_int_equal(limiter_throttle(lim, "other", 5, 100, 100, 1, 1, now, &t), 0);
    assert_int_equal(t.limit, 101);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(limiter_throttle(lim, "trial:x", 7, 0, 1, 60, 1, now, &t), 0);
        assert_int_equal(t.limited, 0);
    }
    limiter_get_stats(lim, &st);
    assert_int_equal(st.dry_run_would_limit, 4);
    limiter_set_policies(lim, NULL);
    assert_int_equal(limiter_throttle(lim, "strict:b", 8, 100, 100, 1, 1, now, &t), 0);
    assert_int_equal(t.limit, 101);
    limiter_destroy(lim);
}

/* All or nothing against a model: random multi-key requests over keys of
 * every algorithm; the limiter's state after each request equals the model
 * where a request is applied only if every key, alone, would allow. */
static void test_multi_all_or_nothing(void **state)
{
    (void)state;
    uint64_t rng = test_seed("limiter_algos_multi");
    struct limiter *lim;
    assert_int_equal(limiter_create(&lim, NULL), 0);
    enum { NKEYS = 6 };
    struct algo_params p[NKEYS];
    int64_t model[NKEYS][2 + ALGO_PRECISION_MAX];
    char names[NKEYS][8];
    for (int i = 0; i < NKEYS; i++) {
        p[i] = mkp((enum algo_kind)(i % ALGO_KIND_COUNT_), 2, 4, 200 * MS, 4);
        algo_init(&p[i], model[i]);
        snprintf(names[i], sizeof(names[i]), "m%d", i);
    }
    int64_t now = 3 * S;
    int allowed_count = 0, refused_count = 0;
    for (int step = 0; step < 4000; step++) {
        now += test_rand_range(&rng, 0, 20 * MS);
        size_t n = (size_t)test_rand_range(&rng, 1, 4);
        int pick[NKEYS] = {0};
        struct limiter_req reqs[4];
        int idx[4];
        size_t m = 0;
        int64_t q = test_rand_range(&rng, 1, 2);
        while (m < n) {
            int i = (int)test_rand_range(&rng, 0, NKEYS - 1);
            if (pick[i])
                continue;
            pick[i] = 1;
            idx[m] = i;
            reqs[m] = (struct limiter_req){names[i], strlen(names[i]), &p[i], NULL, q};
            m++;
        }
        int want = 1;
        for (size_t j = 0; j < n; j++) {
            int64_t d;
            assert_int_equal(algo_earliest_fit(&p[idx[j]], model[idx[j]], q, now, &d), 0);
            if (d != 0)
                want = 0;
        }
        struct algo_result outs[4];
        int allowed = -1;
        assert_int_equal(limiter_multi(lim, reqs, n, now, outs, &allowed), 0);
        assert_int_equal(allowed, want);
        for (size_t j = 0; j < n; j++) {
            struct algo_result r;
            if (want) {
                assert_int_equal(algo_decide(&p[idx[j]], model[idx[j]], q, now, &r), 0);
                assert_int_equal(r.limited, 0);
                assert_int_equal(outs[j].limited, 0);
            }
            assert_int_equal(algo_decide(&p[idx[j]], model[idx[j]], 0, now, &r), 0);
            assert_int_equal(outs[j].remaining, r.remaining);
        }
        allowed_count += want;
        refused_count += !want;
        /* Every key's state equals the model's. */
        for (int i = 0; i < NKEYS; i++) {
            struct algo_result a = dec(lim, names[i], &p[i], 0, now), b;
            assert_int_equal(algo_decide(&p[i], model[i], 0, now, &b), 0);
            assert_int_equal(a.remaining, b.remaining);
            assert_int_equal(a.reset_after_ns, b.reset_after_ns);
        }
    }
    assert_true(allowed_count > 100);
    assert_true(refused_count > 100);
    /* Duplicates and sizes are refused. */
    struct limiter_req dup[2] = {{"a", 1, &p[0], NULL, 1}, {"a", 1, &p[1], NULL, 1}};
    struct algo_result outs[2];
    int allowed;
    assert_int_equal(limiter_multi(lim, dup, 2, now, outs, &allowed), -SLUICE_EINVAL);
    assert_int_equal(limiter_multi(lim, dup, 0, now, outs, &allowed), -SLUICE_EINVAL);
    for (int i = 0; i < NKEYS; i++)
        algo_free(&p[i], model[i]);
    limiter_destroy(lim);
}

/* A full table with the deny policy refuses new keys of any algorithm. */
static void test_overflow_deny(void **state)
{
    (void)state;
    struct limiter_config cfg = {2, LIMITER_OVERFLOW_DENY};
    struct limiter *lim;
    assert_int_equal(limiter_create(&lim, &cfg), 0);
    struct algo_params p = mkp(ALGO_SLIDING_LOG, 0, 5, 60 * S, 0);
    dec(lim, "a", &p, 1, S);
    dec(lim, "b", &p, 1, S);
    struct algo_result r = dec(lim, "c", &p, 1, S);
    assert_int_equal(r.limited, 1);
    assert_true(r.retry_after_ns > 0);
    limiter_destroy(lim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_algorithm),
        cmocka_unit_test(test_params_change_keeps_state),
        cmocka_unit_test(test_algorithm_change_reinitialises),
        cmocka_unit_test(test_algorithm_change_carries_fraction),
        cmocka_unit_test(test_memory_and_refund),
        cmocka_unit_test(test_policies_override_cl_throttle),
        cmocka_unit_test(test_multi_all_or_nothing),
        cmocka_unit_test(test_overflow_deny),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
