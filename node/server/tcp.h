/*
 * tcp: a TCP listener on the daemon's loop from a "HOST:PORT" string, the
 * one piece of set-up every TCP surface shares (the HTTP listener, the
 * optional RESP listener, Envoy's rate limit service).
 */
#ifndef SLUICE_TCP_H
#define SLUICE_TCP_H

#include <stddef.h>
#include <uv.h>

/*
 * The accept queue of every listener (the kernel caps it at
 * net.core.somaxconn).  A crowd that reconnects as fast as it is evicted
 * fills a short queue within one loop turn; the kernel then drops the
 * SYNs (or the handshake's last ACK) of everyone else, and a real client's
 * connect waits out a 1 s retransmission: with 128, a gRPC client with a
 * 1 s deadline lost 3 calls of 1,129 in 120 s of the hostile soak's
 * crowds (122 overflows), none with 4,096.  Redis's tcp-backlog and
 * nginx's backlog are 511.
 */
#define TCP_LISTEN_BACKLOG 4096

/*
 * Resolves bind, initialises t on loop, binds and listens
 * (TCP_LISTEN_BACKLOG) with cb.  *opened is set to 1 once t is initialised (the caller then
 * uv_closes it, on failure too).  *port receives the bound port (useful with
 * port 0) and *loopback 1 when the address is 127.0.0.0/8 or ::1.  Fails
 * with -SLUICE_EINVAL (not HOST:PORT, or unresolvable) or -SLUICE_EIO
 * (bind or listen), writing "what: reason" into err.
 */
int tcp_listen(uv_loop_t *loop, uv_tcp_t *t, const char *bind, uv_connection_cb cb, int *opened,
               int *port, int *loopback, char *err, size_t errlen);

#endif
