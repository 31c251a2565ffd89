/* http_lease: POST/DELETE /v1/lease (see http_lease.h). */
#include "http_lease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"
#include "sluice/error.h"

struct http_lease {
    struct commands *cmds;
};

/* Up to n integers of a RESP2 reply: an array of them (*n) or one
 * integer (n == 1).  0, or -SLUICE_EPROTO with the error's text (without
 * "-") in err. */
static int http_lease__ints(const char *p, size_t len, int64_t *v, int n, char *err, size_t errlen)
{
    const char *end = p + len;
    if (len > 0 && p[0] == '-') {
        const char *nl = memchr(p, '\r', len);
        size_t m = nl != NULL ? (size_t)(nl - p - 1) : len - 1;
        snprintf(err, errlen, "%.*s", (int)m, p + 1);
        return -SLUICE_EPROTO;
    }
    if (n > 1) {
        char head[8];
        int hn = snprintf(head, sizeof(head), "*%d\r\n", n);
        if (len < (size_t)hn || memcmp(p, head, (size_t)hn) != 0)
            goto bad;
        p += hn;
    }
    for (int i = 0; i < n; i++) {
        char *e;
        if (p >= end || *p != ':')
            goto bad;
        v[i] = strtoll(p + 1, &e, 10);
        if (e + 2 > end || e[0] != '\r' || e[1] != '\n')
            goto bad;
        p = e + 2;
    }
    return 0;
bad:
    snprintf(err, errlen, "unexpected reply");
    return -SLUICE_EPROTO;
}

/* Runs argv through the command table; fills n integers of its reply. */
static int http_lease__run(struct http_lease *t, size_t argc, const char **argv, int64_t *v, int n,
                           char *err, size_t errlen)
{
    size_t argvlen[16];
    struct resp_buf out;
    int rc;
    for (size_t i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    resp_buf_init(&out);
    rc = commands_execute(t->cmds, argc, argv, argvlen, &out);
    if (rc == 0)
        rc = http_lease__ints(out.data, out.len, v, n, err, errlen);
    else
        snprintf(err, errlen, "%s", sluice_strerror(rc));
    resp_buf_free(&out);
    return rc;
}

/* A decimal whole number of at least 1. */
static int http_lease__num_ok(const char *s)
{
    int nonzero = 0;
    if (*s == '\0' || strlen(s) > 19) /* INT64_MAX has 19 digits */
        return 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        nonzero |= *s != '0';
    }
    return nonzero;
}

static void http_lease__bad(struct http_reply *rep, const char *what)
{
    char msg[600];
    snprintf(msg, sizeof(msg), "%s\n", what);
    http_reply_text(rep, 400, msg);
}

/* Optional numeric parameter: 1 given (in out), 0 absent, -1 bad. */
static int http_lease__opt(const struct http_request *req, const char *name, char *out,
                           size_t outlen)
{
    int n = http_query_get(req->query, req->query_len, name, out, outlen);
    if (n == -SLUICE_ENOENT)
        return 0;
    return n > 0 && http_lease__num_ok(out) ? 1 : -1;
}

static void http_lease__take(struct http_lease *t, const struct http_request *req, const char *key,
                             struct http_reply *rep)
{
    char policy[128], limit[32], qty[32], ttl[32], scope[16], err[512], body[256];
    const char *argv[16];
    size_t argc = 0;
    int64_t v[7];
    int hp = http_query_get(req->query, req->query_len, "policy", policy, sizeof(policy));
    int hq = http_lease__opt(req, "qty", qty, sizeof(qty));
    int ht = http_lease__opt(req, "ttl", ttl, sizeof(ttl));
    int hl = http_lease__opt(req, "limit", limit, sizeof(limit));
    int hs = http_query_get(req->query, req->query_len, "scope", scope, sizeof(scope));
    if (hq < 0 || ht < 0 || hl < 0) {
        http_lease__bad(rep, "qty, ttl and limit are whole numbers from 1");
        return;
    }
    if ((hp > 0) == (hl > 0)) {
        http_lease__bad(rep, "expected policy=NAME or limit=N");
        return;
    }
    argv[argc++] = "SL.LEASE";
    argv[argc++] = key;
    if (hp > 0) {
        argv[argc++] = "POLICY";
        argv[argc++] = policy;
    } else {
        argv[argc++] = "CONCURRENCY";
        argv[argc++] = limit;
    }
    if (hq > 0) {
        argv[argc++] = "QTY";
        argv[argc++] = qty;
    }
    if (ht > 0) {
        argv[argc++] = "TTL";
        argv[argc++] = ttl;
    }
    if (hs > 0) {
        argv[argc++] = "SCOPE";
        argv[argc++] = scope;
    }
    argv[argc++] = "DETACH";
    if (http_lease__run(t, argc, argv, v, 7, err, sizeof(err)) < 0) {
        http_lease__bad(rep, err);
        return;
    }
    /* v: limited, limit, remaining, retry_after_ms, id, ttl_ms, waited_ms */
    rep->content_type = "application/json";
    if (v[0] == 0) {
        http_reply_header(rep, "X-Lease-Id", "%lld", (long long)v[4]);
        snprintf(body, sizeof(body),
                 "{\"id\":%lld,\"ttl_ms\":%lld,\"limit\":%lld,\"remaining\":%lld}\n",
                 (long long)v[4], (long long)v[5], (long long)v[1], (long long)v[2]);
        http_reply_text(rep, 200, body);
        return;
    }
    if (v[3] >= 0) {
        long long secs = (long long)(v[3] / 1000) + (v[3] % 1000 != 0);
        http_reply_header(rep, "Retry-After", "%lld", secs);
    }
    snprintf(body, sizeof(body),
             "{\"limited\":true,\"limit\":%lld,\"remaining\":%lld,\"retry_after_ms\":%lld}\n",
             (long long)v[1], (long long)v[2], (long long)v[3]);
    http_reply_text(rep, 429, body);
}

static void http_lease__on_request(void *ud, const struct http_request *req, struct http_reply *rep)
{
    struct http_lease *t = ud;
    char key[1024], id[32], ttl[32], err[512], body[64];
    const char *argv[6];
    int64_t v = 0;
    size_t plen = strlen(HTTP_LEASE_PATH);
    int kn = http_query_get(req->query, req->query_len, "key", key, sizeof(key));
    if (kn <= 0) {
        http_lease__bad(rep, kn == -SLUICE_ETOOBIG ? "key too long" : "expected key=KEY");
        return;
    }
    if (req->path_len == plen) {
        if (req->method != HTTP_REQ_POST) {
            http_reply_text(rep, 405, "method not allowed\n");
            http_reply_header(rep, "Allow", "POST");
            return;
        }
        http_lease__take(t, req, key, rep);
        return;
    }
    /* /v1/lease/ID */
    size_t idlen = req->path_len - plen - 1;
    if (idlen == 0 || idlen >= sizeof(id)) {
        http_reply_text(rep, 404, "no such lease\n");
        return;
    }
    memcpy(id, req->path + plen + 1, idlen);
    id[idlen] = '\0';
    if (!http_lease__num_ok(id)) {
        http_reply_text(rep, 404, "no such lease\n");
        return;
    }
    argv[1] = key;
    argv[2] = id;
    if (req->method == HTTP_REQ_DELETE) {
        argv[0] = "SL.RELEASE";
        if (http_lease__run(t, 3, argv, &v, 1, err, sizeof(err)) < 0)
            http_lease__bad(rep, err);
        else
            http_reply_text(rep, v == 1 ? 200 : 404, v == 1 ? "released\n" : "no such lease\n");
        return;
    }
    int ht = http_lease__opt(req, "ttl", ttl, sizeof(ttl));
    if (ht < 0) {
        http_lease__bad(rep, "ttl is a whole number of milliseconds from 1");
        return;
    }
    argv[0] = "SL.RENEW";
    argv[3] = "TTL";
    argv[4] = ttl;
    if (http_lease__run(t, ht > 0 ? 5 : 3, argv, &v, 1, err, sizeof(err)) < 0) {
        http_lease__bad(rep, err);
    } else if (v < 0) {
        http_reply_text(rep, 404, "no such lease\n");
    } else {
        rep->content_type = "application/json";
        snprintf(body, sizeof(body), "{\"ttl_ms\":%lld}\n", (long long)v);
        http_reply_text(rep, 200, body);
    }
}

int http_lease_attach(struct http_server *h, struct commands *cmds, struct http_lease **out)
{
    if (h == NULL || cmds == NULL || out == NULL)
        return -SLUICE_EINVAL;
    struct http_lease *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -SLUICE_ENOMEM;
    t->cmds = cmds;
    int rc = http_route_methods(h, HTTP_LEASE_PATH, HTTP_M_POST | HTTP_M_DELETE,
                                http_lease__on_request, t);
    if (rc < 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void http_lease_destroy(struct http_lease *t)
{
    free(t);
}
