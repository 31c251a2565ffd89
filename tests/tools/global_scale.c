/*
 * global_scale: global limits at fleet scale in the simulator
 * (tests/sim/fleetsim.h).  N nodes x K busy global keys, every key hammered
 * from every node at a skewed demand; prints one line:
 *
 *   nodes=100 keys=10000 loss=0.10 ratio=1.002 p99_key=1.03 worst_key=1.05
 *   bytes_node_s=412000 mem_key_node=180
 *
 * ratio: admitted / what one central GCRA per key seeing every request
 * admits (the oracle); p99_key, worst_key: the same per key;
 * bytes_node_s: replication bytes each node sends per second (reports and
 * leases; membership gossip is not included); mem_key_node: bytes of
 * replication state per key per node, from the structures' sizes.
 * Deterministic from --seed (default SLUICE_SEED, else 1).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/fleetsim.h"

static void usage(FILE *f)
{
    fprintf(
        f, "usage: global_scale [--nodes N] [--keys K] [--demand X] [--loss L]\n"
           "                    [--seconds S] [--seed SEED] [--policy share|optimistic]\n"
           "                    [--rate LO-HI] [--period-s S] [--burst B] [--skew E]\n"
           "                    [--interval-ms MS] [--cold-start-ms MS] [--algorithm NAME]\n"
           "                    [--verbose] [--trace]\n"
           "  --matrix   the nodes x burst x skew x demand grid (below/above per cell)\n"
           "  --verbose  also print admitted/oracle totals and replication counters\n"
           "  --trace    print cumulative admitted and oracle every 250 ms\n"
           "  --period-s       the keys' period (rates are units per period; default 1)\n"
           "  --cold-start-ms  start every node young and alone for MS (a new cluster)\n"
           "  --algorithm      every key's: gcra (default), token-bucket, fixed-window,\n"
           "                   sliding-window (the names of CL.THROTTLE's algorithms)\n"
           "  --partition AT,LEN,SPLIT   a two-way partition [0,SPLIT) | [SPLIT,N) (seconds)\n"
           "  --minority-lag-ms MS       its smaller side declares the other dead MS later\n"
           "                             (marking it quiet meanwhile, as a real node)\n"
           "  --redirect                 a dead node's clients go to a live node\n"
           "  --kill AT,RESTART,V        kill -9 nodes 0..V-1, restart them (ms)\n"
           "  --churn JOIN,DIE,LEAVE     node N-1 joins, node 1 dies, node 2 leaves (s; 0 none)\n");
}

/* --matrix: the grid of the availability issue, nodes {3, 5, 16, 100} x
 * burst {1, 5, 16} x skew {0, 1} by rows, demand {0.2 .. 10} by columns,
 * 100 keys of 10 per period each, every other setting as given (--loss,
 * --period-s, --seconds, --seed).  Each cell is "below/above": admitted /
 * the oracle, and the worst key's excess over its envelope as a fraction of
 * the stated bound (fs_bound; the bound holds at 1.00 or less).  A last
 * line gives the demand-10 column's range and its worst key against that
 * key's own oracle (the target: within 5%, no key above 1.25). */
static int gs_matrix(const struct fs_cfg *base)
{
    static const int nodes[] = {3, 5, 16, 100};
    static const int64_t bursts[] = {1, 5, 16};
    static const double skews[] = {0.0, 1.0}, demands[] = {0.2, 0.5, 0.8, 1.0, 2.0, 10.0};
    double worst_below = 2.0, worst_bound = 0.0;
    /* at ten times the limit (the last column): the total's range and the
     * worst key against its own oracle */
    double hot_lo = 2.0, hot_hi = 0.0, hot_key = 0.0;
    printf("loss=%.2f period_s=%lld seconds=%lld; cells: below/above (of the bound)\n", base->loss,
           (long long)((base->period_ns > 0 ? base->period_ns : FS_SEC) / FS_SEC),
           (long long)base->seconds);
    printf("%-22s", "nodes burst skew");
    for (size_t d = 0; d < sizeof(demands) / sizeof(demands[0]); d++)
        printf("  demand %-5g", demands[d]);
    printf("\n");
    for (size_t n = 0; n < sizeof(nodes) / sizeof(nodes[0]); n++)
        for (size_t b = 0; b < sizeof(bursts) / sizeof(bursts[0]); b++)
            for (size_t k = 0; k < sizeof(skews) / sizeof(skews[0]); k++) {
                printf("%5d %5lld %4g      ", nodes[n], (long long)bursts[b], skews[k]);
                for (size_t d = 0; d < sizeof(demands) / sizeof(demands[0]); d++) {
                    struct fs_cfg c = *base;
                    c.n = nodes[n];
                    c.burst = bursts[b];
                    c.skew = skews[k];
                    c.demand = demands[d];
                    c.keys = 100;
                    c.rate_lo = c.rate_hi = 10;
                    struct fleetsim s;
                    if (fs_init(&s, &c) != 0)
                        return 1;
                    fs_run(&s);
                    struct fs_result r;
                    fs_result(&s, &r);
                    fs_destroy(&s);
                    printf("  %5.3f/%5.2f", r.ratio, r.of_bound);
                    fflush(stdout);
                    if (r.ratio < worst_below)
                        worst_below = r.ratio;
                    if (r.of_bound > worst_bound)
                        worst_bound = r.of_bound;
                    if (demands[d] >= 10.0) {
                        hot_lo = r.ratio < hot_lo ? r.ratio : hot_lo;
                        hot_hi = r.ratio > hot_hi ? r.ratio : hot_hi;
                        hot_key = r.worst_key > hot_key ? r.worst_key : hot_key;
                    }
                }
                printf("\n");
            }
    printf("lowest below %.3f; highest above %.2f of the bound\n", worst_below, worst_bound);
    printf("at demand 10: %.3f-%.3f of the oracle, worst key %.3f of its own\n", hot_lo, hot_hi,
           hot_key);
    return 0;
}

int main(int argc, char **argv)
{
    struct fs_cfg c;
    const char *env = getenv("SLUICE_SEED");
    fs_default(&c, env ? strtoull(env, NULL, 10) : 1);
    c.seconds = 10;
    int verbose = 0, matrix = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--matrix") == 0) {
            matrix = 1;
            continue;
        }
        if (strcmp(a, "--redirect") == 0) {
            c.redirect = 1;
            continue;
        }
        if (strcmp(a, "--verbose") == 0 || strcmp(a, "--trace") == 0) {
            verbose |= strcmp(a, "--verbose") == 0;
            c.trace |= strcmp(a, "--trace") == 0;
            continue;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--nodes") == 0)
            c.n = atoi(v);
        else if (strcmp(a, "--keys") == 0)
            c.keys = atoi(v);
        else if (strcmp(a, "--demand") == 0)
            c.demand = atof(v);
        else if (strcmp(a, "--loss") == 0)
            c.loss = atof(v);
        else if (strcmp(a, "--seconds") == 0)
            c.seconds = atoll(v);
        else if (strcmp(a, "--seed") == 0)
            c.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--burst") == 0)
            c.burst = atoll(v);
        else if (strcmp(a, "--skew") == 0)
            c.skew = atof(v);
        else if (strcmp(a, "--period-s") == 0)
            c.period_ns = atoll(v) * FS_SEC;
        else if (strcmp(a, "--cold-start-ms") == 0)
            c.cold_start_ns = atoll(v) * FS_MSEC;
        else if (strcmp(a, "--minority-lag-ms") == 0)
            c.minority_lag_ns = atoll(v) * FS_MSEC;
        else if (strcmp(a, "--partition") == 0) /* AT,LEN,SPLIT in seconds, nodes */
            sscanf(v, "%" SCNd64 ",%" SCNd64 ",%d", &c.part_at, &c.part_len, &c.split);
        else if (strcmp(a, "--kill") == 0) /* AT_MS,RESTART_MS,VICTIMS */
            sscanf(v, "%" SCNd64 ",%" SCNd64 ",%d", &c.kill_at, &c.restart_at, &c.victims);
        else if (strcmp(a, "--churn") == 0) /* JOIN,DIE,LEAVE in seconds (0: none) */
            sscanf(v, "%" SCNd64 ",%" SCNd64 ",%" SCNd64, &c.join_at, &c.die_at, &c.leave_at);
        else if (strcmp(a, "--interval-ms") == 0)
            c.interval_ns = atoll(v) * FS_MSEC;
        else if (strcmp(a, "--rate") == 0) {
            c.rate_lo = atoll(v);
            const char *d = strchr(v, '-');
            c.rate_hi = d ? atoll(d + 1) : c.rate_lo;
        } else if (strcmp(a, "--algorithm") == 0) {
            if (algo_from_name(v, &c.kind) != 0) {
                fprintf(stderr, "global_scale: unknown algorithm %s\n", v);
                return 2;
            }
        } else if (strcmp(a, "--policy") == 0)
            c.pol =
                strcmp(v, "optimistic") == 0 ? POLICY_PARTITION_OPTIMISTIC : POLICY_PARTITION_SHARE;
        else {
            usage(stderr);
            return 2;
        }
    }
    if (matrix)
        return gs_matrix(&c);
    c.part_at *= FS_SEC;
    c.part_len *= FS_SEC;
    c.kill_at *= FS_MSEC;
    c.restart_at *= FS_MSEC;
    c.join_at *= FS_SEC;
    c.die_at *= FS_SEC;
    c.dier = c.die_at > 0 ? 1 : 0;
    c.leave_at *= FS_SEC;
    c.leaver = c.leave_at > 0 ? 2 : 0;
    if (c.n < 1 || c.n > 1024 || c.keys < 1 || c.seconds < 1 || c.demand <= 0 || c.rate_lo < 1 ||
        c.rate_hi < c.rate_lo) {
        usage(stderr);
        return 2;
    }
    struct fleetsim s;
    if (fs_init(&s, &c) != 0) {
        fprintf(stderr, "global_scale: cannot set up the simulation\n");
        return 1;
    }
    fs_run(&s);
    struct fs_result r;
    fs_result(&s, &r);
    printf("nodes=%d keys=%d loss=%.2f ratio=%.3f p99_key=%.3f worst_key=%.3f min_key=%.3f "
           "window=%.3f above=%.3f above_units=%.1f bytes_node_s=%.0f mem_key_node=%.0f\n",
           c.n, c.keys, c.loss, r.ratio, r.p99_key, r.worst_key, r.min_key, r.win_ratio, r.above,
           r.above_units, r.bytes_node_s, r.mem_key_node);
    if (c.restart_at > 0)
        printf("restarted nodes admitted %" PRIu64 " in their first second\n", s.restarted_ok);
    if (verbose) {
        fprintf(stderr, "admitted=%llu oracle=%llu\n", (unsigned long long)r.ok,
                (unsigned long long)r.orc);
        if (c.part_len > 0)
            fprintf(stderr,
                    "in the partition window: nodes [0,%d) admitted %llu, the others %llu\n",
                    c.split, (unsigned long long)s.win_side_ok[0],
                    (unsigned long long)s.win_side_ok[1]);
        struct replica_stats t = {0};
        for (int i = 0; i < c.n; i++) {
            struct replica_stats x;
            if (s.nd[i].r == NULL)
                continue;
            replica_get_stats(s.nd[i].r, &x);
            t.report_entries_sent += x.report_entries_sent;
            t.lease_entries_sent += x.lease_entries_sent;
            t.lease_entries_received += x.lease_entries_received;
            t.stale_leases += x.stale_leases;
            t.decisions += x.decisions;
            t.limited += x.limited;
            t.debt_events += x.debt_events;
            t.free_admits += x.free_admits;
            t.bad_packets += x.bad_packets;
            t.notices_sent += x.notices_sent;
            t.chance_refusals += x.chance_refusals;
            t.prompt_reports += x.prompt_reports;
        }
        fprintf(stderr,
                "reports=%llu leases=%llu received=%llu stale=%llu decisions=%llu limited=%llu "
                "debt=%llu bad=%llu free=%llu notices=%llu chance_refusals=%llu prompt=%llu\n",
                (unsigned long long)t.report_entries_sent, (unsigned long long)t.lease_entries_sent,
                (unsigned long long)t.lease_entries_received, (unsigned long long)t.stale_leases,
                (unsigned long long)t.decisions, (unsigned long long)t.limited,
                (unsigned long long)t.debt_events, (unsigned long long)t.bad_packets,
                (unsigned long long)t.free_admits, (unsigned long long)t.notices_sent,
                (unsigned long long)t.chance_refusals, (unsigned long long)t.prompt_reports);
    }
    fs_destroy(&s);
    return 0;
}
