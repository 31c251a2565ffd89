/*
 * reload: the policies of the config file, read again and swapped into the
 * limiter, for SIGHUP (the daemon calls it) and SL.RELOAD (the command
 * layer calls it through the hook the daemon injects,
 * commands_sl_config.reloader), so that the command layer neither reads
 * the file nor swaps policies, and SIGHUP does not go through it.
 *
 * A crowd of reload requests costs one parse per change of the file, not
 * one per request.  The config file is read only if it is a regular file
 * (file.h: a FIFO would block the loop).  A request that finds the file
 * unchanged since the last successful load (same inode, size, mtime and
 * ctime) answers at once with no new set (the policies in use are the
 * file's), so that 2,000 pipelined SL.RELOADs of a 4,096-policy file stall
 * nobody; a broken file is parsed once while it stays as it was.
 *
 * Off the loop: the parse runs in libuv's threadpool, one at a time, and
 * its outcome is applied on the loop.  Requests that come while a parse
 * runs may have seen a newer file than it read: the next parse answers
 * them, all together.  Every request is counted once (reloads,
 * reload_failures, reloads_unchanged: INFO's "# Policies" and /metrics).
 */
#ifndef SLUICE_RELOAD_H
#define SLUICE_RELOAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <uv.h>

#include "commands_sl.h"
#include "limiter.h"
#include "policy.h"
#include "server.h"

struct reload_waiter;

struct reload {
    const char *path; /* borrowed: the --config path; NULL: none */
    struct stat st;   /* of the last successful load */
    int have;         /* st is set */
    /* The last failed load, answered again while the file stays as it was
     * (a broken file is parsed once, not once per request). */
    struct stat fail_st;
    int fail_rc; /* 0: none */
    char fail_err[512];
    /* Where the policies go, and the loop the parses leave (NULL: every
     * reload is done on the caller's stack). */
    struct limiter *lim;
    uv_loop_t *loop;
    uint64_t reloads, failures, unchanged;
    /* The parse off the loop: the requests it answers, and those that came
     * while it ran, which the next parse answers. */
    uv_work_t work;
    int busy, again;
    struct reload_waiter *cur, *next;
    struct reload_waiter *ans; /* being answered now (unblocking may close others) */
    int wrc;                   /* the worker's result ... */
    struct policy_set *wset;   /* ... its new set (NULL: unchanged) ... */
    char werr[512];            /* ... and its reason */
};

/* Starts with nothing loaded (the first request reads the file); path NULL
 * when there is no config file (every reload then fails, counted). */
void reload_init(struct reload *r, const char *path);
/* Records the load the daemon did at start (st from config_load_file). */
void reload_loaded(struct reload *r, const struct stat *st);
/* Where the policies go (lim, borrowed) and the loop to leave (NULL: none).
 * Before any reload; r must not move afterwards (the threadpool holds it). */
void reload_attach(struct reload *r, struct limiter *lim, uv_loop_t *loop);

/*
 * Reloads now, on the caller's stack: loads and builds a new set and swaps
 * it in only if both succeed; otherwise keeps the running set, counts a
 * failure, logs and writes the reason into err ("FILE:LINE: reason").
 * 0 or -SLUICE_ECONFIG / -SLUICE_EIO / -SLUICE_ENOMEM / -SLUICE_EINVAL (no
 * config file).  Only policies are reloaded; [sluiced] and [cluster]
 * settings need a restart.
 */
int reload_now(struct reload *r, char *err, size_t errlen);

/*
 * The same off the loop (needs reload_attach's loop).  With c, the client
 * is blocked (server_client_block) and answered +OK or "-ERR reload
 * failed: reason" by the first parse that starts after this call, shared
 * with every request that joined it; a client that goes away first is
 * simply dropped.  With c NULL (SIGHUP) nobody is answered.  0,
 * -SLUICE_EINVAL (no config file or loop) or -SLUICE_ENOMEM.
 */
int reload_start(struct reload *r, struct server_client *c);

/* The hook SL.RELOAD calls (struct commands_sl_reloader, ud: r): with c
 * and a loop, reload_start (1: c answered later); else reload_now (0, or
 * a negative code with the reason in err). */
int reload_request(void *ud, struct server_client *c, char *err, size_t errlen);
/* Its counters into out (reloads, reload_failures, reloads_unchanged). */
void reload_stats(void *ud, struct commands_sl_stats *out);

#endif
