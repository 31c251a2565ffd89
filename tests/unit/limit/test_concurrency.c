/*
 * concurrency: the lease semaphore core.  Grants up to the cap and never
 * beyond, release by id (and only of the right key), renew, expiry in
 * order on the caller's clock, owners that release everything at once, a
 * cap lowered under what is held, and a seeded random run checked against
 * a plain model after every step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "concurrency.h"
#include "sluice/error.h"
#include "testutil.h"

#define MS ((int64_t)1000000)

static int freed_calls;
static char freed_key[64];

static void on_freed(void *ud, const char *key, size_t klen)
{
    (void)ud;
    freed_calls++;
    snprintf(freed_key, sizeof(freed_key), "%.*s", (int)klen, key);
}

static struct conc *mk(void)
{
    struct conc *c;
    struct conc_config cfg = {0, 1000};
    assert_int_equal(conc_create(&cfg, &c), 0);
    return c;
}

static void test_cap_is_exact(void **state)
{
    (void)state;
    struct conc *c = mk();
    struct conc_result r;
    uint64_t ids[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(conc_acquire(c, "k", 1, 3, 1, 1000 * MS, NULL, 0, &r), 0);
        assert_true(r.granted);
        assert_true(r.id > 1000);
        assert_int_equal(r.held, i + 1);
        assert_int_equal(r.expires_ns, 1000 * MS);
        ids[i] = r.id;
    }
    assert_true(ids[0] != ids[1] && ids[1] != ids[2]);
    /* full: refused, with the wait until the earliest lease expires */
    assert_int_equal(conc_acquire(c, "k", 1, 3, 1, 1000 * MS, NULL, 400 * MS, &r), 0);
    assert_false(r.granted);
    assert_int_equal(r.held, 3);
    assert_int_equal(r.limit, 3);
    assert_int_equal(r.retry_after_ns, 600 * MS);
    /* more than the cap can never fit */
    assert_int_equal(conc_acquire(c, "k", 1, 3, 4, 1000 * MS, NULL, 0, &r), 0);
    assert_false(r.granted);
    assert_int_equal(r.retry_after_ns, -1);
    /* another key is independent */
    assert_int_equal(conc_acquire(c, "j", 1, 3, 3, 1000 * MS, NULL, 0, &r), 0);
    assert_true(r.granted);
    struct conc_stats st;
    conc_get_stats(c, &st);
    assert_int_equal(st.keys, 2);
    assert_int_equal(st.leases, 4);
    assert_int_equal(st.held, 6);
    assert_int_equal(st.granted, 4);
    assert_int_equal(st.refused, 2);
    conc_destroy(c);
}

static void test_qty_and_release(void **state)
{
    (void)state;
    struct conc *c = mk();
    struct conc_result r;
    assert_int_equal(conc_acquire(c, "k", 1, 5, 3, 10 * MS, NULL, 0, &r), 0);
    uint64_t a = r.id;
    assert_int_equal(conc_acquire(c, "k", 1, 5, 3, 10 * MS, NULL, 0, &r), 0);
    assert_false(r.granted);
    assert_int_equal(conc_acquire(c, "k", 1, 5, 2, 10 * MS, NULL, 0, &r), 0);
    assert_true(r.granted);
    /* the wrong key or an unknown id frees nothing */
    assert_int_equal(conc_release(c, "x", 1, a, on_freed, NULL), -SLUICE_ENOENT);
    assert_int_equal(conc_release(c, "k", 1, a + 100, on_freed, NULL), -SLUICE_ENOENT);
    assert_int_equal(freed_calls, 0);
    assert_int_equal(conc_held(c, "k", 1), 5);
    freed_calls = 0;
    assert_int_equal(conc_release(c, "k", 1, a, on_freed, NULL), 0);
    assert_int_equal(freed_calls, 1);
    assert_string_equal(freed_key, "k");
    assert_int_equal(conc_held(c, "k", 1), 2);
    /* released twice: the second is unknown */
    assert_int_equal(conc_release(c, "k", 1, a, on_freed, NULL), -SLUICE_ENOENT);
    assert_int_equal(conc_acquire(c, "k", 1, 5, 3, 10 * MS, NULL, 0, &r), 0);
    assert_true(r.granted);
    /* bad arguments change nothing */
    assert_int_equal(conc_acquire(c, "k", 1, 5, 0, 10 * MS, NULL, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(conc_acquire(c, "k", 1, 5, 1, 0, NULL, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(conc_acquire(c, "k", 1, -1, 1, 1, NULL, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(conc_acquire(c, "k", 1, 5, 1, CONC_MAX_TTL_NS + 1, NULL, 0, &r),
                     -SLUICE_EINVAL);
    assert_int_equal(conc_held(c, "k", 1), 5);
    conc_destroy(c);
}

static void test_expiry_and_renew(void **state)
{
    (void)state;
    struct conc *c = mk();
    struct conc_result r;
    int64_t exp;
    assert_int_equal(conc_acquire(c, "k", 1, 2, 1, 100 * MS, NULL, 0, &r), 0);
    uint64_t a = r.id;
    assert_int_equal(conc_acquire(c, "k", 1, 2, 1, 50 * MS, NULL, 10 * MS, &r), 0);
    uint64_t b = r.id;
    assert_int_equal(conc_next_expiry(c), 60 * MS);
    /* b renewed to 90 + 100: a now expires first */
    assert_int_equal(conc_renew(c, "k", 1, b, 100 * MS, 90 * MS, &exp), 0);
    assert_int_equal(exp, 190 * MS);
    assert_int_equal(conc_next_expiry(c), 100 * MS);
    freed_calls = 0;
    assert_int_equal(conc_expire(c, 99 * MS, on_freed, NULL), 0);
    assert_int_equal(conc_held(c, "k", 1), 2);
    assert_int_equal(conc_expire(c, 100 * MS, on_freed, NULL), 1);
    assert_int_equal(freed_calls, 1);
    assert_int_equal(conc_held(c, "k", 1), 1);
    assert_int_equal(conc_renew(c, "k", 1, a, 10 * MS, 100 * MS, &exp), -SLUICE_ENOENT);
    assert_int_equal(conc_expire(c, 500 * MS, on_freed, NULL), 1);
    assert_int_equal(conc_held(c, "k", 1), 0);
    assert_int_equal(conc_next_expiry(c), INT64_MAX);
    struct conc_stats st;
    conc_get_stats(c, &st);
    assert_int_equal(st.expired, 2);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.held, 0);
    conc_destroy(c);
}

/* A waiter granted from inside the freed hook: the slot is reused at once
 * and the new lease is not ended by the same expiry pass. */
static struct conc *hook_conc;
static int hook_grants;
static void on_freed_grant(void *ud, const char *key, size_t klen)
{
    struct conc_result r;
    (void)ud;
    assert_int_equal(conc_acquire(hook_conc, key, klen, 1, 1, 5 * MS, NULL, 100 * MS, &r), 0);
    hook_grants += r.granted;
}

static void test_grant_from_hook(void **state)
{
    (void)state;
    struct conc *c = mk();
    struct conc_result r;
    hook_conc = c;
    hook_grants = 0;
    assert_int_equal(conc_acquire(c, "k", 1, 1, 1, 10 * MS, NULL, 0, &r), 0);
    assert_int_equal(conc_expire(c, 100 * MS, on_freed_grant, NULL), 1);
    assert_int_equal(hook_grants, 1);
    assert_int_equal(conc_held(c, "k", 1), 1);
    assert_int_equal(conc_next_expiry(c), 105 * MS);
    conc_destroy(c);
}

/* Ids name pool slots: an ended lease's id, whose slot a new lease took,
 * finds nothing; neither do ids never handed out; ids stay below 2^53
 * even from a base near the top; a pool grown past one chunk keeps every
 * lease reachable. */
static void test_ids_and_pool(void **state)
{
    (void)state;
    struct conc *c;
    struct conc_config cfg = {5000, ((uint64_t)1 << 60) - 3};
    struct conc_result r;
    static uint64_t ids[3000];
    assert_int_equal(conc_create(&cfg, &c), 0);
    for (int i = 0; i < 3000; i++) {
        assert_int_equal(conc_acquire(c, "k", 1, 5000, 1, 10 * MS, NULL, 0, &r), 0);
        assert_true(r.granted);
        assert_true(r.id > 0 && r.id < ((uint64_t)1 << 53));
        for (int j = 0; j < i; j += 97)
            assert_true(ids[j] != r.id);
        ids[i] = r.id;
    }
    assert_int_equal(conc_held(c, "k", 1), 3000);
    /* the first lease ends; a new one takes its slot under another id */
    assert_int_equal(conc_release(c, "k", 1, ids[0], NULL, NULL), 0);
    assert_int_equal(conc_acquire(c, "k", 1, 5000, 1, 10 * MS, NULL, 0, &r), 0);
    assert_true(r.id != ids[0]);
    assert_int_equal(conc_release(c, "k", 1, ids[0], NULL, NULL), -SLUICE_ENOENT);
    int64_t e;
    assert_int_equal(conc_renew(c, "k", 1, ids[0], 0, 0, &e), -SLUICE_ENOENT);
    /* ids never made: 0, a slot beyond the pool, a wrong counter */
    assert_int_equal(conc_release(c, "k", 1, 0, NULL, NULL), -SLUICE_ENOENT);
    assert_int_equal(conc_release(c, "k", 1, ((uint64_t)1 << 53) - 1, NULL, NULL), -SLUICE_ENOENT);
    assert_int_equal(conc_release(c, "k", 1, ids[5] ^ ((uint64_t)1 << 40), NULL, NULL),
                     -SLUICE_ENOENT);
    /* every other lease is still found by its id, on its own key only */
    assert_int_equal(conc_release(c, "j", 1, ids[2999], NULL, NULL), -SLUICE_ENOENT);
    for (int i = 1; i < 3000; i++)
        assert_int_equal(conc_release(c, "k", 1, ids[i], NULL, NULL), 0);
    assert_int_equal(conc_release(c, "k", 1, r.id, NULL, NULL), 0);
    assert_int_equal(conc_held(c, "k", 1), 0);
    struct conc_stats st;
    conc_get_stats(c, &st);
    assert_int_equal(st.leases, 0);
    assert_int_equal(st.keys, 0);
    conc_destroy(c);
    /* more than 2^32 leases cannot be counted in an id's slot bits */
    cfg.max_leases = ((size_t)1 << 32) + 1;
    assert_int_equal(conc_create(&cfg, &c), -SLUICE_EINVAL);
}

static void test_owner_release(void **state)
{
    (void)state;
    struct conc *c = mk();
    struct conc_owner *o1, *o2;
    struct conc_result r;
    assert_int_equal(conc_owner_new(c, &o1), 0);
    assert_int_equal(conc_owner_new(c, &o2), 0);
    assert_int_equal(conc_acquire(c, "a", 1, 10, 2, 10 * MS, o1, 0, &r), 0);
    assert_int_equal(conc_acquire(c, "b", 1, 10, 1, 10 * MS, o1, 0, &r), 0);
    uint64_t b = r.id;
    assert_int_equal(conc_acquire(c, "a", 1, 10, 3, 10 * MS, o2, 0, &r), 0);
    assert_int_equal(conc_acquire(c, "a", 1, 10, 1, 10 * MS, NULL, 0, &r), 0); /* detached */
    assert_int_equal(conc_owner_leases(o1), 2);
    /* one of o1's leases released by id first */
    assert_int_equal(conc_release(c, "b", 1, b, NULL, NULL), 0);
    assert_int_equal(conc_owner_leases(o1), 1);
    freed_calls = 0;
    assert_int_equal(conc_owner_release(c, o1, on_freed, NULL), 1);
    assert_int_equal(freed_calls, 1);
    assert_int_equal(conc_held(c, "a", 1), 4);
    struct conc_stats st;
    conc_get_stats(c, &st);
    assert_int_equal(st.disconnects, 1);
    assert_int_equal(st.released, 1);
    /* o2's lease expires while o2 lives: o2 is then empty */
    conc_expire(c, 10 * MS, NULL, NULL);
    assert_int_equal(conc_owner_leases(o2), 0);
    assert_int_equal(conc_owner_release(c, o2, on_freed, NULL), 0);
    assert_int_equal(conc_held(c, "a", 1), 0);
    conc_destroy(c);
}

static void test_cap_lowered_under_held(void **state)
{
    (void)state;
    struct conc *c = mk();
    struct conc_result r;
    uint64_t ids[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(conc_acquire(c, "g", 1, 4, 1, 10 * MS, NULL, 0, &r), 0);
        ids[i] = r.id;
    }
    /* the cap falls to 2 while 4 are held: nothing is granted until two
     * have ended and a third frees room */
    assert_int_equal(conc_acquire(c, "g", 1, 2, 1, 10 * MS, NULL, 0, &r), 0);
    assert_false(r.granted);
    conc_release(c, "g", 1, ids[0], NULL, NULL);
    conc_release(c, "g", 1, ids[1], NULL, NULL);
    assert_int_equal(conc_acquire(c, "g", 1, 2, 1, 10 * MS, NULL, 0, &r), 0);
    assert_false(r.granted);
    conc_release(c, "g", 1, ids[2], NULL, NULL);
    assert_int_equal(conc_acquire(c, "g", 1, 2, 1, 10 * MS, NULL, 0, &r), 0);
    assert_true(r.granted);
    /* a cap of 0 grants nothing */
    assert_int_equal(conc_acquire(c, "z", 1, 0, 1, 10 * MS, NULL, 0, &r), 0);
    assert_false(r.granted);
    assert_int_equal(r.retry_after_ns, -1);
    conc_destroy(c);
}

static void test_max_leases(void **state)
{
    (void)state;
    struct conc *c;
    struct conc_config cfg = {3, 0};
    struct conc_result r;
    assert_int_equal(conc_create(&cfg, &c), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(conc_acquire(c, "k", 1, 100, 1, MS, NULL, 0, &r), 0);
    assert_int_equal(conc_acquire(c, "k", 1, 100, 1, MS, NULL, 0, &r), -SLUICE_EFULL);
    assert_int_equal(conc_held(c, "k", 1), 3);
    conc_destroy(c);
}

/* Random grants, releases, renews, expiries and owner closes over a few
 * keys, against a model: every live lease's qty, expiry and key. */
#define RMAX 512
struct mlease {
    int live;
    uint64_t id;
    int key, owner;
    int64_t qty, expires;
};

static void test_random_model(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_concurrency_random");
    uint64_t s = seed;
    struct conc *c = mk();
    struct conc_owner *owners[4];
    struct mlease m[RMAX];
    int nm = 0;
    int64_t now = 0;
    const int64_t cap[3] = {1, 4, 9};
    memset(m, 0, sizeof(m));
    for (int i = 0; i < 4; i++)
        assert_int_equal(conc_owner_new(c, &owners[i]), 0);
    for (int step = 0; step < 20000; step++) {
        uint64_t x = test_rand(&s);
        int op = (int)(x % 10);
        int key = (int)((x >> 8) % 3);
        char kb[2] = {(char)('a' + key), 0};
        now += (int64_t)((x >> 16) % 5) * MS;
        if (op < 5 && nm < RMAX) {
            struct conc_result r;
            int64_t qty = 1 + (int64_t)((x >> 24) % 3);
            int owner = (int)((x >> 32) % 5) - 1; /* -1: none */
            int64_t held = 0;
            for (int i = 0; i < nm; i++)
                if (m[i].live && m[i].key == key && m[i].expires > now)
                    held += m[i].qty;
            conc_expire(c, now, NULL, NULL);
            for (int i = 0; i < nm; i++)
                if (m[i].live && m[i].expires <= now)
                    m[i].live = 0;
            int64_t ttl = (1 + (int64_t)((x >> 40) % 50)) * MS;
            assert_int_equal(conc_acquire(c, kb, 1, cap[key], qty, ttl,
                                          owner >= 0 ? owners[owner] : NULL, now, &r),
                             0);
            assert_int_equal(r.granted, held + qty <= cap[key]);
            if (r.granted) {
                m[nm].live = 1;
                m[nm].id = r.id;
                m[nm].key = key;
                m[nm].owner = owner;
                m[nm].qty = qty;
                m[nm].expires = now + ttl;
                nm++;
            }
        } else if (op < 7 && nm > 0) {
            int i = (int)((x >> 24) % (uint64_t)nm);
            char kk[2] = {(char)('a' + m[i].key), 0};
            int live = m[i].live && m[i].expires > now;
            conc_expire(c, now, NULL, NULL);
            assert_int_equal(conc_release(c, kk, 1, m[i].id, NULL, NULL),
                             live ? 0 : -SLUICE_ENOENT);
            m[i].live = 0;
        } else if (op < 8 && nm > 0) {
            int i = (int)((x >> 24) % (uint64_t)nm);
            char kk[2] = {(char)('a' + m[i].key), 0};
            int64_t exp;
            int live = m[i].live && m[i].expires > now;
            conc_expire(c, now, NULL, NULL);
            assert_int_equal(conc_renew(c, kk, 1, m[i].id, 20 * MS, now, &exp),
                             live ? 0 : -SLUICE_ENOENT);
            if (live)
                m[i].expires = exp;
        } else if (op == 8) {
            int o = (int)((x >> 24) % 4);
            conc_expire(c, now, NULL, NULL);
            size_t want = 0;
            for (int i = 0; i < nm; i++) {
                if (m[i].live && m[i].expires <= now)
                    m[i].live = 0;
                if (m[i].live && m[i].owner == o) {
                    want++;
                    m[i].live = 0;
                }
            }
            assert_int_equal(conc_owner_release(c, owners[o], NULL, NULL), want);
            assert_int_equal(conc_owner_new(c, &owners[o]), 0);
        }
        /* the invariant: never more than the cap held on a key */
        for (int k = 0; k < 3; k++) {
            char kk[2] = {(char)('a' + k), 0};
            assert_true(conc_held(c, kk, 1) <= cap[k]);
        }
        if (nm == RMAX) { /* compact the model */
            int j = 0;
            for (int i = 0; i < nm; i++)
                if (m[i].live)
                    m[j++] = m[i];
            nm = j;
        }
    }
    for (int i = 0; i < 4; i++)
        conc_owner_release(c, owners[i], NULL, NULL);
    conc_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_is_exact),     cmocka_unit_test(test_qty_and_release),
        cmocka_unit_test(test_expiry_and_renew), cmocka_unit_test(test_grant_from_hook),
        cmocka_unit_test(test_owner_release),    cmocka_unit_test(test_cap_lowered_under_held),
        cmocka_unit_test(test_max_leases),       cmocka_unit_test(test_ids_and_pool),
        cmocka_unit_test(test_random_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
