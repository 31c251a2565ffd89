/*
 * http_lease: concurrency leases over HTTP, a route on the daemon's HTTP
 * listener for callers that speak HTTP rather than RESP.  Parameters come
 * in the query string (a body is not read):
 *
 *   POST   /v1/lease?key=KEY&policy=NAME[&qty=Q][&ttl=MS]
 *   POST   /v1/lease?key=KEY&limit=N[&qty=Q][&ttl=MS][&scope=local|global]
 *          takes a lease (SL.LEASE ... DETACH: an HTTP connection does not
 *          hold it; SL.RELEASE, DELETE or its TTL end it); never waits
 *   POST   /v1/lease/ID?key=KEY[&ttl=MS]     renews it (SL.RENEW)
 *   DELETE /v1/lease/ID?key=KEY              releases it (SL.RELEASE)
 *
 * Each runs the command a Redis client would send through the command
 * table, so a global key goes through the cluster exactly as over RESP.
 *
 * Answers:
 *   POST /v1/lease     200 {"id":ID,"ttl_ms":T,"limit":N,"remaining":R}
 *                      with X-Lease-Id: ID; 429 {"limited":true,...} with
 *                      Retry-After (seconds, rounded up) when a unit may
 *                      free by then; 400 for bad parameters or the
 *                      command's error
 *   POST /v1/lease/ID  200 {"ttl_ms":T}, 404 no such lease
 *   DELETE             200 "released", 404 no such lease
 */
#ifndef SLUICE_HTTP_LEASE_H
#define SLUICE_HTTP_LEASE_H

#include "commands.h"
#include "http.h"

#define HTTP_LEASE_PATH "/v1/lease"

struct http_lease;

/* Routes HTTP_LEASE_PATH (and below) on h to leases taken through cmds
 * (borrowed, outliving the route).  Fails with -SLUICE_EINVAL,
 * -SLUICE_ENOMEM or http_route_methods' errors.  Free *out with
 * http_lease_destroy after http_destroy. */
int http_lease_attach(struct http_server *h, struct commands *cmds, struct http_lease **out);
void http_lease_destroy(struct http_lease *t);

#endif
