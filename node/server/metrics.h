/*
 * metrics: the Prometheus endpoint, a tiny HTTP/1.1 server on the daemon's
 * libuv loop.
 *
 *   GET  /metrics   200, text exposition format 0.0.4
 *   GET  /health    200 "ok"
 *   HEAD            the same headers, no body
 *   other paths     404;   other methods  405 (with Allow: GET, HEAD)
 *   bad request     400;   headers over the bound  431;   both then close
 *
 * Layers.  metrics.c knows nothing of the limiter, the server or gossip: on
 * each scrape it calls the daemon's collect callback, which fills a plain
 * struct metrics_snapshot, and renders that.  So the exposition text (names,
 * help, types) lives in one place and is tested byte for byte without a
 * daemon.
 *
 * Bounds.  A request's head (request line and headers) must fit in
 * METRICS_MAX_REQUEST bytes; at most max_conns connections are open (more
 * are accepted and closed at once); a connection that has not completed a
 * request and received its answer within idle_timeout_ms is closed (the
 * timer is not restarted by partial reads, so a client trickling bytes
 * cannot hold a slot).  Answers are written without blocking; while one is
 * in flight the connection's reads are paused.  Keep-alive is honoured
 * (HTTP/1.1 default, "Connection: close" or HTTP/1.0 close after the
 * answer); a request with a body is answered and the connection closed.
 *
 * Everything runs on the loop thread.  Functions return 0 or a negative
 * enum sluice_err.
 */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Largest request head accepted (request line + headers + blank line). */
#define METRICS_MAX_REQUEST       8192
#define METRICS_DEFAULT_MAX_CONNS 64
#define METRICS_DEFAULT_IDLE_MS   10000
/* Labelled series per family in a snapshot (member states, drop reasons). */
#define METRICS_MAX_LABELS 16

/* ---- what the daemon reports ---- */

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
    /* policies and the waiting acquire */
    uint64_t policies, reloads, reload_failures, waiting_acquires;
    /* Envoy's rate limit service (zero when off) */
    uint64_t rls_calls, rls_over_limit, rls_shadowed, rls_errors;
    uint64_t rls_connected, rls_protocol_errors, rls_reloads, rls_reload_failures;
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

/* ---- the request parser (pure; exposed for tests) ---- */

enum metrics_method { METRICS_GET = 0, METRICS_HEAD = 1, METRICS_OTHER = 2 };

struct metrics_request {
    enum metrics_method method;
    const char *path; /* into the input buffer, query string excluded */
    size_t path_len;
    int keep_alive; /* 1: the client may send another request */
    int has_body;   /* 1: Content-Length > 0 or Transfer-Encoding given */
};

/*
 * Parses one request head from buf[0..len).  Returns the number of bytes
 * the head takes (> 0, the request is in *out, whose path points into buf),
 * 0 when more bytes are needed (then len < max), -SLUICE_EPROTO for a
 * malformed request (answer 400), or -SLUICE_ETOOBIG when no complete head
 * fits in max bytes (answer 431).  Bare LF line ends are accepted.
 * Never reads past buf[len).
 */
int metrics_parse_request(const char *buf, size_t len, size_t max, struct metrics_request *out);

/* ---- the endpoint ---- */

struct metrics_config {
    const char *bind;         /* "HOST:PORT", "[V6]:PORT"; required; copied */
    size_t max_conns;         /* 0 = METRICS_DEFAULT_MAX_CONNS */
    uint64_t idle_timeout_ms; /* 0 = METRICS_DEFAULT_IDLE_MS */
};

struct metrics;

/* Creates the endpoint (nothing bound yet).  collect is required.  Fails
 * with -SLUICE_EINVAL (no bind address or collect) or -SLUICE_ENOMEM. */
int metrics_create(uv_loop_t *loop, const struct metrics_config *cfg, metrics_collect_fn collect,
                   void *ud, struct metrics **out);

/* Resolves the address and listens.  Fails with -SLUICE_EINVAL (an address
 * that does not parse or resolve) or -SLUICE_EIO (bind/listen failed);
 * metrics_error() then says why in words.  After a failure call
 * metrics_close as usual. */
int metrics_start(struct metrics *m);
const char *metrics_error(const struct metrics *m);
/* The port actually bound (useful with port 0), or 0 before a start. */
int metrics_port(const struct metrics *m);

/* Closes the listener and every connection (idempotent).  Once the loop
 * has run the close callbacks, metrics_destroy frees the endpoint. */
void metrics_close(struct metrics *m);
/* Frees m (NULL is fine); only after metrics_close and a loop run. */
void metrics_destroy(struct metrics *m);

struct metrics_stats {
    uint64_t scrapes;  /* 200 answers to /metrics */
    uint64_t requests; /* every answered request, errors included */
    uint64_t bad_requests, too_big, timeouts, refused;
    uint64_t open_conns;
};
void metrics_get_stats(const struct metrics *m, struct metrics_stats *out);

#endif
