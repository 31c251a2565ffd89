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
 * Re-entrancy: answering a waiter unblocks its client, and the server may
 * then run that client's next pipelined command at once, which may submit
 * to (or create) a queue.  So a queue is brought to a consistent state
 * (waiters unlinked, timer re-armed or the queue retired) BEFORE any
 * callback runs, and nothing touches the queue after the callbacks.
 */
#include "acquire.h"

#include <stdlib.h>
#include <string.h>

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
    int dry_run;
    int64_t qty;
    int64_t start_ns, deadline_ns;
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
};

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
    } else if (q->head != NULL &&
               limiter_earliest_fit(a->lim, q->key, q->klen, &q->head->p, q->head->qty, now, &delay,
                                    NULL) == 0 &&
               delay != ALGO_NEVER) {
        int64_t fit = num_add_sat(now, delay);
        if (fit < due)
            due = fit;
    }
    int64_t wait_ns = due > now ? due - now : 0;
    /* libuv timers count whole milliseconds from the loop's cached time:
     * round up so the timer never fires before the head fits (an early
     * fire would only re-arm, but costs a wake-up). */
    uint64_t ms = (uint64_t)(wait_ns / NUM_NS_PER_MS + (wait_ns % NUM_NS_PER_MS != 0));
    uv_timer_start(&q->timer, acquire__on_timer, ms, 0);
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
    if (limiter_earliest_fit(a->lim, w->q->key, w->q->klen, &w->p, w->qty, now, &delay, &w->r) <
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
static int acquire__poll(struct acquire_waiter *w, int64_t now)
{
    int rc = w->decide(w->decide_ud, w->q->key, w->q->klen, &w->p, w->pol, w->qty, &w->r);
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
    if (w->r.retry_after_ns == ALGO_NEVER)
        w->next_try_ns = INT64_MAX;
    else
        w->next_try_ns = num_add_sat(now, w->r.retry_after_ns > 0 ? w->r.retry_after_ns : 1);
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
            continue;
        }
        int rc = limiter_earliest_fit(a->lim, q->key, q->klen, &w->p, w->qty, now, &delay, NULL);
        if (rc == 0 && delay == 0) {
            rc = limiter_decide(a->lim, q->key, q->klen, &w->p, w->qty, now, &w->r);
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

static struct acquire_queue *acquire__find(struct acquire *a, const char *key, size_t klen)
{
    struct table_entry *e = table_find(a->queues, key, klen);
    struct acquire_queue *q = NULL;
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

int acquire_submit(struct acquire *a, const struct acquire_req *req, int64_t now_ns,
                   acquire_done_fn done, void *ud, struct algo_result *r, int64_t *waited_ns,
                   struct acquire_waiter **wout)
{
    return acquire_submit_via(a, req, NULL, NULL, now_ns, done, ud, r, waited_ns, wout);
}

int acquire_submit_via(struct acquire *a, const struct acquire_req *req, acquire_decide_fn decide,
                       void *decide_ud, int64_t now_ns, acquire_done_fn done, void *ud,
                       struct algo_result *r, int64_t *waited_ns, struct acquire_waiter **wout)
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
    q = acquire__find(a, req->key, req->klen);

    if (decide != NULL && q == NULL) {
        /* Remote-decided, nobody waiting: take it now if it fits; wait only
         * if the refusal says it may fit before the deadline.  Dry-run
         * policies are answered allowed by the decider. */
        rc = decide(decide_ud, req->key, req->klen, p, req->pol, req->qty, r);
        if (rc < 0)
            return rc;
        if (!r->limited || r->retry_after_ns == ALGO_NEVER || r->retry_after_ns > req->timeout_ns)
            return 1;
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
        rc = limiter_earliest_fit(a->lim, req->key, req->klen, p, req->qty, now_ns, &delay, r);
        if (rc < 0)
            return rc;
        if (delay == 0) {
            rc = limiter_decide(a->lim, req->key, req->klen, p, req->qty, now_ns, r);
            return rc < 0 ? rc : 1;
        }
        if (delay == ALGO_NEVER || delay > req->timeout_ns)
            return 1; /* r is the refusal */
    } else if (decide == NULL) {
        /* Behind the waiters: if even the whole queue's demand plus this
         * one would fit only after the deadline, say so now.  (When that
         * total exceeds what the key can hold at once there is no
         * estimate; the deadline answers.) */
        int64_t total = num_add_sat(q->qty_sum, req->qty);
        rc = limiter_earliest_fit(a->lim, req->key, req->klen, p, req->qty, now_ns, &delay, r);
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
    w->qty = req->qty;
    w->start_ns = now_ns;
    w->deadline_ns = num_add_sat(now_ns, req->timeout_ns);
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
}

void acquire_destroy(struct acquire *a)
{
    if (a == NULL)
        return;
    table_destroy(a->queues);
    free(a);
}
