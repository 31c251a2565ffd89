/*
 * acquire: the waiting acquire on a real libuv loop with short real
 * durations.  Order of answers (FIFO per key, a small request never
 * overtaking a large one), deadlines (a waiter that cannot be served is
 * answered limited, not before its deadline), immediate answers (fits now;
 * cannot fit before the deadline), cancellation (no answer, no leak, later
 * waiters still served), thousands of waiters, and a waiter outliving the
 * policy set it came from.  Only orderings and lower bounds on waits are
 * asserted, never upper bounds on time.
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
    l->r[l->n++] = (struct rec){c->id, r->limited, r->remaining, waited_ns};
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
    /* capacity 3, one unit per 10 ms */
    struct algo_params p = mkp(ALGO_GCRA, 2, 1, 10 * MS);
    struct ctx c[6];
    for (int i = 0; i < 6; i++)
        c[i].id = i;
    assert_int_equal(submit(f, &c[0], "k", &p, 3, S, NULL), 1); /* takes everything */
    assert_int_equal(submit(f, &c[1], "k", &p, 3, S, NULL), 0); /* fits after 30 ms */
    assert_int_equal(submit(f, &c[2], "k", &p, 1, S, NULL), 0); /* would fit after 10 ms */
    assert_int_equal(submit(f, &c[3], "k", &p, 1, S, NULL), 0);
    assert_int_equal(acquire_waiting(f->a), 3);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(f->log.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(f->log.r[i].id, i);
        assert_int_equal(f->log.r[i].limited, 0);
    }
    /* The big one waited for its three units: at least 30 ms minus the
     * clock's granularity between the submission and the first decision. */
    assert_true(f->log.r[1].waited_ns >= 25 * MS);
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
    /* never fits (2 > capacity 1) */
    assert_int_equal(submit(f, &c[2], "d", &p, 2, 10 * S, NULL), 1);
    assert_int_equal(f->log.r[2].limited, 1);
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
    for (int i = 0; i < N; i++) {
        char key[8];
        snprintf(key, sizeof(key), "t%d", i % K);
        c[i].id = i;
        immediate += submit(f, &c[i], key, &p, 1, 30 * S, NULL);
    }
    assert_true(immediate <= K * 2);
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
    const char *text = "[policy slow]\nalgorithm = gcra\nburst = 0\nrate = 1 per 20ms\n";
    struct config cfg;
    char err[256];
    struct policy_set *set;
    assert_int_equal(config_load_buffer("t.conf", text, strlen(text), &cfg, err, sizeof(err)), 0);
    assert_int_equal(policy_set_build(&cfg, &set), 0);
    config_free(&cfg);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fifo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thousands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_policy_retained, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_waiters, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
