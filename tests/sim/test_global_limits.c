/*
 * Global limits on the simulator, against an oracle: a single GCRA that sees
 * every request the cluster receives at the same simulated time.  Five
 * nodes with skewed demand (50/20/15/10/5%) at 10x the limit unless stated;
 * replica and gossip interval 100 ms.  Seeded: SLUICE_SEED=<n> replays a
 * run.  Each scenario takes well under a second of CPU, under the sanitizers
 * too, so all run at full length (SLUICE_SIM_SCALE may shorten them).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "globalsim.h"

static uint64_t seed;

static void run(const struct gs_cfg *c, struct gs_result *r)
{
    struct gs g;
    assert_int_equal(gs_init(&g, c), 0);
    gs_run(&g, r);
    gs_destroy(&g);
    assert_int_equal(r->st.bad_packets, 0);
}

static double ratio(int64_t a, int64_t b)
{
    return (double)a / (double)b;
}

static void steady(int64_t count, int64_t burst, double loss, double tol)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.count = count;
    c.burst = burst;
    c.loss = loss;
    c.duration_ns = (int64_t)(30 * GS_SEC * gs_scale());
    run(&c, &r);
    fprintf(stderr, "  %lld/s burst %lld loss %.0f%%: admitted %lld oracle %lld ratio %.4f\n",
            (long long)count, (long long)burst, loss * 100, (long long)r.admitted,
            (long long)r.oracle, ratio(r.admitted, r.oracle));
    assert_true(fabs(ratio(r.admitted, r.oracle) - 1) <= tol);
}

static void test_steady_100(void **state)
{
    (void)state;
    steady(100, 20, 0, 0.02);
}

static void test_steady_1000(void **state)
{
    (void)state;
    steady(1000, 100, 0, 0.02);
}

static void test_loss_10(void **state)
{
    (void)state;
    steady(100, 20, 0.10, 0.05);
}

/* 16 nodes: time from the delta leaving its node (the flush after the
 * admission) until every other node holds the count, p99 <= 3 intervals. */
static void test_propagation_16(void **state)
{
    (void)state;
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.n = 16;
    for (int i = 0; i < 16; i++)
        c.weight[i] = 1;
    c.count = 1000;
    c.burst = 100;
    c.demand_mult = 0.2;
    c.track_prop = 1;
    c.gossip_nodes = 5;
    c.duration_ns = (int64_t)(20 * GS_SEC * gs_scale());
    run(&c, &r);
    fprintf(stderr,
            "  %zu deltas: from sending p50 %.2f p99 %.2f intervals; from admission p50 %.2f "
            "p99 %.2f; %zu never arrived\n",
            r.prop_n, r.send_p50, r.send_p99, r.prop_p50, r.prop_p99, r.prop_lost);
    assert_true(r.prop_n >= 100);
    assert_int_equal(r.prop_lost, 0);
    assert_true(r.send_p99 <= 3.0);
}

static void partition(enum replica_policy pol, struct gs_result *r)
{
    struct gs_cfg c;
    gs_default(&c, seed);
    c.pol = pol;
    c.split = 2; /* {50%, 20%} | {15%, 10%, 5%} */
    c.part_at = 5 * GS_SEC;
    c.part_len = 10 * GS_SEC;
    c.duration_ns = 40 * GS_SEC;
    run(&c, r);
    fprintf(stderr,
            "  %s: during the 10 s partition admitted %lld oracle %lld (%+.1f%%); after "
            "healing admitted %lld oracle %lld; whole run ratio %.4f\n",
            pol == REPLICA_SHARE ? "share" : "optimistic", (long long)r->admitted_win,
            (long long)r->oracle_win, 100 * (ratio(r->admitted_win, r->oracle_win) - 1),
            (long long)r->admitted_post, (long long)r->oracle_post, ratio(r->admitted, r->oracle));
}

static void test_partition_policies(void **state)
{
    (void)state;
    struct gs_result share, opt;
    partition(REPLICA_SHARE, &share);
    partition(REPLICA_OPTIMISTIC, &opt);
    /* share: overshoot <= 10% over the partition. */
    assert_true(ratio(share.admitted_win, share.oracle_win) <= 1.10);
    /* optimistic: each side admits the full limit... */
    assert_true(ratio(opt.admitted_win, opt.oracle_win) > 1.5);
    /* ...then repays the debt after healing... */
    assert_true(opt.admitted_post < opt.oracle_post - (opt.admitted_win - opt.oracle_win) / 2);
    /* ...so both end near the oracle over the whole run. */
    assert_true(fabs(ratio(opt.admitted, opt.oracle) - 1) <= 0.05);
    assert_true(fabs(ratio(share.admitted, share.oracle) - 1) <= 0.05);
}

/* Kill -9 the busiest node for 2 s and restart it: no quota reset. */
static void test_restart_no_reset(void **state)
{
    (void)state;
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.pol = REPLICA_OPTIMISTIC; /* no phantom for the dead node: isolates the restart */
    c.victim = 0;
    c.kill_at = 10 * GS_SEC;
    c.restart_at = 12 * GS_SEC;
    c.duration_ns = 30 * GS_SEC;
    run(&c, &r);
    fprintf(stderr,
            "  admitted %lld oracle %lld ratio %.4f; first 2 s back: victim %lld, cluster %lld, "
            "oracle %lld; mean reset_after 0.1-0.6 s back: victim %.0f ms, a peer %.0f ms, "
            "oracle %.0f ms\n",
            (long long)r.admitted, (long long)r.oracle, ratio(r.admitted, r.oracle),
            (long long)r.restart_first, (long long)r.restart_cluster_first,
            (long long)r.restart_oracle_first, (double)r.restart_reset_ns / GS_MSEC,
            (double)r.restart_peer_reset_ns / GS_MSEC, (double)r.restart_oracle_reset_ns / GS_MSEC);
    assert_true(fabs(ratio(r.admitted, r.oracle) - 1) <= 0.02);
    /* The restarted node recovered the cluster's consumption at once (its
     * state is about as full as a peer's that never went away), or, if its
     * join exchange brought no state, it failed closed meanwhile. */
    assert_true(r.restart_peer_reset_ns > 0);
    assert_true(r.restart_reset_ns >= r.restart_peer_reset_ns * 6 / 10 || r.restart_early == 0);
    /* No fresh burst on top of the rate in its first seconds back. */
    assert_true(r.restart_cluster_first <= r.restart_oracle_first + (c.burst + 1));
}

static void first_burst(int64_t count, int64_t burst)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.count = count;
    c.burst = burst;
    c.demand_mult = 0.0001;
    c.burst_each = (int)(burst + 1) * 2;
    c.duration_ns = 1 * GS_SEC;
    run(&c, &r);
    fprintf(stderr, "  %lld/s burst %lld: %d nodes x %d requests at once admitted %lld\n",
            (long long)count, (long long)burst, c.n, c.burst_each, (long long)r.burst_admitted);
    /* Bound: one burst plus one unit per node from rounding. */
    assert_true(r.burst_admitted <= burst + 1 + c.n - 1);
    assert_true(r.burst_admitted >= (burst + 1) / 2);
}

static void test_first_burst(void **state)
{
    (void)state;
    first_burst(100, 20);
    first_burst(1000, 100);
}

int main(void)
{
    seed = test_seed("test_global_limits");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steady_100),
        cmocka_unit_test(test_steady_1000),
        cmocka_unit_test(test_loss_10),
        cmocka_unit_test(test_propagation_16),
        cmocka_unit_test(test_partition_policies),
        cmocka_unit_test(test_restart_no_reset),
        cmocka_unit_test(test_first_burst),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
