/* replica: global limits by demand-weighted leases (see replica.h). */
#include "replica.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hrw.h"
#include "sluice/error.h"
#include "table.h"
#include "wire.h"
#include "num.h"

#define DEMAND_TAU_S     1.0                /* demand estimate: shortest EWMA time constant */
#define DEMAND_TAU_MAX_S 10.0               /* ... and longest */
#define DEMAND_EVENTS    20.0               /* requests a time constant should span */
#define ACTIVE_EVERY     5                  /* intervals between reports of an uncontested key */
#define IDLE_AFTER_NS    (1000 * 1000000LL) /* no request this long + full bucket: idle */
#define SHARE_EPS        0.05               /* relative share decrease worth a lease */
#define SHARE_UP_EPS     0.25               /* ... and increase, unasked (replica__compute) */
#define FREE_DEMAND_MAX                                                                            \
    6.0 /* total demand, in rates, beyond which free units stop over-committing */
#define BACK_AFTER        50   /* intervals of silence after which a report is a return */
#define FIRST_TOUCH_BURST 64.0 /* first touches on credit at once, per node */
#define FIRST_TOUCH_RATE  32.0 /* ... and per second */
#define FREE_TTL          8    /* intervals a lease's free units stay valid */
#define FREE_AHEAD        4    /* intervals of refill a lease's free units count on */
/* Intervals without a lease after which a report carries the limit again. */
#define KNOWN_FOR           8
#define REPLICA_MEMBERS_MAX 65535 /* names ever heard of */
/* Bounded work per replica_tick call (see "A pass" at replica_tick): key
 * visits per call, and background visits per interval beyond the keys
 * with news (every key is visited every interval up to SWEEP_MAX keys,
 * every n / SWEEP_MAX intervals beyond). */
#define TURN_VISITS  1024
#define SWEEP_MAX    16384
#define REPORT_COST  2 /* a report built, in key visits */
#define COMPUTE_COST 4 /* an owner's computation, in key visits */

/* A limit as the replica keeps it: the fields of struct algo_params it
 * needs (32 bytes instead of 96; a node may hold one per key twice), with
 * the key's partition policy and flags in what would be padding. */
struct rlimit {
    int64_t burst, count, period_ns;
    int32_t precision;
    uint8_t kind;
    uint8_t policy; /* enum policy_partition */
    uint8_t flags;  /* NK_* (node side) or dirty (owner side) */
    uint8_t bucket; /* algo_has_burst(kind), kept: asked on every decision */
};

/* Units a fresh key admits at once: burst + 1, or the count of a window. */
static int64_t replica__limit(const struct rlimit *l)
{
    return l->bucket ? l->burst + 1 : l->count;
}

/* Nanoseconds per unit of the whole limit's rate. */
static double replica__em(const struct rlimit *l)
{
    return (double)l->period_ns / (double)l->count;
}

static void replica__limit_of(struct rlimit *l, const struct algo_params *p)
{
    l->burst = p->burst;
    l->count = p->count;
    l->period_ns = p->period_ns;
    l->precision = (int32_t)p->precision;
    l->kind = (uint8_t)p->kind;
    l->bucket = (uint8_t)algo_has_burst(p->kind);
}

static int replica__params_of(struct algo_params *p, const struct rlimit *l)
{
    return algo_params_init(p, (enum algo_kind)l->kind, l->burst, l->count, l->period_ns,
                            l->precision);
}

/* ---- members ------------------------------------------------------------- */

/* A name the replica has heard of.  Ids index r->mem and stay valid for the
 * replica's life (names are few: members, past and present). */
struct member {
    char name[REPLICA_NAME_MAX + 1];
    uint64_t hash;
    uint8_t in_view;    /* in the last view (live or unreachable) */
    uint8_t was_viewed; /* in some view once: absent now means gone */
    uint8_t live;       /* alive or suspect: may own keys */
    /* Pending outgoing batches (one per message type), allocated while a
     * tick or a receive fills them. */
    struct wire_writer out[2];
    uint8_t *outbuf[2];
};

/* ---- node side: a key this node serves ---------------------------------- */

#define NK_YOUNG    0x01u /* created while young: waits for a settled owner */
#define NK_DIRTY    0x02u /* report at the next tick */
#define NK_IDLE     0x04u /* the idle report went out */
#define NK_LEASED   0x08u /* a lease arrived at least once */
#define NK_DEGRADED 0x10u /* owner silent: the node keeps its last lease */
#define NK_GROWN    0x20u /* past its first second: demand is an EWMA */
#define NK_HOT      0x40u /* queued for a visit in this pass or the next (r->hot) */
#define NK_KNOWN                                                                                   \
    0x80u /* its owner answered with the limit as reported: reports                                \
             may leave the limit out (replica__report) */

/* Local state of a window algorithm under a lease: its own params with the
 * node's share of the count, then the algorithm's state. */
struct wloc {
    struct algo_params p;
    int64_t state[];
};

struct nkey {
    struct rlimit p;
    uint32_t idx;        /* in r->nk */
    uint16_t view_gen;   /* owner computed under this view (low bits) */
    uint16_t owner;      /* member id */
    float share, fshare; /* the lease; the share held while the cluster was whole */
    float demand, acc;   /* units/s; units requested since the last tick (since
                            born while the key is young: see replica__demand) */
    double tokens;       /* the lease bucket */
    int64_t last_ns;     /* last refill */
    int64_t last_req, last_lease;
    uint32_t last_report, born; /* ms, mod 2^32 (replica__ms): only recent ages matter */
    uint64_t admitted;
    uint32_t granted_m; /* grants received, running total (thousandths, mod 2^32) */
    uint32_t leased_by; /* wire_life_tag of the owner life that last leased it,
                           settled; 0: none (see replica__on_report) */
    float free;         /* units it may still admit beyond its bucket, on the
                           cluster's credit, until FREE_TTL after last_lease */
    float level;        /* the cluster's level at the last lease (units), less
                           what this node admitted since */
    float others;       /* the other nodes' demand at the last lease, units/s */
    uint32_t credit;    /* units admitted on credit (free units), running total */
    uint32_t visited;   /* ms (replica__ms) of the last visit: demand's time step */
    struct wloc *w;     /* window kinds only */
};

/* A time in ms mod 2^32, and the ns since one (valid up to 49 days). */
static uint32_t replica__ms(int64_t ns)
{
    return (uint32_t)(uint64_t)(ns / NUM_NS_PER_MS);
}

static int64_t replica__since(uint32_t then_ms, int64_t now)
{
    return (int64_t)(uint32_t)(replica__ms(now) - then_ms) * NUM_NS_PER_MS;
}

/* ---- owner side: a key this node aggregates ------------------------------ */

#define REP_YOUNG 0x01u
#define REP_IDLE  0x02u
#define REP_FRESH 0x04u /* reported since the last lease computation */

/* Owner-side key flags (okey.p.flags). */
#define OK_FRESH  0x01u /* reported on since its last computation */
#define OK_QUEUED 0x02u /* queued for a computation (r->ohot) */

/* 56 bytes: owner records are many (one per key and reporting node). */
struct orep {
    uint64_t life;
    int64_t last_at;
    uint64_t admitted;
    float demand, share, sent_share;
    float tokens;           /* units left in its bucket at its last report */
    uint32_t g_sent, g_ack; /* grants sent to this life / acknowledged (running
                               totals in thousandths, mod 2^32) */
    uint16_t member;
    uint16_t fshare_q;        /* its frozen share in 1/FSHARE_ONE (rounded down) */
    uint16_t period_cs;       /* its report period in centiseconds (rounded up) */
    uint16_t free, sent_free; /* free units (replica__free), and as last sent */
    uint8_t flags;
    uint32_t credit; /* its credit total at its last report (wire field credit) */
};

#define FSHARE_ONE 65535.0

static double replica__rep_fshare(const struct orep *rp)
{
    return (double)rp->fshare_q / FSHARE_ONE;
}

struct okey {
    struct rlimit p;
    uint32_t idx;
    int64_t created_at, computed_at;
    /* The cluster's bucket as a GCRA: the consumption reported and, for
     * share keys, assumed (see "The cluster's bucket"); optimistic keys
     * repay what goes beyond it (replica__debt). */
    int64_t tat;
    uint32_t n, cap;
    struct orep *reps;
    float repay; /* units admitted on credit past the cluster's bucket, still to
                    be repaid (see replica__on_report) */
};

struct replica {
    char name[REPLICA_NAME_MAX + 1];
    uint64_t life;
    uint32_t self;
    int64_t interval, young, grace, silence, phantom_max;
    size_t max_msg;
    enum policy_partition default_policy;
    replica_send_fn send;
    void *send_ud;

    struct member *mem;
    size_t nmem, capmem;
    uint32_t *live;
    uint64_t *live_hash;
    size_t nlive;
    int complete;
    uint16_t view_gen; /* bumped on every change of the live set */
    int64_t view_changed_at;

    struct table *nodes;
    struct table_entry **nk;
    size_t nnk, capnk, cursor;
    struct table *owned;
    struct table_entry **ok;
    size_t nok, capok;

    int64_t now, born, next_tick;
    int synced;
    size_t tick_budget; /* report bytes per pass */
    /* The pass in progress (replica_tick): keys with news are queued in
     * hot (node side) and ohot (owner side) as indexes into nk and ok, a
     * pass takes them over as work and owork; a sweep visits the others a
     * slice per pass. */
    struct replica__idxv {
        uint32_t *v;
        size_t n, cap;
    } hot, urgent, uwork, work, ohot, owork; /* urgent: due keys a pass's byte
                                                budget left unreported, first in
                                                the next (uwork) */
    size_t uwpos, wpos, owpos;               /* next entry of uwork / work / owork */
    size_t sweep, sweep_left;                /* node sweep: cursor into nk, visits left this pass */
    size_t osweep, osweep_left;              /* owner sweep: cursor into ok, visits left */
    int in_pass, sweep_all;                  /* sweep_all: the view changed, visit every key soon */
    size_t budget;                           /* report bytes left in this pass */
    int64_t every, oevery;                   /* report and refresh periods of quiet keys */
    uint64_t nreps;                          /* owner records held (sum of okey.n) */
    double ft_tokens;                        /* first touches on credit (replica__first_touch) */
    int64_t ft_last;
    struct replica_stats st;
};

static struct nkey *nkey_of(struct table_entry *e)
{
    return (struct nkey *)table_entry_value(e);
}

static struct okey *okey_of(struct table_entry *e)
{
    return (struct okey *)table_entry_value(e);
}

/* ---- member table ---------------------------------------------------------- */

static int replica__intern(struct replica *r, const char *name, size_t len, uint32_t *id)
{
    if (len == 0 || len > REPLICA_NAME_MAX)
        return -SLUICE_EINVAL;
    uint64_t h = hrw_hash(name, len);
    for (size_t i = 0; i < r->nmem; i++)
        if (r->mem[i].hash == h && strlen(r->mem[i].name) == len &&
            memcmp(r->mem[i].name, name, len) == 0) {
            *id = (uint32_t)i;
            return 0;
        }
    if (r->nmem >= REPLICA_MEMBERS_MAX)
        return -SLUICE_EFULL; /* member ids are 16 bits, like libgossip's limit */
    if (r->nmem == r->capmem) {
        size_t nc = r->capmem ? r->capmem * 2 : 16;
        struct member *m = realloc(r->mem, nc * sizeof(*m));
        if (m == NULL)
            return -SLUICE_ENOMEM;
        r->mem = m;
        r->capmem = nc;
    }
    struct member *m = &r->mem[r->nmem];
    memset(m, 0, sizeof(*m));
    memcpy(m->name, name, len);
    m->name[len] = '\0';
    m->hash = h;
    *id = (uint32_t)r->nmem++;
    return 0;
}

/* ---- outgoing batches ------------------------------------------------------ */

static void replica__flush_one(struct replica *r, uint32_t id, int t)
{
    struct member *m = &r->mem[id];
    if (m->outbuf[t] == NULL)
        return;
    if (m->out[t].n > 0) {
        size_t len = wire_writer_finish(&m->out[t]);
        int rc = r->send(r->send_ud, m->name, m->outbuf[t], len);
        if (rc < 0)
            r->st.send_errors++;
        if (t == 0) {
            r->st.reports_sent++;
            r->st.report_bytes_sent += len;
        } else {
            r->st.leases_sent++;
            r->st.lease_bytes_sent += len;
        }
    }
    free(m->outbuf[t]);
    m->outbuf[t] = NULL;
}

static void replica__flush(struct replica *r)
{
    for (uint32_t i = 0; i < r->nmem; i++) {
        replica__flush_one(r, i, 0);
        replica__flush_one(r, i, 1);
    }
}

/* The pending batch of type t (0 report, 1 lease) to member id for life;
 * NULL when out of memory.  A lease batch for another life of the same
 * member is flushed first. */
static struct wire_writer *replica__writer(struct replica *r, uint32_t id, int t, uint64_t life)
{
    struct member *m = &r->mem[id];
    if (m->outbuf[t] != NULL && m->out[t].life != life)
        replica__flush_one(r, id, t);
    if (m->outbuf[t] == NULL) {
        m->outbuf[t] = malloc(r->max_msg);
        if (m->outbuf[t] == NULL)
            return NULL;
        wire_writer_init(&m->out[t], m->outbuf[t], r->max_msg, t == 0 ? WIRE_REPORT : WIRE_LEASE,
                         life, r->life);
    }
    return &m->out[t];
}

/* Appends an entry, starting a new batch when the current one is full. */
static int replica__append(struct replica *r, uint32_t id, int t, uint64_t life,
                           const struct wire_report *rep, const struct wire_lease *lease)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        struct wire_writer *w = replica__writer(r, id, t, life);
        if (w == NULL)
            return -SLUICE_ENOMEM;
        int rc = t == 0 ? wire_add_report(w, rep) : wire_add_lease(w, lease);
        if (rc != -SLUICE_ETOOBIG)
            return rc;
        if (w->n == 0)
            return rc; /* an entry larger than a message */
        replica__flush_one(r, id, t);
    }
    return -SLUICE_ETOOBIG;
}

/* ---- the lease bucket -------------------------------------------------------- */

static int replica__windowed(const struct rlimit *p)
{
    return !p->bucket;
}

/* Units per ns of the whole limit. */
static double replica__rate(const struct rlimit *p)
{
    return (double)p->count / (double)p->period_ns;
}

/* The bucket's capacity under a share: the share of the burst, at least one
 * unit; a key under pressure (demand above its share of the rate) gets one
 * unit more, or a node whose capacity is about one unit would throw away
 * the refill that comes while it waits for its next request (9% of its
 * share at 10x demand).  Idle nodes have no headroom, so N nodes bursting
 * at once after a quiet spell still admit about one burst. */
static double replica__cap(const struct nkey *k, double share)
{
    double c = share * (double)replica__limit(&k->p);
    if (c < 1.0)
        c = 1.0;
    if (k->demand > share * (double)k->p.count * 1e9 / (double)k->p.period_ns)
        c += 1.0;
    return c;
}

static void replica__refill(struct nkey *k, int64_t now)
{
    if (now <= k->last_ns)
        return;
    double dt = (double)(now - k->last_ns);
    double rate = replica__rate(&k->p);
    double es = k->share;
    double cap = replica__cap(k, es);
    k->tokens += dt * rate * es;
    if (k->tokens > cap)
        k->tokens = cap;
    k->last_ns = now;
}

/* (Re)builds the window state for the current share. */
static int replica__window_apply(struct nkey *k)
{
    double es = k->share;
    int64_t cnt = (int64_t)floor(es * (double)k->p.count);
    if (cnt < 1)
        cnt = 1;
    if (k->w != NULL && k->w->p.count == cnt)
        return 0;
    struct algo_params np;
    if (algo_params_init(&np, (enum algo_kind)k->p.kind, k->p.burst, cnt, k->p.period_ns,
                         k->p.precision) != 0)
        return -SLUICE_EINVAL;
    if (k->w != NULL && k->w->p.phase_ns != 0)
        (void)algo_params_set_phase(&np, k->w->p.phase_ns); /* keep the calendar alignment */
    size_t sz = algo_state_size(&np);
    if (k->w != NULL && algo_state_size(&k->w->p) == sz) {
        k->w->p = np; /* same layout: keep the counters, new count */
        return 0;
    }
    struct wloc *w = malloc(sizeof(*w) + sz);
    if (w == NULL)
        return -SLUICE_ENOMEM;
    w->p = np;
    algo_init(&np, w->state);
    if (k->w != NULL) {
        algo_free(&k->w->p, k->w->state);
        free(k->w);
    }
    k->w = w;
    return 0;
}

static void replica__set_share(struct nkey *k, double share, int64_t now)
{
    replica__refill(k, now);
    k->share = (float)share;
    double cap = replica__cap(k, k->share);
    if (k->tokens > cap)
        k->tokens = cap;
    if (replica__windowed(&k->p))
        (void)replica__window_apply(k);
}

/* ---- views and owners --------------------------------------------------------- */

static double replica__default_share(const struct replica *r, int64_t now);

static uint32_t replica__owner(struct replica *r, struct nkey *k, const char *key, size_t klen)
{
    if (k->view_gen != r->view_gen) {
        /* Keys still waiting for their first lease hold 1/N of the new N. */
        if (!(k->p.flags & NK_LEASED))
            replica__set_share(k, replica__default_share(r, r->now), r->now);
        uint32_t old = k->owner;
        size_t i = hrw_pick(hrw_hash(key, klen), r->live_hash, r->nlive);
        k->owner = (uint16_t)r->live[i];
        k->view_gen = r->view_gen;
        if (k->owner != old)
            k->p.flags = (uint8_t)((k->p.flags & ~NK_KNOWN) | NK_DIRTY);
    }
    return k->owner;
}

int replica_set_view(struct replica *r, const struct replica_member *m, size_t n, int complete,
                     int64_t now_ns)
{
    uint32_t *ids = malloc((n + 1) * sizeof(*ids));
    uint64_t *hs = malloc((n + 1) * sizeof(*hs));
    if (ids == NULL || hs == NULL) {
        free(ids);
        free(hs);
        return -SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < r->nmem; i++)
        r->mem[i].in_view = r->mem[i].live = 0;
    size_t nl = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint32_t id;
        rc = replica__intern(r, m[i].name, strlen(m[i].name), &id);
        if (rc != 0)
            break;
        if (r->mem[id].in_view)
            continue; /* listed twice */
        r->mem[id].in_view = 1;
        r->mem[id].was_viewed = 1;
        r->mem[id].live = m[i].live ? 1 : 0;
    }
    if (rc != 0) {
        free(ids);
        free(hs);
        return rc;
    }
    r->mem[r->self].in_view = r->mem[r->self].live = 1;
    int changed = 0;
    for (uint32_t i = 0; i < r->nmem; i++)
        if (r->mem[i].live) {
            ids[nl] = i;
            hs[nl] = r->mem[i].hash;
            nl++;
        }
    if (nl != r->nlive)
        changed = 1;
    for (size_t i = 0; i < nl && !changed; i++)
        changed = ids[i] != r->live[i];
    if (changed || (complete != 0) != r->complete) {
        r->view_gen = (uint16_t)(r->view_gen + 1u);
        r->view_changed_at = now_ns;
        r->st.view_changes++;
    }
    free(r->live);
    free(r->live_hash);
    r->live = ids;
    r->live_hash = hs;
    r->nlive = nl;
    r->complete = complete != 0;
    /* Every key finds its owner anew at its next visit (replica__owner);
     * the next passes visit them all, a slice per call. */
    if (changed)
        r->sweep_all = 1;
    return 0;
}

/* ---- key tables ---------------------------------------------------------------- */

/* Appends i to v.  On allocation failure the index is lost: the key is
 * then visited by the sweep instead (its flag is cleared by the caller's
 * return value). */
static int replica__idx_push(struct replica__idxv *v, uint32_t i)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 256;
        uint32_t *a = realloc(v->v, nc * sizeof(*a));
        if (a == NULL)
            return -SLUICE_ENOMEM;
        v->v = a;
        v->cap = nc;
    }
    v->v[v->n++] = i;
    return 0;
}

/* Queues node key k for a visit in the next pass (or in this one, if the
 * pass has not reached it yet).  Every key flagged NK_HOT has an entry in
 * hot or work holding its current index (replica__nk_free keeps that true
 * when a key moves). */
static void replica__queue_on(struct nkey *k, struct replica__idxv *v)
{
    if (!(k->p.flags & NK_HOT) && replica__idx_push(v, k->idx) == 0)
        k->p.flags |= NK_HOT;
}

static void replica__queue(struct replica *r, struct nkey *k)
{
    replica__queue_on(k, &r->hot);
}

/* Queues owner key o for a computation. */
static void replica__oqueue(struct replica *r, struct okey *o)
{
    if (!(o->p.flags & OK_QUEUED) && replica__idx_push(&r->ohot, o->idx) == 0)
        o->p.flags |= OK_QUEUED;
}

/* After a request or a lease: a key with news is visited at the next pass. */
static void replica__touch(struct replica *r, struct nkey *k)
{
    if ((k->p.flags & NK_DIRTY) || k->acc > 0.0F)
        replica__queue(r, k);
}

static int64_t replica__nk_drain(void *ud, const struct table_entry *e)
{
    struct replica *r = ud;
    const struct nkey *k = (const struct nkey *)table_entry_value((struct table_entry *)e);
    /* Droppable once idle was reported and nothing came since for the grace;
     * an entry that was never reported is kept until it is. */
    if (!(k->p.flags & NK_IDLE) || (k->p.flags & NK_DIRTY))
        return INT64_MAX;
    int64_t t = k->last_req > k->last_lease ? k->last_req : k->last_lease;
    t = t > INT64_MAX - r->grace ? INT64_MAX : t + r->grace;
    /* A key the cluster had drained at its last lease is kept until the
     * cluster's bucket has refilled (at most max_keys of them, and evicted
     * first as any key): made anew, it would admit a first unit on credit
     * (replica__key_init) against a bucket that may still be empty. */
    double lack = (double)replica__limit(&k->p) - (double)k->level;
    if ((k->p.flags & NK_LEASED) && lack > 0.0) {
        double full = (double)k->last_lease + lack * replica__em(&k->p);
        if (full > (double)t)
            t = full >= 9e18 ? INT64_MAX : (int64_t)full;
    }
    return t;
}

static void replica__nk_free(void *ud, struct table_entry *e)
{
    struct replica *r = ud;
    struct nkey *k = nkey_of(e);
    if (k->w != NULL) {
        algo_free(&k->w->p, k->w->state);
        free(k->w);
        k->w = NULL;
    }
    uint32_t i = k->idx;
    if (i < r->nnk && r->nk[i] == e) {
        r->nk[i] = r->nk[--r->nnk];
        if (i < r->nnk) {
            struct nkey *m = nkey_of(r->nk[i]);
            m->idx = i;
            /* Its queued entry names its old index: queue it anew. */
            if (m->p.flags & NK_HOT) {
                m->p.flags &= (uint8_t)~NK_HOT;
                replica__queue(r, m);
            }
        }
    }
}

static int64_t replica__ok_drain(void *ud, const struct table_entry *e)
{
    (void)ud;
    const struct okey *o = (const struct okey *)table_entry_value((struct table_entry *)e);
    return o->n == 0 ? 0 : INT64_MAX;
}

static void replica__ok_free(void *ud, struct table_entry *e)
{
    struct replica *r = ud;
    struct okey *o = okey_of(e);
    r->nreps -= o->n;
    free(o->reps);
    o->reps = NULL;
    uint32_t i = o->idx;
    if (i < r->nok && r->ok[i] == e) {
        r->ok[i] = r->ok[--r->nok];
        if (i < r->nok) {
            struct okey *m = okey_of(r->ok[i]);
            m->idx = i;
            if (m->p.flags & OK_QUEUED) {
                m->p.flags &= (uint8_t)~OK_QUEUED;
                replica__oqueue(r, m);
            }
        }
    }
}

static int replica__push(struct table_entry ***arr, size_t *n, size_t *cap, struct table_entry *e)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        struct table_entry **a = realloc(*arr, nc * sizeof(*a));
        if (a == NULL)
            return -SLUICE_ENOMEM;
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = e;
    return 0;
}

/* ---- create / destroy -------------------------------------------------------- */

int replica_create(struct replica **out, const struct replica_config *cfg, int64_t now_ns)
{
    size_t nl = cfg && cfg->node_name ? strlen(cfg->node_name) : 0;
    if (cfg == NULL || nl == 0 || nl > REPLICA_NAME_MAX || cfg->send == NULL)
        return -SLUICE_EINVAL;
    struct replica *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -SLUICE_ENOMEM;
    memcpy(r->name, cfg->node_name, nl);
    r->life = cfg->life_id;
    r->interval = cfg->interval_ns > 0 ? cfg->interval_ns : 100 * 1000000LL;
    r->young = cfg->young_ns < 0 ? 2 * NUM_NS_PER_S : cfg->young_ns;
    r->grace = cfg->gc_grace_ns > 0 ? cfg->gc_grace_ns : 5 * NUM_NS_PER_S;
    r->silence = cfg->silence_ns > 0 ? cfg->silence_ns : 5 * r->interval;
    r->phantom_max = cfg->phantom_max_ns > 0 ? cfg->phantom_max_ns : 60 * NUM_NS_PER_S;
    r->max_msg = cfg->max_msg >= 256 ? cfg->max_msg : 1200;
    r->default_policy = cfg->default_policy;
    r->send = cfg->send;
    r->send_ud = cfg->send_ud;
    r->now = r->born = now_ns;
    r->next_tick = now_ns;
    r->every = r->oevery = ACTIVE_EVERY * r->interval;
    r->synced = r->young == 0;
    r->ft_tokens = FIRST_TOUCH_BURST;
    r->ft_last = now_ns;
    /* Reports may use about 400 KB/s: enough for every key every interval
     * up to ~1,300 contested keys, and a fair rotation beyond. */
    r->tick_budget = (size_t)(300000.0 * (double)r->interval / (double)NUM_NS_PER_S);
    if (r->tick_budget < r->max_msg)
        r->tick_budget = r->max_msg;

    size_t maxk = cfg->max_keys ? cfg->max_keys : 1000000;
    struct table_config tc = {.max_keys = maxk,
                              .evict = cfg->evict,
                              .drain = replica__nk_drain,
                              .free_value = replica__nk_free,
                              .ud = r};
    struct table_config to = {.max_keys = cfg->max_owned ? cfg->max_owned : 4 * maxk,
                              .evict = 0,
                              .drain = replica__ok_drain,
                              .free_value = replica__ok_free,
                              .ud = r};
    uint32_t id;
    if (table_create(&r->nodes, &tc) != 0 || table_create(&r->owned, &to) != 0 ||
        replica__intern(r, r->name, nl, &id) != 0) {
        replica_destroy(r);
        return -SLUICE_ENOMEM;
    }
    r->self = id;
    if (replica_set_view(r, NULL, 0, 1, now_ns) != 0) {
        replica_destroy(r);
        return -SLUICE_ENOMEM;
    }
    *out = r;
    return 0;
}

void replica_destroy(struct replica *r)
{
    if (r == NULL)
        return;
    table_destroy(r->nodes);
    table_destroy(r->owned);
    for (size_t i = 0; i < r->nmem; i++) {
        free(r->mem[i].outbuf[0]);
        free(r->mem[i].outbuf[1]);
    }
    free(r->mem);
    free(r->live);
    free(r->live_hash);
    free(r->nk);
    free(r->ok);
    free(r->hot.v);
    free(r->urgent.v);
    free(r->uwork.v);
    free(r->work.v);
    free(r->ohot.v);
    free(r->owork.v);
    free(r);
}

/* ---- deciding ------------------------------------------------------------------ */

static int replica__young(const struct replica *r, int64_t now)
{
    return !r->synced && now - r->born < r->young;
}

/* The share of a key before its first lease: 1/N of the live members; none
 * for a young life (a restarted node that has not heard the whole cluster
 * must not think itself alone, nor trust a view it has barely built). */
static double replica__default_share(const struct replica *r, int64_t now)
{
    if (replica__young(r, now))
        return 0.0;
    return 1.0 / (double)(r->nlive > 0 ? r->nlive : 1);
}

/* Whether a first touch may take a unit on credit: a node-wide bucket of
 * FIRST_TOUCH_BURST first touches refilled at FIRST_TOUCH_RATE a second.
 * Spread demand makes first touches rare on each node, and they all pass;
 * a node that meets thousands of new keys at once (a cluster hammered from
 * its start) gives credit to a few, so first touches add at most
 * N x (FIRST_TOUCH_BURST + FIRST_TOUCH_RATE x window) over all keys. */
static int replica__first_touch(struct replica *r, int64_t now)
{
    if (now > r->ft_last) {
        r->ft_tokens += (double)(now - r->ft_last) * FIRST_TOUCH_RATE / (double)NUM_NS_PER_S;
        if (r->ft_tokens > FIRST_TOUCH_BURST)
            r->ft_tokens = FIRST_TOUCH_BURST;
        r->ft_last = now;
    }
    if (r->ft_tokens < 1.0)
        return 0;
    r->ft_tokens -= 1.0;
    return 1;
}

/* A fresh key: the first lease has not come.  Its share is 1/N of the
 * limit; an established node starts with that share of the burst plus a
 * hash-spread fraction of a unit (so all N bursting at once admit about one
 * burst in total), a young one with less than one unit. */
static void replica__key_init(struct replica *r, struct nkey *k, const char *key, size_t klen,
                              const struct algo_params *p, enum policy_partition pol, int64_t now)
{
    replica__limit_of(&k->p, p);
    k->p.policy = (uint8_t)pol;
    k->view_gen = (uint16_t)(r->view_gen - 1u);
    k->owner = (uint16_t)r->self;
    k->p.flags = NK_DIRTY;
    double n = r->nlive > 0 ? (double)r->nlive : 1.0;
    k->share = (float)replica__default_share(r, now);
    k->last_ns = k->last_lease = now;
    k->last_report = replica__ms(now);
    k->last_req = now;
    k->born = k->visited = replica__ms(now);
    /* The fractional part is spread by a hash of (key, node): were every
     * node to start at the same fraction, all would wait for their first
     * whole unit together and the cluster would lose N/2 units of rate. */
    double u = (double)(hrw_score(hrw_hash(key, klen), r->mem[r->self].hash) >> 11) *
               (1.0 / 9007199254740992.0);
    if (replica__young(r, now)) {
        k->p.flags |= NK_YOUNG;
        k->tokens = u < 0.999 ? u : 0.999; /* no whole unit: no fresh quota */
    } else {
        /* Optimistic keys (availability first) start with at least one
         * unit, so the first request for a key on any node is allowed even
         * when the burst is smaller than the cluster (the first lease then
         * trims it to the node's share); share keys keep to their 1/N, so N
         * nodes starting at once admit one burst, not N units. */
        k->tokens = (double)p->limit / n + u;
        if (pol == POLICY_PARTITION_OPTIMISTIC && k->tokens < 1.0)
            k->tokens = 1.0;
        double cap = replica__cap(k, k->share);
        if (k->tokens > cap)
            k->tokens = cap;
        /* First touch: when its part of the burst is less than a unit, one
         * unit on the cluster's credit, as a lease's free units
         * (replica__free), until the owner answers.  Demand spread thin
         * over many nodes is mostly first touches, and a node that has not
         * heard of the key has no reason to think it drained (a node keeps
         * the keys it knows drained until they refill: replica__nk_drain). */
        k->free = 0.0F;
        if (k->tokens < 1.0 && replica__first_touch(r, now))
            k->free = 1.0F;
    }
    if (replica__windowed(&k->p))
        (void)replica__window_apply(k);
}

static int replica__params_equal(const struct rlimit *a, const struct algo_params *b)
{
    return a->kind == b->kind && a->burst == b->burst && a->count == b->count &&
           a->period_ns == b->period_ns && a->precision == b->precision;
}

static int64_t replica__ns_for(double units, double rate_per_ns)
{
    if (units <= 0)
        return 0;
    if (rate_per_ns <= 0)
        return INT64_MAX;
    double t = ceil(units / rate_per_ns);
    return t >= 9.2e18 ? INT64_MAX : (int64_t)t;
}

/* The cluster's level as this node can tell: the owner's at the last
 * lease, less what this node admitted since, plus the refill since, less
 * what the other nodes' demand took meanwhile (their expected use: the
 * owner's level is an estimate a lease old, so this is too). */
static double replica__level(const struct nkey *k, int64_t now)
{
    double dt = now > k->last_lease ? (double)(now - k->last_lease) : 0.0;
    double lv =
        (double)k->level + dt * (replica__rate(&k->p) - (double)k->others / (double)NUM_NS_PER_S);
    double limit = (double)replica__limit(&k->p);
    return lv > limit ? limit : lv;
}

/* Admits qty on the free units of k's last lease if they are still valid
 * and enough (see replica__free); 1 if it did. */
static int replica__use_free(struct replica *r, struct nkey *k, int64_t qty)
{
    if (qty <= 0 || (double)k->free < (double)qty ||
        r->now - k->last_lease > FREE_TTL * r->interval)
        return 0;
    if ((k->p.flags & NK_LEASED) && replica__level(k, r->now) < (double)qty)
        return 0;
    k->free -= (float)qty;
    k->admitted += (uint64_t)qty;
    k->credit += (uint32_t)qty;
    k->p.flags |= NK_DIRTY; /* the owner hears of it at the next tick */
    r->st.free_admits++;
    return 1;
}

static void replica__bucket_decide(struct replica *r, struct nkey *k, int64_t qty,
                                   struct algo_result *out)
{
    double es = k->share;
    double cap = replica__cap(k, es);
    double rate = replica__rate(&k->p) * es;
    double need = (double)qty;
    out->limit = replica__limit(&k->p);
    if (qty > replica__limit(&k->p)) {
        out->limited = qty > 0;
        out->retry_after_ns = ALGO_NEVER;
    } else if (qty == 0 || k->tokens >= need || (need > cap && k->tokens >= cap)) {
        out->limited = 0;
        out->retry_after_ns = ALGO_NEVER;
        if (qty > 0) {
            k->tokens -= need;
            k->admitted += (uint64_t)qty;
            if (k->tokens < 0)
                r->st.debt_events++;
        }
    } else if (replica__use_free(r, k, qty)) {
        out->limited = 0;
        out->retry_after_ns = ALGO_NEVER;
    } else {
        out->limited = 1;
        double want = need > cap ? cap : need;
        int64_t t = replica__ns_for(want - k->tokens, rate);
        out->retry_after_ns = t == INT64_MAX ? r->interval : t;
    }
    out->remaining = k->tokens > 0 ? (int64_t)floor(k->tokens) : 0;
    int64_t reset = replica__ns_for(cap - k->tokens, rate);
    out->reset_after_ns = reset == INT64_MAX ? r->interval : reset;
}

int replica_throttle(struct replica *r, const char *key, size_t klen, const struct algo_params *p,
                     enum policy_partition pol, int64_t qty, int64_t now_ns,
                     struct algo_result *out)
{
    if (r == NULL || key == NULL || klen == 0 || klen > WIRE_KEY_MAX || p == NULL || out == NULL ||
        qty < 0 || !algo_can_be_global(p->kind) || algo_state_size(p) == 0)
        return -SLUICE_EINVAL;
    if (now_ns > r->now)
        r->now = now_ns;
    struct table_entry *e = table_find(r->nodes, key, klen);
    struct nkey *k;
    if (e == NULL) {
        size_t before = table_count(r->nodes);
        struct table_stats ts0, ts1;
        table_get_stats(r->nodes, &ts0);
        int rc = table_insert(r->nodes, key, klen, sizeof(struct nkey), 0, now_ns, &e);
        if (rc != 0) {
            if (rc == -SLUICE_EFULL)
                r->st.refused_full++;
            return rc;
        }
        table_get_stats(r->nodes, &ts1);
        r->st.evicted += ts1.evicted - ts0.evicted;
        (void)before;
        k = nkey_of(e);
        k->idx = (uint32_t)r->nnk;
        if (replica__push(&r->nk, &r->nnk, &r->capnk, e) != 0) {
            table_delete(r->nodes, e);
            return -SLUICE_ENOMEM;
        }
        replica__key_init(r, k, key, klen, p, pol, now_ns);
    } else {
        k = nkey_of(e);
        if (!replica__params_equal(&k->p, p)) {
            replica__limit_of(&k->p, p);
            k->p.flags = (uint8_t)((k->p.flags & ~NK_KNOWN) | NK_DIRTY);
            replica__set_share(k, k->share, now_ns);
        }
        if (k->p.policy != (uint8_t)pol)
            k->p.flags = (uint8_t)(k->p.flags & ~NK_KNOWN);
        k->p.policy = (uint8_t)pol;
    }
    replica__refill(k, now_ns);
    r->st.decisions++;
    if (qty > 0) {
        /* Demand is what could be admitted: a quantity beyond the limit is
         * refused on every node and must not pull the key's share here. */
        if (qty <= replica__limit(&k->p))
            k->acc += (float)qty;
        k->last_req = now_ns;
        if (k->p.flags & NK_IDLE)
            k->p.flags = (uint8_t)((k->p.flags & ~NK_IDLE) | NK_DIRTY);
    }
    if (k->w != NULL) {
        /* A fixed window's phase (calendar alignment) is this node's own and
         * not on the wire: the local caller's holds. */
        if (k->w->p.phase_ns != p->phase_ns)
            (void)algo_params_set_phase(&k->w->p, p->phase_ns);
        /* A window's count is split by share, rounded down; a node whose
         * part is less than a unit admits only on free units (a count of
         * one per node would admit N per window), once its owner has
         * answered. */
        int none = (k->p.flags & NK_LEASED) && qty > 0 &&
                   floor((double)k->share * (double)k->p.count) < 1.0;
        int rc = algo_decide(&k->w->p, k->w->state, none ? 0 : qty, now_ns, out);
        if (rc != 0) {
            replica__touch(r, k);
            return rc;
        }
        if (none) {
            out->limited = 1;
            if (out->retry_after_ns == ALGO_NEVER)
                out->retry_after_ns = r->interval;
        }
        out->limit = k->p.count;
        if (!out->limited && qty > 0)
            k->admitted += (uint64_t)qty;
        else if (out->limited && qty <= k->p.count && replica__use_free(r, k, qty)) {
            out->limited = 0;
            out->retry_after_ns = ALGO_NEVER;
        }
    } else {
        replica__bucket_decide(r, k, qty, out);
    }
    if (!out->limited && qty > 0)
        k->level -= (float)qty;
    if (k->p.flags & NK_LEASED) {
        /* What a caller sees is the cluster's: its level as this node can
         * tell (replica__level), not this node's part of it. */
        double lv = replica__level(k, now_ns);
        out->remaining = lv >= 1.0 ? (int64_t)floor(lv) : 0;
    }
    replica__touch(r, k);
    if (out->limited && qty > 0) {
        r->st.limited++;
        if (k->p.flags & NK_YOUNG)
            r->st.young_denials++;
    }
    return 0;
}

void replica_note_demand(struct replica *r, const char *key, size_t klen, int64_t qty,
                         int64_t now_ns)
{
    struct table_entry *e = table_find(r->nodes, key, klen);
    if (e == NULL || qty <= 0)
        return;
    struct nkey *k = nkey_of(e);
    if (qty > replica__limit(&k->p))
        return; /* could never be admitted: not demand (see replica_throttle) */
    k->acc += (float)qty;
    k->last_req = now_ns > k->last_req ? now_ns : k->last_req;
    if (k->p.flags & NK_IDLE)
        k->p.flags = (uint8_t)((k->p.flags & ~NK_IDLE) | NK_DIRTY);
    replica__touch(r, k);
}

/* ---- owner side -------------------------------------------------------------- */

static struct orep *replica__rep(struct okey *o, uint32_t member)
{
    for (uint32_t i = 0; i < o->n; i++)
        if (o->reps[i].member == member)
            return &o->reps[i];
    return NULL;
}

/* Units of the cluster's bucket o->tat taken at now. */
static double replica__used(const struct okey *o, int64_t now)
{
    return o->tat > now ? (double)(o->tat - now) / replica__em(&o->p) : 0.0;
}

/* Units below empty that are report timing, not excess: one unit and an
 * interval's refill (the debt rule of replica__compute and the credit rule
 * of replica__on_report both allow it). */
static double replica__timing(const struct replica *r, const struct okey *o)
{
    return 1.0 + (double)r->interval / replica__em(&o->p);
}

/* Pours units into the cluster's bucket o->tat (a GCRA) at now;
 * negative units give some back, never below a full bucket. */
static void replica__pour(struct okey *o, double units, int64_t now)
{
    double add = units * replica__em(&o->p);
    int64_t base = o->tat > now ? o->tat : now;
    if (add >= 0.0)
        o->tat = add > 9e18 - (double)base ? INT64_MAX : base + (int64_t)add;
    else
        o->tat = (double)(base - now) > -add ? base + (int64_t)add : now;
}

static int replica__rep_live(const struct replica *r, const struct orep *rp, int64_t now);

static void replica__compute(struct replica *r, struct table_entry *te, int64_t now);

static void replica__on_report(struct replica *r, uint32_t from, uint64_t life,
                               const struct wire_report *e)
{
    struct algo_params p;
    /* A report without the limit (count 0: left out) is for a record this
     * owner holds; one with it must carry a valid limit. */
    int bare = e->count == 0 && e->burst == 0 && e->period_ns == 0;
    if (!bare && (e->kind >= ALGO_KIND_COUNT_ || !algo_can_be_global((enum algo_kind)e->kind) ||
                  algo_params_init(&p, (enum algo_kind)e->kind, e->burst, e->count, e->period_ns,
                                   e->precision) != 0)) {
        r->st.bad_packets++;
        return;
    }
    r->st.report_entries_received++;
    struct table_entry *te = table_find(r->owned, e->key, e->klen);
    struct okey *o;
    if (te == NULL) {
        if (e->flags & WIRE_R_GONE)
            return;
        if (bare) {
            /* Not known here (a new life, a record dropped): no lease goes
             * back, and the reporter sends the limit again. */
            r->st.bare_unknown++;
            return;
        }
        if (table_insert(r->owned, e->key, e->klen, sizeof(struct okey), 0, r->now, &te) != 0)
            return;
        o = okey_of(te);
        o->idx = (uint32_t)r->nok;
        if (replica__push(&r->ok, &r->nok, &r->capok, te) != 0) {
            table_delete(r->owned, te);
            return;
        }
        o->created_at = r->now;
        o->computed_at = r->now;
        o->tat = r->now;
    } else {
        o = okey_of(te);
    }
    if (!bare) {
        replica__limit_of(&o->p, &p);
        o->p.policy = e->policy == POLICY_PARTITION_OPTIMISTIC ? POLICY_PARTITION_OPTIMISTIC
                                                               : POLICY_PARTITION_SHARE;
    }
    struct orep *rp = replica__rep(o, from);
    if (e->flags & WIRE_R_GONE) {
        if (rp != NULL) {
            *rp = o->reps[--o->n];
            r->nreps--;
        }
        o->p.flags |= OK_FRESH;
        replica__oqueue(r, o);
        return;
    }
    if (rp == NULL) {
        if (o->n == o->cap) {
            uint32_t nc = o->cap ? o->cap * 2 : 1; /* most keys: one reporter */
            struct orep *a = realloc(o->reps, nc * sizeof(*a));
            if (a == NULL)
                return;
            o->reps = a;
            o->cap = nc;
        }
        rp = &o->reps[o->n++];
        r->nreps++;
        memset(rp, 0, sizeof(*rp));
        rp->member = (uint16_t)from;
        rp->sent_share = -1.0;
    }
    int same_life = rp->life == life && rp->last_at > 0;
    int share = o->p.policy == POLICY_PARTITION_SHARE;
    uint32_t granted = (uint32_t)e->granted_milli;
    /* Units the reporter admitted on credit since its last report (all of
     * this life's if the record is new to it or its counts restarted). */
    uint32_t credit = (uint32_t)e->credit;
    uint32_t dcredit =
        same_life && e->admitted >= rp->admitted ? (uint32_t)(credit - rp->credit) : credit;
    if (!same_life) {
        rp->life = life;
        rp->sent_share = -1.0; /* a new life needs its lease */
        rp->g_sent = rp->g_ack = granted;
        /* The cluster's bucket learns what this life took before this
         * owner heard of it: all of it if no settled owner ever leased it
         * the key (a new key, a new life); nothing if this owner's life
         * did (it was counted then); and if another owner did (a moved
         * key, or this owner's past life), this one cannot know what the
         * key's other users took meanwhile: a share key's bucket is taken
         * as empty (it refills before the owner grants), an optimistic
         * key's is not (availability first). */
        if (e->leased_by == 0) {
            replica__pour(o, (double)e->admitted, r->now);
        } else if (e->leased_by != wire_life_tag(r->life)) {
            /* Taken as empty now, unless emptier. */
            double used = replica__used(o, r->now);
            double limit = (double)replica__limit(&o->p);
            if (share && used < limit)
                replica__pour(o, limit - used, r->now);
        } else if (share) {
            /* Back after this owner let it go (and took what it held out
             * of the bucket): what it still holds is counted as held. */
            replica__pour(o, -(double)e->tokens_milli / 1000.0, r->now);
        }
    } else if (e->admitted >= rp->admitted) {
        /* What a side admitted beyond the limit during a partition arrives
         * here at once after healing (optimistic keys repay it).  A share
         * key's node kept to its last share while silent (BACK_AFTER
         * intervals or more: a partition, not a report late in a long
         * rotation): what it admitted then was that share's refill, spent
         * long ago, so it may empty the bucket but not put it in debt. */
        int back = share && r->now - rp->last_at > BACK_AFTER * r->interval;
        int64_t empty = r->now + (int64_t)((double)replica__limit(&o->p) * replica__em(&o->p));
        int64_t tat0 = o->tat;
        replica__pour(o, (double)(e->admitted - rp->admitted), r->now);
        if (back && o->tat > empty)
            o->tat = tat0 > empty ? tat0 : empty;
    } else {
        /* The node dropped the key and made it anew: its counts restarted. */
        replica__pour(o, (double)e->admitted, r->now);
        rp->g_sent = rp->g_ack = granted;
    }
    /* Running totals compared mod 2^32: ahead means another owner granted
     * meanwhile; more outstanding than a whole burst means the node's
     * total restarted. */
    if ((uint32_t)(granted - rp->g_sent) < 0x80000000u ||
        (double)(uint32_t)(rp->g_sent - granted) > 1000.0 * (double)replica__limit(&o->p))
        rp->g_sent = granted;
    rp->g_ack = granted;
    rp->credit = credit;
    if (share && o->p.bucket && dcredit > 0 && dcredit <= e->admitted) {
        /* Credit is taken on the cluster's bucket: what went past it (a
         * key hammered on many nodes from its first request, each taking
         * its first touch) is repaid before the shares refill anyone, so
         * the excess is a burst, not a lasting rate.  Report timing alone
         * (a unit, an interval's refill) is not an excess. */
        double over =
            replica__used(o, r->now) - (double)replica__limit(&o->p) - replica__timing(r, o);
        if (over > 0.0)
            o->repay += (float)(over < (double)dcredit ? over : (double)dcredit);
    }
    rp->tokens = (float)((double)e->tokens_milli / 1000.0);
    rp->demand = (float)((double)e->demand_milli / 1000.0);
    rp->fshare_q = (uint16_t)floor((double)e->frozen_share / (double)WIRE_ONE * FSHARE_ONE);
    rp->admitted = e->admitted;
    uint64_t cs = (e->period_ms + 9) / 10;
    rp->period_cs = (uint16_t)(cs < 1 ? 1 : cs > 65535 ? 65535 : cs);
    rp->last_at = r->now;
    rp->flags = (uint8_t)(REP_FRESH | ((e->flags & WIRE_R_YOUNG) ? REP_YOUNG : 0) |
                          ((e->flags & WIRE_R_IDLE) ? REP_IDLE : 0));
    o->p.flags |= OK_FRESH;
    replica__oqueue(r, o);
    /* A node out of units and free units asks: answer now, not at this
     * owner's next tick (the lease goes out with this receive's batch). */
    if ((e->flags & WIRE_R_NEED) && from != r->self)
        replica__compute(r, te, r->now);
}

/* Whether a reporter still speaks for itself: it reported within three of
 * its periods (at least a silence window). */
static int replica__rep_live(const struct replica *r, const struct orep *rp, int64_t now)
{
    int64_t win = (int64_t)rp->period_cs * 30000000LL;
    if (win < r->silence)
        win = r->silence;
    /* A report is proof of life: a member this node's membership has not
     * learnt yet (a restarted owner hears the reporters before gossip has
     * told it of them) counts; one that was in a view and is gone does not. */
    const struct member *m = &r->mem[rp->member];
    return now - rp->last_at <= win && (m->in_view || !m->was_viewed);
}

static void replica__apply_lease(struct replica *r, struct nkey *k, const struct wire_lease *l,
                                 int64_t now);

/* A silent reporter whose share is released rather than held: the failure
 * detector calls it unreachable and this node sees a strict majority of
 * the members it knows.  A side that has lost the majority (or an even
 * split) cannot tell a death from a partition and holds every silent
 * share; a majority lets a dead minority's share go, so a crash costs the
 * others nothing for long. */
static int replica__majority(const struct replica *r)
{
    size_t known = 0;
    for (size_t i = 0; i < r->nmem; i++)
        known += r->mem[i].in_view;
    return 2 * r->nlive > known;
}

static int replica__presumed_dead(const struct replica *r, const struct orep *rp)
{
    const struct member *m = &r->mem[rp->member];
    if (!m->in_view || m->live)
        return 0;
    return replica__majority(r);
}

/* How far an optimistic key's reported consumption is beyond what the
 * limit allows (ns; <= 0: none).  The allowance is the burst plus 2 s of
 * the rate, so reports that arrive late or together never look like debt. */
static int64_t replica__debt(const struct okey *o, int64_t now)
{
    double tol = (double)replica__limit(&o->p) * replica__em(&o->p) + 2.0 * (double)NUM_NS_PER_S;
    double over = (double)o->tat - (double)now - tol;
    return over > 9e18 ? INT64_MAX : (int64_t)over;
}

/* Demand-weighted split of avail among the live reporters: shares in
 * proportion to demand (requested units per second, refused ones included,
 * so every saturated node stays saturated in proportion and none wastes its
 * refill waiting for requests), but nobody above SPLIT_HEADROOM x its own
 * demand: what such a node could not use goes to the others, again by
 * demand (a few rounds settle it).  With no demand at all, equal shares.
 * Writes each live reporter's rp->share. */
#define SPLIT_HEADROOM 3.0
static void replica__split(struct replica *r, struct okey *o, double avail, double dsum,
                           int64_t now)
{
    double rate = (double)o->p.count * (double)NUM_NS_PER_S / (double)o->p.period_ns;
    uint32_t nl = 0;
    for (uint32_t i = 0; i < o->n; i++)
        if (replica__rep_live(r, &o->reps[i], now)) {
            o->reps[i].share = -1.0; /* not fixed yet */
            nl++;
        }
    if (nl == 0)
        return;
    if (dsum <= 0.0) {
        for (uint32_t i = 0; i < o->n; i++)
            if (o->reps[i].share < -0.5)
                o->reps[i].share = (float)(avail / (double)nl);
        return;
    }
    double left = avail, dleft = dsum;
    for (int round = 0; round < 4 && dleft > 0.0; round++) {
        int capped = 0;
        for (uint32_t i = 0; i < o->n; i++) {
            struct orep *rp = &o->reps[i];
            if (rp->share > -0.5)
                continue;
            double d = (rp->flags & REP_IDLE) ? 0.0 : rp->demand;
            double cap = SPLIT_HEADROOM * d / rate;
            if (left * d / dleft > cap) {
                rp->share = (float)cap;
                capped = 1;
            }
        }
        if (!capped)
            break;
        left = avail;
        dleft = 0.0;
        for (uint32_t i = 0; i < o->n; i++) {
            struct orep *rp = &o->reps[i];
            if (!replica__rep_live(r, rp, now))
                continue;
            if (rp->share > -0.5)
                left -= rp->share;
            else
                dleft += (rp->flags & REP_IDLE) ? 0.0 : rp->demand;
        }
        if (left < 0.0)
            left = 0.0;
    }
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        if (rp->share > -0.5 || !replica__rep_live(r, rp, now))
            continue;
        double d = (rp->flags & REP_IDLE) ? 0.0 : rp->demand;
        rp->share = (float)(dleft > 0.0 ? left * d / dleft : 0.0);
    }
}

/*
 * The cluster's bucket.  Shares split the rate, and each node's bucket
 * holds its share of the burst; but a share that shrinks throws its extra
 * units away and one that grows gets none, so a key whose burst matters more
 * than its rate (15 a minute with a burst of 15, spread over many nodes)
 * would admit far less than one central bucket.  So the owner keeps that
 * central bucket as a GCRA (o->tat) fed by the units its reporters
 * admitted, and knows what each holds: its last report's tokens, plus what
 * it refilled since at the share it was leased, plus grants it has not
 * acknowledged.  A silent reporter may be spending: it counts as holding
 * what it held plus all it could have refilled since; a presumed-dead one
 * holds nothing.
 *
 * What the central bucket has beyond all that is granted to the live
 * reporters with room in their buckets, in proportion to the room (leases
 * carry the running total, rp->g_sent), by a settled owner only (a new or
 * cut-off one does not know enough).  The account errs on the side of
 * holding: what it cannot know (a moved key's past, a silent node's
 * spending) counts as taken, so a grant never makes a unit twice.
 */

/* Units rp holds, by its owner's account; *room: what its bucket could
 * take at its new share.  -1 for a reporter presumed dead. */
static double replica__held(const struct replica *r, const struct orep *rp, int64_t now, double em,
                            double limit, double *room)
{
    double had = rp->sent_share > 0.0F ? rp->sent_share : 0.0;
    double since = now > rp->last_at ? (double)(now - rp->last_at) : 0.0;
    /* Leased nothing, a node cannot spend a part of a unit: it is not
     * held (a share later refills it, a unit early at most). */
    double h = had > 0.0 ? rp->tokens + had * since / em : floor(rp->tokens);
    double out = (double)(uint32_t)(rp->g_sent - rp->g_ack) / 1000.0;
    *room = 0.0;
    if (replica__rep_live(r, rp, now)) {
        double cap = had * limit < 1.0 ? 1.0 : had * limit;
        if (h > cap + 1.0)
            h = cap + 1.0; /* a bucket holds no more (headroom included) */
        /* Only a node that asks gets grants: units given to one that only
         * peeked would sit there while the others are refused. */
        if (rp->share > 0.0F && rp->demand > 0.0F && !(rp->flags & REP_IDLE)) {
            double room_ = (rp->share * limit < 1.0 ? 1.0 : rp->share * limit) - h - out;
            *room = room_ > 0.0 ? room_ : 0.0;
        }
    } else if (replica__presumed_dead(r, rp)) {
        return -1.0; /* what it held died with it */
    }
    return h + out;
}

/* Grants the central bucket's units that nobody holds to the live
 * reporters with room, in proportion to the room (see above).  What the
 * nodes hold beyond the bucket (the first units of a key each node takes
 * before its owner hears of it) leaves nothing to grant. */
static void replica__grant(const struct replica *r, struct okey *o, int64_t now)
{
    double em = replica__em(&o->p);
    double limit = (double)replica__limit(&o->p);
    double slack = limit - replica__used(o, now), roomsum = 0.0, room;
    for (uint32_t i = 0; i < o->n; i++) {
        double h = replica__held(r, &o->reps[i], now, em, limit, &room);
        if (h > 0.0)
            slack -= h;
        roomsum += room;
    }
    if (slack < 0.001 || roomsum <= 0.0) /* parts of a unit too: they complete one */
        return;
    double give = slack < roomsum ? slack : roomsum;
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        (void)replica__held(r, rp, now, em, limit, &room);
        if (room > 0.0)
            rp->g_sent +=
                (uint32_t)ceil(give * room / roomsum * 1000.0); /* whole units stay whole */
    }
}

/*
 * Free units: availability first.  Shares and grants alone keep each node
 * to its part of the cluster's bucket, so demand spread thin over many nodes
 * (each seeing a trickle) is refused on the node it lands on while the
 * cluster's bucket is nearly full.  So while the owner's bucket has more
 * than the demand it knows of can take before the next lease (its level,
 * less the total demand over FREE_HORIZON intervals), each node that asks
 * may admit `free` units beyond its own bucket until its next lease (or
 * FREE_TTL intervals): its part of that spare by demand, at least one unit.
 * What they admit is reported and poured into the cluster's bucket, so the
 * spare shrinks and, near the limit, free units stop and the shares alone
 * decide.  Far from the limit a node thus never needs a lease to admit;
 * near it, the cluster's remaining units are shared out.  The free units
 * outstanding at once are at most the spare plus one unit per node with
 * demand: the bound of replica.h.
 */
static void replica__free(const struct replica *r, struct okey *o, double dsum, int settled,
                          int64_t now)
{
    double limit = (double)replica__limit(&o->p);
    double spare = limit - replica__used(o, now);
    double rate = (double)o->p.count * (double)NUM_NS_PER_S / (double)o->p.period_ns;
    /* Below the limit the bucket refills faster than it drains: what it
     * will have by the time the next leases are in use counts too. */
    double ahead = spare + FREE_AHEAD * (double)r->interval / replica__em(&o->p);
    uint32_t nl = 0;
    double dall = 0.0; /* every reporter's demand, late ones included */
    for (uint32_t i = 0; i < o->n; i++) {
        nl += (uint32_t)replica__rep_live(r, &o->reps[i], now);
        dall += (o->reps[i].flags & REP_IDLE) ? 0.0 : o->reps[i].demand;
    }
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        double d = (rp->flags & REP_IDLE) ? 0.0 : rp->demand;
        double f = 0.0;
        /* A young life (a restart) gets no credit: no fresh quota. */
        if (settled && spare >= 1.0 && replica__rep_live(r, rp, now) && !(rp->flags & REP_YOUNG)) {
            /* What the bucket has ahead (its spare plus FREE_AHEAD
             * intervals of refill) by demand plus the same in equal parts,
             * rounded up: the free units of all nodes sum to at most twice
             * that plus one unit per node. */
            if (dall < FREE_DEMAND_MAX * rate) {
                double part = (dsum > 0.0 ? d / dsum : 0.0) + 1.0 / (double)nl;
                f = ceil(ahead * part);
                if (f < 1.0)
                    f = 1.0;
            }
            /* Demand this far beyond the rate takes any spare at once: the
             * grants share it out (replica__grant); free units on top
             * would give it twice. */
            if (f > ahead)
                f = ceil(ahead);
            if (f > WIRE_FREE_MAX)
                f = WIRE_FREE_MAX;
        }
        rp->free = (uint16_t)f;
    }
}

/* Splits a key's limit between its reporters and sends the leases that
 * changed or were asked for. */
static void replica__compute(struct replica *r, struct table_entry *te, int64_t now)
{
    struct okey *o = okey_of(te);
    double reserved = 0.0, dsum = 0.0;
    uint32_t nlive = 0;
    /* Drop reporters that are gone; sum live demand and reserved shares. */
    for (uint32_t i = 0; i < o->n;) {
        struct orep *rp = &o->reps[i];
        int live = replica__rep_live(r, rp, now);
        int idle = (rp->flags & REP_IDLE) != 0;
        int gone = !r->mem[rp->member].in_view && r->mem[rp->member].was_viewed;
        if (!live && (idle || gone || now - rp->last_at > r->phantom_max)) {
            /* A node that went quiet still holds what its bucket held and
             * may spend it when it comes back: out of the cluster's bucket
             * until it reports again (replica__on_report gives back what
             * it then still holds).  A gone node's units went with it. */
            if (!gone && o->p.bucket && o->p.policy == POLICY_PARTITION_SHARE && rp->tokens > 0.0F)
                replica__pour(o, ceil(rp->tokens), now);
            *rp = o->reps[--o->n];
            r->nreps--;
            continue;
        }
        if (live) {
            nlive++;
            dsum += idle ? 0.0 : rp->demand;
        } else if (o->p.policy == POLICY_PARTITION_SHARE && !idle &&
                   !replica__presumed_dead(r, rp)) {
            reserved += rp->share;
        }
        i++;
    }
    o->p.flags &= (uint8_t)~OK_FRESH;
    if (o->repay > 0.0F && now > o->computed_at) {
        /* Repaying: the refill since the last computation went to nobody
         * (avail 0 below), so it pays the credit back. */
        double paid = (double)(now - o->computed_at) / replica__em(&o->p);
        o->repay = (double)o->repay > paid ? (float)((double)o->repay - paid) : 0.0F;
    }
    o->computed_at = now;
    if (nlive == 0)
        return;
    int64_t since = o->created_at > r->view_changed_at ? o->created_at : r->view_changed_at;
    /* Settled: the view has held still for a silence window, this owner is
     * not new to it, and the view is whole or this side is a strict
     * majority (whose silent minority is presumed dead). */
    int whole = r->complete || replica__majority(r);
    int settled = whole && now - since >= r->silence && now - r->born >= r->silence &&
                  !replica__young(r, now);
    double avail = o->p.policy == POLICY_PARTITION_SHARE ? 1.0 - reserved : 1.0;
    if (o->p.policy == POLICY_PARTITION_OPTIMISTIC && replica__debt(o, now) > 0)
        avail = 0.0; /* repaying: nobody admits until the cluster is back */
    if (o->p.policy == POLICY_PARTITION_SHARE && o->p.bucket) {
        /* Free units and first touches can take the cluster's bucket below
         * empty (the bound of replica.h): the shares shrink until the debt
         * is repaid, so the overshoot is a window's, not a lasting rate.
         * One unit and an interval's refill are report timing, not debt. */
        double limit = (double)replica__limit(&o->p);
        /* Each node with demand may hold a whole unit however small its
         * share, and one more under pressure (replica__cap): spending what
         * they hold takes the bucket that far below empty with no excess
         * over the leases (a hammered key on 100 nodes would otherwise
         * look in debt most of the time and shrink its own rate). */
        double held = 0.0;
        for (uint32_t i = 0; i < o->n; i++) {
            const struct orep *rp = &o->reps[i];
            if (!replica__rep_live(r, rp, now) || (rp->flags & REP_IDLE) || rp->demand <= 0.0F)
                continue;
            double part = (rp->sent_share > 0.0F ? rp->sent_share : 0.0) * limit;
            held += (part < 1.0 ? 1.0 - part : 0.0) + 1.0;
        }
        double debt = replica__used(o, now) - limit - replica__timing(r, o) - held;
        if (debt > 0.0)
            avail = debt >= 0.5 * limit ? 0.0 : avail * limit / (limit + debt);
        if (o->repay > 0.0F)
            avail = 0.0;
    }
    if (avail < 0.0)
        avail = 0.0;
    int caution = o->p.policy == POLICY_PARTITION_SHARE && !settled;
    replica__split(r, o, avail, dsum, now);
    if (caution) {
        /* Until the owner has heard everyone through a settled, complete
         * view, nobody grows beyond the share it held when the cluster was
         * whole, and reporters without one split what those leave. */
        double held = 0.0, fresh = 0.0;
        for (uint32_t i = 0; i < o->n; i++) {
            struct orep *rp = &o->reps[i];
            if (!replica__rep_live(r, rp, now))
                continue;
            if (rp->fshare_q > 0) {
                if (rp->share > replica__rep_fshare(rp))
                    rp->share = (float)replica__rep_fshare(rp);
                held += rp->share;
            } else {
                fresh += rp->share;
            }
        }
        double room = avail - held;
        if (room < 0.0)
            room = 0.0;
        for (uint32_t i = 0; fresh > room && i < o->n; i++) {
            struct orep *rp = &o->reps[i];
            if (replica__rep_live(r, rp, now) && rp->fshare_q == 0)
                rp->share *= (float)(room / fresh);
        }
    }
    if (settled && o->p.bucket)
        replica__grant(r, o, now);
    /* Free units need a whole view and an owner past its young period, not
     * a settled record: a record this owner made anew starts from what its
     * reporters say they took (a new key's first touches included), and one
     * that moved here or whose past this owner cannot know is taken as
     * empty (replica__on_report), which leaves no spare. */
    replica__free(r, o, dsum, whole && !replica__young(r, now), now);
    double lvl = (double)replica__limit(&o->p) - replica__used(o, now);
    int64_t level_m = lvl < -9e15  ? (int64_t)-9e18
                      : lvl > 9e15 ? (int64_t)9e18
                                   : (int64_t)(lvl * 1000.0); /* no overflow for huge limits */
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        if (!replica__rep_live(r, rp, now))
            continue;
        double w = rp->share;
        double diff = fabs(w - rp->sent_share);
        /* Unasked, a share goes out when it shrank (the bound needs it) or
         * grew a lot; a small rise waits for the reporter's next report,
         * which every lease answers.  Demand estimates wander by a few
         * percent on every report, so a key asked on a hundred nodes would
         * otherwise send each of them a lease at nearly every report of
         * any (most of a fleet's replication traffic). */
        double eps = w < rp->sent_share ? SHARE_EPS : SHARE_UP_EPS;
        int changed = rp->sent_share < 0.0 || diff > eps * (rp->sent_share + 0.01) ||
                      rp->free != rp->sent_free;
        /* A grant not acknowledged yet goes out again (running total). */
        if (!changed && !(rp->flags & REP_FRESH) && rp->g_sent == rp->g_ack)
            continue;
        rp->flags &= (uint8_t)~REP_FRESH;
        rp->sent_share = (float)w;
        rp->sent_free = rp->free;
        uint64_t lflags = settled ? WIRE_L_SETTLED : 0;
        uint64_t s = (uint64_t)(w * (double)WIRE_ONE);
        if (s > WIRE_ONE)
            s = WIRE_ONE;
        double others = dsum - ((rp->flags & REP_IDLE) ? 0.0 : rp->demand);
        struct wire_lease l = {table_entry_key(te),
                               te->klen,
                               s,
                               lflags,
                               rp->g_sent,
                               rp->free,
                               level_m,
                               (uint64_t)(others <= 0.0   ? 0.0
                                          : others > 1e15 ? 1e18
                                                          : others * 1000.0),
                               (uint32_t)rp->admitted,
                               r->life};
        if (rp->member == r->self) {
            /* As from any owner: only while this node owns the key by its
             * own view (a record left from an earlier view must not lease). */
            struct table_entry *ne = table_find(r->nodes, table_entry_key(te), te->klen);
            if (ne != NULL && rp->life == r->life &&
                replica__owner(r, nkey_of(ne), table_entry_key(te), te->klen) == r->self)
                replica__apply_lease(r, nkey_of(ne), &l, now);
            continue;
        }
        if (replica__append(r, rp->member, 1, rp->life, NULL, &l) == 0)
            r->st.lease_entries_sent++;
    }
}

/* ---- node side: leases and reports ------------------------------------------------ */

static void replica__apply_lease(struct replica *r, struct nkey *k, const struct wire_lease *l,
                                 int64_t now)
{
    uint64_t owner_life = l->owner_life, flags = l->flags, grant_m = l->grant_milli;
    double share = (double)l->share / (double)WIRE_ONE;
    k->last_lease = now;
    k->p.flags |= NK_KNOWN;
    k->free = (float)l->free;
    k->level = (float)((double)l->level_milli / 1000.0 -
                       (double)(uint32_t)((uint32_t)k->admitted - (uint32_t)l->seen));
    k->others = (float)((double)l->demand_milli / 1000.0);
    if (flags & WIRE_L_SETTLED)
        k->leased_by = (uint32_t)wire_life_tag(owner_life);
    k->p.flags &= (uint8_t)~NK_DEGRADED;
    /* A young life takes only leases from owners that know the cluster (a
     * settled owner, past its own young period): the owner a restarted node
     * finds first may be another restarted node with nothing. */
    if (replica__young(r, now) && !(flags & WIRE_L_SETTLED)) {
        share = 0.0;
        k->free = 0.0F;
    }
    double before = k->tokens;
    replica__set_share(k, share, now);
    /* A node that does not use the key (it only peeked, or stopped asking)
     * and is leased nothing by a settled owner gives back what it holds,
     * for the nodes that ask (it gets a share again when it asks). */
    if (share <= 0.0 && k->demand <= 0.0F && k->acc <= 0.0F && (flags & WIRE_L_SETTLED) &&
        k->tokens > 0.0)
        k->tokens = 0.0;
    /* Units a smaller share threw away go back to the cluster's bucket
     * once the owner hears of it: tell it now, even if the key is idle. */
    if (k->tokens < before - 0.01)
        k->p.flags |= NK_DIRTY;
    if (!(k->p.flags & NK_LEASED)) {
        /* The first lease trims the first-touch unit to the node's part of
         * the burst: a node leased nothing keeps nothing (the floor of one
         * unit in the capacity only lets a small share gather its refill). */
        double part = share * (double)replica__limit(&k->p);
        double whole = floor(k->tokens);
        if (part < 1.0 && whole >= 1.0) /* keep the fraction: it spreads the nodes */
            k->tokens = k->tokens - whole + floor(part);
    }
    uint32_t ahead = (uint32_t)grant_m - k->granted_m;
    if (ahead != 0 && ahead < 0x80000000u) {
        /* Units of the cluster's bucket nobody held: the owner's running
         * total (mod 2^32), so a grant whose lease was lost arrives with
         * the next one and none is added twice.  Beyond the bucket's
         * capacity they are lost (the owner sizes them to fit). */
        double g = (double)ahead / 1000.0;
        /* The owner granted what nobody held as of the report it saw; what
         * this node admitted since (on free units, or tokens it held then)
         * may already have spent some of it. */
        double unseen = (double)(uint32_t)((uint32_t)k->admitted - (uint32_t)l->seen);
        k->tokens += g > unseen ? g - unseen : 0.0;
        k->granted_m = (uint32_t)grant_m;
        double cap = replica__cap(k, k->share);
        if (k->tokens > cap)
            k->tokens = cap;
    }
    k->p.flags = (uint8_t)((k->p.flags & ~NK_YOUNG) | NK_LEASED);
    if (flags & WIRE_L_SETTLED) {
        k->fshare = (float)share;
        r->synced = 1; /* an owner that knows the cluster has answered */
    }
}

struct replica__rx {
    struct replica *r;
    uint32_t from;
};

static void replica__rx_report(void *ud, uint64_t life, const struct wire_report *e)
{
    struct replica__rx *x = ud;
    replica__on_report(x->r, x->from, life, e);
}

static void replica__rx_lease(void *ud, uint64_t life, const struct wire_lease *l)
{
    struct replica__rx *x = ud;
    struct replica *r = x->r;
    r->st.lease_entries_received++;
    if (life != r->life) {
        r->st.stale_leases++;
        return;
    }
    struct table_entry *e = table_find(r->nodes, l->key, l->klen);
    if (e == NULL)
        return;
    struct nkey *k = nkey_of(e);
    /* Only the owner by this node's view: two owners' splits must not mix. */
    if (replica__owner(r, k, l->key, l->klen) != x->from) {
        r->st.stale_leases++;
        return;
    }
    replica__apply_lease(r, k, l, r->now);
    replica__touch(r, k);
}

int replica_receive(struct replica *r, const char *from, const uint8_t *buf, size_t len,
                    int64_t now_ns)
{
    if (now_ns > r->now)
        r->now = now_ns;
    r->st.bytes_received += len;
    struct replica__rx x = {r, 0};
    if (from == NULL || replica__intern(r, from, strlen(from), &x.from) != 0 || x.from == r->self) {
        r->st.bad_packets++;
        return -SLUICE_EINVAL;
    }
    int rc = wire_decode(buf, len, NULL);
    if (rc < 0) {
        r->st.bad_packets++;
        return rc;
    }
    if (len >= 3 && buf[2] == WIRE_REPORT)
        r->st.reports_received++;
    else
        r->st.leases_received++;
    struct wire_handler h = {&x, replica__rx_report, replica__rx_lease};
    (void)wire_decode(buf, len, &h);
    replica__flush(r);
    return 0;
}

/* Demand: requested units per second, refused ones included.  A young key
 * (its first second) uses the average since its first request, that
 * request left out (the key was made by it; the time before it is
 * unknown): far steadier than one interval's count, whose Poisson noise
 * would hand a quiet node a large share and waste it.  Then an EWMA over
 * DEMAND_TAU_S, one step per visit (dt: since the key's previous visit). */
static void replica__demand(struct replica *r, struct nkey *k, int64_t now)
{
    double age = (double)replica__since(k->born, now) / (double)NUM_NS_PER_S;
    if (!(k->p.flags & NK_GROWN)) {
        k->visited = replica__ms(now);
        if (age <= 0.0)
            return;
        double avg = ((double)k->acc - 1.0) / age;
        k->demand = (float)(avg > 0.0 ? avg : 0.0);
        if (age >= DEMAND_TAU_S) {
            k->p.flags |= NK_GROWN;
            k->acc = 0.0F;
        }
        return;
    }
    int64_t dt = replica__since(k->visited, now);
    k->visited = replica__ms(now);
    if (dt <= 0)
        return;
    double sec = (double)dt / (double)NUM_NS_PER_S;
    double inst = (double)k->acc / sec;
    /* The time constant spans about DEMAND_EVENTS requests (at least
     * DEMAND_TAU_S, at most DEMAND_TAU_MAX_S): a node with a request every
     * few seconds would otherwise see its estimate leap tenfold at each
     * one, and a share leased on a leap is wasted (an underestimate costs
     * nothing: the others get the share). */
    double rate = inst > (double)k->demand ? inst : (double)k->demand;
    double tau = rate > 0.0 ? DEMAND_EVENTS / rate : DEMAND_TAU_MAX_S;
    if (tau < DEMAND_TAU_S)
        tau = DEMAND_TAU_S;
    if (tau > DEMAND_TAU_MAX_S)
        tau = DEMAND_TAU_MAX_S;
    double a = sec / (tau + sec);
    k->demand += (float)(a * (inst - (double)k->demand));
    if (k->demand < 1e-6F)
        k->demand = 0.0F;
    k->acc = 0.0F;
}

/* Whether the key's own rate share is under pressure: report every
 * interval then. */
static int replica__contested(const struct nkey *k)
{
    double own = replica__rate(&k->p) * (double)NUM_NS_PER_S * k->share;
    return k->demand > 0.0 && (k->demand >= 0.5 * own || k->tokens < 1.0);
}

static int replica__full(const struct nkey *k)
{
    return k->tokens >= replica__cap(k, k->share) - 1e-9;
}

/* Idle: the bucket is full again and nothing was asked for IDLE_AFTER_NS
 * (nor two intervals): the key is reported idle once, then dropped after
 * the grace. */
static int replica__idle(const struct replica *r, const struct nkey *k, int64_t now)
{
    int64_t quiet = IDLE_AFTER_NS > 2 * r->interval ? IDLE_AFTER_NS : 2 * r->interval;
    return replica__full(k) && now - k->last_req >= quiet;
}

/* Whether k is out of units and free units while its key is far enough
 * from hammered for free units to be given (the owner answers such a
 * report at once; a hammered key waits for the owner's tick: answering
 * every report of every node would multiply the leases). */
static int replica__needs(const struct nkey *k)
{
    double rate = replica__rate(&k->p) * (double)NUM_NS_PER_S;
    return k->tokens < 1.0 && k->free < 1.0F && k->acc > 0.0F &&
           (double)k->demand + (double)k->others < FREE_DEMAND_MAX * rate;
}

/* Queues k's report to its owner (or hands it to itself); returns the
 * bytes it takes, 0 if nothing was sent. */
static size_t replica__report(struct replica *r, struct table_entry *e, int64_t now)
{
    struct nkey *k = nkey_of(e);
    uint32_t owner = replica__owner(r, k, table_entry_key(e), e->klen);
    int idle = replica__idle(r, k, now);
    if (idle) {
        k->demand = 0.0F; /* what is left of the EWMA is history */
        k->acc = 0.0F;
    }
    int contested = replica__contested(k);
    struct wire_report w = {
        .key = table_entry_key(e),
        .klen = e->klen,
        .kind = (uint8_t)k->p.kind,
        .policy = k->p.policy,
        .burst = k->p.burst,
        .count = k->p.count,
        .period_ns = k->p.period_ns,
        .precision = k->p.precision,
        .demand_milli = (uint64_t)(k->demand * 1000.0 + 0.5),
        .admitted = k->admitted,
        .frozen_share = (uint64_t)(k->fshare * (double)WIRE_ONE),
        .period_ms = (uint64_t)((contested ? r->interval : r->every) / 1000000LL),
        .flags = (uint64_t)(((k->p.flags & NK_YOUNG) ? WIRE_R_YOUNG : 0) |
                            (idle ? WIRE_R_IDLE : 0) | (replica__needs(k) ? WIRE_R_NEED : 0)),
        .tokens_milli = k->tokens > 0.0 ? (uint64_t)(k->tokens * 1000.0) : 0,
        .granted_milli = k->granted_m,
        .leased_by = k->leased_by,
        .credit = k->credit,
    };
    if (w.frozen_share > WIRE_ONE)
        w.frozen_share = WIRE_ONE;
    if (owner != r->self && (k->p.flags & NK_KNOWN) &&
        now - k->last_lease <= KNOWN_FOR * r->interval) {
        /* The owner has the limit (it answered with a lease lately, and
         * neither the limit nor the owner changed since): a report leaves
         * it out, a third of its bytes.  An owner that lost the record
         * drops such reports, sends no lease, and the next report after
         * KNOWN_FOR intervals carries the limit again. */
        w.kind = 0;
        w.policy = 0;
        w.burst = w.count = w.period_ns = w.precision = 0;
    }
    k->last_report = replica__ms(now);
    k->p.flags &= (uint8_t)~NK_DIRTY;
    if (idle)
        k->p.flags |= NK_IDLE;
    r->st.report_entries_sent++;
    if (owner == r->self) {
        replica__on_report(r, r->self, r->life, &w);
        return 0;
    }
    size_t before = r->mem[owner].outbuf[0] ? r->mem[owner].out[0].len : 0;
    if (replica__append(r, owner, 0, r->life, &w, NULL) != 0)
        return 0;
    size_t after = r->mem[owner].out[0].len;
    return after > before ? after - before : 64;
}

/* Whether k is due for a report at now. */
static int replica__due(const struct replica *r, const struct nkey *k, int64_t now)
{
    if (k->p.flags & NK_DIRTY)
        return 1;
    if (replica__idle(r, k, now))
        return !(k->p.flags & NK_IDLE); /* one idle report, then silence */
    int64_t every = replica__contested(k) ? r->interval : r->every;
    return replica__since(k->last_report, now) >= every - NUM_NS_PER_MS; /* ms-rounded */
}

/* Visits node key i: demand, refill, owner, degradation; reports it when
 * dirty (always) or due (within the pass's byte budget); keeps it queued
 * while contested; drops it once drained.  Returns VISIT_DROPPED if it was
 * dropped (another key now sits at i), VISIT_REPORTED if a report was
 * built, else 0. */
#define VISIT_REPORTED 1
#define VISIT_DROPPED  2
static int replica__visit(struct replica *r, size_t i, int64_t now)
{
    int rc = 0;
    struct table_entry *e = r->nk[i];
    struct nkey *k = nkey_of(e);
    k->p.flags &= (uint8_t)~NK_HOT;
    replica__demand(r, k, now);
    replica__refill(k, now);
    uint32_t owner = replica__owner(r, k, table_entry_key(e), e->klen);
    /* Asked, no answer for two silence windows: shown as degraded (the
     * node keeps its last lease until the key moves to a live owner). */
    if (owner != r->self && k->demand > 0.0 && now - k->last_lease > 2 * r->silence)
        k->p.flags |= NK_DEGRADED;
    int starved = 0;
    if (k->p.flags & NK_DIRTY) {
        rc = VISIT_REPORTED;
    } else if (replica__due(r, k, now)) {
        rc = r->budget > 0 ? VISIT_REPORTED : 0;
        starved = r->budget == 0;
    }
    if (rc == VISIT_REPORTED) {
        size_t b = replica__report(r, e, now);
        r->budget = b > r->budget ? 0 : r->budget - b;
    }
    if (replica__nk_drain(r, e) <= now) {
        r->st.gc_keys++;
        table_delete(r->nodes, e); /* moves the last key to i */
        return VISIT_DROPPED;
    }
    /* A due key the budget could not take goes first in the next pass (a
     * fair rotation: those reported queue up behind it); a contested one
     * is checked every interval. */
    if (starved)
        replica__queue_on(k, &r->urgent);
    else if (replica__contested(k))
        replica__queue(r, k);
    return rc;
}

/* The visits a node visit's outcome costs. */
static size_t replica__cost(int v, size_t left)
{
    size_t c = v == VISIT_REPORTED ? 1 + REPORT_COST : 1;
    return left > c ? left - c : 0;
}

/* Computes owner key i if it is due (reported on, or not refreshed for
 * oevery); drops it when no reporter is left.  Returns OV_DROPPED if it
 * was dropped (another key now sits at i), OV_COMPUTED if it was computed
 * and kept, 0 if it was only looked at. */
#define OV_COMPUTED 1
#define OV_DROPPED  2
static int replica__ovisit(struct replica *r, size_t i, int64_t now)
{
    struct table_entry *te = r->ok[i];
    struct okey *o = okey_of(te);
    o->p.flags &= (uint8_t)~OK_QUEUED;
    if (!(o->p.flags & OK_FRESH) && now - o->computed_at < r->oevery && o->n > 0)
        return 0;
    replica__compute(r, te, now);
    if (o->n == 0) { /* every reporter idle, gone or silent for long */
        r->st.owned_gc++;
        table_delete(r->owned, te); /* moves the last key to i */
        return OV_DROPPED;
    }
    return OV_COMPUTED;
}

/* The visits an owner visit's outcome costs. */
static size_t replica__ocost(int ov, size_t left)
{
    size_t c = ov ? COMPUTE_COST : 1;
    return left > c ? left - c : 0;
}

/* A pass's sweep slice of n keys: all of them up to SWEEP_MAX (every key
 * is then visited every pass), SWEEP_MAX beyond; *every is the period at
 * which a quiet key is reported (or an owner key refreshed): ACTIVE_EVERY
 * intervals, or the sweep's period if longer. */
static size_t replica__slice(size_t n, int64_t *every, int64_t interval)
{
    size_t per = n < SWEEP_MAX ? n : SWEEP_MAX;
    size_t passes = per > 0 ? (n + per - 1) / per : 1;
    if (passes < ACTIVE_EVERY)
        passes = ACTIVE_EVERY;
    *every = (int64_t)passes * interval;
    return per;
}

/* Starts a pass: the keys queued so far become its work. */
static void replica__pass_start(struct replica *r, int64_t now)
{
    /* The keys starved of budget so far, oldest first: those the last pass
     * did not reach (not visited again: a queue, not a walk), then the
     * ones it left out. */
    struct replica__idxv *u = &r->uwork;
    size_t rest = u->n - r->uwpos;
    if (rest > 0)
        memmove(u->v, u->v + r->uwpos, rest * sizeof(*u->v));
    u->n = rest;
    r->uwpos = 0;
    for (size_t i = 0; i < r->urgent.n; i++)
        if (replica__idx_push(u, r->urgent.v[i]) != 0 && r->urgent.v[i] < r->nnk)
            nkey_of(r->nk[r->urgent.v[i]])->p.flags &= (uint8_t)~NK_HOT; /* the sweep finds it */
    r->urgent.n = 0;
    /* Then the keys with news. */
    struct replica__idxv t = r->work;
    r->work = r->hot;
    r->hot = t;
    r->hot.n = 0;
    r->wpos = 0;
    t = r->owork;
    r->owork = r->ohot;
    r->ohot = t;
    r->ohot.n = 0;
    r->owpos = 0;
    r->sweep_left = replica__slice(r->nnk, &r->every, r->interval);
    r->osweep_left = replica__slice(r->nok, &r->oevery, r->interval);
    if (r->sweep_all) {
        r->sweep_left = r->nnk;
        r->sweep = 0;
        r->sweep_all = 0;
    }
    r->budget = r->tick_budget;
    r->in_pass = 1;
    r->next_tick = now + r->interval;
}

/* A pass.  Every interval a pass visits the node keys with news (a
 * request, a lease, a report to send: queued in hot as they happen), the
 * keys still contested at their last visit, and a slice of the others
 * (all of them up to SWEEP_MAX keys, so each key is visited every
 * interval; each every n / SWEEP_MAX intervals beyond); then the
 * owner keys reported on, and a slice of the others for their refresh.
 * Work is proportional to what changed, not to the keys held.  One call
 * does at most TURN_VISITS visits (an answer is never kept waiting behind
 * a walk over a million keys, as Redis's active expire cycle bounds its
 * own) and the pass goes on at the next call: replica_next_deadline says
 * "now" until it is done. */
void replica_tick(struct replica *r, int64_t now_ns)
{
    if (now_ns > r->now)
        r->now = now_ns;
    int64_t now = r->now;
    if (!r->synced && now - r->born >= r->young)
        r->synced = 1;
    if (!r->in_pass) {
        if (now < r->next_tick)
            return;
        replica__pass_start(r, now);
    }
    size_t left = TURN_VISITS;
    /* Starved keys while the budget lasts; the rest wait their turn. */
    while (left > 0 && r->budget > 0 && r->uwpos < r->uwork.n) {
        uint32_t i = r->uwork.v[r->uwpos++];
        /* An entry whose key left, or was visited already (see
         * replica__queue), is skipped; looking costs a visit too. */
        if (i < r->nnk && (nkey_of(r->nk[i])->p.flags & NK_HOT))
            left = replica__cost(replica__visit(r, i, now), left);
        else
            left--;
    }
    while (left > 0 && r->wpos < r->work.n) {
        uint32_t i = r->work.v[r->wpos++];
        if (i < r->nnk && (nkey_of(r->nk[i])->p.flags & NK_HOT))
            left = replica__cost(replica__visit(r, i, now), left);
        else
            left--;
    }
    while (left > 0 && r->sweep_left > 0 && r->nnk > 0) {
        if (r->sweep >= r->nnk)
            r->sweep = 0;
        r->sweep_left--;
        int v = 0;
        if (!(nkey_of(r->nk[r->sweep])->p.flags & NK_HOT)) /* else its own visit comes */
            v = replica__visit(r, r->sweep, now);
        left = replica__cost(v, left);
        if (v != VISIT_DROPPED)
            r->sweep++;
    }
    while (left > 0 && r->owpos < r->owork.n) {
        uint32_t i = r->owork.v[r->owpos++];
        if (i < r->nok && (okey_of(r->ok[i])->p.flags & OK_QUEUED))
            left = replica__ocost(replica__ovisit(r, i, now), left);
        else
            left--;
    }
    while (left > 0 && r->osweep_left > 0 && r->nok > 0) {
        if (r->osweep >= r->nok)
            r->osweep = 0;
        r->osweep_left--;
        int ov = 0;
        if (!(okey_of(r->ok[r->osweep])->p.flags & OK_QUEUED))
            ov = replica__ovisit(r, r->osweep, now);
        left = replica__ocost(ov, left);
        if (ov != OV_DROPPED)
            r->osweep++;
    }
    replica__flush(r);
    if ((r->uwpos >= r->uwork.n || r->budget == 0) && r->wpos >= r->work.n &&
        (r->sweep_left == 0 || r->nnk == 0) && r->owpos >= r->owork.n &&
        (r->osweep_left == 0 || r->nok == 0))
        r->in_pass = 0;
}

int64_t replica_next_deadline(const struct replica *r)
{
    return r->in_pass ? r->now : r->next_tick;
}

void replica_mark_synced(struct replica *r)
{
    r->synced = 1;
}

int replica_synced(const struct replica *r)
{
    return r->synced || r->now - r->born >= r->young;
}

/* ---- introspection ------------------------------------------------------------ */

int replica_key_info(struct replica *r, const char *key, size_t klen, int64_t now_ns,
                     struct replica_key_info *info, replica_slot_fn fn, void *ud)
{
    struct table_entry *e = table_find(r->nodes, key, klen);
    struct table_entry *te = table_find(r->owned, key, klen);
    if (e == NULL && te == NULL)
        return -SLUICE_ENOENT;
    memset(info, 0, sizeof(*info));
    if (now_ns > r->now)
        r->now = now_ns;
    if (e != NULL) {
        struct nkey *k = nkey_of(e);
        replica__refill(k, r->now);
        uint32_t owner = replica__owner(r, k, key, klen);
        double es = k->share;
        double rate = replica__rate(&k->p) * es;
        (void)replica__params_of(&info->params, &k->p);
        info->policy = (enum policy_partition)k->p.policy;
        info->share = k->share;
        info->demand = k->demand;
        info->remaining = k->tokens > 0 ? (int64_t)floor(k->tokens) : 0;
        int64_t reset = replica__ns_for(replica__cap(k, es) - k->tokens, rate);
        info->reset_after_ns = reset == INT64_MAX ? 0 : reset;
        info->owner = r->mem[owner].name;
        info->owned = owner == r->self;
        info->degraded = (k->p.flags & NK_DEGRADED) != 0;
    } else {
        struct okey *o = okey_of(te);
        (void)replica__params_of(&info->params, &o->p);
        info->policy = (enum policy_partition)o->p.policy;
        info->owner = r->name;
        info->owned = 1;
    }
    if (te != NULL) {
        struct okey *o = okey_of(te);
        int64_t debt = o->p.policy == POLICY_PARTITION_OPTIMISTIC ? replica__debt(o, r->now) : 0;
        info->debt_ns = debt > 0 ? debt : 0;
        info->nslots = o->n;
        for (uint32_t i = 0; fn != NULL && i < o->n; i++) {
            struct orep *rp = &o->reps[i];
            struct replica_slot_info s = {r->mem[rp->member].name,
                                          rp->life,
                                          (int64_t)rp->admitted,
                                          r->now - rp->last_at,
                                          rp->demand,
                                          rp->share,
                                          replica__rep_live(r, rp, r->now),
                                          replica__rep_fshare(rp)};
            fn(ud, &s);
        }
    } else if (e != NULL) {
        struct nkey *k = nkey_of(e);
        info->nslots = 1;
        if (fn != NULL) {
            struct replica_slot_info s = {
                r->name, r->life, (int64_t)k->admitted, 0, k->demand, k->share, 1, k->fshare};
            fn(ud, &s);
        }
    }
    return 0;
}

int64_t replica_key_total(struct replica *r, const char *key, size_t klen)
{
    struct table_entry *te = table_find(r->owned, key, klen);
    if (te != NULL) {
        struct okey *o = okey_of(te);
        int64_t sum = 0;
        for (uint32_t i = 0; i < o->n; i++)
            sum += (int64_t)o->reps[i].admitted;
        return sum;
    }
    struct table_entry *e = table_find(r->nodes, key, klen);
    return e == NULL ? -1 : (int64_t)nkey_of(e)->admitted;
}

void replica_get_stats(const struct replica *r, struct replica_stats *out)
{
    *out = r->st;
    out->keys = r->nnk;
    out->owned_keys = r->nok;
    out->owned_reporters = r->nreps;
}

size_t replica_key_bytes(void)
{
    return sizeof(struct nkey);
}
