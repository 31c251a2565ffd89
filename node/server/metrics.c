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

static void buf_add(struct metrics_buf *b, const char *s, size_t n)
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

static void buf_str(struct metrics_buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

static void buf_u64(struct metrics_buf *b, uint64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
    if (n > 0)
        buf_add(b, num, (size_t)n);
}

/* ---- exposition ---- */

enum fam_type { FAM_COUNTER, FAM_GAUGE };

struct family {
    const char *name;
    const char *help;
    enum fam_type type;
    size_t off; /* offset of a uint64_t in struct metrics_snapshot */
};

#define F(name, help, type, field)                                                                 \
    {                                                                                              \
        "sluice_" name, help, type, offsetof(struct metrics_snapshot, field)                       \
    }

/* The daemon's families, in exposition order. */
static const struct family families[] = {
    F("decisions_total", "Rate-limit decisions answered on local keys.", FAM_COUNTER, decisions),
    F("limited_total", "Decisions on local keys that refused the request.", FAM_COUNTER, limited),
    F("keys", "Keys held in memory.", FAM_GAUGE, keys),
    F("keys_reclaimed_total", "Drained keys freed.", FAM_COUNTER, reclaimed),
    F("keys_evicted_total", "Still-limiting keys evicted because the table was full.", FAM_COUNTER,
      evicted),
    F("overflow_denied_total", "Requests refused because the key table was full (on_full deny).",
      FAM_COUNTER, overflow_denied),
    F("overflow_allowed_total",
      "Requests allowed without state because the key table was full (on_full allow).", FAM_COUNTER,
      overflow_allowed),
    F("dry_run_would_limit_total", "Refusals by dry-run policies, answered as allowed.",
      FAM_COUNTER, dry_run_would_limit),
    F("connected_clients", "Client connections open on the socket.", FAM_GAUGE, connected_clients),
    F("connections_total", "Client connections accepted, refused ones included.", FAM_COUNTER,
      connections),
    F("rejected_connections_total", "Client connections refused over max_clients.", FAM_COUNTER,
      rejected_connections),
    F("commands_total", "Commands executed.", FAM_COUNTER, commands),
    F("protocol_errors_total", "Connections closed for malformed or oversized requests.",
      FAM_COUNTER, protocol_errors),
    F("output_limit_disconnects_total",
      "Clients disconnected for not reading their replies (output hard limit).", FAM_COUNTER,
      output_limit_disconnects),
    F("client_memory_bytes", "Bytes held by client connections' buffers.", FAM_GAUGE,
      client_memory),
    F("client_memory_disconnects_total",
      "Clients disconnected, heaviest first, because client memory was over "
      "max_client_memory.",
      FAM_COUNTER, client_memory_disconnects),
    F("memory_trims_total",
      "Times freed client memory was returned to the system (malloc_trim, on the event loop, "
      "at most 0.1% of its time).",
      FAM_COUNTER, memory_trims),
    F("memory_trim_milliseconds_total", "The time those returns held the event loop.", FAM_COUNTER,
      memory_trim_ms),
    F("tcp_clients", "RESP clients connected over TCP (--listen).", FAM_GAUGE, tcp_clients),
    F("tcp_evictions_total",
      "TCP clients closed for a newcomer over --max-tcp-clients (unauthenticated first, then "
      "the longest idle).",
      FAM_COUNTER, tcp_evictions),
    F("tcp_timeouts_total",
      "TCP clients closed without AUTH in 10 s or idle past "
      "--tcp-idle-timeout.",
      FAM_COUNTER, tcp_timeouts),
    F("http_connections", "Connections open on the HTTP listener.", FAM_GAUGE, http_connections),
    F("http_evictions_total",
      "HTTP connections closed for a newcomer over --http-max-connections (the longest "
      "stalled first).",
      FAM_COUNTER, http_evictions),
    F("http_timeouts_total", "HTTP connections closed past --http-idle-timeout.", FAM_COUNTER,
      http_timeouts),
    F("http_memory_disconnects_total",
      "HTTP connections closed, heaviest first, over max_client_memory.", FAM_COUNTER,
      http_memory_disconnects),
    F("policies", "Named policies loaded.", FAM_GAUGE, policies),
    F("reloads_total", "Successful configuration reloads.", FAM_COUNTER, reloads),
    F("reload_failures_total", "Reloads refused (the running policies were kept).", FAM_COUNTER,
      reload_failures),
    F("rls_calls_total", "ShouldRateLimit calls answered (Envoy's rate limit service).",
      FAM_COUNTER, rls_calls),
    F("rls_over_limit_total", "ShouldRateLimit answers with overall_code OVER_LIMIT.", FAM_COUNTER,
      rls_over_limit),
    F("rls_shadow_mode_total", "Descriptors over their limit answered OK by shadow_mode.",
      FAM_COUNTER, rls_shadowed),
    F("rls_errors_total", "gRPC calls answered with an error status.", FAM_COUNTER, rls_errors),
    F("rls_connections", "HTTP/2 connections open on the gRPC listener.", FAM_GAUGE, rls_connected),
    F("rls_protocol_errors_total", "gRPC connections ended with GOAWAY for malformed HTTP/2.",
      FAM_COUNTER, rls_protocol_errors),
    F("rls_evictions_total",
      "gRPC connections closed for a newcomer over --grpc-max-connections (silent ones first, "
      "then the longest idle).",
      FAM_COUNTER, rls_evictions),
    F("rls_timeouts_total",
      "gRPC connections closed silent 10 s after connecting or idle past --grpc-idle-timeout.",
      FAM_COUNTER, rls_timeouts),
    F("rls_memory_disconnects_total",
      "gRPC connections closed, heaviest first, over max_client_memory (HTTP/2 streams "
      "included).",
      FAM_COUNTER, rls_memory_disconnects),
    F("rls_reloads_total", "Rate limit YAML directory reloads.", FAM_COUNTER, rls_reloads),
    F("rls_reload_failures_total", "Rate limit YAML reloads refused (the running config kept).",
      FAM_COUNTER, rls_reload_failures),
    F("waiting_acquires", "SL.ACQUIRE requests waiting now.", FAM_GAUGE, waiting_acquires),
    F("lease_keys", "Keys with concurrency leases held on this node.", FAM_GAUGE, leases.keys),
    F("leases", "Concurrency leases alive on this node.", FAM_GAUGE, leases.leases),
    F("leases_held", "Units held by concurrency leases on this node.", FAM_GAUGE, leases.held),
    F("leases_waiting", "SL.LEASE requests waiting for a unit.", FAM_GAUGE, leases.waiting),
    F("leases_granted_total", "Concurrency leases granted.", FAM_COUNTER, leases.granted),
    F("leases_refused_total", "SL.LEASE requests answered limited.", FAM_COUNTER, leases.refused),
    F("leases_released_total", "Leases ended by SL.RELEASE or DELETE /v1/lease.", FAM_COUNTER,
      leases.released),
    F("leases_expired_total", "Leases ended by their TTL.", FAM_COUNTER, leases.expired),
    F("leases_released_by_disconnect_total",
      "Leases ended because the connection that took them closed.", FAM_COUNTER, leases.disconnect),
};

/* Cluster families without labels, after the labelled member gauge. */
static const struct family cluster_families[] = {
    F("gossip_packets_sent_total", "Gossip packets sent.", FAM_COUNTER, gossip_packets_sent),
    F("gossip_packets_received_total", "Gossip packets received.", FAM_COUNTER,
      gossip_packets_received),
    F("gossip_bytes_sent_total", "Gossip bytes sent.", FAM_COUNTER, gossip_bytes_sent),
    F("gossip_bytes_received_total", "Gossip bytes received.", FAM_COUNTER, gossip_bytes_received),
};

static const struct family replica_families[] = {
    F("global_decisions_total", "Rate-limit decisions answered on global keys.", FAM_COUNTER,
      global_decisions),
    F("global_limited_total", "Decisions on global keys that refused the request.", FAM_COUNTER,
      global_limited),
    F("global_keys", "Global keys this node serves.", FAM_GAUGE, global_keys),
    F("owned_keys", "Global keys this node aggregates as their owner.", FAM_GAUGE, owned_keys),
    F("reports_sent_total", "Key reports sent to owners.", FAM_COUNTER, reports_sent),
    F("leases_sent_total", "Key leases sent by this node as owner.", FAM_COUNTER, leases_sent),
    F("replication_bytes_sent_total", "Bytes of reports and leases sent.", FAM_COUNTER,
      replication_bytes_sent),
};

#undef F

static void head(struct metrics_buf *b, const char *name, const char *help, enum fam_type t)
{
    buf_str(b, "# HELP ");
    buf_str(b, name);
    buf_add(b, " ", 1);
    buf_str(b, help); /* our own text: no backslash or newline to escape */
    buf_str(b, "\n# TYPE ");
    buf_str(b, name);
    buf_str(b, t == FAM_COUNTER ? " counter\n" : " gauge\n");
}

static void sample(struct metrics_buf *b, const char *name, uint64_t v)
{
    buf_str(b, name);
    buf_add(b, " ", 1);
    buf_u64(b, v);
    buf_add(b, "\n", 1);
}

/* A label value escaped as the format requires (\\, \", \n). */
static void label_value(struct metrics_buf *b, const char *v)
{
    for (const char *p = v; *p != '\0'; p++) {
        if (*p == '\\')
            buf_add(b, "\\\\", 2);
        else if (*p == '"')
            buf_add(b, "\\\"", 2);
        else if (*p == '\n')
            buf_add(b, "\\n", 2);
        else
            buf_add(b, p, 1);
    }
}

static void labelled(struct metrics_buf *b, const char *name, const char *help, enum fam_type t,
                     const char *label, const struct metrics_label_value *lv, size_t n)
{
    head(b, name, help, t);
    if (n > METRICS_MAX_LABELS)
        n = METRICS_MAX_LABELS;
    for (size_t i = 0; i < n; i++) {
        buf_str(b, name);
        buf_add(b, "{", 1);
        buf_str(b, label);
        buf_str(b, "=\"");
        label_value(b, lv[i].label != NULL ? lv[i].label : "");
        buf_str(b, "\"} ");
        buf_u64(b, lv[i].value);
        buf_add(b, "\n", 1);
    }
}

static void table(struct metrics_buf *b, const struct metrics_snapshot *s, const struct family *f,
                  size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)s + f[i].off, sizeof(v));
        head(b, f[i].name, f[i].help, f[i].type);
        sample(b, f[i].name, v);
    }
}

const int64_t metrics_latency_bounds_ns[METRICS_LATENCY_BUCKETS] = {
    1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 5000000,
};

static void policies(struct metrics_buf *b, const struct metrics_snapshot *s)
{
    static const char *const names[2] = {"sluice_policy_decisions_total",
                                         "sluice_policy_limited_total"};
    static const char *const helps[2] = {
        "Decisions under each named policy (local and global keys; the first 32 policies, "
        "the rest as _other).",
        "Refusals under each named policy."};
    size_t n = s->npolicy < METRICS_MAX_POLICIES + 1 ? s->npolicy : METRICS_MAX_POLICIES + 1;
    for (int k = 0; k < 2; k++) {
        head(b, names[k], helps[k], FAM_COUNTER);
        for (size_t i = 0; i < n; i++) {
            buf_str(b, names[k]);
            buf_str(b, "{policy=\"");
            label_value(b, s->by_policy[i].policy != NULL ? s->by_policy[i].policy : "");
            buf_str(b, "\"} ");
            buf_u64(b, k == 0 ? s->by_policy[i].decisions : s->by_policy[i].limited);
            buf_add(b, "\n", 1);
        }
    }
}

static void histogram(struct metrics_buf *b, const char *name, const char *help,
                      const struct metrics_histogram *h)
{
    char line[160];
    uint64_t cum = 0;
    buf_str(b, "# HELP ");
    buf_str(b, name);
    buf_add(b, " ", 1);
    buf_str(b, help);
    buf_str(b, "\n# TYPE ");
    buf_str(b, name);
    buf_str(b, " histogram\n");
    for (int i = 0; i <= METRICS_LATENCY_BUCKETS; i++) {
        cum += h->buckets[i];
        if (i < METRICS_LATENCY_BUCKETS)
            snprintf(line, sizeof(line), "%s_bucket{le=\"%g\"} ", name,
                     (double)metrics_latency_bounds_ns[i] / 1e9);
        else
            snprintf(line, sizeof(line), "%s_bucket{le=\"+Inf\"} ", name);
        buf_str(b, line);
        buf_u64(b, cum);
        buf_add(b, "\n", 1);
    }
    snprintf(line, sizeof(line), "%s_sum %.9f\n", name, (double)h->sum_ns / 1e9);
    buf_str(b, line);
    buf_str(b, name);
    buf_str(b, "_count ");
    buf_u64(b, h->count);
    buf_add(b, "\n", 1);
}

int metrics_render(const struct metrics_snapshot *s, struct metrics_buf *out)
{
    table(out, s, families, sizeof(families) / sizeof(families[0]));
    head(out, "sluice_ready",
         "1 when this node is ready (GET /ready answers 200; INFO cluster_state:ok), 0 when it "
         "is alone, partitioned from a majority, refused by its peers or not synced.",
         FAM_GAUGE);
    sample(out, "sluice_ready", s->ready ? 1 : 0);
    policies(out, s);
    histogram(out, "sluice_loop_turn_seconds",
              "Work of each event loop turn (timers, I/O callbacks, the replication's slices), "
              "waiting for I/O left out: a long turn delays every answer behind it.",
              &s->loop_turns);
    histogram(out, "sluice_decision_duration_seconds",
              "Time to decide one command (CL.THROTTLE, SL.*), in the event loop; one command "
              "in 16 is timed.",
              &s->latency);
    if (s->clustered) {
        labelled(out, "sluice_cluster_members", "Cluster members known, by state.", FAM_GAUGE,
                 "state", s->members, s->nmembers);
        table(out, s, cluster_families, sizeof(cluster_families) / sizeof(cluster_families[0]));
        labelled(out, "sluice_gossip_drops_total", "Gossip packets dropped, by reason.",
                 FAM_COUNTER, "reason", s->drops, s->ndrops);
        table(out, s, replica_families, sizeof(replica_families) / sizeof(replica_families[0]));
        head(out, "sluice_synced",
             "1 once this node has recovered the cluster's state for global keys.", FAM_GAUGE);
        sample(out, "sluice_synced", s->synced ? 1 : 0);
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
