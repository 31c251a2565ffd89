/*
 * rls server: Envoy's rate limit service over gRPC on HTTP/2 cleartext
 * (prior knowledge, as Envoy's http2_protocol_options speaks to a gRPC
 * cluster), on the daemon's libuv loop, with nghttp2's server session fed
 * from libuv reads.  No threads: each call is decided in the event-loop
 * turn that completes its request.
 *
 * Ownership: the server borrows loop and svc (both must outlive it) and
 * copies cfg.  rls_server_close() closes the listener and every connection;
 * rls_server_destroy() frees the server once the loop has run those closes.
 */
#ifndef SLUICE_RLS_SERVER_H
#define SLUICE_RLS_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "service.h"

struct clientmem_budget;

#define RLS_DEFAULT_MAX_CONNECTIONS 1024
#define RLS_DEFAULT_HANDSHAKE_MS    10000
/* Health/Watch streams open at once, per connection and per listener. */
#define RLS_MAX_WATCHES_PER_CONN 16
#define RLS_DEFAULT_MAX_WATCHES  1024

struct rls_server_config {
    const char *bind; /* "HOST:PORT" or "[V6]:PORT"; port 0 picks one */
    /* Connections at once; 0: RLS_DEFAULT_MAX_CONNECTIONS.  A newcomer past
     * it closes the worst: the oldest silent one (no preface and SETTINGS
     * yet), else the one idle longest. */
    size_t max_connections;
    /* A connection that has not sent its preface and SETTINGS this long
     * after connecting is closed; 0: RLS_DEFAULT_HANDSHAKE_MS. */
    uint64_t handshake_timeout_ms;
    /* One with no stream open that sent nothing this long is told GOAWAY
     * and closed; 0: never (Envoy keeps its connections). */
    uint64_t idle_timeout_ms;
    /* The daemon's one client memory budget (clientmem.h), borrowed; every
     * byte a connection holds, nghttp2's included, is charged to it and
     * past it the heaviest connection of any listener is closed.  NULL:
     * not counted. */
    struct clientmem_budget *budget;
    uint32_t max_streams;   /* SETTINGS_MAX_CONCURRENT_STREAMS; 0: 100 */
    size_t max_message;     /* largest request message; 0: 65536 */
    size_t max_conn_input;  /* request bytes one connection may buffer; 0: 256 KiB */
    size_t max_conn_output; /* unsent bytes before reading pauses; 0: 1 MiB */
    size_t max_watches;     /* Health/Watch streams at once; 0: RLS_DEFAULT_MAX_WATCHES */
};

struct rls_server_stats {
    uint64_t connections;          /* accepted, in total */
    uint64_t connected;            /* open now */
    uint64_t rejected_connections; /* closed at once: no other to close (0 in practice) */
    uint64_t evicted;              /* closed to make room for a newcomer */
    uint64_t timeouts;             /* closed silent past the handshake, or idle */
    uint64_t memory_evicted;       /* closed over the client memory budget */
    uint64_t requests;             /* streams answered */
    uint64_t errors;               /* of which with a non-OK grpc-status */
    uint64_t protocol_errors;      /* connections ended with GOAWAY for bad HTTP/2 */
    uint64_t deferred_reads;       /* reads held for a later loop turn's budget */
    uint64_t deferred_closes;      /* hung-up or timed-out connections closed at a later turn */
    uint64_t watching;             /* Health/Watch streams open now */
};

struct rls_server;

/* -SLUICE_EINVAL (no bind), -SLUICE_ENOMEM. */
int rls_server_create(uv_loop_t *loop, const struct rls_server_config *cfg, struct rls_service *svc,
                      struct rls_server **out);
/* Binds and listens.  -SLUICE_EINVAL (bad address) or -SLUICE_EIO; the
 * reason is rls_server_error(). */
int rls_server_start(struct rls_server *srv);
const char *rls_server_error(const struct rls_server *srv);
void rls_server_close(struct rls_server *srv);
/* The health status may have changed (the daemon started draining): every
 * Health/Watch stream hears the new one now rather than at the next poll.
 * NULL ok. */
void rls_server_health_changed(struct rls_server *srv);
void rls_server_destroy(struct rls_server *srv);
void rls_server_get_stats(const struct rls_server *srv, struct rls_server_stats *out);

#endif
