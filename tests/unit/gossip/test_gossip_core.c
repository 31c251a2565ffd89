/*
 * libgossip internals with exact expectations: the membership table (hash
 * lookups stay right through thousands of inserts and removals), Lifeguard's
 * suspicion timeout curve, and the retransmit queue (limit, replacement by
 * key, drop policy, packet capacity).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broadcast.h"
#include "member.h"
#include "testutil.h"

static uint64_t seed;

static void test_member_table_churn(void **state)
{
    (void)state;
    enum { N = 3000 };
    static char present[N];
    struct member_table t;
    uint64_t rng = seed;
    char name[32];
    memset(present, 0, sizeof(present));
    assert_int_equal(member_table_init(&t), 0);
    for (int step = 0; step < 20000; step++) {
        int k = (int)(test_rand(&rng) % N);
        int len = snprintf(name, sizeof(name), "member-%d", k);
        struct member *m = member_find(&t, name, (size_t)len);
        assert_int_equal(m != NULL, present[k]);
        if (m == NULL) {
            m = member_add(&t, name, (size_t)len);
            assert_non_null(m);
            m->incarnation = (uint32_t)k;
            present[k] = 1;
        } else {
            assert_int_equal(m->incarnation, k);
            assert_string_equal(m->name, name);
            if (test_rand(&rng) % 2) {
                member_remove(&t, m);
                present[k] = 0;
            }
        }
    }
    size_t count = 0;
    for (int k = 0; k < N; k++)
        count += present[k];
    assert_int_equal(t.n, count);
    for (size_t i = 0; i < t.n; i++)
        assert_int_equal(t.v[i]->idx, i);
    assert_null(member_find(&t, "", 0));
    member_table_free(&t);
}

/* memberlist's suspicion.go: max at no confirmation, min at k, log-scaled. */
static void test_suspicion_timeout_curve(void **state)
{
    (void)state;
    const int64_t s = 1000000000LL;
    assert_int_equal(member_suspicion_timeout(6 * s, 36 * s, 2, 0), 36 * s);
    int64_t one = member_suspicion_timeout(6 * s, 36 * s, 2, 1);
    /* 36 - log(2)/log(3) * 30 = 17.07 s */
    assert_true(one > 17 * s && one < 17 * s + s / 10);
    assert_int_equal(member_suspicion_timeout(6 * s, 36 * s, 2, 2), 6 * s);
    assert_int_equal(member_suspicion_timeout(6 * s, 36 * s, 2, 9), 6 * s);
    assert_int_equal(member_suspicion_timeout(6 * s, 36 * s, 0, 0), 6 * s);
    int64_t prev = 36 * s;
    for (int c = 1; c <= 5; c++) {
        int64_t t = member_suspicion_timeout(6 * s, 36 * s, 5, c);
        assert_true(t < prev);
        prev = t;
    }
}

static void test_broadcast_limit_and_order(void **state)
{
    (void)state;
    struct broadcast_queue q;
    uint8_t buf[256];
    size_t len, n;
    broadcast_init(&q, 16);
    assert_int_equal(broadcast_push(&q, 0, (const uint8_t *)"old", 3), 0);
    assert_int_equal(broadcast_push(&q, 0, (const uint8_t *)"new", 3), 0);
    /* Room for one item: the newest untransmitted goes first. */
    len = 0;
    n = 0;
    broadcast_fill(&q, 2, 1, buf, 3, &len, &n);
    assert_int_equal(n, 1);
    assert_memory_equal(buf, "new", 3);
    /* Next packet: the least transmitted ("old") first. */
    len = 0;
    n = 0;
    broadcast_fill(&q, 2, 2, buf, 3, &len, &n);
    assert_memory_equal(buf, "old", 3);
    /* Each is retired after 2 transmissions. */
    for (uint64_t pkt = 3; pkt < 10; pkt++) {
        len = 0;
        n = 0;
        broadcast_fill(&q, 2, pkt, buf, sizeof(buf), &len, &n);
    }
    assert_int_equal(q.n, 0);
    /* A second pass over the same packet does not repeat an item. */
    broadcast_push(&q, 0, (const uint8_t *)"x", 1);
    len = 0;
    n = 0;
    broadcast_fill(&q, 9, 42, buf, sizeof(buf), &len, &n);
    broadcast_fill(&q, 9, 42, buf, sizeof(buf), &len, &n);
    assert_int_equal(n, 1);
    broadcast_free(&q);
}

static void test_broadcast_replace_and_drop(void **state)
{
    (void)state;
    struct broadcast_queue q;
    uint8_t buf[64];
    size_t len = 0, n = 0;
    broadcast_init(&q, 3);
    broadcast_push(&q, 7, (const uint8_t *)"a1", 2);
    broadcast_push(&q, 7, (const uint8_t *)"a2", 2); /* replaces a1 */
    assert_int_equal(q.n, 1);
    broadcast_fill(&q, 10, 1, buf, sizeof(buf), &len, &n);
    assert_memory_equal(buf, "a2", 2);
    broadcast_push(&q, 0, (const uint8_t *)"b", 1);
    broadcast_push(&q, 0, (const uint8_t *)"c", 1);
    /* Full: the most transmitted (a2) is dropped for d. */
    broadcast_push(&q, 0, (const uint8_t *)"d", 1);
    assert_int_equal(q.n, 3);
    assert_int_equal(q.dropped, 1);
    for (size_t i = 0; i < q.n; i++)
        assert_int_not_equal(q.v[i]->key, 7);
    /* Items never straddle the capacity. */
    len = 0;
    n = 0;
    broadcast_fill(&q, 10, 2, buf, 2, &len, &n);
    assert_int_equal(len, 2);
    assert_int_equal(n, 2);
    broadcast_free(&q);
}

int main(void)
{
    seed = test_seed("unit_gossip_core");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_member_table_churn),
        cmocka_unit_test(test_suspicion_timeout_curve),
        cmocka_unit_test(test_broadcast_limit_and_order),
        cmocka_unit_test(test_broadcast_replace_and_drop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
