/*
 * commands_sl: the SL.* commands, every algorithm and named policy over the
 * socket.  commands.c routes the names below here.
 *
 * Grammar (words case-insensitive, integers strict decimal):
 *
 *   SPEC := POLICY name
 *         | ALGO algorithm [BURST b] RATE count period_ms [PRECISION p]
 *                [WARMUP ms] [COLD f] [SCOPE local|global]
 *         | (nothing: the policy whose match prefix is the longest prefix
 *            of the key; none -> "-ERR no policy matches key and no ALGO
 *            given")
 *   algorithm := gcra | token-bucket | fixed-window | sliding-window
 *              | sliding-log | warmup
 *   (PRECISION: sliding-window only; WARMUP, the warm-up period, default
 *    one period, and COLD, the cold factor, default 3: warmup only)
 *
 *   SL.THROTTLE key SPEC [QTY q] [PEEK]     decide q units (default 1)
 *   SL.PEEK     key SPEC [QTY q]            = SL.THROTTLE ... QTY 0: the
 *                                           state now, nothing taken
 *   SL.REFUND   key SPEC QTY q              give back up to q units (never
 *                                           beyond a fresh key); replies
 *                                           as SL.PEEK after the refund
 *   SL.CHARGE   key SPEC QTY q              post-paid: count q units
 *                                           whatever the key holds, into a
 *                                           debt that later requests wait
 *                                           out (limiter_charge)
 *   SL.RESET    key                         forget the key: :1 held, :0 not
 *   SL.ACQUIRE  key SPEC [QTY q] TIMEOUT ms wait up to ms for q units
 *   SL.MULTI [QTY q] KEY k1 SPEC [QTY q1] KEY k2 SPEC ...
 *                                           all or nothing over <= 16
 *                                           distinct keys
 *   SL.POLICIES                             the loaded policies
 *   SL.RELOAD                               reload the config file (as
 *                                           SIGHUP): +OK or -ERR why
 *
 * Replies (durations in milliseconds, rounded up; retry_after_ms is -1
 * when allowed or when q can never fit):
 *
 *   SL.THROTTLE, SL.PEEK, SL.REFUND, SL.CHARGE (limited: the key is now
 *   over its limit; retry_after_ms: until one unit fits again):
 *     RESP2  *5 [limited, limit, remaining, retry_after_ms, reset_after_ms]
 *            (CL.THROTTLE's shape: limited is 0 allowed, 1 limited)
 *     RESP3  %7 {limited, limit, remaining, retry_after_ms, reset_after_ms,
 *                algorithm, policy (null for an inline ALGO)}
 *   SL.ACQUIRE: the same plus waited_ms, the time the request waited:
 *     RESP2  *6 [..5 fields.., waited_ms]      RESP3  %8 {.., waited_ms}
 *   SL.MULTI:
 *     *(1+n) [limited, r1, ..., rn], limited 1 when any key refused (then
 *     no key was charged); ri is key i's SL.THROTTLE reply (on refusal: its
 *     state now, limited saying whether that key refused)
 *   SL.POLICIES: one element per policy, each field/value pairs (RESP2 a
 *     flat array, RESP3 a map): name, algorithm, burst, count, period_ms,
 *     precision, scope, partition, match (null if none), dry_run
 *
 * A dry-run policy decides and counts as usual but always answers allowed
 * (INFO's dry_run_would_limit counts the refusals it hid).
 *
 * Scope.  On a clustered node a key is global when its policy's scope is
 * global, or, for an inline ALGO, when SCOPE says so or (no SCOPE) the
 * daemon's default scope is global; sliding-log is always local (SCOPE
 * global with it is an error).  On a node running alone every key is local.
 * Global keys are decided by the cluster's replica, like CL.THROTTLE's:
 *   SL.THROTTLE, SL.PEEK  the replica's decision (PEEK: qty 0).
 *   SL.MULTI      all keys are checked first (global ones by a replica
 *                 peek: q fits when q <= remaining), and only if all fit
 *                 are all charged; a refused global key's retry_after is
 *                 an estimate (missing units at the rate, or the window's
 *                 end).
 *   SL.ACQUIRE    waits as for a local key; the head of the queue is asked
 *                 again when the replica's last refusal said it may fit
 *                 (other nodes' traffic may push that later).
 *   SL.CHARGE     refused with an error for now: the replica cannot yet
 *                 count units beyond the limit (a cluster debt).
 *   SL.REFUND     refused with an error: every node counted the units in a
 *                 grow-only counter, which nobody can decrement.
 *   SL.RESET      refused with an error for a key the replica holds, for
 *                 the same reason (forgetting it here would hand this node
 *                 a fresh quota while the others still count).
 */
#ifndef SLUICE_COMMANDS_SL_H
#define SLUICE_COMMANDS_SL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "limiter.h"
#include "resp.h"
#include "server.h"

struct commands_sl_stats;

/*
 * The reload engine behind SL.RELOAD: the daemon's (daemon/reload.h,
 * which SIGHUP calls too), injected so that this layer neither reads the
 * config file nor swaps policies.  reload: with c, 1 when c is blocked
 * and answered later (+OK or "-ERR reload failed: reason"); else, or
 * without c, 0 once reloaded or a negative enum sluice_err with the
 * reason in err.  stats: fills the reload counters of out (reloads,
 * reload_failures, reloads_unchanged).
 */
struct commands_sl_reloader {
    int (*reload)(void *ud, struct server_client *c, char *err, size_t errlen);
    void (*stats)(void *ud, struct commands_sl_stats *out);
    void *ud; /* borrowed */
};

struct commands_sl_config {
    size_t max_key_bytes;                 /* 0 = 512 */
    uv_loop_t *loop;                      /* for SL.ACQUIRE; NULL: SL.ACQUIRE never waits */
    struct commands_sl_reloader reloader; /* for SL.RELOAD; no reload hook: none */
    size_t max_waiters;                   /* 0 = ACQUIRE_DEFAULT_MAX_WAITERS */
};

struct commands_sl;

/* Creates the SL.* layer over lim (borrowed).  -SLUICE_ENOMEM. */
int commands_sl_create(struct limiter *lim, const struct commands_sl_config *cfg,
                       struct commands_sl **out);

/* Decides global keys through cl (borrowed, NULL: every key is local).
 * commands_create() calls it with its cluster. */
struct cluster;
void commands_sl_set_cluster(struct commands_sl *sl, struct cluster *cl);

/* The lease layer behind SL.LEASE, SL.RELEASE, SL.RENEW (commands_lease.h),
 * made with the acquire layer; NULL without a loop. */
struct commands_lease;
struct commands_lease *commands_sl_leases(struct commands_sl *sl);

/* Drops waiting SL.ACQUIREs without answering and closes their timers:
 * call after server_close (which cancels blocked clients), then run the
 * loop, then commands_sl_destroy.  Idempotent. */
void commands_sl_close(struct commands_sl *sl);
void commands_sl_destroy(struct commands_sl *sl);

/*
 * The SL.* handlers, each a row of the command table (commands.c), with
 * the connection's protocol (resp3 nonzero after HELLO 3).  c may be NULL
 * (tests): then SL.ACQUIRE answers at once or with an error, never waits.
 * Each appends one reply to out, or blocks c (SL.ACQUIRE) and answers
 * later; each returns SERVER_CONTINUE.
 */
typedef int (*commands_sl_fn)(struct commands_sl *sl, struct server_client *c, int resp3,
                              size_t argc, const char **argv, const size_t *argvlen,
                              struct resp_buf *out);
int commands_sl_throttle(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_sl_peek(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                     const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_sl_refund(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                       const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_sl_charge(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                       const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_sl_reset(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                      const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_sl_acquire(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                        const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_sl_multi(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                      const char **argv, const size_t *argvlen, struct resp_buf *out);
int commands_sl_policies(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out);
/* SL.RELOAD: the reload hook (commands_sl_config.reloader), answered +OK
 * or "-ERR reload failed: reason", now or once the reload is done. */
int commands_sl_reload_cmd(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out);

/* The SL.* layer's counters, as INFO's "# Policies" section shows them
 * (the metrics endpoint reads them here rather than parsing that text). */
struct commands_sl_stats {
    uint64_t policies;          /* in the running set */
    uint64_t reloads;           /* successful reloads (SIGHUP, SL.RELOAD) */
    uint64_t reload_failures;   /* reloads refused; the running set stayed */
    uint64_t reloads_unchanged; /* of the reloads, those that found the source unchanged */
    uint64_t waiting_acquires;  /* SL.ACQUIREs waiting now */
};

/* Fills *out from sl.  Never fails.  (Dry-run refusals and algorithm
 * changes are the limiter's counters: limiter_counters.) */
void commands_sl_get_stats(const struct commands_sl *sl, struct commands_sl_stats *out);

/* struct commands_sl_stats' rows for INFO's "# Policies" and /metrics. */
extern const struct counter_table commands_sl_counters;

#endif
