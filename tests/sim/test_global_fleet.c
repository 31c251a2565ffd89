/*
 * Global limits at fleet scale in the simulator (tests/sim/fleetsim.h),
 * against one central GCRA per key that sees every request (the oracle).
 * Every key is hammered from every node at a skewed demand (node i's weight
 * ~ 1/(i+1)) at 10x its limit unless stated; keys' rates are drawn between
 * 20 and 100 per second, burst 10 (or a burst-dominated limit where said);
 * 100 ms intervals; membership changes are seen 2 s after they happen.  Seeded: SLUICE_SEED=<n>
 * replays a run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>

#include "fleetsim.h"

static uint64_t seed;

static void run(const struct fs_cfg *c, struct fs_result *r, const char *what)
{
    struct fleetsim s;
    assert_int_equal(fs_init(&s, c), 0);
    fs_run(&s);
    fs_result(&s, r);
    uint64_t bad = 0;
    for (int i = 0; i < c->n; i++) {
        struct replica_stats st;
        if (s.nd[i].r == NULL)
            continue;
        replica_get_stats(s.nd[i].r, &st);
        bad += st.bad_packets;
    }
    fprintf(stderr,
            "  %s: %d nodes x %d keys, loss %.0f%%: ratio %.4f p99_key %.3f worst_key %.3f "
            "min_key %.3f window %.3f above %.3f (%.1f units, %.2f of the bound), %.0f B/node/s\n",
            what, c->n, c->keys, c->loss * 100, r->ratio, r->p99_key, r->worst_key, r->min_key,
            r->win_ratio, r->above, r->above_units, r->of_bound, r->bytes_node_s);
    assert_int_equal(bad, 0);
    /* Every key, every window: within its envelope plus the stated bound
     * of a whole cluster (a partition adds its own term: each side holds
     * its last share, or under the optimistic policy admits the whole
     * limit and repays; the partition tests bound those). */
    if (c->part_len == 0)
        assert_true(r->of_bound <= 1.0);
    fs_destroy(&s);
}

/* 16 nodes x 1,000 busy keys at 10x skewed demand: the brief's figure. */
static void test_16x1000(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 16;
    c.keys = 1000;
    c.seconds = 10;
    run(&c, &r, "steady");
    assert_true(fabs(r.ratio - 1.0) <= 0.02);
    assert_true(r.worst_key <= 1.10);
}

/* More hammered keys than the report budget takes every interval (about
 * 3,000 contested keys a node, 400 KB/s of reports): the budget rotates
 * over all of them, so no key's admissions go unreported for long and no
 * key runs past its limit (the keys first touched in each interval must
 * not take the whole budget every time). */
static void test_report_budget(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 8;
    c.keys = 3000;
    c.loss = 0.10;
    c.seconds = 4;
    run(&c, &r, "report budget");
    /* A 4 s run at 10% loss: the first touches of 3,000 keys hammered from
     * their first request are repaid within the run, not all within each
     * key's first seconds (1.008-1.031 over 12 seeds); the availability
     * targets at ten times the limit are within 5% of one central limiter
     * and no key above 1.25x of it. */
    assert_true(fabs(r.ratio - 1.0) <= 0.05);
    assert_true(r.worst_key <= 1.25);
}

/* 5 nodes x 100 keys with 10% of messages lost. */
static void test_loss(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.loss = 0.10;
    c.seconds = 20;
    run(&c, &r, "loss");
    assert_true(fabs(r.ratio - 1.0) <= 0.05);
    assert_true(r.worst_key <= 1.10);
}

/* 100 nodes: shares that follow demand, not N. */
static void test_100_nodes(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 100;
    c.keys = 50;
    c.seconds = 10;
    c.loss = 0.10;
    run(&c, &r, "100 nodes");
    assert_true(fabs(r.ratio - 1.0) <= 0.05);
    assert_true(r.worst_key <= 1.10);
}

/* A node joins, one dies (crash, never back) and one leaves gracefully,
 * each mid-run. */
static void test_churn_members(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 8;
    c.keys = 100;
    c.seconds = 30;
    c.join_at = 5 * FS_SEC;
    c.die_at = 10 * FS_SEC;
    c.dier = 2;
    c.leave_at = 15 * FS_SEC;
    c.leaver = 4;
    c.trace = getenv("FS_TRACE") != NULL;
    run(&c, &r, "join, death, leave");
    assert_true(fabs(r.ratio - 1.0) <= 0.05);
}

/* A node dies and the others declare it only 6 s later (the default
 * probe interval's order): until then its keys have a silent owner.  At
 * half the limit their demand is spread thin and ran on free units, which
 * lapse 1.6 s after the last lease; a node whose owner is silent takes
 * its part of the demand its last lease told of (replica_node_visit), so
 * the cluster still admits what one central limiter does.  Taking only
 * its last lease (a share near 0), the cluster admitted 0.957 to 0.983 of
 * it over seeds 1-600; with its part, 0.986 to 0.996 over seeds 1-1,000. */
static void test_silent_owner(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 5;
    c.keys = 100;
    c.seconds = 12;
    c.demand = 0.5;
    c.burst = 5;
    c.rate_lo = c.rate_hi = 10;
    c.die_at = 4 * FS_SEC;
    c.dier = 1;
    c.detect_ns = 6 * FS_SEC;
    run(&c, &r, "a silent owner, demand at half the limit");
    assert_true(r.ratio >= 0.984);
}

/* A 10 s two-way partition under the share policy: each side holds its
 * last known share, so the whole cluster admits at most 10% over the
 * oracle during it. */
static void test_partition_share(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 6;
    c.keys = 100;
    c.seconds = 30;
    c.part_at = 10 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 3;
    run(&c, &r, "partition, share");
    assert_true(r.win_ratio <= 1.10);
    assert_true(r.win_ratio >= 0.80);
    assert_true(fabs(r.ratio - 1.0) <= 0.10);
}

/* Demand spread over the nodes below the limit (a load balancer in front
 * of each side) through a 10 s partition under the share policy: each side
 * has the part of the rate its nodes' demand held when the cluster was
 * whole, and its owner lends free units from a bucket of that part, so the
 * side admits what one central limiter would (replica_owner.c, "A side's
 * bucket").  Two shapes: an even split of six nodes, keys of 10 a second
 * and burst 4 at half the limit, demand even over the nodes; and a
 * minority of two of five, the default keys at a fifth of the limit.
 * Over seeds 1-130 the partition window admitted 0.945 to 0.968 of the
 * oracle in the even split and 0.998 to 1.000 in the minority one; with
 * only its own share's bucket on each node, as before (seeds 1-30),
 * 0.688 to 0.716 and 0.945 to 0.963. */
static void test_partition_spread(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 6;
    c.keys = 100;
    c.seconds = 20;
    c.demand = 0.5;
    c.burst = 4;
    c.skew = 0.0;
    c.rate_lo = c.rate_hi = 10;
    c.part_at = 5 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 3;
    run(&c, &r, "partition 3 | 3, share, spread at half the limit");
    assert_true(r.win_ratio >= 0.93);
    assert_true(r.win_ratio <= 1.10);
    fs_default(&c, seed);
    c.n = 5;
    c.keys = 100;
    c.seconds = 20;
    c.demand = 0.2;
    c.part_at = 5 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 2;
    run(&c, &r, "partition 2 | 3, share, spread at a fifth of the limit");
    assert_true(r.win_ratio >= 0.98);
    assert_true(r.win_ratio <= 1.10);
    /* Per-minute keys (CL.THROTTLE key 15 30 60) at half their limit, cut
     * after 40 s: each node asks about every 25 s.  A side's new owner
     * takes the level its nodes knew, not an empty bucket that refills
     * for half a minute, each side keeps its part of that level, and a
     * node's frozen part is averaged, not the demand it read just after
     * (or long after) its last request: 0.85 to 0.89 of one central
     * limiter before, 0.94 to 0.95 now. */
    fs_default(&c, seed);
    c.n = 6;
    c.keys = 200;
    c.seconds = 55;
    c.demand = 0.5;
    c.burst = 15;
    c.skew = 0.0;
    c.rate_lo = c.rate_hi = 30;
    c.period_ns = 60 * FS_SEC;
    c.part_at = 40 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 3;
    run(&c, &r, "partition 3 | 3, share, per-minute keys at half the limit");
    assert_true(r.win_ratio >= 0.90);
    assert_true(r.win_ratio <= 1.10);
    /* The same keys at twice their limit, cut after 10 s: thin keys
     * (replica_owner.c) stay thin on each side, drawn by lot from the
     * side's bucket (0.71 to 0.78 of one central limiter when each side's
     * nodes held parts of units instead, 0.80 to 0.84 now); and no side
     * spends the other's part of the level. */
    c.keys = 100;
    c.seconds = 25;
    c.demand = 2.0;
    c.part_at = 10 * FS_SEC;
    run(&c, &r, "partition 3 | 3, share, per-minute keys at twice the limit");
    assert_true(r.win_ratio >= 0.75);
    assert_true(r.win_ratio <= 1.10);
}

/* A minority cut off (one node of three, two of five): the majority
 * presumes it dead once the failure detector says so and lends its own
 * nodes the whole rate; the minority, outvoted, takes only what the
 * majority's demand leaves (replica_owner__yield).  Before, it kept its
 * part on top, and at and beyond the limit the partition admitted 1.34 to
 * 1.44 (one of three) and 1.28 to 1.51 (two of five) times one central
 * limiter; 0.96 to 1.08 now.  Below the limit nothing changes: the
 * majority leaves the minority more than its part. */
static void test_partition_minority(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 3;
    c.keys = 100;
    c.seconds = 20;
    c.demand = 2.0;
    c.burst = 4;
    c.skew = 0.0;
    c.rate_lo = c.rate_hi = 10;
    c.part_at = 5 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 1;
    run(&c, &r, "partition 1 | 2, share, twice the limit");
    assert_true(r.win_ratio <= 1.10);
    assert_true(r.win_ratio >= 0.90);
    c.demand = 0.5;
    run(&c, &r, "partition 1 | 2, share, half the limit");
    assert_true(r.win_ratio >= 0.95);
    assert_true(r.win_ratio <= 1.10);
    fs_default(&c, seed);
    c.n = 5;
    c.keys = 100;
    c.seconds = 20;
    c.demand = 3.0;
    c.burst = 5;
    c.skew = 1.0;
    c.part_at = 5 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 2;
    run(&c, &r, "partition 2 | 3, share, skewed, three times the limit");
    assert_true(r.win_ratio <= 1.10);
    assert_true(r.win_ratio >= 0.90);
    /* The minority's detector 4 s behind the majority's, as real nodes cut
     * off declare the others when they fail most of their probes: its
     * nodes yield for the keys the majority owns once they see those
     * owners quiet (replica_node.c, replica_node__yield), not at their
     * own verdict.  Held to their parts until it, seeds 1 to 8 admitted
     * 1.11 to 1.13 of the oracle over the partition; seeds 1 to 40 now
     * 1.005 to 1.024. */
    fs_default(&c, seed);
    c.n = 5;
    c.keys = 100;
    c.seconds = 20;
    c.demand = 2.0;
    c.burst = 4;
    c.skew = 0.0;
    c.rate_lo = c.rate_hi = 10;
    c.part_at = 5 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 2;
    c.minority_lag_ns = 4 * FS_SEC;
    run(&c, &r, "partition 2 | 3, the minority's verdict 4 s late, twice the limit");
    assert_true(r.win_ratio <= 1.10);
    assert_true(r.win_ratio >= 0.90);
}

/* The same partition under the optimistic policy: each side enforces the
 * full limit (about twice the oracle during it) and repays the excess once
 * healed, so the whole run stays near the oracle. */
static void test_partition_optimistic(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 6;
    c.keys = 100;
    c.seconds = 60;
    c.part_at = 10 * FS_SEC;
    c.part_len = 10 * FS_SEC;
    c.split = 3;
    c.pol = POLICY_PARTITION_OPTIMISTIC;
    run(&c, &r, "partition, optimistic");
    assert_true(r.win_ratio >= 1.30);
    assert_true(r.ratio <= 1.12);
}

/* Two of three nodes killed at once and restarted: no fresh quota.  What
 * the restarted nodes admit in their first 200 ms must stay within 10 a
 * key: the rate's part (at most 40 x 0.2 = 8) and two units.  With two of
 * the three owners restarted too, the cluster admits more in those 200 ms
 * than one central GCRA fed the same requests (seed 160: 973 against 664,
 * 3 a key, within the stated bound of README's "The bound").  Over
 * seeds 1-300 the restarted nodes admitted at most 816 (seed 160; this test
 * allowed 8 a key until then); taken as new members instead (no young
 * period: a fresh quota), 1,137 to 1,309 on seeds 1-7.  Once a node out of
 * units asked its owner at once, a restarted owner answered by a settled
 * one within milliseconds gave free units from records the restarted
 * alone had filled: 1,221 (seed 344), 1 seed in 100 over 1,000; with free
 * units from a life a silence window old only, at most 770 over seeds
 * 1-600 (seed 27). */
static void test_restart_two_of_three(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 3;
    c.keys = 100;
    c.seconds = 20;
    c.rate_lo = 20;
    c.rate_hi = 40;
    c.kill_at = 8 * FS_SEC;
    c.restart_at = 8 * FS_SEC + 500 * FS_MSEC;
    c.victims = 2;
    c.restart_window = 200 * FS_MSEC;
    struct fleetsim s;
    assert_int_equal(fs_init(&s, &c), 0);
    fs_run(&s);
    fs_result(&s, &r);
    fprintf(stderr,
            "  restart: ratio %.4f, restarted nodes admitted %llu in their first 200 ms (all "
            "nodes %llu; one central GCRA %llu)\n",
            r.ratio, (unsigned long long)s.restarted_ok, (unsigned long long)s.restart_window_all,
            (unsigned long long)s.restart_window_orc);
    assert_true(s.restarted_ok <= (uint64_t)c.keys * 10);
    assert_true(r.ratio <= 1.05);
    fs_destroy(&s);
}

/* Two of three nodes killed for good, their clients sent to the third by a
 * load balancer (fleetsim's redirect): the survivor, outvoted, cannot tell
 * the crash from a cut, but its demand now is all of the key's, which a
 * cut does not make, and it takes the rate the dead no longer ask for
 * (replica__moved).  Holding their parts and yielding to their demand, it
 * admitted 0.77 of one central limiter at half the limit and 0.22 at
 * twice the limit over 30 s (seed 1); now, over seeds 1-300, 0.968 to
 * 0.994 (median 0.986) at half the limit and 0.754 to 0.834 (median 0.798)
 * at twice.  Above the limit the survivor still reads its moved demand
 * short of the whole (the estimates lean up where demand is spread) and
 * takes part of the rate only.  Below it, the lowest seeds are keys whose
 * nodes' estimates, leaning up most at a few units a second each, summed
 * to the limit or more before the crash: the survivor then takes the key
 * as at its limit and, its own rate under MOVED_NODE_RATE, as not moved,
 * and holds a tenth to a fifth of the rate (seed 114: six keys of 100,
 * the lowest at 0.40 of one central limiter). */
static void test_crash_majority_redirect(void **state)
{
    (void)state;
    static const double demand[2] = {0.5, 2.0}, least[2] = {0.96, 0.65};
    for (int i = 0; i < 2; i++) {
        struct fs_cfg c;
        struct fs_result r;
        fs_default(&c, seed);
        c.n = 3;
        c.keys = 100;
        c.seconds = 30;
        c.demand = demand[i];
        c.skew = 0.0;
        c.rate_lo = c.rate_hi = 10;
        c.burst = 4;
        c.kill_at = 5 * FS_SEC;
        c.victims = 2;
        c.redirect = 1;
        run(&c, &r, demand[i] < 1.0 ? "crash, half the limit" : "crash, twice the limit");
        assert_true(r.ratio >= least[i]);
        assert_true(r.ratio <= 1.05);
    }
}

/* Hosts whose clocks are an hour ahead and an hour behind change nothing:
 * nothing on the wire is a time. */
static void test_clock_skew(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.seconds = 20;
    c.skew_node = 1;
    c.skew_ns = 3600 * FS_SEC;
    c.skew_node2 = 3;
    c.skew2_ns = -3600 * FS_SEC;
    run(&c, &r, "clocks +1 h and -1 h");
    assert_true(fabs(r.ratio - 1.0) <= 0.02);
    assert_true(r.worst_key <= 1.10);
}

/* Every node bursting at once on cold keys admits about one burst per key,
 * not one per node. */
static void test_first_burst(void **state)
{
    (void)state;
    struct fs_cfg c;
    fs_default(&c, seed);
    c.n = 8;
    c.keys = 100;
    c.seconds = 1;
    c.demand = 0.0001; /* nothing but the burst */
    c.burst_at = 10 * FS_MSEC;
    c.burst_each = 20;
    struct fleetsim s;
    assert_int_equal(fs_init(&s, &c), 0);
    fs_run(&s);
    uint64_t ok = 0, orc = 0;
    for (int k = 0; k < c.keys; k++) {
        ok += s.ok[k];
        orc += s.orc_ok[k];
    }
    fprintf(stderr, "  first burst: %d nodes admitted %.2f bursts per key\n", c.n,
            (double)ok / (double)orc);
    assert_true((double)ok <= 1.3 * (double)orc);
    assert_true((double)ok >= 0.7 * (double)orc);
    fs_destroy(&s);
}

/* redis-cell's example limit, CL.THROTTLE key 15 30 60: its burst
 * outweighs its rate. */
static void limit_15_30_60(struct fs_cfg *c)
{
    c->burst = 15;
    c->rate_lo = c->rate_hi = 30;
    c->period_ns = 60 * FS_SEC;
}

/* Keys whose burst outweighs their rate (15 at once, 30 a minute) on 5 nodes at 10x skewed demand:
 * the cluster admits about what one central bucket does over 30 s, burst included, and no key much
 * more.  Shares alone split the rate but lose the burst as they move (they admitted two thirds of
 * it); the owner's grants return it. */
static void test_burst_dominated(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    limit_15_30_60(&c);
    c.seconds = 30;
    run(&c, &r, "burst 15, 30 a minute");
    assert_true(r.ratio >= 0.90 && r.ratio <= 1.10);
    assert_true(r.worst_key <= 1.25);
}

/* A cluster started from nothing and hammered at once: every node young
 * and alone for its first second, then the whole view.  Its keys are
 * served, not refused until their rate refills a burst (the owners grant
 * it once they settle), and a record a node kept from when it was alone
 * leases nothing once another node owns the key. */
static void test_cold_start(void **state)
{
    (void)state;
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.n = 3;
    c.keys = 50;
    c.skew = 0.0;
    c.demand = 36.0;
    limit_15_30_60(&c);
    c.seconds = 15;
    c.cold_start_ns = FS_SEC;
    run(&c, &r, "cold start");
    assert_true(r.ratio >= 0.85 && r.ratio <= 1.10);
    assert_true(r.worst_key <= 1.25);
}

/* A slice of the availability matrix (global_scale --matrix): 100 keys of
 * 10 a second whose requests land on any node at random (no skew, or a
 * skew of 1), below, at and above the limit.  The cluster admits at least
 * 0.98 of one central GCRA fed the same arrivals with up to 16 nodes and
 * 0.95 with 100, within 5% of it at ten times the limit with no key above
 * 1.25x, and every key stays within its envelope plus the bound (run). */
static void spread_cell_period(int n, int64_t burst, double demand, double skew, double loss,
                               double lo, double hi, int64_t period_s)
{
    struct fs_cfg c;
    struct fs_result r;
    char what[96];
    fs_default(&c, seed);
    c.n = n;
    c.burst = burst;
    c.demand = demand;
    c.skew = skew;
    c.loss = loss;
    c.rate_lo = c.rate_hi = 10;
    if (period_s > 1) {
        c.period_ns = period_s * FS_SEC;
        c.seconds = 2 * period_s;
    }
    snprintf(what, sizeof(what), "spread b%lld d%g s%g loss %g per %llds", (long long)burst, demand,
             skew, loss, (long long)period_s);
    run(&c, &r, what);
    assert_true(r.ratio >= lo);
    assert_true(r.ratio <= hi);
    if (demand >= 10.0)
        assert_true(r.worst_key <= 1.25);
}

static void spread_cell(int n, int64_t burst, double demand, double skew, double lo, double hi)
{
    spread_cell_period(n, burst, demand, skew, 0.0, lo, hi, 1);
}

static void test_spread_slice(void **state)
{
    (void)state;
    spread_cell(3, 1, 1.0, 0.0, 0.98, 2.0);
    spread_cell(5, 5, 0.5, 1.0, 0.98, 2.0);
    spread_cell(16, 16, 1.0, 0.0, 0.98, 2.0);
    spread_cell(100, 5, 1.0, 0.0, 0.95, 2.0);
    spread_cell(100, 1, 10.0, 0.0, 0.95, 1.05);
}

/* Per-minute limits (10 a minute for two minutes): each node sees a key
 * seldom, so a node that touched it once and fell quiet must not take its
 * units with it when it drops the key (16 nodes of burst 5 at the limit
 * admitted 0.89 of one central limiter), and two requests close together
 * on one node must not read as a demand that stops free units while the
 * bucket holds most of its burst (5 nodes of burst 16 at twice the limit:
 * 0.91).  Each cell is at 0.97 or more over seeds 1-60; 0.96 leaves room
 * for the random seeds of every run.  At ten times the limit such a key
 * is thin (replica_owner.c): kept whole in its owner's bucket and drawn by
 * lot, with notices to the nodes that do not report it.  Before, 16 nodes
 * of burst 5 admitted 1.12 of the oracle (first touches and free units, a
 * unit per node), 100 nodes of burst 1 4.1; now 1.00-1.01 and 1.03
 * over seeds 1-5, and no key above 1.25 of its oracle (1.05-1.10; 4.6
 * before, and 1.6 while a key whose demand read low left thin mode with
 * its bucket spent). */
static void test_spread_minute_slice(void **state)
{
    (void)state;
    spread_cell_period(16, 5, 1.0, 0.0, 0.0, 0.96, 2.0, 60);
    spread_cell_period(5, 5, 1.0, 0.0, 0.0, 0.96, 2.0, 60);
    spread_cell_period(5, 16, 2.0, 0.0, 0.0, 0.96, 2.0, 60);
    spread_cell_period(16, 5, 10.0, 0.0, 0.0, 0.95, 1.05, 60);
    spread_cell_period(100, 1, 10.0, 0.0, 0.0, 0.95, 1.06, 60);
}

/* Per-minute limits with 10% of the messages lost, under and at the
 * limit: what the issue asks of every cell (0.98 of one central limiter
 * up to 16 nodes, 0.95 at 100).  A node that held most of a slow key's
 * burst when it fell quiet kept it until it dropped the key, and a lost
 * idle report kept it counted as held longer still: 16 nodes of burst 5
 * at 0.8 of the limit admitted 0.969-0.988 of the oracle over seeds 1-40,
 * 100 nodes at the limit 0.941-0.969 over seeds 1-12.  Its idle report
 * now gives its units back (replica_node__report): over seeds 1-30,
 * 0.994-1.003, 0.999-1.007 at the limit, and 1.001-1.011. */
static void test_spread_minute_loss(void **state)
{
    (void)state;
    spread_cell_period(16, 5, 0.8, 0.0, 0.1, 0.98, 2.0, 60);
    spread_cell_period(16, 5, 1.0, 0.0, 0.1, 0.98, 2.0, 60);
    spread_cell_period(100, 5, 1.0, 0.0, 0.1, 0.95, 2.0, 60);
}

/* The other algorithms that can be global, 5 nodes x 100 keys. */
static void algo_case(enum algo_kind kind, double tol)
{
    struct fs_cfg c;
    struct fs_result r;
    fs_default(&c, seed);
    c.kind = kind;
    c.seconds = 20;
    run(&c, &r, algo_name(kind));
    assert_true(fabs(r.ratio - 1.0) <= tol);
}

static void test_token_bucket(void **state)
{
    (void)state;
    algo_case(ALGO_TOKEN_BUCKET, 0.02);
}

static void test_fixed_window(void **state)
{
    (void)state;
    algo_case(ALGO_FIXED_WINDOW, 0.05);
}

static void test_sliding_window(void **state)
{
    (void)state;
    algo_case(ALGO_SLIDING_WINDOW, 0.05);
}

int main(void)
{
    seed = test_seed("sim_test_global_fleet");
    /* SLUICE_TEST=name (a cmocka pattern) replays one test with the seed. */
    const char *only = getenv("SLUICE_TEST");
    if (only != NULL && *only != '\0')
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_16x1000),
        cmocka_unit_test(test_loss),
        cmocka_unit_test(test_report_budget),
        cmocka_unit_test(test_100_nodes),
        cmocka_unit_test(test_churn_members),
        cmocka_unit_test(test_silent_owner),
        cmocka_unit_test(test_partition_share),
        cmocka_unit_test(test_partition_spread),
        cmocka_unit_test(test_partition_minority),
        cmocka_unit_test(test_partition_optimistic),
        cmocka_unit_test(test_restart_two_of_three),
        cmocka_unit_test(test_crash_majority_redirect),
        cmocka_unit_test(test_clock_skew),
        cmocka_unit_test(test_first_burst),
        cmocka_unit_test(test_burst_dominated),
        cmocka_unit_test(test_cold_start),
        cmocka_unit_test(test_spread_slice),
        cmocka_unit_test(test_spread_minute_slice),
        cmocka_unit_test(test_spread_minute_loss),
        cmocka_unit_test(test_token_bucket),
        cmocka_unit_test(test_fixed_window),
        cmocka_unit_test(test_sliding_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
