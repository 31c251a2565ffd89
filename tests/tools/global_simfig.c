/*
 * global_simfig: prints the figures of global limits in the simulator, each
 * against the oracle (one GCRA that sees every request of the cluster):
 * admitted/oracle per scenario, partition overshoot, first-burst bound,
 * restart behaviour, delta propagation in gossip intervals, and gossip
 * bytes.  Seeded (SLUICE_SEED); SLUICE_SIM_SCALE shortens the runs.
 *
 *   global_simfig [scenario...]   (default: all)
 */
#include <stdio.h>
#include <string.h>

#include "../sim/globalsim.h"

static uint64_t seed;

static int want(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

static void run(const char *name, const struct gs_cfg *c, struct gs_result *res)
{
    struct gs g;
    if (gs_init(&g, c) != 0) {
        fprintf(stderr, "%s: setup failed\n", name);
        exit(1);
    }
    gs_run(&g, res);
    gs_destroy(&g);
}

static void steady(const char *name, int64_t count, int64_t burst, double loss)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.count = count;
    c.burst = burst;
    c.loss = loss;
    c.duration_ns = (int64_t)(30 * GS_SEC * gs_scale());
    run(name, &c, &r);
    printf("%-28s admitted %7lld oracle %7lld ratio %.4f  pours %llu debt-events %llu "
           "delta B/entry %.1f delta B/node/s %.0f gossip B/node/s %.0f\n",
           name, (long long)r.admitted, (long long)r.oracle, (double)r.admitted / (double)r.oracle,
           (unsigned long long)r.st.pours, (unsigned long long)r.st.debt_events, r.bytes_delta,
           r.delta_bytes_node_s, r.bytes_node_s);
}

static void partition(const char *name, enum replica_policy pol)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.pol = pol;
    c.split = 2;
    c.part_at = 5 * GS_SEC;
    c.part_len = 10 * GS_SEC;
    c.duration_ns = 40 * GS_SEC;
    run(name, &c, &r);
    printf("%-28s partition: admitted %lld oracle %lld overshoot %+.1f%%; after: admitted %lld "
           "oracle %lld; whole run ratio %.4f (phantom %llu refunded %llu)\n",
           name, (long long)r.admitted_win, (long long)r.oracle_win,
           100.0 * ((double)r.admitted_win / (double)r.oracle_win - 1), (long long)r.admitted_post,
           (long long)r.oracle_post, (double)r.admitted / (double)r.oracle,
           (unsigned long long)r.st.phantom_units, (unsigned long long)r.st.refunded_units);
}

static void first_burst(const char *name, int64_t count, int64_t burst)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.count = count;
    c.burst = burst;
    c.demand_mult = 0.0001;
    c.burst_at = 0;
    c.burst_each = (int)(burst + 1) * 2;
    c.duration_ns = 2 * GS_SEC;
    run(name, &c, &r);
    printf("%-28s %d nodes x %d requests at once: admitted %lld (one burst = %lld, %.2f bursts)\n",
           name, c.n, c.burst_each, (long long)r.burst_admitted, (long long)(burst + 1),
           (double)r.burst_admitted / (double)(burst + 1));
}

static void restart(const char *name)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.victim = 0;
    c.kill_at = 10 * GS_SEC;
    c.restart_at = 12 * GS_SEC;
    c.duration_ns = 30 * GS_SEC;
    run(name, &c, &r);
    printf("%-28s admitted %lld oracle %lld ratio %.4f; first 2 s after restart: victim "
           "%lld, cluster %lld, oracle %lld; unsynced denials %llu; mean reset_after 0.1-0.6 s "
           "after restart: victim %.0f ms, a peer %.0f ms, oracle %.0f ms\n",
           name, (long long)r.admitted, (long long)r.oracle, (double)r.admitted / (double)r.oracle,
           (long long)r.restart_first, (long long)r.restart_cluster_first,
           (long long)r.restart_oracle_first, (unsigned long long)r.st.unsynced_denials,
           (double)r.restart_reset_ns / GS_MSEC, (double)r.restart_peer_reset_ns / GS_MSEC,
           (double)r.restart_oracle_reset_ns / GS_MSEC);
}

static void propagation(const char *name, int n)
{
    struct gs_cfg c;
    struct gs_result r;
    gs_default(&c, seed);
    c.n = n;
    for (int i = 0; i < n; i++)
        c.weight[i] = 1;
    c.count = 1000;
    c.burst = 100;
    c.demand_mult = 0.2;
    c.track_prop = 1;
    c.gossip_nodes = 5;
    c.duration_ns = (int64_t)(20 * GS_SEC * gs_scale());
    run(name, &c, &r);
    printf("%-28s %d nodes (fanout %d): %zu deltas, p50 %.2f p99 %.2f gossip intervals from "
           "admission, "
           "p50 %.2f p99 %.2f from sending (%zu never complete); delta B/entry %.1f, delta "
           "B/node/s %.0f, gossip B/node/s %.0f\n",
           name, n, c.gossip_nodes, r.prop_n, r.prop_p50, r.prop_p99, r.send_p50, r.send_p99,
           r.prop_lost, r.bytes_delta, r.delta_bytes_node_s, r.bytes_node_s);
}

int main(int argc, char **argv)
{
    seed = test_seed("global_simfig");
    if (want(argc, argv, "steady"))
        steady("steady-100/s", 100, 20, 0);
    if (want(argc, argv, "steady1000"))
        steady("steady-1000/s", 1000, 100, 0);
    if (want(argc, argv, "loss"))
        steady("loss10%-100/s", 100, 20, 0.10);
    if (want(argc, argv, "partition"))
        partition("partition-share", REPLICA_SHARE);
    if (want(argc, argv, "optimistic"))
        partition("partition-optimistic", REPLICA_OPTIMISTIC);
    if (want(argc, argv, "burst"))
        first_burst("first-burst-100/s", 100, 20);
    if (want(argc, argv, "burst1000"))
        first_burst("first-burst-1000/s", 1000, 100);
    if (want(argc, argv, "restart"))
        restart("restart");
    if (want(argc, argv, "prop"))
        propagation("propagation", 16);
    return 0;
}
