/*
 * http_throttle: the HTTP decision endpoint (see http_throttle.h).
 */
#include "http_throttle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "args.h"
#include "gcra.h"
#include "num.h"
#include "policy.h"
#include "sluice/error.h"

#define HT_MAX_KEY   512 /* as CL.THROTTLE's default bound */
#define HT_MAX_VALUE 32  /* numbers and policy names beyond this are refused */

struct http_throttle {
    struct decide d; /* the limiter and the cluster, borrowed */
    int deny_status;
    int trust_headers; /* read X-Sluice-* (see "Trust" in the header) */
};

/* Copies a header value (len bytes) NUL-terminated into out: its length,
 * or -SLUICE_ETOOBIG / -SLUICE_EPROTO (a NUL inside). */
static int http_throttle__copy(const char *v, size_t len, char *out, size_t outlen)
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
static int http_throttle__param(const struct http_throttle *t, const struct http_request *req,
                                const char *name, const char *header, char *out, size_t outlen)
{
    int n = http_query_get(req->query, req->query_len, name, out, outlen);
    if (n != -SLUICE_ENOENT || !t->trust_headers)
        return n;
    size_t len;
    const char *v = http_request_header(req, header, &len);
    if (v == NULL)
        return -SLUICE_ENOENT;
    return http_throttle__copy(v, len, out, outlen);
}

/* key_header=NAME: the key is the first comma-separated element of that
 * request header (X-Forwarded-For's client address), for a proxy that can
 * neither build a query string nor set a header per request (Traefik). */
static int http_throttle__key_from_header(const struct http_request *req, char *out, size_t outlen)
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
    return http_throttle__copy(v, len, out, outlen);
}

static void http_throttle__bad(struct http_throttle *t, struct http_reply *rep, const char *fmt,
                               const char *what);

/* An inline limit's number, worded as CL.THROTTLE words a bad one. */
static int http_throttle__number(struct http_throttle *t, struct http_reply *rep, const char *name,
                                 const char *v, int64_t *out)
{
    char msg[160];
    if (args_parse_int64(v, strlen(v), out) < 0) {
        snprintf(msg, sizeof(msg), "Couldn't parse as integer: %s", v);
        http_throttle__bad(t, rep, "%s\n", msg);
        return -1;
    }
    if (*out < 0) {
        snprintf(msg, sizeof(msg), "%s must not be negative", name);
        http_throttle__bad(t, rep, "%s\n", msg);
        return -1;
    }
    return 0;
}

static void http_throttle__bad(struct http_throttle *t, struct http_reply *rep, const char *fmt,
                               const char *what)
{
    char msg[600];
    snprintf(msg, sizeof(msg), fmt, what);
    http_reply_text(rep, 400, msg);
}

/* Whether s is a decimal whole number of at least 1 (leading zeros and all). */
static int http_throttle__cost_ok(const char *s)
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
static int64_t http_throttle__ceil_s(int64_t v, int64_t unit_ns)
{
    if (v <= 0)
        return 0;
    int64_t ns = num_mul_sat(v, unit_ns);
    return ns / NUM_NS_PER_S + (ns % NUM_NS_PER_S != 0);
}

static void http_throttle__on_request(void *ud, const struct http_request *req,
                                      struct http_reply *rep)
{
    struct http_throttle *t = ud;
    char key[HT_MAX_KEY + 1], pol[HT_MAX_VALUE + 1], cost[HT_MAX_VALUE + 1];
    char burst[HT_MAX_VALUE + 1], count[HT_MAX_VALUE + 1], period[HT_MAX_VALUE + 1];
    char charge[HT_MAX_VALUE + 1];
    int klen = http_throttle__param(t, req, "key", "X-Sluice-Key", key, sizeof(key));
    if (klen == -SLUICE_ENOENT)
        klen = http_throttle__key_from_header(req, key, sizeof(key));
    if (klen == -SLUICE_ENOENT || klen == 0) {
        http_throttle__bad(t, rep, "%s\n",
                           t->trust_headers
                               ? "key is required (?key=KEY, X-Sluice-Key, or ?key_header=NAME)"
                               : "key is required (?key=KEY or ?key_header=NAME; X-Sluice-* "
                                 "headers are ignored unless http_trust_headers = on)");
        return;
    }
    if (klen < 0) {
        http_throttle__bad(t, rep, "key: %s\n", sluice_strerror(klen));
        return;
    }
    int np = http_throttle__param(t, req, "policy", "X-Sluice-Policy", pol, sizeof(pol));
    int nc = http_throttle__param(t, req, "cost", "X-Sluice-Cost", cost, sizeof(cost));
    int nb = http_throttle__param(t, req, "burst", "X-Sluice-Burst", burst, sizeof(burst));
    int nn = http_throttle__param(t, req, "count", "X-Sluice-Count", count, sizeof(count));
    int nd = http_throttle__param(t, req, "period", "X-Sluice-Period", period, sizeof(period));
    /* charge=Q: a post-paid charge (SL.CHARGE), counted whatever the key
     * holds, for a cost known after the response. */
    int ng = http_query_get(req->query, req->query_len, "charge", charge, sizeof(charge));
    if (ng != -SLUICE_ENOENT &&
        (ng <= 0 || nc != -SLUICE_ENOENT || !http_throttle__cost_ok(charge))) {
        http_throttle__bad(t, rep, "%s\n", "charge: expected a whole number from 1 (and no cost)");
        return;
    }
    if (ng > 0)
        snprintf(cost, sizeof(cost), "%s", charge);
    else if (nc == -SLUICE_ENOENT)
        snprintf(cost, sizeof(cost), "1");
    else if (nc <= 0 || !http_throttle__cost_ok(cost)) {
        /* Cost 0 would answer "allowed" and take nothing: a way around the
         * limit, never a decision a proxy needs. */
        http_throttle__bad(t, rep, "%s\n", "cost: expected a whole number from 1");
        return;
    }
    int64_t qty = strtoll(cost, NULL, 10), window_s = 0;
    const char *name = "default";
    const struct policy *pp = NULL;
    struct algo_params inline_p;
    int cell = 0; /* CL.THROTTLE's answer: redis-cell's rounding of seconds */
    struct decide_req q = {.key = key, .klen = (size_t)klen, .scope = -1, .qty = qty};
    q.op = ng > 0 ? DECIDE_CHARGE : DECIDE_TAKE;
    if (np > 0) {
        if (nb != -SLUICE_ENOENT || nn != -SLUICE_ENOENT || nd != -SLUICE_ENOENT) {
            http_throttle__bad(t, rep, "%s\n", "policy and burst/count/period are exclusive");
            return;
        }
        pp = policy_set_find(limiter_policies(t->d.lim), pol, (size_t)np);
        if (pp == NULL) {
            http_throttle__bad(t, rep, "unknown policy '%s'\n", pol);
            return;
        }
        name = pp->name;
        window_s = http_throttle__ceil_s(pp->algo.period_ns, 1);
        q.pol = pp;
    } else if (np == -SLUICE_ENOENT && nb > 0 && nn > 0 && nd > 0) {
        /* CL.THROTTLE's inline limit (the gcra key SL.* shares). */
        int64_t b, c, per;
        if (http_throttle__number(t, rep, "max_burst", burst, &b) < 0 ||
            http_throttle__number(t, rep, "count per period", count, &c) < 0 ||
            http_throttle__number(t, rep, "period", period, &per) < 0)
            return;
        if (c == 0 || per == 0) {
            http_throttle__bad(t, rep, "%s\n", "Zero rates are not supported");
            return;
        }
        q.cl_burst = b;
        q.cl_count = c;
        q.cl_period_s = per;
        window_s = per;
        cell = ng <= 0;
        if (ng > 0) {
            /* A charge decides under the same GCRA limit as an algo_params. */
            if (per > INT64_MAX / NUM_NS_PER_S ||
                algo_params_init(&inline_p, ALGO_GCRA, b, c, per * NUM_NS_PER_S, 0) < 0) {
                http_throttle__bad(t, rep, "%s\n", "arguments out of range");
                return;
            }
            q.p = &inline_p;
        }
    } else {
        http_throttle__bad(t, rep, "%s\n",
                           "expected policy=NAME, or burst=B&count=C&period=SECONDS (numbers)");
        return;
    }
    struct algo_result r;
    int rc = decide_run(&t->d, &q, (int64_t)uv_hrtime(), &r);
    if (rc < 0) {
        http_throttle__bad(t, rep, "%s\n", sluice_strerror(rc));
        return;
    }
    /* Seconds, rounded up (CL.THROTTLE's inline form: as redis-cell rounds). */
    int64_t remaining = r.remaining > 0 ? r.remaining : 0;
    int64_t reset_s =
        cell ? gcra_cell_seconds(r.reset_after_ns) : http_throttle__ceil_s(r.reset_after_ns, 1);
    int64_t retry_s = -1;
    if (r.limited && r.retry_after_ns != ALGO_NEVER)
        retry_s =
            cell ? gcra_cell_seconds(r.retry_after_ns) : http_throttle__ceil_s(r.retry_after_ns, 1);
    http_reply_header(rep, "RateLimit-Policy", "\"%s\";q=%lld;w=%lld", name, (long long)r.limit,
                      (long long)window_s);
    http_reply_header(rep, "RateLimit", "\"%s\";r=%lld;t=%lld", name, (long long)remaining,
                      (long long)(reset_s > 0 ? reset_s : 0));
    if (ng > 0) {
        /* The charge is made either way: 200, saying whether the key is
         * now over its limit (its next requests wait). */
        if (r.limited && retry_s >= 0)
            http_reply_header(rep, "Retry-After", "%lld", (long long)retry_s);
        http_reply_text(rep, 200, r.limited ? "charged, over the limit\n" : "charged\n");
        return;
    }
    if (!r.limited) {
        http_reply_text(rep, 200, "allowed\n");
        return;
    }
    if (retry_s >= 0)
        http_reply_header(rep, "Retry-After", "%lld", (long long)retry_s);
    http_reply_text(rep, t->deny_status, "limited\n");
}

int http_throttle_attach(struct http_server *h, struct limiter *lim, struct cluster *cluster,
                         const struct http_throttle_config *cfg, struct http_throttle **out)
{
    int deny = cfg != NULL && cfg->deny_status != 0 ? cfg->deny_status : 429;
    if (h == NULL || lim == NULL || out == NULL || (deny != 429 && deny != 403))
        return -SLUICE_EINVAL;
    struct http_throttle *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -SLUICE_ENOMEM;
    t->d.lim = lim;
    t->d.cl = cluster;
    t->deny_status = deny;
    t->trust_headers = cfg != NULL && cfg->trust_headers;
    int rc = http_route(h, HTTP_THROTTLE_PATH, http_throttle__on_request, t);
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
