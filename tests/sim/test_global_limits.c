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
     * join exchange brought no state, it failed closed meanwhile, or it
     * admitted no more than its own share allows (its rate share with the
     * replica's 10% slack over those 600 ms, plus its share of the burst):
     * a node's own admissions are capped by its share, so a merged view one
     * gossip interval behind a peer's hands out no fresh quota. */
    double w = c.weight[c.victim];
    fprintf(stderr, "  victim admitted %lld in its first 600 ms back\n",
            (long long)r.restart_early);
    assert_true(r.restart_peer_reset_ns > 0);
    assert_true(r.restart_reset_ns >= r.restart_peer_reset_ns * 6 / 10 || r.restart_early == 0 ||
                (double)r.restart_early <=
                    0.6 * (double)c.count * w * 1.1 + (double)(c.burst + 1) * w + 1);
    /* No fresh burst on top of the rate in its first seconds back. */
    assert_true(r.restart_cluster_first <= r.restart_oracle_first + (c.burst + 1));
}

/*
 * Fairness after a disruption: over the config's fairness window, every node
 * that asked must admit at least FAIR_MIN of its demand-weighted fair share
 * of what the oracle admitted (share_i = oracle * requests_i / requests).
 * Returns the smallest ratio admitted_i / share_i, printed per node.
 */
/* Achieved: the worst node gets 0.34-1.0 of its share over seeds 1-8 (the
 * smallest node varies most); before order-independent pours and rate
 * shares it got 0.00-0.10.  The bound leaves room for that spread. */
#define FAIR_MIN 0.25

static double fairness(const struct gs_cfg *c, const struct gs_result *r)
{
    int64_t req = 0;
    double worst = 1e9;
    for (int i = 0; i < c->n; i++)
        req += r->fair_req[i];
    fprintf(stderr, "    fairness window: oracle %lld;", (long long)r->fair_oracle);
    for (int i = 0; i < c->n; i++) {
        if (r->fair_req[i] == 0)
            continue;
        double share = (double)r->fair_oracle * (double)r->fair_req[i] / (double)req;
        double f = (double)r->fair_admitted[i] / share;
        fprintf(stderr, " node %d %lld/%.0f (%.2f)", i, (long long)r->fair_admitted[i], share, f);
        if (f < worst)
            worst = f;
    }
    fprintf(stderr, "\n");
    return worst;
}

/* Demand rising with the node's index, as in the real-process benchmark
 * (node i asks (i + 1) parts): the last node is the busiest. */
static void rising(struct gs_cfg *c, int n)
{
    c->n = n;
    for (int i = 0; i < GS_MAX; i++)
        c->weight[i] = i < n ? (double)(i + 1) : 0;
}

/*
 * A node stops for 5 s (SIGSTOP) and resumes: on resuming it handles the
 * peers' deltas of the whole freeze at once, after its overdue tick.  The
 * consumption they carry happened during the freeze and has drained since:
 * the node must count it at its own times, not on top of what it admits
 * after the thaw, or it carries seconds of debt that the busy peers never
 * let it repay (it answered 0 for the rest of the run).
 */
static void freeze(int n, enum replica_policy pol)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    rising(&c, n);
    c.pol = pol;
    c.frozen = n - 1;
    c.freeze_at = 9 * GS_SEC;
    c.freeze_len = 5 * GS_SEC;
    c.fair_at = 14 * GS_SEC;
    c.fair_len = 10 * GS_SEC;
    c.duration_ns = 30 * GS_SEC;
    run(&c, &r);
    /* Under share, the peers hold the silent node's last known share of the
     * rate for it while it is silent (they cannot tell a freeze from a
     * partition): the oracle, which sees no requests from a frozen node,
     * admits that much more.  The reference is the oracle less that share
     * over the freeze. */
    double held = 0, wsum = 0;
    for (int i = 0; i < n; i++)
        wsum += c.weight[i];
    if (pol == REPLICA_SHARE)
        held = c.weight[c.frozen] / wsum * (double)c.freeze_len / (double)c.duration_ns;
    double ref = (double)r.oracle * (1 - held);
    fprintf(stderr,
            "  freeze n=%d %s: admitted %lld oracle %lld ratio %.4f; reference %.0f (share held "
            "%.1f%%) ratio %.4f (backlog dropped %zu)\n",
            n, pol == REPLICA_SHARE ? "share" : "optimistic", (long long)r.admitted,
            (long long)r.oracle, ratio(r.admitted, r.oracle), ref, 100 * held,
            (double)r.admitted / ref, r.backlog_dropped);
    double worst = fairness(&c, &r);
    assert_true(fabs((double)r.admitted / ref - 1) <= 0.05);
    assert_true(worst >= FAIR_MIN);
}

static void test_freeze(void **state)
{
    (void)state;
    freeze(3, REPLICA_SHARE);
    freeze(5, REPLICA_SHARE);
    freeze(3, REPLICA_OPTIMISTIC);
}

/*
 * kill -9 a node under the share policy and restart it 2 s later: its peers
 * charged phantom consumption for it while it was gone; that must stop when
 * its new life's counts flow, and must not be charged on top of them, or the
 * untouched nodes starve while the cluster stays below the limit.
 */
static void restart_share(int n)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    rising(&c, n);
    c.pol = REPLICA_SHARE;
    c.victim = 1;
    c.kill_at = 18 * GS_SEC;
    c.restart_at = 20 * GS_SEC;
    c.fair_at = 23 * GS_SEC;
    c.fair_len = 10 * GS_SEC;
    c.duration_ns = 33 * GS_SEC;
    run(&c, &r);
    fprintf(stderr, "  restart n=%d share: admitted %lld oracle %lld ratio %.4f\n", n,
            (long long)r.admitted, (long long)r.oracle, ratio(r.admitted, r.oracle));
    double worst = fairness(&c, &r);
    assert_true(fabs(ratio(r.admitted, r.oracle) - 1) <= 0.05);
    assert_true(worst >= FAIR_MIN);
}

static void test_restart_share(void **state)
{
    (void)state;
    restart_share(3);
    restart_share(5);
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

#if defined(__SANITIZE_ADDRESS__)
#define SIM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_SANITIZED 1
#endif
#endif
#ifndef SIM_SANITIZED
#define SIM_SANITIZED 0
#endif

/* Thousands of cold global keys change every interval on every node: far
 * more delta entries than the gossip payload channel carries.  The hot key
 * (10x its limit, skewed) must still be held to the oracle: its deltas go
 * first, the cold keys' wait (they lose only time, slots are cumulative). */
static void test_many_keys(void **state)
{
    (void)state;
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.cold_keys = SIM_SANITIZED ? 3000 : 10000;
    c.cold_rate = SIM_SANITIZED ? 1000 : 2000; /* per node: 5 nodes x 0.1-0.2 per key per s */
    c.cold_count = 10;
    c.duration_ns = (int64_t)(15 * GS_SEC * gs_scale());
    run(&c, &r);
    fprintf(stderr,
            "  hot key with %d cold keys: admitted %lld oracle %lld ratio %.4f; cold admitted "
            "%lld of %lld; delta entries sent %llu, app payloads dropped %llu\n",
            c.cold_keys, (long long)r.admitted, (long long)r.oracle, ratio(r.admitted, r.oracle),
            (long long)r.cold_admitted, (long long)r.cold_requests,
            (unsigned long long)r.st.delta_entries_sent, (unsigned long long)r.app_dropped);
    assert_true(fabs(ratio(r.admitted, r.oracle) - 1) <= 0.05);
    /* Far below their limits, cold keys are all admitted. */
    assert_true(r.cold_admitted >= r.cold_requests * 99 / 100);
}

/* Many global keys touched for a while, then silence: after the drain, the
 * grace and a few anti-entropy rounds no node holds any, also when a node
 * was frozen or restarted in between (its peers re-send their slots when it
 * comes back; a restarted node hears of the keys again by anti-entropy). */
static void idle_gc(int mode)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.demand_mult = 1e-9; /* no hot key */
    c.cold_keys = SIM_SANITIZED ? 1000 : 3000;
    c.cold_rate = 500;
    c.cold_count = 10;
    c.cold_until = 4 * GS_SEC;
    c.gc_grace_ns = 5 * GS_SEC;
    c.duration_ns = 60 * GS_SEC;
    if (mode == 1) {
        c.frozen = 2;
        c.freeze_at = 3 * GS_SEC;
        c.freeze_len = 3 * GS_SEC;
    } else if (mode == 2) {
        c.victim = 3;
        c.kill_at = 3 * GS_SEC;
        c.restart_at = 5 * GS_SEC;
    }
    run(&c, &r);
    fprintf(stderr, "  %s: %lld cold requests, then silence; keys left %llu, collected %llu\n",
            mode == 0   ? "plain"
            : mode == 1 ? "freeze"
                        : "restart",
            (long long)r.cold_requests, (unsigned long long)r.keys_end,
            (unsigned long long)r.st.gc_keys);
    assert_true(r.cold_requests > 0);
    assert_true(r.st.gc_keys > 0);
    assert_int_equal(r.keys_end, 0);
}

static void test_idle_gc(void **state)
{
    (void)state;
    idle_gc(0);
    idle_gc(1);
    idle_gc(2);
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
        cmocka_unit_test(test_freeze),
        cmocka_unit_test(test_restart_share),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_idle_gc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
