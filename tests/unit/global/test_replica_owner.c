/*
 * Unit tests: the owner side of the replica (replica_owner.c) alone,
 * through its private entry points (replica_int.h): a key's limit split
 * between reporters of known demand, with no network and no node side.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replica_int.h"

#define SEC 1000000000LL
#define NOW (10 * SEC)

static int sent[3]; /* batches sent to a, b and c */

static int sendfn(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    (void)ud;
    (void)buf;
    (void)len;
    if (to[0] >= 'a' && to[0] <= 'c')
        sent[to[0] - 'a']++;
    return 0;
}

/* A replica "a" whose view holds a, b and c, all live (member ids 0, 1, 2). */
static int setup(void **state)
{
    struct replica_config cfg = {0};
    cfg.node_name = "a";
    cfg.life_id = 1;
    cfg.send = sendfn;
    struct replica *r;
    if (replica_create(&r, &cfg, 0) != 0)
        return -1;
    struct replica_member m[3] = {{"a", 1, 0, 0}, {"b", 1, 0, 0}, {"c", 1, 0, 0}};
    if (replica_set_view(r, m, 3, 1, 0) != 0) {
        replica_destroy(r);
        return -1;
    }
    *state = r;
    return 0;
}

static int teardown(void **state)
{
    replica_destroy(*state);
    return 0;
}

/* An owner record of count units a second with three reporters (members
 * 0, 1, 2) of the given demands (units/s), all reporting at NOW. */
static void okey_init(struct okey *o, struct orep reps[3], int64_t count, const double demand[3])
{
    memset(o, 0, sizeof(*o));
    o->p.count = count;
    o->p.burst = count;
    o->p.period_ns = SEC;
    o->p.bucket = 1;
    o->p.policy = POLICY_PARTITION_SHARE;
    memset(reps, 0, 3 * sizeof(*reps));
    for (int i = 0; i < 3; i++) {
        reps[i].member = (uint16_t)i;
        reps[i].life = 1;
        reps[i].last_at = NOW;
        reps[i].demand = (float)demand[i];
        reps[i].sent_share = -1.0F;
        reps[i].period_cs = 10;
    }
    o->reps = reps;
    o->n = o->cap = 3;
}

/* Demand far above the rate: the whole limit goes out in proportion to
 * demand (10:20:30 gets 1/6, 1/3, 1/2). */
static void test_shares_in_proportion_to_demand(void **state)
{
    struct replica *r = *state;
    struct okey o;
    struct orep reps[3];
    const double d[3] = {10.0, 20.0, 30.0};
    okey_init(&o, reps, 30, d);
    replica_owner_split(r, &o, 1.0, 60.0, NOW);
    assert_true(fabs(reps[0].share - 1.0 / 6.0) < 1e-6);
    assert_true(fabs(reps[1].share - 2.0 / 6.0) < 1e-6);
    assert_true(fabs(reps[2].share - 3.0 / 6.0) < 1e-6);
    /* What is available is split, no more: half of it leaves half. */
    replica_owner_split(r, &o, 0.5, 60.0, NOW);
    assert_true(fabs(reps[0].share - 0.5 / 6.0) < 1e-6);
    assert_true(fabs(reps[2].share - 1.5 / 6.0) < 1e-6);
}

/* Demand well under the rate: nobody is leased more than SPLIT_HEADROOM x
 * its own demand (10 of 300/s is a thirtieth of the rate: leased a
 * tenth), and what they could not use stays unleased. */
static void test_shares_capped_by_headroom(void **state)
{
    struct replica *r = *state;
    struct okey o;
    struct orep reps[3];
    const double d[3] = {10.0, 20.0, 30.0};
    okey_init(&o, reps, 300, d);
    replica_owner_split(r, &o, 1.0, 60.0, NOW);
    for (int i = 0; i < 3; i++)
        assert_true(fabs(reps[i].share - SPLIT_HEADROOM * d[i] / 300.0) < 1e-6);
    double sum = 0.0;
    for (int i = 0; i < 3; i++)
        sum += reps[i].share;
    assert_true(fabs(sum - 0.6) < 1e-6);
}

/* No demand at all: equal shares.  An idle reporter counts no demand. */
static void test_no_demand_equal_shares_and_idle(void **state)
{
    struct replica *r = *state;
    struct okey o;
    struct orep reps[3];
    const double none[3] = {0.0, 0.0, 0.0};
    okey_init(&o, reps, 30, none);
    replica_owner_split(r, &o, 1.0, 0.0, NOW);
    for (int i = 0; i < 3; i++)
        assert_true(fabs(reps[i].share - 1.0 / 3.0) < 1e-6);
    const double d[3] = {50.0, 50.0, 50.0};
    okey_init(&o, reps, 30, d);
    reps[1].flags = REP_IDLE;
    replica_owner_split(r, &o, 1.0, 100.0, NOW);
    assert_true(fabs(reps[0].share - 0.5) < 1e-6);
    assert_true(reps[1].share == 0.0F);
    assert_true(fabs(reps[2].share - 0.5) < 1e-6);
}

/* A reporter silent past its window does not speak for itself: the live
 * ones split the whole by their demand and its share is left as it was. */
static void test_silent_reporter_left_out(void **state)
{
    struct replica *r = *state;
    struct okey o;
    struct orep reps[3];
    const double d[3] = {10.0, 30.0, 60.0};
    okey_init(&o, reps, 30, d);
    reps[2].last_at = NOW - 60 * SEC;
    reps[2].share = 0.25F;
    assert_false(replica_owner_rep_live(r, &reps[2], NOW));
    assert_true(replica_owner_rep_live(r, &reps[0], NOW));
    replica_owner_split(r, &o, 1.0, 40.0, NOW);
    assert_true(fabs(reps[0].share - 0.25) < 1e-6);
    assert_true(fabs(reps[1].share - 0.75) < 1e-6);
    assert_true(reps[2].share == 0.25F);
}

/* Units left in key's record at NOW (its bucket refills at the whole rate). */
static double level_of(struct replica *r, const char *key)
{
    struct okey *o = okey_of(table_find(r->owned, key, strlen(key)));
    double used = o->tat > NOW ? (double)(o->tat - NOW) / replica__em(&o->p) : 0.0;
    return (double)replica__limit(&o->p) - used;
}

/* A report of key (10 units a second, a burst of 9, shared in a partition)
 * with nothing else set; the caller adds what its case needs. */
static struct wire_report report_of(const char *key)
{
    struct wire_report e = {.key = key,
                            .klen = strlen(key),
                            .kind = ALGO_GCRA,
                            .policy = POLICY_PARTITION_SHARE,
                            .burst = 9,
                            .count = 10,
                            .period_ns = SEC,
                            .period_ms = 100};
    return e;
}

/* Hands e to r's owner side as from's (its life 7 + from). */
static void deliver(struct replica *r, uint32_t from, const struct wire_report *e)
{
    replica_owner_on_report_hashed(r, from, 7 + from, e, table_hash(r->owned, e->key, e->klen));
}

static void report(struct replica *r, const char *key, uint32_t from, uint64_t admitted,
                   uint64_t leased_by, uint64_t known_milli)
{
    struct wire_report e = report_of(key);
    e.admitted = admitted;
    e.leased_by = leased_by;
    e.known_milli = known_milli;
    deliver(r, from, &e);
}

/* Computes key's record as the pass does at `at`, and sends what it
 * leased. */
static void pass_at(struct replica *r, const char *key, int64_t at)
{
    struct okey *o = okey_of(table_find(r->owned, key, strlen(key)));
    r->now = at;
    replica_owner_visit(r, o->idx, at);
    replica_flush(r);
}

/* A lease that shrinks a share to less than half goes out twice, the
 * second time at the next pass, unasked: the node holds its old share
 * until a lease arrives, while this owner counts it at the new one, and
 * without a report of the node's in between (a report budget's rotation
 * over thousands of contested keys, loss) a lost shrink stayed lost for
 * seconds.  A small shrink goes out once. */
static void test_large_shrink_sent_twice(void **state)
{
    struct replica *r = *state;
    const char *key = "shrunk";
    struct wire_report e = report_of(key);
    memset(sent, 0, sizeof(sent));
    r->now = NOW;
    e.demand_milli = 8000; /* b alone, 8/s of 10/s: the whole share */
    e.admitted = 1;
    /* Its bucket full: no room for a grant once the new key's record
     * settles (BORN_SETTLE), which would be a lease of its own. */
    e.tokens_milli = 10000;
    deliver(r, 1, &e);
    pass_at(r, key, NOW);
    struct okey *o = okey_of(table_find(r->owned, key, strlen(key)));
    assert_int_equal(o->reps[0].member, 1);
    double alone = o->reps[0].sent_share;
    assert_int_equal(sent[1], 1);
    e.demand_milli = 100000; /* c at 100/s */
    deliver(r, 2, &e);
    pass_at(r, key, NOW + 1000000);
    const struct orep *b = &o->reps[0]; /* c's record may have moved the array */
    assert_true(b->sent_share < 0.5 * alone);
    assert_int_equal(sent[1], 2);
    assert_int_equal(sent[2], 1);
    pass_at(r, key, NOW + r->interval); /* the next pass: b again, not c */
    assert_int_equal(sent[1], 3);
    assert_int_equal(sent[2], 1);
    pass_at(r, key, NOW + 2 * r->interval);
    assert_int_equal(sent[1], 3);

    /* A shrink by a tenth, once. */
    double was = b->sent_share;
    e.demand_milli = 111000;
    deliver(r, 2, &e);
    pass_at(r, key, NOW + 3 * r->interval);
    fprintf(stderr, "b alone %.3f, beside c %.3f, then %.3f\n", alone, was, b->sent_share);
    assert_true(b->sent_share < was && b->sent_share >= 0.5 * was);
    assert_int_equal(sent[1], 4);
    pass_at(r, key, NOW + 4 * r->interval);
    assert_int_equal(sent[1], 4);
}

/* A key that moved here from another owner (the other side of a split, a
 * restarted owner): a record made by the report holds at most the level
 * its reporter knew (wire known_milli: units x 1000 plus 1), and a second
 * reporter of the same other owner that knows less lowers it; one that
 * knows none (a restarted node) takes it as empty.  A record this owner
 * kept (a heal) counts what the other side spent once: its level plus the
 * other side's, less the limit. */
static void test_foreign_report_level(void **state)
{
    struct replica *r = *state;
    r->now = NOW;
    report(r, "moved", 1, 2, 0x1234, 6001);
    assert_true(fabs(level_of(r, "moved") - 6.0) < 1e-6);
    report(r, "moved", 2, 1, 0x1234, 4001);
    assert_true(fabs(level_of(r, "moved") - 4.0) < 1e-6);
    report(r, "moved", 0, 1, 0x1234, 9001);
    assert_true(fabs(level_of(r, "moved") - 4.0) < 1e-6);
    report(r, "blind", 1, 2, 0x1234, 0);
    assert_true(fabs(level_of(r, "blind")) < 1e-6);

    /* Kept here: 3 of its 10 units taken by a node this owner never
     * leased, then the other side's node knows 6 left there. */
    report(r, "kept", 1, 3, 0, 0);
    assert_true(fabs(level_of(r, "kept") - 7.0) < 1e-6);
    report(r, "kept", 2, 0, 0x1234, 6001);
    assert_true(fabs(level_of(r, "kept") - 3.0) < 1e-6);
    report(r, "kept", 0, 0, 0x1234, 5001);
    assert_true(fabs(level_of(r, "kept") - 3.0) < 1e-6);
}

/* A key of 10 units a second asked for on each of a, b and c, each
 * node's part a third of known_demand units/s over the cluster, as their
 * last settled leases told them (0: not known, 10/s each), but a asks
 * a_demand units/s when it is not 0 (its demand now); then b and c fall
 * silent and the view cuts c off, and b unless b_stays: b is then live,
 * or live but quiet (not heard from lately) when b_stays is 2.  Returns
 * the part of the rate the record's side takes (0: the whole cluster's
 * bucket, no side). */
static double side_after_cut(struct replica *r, const char *key, int64_t at, double known_demand,
                             int b_stays, double a_demand)
{
    struct replica_member all[3] = {{"a", 1, 0, 0}, {"b", 1, 0, 0}, {"c", 1, 0, 0}};
    assert_int_equal(replica_set_view(r, all, 3, 1, at), 0);
    static const uint32_t order[3] = {1, 2, 0};
    for (int i = 0; i < 3; i++) {
        uint32_t from = order[i];
        r->now = from == 0 ? at + 5 * SEC : at; /* b and c silent since at */
        struct wire_report e = report_of(key);
        /* Each a third of the demand, a its own when given. */
        double d = known_demand > 0.0 ? known_demand / 3.0 : 10.0;
        if (from == 0 && a_demand > 0.0)
            d = a_demand;
        e.demand_milli = (uint64_t)(d * 1000.0);
        e.frozen_share = WIRE_ONE / 3;
        if (known_demand > 0.0)
            e.known_demand_milli = (uint64_t)(known_demand * 1000.0) + 1;
        deliver(r, from, &e);
    }
    struct replica_member cut[3] = {
        {"a", 1, 0, 0}, {"b", b_stays != 0, 0, b_stays == 2}, {"c", 0, 0, 0}};
    assert_int_equal(replica_set_view(r, cut, 3, 0, at + 5 * SEC), 0);
    struct okey *o = okey_of(table_find(r->owned, key, strlen(key)));
    assert_non_null(o);
    replica_owner_visit(r, o->idx, at + 5 * SEC);
    return (double)o->side;
}

/* Cut off alone from a majority that presumes it dead and lends its own
 * nodes the whole rate, a side takes what the majority's demand leaves:
 * the demand its nodes last knew over the cluster (D rates), less its
 * own part P of it, 1 - D (1 - P).  Below the limit that is more than its
 * part, which it keeps; with the demand unknown, it keeps its part; in the
 * majority there is no side at all (the silent minority is presumed
 * dead), unless the other member of that majority has not been heard
 * from lately (quiet): then a is outvoted. */
static void test_outvoted_side_yields(void **state)
{
    struct replica *r = *state;
    /* Three times the limit: the majority asks twice the rate. */
    assert_true(fabs(side_after_cut(r, "hot", NOW, 30.0, 0, 0.0) - SIDE_MIN) < 1e-6);
    /* 1.2 times: the majority asks 0.8 of it and leaves 0.2. */
    assert_true(fabs(side_after_cut(r, "warm", NOW + 100 * SEC, 12.0, 0, 0.0) - 0.2) < 0.01);
    /* Below the limit: the side keeps its part. */
    assert_true(fabs(side_after_cut(r, "cool", NOW + 200 * SEC, 6.0, 0, 0.0) - 1.0 / 3.0) < 0.01);
    /* Nobody on the side knows the demand: it keeps its part. */
    assert_true(fabs(side_after_cut(r, "blind", NOW + 300 * SEC, 0.0, 0, 0.0) - 1.0 / 3.0) < 0.01);
    /* The majority side (b with a): no side's bucket, the whole rate. */
    assert_true(side_after_cut(r, "major", NOW + 400 * SEC, 30.0, 1, 0.0) == 0.0);
    /* But b not heard from lately makes no majority with a: b and c count
     * against a, which yields as if alone (cluster.c, "Quiet members"). */
    assert_true(fabs(side_after_cut(r, "quiet", NOW + 500 * SEC, 30.0, 2, 0.0) - SIDE_MIN) < 1e-6);
    /* a asks for all of the key's demand now (b and c crashed, their
     * clients sent to a by a load balancer): nothing is left to yield to,
     * nor to hold b's and c's parts for, and a's side takes the whole
     * rate, at three times the limit as below it. */
    assert_true(fabs(side_after_cut(r, "moved", NOW + 600 * SEC, 30.0, 0, 30.0) - 1.0) < 0.01);
    assert_true(fabs(side_after_cut(r, "moved2", NOW + 700 * SEC, 6.0, 0, 6.0) - 1.0) < 0.01);
    /* At 1.2 times the limit, a asks 9/s of the 12: moved by the parts,
     * but a node seeing fewer than MOVED_NODE_RATE requests a second
     * reads its demand too high to tell: a yields as before (0.2). */
    assert_true(fabs(side_after_cut(r, "few", NOW + 900 * SEC, 12.0, 0, 9.0) - 0.2) < 0.01);
    /* Half again its part (15/s of 30): noise, not moved demand. */
    assert_true(fabs(side_after_cut(r, "noisy", NOW + 800 * SEC, 30.0, 0, 15.0) - SIDE_MIN) < 1e-6);
}

/* A key new to the cluster that one node alone asks for settles in
 * BORN_SETTLE intervals, but until a silence window has passed the node is
 * granted what its demand takes over FREE_AHEAD intervals, a unit more,
 * not the whole bucket: a node that touches the key later takes its first
 * part as its own, and units granted early that would sit on the first
 * node were spent twice.  A key two nodes report waits the whole window. */
static void test_new_key_grants_follow_demand(void **state)
{
    struct replica *r = *state;
    const char *key = "newborn";
    struct wire_report e = report_of(key); /* 10 at once, 10/s */
    r->now = NOW;
    e.demand_milli = 5000; /* b alone at 5/s, its bucket spent */
    e.admitted = 3;
    deliver(r, 1, &e);
    struct okey *o = okey_of(table_find(r->owned, key, strlen(key)));
    pass_at(r, key, NOW + r->interval); /* not settled yet: no grant */
    assert_int_equal(o->reps[0].g_sent, 0);
    pass_at(r, key, NOW + BORN_SETTLE * r->interval);
    double early = (double)o->reps[0].g_sent / 1000.0;
    double most = 5.0 * (double)(FREE_AHEAD * r->interval) / (double)SEC + 1.0;
    /* b's bucket refilled 2 units at its whole share since its report:
     * what it holds counts against what its demand takes. */
    fprintf(stderr, "early grant %.2f (with its refill at most %.2f of the 7 left)\n", early, most);
    assert_true(early >= 0.99 && early + 2.0 <= most + 0.01);

    /* A key two nodes report settles only after the silence window. */
    const char *key2 = "newborn2";
    struct wire_report e2 = report_of(key2);
    e2.demand_milli = 5000;
    e2.admitted = 1;
    r->now = NOW + 10 * SEC;
    deliver(r, 1, &e2);
    deliver(r, 2, &e2);
    struct okey *o2 = okey_of(table_find(r->owned, key2, strlen(key2)));
    pass_at(r, key2, r->now + BORN_SETTLE * r->interval);
    assert_int_equal(o2->reps[0].g_sent + o2->reps[1].g_sent, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shares_in_proportion_to_demand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shares_capped_by_headroom, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_demand_equal_shares_and_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_silent_reporter_left_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_report_level, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outvoted_side_yields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_shrink_sent_twice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_key_grants_follow_demand, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
