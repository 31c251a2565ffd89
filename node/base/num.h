/*
 * num: time units and saturating arithmetic, the one copy every wing uses.
 *
 * Durations are int64 nanoseconds throughout sluice.  The saturating
 * helpers are for sums and products that must not wrap (deadlines, debts,
 * totals of queued quantities): a result beyond int64 becomes INT64_MAX or
 * INT64_MIN instead of undefined behaviour.
 */
#ifndef SLUICE_NUM_H
#define SLUICE_NUM_H

#include <stdint.h>

#define NUM_NS_PER_MS ((int64_t)1000000)
#define NUM_NS_PER_S  ((int64_t)1000000000)

/* a + b, saturated to [INT64_MIN, INT64_MAX]. */
static inline int64_t num_add_sat(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* a * b, saturated to [INT64_MIN, INT64_MAX]. */
static inline int64_t num_mul_sat(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}

#endif
