/*
 * server: the RESP listener on a Unix socket, on a libuv loop the caller owns.
 *
 * Design.
 *
 * - The loop is the caller's (sluiced creates it and shares it with the gossip
 *   layer and timers); the server only adds a listening pipe and one pipe per
 *   client.  Everything runs on the loop thread, so a command handler is
 *   atomic with respect to every other command and to gossip callbacks.
 *
 * - Input: every read is parsed at once and every complete command in it is
 *   executed (pipelining); replies accumulate in the client's output buffer
 *   and go out in one non-blocking write per read (uv_try_write, and a queued
 *   uv_write for whatever the socket did not take).  Idle clients hold no
 *   input buffer: reads land in one shared buffer and only the unparsed tail
 *   of a read is copied into the client.
 *
 * - Backpressure: when a client's unsent output exceeds out_soft_limit the
 *   server stops executing its commands; it resumes when the output drains.
 *   Its input is still read, so a disconnect is seen at once, but only up to
 *   max_request + 64 KiB of queued bytes, then reading stops too.  Output past
 *   out_hard_limit disconnects it.  So a slow reader costs memory bounded by
 *   the limits and never blocks the loop.  An input buffer holding a large
 *   request is shrunk once the request is consumed.
 *
 * - Client memory budget: the bytes every client's buffers hold (input,
 *   output, name, the command layer's state, plus a fixed cost per client)
 *   are summed, with the HTTP and gRPC listeners' connections (each a pool
 *   of the one budget, clientmem.h); past max_client_memory the heaviest
 *   connections of any listener are disconnected
 *   first until the sum is within the budget (clientmem.h), counted in
 *   client_memory_disconnects and logged at most every 10 s.  The check runs
 *   after each read and write, never while a command is executing.  After
 *   clients or large buffers are freed, malloc_trim returns the pages to the
 *   system (at most once a second).
 *
 * - Replies later (blocking commands): a handler that cannot answer now calls
 *   server_client_block(c, cancel, arg) and returns without writing a reply.
 *   While blocked, the client's further pipelined commands are not executed
 *   (their bytes wait, bounded, in its input buffer), so replies stay in
 *   request order.  Later (from a timer, say) the owner writes the
 *   reply into server_client_out(c) and calls server_client_unblock(c), which
 *   flushes it and resumes the queued commands (calling it from the handler
 *   that blocked is allowed and simply cancels the block).  If the client disconnects
 *   first, cancel(c, arg) is called exactly once, before the client is freed,
 *   and the owner must drop its reference and must not call unblock.
 *
 * - TCP listener (--listen): its clients have their own cap
 *   (max_tcp_clients), apart from the Unix socket's (max_clients); past it
 *   a newcomer closes the worst TCP client (unauthenticated first, then the
 *   longest idle) rather than being refused.  A once-a-second sweep closes
 *   TCP clients that did not AUTH within tcp_auth_timeout_ms (when AUTH is
 *   required) or sent nothing for tcp_idle_timeout_ms (when set).  Both are
 *   logged at most once every 10 s with counts.
 *
 * - Shutdown: server_close() closes the listener and every client (cancelling
 *   blocked ones) and unlinks the socket; once the loop has run the close
 *   callbacks, server_destroy() frees the server.
 */
#ifndef SLUICE_SERVER_H
#define SLUICE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "counter.h"
#include "metrics.h"
#include "resp.h"

struct server;
struct server_client;

struct server_config {
    const char *socket_path; /* required; copied */
    unsigned socket_mode;    /* permission bits of the socket file, e.g. 0660 */
    int set_socket_gid;      /* nonzero: chown the socket file to socket_gid */
    unsigned socket_gid;
    size_t max_clients;    /* 0 = SERVER_DEFAULT_MAX_CLIENTS */
    size_t max_request;    /* bytes per command, 0 = RESP_DEFAULT_MAX_REQUEST */
    size_t max_args;       /* arguments per command, 0 = RESP_DEFAULT_MAX_ARGS */
    size_t out_soft_limit; /* pause a client above this much unsent output, 0 = 256 KiB */
    size_t out_hard_limit; /* disconnect above this, 0 = 16 MiB */
    /* Budget of every client's buffers together, 0 =
     * SERVER_DEFAULT_MAX_CLIENT_MEMORY, SERVER_CLIENT_MEMORY_UNLIMITED = none. */
    size_t max_client_memory;
    /* "HOST:PORT" of an optional TCP listener for the same protocol and
     * commands (--listen), or NULL; copied.  Its clients are marked
     * (server_client_is_tcp) so the command layer can require AUTH. */
    const char *listen;
    /* TCP clients at once (0 = SERVER_DEFAULT_MAX_TCP_CLIENTS), counted
     * apart from max_clients, which bounds the Unix socket's clients only: a
     * crowd of network connections never takes a local application's slot.
     * A TCP newcomer past the cap closes the worst TCP client instead of
     * being refused: the oldest that has not authenticated, else the one
     * idle longest (logged, counted in tcp_evictions). */
    size_t max_tcp_clients;
    /* Nonzero: TCP clients must AUTH (the command layer's requirepass) and
     * one that has not within tcp_auth_timeout_ms of connecting is closed. */
    int tcp_auth;
    uint64_t tcp_auth_timeout_ms; /* 0 = SERVER_DEFAULT_TCP_AUTH_TIMEOUT_MS */
    /* A TCP client that sent nothing for this long is closed; 0 = never
     * (Redis's timeout 0), as connection pools keep idle connections. */
    uint64_t tcp_idle_timeout_ms;
};

#define SERVER_DEFAULT_MAX_TCP_CLIENTS     1024
#define SERVER_DEFAULT_TCP_AUTH_TIMEOUT_MS 10000

/* What a dispatch function returns. */
enum { SERVER_CONTINUE = 0, SERVER_CLOSE_AFTER_REPLY = 1 };

/* Client connections at once when not configured (--max-clients' default,
 * with or without a config file). */
#define SERVER_DEFAULT_MAX_CLIENTS 10000

/* Client memory budget when not configured (--max-client-memory's default):
 * 64 MiB, within the example Kubernetes limit next to a full key table. */
#define SERVER_DEFAULT_MAX_CLIENT_MEMORY (64u * 1024 * 1024)
_Static_assert(SERVER_DEFAULT_MAX_CLIENT_MEMORY == 64u << 20, "the comment above says 64 MiB");
#define SERVER_CLIENT_MEMORY_UNLIMITED ((size_t)-1)

/*
 * Executes one command (argc >= 1; the pointers are valid only during the
 * call).  The handler appends exactly one reply to out, or blocks the client
 * (see above).  Returns SERVER_CONTINUE or SERVER_CLOSE_AFTER_REPLY.
 */
typedef int (*server_dispatch_fn)(void *ud, struct server_client *c, size_t argc, const char **argv,
                                  const size_t *argvlen, struct resp_buf *out);

/*
 * A look-ahead hint.  The server parses a client's pipelined commands a few
 * at a time and calls the hint for each a few commands before it runs:
 * stage 0, then stage 1 a command or two later, so that the memory the
 * command will touch (a key's bucket, then its entry) is on its way while
 * the commands before it run, instead of one cache miss after the other
 * (at a million keys a decision was mostly two misses in a row).  *state is
 * the hint's own, kept from stage 0 to stage 1 of the same command.  A
 * command alone in its read is not hinted.  A hint must change nothing a
 * command can observe, and may be called again for a command that waited
 * (a client paused before it ran).
 */
typedef void (*server_hint_fn)(void *ud, size_t argc, const char **argv, const size_t *argvlen,
                               int stage, uint32_t *state);

/* Called when a blocked client goes away before being unblocked. */
typedef void (*server_cancel_fn)(struct server_client *c, void *arg);

struct server_stats {
    uint64_t connected_clients;
    uint64_t total_connections;    /* accepted, including rejected ones */
    uint64_t rejected_connections; /* over max_clients */
    uint64_t total_commands;
    uint64_t protocol_errors;
    uint64_t output_limit_disconnects;
    uint64_t client_memory;             /* bytes held by clients now (gauge) */
    uint64_t client_memory_disconnects; /* heaviest clients closed over the budget */
    uint64_t memory_trims;              /* malloc_trim calls */
    uint64_t memory_trim_ns;            /* the time they took, in all */
    uint64_t memory_trim_ms;            /* the same in ms (server_get_stats) */
    uint64_t tcp_clients;               /* TCP clients connected now (gauge) */
    uint64_t tcp_evictions;             /* TCP clients closed for a newcomer over the cap */
    uint64_t tcp_timeouts;              /* TCP clients closed: no AUTH in time, or idle */
    uint64_t held_reads;       /* client reads kept for the next loop turn (one read a turn) */
    uint64_t deferred_closes;  /* hung-up clients closed at a later turn (closebudget.h) */
    uint64_t loop_turns;       /* event loop turns measured (loopstat.h) */
    uint64_t loop_max_turn_us; /* the longest turn's work, in us, since start or CONFIG RESETSTAT */
    uint64_t loop_max_turn_cpu_us; /* the most CPU one turn used, in us, same span */
};

/* struct server_stats' rows: INFO's "# Clients", "# Stats" and the TCP
 * listener's part of "# Listeners", and /metrics. */
extern const struct counter_table server_client_counters;
extern const struct counter_table server_command_counters;
extern const struct counter_table server_tcp_counters;

/* Creates a server (nothing is bound yet).  Fails with -SLUICE_EINVAL (no
 * path, or a path too long for a Unix socket) or -SLUICE_ENOMEM. */
int server_create(uv_loop_t *loop, const struct server_config *cfg, server_dispatch_fn dispatch,
                  void *ud, struct server **out);

/* Sets the look-ahead hint (NULL: none); it is called with server_create's
 * ud. */
void server_set_hint(struct server *s, server_hint_fn hint);

/*
 * Binds and listens.  An existing socket file that refuses connections is
 * stale and replaced; if a live process answers on it, fails with
 * -SLUICE_EEXIST (as it does when the path exists and is not a socket).
 * Other failures: -SLUICE_EIO.  server_error() then says why in words.
 */
int server_start(struct server *s);
const char *server_error(const struct server *s);

/* Starts shutdown (idempotent): see the design note. */
void server_close(struct server *s);
/* Frees the server; call after server_close once the loop has run dry. */
void server_destroy(struct server *s);

void server_get_stats(const struct server *s, struct server_stats *out);
/* The event loop's turn durations as a histogram (loopstat.h). */
void server_get_loop_turns(const struct server *s, struct metrics_histogram *out);
/* Forgets the longest loop turn (CONFIG RESETSTAT). */
void server_reset_loop_max(struct server *s);

/* The one client memory budget (max_client_memory) that the HTTP and gRPC
 * listeners join with their own pools (clientmem.h); owned by s, so they
 * must leave it before s is destroyed. */
struct clientmem_budget *server_memory_budget(struct server *s);
/* The clock a handler decides with: the monotonic nanoseconds c's server
 * read once at the start of the current read batch, or the
 * monotonic clock when c is NULL (handlers called directly by tests). */
int64_t server_client_now_ns(const struct server_client *c);

/* The TCP listener's bound port (0 without one) and whether its address is
 * loopback (127.0.0.0/8, ::1). */
int server_tcp_port(const struct server *s);
int server_tcp_loopback(const struct server *s);
/* 1 for a client of the TCP listener. */
int server_client_is_tcp(const struct server_client *c);
/* 1 once the client passed AUTH (and for c NULL: no connection to check). */
int server_client_authed(const struct server_client *c);
void server_client_set_authed(struct server_client *c);

/* Per-client accessors for handlers. */
struct server *server_client_server(const struct server_client *c);
uint64_t server_client_id(const struct server_client *c);
/* The client's name ("" when unset); owned by the client. */
const char *server_client_name(const struct server_client *c);
/* Copies name (len bytes, no NUL needed).  Fails with -SLUICE_ENOMEM. */
int server_client_set_name(struct server_client *c, const char *name, size_t len);
/*
 * The protocol the client chose with HELLO: 2 (RESP2, every connection's
 * start) or 3.  It lives and dies with the connection, so nothing has to be
 * forgotten when the client leaves.  server_client_proto(NULL) is 2 (a
 * command run without a connection, as in unit tests); setting anything but
 * 3 means 2; setting on NULL does nothing.  Never fails.
 */
int server_client_proto(const struct server_client *c);
void server_client_set_proto(struct server_client *c, int proto);
struct resp_buf *server_client_out(struct server_client *c);
/* Per-connection state of the command layer (MULTI's queue): owned by the
 * connection once set, freed with ctx_free when it closes or is replaced.
 * NULL c: server_client_ctx answers NULL; set_ctx frees ctx at once (the
 * caller gave it away either way). */
void *server_client_ctx(const struct server_client *c);
void server_client_set_ctx(struct server_client *c, void *ctx, void (*ctx_free)(void *ctx));
/*
 * A hook called once when c closes (after a blocked client's cancel, before
 * the client is freed), for what the command layer ties to the connection
 * rather than to a command: the leases SL.LEASE took on it.  One hook per
 * client; setting another replaces it (NULL fn removes it).  NULL c: no-op.
 */
typedef void (*server_close_fn)(struct server_client *c, void *arg);
void server_client_set_close_hook(struct server_client *c, server_close_fn fn, void *arg);
/* The close hook's argument (NULL: none set, or NULL c). */
void *server_client_close_arg(const struct server_client *c);
/* The bytes the ctx holds now, counted in the client's memory (0 when it
 * holds none or is freed).  NULL c: no-op. */
void server_client_set_ctx_bytes(struct server_client *c, size_t bytes);
/*
 * Whether the reply c's handler is building still fits, checked as it grows
 * (a transaction's EXEC calls it after each queued command): c's unsent
 * output, the reply included, within out_hard_limit, and every client's
 * memory, c's output buffer at its current size included, within
 * max_client_memory.  Returns 0 when it fits, -SLUICE_ETOOBIG when not: the
 * handler then drops what it built and closes the client
 * (server_client_drop_reply), so one client's reply never grows the daemon
 * past the bounds the next read would enforce.  NULL c: 0.
 */
int server_client_reply_fits(struct server_client *c);
/* Cuts c's output back to mark bytes (a length of server_client_out(c)
 * taken before the reply began), counts the client in
 * output_limit_disconnects and logs it; the handler then answers an error
 * and returns SERVER_CLOSE_AFTER_REPLY.  NULL c: no-op. */
void server_client_drop_reply(struct server_client *c, size_t mark);
/* The per-client output bound (out_hard_limit), so a command layer can
 * bound a reply before building it.  NULL c: 16 MiB. */
size_t server_client_out_limit(const struct server_client *c);
void server_client_block(struct server_client *c, server_cancel_fn cancel, void *arg);
void server_client_unblock(struct server_client *c);

#endif
