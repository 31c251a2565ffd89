/*
 * limiter: CL.THROTTLE on the key table and the GCRA core.
 *
 * Each key's state is one int64 TAT in the table's value area (tag
 * LIMITER_TAG_GCRA).  The parameters come with every call, as in redis-cell,
 * so the state is only the TAT.  A key exists in the table only while its
 * state differs from a fresh key's: a decision that leaves the key drained
 * (a peek, a refused oversize quantity, a key touched after it drained)
 * deletes or never creates the entry, and the table's rotating reclaim
 * frees keys that drain untouched.  Memory thus follows the number of keys
 * actually being limited.
 */
#include "limiter.h"

#include "gcra.h"
#include "sluice/error.h"
#include "table.h"

#include <stdlib.h>
#include <string.h>

#define LIMITER_DEFAULT_MAX_KEYS ((size_t)1 << 22)
#define LIMITER_TAG_GCRA         1
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
    uint64_t touched_drained; /* entries deleted because a call left them drained */
    uint64_t overflow_denied, overflow_allowed, decisions, limited;
};

/* A GCRA key equals an absent key from the moment its TAT is reached. */
static int64_t limiter__drain_at(void *ud, const struct table_entry *e)
{
    int64_t tat;
    (void)ud;
    memcpy(&tat, table_entry_value((struct table_entry *)e), sizeof(tat));
    return tat;
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
    tc.drain = limiter__drain_at;
    tc.ud = lim;
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
    free(lim);
}

static int limiter__params(struct limiter *lim, int64_t burst, int64_t count, int64_t period_s,
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

int limiter_throttle(struct limiter *lim, const char *key, size_t klen, int64_t max_burst,
                     int64_t count, int64_t period_s, int64_t quantity, int64_t now_ns,
                     struct limiter_throttle_result *out)
{
    const struct gcra_params *p;
    struct table_entry *e;
    struct gcra_result r;
    struct gcra_cell_reply cell;
    int64_t tat;
    int rc;

    if (quantity < 0)
        return -SLUICE_EINVAL;
    if (klen > TABLE_MAX_KEY)
        return -SLUICE_ETOOBIG;
    rc = limiter__params(lim, max_burst, count, period_s, &p);
    if (rc < 0)
        return rc;
    if (now_ns < lim->last_now)
        now_ns = lim->last_now;
    lim->last_now = now_ns;

    if ((lim->decisions & (RECLAIM_EVERY - 1)) == 0)
        table_reclaim_step(lim->table, now_ns, RECLAIM_BUCKETS);

    e = table_find(lim->table, key, klen);
    tat = GCRA_TAT_FULL;
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
        rc = table_insert(lim->table, key, klen, sizeof(tat), LIMITER_TAG_GCRA, now_ns, &e);
        if (rc == -SLUICE_EFULL && lim->cfg.overflow == LIMITER_OVERFLOW_ALLOW) {
            lim->overflow_allowed++;
        } else if (rc == -SLUICE_EFULL) {
            /* Fail closed: answer as a limited fresh key would, retrying
             * after one emission interval. */
            lim->overflow_denied++;
            r.limited = 1;
            r.remaining = 0;
            r.retry_after_ns = p->emission_ns;
        } else if (rc < 0) {
            return rc;
        } else {
            memcpy(table_entry_value(e), &tat, sizeof(tat));
        }
    }

    lim->decisions++;
    if (r.limited)
        lim->limited++;
    gcra_to_cell(&r, &cell);
    out->limited = (int)cell.limited;
    out->limit = cell.limit;
    out->remaining = cell.remaining;
    out->retry_after_s = cell.retry_after_s;
    out->reset_after_s = cell.reset_after_s;
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
    out->keys = ts.keys;
    out->reclaimed = ts.reclaimed + lim->touched_drained;
    out->evicted = ts.evicted;
    out->overflow_denied = lim->overflow_denied;
    out->overflow_allowed = lim->overflow_allowed;
    out->decisions = lim->decisions;
    out->limited = lim->limited;
}
