/*
 * rls: Envoy's rate limit service (envoy.service.ratelimit.v3) for sluice.
 *
 * The wing has four modules, none of which knows the limiter:
 *   config.c   envoyproxy/ratelimit's YAML configuration, read as is, and
 *              its descriptor matching rules
 *   service.c  one ShouldRateLimit call: protobuf bytes in, protobuf bytes
 *              out (no sockets), deciding through the callback below
 *   grpc.c     gRPC's message framing, status codes and grpc-timeout
 *   server.c   HTTP/2 cleartext (nghttp2) on the daemon's libuv loop
 *
 * The daemon fills struct rls_decider: it maps one descriptor's limit to one
 * of its algorithms and keys, so this wing never includes the limiter.
 */
#ifndef SLUICE_RLS_H
#define SLUICE_RLS_H

#include <stddef.h>
#include <stdint.h>

/* RateLimitResponse.RateLimit.Unit, with Envoy's numbers (WEEK is 7). */
enum rls_unit {
    RLS_UNIT_UNKNOWN = 0,
    RLS_UNIT_SECOND = 1,
    RLS_UNIT_MINUTE = 2,
    RLS_UNIT_HOUR = 3,
    RLS_UNIT_DAY = 4,
    RLS_UNIT_MONTH = 5,
    RLS_UNIT_YEAR = 6,
    RLS_UNIT_WEEK = 7,
};

/* Seconds in a unit, as envoyproxy/ratelimit divides time (a month is 30
 * days, a year 365); 0 for RLS_UNIT_UNKNOWN or an unknown value. */
int64_t rls_unit_seconds(int unit);
/* "second", ...; NULL for an unknown unit.  Parses case-insensitively. */
const char *rls_unit_name(int unit);
int rls_unit_parse(const char *s, enum rls_unit *out);

/* One decision the service asks of the daemon. */
struct rls_decide_req {
    const char *key; /* domain|key_value|key_value... (not NUL-terminated) */
    size_t klen;
    int64_t requests_per_unit; /* >= 1 */
    enum rls_unit unit;        /* a known unit */
    int64_t period_s;          /* rls_unit_seconds(unit) */
    int64_t hits;              /* >= 0; 0 asks without charging */
    int global;                /* 1: the cluster shares this limit */
};

struct rls_decide_res {
    int limited;            /* 1: over the limit (the hits counted all the same) */
    int64_t remaining;      /* units left in the limit after this call */
    int64_t reset_after_ms; /* until the limit is whole again (calendar: window end) */
};

/* The daemon's decision.  Returns 0 with *res filled, or a negative
 * SLUICE_E* code (-SLUICE_ETOOBIG for a key too long, -SLUICE_EFULL or
 * -SLUICE_ENOMEM when no state can be kept), and then charges nothing. */
typedef int (*rls_decide_fn)(void *ud, const struct rls_decide_req *req,
                             struct rls_decide_res *res);

#endif
