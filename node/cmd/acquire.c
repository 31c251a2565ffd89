/*
 * acquire: waiting requests, one FIFO queue and one timer per key (see
 * acquire.h for the contract).
 *
 * Structure: a key table (table.h) maps each key with waiters to its queue;
 * the queues are also on a list for acquire_close.  A queue owns its timer
 * and a doubly linked FIFO of waiters.  A queue with no waiters leaves the
 * table at once and is freed by its timer's close callback (libuv handles
 * cannot be freed synchronously).
 *
 * Wake-ups: a libuv timer counts whole milliseconds from the loop's cached
 * time, so it wakes a waiter up to about a millisecond late, and at a
 * thousand acquires a second that is a whole interval.  A waiter is charged
 * at the time it was due (limiter_acquire_take), which keeps the schedule;
 * but a paced caller whose answer comes late sends its next request after
 * that one was due, and then the schedule restarts from its arrival.  So a
 * queue due within ACQUIRE_NEAR_NS also goes on the layer's near list, woken
 * by one timerfd (Linux, CLOCK_MONOTONIC as uv_hrtime, absolute expiry) at
 * the earliest due time of the list, to within tens of microseconds.  The
 * queue's libuv timer stays armed as a backstop (it keeps the loop alive,
 * and serves alone where there is no timerfd).
 *
 * Re-entrancy: answering a waiter unblocks its client, and the server may
 * then run that client's next pipelined command at once, which may submit
 * to (or create) a queue.  So a queue is brought to a consistent state
 * (waiters unlinked, timer re-armed or the queue retired) BEFORE any
 * callback runs, and nothing touches the queue after the callbacks.
 */
#include "acquire.h"

#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "sluice/error.h"
#include "table.h"
#include "num.h"

struct acquire_queue;

struct acquire_waiter {
    struct acquire_waiter *prev, *next;
    struct acquire_queue *q;
    struct algo_params p;     /* the limit (a copy: inline limits die with the command) */
    struct policy_set *set;   /* retained while waiting, or NULL */
    const struct policy *pol; /* in set, or NULL */
    /* A key decided elsewhere (acquire_submit_via): polled through decide
     * at next_try_ns, when the last refusal said it may fit. */
    acquire_decide_fn decide;
    void *decide_ud;
    int64_t next_try_ns;
    int promised;  /* next_try_ns is a refusal's promise (the waiter's slot) */
    int wake_only; /* acquire_submit_woken */
    int dry_run;
    int64_t qty;
    int64_t start_ns, deadline_ns;
    int64_t due_ns; /* when it fits, as of the last arming (-1: not known) */
    acquire_done_fn done;
    void *ud;
    /* the answer, while on the list of answers to deliver */
    struct algo_result r;
    int64_t waited_ns;
};

struct acquire_queue {
    uv_timer_t timer; /* data = the queue */
    struct acquire *a;
    struct acquire_queue *lprev, *lnext; /* the acquire's list of queues */
    struct acquire_waiter *head, *tail;
    size_t n;
    int64_t qty_sum; /* of the waiters (saturating) */
    /* on the near list (a->near) when due within ACQUIRE_NEAR_NS */
    struct acquire_queue *nprev, *nnext;
    int on_near;
    int64_t near_due;
    size_t klen;
    char key[]; /* klen bytes */
};

struct acquire {
    uv_loop_t *loop;
    struct limiter *lim;
    struct table *queues; /* key -> struct acquire_queue * */
    struct acquire_queue *list;
    size_t max_waiters;
    size_t waiting;
    int closed;
    int tfd;                    /* timerfd of the near list; -1: none */
    uv_poll_t tpoll;            /* watches tfd; data = the layer */
    struct acquire_queue *near; /* queues due soon */
    int64_t tfd_at;             /* tfd's expiry, INT64_MAX when disarmed */
};

/* a->tfd before the first waiter due soon: the timerfd and its poll handle
 * are made then, so a layer nobody waited on holds no handle. */
#define ACQUIRE_TFD_UNOPENED (-2)

/* How soon a queue must be due to go on the near list. */
#define ACQUIRE_NEAR_NS (3 * NUM_NS_PER_MS)

static void acquire__on_tfd(uv_poll_t *h, int status, int events);

int acquire_create(uv_loop_t *loop, struct limiter *lim, size_t max_waiters, struct acquire **out)
{
    struct table_config tc;
    struct acquire *a = calloc(1, sizeof(*a));
    int rc;
    if (a == NULL)
        return -SLUICE_ENOMEM;
    memset(&tc, 0, sizeof(tc));
    rc = table_create(&a->queues, &tc);
    if (rc < 0) {
        free(a);
        return rc;
    }
    a->loop = loop;
    a->lim = lim;
    a->max_waiters = max_waiters ? max_waiters : ACQUIRE_DEFAULT_MAX_WAITERS;
    a->tfd_at = INT64_MAX;
    a->tfd = ACQUIRE_TFD_UNOPENED;
    *out = a;
    return 0;
}

size_t acquire_waiting(const struct acquire *a)
{
    return a->waiting;
}

static void acquire__unlink(struct acquire_waiter *w)
{
    struct acquire_queue *q = w->q;
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        q->head = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        q->tail = w->prev;
    q->n--;
    q->qty_sum -= w->qty < q->qty_sum ? w->qty : q->qty_sum;
    q->a->waiting--;
    w->prev = w->next = NULL;
}

static void acquire__waiter_free(struct acquire_waiter *w)
{
    policy_set_release(w->set);
    free(w);
}

static void acquire__near_remove(struct acquire *a, struct acquire_queue *q)
{
    if (!q->on_near)
        return;
    if (q->nprev != NULL)
        q->nprev->nnext = q->nnext;
    else
        a->near = q->nnext;
    if (q->nnext != NULL)
        q->nnext->nprev = q->nprev;
    q->nprev = q->nnext = NULL;
    q->on_near = 0;
}

/* Sets the timerfd to expire at `at` (uv_hrtime's clock) if that is sooner
 * than it is set for. */
static void acquire__tfd_arm(struct acquire *a, int64_t at)
{
    if (a->tfd < 0 || at >= a->tfd_at)
        return;
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    if (at < 1)
        at = 1; /* 0 would disarm */
    its.it_value.tv_sec = (time_t)(at / NUM_NS_PER_S);
    its.it_value.tv_nsec = (long)(at % NUM_NS_PER_S);
    if (timerfd_settime(a->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        a->tfd_at = at;
}

/* Makes the timerfd and its poll handle, once; without them (-1) the
 * libuv timers serve alone, with millisecond wake-ups. */
static void acquire__tfd_open(struct acquire *a)
{
    if (a->tfd != ACQUIRE_TFD_UNOPENED)
        return;
    a->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (a->tfd >= 0 && uv_poll_init(a->loop, &a->tpoll, a->tfd) != 0) {
        close(a->tfd);
        a->tfd = -1;
    }
    if (a->tfd >= 0) {
        a->tpoll.data = a;
        uv_poll_start(&a->tpoll, UV_READABLE, acquire__on_tfd);
        /* The queues' own timers keep the loop alive while anyone waits. */
        uv_unref((uv_handle_t *)&a->tpoll);
    }
}

static void acquire__near_add(struct acquire *a, struct acquire_queue *q, int64_t due)
{
    if (!q->on_near) {
        q->nprev = NULL;
        q->nnext = a->near;
        if (a->near != NULL)
            a->near->nprev = q;
        a->near = q;
        q->on_near = 1;
    }
    q->near_due = due;
    acquire__tfd_arm(a, due);
}

static void acquire__queue_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Takes an empty queue out of the table and the list and closes its timer;
 * the close callback frees it. */
static void acquire__queue_retire(struct acquire *a, struct acquire_queue *q)
{
    struct table_entry *e = table_find(a->queues, q->key, q->klen);
    if (e != NULL)
        table_delete(a->queues, e);
    if (q->lprev != NULL)
        q->lprev->lnext = q->lnext;
    else
        a->list = q->lnext;
    if (q->lnext != NULL)
        q->lnext->lprev = q->lprev;
    acquire__near_remove(a, q);
    uv_timer_stop(&q->timer);
    uv_close((uv_handle_t *)&q->timer, acquire__queue_closed);
}

static void acquire__on_timer(uv_timer_t *t);

/* Arms the queue's timer for the earlier of the head's fit and the
 * earliest deadline.  The head's fit may be "never" (it waits for its
 * deadline) or already due (0 ms: the next loop turn serves it). */
static void acquire__rearm(struct acquire_queue *q, int64_t now)
{
    struct acquire *a = q->a;
    struct acquire_waiter *w;
    int64_t due = INT64_MAX, delay;
    for (w = q->head; w != NULL; w = w->next) {
        if (w->deadline_ns < due)
            due = w->deadline_ns;
    }
    if (q->head != NULL && q->head->decide != NULL) {
        if (q->head->next_try_ns < due)
            due = q->head->next_try_ns;
    } else if (q->head != NULL) {
        q->head->due_ns = -1;
        if (limiter_acquire_fit(a->lim, q->key, q->klen, &q->head->p, q->head->qty, now, now,
                                &delay, NULL) == 0 &&
            delay != ALGO_NEVER) {
            int64_t fit = num_add_sat(now, delay);
            q->head->due_ns = fit;
            if (fit < due)
                due = fit;
        }
    }
    (void)now;
    /* libuv timers count whole milliseconds from the loop's cached time
     * (uv_now, the start of this loop turn, older than now) and fire once
     * that time, truncated to the ms, reaches it: count to the first whole
     * ms at or after due from there, so the timer never fires before the
     * head fits (an early fire would cost a wake-up and a re-arm) and at
     * most about a millisecond after. */
    uint64_t at_ms = due == INT64_MAX
                         ? UINT64_MAX
                         : (uint64_t)(due / NUM_NS_PER_MS + (due % NUM_NS_PER_MS != 0));
    uint64_t loop_ms = uv_now(q->timer.loop);
    uv_timer_start(&q->timer, acquire__on_timer, at_ms > loop_ms ? at_ms - loop_ms : 0, 0);
    if (due != INT64_MAX && due - (int64_t)uv_hrtime() <= ACQUIRE_NEAR_NS)
        acquire__tfd_open(a);
    if (a->tfd >= 0 && due != INT64_MAX && due - (int64_t)uv_hrtime() <= ACQUIRE_NEAR_NS)
        acquire__near_add(a, q, due);
    else
        acquire__near_remove(a, q);
}

/* Fills w->r with the refusal it gets now (limited, and the wait still
 * needed; a waiter kept behind the head by FIFO order gets at least 1 ms). */
static void acquire__refusal(struct acquire *a, struct acquire_waiter *w, int64_t now)
{
    int64_t delay = ALGO_NEVER;
    if (w->decide != NULL) {
        /* The last poll's answer; the wait it still needs from now. */
        w->r.limited = 1;
        if (w->next_try_ns == INT64_MAX)
            w->r.retry_after_ns = ALGO_NEVER;
        else
            w->r.retry_after_ns = w->next_try_ns > now ? w->next_try_ns - now : NUM_NS_PER_MS;
        return;
    }
    if (limiter_acquire_fit(a->lim, w->q->key, w->q->klen, &w->p, w->qty, now, now, &delay, &w->r) <
        0) {
        memset(&w->r, 0, sizeof(w->r));
        w->r.limit = w->p.limit;
    }
    w->r.limited = 1;
    w->r.retry_after_ns = delay == 0 ? NUM_NS_PER_MS : delay;
}

/*
 * Asks a remote-decided waiter's decider for its units now.  Returns 0 when
 * answered (allowed, or refused with an error from the decider: w->r says
 * limited), 1 when refused for now: next_try_ns is when to ask again
 * (INT64_MAX: it cannot fit; the deadline will answer).  Other traffic, here
 * or on other nodes, may push the fit later: the timer then asks again.
 */
static int64_t acquire__credit(const struct algo_params *p);

static int acquire__poll(struct acquire_waiter *w, int64_t now)
{
    /* Charged at its slot when the timer woke it late (whole milliseconds,
     * the loop's slack), as a local waiter is (acquire__process): the
     * lateness is not lost from the schedule.  Not before the request came,
     * not further back than the catch-up (none for windows and leases). */
    int64_t at = now;
    if (w->promised && !w->wake_only && w->next_try_ns < now && w->next_try_ns >= w->start_ns &&
        now - w->next_try_ns <= acquire__credit(&w->p))
        at = w->next_try_ns;
    w->promised = 0;
    int rc = w->decide(w->decide_ud, w->q->key, w->q->klen, &w->p, w->pol, w->qty, at, &w->r);
    if (rc < 0) {
        memset(&w->r, 0, sizeof(w->r));
        w->r.limited = 1;
        w->r.limit = w->p.limit;
        w->r.retry_after_ns = ALGO_NEVER;
        w->next_try_ns = INT64_MAX;
        return 0;
    }
    if (!w->r.limited)
        return 0;
    if (w->r.retry_after_ns == ALGO_NEVER) {
        w->next_try_ns = INT64_MAX;
    } else {
        /* Counted from the reading it was decided at; due now at the
         * latest means the next turn asks again. */
        w->next_try_ns = num_add_sat(at, w->r.retry_after_ns > 0 ? w->r.retry_after_ns : 1);
        w->promised = 1;
    }
    return 1;
}

/*
 * Serves what can be served at now: heads that fit (in order), then every
 * waiter whose deadline has passed.  The answered waiters are unlinked and
 * returned in *done (in answer order); the queue is re-armed or retired
 * before the caller delivers them.
 */
static struct acquire_waiter *acquire__process(struct acquire_queue *q, int64_t now)
{
    struct acquire *a = q->a;
    struct acquire_waiter *answered = NULL, **tail = &answered, *w, *next;
    while ((w = q->head) != NULL) {
        int64_t delay;
        if (w->decide != NULL) {
            if (now < w->next_try_ns && w->deadline_ns > now)
                break;
            if (acquire__poll(w, now) != 0 && w->deadline_ns > now)
                break;
            if (w->r.limited)
                acquire__refusal(a, w, now);
            acquire__unlink(w);
            w->waited_ns = now - w->start_ns;
            *tail = w;
            tail = &w->next;
            /* What freed this one's units may have freed more: the next
             * waiter of a wake-only key is asked now (and stops the round
             * if they do not fit: one waiter woken at a time). */
            if (!w->r.limited && q->head != NULL && q->head->wake_only) {
                q->head->next_try_ns = now;
                q->head->promised = 0;
            }
            continue;
        }
        /* Served at the time it was due when it fit then (the timer wakes
         * it late: whole milliseconds, and the loop's slack), else now. */
        int64_t at = now;
        int rc = -1;
        if (w->due_ns >= w->start_ns && w->due_ns < now)
            rc = limiter_acquire_fit(a->lim, q->key, q->klen, &w->p, w->qty, w->due_ns, now, &delay,
                                     NULL);
        if (rc == 0 && delay == 0)
            at = w->due_ns;
        else
            rc =
                limiter_acquire_fit(a->lim, q->key, q->klen, &w->p, w->qty, now, now, &delay, NULL);
        if (rc == 0 && delay == 0) {
            rc = limiter_acquire_take(a->lim, q->key, q->klen, &w->p, w->qty, at, now, &w->r);
            if (rc < 0)
                acquire__refusal(a, w, now);
        } else if (w->deadline_ns <= now || rc < 0) {
            acquire__refusal(a, w, now);
        } else {
            break;
        }
        acquire__unlink(w);
        w->waited_ns = now - w->start_ns;
        *tail = w;
        tail = &w->next;
    }
    for (w = q->head; w != NULL; w = next) {
        next = w->next;
        if (w->deadline_ns <= now) {
            acquire__refusal(a, w, now);
            acquire__unlink(w);
            w->waited_ns = now - w->start_ns;
            *tail = w;
            tail = &w->next;
        }
    }
    if (q->n == 0)
        acquire__queue_retire(a, q);
    else
        acquire__rearm(q, now);
    return answered;
}

static void acquire__deliver(struct acquire_waiter *list)
{
    struct acquire_waiter *w, *next;
    for (w = list; w != NULL; w = next) {
        next = w->next;
        w->done(w->ud, &w->r, w->waited_ns);
        acquire__waiter_free(w);
    }
}

static void acquire__on_timer(uv_timer_t *t)
{
    struct acquire_queue *q = t->data;
    acquire__deliver(acquire__process(q, (int64_t)uv_hrtime()));
}

/* The timerfd expired: serves every near queue now due, one at a time (an
 * answer may submit to, or retire, any queue), then sets it for the next. */
static void acquire__on_tfd(uv_poll_t *h, int status, int events)
{
    struct acquire *a = h->data;
    uint64_t expirations;
    (void)status;
    (void)events;
    if (read(a->tfd, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: nothing expired (a re-armed timer); nothing to do */
    }
    a->tfd_at = INT64_MAX;
    int64_t now = (int64_t)uv_hrtime();
    /* Each pass answers or re-arms one queue for later than now; the bound
     * only guards against a queue re-armed for the past. */
    for (size_t pass = 0; pass < ACQUIRE_DEFAULT_MAX_WAITERS; pass++) {
        struct acquire_queue *q = a->near;
        while (q != NULL && q->near_due > now)
            q = q->nnext;
        if (q == NULL)
            break;
        acquire__near_remove(a, q);
        acquire__deliver(acquire__process(q, now));
    }
    int64_t next = INT64_MAX;
    for (struct acquire_queue *q = a->near; q != NULL; q = q->nnext)
        if (q->near_due < next)
            next = q->near_due;
    if (next != INT64_MAX)
        acquire__tfd_arm(a, next);
}

static struct acquire_queue *acquire__find(struct acquire *a, const char *key, size_t klen)
{
    struct table_entry *e;
    struct acquire_queue *q = NULL;
    /* Nobody waiting anywhere (the usual case): no key to hash. */
    if (table_count(a->queues) == 0)
        return NULL;
    e = table_find(a->queues, key, klen);
    if (e != NULL)
        memcpy(&q, table_entry_value(e), sizeof(q));
    return q;
}

static int acquire__queue_new(struct acquire *a, const char *key, size_t klen,
                              struct acquire_queue **out)
{
    struct table_entry *e;
    struct acquire_queue *q = calloc(1, sizeof(*q) + klen);
    int rc;
    if (q == NULL)
        return -SLUICE_ENOMEM;
    rc = table_insert(a->queues, key, klen, sizeof(q), 0, 0, &e);
    if (rc < 0) {
        free(q);
        return rc;
    }
    memcpy(table_entry_value(e), &q, sizeof(q));
    q->a = a;
    q->klen = klen;
    if (klen > 0)
        memcpy(q->key, key, klen);
    uv_timer_init(a->loop, &q->timer);
    q->timer.data = q;
    q->lnext = a->list;
    if (a->list != NULL)
        a->list->lprev = q;
    a->list = q;
    *out = q;
    return 0;
}

/*
 * How late a caller may be for its slot and still be charged at the slot:
 * the larger of one unit's interval of the limit and ACQUIRE_CATCHUP_NS (a
 * bucket's or warmup's; windows get none).  A paced caller is late by its
 * own round trip on every call, and now and then by a stall of its
 * process, of the daemon or of the host (a few milliseconds on a loaded
 * machine: at 1,000/s, a dozen intervals).  Charged at the arrival, each
 * stall would be lost for good (at 1,000/s, 6-10% of the rate on a host at
 * load 8); charged at the slot, the caller catches up, as Guava's acquire
 * does from its stored permits.  The price is the bound: over any window W
 * a key admits at most (W + catch-up) / interval + burst + 1 units, and a
 * key idle for longer than the catch-up starts afresh (a fresh or idle key
 * gets no credit at all: only a slot the schedule reached counts).  The
 * limiter keeps a key SL.ACQUIRE charged for the catch-up after it drains,
 * so the slot is still there to read after a stall.
 */
#define ACQUIRE_CATCHUP_NS LIMITER_PACE_KEEP_NS

static int64_t acquire__credit(const struct algo_params *p)
{
    if (p->kind != ALGO_GCRA && p->kind != ALGO_TOKEN_BUCKET && p->kind != ALGO_WARMUP)
        return 0;
    int64_t unit = p->count > 0 ? p->period_ns / p->count : 0;
    return unit > ACQUIRE_CATCHUP_NS ? unit : ACQUIRE_CATCHUP_NS;
}

/*
 * When a request that fits on arrival is charged: if the key's schedule
 * reached it (its slot) within the catch-up before now, at that slot rather
 * than now, so a caller pacing itself (each request sent when the last
 * answer came) keeps its rate despite its round trip and its stalls,
 * instead of restarting the schedule from each late arrival.  Over any run
 * the units still start no closer than the rate allows from the schedule's
 * start (each is charged at or after its slot, and slots are an interval
 * apart); a key idle for longer is charged now.  Asked before anything
 * looks at the key at now: a key drained by now is forgotten (it is a fresh
 * key from then on), and its schedule with it.
 */
static int64_t acquire__charge_time(struct acquire *a, const struct acquire_req *req,
                                    const struct algo_params *p, int64_t now_ns)
{
    int64_t x = acquire__credit(p), d;
    if (x > 0 && now_ns > x &&
        limiter_acquire_fit(a->lim, req->key, req->klen, p, req->qty, now_ns - x, now_ns, &d,
                            NULL) == 0 &&
        d > 0 && d <= x)
        return now_ns - x + d;
    return now_ns;
}

/* Serves a request that fits on arrival at `at` (returns 1, *r the answer);
 * the charge is checked there (limiter_acquire_take decides at that time),
 * and a refusal there is retried now. */
static int acquire__take_now(struct acquire *a, const struct acquire_req *req,
                             const struct algo_params *p, int64_t at, int64_t now_ns,
                             struct algo_result *r)
{
    int rc = limiter_acquire_take(a->lim, req->key, req->klen, p, req->qty, at, now_ns, r);
    if (rc == 0 && r->limited && at != now_ns)
        rc = limiter_acquire_take(a->lim, req->key, req->klen, p, req->qty, now_ns, now_ns, r);
    return rc < 0 ? rc : 1;
}

static int acquire__submit(struct acquire *a, const struct acquire_req *req,
                           acquire_decide_fn decide, void *decide_ud, int wake_only, int64_t now_ns,
                           acquire_done_fn done, void *ud, struct algo_result *r,
                           int64_t *waited_ns, struct acquire_waiter **wout);

int acquire_submit(struct acquire *a, const struct acquire_req *req, int64_t now_ns,
                   acquire_done_fn done, void *ud, struct algo_result *r, int64_t *waited_ns,
                   struct acquire_waiter **wout)
{
    return acquire__submit(a, req, NULL, NULL, 0, now_ns, done, ud, r, waited_ns, wout);
}

int acquire_submit_via(struct acquire *a, const struct acquire_req *req, acquire_decide_fn decide,
                       void *decide_ud, int64_t now_ns, acquire_done_fn done, void *ud,
                       struct algo_result *r, int64_t *waited_ns, struct acquire_waiter **wout)
{
    return acquire__submit(a, req, decide, decide_ud, 0, now_ns, done, ud, r, waited_ns, wout);
}

int acquire_submit_woken(struct acquire *a, const struct acquire_req *req, acquire_decide_fn decide,
                         void *decide_ud, int64_t now_ns, acquire_done_fn done, void *ud,
                         struct algo_result *r, int64_t *waited_ns, struct acquire_waiter **wout)
{
    if (decide == NULL)
        return -SLUICE_EINVAL;
    return acquire__submit(a, req, decide, decide_ud, 1, now_ns, done, ud, r, waited_ns, wout);
}

static int acquire__submit(struct acquire *a, const struct acquire_req *req,
                           acquire_decide_fn decide, void *decide_ud, int wake_only, int64_t now_ns,
                           acquire_done_fn done, void *ud, struct algo_result *r,
                           int64_t *waited_ns, struct acquire_waiter **wout)
{
    int64_t next_try = now_ns;
    const struct algo_params *p;
    struct acquire_queue *q;
    struct acquire_waiter *w;
    int64_t delay;
    int rc;

    if (req == NULL || (req->p == NULL) == (req->pol == NULL) || req->qty < 0 ||
        req->timeout_ns < 0 || done == NULL || a->closed)
        return -SLUICE_EINVAL;
    if (req->klen > TABLE_MAX_KEY)
        return -SLUICE_ETOOBIG;
    p = req->pol != NULL ? &req->pol->algo : req->p;
    *waited_ns = 0;
    /* The limiter sees an older reading as its own clock: count from that,
     * so a due time is never earlier than the key's state says. */
    if (decide == NULL && now_ns < limiter_clock(a->lim))
        now_ns = limiter_clock(a->lim);
    q = acquire__find(a, req->key, req->klen);

    if (decide != NULL && q == NULL) {
        /* Remote-decided, nobody waiting: take it now if it fits; wait only
         * if the refusal says it may fit before the deadline (wake-only:
         * unless it can never fit).  Dry-run policies are answered allowed
         * by the decider. */
        rc = decide(decide_ud, req->key, req->klen, p, req->pol, req->qty, now_ns, r);
        if (rc < 0)
            return rc;
        if (!r->limited || req->timeout_ns == 0)
            return 1;
        if (wake_only ? req->qty > r->limit
                      : r->retry_after_ns == ALGO_NEVER || r->retry_after_ns > req->timeout_ns)
            return 1;
        if (r->retry_after_ns == ALGO_NEVER)
            next_try = INT64_MAX;
        else
            next_try = num_add_sat(now_ns, r->retry_after_ns > 0 ? r->retry_after_ns : 1);
    } else if (decide != NULL) {
        /* Behind the waiters (FIFO): asked when it reaches the head. */
        memset(r, 0, sizeof(*r));
        r->limit = p->limit;
    } else if (req->pol != NULL && req->pol->dry_run) {
        /* Dry-run limits never make anyone wait. */
        rc =
            limiter_decide_policy(a->lim, req->key, req->klen, req->pol, req->qty, now_ns, r, NULL);
        return rc < 0 ? rc : 1;
    }
    if (decide == NULL && q == NULL) {
        int64_t at = acquire__charge_time(a, req, p, now_ns);
        rc = limiter_acquire_fit(a->lim, req->key, req->klen, p, req->qty, now_ns, now_ns, &delay,
                                 r);
        if (rc < 0)
            return rc;
        if (delay == 0)
            return acquire__take_now(a, req, p, at, now_ns, r);
        if (delay == ALGO_NEVER || delay > req->timeout_ns)
            return 1; /* r is the refusal */
    } else if (decide == NULL) {
        /* Behind the waiters: if even the whole queue's demand plus this
         * one would fit only after the deadline, say so now.  (When that
         * total exceeds what the key can hold at once there is no
         * estimate; the deadline answers.) */
        int64_t total = num_add_sat(q->qty_sum, req->qty);
        rc = limiter_acquire_fit(a->lim, req->key, req->klen, p, req->qty, now_ns, now_ns, &delay,
                                 r);
        if (rc < 0)
            return rc;
        if (delay == ALGO_NEVER)
            return 1;
        rc = limiter_earliest_fit(a->lim, req->key, req->klen, p, total, now_ns, &delay, NULL);
        if (rc < 0)
            return rc;
        if (delay != ALGO_NEVER && delay > req->timeout_ns) {
            r->limited = 1;
            r->retry_after_ns = delay;
            return 1;
        }
    }
    if (a->waiting >= a->max_waiters)
        return -SLUICE_EFULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -SLUICE_ENOMEM;
    if (q == NULL && (rc = acquire__queue_new(a, req->key, req->klen, &q)) < 0) {
        free(w);
        return rc;
    }
    w->p = *p;
    w->set = req->pol != NULL ? policy_set_retain(req->set) : NULL;
    w->pol = req->pol;
    w->decide = decide;
    w->decide_ud = decide_ud;
    w->next_try_ns = next_try;
    w->promised = decide != NULL && q->head == NULL && next_try != INT64_MAX && next_try > now_ns;
    w->wake_only = wake_only;
    w->qty = req->qty;
    w->start_ns = now_ns;
    w->deadline_ns = num_add_sat(now_ns, req->timeout_ns);
    w->due_ns = -1;
    w->done = done;
    w->ud = ud;
    w->q = q;
    w->prev = q->tail;
    if (q->tail != NULL)
        q->tail->next = w;
    else
        q->head = w;
    q->tail = w;
    q->n++;
    q->qty_sum = num_add_sat(q->qty_sum, w->qty);
    a->waiting++;
    acquire__rearm(q, now_ns);
    *wout = w;
    return 0;
}

int64_t acquire_queued(struct acquire *a, const char *key, size_t klen)
{
    struct acquire_queue *q = acquire__find(a, key, klen);
    return q != NULL ? q->qty_sum : 0;
}

int acquire_has_waiters(struct acquire *a, const char *key, size_t klen)
{
    /* A queue lives exactly while it has waiters (the last one leaving
     * retires it); a request submitted while it lives queues behind it. */
    return acquire__find(a, key, klen) != NULL;
}

void acquire_wake(struct acquire *a, const char *key, size_t klen)
{
    struct acquire_queue *q = acquire__find(a, key, klen);
    if (q == NULL || q->head == NULL || q->head->decide == NULL)
        return;
    q->head->next_try_ns = 0;
    q->head->promised = 0;
    /* Served on the next loop turn, not inside the caller's handler: an
     * answer unblocks a client, whose next commands must not run there. */
    uv_timer_start(&q->timer, acquire__on_timer, 0, 0);
}

void acquire_cancel(struct acquire *a, struct acquire_waiter *w)
{
    struct acquire_queue *q = w->q;
    acquire__unlink(w);
    acquire__waiter_free(w);
    if (q->n == 0) {
        acquire__queue_retire(a, q);
    } else {
        /* The next waiter may fit now: serve it on the next loop turn
         * rather than from inside the server's cancel hook. */
        uv_timer_start(&q->timer, acquire__on_timer, 0, 0);
    }
}

void acquire_close(struct acquire *a)
{
    if (a == NULL || a->closed)
        return;
    a->closed = 1;
    while (a->list != NULL) {
        struct acquire_queue *q = a->list;
        struct acquire_waiter *w, *next;
        for (w = q->head; w != NULL; w = next) {
            next = w->next;
            a->waiting--;
            acquire__waiter_free(w);
        }
        q->head = q->tail = NULL;
        q->n = 0;
        q->qty_sum = 0;
        acquire__queue_retire(a, q);
    }
    if (a->tfd >= 0) {
        uv_poll_stop(&a->tpoll);
        uv_close((uv_handle_t *)&a->tpoll, NULL);
    }
}

void acquire_destroy(struct acquire *a)
{
    if (a == NULL)
        return;
    if (a->tfd >= 0)
        close(a->tfd); /* its poll handle was closed by acquire_close */
    table_destroy(a->queues);
    free(a);
}
