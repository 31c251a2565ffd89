/*
 * GCRA core against an independent reference model.
 *
 * The reference is the leaky-bucket formulation: a water level (in
 * nanoseconds of drain time) that leaks one nanosecond per nanosecond, kept in
 * __int128 so that nothing can overflow; a quantity pours emission*quantity
 * of water if it fits under the capacity (the tolerance).  The GCRA code under
 * test instead keeps a theoretical arrival time with checked int64
 * arithmetic.  Both must agree on every decision, on every field, and on the
 * state, over long seeded random sequences.  redis-cell's floating-point
 * reply steps (emission interval, remaining, rounding to seconds) are written
 * here from its documented definitions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "gcra.h"
#include "sluice/error.h"
#include "testutil.h"

typedef __int128 i128;

/* Rust `f64 as i64`. */
static int64_t ref_f64_as_i64(double d)
{
    if (d != d)
        return 0;
    if (d >= 0x1p63)
        return INT64_MAX;
    if (d < -0x1p63)
        return INT64_MIN;
    return (int64_t)d;
}

struct ref {
    i128 emission, capacity;
    int64_t limit;
    i128 level; /* water at time `last` */
    i128 last;
    int ok;
};

static void ref_init(struct ref *m, int64_t burst, int64_t count, int64_t period_ns)
{
    m->ok = 0;
    m->level = 0;
    m->last = 0;
    if (burst < 0 || count <= 0 || period_ns <= 0)
        return;
    m->emission = ref_f64_as_i64((double)period_ns / (double)count);
    m->limit = (int64_t)((i128)burst + 1 > INT64_MAX ? 0 : burst + 1);
    m->capacity = m->emission * ((i128)burst + 1);
    m->ok = m->emission > 0 && (i128)burst + 1 <= INT64_MAX && m->capacity <= INT64_MAX;
}

struct ref_out {
    int limited;
    int64_t remaining, retry_ns, reset_ns;
};

static void ref_step(struct ref *m, int64_t quantity, int64_t now, struct ref_out *o)
{
    i128 level = m->level - ((i128)now - m->last); /* leak (or un-leak if time went back) */
    i128 pour = m->emission * quantity;
    i128 after;

    if (level < 0)
        level = 0;
    after = level + pour;
    o->retry_ns = -1;
    if (after <= m->capacity) {
        o->limited = 0;
        if (quantity > 0) {
            m->level = after;
            m->last = now;
        }
        o->reset_ns = (int64_t)after;
    } else {
        o->limited = 1;
        if (pour <= m->capacity)
            o->retry_ns = (int64_t)(after - m->capacity);
        o->reset_ns = (int64_t)level;
    }
    {
        i128 headroom = m->capacity - o->reset_ns;
        o->remaining = 0;
        if (headroom > -m->emission)
            o->remaining = ref_f64_as_i64((double)(int64_t)(headroom / 1000) /
                                          (double)(int64_t)(m->emission / 1000));
    }
}

/* Duration rounding of redis-cell's reply: whole seconds as a double, plus one
 * for any non-zero millisecond part. */
static int64_t ref_seconds(int64_t ns)
{
    if (ns < 0)
        return -1;
    double secs = (double)(ns / 1000000000) + (double)(ns % 1000000000) / 1e9;
    return ref_f64_as_i64(secs) + ((ns % 1000000000) >= 1000000 ? 1 : 0);
}

/* The state of the reference as a TAT, to compare with the code's state. */
static int ref_tat_matches(const struct ref *m, int64_t tat, int64_t now)
{
    i128 level = m->level - ((i128)now - m->last);
    if (level <= 0)
        return tat <= now;
    return (i128)tat - now == level;
}

static void check_seq(uint64_t *rng, int steps)
{
    int64_t burst, count, period;
    int64_t now = test_rand_range(rng, 0, (int64_t)1 << 50);
    int64_t tat = GCRA_TAT_FULL;
    struct gcra_params p;
    struct ref m;

    switch (test_rand_range(rng, 0, 3)) {
    case 0: /* typical CL.THROTTLE: whole seconds */
        burst = test_rand_range(rng, 0, 30);
        count = test_rand_range(rng, 1, 100);
        period = test_rand_range(rng, 1, 3600) * GCRA_NS_PER_SEC;
        break;
    case 1: /* fine rates */
        burst = test_rand_range(rng, 0, 5);
        count = test_rand_range(rng, 1, 5000000);
        period = test_rand_range(rng, 1, 10) * GCRA_NS_PER_SEC;
        break;
    case 2: /* odd nanosecond periods */
        burst = test_rand_range(rng, 0, 1000);
        count = test_rand_range(rng, 1, 1000);
        period = test_rand_range(rng, 1, (int64_t)1 << 40);
        break;
    default: /* big numbers near the overflow edges */
        burst = test_rand_range(rng, 0, (int64_t)1 << 20);
        count = test_rand_range(rng, 1, 1000);
        period = test_rand_range(rng, (int64_t)1 << 40, (int64_t)1 << 42);
        break;
    }
    ref_init(&m, burst, count, period);
    m.last = -((i128)1 << 100); /* a fresh key: empty since forever */
    int rc = gcra_params_init(&p, burst, count, period);
    if (!m.ok) {
        assert_int_equal(rc, -SLUICE_ERANGE);
        return;
    }
    assert_int_equal(rc, 0);
    assert_true(p.emission_ns == m.emission);
    assert_true(p.tolerance_ns == m.capacity);

    for (int i = 0; i < steps; i++) {
        int64_t q, dt;
        struct gcra_result r;
        struct ref_out o;

        switch (test_rand_range(rng, 0, 9)) {
        case 0:
            dt = 0;
            break;
        case 1:
            dt = -test_rand_range(rng, 0, m.emission); /* clock steps back */
            break;
        case 2:
            dt = test_rand_range(rng, 0,
                                 m.capacity * 2 < ((i128)1 << 45) ? (int64_t)m.capacity * 2
                                                                  : (int64_t)1 << 45);
            break;
        default:
            dt = test_rand_range(rng, 0, m.emission * 2);
            break;
        }
        now += dt;
        q = test_rand_range(rng, 0, 9) == 0 ? test_rand_range(rng, 0, burst + 3)
                                            : test_rand_range(rng, 0, 2);
        if (test_rand_range(rng, 0, 999) == 0)
            q = INT64_MAX - test_rand_range(rng, 0, 5);
        rc = gcra_decide(&tat, &p, q, now, &r);
        assert_int_equal(rc, 0);
        ref_step(&m, q, now, &o);
        if (r.limited != o.limited || r.remaining != o.remaining ||
            r.retry_after_ns != o.retry_ns || r.reset_after_ns != o.reset_ns) {
            fprintf(stderr,
                    "step %d burst %lld count %lld period %lld q %lld: got [%d %lld %lld %lld] "
                    "want [%d %lld %lld %lld]\n",
                    i, (long long)burst, (long long)count, (long long)period, (long long)q,
                    r.limited, (long long)r.remaining, (long long)r.retry_after_ns,
                    (long long)r.reset_after_ns, o.limited, (long long)o.remaining,
                    (long long)o.retry_ns, (long long)o.reset_ns);
            fail();
        }
        assert_int_equal(r.limit, burst + 1);
        assert_true(ref_tat_matches(&m, tat, now));
        assert_int_equal(gcra_cell_seconds(r.retry_after_ns), ref_seconds(o.retry_ns));
        assert_int_equal(gcra_cell_seconds(r.reset_after_ns), ref_seconds(o.reset_ns));
    }
}

static void test_random_against_reference(void **state)
{
    (void)state;
    uint64_t rng = test_seed("gcra_random");
    int total = 0;
    while (total < 200000) {
        int steps = (int)test_rand_range(&rng, 1, 2000);
        check_seq(&rng, steps);
        total += steps;
    }
}

static void cell(int64_t *tat, const struct gcra_params *p, int64_t q, int64_t now,
                 struct gcra_cell_reply *c)
{
    struct gcra_result r;
    assert_int_equal(gcra_decide(tat, p, q, now, &r), 0);
    gcra_to_cell(&r, c);
}

#define ASSERT_CELL(c, l, lim, rem, retry, reset)                                                  \
    do {                                                                                           \
        assert_int_equal((c).limited, (l));                                                        \
        assert_int_equal((c).limit, (lim));                                                        \
        assert_int_equal((c).remaining, (rem));                                                    \
        assert_int_equal((c).retry_after_s, (retry));                                              \
        assert_int_equal((c).reset_after_s, (reset));                                              \
    } while (0)

/* redis-cell README: CL.THROTTLE user123 15 30 60 -> 0 16 15 -1 2, then the
 * bucket empties one unit per call and refuses the 17th call at the same
 * instant, retry in 2 s (one emission interval). */
static void test_readme_transcript(void **state)
{
    (void)state;
    struct gcra_params p;
    struct gcra_cell_reply c;
    int64_t tat = GCRA_TAT_FULL, now = 5 * GCRA_NS_PER_SEC;

    assert_int_equal(gcra_params_init(&p, 15, 30, 60 * GCRA_NS_PER_SEC), 0);
    assert_true(p.emission_ns == 2 * GCRA_NS_PER_SEC);
    cell(&tat, &p, 1, now, &c);
    ASSERT_CELL(c, 0, 16, 15, -1, 2);
    for (int i = 2; i <= 16; i++) {
        cell(&tat, &p, 1, now, &c);
        ASSERT_CELL(c, 0, 16, 16 - i, -1, 2 * i);
    }
    cell(&tat, &p, 1, now, &c);
    ASSERT_CELL(c, 1, 16, 0, 2, 32);
    /* 0.5 s later: retry after 1.5 s rounds up to 2; reset 31.5 -> 32. */
    cell(&tat, &p, 1, now + GCRA_NS_PER_SEC / 2, &c);
    ASSERT_CELL(c, 1, 16, 0, 2, 32);
    /* 2 s later one unit has drained. */
    cell(&tat, &p, 1, now + 2 * GCRA_NS_PER_SEC, &c);
    ASSERT_CELL(c, 0, 16, 0, -1, 32);
}

static void test_boundary_and_peek(void **state)
{
    (void)state;
    struct gcra_params p;
    struct gcra_result r;
    int64_t tat = GCRA_TAT_FULL, s = GCRA_NS_PER_SEC, before;

    assert_int_equal(gcra_params_init(&p, 1, 1, s), 0); /* capacity 2, 1/s */
    assert_int_equal(gcra_decide(&tat, &p, 2, 0, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_int_equal(r.remaining, 0);
    /* clock not advancing: limited, retry exactly one interval */
    assert_int_equal(gcra_decide(&tat, &p, 1, 0, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_true(r.retry_after_ns == s);
    /* one nanosecond early: limited; exactly at the boundary (diff == 0): allowed */
    assert_int_equal(gcra_decide(&tat, &p, 1, s - 1, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_true(r.retry_after_ns == 1);
    assert_int_equal(gcra_decide(&tat, &p, 1, s, &r), 0);
    assert_int_equal(r.limited, 0);
    /* peek changes nothing, limited or not */
    before = tat;
    assert_int_equal(gcra_decide(&tat, &p, 0, s, &r), 0);
    assert_int_equal(r.limited, 0); /* a full bucket still admits nothing (diff == 0) */
    assert_int_equal(r.remaining, 0);
    assert_true(tat == before);
    assert_int_equal(gcra_decide(&tat, &p, 0, 10 * s, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_int_equal(r.remaining, 2);
    assert_true(r.reset_after_ns == 0);
    assert_true(tat == before);
    /* quantity larger than the capacity: limited, no retry, state unchanged */
    assert_int_equal(gcra_decide(&tat, &p, 3, 10 * s, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_true(r.retry_after_ns == GCRA_NO_RETRY);
    assert_int_equal(r.remaining, 2);
    assert_true(tat == before);
    /* clock going backwards: the state looks fuller, never corrupt */
    tat = GCRA_TAT_FULL;
    assert_int_equal(gcra_decide(&tat, &p, 1, 100 * s, &r), 0);
    assert_int_equal(gcra_decide(&tat, &p, 1, 99 * s, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_true(r.retry_after_ns == s);
    assert_true(gcra_is_drained(tat, 101 * s));
    assert_false(gcra_is_drained(tat, 101 * s - 1));
}

static void test_errors_and_huge(void **state)
{
    (void)state;
    struct gcra_params p;
    struct gcra_result r;
    int64_t tat = GCRA_TAT_FULL;

    assert_int_equal(gcra_params_init(&p, -1, 1, 1), -SLUICE_EINVAL);
    assert_int_equal(gcra_params_init(&p, 0, 0, 1), -SLUICE_EINVAL);
    assert_int_equal(gcra_params_init(&p, 0, -5, 1), -SLUICE_EINVAL);
    assert_int_equal(gcra_params_init(&p, 0, 1, 0), -SLUICE_EINVAL);
    assert_int_equal(gcra_params_init(&p, 0, 1, INT64_MIN), -SLUICE_EINVAL);
    /* a rate finer than 1/ns: redis-cell refuses zero rates */
    assert_int_equal(gcra_params_init(&p, 0, INT64_MAX, GCRA_NS_PER_SEC), -SLUICE_ERANGE);
    assert_int_equal(gcra_params_init(&p, INT64_MAX, 1, GCRA_NS_PER_SEC), -SLUICE_ERANGE);
    assert_int_equal(gcra_params_init(&p, 1, 1, INT64_MAX), -SLUICE_ERANGE);
    /* the largest period with burst 0 is fine (emission saturates) */
    assert_int_equal(gcra_params_init(&p, 0, 1, INT64_MAX), 0);
    assert_true(p.emission_ns == INT64_MAX);
    assert_int_equal(gcra_decide(&tat, &p, 1, 0, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_true(r.reset_after_ns == INT64_MAX);
    /* a later time would push the TAT past INT64_MAX: range error, no change */
    tat = GCRA_TAT_FULL;
    assert_int_equal(gcra_decide(&tat, &p, 1, 5, &r), -SLUICE_ERANGE);
    assert_true(tat == GCRA_TAT_FULL);

    assert_int_equal(gcra_params_init(&p, 3, 7, 11 * GCRA_NS_PER_SEC), 0);
    assert_int_equal(gcra_decide(&tat, &p, -1, 0, &r), -SLUICE_EINVAL);
    assert_int_equal(gcra_decide(&tat, &p, INT64_MAX, INT64_MAX, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_true(r.retry_after_ns == GCRA_NO_RETRY);
    assert_int_equal(gcra_decide(&tat, &p, INT64_MAX, INT64_MIN, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_int_equal(gcra_decide(&tat, &p, 1, INT64_MAX, &r), -SLUICE_ERANGE);
    assert_int_equal(gcra_decide(&tat, &p, 1, INT64_MAX - p.emission_ns, &r), 0);
    /* a TAT near INT64_MAX seen from a very negative clock: range error */
    assert_int_equal(gcra_decide(&tat, &p, 1, INT64_MIN, &r), -SLUICE_ERANGE);
    assert_int_equal(gcra_consume(&tat, &p, -1, 0), -SLUICE_EINVAL);
    assert_int_equal(gcra_consume(&tat, &p, INT64_MAX, INT64_MAX), 0);
    assert_true(tat == INT64_MAX);

    /* seconds rounding: 1.000999999 s -> 1; 1.001 s -> 2; 0 -> 0; none -> -1 */
    assert_int_equal(gcra_cell_seconds(1000999999), 1);
    assert_int_equal(gcra_cell_seconds(1001000000), 2);
    assert_int_equal(gcra_cell_seconds(0), 0);
    assert_int_equal(gcra_cell_seconds(999999), 0);
    assert_int_equal(gcra_cell_seconds(GCRA_NO_RETRY), -1);
    assert_true(gcra_cell_seconds(INT64_MAX) > 9000000000LL);
}

/* An emission interval under 1 us makes redis-cell divide by zero microseconds
 * in "remaining": +inf saturates to INT64_MAX.  Reproduced, not fixed. */
static void test_submicrosecond_quirk(void **state)
{
    (void)state;
    struct gcra_params p;
    struct gcra_result r;
    int64_t tat = GCRA_TAT_FULL;

    assert_int_equal(gcra_params_init(&p, 10, 2000000, GCRA_NS_PER_SEC), 0);
    assert_true(p.emission_ns == 500);
    assert_int_equal(gcra_decide(&tat, &p, 1, 0, &r), 0);
    assert_true(r.remaining == INT64_MAX);
    assert_int_equal(gcra_decide(&tat, &p, 10, 0, &r), 0);
    assert_int_equal(r.remaining, 0); /* 0/0 is NaN -> 0 */
}

/* Consumption poured without a check creates a debt that decisions repay. */
static void test_consume_debt(void **state)
{
    (void)state;
    struct gcra_params p;
    struct gcra_result r;
    int64_t tat = GCRA_TAT_FULL, s = GCRA_NS_PER_SEC;

    assert_int_equal(gcra_params_init(&p, 4, 1, s), 0); /* capacity 5, 1/s */
    assert_int_equal(gcra_consume(&tat, &p, 12, 0), 0); /* 12 units: 7 over */
    assert_true(tat == 12 * s);
    assert_int_equal(gcra_decide(&tat, &p, 1, 7 * s, &r), 0);
    assert_int_equal(r.limited, 1);
    assert_true(r.retry_after_ns == s);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(gcra_decide(&tat, &p, 1, 8 * s, &r), 0);
    assert_int_equal(r.limited, 0);
    /* consumption in the past of a drained state starts from its own time */
    tat = GCRA_TAT_FULL;
    assert_int_equal(gcra_consume(&tat, &p, 2, 100 * s), 0);
    assert_true(tat == 102 * s);
    assert_false(gcra_is_drained(tat, 101 * s));
    assert_true(gcra_is_drained(tat, 102 * s));
}

/* The seconds rounding over the whole int64 range, log-uniformly, against the
 * reference's floating-point definition. */
static void test_seconds_rounding(void **state)
{
    (void)state;
    uint64_t rng = test_seed("gcra_seconds");
    for (int i = 0; i < 200000; i++) {
        int bits = (int)test_rand_range(&rng, 0, 62);
        int64_t ns = test_rand_range(&rng, 0, ((int64_t)1 << bits) - 1 + ((int64_t)1 << bits));
        if (i % 4 == 0) /* just below a whole second, where rounding bites */
            ns = (ns / GCRA_NS_PER_SEC) * GCRA_NS_PER_SEC +
                 test_rand_range(&rng, 999000000, 999999999);
        if (ns < 0)
            ns = INT64_MAX;
        assert_int_equal(gcra_cell_seconds(ns), ref_seconds(ns));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readme_transcript), cmocka_unit_test(test_boundary_and_peek),
        cmocka_unit_test(test_errors_and_huge),   cmocka_unit_test(test_submicrosecond_quirk),
        cmocka_unit_test(test_consume_debt),      cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_seconds_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
