/*
 * commands: the command table behind the RESP server.
 *
 * Enough of the Redis surface that unmodified clients work (redis-cli,
 * redis-benchmark, redis-py, ioredis): CL.THROTTLE with redis-cell's exact
 * replies and error texts, PING, ECHO, QUIT, HELLO (2 or 3: RESP3 per
 * connection, which changes the SL.* replies to maps), CLIENT
 * SETNAME/GETNAME/SETINFO/ID, INFO, COMMAND, CONFIG GET (minimal), SELECT 0,
 * and Redis's error for unknown commands.  Command names are
 * case-insensitive.
 *
 * Argument validation lives here: the key length bound and strict integer
 * parsing (full int64 range, an optional sign, nothing else).  Semantic
 * errors are replies; the connection stays open.
 */
#ifndef SLUICE_COMMANDS_H
#define SLUICE_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

#include "commands_sl.h"
#include "limiter.h"
#include "resp.h"
#include "server.h"

/* The Redis version sluice reports to clients that gate features on it. */
#define SLUICE_REDIS_COMPAT_VERSION "7.0.0"

#define COMMANDS_DEFAULT_MAX_KEY 512
/* The longest password requirepass accepts (config file or file). */
#define COMMANDS_MAX_REQUIREPASS 512

struct cluster;
struct commands_sl;
struct readiness;

struct commands_config {
    size_t max_key_bytes;    /* 0 = COMMANDS_DEFAULT_MAX_KEY */
    struct cluster *cluster; /* borrowed; NULL: a node running alone */
    struct commands_sl *sl;  /* borrowed; the SL.* commands (NULL: not offered) */
    struct readiness *ready; /* borrowed; INFO cluster_state (NULL: always ok) */
    int admin_off;           /* 1: administrative commands (SL.RELOAD) answer an error */
    /* The password TCP clients must give (AUTH, HELLO AUTH) before any other
     * command; NULL: none.  Borrowed: must outlive the command layer.  Unix
     * socket clients are let in by the socket's permissions. */
    const char *requirepass; /* NULL or "": none; at most COMMANDS_MAX_REQUIREPASS bytes */
    /* Writes INFO's "# Listeners" lines (name:value CRLF) into t: the
     * network listeners the daemon runs, which this layer does not know.
     * NULL: no such section. */
    void (*listeners_info)(void *ud, struct resp_buf *t);
    void *listeners_ud;
};

struct commands;

/* Creates the command layer over lim (borrowed: must outlive the result).
 * Fails with -SLUICE_ENOMEM. */
int commands_create(struct limiter *lim, const struct commands_config *cfg, struct commands **out);
void commands_destroy(struct commands *cmds);

/* A server_hint_fn: ud is the struct commands.  CL.THROTTLE's key is
 * looked for ahead in the table that will decide it (decide_prefetch);
 * other commands are not hinted. */
void commands_hint(void *ud, size_t argc, const char **argv, const size_t *argvlen, int stage,
                   uint32_t *state);

/*
 * A server_dispatch_fn: ud is the struct commands.  c may be NULL (unit
 * tests): then client-specific commands answer an error and time is read
 * from uv_hrtime().  Appends exactly one reply to out.
 */
int commands_dispatch(void *ud, struct server_client *c, size_t argc, const char **argv,
                      const size_t *argvlen, struct resp_buf *out);

/* The decision latency histogram (one decision in 16 timed, from the
 * handler's start to its reply). */
struct metrics_histogram;
void commands_get_latency(const struct commands *cmds, struct metrics_histogram *out);

/*
 * Runs one command without a connection (the HTTP decision endpoint, a
 * test): RESP2, an SL.ACQUIRE answers at once instead of waiting, and a
 * command about the connection itself (CLIENT, HELLO, MULTI ...) answers an
 * error.  Appends exactly one reply to out.  -SLUICE_EINVAL for missing
 * arguments (nothing appended); otherwise 0, the command's own errors being
 * replies.
 */
int commands_execute(struct commands *cmds, size_t argc, const char **argv, const size_t *argvlen,
                     struct resp_buf *out);

/*
 * The row of the command table for a name (len bytes, any case), or NULL
 * for an unknown command.  Rows are static: never freed.
 */
struct commands_row;
const struct commands_row *commands_find(const char *name, size_t len);
/* The SL.* handler of a row (commands_sl.h), or NULL when the row is not
 * an SL.* command.  Lets tests and fuzz targets drive one SL.* handler
 * without a server. */
commands_sl_fn commands_row_sl(const struct commands_row *row);

#endif
