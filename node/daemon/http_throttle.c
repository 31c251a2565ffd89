/*
 * http_throttle: the HTTP decision endpoint (see http_throttle.h).
 */
#include "http_throttle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "num.h"
#include "policy.h"
#include "resp.h"
#include "sluice/error.h"

#define HT_MAX_KEY   512 /* as CL.THROTTLE's default bound */
#define HT_MAX_VALUE 32  /* numbers and policy names beyond this are refused */

struct http_throttle {
    struct commands *cmds;
    struct limiter *lim;
    int deny_status;
    int trust_headers; /* read X-Sluice-* (see "Trust" in the header) */
};

/* Copies a header value (len bytes) NUL-terminated into out: its length,
 * or -SLUICE_ETOOBIG / -SLUICE_EPROTO (a NUL inside). */
static int ht__copy(const char *v, size_t len, char *out, size_t outlen)
{
    if (len + 1 > outlen)
        return -SLUICE_ETOOBIG;
    if (memchr(v, '\0', len) != NULL)
        return -SLUICE_EPROTO;
    memcpy(out, v, len);
    out[len] = '\0';
    return (int)len;
}

/* A parameter from the query, else from its header; NUL-terminated into
 * out.  Returns its length, -SLUICE_ENOENT when given neither way, or
 * -SLUICE_ETOOBIG / -SLUICE_EPROTO for a value that does not fit or does
 * not decode. */
static int ht__param(const struct http_throttle *t, const struct http_request *req,
                     const char *name, const char *header, char *out, size_t outlen)
{
    int n = http_query_get(req->query, req->query_len, name, out, outlen);
    if (n != -SLUICE_ENOENT || !t->trust_headers)
        return n;
    size_t len;
    const char *v = http_request_header(req, header, &len);
    if (v == NULL)
        return -SLUICE_ENOENT;
    return ht__copy(v, len, out, outlen);
}

/* key_header=NAME: the key is the first comma-separated element of that
 * request header (X-Forwarded-For's client address), for a proxy that can
 * neither build a query string nor set a header per request (Traefik). */
static int ht__key_from_header(const struct http_request *req, char *out, size_t outlen)
{
    char name[64];
    int n = http_query_get(req->query, req->query_len, "key_header", name, sizeof(name));
    if (n <= 0)
        return n == 0 ? -SLUICE_ENOENT : n;
    size_t len;
    const char *v = http_request_header(req, name, &len);
    if (v == NULL)
        return -SLUICE_ENOENT;
    const char *comma = memchr(v, ',', len);
    if (comma != NULL)
        len = (size_t)(comma - v);
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    while (len > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        len--;
    }
    return ht__copy(v, len, out, outlen);
}

/* Reads "*5" and five integers from a RESP2 reply; 0, or -SLUICE_EPROTO
 * with the error text (without "-") in err when the reply is an error. */
static int ht__reply(const char *p, size_t len, int64_t v[5], char *err, size_t errlen)
{
    const char *end = p + len;
    if (len > 0 && p[0] == '-') {
        const char *nl = memchr(p, '\r', len);
        size_t n = nl != NULL ? (size_t)(nl - p - 1) : len - 1;
        snprintf(err, errlen, "%.*s", (int)n, p + 1);
        return -SLUICE_EPROTO;
    }
    if (len < 4 || memcmp(p, "*5\r\n", 4) != 0) {
        snprintf(err, errlen, "unexpected reply");
        return -SLUICE_EPROTO;
    }
    p += 4;
    for (int i = 0; i < 5; i++) {
        if (p >= end || *p != ':') {
            snprintf(err, errlen, "unexpected reply");
            return -SLUICE_EPROTO;
        }
        char *e;
        v[i] = strtoll(p + 1, &e, 10);
        if (e + 2 > end || e[0] != '\r' || e[1] != '\n') {
            snprintf(err, errlen, "unexpected reply");
            return -SLUICE_EPROTO;
        }
        p = e + 2;
    }
    return 0;
}

static void ht__bad(struct http_throttle *t, struct http_reply *rep, const char *fmt,
                    const char *what)
{
    char msg[600];
    snprintf(msg, sizeof(msg), fmt, what);
    http_reply_text(rep, 400, msg);
}

/* Whether s is a decimal whole number of at least 1 (leading zeros and all). */
static int ht__cost_ok(const char *s)
{
    int nonzero = 0;
    if (*s == '\0')
        return 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return 0;
        nonzero |= *s != '0';
    }
    return nonzero;
}

/* Seconds, rounded up, of a duration in unit_ns (negative: 0). */
static int64_t ht__ceil_s(int64_t v, int64_t unit_ns)
{
    if (v <= 0)
        return 0;
    int64_t ns = num_mul_sat(v, unit_ns);
    return ns / NUM_NS_PER_S + (ns % NUM_NS_PER_S != 0);
}

static void ht__on_request(void *ud, const struct http_request *req, struct http_reply *rep)
{
    struct http_throttle *t = ud;
    char key[HT_MAX_KEY + 1], pol[HT_MAX_VALUE + 1], cost[HT_MAX_VALUE + 1];
    char burst[HT_MAX_VALUE + 1], count[HT_MAX_VALUE + 1], period[HT_MAX_VALUE + 1];
    char charge[HT_MAX_VALUE + 1], period_ms[HT_MAX_VALUE + 8];
    int klen = ht__param(t, req, "key", "X-Sluice-Key", key, sizeof(key));
    if (klen == -SLUICE_ENOENT)
        klen = ht__key_from_header(req, key, sizeof(key));
    if (klen == -SLUICE_ENOENT || klen == 0) {
        ht__bad(t, rep, "%s\n",
                t->trust_headers ? "key is required (?key=KEY, X-Sluice-Key, or ?key_header=NAME)"
                                 : "key is required (?key=KEY or ?key_header=NAME; X-Sluice-* "
                                   "headers are ignored unless http_trust_headers = on)");
        return;
    }
    if (klen < 0) {
        ht__bad(t, rep, "key: %s\n", sluice_strerror(klen));
        return;
    }
    int np = ht__param(t, req, "policy", "X-Sluice-Policy", pol, sizeof(pol));
    int nc = ht__param(t, req, "cost", "X-Sluice-Cost", cost, sizeof(cost));
    int nb = ht__param(t, req, "burst", "X-Sluice-Burst", burst, sizeof(burst));
    int nn = ht__param(t, req, "count", "X-Sluice-Count", count, sizeof(count));
    int nd = ht__param(t, req, "period", "X-Sluice-Period", period, sizeof(period));
    /* charge=Q: a post-paid charge (SL.CHARGE), counted whatever the key
     * holds, for a cost known after the response. */
    int ng = http_query_get(req->query, req->query_len, "charge", charge, sizeof(charge));
    if (ng != -SLUICE_ENOENT && (ng <= 0 || nc != -SLUICE_ENOENT || !ht__cost_ok(charge))) {
        ht__bad(t, rep, "%s\n", "charge: expected a whole number from 1 (and no cost)");
        return;
    }
    if (ng > 0)
        snprintf(cost, sizeof(cost), "%s", charge);
    else if (nc == -SLUICE_ENOENT)
        snprintf(cost, sizeof(cost), "1");
    else if (nc <= 0 || !ht__cost_ok(cost)) {
        /* Cost 0 would answer "allowed" and take nothing: a way around the
         * limit, never a decision a proxy needs. */
        ht__bad(t, rep, "%s\n", "cost: expected a whole number from 1");
        return;
    }
    const char *argv[11];
    size_t argvlen[11], argc;
    int64_t unit_ns, window_s = 0;
    const char *name = "default";
    if (np > 0) {
        if (nb != -SLUICE_ENOENT || nn != -SLUICE_ENOENT || nd != -SLUICE_ENOENT) {
            ht__bad(t, rep, "%s\n", "policy and burst/count/period are exclusive");
            return;
        }
        const struct policy *p = policy_set_find(limiter_policies(t->lim), pol, (size_t)np);
        if (p == NULL) {
            ht__bad(t, rep, "unknown policy '%s'\n", pol);
            return;
        }
        name = p->name;
        window_s = ht__ceil_s(p->algo.period_ns, 1);
        argv[0] = ng > 0 ? "SL.CHARGE" : "SL.THROTTLE";
        argv[1] = key;
        argv[2] = "POLICY";
        argv[3] = pol;
        argv[4] = "QTY";
        argv[5] = cost;
        argc = 6;
        unit_ns = NUM_NS_PER_MS; /* SL.THROTTLE answers in milliseconds */
    } else if (np == -SLUICE_ENOENT && nb > 0 && nn > 0 && nd > 0 && ng > 0) {
        /* CL.THROTTLE's inline limit is the gcra key SL.* shares. */
        snprintf(period_ms, sizeof(period_ms), "%s000", period);
        const char *a[] = {"SL.CHARGE", key,   "ALGO",    "gcra", "BURST", burst,
                           "RATE",      count, period_ms, "QTY",  cost};
        memcpy(argv, a, sizeof(a));
        argc = 11;
        unit_ns = NUM_NS_PER_MS;
        window_s = strtoll(period, NULL, 10);
    } else if (np == -SLUICE_ENOENT && nb > 0 && nn > 0 && nd > 0) {
        argv[0] = "CL.THROTTLE";
        argv[1] = key;
        argv[2] = burst;
        argv[3] = count;
        argv[4] = period;
        argv[5] = cost;
        argc = 6;
        unit_ns = NUM_NS_PER_S;
        window_s = strtoll(period, NULL, 10);
    } else {
        ht__bad(t, rep, "%s\n",
                "expected policy=NAME, or burst=B&count=C&period=SECONDS (numbers)");
        return;
    }
    for (size_t i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    struct resp_buf out;
    resp_buf_init(&out);
    int64_t v[5];
    char err[512];
    int rc = commands_execute(t->cmds, argc, argv, argvlen, &out);
    if (rc == 0)
        rc = ht__reply(out.data, out.len, v, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "%s", sluice_strerror(rc));
    resp_buf_free(&out);
    if (rc < 0) {
        ht__bad(t, rep, "%s\n", err);
        return;
    }
    /* v: limited, limit, remaining, retry after, reset after (unit_ns). */
    http_reply_header(rep, "RateLimit-Policy", "\"%s\";q=%lld;w=%lld", name, (long long)v[1],
                      (long long)window_s);
    http_reply_header(rep, "RateLimit", "\"%s\";r=%lld;t=%lld", name,
                      (long long)(v[2] > 0 ? v[2] : 0), (long long)ht__ceil_s(v[4], unit_ns));
    if (ng > 0) {
        /* The charge is made either way: 200, saying whether the key is
         * now over its limit (its next requests wait). */
        if (v[0] != 0 && v[3] >= 0)
            http_reply_header(rep, "Retry-After", "%lld", (long long)ht__ceil_s(v[3], unit_ns));
        http_reply_text(rep, 200, v[0] != 0 ? "charged, over the limit\n" : "charged\n");
        return;
    }
    if (v[0] == 0) {
        http_reply_text(rep, 200, "allowed\n");
        return;
    }
    if (v[3] >= 0)
        http_reply_header(rep, "Retry-After", "%lld", (long long)ht__ceil_s(v[3], unit_ns));
    http_reply_text(rep, t->deny_status, "limited\n");
}

int http_throttle_attach(struct http_server *h, struct commands *cmds, struct limiter *lim,
                         const struct http_throttle_config *cfg, struct http_throttle **out)
{
    int deny = cfg != NULL && cfg->deny_status != 0 ? cfg->deny_status : 429;
    if (h == NULL || cmds == NULL || lim == NULL || out == NULL || (deny != 429 && deny != 403))
        return -SLUICE_EINVAL;
    struct http_throttle *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -SLUICE_ENOMEM;
    t->cmds = cmds;
    t->lim = lim;
    t->deny_status = deny;
    t->trust_headers = cfg != NULL && cfg->trust_headers;
    int rc = http_route(h, HTTP_THROTTLE_PATH, ht__on_request, t);
    if (rc < 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void http_throttle_destroy(struct http_throttle *t)
{
    free(t);
}
