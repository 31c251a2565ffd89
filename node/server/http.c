/*
 * http: the daemon's HTTP/1.1 listener (see http.h for the contract).
 *
 * Design note.  Requests to this listener are small (a scrape every few
 * seconds, a proxy's subrequest per client request) and answers are built
 * whole, so the server is deliberately plain: one fixed input buffer per
 * connection, the whole answer built in one allocation and written with
 * uv_try_write, the remainder (if the socket is full) queued with one
 * uv_write while reads are paused.  Nothing here can block the loop, and
 * every resource a client can hold is bounded: connections (max_conns),
 * input (HTTP_MAX_REQUEST), output (one answer), time (idle_timeout_ms per
 * request, not per byte).
 *
 * A turn's budget.  Every route's last answer is timed.  Once the answers
 * of one loop turn took HTTP_TURN_BUDGET_NS, a request for a route whose
 * last answer took more than HTTP_CHEAP_NS (a /metrics render, not a
 * /health or a decision) waits: its connection stops being read and joins
 * a queue that an idle handle serves at the next turns, in order, within
 * the same budget.  So three hundred connections pipelining /metrics get
 * about a render a turn between the other clients' work, instead of a
 * turn of hundreds of renders, and the cheap routes are never queued.
 * Closing is budgeted too (closebudget.h): a turn closes at most
 * CLOSEBUDGET_PER_TURN connections that hung up or outstayed their
 * deadline; the rest stop being read and wait in a second queue, closed
 * in order at the next turns by the same idle handle.  Evictions for a
 * newcomer and over the memory budget are not deferred: they are bounded
 * by the accepts a turn and by what is over.
 *
 * Parsing.  libhttp-parser is a streaming parser; http_parse_request runs
 * a fresh one over the whole buffered head each time more bytes arrive
 * (heads are at most 8 KiB, so re-parsing is cheaper than keeping partial
 * state) and pauses it at the end of the headers, so a pipelined next
 * request stays in the buffer.  Header and URL pointers point into the
 * caller's buffer.
 *
 * Closing after an error uses a lingering close, as web servers do: the
 * write side is shut down once the answer is out, and input is read and
 * discarded until the client closes (or the timer fires).  Closing at once
 * with unread input would make the kernel send a reset, which can destroy
 * the answer before the client reads it.
 *
 * Wire format (HTTP/1.1, RFC 9112; only what a scraper or a proxy's
 * subrequest sends is needed):
 *
 *   request                              response
 *   +---------------------------------+  +-----------------------------------+
 *   | GET /v1/throttle?key=k HTTP/1.1 |  | HTTP/1.1 429 Too Many Requests    |
 *   | Host: h:9464 CRLF               |  | Content-Type: text/plain; ... CRLF|
 *   | X-Sluice-Key: k CRLF   (if any) |  | Content-Length: N CRLF            |
 *   | ...  (<= 8 KiB in all)          |  | Connection: keep-alive|close CRLF |
 *   | CRLF                            |  | (route's headers: Retry-After ...)|
 *   +---------------------------------+  | CRLF                              |
 *                                        | N bytes of body                   |
 *                                        +-----------------------------------+
 */
#include "http.h"

#include <http_parser.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "acceptgate.h"
#include "clientmem.h"
#include "closebudget.h"
#include "log.h"
#include "sluice/error.h"
#include "tcp.h"

#define HTTP_TEXT_PLAIN "text/plain; charset=utf-8"

/* ---- the request parser ---- */

struct http__parse {
    struct http_request *out;
    const char *field; /* the header name being read, until its value */
    size_t field_len;
    int done;
};

static int http__on_url(http_parser *p, const char *at, size_t len)
{
    struct http__parse *x = p->data;
    /* A fresh parser over a whole head calls this once. */
    const char *q = memchr(at, '?', len);
    x->out->path = at;
    x->out->path_len = q != NULL ? (size_t)(q - at) : len;
    if (q != NULL) {
        x->out->query = q + 1;
        x->out->query_len = len - (size_t)(q - at) - 1;
    }
    return 0;
}

static int http__on_field(http_parser *p, const char *at, size_t len)
{
    struct http__parse *x = p->data;
    x->field = at;
    x->field_len = len;
    return 0;
}

static int http__on_value(http_parser *p, const char *at, size_t len)
{
    struct http__parse *x = p->data;
    struct http_request *r = x->out;
    if (x->field == NULL)
        return 0;
    if (r->nheaders < HTTP_MAX_HEADERS) {
        r->headers[r->nheaders++] = (struct http_header){
            .name = x->field, .name_len = x->field_len, .value = at, .value_len = len};
    }
    x->field = NULL;
    return 0;
}

static int http__on_headers_complete(http_parser *p)
{
    struct http__parse *x = p->data;
    x->done = 1;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings http__settings = {
    .on_url = http__on_url,
    .on_header_field = http__on_field,
    .on_header_value = http__on_value,
    .on_headers_complete = http__on_headers_complete,
};

int http_parse_request(const char *buf, size_t len, size_t max, struct http_request *out)
{
    http_parser p;
    struct http__parse x = {.out = out};
    size_t lim = len < max ? len : max;
    memset(out, 0, sizeof(*out));
    http_parser_init(&p, HTTP_REQUEST);
    p.data = &x;
    size_t n = http_parser_execute(&p, &http__settings, buf, lim);
    enum http_errno e = HTTP_PARSER_ERRNO(&p);
    if (!x.done) {
        if (e != HPE_OK)
            return -SLUICE_EPROTO;
        return len >= max ? -SLUICE_ETOOBIG : 0;
    }
    if (e != HPE_PAUSED && e != HPE_OK)
        return -SLUICE_EPROTO;
    /* Paused in on_headers_complete, the parser may or may not have
     * counted the head's last byte: the head ends at the first empty line,
     * which the parser has just validated. */
    if (out->path == NULL || out->path < buf || out->path >= buf + lim)
        return -SLUICE_EPROTO;
    /* From the request line on (the parser skips empty lines before it). */
    size_t end = 0;
    for (size_t i = (size_t)(out->path - buf); i + 1 < lim && end == 0; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            end = i + 2;
        else if (buf[i + 1] == '\r' && i + 2 < lim && buf[i + 2] == '\n')
            end = i + 3;
    }
    if (end == 0)
        return -SLUICE_EPROTO;
    /* The parser's head must be the one found here: a request line it
     * reads across a bare line feed ("GET /a H:\n\r\n1.1\r\nX: y\n\r\n")
     * ends its head past the first empty line, and its headers would then
     * come from what the listener takes for the next request.  The parser
     * has consumed its whole head but perhaps its last byte, and an empty
     * line is two bytes at least: a later head shows as n > end. */
    if (n > end)
        return -SLUICE_EPROTO;
    if (p.http_major != 1 || p.http_minor > 1)
        return -SLUICE_EPROTO;
    /* Obsolete line folding (a header line starting with a space or tab),
     * which RFC 9112 lets a server refuse and this one does. */
    for (size_t i = 0; i + 1 < end; i++)
        if (buf[i] == '\n' && (buf[i + 1] == ' ' || buf[i + 1] == '\t'))
            return -SLUICE_EPROTO;
    /* libhttp-parser tolerates several spaces after the method; RFC 9112
     * has one, and the path starts right after it. */
    const char *sp = memchr(buf, ' ', (size_t)(out->path - buf));
    if (out->path_len == 0 || out->path[0] != '/' || sp == NULL || out->path != sp + 1)
        return -SLUICE_EPROTO;
    if (p.method == HTTP_GET)
        out->method = HTTP_REQ_GET;
    else if (p.method == HTTP_HEAD)
        out->method = HTTP_REQ_HEAD;
    else if (p.method == HTTP_POST)
        out->method = HTTP_REQ_POST;
    else if (p.method == HTTP_DELETE)
        out->method = HTTP_REQ_DELETE;
    else
        out->method = HTTP_REQ_OTHER;
    out->keep_alive = http_should_keep_alive(&p) ? 1 : 0;
    out->has_body =
        (p.flags & F_CHUNKED) != 0 || (p.content_length > 0 && p.content_length != ULLONG_MAX);
    return (int)end;
}

const char *http_request_header(const struct http_request *r, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < r->nheaders; i++) {
        if (r->headers[i].name_len == nl && strncasecmp(r->headers[i].name, name, nl) == 0) {
            if (len != NULL)
                *len = r->headers[i].value_len;
            return r->headers[i].value;
        }
    }
    return NULL;
}

static int http__hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int http_query_get(const char *q, size_t qlen, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name), i = 0;
    while (q != NULL && i < qlen) {
        size_t end = i;
        while (end < qlen && q[end] != '&')
            end++;
        const char *eq = memchr(q + i, '=', end - i);
        size_t klen = eq != NULL ? (size_t)(eq - (q + i)) : end - i;
        if (klen == nl && memcmp(q + i, name, nl) == 0) {
            size_t o = 0;
            for (size_t k = eq != NULL ? (size_t)(eq - q) + 1 : end; k < end; k++) {
                char c = q[k];
                if (c == '+') {
                    c = ' ';
                } else if (c == '%') {
                    if (k + 2 >= end)
                        return -SLUICE_EPROTO;
                    int hi = http__hex(q[k + 1]), lo = http__hex(q[k + 2]);
                    if (hi < 0 || lo < 0)
                        return -SLUICE_EPROTO;
                    c = (char)(hi * 16 + lo);
                    k += 2;
                    if (c == '\0')
                        return -SLUICE_EPROTO;
                }
                if (o + 1 >= outlen)
                    return -SLUICE_ETOOBIG;
                out[o++] = c;
            }
            if (outlen == 0)
                return -SLUICE_ETOOBIG;
            out[o] = '\0';
            return (int)o;
        }
        i = end + 1;
    }
    return -SLUICE_ENOENT;
}

/* ---- answers ---- */

static void http__reply_init(struct http_reply *r)
{
    memset(r, 0, sizeof(*r));
    r->status = 200;
}

static void http__reply_free(struct http_reply *r)
{
    free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
}

void http_reply_header(struct http_reply *r, const char *name, const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "%s: ", name);
    va_list ap;
    va_start(ap, fmt);
    int m = n > 0 && (size_t)n < sizeof(line)
                ? vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap)
                : -1;
    va_end(ap);
    if (m < 0) {
        r->oom = 1;
        return;
    }
    size_t len = (size_t)n + (size_t)m;
    if (len + 2 > sizeof(line) || r->headers_len + len + 2 > sizeof(r->headers)) {
        r->oom = 1;
        return;
    }
    /* A value must not carry a line end into the head. */
    for (size_t k = 0; k < len; k++)
        if (line[k] == '\r' || line[k] == '\n')
            line[k] = ' ';
    memcpy(r->headers + r->headers_len, line, len);
    r->headers_len += len;
    memcpy(r->headers + r->headers_len, "\r\n", 2);
    r->headers_len += 2;
}

void http_reply_body(struct http_reply *r, const char *p, size_t n)
{
    if (r->oom || n == 0)
        return;
    if (r->body_len + n > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 256;
        while (cap < r->body_len + n)
            cap *= 2;
        char *b = realloc(r->body, cap);
        if (b == NULL) {
            r->oom = 1;
            return;
        }
        r->body = b;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, p, n);
    r->body_len += n;
}

void http_reply_text(struct http_reply *r, int status, const char *text)
{
    r->status = status;
    r->body_len = 0;
    http_reply_body(r, text, strlen(text));
}

/* ---- the listener ---- */

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wreq;
    uv_shutdown_t sreq;
    struct http_server *m;
    struct conn *prev, *next;
    char *out; /* the answer being written by wreq, or NULL */
    size_t out_len;
    int handles; /* open libuv handles; freed at 0 */
    int parked;  /* in the server's queue of requests waiting for a turn's budget */
    struct conn *park_prev, *park_next;
    int hung_up; /* in the server's queue of connections to close at a later turn */
    struct conn *hu_prev, *hu_next;
    int writing, closing, lingering, close_after;
    size_t len;        /* bytes in in[] */
    int idle;          /* 1: waiting for (more of) a request, nothing being answered */
    uint64_t since_ms; /* uv_now at accept or when the last answer went out */
    size_t mem;        /* counted in the client memory budget (http__conn_mem) */
    char in[HTTP_MAX_REQUEST];
};

struct http_route {
    const char *path;
    size_t len;
    http_handler_fn fn;
    void *ud;
    unsigned methods; /* HTTP_M_* it answers */
    int subpaths;     /* 1: also "path/..." (http_route_methods) */
    uint64_t cost_ns; /* how long its last answer took */
};

struct http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct acceptgate gate; /* accepts per loop turn */
    int listener_open, closed;
    char *bind;
    size_t max_conns;
    uint64_t idle_ms;
    struct http_route routes[HTTP_MAX_ROUTES];
    size_t nroutes;
    struct conn *conns;
    struct conn *park_head, *park_tail; /* waiting for a turn's budget (FIFO) */
    struct conn *hu_head, *hu_tail;     /* to close at a later turn (FIFO) */
    uv_idle_t resume;                   /* serves both queues at the next turn */
    uv_check_t turn_end;                /* after each turn's I/O: a fresh budget */
    int resume_init;
    uint64_t turn_ns;          /* this turn's answers' time so far */
    struct closebudget closes; /* hung-up or timed-out connections closed this turn */
    struct http_stats st;
    struct clientmem_pool pool; /* in the daemon's one client budget, if given */
    uint64_t logged_at;         /* uv_now of the last eviction/timeout line */
    uint64_t logged_evicted, logged_timeouts, logged_mem; /* counts at that line */
    int port;
    char discard[4096]; /* reads of lingering connections land here */
    char err[512];
};

static void *http__heaviest(void *ud, size_t *bytes);
static void http__evict(void *ud, void *conn);

int http_create(uv_loop_t *loop, const struct http_config *cfg, struct http_server **out)
{
    if (loop == NULL || cfg == NULL || cfg->bind == NULL)
        return -SLUICE_EINVAL;
    struct http_server *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -SLUICE_ENOMEM;
    m->bind = strdup(cfg->bind);
    if (m->bind == NULL) {
        free(m);
        return -SLUICE_ENOMEM;
    }
    m->loop = loop;
    m->max_conns = cfg->max_conns ? cfg->max_conns : HTTP_DEFAULT_MAX_CONNS;
    m->idle_ms = cfg->idle_timeout_ms ? cfg->idle_timeout_ms : HTTP_DEFAULT_IDLE_MS;
    m->pool.heaviest = http__heaviest;
    m->pool.evict = http__evict;
    m->pool.ud = m;
    if (cfg->budget != NULL)
        clientmem_join(cfg->budget, &m->pool);
    *out = m;
    return 0;
}

int http_route(struct http_server *h, const char *path, http_handler_fn fn, void *ud)
{
    int rc = http_route_methods(h, path, HTTP_M_GET | HTTP_M_HEAD, fn, ud);
    if (rc == 0)
        h->routes[h->nroutes - 1].subpaths = 0;
    return rc;
}

int http_route_methods(struct http_server *h, const char *path, unsigned methods,
                       http_handler_fn fn, void *ud)
{
    if (h == NULL || path == NULL || fn == NULL || methods == 0)
        return -SLUICE_EINVAL;
    size_t len = strlen(path);
    for (size_t i = 0; i < h->nroutes; i++)
        if (h->routes[i].len == len && memcmp(h->routes[i].path, path, len) == 0)
            return -SLUICE_EEXIST;
    if (h->nroutes == HTTP_MAX_ROUTES)
        return -SLUICE_EFULL;
    h->routes[h->nroutes++] = (struct http_route){
        .path = path, .len = len, .fn = fn, .ud = ud, .methods = methods, .subpaths = 1};
    return 0;
}

const char *http_error(const struct http_server *h)
{
    return h->err;
}

int http_port(const struct http_server *h)
{
    return h->port;
}

void http_get_stats(const struct http_server *h, struct http_stats *out)
{
    *out = h->st;
}

static void http__conn_on_close(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->handles > 0)
        return;
    struct http_server *m = c->m;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        m->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    free(c->out);
    free(c);
}

/* What c holds: the structure with its input buffer, and the answer
 * waiting for the socket. */
static size_t http__conn_mem(const struct conn *c)
{
    return sizeof(*c) + (c->out != NULL ? c->out_len : 0);
}

static void http__conn_account(struct conn *c)
{
    size_t now = c->closing ? 0 : http__conn_mem(c);
    clientmem_charge(&c->m->pool, c->mem, now);
    c->mem = now;
}

/* One line per HTTP_LOG_INTERVAL_MS, when connections were closed for
 * newcomers, over their deadline or over the memory budget since the
 * last; what happens in between is told by the next one. */
static void http__log(struct http_server *m)
{
    uint64_t now = uv_now(m->loop);
    if (m->st.evicted == m->logged_evicted && m->st.timeouts == m->logged_timeouts &&
        m->st.mem_evicted == m->logged_mem)
        return;
    if (m->logged_at != 0 && now - m->logged_at < HTTP_LOG_INTERVAL_MS)
        return;
    log_warn(
        "HTTP listener: closed %llu connections for newcomers over %zu (the longest "
        "stalled first), %llu past the %llu ms deadline, %llu over the client memory "
        "budget; %llu, %llu and %llu so far",
        (unsigned long long)(m->st.evicted - m->logged_evicted), m->max_conns,
        (unsigned long long)(m->st.timeouts - m->logged_timeouts), (unsigned long long)m->idle_ms,
        (unsigned long long)(m->st.mem_evicted - m->logged_mem), (unsigned long long)m->st.evicted,
        (unsigned long long)m->st.timeouts, (unsigned long long)m->st.mem_evicted);
    m->logged_at = now;
    m->logged_evicted = m->st.evicted;
    m->logged_timeouts = m->st.timeouts;
    m->logged_mem = m->st.mem_evicted;
}

/* Takes c out of the queue of requests waiting for a turn's budget. */
static void http__conn_unpark(struct conn *c)
{
    if (!c->parked)
        return;
    struct http_server *m = c->m;
    if (c->park_prev != NULL)
        c->park_prev->park_next = c->park_next;
    else
        m->park_head = c->park_next;
    if (c->park_next != NULL)
        c->park_next->park_prev = c->park_prev;
    else
        m->park_tail = c->park_prev;
    c->park_prev = c->park_next = NULL;
    c->parked = 0;
}

/* Takes c out of the queue of connections to close at a later turn. */
static void http__conn_unqueue(struct conn *c)
{
    if (!c->hung_up)
        return;
    struct http_server *m = c->m;
    if (c->hu_prev != NULL)
        c->hu_prev->hu_next = c->hu_next;
    else
        m->hu_head = c->hu_next;
    if (c->hu_next != NULL)
        c->hu_next->hu_prev = c->hu_prev;
    else
        m->hu_tail = c->hu_prev;
    c->hu_prev = c->hu_next = NULL;
    c->hung_up = 0;
}

static void http__conn_close(struct conn *c)
{
    if (c->closing)
        return;
    http__conn_unpark(c);
    http__conn_unqueue(c);
    c->closing = 1;
    c->m->st.open_conns--; /* its socket is closed now; the structure waits for libuv */
    http__conn_account(c);
    uv_close((uv_handle_t *)&c->tcp, http__conn_on_close);
    uv_close((uv_handle_t *)&c->timer, http__conn_on_close);
}

static void http__on_resume(uv_idle_t *h);

/* c hung up, its socket failed or it outstayed its deadline: closed now,
 * or, once this turn's close budget is spent, at a later turn (not read
 * meanwhile, its timer stopped, its unanswered input dropped). */
static void http__conn_close_soon(struct conn *c)
{
    struct http_server *m = c->m;
    if (c->closing || c->hung_up)
        return;
    if (closebudget_take(&m->closes, !m->resume_init)) {
        http__conn_close(c);
        return;
    }
    http__conn_unpark(c);
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_timer_stop(&c->timer);
    c->len = 0;
    c->hung_up = 1;
    c->hu_next = NULL;
    c->hu_prev = m->hu_tail;
    if (m->hu_tail != NULL)
        m->hu_tail->hu_next = c;
    else
        m->hu_head = c;
    m->hu_tail = c;
    m->st.deferred_closes++;
    uv_idle_start(&m->resume, http__on_resume);
}

static void http__conn_on_timeout(uv_timer_t *t)
{
    struct conn *c = t->data;
    if (!c->lingering)
        c->m->st.timeouts++;
    http__conn_close_soon(c);
    http__log(c->m);
}

static void http__conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)suggested;
    if (c->lingering) {
        *buf = uv_buf_init(c->m->discard, sizeof(c->m->discard));
        return;
    }
    *buf = uv_buf_init(c->in + c->len, (unsigned)(sizeof(c->in) - c->len));
}

static void http__conn_process(struct conn *c);
static void http__conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void http__conn_on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = req->data;
    if (status < 0)
        http__conn_close_soon(c);
}

/* The answer is out and the connection must end: half-close and read
 * (discarding) until the client closes or the timer fires. */
static void http__conn_linger(struct conn *c)
{
    if (c->closing || c->lingering)
        return;
    c->lingering = 1;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, http__conn_on_shutdown) < 0) {
        http__conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, http__conn_on_timeout, c->m->idle_ms < 2000 ? c->m->idle_ms : 2000,
                   0);
    uv_read_start((uv_stream_t *)&c->tcp, http__conn_alloc, http__conn_on_read);
}

/* A response is fully handed to the kernel. */
static void http__conn_sent(struct conn *c)
{
    c->since_ms = uv_now(c->m->loop);
    if (c->close_after) {
        http__conn_linger(c);
        return;
    }
    uv_timer_start(&c->timer, http__conn_on_timeout, c->m->idle_ms, 0);
}

static void http__conn_on_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    free(c->out);
    c->out = NULL;
    c->writing = 0;
    http__conn_account(c);
    if (c->closing || c->hung_up)
        return;
    if (status < 0) {
        http__conn_close_soon(c);
        return;
    }
    http__conn_sent(c);
    if (c->lingering || c->closing)
        return;
    http__conn_process(c);
}

static const char *http__reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 503:
        return "Service Unavailable";
    default:
        return status >= 500 ? "Internal Server Error" : "Unknown";
    }
}

/* Builds and sends one answer. */
static void http__conn_answer(struct conn *c, int head_only, const struct http_reply *r)
{
    int status = r->status >= 100 && r->status <= 599 ? r->status : 500;
    const char *ctype = r->content_type != NULL ? r->content_type : HTTP_TEXT_PLAIN;
    size_t cap = 160 + strlen(ctype) + r->headers_len + (head_only ? 0 : r->body_len);
    char *out = malloc(cap);
    if (out == NULL) {
        http__conn_close(c);
        return;
    }
    int n = snprintf(out, cap,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: %s\r\n",
                     status, http__reason(status), ctype, r->body_len,
                     c->close_after ? "close" : "keep-alive");
    size_t len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    memcpy(out + len, r->headers, r->headers_len);
    len += r->headers_len;
    memcpy(out + len, "\r\n", 2);
    len += 2;
    if (!head_only && r->body_len > 0) {
        memcpy(out + len, r->body, r->body_len);
        len += r->body_len;
    }
    c->m->st.requests++;
    c->idle = 0;
    uv_buf_t ub = uv_buf_init(out, (unsigned)len);
    int w = uv_try_write((uv_stream_t *)&c->tcp, &ub, 1);
    if (w == UV_EAGAIN || w == UV_ENOSYS)
        w = 0;
    if (w < 0) {
        free(out);
        http__conn_close(c);
        return;
    }
    if ((size_t)w == len) {
        free(out);
        http__conn_sent(c);
        return;
    }
    /* The socket is full: queue the rest and stop reading until it drains. */
    c->out = out;
    c->out_len = len;
    http__conn_account(c);
    ub = uv_buf_init(out + w, (unsigned)(len - (size_t)w));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &ub, 1, http__conn_on_write) < 0) {
        http__conn_close(c);
        return;
    }
    c->writing = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
}

static void http__conn_error(struct conn *c, int status, const char *body)
{
    struct http_reply r;
    http__reply_init(&r);
    http_reply_text(&r, status, body);
    c->close_after = 1;
    http__conn_answer(c, 0, &r);
    http__reply_free(&r);
}

static struct http_route *http__route(struct http_server *m, const struct http_request *req)
{
    for (size_t i = 0; i < m->nroutes; i++) {
        struct http_route *ro = &m->routes[i];
        if ((ro->len == req->path_len && memcmp(ro->path, req->path, req->path_len) == 0) ||
            (ro->subpaths && req->path_len > ro->len && req->path[ro->len] == '/' &&
             memcmp(ro->path, req->path, ro->len) == 0))
            return ro;
    }
    return NULL;
}

/* 1 when req must wait for a later turn: this turn's answers (the queue's
 * at the turn's start and the poll's) took their budget and its route is
 * not a cheap one. */
static int http__must_wait(struct http_server *m, const struct http_request *req)
{
    if (m->turn_ns < HTTP_TURN_BUDGET_NS || !m->resume_init)
        return 0;
    const struct http_route *ro = http__route(m, req);
    return ro != NULL && ro->cost_ns > HTTP_CHEAP_NS;
}

/* c's next request waits for a later turn: c stops being read (its
 * request stays in in[]) and joins the queue's tail. */
static void http__conn_park(struct conn *c)
{
    struct http_server *m = c->m;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->parked = 1;
    c->park_next = NULL;
    c->park_prev = m->park_tail;
    if (m->park_tail != NULL)
        m->park_tail->park_next = c;
    else
        m->park_head = c;
    m->park_tail = c;
    m->st.deferred++;
    uv_idle_start(&m->resume, http__on_resume);
}

static void http__conn_request(struct conn *c, const struct http_request *req)
{
    struct http_server *m = c->m;
    int head_only = req->method == HTTP_REQ_HEAD;
    struct http_reply r;
    if (!req->keep_alive || req->has_body)
        c->close_after = 1;
    http__reply_init(&r);
    if (req->method == HTTP_REQ_OTHER) {
        c->close_after = 1;
        http_reply_text(&r, 405, "method not allowed\n");
        http_reply_header(&r, "Allow", "GET, HEAD, POST, DELETE");
    } else {
        struct http_route *route = http__route(m, req);
        if (route == NULL) {
            http_reply_text(&r, 404, "not found\n");
        } else if (!(route->methods & (1u << req->method))) {
            c->close_after = 1;
            http_reply_text(&r, 405, "method not allowed\n");
            char allow[64];
            int n = snprintf(allow, sizeof(allow), "%s%s%s%s",
                             route->methods & HTTP_M_GET ? "GET, " : "",
                             route->methods & HTTP_M_HEAD ? "HEAD, " : "",
                             route->methods & HTTP_M_POST ? "POST, " : "",
                             route->methods & HTTP_M_DELETE ? "DELETE, " : "");
            http_reply_header(&r, "Allow", "%.*s", n > 2 ? n - 2 : 0, allow);
        } else {
            uint64_t t0 = uv_hrtime();
            route->fn(route->ud, req, &r);
            route->cost_ns = uv_hrtime() - t0;
            m->turn_ns += route->cost_ns;
        }
        if (r.oom) {
            http__reply_free(&r);
            http__reply_init(&r);
            http_reply_text(&r, 500, "out of memory\n");
        }
    }
    http__conn_answer(c, head_only, &r);
    http__reply_free(&r);
}

/* Answers every complete request in the buffer, in order, until one is
 * still being written, the connection must close, or more bytes are
 * needed. */
static void http__conn_process(struct conn *c)
{
    while (!c->writing && !c->closing && !c->lingering) {
        struct http_request r;
        int n = http_parse_request(c->in, c->len, sizeof(c->in), &r);
        if (n == 0) {
            c->idle = 1;
            uv_read_start((uv_stream_t *)&c->tcp, http__conn_alloc, http__conn_on_read);
            return;
        }
        if (n == -SLUICE_ETOOBIG) {
            c->m->st.too_big++;
            http__conn_error(c, 431, "request too large\n");
            return;
        }
        if (n < 0) {
            c->m->st.bad_requests++;
            http__conn_error(c, 400, "bad request\n");
            return;
        }
        if (http__must_wait(c->m, &r)) {
            http__conn_park(c);
            return;
        }
        http__conn_request(c, &r);
        /* r.path pointed into in[]: done with it, drop the head. */
        memmove(c->in, c->in + n, c->len - (size_t)n);
        c->len -= (size_t)n;
    }
}

/* The next turn: a fresh budget for the queue, served in order until it is
 * spent again (the connection then waiting goes back to the queue's head:
 * it keeps its place). */
static void http__on_resume(uv_idle_t *h)
{
    struct http_server *m = h->data;
    while (m->hu_head != NULL && closebudget_take(&m->closes, 0))
        http__conn_close(m->hu_head); /* takes it out of the queue */
    while (m->park_head != NULL && m->turn_ns < HTTP_TURN_BUDGET_NS) {
        struct conn *c = m->park_head;
        http__conn_unpark(c);
        http__conn_process(c);
        if (c->parked) {
            /* back at the tail: put it first again, for the next turn */
            http__conn_unpark(c);
            c->parked = 1;
            c->park_prev = NULL;
            c->park_next = m->park_head;
            if (m->park_head != NULL)
                m->park_head->park_prev = c;
            else
                m->park_tail = c;
            m->park_head = c;
            break;
        }
    }
    if (clientmem_over(&m->pool))
        clientmem_enforce(m->pool.budget);
    if (m->park_head == NULL && m->hu_head == NULL)
        uv_idle_stop(h);
}

static void http__on_turn_end(uv_check_t *h)
{
    struct http_server *m = h->data;
    m->turn_ns = 0;
    closebudget_turn_end(&m->closes);
}

static void http__conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    (void)buf;
    if (nread < 0) {
        http__conn_close_soon(c);
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
    http__conn_process(c);
    /* An answer may have been queued: keep the budget (c may be closed). */
    if (clientmem_over(&c->m->pool))
        clientmem_enforce(c->m->pool.budget);
}

/* The budget's question: the connection holding most (an answer the
 * client does not read); ties go to the one stalled longest. */
static void *http__heaviest(void *ud, size_t *bytes)
{
    struct http_server *m = ud;
    struct conn *worst = NULL;
    for (struct conn *c = m->conns; c != NULL; c = c->next) {
        if (c->closing)
            continue;
        if (worst == NULL || c->mem > worst->mem ||
            (c->mem == worst->mem && c->since_ms <= worst->since_ms))
            worst = c;
    }
    if (worst != NULL)
        *bytes = worst->mem;
    return worst;
}

static void http__evict(void *ud, void *conn)
{
    struct http_server *m = ud;
    m->st.mem_evicted++;
    http__conn_close(conn);
    http__log(m);
}

/* Accepts and closes at once a connection over max_conns. */
static void http__refuse_on_close(uv_handle_t *h)
{
    free(h);
}

static void http__on_connection(uv_stream_t *server, int status)
{
    struct http_server *m = server->data;
    if (status < 0 || m->closed)
        return;
    if (!acceptgate_admit(&m->gate))
        return; /* accepted at the next turn */
    if (m->st.open_conns >= m->max_conns) {
        /* Make room: a newcomer is never turned away for connections that
         * hold a slot without using it.  The victim is one that hung up and
         * waits to be closed if any, else a lingering one (its answer is
         * out), else the one whose last progress (accept
         * or an answer handed to the kernel) is oldest: an idle keep-alive
         * or a pipeliner that never reads its answers, never the newest.
         * A closed connection stops counting at once (its socket is
         * closed; only its structure waits for libuv). */
        struct conn *victim = NULL;
        for (struct conn *o = m->conns; o != NULL; o = o->next) {
            if (o->closing)
                continue;
            if (victim == NULL || (o->hung_up && !victim->hung_up) ||
                (o->hung_up == victim->hung_up &&
                 ((o->lingering && !victim->lingering) ||
                  (o->lingering == victim->lingering && o->since_ms <= victim->since_ms))))
                victim = o;
        }
        if (victim == NULL) {
            uv_tcp_t *t = malloc(sizeof(*t));
            if (t == NULL)
                return;
            uv_tcp_init(m->loop, t);
            (void)uv_accept(server, (uv_stream_t *)t);
            m->st.refused++;
            uv_close((uv_handle_t *)t, http__refuse_on_close);
            return;
        }
        if (!victim->lingering && !victim->hung_up)
            m->st.evicted++;
        http__conn_close(victim);
        http__log(m);
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
        http__conn_close(c);
        return;
    }
    c->idle = 1;
    c->since_ms = uv_now(m->loop);
    http__conn_account(c);
    uv_tcp_nodelay(&c->tcp, 1);
    /* A fixed send buffer (no autotuning up to megabytes): a client that
     * pipelines and never reads gets a few answers, then its connection
     * waits for it, stalled and first to be evicted, instead of having
     * the loop render thousands of answers into the kernel for it. */
    int sndbuf = HTTP_SNDBUF;
    (void)uv_send_buffer_size((uv_handle_t *)&c->tcp, &sndbuf);
    uv_timer_start(&c->timer, http__conn_on_timeout, m->idle_ms, 0);
    uv_read_start((uv_stream_t *)&c->tcp, http__conn_alloc, http__conn_on_read);
}

int http_start(struct http_server *m)
{
    char err[400];
    int rc = tcp_listen(m->loop, &m->listener, m->bind, http__on_connection, &m->listener_open,
                        &m->port, NULL, err, sizeof(err));
    m->listener.data = m;
    if (rc < 0) {
        snprintf(m->err, sizeof(m->err), "http: %s", err);
        return rc;
    }
    if (acceptgate_init(&m->gate, m->loop, (uv_stream_t *)&m->listener, http__on_connection, 0) <
            0 ||
        uv_idle_init(m->loop, &m->resume) != 0) {
        snprintf(m->err, sizeof(m->err), "http: cannot start the turn budgets");
        return -SLUICE_EIO;
    }
    if (uv_check_init(m->loop, &m->turn_end) != 0) {
        uv_close((uv_handle_t *)&m->resume, NULL);
        snprintf(m->err, sizeof(m->err), "http: cannot start the turn budgets");
        return -SLUICE_EIO;
    }
    m->resume.data = m;
    m->turn_end.data = m;
    uv_check_start(&m->turn_end, http__on_turn_end);
    uv_unref((uv_handle_t *)&m->turn_end);
    m->resume_init = 1;
    return 0;
}

void http_close(struct http_server *m)
{
    if (m == NULL || m->closed)
        return;
    m->closed = 1;
    clientmem_leave(&m->pool); /* the budget's owner may go first */
    acceptgate_close(&m->gate);
    if (m->resume_init) {
        m->resume_init = 0;
        uv_close((uv_handle_t *)&m->resume, NULL);
        uv_close((uv_handle_t *)&m->turn_end, NULL);
    }
    if (m->listener_open)
        uv_close((uv_handle_t *)&m->listener, NULL);
    for (struct conn *c = m->conns; c != NULL; c = c->next)
        http__conn_close(c);
}

void http_destroy(struct http_server *m)
{
    if (m == NULL)
        return;
    free(m->bind);
    free(m);
}

static const struct counter_row http__rows[] = {
    COUNTER_ROW(struct http_stats, open_conns, "http_connections", "http_connections",
                COUNTER_GAUGE, "Connections open on the HTTP listener."),
    COUNTER_ROW(struct http_stats, evicted, "http_evictions", "http_evictions_total", COUNTER_TOTAL,
                "HTTP connections closed for a newcomer over --http-max-connections (the "
                "longest stalled first)."),
    COUNTER_ROW(struct http_stats, timeouts, "http_timeouts", "http_timeouts_total", COUNTER_TOTAL,
                "HTTP connections closed past --http-idle-timeout."),
    COUNTER_ROW(struct http_stats, mem_evicted, "http_memory_disconnects",
                "http_memory_disconnects_total", COUNTER_TOTAL,
                "HTTP connections closed, heaviest first, over max_client_memory."),
    COUNTER_ROW(struct http_stats, requests, "http_requests", "http_requests_total", COUNTER_TOTAL,
                "HTTP requests answered, errors included."),
    COUNTER_ROW(struct http_stats, bad_requests, "http_bad_requests", "http_bad_requests_total",
                COUNTER_TOTAL, "HTTP requests answered 400 (malformed)."),
    COUNTER_ROW(struct http_stats, deferred, "http_deferred", "http_deferred_total", COUNTER_TOTAL,
                "HTTP requests for a costly route (/metrics) that waited for a later event loop "
                "turn, that turn's time for answers being spent."),
    COUNTER_ROW(struct http_stats, deferred_closes, "http_deferred_closes",
                "http_deferred_closes_total", COUNTER_TOTAL,
                "HTTP connections that hung up or outstayed --http-idle-timeout closed at a "
                "later event loop turn (64 are closed a turn)."),
};
const struct counter_table http_counters = COUNTER_TABLE(http__rows);
