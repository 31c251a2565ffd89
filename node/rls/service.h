/*
 * rls service: one ShouldRateLimit call, bytes in and bytes out.
 *
 * The service holds the YAML config in use and asks the daemon's decider
 * (rls.h) for each descriptor that has a limit.  It does no I/O and keeps
 * no state between calls besides counters, so the fuzz target drives it
 * exactly as the server does.
 *
 * Descriptor to sluice key: "DOMAIN|KEY_VALUE|KEY_VALUE..." with every
 * entry of the request descriptor, in order (an entry with an empty value
 * gives "KEY_"), so each value under a key-only rule has its own counter,
 * as in envoyproxy/ratelimit's cache keys.  A limit override in the
 * request adds "|@UNIT" (its unit's name), so overrides of different units
 * keep different counters, as envoyproxy's keys carry their window.
 */
#ifndef SLUICE_RLS_SERVICE_H
#define SLUICE_RLS_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "rls.h"

/* Bounds of one request; more is INVALID_ARGUMENT. */
#define RLS_SERVICE_MAX_DESCRIPTORS 256
#define RLS_SERVICE_MAX_ENTRIES     64
#define RLS_SERVICE_MAX_KEY         2048

struct rls_service_config {
    int global;  /* every decision is asked with scope global */
    int headers; /* add RateLimit-Limit/-Remaining/-Reset to the response */
    /* envoyproxy/ratelimit's QUOTA_MODE and SHADOW_MODE: every limit is in
     * quota mode; an OVER_LIMIT overall code is answered OK. */
    int quota_mode;
    int shadow_mode;
    /* envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA: every answer
     * carries dynamic_metadata (meta.h: the domain, the descriptors, and
     * the metadata of the limits that passed). */
    int dynamic_metadata;
    /* envoyproxy/ratelimit's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: the
     * health service says NOT_SERVING while the config holds no domain. */
    int healthy_needs_config;
    /* Whether the node is ready (the daemon's /ready); NULL: always.  The
     * health service answers NOT_SERVING while it returns 0. */
    int (*ready)(void *ud);
    void *ready_ud;
    /* Header names; NULL gives envoyproxy/ratelimit's defaults above. */
    const char *header_limit;
    const char *header_remaining;
    const char *header_reset;
};

struct rls_service_stats {
    uint64_t calls;              /* answered with OK status */
    uint64_t over_limit;         /* of which overall_code OVER_LIMIT */
    uint64_t shadowed;           /* descriptors over the limit answered OK by shadow_mode */
    uint64_t shadowed_global;    /* overall OVER_LIMIT answered OK by SHADOW_MODE */
    uint64_t errors;             /* calls answered with an error status */
    uint64_t health_checks;      /* grpc.health.v1 Check calls answered SERVING */
    uint64_t health_not_serving; /* ... answered NOT_SERVING */
    uint64_t health_watches;     /* grpc.health.v1 Watch calls started */
    uint64_t reloads;            /* configs installed after the first */
};

struct rls_service;

/* Creates a service with an empty config; cfg is copied (its strings must
 * outlive the service).  -SLUICE_EINVAL (fn NULL), -SLUICE_ENOMEM. */
int rls_service_create(const struct rls_service_config *cfg, rls_decide_fn fn, void *ud,
                       struct rls_service **out);
void rls_service_destroy(struct rls_service *svc);

/* Installs cfg (the service takes it) and frees the one in use. */
void rls_service_set_config(struct rls_service *svc, struct rls_config *cfg);

/*
 * Answers one RateLimitRequest (protobuf bytes, no gRPC prefix).  On success
 * returns 0 and *out is a new buffer (free() it) holding the gRPC-framed
 * RateLimitResponse, *outlen bytes.  On failure *out is NULL, why gets a
 * short text for grpc-message, and the return is -SLUICE_EPROTO (not a
 * RateLimitRequest), -SLUICE_EINVAL (no domain, no descriptors, a bound
 * above exceeded, a bad override), -SLUICE_ETOOBIG (a key too long),
 * -SLUICE_EFULL / -SLUICE_ENOMEM (no room for state), or another code from
 * the decider.  Decisions taken before a failure stand (as with several
 * descriptors in envoyproxy/ratelimit).
 */
int rls_service_call(struct rls_service *svc, const uint8_t *req, size_t len, uint8_t **out,
                     size_t *outlen, char *why, size_t whylen);

/* The gRPC status (grpc.h) for a return of rls_service_call. */
int rls_service_grpc_status(int rc);

/*
 * Statistics per descriptor, as envoyproxy/ratelimit keeps them per limit:
 * hits counted under a limit, the hits over it, within it, and over it but
 * let through by shadow_mode.  A limit's series is its config key
 * ("domain.key_value.key"); a limit with detailed_metric: true (and a
 * request's own limit override) keeps one per request descriptor, its key
 * every entry's key_value ("domain.key_value.key_value").  Bounded: the
 * first RLS_SERVICE_MAX_STATS keys seen have a series, every later key
 * counts under "_other".  Series outlive reloads (counters only grow).
 */
#define RLS_SERVICE_MAX_STATS 256
struct rls_descriptor_stat {
    const char *key;
    uint64_t hits, over_limit, within_limit, shadow_mode;
};
/* The series (*out, valid until the next call to the service), their count. */
size_t rls_service_descriptor_stats(const struct rls_service *svc,
                                    const struct rls_descriptor_stat **out);

/* grpc.health.v1's ServingStatus values (health.proto). */
enum rls_health_status {
    RLS_HEALTH_SERVING = 1,
    RLS_HEALTH_NOT_SERVING = 2,
    RLS_HEALTH_SERVICE_UNKNOWN = 3, /* Watch only */
};

/* A HealthCheckResponse with its gRPC prefix fits in this many bytes. */
#define RLS_HEALTH_MSG_MAX 16

/*
 * One grpc.health.v1.Health/Check call: req is the HealthCheckRequest's
 * bytes (without the gRPC prefix); on success *out (malloc'ed, the
 * caller frees) is the prefixed HealthCheckResponse: SERVING, or
 * NOT_SERVING while the config's ready callback says not ready (or, with
 * healthy_needs_config, while no domain is loaded).  Fails with
 * -SLUICE_EPROTO (a malformed request), -SLUICE_ENOENT (a service name
 * other than "", "ratelimit" or envoy.service.ratelimit.v3.RateLimitService:
 * gRPC's NOT_FOUND) or -SLUICE_ENOMEM, with why set.
 */
int rls_service_health(struct rls_service *svc, const uint8_t *req, size_t len, uint8_t **out,
                       size_t *outlen, char *why, size_t whylen);

/*
 * The start of a grpc.health.v1.Health/Watch call: parses req (as Check's)
 * and sets *known to 1 when the name is one Check answers, 0 otherwise
 * (the server then streams SERVICE_UNKNOWN, and keeps the call open, as
 * health.proto says).  Fails with -SLUICE_EPROTO or -SLUICE_ENOMEM, why
 * set.  The stream's messages come from rls_service_health_status() and
 * rls_service_health_pack(); the server owns the stream.
 */
int rls_service_health_watch(struct rls_service *svc, const uint8_t *req, size_t len, int *known,
                             char *why, size_t whylen);

/* The status of the known names now: RLS_HEALTH_SERVING or
 * RLS_HEALTH_NOT_SERVING, as Check would answer (counts nothing). */
int rls_service_health_status(struct rls_service *svc);

/* Writes the prefixed HealthCheckResponse for status into out; returns
 * its length (0 only for a status that does not fit, none of the enum). */
size_t rls_service_health_pack(int status, uint8_t out[RLS_HEALTH_MSG_MAX]);

void rls_service_get_stats(const struct rls_service *svc, struct rls_service_stats *out);

#endif
