/*
 * metrics: the Prometheus endpoint, two routes on the daemon's HTTP
 * listener (http.h).
 *
 *   GET  /metrics   200, text exposition format 0.0.4
 *   GET  /health    200 "ok"
 *
 * Layers.  metrics.c knows nothing of the limiter, the server or gossip: on
 * each scrape it calls the daemon's collect callback, which fills a plain
 * struct metrics_snapshot, and renders that.  So the exposition text (names,
 * help, types) lives in one place and is tested byte for byte without a
 * daemon.
 *
 * Everything runs on the loop thread.  Functions return 0 or a negative
 * enum sluice_err.
 */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"

/* Labelled series per family in a snapshot (member states, drop reasons). */
#define METRICS_MAX_LABELS 16

/* Per-policy series: the first METRICS_MAX_POLICIES policies in file
 * order; the rest are summed under policy="_other" (bounded cardinality). */
#define METRICS_MAX_POLICIES 32
/* Decision latency histogram bounds, ns (a last bucket is +Inf). */
#define METRICS_LATENCY_BUCKETS 11
extern const int64_t metrics_latency_bounds_ns[METRICS_LATENCY_BUCKETS];

/* ---- what the daemon reports ---- */

struct metrics_policy_value {
    const char *policy; /* owned by the collector until render ends */
    uint64_t decisions, limited;
};

/* A histogram: counts per bucket (not cumulative; the last is +Inf), the
 * number of observations and their sum in ns. */
struct metrics_histogram {
    uint64_t buckets[METRICS_LATENCY_BUCKETS + 1];
    uint64_t count, sum_ns;
};

struct metrics_label_value {
    const char *label; /* static or owned by the collector until render ends */
    uint64_t value;
};

struct metrics_snapshot {
    /* limiter */
    uint64_t decisions, limited, keys, reclaimed, evicted;
    uint64_t overflow_denied, overflow_allowed, dry_run_would_limit;
    /* RESP server */
    uint64_t connected_clients, connections, rejected_connections, commands;
    uint64_t protocol_errors, output_limit_disconnects;
    uint64_t client_memory, client_memory_disconnects;
    uint64_t memory_trims, memory_trim_ms; /* malloc_trim calls and their time */
    /* the network listeners' crowds: TCP RESP, HTTP, gRPC (zero when off) */
    uint64_t tcp_clients, tcp_evictions, tcp_timeouts;
    uint64_t http_connections, http_evictions, http_timeouts, http_memory_disconnects;
    uint64_t rls_evictions, rls_timeouts, rls_memory_disconnects;
    /* policies and the waiting acquire */
    uint64_t policies, reloads, reload_failures, waiting_acquires;
    /* concurrency leases (commands_lease.h's counters, by the same names) */
    struct {
        uint64_t keys, leases, held, waiting, granted, refused, released, expired, disconnect;
    } leases;
    /* Envoy's rate limit service (zero when off) */
    uint64_t rls_calls, rls_over_limit, rls_shadowed, rls_errors;
    uint64_t rls_connected, rls_protocol_errors, rls_reloads, rls_reload_failures;
    /* decisions by policy (local and global) and their latency */
    struct metrics_policy_value by_policy[METRICS_MAX_POLICIES + 1];
    size_t npolicy;
    struct metrics_histogram latency;
    struct metrics_histogram loop_turns; /* the event loop's turns' work (loopstat.h) */
    int ready;                           /* 1 when /ready says ready (always rendered) */
    /* cluster: only rendered when clustered is nonzero */
    int clustered;
    struct metrics_label_value members[METRICS_MAX_LABELS]; /* by state */
    size_t nmembers;
    uint64_t gossip_packets_sent, gossip_packets_received;
    uint64_t gossip_bytes_sent, gossip_bytes_received;
    struct metrics_label_value drops[METRICS_MAX_LABELS]; /* by reason */
    size_t ndrops;
    uint64_t global_decisions, global_limited;
    uint64_t global_keys, owned_keys, reports_sent, leases_sent, replication_bytes_sent;
    int synced; /* 0 or 1 */
};

/* Fills *out (zeroed by the caller) with the counters now.  Must not fail. */
typedef void (*metrics_collect_fn)(void *ud, struct metrics_snapshot *out);

/* ---- the exposition writer (pure; exposed for tests) ---- */

/* A growable text buffer; zero-initialise it.  oom is set (and further
 * appends ignored) when an allocation fails.  The caller frees data. */
struct metrics_buf {
    char *data;
    size_t len, cap;
    int oom;
};

void metrics_buf_free(struct metrics_buf *b);

/*
 * Appends the whole exposition of s to out: for every family a "# HELP" and
 * a "# TYPE" line, then its samples, each "name{label=\"v\"} value\n".
 * Cluster families appear only when s->clustered.  Fails with
 * -SLUICE_ENOMEM (out->oom set; out holds a prefix).
 */
int metrics_render(const struct metrics_snapshot *s, struct metrics_buf *out);

/* ---- the routes ---- */

struct metrics;

/*
 * Routes /metrics and /health on h to a new metrics object that calls
 * collect(ud) on each scrape.  Fails with -SLUICE_EINVAL, -SLUICE_ENOMEM or
 * http_route's errors.  The caller owns *out: metrics_destroy it after
 * http_destroy (the routes point at it until then).
 */
int metrics_attach(struct http_server *h, metrics_collect_fn collect, void *ud,
                   struct metrics **out);
/* 200 answers to /metrics so far. */
uint64_t metrics_scrapes(const struct metrics *m);
/* Frees m; NULL is fine. */
void metrics_destroy(struct metrics *m);

#endif
