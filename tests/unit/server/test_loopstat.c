/*
 * The loop's turns as loopstat measures them: a turn that computes for
 * 20 ms shows 20 ms of work and about as much CPU, whether or not it was
 * among the turns sampled; a turn that waits 20 ms off the CPU (as a
 * thread a busy host does not run) shows 20 ms of work and little CPU; a
 * stretch of short turns reads the CPU clock for a sample of them only.
 * A real libuv loop, run one turn at a time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <time.h>
#include <uv.h>

#include "cputime.h"
#include "loopstat.h"

#define MS 1000000u

enum turn_kind { TURN_SHORT, TURN_SPIN, TURN_SLEEP };

struct ctx {
    uv_idle_t idle;
    enum turn_kind next; /* what the next idle callback does */
};

static void spin_ns(uint64_t ns)
{
    uint64_t t0 = cputime_thread_ns();
    while (cputime_thread_ns() - t0 < ns) {
    }
}

static void on_idle(uv_idle_t *h)
{
    struct ctx *c = h->data;
    if (c->next == TURN_SPIN) {
        spin_ns(20 * MS);
    } else if (c->next == TURN_SLEEP) {
        struct timespec ts = {0, 20 * MS};
        nanosleep(&ts, NULL);
    }
    c->next = TURN_SHORT;
}

/* Runs `short_turns` short turns, then one of kind, then one short turn
 * (whose prepare ends the long one). */
static void run(uv_loop_t *loop, struct ctx *c, int short_turns, enum turn_kind kind)
{
    for (int i = 0; i < short_turns; i++)
        uv_run(loop, UV_RUN_NOWAIT);
    c->next = kind;
    uv_run(loop, UV_RUN_NOWAIT);
    uv_run(loop, UV_RUN_NOWAIT);
}

static void start(uv_loop_t *loop, struct loopstat *ls, struct ctx *c)
{
    assert_int_equal(uv_loop_init(loop), 0);
    memset(ls, 0, sizeof(*ls));
    memset(c, 0, sizeof(*c));
    assert_int_equal(loopstat_start(ls, loop), 0);
    assert_int_equal(uv_idle_init(loop, &c->idle), 0);
    c->idle.data = c;
    assert_int_equal(uv_idle_start(&c->idle, on_idle), 0);
}

static void finish(uv_loop_t *loop, struct loopstat *ls, struct ctx *c)
{
    loopstat_stop(ls);
    uv_close((uv_handle_t *)&c->idle, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* A long turn of `kind` after 1 to CPUTIME_SAMPLE_EVERY short ones (so it
 * is a sampled turn once and not the other times): its work shows whole,
 * its CPU between cpu_lo and cpu_hi. */
static void check_long_turn(enum turn_kind kind, uint64_t cpu_lo, uint64_t cpu_hi)
{
    uv_loop_t loop;
    struct loopstat ls;
    struct ctx c;
    for (int lead = 1; lead <= (int)CPUTIME_SAMPLE_EVERY; lead++) {
        start(&loop, &ls, &c);
        run(&loop, &c, lead, kind);
        assert_true(ls.max_turn_ns >= 20 * MS);
        assert_true(ls.max_turn_cpu_ns >= cpu_lo);
        assert_true(ls.max_turn_cpu_ns <= cpu_hi);
        assert_true(ls.max_turn_cpu_ns <= ls.max_turn_ns); /* at most the turn's work */
        finish(&loop, &ls, &c);
    }
}

/* A long turn of CPU: its wall and CPU both show (an upper bound when it
 * is not sampled, capped at the turn's work). */
static void test_cpu_turn_measured_sampled_or_not(void **state)
{
    (void)state;
    check_long_turn(TURN_SPIN, 19 * MS, UINT64_MAX);
}

/* A long turn off the CPU: its wall shows, its CPU does not. */
static void test_waiting_turn_is_not_cpu(void **state)
{
    (void)state;
    check_long_turn(TURN_SLEEP, 0, 10 * MS);
}

/* One short turn in CPUTIME_SAMPLE_EVERY is sampled; every stretch after
 * a long one is. */
static void test_sample_rule(void **state)
{
    (void)state;
    struct cputime_sample s = {0};
    int taken = 0;
    for (unsigned i = 0; i < 10 * CPUTIME_SAMPLE_EVERY; i++)
        taken += cputime_sample_take(&s, 1000);
    assert_int_equal(taken, 10);
    for (int i = 0; i < 5; i++)
        assert_true(cputime_sample_take(&s, CPUTIME_LONG_NS));
    assert_false(cputime_sample_take(&s, CPUTIME_LONG_NS - 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_turn_measured_sampled_or_not),
        cmocka_unit_test(test_waiting_turn_is_not_cpu),
        cmocka_unit_test(test_sample_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
