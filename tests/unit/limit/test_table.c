/*
 * Key table: lookups, growth and shrink, drained-key reclaim, the max_keys
 * bound with both overflow modes, scan cursor guarantees under concurrent
 * change, and a seeded random comparison against a plain sorted array.
 *
 * Values in these tests are one int64 "drain time": the entry is reclaimable
 * once now reaches it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sluice/error.h"
#include "table.h"
#include "testutil.h"

static int freed_count;

static int64_t drain_of(void *ud, const struct table_entry *e)
{
    int64_t v;
    (void)ud;
    memcpy(&v, table_entry_value((struct table_entry *)e), sizeof(v));
    return v;
}

static void on_free(void *ud, struct table_entry *e)
{
    (void)ud;
    (void)e;
    freed_count++;
}

static struct table *mk(size_t max_keys, int evict, uint64_t seed)
{
    struct table_config cfg;
    struct table *t;
    memset(&cfg, 0, sizeof(cfg));
    cfg.max_keys = max_keys;
    cfg.evict = evict;
    cfg.seed[0] = seed | 1;
    cfg.seed[1] = seed * 3;
    cfg.drain = drain_of;
    cfg.free_value = on_free;
    assert_int_equal(table_create(&t, &cfg), 0);
    return t;
}

static struct table_entry *put(struct table *t, const char *k, size_t klen, int64_t drain)
{
    struct table_entry *e;
    int rc = table_insert(t, k, klen, sizeof(int64_t), 7, 0, &e);
    assert_int_equal(rc, 0);
    memcpy(table_entry_value(e), &drain, sizeof(drain));
    return e;
}

static int64_t get(struct table *t, const char *k, size_t klen)
{
    struct table_entry *e = table_find(t, k, klen);
    int64_t v;
    if (e == NULL)
        return -1;
    memcpy(&v, table_entry_value(e), sizeof(v));
    return v;
}

static void test_basic(void **state)
{
    (void)state;
    struct table *t = mk(0, 0, 1);
    const char bin1[] = {'a', 0, 'b'}, bin2[] = {'a', 0, 'c'};
    struct table_entry *e;

    put(t, "user:1", 6, 10);
    put(t, bin1, 3, 20);
    put(t, bin2, 3, 30);
    put(t, "", 0, 40);
    assert_int_equal(table_count(t), 4);
    assert_int_equal(get(t, "user:1", 6), 10);
    assert_int_equal(get(t, bin1, 3), 20);
    assert_int_equal(get(t, bin2, 3), 30);
    assert_int_equal(get(t, "", 0), 40);
    assert_int_equal(get(t, "user:", 5), -1);
    assert_int_equal(get(t, "user:10", 7), -1);
    assert_int_equal(get(t, "a", 1), -1);
    e = table_find(t, bin1, 3);
    assert_non_null(e);
    assert_int_equal(e->tag, 7);
    assert_memory_equal(table_entry_key(e), bin1, 3);
    assert_int_equal(((uintptr_t)table_entry_value(e)) % 8, 0);
    freed_count = 0;
    table_delete(t, e);
    assert_int_equal(freed_count, 1);
    assert_int_equal(get(t, bin1, 3), -1);
    assert_int_equal(get(t, bin2, 3), 30);
    assert_int_equal(table_count(t), 3);
    assert_int_equal(table_insert(t, "x", TABLE_MAX_KEY + 1, 8, 0, 0, &e), -SLUICE_EINVAL);
    freed_count = 0;
    table_destroy(t);
    assert_int_equal(freed_count, 3);
}

/* A key's hash (table_hash, or left by table_find_for_insert) serves
 * table_find_hashed and table_insert_hashed as table_find and table_insert
 * compute it, through growth; a table made with another's seed (table_get_seed) hashes every
 * key the same, so an entry's hash field finds its key in the other; a
 * wrong hash finds nothing. */
static void test_hashed_and_shared_seed(void **state)
{
    (void)state;
    struct table *a = mk(0, 0, 5);
    struct table_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.drain = drain_of;
    cfg.free_value = on_free;
    table_get_seed(a, cfg.seed);
    struct table *b, *c;
    assert_int_equal(table_create(&b, &cfg), 0);
    memset(cfg.seed, 0, sizeof(cfg.seed)); /* a random seed of its own */
    assert_int_equal(table_create(&c, &cfg), 0);
    char k[32];
    int differ = 0;
    for (int i = 0; i < 5000; i++) {
        size_t n = (size_t)snprintf(k, sizeof(k), "key:%d", i);
        struct table_entry *ea, *eb;
        uint32_t h = table_hash(a, k, n), h2 = 0;
        assert_null(table_find_hashed(a, k, n, h));
        assert_null(table_find_for_insert(a, k, n, &h2));
        assert_int_equal(h2, h);
        assert_int_equal(table_insert_hashed(a, k, n, h, sizeof(int64_t), 1, 0, &ea), 0);
        assert_int_equal(ea->hash, h);
        assert_ptr_equal(table_find_for_insert(a, k, n, &h2), ea);
        assert_int_equal(table_hash(b, k, n), h);
        differ += table_hash(c, k, n) != h;
        assert_int_equal(table_insert_hashed(b, k, n, ea->hash, sizeof(int64_t), 2, 0, &eb), 0);
        assert_ptr_equal(table_find(b, k, n), eb);
    }
    assert_true(differ > 4900);
    for (int i = 0; i < 5000; i++) {
        size_t n = (size_t)snprintf(k, sizeof(k), "key:%d", i);
        struct table_entry *ea = table_find(a, k, n);
        assert_non_null(ea);
        assert_ptr_equal(table_find_hashed(a, k, n, ea->hash), ea);
        assert_non_null(table_find_hashed(b, k, n, ea->hash));
        assert_null(table_find_hashed(a, k, n, ea->hash ^ 0x5a5a5a5au));
    }
    table_destroy(a);
    table_destroy(b);
    table_destroy(c);
}

/* Many keys through few buckets (every chain has several entries before the
 * first growth), then growth to 100k keys and shrink back. */
static void test_collisions_growth_shrink(void **state)
{
    (void)state;
    struct table *t = mk(0, 0, 2);
    struct table_stats st;
    char k[32];
    const int n = 100000;

    for (int i = 0; i < n; i++) {
        int len = snprintf(k, sizeof(k), "user:%d", i);
        put(t, k, (size_t)len, i);
        if (i == 15) {
            table_get_stats(t, &st);
            assert_int_equal(st.buckets, 16);
            for (int j = 0; j <= 15; j++) {
                len = snprintf(k, sizeof(k), "user:%d", j);
                assert_int_equal(get(t, k, (size_t)len), j);
            }
        }
    }
    table_get_stats(t, &st);
    assert_int_equal(st.keys, n);
    assert_true(st.buckets >= (uint64_t)n && st.buckets <= 4u * (uint64_t)n);
    for (int i = 0; i < n; i++) {
        int len = snprintf(k, sizeof(k), "user:%d", i);
        assert_int_equal(get(t, k, (size_t)len), i);
    }
    for (int i = 0; i < n - 10; i++) {
        int len = snprintf(k, sizeof(k), "user:%d", i);
        struct table_entry *e = table_find(t, k, (size_t)len);
        assert_non_null(e);
        table_delete(t, e);
    }
    table_get_stats(t, &st);
    assert_int_equal(st.keys, 10);
    assert_true(st.buckets <= 64);
    for (int i = n - 10; i < n; i++) {
        int len = snprintf(k, sizeof(k), "user:%d", i);
        assert_int_equal(get(t, k, (size_t)len), i);
    }
    table_destroy(t);
}

static void put_n(struct table *t, int from, int to)
{
    char k[32];
    for (int i = from; i < to; i++)
        put(t, k, (size_t)snprintf(k, sizeof(k), "user:%d", i), i);
}

static void del_n(struct table *t, int from, int to)
{
    char k[32];
    for (int i = from; i < to; i++) {
        struct table_entry *e = table_find(t, k, (size_t)snprintf(k, sizeof(k), "user:%d", i));
        assert_non_null(e);
        table_delete(t, e);
    }
}

/* A growth's bucket array is mapped and faulted in over the last 16th of
 * the inserts before it, whole by the time it is needed, and the growth
 * takes it; one the keys no longer head for is let go; a table max_keys
 * keeps from growing prepares nothing. */
static void test_growth_prepared(void **state)
{
    (void)state;
    struct table *t = mk(0, 0, 5);
    struct table_stats st;
    const int n = 8192; /* buckets; the next array is 128 KiB */
    put_n(t, 0, n - n / 16 - 1);
    table_get_stats(t, &st);
    assert_int_equal(st.buckets, n);
    assert_int_equal(st.prepared, 0);
    uint64_t g0 = st.grown_ready; /* the growth to n took one (64 KiB) */
    assert_int_equal(g0, 1);
    put_n(t, n - n / 16 - 1, n - n / 16);
    table_get_stats(t, &st);
    assert_true(st.prepared > 0 && st.prepared < 2u * n * sizeof(void *));
    put_n(t, n - n / 16, n);
    table_get_stats(t, &st);
    assert_int_equal(st.buckets, n);
    assert_int_equal(st.prepared, 2u * n * sizeof(void *)); /* all of it, before the growth */
    assert_int_equal(st.grown_ready, g0);
    put_n(t, n, n + 1);
    table_get_stats(t, &st);
    assert_int_equal(st.buckets, 2 * n);
    assert_int_equal(st.grown_ready, g0 + 1);
    assert_int_equal(st.prepared, 0);
    char k[32];
    for (int i = 0; i <= n; i++)
        assert_int_equal(get(t, k, (size_t)snprintf(k, sizeof(k), "user:%d", i)), i);

    /* Into the next window, then back out of it: the array is let go. */
    put_n(t, n + 1, 2 * n - n / 16 + 10);
    table_get_stats(t, &st);
    assert_true(st.prepared > 0);
    del_n(t, n + 1000, n + 1000 + n / 4);
    table_get_stats(t, &st);
    assert_int_equal(st.prepared, 0);
    assert_int_equal(st.buckets, 2 * n);
    /* Back again, and on through the growth: prepared anew and taken. */
    put_n(t, n + 1000, n + 1000 + n / 4);
    put_n(t, 2 * n - n / 16 + 10, 2 * n + 1);
    table_get_stats(t, &st);
    assert_int_equal(st.buckets, 4 * n);
    assert_int_equal(st.grown_ready, g0 + 2);
    assert_int_equal(st.keys, 2 * n + 1);
    for (int i = 0; i <= 2 * n; i++)
        assert_int_equal(get(t, k, (size_t)snprintf(k, sizeof(k), "user:%d", i)), i);
    table_destroy(t);

    /* max_keys at the bucket count: the growth cannot come. */
    t = mk((size_t)n, 0, 6);
    put_n(t, 0, n);
    table_get_stats(t, &st);
    assert_int_equal(st.buckets, n);
    assert_int_equal(st.prepared, 0);
    table_destroy(t);
}

static void test_reclaim(void **state)
{
    (void)state;
    struct table *t = mk(0, 0, 3);
    struct table_stats st;
    char k[32];
    size_t freed = 0;

    for (int i = 0; i < 1000; i++) {
        int len = snprintf(k, sizeof(k), "k%d", i);
        struct table_entry *e = put(t, k, (size_t)len, i % 2 ? 100 : 200);
        if (i % 10 == 1)
            e->flags |= TABLE_F_PINNED;
    }
    freed_count = 0;
    /* nothing drained yet */
    assert_int_equal(table_reclaim_step(t, 99, 4096), 0);
    /* at 100 the odd keys are drained, except the pinned ones */
    table_get_stats(t, &st);
    for (uint64_t i = 0; i < st.buckets; i++)
        freed += table_reclaim_step(t, 100, 1);
    assert_int_equal(freed, 400);
    assert_int_equal(freed_count, 400);
    assert_int_equal(table_count(t), 600);
    for (int i = 0; i < 1000; i++) {
        int len = snprintf(k, sizeof(k), "k%d", i);
        int64_t want = (i % 2 == 0) ? 200 : (i % 10 == 1 ? 100 : -1);
        assert_int_equal(get(t, k, (size_t)len), want);
    }
    table_get_stats(t, &st);
    assert_int_equal(st.reclaimed, 400);
    /* everything unpinned drains at 200; the table shrinks */
    for (int i = 0; i < 1000 && table_count(t) > 100; i++)
        table_reclaim_step(t, 200, 64);
    assert_int_equal(table_count(t), 100);
    table_get_stats(t, &st);
    assert_true(st.buckets <= 512);
    table_destroy(t);
}

static void test_max_keys_evict(void **state)
{
    (void)state;
    struct table *t = mk(100, 1, 4);
    struct table_stats st;
    struct table_entry *e;
    char k[32];

    /* full of undrained keys: each new key evicts one, count stays bounded */
    for (int i = 0; i < 100; i++) {
        int len = snprintf(k, sizeof(k), "a%d", i);
        put(t, k, (size_t)len, 1000 + i);
    }
    for (int i = 0; i < 50; i++) {
        int len = snprintf(k, sizeof(k), "b%d", i);
        assert_int_equal(table_insert(t, k, (size_t)len, 8, 0, 10, &e), 0);
        int64_t far = 5000;
        memcpy(table_entry_value(e), &far, sizeof(far));
        assert_int_equal(table_count(t), 100);
    }
    table_get_stats(t, &st);
    assert_int_equal(st.evicted, 50);
    assert_int_equal(st.reclaimed, 0);
    /* the evicted ones are the nearest to drained among those sampled: with
     * 16 sampled per eviction, a "b" key (drain 5000) is never chosen while an
     * "a" key (drain <= 1099) is in the sample, which every sample of >= 2
     * buckets' worth holds (at most 50 b keys of 100). */
    for (int i = 0; i < 50; i++) {
        int len = snprintf(k, sizeof(k), "b%d", i);
        assert_int_equal(get(t, k, (size_t)len), 5000);
    }
    /* now everything is drained at 6000: new keys reclaim, not evict */
    assert_int_equal(table_insert(t, "c", 1, 8, 0, 6000, &e), 0);
    table_get_stats(t, &st);
    assert_int_equal(st.evicted, 50);
    assert_true(st.reclaimed >= 1);
    assert_true(table_count(t) <= 100);
    table_destroy(t);

    /* all pinned: nothing can be evicted */
    t = mk(10, 1, 5);
    for (int i = 0; i < 10; i++) {
        int len = snprintf(k, sizeof(k), "p%d", i);
        put(t, k, (size_t)len, 1000)->flags |= TABLE_F_PINNED;
    }
    assert_int_equal(table_insert(t, "x", 1, 8, 0, 2000, &e), -SLUICE_EFULL);
    table_get_stats(t, &st);
    assert_int_equal(st.full, 1);
    assert_int_equal(st.evicted, 0);
    table_destroy(t);
}

static void test_max_keys_fail(void **state)
{
    (void)state;
    struct table *t = mk(20, 0, 6);
    struct table_stats st;
    struct table_entry *e;
    char k[32];

    for (int i = 0; i < 20; i++) {
        int len = snprintf(k, sizeof(k), "a%d", i);
        put(t, k, (size_t)len, 100);
    }
    assert_int_equal(table_insert(t, "x", 1, 8, 0, 50, &e), -SLUICE_EFULL);
    assert_int_equal(table_insert(t, "y", 1, 8, 0, 99, &e), -SLUICE_EFULL);
    table_get_stats(t, &st);
    assert_int_equal(st.full, 2);
    assert_int_equal(table_count(t), 20);
    /* once drained, the sample reclaims and the insert succeeds */
    assert_int_equal(table_insert(t, "x", 1, 8, 0, 100, &e), 0);
    table_get_stats(t, &st);
    assert_true(st.reclaimed >= 1);
    assert_int_equal(st.evicted, 0);
    table_destroy(t);
}

/* ---- scan ---- */

struct seen {
    unsigned char *hits; /* by key index */
    int n;
};

static void scan_cb(void *ud, const struct table_entry *e)
{
    struct seen *s = ud;
    char buf[32];
    int idx;
    memcpy(buf, table_entry_key(e), e->klen);
    buf[e->klen] = 0;
    if (buf[0] == 's' && sscanf(buf + 1, "%d", &idx) == 1 && idx >= 0 && idx < s->n)
        s->hits[idx] = 1;
}

static void test_scan_under_change(void **state)
{
    (void)state;
    uint64_t rng = test_seed("table_scan");
    char k[32];

    for (int round = 0; round < 20; round++) {
        struct table *t = mk(0, 0, test_rand(&rng));
        struct seen s;
        uint64_t cursor = 0;
        int churn = 0, churn_lo = 0, calls = 0;
        const int stable = (int)test_rand_range(&rng, 1, 3000);

        s.n = stable;
        s.hits = calloc((size_t)stable, 1);
        assert_non_null(s.hits);
        for (int i = 0; i < stable; i++) {
            int len = snprintf(k, sizeof(k), "s%d", i);
            put(t, k, (size_t)len, 0);
        }
        do {
            cursor = table_scan(t, cursor, (size_t)test_rand_range(&rng, 1, 50), scan_cb, &s);
            calls++;
            /* between calls: grow a lot, or remove churn keys (shrink) */
            if (test_rand_range(&rng, 0, 1) == 0) {
                int add = (int)test_rand_range(&rng, 0, 2000);
                for (int i = 0; i < add; i++) {
                    int len = snprintf(k, sizeof(k), "c%d", churn++);
                    put(t, k, (size_t)len, 0);
                }
            } else {
                for (int i = churn_lo; i < churn; i++) {
                    int len = snprintf(k, sizeof(k), "c%d", i);
                    struct table_entry *e = table_find(t, k, (size_t)len);
                    assert_non_null(e);
                    table_delete(t, e);
                }
                churn_lo = churn;
            }
        } while (cursor != 0 && calls < 1000000);
        assert_int_equal(cursor, 0);
        for (int i = 0; i < stable; i++) {
            if (!s.hits[i])
                fail_msg("round %d: stable key s%d missed by the scan", round, i);
        }
        free(s.hits);
        table_destroy(t);
    }
}

/* ---- random model test against a direct-indexed array ---- */

/* Entries freed by the table itself are logged through the free hook. */
static uint32_t flog[8192];
static int flog_n, flog_on;

static void on_free_log(void *ud, struct table_entry *e)
{
    char buf[16];
    (void)ud;
    if (!flog_on)
        return;
    assert_true(e->klen < sizeof(buf));
    memcpy(buf, table_entry_key(e), e->klen);
    buf[e->klen] = 0;
    assert_true(flog_n < (int)(sizeof(flog) / sizeof(flog[0])));
    flog[flog_n++] = (uint32_t)strtoul(buf, NULL, 10);
}

#define MODEL_KEYS 4096

static void test_random_model(void **state)
{
    (void)state;
    uint64_t rng = test_seed("table_model");
    struct table_config cfg;
    struct table *t;
    static struct {
        int present, pinned;
        int64_t val;
    } m[MODEL_KEYS];
    size_t n = 0;
    int64_t now = 0;
    char k[16];

    memset(m, 0, sizeof(m));
    memset(&cfg, 0, sizeof(cfg));
    cfg.seed[0] = test_rand(&rng);
    cfg.drain = drain_of;
    cfg.free_value = on_free_log;
    assert_int_equal(table_create(&t, &cfg), 0);
    for (int step = 0; step < 300000; step++) {
        uint32_t key = (uint32_t)test_rand_range(&rng, 0, MODEL_KEYS - 1);
        int len = snprintf(k, sizeof(k), "%u", key);
        struct table_entry *e = table_find(t, k, (size_t)len);
        int op = (int)test_rand_range(&rng, 0, 99);

        assert_int_equal(e != NULL, m[key].present);
        if (e != NULL) {
            int64_t v;
            memcpy(&v, table_entry_value(e), sizeof(v));
            assert_true(v == m[key].val);
        }
        if (op < 45 && e == NULL) {
            int64_t v = now + test_rand_range(&rng, 1, 1000);
            e = put(t, k, (size_t)len, v);
            m[key].pinned = test_rand_range(&rng, 0, 20) == 0;
            if (m[key].pinned)
                e->flags |= TABLE_F_PINNED;
            m[key].present = 1;
            m[key].val = v;
            n++;
        } else if (op < 70 && e != NULL) {
            table_delete(t, e);
            m[key].present = 0;
            n--;
        } else if (op < 80 && e != NULL) {
            int64_t v = now + test_rand_range(&rng, 0, 1000);
            memcpy(table_entry_value(e), &v, sizeof(v));
            m[key].val = v;
        } else if (op < 99) {
            size_t freed;
            now += test_rand_range(&rng, 0, 20);
            flog_n = 0;
            flog_on = 1;
            freed = table_reclaim_step(t, now, (size_t)test_rand_range(&rng, 0, 8));
            flog_on = 0;
            assert_int_equal(freed, (size_t)flog_n);
            for (int i = 0; i < flog_n; i++) {
                uint32_t fk = flog[i];
                assert_true(fk < MODEL_KEYS && m[fk].present);
                assert_true(m[fk].val <= now && !m[fk].pinned);
                m[fk].present = 0;
                n--;
            }
        } else {
            /* a full sweep frees every drained unpinned entry, and only those */
            struct table_stats st;
            table_get_stats(t, &st);
            table_reclaim_step(t, now, (size_t)st.buckets);
            for (uint32_t i = 0; i < MODEL_KEYS; i++) {
                if (m[i].present && m[i].val <= now && !m[i].pinned) {
                    m[i].present = 0;
                    n--;
                }
            }
        }
        assert_int_equal(table_count(t), n);
    }
    for (uint32_t i = 0; i < MODEL_KEYS; i++) {
        int len = snprintf(k, sizeof(k), "%u", i);
        assert_int_equal(table_find(t, k, (size_t)len) != NULL, m[i].present);
    }
    table_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),           cmocka_unit_test(test_collisions_growth_shrink),
        cmocka_unit_test(test_reclaim),         cmocka_unit_test(test_max_keys_evict),
        cmocka_unit_test(test_max_keys_fail),   cmocka_unit_test(test_scan_under_change),
        cmocka_unit_test(test_random_model),    cmocka_unit_test(test_hashed_and_shared_seed),
        cmocka_unit_test(test_growth_prepared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
