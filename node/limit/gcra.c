/*
 * gcra: GCRA decisions, arithmetic-compatible with redis-cell (src/cell/mod.rs
 * and the reply rounding in src/lib.rs).  See gcra.h for the contract.
 *
 * redis-cell's control flow, with tat = max(stored TAT, now) (a stored TAT in
 * the past is an expired key there, i.e. "now"):
 *
 *   increment = emission * quantity
 *   new_tat   = tat + increment
 *   allow_at  = new_tat - tolerance
 *   diff      = now - allow_at
 *   diff < 0  -> limited; retry_after = -diff if increment <= tolerance;
 *                ttl = tat - now
 *   else      -> allowed; TAT := new_tat; ttl = new_tat - now
 *   next      = tolerance - ttl
 *   remaining = next > -emission ? (double)us(next) / (double)us(emission) : 0
 *   reset_after = ttl
 *
 * Here every quantity is kept relative to now (ttl0 = tat - now >= 0), which
 * keeps the intermediate values in range: diff = (tolerance - increment) -
 * ttl0 cannot overflow once increment <= tolerance is known.
 */
#include "gcra.h"

#include "sluice/error.h"

/* Rust's `f64 as i64`: truncation toward zero, saturating, NaN -> 0.  A plain C
 * cast is undefined outside the int64 range. */
static int64_t gcra__f64_to_i64(double d)
{
    if (d != d)
        return 0;
    if (d >= 9223372036854775808.0)
        return INT64_MAX;
    if (d <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)d;
}

int gcra_params_init(struct gcra_params *p, int64_t max_burst, int64_t count, int64_t period_ns)
{
    int64_t emission, limit, tolerance;

    if (max_burst < 0 || count <= 0 || period_ns <= 0)
        return -SLUICE_EINVAL;
    /* Rate::per_period: (ns as f64 / n as f64) as i64. */
    emission = gcra__f64_to_i64((double)period_ns / (double)count);
    if (emission <= 0)
        return -SLUICE_ERANGE;
    if (__builtin_add_overflow(max_burst, 1, &limit))
        return -SLUICE_ERANGE;
    if (__builtin_mul_overflow(emission, limit, &tolerance))
        return -SLUICE_ERANGE;
    p->emission_ns = emission;
    p->tolerance_ns = tolerance;
    p->limit = limit;
    return 0;
}

int gcra_decide(int64_t *tat, const struct gcra_params *p, int64_t quantity, int64_t now_ns,
                struct gcra_result *out)
{
    int64_t increment, ttl0, ttl, next, base;
    int fits;

    if (quantity < 0)
        return -SLUICE_EINVAL;
    base = *tat > now_ns ? *tat : now_ns;
    if (__builtin_sub_overflow(base, now_ns, &ttl0))
        return -SLUICE_ERANGE;
    /* An increment that overflows is certainly larger than the tolerance, and
     * then the answer does not depend on its value (always limited, no retry). */
    fits = !__builtin_mul_overflow(p->emission_ns, quantity, &increment) &&
           increment <= p->tolerance_ns;

    out->limit = p->limit;
    out->retry_after_ns = GCRA_NO_RETRY;
    if (!fits) {
        out->limited = 1;
        ttl = ttl0;
    } else {
        int64_t diff = (p->tolerance_ns - increment) - ttl0;
        if (diff < 0) {
            out->limited = 1;
            out->retry_after_ns = -diff;
            ttl = ttl0;
        } else {
            int64_t new_tat;
            if (__builtin_add_overflow(base, increment, &new_tat))
                return -SLUICE_ERANGE;
            out->limited = 0;
            ttl = ttl0 + increment; /* <= tolerance: no overflow */
            if (quantity > 0)
                *tat = new_tat;
        }
    }

    /* ttl may exceed the tolerance (a debt): next is then negative, and the
     * subtraction stays in range because both are non-negative. */
    next = p->tolerance_ns - ttl;
    out->remaining = 0;
    if (next > -p->emission_ns) {
        /* Duration::whole_microseconds truncates toward zero; an emission
         * interval under 1 us divides by zero, giving inf (saturated) or NaN
         * (0), as in redis-cell. */
        double num = (double)(next / 1000);
        double den = (double)(p->emission_ns / 1000);
        out->remaining = gcra__f64_to_i64(num / den);
    }
    out->reset_after_ns = ttl;
    return 0;
}

int gcra_consume(int64_t *tat, const struct gcra_params *p, int64_t quantity, int64_t at_ns)
{
    int64_t increment, base, result;

    if (quantity < 0)
        return -SLUICE_EINVAL;
    if (__builtin_mul_overflow(p->emission_ns, quantity, &increment))
        increment = INT64_MAX;
    base = *tat > at_ns ? *tat : at_ns;
    if (__builtin_add_overflow(base, increment, &result))
        result = INT64_MAX;
    *tat = result;
    return 0;
}

int64_t gcra_cell_seconds(int64_t ns)
{
    int64_t secs, nanos, whole;

    if (ns < 0)
        return -1;
    secs = ns / GCRA_NS_PER_SEC;
    nanos = ns % GCRA_NS_PER_SEC;
    /* Below 2^22 s the double sum cannot round up to secs + 1 (its half ulp,
     * <= 2^-32, is smaller than the 1e-9 gap between nanos/1e9 and 1), so
     * truncation gives secs exactly and the floating point can be skipped. */
    if (secs < ((int64_t)1 << 22))
        return secs + (nanos >= 1000000 ? 1 : 0);
    /* time::Duration::as_seconds_f64: seconds as f64 + nanos as f64 / 1e9,
     * truncated by `as i64`; then +1 when subsec_milliseconds() > 0. */
    whole = gcra__f64_to_i64((double)secs + (double)nanos / 1e9);
    if (nanos / 1000000 > 0)
        whole++;
    return whole;
}

void gcra_to_cell(const struct gcra_result *r, struct gcra_cell_reply *out)
{
    out->limited = r->limited;
    out->limit = r->limit;
    out->remaining = r->remaining;
    out->retry_after_s = gcra_cell_seconds(r->retry_after_ns);
    out->reset_after_s = gcra_cell_seconds(r->reset_after_ns);
}
