/*
 * gossip_simfig: prints libgossip's figures from the simulator (run by hand).
 *
 *   gossip_simfig [quick]      (SLUICE_SEED=<n> to replay)
 *
 * 1. Failure detection vs packet loss: a 32-node cluster; a random node is
 *    killed, the time until the first member and until every member declares
 *    it dead is recorded; it is restarted and the next trial begins.  Then a
 *    10-minute steady run per loss rate counts false deaths.
 * 2. Time for one broadcast payload to reach every node, N = 16, 100, 1000.
 * 3. Bytes sent per node per second, idle and with every node broadcasting
 *    a 64-byte payload every 100 ms.
 * All packets are sealed (XChaCha20-Poly1305), so byte counts are real.
 * Wall-clock time of each part is printed too (simulator cost).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gossip/gossip.h"
#include "gossip/keyring.h"
#include "gossip/sim.h"
#include "testutil.h"

#define SEC  1000000000LL
#define MSEC 1000000LL
#define MAXN 1000

static uint64_t seed;
static struct gossip_keyring *ring;
static char names[MAXN][16];
static int quick;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct(int64_t *v, int n, double p)
{
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    int i = (int)ceil(p * n) - 1;
    if (i < 0)
        i = 0;
    return (double)v[i] / SEC;
}

/* ---- cluster construction ---- */

struct hooks {
    void (*on_event)(void *, enum gossip_event, const struct gossip_member_info *);
    void (*on_payload)(void *, const char *, const uint8_t *, size_t);
    int64_t gossip_interval_ms;
    int app_retransmit_mult;
};

static struct gossip_sim *cluster(int n, double loss, const struct hooks *h)
{
    struct gossip_sim *s;
    struct gossip_sim_link l = {.drop = 0, .delay_ns = 1 * MSEC, .jitter_ns = 2 * MSEC};
    gossip_sim_create(&s, seed, &l);
    for (int i = 0; i < n; i++) {
        struct gossip_config cfg;
        gossip_config_default(&cfg);
        snprintf(names[i], sizeof(names[i]), "n%04d", i);
        cfg.name = names[i];
        cfg.keyring = ring;
        if (h != NULL) {
            cfg.cb.ud = (void *)(intptr_t)i;
            cfg.cb.on_event = h->on_event;
            cfg.cb.on_payload = h->on_payload;
            if (h->gossip_interval_ms)
                cfg.gossip_interval_ms = h->gossip_interval_ms;
            cfg.app_retransmit_mult = h->app_retransmit_mult;
        }
        gossip_sim_add(s, &cfg);
        if (i > 0)
            gossip_sim_join(s, i, 0);
    }
    /* Let membership settle before measuring anything. */
    for (int t = 0; t < 600; t++) {
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            ok = gossip_node_num_live(gossip_sim_node(s, i)) == (size_t)n;
        if (ok)
            break;
        gossip_sim_run(s, 1 * SEC);
    }
    gossip_sim_run(s, 20 * SEC);
    l.drop = loss;
    gossip_sim_set_default_link(s, &l);
    return s;
}

/* ---- 1. failure detection ---- */

static int victim = -1;
static int64_t t_kill, t_first, seen_dead[MAXN];
static int dead_count;
static long false_deaths;
static struct gossip_sim *cur;

static void fd_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    (void)ud;
    if (ev != GOSSIP_EVENT_DEAD)
        return;
    if (victim >= 0 && strcmp(m->name, names[victim]) == 0) {
        int64_t t = gossip_sim_now(cur) - t_kill;
        if (dead_count == 0)
            t_first = t;
        seen_dead[dead_count++] = t;
    } else {
        false_deaths++;
    }
}

static void detection(void)
{
    const double losses[] = {0, 0.05, 0.10, 0.20};
    const int n = 32, trials = quick ? 10 : 40;
    struct hooks h = {.on_event = fd_event};
    printf("\n1. Failure detection, %d nodes, defaults (probe 1 s, timeout 500 ms, 3 indirect,"
           " suspicion mult 4, max mult 6)\n",
           n);
    printf("%6s | %14s %14s | %14s %14s | %22s | %8s\n", "loss", "first med (s)", "first p99 (s)",
           "all med (s)", "all p99 (s)", "false deaths/node-hour", "wall (s)");
    for (size_t li = 0; li < sizeof(losses) / sizeof(losses[0]); li++) {
        double w0 = wall();
        int64_t first[64], all[64];
        int nf = 0, na = 0;
        uint64_t r = seed ^ li;
        cur = cluster(n, losses[li], &h);
        false_deaths = 0;
        for (int t = 0; t < trials; t++) {
            victim = 1 + (int)(test_rand(&r) % (uint64_t)(n - 1));
            dead_count = 0;
            t_kill = gossip_sim_now(cur);
            gossip_sim_kill(cur, victim);
            for (int k = 0; k < 240 && dead_count < n - 1; k++)
                gossip_sim_run(cur, 500 * MSEC);
            if (dead_count > 0)
                first[nf++] = t_first;
            if (dead_count >= n - 1)
                all[na++] = seen_dead[n - 2];
            gossip_sim_restart(cur, victim, 0);
            victim = -1;
            /* Next trial once every node has the restarted node alive again. */
            for (int k = 0; k < 120; k++) {
                gossip_sim_run(cur, 500 * MSEC);
                int ok = 1;
                for (int i = 0; i < n && ok; i++)
                    ok = gossip_node_num_live(gossip_sim_node(cur, i)) == (size_t)n;
                if (ok)
                    break;
            }
            gossip_sim_run(cur, 5 * SEC);
        }
        /* Steady state: false deaths per node-hour over 10 minutes. */
        long fd_before = false_deaths;
        int64_t minutes = quick ? 3 : 10;
        gossip_sim_run(cur, minutes * 60 * SEC);
        double rate = (double)(false_deaths - fd_before) / (n * minutes / 60.0);
        printf("%5.0f%% | %14.2f %14.2f | %14.2f %14.2f | %22.3f | %8.2f\n", losses[li] * 100,
               pct(first, nf, 0.5), pct(first, nf, 0.99), pct(all, na, 0.5), pct(all, na, 0.99),
               rate, wall() - w0);
        if (na < trials)
            printf("       (%d of %d trials: not every node declared the victim dead in 120 s)\n",
                   trials - na, trials);
        gossip_sim_destroy(cur);
        cur = NULL;
    }
}

/* ---- 2. broadcast latency ---- */

static int64_t got_at[MAXN];
static int got;

static void bc_payload(void *ud, const char *from, const uint8_t *p, size_t len)
{
    (void)from;
    (void)p;
    (void)len;
    int i = (int)(intptr_t)ud;
    if (got_at[i] < 0) {
        got_at[i] = gossip_sim_now(cur);
        got++;
    }
}

static void broadcast_latency(void)
{
    const int sizes[] = {16, 100, 1000};
    const int64_t intervals[] = {200, 100};
    printf("\n2. One broadcast reaching every node (GossipNodes 3, RetransmitMult 4)\n");
    printf("%6s %10s | %12s %12s | %10s | %8s\n", "N", "gossip ms", "median (s)", "max (s)",
           "reached", "wall (s)");
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        int n = sizes[si];
        if (quick && n > 100)
            continue;
        for (size_t ii = 0; ii < 2; ii++) {
            double w0 = wall();
            struct hooks h = {.on_payload = bc_payload, .gossip_interval_ms = intervals[ii]};
            int64_t full[8];
            int nfull = 0, reached_min = n;
            cur = cluster(n, 0, &h);
            for (int rep = 0; rep < 5; rep++) {
                for (int i = 0; i < n; i++)
                    got_at[i] = -1;
                got = 0;
                int origin = (rep * 7) % n;
                int64_t t0 = gossip_sim_now(cur);
                uint8_t payload[64] = {(uint8_t)rep};
                gossip_node_broadcast(gossip_sim_node(cur, origin), payload, sizeof(payload));
                for (int k = 0; k < 300 && got < n - 1; k++)
                    gossip_sim_run(cur, 20 * MSEC);
                if (got == n - 1) {
                    int64_t mx = 0;
                    for (int i = 0; i < n; i++)
                        if (got_at[i] - t0 > mx)
                            mx = got_at[i] - t0;
                    full[nfull++] = mx;
                }
                if (got + 1 < reached_min)
                    reached_min = got + 1;
                gossip_sim_run(cur, 5 * SEC);
            }
            printf("%6d %10lld | %12.2f %12.2f | %4d/%-5d | %8.2f\n", n, (long long)intervals[ii],
                   pct(full, nfull, 0.5), pct(full, nfull, 1.0), reached_min, n, wall() - w0);
            gossip_sim_destroy(cur);
            cur = NULL;
        }
    }
}

/* ---- 3. bytes per node ---- */

static long delivered;
static void count_payload(void *ud, const char *from, const uint8_t *p, size_t len)
{
    (void)ud;
    (void)from;
    (void)p;
    (void)len;
    delivered++;
}

static void bytes_per_node(void)
{
    const struct {
        int n;
        int64_t every_ms;
        int app_mult;
    } loads[] = {{16, 100, 0}, {16, 100, 2}, {16, 100, 1}, {100, 100, 0}, {100, 1000, 0}};
    printf("\n3. Bytes sent per node per second (sealed packets, MTU 1400, gossip every 100 ms)\n");
    printf("%6s | %10s | %16s %8s %12s %12s | %8s\n", "N", "idle B/s", "each node sends",
           "app mult", "loaded B/s", "delivered", "wall (s)");
    for (size_t li = 0; li < sizeof(loads) / sizeof(loads[0]); li++) {
        int n = loads[li].n;
        double w0 = wall();
        struct hooks h = {.on_payload = count_payload,
                          .gossip_interval_ms = 100,
                          .app_retransmit_mult = loads[li].app_mult};
        cur = cluster(n, 0, &h);
        uint64_t s0 = 0, s1 = 0, s2 = 0, sent, recv;
        for (int i = 0; i < n; i++) {
            gossip_sim_bytes(cur, i, &sent, &recv);
            s0 += sent;
        }
        gossip_sim_run(cur, 60 * SEC);
        for (int i = 0; i < n; i++) {
            gossip_sim_bytes(cur, i, &sent, &recv);
            s1 += sent;
        }
        delivered = 0;
        const int ticks = (int)(60000 / loads[li].every_ms); /* 60 s */
        uint8_t payload[64] = {0};
        for (int t = 0; t < ticks; t++) {
            for (int i = 0; i < n; i++) {
                payload[0] = (uint8_t)t;
                gossip_node_broadcast(gossip_sim_node(cur, i), payload, sizeof(payload));
            }
            gossip_sim_run(cur, loads[li].every_ms * MSEC);
        }
        gossip_sim_run(cur, 5 * SEC);
        for (int i = 0; i < n; i++) {
            gossip_sim_bytes(cur, i, &sent, &recv);
            s2 += sent;
        }
        double expected = (double)ticks * n * (n - 1);
        char what[32];
        snprintf(what, sizeof(what), "64 B / %lld ms", (long long)loads[li].every_ms);
        printf("%6d | %10.0f | %16s %8d %12.0f %11.1f%% | %8.2f\n", n, (double)(s1 - s0) / n / 60.0,
               what, loads[li].app_mult ? loads[li].app_mult : 4, (double)(s2 - s1) / n / 65.0,
               100.0 * delivered / expected, wall() - w0);
        gossip_sim_destroy(cur);
        cur = NULL;
    }
}

int main(int argc, char **argv)
{
    uint8_t key[GOSSIP_KEY_BYTES];
    quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    seed = test_seed("gossip_simfig");
    memset(key, 7, sizeof(key));
    if (gossip_keyring_create(&ring, "simfig") != 0 || gossip_keyring_install(ring, 1, key) != 0)
        return 1;
    printf("libgossip simulator figures (seed %llu)\n", (unsigned long long)seed);
    detection();
    broadcast_latency();
    bytes_per_node();
    gossip_keyring_destroy(ring);
    return 0;
}
