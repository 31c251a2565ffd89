/*
 * The key table's entry allocator: every size of 1..SLAB_MAX gives its own
 * writable, aligned object; a freed object is the next one its class hands
 * out; objects of a million-key table's worth spread over many regions
 * keep their contents; pages whose objects are all freed go back to the
 * system and are taken again; and a table's entries come from its slab, but for
 * those too large for it (long keys), which it keeps on the heap.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "slab.h"
#include "sluice/error.h"
#include "table.h"

static void test_sizes_and_reuse(void **state)
{
    (void)state;
    struct slab *s;
    assert_int_equal(slab_create(&s), 0);
    assert_null(slab_alloc(s, 0));
    assert_null(slab_alloc(s, SLAB_MAX + 1));
    static unsigned char *p[SLAB_MAX + 1];
    for (size_t n = 1; n <= SLAB_MAX; n++) {
        p[n] = slab_alloc(s, n);
        assert_non_null(p[n]);
        assert_int_equal((uintptr_t)p[n] % 8, 0);
        memset(p[n], (int)(n & 0xff), n);
    }
    /* No object overlaps another: each still holds its own bytes. */
    for (size_t n = 1; n <= SLAB_MAX; n++)
        for (size_t i = 0; i < n; i++)
            assert_int_equal(p[n][i], n & 0xff);
    struct slab_stats st;
    slab_get_stats(s, &st);
    assert_int_equal(st.live, SLAB_MAX);
    /* A freed object is the next its class gives (the same 8-byte class:
     * 17..24 bytes share one), and another class does not take it. */
    slab_free(s, p[20]);
    unsigned char *q = slab_alloc(s, 100);
    assert_ptr_not_equal(q, p[20]);
    assert_ptr_equal(slab_alloc(s, 24), p[20]);
    slab_free(s, q);
    for (size_t n = 1; n <= SLAB_MAX; n++)
        slab_free(s, p[n]);
    slab_free(s, NULL);
    slab_get_stats(s, &st);
    assert_int_equal(st.live, 0);
    slab_destroy(s);
    slab_destroy(NULL);
}

/* 300,000 objects of 184 bytes (a replica's node entry) over some 27 regions:
 * all distinct and intact; half freed and made again reuse the freed ones
 * (no region more). */
static void test_many_regions(void **state)
{
    (void)state;
    enum { N = 300000, SZ = 184 };
    struct slab *s;
    assert_int_equal(slab_create(&s), 0);
    uint64_t **p = calloc(N, sizeof(*p));
    assert_non_null(p);
    for (uint64_t i = 0; i < N; i++) {
        p[i] = slab_alloc(s, SZ);
        assert_non_null(p[i]);
        p[i][0] = i;
        p[i][SZ / 8 - 1] = ~i;
    }
    struct slab_stats st;
    slab_get_stats(s, &st);
    assert_true(st.regions >= (uint64_t)N * SZ / (2u << 20));
    uint64_t regions = st.regions;
    for (uint64_t i = 0; i < N; i += 2)
        slab_free(s, p[i]);
    for (uint64_t i = 0; i < N; i += 2) {
        p[i] = slab_alloc(s, SZ);
        p[i][0] = i;
        p[i][SZ / 8 - 1] = ~i;
    }
    slab_get_stats(s, &st);
    assert_int_equal(st.regions, regions);
    assert_int_equal(st.live, N);
    for (uint64_t i = 0; i < N; i++) {
        assert_int_equal(p[i][0], i);
        assert_int_equal(p[i][SZ / 8 - 1], ~i);
    }
    free(p);
    slab_destroy(s);
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &res) != 2)
        res = 0;
    fclose(f);
    return res * 4;
}

/* 60 MB of objects of two sizes, all freed: their pages go back to the
 * system (RSS falls by most of what they took) but one kept per class,
 * and made again they reuse the same regions. */
static void test_release(void **state)
{
    (void)state;
    enum { N = 200000 };
    struct slab *s;
    assert_int_equal(slab_create(&s), 0);
    char **p = calloc(N, sizeof(*p));
    assert_non_null(p);
    long before = rss_kb();
    for (size_t i = 0; i < N; i++) {
        p[i] = slab_alloc(s, i % 2 ? 184 : 400);
        assert_non_null(p[i]);
        memset(p[i], 1, i % 2 ? 184 : 400);
    }
    long peak = rss_kb();
    struct slab_stats st;
    slab_get_stats(s, &st);
    uint64_t regions = st.regions, pages = st.pages;
    for (size_t i = 0; i < N; i++)
        slab_free(s, p[i]);
    long after = rss_kb();
    slab_get_stats(s, &st);
    printf("rss %ld -> %ld -> %ld kB, %llu pages, %llu released, %llu kept\n", before, peak, after,
           (unsigned long long)pages, (unsigned long long)st.released,
           (unsigned long long)st.pages);
    assert_int_equal(st.live, 0);
    assert_true(st.pages <= 2);
    assert_int_equal(st.released, pages - st.pages);
    assert_true(after - before < (peak - before) / 2);
    for (size_t i = 0; i < N; i++) {
        p[i] = slab_alloc(s, i % 2 ? 184 : 400);
        assert_non_null(p[i]);
        memset(p[i], 2, i % 2 ? 184 : 400);
    }
    slab_get_stats(s, &st);
    assert_int_equal(st.regions, regions);
    assert_int_equal(st.pages, pages);
    free(p);
    slab_destroy(s);
}

static int64_t never(void *ud, const struct table_entry *e)
{
    (void)ud;
    (void)e;
    return INT64_MAX;
}

/* A table's entries: short keys from the slab, a key too long for it on
 * the heap; both found, deleted and freed alike (ASan checks the frees). */
static void test_table_long_keys(void **state)
{
    (void)state;
    struct table_config cfg = {.drain = never};
    struct table *t;
    assert_int_equal(table_create(&t, &cfg), 0);
    static char big[4000];
    memset(big, 'k', sizeof(big));
    struct table_entry *e;
    assert_int_equal(table_insert(t, "short", 5, 8, 0, 0, &e), 0);
    assert_int_equal(e->flags & TABLE_F_HEAP, 0);
    assert_int_equal(table_insert(t, big, sizeof(big), 8, 0, 0, &e), 0);
    assert_int_equal(e->flags & TABLE_F_HEAP, TABLE_F_HEAP);
    memset(table_entry_value(e), 0x5a, 8);
    e = table_find(t, big, sizeof(big));
    assert_non_null(e);
    assert_int_equal(((unsigned char *)table_entry_value(e))[7], 0x5a);
    table_delete(t, e);
    assert_null(table_find(t, big, sizeof(big)));
    assert_non_null(table_find(t, "short", 5));
    assert_int_equal(table_insert(t, big, sizeof(big), 8, 0, 0, &e), 0);
    table_destroy(t); /* the short key and the long one again */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_reuse),
        cmocka_unit_test(test_many_regions),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_table_long_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
