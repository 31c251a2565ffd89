/*
 * replica_*: the replication engine of global limits (design in replica.h,
 * wire format in delta.h).
 *
 * Layout: keys live in a key table (node/table.h) whose 8-byte value area
 * points to a separately allocated struct rkey; the table gives O(1) lookup
 * and the SCAN cursor used by anti-entropy.  Every rkey is also on a list
 * walked by replica_tick (demand, shares, phantom, GC: O(global keys) per
 * tick), and keys with unsent changes are on a dirty array.  Dirty keys are
 * never collected, so that array never holds a dangling pointer.
 *
 * Peers are interned once in r->peers (index 0 is this node); slots refer to
 * them by index, so a slot costs no name bytes.
 */
#include "replica.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "delta.h"
#include "table.h"

#define NS_PER_SEC      1000000000LL
#define DEMAND_TAU_NS   NS_PER_SEC /* EWMA time constant of the demand estimate */
#define PEERS_MAX       4096
#define PKT_MAX         9216
#define AE_PENDING_MAX  256
#define SYNC_DEFAULT    (2 * NS_PER_SEC)
#define LEARN_INTERVALS 5                /* a cold key's peers are assumed unknown this long */
#define HIST_W_NS       (50 * 1000000LL) /* consumption history: bucket width */
#define HIST_N          128              /* buckets: a horizon of 6.4 s */
#define RATE_SLACK      1.1              /* own rate cap: share * rate * this (see update_share) */
#define RATE_SHARE_MIN  0.02             /* nor below this fraction of the rate */
#define WIRE_SPAN_NS    (1LL << 60)      /* wire times are clamped to now +- this (36 years) */
#define WIRE_AHEAD_NS   (3600 * NS_PER_SEC) /* event times: at most this ahead of now */

struct rpeer {
    char name[GOSSIP_NAME_MAX + 1];
    size_t len;
    int state;             /* enum gossip_member_state, or -1 unknown */
    int64_t last_heard;    /* replica clock */
    int64_t unreach_since; /* first tick seen unreachable, 0 = reachable */
    int64_t last_sent;     /* latest sender clock of its packets, INT64_MIN none */
};

struct rslot {
    uint32_t peer;
    uint64_t epoch;
    int64_t count, at_ns, vtat_ns, stamp_ns;
    double demand;    /* units/s */
    int64_t phantom;  /* units charged while unreachable, not yet matched */
    double ph_acc;    /* fraction of a unit not yet charged */
    int64_t ph_first; /* first charge of the outstanding phantom */
    int64_t ph_last;  /* last charge time */
};

/*
 * The consumption history of a gcra or token-bucket key: what every pour
 * and admission of the last HIST_N buckets added, and the TAT the in-order
 * recurrence gives after each bucket,
 *     T_b = units_b > 0 ? max(T_{b-1}, t_b) + units_b * emission : T_{b-1}
 * with t_b the bucket's start, from a checkpoint ck (everything older).  A
 * pour dated in bucket b changes T from b on, and the idle time after b
 * absorbs it exactly as an in-order GCRA would; the change of the newest
 * T is what the live state moves by.  Without it, consumption that arrives
 * late (a node that was frozen, a delta that waited in a socket queue) was
 * poured on top of the current TAT: the node carried seconds of debt its
 * busy peers never let it repay.  The bucket start as t_b errs on the
 * strict side by at most one bucket of idle time.  2064 bytes per active
 * key, freed when the key has been idle for a horizon.
 */
struct rhist {
    int64_t newest; /* absolute index (time / HIST_W_NS) of the newest bucket */
    int64_t ck;     /* model TAT before the oldest bucket */
    int64_t units[HIST_N];
    int64_t tat[HIST_N]; /* model TAT after each bucket; ring by index % HIST_N */
};

struct rkey {
    struct rkey *prev, *next;
    struct algo_params p;  /* the limit */
    struct algo_params lp; /* this node's share of it, for decisions */
    enum replica_policy pol;
    void *state;
    void *own;       /* this node's own admissions, checked against lp (gcra and
                        token-bucket keys: a gcra state) */
    struct rhist *h; /* gcra, token-bucket: consumption history, NULL idle */
    int64_t tb_frac; /* token-bucket: ns of a history change not yet applied */
    int64_t reserve; /* gcra, token-bucket: peers' units expected in flight */
    char *key;
    size_t klen;
    struct rslot *slots;
    uint32_t nslots, cap;
    int self;            /* index of this node's slot, -1 none */
    uint64_t prev_epoch; /* this node's slot of an earlier life, poured once */
    int64_t prev_count;
    double demand;   /* this node's demand, units/s */
    int64_t req_acc; /* units requested since the last tick */
    double sent_demand;
    double share;
    int dirty;
    int64_t dirty_since; /* when it last became dirty: its wait, for aging */
    int64_t sent_count;  /* own slot's count as last sent */
    int64_t created_ns, last_change_ns;
};

/* A dirty key ranked for a flush (replica__flush). */
struct rprio {
    double score;
    struct rkey *k;
};

struct replica {
    struct table *t;
    struct rkey *head;
    struct rkey **dirty;
    size_t ndirty, dirty_cap;
    struct rprio *prio; /* dirty_cap entries: the flush's ranking */
    struct rpeer *peers;
    size_t npeers;
    struct gossip_node *g;
    struct replica_config cfg;
    char name[GOSSIP_NAME_MAX + 1];
    uint32_t key_ctr;
    int64_t now, created_ns, last_tick, next_flush, last_sent;
    int64_t hb_until; /* heartbeat every flush until then (a key learned from gossip) */
    double lag_ns;    /* EWMA of a delta's delay: receipt - its last admission */
    int synced;
    uint64_t ae_cursor;
    struct rkey *ae_pending[AE_PENDING_MAX];
    size_t ae_npending, ae_next;
    int ae_wrapped;
    struct replica_stats st;
    uint8_t pkt[PKT_MAX];
};

/* ---- small helpers ------------------------------------------------------ */

static void replica__now(struct replica *r, int64_t now)
{
    if (now > r->now)
        r->now = now;
}

/* The clock of an operation that may decide (throttle, tick): the first
 * one starts the sync timeout, and once it has passed the replica decides
 * without waiting for a full state. */
static void replica__advance(struct replica *r, int64_t now)
{
    replica__now(r, now);
    if (r->created_ns < 0)
        r->created_ns = r->now;
    if (!r->synced && r->now - r->created_ns >= r->cfg.sync_timeout_ns)
        r->synced = 1;
}

/* Emission interval in ns (time one unit takes to drain). */
static int64_t replica__emission(const struct algo_params *p)
{
    if (p->kind == ALGO_GCRA)
        return p->gcra.emission_ns;
    int64_t e = p->period_ns / p->count;
    return e > 0 ? e : 1;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    if (b < 0 && a < INT64_MIN - b)
        return INT64_MIN;
    return a + b;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return INT64_MAX;
    return r;
}

/* Units of a slot still undrained at its own last increase. */
static int64_t replica__pending(const struct algo_params *p, int64_t count, int64_t at,
                                int64_t vtat)
{
    int64_t em = replica__emission(p);
    if (vtat <= at)
        return 0;
    int64_t span = vtat - at;
    int64_t n = span / em + (span % em != 0);
    return n < count ? n : count;
}

static size_t replica__live(const struct replica *r)
{
    size_t n = r->g != NULL ? gossip_node_num_live(r->g) : r->cfg.cluster_size;
    return n > 0 ? n : 1;
}

static struct rpeer *replica__peer(struct replica *r, const char *name, size_t len, uint32_t *idx)
{
    if (len == 0 || len > GOSSIP_NAME_MAX)
        return NULL;
    for (size_t i = 0; i < r->npeers; i++) {
        if (r->peers[i].len == len && memcmp(r->peers[i].name, name, len) == 0) {
            if (idx != NULL)
                *idx = (uint32_t)i;
            return &r->peers[i];
        }
    }
    if (r->npeers >= PEERS_MAX)
        return NULL;
    struct rpeer *p = &r->peers[r->npeers];
    memset(p, 0, sizeof(*p));
    memcpy(p->name, name, len);
    p->len = len;
    p->state = -1;
    p->last_heard = r->now;
    p->last_sent = INT64_MIN;
    if (idx != NULL)
        *idx = (uint32_t)r->npeers;
    r->npeers++;
    return p;
}

static int replica__reachable(const struct replica *r, const struct rpeer *p)
{
    if (p == &r->peers[0])
        return 1;
    if (p->state == GOSSIP_MEMBER_SUSPECT || p->state == GOSSIP_MEMBER_DEAD ||
        p->state == GOSSIP_MEMBER_LEFT)
        return 0;
    return r->now - p->last_heard <= r->cfg.silence_ns;
}

/* Debt: how far the state is beyond full at now, in ns (gcra/token-bucket). */
static int64_t replica__debt(const struct rkey *k, int64_t now)
{
    struct algo_result res;
    if (k->p.kind != ALGO_GCRA && k->p.kind != ALGO_TOKEN_BUCKET)
        return 0;
    if (algo_decide(&k->p, k->state, 0, now, &res) != 0)
        return 0;
    int64_t full = sat_mul(replica__emission(&k->p), k->p.limit);
    return res.reset_after_ns > full ? res.reset_after_ns - full : 0;
}

/* ---- consumption history (struct rhist) --------------------------------- */

static int replica__has_hist(const struct algo_params *p)
{
    return p->kind == ALGO_GCRA || p->kind == ALGO_TOKEN_BUCKET;
}

/* Ring slot of bucket idx.  idx is negative while the clock is within a
 * horizon of zero (hist_oldest, from - 1), and C's % keeps the sign: the
 * plain idx % HIST_N indexed far outside the arrays. */
static size_t hist_slot(int64_t idx)
{
    return (size_t)(((idx % HIST_N) + HIST_N) % HIST_N);
}

static int64_t hist_final(const struct rhist *h)
{
    return h->tat[hist_slot(h->newest)];
}

static int64_t hist_oldest(const struct rhist *h)
{
    return h->newest - HIST_N + 1;
}

/* Moves the newest bucket to idx, folding what leaves the horizon into ck. */
static void hist_advance(struct rhist *h, int64_t idx)
{
    if (idx <= h->newest)
        return;
    if (idx - h->newest >= HIST_N) {
        h->ck = hist_final(h);
        for (size_t i = 0; i < HIST_N; i++) {
            h->units[i] = 0;
            h->tat[i] = h->ck;
        }
        h->newest = idx;
        return;
    }
    for (int64_t j = h->newest + 1; j <= idx; j++) {
        size_t s = hist_slot(j); /* held bucket j - HIST_N, the oldest */
        h->ck = h->tat[s];
        h->units[s] = 0;
        h->tat[s] = h->tat[hist_slot(j - 1)];
    }
    h->newest = idx;
}

/* Re-runs the recurrence from bucket `from` (>= oldest) after the buckets
 * [from, upto] changed; past upto it stops where a bucket's T comes out
 * unchanged (the rest depends only on it).  Stopping earlier skipped units
 * put in later buckets: a pour spread over a gap with fewer units than
 * buckets lands in the newest ones only, and was never applied at all. */
static void hist_recompute(struct rhist *h, int64_t from, int64_t upto, int64_t em)
{
    int64_t prev = from <= hist_oldest(h) ? h->ck : h->tat[hist_slot(from - 1)];
    if (from < hist_oldest(h))
        from = hist_oldest(h);
    for (int64_t j = from; j <= h->newest; j++) {
        size_t s = hist_slot(j);
        int64_t v = prev;
        if (h->units[s] > 0) {
            int64_t t = j * HIST_W_NS;
            v = sat_add(prev > t ? prev : t, sat_mul(h->units[s], em));
        }
        if (v == h->tat[s] && j > from && j > upto)
            break;
        h->tat[s] = v;
        prev = v;
    }
}

/* Adds u units (negative: takes back, never below zero in a bucket) at
 * bucket idx without recomputing; before the horizon they go to ck. */
static void hist_put(struct rhist *h, int64_t idx, int64_t u, int64_t at, int64_t em)
{
    if (idx > h->newest)
        idx = h->newest;
    if (idx < hist_oldest(h)) {
        if (u > 0)
            h->ck = sat_add(h->ck > at ? h->ck : at, sat_mul(u, em));
        else if (h->ck != GCRA_TAT_FULL)
            h->ck = sat_add(h->ck, -sat_mul(-u, em));
        return;
    }
    size_t s = hist_slot(idx);
    h->units[s] = sat_add(h->units[s], u);
    if (h->units[s] < 0)
        h->units[s] = 0;
}

/*
 * Spreads u units (either sign) evenly over the buckets of [t0, t1] and
 * re-runs the recurrence once.  Returns the change of the newest T.
 */
static int64_t hist_spread(struct rhist *h, int64_t t0, int64_t t1, int64_t u, int64_t em)
{
    int64_t i0 = t0 / HIST_W_NS, i1 = t1 / HIST_W_NS;
    if (i1 > h->newest)
        i1 = h->newest;
    if (i0 > i1)
        i0 = i1;
    if (i0 < hist_oldest(h) - 1)
        i0 = hist_oldest(h) - 1; /* one lump for everything before the horizon */
    if (i1 < i0)
        i1 = i0; /* all of [t0, t1] is before the horizon: only the lump (nb 0 divided) */
    int64_t nb = i1 - i0 + 1, per = u / nb, rem = u % nb;
    int64_t old = hist_final(h);
    for (int64_t j = i1; j >= i0; j--) {
        int64_t q = per;
        if (rem != 0) {
            q += rem > 0 ? 1 : -1;
            rem += rem > 0 ? -1 : 1;
        }
        if (q != 0)
            hist_put(h, j, q, j < hist_oldest(h) ? t0 : j * HIST_W_NS, em);
    }
    hist_recompute(h, i0, i1, em);
    int64_t nw = hist_final(h);
    if (old == GCRA_TAT_FULL) /* INT64_MAX: "from nothing", see replica__apply */
        return nw == GCRA_TAT_FULL ? 0 : INT64_MAX;
    if (nw == GCRA_TAT_FULL)
        return 0;
    return sat_add(nw, -old);
}

/* The key's history, created on first use from its live state. */
static struct rhist *replica__hist(struct replica *r, struct rkey *k)
{
    if (!replica__has_hist(&k->p))
        return NULL;
    if (k->h == NULL) {
        k->h = malloc(sizeof(*k->h));
        if (k->h == NULL)
            return NULL;
        int64_t live = GCRA_TAT_FULL;
        if (k->p.kind == ALGO_GCRA) {
            live = *(const int64_t *)k->state;
        } else {
            struct algo_result res;
            if (algo_decide(&k->p, k->state, 0, r->now, &res) == 0 && res.reset_after_ns > 0)
                live = sat_add(r->now, res.reset_after_ns);
        }
        k->h->newest = (r->now > 0 ? r->now : 0) / HIST_W_NS;
        k->h->ck = live;
        for (size_t i = 0; i < HIST_N; i++) {
            k->h->units[i] = 0;
            k->h->tat[i] = live;
        }
    }
    hist_advance(k->h, r->now / HIST_W_NS);
    return k->h;
}

/*
 * Moves the live state by d ns of TAT, the change the history computed
 * (nw: the history's newest T after it).  gcra: the TAT itself (never below
 * the history's own T when it grows: a fresh TAT has no history yet).
 * token-bucket: the same change expressed at now, in whole units (the
 * remainder is kept), as consumption or refund: only the part of the new
 * TAT beyond now matters to a bucket that is full at now.
 */
static void replica__apply(struct replica *r, struct rkey *k, int64_t d, int64_t nw)
{
    if (d == 0)
        return;
    if (k->p.kind == ALGO_GCRA) {
        int64_t *tat = k->state;
        int64_t v;
        if (d == INT64_MAX) /* the history was fresh: its T is all it knows */
            v = *tat > nw ? *tat : nw;
        else if (*tat == GCRA_TAT_FULL)
            v = d > 0 ? nw : GCRA_TAT_FULL;
        else
            v = sat_add(*tat, d);
        *tat = v;
        return;
    }
    struct algo_result res;
    int64_t em = replica__emission(&k->p);
    if (algo_decide(&k->p, k->state, 0, r->now, &res) != 0)
        return;
    /* The bucket's TAT: now + reset_after; a full bucket's is some time
     * at or before now, the history's own before this change. */
    int64_t eq = r->now;
    if (res.reset_after_ns > 0)
        eq = sat_add(r->now, res.reset_after_ns);
    else if (d != INT64_MAX && sat_add(nw, -d) < r->now)
        eq = sat_add(nw, -d);
    int64_t after = d == INT64_MAX ? nw : sat_add(eq, d);
    int64_t eff = sat_add(after > r->now ? after : r->now, -(eq > r->now ? eq : r->now));
    if (d == INT64_MAX && eff < 0)
        eff = 0;
    /* Rounded UP, the remainder (in (-em, 0]) carried to the next change.
     * The change ends eff ns past now, inside a unit: a gcra with that TAT
     * has that unit in use (remaining = floor of what is left), so the
     * bucket must too.  Rounding down left every receiver one unit a peer
     * had taken (it ends less than a unit's time after now whenever the
     * pour arrives a little after it happened), and each admitted it. */
    eff = sat_add(eff, k->tb_frac);
    int64_t rem = eff % em, n = eff / em + (rem > 0);
    k->tb_frac = rem > 0 ? rem - em : rem; /* eff - n * em, which overflows at a saturated eff */
    if (n > 0)
        algo_consume(&k->p, k->state, n, r->now);
    else if (n < 0)
        algo_refund(&k->p, k->state, -n, r->now);
}

/* Records qty units admitted here at now in the history (O(1)). */
static void replica__note_local(struct replica *r, struct rkey *k, int64_t qty)
{
    /* A history created here starts from the live state, which already
     * holds these units: adding them again made it a unit stricter than
     * the state, and every later pour was measured against that. */
    int fresh = k->h == NULL;
    struct rhist *h = replica__hist(r, k);
    if (h == NULL || fresh)
        return;
    hist_put(h, h->newest, qty, r->now, replica__emission(&k->p));
    hist_recompute(h, h->newest, h->newest, replica__emission(&k->p));
}

/*
 * Pours qty units consumed elsewhere during [t0, t1] (t0 == t1: at one
 * time); qty < 0 takes back units poured earlier (phantom).  gcra and
 * token-bucket keys go through the history, so the order in which pours
 * arrive does not matter within its horizon; windows add to the window of
 * t1.
 */
static void replica__pour_span(struct replica *r, struct rkey *k, int64_t qty, int64_t t0,
                               int64_t t1)
{
    if (qty == 0)
        return;
    if (t1 < 0)
        t1 = 0;
    if (t0 > t1 || t0 < 0)
        t0 = t1;
    struct rhist *h = replica__hist(r, k);
    if (h != NULL) {
        /* Dated after our latest clock reading (a peer's clock a little
         * ahead, or our reading a tick old): the history moves on to it. */
        hist_advance(h, t1 / HIST_W_NS);
        int64_t d = hist_spread(h, t0, t1, qty, replica__emission(&k->p));
        replica__apply(r, k, d, hist_final(h));
    } else if (qty > 0) {
        if (algo_consume(&k->p, k->state, qty, t1) != 0)
            return;
    } else {
        algo_refund(&k->p, k->state, -qty, r->now);
    }
    if (qty < 0) {
        r->st.refunded_units += (uint64_t)-qty;
        return;
    }
    r->st.pours++;
    r->st.units_poured += (uint64_t)qty;
    if (replica__debt(k, r->now) > 0)
        r->st.debt_events++;
}

static void replica__pour(struct replica *r, struct rkey *k, int64_t qty, int64_t at)
{
    if (qty > 0)
        replica__pour_span(r, k, qty, at, at);
}

static void replica__mark_dirty(struct replica *r, struct rkey *k)
{
    if (k->dirty)
        return;
    if (r->ndirty == r->dirty_cap) {
        size_t cap = r->dirty_cap ? r->dirty_cap * 2 : 64;
        struct rkey **v = realloc(r->dirty, cap * sizeof(*v));
        if (v == NULL)
            return; /* retried at the next change; the slot stays correct */
        r->dirty = v;
        struct rprio *pv = realloc(r->prio, cap * sizeof(*pv));
        if (pv == NULL)
            return;
        r->prio = pv;
        r->dirty_cap = cap;
    }
    r->dirty[r->ndirty++] = k;
    k->dirty = 1;
    k->dirty_since = r->now;
}

/* ---- keys ---------------------------------------------------------------- */

static int replica__is_window(enum algo_kind kind)
{
    return kind == ALGO_FIXED_WINDOW || kind == ALGO_SLIDING_WINDOW;
}

/* Keys whose own admissions are checked too (k->own): windows (a window
 * state under the share of the count), gcra and token-bucket (a gcra
 * state under the share of burst and rate). */
static int replica__needs_own(const struct algo_params *p)
{
    return replica__is_window(p->kind) || replica__has_hist(p);
}

static size_t replica__own_size(const struct algo_params *p)
{
    return replica__is_window(p->kind) ? algo_state_size(p) : sizeof(int64_t);
}

static void replica__own_init(const struct algo_params *p, void *own)
{
    if (replica__is_window(p->kind))
        algo_init(p, own);
    else
        *(int64_t *)own = GCRA_TAT_FULL;
}

/*
 * Allocates and initialises the states a key of limit p holds: the merged
 * state and, for keys that check their own admissions, the own state (NULL
 * otherwise).  -SLUICE_ENOMEM with nothing allocated; the caller owns both.
 */
static int replica__state_alloc(const struct algo_params *p, void **state, void **own)
{
    void *st = calloc(1, algo_state_size(p));
    void *mine = replica__needs_own(p) ? calloc(1, replica__own_size(p)) : NULL;
    if (st == NULL || (replica__needs_own(p) && mine == NULL)) {
        free(st);
        free(mine);
        return -SLUICE_ENOMEM;
    }
    algo_init(p, st);
    if (mine != NULL)
        replica__own_init(p, mine);
    *state = st;
    *own = mine;
    return 0;
}

/* Frees k's merged and own states (under k->p); the pointers dangle after. */
static void replica__state_free(struct rkey *k)
{
    algo_free(&k->p, k->state);
    free(k->state);
    if (k->own != NULL && replica__is_window(k->p.kind))
        algo_free(&k->p, k->own); /* gcra/token-bucket: a plain gcra TAT */
    free(k->own);
}

static void replica__free_key(struct rkey *k)
{
    if (k == NULL)
        return;
    replica__state_free(k);
    free(k->h);
    free(k->slots);
    free(k->key);
    free(k);
}

static void replica__table_free(void *ud, struct table_entry *e)
{
    struct replica *r = ud;
    struct rkey **pk = table_entry_value(e);
    /* An anti-entropy exchange sent in chunks keeps the keys of its next
     * chunk between calls; a key collected or evicted meanwhile must not be
     * read there (it was: a use after free under load). */
    for (size_t i = r->ae_next; i < r->ae_npending; i++)
        if (r->ae_pending[i] == *pk)
            r->ae_pending[i] = NULL;
    /* A key collected while dirty leaves the dirty array, in order. */
    if (*pk != NULL && (*pk)->dirty) {
        size_t w = 0;
        for (size_t i = 0; i < r->ndirty; i++)
            if (r->dirty[i] != *pk)
                r->dirty[w++] = r->dirty[i];
        r->ndirty = w;
    }
    replica__free_key(*pk);
    *pk = NULL;
}

static struct rkey *replica__find(struct replica *r, const char *key, size_t klen)
{
    struct table_entry *e = table_find(r->t, key, klen);
    return e != NULL ? *(struct rkey **)table_entry_value(e) : NULL;
}

static double replica__compute_share(struct replica *r, struct rkey *k)
{
    double total = k->demand, others = 0;
    for (uint32_t i = 0; i < k->nslots; i++) {
        struct rslot *s = &k->slots[i];
        if ((int)i == k->self || s->demand <= 0)
            continue;
        struct rpeer *p = &r->peers[s->peer];
        int counted = replica__reachable(r, p);
        if (!counted && k->pol == REPLICA_SHARE && p->state != GOSSIP_MEMBER_LEFT &&
            (p->unreach_since == 0 || r->now - p->unreach_since < r->cfg.phantom_max_ns))
            counted = 1;
        if (counted)
            others += s->demand;
    }
    total += others;
    if (others <= 0) {
        /* Nobody else is known to want this key: alone, unless the key is
         * young and the others may simply not have been heard yet.  A peer
         * is heard once a packet it sent half an interval after the key
         * appeared here has arrived: any packet a node sends after its own
         * first request for a key carries that key (its flush sends every
         * key asked for since the last one), so a peer that started at the
         * same time cannot look idle, and half an interval covers clocks a
         * little apart.  Only the peers not heard yet split the burst with
         * this node, so a lone consumer gets the whole burst after about
         * one interval instead of 1/N of it for LEARN_INTERVALS. */
        if (r->now - k->created_ns < LEARN_INTERVALS * r->cfg.interval_ns) {
            size_t live = replica__live(r), heard = 0;
            int64_t after = sat_add(k->created_ns, r->cfg.interval_ns / 2);
            for (size_t i = 1; i < r->npeers; i++)
                if (r->peers[i].last_sent >= after && replica__reachable(r, &r->peers[i]))
                    heard++;
            size_t unknown = heard + 1 < live ? live - heard : 1;
            return 1.0 / (double)unknown;
        }
        return 1.0;
    }
    return total > 0 ? k->demand / total : 0;
}

static int replica__own_drained(const struct rkey *k, int64_t now)
{
    if (k->own == NULL)
        return 1;
    if (replica__is_window(k->p.kind))
        return algo_drained(&k->lp, k->own, now);
    return gcra_is_drained(*(const int64_t *)k->own, now);
}

/*
 * Re-derives this node's decision parameters from its share.  gcra and
 * token-bucket: a share of the burst, checked against the merged state.
 * Windows: a share of the window's count, checked against this node's own
 * admissions (k->own) in addition to the merged state against the full
 * count.  Without it every node sees an empty window at each boundary and
 * admits its own demand until the others' deltas arrive (a gossip interval
 * or two): at 10x demand the cluster admitted about 1.7x the limit.  With
 * demand-weighted shares the nodes' own counts add up to at most the count
 * (rounding down costs at most one unit per node and window).
 */
static void replica__update_share(struct replica *r, struct rkey *k)
{
    int64_t old_em = k->own != NULL && k->lp.kind == ALGO_GCRA ? k->lp.gcra.emission_ns : 0;
    k->share = replica__compute_share(r, k);
    k->lp = k->p;
    if (replica__is_window(k->p.kind)) {
        double c = floor(k->share * (double)k->p.count);
        int64_t n = c < 1 ? 1 : (c >= (double)k->p.count ? k->p.count : (int64_t)c);
        struct algo_params wp;
        if (n != k->p.count &&
            algo_params_init(&wp, k->p.kind, k->p.burst, n, k->p.period_ns, k->p.precision) == 0)
            k->lp = wp;
        return;
    }
    if (!replica__has_hist(&k->p))
        return;
    /* gcra, token-bucket: this node's own admissions (a gcra state) under
     * its share of the burst and RATE_SLACK times its share of the rate;
     * the merged state is checked under the full limit.  Checking the
     * merged state under a share of the burst alone let the nodes with the
     * larger shares keep it beyond the smaller ones' reach: at 5 nodes the
     * smallest got 8% of its demand-weighted share.  With the rate shares,
     * the merged state has room for everyone's share; the slack absorbs
     * demand estimates that disagree a little (the merged check still
     * holds the total). */
    /* The peers' admissions this node has not heard of yet: their rate
     * (each at most its share of the rate with the slack, else its demand)
     * over the mean age of the unheard ones, the delivery delay plus half a
     * flush interval.  Checking the merged state with room for them kept
     * aside removes the overshoot of a view that is always that far behind
     * (real processes: a delta waits for a gossip round, 4-5% at 10x
     * demand; the simulator's links are faster). */
    double all_d = k->demand, inflight = 0;
    double rate_s = (double)k->p.count / (double)k->p.period_ns * NS_PER_SEC;
    for (uint32_t i = 0; i < k->nslots; i++)
        if ((int)i != k->self && k->slots[i].demand > 0 &&
            replica__reachable(r, &r->peers[k->slots[i].peer]))
            all_d += k->slots[i].demand;
    for (uint32_t i = 0; all_d > 0 && i < k->nslots; i++) {
        const struct rslot *q = &k->slots[i];
        if ((int)i == k->self || q->demand <= 0 || !replica__reachable(r, &r->peers[q->peer]))
            continue;
        double cap = q->demand / all_d * rate_s * RATE_SLACK;
        inflight += q->demand < cap ? q->demand : cap;
    }
    inflight *= (r->lag_ns + (double)r->cfg.interval_ns / 2) / NS_PER_SEC;
    k->reserve = inflight < (double)k->p.limit ? (int64_t)inflight : k->p.limit;
    double lim = floor(k->share * (double)k->p.limit);
    int64_t l = lim < 1 ? 1 : (lim >= (double)k->p.limit ? k->p.limit : (int64_t)lim);
    double rs = k->share * RATE_SLACK;
    if (rs > 1)
        rs = 1;
    if (rs < RATE_SHARE_MIN)
        rs = RATE_SHARE_MIN;
    double per = (double)k->p.period_ns / rs;
    struct algo_params lp;
    if (per < 4e18 && algo_params_init(&lp, ALGO_GCRA, l - 1, k->p.count, (int64_t)per, 0) == 0)
        k->lp = lp;
    else if (algo_params_init(&lp, ALGO_GCRA, k->p.burst, k->p.count, k->p.period_ns, 0) == 0)
        k->lp = lp;
    /* The own TAT counts units at the old rate: keep the units, not the
     * time, when the share moves (a unit taken at a tiny share must not
     * block for seconds once the share has grown). */
    int64_t *own = k->own, new_em = k->lp.gcra.emission_ns;
    if (own != NULL && old_em > 0 && new_em != old_em && *own > r->now) {
        double ahead = (double)(*own - r->now) * (double)new_em / (double)old_em;
        *own = ahead < 4e18 ? sat_add(r->now, (int64_t)ahead) : INT64_MAX;
    }
}

static int replica__same_params(const struct algo_params *a, const struct algo_params *b)
{
    return a->kind == b->kind && a->burst == b->burst && a->count == b->count &&
           a->period_ns == b->period_ns && a->precision == b->precision;
}

static int replica__new_key(struct replica *r, const char *key, size_t klen,
                            const struct algo_params *p, enum replica_policy pol, struct rkey **out)
{
    struct table_entry *e;
    if (table_count(r->t) >= r->cfg.max_keys) {
        r->st.refused_full++;
        return -SLUICE_EFULL;
    }
    struct rkey *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return -SLUICE_ENOMEM;
    k->key = malloc(klen);
    if (k->key == NULL || replica__state_alloc(p, &k->state, &k->own) != 0) {
        free(k->key);
        free(k);
        return -SLUICE_ENOMEM;
    }
    k->p = *p;
    memcpy(k->key, key, klen);
    k->klen = klen;
    k->pol = pol;
    k->self = -1;
    k->created_ns = k->last_change_ns = r->now;
    int rc = table_insert(r->t, key, klen, sizeof(struct rkey *), 0, r->now, &e);
    if (rc != 0) {
        replica__free_key(k);
        return rc;
    }
    *(struct rkey **)table_entry_value(e) = k;
    k->next = r->head;
    if (r->head != NULL)
        r->head->prev = k;
    r->head = k;
    replica__update_share(r, k);
    *out = k;
    return 0;
}

static void replica__delete_key(struct replica *r, struct rkey *k)
{
    if (k->prev != NULL)
        k->prev->next = k->next;
    else
        r->head = k->next;
    if (k->next != NULL)
        k->next->prev = k->prev;
    struct table_entry *e = table_find(r->t, k->key, k->klen);
    if (e != NULL)
        table_delete(r->t, e); /* frees k through the hook */
}

static struct rslot *replica__slot(struct rkey *k, uint32_t peer, int create)
{
    for (uint32_t i = 0; i < k->nslots; i++)
        if (k->slots[i].peer == peer)
            return &k->slots[i];
    if (!create || k->nslots >= DELTA_SLOTS_MAX)
        return NULL;
    if (k->nslots == k->cap) {
        uint32_t cap = k->cap ? k->cap * 2 : 2;
        struct rslot *v = realloc(k->slots, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        k->slots = v;
        k->cap = cap;
    }
    struct rslot *s = &k->slots[k->nslots++];
    memset(s, 0, sizeof(*s));
    s->peer = peer;
    s->at_ns = s->vtat_ns = s->stamp_ns = INT64_MIN;
    return s;
}

static struct rslot *replica__own_slot(struct replica *r, struct rkey *k)
{
    if (k->self >= 0)
        return &k->slots[k->self];
    struct rslot *s = replica__slot(k, 0, 1);
    if (s == NULL)
        return NULL;
    /* Any slot of ours already there is from an earlier life: remember it
     * as such (its counts were poured) and start this life's epoch. */
    if (s->epoch != 0 && s->epoch > k->prev_epoch) {
        k->prev_epoch = s->epoch;
        k->prev_count = s->count;
    }
    r->key_ctr++;
    s->epoch = ((uint64_t)r->cfg.boot_epoch << 32) | r->key_ctr;
    s->count = 0;
    s->vtat_ns = s->at_ns = 0;
    s->stamp_ns = r->now;
    k->self = (int)(s - k->slots);
    return s;
}

/* ---- create / destroy ---------------------------------------------------- */

int replica_create(struct replica **out, const struct replica_config *cfg)
{
    if (out == NULL || cfg == NULL || cfg->node_name == NULL)
        return -SLUICE_EINVAL;
    size_t nlen = strlen(cfg->node_name);
    if (nlen == 0 || nlen > GOSSIP_NAME_MAX)
        return -SLUICE_EINVAL;
    struct replica *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -SLUICE_ENOMEM;
    r->cfg = *cfg;
    memcpy(r->name, cfg->node_name, nlen);
    r->cfg.node_name = r->name;
    if (r->cfg.interval_ns <= 0)
        r->cfg.interval_ns = 100 * 1000000LL;
    if (r->cfg.max_keys == 0)
        r->cfg.max_keys = 1u << 20;
    if (r->cfg.sync_timeout_ns < 0)
        r->cfg.sync_timeout_ns = SYNC_DEFAULT;
    if (r->cfg.gc_grace_ns <= 0)
        r->cfg.gc_grace_ns = 30 * NS_PER_SEC;
    if (r->cfg.silence_ns <= 0)
        r->cfg.silence_ns = 5 * r->cfg.interval_ns;
    if (r->cfg.phantom_max_ns <= 0)
        r->cfg.phantom_max_ns = 60 * NS_PER_SEC;
    if (r->cfg.max_payload == 0)
        r->cfg.max_payload = 1200;
    if (r->cfg.max_payload > PKT_MAX)
        r->cfg.max_payload = PKT_MAX;
    r->synced = r->cfg.sync_timeout_ns == 0;
    r->now = r->created_ns = r->last_tick = -1;
    struct table_config tc = {.free_value = replica__table_free, .ud = r};
    r->peers = calloc(PEERS_MAX, sizeof(*r->peers));
    if (r->peers == NULL || table_create(&r->t, &tc) != 0) {
        free(r->peers);
        free(r);
        return -SLUICE_ENOMEM;
    }
    r->now = 0;
    replica__peer(r, r->name, nlen, NULL);
    r->now = -1;
    *out = r;
    return 0;
}

void replica_destroy(struct replica *r)
{
    if (r == NULL)
        return;
    r->ndirty = 0; /* every key goes: no need to unlink each from the array */
    table_destroy(r->t);
    free(r->dirty);
    free(r->prio);
    free(r->peers);
    free(r);
}

void replica_attach(struct replica *r, struct gossip_node *g)
{
    r->g = g;
}

static void replica__on_payload(void *ud, const char *from, const uint8_t *buf, size_t len)
{
    replica_receive(ud, from, buf, len);
}

static size_t replica__state_fill(void *ud, uint64_t *cursor, uint8_t *buf, size_t cap)
{
    return replica_state_fill(ud, cursor, buf, cap);
}

static void replica__state_merge(void *ud, const char *from, const uint8_t *buf, size_t len)
{
    struct replica *r = ud;
    if (replica_receive(r, from, buf, len) == 0) {
        r->st.state_chunks_merged++;
        r->synced = 1;
    }
}

static void replica__on_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    replica_member_event(ud, ev, m->name);
}

void replica_callbacks(struct replica *r, struct gossip_callbacks *cb)
{
    cb->ud = r;
    cb->on_payload = replica__on_payload;
    cb->state_fill = replica__state_fill;
    cb->state_merge = replica__state_merge;
    cb->on_event = replica__on_event;
}

void replica_member_event(struct replica *r, enum gossip_event ev, const char *name)
{
    struct rpeer *p = replica__peer(r, name, strlen(name), NULL);
    if (p == NULL || p == &r->peers[0])
        return;
    switch (ev) {
    case GOSSIP_EVENT_JOIN:
    case GOSSIP_EVENT_ALIVE:
        p->state = GOSSIP_MEMBER_ALIVE;
        p->last_heard = r->now;
        break;
    /* A peer whose deltas arrived within the last two intervals (it sends
     * at least a heartbeat that often) is alive whatever a late suspicion
     * says, e.g. the death of a restarted node's previous life. */
    case GOSSIP_EVENT_SUSPECT:
        if (r->now - p->last_heard > 2 * r->cfg.interval_ns)
            p->state = GOSSIP_MEMBER_SUSPECT;
        break;
    case GOSSIP_EVENT_DEAD:
        if (r->now - p->last_heard > 2 * r->cfg.interval_ns)
            p->state = GOSSIP_MEMBER_DEAD;
        break;
    case GOSSIP_EVENT_LEFT:
        p->state = GOSSIP_MEMBER_LEFT;
        break;
    case GOSSIP_EVENT_REAP:
        break;
    }
}

void replica_mark_synced(struct replica *r)
{
    r->synced = 1;
}

int replica_synced(const struct replica *r)
{
    return r->synced;
}

/* ---- decisions ----------------------------------------------------------- */

/*
 * Decides qty (0 peeks) on k's state.  Windows: qty must fit both the merged
 * window under the full count and this node's own admissions under its
 * share (see replica__update_share); both are charged or neither, and
 * remaining is the smaller of the two.  A refusal that only the share
 * causes retries when this node's own window has moved on (its share may
 * have grown by then).  Fails only for arguments algo_decide refuses.
 */
static int replica__decide(struct rkey *k, int64_t qty, int64_t now, struct algo_result *out)
{
    struct algo_result mine;
    int64_t d_all, d_own;
    if (k->own == NULL)
        return algo_decide(&k->lp, k->state, qty, now, out);
    /* gcra, token-bucket: the merged state must also have room for what
     * the peers have admitted and not yet told (see replica__update_share). */
    int64_t extra = 0;
    if (qty > 0 && !replica__is_window(k->p.kind))
        extra = k->reserve < k->p.limit - qty ? k->reserve : k->p.limit - qty;
    if (extra < 0)
        extra = 0;
    int rc = algo_earliest_fit(&k->p, k->state, qty + extra, now, &d_all);
    if (rc == 0)
        rc = algo_earliest_fit(&k->lp, k->own, qty, now, &d_own);
    if (rc != 0)
        return rc;
    int fits = d_all == 0 && d_own == 0;
    /* Peek both first: neither is charged unless both can be. */
    rc = algo_decide(&k->p, k->state, 0, now, out);
    if (rc == 0)
        rc = algo_decide(&k->lp, k->own, 0, now, &mine);
    if (rc != 0)
        return rc;
    if (fits && qty > 0) {
        /* Windows cannot refuse what earliest_fit said fits, nor fail. */
        if (algo_decide(&k->p, k->state, qty, now, out) != 0 ||
            algo_decide(&k->lp, k->own, qty, now, &mine) != 0)
            return -SLUICE_EINVAL;
    }
    if (mine.remaining < out->remaining)
        out->remaining = mine.remaining;
    if (extra > 0 && fits)
        out->remaining = out->remaining > extra ? out->remaining - extra : 0;
    if (!fits) {
        out->limited = 1;
        if (d_all == ALGO_NEVER)
            out->retry_after_ns = ALGO_NEVER;
        else if (d_own == ALGO_NEVER)
            out->retry_after_ns = mine.reset_after_ns > d_all ? mine.reset_after_ns : d_all;
        else
            out->retry_after_ns = d_own > d_all ? d_own : d_all;
        if (out->retry_after_ns == 0)
            out->retry_after_ns = 1;
    }
    return 0;
}

int replica_throttle(struct replica *r, const char *key, size_t klen, const struct algo_params *p,
                     enum replica_policy pol, int64_t qty, int64_t now_ns, struct algo_result *out)
{
    if (r == NULL || key == NULL || klen == 0 || klen > TABLE_MAX_KEY || p == NULL || out == NULL ||
        qty < 0 || now_ns < 0 || algo_state_size(p) == 0 || !algo_can_be_global(p->kind) ||
        (pol != REPLICA_OPTIMISTIC && pol != REPLICA_SHARE))
        return -SLUICE_EINVAL;
    replica__advance(r, now_ns);
    if (!r->synced) {
        /* Fail closed until the cluster's counts are known (bounded). */
        memset(out, 0, sizeof(*out));
        out->limited = 1;
        out->limit = p->limit;
        out->retry_after_ns = r->created_ns + r->cfg.sync_timeout_ns - r->now;
        out->reset_after_ns = out->retry_after_ns;
        r->st.decisions++;
        r->st.limited++;
        r->st.unsynced_denials++;
        return 0;
    }
    struct rkey *k = replica__find(r, key, klen);
    if (k == NULL) {
        int rc = replica__new_key(r, key, klen, p, pol, &k);
        if (rc != 0)
            return rc;
    } else if (!replica__same_params(&k->p, p) || k->pol != pol) {
        if (k->p.kind != p->kind || algo_state_size(&k->p) != algo_state_size(p)) {
            void *st, *mine;
            if (replica__state_alloc(p, &st, &mine) != 0)
                return -SLUICE_ENOMEM;
            replica__state_free(k);
            k->state = st;
            k->own = mine;
            free(k->h); /* a new state: its history starts now */
            k->h = NULL;
        }
        k->p = *p;
        k->pol = pol;
        replica__update_share(r, k);
    } else {
        /* A fixed window's phase (calendar alignment) is local to this node's
         * clock and not on the wire: the local caller's holds. */
        k->p.phase_ns = p->phase_ns;
    }
    struct rslot *own = replica__own_slot(r, k);
    if (own == NULL)
        return -SLUICE_ENOMEM;
    int rc = replica__decide(k, qty, r->now, out);
    if (rc != 0)
        return rc;
    out->limit = k->p.limit;
    k->req_acc = sat_add(k->req_acc, qty);
    r->st.decisions++;
    if (out->limited) {
        r->st.limited++;
        return 0;
    }
    if (qty > 0) {
        replica__note_local(r, k, qty);
        int64_t base = own->vtat_ns > r->now ? own->vtat_ns : r->now;
        own->count = sat_add(own->count, qty);
        own->at_ns = own->stamp_ns = r->now;
        own->vtat_ns = sat_add(base, sat_mul(qty, replica__emission(&k->p)));
        k->last_change_ns = r->now;
        replica__mark_dirty(r, k);
    }
    return 0;
}

/* ---- merge --------------------------------------------------------------- */

struct merge_ctx {
    struct replica *r;
    const char *from;
    size_t from_len;
    enum delta_type type;
    int64_t sent; /* the sender's clock when it sent the packet */
    /* The entry being merged and the sender's TAT to apply after its slots. */
    const char *cur;
    struct delta_entry tat_entry;
    int tat_pending;
};

/* After all slots of a STATE entry were merged (their increments poured),
 * the sender's merged view is a lower bound of the cluster's consumption:
 * TAT = max(TAT, sender's).  Never adds, so nothing is counted twice; it
 * fills in what per-slot pours cannot know (a receiver that never saw the
 * key, e.g. after a restart, learns the whole recent history at once). */
static void replica__apply_tat(struct merge_ctx *m)
{
    struct algo_params p;
    const struct delta_entry *e = &m->tat_entry;
    if (!m->tat_pending)
        return;
    m->tat_pending = 0;
    struct rkey *k = replica__find(m->r, e->key, e->klen);
    if (k == NULL || k->p.kind != ALGO_GCRA ||
        algo_params_init(&p, (enum algo_kind)e->kind, e->burst, e->count, e->period_ns,
                         e->precision) != 0 ||
        !replica__same_params(&p, &k->p))
        return;
    int64_t *tat = k->state;
    if (e->tat_ns > *tat && k->h == NULL) {
        *tat = e->tat_ns;
        if (e->tat_ns > m->r->now) /* a drained TAT changes nothing: no new grace */
            k->last_change_ns = m->r->now;
    }
}

/*
 * A record of the slot's node made at `stamp` (any epoch: a restarted node's
 * new life too) replaces the phantom charged for it up to stamp: that
 * phantom is taken back where it was charged (spread evenly over
 * [ph_first, ph_last], the part up to stamp), and the real counts are
 * poured at their own times by the caller.  gcra/token-bucket keys take it
 * back through the history, exactly within its horizon; windows refund at
 * now.  Phantom charged after stamp stays until a newer record comes.
 */
static void replica__settle(struct replica *r, struct rkey *k, struct rslot *s, int64_t stamp)
{
    if (s->phantom <= 0 || stamp < s->ph_first)
        return;
    int64_t back = s->phantom, t1 = s->ph_last;
    if (stamp < s->ph_last && s->ph_last > s->ph_first) {
        double f = (double)(stamp - s->ph_first) / (double)(s->ph_last - s->ph_first);
        back = (int64_t)((double)s->phantom * f);
        t1 = stamp;
    }
    if (back <= 0)
        return;
    replica__pour_span(r, k, -back, s->ph_first, t1);
    s->phantom -= back;
    if (s->phantom > 0) {
        s->ph_first = t1;
    } else {
        s->phantom = 0;
        s->ph_acc = 0;
    }
}

/*
 * A time from the wire, clamped to [now - WIRE_SPAN_NS, now + ahead].
 * Times travel relative to the sender's clock and are rebuilt saturated, so
 * any int64 can arrive: a sender's "never" (INT64_MIN) comes back as a time
 * near INT64_MIN, a saturated horizon near INT64_MAX, and a hostile packet
 * anything.  Clamping rather than rejecting keeps what the legitimate
 * extremes mean (drained long ago, busy far ahead) while every difference
 * of two clamped times, or of one and now, fits in an int64 with room to
 * spare: the merge and pour paths subtract them freely.  Event times (an
 * increase, a record, a send) get ahead = WIRE_AHEAD_NS, far more than any
 * clock skew or a clock reading a few ticks old: a unit dated years ahead would move the
 * consumption history there and hold the key for as long.  Horizons (vtat, TAT) may lie far ahead
 * and get WIRE_SPAN_NS.  Never fails.
 */
static int64_t replica__wire_time(const struct replica *r, int64_t t, int64_t ahead)
{
    int64_t lo = sat_add(r->now, -WIRE_SPAN_NS), hi = sat_add(r->now, ahead);
    return t < lo ? lo : t > hi ? hi : t;
}

static void replica__merge_slot(void *ud, const struct delta_entry *e, const struct delta_slot *wd)
{
    struct merge_ctx *m = ud;
    struct replica *r = m->r;
    struct delta_slot dc = *wd;
    const struct delta_slot *d = &dc;
    dc.at_ns = replica__wire_time(r, wd->at_ns, WIRE_AHEAD_NS);
    dc.vtat_ns = replica__wire_time(r, wd->vtat_ns, WIRE_SPAN_NS);
    dc.stamp_ns = replica__wire_time(r, wd->stamp_ns, WIRE_AHEAD_NS);
    struct algo_params p;
    uint32_t pi;
    const char *name = d->node_len ? d->node : m->from;
    size_t nlen = d->node_len ? d->node_len : m->from_len;
    if (algo_params_init(&p, (enum algo_kind)e->kind, e->burst, e->count, e->period_ns,
                         e->precision) != 0 ||
        !algo_can_be_global(p.kind) || e->policy > REPLICA_SHARE)
        return;
    if (e->key != m->cur) {
        replica__apply_tat(m);
        m->cur = e->key;
        if (m->type == DELTA_T_STATE && e->has_tat && p.kind == ALGO_GCRA) {
            m->tat_entry = *e;
            m->tat_entry.tat_ns = replica__wire_time(r, e->tat_ns, WIRE_SPAN_NS);
            m->tat_pending = 1;
        }
    }
    struct rpeer *peer = replica__peer(r, name, nlen, &pi);
    if (peer == NULL)
        return;
    r->st.slots_merged++;
    struct rkey *k = replica__find(r, e->key, e->klen);
    int64_t pending = replica__pending(&p, d->count, d->at_ns, d->vtat_ns);
    if (k == NULL) {
        /* Build the key only if the slot still matters now: units not yet
         * drained (they will be poured), or demand behind units admitted
         * within the grace (the origin is using the key: its demand sets
         * the shares).  A record of an idle key (drained units, a demand
         * estimate that decays for minutes after the last admission) is
         * not enough: rebuilding on it brought keys every node had
         * collected back from the anti-entropy of a peer still holding
         * them, each for a new grace.  Wire times are clamped, so
         * r->now - d->at_ns cannot overflow. */
        int live = d->vtat_ns > r->now ||
                   (d->demand_milli > 0 && r->now - d->at_ns < r->cfg.gc_grace_ns) ||
                   (m->type == DELTA_T_STATE && e->has_tat && e->tat_ns > r->now);
        if (!live)
            return;
        if (replica__new_key(r, e->key, e->klen, &p, (enum replica_policy)e->policy, &k) != 0)
            return;
        /* The origin may be sharing out a young key's burst until every
         * peer is heard (replica__compute_share): tell it soon that this
         * node is here, and idle for the key. */
        r->hb_until = sat_add(r->now, LEARN_INTERVALS * r->cfg.interval_ns);
    }
    double demand = (double)d->demand_milli / 1000.0;
    if (pi == 0) {
        /* Our own slot as a peer holds it: the current epoch is ours to
         * know; an earlier life's is poured once. */
        if (k->self >= 0 && d->epoch >= k->slots[k->self].epoch)
            return;
        if (d->epoch > k->prev_epoch) {
            k->prev_epoch = d->epoch;
            k->prev_count = d->count;
            replica__pour(r, k, pending, d->at_ns);
            if (pending > 0)
                k->last_change_ns = r->now;
        } else if (d->epoch == k->prev_epoch && d->count > k->prev_count) {
            replica__pour(r, k, d->count - k->prev_count, d->at_ns);
            k->prev_count = d->count;
            k->last_change_ns = r->now;
        }
        return;
    }
    struct rslot *s = replica__slot(k, pi, 1);
    if (s == NULL)
        return;
    int64_t add = -1, from = d->at_ns;
    if (d->epoch > s->epoch) {
        add = pending; /* a new epoch pours from zero */
        s->epoch = d->epoch;
        s->count = d->count;
        s->at_ns = d->at_ns;
        s->vtat_ns = d->vtat_ns;
    } else if (d->epoch == s->epoch && d->count > s->count) {
        add = d->count - s->count;
        /* Units admitted since the last record we saw.  After a gap (lost
         * deltas, a partition) they span it: spread them over it rather
         * than pile them at its end, where they would be a debt that the
         * time already passed should have repaid. */
        if (s->at_ns != INT64_MIN && d->at_ns - s->at_ns > 2 * r->cfg.interval_ns)
            from = s->at_ns;
        s->count = d->count;
        s->at_ns = d->at_ns;
        s->vtat_ns = d->vtat_ns;
    }
    /* Only units poured restart the grace: a record carrying no growth
     * (a fresher stamp, a demand estimate decaying after the load stopped,
     * a known epoch re-sent by anti-entropy) leaves the state as it was,
     * and refreshing on it kept idle keys alive on every peer for as long
     * as any peer kept talking about them. */
    int changed = add > 0;
    if (d->epoch >= s->epoch && d->stamp_ns > s->stamp_ns) {
        s->stamp_ns = d->stamp_ns;
        s->demand = demand;
    }
    if (add < 0)
        add = 0;
    if (d->epoch >= s->epoch) {
        /* The sender's own slot is current as of the packet. */
        int64_t stamp = d->stamp_ns;
        if (nlen == m->from_len && memcmp(name, m->from, nlen) == 0 && m->sent > stamp)
            stamp = m->sent;
        replica__settle(r, k, s, stamp);
    }
    if (add > 0) {
        replica__pour_span(r, k, add, from, d->at_ns);
        if (m->type == DELTA_T_DELTA && d->at_ns != INT64_MIN) {
            double lag = (double)(r->now - d->at_ns), top = 4.0 * (double)r->cfg.interval_ns;
            r->lag_ns += 0.05 * ((lag < 0 ? 0 : lag > top ? top : lag) - r->lag_ns);
        }
    }
    if (changed)
        k->last_change_ns = r->now;
}

int replica_receive(struct replica *r, const char *from, const uint8_t *buf, size_t len)
{
    struct merge_ctx m = {r, from, from != NULL ? strlen(from) : 0, DELTA_T_DELTA, 0, NULL, {0}, 0};
    enum delta_type type;
    int64_t sent;
    if (m.from_len == 0 || m.from_len > GOSSIP_NAME_MAX) {
        r->st.bad_packets++;
        return -SLUICE_EINVAL;
    }
    int rc = delta_decode(buf, len, &type, &sent, NULL, NULL);
    if (rc != 0) {
        r->st.bad_packets++;
        return rc;
    }
    sent = replica__wire_time(r, sent, WIRE_AHEAD_NS);
    struct rpeer *p = replica__peer(r, from, m.from_len, NULL);
    if (p != NULL && p != &r->peers[0]) {
        p->last_heard = r->now;
        if (sent > p->last_sent)
            p->last_sent = sent;
        if (p->state != GOSSIP_MEMBER_LEFT)
            p->state = GOSSIP_MEMBER_ALIVE;
    }
    m.type = type;
    m.sent = sent;
    if (type == DELTA_T_DELTA) {
        r->st.deltas_received++;
        r->st.delta_bytes_received += len;
    }
    rc = delta_decode(buf, len, NULL, NULL, replica__merge_slot, &m);
    replica__apply_tat(&m);
    return rc;
}

/* ---- delta flush --------------------------------------------------------- */

static size_t replica__max_payload(const struct replica *r)
{
    size_t cap = r->cfg.max_payload;
    if (r->g != NULL) {
        size_t g = gossip_node_max_payload(r->g);
        cap = g < PKT_MAX ? g : PKT_MAX;
    }
    return cap;
}

static void replica__send(struct replica *r, struct delta_writer *w)
{
    size_t len = delta_writer_finish(w);
    if (len == 0)
        return;
    int rc = -1;
    if (r->g != NULL)
        rc = gossip_node_broadcast(r->g, w->buf, len);
    else if (r->cfg.broadcast != NULL)
        rc = r->cfg.broadcast(r->cfg.broadcast_ud, w->buf, len);
    if (rc == 0) {
        r->st.deltas_sent++;
        r->st.delta_entries_sent += w->nentries;
        r->st.delta_bytes_sent += len;
    }
    r->last_sent = r->now;
}

static void replica__entry(const struct rkey *k, struct delta_entry *e)
{
    e->key = k->key;
    e->klen = k->klen;
    e->kind = (uint8_t)k->p.kind;
    e->policy = (uint8_t)k->pol;
    e->burst = k->p.burst;
    e->count = k->p.count;
    e->period_ns = k->p.period_ns;
    e->precision = k->p.kind == ALGO_SLIDING_WINDOW ? k->p.precision : 0;
    e->has_tat = 0;
    e->tat_ns = 0;
}

static uint64_t replica__milli(double d)
{
    if (!(d > 0))
        return 0;
    if (d > 1e15)
        return (uint64_t)1e18;
    return (uint64_t)llround(d * 1000.0);
}

static void replica__slot_wire(const struct replica *r, const struct rkey *k, const struct rslot *s,
                               int own_anon, struct delta_slot *d)
{
    const struct rpeer *p = &r->peers[s->peer];
    d->node = p->name;
    d->node_len = (own_anon && s->peer == 0) ? 0 : p->len;
    d->epoch = s->epoch;
    d->count = s->count;
    d->at_ns = s->at_ns;
    d->vtat_ns = s->vtat_ns;
    d->stamp_ns = s->stamp_ns;
    d->demand_milli = replica__milli(s->peer == 0 ? k->demand : s->demand);
}

/* Bytes of deltas one flush may hand to the channel (replica.h, "Flush
 * budget"); SIZE_MAX without libgossip unless flush_bytes is set. */
static size_t replica__budget(const struct replica *r, size_t cap)
{
    if (r->cfg.flush_bytes > 0)
        return r->cfg.flush_bytes;
    if (r->g == NULL)
        return SIZE_MAX;
    size_t fan = r->cfg.gossip_fanout > 0 ? (size_t)r->cfg.gossip_fanout : 3;
    size_t mult = r->cfg.retransmit_mult > 0 ? (size_t)r->cfg.retransmit_mult : 4;
    size_t lg = 0;
    for (size_t x = replica__live(r) + 1; x > 1; x = (x + 9) / 10)
        lg++; /* ceil(log10(N + 1)), as libgossip counts transmits */
    size_t b = fan * cap / (mult * (lg > 0 ? lg : 1));
    return b > cap / 4 ? b : cap / 4;
}

/* k's demand over the cluster, units/s: this node's estimate and every
 * peer slot's last reported one, reachable or not. */
static double replica__cluster_demand(const struct rkey *k)
{
    double d = k->demand;
    for (uint32_t i = 0; i < k->nslots; i++)
        if ((int)i != k->self)
            d += k->slots[i].demand;
    return d;
}

/* Pressure of a dirty key: >= 0.5 when it must go now (its cluster demand
 * is half its rate or more, or its unsent units half its burst), else its
 * wait in intervals scaled below 0.5, so the longest waiting go first. */
static double replica__pressure(const struct replica *r, const struct rkey *k)
{
    double rate = (double)k->p.count * (double)NS_PER_SEC / (double)k->p.period_ns;
    double demand = replica__cluster_demand(k);
    double p = rate > 0 ? demand / rate : 1;
    int64_t burst = k->p.burst > 0 ? k->p.burst : k->p.count;
    double u = (double)(k->slots[k->self].count - k->sent_count) / (double)(burst > 0 ? burst : 1);
    if (u > p)
        p = u;
    if (p >= 0.5)
        return 1.0 + p;
    double wait = (double)(r->now - k->dirty_since) / (double)r->cfg.interval_ns;
    return 0.49 * wait / (1.0 + wait);
}

static int replica__prio_cmp(const void *a, const void *b)
{
    double x = ((const struct rprio *)a)->score, y = ((const struct rprio *)b)->score;
    return x > y ? -1 : x < y;
}

struct flush_ctx {
    struct delta_writer w;
    size_t cap, used; /* bytes handed to the channel this flush */
};

/* Adds k's own slot, sending the packet first when it is full. */
static void replica__flush_key(struct replica *r, struct flush_ctx *f, struct rkey *k)
{
    struct delta_entry e;
    struct delta_slot d;
    replica__entry(k, &e);
    replica__slot_wire(r, k, &k->slots[k->self], 1, &d);
    int rc = delta_writer_add(&f->w, &e, &d, 1);
    if (rc == -SLUICE_ETOOBIG && f->w.nentries > 0) {
        f->used += f->w.len;
        replica__send(r, &f->w);
        delta_writer_init(&f->w, r->pkt, f->cap, DELTA_T_DELTA, r->now);
        rc = delta_writer_add(&f->w, &e, &d, 1);
    }
    if (rc != 0)
        r->st.bad_packets++; /* a key too long for any payload */
    k->dirty = 0;
    k->sent_demand = k->demand;
    k->sent_count = k->slots[k->self].count;
}

static void replica__flush(struct replica *r)
{
    struct flush_ctx f;
    f.cap = replica__max_payload(r);
    f.used = 0;
    int can_send = r->g != NULL || r->cfg.broadcast != NULL;
    size_t budget = replica__budget(r, f.cap);
    delta_writer_init(&f.w, r->pkt, f.cap, DELTA_T_DELTA, r->now);
    size_t n = 0;
    for (size_t i = 0; i < r->ndirty; i++) {
        struct rkey *k = r->dirty[i];
        if (k->self < 0 || !can_send) {
            k->dirty = 0;
            continue;
        }
        r->prio[n].k = k;
        r->prio[n].score = budget == SIZE_MAX ? 0 : replica__pressure(r, k);
        n++;
    }
    if (budget != SIZE_MAX && n > 1)
        qsort(r->prio, n, sizeof(*r->prio), replica__prio_cmp);
    /* Pressing keys up to 3/4 of the budget, then the longest waiting,
     * then pressing ones again with whatever is left. */
    size_t hot = budget == SIZE_MAX ? SIZE_MAX : budget - budget / 4;
    for (int pass = 0; pass < 3; pass++) {
        size_t lim = pass == 0 ? hot : budget;
        for (size_t i = 0; i < n; i++) {
            struct rkey *k = r->prio[i].k;
            int pressing = r->prio[i].score >= 1.0;
            if (!k->dirty || (pass == 1 && pressing) ||
                (pass != 1 && !pressing && budget != SIZE_MAX))
                continue;
            if (f.used + f.w.len >= lim)
                break;
            replica__flush_key(r, &f, k);
        }
    }
    /* Keys not sent stay dirty, in their order of arrival. */
    size_t w = 0;
    for (size_t i = 0; i < r->ndirty; i++)
        if (r->dirty[i]->dirty)
            r->dirty[w++] = r->dirty[i];
    r->ndirty = w;
    if (!can_send)
        return;
    /* A heartbeat keeps silence meaningful for partition detection, also
     * from a node that holds no key: its peers may still hold keys with
     * its slot, and a silence there charged phantom for it. */
    if (f.w.nentries > 0 || r->now < r->hb_until ||
        (r->npeers > 1 && r->now - r->last_sent >= 2 * r->cfg.interval_ns))
        replica__send(r, &f.w);
}

/* ---- anti-entropy -------------------------------------------------------- */

static void replica__ae_collect(void *ud, const struct table_entry *e)
{
    struct replica *r = ud;
    if (r->ae_npending < AE_PENDING_MAX)
        r->ae_pending[r->ae_npending++] =
            *(struct rkey *const *)table_entry_value((struct table_entry *)e);
}

/* Writes k with all its slots; -SLUICE_ETOOBIG if it does not fit. */
static int replica__ae_write(struct replica *r, struct delta_writer *w, const struct rkey *k)
{
    struct delta_slot ds[64];
    struct delta_entry e;
    size_t n = 0;
    replica__entry(k, &e);
    if (k->p.kind == ALGO_GCRA) {
        e.has_tat = 1;
        e.tat_ns = *(const int64_t *)k->state;
    }
    for (uint32_t i = 0; i < k->nslots && n < sizeof(ds) / sizeof(ds[0]); i++) {
        if (k->slots[i].epoch == 0)
            continue;
        replica__slot_wire(r, k, &k->slots[i], 1, &ds[n++]);
    }
    if (n == 0)
        return 0;
    return delta_writer_add(w, &e, ds, n);
}

size_t replica_state_fill(struct replica *r, uint64_t *cursor, uint8_t *buf, size_t cap)
{
    struct delta_writer w;
    if (*cursor == 0) {
        /* A new exchange continues the rotation where the last one stopped. */
        r->ae_npending = r->ae_next = 0;
        r->ae_wrapped = 0;
        *cursor = 1;
    } else if (*cursor == 2) {
        return 0;
    }
    if (table_count(r->t) == 0)
        return 0;
    delta_writer_init(&w, buf, cap, DELTA_T_STATE, r->now);
    for (;;) {
        while (r->ae_next < r->ae_npending) {
            if (r->ae_pending[r->ae_next] == NULL) { /* freed since collected */
                r->ae_next++;
                continue;
            }
            int rc = replica__ae_write(r, &w, r->ae_pending[r->ae_next]);
            if (rc == -SLUICE_ETOOBIG && w.nentries > 0)
                goto done; /* next chunk */
            r->ae_next++;
        }
        r->ae_npending = r->ae_next = 0;
        if (r->ae_wrapped) {
            *cursor = 2;
            break;
        }
        r->ae_cursor = table_scan(r->t, r->ae_cursor, 8, replica__ae_collect, r);
        if (r->ae_cursor == 0)
            r->ae_wrapped = 1;
    }
done:
    if (w.nentries == 0)
        return 0;
    r->st.state_chunks_sent++;
    return delta_writer_finish(&w);
}

/* ---- tick ---------------------------------------------------------------- */

static void replica__phantom(struct replica *r, struct rkey *k, int64_t dt)
{
    double total = replica__cluster_demand(k);
    if (total <= 0)
        return;
    double rate = (double)k->p.count / (double)k->p.period_ns; /* units per ns */
    for (uint32_t i = 0; i < k->nslots; i++) {
        struct rslot *s = &k->slots[i];
        struct rpeer *p = &r->peers[s->peer];
        if ((int)i == k->self || s->peer == 0 || s->demand <= 0 || replica__reachable(r, p) ||
            p->state == GOSSIP_MEMBER_LEFT || p->unreach_since == 0 ||
            r->now - p->unreach_since >= r->cfg.phantom_max_ns)
            continue;
        /* Only the time since it became unreachable: a tick that comes
         * late (this node was frozen itself) charges nothing for the time
         * nobody was heard. */
        int64_t span = r->now - p->unreach_since;
        if (span > dt)
            span = dt;
        s->ph_acc += s->demand / total * rate * (double)span;
        if (s->ph_acc >= 1) {
            int64_t n = (int64_t)s->ph_acc;
            s->ph_acc -= (double)n;
            replica__pour(r, k, n, r->now);
            if (s->phantom <= 0)
                s->ph_first = r->now;
            s->phantom = sat_add(s->phantom, n);
            s->ph_last = r->now;
            r->st.phantom_units += (uint64_t)n;
        }
    }
}

/*
 * Whether k can be dropped: nothing requested since the last tick, no
 * units poured or admitted for the grace, no phantom to take back, and the
 * state drained at now.  A dirty key blocks only while its own slot holds
 * units not yet sent; a record dirty for a new demand estimate or stamp
 * alone goes with the key (its peers lose nothing a pour would need, and
 * the decaying demand of thousands of idle keys re-marked them dirty
 * faster than the flush budget drained them: they were never collected).
 */
static int replica__collectable(const struct replica *r, const struct rkey *k)
{
    if (k->req_acc > 0 || r->now - k->last_change_ns < r->cfg.gc_grace_ns)
        return 0;
    if (k->dirty && k->self >= 0 && k->slots[k->self].count != k->sent_count)
        return 0;
    /* Phantom not taken back blocks only while it is recent: once the
     * state has drained past it a refund cannot change it, and the peer
     * that would settle it may have collected the key and say no more. */
    for (uint32_t i = 0; i < k->nslots; i++)
        if (k->slots[i].phantom > 0 && r->now - k->slots[i].ph_last < r->cfg.gc_grace_ns)
            return 0;
    return algo_drained(&k->p, k->state, r->now) && replica__own_drained(k, r->now);
}

void replica_tick(struct replica *r, int64_t now_ns)
{
    replica__advance(r, now_ns);
    int64_t dt = r->last_tick >= 0 ? r->now - r->last_tick : 0;
    r->last_tick = r->now;
    int back = 0;
    for (size_t i = 1; i < r->npeers; i++) {
        struct rpeer *p = &r->peers[i];
        if (replica__reachable(r, p)) {
            back |= p->unreach_since != 0;
            p->unreach_since = 0;
        } else if (p->unreach_since == 0) {
            p->unreach_since = r->now;
        }
    }
    /* A peer that comes back (a healed partition, a thawed or restarted
     * node) may have charged phantom for us: re-send our own slots with a
     * fresh stamp, so it can take that phantom back even for keys we have
     * not admitted anything on since (a record older than the charge
     * cannot settle it). */
    if (back)
        for (struct rkey *q = r->head; q != NULL; q = q->next)
            if (q->self >= 0) {
                q->slots[q->self].stamp_ns = r->now;
                replica__mark_dirty(r, q);
            }
    double alpha = dt > 0 ? 1.0 - exp(-(double)dt / (double)DEMAND_TAU_NS) : 0;
    struct rkey *k = r->head;
    while (k != NULL) {
        struct rkey *next = k->next;
        if (dt > 0) {
            double inst = (double)k->req_acc * (double)NS_PER_SEC / (double)dt;
            k->demand += alpha * (inst - k->demand);
            if (k->demand < 1e-3)
                k->demand = 0;
            k->req_acc = 0;
            double diff = fabs(k->demand - k->sent_demand);
            if (k->self >= 0 && diff > 0.25 * (k->sent_demand > 1 ? k->sent_demand : 1)) {
                k->slots[k->self].stamp_ns = r->now;
                replica__mark_dirty(r, k);
            }
            if (k->pol == REPLICA_SHARE)
                replica__phantom(r, k, dt);
        }
        replica__update_share(r, k);
        /* A history whose every bucket is older than a horizon of idle
         * time holds nothing a late pour could need: free it. */
        if (k->h != NULL && hist_final(k->h) < r->now - HIST_N * HIST_W_NS) {
            free(k->h);
            k->h = NULL;
            k->tb_frac = 0; /* the next history starts from the live state */
        }
        if (replica__collectable(r, k)) {
            replica__delete_key(r, k);
            r->st.gc_keys++;
        }
        k = next;
    }
    if (r->now >= r->next_flush) {
        r->next_flush = r->now + r->cfg.interval_ns;
        replica__flush(r);
    }
}

int64_t replica_next_deadline(const struct replica *r)
{
    return r->next_flush;
}

/* ---- introspection ------------------------------------------------------- */

int replica_key_info(struct replica *r, const char *key, size_t klen, int64_t now_ns,
                     struct replica_key_info *info, replica_slot_fn fn, void *ud)
{
    struct rkey *k = replica__find(r, key, klen);
    if (k == NULL)
        return -SLUICE_ENOENT;
    replica__now(r, now_ns);
    struct algo_result res;
    memset(info, 0, sizeof(*info));
    info->params = k->p;
    info->policy = k->pol;
    info->debt_ns = replica__debt(k, r->now);
    if (replica__decide(k, 0, r->now, &res) == 0) {
        info->remaining = res.remaining;
        info->reset_after_ns = res.reset_after_ns;
    }
    info->share = k->share;
    info->nslots = k->nslots;
    double total = replica__cluster_demand(k);
    for (uint32_t i = 0; fn != NULL && i < k->nslots; i++) {
        const struct rslot *s = &k->slots[i];
        struct replica_slot_info si;
        si.node = r->peers[s->peer].name;
        si.epoch = s->epoch;
        si.count = s->count;
        si.at_ns = s->at_ns;
        si.demand = (int)i == k->self ? k->demand : s->demand;
        si.share = total > 0 ? si.demand / total : 0;
        si.reachable = replica__reachable(r, &r->peers[s->peer]);
        si.phantom = s->phantom;
        fn(ud, &si);
    }
    return 0;
}

int64_t replica_key_total(struct replica *r, const char *key, size_t klen)
{
    struct rkey *k = replica__find(r, key, klen);
    if (k == NULL)
        return -1;
    int64_t sum = 0;
    for (uint32_t i = 0; i < k->nslots; i++)
        sum = sat_add(sum, k->slots[i].count);
    return sum;
}

void replica_get_stats(const struct replica *r, struct replica_stats *out)
{
    *out = r->st;
    out->keys = table_count(r->t);
}
