/*
 * acquire: the waiting acquire on a real libuv loop with short real
 * durations.  Order of answers (FIFO per key, a small request never
 * overtaking a large one), deadlines (a waiter that cannot be served is
 * answered limited, not before its deadline), immediate answers (fits now;
 * cannot fit before the deadline), cancellation (no answer, no leak, later
 * waiters still served), thousands of waiters, and a waiter outliving the
 * policy set it came from.  The same for keys decided elsewhere
 * (acquire_submit_via, global keys) through a fake decider: re-asked only
 * when a refusal said it may fit, promises made stale by other nodes'
 * consumption, deadlines, decider errors, FIFO, cancellation mid-wait.
 * Only orderings, counts of asks and lower bounds on waits are asserted,
 * never upper bounds on time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <uv.h>

#include "acquire.h"
#include "config.h"
#include "limiter.h"
#include "policy.h"
#include "sluice/error.h"
#include "testutil.h"

#define MS ((int64_t)1000000)
#define S  ((int64_t)1000000000)

/* One answer as a test records it. */
struct rec {
    int id;
    int limited;
    int64_t remaining;
    int64_t waited_ns;
    int64_t retry_after_ns;
};

struct log {
    struct rec *r;
    size_t n, cap;
};

struct ctx {
    struct log *log;
    int id;
};

static void on_done(void *ud, const struct algo_result *r, int64_t waited_ns)
{
    struct ctx *c = ud;
    struct log *l = c->log;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->r = realloc(l->r, l->cap * sizeof(*l->r));
        assert_non_null(l->r);
    }
    l->r[l->n++] = (struct rec){c->id, r->limited, r->remaining, waited_ns, r->retry_after_ns};
}

struct fixture {
    uv_loop_t loop;
    struct limiter *lim;
    struct acquire *a;
    struct log log;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(limiter_create(&f->lim, NULL), 0);
    assert_int_equal(acquire_create(&f->loop, f->lim, 0, &f->a), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    acquire_close(f->a);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    acquire_destroy(f->a);
    limiter_destroy(f->lim);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f->log.r);
    free(f);
    return 0;
}

static struct algo_params mkp(enum algo_kind k, int64_t burst, int64_t count, int64_t period_ns)
{
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, k, burst, count, period_ns, 0), 0);
    return p;
}

/* The policy set a config text describes (the caller releases it). */
static struct policy_set *load_set(const char *text)
{
    struct config cfg;
    char err[256];
    struct policy_set *set;
    assert_int_equal(config_load_buffer("t.conf", text, strlen(text), &cfg, err, sizeof(err)), 0);
    assert_int_equal(policy_set_build(cfg.policies, cfg.npolicies, &set), 0);
    config_free(&cfg);
    return set;
}

/* Submits; returns 1 if answered at once (recorded with waited 0). */
static int submit(struct fixture *f, struct ctx *c, const char *key, const struct algo_params *p,
                  int64_t qty, int64_t timeout_ns, struct acquire_waiter **w)
{
    struct acquire_req req = {key, strlen(key), p, NULL, NULL, qty, timeout_ns};
    struct algo_result r;
    int64_t waited;
    struct acquire_waiter *tmp;
    c->log = &f->log;
    int rc =
        acquire_submit(f->a, &req, (int64_t)uv_hrtime(), on_done, c, &r, &waited, w ? w : &tmp);
    assert_true(rc == 0 || rc == 1);
    if (rc == 1)
        on_done(c, &r, waited);
    return rc;
}

/* Answers come in request order per key, each allowed, and a small request
 * queued behind a large one is not served first even though it would fit
 * earlier. */
static void test_fifo(void **state)
{
    struct fixture *f = *state;
    /* capacity 3, one unit per 10 ms (token-bucket waits for all the
     * units; gcra would pay forward, see test_pays_forward) */
    struct algo_params p = mkp(ALGO_TOKEN_BUCKET, 2, 1, 10 * MS);
    struct ctx c[6];
    for (int i = 0; i < 6; i++)
        c[i].id = i;
    int64_t t0 = (int64_t)uv_hrtime();
    assert_int_equal(submit(f, &c[0], "k", &p, 3, S, NULL), 1); /* takes everything */
    assert_int_equal(submit(f, &c[1], "k", &p, 3, S, NULL), 0); /* fits 30 ms after c[0] */
    int64_t t1 = (int64_t)uv_hrtime();
    assert_int_equal(submit(f, &c[2], "k", &p, 1, S, NULL), 0); /* would fit after 10 ms */
    assert_int_equal(submit(f, &c[3], "k", &p, 1, S, NULL), 0);
    assert_int_equal(acquire_waiting(f->a), 3);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(f->log.r[i].id, i);
        assert_int_equal(f->log.r[i].limited, 0);
    }
    /* The big one waited for its three units: answered at least 30 ms
     * after the first took everything (less the clock's granularity),
     * however long the two submissions took on a loaded host. */
    assert_true(f->log.r[1].waited_ns + (t1 - t0) >= 25 * MS);
    assert_true(f->log.r[3].waited_ns >= f->log.r[2].waited_ns);
    assert_int_equal(acquire_waiting(f->a), 0);
}

/* A request whose earliest fit is beyond its deadline, or that can never
 * fit, is answered limited at once; a waiter that cannot be served by its
 * deadline is answered limited, not before it. */
static void test_deadline(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 0, 1, 100 * MS); /* capacity 1 */
    struct ctx c[5];
    for (int i = 0; i < 5; i++)
        c[i].id = i;
    assert_int_equal(submit(f, &c[0], "d", &p, 1, S, NULL), 1);
    assert_int_equal(f->log.r[0].limited, 0);
    /* fit in 100 ms, deadline 20 ms: at once, limited */
    assert_int_equal(submit(f, &c[1], "d", &p, 1, 20 * MS, NULL), 1);
    assert_int_equal(f->log.r[1].limited, 1);
    /* never fits (3 > a window's 2) */
    struct algo_params fw = mkp(ALGO_FIXED_WINDOW, 0, 2, 10 * S);
    assert_int_equal(submit(f, &c[2], "d2", &fw, 3, 10 * S, NULL), 1);
    assert_int_equal(f->log.r[2].limited, 1);
    assert_int_equal(f->log.r[2].retry_after_ns, ALGO_NEVER);
    /* waits for 100 ms */
    assert_int_equal(submit(f, &c[3], "d", &p, 1, S, NULL), 0);
    /* behind it, 30 ms deadline: no estimate (2 units exceed capacity), so
     * it waits and its deadline answers it */
    assert_int_equal(submit(f, &c[4], "d", &p, 1, 30 * MS, NULL), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 5);
    assert_int_equal(f->log.r[3].id, 4);
    assert_int_equal(f->log.r[3].limited, 1);
    assert_true(f->log.r[3].waited_ns >= 30 * MS);
    assert_int_equal(f->log.r[4].id, 3);
    assert_int_equal(f->log.r[4].limited, 0);
}

/* More than a bucket ever holds pays forward, as Guava's acquire(n): it is
 * served when one unit fits and charged in full, and the request after it
 * waits out the debt (BURST 0, one unit per 100 ms: 3 units, then 300 ms). */
static void test_pays_forward(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 0, 1, 100 * MS);
    struct ctx c[3];
    for (int i = 0; i < 3; i++)
        c[i].id = i;
    assert_int_equal(submit(f, &c[0], "pf", &p, 3, S, NULL), 1);
    assert_int_equal(f->log.r[0].limited, 0);
    /* the debt is beyond a 200 ms deadline: limited at once, 300 ms to wait */
    assert_int_equal(submit(f, &c[1], "pf", &p, 1, 200 * MS, NULL), 1);
    assert_int_equal(f->log.r[1].limited, 1);
    assert_true(f->log.r[1].retry_after_ns > 250 * MS);
    assert_int_equal(submit(f, &c[2], "pf", &p, 1, S, NULL), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 3);
    assert_int_equal(f->log.r[2].limited, 0);
    assert_true(f->log.r[2].waited_ns >= 250 * MS);
    /* with a burst, gcra serves 2 units when one fits (Guava's SmoothBursty):
     * capacity 2 used up, then 2 more at once, the next waits two units */
    struct algo_params b = mkp(ALGO_GCRA, 1, 1, 100 * MS);
    assert_int_equal(submit(f, &c[0], "pf2", &b, 2, S, NULL), 1);
    assert_int_equal(submit(f, &c[1], "pf2", &b, 2, 0, NULL), 1);
    assert_int_equal(f->log.r[4].limited, 1);
    assert_int_equal(submit(f, &c[2], "pf2", &b, 2, S, NULL), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.r[5].limited, 0);
    assert_true(f->log.r[5].waited_ns >= 50 * MS && f->log.r[5].waited_ns < 150 * MS);
}

/* Submits at an explicit time with no wait allowed: 1 if allowed. */
static int submit_at(struct fixture *f, const char *key, const struct algo_params *p,
                     int64_t now_ns)
{
    struct acquire_req req = {key, strlen(key), p, NULL, NULL, 1, 0};
    struct algo_result r;
    struct acquire_waiter *w;
    int64_t waited;
    struct ctx c = {.id = 99};
    assert_int_equal(acquire_submit(f->a, &req, now_ns, on_done, &c, &r, &waited, &w), 1);
    return !r.limited;
}

/* A caller pacing itself (each request sent when the last answer came) is
 * charged at its slot when it arrives up to the catch-up (20 ms, or one
 * interval when that is longer) late, so its round trip and its stalls do
 * not slow its rate; later than that, the schedule restarts.  BURST 0, one
 * unit per 10 ms. */
static void test_paced_caller_keeps_schedule(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 0, 1, 10 * MS);
    int64_t t0 = 1000 * S;
    assert_true(submit_at(f, "pace", &p, t0));
    /* 3 ms late for the slot at t0 + 10 ms: charged at the slot ... */
    assert_true(submit_at(f, "pace", &p, t0 + 13 * MS));
    /* ... so the slot at t0 + 20 ms is still there (charged at arrival, the
     * next slot would be t0 + 23 ms) */
    assert_true(submit_at(f, "pace", &p, t0 + 21 * MS));
    assert_false(submit_at(f, "pace", &p, t0 + 29 * MS)); /* never faster */
    assert_true(submit_at(f, "pace", &p, t0 + 30 * MS));
    /* 18 ms late for the slot at t0 + 40 ms (a stall): charged at the slot,
     * so the caller catches up: the slots at t0 + 50 and 60 ms are there at
     * once, and then the schedule holds again */
    assert_true(submit_at(f, "pace", &p, t0 + 58 * MS));
    assert_true(submit_at(f, "pace", &p, t0 + 58 * MS));
    assert_true(submit_at(f, "pace", &p, t0 + 60 * MS));
    assert_false(submit_at(f, "pace", &p, t0 + 69 * MS));
    assert_true(submit_at(f, "pace", &p, t0 + 70 * MS));
    /* 25 ms late (more than the catch-up): the schedule restarts at arrival */
    assert_true(submit_at(f, "pace", &p, t0 + 105 * MS));
    assert_false(submit_at(f, "pace", &p, t0 + 114 * MS));
    assert_true(submit_at(f, "pace", &p, t0 + 115 * MS));
    /* a slower limit: the catch-up is one interval (100 ms here) */
    struct algo_params slow = mkp(ALGO_GCRA, 0, 1, 100 * MS);
    int64_t t2 = t0 + S / 2;
    assert_true(submit_at(f, "slow", &slow, t2));
    assert_true(submit_at(f, "slow", &slow, t2 + 190 * MS)); /* charged at t2 + 100 ms */
    assert_true(submit_at(f, "slow", &slow, t2 + 200 * MS));
    assert_false(submit_at(f, "slow", &slow, t2 + 299 * MS));
    /* the same for token-bucket (later: the limiter's clock only moves on) */
    struct algo_params tb = mkp(ALGO_TOKEN_BUCKET, 0, 1, 10 * MS);
    int64_t t1 = t0 + S;
    assert_true(submit_at(f, "tb", &tb, t1));
    assert_true(submit_at(f, "tb", &tb, t1 + 13 * MS));
    assert_true(submit_at(f, "tb", &tb, t1 + 21 * MS));
    assert_false(submit_at(f, "tb", &tb, t1 + 29 * MS));
    assert_true(submit_at(f, "tb", &tb, t1 + 48 * MS)); /* 18 ms late */
    assert_true(submit_at(f, "tb", &tb, t1 + 48 * MS));
    assert_true(submit_at(f, "tb", &tb, t1 + 50 * MS));
    assert_false(submit_at(f, "tb", &tb, t1 + 59 * MS));
}

/*
 * The schedule a paced caller gets, as the charges fall (an injected clock,
 * no timers): 1,000 calls at 1,000/s, BURST 0, each sent a round trip
 * (10-300 us) after the last answer, with stalls of 1-25 ms now and then
 * (seeded).  A call that does not fit is answered at the time its refusal
 * names (what a waiter's timer does, charged at its due time).  The model:
 * a call is answered at its slot or on arrival if later; it is charged at
 * its slot when it arrives less than the catch-up (20 ms) late, and the
 * next slot is one interval on; later than that the schedule restarts from
 * its arrival.  The limiter's reclaim runs before every call (a key
 * drained by a stall is kept for the catch-up).  Every answer must fall where the model says, so
 * the stalls under the catch-up cost nothing and the calls are never served faster than the
 * schedule.  For gcra, token-bucket and warmup (warm: a cold factor of 1).
 */
static void test_paced_schedule_model(void **state)
{
    struct fixture *f = *state;
    uint64_t rng = test_seed("test_paced_schedule_model");
    static const enum algo_kind kinds[3] = {ALGO_GCRA, ALGO_TOKEN_BUCKET, ALGO_WARMUP};
    for (int k = 0; k < 3; k++) {
        struct algo_params p = mkp(kinds[k], 0, 1000, S);
        if (kinds[k] == ALGO_WARMUP)
            assert_int_equal(algo_params_set_warmup(&p, S, 1), 0);
        char key[16];
        snprintf(key, sizeof(key), "model%d", k);
        int64_t t0 = (int64_t)(2000 + 10 * k) * S, now = t0, slot = t0;
        int caught_up = 0, restarts = 0;
        for (int i = 0; i < 1000; i++) {
            int64_t arrival = now, want, next;
            if (arrival <= slot) {
                want = next = slot;
            } else if (arrival - slot < 20 * MS) {
                want = arrival;
                next = slot;
                caught_up++;
            } else {
                want = next = arrival;
                restarts++;
            }
            struct acquire_req req = {key, strlen(key), &p, NULL, NULL, 1, 0};
            struct algo_result r;
            struct acquire_waiter *w;
            int64_t waited;
            struct ctx c = {.id = i};
            /* the daemon's reclaim ran meanwhile: it must not take the
             * schedule of a key drained by a stall */
            limiter_maintain(f->lim, now, 1000);
            assert_int_equal(acquire_submit(f->a, &req, now, on_done, &c, &r, &waited, &w), 1);
            if (r.limited) {
                /* waits: answered when its refusal says it fits */
                assert_true(r.retry_after_ns > 0 && r.retry_after_ns != ALGO_NEVER);
                now += r.retry_after_ns;
                assert_int_equal(acquire_submit(f->a, &req, now, on_done, &c, &r, &waited, &w), 1);
                assert_false(r.limited);
            }
            if (now != want)
                fail_msg("%s call %d answered at t0%+lld us, its slot t0%+lld us, arrived "
                         "t0%+lld us",
                         algo_name(kinds[k]), i, (long long)((now - t0) / 1000),
                         (long long)((slot - t0) / 1000), (long long)((arrival - t0) / 1000));
            slot = next + MS;
            /* the next call: a round trip, and one time in 25 a stall */
            now += test_rand_range(&rng, 10000, 300000);
            if (test_rand_range(&rng, 0, 24) == 0)
                now += test_rand_range(&rng, 1, 25) * MS;
        }
        assert_true(caught_up > 0);
        (void)restarts;
    }
}

/* A cancelled waiter is never answered, and the ones behind it move up. */
static void test_cancel(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_TOKEN_BUCKET, 0, 1, 10 * MS);
    struct ctx c[5];
    struct acquire_waiter *w[5];
    for (int i = 0; i < 5; i++)
        c[i].id = i;
    assert_int_equal(submit(f, &c[0], "c", &p, 1, S, NULL), 1);
    for (int i = 1; i < 5; i++)
        assert_int_equal(submit(f, &c[i], "c", &p, 1, S, &w[i]), 0);
    acquire_cancel(f->a, w[1]); /* the head */
    acquire_cancel(f->a, w[3]); /* one in the middle */
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 3);
    assert_int_equal(f->log.r[1].id, 2);
    assert_int_equal(f->log.r[2].id, 4);
    assert_int_equal(f->log.r[1].limited, 0);
    assert_int_equal(f->log.r[2].limited, 0);
    /* Cancel every waiter of a key: the queue goes away. */
    for (int i = 1; i < 3; i++)
        assert_int_equal(submit(f, &c[i], "c2", &p, 1, S, &w[i]), i == 1 ? 1 : 0);
    acquire_cancel(f->a, w[2]);
    assert_int_equal(acquire_waiting(f->a), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
}

/* 5000 waiters on 5 keys: all served, in order per key, every answer
 * allowed, and the number of admissions per key is what the limit allows. */
static void test_thousands(void **state)
{
    struct fixture *f = *state;
    enum { N = 5000, K = 5 };
    /* capacity 1, 10000 per second: 1000 waiters per key take ~0.1 s */
    struct algo_params p = mkp(ALGO_GCRA, 0, 10000, S);
    struct ctx *c = calloc(N, sizeof(*c));
    assert_non_null(c);
    int immediate = 0;
    int64_t t0 = (int64_t)uv_hrtime();
    for (int i = 0; i < N; i++) {
        char key[8];
        snprintf(key, sizeof(key), "t%d", i % K);
        c[i].id = i;
        immediate += submit(f, &c[i], key, &p, 1, 30 * S, NULL);
    }
    /* Served at once: the first of each key, and as many more as the rate
     * allows while the submissions took (a slow build submits slowly). */
    int64_t took = (int64_t)uv_hrtime() - t0;
    assert_true(immediate <= K * (2 + took / (S / 10000)));
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, N);
    int last[K];
    for (int k = 0; k < K; k++)
        last[k] = -1;
    for (size_t i = 0; i < f->log.n; i++) {
        int id = f->log.r[i].id;
        assert_int_equal(f->log.r[i].limited, 0);
        assert_true(id > last[id % K]);
        last[id % K] = id;
    }
    assert_int_equal(acquire_waiting(f->a), 0);
    free(c);
}

/* A waiter keeps its policy set alive after the caller dropped it (a
 * reload); ASan reports a use after free otherwise. */
static void test_policy_retained(void **state)
{
    struct fixture *f = *state;
    struct policy_set *set =
        load_set("[policy slow]\nalgorithm = gcra\nburst = 0\nrate = 1 per 20ms\n");
    const struct policy *pol = policy_set_find(set, "slow", 4);
    assert_non_null(pol);
    struct ctx c[3];
    for (int i = 0; i < 3; i++) {
        struct acquire_req req = {"pk", 2, NULL, pol, set, 1, S};
        struct algo_result r;
        int64_t waited;
        struct acquire_waiter *w;
        c[i].id = i;
        c[i].log = &f->log;
        int rc = acquire_submit(f->a, &req, (int64_t)uv_hrtime(), on_done, &c[i], &r, &waited, &w);
        assert_int_equal(rc, i == 0 ? 1 : 0);
        if (rc == 1)
            on_done(&c[i], &r, waited);
    }
    policy_set_release(set); /* the reload */
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f->log.r[i].id, i);
        assert_int_equal(f->log.r[i].limited, 0);
    }
}

/* Closing drops waiters without answering and frees everything. */
static void test_close_with_waiters(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_SLIDING_LOG, 0, 1, 10 * S);
    struct ctx c[3];
    for (int i = 0; i < 3; i++) {
        c[i].id = i;
        submit(f, &c[i], "z", &p, 1, 60 * S, NULL);
    }
    assert_int_equal(f->log.n, 1); /* the first; the others wait */
    assert_int_equal(acquire_waiting(f->a), 2);
    acquire_close(f->a);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 1);
}

/* ---- keys decided elsewhere (acquire_submit_via) ---- */

/*
 * A fake decider standing in for the cluster's replica.  The key fits when
 * the clock has reached avail_ns and no forced refusals are left; a refusal
 * says "retry at avail_ns" (or retry_ns, or ALGO_NEVER).  While pushes are
 * left, each check first finds that another node consumed since the last
 * one: avail_ns moves to push_ns after max(avail_ns, now), so the time the
 * previous refusal promised is stale when it is kept.  An allowed decision
 * takes one slot: avail_ns moves to now + step_ns.  "now" is the reading
 * the layer asks to decide at (at_ns), as the replica decides.  Every call
 * is recorded, with that reading and the clock when it was made.
 */
struct fake {
    int refusals; /* refuse this many more times whatever the clock */
    int pushes;   /* push avail_ns later after this many more refusals */
    int never;    /* refuse with ALGO_NEVER */
    int fail;     /* fail with this (negative) code */
    int64_t avail_ns, push_ns, step_ns, retry_ns;
    int calls;
    int64_t asked_qty[64];
    int64_t asked_at[64], asked_clock[64];
    const struct policy *asked_pol;
};

static int fake_decide(void *ud, const char *key, size_t klen, const struct algo_params *p,
                       const struct policy *pol, int64_t qty, int64_t at_ns, struct algo_result *r)
{
    struct fake *fk = ud;
    int64_t now = at_ns;
    (void)key;
    (void)klen;
    if (fk->calls < 64) {
        fk->asked_qty[fk->calls] = qty;
        fk->asked_at[fk->calls] = at_ns;
        fk->asked_clock[fk->calls] = (int64_t)uv_hrtime();
    }
    fk->calls++;
    fk->asked_pol = pol;
    if (fk->fail < 0)
        return fk->fail;
    memset(r, 0, sizeof(*r));
    r->limit = p->limit;
    if (fk->pushes > 0) {
        fk->pushes--;
        fk->avail_ns = (fk->avail_ns > now ? fk->avail_ns : now) + fk->push_ns;
    }
    if (fk->refusals == 0 && !fk->never && now >= fk->avail_ns) {
        r->remaining = 0;
        r->retry_after_ns = ALGO_NEVER;
        fk->avail_ns = now + fk->step_ns;
        return 0;
    }
    r->limited = 1;
    if (fk->never)
        r->retry_after_ns = ALGO_NEVER;
    else if (fk->retry_ns > 0)
        r->retry_after_ns = fk->retry_ns;
    else
        r->retry_after_ns = fk->avail_ns > now ? fk->avail_ns - now : 0;
    if (fk->refusals > 0)
        fk->refusals--;
    return 0;
}

/* Submits through fk; returns 1 if answered at once (recorded), 0 when it
 * waits, or the error. */
static int submit_via(struct fixture *f, struct ctx *c, struct fake *fk, const char *key,
                      const struct algo_params *p, int64_t qty, int64_t timeout_ns,
                      struct acquire_waiter **w)
{
    struct acquire_req req = {key, strlen(key), p, NULL, NULL, qty, timeout_ns};
    struct algo_result r;
    int64_t waited = -1;
    struct acquire_waiter *tmp;
    c->log = &f->log;
    int rc = acquire_submit_via(f->a, &req, fake_decide, fk, (int64_t)uv_hrtime(), on_done, c, &r,
                                &waited, w ? w : &tmp);
    if (rc == 1) {
        assert_int_equal(waited, 0);
        on_done(c, &r, waited);
    }
    return rc;
}

/* Refused three times (each refusal promising 5 ms), then allowed: the
 * request waits, is asked again only when the last refusal said it may
 * fit (four asks in all, no busy polling), and is answered allowed. */
static void test_via_refuse_then_allow(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 0, 1, S);
    struct fake fk = {.refusals = 3, .retry_ns = 5 * MS};
    struct ctx c = {.id = 1};
    assert_int_equal(submit_via(f, &c, &fk, "g", &p, 1, 10 * S, NULL), 0);
    assert_int_equal(fk.calls, 1);
    assert_int_equal(acquire_waiting(f->a), 1);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 1);
    assert_int_equal(f->log.r[0].limited, 0);
    assert_int_equal(fk.calls, 4);
    assert_true(f->log.r[0].waited_ns >= 15 * MS - MS);
    assert_int_equal(acquire_waiting(f->a), 0);
}

/* Pacing on a global key: a waiter the timer wakes after its slot (the
 * time its refusal promised) is charged at that slot, not at the wake-up,
 * so the lateness is not lost from the schedule; woken later than the
 * catch-up (20 ms here), it is charged when it wakes. */
static void test_via_charged_at_slot(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 0, 100, S); /* one unit every 10 ms */
    for (int stall = 0; stall < 2; stall++) {
        int64_t t0 = (int64_t)uv_hrtime();
        struct fake fk = {.avail_ns = t0 + 5 * MS, .step_ns = 10 * MS};
        int64_t slot = fk.avail_ns;
        struct ctx c = {.id = 1};
        assert_int_equal(submit_via(f, &c, &fk, stall ? "slot2" : "slot1", &p, 1, 10 * S, NULL), 0);
        if (stall) {
            /* The loop held up well past the slot and the catch-up. */
            while ((int64_t)uv_hrtime() < slot + 40 * MS)
                uv_sleep(5);
        }
        uv_run(&f->loop, UV_RUN_DEFAULT);
        assert_int_equal(f->log.n, stall + 1);
        assert_int_equal(f->log.r[stall].limited, 0);
        assert_int_equal(fk.calls, 2);
        assert_true(fk.asked_at[0] < slot);
        assert_true(fk.asked_clock[1] >= slot); /* woken at or after the slot */
        if (stall)
            assert_true(fk.asked_at[1] >= slot + 40 * MS); /* too late: charged now */
        else
            assert_int_equal(fk.asked_at[1], slot); /* charged at the slot */
        /* the next slot follows the charged one, not the wake-up */
        assert_int_equal(fk.avail_ns, fk.asked_at[1] + 10 * MS);
    }
}

/* Each refusal's promise is made stale by other nodes' consumption: the
 * waiter is asked again at the promised time, refused again with a later
 * time, and finally allowed, never before the key really fits. */
static void test_via_fit_moves_later(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 0, 1, S);
    int64_t t0 = (int64_t)uv_hrtime();
    struct fake fk = {.avail_ns = t0 + 10 * MS, .pushes = 3, .push_ns = 20 * MS};
    struct ctx c = {.id = 1};
    assert_int_equal(submit_via(f, &c, &fk, "m", &p, 1, 10 * S, NULL), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 1);
    assert_int_equal(f->log.r[0].limited, 0);
    /* three stale promises, then the fit: 10 ms + 3 x 20 ms */
    assert_int_equal(fk.pushes, 0);
    assert_int_equal(fk.calls, 4);
    assert_true(f->log.r[0].waited_ns >= 70 * MS - MS);
}

/* A deadline passing while the waiter keeps being refused answers it
 * limited (not before the deadline), with a retry time; requests that
 * cannot fit before their deadline, or ever, are answered at once; a
 * decider's error is returned at once, or answers a waiter limited. */
static void test_via_deadline_and_errors(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 0, 1, S);
    struct fake fk = {.refusals = 1000000, .retry_ns = 10 * MS};
    struct ctx c[6];
    for (int i = 0; i < 6; i++)
        c[i].id = i;
    assert_int_equal(submit_via(f, &c[0], &fk, "d", &p, 1, 50 * MS, NULL), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 1);
    assert_int_equal(f->log.r[0].limited, 1);
    assert_true(f->log.r[0].waited_ns >= 50 * MS);
    assert_true(fk.calls >= 2);

    /* the refusal's retry (10 ms) is beyond the 5 ms deadline: at once */
    int calls = fk.calls;
    assert_int_equal(submit_via(f, &c[1], &fk, "d", &p, 1, 5 * MS, NULL), 1);
    assert_int_equal(f->log.r[1].limited, 1);
    assert_int_equal(fk.calls, calls + 1);
    /* never fits: at once */
    struct fake never = {.never = 1};
    assert_int_equal(submit_via(f, &c[2], &never, "d", &p, 1, 10 * S, NULL), 1);
    assert_int_equal(f->log.r[2].limited, 1);
    /* fits now: at once, allowed */
    struct fake open = {.avail_ns = 0};
    assert_int_equal(submit_via(f, &c[3], &open, "d", &p, 1, 10 * S, NULL), 1);
    assert_int_equal(f->log.r[3].limited, 0);
    /* the decider fails at submission: the error, nothing kept */
    struct fake bad = {.fail = -SLUICE_EFULL};
    assert_int_equal(submit_via(f, &c[4], &bad, "d", &p, 1, 10 * S, NULL), -SLUICE_EFULL);
    assert_int_equal(acquire_waiting(f->a), 0);
    /* ... or while the request waits: answered limited */
    struct fake later = {.refusals = 1, .retry_ns = 2 * MS};
    assert_int_equal(submit_via(f, &c[5], &later, "d", &p, 1, 10 * S, NULL), 0);
    later.fail = -SLUICE_ENOMEM;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 5);
    assert_int_equal(f->log.r[4].id, 5);
    assert_int_equal(f->log.r[4].limited, 1);
    assert_int_equal(later.calls, 2);
    assert_int_equal(acquire_waiting(f->a), 0);
}

/* Waiters of one key are answered in order, a waiter is only asked once it
 * is the head (not at submission, even if its smaller quantity would fit),
 * and once the decider has been asked for one waiter it is never asked for
 * an earlier one again. */
static void test_via_fifo(void **state)
{
    struct fixture *f = *state;
    struct algo_params p = mkp(ALGO_GCRA, 9, 1, S);
    int64_t t0 = (int64_t)uv_hrtime();
    /* one admission every 5 ms; nothing fits for 5 ms.  The first ask is
     * refused whatever the clock (refusals = 1): were this thread
     * descheduled for 5 ms before submitting, the clock alone would let
     * the head fit at once and the test would fail for nothing. */
    struct fake fk = {.refusals = 1, .avail_ns = t0 + 5 * MS, .step_ns = 5 * MS};
    static const int64_t qty[4] = {3, 1, 2, 4};
    struct ctx c[4];
    for (int i = 0; i < 4; i++) {
        c[i].id = i;
        assert_int_equal(submit_via(f, &c[i], &fk, "q", &p, qty[i], 10 * S, NULL), 0);
    }
    int64_t submitted = (int64_t)uv_hrtime(); /* the last submission was before this */
    assert_int_equal(fk.calls, 1);            /* only the first was asked */
    assert_int_equal(acquire_waiting(f->a), 4);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(f->log.r[i].id, i);
        assert_int_equal(f->log.r[i].limited, 0);
    }
    assert_true(fk.calls <= 64);
    int at = 0;
    for (int k = 0; k < fk.calls; k++) {
        while (at < 4 && fk.asked_qty[k] != qty[at])
            at++;
        if (at == 4)
            fail_msg("ask %d for qty %lld out of FIFO order", k, (long long)fk.asked_qty[k]);
    }
    assert_int_equal(at, 3);
    /* each admission came at least 5 ms after the previous one, the first
     * at t0 + 5 ms or later: the last, submitted before `submitted`, was
     * admitted at t0 + 20 ms or later (exact: no allowance for scheduling) */
    assert_true(f->log.r[3].waited_ns >= t0 + 20 * MS - submitted);
}

struct cancel_ctx {
    struct acquire *a;
    struct acquire_waiter *w[2];
    int calls_before; /* asks of the head when it was cancelled */
    int cancel_at;    /* cancel once the head has been asked this often */
    int timed_out;    /* the deadline passed first */
    const struct fake *fk;
    const struct log *log;
    uv_check_t check;
    uv_timer_t deadline;
};

static void cancel_stop(struct cancel_ctx *x)
{
    uv_close((uv_handle_t *)&x->check, NULL);
    uv_close((uv_handle_t *)&x->deadline, NULL);
}

/* Runs after every loop iteration: cancels as soon as the head has been
 * asked cancel_at times (the condition, not a time: a 15 ms timer assumed
 * the 5 ms re-asks would have run by then).  Stops without cancelling if
 * something was answered first; the assertions then fail. */
static void cancel_check_cb(uv_check_t *c)
{
    struct cancel_ctx *x = c->data;
    if (x->log->n > 0) {
        cancel_stop(x);
        return;
    }
    if (x->fk->calls < x->cancel_at)
        return;
    x->calls_before = x->fk->calls;
    acquire_cancel(x->a, x->w[0]);
    acquire_cancel(x->a, x->w[1]);
    cancel_stop(x);
}

static void cancel_deadline_cb(uv_timer_t *t)
{
    struct cancel_ctx *x = t->data;
    x->timed_out = 1;
    cancel_stop(x);
}

/* Cancelling waiters after they have been asked (mid-wait) answers nothing
 * for them, the waiter behind moves up and is served, a key whose only
 * waiter is cancelled goes away, and the policy set the waiters held is
 * released (ASan reports any leak or use after free). */
static void test_via_cancel_mid_wait(void **state)
{
    struct fixture *f = *state;
    struct policy_set *set = load_set("[policy g]\nalgorithm = gcra\nburst = 0\nrate = 1 per 1s\n");
    const struct policy *pol = policy_set_find(set, "g", 1);
    assert_non_null(pol);

    /* The re-ask timers start from the loop's cached time: bring it up to
     * date so the first re-ask is 5 ms after the submissions. */
    uv_update_time(&f->loop);
    /* the head is refused six times, re-asked every 5 ms */
    struct fake fk = {.refusals = 6, .retry_ns = 5 * MS};
    struct acquire_waiter *w[3];
    struct ctx c[3];
    for (int i = 0; i < 3; i++) {
        struct acquire_req req = {"x", 1, NULL, pol, set, 1, 10 * S};
        struct algo_result r;
        int64_t waited;
        c[i].id = i;
        c[i].log = &f->log;
        assert_int_equal(acquire_submit_via(f->a, &req, fake_decide, &fk, (int64_t)uv_hrtime(),
                                            on_done, &c[i], &r, &waited, &w[i]),
                         0);
    }
    assert_ptr_equal(fk.asked_pol, pol); /* the decider sees the policy */
    policy_set_release(set);             /* the waiters hold it now */

    /* a second key whose only waiter is cancelled at once */
    struct algo_params p = mkp(ALGO_GCRA, 0, 1, S);
    struct fake other = {.refusals = 1000000, .retry_ns = 5 * MS};
    struct ctx oc = {.id = 9};
    struct acquire_waiter *ow;
    assert_int_equal(submit_via(f, &oc, &other, "y", &p, 1, 10 * S, &ow), 0);
    acquire_cancel(f->a, ow);
    assert_int_equal(acquire_waiting(f->a), 3);

    /* cancel the head once it has been asked three times (refused each
     * time: it has six refusals) and the last waiter; bounded: 10 s */
    struct cancel_ctx x = {.a = f->a, .w = {w[0], w[2]}, .cancel_at = 3, .fk = &fk, .log = &f->log};
    uv_check_init(&f->loop, &x.check);
    x.check.data = &x;
    uv_check_start(&x.check, cancel_check_cb);
    uv_timer_init(&f->loop, &x.deadline);
    x.deadline.data = &x;
    uv_timer_start(&x.deadline, cancel_deadline_cb, 10000, 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    if (x.timed_out)
        fail_msg("the head was asked only %d times in 10 s, waiting for %d", fk.calls, x.cancel_at);
    assert_true(x.calls_before >= 2);
    assert_int_equal(f->log.n, 1);
    assert_int_equal(f->log.r[0].id, 1);
    assert_int_equal(f->log.r[0].limited, 0);
    assert_int_equal(acquire_waiting(f->a), 0);
    assert_int_equal(other.calls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fifo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pays_forward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paced_caller_keeps_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paced_schedule_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thousands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_policy_retained, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_waiters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_via_refuse_then_allow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_via_charged_at_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_via_fit_moves_later, setup, teardown),
        cmocka_unit_test_setup_teardown(test_via_deadline_and_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_via_fifo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_via_cancel_mid_wait, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
