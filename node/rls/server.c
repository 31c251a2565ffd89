/*
 * rls server: gRPC over HTTP/2 cleartext with nghttp2 on libuv (server.h).
 *
 * Design note.  Each TCP connection owns one nghttp2 server session.  Bytes
 * read by libuv go to nghttp2_session_mem_recv; its callbacks collect each
 * stream's headers and DATA; when a stream's request ends (END_STREAM) the
 * call is answered at once, in the same loop turn, and whatever nghttp2 has
 * to send is drained with nghttp2_session_mem_send into one uv_write.
 *
 *   client                                   sluiced
 *   PRI * HTTP/2.0 ... SETTINGS  -------->
 *                                <--------   SETTINGS (max streams)
 *   HEADERS :method POST
 *           :path = RLS_PATH (below)
 *           content-type application/grpc, grpc-timeout: 20m
 *   DATA    [0][len:4][RateLimitRequest]  END_STREAM -->
 *           (or :path /grpc.health.v1.Health/Check, a HealthCheckRequest:
 *           Envoy's and Kubernetes' gRPC health probes)
 *                                <--------   HEADERS :status 200
 *                                <--------   DATA [0][len:4][RateLimitResponse]
 *                                <--------   HEADERS grpc-status 0  END_STREAM
 *
 * Health/Watch is the one server-streaming call: its answer's HEADERS go
 * out at once, then one DATA [0][len:4][HealthCheckResponse] with the
 * status now, then one more each time the status changes; the stream
 * stays open until the client cancels it, its grpc-timeout passes
 * (trailers DEADLINE_EXCEEDED) or the connection closes.  The status is
 * polled every RLS_WATCH_POLL_MS while a watch is open (readiness is a
 * poll too), and re-read at once when the daemon says it changed
 * (rls_server_health_changed: a drain).  A stream holds at most one
 * unsent message: a client that does not read (HTTP/2 flow control) gets
 * the latest status, not every one in between.  Watches are capped per
 * connection (RLS_MAX_WATCHES_PER_CONN) and per listener (max_watches);
 * past either the call is answered RESOURCE_EXHAUSTED.
 *
 * Errors answer "trailers only" (one HEADERS with grpc-status, grpc-message
 * and END_STREAM): an unknown path UNIMPLEMENTED, a bad message
 * INVALID_ARGUMENT, an oversize one RESOURCE_EXHAUSTED (answered as soon as
 * its prefix says so, the rest of the stream reset with NO_ERROR), a
 * compressed one INTERNAL, an expired grpc-timeout DEADLINE_EXCEEDED.
 * Malformed HTTP/2 ends that connection with GOAWAY and touches no other.
 *
 * Bounds: max_connections, max_streams per connection (nghttp2 refuses
 * more), max_message per request, max_conn_input buffered request bytes
 * per connection, and max_conn_output unsent bytes, above which the
 * connection stops being read until its writes drain.
 *
 * Crowds.  A newcomer past max_connections is never refused: it closes the
 * worst connection, the oldest that has not yet sent its HTTP/2 preface and
 * SETTINGS, else the one idle longest, so silent connections cannot lock
 * Envoy out.  A once-a-second sweep closes a connection still silent after
 * handshake_timeout_ms, and (when idle_timeout_ms is set) one that sent
 * nothing for that long, with GOAWAY.  Every byte a connection holds,
 * nghttp2's session and streams included (its allocator is ours and counts
 * per connection), is charged to the daemon's one client memory budget,
 * whose heaviest connection of any listener is closed past it.  Evictions
 * and timeouts are logged at most every RLS_LOG_INTERVAL_MS.
 *
 * A turn's budget.  HTTP/2 input costs the loop about 10 ms a MiB on a
 * loaded host (nghttp2's framing, the streams' buffers): a storm of
 * connections each sending a large unfinished stream made one turn read
 * 2 MB.  Once a turn's connections fed RLS_TURN_BYTES to nghttp2, a
 * connection's next read is held unprocessed in its read buffer, its
 * reading paused, and it joins a queue that an idle handle serves at the
 * next turns, in order, within the same budget.  Closing is budgeted too:
 * a turn closes at most CLOSEBUDGET_PER_TURN connections that hung up or
 * stayed silent past their deadline (each close frees an nghttp2 session
 * and its streams: 1,100 silent connections hanging up together made one
 * long turn); the rest join the same queue, unread, and are closed at the
 * next turns.  Evictions for newcomers and over the memory budget are not
 * deferred: they are bounded by the accepts a turn and by what is over.
 */
#include "server.h"

#include <netdb.h>
#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acceptgate.h"
#include "clientmem.h"
#include "closebudget.h"
#include "grpc.h"
#include "log.h"
#include "sluice/error.h"
#include "tcp.h"

#define RLS_PATH            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define RLS_HEALTH_PATH     "/grpc.health.v1.Health/Check"
#define RLS_WATCH_PATH      "/grpc.health.v1.Health/Watch"
#define RLS_WATCH_POLL_MS   100
#define RLS_LOG_INTERVAL_MS 10000
#define RLS_TURN_BYTES      (256 * 1024)
/* nghttp2's allocations carry their size in front, kept aligned. */
#define RLS_MEM_HDR _Alignof(max_align_t)

struct rls_stream {
    struct rls_stream *prev, *next; /* the connection's open streams */
    int32_t id;
    int method_post, grpc_ctype;
    int path_ok;         /* 1: ShouldRateLimit, 2: Health/Check, 3: Health/Watch */
    char path[128];      /* for the UNIMPLEMENTED message, truncated */
    int64_t deadline_ns; /* 0: none */
    int bad_timeout;
    int answered;
    int reset_after; /* answered early: reset the rest once the answer is out */
    uint8_t *body;
    size_t len, cap;
    uint8_t *resp; /* gRPC-framed response being sent */
    size_t resp_len, resp_off;
    /* A Watch: in the server's list while streaming. */
    struct rls_conn *conn;
    struct rls_stream *w_prev, *w_next;
    int watching;
    int w_known;    /* a name Check knows (else SERVICE_UNKNOWN, forever) */
    int w_status;   /* the last status queued */
    int w_deferred; /* the data provider said DEFERRED: resume it */
    int w_end;      /* a grpc-status to end with once the message is out; -1: none */
    uint8_t w_msg[RLS_HEALTH_MSG_MAX];
    size_t w_len, w_off; /* the one unsent message */
};

struct rls_conn {
    uv_tcp_t tcp;
    struct rls_server *srv;
    nghttp2_session *h2;
    struct rls_conn *prev, *next;
    struct rls_stream *streams; /* freed here: nghttp2_session_del calls no callback */
    size_t input;               /* request bytes buffered in streams */
    size_t pending;             /* bytes handed to uv_write, not yet written */
    int reading;
    int closing;
    int goaway;                /* a protocol error: close once written */
    int greeted;               /* the client's first frame (SETTINGS) came */
    uint64_t born_ms, last_ms; /* uv_now at accept, at the last read */
    size_t h2bytes;            /* what nghttp2 holds for this connection */
    size_t mem;                /* charged to the budget (rls_server__conn_mem) */
    nghttp2_mem alloc;         /* counts into h2bytes */
    size_t held;               /* rbuf's bytes read but not yet processed (a turn's budget) */
    int queued;                /* in the server's queue for a later turn */
    int hung_up;               /* queued to be closed (the turn's closes were spent) */
    struct rls_conn *q_prev, *q_next;
    size_t watches; /* Health/Watch streams open */
    char rbuf[16384];
};

struct rls_server {
    uv_loop_t *loop;
    struct rls_server_config cfg;
    char *bind;
    struct rls_service *svc;
    uv_tcp_t listener;
    struct acceptgate gate; /* accepts per loop turn */
    int listener_open;
    int closed;
    int port;
    struct rls_conn *conns;
    struct rls_conn *q_head, *q_tail; /* input held for a later turn (FIFO) */
    uv_idle_t resume;                 /* serves the queue at the next turn */
    uv_check_t turn_end;              /* after each turn's I/O: a fresh budget */
    int turn_init;
    size_t turn_bytes;         /* fed to nghttp2 this turn */
    struct closebudget closes; /* hung-up or timed-out connections closed this turn */
    struct rls_server_stats stats;
    struct clientmem_pool pool;
    uv_timer_t sweep; /* handshake and idle deadlines, once a second */
    int sweep_init;
    struct rls_stream *watches; /* Health/Watch streams, every connection's */
    uv_timer_t watch_poll;      /* re-reads the status while a watch is open */
    int watch_init;
    uint64_t logged_at, logged_evicted, logged_timeouts, logged_mem;
    char err[512];
};

struct rls_write {
    uv_write_t req;
    struct rls_conn *conn;
    size_t len;
    uint8_t data[];
};

static void rls_server__flush(struct rls_conn *c);

static void rls_server__free_handle(uv_handle_t *h)
{
    free(h->data);
}

/* ---- nghttp2's memory, counted per connection ---- */

static void *rls_server__malloc(size_t n, void *ud)
{
    struct rls_conn *c = ud;
    if (n > SIZE_MAX - RLS_MEM_HDR)
        return NULL;
    unsigned char *p = malloc(n + RLS_MEM_HDR);
    if (p == NULL)
        return NULL;
    memcpy(p, &n, sizeof(n));
    c->h2bytes += n;
    return p + RLS_MEM_HDR;
}

static void rls_server__free(void *ptr, void *ud)
{
    struct rls_conn *c = ud;
    if (ptr == NULL)
        return;
    unsigned char *p = (unsigned char *)ptr - RLS_MEM_HDR;
    size_t n;
    memcpy(&n, p, sizeof(n));
    c->h2bytes -= n;
    free(p);
}

static void *rls_server__calloc(size_t k, size_t n, void *ud)
{
    if (n != 0 && k > SIZE_MAX / n)
        return NULL;
    void *p = rls_server__malloc(k * n, ud);
    if (p != NULL)
        memset(p, 0, k * n);
    return p;
}

static void *rls_server__realloc(void *ptr, size_t n, void *ud)
{
    struct rls_conn *c = ud;
    if (ptr == NULL)
        return rls_server__malloc(n, ud);
    if (n > SIZE_MAX - RLS_MEM_HDR)
        return NULL;
    unsigned char *p = (unsigned char *)ptr - RLS_MEM_HDR;
    size_t was;
    memcpy(&was, p, sizeof(was));
    unsigned char *q = realloc(p, n + RLS_MEM_HDR);
    if (q == NULL)
        return NULL;
    memcpy(q, &n, sizeof(n));
    c->h2bytes = c->h2bytes - was + n;
    return q + RLS_MEM_HDR;
}

/* What c holds: itself, nghttp2's session, its streams' buffers and the
 * bytes handed to libuv not yet written. */
static size_t rls_server__conn_mem(const struct rls_conn *c)
{
    size_t n = sizeof(*c) + c->h2bytes + c->pending;
    for (const struct rls_stream *st = c->streams; st != NULL; st = st->next)
        n += sizeof(*st) + st->cap + st->resp_len;
    return n;
}

static void rls_server__account(struct rls_conn *c)
{
    size_t now = c->closing ? 0 : rls_server__conn_mem(c);
    clientmem_charge(&c->srv->pool, c->mem, now);
    c->mem = now;
}

/* One line per RLS_LOG_INTERVAL_MS when connections were closed since the
 * last; the next event tells what happened in between. */
static void rls_server__log(struct rls_server *srv)
{
    struct rls_server_stats *s = &srv->stats;
    if (s->evicted == srv->logged_evicted && s->timeouts == srv->logged_timeouts &&
        s->memory_evicted == srv->logged_mem)
        return;
    uint64_t now = uv_now(srv->loop);
    if (srv->logged_at != 0 && now - srv->logged_at < RLS_LOG_INTERVAL_MS)
        return;
    log_warn("gRPC listener: closed %llu connections for newcomers over %zu (silent ones first, "
             "then the longest idle), %llu silent or idle past their deadline, %llu over the "
             "client memory budget; %llu, %llu and %llu so far",
             (unsigned long long)(s->evicted - srv->logged_evicted), srv->cfg.max_connections,
             (unsigned long long)(s->timeouts - srv->logged_timeouts),
             (unsigned long long)(s->memory_evicted - srv->logged_mem),
             (unsigned long long)s->evicted, (unsigned long long)s->timeouts,
             (unsigned long long)s->memory_evicted);
    srv->logged_at = now;
    srv->logged_evicted = s->evicted;
    srv->logged_timeouts = s->timeouts;
    srv->logged_mem = s->memory_evicted;
}

/* Takes st out of the watch list and the counts (a no-op for others). */
static void rls_server__unwatch(struct rls_conn *c, struct rls_stream *st)
{
    struct rls_server *srv = c->srv;
    if (!st->watching)
        return;
    st->watching = 0;
    if (st->w_prev != NULL)
        st->w_prev->w_next = st->w_next;
    else
        srv->watches = st->w_next;
    if (st->w_next != NULL)
        st->w_next->w_prev = st->w_prev;
    st->w_prev = st->w_next = NULL;
    c->watches--;
    srv->stats.watching--;
    if (srv->stats.watching == 0 && srv->watch_init)
        uv_timer_stop(&srv->watch_poll);
}

static void rls_server__stream_free(struct rls_conn *c, struct rls_stream *st)
{
    rls_server__unwatch(c, st);
    if (st->prev != NULL)
        st->prev->next = st->next;
    else
        c->streams = st->next;
    if (st->next != NULL)
        st->next->prev = st->prev;
    c->input -= st->len;
    free(st->body);
    free(st->resp);
    free(st);
}

/* ---- connections ---- */

static void rls_server__on_closed(uv_handle_t *h)
{
    struct rls_conn *c = h->data;
    struct rls_server *srv = c->srv;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    struct rls_stream *st = c->streams;
    while (st != NULL) {
        struct rls_stream *next = st->next;
        rls_server__unwatch(c, st);
        free(st->body);
        free(st->resp);
        free(st);
        st = next;
    }
    nghttp2_session_del(c->h2);
    free(c);
}

/* A connection leaves the count and the budget as it is closed. */
static void rls_server__closed(struct rls_conn *c)
{
    c->srv->stats.connected--;
    rls_server__account(c);
}

static void rls_server__dequeue(struct rls_conn *c)
{
    if (!c->queued)
        return;
    struct rls_server *srv = c->srv;
    if (c->q_prev != NULL)
        c->q_prev->q_next = c->q_next;
    else
        srv->q_head = c->q_next;
    if (c->q_next != NULL)
        c->q_next->q_prev = c->q_prev;
    else
        srv->q_tail = c->q_prev;
    c->q_prev = c->q_next = NULL;
    c->queued = 0;
}

static void rls_server__conn_close(struct rls_conn *c)
{
    if (c->closing)
        return;
    rls_server__dequeue(c);
    c->closing = 1;
    rls_server__closed(c);
    uv_close((uv_handle_t *)&c->tcp, rls_server__on_closed);
}

/* Closes the connection when neither side has anything more to say. */
static void rls_server__maybe_close(struct rls_conn *c)
{
    if (c->closing || c->pending > 0)
        return;
    if (c->goaway || (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)))
        rls_server__conn_close(c);
}

static void rls_server__enqueue(struct rls_conn *c)
{
    struct rls_server *srv = c->srv;
    c->queued = 1;
    c->q_next = NULL;
    c->q_prev = srv->q_tail;
    if (srv->q_tail != NULL)
        srv->q_tail->q_next = c;
    else
        srv->q_head = c;
    srv->q_tail = c;
}

static void rls_server__on_resume(uv_idle_t *h);
static void rls_server__reading(struct rls_conn *c, int on);

/* c hung up or stayed silent past its deadline: closed now, or, once this
 * turn's close budget (closebudget.h) is spent, at a later turn (unread meanwhile,
 * its held input dropped). */
static void rls_server__close_soon(struct rls_conn *c)
{
    struct rls_server *srv = c->srv;
    if (c->closing || c->hung_up)
        return;
    if (closebudget_take(&srv->closes, !srv->turn_init)) {
        rls_server__conn_close(c);
        return;
    }
    rls_server__reading(c, 0);
    c->hung_up = 1;
    c->held = 0;
    if (!c->queued)
        rls_server__enqueue(c);
    srv->stats.deferred_closes++;
    uv_idle_start(&srv->resume, rls_server__on_resume);
}

static void rls_server__on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    struct rls_conn *c = h->data;
    (void)hint;
    buf->base = c->rbuf;
    buf->len = sizeof(c->rbuf);
}

static void rls_server__input(struct rls_conn *c, const uint8_t *data, size_t n);

static void rls_server__on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct rls_conn *c = s->data;
    if (n < 0) {
        rls_server__close_soon(c);
        return;
    }
    if (n == 0 || c->goaway)
        return;
    c->last_ms = uv_now(c->srv->loop);
    struct rls_server *srv = c->srv;
    if (srv->turn_init && srv->turn_bytes >= RLS_TURN_BYTES) {
        /* This turn's budget is spent: keep the bytes for a later turn. */
        c->held = (size_t)n;
        rls_server__reading(c, 0);
        rls_server__enqueue(c);
        srv->stats.deferred_reads++;
        uv_idle_start(&srv->resume, rls_server__on_resume);
        return;
    }
    rls_server__input(c, (const uint8_t *)buf->base, (size_t)n);
}

/* Feeds n bytes read from c to its session and sends what it answers. */
static void rls_server__input(struct rls_conn *c, const uint8_t *data, size_t n)
{
    c->srv->turn_bytes += n;
    ssize_t rv = nghttp2_session_mem_recv(c->h2, data, n);
    if (rv < 0) {
        /* nghttp2 did not queue a GOAWAY for this one (a bad preface, a
         * callback failure): say PROTOCOL_ERROR ourselves. */
        c->srv->stats.protocol_errors++;
        nghttp2_session_terminate_session(c->h2, NGHTTP2_PROTOCOL_ERROR);
        c->goaway = 1;
    }
    rls_server__flush(c);
    rls_server__account(c);
    if (clientmem_over(&c->srv->pool))
        clientmem_enforce(c->srv->pool.budget);
}

static void rls_server__reading(struct rls_conn *c, int on)
{
    if (c->closing || c->reading == on || (on && c->queued))
        return;
    c->reading = on;
    if (on)
        uv_read_start((uv_stream_t *)&c->tcp, rls_server__on_alloc, rls_server__on_read);
    else
        uv_read_stop((uv_stream_t *)&c->tcp);
}

/* The next turn: a fresh budget for the held input and the closes, served
 * in order. */
static void rls_server__on_resume(uv_idle_t *h)
{
    struct rls_server *srv = h->data;
    while (srv->q_head != NULL) {
        struct rls_conn *c = srv->q_head;
        if (c->hung_up) {
            if (!closebudget_take(&srv->closes, 0))
                break;
            rls_server__conn_close(c); /* takes it out of the queue */
            continue;
        }
        if (srv->turn_bytes >= RLS_TURN_BYTES)
            break;
        rls_server__dequeue(c);
        size_t n = c->held;
        c->held = 0;
        if (n > 0 && !c->goaway)
            rls_server__input(c, (const uint8_t *)c->rbuf, n); /* may close c */
        if (!c->closing && !c->goaway && c->pending <= srv->cfg.max_conn_output)
            rls_server__reading(c, 1);
    }
    if (srv->q_head == NULL)
        uv_idle_stop(h);
}

static void rls_server__on_turn_end(uv_check_t *h)
{
    struct rls_server *srv = h->data;
    srv->turn_bytes = 0;
    closebudget_turn_end(&srv->closes);
}

static void rls_server__on_write(uv_write_t *req, int status)
{
    struct rls_write *w = (struct rls_write *)req;
    struct rls_conn *c = w->conn;
    c->pending -= w->len;
    free(w);
    rls_server__account(c);
    if (status < 0) {
        rls_server__conn_close(c);
        return;
    }
    if (c->pending <= c->srv->cfg.max_conn_output / 2 && !c->goaway)
        rls_server__reading(c, 1);
    rls_server__maybe_close(c);
}

/* Sends what nghttp2 has queued, in one write. */
static void rls_server__flush(struct rls_conn *c)
{
    if (c->closing)
        return;
    size_t cap = 0, len = 0;
    struct rls_write *w = NULL;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0) {
            free(w);
            rls_server__conn_close(c);
            return;
        }
        if (n == 0)
            break;
        if (len + (size_t)n > cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            while (ncap < len + (size_t)n)
                ncap *= 2;
            struct rls_write *nw = realloc(w, sizeof(*w) + ncap);
            if (nw == NULL) {
                free(w);
                rls_server__conn_close(c);
                return;
            }
            w = nw;
            cap = ncap;
        }
        memcpy(w->data + len, data, (size_t)n);
        len += (size_t)n;
    }
    if (len > 0) {
        w->conn = c;
        w->len = len;
        uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)len);
        if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, rls_server__on_write) < 0) {
            free(w);
            rls_server__conn_close(c);
            return;
        }
        c->pending += len;
        if (c->pending > c->srv->cfg.max_conn_output)
            rls_server__reading(c, 0);
    } else {
        free(w);
    }
    rls_server__maybe_close(c);
}

/* ---- answers ---- */

/* grpc-message is percent-encoded outside printable ASCII. */
static void rls_server__pct(const char *in, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p != '\0' && o + 4 < outlen; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

/* A trailers-only answer with a gRPC status, or a bare HTTP status when
 * http is not "200" (gRPC's rule for a wrong method or content-type). */
static void rls_server__fail(struct rls_conn *c, struct rls_stream *st, const char *http,
                             int status, const char *msg)
{
    char code[12], enc[384];
    snprintf(code, sizeof(code), "%d", status);
    rls_server__pct(msg, enc, sizeof(enc));
    nghttp2_nv nva[] = {NV(":status", http), NV("content-type", "application/grpc"),
                        NV("grpc-status", code), NV("grpc-message", enc)};
    st->answered = 1;
    c->srv->stats.requests++;
    c->srv->stats.errors++;
    nghttp2_submit_response(c->h2, st->id, nva, sizeof(nva) / sizeof(nva[0]), NULL);
}

static ssize_t rls_server__read_resp(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len,
                                     uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    struct rls_stream *st = src->ptr;
    size_t n = st->resp_len - st->resp_off;
    (void)ud;
    if (n > len)
        n = len;
    memcpy(buf, st->resp + st->resp_off, n);
    st->resp_off += n;
    if (st->resp_off == st->resp_len) {
        static const nghttp2_nv trailers[] = {NV("grpc-status", "0")};
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(h2, id, trailers, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* A watch's data: its one unsent message, else DEFERRED until the status
 * changes; once w_end is set, the trailers with that status end it. */
static ssize_t rls_server__read_watch(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len,
                                      uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    struct rls_stream *st = src->ptr;
    size_t n = st->w_len - st->w_off;
    (void)ud;
    if (n == 0 && st->w_end < 0) {
        st->w_deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > len)
        n = len;
    memcpy(buf, st->w_msg + st->w_off, n);
    st->w_off += n;
    if (st->w_off == st->w_len && st->w_end >= 0) {
        char code[12];
        snprintf(code, sizeof(code), "%d", st->w_end);
        nghttp2_nv trailers[] = {NV("grpc-status", code)};
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(h2, id, trailers, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* Queues status on a watch (replacing a message not yet sent: the client
 * wants the latest) and wakes its data provider; the caller flushes. */
static void rls_server__watch_send(struct rls_conn *c, struct rls_stream *st, int status)
{
    st->w_status = status;
    st->w_len = rls_service_health_pack(status, st->w_msg);
    st->w_off = 0;
    if (st->w_deferred) {
        st->w_deferred = 0;
        nghttp2_session_resume_data(c->h2, st->id);
    }
}

/* Ends a watch with trailers carrying status (its deadline passed). */
static void rls_server__watch_end(struct rls_conn *c, struct rls_stream *st, int status)
{
    st->w_end = status;
    if (st->w_deferred) {
        st->w_deferred = 0;
        nghttp2_session_resume_data(c->h2, st->id);
    }
    rls_server__unwatch(c, st);
}

/* Every open watch: ends those past their deadline, and sends the status
 * to those that last heard another.  The known names share one status,
 * read once. */
static void rls_server__watch_poll(struct rls_server *srv)
{
    if (srv->watches == NULL)
        return;
    int status = rls_service_health_status(srv->svc);
    int64_t now = (int64_t)uv_hrtime();
    struct rls_stream *next;
    for (struct rls_stream *st = srv->watches; st != NULL; st = next) {
        next = st->w_next;
        struct rls_conn *c = st->conn;
        if (c->closing)
            continue;
        if (st->deadline_ns != 0 && now > st->deadline_ns) {
            rls_server__watch_end(c, st, RLS_GRPC_DEADLINE_EXCEEDED);
        } else if (st->w_known && st->w_status != status) {
            rls_server__watch_send(c, st, status);
        } else {
            continue;
        }
        rls_server__flush(c);
        rls_server__account(c);
    }
}

static void rls_server__on_watch_poll(uv_timer_t *t)
{
    rls_server__watch_poll(t->data);
}

void rls_server_health_changed(struct rls_server *srv)
{
    if (srv != NULL && !srv->closed)
        rls_server__watch_poll(srv);
}

/* Health/Watch: the first message now, the stream kept open. */
static void rls_server__watch(struct rls_conn *c, struct rls_stream *st, const uint8_t *msg,
                              size_t msglen)
{
    struct rls_server *srv = c->srv;
    char why[160];
    int known;
    if (c->watches >= RLS_MAX_WATCHES_PER_CONN || srv->stats.watching >= srv->cfg.max_watches) {
        rls_server__fail(c, st, "200", RLS_GRPC_RESOURCE_EXHAUSTED,
                         c->watches >= RLS_MAX_WATCHES_PER_CONN
                             ? "too many health watches on this connection"
                             : "too many health watches on this listener");
        return;
    }
    int rc = rls_service_health_watch(srv->svc, msg, msglen, &known, why, sizeof(why));
    if (rc < 0) {
        rls_server__fail(c, st, "200", rls_service_grpc_status(rc), why);
        return;
    }
    st->answered = 1;
    st->conn = c;
    st->w_known = known;
    st->w_end = -1;
    srv->stats.requests++;
    rls_server__watch_send(
        c, st, known ? rls_service_health_status(srv->svc) : RLS_HEALTH_SERVICE_UNKNOWN);
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                        NV("grpc-accept-encoding", "identity")};
    nghttp2_data_provider dp = {.source.ptr = st, .read_callback = rls_server__read_watch};
    if (nghttp2_submit_response(c->h2, st->id, nva, sizeof(nva) / sizeof(nva[0]), &dp) != 0)
        return; /* the stream is gone (reset meanwhile): nothing to watch */
    st->watching = 1;
    st->w_prev = NULL;
    st->w_next = srv->watches;
    if (st->w_next != NULL)
        st->w_next->w_prev = st;
    srv->watches = st;
    c->watches++;
    if (srv->stats.watching++ == 0 && srv->watch_init)
        uv_timer_start(&srv->watch_poll, rls_server__on_watch_poll, RLS_WATCH_POLL_MS,
                       RLS_WATCH_POLL_MS);
}

static void rls_server__answer(struct rls_conn *c, struct rls_stream *st)
{
    struct rls_server *srv = c->srv;
    const uint8_t *msg;
    size_t msglen, used;
    char why[160];
    if (!st->method_post) {
        rls_server__fail(c, st, "405", RLS_GRPC_INTERNAL, "method must be POST");
        return;
    }
    if (!st->grpc_ctype) {
        rls_server__fail(c, st, "415", RLS_GRPC_INTERNAL, "content-type must be application/grpc");
        return;
    }
    if (!st->path_ok) {
        snprintf(why, sizeof(why), "unknown method %s", st->path);
        rls_server__fail(c, st, "200", RLS_GRPC_UNIMPLEMENTED, why);
        return;
    }
    if (st->bad_timeout) {
        rls_server__fail(c, st, "200", RLS_GRPC_INTERNAL, "malformed grpc-timeout");
        return;
    }
    if (st->deadline_ns != 0 && (int64_t)uv_hrtime() > st->deadline_ns) {
        rls_server__fail(c, st, "200", RLS_GRPC_DEADLINE_EXCEEDED,
                         "deadline passed before the request was complete");
        return;
    }
    int rc = rls_grpc_frame(st->body, st->len, srv->cfg.max_message, &msg, &msglen, &used);
    if (rc == -SLUICE_EPROTO) {
        rls_server__fail(c, st, "200", RLS_GRPC_INTERNAL,
                         "compressed messages are not supported (no grpc-encoding)");
        return;
    }
    if (rc == -SLUICE_ETOOBIG) {
        rls_server__fail(c, st, "200", RLS_GRPC_RESOURCE_EXHAUSTED, "request message too large");
        return;
    }
    if (rc < 0 || used != st->len) {
        rls_server__fail(c, st, "200", RLS_GRPC_INTERNAL,
                         rc < 0 ? "request message missing or truncated"
                                : "more than one request message in a unary call");
        return;
    }
    if (st->path_ok == 3) {
        rls_server__watch(c, st, msg, msglen);
        return;
    }
    uint8_t *out;
    size_t outlen;
    if (st->path_ok == 2)
        rc = rls_service_health(srv->svc, msg, msglen, &out, &outlen, why, sizeof(why));
    else
        rc = rls_service_call(srv->svc, msg, msglen, &out, &outlen, why, sizeof(why));
    if (rc < 0) {
        rls_server__fail(c, st, "200", rls_service_grpc_status(rc), why);
        return;
    }
    st->resp = out;
    st->resp_len = outlen;
    st->answered = 1;
    srv->stats.requests++;
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                        NV("grpc-accept-encoding", "identity")};
    nghttp2_data_provider dp = {.source.ptr = st, .read_callback = rls_server__read_resp};
    nghttp2_submit_response(c->h2, st->id, nva, sizeof(nva) / sizeof(nva[0]), &dp);
}

/* ---- nghttp2 callbacks ---- */

static int rls_server__on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    struct rls_conn *c = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct rls_stream *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets this stream only */
    st->id = f->hd.stream_id;
    st->next = c->streams;
    if (st->next != NULL)
        st->next->prev = st;
    c->streams = st;
    nghttp2_session_set_stream_user_data(h2, st->id, st);
    return 0;
}

static int rls_server__eq(const uint8_t *a, size_t alen, const char *b)
{
    return alen == strlen(b) && memcmp(a, b, alen) == 0;
}

static int rls_server__on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                                 size_t namelen, const uint8_t *value, size_t valuelen,
                                 uint8_t flags, void *ud)
{
    (void)flags;
    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct rls_stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (st == NULL)
        return 0;
    if (rls_server__eq(name, namelen, ":method")) {
        st->method_post = rls_server__eq(value, valuelen, "POST");
    } else if (rls_server__eq(name, namelen, ":path")) {
        st->path_ok = rls_server__eq(value, valuelen, RLS_PATH)          ? 1
                      : rls_server__eq(value, valuelen, RLS_HEALTH_PATH) ? 2
                      : rls_server__eq(value, valuelen, RLS_WATCH_PATH)  ? 3
                                                                         : 0;
        size_t n = valuelen < sizeof(st->path) - 1 ? valuelen : sizeof(st->path) - 1;
        memcpy(st->path, value, n);
        st->path[n] = '\0';
    } else if (rls_server__eq(name, namelen, "content-type")) {
        /* application/grpc, optionally +proto or ;params */
        st->grpc_ctype = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                         (valuelen == 16 || value[16] == '+' || value[16] == ';');
    } else if (rls_server__eq(name, namelen, "grpc-timeout")) {
        int64_t ns;
        if (rls_grpc_timeout((const char *)value, valuelen, &ns) < 0) {
            st->bad_timeout = 1;
        } else {
            int64_t now = (int64_t)uv_hrtime();
            st->deadline_ns = ns > INT64_MAX - now ? INT64_MAX : now + ns;
        }
    }
    return 0;
}

static int rls_server__on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                               size_t len, void *ud)
{
    struct rls_conn *c = ud;
    struct rls_server *srv = c->srv;
    struct rls_stream *st = nghttp2_session_get_stream_user_data(h2, id);
    (void)flags;
    if (st == NULL || st->answered)
        return 0; /* answered early: the rest is dropped (flow control still credits it) */
    size_t limit = srv->cfg.max_message + RLS_GRPC_PREFIX;
    const uint8_t *m;
    size_t ml, used;
    if (len > limit - st->len || len > srv->cfg.max_conn_input - c->input) {
        rls_server__fail(c, st, "200", RLS_GRPC_RESOURCE_EXHAUSTED,
                         len > limit - st->len ? "request message too large"
                                               : "too many request bytes on this connection");
        st->reset_after = 1;
        return 0;
    }
    if (st->len + len > st->cap) {
        size_t cap = st->cap ? st->cap : 256;
        while (cap < st->len + len)
            cap *= 2;
        uint8_t *b = realloc(st->body, cap);
        if (b == NULL) {
            rls_server__fail(c, st, "200", RLS_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            st->reset_after = 1;
            return 0;
        }
        st->body = b;
        st->cap = cap;
    }
    memcpy(st->body + st->len, data, len);
    st->len += len;
    c->input += len;
    /* An oversize message is refused as soon as its prefix is in. */
    if (rls_grpc_frame(st->body, st->len, srv->cfg.max_message, &m, &ml, &used) ==
        -SLUICE_ETOOBIG) {
        rls_server__fail(c, st, "200", RLS_GRPC_RESOURCE_EXHAUSTED, "request message too large");
        st->reset_after = 1;
    }
    return 0;
}

static int rls_server__on_frame(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    struct rls_conn *c = ud;
    c->greeted = 1;
    if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct rls_stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (st != NULL && !st->answered)
        rls_server__answer(c, st);
    return 0;
}

/* An early answer has gone out: stop the client sending the rest (gRPC's
 * RST_STREAM NO_ERROR after a complete response).  Sent earlier, the reset
 * would overtake the answer and the client would see only the reset. */
static int rls_server__on_frame_sent(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct rls_stream *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (st != NULL && st->reset_after) {
        st->reset_after = 0;
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    }
    return 0;
}

static int rls_server__on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code, void *ud)
{
    struct rls_conn *c = ud;
    struct rls_stream *st = nghttp2_session_get_stream_user_data(h2, id);
    (void)code;
    if (st == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(h2, id, NULL);
    rls_server__stream_free(c, st);
    return 0;
}

/* ---- listener ---- */

static void rls_server__on_connection(uv_stream_t *l, int status)
{
    struct rls_server *srv = l->data;
    if (status < 0 || srv->closed)
        return;
    if (!acceptgate_admit(&srv->gate))
        return; /* accepted at the next turn */
    struct rls_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->srv = srv;
    uv_tcp_init(srv->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) < 0) {
        uv_close((uv_handle_t *)&c->tcp, rls_server__free_handle);
        return;
    }
    if (srv->stats.connected >= srv->cfg.max_connections) {
        /* Never refuse the newcomer for connections that only hold a slot:
         * close the oldest still silent (no preface and SETTINGS yet), else
         * the one idle longest.  A closed one stops counting at once: its
         * socket is closed then, only its structure waits for libuv. */
        struct rls_conn *victim = NULL;
        for (struct rls_conn *o = srv->conns; o != NULL; o = o->next) {
            if (o->closing)
                continue;
            if (victim == NULL || (!o->greeted && victim->greeted) ||
                (o->greeted == victim->greeted &&
                 (o->greeted ? o->last_ms <= victim->last_ms : o->born_ms <= victim->born_ms)))
                victim = o;
        }
        if (victim == NULL) {
            srv->stats.rejected_connections++;
            uv_close((uv_handle_t *)&c->tcp, rls_server__free_handle);
            return;
        }
        srv->stats.evicted++;
        rls_server__conn_close(victim);
        rls_server__log(srv);
    }
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0) {
        uv_close((uv_handle_t *)&c->tcp, rls_server__free_handle);
        return;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, rls_server__on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, rls_server__on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, rls_server__on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, rls_server__on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, rls_server__on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, rls_server__on_frame_sent);
    c->alloc = (nghttp2_mem){.mem_user_data = c,
                             .malloc = rls_server__malloc,
                             .free = rls_server__free,
                             .calloc = rls_server__calloc,
                             .realloc = rls_server__realloc};
    int rc = nghttp2_session_server_new3(&c->h2, cb, c, NULL, &c->alloc);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) {
        uv_close((uv_handle_t *)&c->tcp, rls_server__free_handle);
        return;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, srv->cfg.max_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
    };
    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0]));
    c->next = srv->conns;
    if (c->next != NULL)
        c->next->prev = c;
    srv->conns = c;
    srv->stats.connections++;
    srv->stats.connected++;
    c->born_ms = c->last_ms = uv_now(srv->loop);
    uv_tcp_nodelay(&c->tcp, 1);
    rls_server__reading(c, 1);
    rls_server__flush(c);
    rls_server__account(c);
}

/* Once a second: connections silent past the handshake deadline, or idle
 * past idle_timeout_ms (told with GOAWAY, closed once it is written). */
static void rls_server__on_sweep(uv_timer_t *t)
{
    struct rls_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    struct rls_conn *next;
    for (struct rls_conn *c = srv->conns; c != NULL; c = next) {
        next = c->next;
        if (c->closing || c->goaway)
            continue;
        if (c->hung_up)
            continue;
        if (!c->greeted && now - c->born_ms >= srv->cfg.handshake_timeout_ms) {
            srv->stats.timeouts++;
            rls_server__close_soon(c);
        } else if (c->greeted && srv->cfg.idle_timeout_ms != 0 && c->streams == NULL &&
                   now - c->last_ms >= srv->cfg.idle_timeout_ms) {
            srv->stats.timeouts++;
            nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR);
            c->goaway = 1;
            rls_server__reading(c, 0);
            rls_server__flush(c);
        }
    }
    rls_server__log(srv);
}

static void *rls_server__heaviest(void *ud, size_t *bytes)
{
    struct rls_server *srv = ud;
    struct rls_conn *worst = NULL;
    for (struct rls_conn *c = srv->conns; c != NULL; c = c->next) {
        if (c->closing)
            continue;
        rls_server__account(c);
        if (worst == NULL || c->mem > worst->mem)
            worst = c;
    }
    if (worst != NULL)
        *bytes = worst->mem;
    return worst;
}

static void rls_server__evict(void *ud, void *conn)
{
    struct rls_server *srv = ud;
    srv->stats.memory_evicted++;
    rls_server__conn_close(conn);
    rls_server__log(srv);
}

int rls_server_create(uv_loop_t *loop, const struct rls_server_config *cfg, struct rls_service *svc,
                      struct rls_server **out)
{
    if (loop == NULL || cfg == NULL || cfg->bind == NULL || svc == NULL)
        return -SLUICE_EINVAL;
    struct rls_server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -SLUICE_ENOMEM;
    s->loop = loop;
    s->svc = svc;
    s->cfg = *cfg;
    s->bind = strdup(cfg->bind);
    if (s->bind == NULL) {
        free(s);
        return -SLUICE_ENOMEM;
    }
    s->cfg.bind = s->bind;
    if (s->cfg.max_connections == 0)
        s->cfg.max_connections = 1024;
    if (s->cfg.max_streams == 0)
        s->cfg.max_streams = 100;
    if (s->cfg.max_message == 0)
        s->cfg.max_message = 65536;
    if (s->cfg.max_conn_input == 0)
        s->cfg.max_conn_input = 256 * 1024;
    if (s->cfg.max_conn_output == 0)
        s->cfg.max_conn_output = 1024 * 1024;
    if (s->cfg.handshake_timeout_ms == 0)
        s->cfg.handshake_timeout_ms = RLS_DEFAULT_HANDSHAKE_MS;
    if (s->cfg.max_watches == 0)
        s->cfg.max_watches = RLS_DEFAULT_MAX_WATCHES;
    s->pool.heaviest = rls_server__heaviest;
    s->pool.evict = rls_server__evict;
    s->pool.ud = s;
    if (cfg->budget != NULL)
        clientmem_join(cfg->budget, &s->pool);
    *out = s;
    return 0;
}

int rls_server_start(struct rls_server *srv)
{
    char err[400];
    int rc = tcp_listen(srv->loop, &srv->listener, srv->bind, rls_server__on_connection,
                        &srv->listener_open, &srv->port, NULL, err, sizeof(err));
    srv->listener.data = srv;
    if (rc < 0) {
        snprintf(srv->err, sizeof(srv->err), "grpc: %s", err);
        return rc;
    }
    if (acceptgate_init(&srv->gate, srv->loop, (uv_stream_t *)&srv->listener,
                        rls_server__on_connection, 0) < 0) {
        snprintf(srv->err, sizeof(srv->err), "grpc: cannot start the accept budget");
        return -SLUICE_EIO;
    }
    if (uv_idle_init(srv->loop, &srv->resume) != 0) {
        snprintf(srv->err, sizeof(srv->err), "grpc: cannot start the turn budget");
        return -SLUICE_EIO;
    }
    if (uv_check_init(srv->loop, &srv->turn_end) != 0) {
        uv_close((uv_handle_t *)&srv->resume, NULL);
        snprintf(srv->err, sizeof(srv->err), "grpc: cannot start the turn budget");
        return -SLUICE_EIO;
    }
    srv->resume.data = srv;
    srv->turn_end.data = srv;
    uv_check_start(&srv->turn_end, rls_server__on_turn_end);
    uv_unref((uv_handle_t *)&srv->turn_end);
    srv->turn_init = 1;
    uv_timer_init(srv->loop, &srv->sweep);
    srv->sweep.data = srv;
    srv->sweep_init = 1;
    uv_timer_start(&srv->sweep, rls_server__on_sweep, 1000, 1000);
    uv_unref((uv_handle_t *)&srv->sweep);
    uv_timer_init(srv->loop, &srv->watch_poll);
    srv->watch_poll.data = srv;
    srv->watch_init = 1;
    uv_unref((uv_handle_t *)&srv->watch_poll);
    return 0;
}

const char *rls_server_error(const struct rls_server *srv)
{
    return srv->err;
}

void rls_server_close(struct rls_server *srv)
{
    if (srv == NULL || srv->closed)
        return;
    srv->closed = 1;
    clientmem_leave(&srv->pool); /* the budget's owner may go first */
    acceptgate_close(&srv->gate);
    if (srv->turn_init) {
        srv->turn_init = 0;
        uv_close((uv_handle_t *)&srv->resume, NULL);
        uv_close((uv_handle_t *)&srv->turn_end, NULL);
    }
    if (srv->sweep_init)
        uv_close((uv_handle_t *)&srv->sweep, NULL);
    if (srv->watch_init) {
        srv->watch_init = 0;
        uv_close((uv_handle_t *)&srv->watch_poll, NULL);
    }
    if (srv->listener_open)
        uv_close((uv_handle_t *)&srv->listener, NULL);
    for (struct rls_conn *c = srv->conns; c != NULL; c = c->next)
        rls_server__conn_close(c);
}

void rls_server_destroy(struct rls_server *srv)
{
    if (srv == NULL)
        return;
    free(srv->bind);
    free(srv);
}

void rls_server_get_stats(const struct rls_server *srv, struct rls_server_stats *out)
{
    *out = srv->stats;
}
