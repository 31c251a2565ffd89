/*
 * acquire: the waiting acquire behind SL.ACQUIRE (Guava's
 * tryAcquire(permits, timeout), nginx's limit_req with delay).
 *
 * A request that does not fit now waits, without blocking the event loop,
 * until it fits or its deadline passes:
 *
 * - FIFO per key: a request for a key that already has waiters queues
 *   behind them even if it would fit now, so a stream of small requests
 *   cannot starve a large one.
 * - One libuv timer per key with waiters (not per waiter), due at the
 *   earlier of "the head of the queue fits" (algo_earliest_fit, assuming no
 *   other traffic) and the earliest deadline in the queue.  Other traffic on
 *   the key (CL.THROTTLE, SL.THROTTLE) may delay the head; the timer then
 *   simply fires again.  A waiter costs one small allocation.
 * - A request whose earliest fit already lies beyond its deadline (or that
 *   can never fit) is answered limited at once, as is one that fits at once
 *   on a key without waiters.
 * - A waiter holds a reference to the policy set its limit came from (or a
 *   copy of an inline limit), so a reload while it waits changes nothing
 *   for it and frees nothing under it.
 *
 * Answers are delivered through the waiter's callback, exactly once, unless
 * the waiter is cancelled first (acquire_cancel, e.g. from the server's
 * cancel hook when the client disconnects): then the callback is never
 * called.  Everything runs on the loop thread.
 */
#ifndef SLUICE_ACQUIRE_H
#define SLUICE_ACQUIRE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "algo.h"
#include "limiter.h"
#include "policy.h"

/* Waiters across all keys (more are refused with -SLUICE_EFULL). */
#define ACQUIRE_DEFAULT_MAX_WAITERS 100000

struct acquire;
struct acquire_waiter;

/*
 * The answer: r is what SL.THROTTLE would say at that moment (for a
 * refusal: limited 1 and retry_after_ns the wait that would still be
 * needed, ALGO_NEVER if qty can never fit); waited_ns is the time between
 * the request and the answer.  The waiter is freed right after the call.
 */
typedef void (*acquire_done_fn)(void *ud, const struct algo_result *r, int64_t waited_ns);

/* What to acquire.  Exactly one of p and pol is set; pol must come from
 * set (which the waiter retains while it waits). */
struct acquire_req {
    const char *key;
    size_t klen;
    const struct algo_params *p;
    const struct policy *pol;
    struct policy_set *set;
    int64_t qty;
    int64_t timeout_ns; /* >= 0 */
};

/* Creates the acquire layer on loop over lim (both borrowed).  max_waiters
 * 0 = ACQUIRE_DEFAULT_MAX_WAITERS.  Fails with -SLUICE_ENOMEM. */
int acquire_create(uv_loop_t *loop, struct limiter *lim, size_t max_waiters, struct acquire **out);

/*
 * Submits a request at now_ns.  Returns 1 when it was answered at once: *r
 * and *waited_ns (0) are filled, done is not called, nothing is kept.
 * Returns 0 when it waits: *w is its handle, valid until done is called or
 * acquire_cancel(w).  Fails with -SLUICE_EINVAL (bad request),
 * -SLUICE_ETOOBIG (key too long), -SLUICE_EFULL (max_waiters reached),
 * -SLUICE_ENOMEM; nothing is kept then.
 */
int acquire_submit(struct acquire *a, const struct acquire_req *req, int64_t now_ns,
                   acquire_done_fn done, void *ud, struct algo_result *r, int64_t *waited_ns,
                   struct acquire_waiter **w);

/*
 * Decides qty units of key under p (pol: the policy p came from, or NULL)
 * somewhere other than the limiter, taking them if they fit as of at_ns;
 * fills *r as algo_decide would, and on a refusal r->retry_after_ns says
 * when, counted from at_ns, they may fit (ALGO_NEVER: never).  at_ns is a
 * reading of uv_hrtime: the time of the call for a new request, or, for a
 * waiter the timer woke after the time its last refusal promised (its
 * slot), that slot, if it is no further back than the catch-up (see
 * acquire.c): the waiter is charged at its slot, so a paced caller keeps
 * its rate despite late wake-ups.  Returns 0 or a negative error.  Used for
 * global keys, whose state is the cluster replica's.
 */
typedef int (*acquire_decide_fn)(void *ud, const char *key, size_t klen,
                                 const struct algo_params *p, const struct policy *pol, int64_t qty,
                                 int64_t at_ns, struct algo_result *r);

/*
 * acquire_submit for a key decided by decide(decide_ud, ...) instead of the
 * limiter (a global key).  The same FIFO and deadlines; since the decider
 * cannot say when a quantity fits without trying, the head of a queue is
 * asked (and takes its units if they fit) when the last refusal's
 * retry_after says it may fit; remote consumption may push that later, and
 * the timer then asks again.  A request submitted behind waiters is not
 * asked until it reaches the head (its deadline answers it otherwise).
 * Every ask is a decision the decider counts (a global key's demand
 * estimate includes waiting requests, as it includes refused ones).
 * Returns and fails as acquire_submit, plus the decider's errors.
 */
int acquire_submit_via(struct acquire *a, const struct acquire_req *req, acquire_decide_fn decide,
                       void *decide_ud, int64_t now_ns, acquire_done_fn done, void *ud,
                       struct algo_result *r, int64_t *waited_ns, struct acquire_waiter **w);

/*
 * acquire_submit_via for a decider that cannot say when units free (a
 * lease ends when its holder says so): a refusal waits for acquire_wake or
 * the deadline, and the retry_after of the decider's refusal says only when
 * to ask again (ALGO_NEVER: on a wake only).  A request is answered at once
 * only when it fits, when qty exceeds the refusal's limit (it can never
 * fit), or when its timeout is 0.  Returns and fails as acquire_submit_via.
 */
int acquire_submit_woken(struct acquire *a, const struct acquire_req *req, acquire_decide_fn decide,
                         void *decide_ud, int64_t now_ns, acquire_done_fn done, void *ud,
                         struct algo_result *r, int64_t *waited_ns, struct acquire_waiter **w);

/*
 * Units of key may have freed (a lease ended, slots arrived): the head of
 * key's queue, if it is remote-decided, is asked again on the next loop
 * turn, and, while the decider grants, the waiters behind it in order; the
 * first refusal ends the round, so one release wakes one waiter per freed
 * unit rather than the whole queue.  No queue: nothing.  Never fails.
 */
void acquire_wake(struct acquire *a, const char *key, size_t klen);

/* Withdraws a waiting request without answering it (its client left).
 * Waiters behind it move up.  Never fails. */
void acquire_cancel(struct acquire *a, struct acquire_waiter *w);

/* Units the requests waiting for key ask for together (0: none wait). */
int64_t acquire_queued(struct acquire *a, const char *key, size_t klen);
/* 1 when requests wait for key (a new one would queue behind them), else
 * 0.  Costs nothing while nobody waits anywhere. */
int acquire_has_waiters(struct acquire *a, const char *key, size_t klen);

/* Requests waiting now (all keys). */
size_t acquire_waiting(const struct acquire *a);

/*
 * Drops every waiter WITHOUT answering and closes the timers.  Call it
 * after the server has cancelled its blocked clients (server_close), then
 * run the loop so the timers' close callbacks free them, then
 * acquire_destroy.  Idempotent.
 */
void acquire_close(struct acquire *a);
/* Frees the layer (after acquire_close and a loop run).  NULL is fine. */
void acquire_destroy(struct acquire *a);

#endif
