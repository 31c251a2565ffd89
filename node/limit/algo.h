/*
 * algo: every limiting algorithm behind one interface.
 *
 * Each algorithm is a pure state machine on caller-provided memory: the
 * caller (the key table) owns a value area of algo_state_size(params) bytes,
 * 8-byte aligned, per key; algo_init() makes it a fresh key.  Time is
 * injected: every call takes a monotonic clock value in nanoseconds, >= 0.
 * When time goes backwards relative to what a key's state has seen, the
 * algorithm treats it as "no time has passed" (it never rewinds state).
 * Nothing here allocates, except the sliding log, whose ring of timestamps
 * grows on demand up to N entries (see algo_free()).
 *
 * Every function that takes int64 arguments is defined for ALL int64 values:
 * arithmetic is checked; impossible arguments return -SLUICE_EINVAL and
 * results that would not fit return -SLUICE_ERANGE, never undefined
 * behaviour.  On any error the state is unchanged.
 *
 * Parameters are built once (algo_params_init) and validated there; every
 * other call refuses a params struct that algo_params_init did not accept.
 *
 * The algorithms, with memory per key, accuracy and known weak spot:
 *
 *  gcra            8 bytes (the theoretical arrival time).  Exact
 *                  redis-cell CL.THROTTLE semantics: capacity burst+1,
 *                  one unit every period/count (truncated to whole ns).
 *                  Weak spot: the emission interval is truncated to whole
 *                  nanoseconds, so rate is rounded up by < 1 ns per unit.
 *  token-bucket    16 bytes (tokens, last refill).  Capacity burst+1, refill
 *                  count per period, continuously (Guava SmoothBursty-like),
 *                  exact: tokens are held as integers in units of 1/period_ns
 *                  of a token, so there is no drift at all.  Same admission
 *                  as gcra up to that rounding.  Weak spot: none for
 *                  accuracy; capacity*period_ns must stay below 2^61.
 *  fixed-window    16 bytes (window index, used).  At most count per window
 *                  of period, windows aligned to multiples of period on the
 *                  caller's clock.  Weak spot: it admits up to 2*count within
 *                  any span shorter than period that straddles a boundary.
 *  sliding-window  8 + 8*precision bytes (head index, one counter per
 *                  sub-window).  Sentinel LeapArray: sub-windows of width
 *                  w = floor(period/precision); a request is admitted when
 *                  the sum of the `precision` sub-windows ending with the
 *                  current one stays <= count.  Guarantee: any span of
 *                  (precision-1)*w admits at most count; any span of period
 *                  admits at most count + (what one sub-window admitted),
 *                  which is <= 2*count in the worst case (all of the oldest
 *                  sub-window's admissions made late in it) and about
 *                  count*(1 + 1/precision) for evenly spread traffic.
 *                  Weak spot: that over-admission; raise precision to shrink it.
 *  sliding-log     24 bytes + 8 bytes per admitted unit still inside the
 *                  period, at most 8*count (a ring of the last admitted
 *                  timestamps, grown by doubling up to count entries).  Exact:
 *                  never more than count admitted in ANY half-open span
 *                  [t, t+period): an entry admitted at t counts until
 *                  now >= t+period.  Denied requests add nothing.
 *                  Weak spot: memory grows with count (bounded by
 *                  ALGO_SLIDING_LOG_MAX), and it cannot be global.
 *
 *  warmup          16 bytes (the schedule: when the next unit is free; the
 *                  stored units as a fraction of the most it can store, so
 *                  a change of rate keeps the degree of coldness, as
 *                  Guava's setRate does).  Guava's SmoothWarmingUp: rate count per
 *                  period at full speed; from cold (a fresh key, or one idle
 *                  for the warm-up period) a unit costs up to cold_factor
 *                  (default 3) stable intervals, and the cost falls linearly
 *                  to one stable interval as saturating demand uses up the
 *                  stored units, over the warm-up period (default: one
 *                  period), so admissions per second rise from about
 *                  rate/cold_factor to the rate.  A request passes when the
 *                  schedule is at most burst stable intervals ahead of now
 *                  (burst 0 is Guava's tryAcquire: the first request after
 *                  idleness always passes and pays its cost forward, whatever
 *                  its qty, as Guava's acquire(n)).  The model is in
 *                  algo_warmup.c.  Weak spot: not global (its cold/warm
 *                  state is one node's history of demand; a cluster-wide
 *                  warm-up would need every node's admissions in order),
 *                  and `remaining` is counted at the stable cost, so it can
 *                  overstate what a cold key admits.
 *
 * Global scope (consume()): the global-limit layer pours units admitted by
 * other nodes into the local state with no limit check, and state may go
 * into debt, so the local node refuses until the debt is repaid:
 *   gcra, token-bucket: debt is repaid by the refill rate, exactly as if the
 *     units had been admitted locally at at_ns.  Meaningful globally.
 *   fixed-window: units are added to at_ns's window (ignored if that window
 *     has ended); the debt is forgiven at the next boundary.  Meaningful if
 *     the nodes' clocks share the window boundaries.
 *   sliding-window: units are added to at_ns's sub-window (ignored if it has
 *     left the period).  Meaningful, with the same clock caveat.
 *   warmup: NOT global (see above); refused as sliding-log is.
 *   sliding-log: NOT global.  Its exactness needs every admitted timestamp of
 *     every node, which gossip of counters cannot give; consume() still works
 *     locally (it records the units at at_ns, keeping the newest count
 *     entries, so the debt is capped at count) but algo_can_be_global()
 *     is false and the config loader refuses scope = global for it.
 */
#ifndef SLUICE_ALGO_H
#define SLUICE_ALGO_H

#include <stddef.h>
#include <stdint.h>

#include "gcra.h"
#include "sluice/error.h"

enum algo_kind {
    ALGO_GCRA = 0,
    ALGO_TOKEN_BUCKET = 1,
    ALGO_FIXED_WINDOW = 2,
    ALGO_SLIDING_WINDOW = 3,
    ALGO_SLIDING_LOG = 4,
    ALGO_WARMUP = 5,
    ALGO_KIND_COUNT_
};

/* retry_after_ns / earliest fit when a quantity can never fit. */
#define ALGO_NEVER ((int64_t)-1)
/* Largest count a sliding log accepts (8 MiB of timestamps per key). */
#define ALGO_SLIDING_LOG_MAX ((int64_t)1 << 20)
/* Largest sliding-window precision (8 KiB of counters per key). */
#define ALGO_PRECISION_MAX ((int64_t)1000)
/* Default sliding-window precision. */
#define ALGO_PRECISION_DEFAULT ((int64_t)10)
/* warmup's cold factor: Guava's default, and the largest accepted. */
#define ALGO_COLD_FACTOR_DEFAULT ((int64_t)3)
#define ALGO_COLD_FACTOR_MAX     ((int64_t)1000)

/*
 * An algorithm and its limit.  Fill it with algo_params_init() only; the
 * derived fields are read-only for callers.
 */
struct algo_params {
    enum algo_kind kind;
    int64_t burst;       /* gcra, token-bucket: capacity is burst + 1 */
    int64_t count;       /* units per period */
    int64_t period_ns;   /* the period, ns */
    int64_t precision;   /* sliding-window: number of sub-windows */
    int64_t phase_ns;    /* fixed-window: windows start at k*period - phase (0 by default) */
    int64_t warmup_ns;   /* warmup: ns of saturating demand from cold to full rate */
    int64_t cold_factor; /* warmup: a cold unit costs this many stable intervals */
    /* derived */
    int64_t limit;           /* units a fresh key admits at once (warmup: a warm one) */
    int64_t interval_ns;     /* gcra: emission interval; sliding-window: sub-window width */
    int64_t scaled_cap;      /* token-bucket: limit * period_ns */
    struct gcra_params gcra; /* gcra: redis-cell's parameters */
    double wu_stable, wu_threshold, wu_max, wu_slope, wu_cooldown; /* warmup's model */
    uint32_t magic;                                                /* set by algo_params_init */
};

/* One decision, all durations in nanoseconds. */
struct algo_result {
    int limited;            /* 0 allowed, 1 limited */
    int64_t limit;          /* units a fresh key admits at once (warmup: a warm one) */
    int64_t remaining;      /* units still available right now (after this call) */
    int64_t retry_after_ns; /* ALGO_NEVER when allowed or when qty can never fit */
    int64_t reset_after_ns; /* until the key is back to fresh (0 if it is) */
};

/*
 * Validates and fills *p.  burst >= 0 (ignored by the window algorithms and
 * the log), count >= 1, period_ns >= 1, precision in 1..ALGO_PRECISION_MAX
 * (only for sliding-window; 0 means the default, ignored by the others).
 * Fails with -SLUICE_EINVAL for a bad kind or value, -SLUICE_ERANGE when
 * derived values would overflow (token-bucket: (burst+1)*period_ns >= 2^61;
 * gcra: interval*(burst+1) overflows, or period/count < 1 ns), a window
 * count above 2^60, period/precision < 1 ns, or a sliding-log count above
 * ALGO_SLIDING_LOG_MAX.  *p is untouched on error.
 */
int algo_params_init(struct algo_params *p, enum algo_kind kind, int64_t burst, int64_t count,
                     int64_t period_ns, int64_t precision);

/*
 * Shifts a fixed window's boundaries: window k becomes
 * [k*period - phase, (k+1)*period - phase) on the caller's clock, so that a
 * caller whose clock is offset from another (the wall clock) can align the
 * windows to it (envoyproxy/ratelimit's calendar-aligned windows).
 * -SLUICE_EINVAL unless p is a fixed-window limit and 0 <= phase < period.
 */
int algo_params_set_phase(struct algo_params *p, int64_t phase_ns);

/*
 * Sets a warmup limit's warm-up period (ns, >= 1) and cold factor
 * (1..ALGO_COLD_FACTOR_MAX); algo_params_init gives it one period and 3.
 * -SLUICE_EINVAL unless p is a warmup limit and the values are in range,
 * -SLUICE_ERANGE when the model's numbers do not fit a double; p is
 * unchanged on error.
 */
int algo_params_set_warmup(struct algo_params *p, int64_t warmup_ns, int64_t cold_factor);

/*
 * Every algorithm's options (struct algo_option, below) numbered together,
 * algorithm by algorithm in enum order, each's rows in order: the i-th, its
 * algorithm in *kind (if not NULL), or NULL past the last.
 */
const struct algo_option *algo_option_at(size_t i, enum algo_kind *kind);

/* The number (for algo_option_at) of the option spelled name, len bytes:
 * its config key when word is 0, its SL.* word in any case when 1.
 * -SLUICE_ENOENT when no algorithm has it. */
int algo_option_find(const char *name, size_t len, int word);

/*
 * Sets the options given on p (a valid params struct): for every
 * i < ALGO_OPTIONS_MAX with given[i], option i (algo_option_at) takes
 * vals[i]; the other values of the knobs they belong to keep p's.  Each
 * knob is set once, through its algorithm's hook.  -SLUICE_EINVAL for an
 * option of another algorithm or a value its knob refuses, -SLUICE_ERANGE
 * as the knob's setter documents; p unchanged on error.
 */
int algo_params_set_options(struct algo_params *p, const int64_t *vals, const int *given);

/* Option o's value in p (ns for ALGO_VALUE_NS). */
int64_t algo_option_value(const struct algo_params *p, const struct algo_option *o);

/* The names of kind's options (every algorithm's when kind is
 * ALGO_KIND_COUNT_), config keys (word 0) or SL.* words (1), as a list
 * after lead's items ("" for none): "lead, a, b and c".  Written into buf
 * (cap > 0), cut to fit; returns buf. */
const char *algo_option_list(enum algo_kind kind, int word, const char *lead, char *buf,
                             size_t cap);

/* "gcra", "token-bucket", ...; "?" for an unknown kind. */
const char *algo_name(enum algo_kind kind);
/* Parses a name as printed by algo_name.  -SLUICE_EINVAL if unknown. */
int algo_from_name(const char *name, enum algo_kind *out);
/* 1 if consume() is meaningful across nodes (see the header comment). */
int algo_can_be_global(enum algo_kind kind);
/* Why an algorithm cannot be global, for messages ("" when it can). */
const char *algo_why_local(enum algo_kind kind);
/* 1 for a bucket (capacity burst+1, refilled continuously), 0 for an
 * algorithm that counts `count` per period and ignores burst. */
int algo_has_burst(enum algo_kind kind);

/* How a key's state carries on when its limit changes to another of the
 * same algorithm (a policy reload): the limiter reads it from here. */
enum algo_carry {
    ALGO_CARRY_ABSOLUTE = 0,     /* the state holds absolute times: it means the
                                  * same under any parameters (gcra, the log) */
    ALGO_CARRY_TIME_TO_FULL = 1, /* depends on period and burst; keep the time
                                  * until the key is full again (token-bucket) */
    ALGO_CARRY_USED = 2,         /* depends on period and precision; keep the units
                                  * used while the old window lasts (windows) */
};
enum algo_carry algo_carry(enum algo_kind kind);

/* Bytes of per-key state for p; 0 for invalid params. */
size_t algo_state_size(const struct algo_params *p);

/* Makes state (algo_state_size bytes, 8-aligned) a fresh key.  Never fails.
 * state must not hold an allocated ring (call algo_free first when reusing). */
void algo_init(const struct algo_params *p, void *state);

/*
 * Asks for qty units at now_ns and, if they fit, takes them.  qty 0 peeks
 * and changes nothing.  Fills *out.  Fails with -SLUICE_EINVAL (bad params,
 * qty < 0, now_ns < 0), -SLUICE_ENOMEM (sliding log ring growth); state is
 * unchanged on failure.  A denial is an answer (out->limited), not an error.
 */
int algo_decide(const struct algo_params *p, void *state, int64_t qty, int64_t now_ns,
                struct algo_result *out);

/*
 * Gives back up to qty units taken earlier, never beyond a fresh key:
 * gcra/token-bucket refill by qty (capped at full), windows lower their
 * newest counters (never below zero), the log drops its newest qty entries.
 * -SLUICE_EINVAL for bad params, qty < 0 or now_ns < 0.
 */
int algo_refund(const struct algo_params *p, void *state, int64_t qty, int64_t now_ns);

/* 1 when the state at now_ns equals a fresh key's (the key can be reclaimed
 * without changing any future answer), else 0.  0 for bad arguments. */
int algo_drained(const struct algo_params *p, const void *state, int64_t now_ns);

/*
 * When would qty fit, without taking anything: *delay_ns = 0 if now,
 * ns from now_ns otherwise, ALGO_NEVER if qty exceeds what the key can ever
 * admit at once.  Assumes no other traffic meanwhile.  -SLUICE_EINVAL for
 * bad params, qty < 0, now_ns < 0.
 */
int algo_earliest_fit(const struct algo_params *p, const void *state, int64_t qty, int64_t now_ns,
                      int64_t *delay_ns);

/*
 * Pours qty units admitted elsewhere at at_ns into state, WITHOUT a limit
 * check: the state may go into debt (see the header comment for what that
 * means per algorithm).  Debt saturates instead of overflowing, at a bound
 * far beyond any real traffic (gcra: a TAT of INT64_MAX; the others 2^61 in
 * their internal units; the log: count entries).  -SLUICE_EINVAL for bad
 * params, qty < 0 or at_ns < 0; -SLUICE_ENOMEM for the log's ring.
 */
int algo_consume(const struct algo_params *p, void *state, int64_t qty, int64_t at_ns);

/*
 * 1 when the state at now_ns holds more units than the limit admits (a
 * debt left by algo_consume): what envoyproxy/ratelimit calls over the
 * limit when its counter has passed the limit, so that a look with no
 * hits is refused until the debt is repaid.  A state exactly at its limit
 * is not over.  gcra: the TAT lies more than the tolerance ahead; token-
 * bucket: fewer than zero tokens; windows: more than count units in the
 * window; warmup: the schedule lies more than burst + cold_factor stable
 * intervals ahead; sliding-log: never (its consume keeps at most count entries).
 * 0 for bad arguments.
 */
int algo_over(const struct algo_params *p, const void *state, int64_t now_ns);

/* Releases memory the state owns (the sliding log's ring); the state is then
 * a fresh key again.  The per-key free hook of the key table.  Never fails. */
void algo_free(const struct algo_params *p, void *state);

/* ---- per-algorithm entry points, dispatched by algo.c ---- */

/* What the rest of sluice asks of an algorithm besides its state machine:
 * adding one is its algo_*.c file (with these ops; limit/ is globbed),
 * its enum algo_kind value and extern ops here, and a row in algo.c's
 * table.  A knob of its own adds an enum algo_knob value, its case in the
 * ops' knob hook, and one row per value in the ops' options (struct
 * algo_option), from which the config file, the SL.* specs and
 * SL.POLICIES read and print it; a public setter is needed only for
 * callers that set it by hand (the RLS layer's phase). */
#define ALGO_F_GLOBAL 1u /* consume() is meaningful across nodes */
#define ALGO_F_BURST  2u /* a bucket: burst is meaningful (see algo_has_burst) */

/* The knobs an algorithm may own beyond burst and precision, each set
 * through its ops' knob hook: by its options' rows (algo_params_set_options,
 * from the config file and SL.* specs) or by a public setter that names it. */
enum algo_knob {
    ALGO_KNOB_PHASE,  /* fixed-window: v[0] the phase (algo_params_set_phase) */
    ALGO_KNOB_WARMUP, /* warmup: v[0] the warm-up ns, v[1] the cold factor */
};

/* How an option's value is written where limits are read. */
enum algo_value {
    ALGO_VALUE_NS = 0,  /* a duration: the config file's "10s" or "500ms", whole
                         * ms in SL.* specs and SL.POLICIES; held in ns */
    ALGO_VALUE_INT = 1, /* a whole number */
};

/* One value an algorithm owns beyond burst and precision, as limits spell
 * it (nginx's directive tables): each algorithm lists its own in its ops,
 * and the config file's policy keys (daemon/config.c), the SL.* specs'
 * words and SL.POLICIES' fields (cmd/commands_sl.c) are read and printed
 * from these rows, so a new one is one row.  It is v[slot] of its knob,
 * kept in struct algo_params at off. */
struct algo_option {
    const char *conf;  /* its config file key ("warmup") */
    const char *word;  /* its SL.* spec word, any case ("WARMUP") */
    const char *shown; /* its SL.POLICIES field ("warmup_ms") */
    enum algo_knob knob;
    int slot;             /* its place in the knob's values */
    size_t off;           /* offsetof(struct algo_params, its int64_t field) */
    enum algo_value type; /* how it is written */
    int64_t min, max;     /* the values the knob accepts (ns for ALGO_VALUE_NS) */
};

/* Every algorithm's options together, at most; a knob's values, at most. */
#define ALGO_OPTIONS_MAX 8
#define ALGO_KNOB_VALUES 4

struct algo_ops {
    const char *name;      /* as configs, ALGO specs and INFO spell it */
    unsigned flags;        /* ALGO_F_* */
    const char *why_local; /* without ALGO_F_GLOBAL: why, in a few words */
    enum algo_carry carry;
    /* Validates the algorithm's own parameters and fills its derived fields
     * of q, whose kind, count and period_ns are set and valid (count >= 1,
     * period_ns >= 1).  -SLUICE_EINVAL / -SLUICE_ERANGE as algo_params_init
     * documents; q may be partly written on error (the caller discards it). */
    int (*params)(struct algo_params *q, int64_t burst, int64_t precision);
    size_t (*state_size)(const struct algo_params *p);
    void (*init)(const struct algo_params *p, void *state);
    /* apply = 0: compute the answer for qty without changing state. */
    int (*eval)(const struct algo_params *p, void *state, int64_t qty, int64_t now_ns, int apply,
                struct algo_result *out);
    int (*refund)(const struct algo_params *p, void *state, int64_t qty, int64_t now_ns);
    int (*drained)(const struct algo_params *p, const void *state, int64_t now_ns);
    int (*consume)(const struct algo_params *p, void *state, int64_t qty, int64_t at_ns);
    /* 1 when the state holds more than the limit (see algo_over). */
    int (*over)(const struct algo_params *p, const void *state, int64_t now_ns);
    void (*free)(const struct algo_params *p, void *state);
    /* Sets one of the algorithm's own knobs (enum algo_knob, its values in
     * v) on q, a valid params struct of this algorithm; NULL when it has
     * none.  -SLUICE_EINVAL for a knob it does not own or a value out of
     * range, -SLUICE_ERANGE as the setter documents; q unchanged on error. */
    int (*knob)(struct algo_params *q, enum algo_knob knob, const int64_t *v);
    /* The knobs' values as limits spell them (NULL, 0 when none). */
    const struct algo_option *options;
    size_t noptions;
};

extern const struct algo_ops algo_gcra_ops;
extern const struct algo_ops algo_token_bucket_ops;
extern const struct algo_ops algo_fixed_window_ops;
extern const struct algo_ops algo_sliding_window_ops;
extern const struct algo_ops algo_sliding_log_ops;
extern const struct algo_ops algo_warmup_ops;

/* The buckets' burst check (gcra, token-bucket, warmup): burst >= 0 and
 * burst+1 representable; fills q->burst and q->limit.  -SLUICE_EINVAL or
 * -SLUICE_ERANGE, q untouched. */
int algo__bucket_burst(struct algo_params *q, int64_t burst);

/* Debt bound shared by the algorithms (see algo_consume). */
#define ALGO_DEBT_BOUND ((int64_t)1 << 61)

/* a + b saturated to [-ALGO_DEBT_BOUND, ALGO_DEBT_BOUND]; both within int64. */
int64_t algo_sat_add(int64_t a, int64_t b);

#endif
