/*
 * clientmem_pick: over the budget, the heaviest clients go first, and no
 * more of them than it takes to be within the budget again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "clientmem.h"

static int ids[16];

static void fill(struct clientmem_entry *e, const size_t *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int)i;
        e[i].bytes = bytes[i];
        e[i].client = &ids[i];
    }
}

static size_t sum(const size_t *bytes, size_t n)
{
    size_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += bytes[i];
    return t;
}

static int id_of(const struct clientmem_entry *e)
{
    return *(const int *)e->client;
}

static void test_within_budget_picks_none(void **state)
{
    static const size_t b[] = {100, 900, 50};
    struct clientmem_entry e[3];
    fill(e, b, 3);
    assert_int_equal(clientmem_pick(e, 3, sum(b, 3), 1050), 0);
    assert_int_equal(clientmem_pick(e, 3, sum(b, 3), 2000), 0);
    assert_int_equal(clientmem_pick(e, 0, 0, 0), 0);
}

static void test_heaviest_first_and_no_more_than_needed(void **state)
{
    static const size_t b[] = {10, 500, 20, 300, 40, 200};
    struct clientmem_entry e[6];
    fill(e, b, 6);
    /* 1070 over 1000: the heaviest alone (500) is enough. */
    assert_int_equal(clientmem_pick(e, 6, sum(b, 6), 1000), 1);
    assert_int_equal(id_of(&e[0]), 1);
    /* Over 400: 500 then 300 leave 270. */
    fill(e, b, 6);
    assert_int_equal(clientmem_pick(e, 6, sum(b, 6), 400), 2);
    assert_int_equal(id_of(&e[0]), 1);
    assert_int_equal(id_of(&e[1]), 3);
    /* Exactly at the budget is within it. */
    fill(e, b, 6);
    assert_int_equal(clientmem_pick(e, 6, sum(b, 6), 270), 2);
    fill(e, b, 6);
    assert_int_equal(clientmem_pick(e, 6, sum(b, 6), 269), 3);
    assert_int_equal(id_of(&e[2]), 5);
    /* Every client is still listed once. */
    int seen[6] = {0};
    for (int i = 0; i < 6; i++)
        seen[id_of(&e[i])]++;
    for (int i = 0; i < 6; i++)
        assert_int_equal(seen[i], 1);
}

static void test_not_enough_takes_all(void **state)
{
    /* The total counts memory beyond these clients: all go, heaviest first. */
    static const size_t b[] = {5, 7, 6};
    struct clientmem_entry e[3];
    fill(e, b, 3);
    assert_int_equal(clientmem_pick(e, 3, 1000, 100), 3);
    assert_int_equal(e[0].bytes, 7);
    assert_int_equal(e[1].bytes, 6);
    assert_int_equal(e[2].bytes, 5);
}

static void test_one_heavy_among_many_light(void **state)
{
    /* The scenario of the issue in small: many light clients, one flooding
     * its buffers; only the flooder goes. */
    size_t b[16];
    for (int i = 0; i < 16; i++)
        b[i] = 1000;
    b[11] = 600000;
    struct clientmem_entry e[16];
    fill(e, b, 16);
    assert_int_equal(clientmem_pick(e, 16, sum(b, 16), 64 * 1024), 1);
    assert_int_equal(id_of(&e[0]), 11);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_within_budget_picks_none),
        cmocka_unit_test(test_heaviest_first_and_no_more_than_needed),
        cmocka_unit_test(test_not_enough_takes_all),
        cmocka_unit_test(test_one_heavy_among_many_light),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
