/*
 * daemon_rls: the daemon's side of Envoy's rate limit service (node/rls/):
 * its decider, which maps a descriptor's limit onto the limiter (or, for a
 * global key, the cluster), and the listener's life (start, SIGHUP reload,
 * close).  The one place sluiced touches the rls wing.
 */
#ifndef SLUICE_DAEMON_RLS_H
#define SLUICE_DAEMON_RLS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "counter.h"
#include "metrics.h"
#include "rls/server.h"
#include "rls/service.h"

struct limiter;
struct cluster;
struct clientmem_budget;
struct readiness;

struct daemon_rls_options {
    const char *grpc;                /* "HOST:PORT" to serve gRPC on; NULL: off */
    const char *config_dir;          /* envoyproxy/ratelimit YAML directory; NULL: none */
    const char *algorithm;           /* NULL or "calendar": calendar-aligned fixed window;
                                        else a sluice algorithm name (algo_from_name) */
    int headers;                     /* add RateLimit-Limit/-Remaining/-Reset */
    size_t max_connections;          /* gRPC connections at once; 0: the default */
    uint64_t idle_timeout_ms;        /* close an idle gRPC connection; 0: never */
    struct clientmem_budget *budget; /* the one client memory budget, or NULL */
    struct readiness *ready;         /* borrowed: the gRPC health service says
                                        NOT_SERVING while it is not ready;
                                        NULL: always SERVING */
};

struct daemon_rls;

/*
 * Loads the YAML directory and starts listening.  Borrows loop, lim and
 * cluster (NULL when not clustered; a clustered daemon decides with scope
 * global).  Fails with -SLUICE_EINVAL (bad algorithm or address),
 * -SLUICE_ECONFIG (a YAML file, err names it and its line), -SLUICE_EIO
 * (cannot listen) or -SLUICE_ENOMEM; err says why, and nothing is left open.
 */
int daemon_rls_start(uv_loop_t *loop, struct limiter *lim, struct cluster *cluster,
                     const struct daemon_rls_options *o, struct daemon_rls **out, char *err,
                     size_t errlen);

/* Re-reads the YAML directory; on error keeps the config in use and returns
 * the error with err naming file and line.  0 when there is no directory. */
int daemon_rls_reload(struct daemon_rls *d, char *err, size_t errlen);

/* The service's and its gRPC listener's counters as they keep them (zero
 * when off), which daemon_rls_counters' rows read in place: a counter of
 * either is its field there and one row here. */
struct daemon_rls_stats {
    struct rls_service_stats svc;
    struct rls_server_stats srv; /* its errors count the service's too */
    uint64_t reload_failures;    /* YAML reloads refused */
};
/* Fills *out (all zero for a NULL d).  Never fails. */
void daemon_rls_get_stats(const struct daemon_rls *d, struct daemon_rls_stats *out);

/* The service's descriptor series into out (up to max; NULL d: none), for
 * a scrape; the keys stay the service's, valid until its next call.
 * Returns how many were filled. */
size_t daemon_rls_descriptor_stats(const struct daemon_rls *d, struct metrics_keyed *out,
                                   size_t max);
/* struct daemon_rls_stats' rows for INFO's "# Listeners" and /metrics. */
extern const struct counter_table daemon_rls_counters;

/* Closes the listener and connections (the loop runs the closes); NULL ok. */
void daemon_rls_close(struct daemon_rls *d);
/* Frees everything, after the loop has run the closes; NULL ok. */
void daemon_rls_destroy(struct daemon_rls *d);

#endif
