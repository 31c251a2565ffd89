/*
 * limiter: CL.THROTTLE on the key table and the GCRA core, and every other
 * algorithm (algo.h) for the SL.* commands.
 *
 * Value areas, by table tag (tag = algorithm kind + 1):
 *
 *   gcra (tag 1, also CL.THROTTLE)    other algorithms
 *   +-----------+                     +----------+------+---------+---------+-------------+
 *   | TAT (8)   |                     | drain_at | used | shape_a | shape_b | algo state  |
 *   +-----------+                     +----------+------+---------+---------+-------------+
 *
 * The first 8 bytes are always the time from which the key equals a fresh
 * one (for GCRA that IS the TAT), so the table's drain hook is one load.  For
 * the other algorithms drain_at is recomputed (now + reset_after) on every
 * call, `used` is limit - remaining at the last call and shape_a/b are the
 * parameters the state's meaning depends on (see limiter__shape), so a
 * reload that changes them can convert the state instead of dropping it.
 *
 * CL.THROTTLE keeps its own path (no dispatch through algo_ops, parameters
 * cached across calls): it is the hot path.  The parameters come with every
 * call, as in redis-cell, so the state is only the TAT.  A key exists in the table only while its
 * state differs from a fresh key's: a decision that leaves the key drained
 * (a peek, a refused oversize quantity, a key touched after it drained)
 * deletes or never creates the entry, and the table's rotating reclaim
 * frees keys that drain untouched (a key SL.ACQUIRE paced stays
 * LIMITER_PACE_KEEP_NS longer).  Memory thus follows the number of keys
 * actually being limited.
 */
#include "limiter.h"

#include "gcra.h"
#include "policy.h"
#include "sluice/error.h"
#include "table.h"
#include "num.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Every RECLAIM_EVERY calls, visit RECLAIM_BUCKETS buckets for drained keys:
 * about one key per call amortized without touching the table on every call. */
#define RECLAIM_EVERY   8u
#define RECLAIM_BUCKETS 8u

struct limiter {
    struct table *table;
    struct limiter_config cfg;
    int64_t last_now; /* clock clamp: time never goes backwards */
    /* The parameters of the previous call: most traffic repeats them, and
     * this saves the two divisions of gcra_params_init. */
    int64_t c_burst, c_count, c_period;
    struct gcra_params c_params;
    int c_valid;
    /* The same for limiter_cell_params (a global key's CL.THROTTLE). */
    int64_t a_burst, a_count, a_period;
    struct algo_params a_params;
    int a_valid;
    uint64_t touched_drained; /* entries deleted because a call left them drained */
    /* The counters limiter_counters renders; limiter_get_stats fills in
     * keys and evicted from the table, and reclaimed as the table's plus
     * touched_drained. */
    struct limiter_stats st;
    struct policy_set *policies;   /* one reference, or NULL */
    int has_match;                 /* some policy has a match prefix */
    struct algo_params log_params; /* any valid sliding-log params: frees rings */
};

/* Header of a non-GCRA value area (see the file comment). */
struct limiter__hdr {
    int64_t drain_at;
    int64_t used;
    int64_t shape_a, shape_b;
};
#define LIMITER_HDR ((size_t)sizeof(struct limiter__hdr))
_Static_assert(offsetof(struct limiter__hdr, drain_at) == 0 &&
                   sizeof(((struct limiter__hdr *)0)->drain_at) == 8,
               "the drain time is the first 8 bytes of every value area (file comment)");

static uint8_t limiter__tag(enum algo_kind k)
{
    return (uint8_t)(k + 1);
}
/* CL.THROTTLE's keys must be the SL.* gcra keys: one tag for both. */
#define LIMITER_TAG_GCRA limiter__tag(ALGO_GCRA)

/* A GCRA key equals an absent key from the moment its TAT is reached; the
 * other layouts keep that time in their first 8 bytes too. */
static int64_t limiter__drain_at(void *ud, const struct table_entry *e)
{
    int64_t tat;
    (void)ud;
    memcpy(&tat, table_entry_value((struct table_entry *)e), sizeof(tat));
    return tat;
}

/* An entry SL.ACQUIRE charged (owner bit): kept until LIMITER_PACE_KEEP_NS
 * after it drains, so a paced caller's schedule outlives a stall. */
#define LIMITER_F_PACED 0x10u

/* The table's drain hook: when the entry may be reclaimed. */
static int64_t limiter__reclaim_at(void *ud, const struct table_entry *e)
{
    int64_t at = limiter__drain_at(ud, e);
    return e->flags & LIMITER_F_PACED ? num_add_sat(at, LIMITER_PACE_KEEP_NS) : at;
}

/* Only the sliding log owns memory (its ring); the other states are plain
 * bytes.  algo_free is called with the limiter's own log params: the log's
 * free reads nothing from them. */
static void limiter__free_value(void *ud, struct table_entry *e)
{
    struct limiter *lim = ud;
    if (e->tag == limiter__tag(ALGO_SLIDING_LOG))
        algo_free(&lim->log_params, (char *)table_entry_value(e) + LIMITER_HDR);
}

int limiter_create(struct limiter **out, const struct limiter_config *cfg)
{
    struct limiter *lim = calloc(1, sizeof(*lim));
    struct table_config tc;
    int rc;

    if (lim == NULL)
        return -SLUICE_ENOMEM;
    if (cfg != NULL)
        lim->cfg = *cfg;
    if (lim->cfg.max_keys == 0)
        lim->cfg.max_keys = LIMITER_DEFAULT_MAX_KEYS;
    memset(&tc, 0, sizeof(tc));
    tc.max_keys = lim->cfg.max_keys;
    tc.evict = lim->cfg.overflow == LIMITER_OVERFLOW_EVICT;
    tc.drain = limiter__reclaim_at;
    tc.free_value = limiter__free_value;
    tc.ud = lim;
    if (algo_params_init(&lim->log_params, ALGO_SLIDING_LOG, 0, 1, 1, 0) < 0) {
        free(lim);
        return -SLUICE_EINVAL;
    }
    rc = table_create(&lim->table, &tc);
    if (rc < 0) {
        free(lim);
        return rc;
    }
    lim->last_now = INT64_MIN;
    *out = lim;
    return 0;
}

void limiter_destroy(struct limiter *lim)
{
    if (lim == NULL)
        return;
    table_destroy(lim->table);
    policy_set_release(lim->policies);
    free(lim);
}

static inline __attribute__((always_inline)) int limiter__params(struct limiter *lim, int64_t burst,
                                                                 int64_t count, int64_t period_s,
                                                                 const struct gcra_params **out)
{
    int64_t period_ns;
    int rc;

    if (lim->c_valid && lim->c_burst == burst && lim->c_count == count &&
        lim->c_period == period_s) {
        *out = &lim->c_params;
        return 0;
    }
    if (burst < 0 || count <= 0 || period_s <= 0)
        return -SLUICE_EINVAL;
    if (__builtin_mul_overflow(period_s, GCRA_NS_PER_SEC, &period_ns))
        return -SLUICE_ERANGE;
    rc = gcra_params_init(&lim->c_params, burst, count, period_ns);
    if (rc < 0) {
        lim->c_valid = 0;
        return rc;
    }
    lim->c_burst = burst;
    lim->c_count = count;
    lim->c_period = period_s;
    lim->c_valid = 1;
    *out = &lim->c_params;
    return 0;
}

/* ---- every algorithm ---- */

enum limiter__op { OP_DECIDE, OP_FIT, OP_REFUND, OP_PEEK, OP_CHARGE };

/* The parameters a state's meaning depends on, besides its algorithm
 * (algo_carry): a bucket's time to full depends on period and burst, a
 * window's index on period and precision (0 for the fixed window); states
 * of absolute times mean the same under any parameters. */
static void limiter__shape(const struct algo_params *p, int64_t *a, int64_t *b)
{
    *a = 0;
    *b = 0;
    switch (algo_carry(p->kind)) {
    case ALGO_CARRY_TIME_TO_FULL:
        *a = p->period_ns;
        *b = p->burst;
        break;
    case ALGO_CARRY_USED:
        *a = p->period_ns;
        *b = p->precision;
        break;
    case ALGO_CARRY_ABSOLUTE:
        break;
    }
}

/* Units to pour into a fresh state under p so that it carries on from a
 * state with another shape (see limiter.h): token-bucket keeps its time to
 * full, the windows the units used while the old window lasts. */
static int64_t limiter__carry(const struct algo_params *p, const struct limiter__hdr *h,
                              int64_t now)
{
    int64_t ttf, units;
    if (h->drain_at <= now)
        return 0;
    if (algo_carry(p->kind) != ALGO_CARRY_TIME_TO_FULL)
        return h->used > 0 ? h->used : 0;
    ttf = h->drain_at - now;
    if (__builtin_mul_overflow(ttf, p->count, &units))
        return p->limit;
    units = units / p->period_ns + (units % p->period_ns != 0);
    return units < p->limit ? units : p->limit;
}

/* Writes the header of a non-GCRA state after a call answered by r. */
static void limiter__hdr_update(const struct algo_params *p, struct limiter__hdr *h,
                                const struct algo_result *r, int64_t now)
{
    int64_t used = r->limit - r->remaining;
    /* remaining stops at 0: a key over a lowered limit used more than the
     * limit says; keep the larger count while the same window lasts. */
    if (r->remaining <= 0 && h->drain_at > now && h->used > used)
        used = h->used;
    h->used = used;
    h->drain_at = num_add_sat(now, r->reset_after_ns > 0 ? r->reset_after_ns : 0);
    limiter__shape(p, &h->shape_a, &h->shape_b);
}

/* Largest state a key may have on the stack (sliding-window at the top
 * precision). */
#define LIMITER_TMP_WORDS (2 + ALGO_PRECISION_MAX)

/*
 * One operation on key under p.  Finds the key, drops or converts a state of
 * another algorithm or shape, runs op on the state (in place, or on a fresh
 * state on the stack), then deletes the entry if the key is drained, or
 * stores the stack state in a new entry if it is not.  OP_DECIDE fills out;
 * OP_FIT fills *delay (and out with a peek); OP_REFUND and OP_PEEK fill out
 * with a peek after the operation.
 */
/*
 * Units to pour into a fresh state under p for a key whose state is of
 * another algorithm (e), so that a change of algorithm carries what the key
 * had used instead of handing out a fresh quota:
 *  - under a policy whose previous limit (before the reload) is that
 *    algorithm's: the fraction in use now, read from the old state under
 *    the old limit, times the new limit, rounded up;
 *  - otherwise (an inline limit, or a key last touched two reloads ago):
 *    a non-GCRA state's recorded use while it lasts, at most the new limit;
 *    a GCRA state's time until full, at the new rate, at most the new limit.
 */
static int64_t limiter__carry_across(const struct table_entry *e, const struct algo_params *p,
                                     const struct policy *pol, int64_t now)
{
    const char *v = table_entry_value((struct table_entry *)(uintptr_t)e);
    int64_t units = 0;
    if (pol != NULL && pol->has_prev && e->tag == limiter__tag(pol->prev.kind)) {
        const struct algo_params *old = &pol->prev;
        size_t ssz = algo_state_size(old);
        int64_t tmp[LIMITER_TMP_WORDS];
        struct algo_result r;
        size_t off = old->kind == ALGO_GCRA ? 0 : LIMITER_HDR;
        if (ssz == 0 || ssz > sizeof(tmp))
            return 0;
        /* A copy: a peek never writes, but the state stays the table's. */
        memcpy(tmp, v + off, ssz);
        if (algo_decide(old, tmp, 0, now, &r) < 0 || r.limit <= 0)
            return 0;
        int64_t used = r.limit - (r.remaining > 0 ? r.remaining : 0);
        if (used <= 0)
            return 0;
        /* ceil(used / old limit * new limit), in 128 bits. */
        __int128 n = (__int128)used * p->limit;
        units = (int64_t)(n / r.limit + (n % r.limit != 0));
    } else if (e->tag != limiter__tag(ALGO_GCRA)) {
        struct limiter__hdr h;
        memcpy(&h, v, sizeof(h));
        units = h.drain_at > now && h.used > 0 ? h.used : 0;
    } else {
        int64_t tat;
        memcpy(&tat, v, sizeof(tat));
        if (tat != GCRA_TAT_FULL && tat > now) {
            __int128 n = (__int128)(tat - now) * p->count;
            units = (int64_t)(n / p->period_ns + (n % p->period_ns != 0));
        }
    }
    return units < p->limit ? units : p->limit;
}

static void limiter__deny_full(const struct algo_params *p, struct algo_result *out);

static int limiter__run_at(struct limiter *lim, const char *key, size_t klen,
                           const struct algo_params *p, const struct policy *pol,
                           enum limiter__op op, int64_t qty, int64_t now, int64_t at,
                           struct algo_result *out, int64_t *delay)
{
    int64_t tmp[LIMITER_TMP_WORDS];
    size_t ssz, off;
    struct table_entry *e;
    void *st;
    int64_t carry = 0, d1;
    int rc, drained;
    /* SL.ACQUIRE's calls (they pass a time to see the key at) */
    int paced = at >= 0;

    if (qty < 0)
        return -SLUICE_EINVAL;
    if (klen > TABLE_MAX_KEY)
        return -SLUICE_ETOOBIG;
    ssz = algo_state_size(p);
    if (ssz == 0 || ssz > sizeof(tmp))
        return -SLUICE_EINVAL;
    off = p->kind == ALGO_GCRA ? 0 : LIMITER_HDR;
    if (now < lim->last_now)
        now = lim->last_now;
    lim->last_now = now;
    if (op == OP_DECIDE && (lim->st.decisions & (RECLAIM_EVERY - 1)) == 0)
        table_reclaim_step(lim->table, now, RECLAIM_BUCKETS);
    /* From here on the key is seen at `at` (a waiter's due time, at most
     * now); the table's clock above stays now. */
    if (at >= 0 && at < now)
        now = at;

    uint32_t hash; /* for the insert too */
    e = table_find_for_insert(lim->table, key, klen, &hash);
    if (e != NULL && e->tag != limiter__tag(p->kind)) {
        carry = limiter__carry_across(e, p, pol, now);
        table_delete(lim->table, e);
        lim->st.reinitialised++;
        e = NULL;
    } else if (e != NULL && off != 0) {
        struct limiter__hdr *h = table_entry_value(e);
        int64_t a, b;
        limiter__shape(p, &a, &b);
        if (h->shape_a != a || h->shape_b != b) {
            carry = limiter__carry(p, h, now);
            table_delete(lim->table, e);
            lim->st.reinitialised++;
            e = NULL;
        }
    }
    if (e != NULL) {
        st = (char *)table_entry_value(e) + off;
    } else {
        st = tmp;
        algo_init(p, st);
        if (carry > 0 && (rc = algo_consume(p, st, carry, now)) < 0)
            return rc;
    }

    switch (op) {
    case OP_DECIDE:
        rc = algo_decide(p, st, qty, now, out);
        break;
    case OP_FIT:
        rc = algo_earliest_fit(p, st, qty, now, delay);
        if (rc == 0)
            rc = algo_decide(p, st, 0, now, out);
        break;
    case OP_REFUND:
        rc = algo_refund(p, st, qty, now);
        if (rc == 0)
            rc = algo_decide(p, st, 0, now, out);
        break;
    case OP_CHARGE:
        /* Counted whatever the key holds; the answer says whether it is now
         * over its limit (in debt) and when one unit fits again. */
        rc = algo_consume(p, st, qty, now);
        if (rc == 0)
            rc = algo_decide(p, st, 0, now, out);
        if (rc == 0) {
            out->limited = algo_over(p, st, now);
            out->retry_after_ns = ALGO_NEVER;
            if (out->limited && algo_earliest_fit(p, st, 1, now, &d1) == 0)
                out->retry_after_ns = d1;
        }
        break;
    default:
        rc = algo_decide(p, st, 0, now, out);
        break;
    }
    if (rc < 0) {
        if (e == NULL)
            algo_free(p, st);
        return rc;
    }

    drained = algo_drained(p, st, now);
    /* A paced key is kept a while after it drains: SL.ACQUIRE charges a
     * late caller at its slot, which it reads from the key (acquire.c). */
    if (drained && e != NULL && (e->flags & LIMITER_F_PACED) && now > LIMITER_PACE_KEEP_NS &&
        !algo_drained(p, st, now - LIMITER_PACE_KEEP_NS))
        drained = 0;
    if (e != NULL) {
        if (paced && (op == OP_DECIDE || op == OP_CHARGE))
            e->flags |= LIMITER_F_PACED;
        if (drained && !(e->flags & TABLE_F_PINNED)) {
            table_delete(lim->table, e);
            lim->touched_drained++;
        } else if (off != 0) {
            limiter__hdr_update(p, table_entry_value(e), out, now);
        }
    } else if (!drained) {
        rc = table_insert_hashed(lim->table, key, klen, hash, off + ssz, limiter__tag(p->kind), now,
                                 &e);
        if (rc == 0) {
            if (paced && (op == OP_DECIDE || op == OP_CHARGE))
                e->flags |= LIMITER_F_PACED;
            memcpy((char *)table_entry_value(e) + off, st, ssz);
            if (off != 0)
                limiter__hdr_update(p, table_entry_value(e), out, now);
        } else {
            algo_free(p, st);
            int decides = op == OP_DECIDE || op == OP_CHARGE;
            if (rc == -SLUICE_EFULL && decides && lim->cfg.overflow == LIMITER_OVERFLOW_ALLOW) {
                lim->st.overflow_allowed++;
            } else if (rc == -SLUICE_EFULL && decides) {
                /* Fail closed (limiter__deny_full). */
                lim->st.overflow_denied++;
                limiter__deny_full(p, out);
            } else if (rc != -SLUICE_EFULL) {
                return rc;
            }
        }
    } else {
        algo_free(p, st);
    }
    if (op == OP_DECIDE || op == OP_CHARGE) {
        lim->st.decisions++;
        if (out->limited)
            lim->st.limited++;
    }
    return 0;
}

static int limiter__run(struct limiter *lim, const char *key, size_t klen,
                        const struct algo_params *p, const struct policy *pol, enum limiter__op op,
                        int64_t qty, int64_t now, struct algo_result *out, int64_t *delay)
{
    return limiter__run_at(lim, key, klen, p, pol, op, qty, now, -1, out, delay);
}

int limiter_charge(struct limiter *lim, const char *key, size_t klen, const struct algo_params *p,
                   int64_t qty, int64_t now_ns, struct algo_result *out)
{
    return limiter__run(lim, key, klen, p, NULL, OP_CHARGE, qty, now_ns, out, NULL);
}

/* Runs op under a named policy: a dry-run policy's refusal is counted and
 * answered as allowed, and the policy's counters see every decision that
 * asked for units.  *would_limit (may be NULL): the refusal before dry-run. */
static int limiter__run_policy(struct limiter *lim, const char *key, size_t klen,
                               const struct policy *pol, enum limiter__op op, int64_t qty,
                               int64_t now_ns, struct algo_result *out, int *would_limit)
{
    int rc = limiter__run(lim, key, klen, &pol->algo, pol, op, qty, now_ns, out, NULL);
    if (rc < 0)
        return rc;
    limiter_settle_policy(lim, pol, qty, out, would_limit);
    return 0;
}

void limiter_settle_policy(struct limiter *lim, const struct policy *pol, int64_t qty,
                           struct algo_result *out, int *would_limit)
{
    if (would_limit != NULL)
        *would_limit = out->limited;
    if (pol == NULL)
        return;
    if (out->limited && pol->dry_run) {
        lim->st.dry_run_would_limit++;
        out->limited = 0;
        out->retry_after_ns = ALGO_NEVER;
    }
    if (qty > 0)
        policy_count(pol, out->limited);
}

/* What a refused new key is told when its table is full under
 * --on-full deny: limited, nothing remaining, retry after one unit's share
 * of the period. */
static void limiter__deny_full(const struct algo_params *p, struct algo_result *out)
{
    out->limited = 1;
    out->remaining = 0;
    out->retry_after_ns = p->period_ns / p->count > 0 ? p->period_ns / p->count : 1;
}

int limiter_overflow_answer(struct limiter *lim, const struct algo_params *p, int64_t qty,
                            int allow, int64_t now_ns, struct algo_result *out)
{
    int64_t tmp[LIMITER_TMP_WORDS];
    size_t ssz = algo_state_size(p);
    if (qty < 0 || ssz == 0 || ssz > sizeof(tmp))
        return -SLUICE_EINVAL;
    algo_init(p, tmp);
    int rc = algo_decide(p, tmp, qty, now_ns, out);
    algo_free(p, tmp);
    if (rc < 0)
        return rc;
    if (qty > 0 && allow) {
        lim->st.overflow_allowed++;
    } else if (qty > 0) {
        lim->st.overflow_denied++;
        limiter__deny_full(p, out);
    }
    return 0;
}

int limiter_charge_policy(struct limiter *lim, const char *key, size_t klen,
                          const struct policy *pol, int64_t qty, int64_t now_ns,
                          struct algo_result *out)
{
    return limiter__run_policy(lim, key, klen, pol, OP_CHARGE, qty, now_ns, out, NULL);
}

int limiter_decide(struct limiter *lim, const char *key, size_t klen, const struct algo_params *p,
                   int64_t qty, int64_t now_ns, struct algo_result *out)
{
    return limiter__run(lim, key, klen, p, NULL, OP_DECIDE, qty, now_ns, out, NULL);
}

int limiter_decide_policy(struct limiter *lim, const char *key, size_t klen,
                          const struct policy *pol, int64_t qty, int64_t now_ns,
                          struct algo_result *out, int *would_limit)
{
    return limiter__run_policy(lim, key, klen, pol, OP_DECIDE, qty, now_ns, out, would_limit);
}

int limiter_refund(struct limiter *lim, const char *key, size_t klen, const struct algo_params *p,
                   int64_t qty, int64_t now_ns)
{
    struct algo_result r;
    struct table_entry *e;
    if (qty < 0 || algo_state_size(p) == 0)
        return -SLUICE_EINVAL;
    if (klen > TABLE_MAX_KEY)
        return -SLUICE_ETOOBIG;
    e = table_find(lim->table, key, klen);
    if (e == NULL || e->tag != limiter__tag(p->kind))
        return 0; /* nothing of this algorithm was taken */
    return limiter__run(lim, key, klen, p, NULL, OP_REFUND, qty, now_ns, &r, NULL);
}

int limiter_reset(struct limiter *lim, const char *key, size_t klen)
{
    struct table_entry *e;
    if (klen > TABLE_MAX_KEY)
        return 0;
    e = table_find(lim->table, key, klen);
    if (e == NULL)
        return 0;
    table_delete(lim->table, e);
    return 1;
}

int limiter_earliest_fit(struct limiter *lim, const char *key, size_t klen,
                         const struct algo_params *p, int64_t qty, int64_t now_ns,
                         int64_t *delay_ns, struct algo_result *peek)
{
    struct algo_result r;
    int rc = limiter__run(lim, key, klen, p, NULL, OP_FIT, qty, now_ns, &r, delay_ns);
    if (rc == 0 && peek != NULL) {
        *peek = r;
        peek->limited = *delay_ns != 0;
        peek->retry_after_ns = *delay_ns != 0 ? *delay_ns : ALGO_NEVER;
    }
    return rc;
}

/* What SL.ACQUIRE pays forward: any quantity on gcra (Guava's
 * SmoothBursty), and on token-bucket (which never borrows otherwise) only
 * one it can never hold at once. */
static int limiter__pays_forward(const struct algo_params *p, int64_t qty)
{
    return qty > 1 && (p->kind == ALGO_GCRA || (p->kind == ALGO_TOKEN_BUCKET && qty > p->limit));
}

int limiter_acquire_fit(struct limiter *lim, const char *key, size_t klen,
                        const struct algo_params *p, int64_t qty, int64_t at_ns, int64_t now_ns,
                        int64_t *delay_ns, struct algo_result *peek)
{
    struct algo_result r;
    int64_t q = limiter__pays_forward(p, qty) ? 1 : qty;
    int rc = limiter__run_at(lim, key, klen, p, NULL, OP_FIT, q, now_ns, at_ns, &r, delay_ns);
    if (rc == 0 && peek != NULL) {
        *peek = r;
        peek->limited = *delay_ns != 0;
        peek->retry_after_ns = *delay_ns != 0 ? *delay_ns : ALGO_NEVER;
    }
    return rc;
}

int limiter_acquire_take(struct limiter *lim, const char *key, size_t klen,
                         const struct algo_params *p, int64_t qty, int64_t at_ns, int64_t now_ns,
                         struct algo_result *out)
{
    if (!limiter__pays_forward(p, qty))
        return limiter__run_at(lim, key, klen, p, NULL, OP_DECIDE, qty, now_ns, at_ns, out, NULL);
    int rc = limiter__run_at(lim, key, klen, p, NULL, OP_CHARGE, qty, now_ns, at_ns, out, NULL);
    if (rc == 0) {
        out->limited = 0;
        out->retry_after_ns = ALGO_NEVER;
    }
    return rc;
}

int64_t limiter_clock(const struct limiter *lim)
{
    return lim->last_now;
}

int64_t limiter_used(struct limiter *lim, const char *key, size_t klen, const struct algo_params *p)
{
    int64_t now = lim->last_now;
    struct table_entry *e = table_find(lim->table, key, klen);
    if (e == NULL)
        return 0;
    if (e->tag != limiter__tag(p->kind))
        return limiter__carry_across(e, p, NULL, now);
    size_t ssz = algo_state_size(p), off = p->kind == ALGO_GCRA ? 0 : LIMITER_HDR;
    int64_t tmp[LIMITER_TMP_WORDS];
    if (ssz == 0 || ssz > sizeof(tmp))
        return 0;
    if (off != 0) {
        const struct limiter__hdr *h = table_entry_value(e);
        int64_t a, b;
        limiter__shape(p, &a, &b);
        if (h->shape_a != a || h->shape_b != b)
            return limiter__carry(p, h, now);
    }
    /* A peek on a copy: the state stays the table's, unchanged. */
    memcpy(tmp, (const char *)table_entry_value(e) + off, ssz);
    struct algo_result r;
    if (algo_decide(p, tmp, 0, now, &r) < 0 || r.limit <= 0)
        return 0;
    int64_t used = r.limit - (r.remaining > 0 ? r.remaining : 0);
    return used <= 0 ? 0 : used < p->limit ? used : p->limit;
}

static const struct algo_params *limiter__req_params(const struct limiter_req *q)
{
    return q->pol != NULL ? &q->pol->algo : q->p;
}

/* SL.MULTI's keys count under their policies: all allowed or all limited. */
static void limiter__count_multi(const struct limiter_req *reqs, size_t n, int limited)
{
    for (size_t i = 0; i < n; i++)
        if (reqs[i].qty > 0)
            policy_count(reqs[i].pol, limited);
}

int limiter_multi(struct limiter *lim, const struct limiter_req *reqs, size_t n, int64_t now_ns,
                  struct algo_result *outs, int *allowed)
{
    int64_t delay;
    size_t i, j;
    int rc, ok = 1;

    if (n == 0 || n > LIMITER_MULTI_MAX)
        return -SLUICE_EINVAL;
    for (i = 0; i < n; i++) {
        if (reqs[i].qty < 0 || limiter__req_params(&reqs[i]) == NULL)
            return -SLUICE_EINVAL;
        for (j = 0; j < i; j++) {
            if (reqs[i].klen == reqs[j].klen &&
                (reqs[i].klen == 0 || memcmp(reqs[i].key, reqs[j].key, reqs[i].klen) == 0))
                return -SLUICE_EINVAL;
        }
    }
    if (now_ns < lim->last_now)
        now_ns = lim->last_now;
    /* Phase 1: would every key allow?  Nothing is charged. */
    for (i = 0; i < n; i++) {
        const struct limiter_req *q = &reqs[i];
        rc = limiter__run(lim, q->key, q->klen, limiter__req_params(q), q->pol, OP_FIT, q->qty,
                          now_ns, &outs[i], &delay);
        if (rc < 0)
            return rc;
        outs[i].limited = delay != 0;
        outs[i].retry_after_ns = delay != 0 ? delay : ALGO_NEVER;
        if (delay != 0 && q->pol != NULL && q->pol->dry_run)
            lim->st.dry_run_would_limit++;
        else if (delay != 0)
            ok = 0;
    }
    lim->st.decisions++;
    if (!ok) {
        lim->st.limited++;
        *allowed = 0;
        limiter__count_multi(reqs, n, 1);
        return 0;
    }
    /* Phase 2: charge them all.  Distinct keys cannot interfere, so each
     * allows as phase 1 said; a failure (out of memory, a full table)
     * refunds the keys already charged. */
    for (i = 0; i < n; i++) {
        const struct limiter_req *q = &reqs[i];
        const struct algo_params *p = limiter__req_params(q);
        int refused = 0;
        rc = limiter__run(lim, q->key, q->klen, p, q->pol, OP_DECIDE, q->qty, now_ns, &outs[i],
                          NULL);
        lim->st.decisions--; /* one decision for the whole request */
        if (rc == 0 && outs[i].limited) {
            lim->st.limited--;
            if (q->pol != NULL && q->pol->dry_run) {
                outs[i].limited = 0;
                outs[i].retry_after_ns = ALGO_NEVER;
            } else {
                refused = 1;
            }
        }
        if (rc < 0 || refused) {
            for (j = 0; j < i; j++) {
                struct algo_result r;
                (void)limiter__run(lim, reqs[j].key, reqs[j].klen, limiter__req_params(&reqs[j]),
                                   reqs[j].pol, OP_REFUND, reqs[j].qty, now_ns, &r, NULL);
            }
            if (rc < 0)
                return rc;
            lim->st.limited++;
            *allowed = 0;
            limiter__count_multi(reqs, n, 1);
            return 0;
        }
    }
    *allowed = 1;
    limiter__count_multi(reqs, n, 0);
    return 0;
}

void limiter_set_policies(struct limiter *lim, struct policy_set *set)
{
    struct policy_set *old = lim->policies;
    policy_set_carry(set, old);
    lim->policies = policy_set_retain(set);
    lim->has_match = 0;
    for (size_t i = 0; i < policy_set_count(set); i++) {
        if (policy_set_at(set, i)->match != NULL)
            lim->has_match = 1;
    }
    policy_set_release(old);
}

struct policy_set *limiter_policies(const struct limiter *lim)
{
    return lim->policies;
}

/* CL.THROTTLE on a key a policy covers: the policy decides, the reply keeps
 * redis-cell's shape and rounding. */
static int limiter__throttle_policy(struct limiter *lim, const char *key, size_t klen,
                                    const struct policy *pol, int64_t quantity, int64_t now_ns,
                                    struct limiter_throttle_result *out)
{
    struct algo_result r;
    int rc = limiter_decide_policy(lim, key, klen, pol, quantity, now_ns, &r, NULL);
    if (rc < 0)
        return rc;
    out->limited = r.limited;
    out->limit = r.limit;
    out->remaining = r.remaining > 0 ? r.remaining : 0;
    out->retry_after_s =
        r.limited && r.retry_after_ns != ALGO_NEVER ? gcra_cell_seconds(r.retry_after_ns) : -1;
    out->reset_after_s = gcra_cell_seconds(r.reset_after_ns);
    return 0;
}

/* CL.THROTTLE's inline GCRA limit, after the argument checks: the body of
 * both limiter_throttle and limiter_decide_cell, inlined into each so
 * that the hot path is one call. */
static inline __attribute__((always_inline)) int
limiter__throttle_gcra(struct limiter *lim, const char *key, size_t klen, int64_t max_burst,
                       int64_t count, int64_t period_s, int64_t quantity, int64_t now_ns,
                       struct gcra_result *out)
{
    const struct gcra_params *p;
    struct table_entry *e;
    struct gcra_result r;
    int64_t tat;
    int rc;

    rc = limiter__params(lim, max_burst, count, period_s, &p);
    if (rc < 0)
        return rc;
    if (now_ns < lim->last_now)
        now_ns = lim->last_now;
    lim->last_now = now_ns;

    if ((lim->st.decisions & (RECLAIM_EVERY - 1)) == 0)
        table_reclaim_step(lim->table, now_ns, RECLAIM_BUCKETS);

    uint32_t hash; /* for the insert too */
    e = table_find_for_insert(lim->table, key, klen, &hash);
    tat = GCRA_TAT_FULL;
    if (e != NULL && e->tag != LIMITER_TAG_GCRA) {
        /* Another algorithm's state: CL.THROTTLE is GCRA; it starts as a
         * GCRA state that has used what the old one had (limiter__carry_
         * across, under the new limit), never as a fresh quota. */
        struct algo_params ap;
        int64_t units = 0, ahead;
        if (algo_params_init(&ap, ALGO_GCRA, max_burst, count, period_s * GCRA_NS_PER_SEC, 0) == 0)
            units = limiter__carry_across(e, &ap, NULL, now_ns);
        table_delete(lim->table, e);
        lim->st.reinitialised++;
        e = NULL;
        if (units > 0)
            tat = num_add_sat(
                now_ns, __builtin_mul_overflow(units, p->emission_ns, &ahead) ? INT64_MAX : ahead);
    }
    if (e != NULL)
        memcpy(&tat, table_entry_value(e), sizeof(tat));
    rc = gcra_decide(&tat, p, quantity, now_ns, &r);
    if (rc < 0)
        return rc;

    if (e != NULL) {
        if (gcra_is_drained(tat, now_ns) && !(e->flags & TABLE_F_PINNED)) {
            table_delete(lim->table, e);
            lim->touched_drained++;
        } else {
            memcpy(table_entry_value(e), &tat, sizeof(tat));
        }
    } else if (!gcra_is_drained(tat, now_ns)) {
        rc = table_insert_hashed(lim->table, key, klen, hash, sizeof(tat), LIMITER_TAG_GCRA, now_ns,
                                 &e);
        if (rc == -SLUICE_EFULL && lim->cfg.overflow == LIMITER_OVERFLOW_ALLOW) {
            lim->st.overflow_allowed++;
        } else if (rc == -SLUICE_EFULL) {
            /* Fail closed: answer as a limited fresh key would, retrying
             * after one emission interval. */
            lim->st.overflow_denied++;
            r.limited = 1;
            r.remaining = 0;
            r.retry_after_ns = p->emission_ns;
        } else if (rc < 0) {
            return rc;
        } else {
            memcpy(table_entry_value(e), &tat, sizeof(tat));
        }
    }

    lim->st.decisions++;
    if (r.limited)
        lim->st.limited++;
    *out = r;
    return 0;
}

static void limiter__cell(const struct gcra_result *r, struct limiter_throttle_result *out)
{
    struct gcra_cell_reply cell;
    gcra_to_cell(r, &cell);
    out->limited = (int)cell.limited;
    out->limit = cell.limit;
    out->remaining = cell.remaining;
    out->retry_after_s = cell.retry_after_s;
    out->reset_after_s = cell.reset_after_s;
}

int limiter_throttle(struct limiter *lim, const char *key, size_t klen, int64_t max_burst,
                     int64_t count, int64_t period_s, int64_t quantity, int64_t now_ns,
                     struct limiter_throttle_result *out)
{
    if (quantity < 0)
        return -SLUICE_EINVAL;
    if (klen > TABLE_MAX_KEY)
        return -SLUICE_ETOOBIG;
    if (lim->has_match) {
        const struct policy *pol = policy_set_match(lim->policies, key, klen);
        if (pol != NULL)
            return limiter__throttle_policy(lim, key, klen, pol, quantity, now_ns, out);
    }
    struct gcra_result r;
    int rc =
        limiter__throttle_gcra(lim, key, klen, max_burst, count, period_s, quantity, now_ns, &r);
    if (rc == 0)
        limiter__cell(&r, out);
    return rc;
}

int limiter_cell_params(struct limiter *lim, int64_t burst, int64_t count, int64_t period_s,
                        const struct algo_params **out)
{
    if (!lim->a_valid || lim->a_burst != burst || lim->a_count != count ||
        lim->a_period != period_s) {
        int64_t period_ns;
        lim->a_valid = 0;
        if (count <= 0 || period_s <= 0 || burst < 0)
            return -SLUICE_EINVAL;
        if (__builtin_mul_overflow(period_s, GCRA_NS_PER_SEC, &period_ns))
            return -SLUICE_ERANGE;
        int rc = algo_params_init(&lim->a_params, ALGO_GCRA, burst, count, period_ns, 0);
        if (rc < 0)
            return rc;
        lim->a_burst = burst;
        lim->a_count = count;
        lim->a_period = period_s;
        lim->a_valid = 1;
    }
    *out = &lim->a_params;
    return 0;
}

void limiter_prefetch(const struct limiter *lim, const char *key, size_t klen, int stage,
                      uint32_t *h)
{
    table_prefetch_stage(lim->table, key, klen, stage, h);
}

int limiter_decide_cell(struct limiter *lim, const char *key, size_t klen, int64_t max_burst,
                        int64_t count, int64_t period_s, int64_t quantity, int64_t now_ns,
                        struct algo_result *out)
{
    if (quantity < 0)
        return -SLUICE_EINVAL;
    if (klen > TABLE_MAX_KEY)
        return -SLUICE_ETOOBIG;
    struct gcra_result r;
    int rc =
        limiter__throttle_gcra(lim, key, klen, max_burst, count, period_s, quantity, now_ns, &r);
    if (rc < 0)
        return rc;
    out->limited = r.limited;
    out->limit = r.limit;
    out->remaining = r.remaining;
    out->retry_after_ns = r.retry_after_ns;
    out->reset_after_ns = r.reset_after_ns;
    return 0;
}

size_t limiter_maintain(struct limiter *lim, int64_t now_ns, size_t budget)
{
    if (now_ns < lim->last_now)
        now_ns = lim->last_now;
    lim->last_now = now_ns;
    return table_reclaim_step(lim->table, now_ns, budget);
}

struct limiter__scan_ctx {
    limiter_scan_fn fn;
    void *ud;
};

static void limiter__scan_one(void *ud, const struct table_entry *e)
{
    const struct limiter__scan_ctx *c = ud;
    c->fn(c->ud, table_entry_key(e), e->klen, limiter__drain_at(NULL, e));
}

uint64_t limiter_scan(struct limiter *lim, uint64_t cursor, size_t count, limiter_scan_fn fn,
                      void *ud)
{
    struct limiter__scan_ctx c = {fn, ud};
    return table_scan(lim->table, cursor, count, limiter__scan_one, &c);
}

void limiter_get_stats(const struct limiter *lim, struct limiter_stats *out)
{
    struct table_stats ts;

    table_get_stats(lim->table, &ts);
    *out = lim->st;
    out->keys = ts.keys;
    out->reclaimed = ts.reclaimed + lim->touched_drained;
    out->evicted = ts.evicted;
}

static const struct counter_row limiter__rows[] = {
    COUNTER_ROW(struct limiter_stats, decisions, "decisions", "decisions_total", COUNTER_TOTAL,
                "Rate-limit decisions answered on local keys."),
    COUNTER_ROW(struct limiter_stats, limited, "limited", "limited_total", COUNTER_TOTAL,
                "Decisions on local keys that refused the request."),
    COUNTER_ROW(struct limiter_stats, keys, "keys", "keys", COUNTER_GAUGE, "Keys held in memory."),
    COUNTER_ROW(struct limiter_stats, reclaimed, "reclaimed", "keys_reclaimed_total", COUNTER_TOTAL,
                "Drained keys freed."),
    COUNTER_ROW(struct limiter_stats, evicted, "evicted", "keys_evicted_total", COUNTER_TOTAL,
                "Still-limiting keys evicted because the table was full."),
    COUNTER_ROW(struct limiter_stats, overflow_denied, "overflow_denied", "overflow_denied_total",
                COUNTER_TOTAL,
                "Requests refused because the key table (local or global) was full (on_full "
                "deny)."),
    COUNTER_ROW(struct limiter_stats, overflow_allowed, "overflow_allowed",
                "overflow_allowed_total", COUNTER_TOTAL,
                "Requests allowed without state because the key table (local or global) was "
                "full (on_full allow)."),
    COUNTER_ROW(struct limiter_stats, dry_run_would_limit, "dry_run_would_limit",
                "dry_run_would_limit_total", COUNTER_TOTAL,
                "Refusals by dry-run policies (local and global keys), answered as allowed."),
    COUNTER_ROW(struct limiter_stats, reinitialised, "algorithm_changes", "algorithm_changes_total",
                COUNTER_TOTAL, "Keys re-initialised under another algorithm or window shape."),
};

const struct counter_table limiter_counters = COUNTER_TABLE(limiter__rows);
