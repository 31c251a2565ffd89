/*
 * metrics: the Prometheus endpoint, two routes on the daemon's HTTP
 * listener (http.h).
 *
 *   GET  /metrics   200, text exposition format 0.0.4
 *   GET  /health    200 "ok"
 *
 * Layers.  metrics.c knows nothing of the limiter, the server or gossip: on
 * each scrape it calls the daemon's collect callback, which fills a plain
 * struct metrics_snapshot with each module's counter table and stats
 * (base/counter.h, the same tables INFO renders) and a few labelled and
 * histogram series, and renders that.  So the exposition is tested byte for
 * byte without a daemon.
 *
 * Everything runs on the loop thread.  Functions return 0 or a negative
 * enum sluice_err.
 */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "counter.h"
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

/* One descriptor's series of Envoy's rate limit service (rls/service.h). */
struct metrics_keyed {
    const char *key; /* borrowed until render ends */
    uint64_t hits, over_limit, within_limit, shadow_mode;
};

struct metrics_label_value {
    const char *label; /* static or owned by the collector until render ends */
    uint64_t value;
};

/* One module's counters in a scrape: its table and its stats struct
 * (borrowed from the collector until render ends). */
struct metrics_section {
    const struct counter_table *t;
    const void *stats;
};
#define METRICS_MAX_SECTIONS 16

struct metrics_snapshot {
    /* every module's counter table (base/counter.h), in exposition order */
    struct metrics_section sections[METRICS_MAX_SECTIONS];
    size_t nsections;
    /* decisions by policy (local and global) and their latency */
    struct metrics_policy_value by_policy[METRICS_MAX_POLICIES + 1];
    size_t npolicy;
    struct metrics_histogram latency;
    struct metrics_histogram loop_turns; /* the event loop's turns' work (loopstat.h) */
    int ready;                           /* 1 when /ready says ready (always rendered) */
    /* the rate limit service's descriptors (rendered when there are any) */
    const struct metrics_keyed *rls_keys; /* borrowed until render ends */
    size_t nrls_keys;
    /* cluster: only rendered when clustered is nonzero */
    int clustered;
    struct metrics_label_value members[METRICS_MAX_LABELS]; /* by state */
    size_t nmembers;
    struct metrics_label_value drops[METRICS_MAX_LABELS]; /* by reason */
    size_t ndrops;
    struct metrics_section cluster[METRICS_MAX_SECTIONS]; /* gossip, slots, replica */
    size_t ncluster;
    int synced; /* 0 or 1 */
};

/* Adds a section to s (cluster: to the families rendered only when
 * clustered).  Beyond METRICS_MAX_SECTIONS a section is left out. */
void metrics_snapshot_add(struct metrics_snapshot *s, int cluster, const struct counter_table *t,
                          const void *stats);

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
 * A counter table's family is "sluice_" + its row's metric, and its help
 * ends with "(INFO field)", the INFO line that shows the same value.
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
