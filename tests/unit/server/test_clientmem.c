/*
 * clientmem_pick: over the budget, the heaviest clients go first, and no
 * more of them than it takes to be within the budget again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* Two listeners' pools under one budget: each with three connections of
 * the given sizes; evict drops one from its pool. */
struct fake_pool {
    struct clientmem_pool pool;
    size_t conn[3];
    int closed[3];
};

static void *fake_heaviest(void *ud, size_t *bytes)
{
    struct fake_pool *f = ud;
    int best = -1;
    for (int i = 0; i < 3; i++)
        if (!f->closed[i] && (best < 0 || f->conn[i] > f->conn[best]))
            best = i;
    if (best < 0)
        return NULL;
    *bytes = f->conn[best];
    return &f->conn[best];
}

static void fake_evict(void *ud, void *conn)
{
    struct fake_pool *f = ud;
    int i = (int)((size_t *)conn - f->conn);
    f->closed[i] = 1;
    clientmem_charge(&f->pool, f->conn[i], 0);
}

static size_t freed_total;
static void on_freed(void *ud, size_t bytes)
{
    (void)ud;
    freed_total += bytes;
}

static void fake_init(struct fake_pool *f, struct clientmem_budget *b, size_t a, size_t c, size_t d)
{
    memset(f, 0, sizeof(*f));
    f->conn[0] = a;
    f->conn[1] = c;
    f->conn[2] = d;
    f->pool.heaviest = fake_heaviest;
    f->pool.evict = fake_evict;
    f->pool.ud = f;
    clientmem_join(b, &f->pool);
    for (int i = 0; i < 3; i++)
        clientmem_charge(&f->pool, 0, f->conn[i]);
}

static void test_one_budget_heaviest_of_any_listener(void **state)
{
    /* RESP clients are light; one HTTP/2 connection holds most: it alone
     * goes, whichever pool asked, and the others' clients stay. */
    struct clientmem_budget b;
    struct fake_pool resp, grpc;
    clientmem_budget_init(&b, 1000);
    b.freed = on_freed;
    freed_total = 0;
    fake_init(&resp, &b, 100, 200, 150);
    fake_init(&grpc, &b, 50, 900, 60);
    assert_int_equal(clientmem_total(&b), 1460);
    assert_true(clientmem_over(&resp.pool));
    assert_int_equal(clientmem_enforce(&b), 1);
    assert_true(grpc.closed[1]);
    assert_false(resp.closed[0] || resp.closed[1] || resp.closed[2]);
    assert_int_equal(clientmem_total(&b), 560);
    assert_int_equal(freed_total, 900);
    assert_false(clientmem_over(&grpc.pool));
    /* A pool that left counts no more and is never asked. */
    clientmem_leave(&grpc.pool);
    assert_int_equal(clientmem_total(&b), 450);
    b.max = 300;
    assert_int_equal(clientmem_enforce(&b), 1);
    assert_true(resp.closed[1]);
    assert_false(grpc.closed[0] || grpc.closed[2]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_within_budget_picks_none),
        cmocka_unit_test(test_heaviest_first_and_no_more_than_needed),
        cmocka_unit_test(test_not_enough_takes_all),
        cmocka_unit_test(test_one_heavy_among_many_light),
        cmocka_unit_test(test_one_budget_heaviest_of_any_listener),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
