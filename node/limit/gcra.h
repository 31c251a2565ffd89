/*
 * gcra: the Generic Cell Rate Algorithm as redis-cell computes it, as a few
 * pure functions over one int64 of state (the theoretical arrival time, TAT).
 *
 * The state of a key is a single nanosecond timestamp.  A TAT at or before
 * "now" means the key is full (no recent use); GCRA_TAT_FULL is a state that
 * is full at every time and is what a new key starts with.  A TAT beyond
 * now + tolerance is a debt: gcra_consume() may create it (remote consumption
 * poured in by the replication layer) and gcra_decide() then limits until the
 * debt is repaid.
 *
 * Arithmetic: everything is int64 nanoseconds with checked multiplication and
 * addition.  Where redis-cell itself uses floating point (the emission
 * interval, "remaining", the rounding to seconds) the same IEEE double
 * expression is evaluated, so answers match redis-cell bit for bit; double
 * to integer conversions saturate like Rust's `as`.
 *
 * None of these functions allocate or keep pointers; they are safe for any
 * 64-bit inputs (no undefined behaviour) and fail with -SLUICE_EINVAL or
 * -SLUICE_ERANGE without touching the state.
 */
#ifndef SLUICE_GCRA_H
#define SLUICE_GCRA_H

#include <stdbool.h>
#include <stdint.h>

#include "num.h"

#define GCRA_TAT_FULL   INT64_MIN /* state of a key that has never been used */
#define GCRA_NO_RETRY   (-1)      /* retry_after_ns when no retry can help */
#define GCRA_NS_PER_SEC NUM_NS_PER_S

struct gcra_params {
    int64_t emission_ns;  /* time one unit takes to drain (period / count) */
    int64_t tolerance_ns; /* emission_ns * limit: the bucket's depth in time */
    int64_t limit;        /* max_burst + 1 */
};

/* One decision, in nanoseconds. */
struct gcra_result {
    int limited;            /* 1 when the quantity was refused */
    int64_t limit;          /* max_burst + 1 */
    int64_t remaining;      /* units that would still be allowed right now */
    int64_t retry_after_ns; /* wait before the same quantity fits, or GCRA_NO_RETRY */
    int64_t reset_after_ns; /* time until the key is full again (>= 0) */
};

/* The same decision in redis-cell's CL.THROTTLE reply units (seconds). */
struct gcra_cell_reply {
    int64_t limited, limit, remaining, retry_after_s, reset_after_s;
};

/*
 * Computes the parameters of "max_burst + 1 units at once, count units per
 * period_ns".  The emission interval is period_ns / count evaluated in double
 * and truncated, exactly as redis-cell's Rate::per_period.
 * Fails with -SLUICE_EINVAL for max_burst < 0, count <= 0 or period_ns <= 0,
 * and -SLUICE_ERANGE when the emission interval truncates to zero (a rate
 * finer than one unit per nanosecond; redis-cell refuses it too) or the
 * tolerance overflows int64.
 */
int gcra_params_init(struct gcra_params *p, int64_t max_burst, int64_t count, int64_t period_ns);

/*
 * Decides whether `quantity` units may pass at now_ns and, if so, updates
 * *tat.  quantity 0 is a peek and never changes *tat.  A quantity that can
 * never fit (more than limit units) is limited with retry_after GCRA_NO_RETRY.
 * Fails with -SLUICE_EINVAL for a negative quantity and -SLUICE_ERANGE when a
 * timestamp would overflow int64; *tat and *out are then unspecified/unchanged
 * respectively (*tat is never modified on failure).
 */
int gcra_decide(int64_t *tat, const struct gcra_params *p, int64_t quantity, int64_t now_ns,
                struct gcra_result *out);

/*
 * Pours `quantity` units of consumption that happened at at_ns into *tat,
 * without any limit check: the TAT may move past at_ns + tolerance (a debt
 * that later decisions repay).  Used to apply consumption admitted elsewhere.
 * Saturates at INT64_MAX rather than overflow.  Fails with -SLUICE_EINVAL for a
 * negative quantity (state unchanged).
 */
int gcra_consume(int64_t *tat, const struct gcra_params *p, int64_t quantity, int64_t at_ns);

/* True when the state is back to full at now_ns: it equals a fresh key and
 * may be forgotten. */
static inline bool gcra_is_drained(int64_t tat, int64_t now_ns)
{
    return tat <= now_ns;
}

/*
 * Converts a nanosecond duration to redis-cell's reply seconds: the duration
 * as a double number of seconds, truncated, plus one when the millisecond part
 * is non-zero.  Negative durations map to -1.
 */
int64_t gcra_cell_seconds(int64_t ns);

/* Fills a CL.THROTTLE reply from a decision. */
void gcra_to_cell(const struct gcra_result *r, struct gcra_cell_reply *out);

#endif
