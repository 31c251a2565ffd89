/*
 * metrics: the Prometheus endpoint (see metrics.h for the contract).
 *
 * Design note.  A scrape is rare (every few seconds) and small (a few KiB),
 * so the server is deliberately plain: one fixed input buffer per
 * connection, the whole answer built in one allocation and written with
 * uv_try_write, the remainder (if the socket is full) queued with one
 * uv_write while reads are paused.  Nothing here can block the loop, and
 * every resource a client can hold is bounded: connections (max_conns),
 * input (METRICS_MAX_REQUEST), output (one answer), time (idle_timeout_ms
 * per request, not per byte).
 *
 * Closing after an error uses a lingering close, as web servers do: the
 * write side is shut down once the answer is out, and input is read and
 * discarded until the client closes (or the timer fires).  Closing at once
 * with unread input would make the kernel send a reset, which can destroy
 * the answer before the client reads it.
 *
 * Wire format (HTTP/1.1, RFC 9112; only what a scraper sends is needed):
 *
 *   request                           response
 *   +--------------------------+      +-----------------------------------+
 *   | GET /metrics HTTP/1.1 CRLF|     | HTTP/1.1 200 OK CRLF              |
 *   | Host: h:9464 CRLF         |     | Content-Type: text/plain;         |
 *   | Accept: text/plain CRLF   |     |   version=0.0.4; charset=utf-8    |
 *   | ...  (<= 8 KiB in all)    |     | Content-Length: N CRLF            |
 *   | CRLF                      |     | Connection: keep-alive|close CRLF |
 *   +--------------------------+      | CRLF                              |
 *                                     | N bytes of exposition text        |
 *                                     +-----------------------------------+
 *
 *   exposition text (version 0.0.4), per family:
 *     # HELP sluice_decisions_total Throttle decisions answered ...\n
 *     # TYPE sluice_decisions_total counter\n
 *     sluice_decisions_total 42\n
 *     sluice_cluster_members{state="alive"} 3\n
 */
#include "metrics.h"

#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

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
    F("rls_reloads_total", "Rate limit YAML directory reloads.", FAM_COUNTER, rls_reloads),
    F("rls_reload_failures_total", "Rate limit YAML reloads refused (the running config kept).",
      FAM_COUNTER, rls_reload_failures),
    F("waiting_acquires", "SL.ACQUIRE requests waiting now.", FAM_GAUGE, waiting_acquires),
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

int metrics_render(const struct metrics_snapshot *s, struct metrics_buf *out)
{
    table(out, s, families, sizeof(families) / sizeof(families[0]));
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

/* ---- request parser ---- */

/* RFC 9110 tchar. */
static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Case-insensitive: does the comma-separated list v[0..n) hold token tok? */
static int list_has(const char *v, size_t n, const char *tok)
{
    size_t tl = strlen(tok), i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
            return 1;
    }
    return 0;
}

/* The request line [p, p+n) (no line end).  Fills method, path and the
 * version's default keep-alive; -SLUICE_EPROTO if malformed. */
static int parse_request_line(const char *p, size_t n, struct metrics_request *out)
{
    size_t i = 0;
    while (i < n && p[i] >= 'A' && p[i] <= 'Z')
        i++;
    if (i == 0 || i > 16 || i >= n || p[i] != ' ')
        return -SLUICE_EPROTO;
    if (i == 3 && memcmp(p, "GET", 3) == 0)
        out->method = METRICS_GET;
    else if (i == 4 && memcmp(p, "HEAD", 4) == 0)
        out->method = METRICS_HEAD;
    else
        out->method = METRICS_OTHER;
    size_t t = ++i;
    while (i < n && (unsigned char)p[i] > 0x20 && (unsigned char)p[i] < 0x7f)
        i++;
    if (i == t || i >= n || p[i] != ' ' || p[t] != '/')
        return -SLUICE_EPROTO;
    out->path = p + t;
    out->path_len = 0;
    while (t + out->path_len < i && p[t + out->path_len] != '?' && p[t + out->path_len] != '#')
        out->path_len++;
    i++;
    if (n - i != 8 || memcmp(p + i, "HTTP/1.", 7) != 0)
        return -SLUICE_EPROTO;
    if (p[i + 7] == '1')
        out->keep_alive = 1;
    else if (p[i + 7] == '0')
        out->keep_alive = 0;
    else
        return -SLUICE_EPROTO;
    return 0;
}

/* One header line [p, p+n); -SLUICE_EPROTO if malformed. */
static int parse_header(const char *p, size_t n, int http11, struct metrics_request *out)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)p[i]))
        i++;
    if (i == 0 || i >= n || p[i] != ':')
        return -SLUICE_EPROTO; /* also rejects obsolete line folding */
    size_t nlen = i++;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    const char *v = p + i;
    size_t vlen = n - i;
    for (size_t k = 0; k < vlen; k++) {
        unsigned char c = (unsigned char)v[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return -SLUICE_EPROTO;
    }
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    if (nlen == 10 && strncasecmp(p, "connection", 10) == 0) {
        if (list_has(v, vlen, "close"))
            out->keep_alive = 0;
        else if (!http11 && list_has(v, vlen, "keep-alive"))
            out->keep_alive = 1;
    } else if (nlen == 14 && strncasecmp(p, "content-length", 14) == 0) {
        if (vlen == 0)
            return -SLUICE_EPROTO;
        int nonzero = 0;
        for (size_t k = 0; k < vlen; k++) {
            if (v[k] < '0' || v[k] > '9')
                return -SLUICE_EPROTO;
            nonzero |= v[k] != '0';
        }
        if (nonzero)
            out->has_body = 1;
    } else if (nlen == 17 && strncasecmp(p, "transfer-encoding", 17) == 0) {
        out->has_body = 1;
    }
    return 0;
}

int metrics_parse_request(const char *buf, size_t len, size_t max, struct metrics_request *out)
{
    size_t lim = len < max ? len : max;
    size_t pos = 0;
    int line = 0, http11 = 0;
    memset(out, 0, sizeof(*out));
    for (;;) {
        const char *nl = pos < lim ? memchr(buf + pos, '\n', lim - pos) : NULL;
        if (nl == NULL) {
            /* Fail early on a request line that cannot become valid, so
             * that noise is answered at once rather than at the bound. */
            if (line == 0) {
                for (size_t i = 0; i < lim && buf[i] != ' '; i++)
                    if (buf[i] < 'A' || buf[i] > 'Z' || i >= 16)
                        return -SLUICE_EPROTO;
            }
            return len >= max ? -SLUICE_ETOOBIG : 0;
        }
        size_t end = (size_t)(nl - buf);
        size_t n = end - pos;
        if (n > 0 && buf[pos + n - 1] == '\r')
            n--;
        if (memchr(buf + pos, '\r', n) != NULL)
            return -SLUICE_EPROTO;
        if (line == 0) {
            if (parse_request_line(buf + pos, n, out) < 0)
                return -SLUICE_EPROTO;
            http11 = out->keep_alive;
        } else if (n == 0) {
            return (int)(end + 1);
        } else if (parse_header(buf + pos, n, http11, out) < 0) {
            return -SLUICE_EPROTO;
        }
        line++;
        pos = end + 1;
    }
}

/* ---- the endpoint ---- */

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    struct metrics *m;
    struct conn *prev, *next;
    char *out;   /* the answer being written by wreq, or NULL */
    int handles; /* open libuv handles; freed at 0 */
    int writing, closing, lingering, close_after;
    size_t len; /* bytes in in[] */
    char in[METRICS_MAX_REQUEST];
};

struct metrics {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listener_open, closed;
    char *bind;
    size_t max_conns;
    uint64_t idle_ms;
    metrics_collect_fn collect;
    void *ud;
    struct conn *conns;
    struct metrics_stats st;
    int port;
    char discard[4096]; /* reads of lingering connections land here */
    char err[512];
};

int metrics_create(uv_loop_t *loop, const struct metrics_config *cfg, metrics_collect_fn collect,
                   void *ud, struct metrics **out)
{
    if (loop == NULL || cfg == NULL || cfg->bind == NULL || collect == NULL)
        return -SLUICE_EINVAL;
    struct metrics *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -SLUICE_ENOMEM;
    m->bind = strdup(cfg->bind);
    if (m->bind == NULL) {
        free(m);
        return -SLUICE_ENOMEM;
    }
    m->loop = loop;
    m->max_conns = cfg->max_conns ? cfg->max_conns : METRICS_DEFAULT_MAX_CONNS;
    m->idle_ms = cfg->idle_timeout_ms ? cfg->idle_timeout_ms : METRICS_DEFAULT_IDLE_MS;
    m->collect = collect;
    m->ud = ud;
    *out = m;
    return 0;
}

const char *metrics_error(const struct metrics *m)
{
    return m->err;
}

int metrics_port(const struct metrics *m)
{
    return m->port;
}

void metrics_get_stats(const struct metrics *m, struct metrics_stats *out)
{
    *out = m->st;
}

static void conn_on_close(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->handles > 0)
        return;
    struct metrics *m = c->m;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        m->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    m->st.open_conns--;
    free(c->out);
    free(c);
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, conn_on_close);
    uv_close((uv_handle_t *)&c->timer, conn_on_close);
}

static void conn_on_timeout(uv_timer_t *t)
{
    struct conn *c = t->data;
    if (!c->lingering)
        c->m->st.timeouts++;
    conn_close(c);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)suggested;
    if (c->lingering) {
        *buf = uv_buf_init(c->m->discard, sizeof(c->m->discard));
        return;
    }
    *buf = uv_buf_init(c->in + c->len, (unsigned)(sizeof(c->in) - c->len));
}

static void conn_process(struct conn *c);
static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void conn_on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;
    if (status < 0)
        conn_close(c);
}

/* The answer is out and the connection must end: half-close and read
 * (discarding) until the client closes or the timer fires. */
static void conn_linger(struct conn *c)
{
    if (c->closing || c->lingering)
        return;
    c->lingering = 1;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, conn_on_shutdown) < 0) {
        conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, conn_on_timeout, c->m->idle_ms < 2000 ? c->m->idle_ms : 2000, 0);
    uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_on_read);
}

/* A response is fully handed to the kernel. */
static void conn_sent(struct conn *c)
{
    if (c->close_after) {
        conn_linger(c);
        return;
    }
    uv_timer_start(&c->timer, conn_on_timeout, c->m->idle_ms, 0);
}

static void conn_on_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    free(c->out);
    c->out = NULL;
    c->writing = 0;
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    conn_sent(c);
    if (c->lingering || c->closing)
        return;
    conn_process(c);
}

/* Builds and sends one answer; body may be NULL for an empty one. */
static void conn_answer(struct conn *c, int head_only, const char *status, const char *ctype,
                        const char *extra, const char *body, size_t blen)
{
    struct metrics_buf b = {0};
    char num[24];
    buf_str(&b, "HTTP/1.1 ");
    buf_str(&b, status);
    buf_str(&b, "\r\nContent-Type: ");
    buf_str(&b, ctype);
    buf_str(&b, "\r\nContent-Length: ");
    snprintf(num, sizeof(num), "%zu", blen);
    buf_str(&b, num);
    buf_str(&b, c->close_after ? "\r\nConnection: close\r\n" : "\r\nConnection: keep-alive\r\n");
    if (extra != NULL)
        buf_str(&b, extra);
    buf_str(&b, "\r\n");
    if (!head_only && blen > 0)
        buf_add(&b, body, blen);
    c->m->st.requests++;
    if (b.oom) {
        metrics_buf_free(&b);
        conn_close(c);
        return;
    }
    uv_buf_t ub = uv_buf_init(b.data, (unsigned)b.len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &ub, 1);
    if (n == UV_EAGAIN || n == UV_ENOSYS)
        n = 0;
    if (n < 0) {
        metrics_buf_free(&b);
        conn_close(c);
        return;
    }
    if ((size_t)n == b.len) {
        metrics_buf_free(&b);
        conn_sent(c);
        return;
    }
    /* The socket is full: queue the rest and stop reading until it drains. */
    c->out = b.data;
    ub = uv_buf_init(b.data + n, (unsigned)(b.len - (size_t)n));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &ub, 1, conn_on_write) < 0) {
        conn_close(c);
        return;
    }
    c->writing = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
}

static const char TEXT_PLAIN[] = "text/plain; charset=utf-8";

static void conn_error(struct conn *c, const char *status, const char *body)
{
    c->close_after = 1;
    conn_answer(c, 0, status, TEXT_PLAIN, NULL, body, strlen(body));
}

static void conn_request(struct conn *c, const struct metrics_request *r)
{
    struct metrics *m = c->m;
    int head_only = r->method == METRICS_HEAD;
    if (!r->keep_alive || r->has_body)
        c->close_after = 1;
    if (r->method == METRICS_OTHER) {
        c->close_after = 1;
        const char *body = "method not allowed\n";
        conn_answer(c, 0, "405 Method Not Allowed", TEXT_PLAIN, "Allow: GET, HEAD\r\n", body,
                    strlen(body));
        return;
    }
    if (r->path_len == 8 && memcmp(r->path, "/metrics", 8) == 0) {
        struct metrics_snapshot s;
        memset(&s, 0, sizeof(s));
        m->collect(m->ud, &s);
        struct metrics_buf b = {0};
        if (metrics_render(&s, &b) < 0) {
            metrics_buf_free(&b);
            conn_error(c, "500 Internal Server Error", "out of memory\n");
            return;
        }
        m->st.scrapes++;
        conn_answer(c, head_only, "200 OK", "text/plain; version=0.0.4; charset=utf-8", NULL,
                    b.data, b.len);
        metrics_buf_free(&b);
    } else if (r->path_len == 7 && memcmp(r->path, "/health", 7) == 0) {
        conn_answer(c, head_only, "200 OK", TEXT_PLAIN, NULL, "ok\n", 3);
    } else {
        conn_answer(c, head_only, "404 Not Found", TEXT_PLAIN, NULL, "not found\n", 10);
    }
}

/* Answers every complete request in the buffer, in order, until one is
 * still being written, the connection must close, or more bytes are
 * needed. */
static void conn_process(struct conn *c)
{
    while (!c->writing && !c->closing && !c->lingering) {
        struct metrics_request r;
        int n = metrics_parse_request(c->in, c->len, sizeof(c->in), &r);
        if (n == 0) {
            uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_on_read);
            return;
        }
        if (n == -SLUICE_ETOOBIG) {
            c->m->st.too_big++;
            conn_error(c, "431 Request Header Fields Too Large", "request too large\n");
            return;
        }
        if (n < 0) {
            c->m->st.bad_requests++;
            conn_error(c, "400 Bad Request", "bad request\n");
            return;
        }
        conn_request(c, &r);
        /* r.path pointed into in[]: done with it, drop the head. */
        memmove(c->in, c->in + n, c->len - (size_t)n);
        c->len -= (size_t)n;
    }
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    (void)buf;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0 || c->lingering)
        return;
    size_t before = c->len;
    c->len += (size_t)nread;
    /* A head ends with a line end: no need to parse before one arrives,
     * unless the buffer is full (then the parser says it is too big) or
     * this is the request line's start (noise is refused early). */
    if (before > 0 && c->len < sizeof(c->in) && memchr(c->in + before, '\n', (size_t)nread) == NULL)
        return;
    conn_process(c);
}

/* Accepts and closes at once a connection over max_conns. */
static void refuse_on_close(uv_handle_t *h)
{
    free(h);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct metrics *m = server->data;
    if (status < 0 || m->closed)
        return;
    if (m->st.open_conns >= m->max_conns) {
        uv_tcp_t *t = malloc(sizeof(*t));
        if (t == NULL)
            return;
        uv_tcp_init(m->loop, t);
        (void)uv_accept(server, (uv_stream_t *)t);
        m->st.refused++;
        uv_close((uv_handle_t *)t, refuse_on_close);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->m = m;
    uv_tcp_init(m->loop, &c->tcp);
    uv_timer_init(m->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles = 2;
    c->next = m->conns;
    if (m->conns != NULL)
        m->conns->prev = c;
    m->conns = c;
    m->st.open_conns++;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_timer_start(&c->timer, conn_on_timeout, m->idle_ms, 0);
    uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_on_read);
}

/* Splits "HOST:PORT" / "[V6]:PORT" into host and port strings. */
static int split_hostport(const char *s, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= plen)
        return -1;
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= hlen)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    if (n == 0 || strcmp(host, "*") == 0)
        snprintf(host, hlen, "0.0.0.0");
    for (const char *p = colon + 1; *p != '\0'; p++)
        if (*p < '0' || *p > '9')
            return -1;
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

int metrics_start(struct metrics *m)
{
    char host[256], port[8];
    if (split_hostport(m->bind, host, sizeof(host), port, sizeof(port)) < 0 || atoi(port) > 65535) {
        snprintf(m->err, sizeof(m->err), "metrics: '%s' is not HOST:PORT", m->bind);
        return -SLUICE_EINVAL;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(m->err, sizeof(m->err), "metrics: cannot resolve '%s': %s", host,
                 gai_strerror(rc));
        if (res != NULL)
            freeaddrinfo(res);
        return -SLUICE_EINVAL;
    }
    uv_tcp_init(m->loop, &m->listener);
    m->listener.data = m;
    m->listener_open = 1;
    rc = uv_tcp_bind(&m->listener, res->ai_addr, 0);
    freeaddrinfo(res);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&m->listener, 64, on_connection);
    if (rc < 0) {
        snprintf(m->err, sizeof(m->err), "metrics: cannot listen on %s: %s", m->bind,
                 uv_strerror(rc));
        return -SLUICE_EIO;
    }
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (uv_tcp_getsockname(&m->listener, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            m->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            m->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return 0;
}

void metrics_close(struct metrics *m)
{
    if (m == NULL || m->closed)
        return;
    m->closed = 1;
    if (m->listener_open)
        uv_close((uv_handle_t *)&m->listener, NULL);
    for (struct conn *c = m->conns; c != NULL; c = c->next)
        conn_close(c);
}

void metrics_destroy(struct metrics *m)
{
    if (m == NULL)
        return;
    free(m->bind);
    free(m);
}
