/*
 * daemon_rls: the decider behind Envoy's rate limit service (daemon_rls.h).
 *
 * A descriptor's limit "requests_per_unit per unit" becomes, by default, a
 * fixed window of `unit` whose boundaries are aligned to the wall clock, as
 * envoyproxy/ratelimit's windows are (a minute window starts at the minute,
 * a day at 00:00 UTC; a month is 30 days and a year 365 from the Unix
 * epoch, as there).  The limiter's clock is monotonic, so the windows are
 * shifted by the wall clock's offset from it (algo_params_set_phase).
 * With another algorithm the limit is that algorithm's with count
 * requests_per_unit per period unit (gcra and token-bucket: a burst of the
 * whole limit).
 *
 * Every hit counts, refused ones included, as in envoyproxy/ratelimit
 * (whose counter is an INCRBY before the comparison): a descriptor is over
 * its limit when its count after the hits exceeds the limit, so a later
 * look with hits_addend 0 says OVER_LIMIT too, and Envoy's token-quota
 * pattern (look with 0 hits, charge the real cost after the response) keeps
 * the cost it was told.  limiter_charge does exactly that for local keys.
 * A global key (scope global in a cluster) is decided by the replica, which
 * cannot yet count past the limit: there a refused hit is not counted.
 */
#include "daemon_rls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo.h"
#include "cluster.h"
#include "config.h"
#include "decide.h"
#include "limiter.h"
#include "log.h"
#include "metrics.h"
#include "rls/config.h"
#include "rls/rls.h"
#include "rls/server.h"
#include "rls/service.h"
#include "sluice/error.h"
#include "num.h"
#include "readiness.h"

struct daemon_rls {
    struct limiter *lim;
    struct cluster *cluster;
    int calendar;
    enum algo_kind kind;
    char *config_dir;
    struct rls_service *svc;
    struct rls_server *srv;
    uint64_t reload_failures;
};

/* The wall clock, ns since the Unix epoch. */
static int64_t daemon_rls__wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * NUM_NS_PER_S + ts.tv_nsec;
}

static int daemon_rls__decide(void *ud, const struct rls_decide_req *q, struct rls_decide_res *res)
{
    struct daemon_rls *d = ud;
    struct algo_params p;
    struct algo_result r;
    int64_t period_ns, rc;
    if (__builtin_mul_overflow(q->period_s, NUM_NS_PER_S, &period_ns))
        return -SLUICE_ERANGE;
    int64_t burst = q->requests_per_unit - 1;
    rc = algo_params_init(&p, d->kind, burst, q->requests_per_unit, period_ns, 0);
    if (rc < 0)
        return (int)rc;
    /* Every hit counts, refused ones included, as envoyproxy/ratelimit
     * counts them: a charge, through the one decision entry. */
    struct decide dd = {d->lim, d->cluster};
    struct decide_req rq = {.key = q->key,
                            .klen = q->klen,
                            .p = &p,
                            .scope = q->global ? POLICY_SCOPE_GLOBAL : POLICY_SCOPE_LOCAL,
                            .qty = q->hits,
                            .op = DECIDE_CHARGE};
    int global = decide_is_global(&dd, &rq);
    /* One reading; the clock the decision is taken on is the limiter's, or
     * the cluster's for a global key, and the calendar phase is the wall
     * clock's offset from that one (it moves only as NTP slews the wall
     * clock). */
    int64_t mono = (int64_t)uv_hrtime();
    int64_t now = decide_clock(&dd, global, mono);
    int64_t phase = 0;
    if (d->calendar) {
        phase = (daemon_rls__wall() - now) % period_ns;
        if (phase < 0)
            phase += period_ns;
        rc = algo_params_set_phase(&p, phase);
        if (rc < 0)
            return (int)rc;
    }
    rc = decide_run(&dd, &rq, mono, &r);
    if (rc < 0)
        return (int)rc;
    res->limited = r.limited;
    res->remaining = r.remaining;
    if (d->calendar) {
        /* Until the window ends, whether or not anything was counted. */
        int64_t into = (now + phase) % period_ns;
        res->reset_after_ms = (period_ns - into + NUM_NS_PER_MS - 1) / NUM_NS_PER_MS;
    } else {
        res->reset_after_ms = (r.reset_after_ns + NUM_NS_PER_MS - 1) / NUM_NS_PER_MS;
    }
    return 0;
}

/* The health service's readiness: /ready's, re-evaluated as /ready does. */
static int daemon_rls__ready(void *ud)
{
    struct readiness *r = ud;
    readiness_tick(r, (int64_t)uv_hrtime());
    return readiness_ready(r);
}

void daemon_rls_get_stats(const struct daemon_rls *d, struct daemon_rls_stats *s)
{
    memset(s, 0, sizeof(*s));
    if (d == NULL)
        return;
    rls_service_get_stats(d->svc, &s->svc);
    if (d->srv != NULL)
        rls_server_get_stats(d->srv, &s->srv);
    s->reload_failures = d->reload_failures;
}

size_t daemon_rls_descriptor_stats(const struct daemon_rls *d, struct metrics_keyed *out,
                                   size_t max)
{
    const struct rls_descriptor_stat *st;
    if (d == NULL || d->svc == NULL)
        return 0;
    size_t n = rls_service_descriptor_stats(d->svc, &st);
    if (n > max)
        n = max;
    for (size_t i = 0; i < n; i++)
        out[i] = (struct metrics_keyed){st[i].key, st[i].hits, st[i].over_limit, st[i].within_limit,
                                        st[i].shadow_mode};
    return n;
}

#define R(field, info, metric, kind, help)                                                         \
    COUNTER_ROW(struct daemon_rls_stats, field, info, metric, kind, help)

static const struct counter_row daemon_rls__rows[] = {
    R(svc.calls, "rls_calls", "rls_calls_total", COUNTER_TOTAL,
      "ShouldRateLimit calls answered (Envoy's rate limit service)."),
    R(svc.over_limit, "rls_over_limit", "rls_over_limit_total", COUNTER_TOTAL,
      "ShouldRateLimit answers with overall_code OVER_LIMIT."),
    R(svc.shadowed, "rls_shadow_mode", "rls_shadow_mode_total", COUNTER_TOTAL,
      "Descriptors over their limit answered OK by shadow_mode."),
    R(svc.shadowed_global, "rls_global_shadow_mode", "rls_global_shadow_mode_total", COUNTER_TOTAL,
      "ShouldRateLimit answers OVER_LIMIT turned OK by SHADOW_MODE=true."),
    R(svc.health_checks, "rls_health_checks", "rls_health_checks_total", COUNTER_TOTAL,
      "grpc.health.v1.Health/Check calls answered SERVING."),
    R(svc.health_not_serving, "rls_health_not_serving", "rls_health_not_serving_total",
      COUNTER_TOTAL,
      "grpc.health.v1.Health/Check calls answered NOT_SERVING (the node not ready, as /ready)."),
    R(svc.health_watches, "rls_health_watches", "rls_health_watches_total", COUNTER_TOTAL,
      "grpc.health.v1.Health/Watch calls started."),
    R(srv.watching, "grpc_health_watching", "rls_health_watching", COUNTER_GAUGE,
      "grpc.health.v1.Health/Watch streams open now (at most 16 per connection, 1024 in all)."),
    R(srv.errors, "rls_errors", "rls_errors_total", COUNTER_TOTAL,
      "gRPC calls answered with an error status."),
    R(srv.connected, "grpc_connections", "rls_connections", COUNTER_GAUGE,
      "HTTP/2 connections open on the gRPC listener."),
    R(srv.protocol_errors, "grpc_protocol_errors", "rls_protocol_errors_total", COUNTER_TOTAL,
      "gRPC connections ended with GOAWAY for malformed HTTP/2."),
    R(srv.evicted, "grpc_evictions", "rls_evictions_total", COUNTER_TOTAL,
      "gRPC connections closed for a newcomer over --grpc-max-connections (silent ones first, "
      "then the longest idle)."),
    R(srv.timeouts, "grpc_timeouts", "rls_timeouts_total", COUNTER_TOTAL,
      "gRPC connections closed silent 10 s after connecting or idle past --grpc-idle-timeout."),
    R(srv.memory_evicted, "grpc_memory_disconnects", "rls_memory_disconnects_total", COUNTER_TOTAL,
      "gRPC connections closed, heaviest first, over max_client_memory (HTTP/2 streams "
      "included)."),
    R(srv.deferred_reads, "grpc_deferred_reads", "rls_deferred_reads_total", COUNTER_TOTAL,
      "gRPC reads held for a later event loop turn, that turn's HTTP/2 input (256 KiB) being "
      "spent."),
    R(srv.deferred_closes, "grpc_deferred_closes", "rls_deferred_closes_total", COUNTER_TOTAL,
      "gRPC connections that hung up or stayed silent past their deadline, closed at a later "
      "event loop turn (64 are closed a turn)."),
    R(svc.reloads, "rls_reloads", "rls_reloads_total", COUNTER_TOTAL,
      "Rate limit YAML directory reloads."),
    R(reload_failures, "rls_reload_failures", "rls_reload_failures_total", COUNTER_TOTAL,
      "Rate limit YAML reloads refused (the running config kept)."),
};

#undef R

const struct counter_table daemon_rls_counters = COUNTER_TABLE(daemon_rls__rows);

void daemon_rls_health_changed(struct daemon_rls *d)
{
    if (d != NULL)
        rls_server_health_changed(d->srv);
}

void daemon_rls_close(struct daemon_rls *d)
{
    if (d != NULL)
        rls_server_close(d->srv);
}

void daemon_rls_destroy(struct daemon_rls *d)
{
    if (d == NULL)
        return;
    rls_server_destroy(d->srv);
    rls_service_destroy(d->svc);
    free(d->config_dir);
    free(d);
}

int daemon_rls_reload(struct daemon_rls *d, char *err, size_t errlen)
{
    struct rls_config *cfg;
    if (d == NULL || d->config_dir == NULL)
        return 0;
    int rc = rls_config_load_dir(d->config_dir, &cfg, err, errlen);
    if (rc < 0) {
        d->reload_failures++;
        return rc;
    }
    log_info("ratelimit: %zu domain(s) loaded from %s", rls_config_domains(cfg), d->config_dir);
    rls_service_set_config(d->svc, cfg);
    return 0;
}

int daemon_rls_start(uv_loop_t *loop, struct limiter *lim, struct cluster *cluster,
                     const struct daemon_rls_options *o, struct daemon_rls **out, char *err,
                     size_t errlen)
{
    struct daemon_rls *d = calloc(1, sizeof(*d));
    int rc;
    if (d == NULL)
        return -SLUICE_ENOMEM;
    d->lim = lim;
    d->cluster = cluster;
    d->calendar = o->algorithm == NULL || strcmp(o->algorithm, "calendar") == 0;
    d->kind = ALGO_FIXED_WINDOW;
    if (!d->calendar && algo_from_name(o->algorithm, &d->kind) < 0) {
        snprintf(err, errlen,
                 "ratelimit algorithm: expected calendar or an algorithm name, got '%s'",
                 o->algorithm);
        free(d);
        return -SLUICE_EINVAL;
    }
    /* envoyproxy/ratelimit's environment variables, read once at start */
    struct rls_service_config scfg = {
        .global = cluster != NULL,
        .headers = o->headers,
        .quota_mode = rls_config_env_true("QUOTA_MODE"),
        .shadow_mode = rls_config_env_true("SHADOW_MODE"),
        .dynamic_metadata = rls_config_env_true("RESPONSE_DYNAMIC_METADATA"),
        .healthy_needs_config = rls_config_env_true("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"),
        .ready = o->ready != NULL ? daemon_rls__ready : NULL,
        .ready_ud = o->ready};
    rc = rls_service_create(&scfg, daemon_rls__decide, d, &d->svc);
    if (rc == 0 && o->config_dir != NULL && (d->config_dir = strdup(o->config_dir)) == NULL)
        rc = -SLUICE_ENOMEM;
    if (rc == 0)
        rc = daemon_rls_reload(d, err, errlen);
    if (rc == 0 && o->grpc != NULL) {
        struct rls_server_config vcfg = {.bind = o->grpc,
                                         .max_connections = o->max_connections,
                                         .idle_timeout_ms = o->idle_timeout_ms,
                                         .budget = o->budget};
        rc = rls_server_create(loop, &vcfg, d->svc, &d->srv);
        if (rc == 0 && (rc = rls_server_start(d->srv)) < 0) {
            snprintf(err, errlen, "%s", rls_server_error(d->srv));
            rls_server_close(d->srv);
            uv_run(loop, UV_RUN_NOWAIT); /* runs the listener's close */
        }
    }
    if (rc < 0) {
        if (rc == -SLUICE_ENOMEM)
            snprintf(err, errlen, "out of memory");
        daemon_rls_destroy(d);
        return rc;
    }
    if (o->grpc != NULL)
        log_info("ratelimit: Envoy rate limit service (gRPC) on %s, %s windows%s", o->grpc,
                 d->calendar ? "calendar fixed" : algo_name(d->kind),
                 cluster != NULL ? ", scope global" : "");
    *out = d;
    return 0;
}
