/* Unit tests: rendezvous hashing, the owner choice of global keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "hrw.h"

#define KEYS 20000

static uint64_t name_hash(int i)
{
    char b[32];
    int n = snprintf(b, sizeof(b), "node-%d", i);
    return hrw_hash(b, (size_t)n);
}

static uint64_t key_hash(int k)
{
    char b[32];
    int n = snprintf(b, sizeof(b), "user:%d", k);
    return hrw_hash(b, (size_t)n);
}

/* Each of N members owns about 1/N of the keys. */
static void test_uniform(void **state)
{
    (void)state;
    uint64_t mh[10];
    int owned[10] = {0};
    for (int i = 0; i < 10; i++)
        mh[i] = name_hash(i);
    for (int k = 0; k < KEYS; k++)
        owned[hrw_pick(key_hash(k), mh, 10)]++;
    for (int i = 0; i < 10; i++) {
        assert_true(owned[i] > KEYS / 10 * 8 / 10);
        assert_true(owned[i] < KEYS / 10 * 12 / 10);
    }
}

/* A join moves about 1/(N+1) of the keys, all to the newcomer; a leave
 * moves only the leaver's keys. */
static void test_join_leave_moves_one_nth(void **state)
{
    (void)state;
    uint64_t mh[11];
    for (int i = 0; i < 11; i++)
        mh[i] = name_hash(i);
    int moved = 0;
    for (int k = 0; k < KEYS; k++) {
        uint64_t kh = key_hash(k);
        size_t before = hrw_pick(kh, mh, 10), after = hrw_pick(kh, mh, 11);
        if (before != after) {
            moved++;
            assert_int_equal(after, 10); /* only to the newcomer */
        }
    }
    double f = (double)moved / KEYS;
    assert_true(f > 0.8 / 11 && f < 1.2 / 11);

    /* member 3 leaves: the list without it, same order otherwise */
    uint64_t rest[9];
    size_t map[9];
    for (int i = 0, j = 0; i < 10; i++)
        if (i != 3) {
            rest[j] = mh[i];
            map[j++] = (size_t)i;
        }
    moved = 0;
    for (int k = 0; k < KEYS; k++) {
        uint64_t kh = key_hash(k);
        size_t before = hrw_pick(kh, mh, 10), after = map[hrw_pick(kh, rest, 9)];
        if (before != after) {
            moved++;
            assert_int_equal(before, 3); /* only the leaver's keys */
        }
    }
    f = (double)moved / KEYS;
    assert_true(f > 0.8 / 10 && f < 1.2 / 10);
}

/* The choice does not depend on the order of the member list. */
static void test_order_independent(void **state)
{
    (void)state;
    uint64_t a[5], b[5];
    for (int i = 0; i < 5; i++) {
        a[i] = name_hash(i);
        b[4 - i] = a[i];
    }
    for (int k = 0; k < 1000; k++) {
        uint64_t kh = key_hash(k);
        assert_int_equal(a[hrw_pick(kh, a, 5)], b[hrw_pick(kh, b, 5)]);
    }
}

/* The hash is a function of the bytes alone (every host computes the same
 * owner): FNV-1a of "" mixed, and binary keys with NULs differ. */
static void test_hash_bytes(void **state)
{
    (void)state;
    assert_int_equal(hrw_hash("abc", 3), hrw_hash("abc", 3));
    assert_int_not_equal(hrw_hash("a\0b", 3), hrw_hash("a\0c", 3));
    assert_int_not_equal(hrw_hash("", 0), hrw_hash("a", 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_join_leave_moves_one_nth),
        cmocka_unit_test(test_order_independent),
        cmocka_unit_test(test_hash_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
