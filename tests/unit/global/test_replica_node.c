/*
 * Unit tests: the node side of the replica (replica_node.c) alone, fed
 * leases by hand through replica_node_deliver (the owner side's one way
 * in, replica_int.h) instead of an owner's computation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "replica_int.h"

#define SEC  1000000000LL
#define LIFE 7

static int sendfn(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    (void)ud;
    (void)to;
    (void)buf;
    (void)len;
    return 0;
}

/* A lone, settled replica "a" (it owns every key). */
static int setup(void **state)
{
    struct replica_config cfg = {0};
    cfg.node_name = "a";
    cfg.life_id = LIFE;
    cfg.young_ns = 0;
    cfg.send = sendfn;
    struct replica *r;
    if (replica_create(&r, &cfg, 0) != 0)
        return -1;
    *state = r;
    return 0;
}

static int teardown(void **state)
{
    replica_destroy(*state);
    return 0;
}

/* A limit of 100 a second with a burst of 100. */
static struct algo_params limit100(void)
{
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_TOKEN_BUCKET, 100, 100, SEC, 0), 0);
    return p;
}

/* Requests of one unit at now until one is refused; returns the count
 * admitted (at most max). */
static int admit_all(struct replica *r, const char *key, int64_t now, int max)
{
    struct algo_params p = limit100();
    struct algo_result res;
    int n = 0;
    while (n < max) {
        assert_int_equal(
            replica_throttle(r, key, strlen(key), &p, POLICY_PARTITION_SHARE, 1, now, &res), 0);
        if (res.limited)
            break;
        n++;
    }
    return n;
}

/* A settled lease; seen: the node's admitted count in the report it answers. */
static struct wire_lease lease(const char *key, double share, uint64_t grant_milli, uint64_t seen)
{
    struct wire_lease l;
    memset(&l, 0, sizeof(l));
    l.key = key;
    l.klen = strlen(key);
    l.share = (uint64_t)(share * (double)WIRE_ONE);
    l.flags = WIRE_L_SETTLED;
    l.grant_milli = grant_milli;
    l.level_milli = 100000;
    l.seen = seen;
    l.owner_life = LIFE;
    return l;
}

/* A delivered lease sets the key's share: its bucket holds a quarter of
 * the burst, and a grant adds the units it carries. */
static void test_lease_sets_share_and_grant_adds(void **state)
{
    struct replica *r = *state;
    const char *key = "k";
    struct algo_params p = limit100();
    struct algo_result res;
    assert_int_equal(replica_throttle(r, key, 1, &p, POLICY_PARTITION_SHARE, 0, 0, &res), 0);
    struct wire_lease l = lease(key, 0.25, 0, 0);
    replica_node_deliver(r, key, 1, LIFE, &l, 0);
    struct replica_key_info info;
    assert_int_equal(replica_key_info(r, key, 1, 0, &info, NULL, NULL), 0);
    assert_true(info.share > 0.249 && info.share < 0.251);
    int n = admit_all(r, key, 0, 1000);
    assert_in_range(n, 24, 26); /* a quarter of the burst of 100, no refill */
    /* A grant of 5 units (running total in thousandths) answering a report
     * that saw all n admitted. */
    l = lease(key, 0.25, 5000, (uint64_t)n);
    replica_node_deliver(r, key, 1, LIFE, &l, 0);
    assert_int_equal(admit_all(r, key, 0, 1000), 5);
    /* The same running total again adds nothing. */
    replica_node_deliver(r, key, 1, LIFE, &l, 0);
    assert_int_equal(admit_all(r, key, 0, 1000), 0);
}

/* A lease for another life of this node, or for a key this node does not
 * own by its view, is not applied. */
static void test_deliver_checks_life_and_owner(void **state)
{
    struct replica *r = *state;
    struct algo_params p = limit100();
    struct algo_result res;
    struct replica_key_info info;
    assert_int_equal(replica_throttle(r, "k", 1, &p, POLICY_PARTITION_SHARE, 0, 0, &res), 0);
    struct wire_lease l = lease("k", 0.25, 0, 0);
    replica_node_deliver(r, "k", 1, LIFE + 1, &l, 0);
    assert_int_equal(replica_key_info(r, "k", 1, 0, &info, NULL, NULL), 0);
    assert_true(info.share > 0.999); /* alone: the whole key, as before */
    /* With b in the view, find a key b owns: a lease from this node's own
     * owner side for it is a stale record's and is not applied. */
    struct replica_member m[2] = {{"a", 1, 0, 0}, {"b", 1, 0, 0}};
    assert_int_equal(replica_set_view(r, m, 2, 1, 0), 0);
    char key[16];
    int found = 0;
    for (int i = 0; i < 64 && !found; i++) {
        snprintf(key, sizeof(key), "key%d", i);
        assert_int_equal(
            replica_throttle(r, key, strlen(key), &p, POLICY_PARTITION_SHARE, 0, 0, &res), 0);
        assert_int_equal(replica_key_info(r, key, strlen(key), 0, &info, NULL, NULL), 0);
        found = !info.owned;
    }
    assert_true(found);
    double before = info.share;
    l = lease(key, 0.1, 0, 0);
    replica_node_deliver(r, key, strlen(key), LIFE, &l, 0);
    assert_int_equal(replica_key_info(r, key, strlen(key), 0, &info, NULL, NULL), 0);
    assert_true(info.share == before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lease_sets_share_and_grant_adds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deliver_checks_life_and_owner, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
