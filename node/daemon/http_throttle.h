/*
 * http_throttle: the HTTP decision endpoint, a route on the daemon's HTTP
 * listener (server/http.h) for proxies that ask "may this request pass?"
 * by HTTP: nginx auth_request, Traefik forwardAuth, Caddy forward_auth.
 *
 *   GET /v1/throttle?key=KEY&policy=NAME[&cost=Q]
 *   GET /v1/throttle?key=KEY&burst=B&count=C&period=SECONDS[&cost=Q]
 *
 * The second form means what CL.THROTTLE KEY B C SECONDS Q means.  A proxy
 * that cannot build a query string sends the same values as headers
 * (X-Sluice-Key, X-Sluice-Policy, X-Sluice-Burst, X-Sluice-Count,
 * X-Sluice-Period, X-Sluice-Cost); query parameters win when both are
 * given.  A proxy that can do neither (Traefik's forwardAuth) names a
 * request header to take the key from: ?key_header=X-Forwarded-For (its
 * first comma-separated element).
 *
 * Trust.  nginx auth_request, Caddy forward_auth and Traefik forwardAuth
 * all forward the end user's own request headers to this endpoint, so a
 * header read here is one the end user may have written: "X-Sluice-Cost: 0"
 * would let every request through, "X-Sluice-Key: victim" would spend
 * someone else's limit.  The X-Sluice-* headers are therefore read only
 * when the operator says the proxy in front sets (or strips) them all
 * (trust_headers, --http-trust-headers on); otherwise they are ignored and
 * the parameters come from the query string, which the proxy's
 * configuration fixes.  And a cost is a whole number from 1 up: a request
 * that asks for nothing (cost 0) is refused with 400, never allowed.
 *
 * Each request is decided by the one decision entry (global/decide.h), as
 * SL.THROTTLE KEY POLICY NAME QTY Q, SL.CHARGE or CL.THROTTLE would be over
 * RESP, so a global key is decided by the cluster exactly as it is there
 * (and the inline form rounds seconds as CL.THROTTLE does).
 *
 * Answers:
 *   200 "allowed"                 the request may pass
 *   deny_status (429) "limited"   with Retry-After: seconds, rounded up
 *   400                           missing or malformed parameters, or the
 *                                 command's error (an unknown policy)
 * Both 200 and the refusal carry the IETF RateLimit fields
 * (draft-ietf-httpapi-ratelimit-headers-08 and later):
 *   RateLimit-Policy: "NAME";q=LIMIT;w=WINDOW_SECONDS
 *   RateLimit: "NAME";r=REMAINING;t=SECONDS_UNTIL_FULL
 * where NAME is the policy's name, or "default" for the inline form.
 */
#ifndef SLUICE_HTTP_THROTTLE_H
#define SLUICE_HTTP_THROTTLE_H

#include "cluster.h"
#include "decide.h"
#include "http.h"
#include "limiter.h"

#define HTTP_THROTTLE_PATH "/v1/throttle"

struct http_throttle_config {
    int deny_status;   /* 429 (0 means 429) or 403 for nginx auth_request */
    int trust_headers; /* nonzero: read X-Sluice-* headers (see above) */
};

struct http_throttle;

/*
 * Routes HTTP_THROTTLE_PATH on h to a new endpoint that decides with lim
 * and cluster (NULL when not clustered); both borrowed and outliving it.
 * Fails with -SLUICE_EINVAL (a deny_status other than 403 or 429),
 * -SLUICE_ENOMEM or http_route's errors.  The caller frees *out with
 * http_throttle_destroy after http_destroy.
 */
int http_throttle_attach(struct http_server *h, struct limiter *lim, struct cluster *cluster,
                         const struct http_throttle_config *cfg, struct http_throttle **out);

/* Frees t; NULL is fine. */
void http_throttle_destroy(struct http_throttle *t);

#endif
