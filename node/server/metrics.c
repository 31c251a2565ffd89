/*
 * metrics: the Prometheus exposition and its two routes on the HTTP
 * listener (see metrics.h for the contract).
 *
 * Wire format: the exposition text (version 0.0.4), per family:
 *
 *     # HELP sluice_decisions_total Throttle decisions answered ...\n
 *     # TYPE sluice_decisions_total counter\n
 *     sluice_decisions_total 42\n
 *     sluice_cluster_members{state="alive"} 3\n
 */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"

/* ---- buffer ---- */

void metrics_buf_free(struct metrics_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static void metrics__buf_add(struct metrics_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (d == NULL) {
            b->oom = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void metrics__buf_str(struct metrics_buf *b, const char *s)
{
    metrics__buf_add(b, s, strlen(s));
}

static void metrics__buf_u64(struct metrics_buf *b, uint64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
    if (n > 0)
        metrics__buf_add(b, num, (size_t)n);
}

/* ---- exposition ---- */

enum fam_type { FAM_COUNTER, FAM_GAUGE };

void metrics_snapshot_add(struct metrics_snapshot *s, int cluster, const struct counter_table *t,
                          const void *stats)
{
    struct metrics_section *sec = cluster ? s->cluster : s->sections;
    size_t *n = cluster ? &s->ncluster : &s->nsections;
    if (*n < METRICS_MAX_SECTIONS)
        sec[(*n)++] = (struct metrics_section){t, stats};
}

static void metrics__head(struct metrics_buf *b, const char *name, const char *help,
                          enum fam_type t)
{
    metrics__buf_str(b, "# HELP ");
    metrics__buf_str(b, name);
    metrics__buf_add(b, " ", 1);
    metrics__buf_str(b, help); /* our own text: no backslash or newline to escape */
    metrics__buf_str(b, "\n# TYPE ");
    metrics__buf_str(b, name);
    metrics__buf_str(b, t == FAM_COUNTER ? " counter\n" : " gauge\n");
}

static void metrics__sample(struct metrics_buf *b, const char *name, uint64_t v)
{
    metrics__buf_str(b, name);
    metrics__buf_add(b, " ", 1);
    metrics__buf_u64(b, v);
    metrics__buf_add(b, "\n", 1);
}

/* A label value escaped as the format requires (\\, \", \n). */
static void metrics__label_value(struct metrics_buf *b, const char *v)
{
    for (const char *p = v; *p != '\0'; p++) {
        if (*p == '\\')
            metrics__buf_add(b, "\\\\", 2);
        else if (*p == '"')
            metrics__buf_add(b, "\\\"", 2);
        else if (*p == '\n')
            metrics__buf_add(b, "\\n", 2);
        else
            metrics__buf_add(b, p, 1);
    }
}

static void metrics__labelled(struct metrics_buf *b, const char *name, const char *help,
                              enum fam_type t, const char *label,
                              const struct metrics_label_value *lv, size_t n)
{
    metrics__head(b, name, help, t);
    if (n > METRICS_MAX_LABELS)
        n = METRICS_MAX_LABELS;
    for (size_t i = 0; i < n; i++) {
        metrics__buf_str(b, name);
        metrics__buf_add(b, "{", 1);
        metrics__buf_str(b, label);
        metrics__buf_str(b, "=\"");
        metrics__label_value(b, lv[i].label != NULL ? lv[i].label : "");
        metrics__buf_str(b, "\"} ");
        metrics__buf_u64(b, lv[i].value);
        metrics__buf_add(b, "\n", 1);
    }
}

/* Every row of every section: HELP (with the INFO field that shows the
 * same value), TYPE, one sample. */
static void metrics__sections(struct metrics_buf *b, const struct metrics_section *sec, size_t n)
{
    char name[128];
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sec[i].t->n; k++) {
            const struct counter_row *r = &sec[i].t->rows[k];
            snprintf(name, sizeof(name), "sluice_%s", r->metric);
            metrics__buf_str(b, "# HELP ");
            metrics__buf_str(b, name);
            metrics__buf_add(b, " ", 1);
            metrics__buf_str(b, r->help);
            metrics__buf_str(b, " (INFO ");
            metrics__buf_str(b, r->info);
            metrics__buf_str(b, ")\n# TYPE ");
            metrics__buf_str(b, name);
            metrics__buf_str(b, r->kind == COUNTER_TOTAL ? " counter\n" : " gauge\n");
            metrics__sample(b, name, counter_value(r, sec[i].stats));
        }
    }
}

const int64_t metrics_latency_bounds_ns[METRICS_LATENCY_BUCKETS] = {
    1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 5000000,
};

static void metrics__policies(struct metrics_buf *b, const struct metrics_snapshot *s)
{
    static const char *const names[2] = {"sluice_policy_decisions_total",
                                         "sluice_policy_limited_total"};
    static const char *const helps[2] = {
        "Decisions under each named policy (local and global keys; the first 32 policies, "
        "the rest as _other).",
        "Refusals under each named policy."};
    size_t n = s->npolicy < METRICS_MAX_POLICIES + 1 ? s->npolicy : METRICS_MAX_POLICIES + 1;
    for (int k = 0; k < 2; k++) {
        metrics__head(b, names[k], helps[k], FAM_COUNTER);
        for (size_t i = 0; i < n; i++) {
            metrics__buf_str(b, names[k]);
            metrics__buf_str(b, "{policy=\"");
            metrics__label_value(b, s->by_policy[i].policy != NULL ? s->by_policy[i].policy : "");
            metrics__buf_str(b, "\"} ");
            metrics__buf_u64(b, k == 0 ? s->by_policy[i].decisions : s->by_policy[i].limited);
            metrics__buf_add(b, "\n", 1);
        }
    }
}

static void metrics__rls_keys(struct metrics_buf *b, const struct metrics_snapshot *s)
{
    static const char *const names[4] = {
        "sluice_rls_descriptor_hits_total", "sluice_rls_descriptor_over_limit_total",
        "sluice_rls_descriptor_within_limit_total", "sluice_rls_descriptor_shadow_mode_total"};
    static const char *const helps[4] = {
        "Hits counted under each rate limit service limit (its config key; with "
        "detailed_metric, each request descriptor's; the first 256 keys, the rest as _other).",
        "Hits over the limit, refused.", "Hits within the limit.",
        "Hits over the limit let through by shadow_mode."};
    if (s->nrls_keys == 0)
        return;
    for (int k = 0; k < 4; k++) {
        metrics__head(b, names[k], helps[k], FAM_COUNTER);
        for (size_t i = 0; i < s->nrls_keys; i++) {
            const struct metrics_keyed *x = &s->rls_keys[i];
            uint64_t v = k == 0   ? x->hits
                         : k == 1 ? x->over_limit
                         : k == 2 ? x->within_limit
                                  : x->shadow_mode;
            metrics__buf_str(b, names[k]);
            metrics__buf_str(b, "{key=\"");
            metrics__label_value(b, x->key != NULL ? x->key : "");
            metrics__buf_str(b, "\"} ");
            metrics__buf_u64(b, v);
            metrics__buf_add(b, "\n", 1);
        }
    }
}

static void metrics__histogram(struct metrics_buf *b, const char *name, const char *help,
                               const struct metrics_histogram *h)
{
    char line[160];
    uint64_t cum = 0;
    metrics__buf_str(b, "# HELP ");
    metrics__buf_str(b, name);
    metrics__buf_add(b, " ", 1);
    metrics__buf_str(b, help);
    metrics__buf_str(b, "\n# TYPE ");
    metrics__buf_str(b, name);
    metrics__buf_str(b, " histogram\n");
    for (int i = 0; i <= METRICS_LATENCY_BUCKETS; i++) {
        cum += h->buckets[i];
        if (i < METRICS_LATENCY_BUCKETS)
            snprintf(line, sizeof(line), "%s_bucket{le=\"%g\"} ", name,
                     (double)metrics_latency_bounds_ns[i] / 1e9);
        else
            snprintf(line, sizeof(line), "%s_bucket{le=\"+Inf\"} ", name);
        metrics__buf_str(b, line);
        metrics__buf_u64(b, cum);
        metrics__buf_add(b, "\n", 1);
    }
    snprintf(line, sizeof(line), "%s_sum %.9f\n", name, (double)h->sum_ns / 1e9);
    metrics__buf_str(b, line);
    metrics__buf_str(b, name);
    metrics__buf_str(b, "_count ");
    metrics__buf_u64(b, h->count);
    metrics__buf_add(b, "\n", 1);
}

int metrics_render(const struct metrics_snapshot *s, struct metrics_buf *out)
{
    metrics__sections(out, s->sections, s->nsections);
    metrics__head(
        out, "sluice_ready",
        "1 when this node is ready (GET /ready answers 200; INFO cluster_state:ok), 0 when it "
        "is alone, partitioned from a majority, refused by its peers or not synced.",
        FAM_GAUGE);
    metrics__sample(out, "sluice_ready", s->ready ? 1 : 0);
    metrics__policies(out, s);
    metrics__rls_keys(out, s);
    metrics__histogram(
        out, "sluice_loop_turn_seconds",
        "Work of each event loop turn (timers, I/O callbacks, the replication's slices), "
        "waiting for I/O left out: a long turn delays every answer behind it.",
        &s->loop_turns);
    metrics__histogram(
        out, "sluice_decision_duration_seconds",
        "Time to decide one command (CL.THROTTLE, SL.*), in the event loop; one command "
        "in 16 is timed.",
        &s->latency);
    if (s->clustered) {
        metrics__labelled(out, "sluice_cluster_members", "Cluster members known, by state.",
                          FAM_GAUGE, "state", s->members, s->nmembers);
        metrics__labelled(out, "sluice_gossip_drops_total",
                          "Gossip packets dropped, by reason (INFO gossip_drops_REASON).",
                          FAM_COUNTER, "reason", s->drops, s->ndrops);
        metrics__sections(out, s->cluster, s->ncluster);
        metrics__head(out, "sluice_synced",
                      "1 once this node has recovered the cluster's state for global keys.",
                      FAM_GAUGE);
        metrics__sample(out, "sluice_synced", s->synced ? 1 : 0);
    }
    return out->oom ? -SLUICE_ENOMEM : 0;
}

/* ---- the routes ---- */

struct metrics {
    metrics_collect_fn collect;
    void *ud;
    uint64_t scrapes;
};

static void metrics__on_metrics(void *ud, const struct http_request *req, struct http_reply *rep)
{
    struct metrics *m = ud;
    struct metrics_snapshot s;
    struct metrics_buf b = {0};
    (void)req;
    memset(&s, 0, sizeof(s));
    m->collect(m->ud, &s);
    if (metrics_render(&s, &b) < 0) {
        metrics_buf_free(&b);
        rep->oom = 1;
        return;
    }
    m->scrapes++;
    rep->content_type = "text/plain; version=0.0.4; charset=utf-8";
    http_reply_body(rep, b.data, b.len);
    metrics_buf_free(&b);
}

static void metrics__on_health(void *ud, const struct http_request *req, struct http_reply *rep)
{
    (void)ud;
    (void)req;
    http_reply_text(rep, 200, "ok\n");
}

int metrics_attach(struct http_server *h, metrics_collect_fn collect, void *ud,
                   struct metrics **out)
{
    if (h == NULL || collect == NULL || out == NULL)
        return -SLUICE_EINVAL;
    struct metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -SLUICE_ENOMEM;
    m->collect = collect;
    m->ud = ud;
    int rc = http_route(h, "/metrics", metrics__on_metrics, m);
    if (rc == 0)
        rc = http_route(h, "/health", metrics__on_health, m);
    if (rc < 0) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

uint64_t metrics_scrapes(const struct metrics *m)
{
    return m != NULL ? m->scrapes : 0;
}

void metrics_destroy(struct metrics *m)
{
    free(m);
}
