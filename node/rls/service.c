/*
 * rls service: ShouldRateLimit as envoyproxy/ratelimit answers it
 * (src/service/ratelimit.go), deciding through the daemon's callback.
 *
 * Per descriptor: the limit is the request's override when present,
 * otherwise the config's match; limits whose name another matched limit
 * `replaces` are dropped; an unlimited limit answers OK with remaining
 * UINT32_MAX; no limit answers OK with no current_limit.  hits are the
 * descriptor's hits_addend when set (0 peeks), else the request's, 0 read
 * as 1.  A shadow_mode limit over its limit answers OK.  overall_code is
 * OVER_LIMIT when a descriptor not in quota mode is, or when the request has
 * quota-mode descriptors (quota_mode, or every limited descriptor under
 * QUOTA_MODE) and all of them are; each descriptor's own code says OVER_LIMIT
 * either way.  SHADOW_MODE turns an overall OVER_LIMIT into OK.  With
 * headers on, RateLimit-Limit, -Remaining and -Reset describe the
 * descriptor closest to its limit (one over it and not in quota mode wins),
 * as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS.  With dynamic metadata
 * on, the answer's dynamic_metadata (field 6, encoded by meta.c and
 * appended to the packed message) echoes the request and merges the
 * config metadata of the limits of the descriptors answered OK (unlimited
 * and replaced ones have none), as RESPONSE_DYNAMIC_METADATA does.
 */
#include "service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc.h"
#include "meta.h"
#include "sluice/error.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_req_t;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_desc_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_resp_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status_t;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_rl_t;
typedef Envoy__Config__Core__V3__HeaderValue rls_header_t;

#define CODE_OK         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
#define CODE_OVER_LIMIT ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT

/* One call's memory: protobuf-c's unpacking and the answer's structures
 * are bump-allocated from the service's buffer, which each call reuses;
 * beyond it, malloc up to a budget that follows the message's size, so
 * that no message makes the decoder hold more than a bounded multiple of
 * itself. */
#define RLS_ARENA_BYTES 16384

struct rls_arena {
    size_t used;
    size_t heap;   /* bytes malloc'ed beyond the buffer in this call */
    size_t budget; /* at most this many */
    int exhausted;
    _Alignas(16) uint8_t buf[RLS_ARENA_BYTES];
};

/* The statistics' index: open addressing over twice the series. */
#define RLS_STATS_INDEX (2 * RLS_SERVICE_MAX_STATS)

struct rls_service {
    struct rls_descriptor_stat dstats[RLS_SERVICE_MAX_STATS + 1]; /* + "_other" */
    size_t ndstats;
    uint16_t dindex[RLS_STATS_INDEX]; /* series + 1; 0: empty */
    struct rls_service_config cfg;
    struct rls_arena arena;
    rls_decide_fn decide;
    void *ud;
    struct rls_config *config;
    int installed;
    struct rls_service_stats stats;
};

int rls_service_create(const struct rls_service_config *cfg, rls_decide_fn fn, void *ud,
                       struct rls_service **out)
{
    if (fn == NULL)
        return -SLUICE_EINVAL;
    struct rls_service *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -SLUICE_ENOMEM;
    if (cfg != NULL)
        s->cfg = *cfg;
    if (s->cfg.header_limit == NULL)
        s->cfg.header_limit = "RateLimit-Limit";
    if (s->cfg.header_remaining == NULL)
        s->cfg.header_remaining = "RateLimit-Remaining";
    if (s->cfg.header_reset == NULL)
        s->cfg.header_reset = "RateLimit-Reset";
    s->decide = fn;
    s->ud = ud;
    if (rls_config_create(&s->config) < 0) {
        free(s);
        return -SLUICE_ENOMEM;
    }
    *out = s;
    return 0;
}

void rls_service_destroy(struct rls_service *svc)
{
    if (svc == NULL)
        return;
    for (size_t i = 0; i < svc->ndstats; i++)
        free((char *)svc->dstats[i].key);
    rls_config_free(svc->config);
    free(svc);
}

void rls_service_set_config(struct rls_service *svc, struct rls_config *cfg)
{
    rls_config_free(svc->config);
    svc->config = cfg;
    if (svc->installed)
        svc->stats.reloads++;
    svc->installed = 1;
}

void rls_service_get_stats(const struct rls_service *svc, struct rls_service_stats *out)
{
    *out = svc->stats;
}

size_t rls_service_descriptor_stats(const struct rls_service *svc,
                                    const struct rls_descriptor_stat **out)
{
    *out = svc->dstats;
    return svc->ndstats;
}

static void *rls_service__alloc(void *ud, size_t size)
{
    struct rls_arena *a = ud;
    size_t need = (size + 15) & ~(size_t)15;
    if (need >= size && need <= RLS_ARENA_BYTES - a->used) {
        void *p = a->buf + a->used;
        a->used += need;
        return p;
    }
    if (size > a->budget - a->heap) {
        a->exhausted = 1;
        return NULL;
    }
    size_t *h = malloc(sizeof(size_t) * 2 + size);
    if (h == NULL) {
        a->exhausted = 1;
        return NULL;
    }
    h[0] = size;
    a->heap += size;
    return h + 2;
}

static void rls_service__free(void *ud, void *p)
{
    struct rls_arena *a = ud;
    if (p == NULL || ((uint8_t *)p >= a->buf && (uint8_t *)p < a->buf + RLS_ARENA_BYTES))
        return; /* the buffer is reset as a whole */
    size_t *h = (size_t *)p - 2;
    a->heap -= h[0];
    free(h);
}

static void *rls_service__zalloc(struct rls_arena *a, size_t n, size_t size)
{
    if (n != 0 && size > SIZE_MAX / n)
        return NULL;
    void *p = rls_service__alloc(a, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

int rls_service_grpc_status(int rc)
{
    switch (rc) {
    case 0:
        return RLS_GRPC_OK;
    case -SLUICE_EPROTO:
    case -SLUICE_EINVAL:
    case -SLUICE_ETOOBIG:
        return RLS_GRPC_INVALID_ARGUMENT;
    case -SLUICE_EFULL:
    case -SLUICE_ENOMEM:
        return RLS_GRPC_RESOURCE_EXHAUSTED;
    case -SLUICE_ENOENT:
        return RLS_GRPC_NOT_FOUND;
    default:
        return RLS_GRPC_INTERNAL;
    }
}

/* The limit a descriptor is decided under (a config limit or an override). */
struct rls_applied {
    const struct rls_limit *cfg; /* NULL: none, or the override below */
    struct rls_limit override;
    int has;
    const char *shared[RLS_SERVICE_MAX_ENTRIES]; /* share_threshold patterns, by entry */
};

/* Appends s (n bytes) at *at in key[RLS_SERVICE_MAX_KEY]; -SLUICE_ETOOBIG. */
static int rls_service__put(char *key, size_t *at, const char *s, size_t n)
{
    if (n > RLS_SERVICE_MAX_KEY - *at)
        return -SLUICE_ETOOBIG;
    memcpy(key + *at, s, n);
    *at += n;
    return 0;
}

/* "domain|k_v|k_v" into key; returns its length or -SLUICE_ETOOBIG. */
static int rls_service__key(const char *domain, const rls_desc_t *d, const char *const *shared,
                            char *key, size_t *klen)
{
    size_t at = 0;
    int rc = rls_service__put(key, &at, domain, strlen(domain));
    for (size_t i = 0; rc == 0 && i < d->n_entries; i++) {
        const char *k = d->entries[i]->key, *v = d->entries[i]->value;
        if (shared[i] != NULL)
            v = shared[i]; /* share_threshold: the pattern stands for the value */
        rc = rls_service__put(key, &at, "|", 1);
        if (rc == 0)
            rc = rls_service__put(key, &at, k, strlen(k));
        if (rc == 0)
            rc = rls_service__put(key, &at, "_", 1);
        if (rc == 0)
            rc = rls_service__put(key, &at, v, strlen(v));
    }
    *klen = at;
    return rc;
}

/* FNV-1a: the index of a series key. */
static uint32_t rls_service__hash(const char *k, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)k[i]) * 16777619u;
    return h;
}

/* The series of key (n bytes): found, made (while there is room), or
 * "_other"; NULL only when out of memory. */
static struct rls_descriptor_stat *rls_service__series(struct rls_service *svc, const char *key,
                                                       size_t n)
{
    uint32_t at = rls_service__hash(key, n) % RLS_STATS_INDEX;
    for (size_t probe = 0; probe < RLS_STATS_INDEX; probe++) {
        uint16_t s = svc->dindex[at];
        if (s == 0)
            break;
        const char *k = svc->dstats[s - 1].key;
        if (strlen(k) == n && memcmp(k, key, n) == 0)
            return &svc->dstats[s - 1];
        at = (at + 1) % RLS_STATS_INDEX;
    }
    if (svc->ndstats < RLS_SERVICE_MAX_STATS) {
        char *copy = malloc(n + 1);
        if (copy == NULL)
            return NULL;
        memcpy(copy, key, n);
        copy[n] = '\0';
        struct rls_descriptor_stat *st = &svc->dstats[svc->ndstats++];
        memset(st, 0, sizeof(*st));
        st->key = copy;
        svc->dindex[at] = (uint16_t)svc->ndstats;
        return st;
    }
    struct rls_descriptor_stat *other = &svc->dstats[RLS_SERVICE_MAX_STATS];
    if (svc->ndstats == RLS_SERVICE_MAX_STATS) {
        other->key = strdup("_other");
        if (other->key == NULL)
            return NULL;
        svc->ndstats++;
    }
    return other;
}

/* Counts hits of one descriptor under limit l in its series (see
 * service.h); a series that cannot be made (no memory) is skipped. */
static void rls_service__count(struct rls_service *svc, const char *domain, const rls_desc_t *d,
                               const struct rls_limit *l, int detailed, int64_t hits, int limited,
                               int shadowed)
{
    char key[RLS_SERVICE_MAX_KEY];
    size_t at = 0;
    int rc = 0;
    if (!detailed && l->full_key != NULL) {
        rc = rls_service__put(key, &at, l->full_key, strlen(l->full_key));
    } else {
        rc = rls_service__put(key, &at, domain, strlen(domain));
        for (size_t i = 0; rc == 0 && i < d->n_entries; i++) {
            const char *k = d->entries[i]->key, *v = d->entries[i]->value;
            rc = rls_service__put(key, &at, ".", 1);
            if (rc == 0)
                rc = rls_service__put(key, &at, k, strlen(k));
            if (rc == 0)
                rc = rls_service__put(key, &at, "_", 1);
            if (rc == 0)
                rc = rls_service__put(key, &at, v, strlen(v));
        }
    }
    struct rls_descriptor_stat *st = rc == 0 ? rls_service__series(svc, key, at) : NULL;
    if (st == NULL || hits <= 0)
        return;
    uint64_t h = (uint64_t)hits;
    st->hits += h;
    if (!limited)
        st->within_limit += h;
    else if (shadowed)
        st->shadow_mode += h;
    else
        st->over_limit += h;
}

static int rls_service__fail(struct rls_service *svc, int rc, char *why, size_t whylen,
                             const char *msg)
{
    if (why != NULL && whylen > 0)
        snprintf(why, whylen, "%s", msg);
    svc->stats.errors++;
    return rc;
}

/* Everything one call allocates, in one block. */
struct rls_scratch {
    struct rls_applied *lim;
    rls_status_t *st;
    rls_status_t **stp;
    rls_rl_t *rl;
    Google__Protobuf__Duration *dur;
    const struct rls_meta **passed; /* dynamic metadata: the limits that passed */
};

static int rls_service__validate(const rls_req_t *req, char *why, size_t whylen)
{
    const char *msg = NULL;
    if (req->domain == NULL || req->domain[0] == '\0')
        msg = "rate limit domain must not be empty";
    else if (req->n_descriptors == 0)
        msg = "rate limit descriptor list must not be empty";
    else if (req->n_descriptors > RLS_SERVICE_MAX_DESCRIPTORS)
        msg = "too many descriptors";
    for (size_t i = 0; msg == NULL && i < req->n_descriptors; i++) {
        const rls_desc_t *d = req->descriptors[i];
        if (d->n_entries > RLS_SERVICE_MAX_ENTRIES)
            msg = "descriptor has too many entries";
        else if (d->limit != NULL &&
                 ((int)d->limit->unit < RLS_UNIT_SECOND || (int)d->limit->unit > RLS_UNIT_YEAR))
            msg = "descriptor limit override has no valid unit";
    }
    if (msg != NULL && why != NULL && whylen > 0)
        snprintf(why, whylen, "%s", msg);
    return msg == NULL ? 0 : -SLUICE_EINVAL;
}

/* Picks each descriptor's limit, then drops the replaced ones. */
static void rls_service__limits(struct rls_service *svc, const rls_req_t *req,
                                struct rls_applied *lim)
{
    struct rls_entry ents[RLS_SERVICE_MAX_ENTRIES];
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const rls_desc_t *d = req->descriptors[i];
        memset(&lim[i], 0, sizeof(lim[i]));
        /* An unknown domain has no limit, an override included, as
         * envoyproxy/ratelimit's GetLimit answers. */
        if (!rls_config_has_domain(svc->config, req->domain, strlen(req->domain)))
            continue;
        if (d->limit != NULL) {
            lim[i].override.requests_per_unit = d->limit->requests_per_unit;
            lim[i].override.unit = (enum rls_unit)d->limit->unit;
            lim[i].override.name = "";
            lim[i].has = 1;
            continue;
        }
        for (size_t e = 0; e < d->n_entries; e++) {
            ents[e].key = d->entries[e]->key;
            ents[e].klen = strlen(ents[e].key);
            ents[e].value = d->entries[e]->value;
            ents[e].vlen = strlen(ents[e].value);
        }
        lim[i].cfg = rls_config_match(svc->config, req->domain, strlen(req->domain), ents,
                                      d->n_entries, lim[i].shared);
        lim[i].has = lim[i].cfg != NULL;
    }
    /* replaces: a name any matched limit replaces is not applied. */
    for (size_t i = 0; i < req->n_descriptors; i++) {
        const struct rls_limit *l = lim[i].cfg;
        if (l == NULL || l->name[0] == '\0')
            continue;
        for (size_t j = 0; j < req->n_descriptors && lim[i].has; j++) {
            const struct rls_limit *r = lim[j].cfg;
            for (size_t k = 0; r != NULL && k < r->nreplaces; k++) {
                if (strcmp(r->replaces[k], l->name) == 0) {
                    lim[i].has = 0;
                    break;
                }
            }
        }
    }
}

/* Adds m to the limits that passed, once (merging a struct with itself
 * changes nothing, and many descriptors may share one limit). */
static void rls_service__passed(const struct rls_meta **passed, size_t *n, const struct rls_meta *m)
{
    for (size_t i = 0; i < *n; i++)
        if (passed[i] == m)
            return;
    passed[(*n)++] = m;
}

/* The answer's dynamic_metadata into b (meta.h); the descriptors' view is
 * taken from the call's arena.  -SLUICE_ENOMEM, -SLUICE_ETOOBIG. */
static int rls_service__metadata(const rls_req_t *req, const struct rls_meta **passed,
                                 size_t npassed, struct rls_meta_buf *b, struct rls_arena *a)
{
    size_t n = req->n_descriptors, total = 0;
    for (size_t i = 0; i < n; i++)
        total += req->descriptors[i]->n_entries;
    struct rls_meta_desc *ds = rls_service__zalloc(a, n, sizeof(*ds));
    const char **kv = rls_service__zalloc(a, 2 * total + 1, sizeof(*kv));
    int rc = -SLUICE_ENOMEM;
    if (ds != NULL && kv != NULL) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            const rls_desc_t *d = req->descriptors[i];
            ds[i].keys = kv + at;
            ds[i].values = kv + total + at;
            ds[i].nentries = d->n_entries;
            for (size_t e = 0; e < d->n_entries; e++, at++) {
                kv[at] = d->entries[e]->key;
                kv[total + at] = d->entries[e]->value;
            }
            if (d->limit != NULL) {
                ds[i].has_limit = 1;
                ds[i].limit_rpu = d->limit->requests_per_unit;
                ds[i].limit_unit = (int)d->limit->unit;
            }
            if (d->hits_addend != NULL) {
                ds[i].has_hits = 1;
                ds[i].hits = d->hits_addend->value;
            }
        }
        rc = rls_meta_encode(b, req->domain, req->hits_addend, ds, n, passed, npassed);
    }
    rls_service__free(a, kv);
    rls_service__free(a, ds);
    return rc;
}

int rls_service_call(struct rls_service *svc, const uint8_t *bytes, size_t len, uint8_t **out,
                     size_t *outlen, char *why, size_t whylen)
{
    struct rls_arena *a = &svc->arena;
    ProtobufCAllocator alloc = {rls_service__alloc, rls_service__free, a};
    *out = NULL;
    *outlen = 0;
    a->used = 0;
    a->heap = 0;
    a->exhausted = 0;
    a->budget = 64 * len + 65536;
    rls_req_t *req = envoy__service__ratelimit__v3__rate_limit_request__unpack(&alloc, len, bytes);
    if (req == NULL && a->exhausted)
        return rls_service__fail(svc, -SLUICE_ENOMEM, why, whylen,
                                 "RateLimitRequest too large to decode");
    if (req == NULL)
        return rls_service__fail(svc, -SLUICE_EPROTO, why, whylen,
                                 "malformed RateLimitRequest protobuf");
    int rc = rls_service__validate(req, why, whylen);
    if (rc < 0) {
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(req, &alloc);
        svc->stats.errors++;
        return rc;
    }
    size_t n = req->n_descriptors;
    struct rls_scratch sc;
    sc.lim = rls_service__zalloc(a, n, sizeof(*sc.lim));
    sc.st = rls_service__zalloc(a, n, sizeof(*sc.st));
    sc.stp = rls_service__zalloc(a, n, sizeof(*sc.stp));
    sc.rl = rls_service__zalloc(a, n, sizeof(*sc.rl));
    sc.dur = rls_service__zalloc(a, n, sizeof(*sc.dur));
    sc.passed = rls_service__zalloc(a, n, sizeof(*sc.passed));
    size_t npassed = 0;
    struct rls_meta_buf mb = {.max = RLS_META_MAX_BYTES};
    rls_resp_t resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    rls_header_t hv[3] = {ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT,
                          ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT,
                          ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT};
    rls_header_t *hvp[3] = {&hv[0], &hv[1], &hv[2]};
    char hbuf[3][24];
    if (sc.lim == NULL || sc.st == NULL || sc.stp == NULL || sc.rl == NULL || sc.dur == NULL ||
        sc.passed == NULL) {
        rc = rls_service__fail(svc, -SLUICE_ENOMEM, why, whylen, "out of memory");
        goto done;
    }
    rls_service__limits(svc, req, sc.lim);
    resp.overall_code = CODE_OK;
    resp.n_statuses = n;
    resp.statuses = sc.stp;
    const rls_status_t *closest = NULL;
    int closest_forced = 0; /* closest is over its limit, not in quota mode */
    size_t failed = 0, quota = 0, quota_failed = 0;
    for (size_t i = 0; i < n; i++) {
        const rls_desc_t *d = req->descriptors[i];
        rls_status_t *st = &sc.st[i];
        const struct rls_limit *l = sc.lim[i].cfg != NULL ? sc.lim[i].cfg : &sc.lim[i].override;
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(st);
        sc.stp[i] = st;
        st->code = CODE_OK;
        if (sc.lim[i].has && l->unlimited) {
            st->limit_remaining = UINT32_MAX;
            continue;
        }
        /* envoyproxy counts a descriptor with no limit as a quota one
         * (always passing) under the global QUOTA_MODE. */
        int in_quota = svc->cfg.quota_mode || (sc.lim[i].has && l->quota_mode);
        quota += in_quota != 0;
        if (!sc.lim[i].has)
            continue;
        int64_t hits = req->hits_addend > 0 ? (int64_t)req->hits_addend : 1;
        if (d->hits_addend != NULL)
            hits = d->hits_addend->value > INT64_MAX ? INT64_MAX : (int64_t)d->hits_addend->value;
        struct rls_decide_res res = {0};
        struct rls_decide_req q = {.requests_per_unit = l->requests_per_unit,
                                   .unit = l->unit,
                                   .period_s = rls_unit_seconds(l->unit),
                                   .hits = hits,
                                   .global = svc->cfg.global};
        if (l->requests_per_unit == 0) {
            /* Nothing fits: every hit is over the limit. */
            res.limited = hits > 0;
            res.reset_after_ms = q.period_s * 1000;
        } else {
            char key[RLS_SERVICE_MAX_KEY];
            rc = rls_service__key(req->domain, d, sc.lim[i].shared, key, &q.klen);
            if (rc == 0 && sc.lim[i].cfg == NULL) {
                /* An override keeps one counter per unit, as envoyproxy's
                 * cache keys carry their window: a per-second hit must not
                 * touch a day's budget of the same descriptor. */
                const char *u = rls_unit_name(l->unit);
                rc = rls_service__put(key, &q.klen, "|@", 2);
                if (rc == 0)
                    rc = rls_service__put(key, &q.klen, u, strlen(u));
            }
            if (rc == 0) {
                q.key = key;
                rc = svc->decide(svc->ud, &q, &res);
            }
            if (rc < 0) {
                rls_service__fail(svc, rc, why, whylen,
                                  rc == -SLUICE_ETOOBIG ? "descriptor key too long"
                                  : rc == -SLUICE_EFULL || rc == -SLUICE_ENOMEM
                                      ? "no room for another key"
                                      : "the limit cannot be applied");
                goto done;
            }
        }
        rls_rl_t *rl = &sc.rl[i];
        envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(rl);
        rl->requests_per_unit = l->requests_per_unit;
        rl->unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)l->unit;
        rl->name = (char *)l->name;
        st->current_limit = rl;
        Google__Protobuf__Duration *du = &sc.dur[i];
        google__protobuf__duration__init(du);
        /* Whole seconds, rounded up, as envoyproxy/ratelimit's
         * CalculateReset (unit - now % unit on a whole-second clock): a
         * per-second limit says 1, a minute's at its start 60.  Envoy's
         * X-RateLimit-Reset reads the seconds only. */
        du->seconds = res.reset_after_ms / 1000 + (res.reset_after_ms % 1000 != 0);
        du->nanos = 0;
        st->duration_until_reset = du;
        if (res.limited) {
            st->code = CODE_OVER_LIMIT;
            st->limit_remaining = 0;
            if (l->shadow_mode) {
                st->code = CODE_OK;
                svc->stats.shadowed++;
            } else if (in_quota) {
                quota_failed++;
            } else {
                failed++;
            }
        } else {
            st->limit_remaining = res.remaining > UINT32_MAX ? UINT32_MAX
                                  : res.remaining < 0        ? 0
                                                             : (uint32_t)res.remaining;
        }
        rls_service__count(svc, req->domain, d, l, l->detailed_metric || sc.lim[i].cfg == NULL,
                           hits, res.limited, res.limited && l->shadow_mode);
        if (st->code == CODE_OK && sc.lim[i].cfg != NULL && l->metadata != NULL)
            rls_service__passed(sc.passed, &npassed, l->metadata);
        int forced = st->code == CODE_OVER_LIMIT && !in_quota;
        if (forced || closest == NULL ||
            (!closest_forced && st->limit_remaining < closest->limit_remaining)) {
            closest = st;
            closest_forced = closest_forced || forced;
        }
    }
    if (failed > 0 || (quota > 0 && quota_failed == quota))
        resp.overall_code = CODE_OVER_LIMIT;
    if (resp.overall_code == CODE_OVER_LIMIT && svc->cfg.shadow_mode) {
        resp.overall_code = CODE_OK;
        svc->stats.shadowed_global++;
    }
    if (svc->cfg.headers && closest != NULL) {
        const char *names[3] = {svc->cfg.header_limit, svc->cfg.header_remaining,
                                svc->cfg.header_reset};
        int64_t reset_s =
            closest->duration_until_reset->seconds + (closest->duration_until_reset->nanos > 0);
        snprintf(hbuf[0], sizeof(hbuf[0]), "%u", closest->current_limit->requests_per_unit);
        snprintf(hbuf[1], sizeof(hbuf[1]), "%u", closest->limit_remaining);
        snprintf(hbuf[2], sizeof(hbuf[2]), "%lld", (long long)reset_s);
        for (int h = 0; h < 3; h++) {
            hv[h].key = (char *)names[h];
            hv[h].value = hbuf[h];
        }
        resp.n_response_headers_to_add = 3;
        resp.response_headers_to_add = hvp;
    }
    uint8_t mhead[11]; /* dynamic_metadata's tag and length */
    struct rls_meta_buf mh = {.p = mhead, .cap = sizeof(mhead), .max = sizeof(mhead)};
    if (svc->cfg.dynamic_metadata) {
        rc = rls_service__metadata(req, sc.passed, npassed, &mb, a);
        if (rc < 0) {
            rls_service__fail(svc, rc, why, whylen,
                              rc == -SLUICE_ETOOBIG ? "dynamic metadata too large"
                                                    : "out of memory");
            goto done;
        }
        rls_meta_put_varint(&mh, 6 << 3 | 2);
        rls_meta_put_varint(&mh, mb.len);
    }
    size_t size = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&resp);
    size_t total = size + mh.len + mb.len;
    uint8_t *buf = malloc(RLS_GRPC_PREFIX + total);
    if (buf == NULL) {
        rc = rls_service__fail(svc, -SLUICE_ENOMEM, why, whylen, "out of memory");
        goto done;
    }
    rls_grpc_prefix(buf, total);
    envoy__service__ratelimit__v3__rate_limit_response__pack(&resp, buf + RLS_GRPC_PREFIX);
    /* A field may follow the others: decoders read fields in any order. */
    if (mh.len > 0) {
        memcpy(buf + RLS_GRPC_PREFIX + size, mhead, mh.len);
        if (mb.len > 0)
            memcpy(buf + RLS_GRPC_PREFIX + size + mh.len, mb.p, mb.len);
    }
    *out = buf;
    *outlen = RLS_GRPC_PREFIX + total;
    svc->stats.calls++;
    if (resp.overall_code == CODE_OVER_LIMIT)
        svc->stats.over_limit++;
    rc = 0;
done:
    rls_service__free(a, sc.lim);
    rls_service__free(a, sc.st);
    rls_service__free(a, sc.stp);
    rls_service__free(a, sc.rl);
    rls_service__free(a, sc.dur);
    rls_service__free(a, sc.passed);
    free(mb.p);
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(req, &alloc);
    return rc;
}

/*
 * grpc.health.v1.Health, as envoyproxy/ratelimit's health server answers
 * it: the server as a whole ("") and the service by its name
 * ("ratelimit", and its full gRPC name) are SERVING while the node is
 * ready, NOT_SERVING while it is not (the daemon's callback: /ready's
 * notion, which also says not ready while the daemon drains before it
 * exits), or while no domain is loaded under healthy_needs_config (as
 * HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).  Any other name is NOT_FOUND
 * for Check and SERVICE_UNKNOWN for Watch, as health.proto says.
 *
 * Both calls take a HealthCheckRequest (field 1, service, a string) and
 * answer HealthCheckResponse messages (field 1, status, an enum):
 *
 *   [0][len:4] 0x08 STATUS       (7 bytes with the gRPC prefix)
 *
 * The decoder allocates from the call's arena, bounded by the message's
 * size as a ShouldRateLimit call.
 */
static const char *const rls_service__health_names[] = {
    "", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"};

/* The request's service name: *known 1 when it is one of ours.  Fails
 * with -SLUICE_EPROTO (malformed) or -SLUICE_ENOMEM, why set. */
static int rls_service__health_name(struct rls_service *svc, const uint8_t *req, size_t len,
                                    int *known, char *why, size_t whylen)
{
    struct rls_arena *a = &svc->arena;
    ProtobufCAllocator alloc = {rls_service__alloc, rls_service__free, a};
    a->used = 0;
    a->heap = 0;
    a->exhausted = 0;
    a->budget = 4 * len + 4096;
    Grpc__Health__V1__HealthCheckRequest *q =
        grpc__health__v1__health_check_request__unpack(&alloc, len, req);
    if (q == NULL) {
        svc->stats.errors++;
        snprintf(why, whylen, "%s",
                 a->exhausted ? "out of memory" : "malformed HealthCheckRequest");
        return a->exhausted ? -SLUICE_ENOMEM : -SLUICE_EPROTO;
    }
    *known = 0;
    for (size_t i = 0; i < sizeof(rls_service__health_names) / sizeof(rls_service__health_names[0]);
         i++)
        *known = *known || strcmp(q->service, rls_service__health_names[i]) == 0;
    if (!*known)
        snprintf(why, whylen, "unknown service %.64s", q->service);
    grpc__health__v1__health_check_request__free_unpacked(q, &alloc);
    return 0;
}

int rls_service_health_status(struct rls_service *svc)
{
    int serving = svc->cfg.ready == NULL || svc->cfg.ready(svc->cfg.ready_ud);
    if (svc->cfg.healthy_needs_config && rls_config_domains(svc->config) == 0)
        serving = 0;
    return serving ? RLS_HEALTH_SERVING : RLS_HEALTH_NOT_SERVING;
}

size_t rls_service_health_pack(int status, uint8_t out[RLS_HEALTH_MSG_MAX])
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    size_t size = grpc__health__v1__health_check_response__get_packed_size(&resp);
    /* One enum field below 128: at most 2 bytes (none for UNKNOWN, 0). */
    if (size > RLS_HEALTH_MSG_MAX - RLS_GRPC_PREFIX)
        return 0;
    rls_grpc_prefix(out, size);
    grpc__health__v1__health_check_response__pack(&resp, out + RLS_GRPC_PREFIX);
    return RLS_GRPC_PREFIX + size;
}

int rls_service_health(struct rls_service *svc, const uint8_t *req, size_t len, uint8_t **out,
                       size_t *outlen, char *why, size_t whylen)
{
    int known;
    int rc = rls_service__health_name(svc, req, len, &known, why, whylen);
    if (rc < 0)
        return rc;
    if (!known) {
        svc->stats.errors++;
        return -SLUICE_ENOENT;
    }
    int status = rls_service_health_status(svc);
    uint8_t *buf = malloc(RLS_HEALTH_MSG_MAX);
    if (buf == NULL) {
        snprintf(why, whylen, "out of memory");
        return -SLUICE_ENOMEM;
    }
    *outlen = rls_service_health_pack(status, buf);
    *out = buf;
    if (status == RLS_HEALTH_SERVING)
        svc->stats.health_checks++;
    else
        svc->stats.health_not_serving++;
    return 0;
}

int rls_service_health_watch(struct rls_service *svc, const uint8_t *req, size_t len, int *known,
                             char *why, size_t whylen)
{
    int rc = rls_service__health_name(svc, req, len, known, why, whylen);
    if (rc == 0)
        svc->stats.health_watches++;
    return rc;
}
