/*
 * bench_keys: benchmarks of the limiter (commands, not tests; see
 * tests/bench/keys.sh and tests/bench/decision.sh).
 *
 *   bench_keys keys N        insert N limited keys "user:%d" through
 *                            limiter_throttle and print RSS bytes per key
 *   bench_keys decide N [K]  warm a table with K keys (default 10000), then
 *                            make N decisions over them as CL.THROTTLE
 *                            does (the decision entry, global/decide.h, and
 *                            redis-cell's rounding) and print ns per
 *                            decision; setup is identical for any N, so two
 *                            runs under callgrind give instructions per
 *                            decision as (Ir(2N) - Ir(N)) / N
 *   bench_keys global-keys N insert N global keys through a replica that
 *                            serves and owns them all (a lone node: the
 *                            most state one node can hold per key), tick
 *                            it so every key has its owner record, and
 *                            print RSS bytes per key
 *   bench_keys global-decide N [K]
 *                            as decide, for a global key of a lone
 *                            clustered node: the decision entry, the
 *                            cluster and its replica (a global decision
 *                            in-process)
 *   bench_keys lease N [K]   as decide, for concurrency leases: K keys of
 *                            limit 4 each holding 2 leases, then N lease
 *                            decisions as SL.LEASE makes them (the wait
 *                            queue's check, acquire_submit_woken, then the
 *                            semaphore, conc_acquire), each released at
 *                            once (conc_release), so the table stays warm
 */
#include "acquire.h"
#include "cluster.h"
#include "concurrency.h"
#include "decide.h"
#include "gcra.h"
#include "limiter.h"
#include "replica.h"
#include "sluice/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int bench_keys(long n)
{
    struct limiter_config cfg = {(size_t)n + 1, LIMITER_OVERFLOW_DENY};
    struct limiter *lim;
    struct limiter_throttle_result r;
    struct limiter_stats st;
    char k[32];
    long before, after;

    if (limiter_create(&lim, &cfg) < 0)
        return 1;
    before = rss_bytes();
    for (long i = 0; i < n; i++) {
        int len = snprintf(k, sizeof(k), "user:%ld", i);
        /* CL.THROTTLE user:i 15 30 60 1 at one instant: every key is kept */
        if (limiter_throttle(lim, k, (size_t)len, 15, 30, 60, 1, 1000000000LL, &r) < 0)
            return 1;
    }
    after = rss_bytes();
    limiter_get_stats(lim, &st);
    printf("keys %llu\nrss_before %ld\nrss_after %ld\nbytes_per_key %.1f\n",
           (unsigned long long)st.keys, before, after, (double)(after - before) / (double)n);
    limiter_destroy(lim);
    return st.keys == (uint64_t)n ? 0 : 1;
}

/* One decision as CL.THROTTLE makes it: the entry, then redis-cell's
 * seconds. */
static int entry_throttle(const struct decide *d, const char *key, size_t klen, int64_t now,
                          struct gcra_cell_reply *cell)
{
    struct decide_req q = {.key = key,
                           .klen = klen,
                           .cl_burst = 1000,
                           .cl_count = 100,
                           .cl_period_s = 60,
                           .scope = -1,
                           .qty = 1};
    struct algo_result a;
    int rc = decide_run(d, &q, now, &a);
    cell->limited = a.limited;
    cell->limit = a.limit;
    cell->remaining = a.remaining > 0 ? a.remaining : 0;
    cell->retry_after_s = a.limited ? gcra_cell_seconds(a.retry_after_ns) : -1;
    cell->reset_after_s = gcra_cell_seconds(a.reset_after_ns);
    return rc;
}

static int bench_decide(long n, long nkeys)
{
    struct limiter *lim;
    struct gcra_cell_reply r;
    char(*keys)[24] = calloc((size_t)nkeys, sizeof(*keys));
    size_t *lens = calloc((size_t)nkeys, sizeof(*lens));
    int64_t now = 1000000000LL, t0, t1;
    long limited = 0;

    if (keys == NULL || lens == NULL || limiter_create(&lim, NULL) < 0)
        return 1;
    struct decide d = {lim, NULL};
    for (long i = 0; i < nkeys; i++) {
        lens[i] = (size_t)snprintf(keys[i], sizeof(keys[i]), "user:%ld", i);
        entry_throttle(&d, keys[i], lens[i], now, &r);
    }
    t0 = mono_ns();
    for (long i = 0; i < n; i++) {
        long j = i % nkeys;
        now += 1000;
        entry_throttle(&d, keys[j], lens[j], now, &r);
        limited += r.limited;
    }
    t1 = mono_ns();
    printf("decisions %ld\nkeys %ld\nlimited %ld\nns_per_decision %.1f\n", n, nkeys, limited,
           (double)(t1 - t0) / (double)n);
    limiter_destroy(lim);
    free(keys);
    free(lens);
    return 0;
}

/* One lease decision's state, as commands_lease's request carries it. */
struct bench_lease_req {
    struct conc *c;
    int64_t now, ttl;
    struct conc_result res;
};

/* The decider SL.LEASE gives the wait queue: a local key's cap is its n. */
static int bench_lease_decide(void *ud, const char *key, size_t klen, const struct algo_params *p,
                              const struct policy *pol, int64_t qty, int64_t at_ns,
                              struct algo_result *r)
{
    struct bench_lease_req *q = ud;
    int rc = conc_acquire(q->c, key, klen, 4, qty, q->ttl, NULL, q->now, &q->res);
    (void)p;
    (void)pol;
    (void)at_ns;
    if (rc < 0)
        return rc;
    memset(r, 0, sizeof(*r));
    r->limited = !q->res.granted;
    r->limit = 4;
    r->remaining = 4 - q->res.held;
    r->retry_after_ns = ALGO_NEVER;
    return 0;
}

static void bench_lease_done(void *ud, const struct algo_result *r, int64_t waited_ns)
{
    (void)ud;
    (void)r;
    (void)waited_ns;
}

static int bench_lease(long n, long nkeys)
{
    static const struct algo_params unused;
    struct bench_lease_req q = {.now = 1000000000LL, .ttl = 30000000000LL};
    struct acquire_req req = {.p = &unused, .qty = 1};
    struct acquire_waiter *w;
    struct algo_result a;
    struct limiter *lim;
    struct acquire *acq;
    uv_loop_t loop;
    char(*keys)[24] = calloc((size_t)nkeys, sizeof(*keys));
    size_t *lens = calloc((size_t)nkeys, sizeof(*lens));
    int64_t t0, t1, waited;
    long granted = 0;

    if (keys == NULL || lens == NULL || conc_create(NULL, &q.c) < 0 ||
        limiter_create(&lim, NULL) < 0 || uv_loop_init(&loop) < 0 ||
        acquire_create(&loop, lim, 0, &acq) < 0)
        return 1;
    for (long i = 0; i < nkeys; i++) {
        lens[i] = (size_t)snprintf(keys[i], sizeof(keys[i]), "user:%ld", i);
        conc_acquire(q.c, keys[i], lens[i], 4, 1, q.ttl, NULL, q.now, &q.res);
        conc_acquire(q.c, keys[i], lens[i], 4, 1, q.ttl, NULL, q.now, &q.res);
    }
    t0 = mono_ns();
    for (long i = 0; i < n; i++) {
        long j = i % nkeys;
        q.now += 1000;
        req.key = keys[j];
        req.klen = lens[j];
        if (acquire_submit_woken(acq, &req, bench_lease_decide, &q, q.now, bench_lease_done, NULL,
                                 &a, &waited, &w) != 1)
            return 1;
        granted += q.res.granted;
        if (q.res.granted)
            conc_release(q.c, keys[j], lens[j], q.res.id, NULL, NULL);
    }
    t1 = mono_ns();
    printf("leases %ld\nkeys %ld\ngranted %ld\nns_per_decision %.1f\n", n, nkeys, granted,
           (double)(t1 - t0) / (double)n);
    acquire_close(acq);
    uv_run(&loop, UV_RUN_DEFAULT);
    acquire_destroy(acq);
    uv_loop_close(&loop);
    limiter_destroy(lim);
    conc_destroy(q.c);
    free(keys);
    free(lens);
    return 0;
}

static int nosend(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    (void)ud;
    (void)to;
    (void)buf;
    (void)len;
    return 0;
}

static struct replica *lone_replica(size_t max_keys, int64_t now)
{
    struct replica_config c = {0};
    struct replica *r;
    c.node_name = "bench";
    c.life_id = 1;
    c.young_ns = 0;
    c.max_keys = max_keys;
    c.max_owned = max_keys;
    c.send = nosend;
    return replica_create(&r, &c, now) == 0 ? r : NULL;
}

static int bench_global_keys(long n)
{
    int64_t now = 1000000000LL;
    struct replica *r = lone_replica((size_t)n + 1, now);
    struct algo_params p;
    struct algo_result res;
    struct replica_stats st;
    char k[32];
    long before, after;

    if (r == NULL || algo_params_init(&p, ALGO_GCRA, 15, 30, 60000000000LL, 0) < 0)
        return 1;
    before = rss_bytes();
    for (long i = 0; i < n; i++) {
        int len = snprintf(k, sizeof(k), "user:%ld", i);
        if (replica_throttle(r, k, (size_t)len, &p, POLICY_PARTITION_SHARE, 1, now, &res) < 0)
            return 1;
    }
    /* A whole pass (all its slices): every key reported to its owner (itself). */
    replica_tick(r, now + 100000000LL);
    while (replica_next_deadline(r) <= now + 100000000LL)
        replica_tick(r, now + 100000000LL);
    after = rss_bytes();
    replica_get_stats(r, &st);
    printf("global_keys %llu\nowned_keys %llu\nrss_before %ld\nrss_after %ld\n"
           "bytes_per_global_key %.1f\n",
           (unsigned long long)st.keys, (unsigned long long)st.owned_keys, before, after,
           (double)(after - before) / (double)n);
    replica_destroy(r);
    return st.keys == (uint64_t)n && st.owned_keys == (uint64_t)n ? 0 : 1;
}

static int bench_global_decide(long n, long nkeys)
{
    int64_t now = 1000000000LL, t0, t1;
    struct gcra_cell_reply r;
    char(*keys)[24] = calloc((size_t)nkeys, sizeof(*keys));
    size_t *lens = calloc((size_t)nkeys, sizeof(*lens));
    long limited = 0;
    uv_loop_t loop;
    struct cluster_options o;
    struct cluster *c = NULL;
    struct limiter *lim;
    char err[256];

    /* A lone first node (no seeds): synced at once, every key its own. */
    cluster_options_init(&o);
    o.gossip_bind = "127.0.0.1:0";
    o.insecure = 1;
    o.node_name = "bench";
    if (keys == NULL || lens == NULL || uv_loop_init(&loop) != 0 ||
        cluster_start(&loop, &o, &c, err, sizeof(err)) < 0 || limiter_create(&lim, NULL) < 0)
        return 1;
    struct decide d = {lim, c};
    for (long i = 0; i < nkeys; i++) {
        lens[i] = (size_t)snprintf(keys[i], sizeof(keys[i]), "user:%ld", i);
        entry_throttle(&d, keys[i], lens[i], now, &r);
    }
    t0 = mono_ns();
    for (long i = 0; i < n; i++) {
        long j = i % nkeys;
        now += 1000;
        entry_throttle(&d, keys[j], lens[j], now, &r);
        limited += r.limited;
    }
    t1 = mono_ns();
    printf("decisions %ld\nkeys %ld\nlimited %ld\nns_per_decision %.1f\n", n, nkeys, limited,
           (double)(t1 - t0) / (double)n);
    cluster_stop(c, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cluster_destroy(c);
    uv_loop_close(&loop);
    limiter_destroy(lim);
    free(keys);
    free(lens);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "keys") == 0)
        return bench_keys(atol(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "decide") == 0)
        return bench_decide(atol(argv[2]), argc >= 4 ? atol(argv[3]) : 10000);
    if (argc >= 3 && strcmp(argv[1], "lease") == 0)
        return bench_lease(atol(argv[2]), argc >= 4 ? atol(argv[3]) : 10000);
    if (argc >= 3 && strcmp(argv[1], "global-keys") == 0)
        return bench_global_keys(atol(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "global-decide") == 0)
        return bench_global_decide(atol(argv[2]), argc >= 4 ? atol(argv[3]) : 10000);
    fprintf(stderr,
            "usage: %s keys N | decide N [KEYS] | global-keys N | global-decide N [KEYS] | lease N "
            "[KEYS]\n",
            argv[0]);
    return 2;
}
