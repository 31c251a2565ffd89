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

struct rls_server_config {
    const char *bind;       /* "HOST:PORT" or "[V6]:PORT"; port 0 picks one */
    size_t max_connections; /* more are closed at once; 0: 1024 */
    uint32_t max_streams;   /* SETTINGS_MAX_CONCURRENT_STREAMS; 0: 100 */
    size_t max_message;     /* largest request message; 0: 65536 */
    size_t max_conn_input;  /* request bytes one connection may buffer; 0: 256 KiB */
    size_t max_conn_output; /* unsent bytes before reading pauses; 0: 1 MiB */
};

struct rls_server_stats {
    uint64_t connections;          /* accepted, in total */
    uint64_t connected;            /* open now */
    uint64_t rejected_connections; /* over max_connections */
    uint64_t requests;             /* streams answered */
    uint64_t errors;               /* of which with a non-OK grpc-status */
    uint64_t protocol_errors;      /* connections ended with GOAWAY for bad HTTP/2 */
};

struct rls_server;

/* -SLUICE_EINVAL (no bind), -SLUICE_ENOMEM. */
int rls_server_create(uv_loop_t *loop, const struct rls_server_config *cfg, struct rls_service *svc,
                      struct rls_server **out);
/* Binds and listens.  -SLUICE_EINVAL (bad address) or -SLUICE_EIO; the
 * reason is rls_server_error(). */
int rls_server_start(struct rls_server *srv);
const char *rls_server_error(const struct rls_server *srv);
/* The bound port (after start). */
int rls_server_port(const struct rls_server *srv);
void rls_server_close(struct rls_server *srv);
void rls_server_destroy(struct rls_server *srv);
void rls_server_get_stats(const struct rls_server *srv, struct rls_server_stats *out);

#endif
