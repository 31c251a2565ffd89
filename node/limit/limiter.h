/*
 * limiter: the decision engine for local keys (global ones are the
 * replica's, global/replica.h; cluster_is_global says which is which).  It
 * owns the key table and every key's algorithm state; all of it
 * is touched only from the event-loop thread, so each call is atomic with
 * respect to every other command (no locks).
 *
 * Time is injected: every call takes now_ns, a monotonic nanosecond clock
 * value supplied by the caller (uv_hrtime() in the daemon, a fake clock in
 * tests).  now_ns must not go backwards between calls on one limiter; if it
 * does, the limiter treats it as "no time has passed".
 *
 * Ownership: the limiter copies keys it keeps; callers own the buffers they
 * pass in.  Results are written to caller-owned structs.
 */
#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H

#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "counter.h"

struct policy;
struct policy_set;

/* Keys held when max_keys is 0 (--max-keys' default); global keys have the
 * same bound. */
#define LIMITER_DEFAULT_MAX_KEYS ((size_t)1 << 22)

/* What happens when a new key arrives and the table holds max_keys keys that
 * are all still limited (drained keys are always reclaimed first). */
enum limiter_overflow {
    LIMITER_OVERFLOW_EVICT = 0, /* evict a sampled key closest to drained (default) */
    LIMITER_OVERFLOW_DENY = 1,  /* refuse the request (fail closed) */
    LIMITER_OVERFLOW_ALLOW = 2, /* allow without keeping state (fail open) */
};

struct limiter_config {
    size_t max_keys;                /* 0 = LIMITER_DEFAULT_MAX_KEYS */
    enum limiter_overflow overflow; /* policy when full */
};

/* CL.THROTTLE's answer, in redis-cell's units (seconds, rounded up).  When
 * the table is full and the DENY policy refuses a new key, the answer is
 * limited=1, remaining=0, retry_after_s = one emission interval (rounded up)
 * and reset_after_s as for a fresh key. */
struct limiter_throttle_result {
    int limited;           /* 0 allowed, 1 limited */
    int64_t limit;         /* max_burst + 1 */
    int64_t remaining;     /* units still available right now */
    int64_t retry_after_s; /* -1 when allowed or when quantity can never fit */
    int64_t reset_after_s; /* seconds until the key is back to full */
};

struct limiter_stats {
    uint64_t keys;                /* keys currently held */
    uint64_t reclaimed;           /* drained keys freed */
    uint64_t evicted;             /* limited keys evicted by the overflow policy */
    uint64_t overflow_denied;     /* requests denied by the overflow policy */
    uint64_t overflow_allowed;    /* requests allowed statelessly by the overflow policy */
    uint64_t decisions;           /* throttle calls answered */
    uint64_t limited;             /* of which limited */
    uint64_t dry_run_would_limit; /* dry-run policies' refusals answered as allowed */
    uint64_t reinitialised;       /* keys whose algorithm or shape changed (reset) */
};

struct limiter;

/* Creates a limiter.  cfg may be NULL for defaults.  Fails with -SLUICE_ENOMEM. */
int limiter_create(struct limiter **out, const struct limiter_config *cfg);
void limiter_destroy(struct limiter *lim);

/*
 * CL.THROTTLE key max_burst count period quantity: GCRA, byte-for-byte the
 * answer redis-cell gives.  period is in seconds.  quantity 0 peeks.
 * Fails (and changes nothing) with -SLUICE_EINVAL for a negative burst or
 * quantity or a count/period that is not positive, -SLUICE_ERANGE for
 * arguments whose nanosecond arithmetic would overflow, and -SLUICE_ENOMEM.
 * The overflow policy's outcomes are answers (limited or allowed), not errors.
 */
int limiter_throttle(struct limiter *lim, const char *key, size_t klen, int64_t max_burst,
                     int64_t count, int64_t period_s, int64_t quantity, int64_t now_ns,
                     struct limiter_throttle_result *out);

/* A look-ahead hint for a decision on key soon (server_hint_fn): stage 0
 * asks the cache for its bucket and keeps the hash in *h, stage 1 for the
 * first entry of its chain.  Changes nothing. */
void limiter_prefetch(const struct limiter *lim, const char *key, size_t klen, int stage,
                      uint32_t *h);

/* CL.THROTTLE's inline GCRA limit (no policy matched) answered in
 * nanoseconds (struct algo_result), for a caller that words the reply itself
 * (the decision entry, global/decide.h): limiter_throttle's fast path, its
 * errors. */
int limiter_decide_cell(struct limiter *lim, const char *key, size_t klen, int64_t max_burst,
                        int64_t count, int64_t period_s, int64_t quantity, int64_t now_ns,
                        struct algo_result *out);

/* CL.THROTTLE's inline limit as algo_params (GCRA; period in seconds),
 * for a key decided elsewhere (a global key's replica).  *out points into
 * the limiter, valid until the next call: most traffic repeats the last
 * limit, which saves building it.  Fails with -SLUICE_EINVAL or
 * -SLUICE_ERANGE as limiter_throttle does. */
int limiter_cell_params(struct limiter *lim, int64_t burst, int64_t count, int64_t period_s,
                        const struct algo_params **out);

/*
 * Frees keys that have drained without being touched again: visits `budget`
 * buckets of the key table (about one key each) from a rotating cursor.
 * Each throttle call already does one bucket; the daemon should also call
 * this from a periodic timer (e.g. 1024 buckets every 100 ms) so memory
 * follows the number of keys being limited even when traffic stops.
 * Returns the number of keys freed; never fails.
 */
size_t limiter_maintain(struct limiter *lim, int64_t now_ns, size_t budget);

/*
 * Lists the keys held, Redis SCAN style: start with cursor 0 and call again
 * with the returned cursor until it returns 0.  Each call passes at least
 * `count` keys to fn (fewer at the end); a key held for the whole scan is
 * listed at least once even if keys come and go between calls, and may be
 * listed twice.  tat_ns is the key's GCRA state (the time it drains).  The
 * key buffer is valid only during the callback; fn must not call back into
 * the limiter.  Never fails.
 */
typedef void (*limiter_scan_fn)(void *ud, const char *key, size_t klen, int64_t tat_ns);
uint64_t limiter_scan(struct limiter *lim, uint64_t cursor, size_t count, limiter_scan_fn fn,
                      void *ud);

void limiter_get_stats(const struct limiter *lim, struct limiter_stats *out);

/* struct limiter_stats' rows for INFO's "# Limiter" and /metrics. */
extern const struct counter_table limiter_counters;

/*
 * ---- every algorithm (SL.* commands) ----
 *
 * A key's state is the state of the algorithm it was last decided with (the
 * table tag says which).  When a call names another algorithm the key gets
 * a state of the new one that has used what the old one had, never a fresh
 * quota: under a policy whose previous limit (before the reload that
 * changed its algorithm) is the old algorithm's, the fraction in use now
 * (limit - remaining, over limit, read under that limit) times the new
 * limit, rounded up; for an inline limit (no old limit known), a non-GCRA
 * state's recorded use while it lasts, or a GCRA state's time until full at
 * the new rate; in both cases at most the new limit.  The units are poured
 * in at now (a window counts them in its current window).  When it names the same
 * algorithm with other parameters (a config reload), the state is kept and
 * the new parameters apply at once: gcra (a TAT) and sliding-log (admission
 * timestamps) keep their state as is; token-bucket keeps its time to full
 * (the GCRA view: the same debt in time, so fewer or more units under the new
 * rate); fixed-window and sliding-window keep the units used in the current
 * window if the window geometry (period, precision) is unchanged, and
 * otherwise carry the units used so far into the new window until the old
 * one would have ended.  CL.THROTTLE and the gcra algorithm share one state,
 * so both may be used on one key.
 */

/*
 * Decides qty units of key under p (qty 0 peeks and changes nothing) and
 * fills *out (durations in ns).  Fails, changing nothing, with
 * -SLUICE_EINVAL (invalid p, qty < 0), -SLUICE_ETOOBIG (key too long) or
 * -SLUICE_ENOMEM.  The overflow policy's outcomes are answers.
 */
int limiter_decide(struct limiter *lim, const char *key, size_t klen, const struct algo_params *p,
                   int64_t qty, int64_t now_ns, struct algo_result *out);

/*
 * The same for a policy: p = pol->algo, and a dry-run policy answers a
 * refusal as allowed (limited 0, retry -1) and counts it in
 * dry_run_would_limit.  *would_limit (may be NULL) gets the real decision.
 */
int limiter_decide_policy(struct limiter *lim, const char *key, size_t klen,
                          const struct policy *pol, int64_t qty, int64_t now_ns,
                          struct algo_result *out, int *would_limit);

/*
 * The last step of every decision under a policy, local or global (the
 * replica's, by the decision entry): a dry-run policy answers a refusal as
 * allowed (limited 0, retry ALGO_NEVER) and counts it in
 * dry_run_would_limit, and the policy's counters see every decision that
 * asked for units (qty > 0).  *would_limit (may be NULL) gets the refusal
 * before dry-run.  pol NULL: only *would_limit.  Never fails.
 */
void limiter_settle_policy(struct limiter *lim, const struct policy *pol, int64_t qty,
                           struct algo_result *out, int *would_limit);

/*
 * The answer for a new key that its table (the limiter's, or the replica's
 * for a global key) has no room for: qty decided on a fresh state of p, as
 * it is under --on-full allow (counted in overflow_allowed), or refused
 * under deny (limited, remaining 0, retry after one unit's share of the
 * period; overflow_denied): the answer a local key gets.  qty 0 only looks.
 * Fails with -SLUICE_EINVAL (bad p or qty).
 */
int limiter_overflow_answer(struct limiter *lim, const struct algo_params *p, int64_t qty,
                            int allow, int64_t now_ns, struct algo_result *out);

/*
 * A post-paid charge: counts qty units of key under p whatever the key
 * holds (algo_consume), so the key may go over its limit into a debt that
 * later decisions wait out (they are refused until it is repaid at the
 * limit's rate, or the window that holds it ends).  For a cost known only
 * after the work (tokens, bytes, CPU time): check with qty 0 or 1 before,
 * charge the real cost after.  *out is the key after the charge: limited 1
 * when it is now over its limit (algo_over), retry_after_ns then the wait
 * until one unit fits (ALGO_NEVER otherwise), remaining (0 in debt) and
 * reset_after_ns as a peek.  This is how envoyproxy/ratelimit counts every
 * hit, refused ones included.  A sliding log records at most count units
 * (no debt beyond a full log).  qty 0 only looks.  Errors as limiter_decide.
 */
int limiter_charge(struct limiter *lim, const char *key, size_t klen, const struct algo_params *p,
                   int64_t qty, int64_t now_ns, struct algo_result *out);

/* The same under a policy; a dry-run policy answers "over" as allowed (and
 * counts it in dry_run_would_limit). */
int limiter_charge_policy(struct limiter *lim, const char *key, size_t klen,
                          const struct policy *pol, int64_t qty, int64_t now_ns,
                          struct algo_result *out);

/*
 * SL.ACQUIRE's two steps, Guava's acquire(n): limiter_acquire_fit says when
 * a waiter for qty units can be served (*delay_ns: 0 now, ns from now,
 * ALGO_NEVER), with the key seen at at_ns (see below), and
 * limiter_acquire_take serves it.  They are limiter_earliest_fit and
 * limiter_decide, except that a quantity a bucket (gcra, token-bucket) can
 * never hold at once (above burst + 1) pays forward as Guava's acquire(n)
 * does: it is served when one unit fits and charged in full (limiter_charge),
 * the excess a debt that the requests after it wait out; out->limited is
 * then 0.  (warmup pays forward by itself.)
 *
 * at_ns <= now_ns sees the key at at_ns (a waiter's due time, when its
 * timer woke it late): it is charged at the time it was due, so a caller
 * pacing itself with SL.ACQUIRE keeps the rate instead of losing the
 * timer's lateness on every call.  The limiter's clock stays now_ns; at_ns
 * < 0 or > now_ns is read as now_ns.  Errors as limiter_decide.
 *
 * A key these calls charged is kept for LIMITER_PACE_KEEP_NS after it
 * drains (a fresh key's state, otherwise forgotten at once), so SL.ACQUIRE
 * can still read a late caller's slot from it.
 */
#define LIMITER_PACE_KEEP_NS (20 * (int64_t)1000000)
int limiter_acquire_fit(struct limiter *lim, const char *key, size_t klen,
                        const struct algo_params *p, int64_t qty, int64_t at_ns, int64_t now_ns,
                        int64_t *delay_ns, struct algo_result *peek);
int limiter_acquire_take(struct limiter *lim, const char *key, size_t klen,
                         const struct algo_params *p, int64_t qty, int64_t at_ns, int64_t now_ns,
                         struct algo_result *out);

/* The limiter's clock: the latest now_ns it has been given (a caller with
 * an older reading is seen at this time). */
int64_t limiter_clock(const struct limiter *lim);

/*
 * Units of p's limit that key's local state has used at the limiter's
 * clock (0 if the key holds none, or is drained), at most p's limit: what
 * a key whose policy a reload made global carries into the cluster
 * instead of a fresh quota.  A state of another algorithm or shape is read
 * as a change of algorithm carries it.  Reads only; never fails.
 */
int64_t limiter_used(struct limiter *lim, const char *key, size_t klen,
                     const struct algo_params *p);

/* Gives back up to qty units (algo_refund: never beyond a fresh key).  An
 * absent key or one of another algorithm is left alone.  Errors as
 * limiter_decide. */
int limiter_refund(struct limiter *lim, const char *key, size_t klen, const struct algo_params *p,
                   int64_t qty, int64_t now_ns);

/* Forgets key (it becomes fresh).  Returns 1 if it was held, 0 if not. */
int limiter_reset(struct limiter *lim, const char *key, size_t klen);

/* When would qty fit (algo_earliest_fit on the key's state as it would be
 * decided by limiter_decide): 0 now, ns from now, ALGO_NEVER.  Changes
 * nothing.  If peek is not NULL it gets the answer a refusal of qty would
 * give: limited = (delay != 0), retry_after_ns = the delay (ALGO_NEVER when
 * allowed), limit, remaining and reset_after_ns as they are now.  Errors as
 * limiter_decide. */
int limiter_earliest_fit(struct limiter *lim, const char *key, size_t klen,
                         const struct algo_params *p, int64_t qty, int64_t now_ns,
                         int64_t *delay_ns, struct algo_result *peek);

/* One key of an all-or-nothing request. */
struct limiter_req {
    const char *key;
    size_t klen;
    const struct algo_params *p; /* used when pol is NULL */
    const struct policy *pol;    /* or NULL */
    int64_t qty;
};

#define LIMITER_MULTI_MAX 16

/*
 * All or nothing over n <= LIMITER_MULTI_MAX distinct keys: every key is
 * first evaluated without change; only if every one would allow (dry-run
 * policies always do) are all charged, otherwise none is.  outs[i] is each
 * key's answer (on refusal: as a peek of qty, so remaining is what the key
 * has now; limited says which keys refused).  *allowed is the overall
 * decision.  Fails with -SLUICE_EINVAL (n out of range, a duplicate key,
 * bad params), -SLUICE_ETOOBIG, -SLUICE_ENOMEM (then nothing is charged).
 */
int limiter_multi(struct limiter *lim, const struct limiter_req *reqs, size_t n, int64_t now_ns,
                  struct algo_result *outs, int *allowed);

/*
 * The policy set that CL.THROTTLE consults and SL.* commands resolve names
 * and prefixes in.  limiter_set_policies takes a new reference to set (NULL:
 * none) and releases the previous one; limiter_policies borrows it (retain
 * it to keep it across event-loop turns).  A key covered by a policy's match
 * prefix is decided by that policy even under CL.THROTTLE (the reply stays
 * redis-cell's): central configuration overrides client-supplied limits.
 */
void limiter_set_policies(struct limiter *lim, struct policy_set *set);
struct policy_set *limiter_policies(const struct limiter *lim);

#endif
