/*
 * Unit tests: the node side of the replica (replica_node.c) alone, fed
 * leases by hand through replica_node_deliver (the owner side's one way
 * in, replica_int.h) instead of an owner's computation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
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

/* Node a of five (a to e) holds a key of 100 a second owned by d, its
 * frozen share 0.2 and the demand over the cluster its leases told it
 * known units a second; then the view makes c, d and e quiet (a and b cut
 * off from them), or only d when all_quiet is 0.  Returns a's share after
 * a visit. */
static double share_after_cut(struct replica *r, double known, int all_quiet, double demand)
{
    struct replica_member all[5] = {
        {"a", 1, 0, 0}, {"b", 1, 0, 0}, {"c", 1, 0, 0}, {"d", 1, 0, 0}, {"e", 1, 0, 0}};
    assert_int_equal(replica_set_view(r, all, 5, 1, SEC), 0);
    struct algo_params p = limit100();
    struct algo_result res;
    struct replica_key_info info;
    char key[16];
    int found = 0;
    for (int i = 0; i < 256 && !found; i++) {
        snprintf(key, sizeof(key), "cut%d", i);
        assert_int_equal(
            replica_throttle(r, key, strlen(key), &p, POLICY_PARTITION_SHARE, 0, SEC, &res), 0);
        assert_int_equal(replica_key_info(r, key, strlen(key), SEC, &info, NULL, NULL), 0);
        found = strcmp(info.owner, "d") == 0;
    }
    assert_true(found);
    struct nkey *k = nkey_of(table_find(r->nodes, key, strlen(key)));
    k->p.flags |= NK_LEASED;
    k->share = k->fshare = 0.2F;
    k->known_d = (float)known;
    /* a's demand now (units/s), as its last visit left it. */
    k->demand = (float)demand;
    k->p.flags |= NK_GROWN;
    k->visited = (uint32_t)((2 * SEC) / 1000000);
    struct replica_member cut[5] = {{"a", 1, 0, 0},
                                    {"b", 1, 0, 0},
                                    {"c", 1, 0, all_quiet},
                                    {"d", 1, 1, 1},
                                    {"e", 1, 0, all_quiet}};
    assert_int_equal(replica_set_view(r, cut, 5, 1, 2 * SEC), 0);
    replica_node_visit(r, k->idx, 2 * SEC);
    return (double)k->share;
}

/* Cut off with b from a majority (c, d, e) that presumes them dead and
 * lends its own nodes the whole rate, a keeps of a key d owns its part of
 * what the majority's demand leaves, before its own failure detector
 * declares the majority dead and the key moves to this side: with D the
 * demand over the cluster in rates and P = 0.4 the side's parts (a's 0.2
 * for each of a and b), 1 - D (1 - P) for the side.  Below the limit the
 * side keeps more than its parts, and a its share; not outvoted (only d
 * quiet), a keeps it too. */
static void test_outvoted_node_yields(void **state)
{
    struct replica *r = *state;
    /* Twice the limit: the majority asks 1.2 of the rate; the side keeps
     * SIDE_MIN, a half of it.  a asks its part of the demand (0.2 of
     * 200/s), as before the cut. */
    assert_true(fabs(share_after_cut(r, 200.0, 1, 40.0) - 0.5 * SIDE_MIN) < 1e-6);
    /* 1.2 times: the majority asks 0.72 and leaves 0.28, a half of it. */
    assert_true(fabs(share_after_cut(r, 120.0, 1, 24.0) - 0.14) < 1e-4);
    /* Below the limit a keeps its share. */
    assert_true(fabs(share_after_cut(r, 80.0, 1, 16.0) - 0.2) < 1e-6);
    /* With the demand unknown, too. */
    assert_true(fabs(share_after_cut(r, 0.0, 1, 16.0) - 0.2) < 1e-6);
    /* And with only d quiet: a and b with c and e are a majority. */
    assert_true(fabs(share_after_cut(r, 200.0, 0, 40.0) - 0.2) < 1e-6);
    /* The majority's demand came to this side (a crash, its clients sent
     * here by a load balancer): a asks half of the 200/s, and with b as
     * much the side asks all of it, leaving the majority nothing to ask
     * for: a keeps its share. */
    assert_true(fabs(share_after_cut(r, 200.0, 1, 100.0) - 0.2) < 1e-6);
    /* A side's demand that grew less than twice (60/s, 1.5 times a's
     * part) is taken as noise: a yields as if nothing moved. */
    assert_true(fabs(share_after_cut(r, 200.0, 1, 60.0) - 0.5 * SIDE_MIN) < 1e-6);
}

/* Ticks r through passes from *now for ms milliseconds, 10 ms a step. */
static void tick_ms(struct replica *r, int64_t *now, int64_t ms)
{
    for (int64_t t = 0; t < ms; t += 10) {
        *now += 10 * (SEC / 1000);
        for (int slice = 0; slice < 1000 && *now >= replica_next_deadline(r); slice++)
            replica_tick(r, *now);
    }
}

/* The lease this node's owner side computed for its own node side, seen
 * on key: one came in the last 500 ms, since the test changed the entries
 * (it crossed to the entry there now), and when whole, it gave the lone
 * node all of the key (a record made anew for a key already spending
 * starts cautious, replica_owner.c). */
static void assert_leased(struct replica *r, const char *key, int64_t now, int whole)
{
    struct replica_key_info info;
    assert_int_equal(replica_key_info(r, key, strlen(key), now, &info, NULL, NULL), 0);
    assert_true(info.owned);
    assert_true(info.lease_age_ns >= 0 && info.lease_age_ns < 500 * (SEC / 1000));
    if (whole)
        assert_true(info.share > 0.999);
}

/* A request for key at *now, then 500 ms of passes; then key's two
 * entries, *ne and *oe, point at each other, and the lease crossed
 * (assert_leased). */
static void ask_linked(struct replica *r, const char *key, int64_t *now, int whole,
                       struct table_entry **ne, struct table_entry **oe)
{
    struct algo_params p = limit100();
    struct algo_result res;
    assert_int_equal(
        replica_throttle(r, key, strlen(key), &p, POLICY_PARTITION_SHARE, 1, *now, &res), 0);
    tick_ms(r, now, 500);
    *ne = table_find(r->nodes, key, strlen(key));
    *oe = table_find(r->owned, key, strlen(key));
    assert_non_null(*ne);
    assert_non_null(*oe);
    assert_ptr_equal(nkey_of(*ne)->own, *oe);
    assert_ptr_equal(okey_of(*oe)->mine, *ne);
    assert_leased(r, key, *now, whole);
}

/* A key this node serves and owns has its two entries point at each
 * other (nkey.own, okey.mine: the report and the lease cross without a
 * lookup).  Either entry may go while the other stays (the node side
 * drops an idle key, the owner side a record with no live reporter): the
 * one left must not point at freed memory (the sanitizer build runs this),
 * and the next report links the new pair, whose leases land. */
static void test_own_entries_linked(void **state)
{
    struct replica *r = *state;
    int64_t now = SEC;
    struct table_entry *ne, *oe, *ne2, *oe2;
    ask_linked(r, "k", &now, 1, &ne, &oe);

    /* The node side's entry goes; the record stays and forgets it. */
    table_delete(r->nodes, ne);
    assert_null(okey_of(oe)->mine);
    tick_ms(r, &now, 200); /* the record's computation: no node entry to lease */
    ask_linked(r, "k", &now, 1, &ne2, &oe2);
    assert_ptr_equal(oe2, oe); /* the same record, linked to the new entry */

    /* The record goes; the node entry stays and forgets it.  The next
     * report makes a record anew, which starts cautious. */
    table_delete(r->owned, oe2);
    assert_null(nkey_of(ne2)->own);
    ask_linked(r, "k", &now, 0, &ne, &oe);
    assert_ptr_equal(ne, ne2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lease_sets_share_and_grant_adds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deliver_checks_life_and_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outvoted_node_yields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_own_entries_linked, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
