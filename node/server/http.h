/*
 * http: the daemon's one HTTP/1.1 listener, on its libuv loop.  The
 * Prometheus endpoint (/metrics, /health: metrics.h) and the decision
 * endpoint (/v1/throttle: daemon/http_throttle.h) are routes on it.
 *
 *   GET, HEAD       routed by exact path; HEAD gets GET's headers, no body
 *   other methods   405 (with Allow: GET, HEAD)
 *   unknown path    404
 *   bad request     400;   head over HTTP_MAX_REQUEST   431;   both then close
 *
 * Requests are parsed by Debian's libhttp-parser (nodejs/http-parser),
 * wrapped in http_parse_request(), a pure function of bytes that the tests
 * and a fuzz target drive directly.
 *
 * Bounds.  A request's head must fit in HTTP_MAX_REQUEST bytes; at most
 * max_conns connections are open: a new one beyond that closes the
 * connection whose last progress (accept, or an answer handed to the
 * kernel) is oldest, waiting for a request or stuck with an answer its
 * client does not read, so no crowd of connections can keep /health from
 * answering.  Each connection's memory (its input buffer and an
 * unsent answer) counts in the daemon's one client budget.  Evictions and
 * timeouts are logged at most every HTTP_LOG_INTERVAL_MS.  A connection that has not completed a
 * request and received its answer within idle_timeout_ms is closed (the timer is not restarted by
 * partial reads, so a client trickling bytes cannot hold a slot).  Answers are written without
 * blocking; while one is in flight the connection's reads are paused.  Keep-alive is honoured
 * (HTTP/1.1 default, "Connection: close" or HTTP/1.0 close after the answer); a request with a body
 * is answered and the connection closed.
 *
 * Everything runs on the loop thread.  Functions return 0 or a negative
 * enum sluice_err.
 */
#ifndef SLUICE_HTTP_H
#define SLUICE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "counter.h"

/* Largest request head accepted (request line + headers + blank line). */
#define HTTP_MAX_REQUEST       8192
#define HTTP_MAX_HEADERS       32
#define HTTP_MAX_ROUTES        8
#define HTTP_DEFAULT_MAX_CONNS 256
#define HTTP_DEFAULT_IDLE_MS   10000
#define HTTP_LOG_INTERVAL_MS   10000
/* A loop turn's time for answers before a costly one waits for the next
 * turn, and what a route's last answer may take to count as cheap (never
 * waits): see http.c's design note. */
#define HTTP_TURN_BUDGET_NS 1000000u
#define HTTP_CHEAP_NS       50000u
/* Each connection's kernel send buffer (SO_SNDBUF), fixed. */
#define HTTP_SNDBUF (64 * 1024)

/* ---- the request parser (pure; exposed for tests) ---- */

enum http_req_method {
    HTTP_REQ_GET = 0,
    HTTP_REQ_HEAD = 1,
    HTTP_REQ_OTHER = 2,
    HTTP_REQ_POST = 3,
    HTTP_REQ_DELETE = 4,
};
/* Method masks for http_route_methods. */
#define HTTP_M_GET    (1u << HTTP_REQ_GET)
#define HTTP_M_HEAD   (1u << HTTP_REQ_HEAD)
#define HTTP_M_POST   (1u << HTTP_REQ_POST)
#define HTTP_M_DELETE (1u << HTTP_REQ_DELETE)

struct http_header {
    const char *name; /* into the input buffer; not NUL-terminated */
    size_t name_len;
    const char *value;
    size_t value_len;
};

struct http_request {
    enum http_req_method method;
    const char *path; /* into the input buffer, query string excluded */
    size_t path_len;
    const char *query; /* after '?', or NULL */
    size_t query_len;
    int keep_alive;  /* 1: the client may send another request */
    int has_body;    /* 1: Content-Length > 0 or Transfer-Encoding given */
    size_t nheaders; /* headers beyond HTTP_MAX_HEADERS are not kept */
    struct http_header headers[HTTP_MAX_HEADERS];
};

/*
 * Parses one request head from buf[0..len).  Returns the number of bytes
 * the head takes (> 0, the request is in *out, whose pointers point into
 * buf), 0 when more bytes are needed (then len < max), -SLUICE_EPROTO for a
 * malformed request (answer 400), or -SLUICE_ETOOBIG when no complete head
 * fits in max bytes (answer 431).  Never reads past buf[len).
 */
int http_parse_request(const char *buf, size_t len, size_t max, struct http_request *out);

/* The value of header name (any case) and its length, or NULL. */
const char *http_request_header(const struct http_request *r, const char *name, size_t *len);

/*
 * Finds parameter name in a query string q[0..qlen) ("a=1&b=x%20y") and
 * writes its percent-decoded value ('+' is a space), NUL-terminated, into
 * out.  Returns the value's length, -SLUICE_ENOENT when absent,
 * -SLUICE_ETOOBIG when it does not fit in outlen - 1 bytes, -SLUICE_EPROTO
 * for a bad escape or a decoded NUL.
 */
int http_query_get(const char *q, size_t qlen, const char *name, char *out, size_t outlen);

/* ---- answers ---- */

/* What a route fills in.  The listener adds Content-Type, Content-Length
 * and Connection. */
struct http_reply {
    int status;               /* 200 when untouched */
    const char *content_type; /* static; NULL: text/plain; charset=utf-8 */
    char headers[1024];       /* extra header lines, each ending CRLF */
    size_t headers_len;
    char *body; /* owned by the reply (http_reply_body*); NULL: empty */
    size_t body_len, body_cap;
    int oom;
};

/* Appends the header line "NAME: VALUE\r\n" (VALUE formatted).  A line
 * that does not fit the reply's header space is dropped and oom set. */
void http_reply_header(struct http_reply *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends n bytes to the body; oom set when an allocation fails. */
void http_reply_body(struct http_reply *r, const char *p, size_t n);
/* Sets the status and a one-line text body (for errors and small answers). */
void http_reply_text(struct http_reply *r, int status, const char *text);

/* A route: answers req into rep (already initialised).  Must not fail;
 * an answer it cannot build is rep->oom (then 500). */
typedef void (*http_handler_fn)(void *ud, const struct http_request *req, struct http_reply *rep);

/* ---- the listener ---- */

struct clientmem_budget;
struct http_config {
    const char *bind;         /* "HOST:PORT", "[V6]:PORT"; required; copied */
    size_t max_conns;         /* 0 = HTTP_DEFAULT_MAX_CONNS */
    uint64_t idle_timeout_ms; /* 0 = HTTP_DEFAULT_IDLE_MS */
    /* The daemon's one client memory budget (clientmem.h), borrowed; the
     * connections' memory counts in it and the heaviest connection of any
     * listener is closed past it.  NULL: not counted. */
    struct clientmem_budget *budget;
};

struct http_server;

/* Creates the listener (nothing bound yet).  Fails with -SLUICE_EINVAL (no
 * bind address) or -SLUICE_ENOMEM. */
int http_create(uv_loop_t *loop, const struct http_config *cfg, struct http_server **out);

/* Routes requests for path (exact, NUL-terminated, static or outliving the
 * server) to fn with ud.  -SLUICE_EFULL beyond HTTP_MAX_ROUTES,
 * -SLUICE_EEXIST for a path already routed. */
int http_route(struct http_server *h, const char *path, http_handler_fn fn, void *ud);
/* A route for the methods in the mask (HTTP_M_*; others are answered 405
 * with Allow) at path and every path below it ("path/..."), as a REST
 * resource with ids.  A request's body is not read (parameters come in
 * the query string), and a connection that sent one is closed after the
 * answer.  Errors as http_route. */
int http_route_methods(struct http_server *h, const char *path, unsigned methods,
                       http_handler_fn fn, void *ud);

/* Resolves the address and listens.  Fails with -SLUICE_EINVAL (an address
 * that does not parse or resolve) or -SLUICE_EIO (bind/listen failed);
 * http_error() then says why in words.  After a failure call http_close
 * as usual. */
int http_start(struct http_server *h);
const char *http_error(const struct http_server *h);
/* The port actually bound (useful with port 0), or 0 before a start. */
int http_port(const struct http_server *h);

/* Closes the listener and every connection (idempotent).  Once the loop
 * has run the close callbacks, http_destroy frees the server. */
void http_close(struct http_server *h);
/* Frees h (NULL is fine); only after http_close and a loop run. */
void http_destroy(struct http_server *h);

struct http_stats {
    uint64_t requests; /* every answered request, errors included */
    uint64_t bad_requests, too_big, timeouts;
    uint64_t refused;         /* connections closed at once: no other to close (0 in practice) */
    uint64_t evicted;         /* connections closed to make room for a newcomer */
    uint64_t mem_evicted;     /* connections closed over the client memory budget */
    uint64_t deferred;        /* requests that waited for a later loop turn's budget */
    uint64_t deferred_closes; /* hung-up or timed-out connections closed at a later turn */
    uint64_t open_conns;
};
void http_get_stats(const struct http_server *h, struct http_stats *out);

/* struct http_stats' rows for INFO's "# Listeners" and /metrics. */
extern const struct counter_table http_counters;

#endif
