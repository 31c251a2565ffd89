/*
 * replica_node: the node side of the replica (see replica.h), the keys this
 * node serves.  It decides requests on a key's lease bucket (its share of
 * the limit, free units, first touches), estimates the key's demand,
 * reports to the key's owner and applies the leases that come back.  A key
 * this node also owns is reported to its own owner side
 * (replica_owner_on_report) and leased through replica_node_deliver, with
 * no message either way.  The shared state (struct replica, struct nkey)
 * is in replica_int.h; no I/O here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hrw.h"
#include "replica_int.h"
#include "sluice/error.h"

/* A time in ms mod 2^32, and the ns since one (valid up to 49 days). */
static uint32_t replica_node__ms(int64_t ns)
{
    return (uint32_t)(uint64_t)(ns / NUM_NS_PER_MS);
}

static int64_t replica_node__since(uint32_t then_ms, int64_t now)
{
    return (int64_t)(uint32_t)(replica_node__ms(now) - then_ms) * NUM_NS_PER_MS;
}

/* ---- the lease bucket -------------------------------------------------------- */

static int replica_node__windowed(const struct rlimit *p)
{
    return !p->bucket;
}

/* The bucket's capacity under a share: the share of the burst, at least one
 * unit; a key under pressure (demand above PRESSURE times its share of the
 * rate) gets one unit more, or a node whose capacity is about one unit
 * would throw away the refill that comes while it waits for its next
 * request (9% of its share at 10x demand; at the limit, where shares
 * follow demand, half the nodes' estimates are below their share at any
 * time, and 16 nodes of burst 1 admitted 0.976 of one central limiter
 * with a threshold of 1, 0.994 with 0.5).  Idle nodes have no headroom,
 * so N nodes bursting at once after a quiet spell still admit about one
 * burst. */
#define PRESSURE 0.5
double replica_node_cap(const struct nkey *k, double share)
{
    double c = share * (double)replica__limit(&k->p);
    if (c < 1.0)
        c = 1.0;
    /* Under pressure, or while the owner is silent (a share near 0 from
     * a lease that counted on free units would otherwise hold one unit
     * that a second request in a row finds spent). */
    if (k->demand > PRESSURE * share * (double)k->p.count * 1e9 / (double)k->p.period_ns ||
        (k->p.flags & NK_DEGRADED))
        c += 1.0;
    return c;
}

void replica_node_refill(struct nkey *k, int64_t now)
{
    if (now <= k->last_ns)
        return;
    double dt = (double)(now - k->last_ns);
    double rate = replica__rate(&k->p);
    double es = k->share;
    double cap = replica_node_cap(k, es);
    k->tokens += dt * rate * es;
    if (k->tokens > cap)
        k->tokens = cap;
    k->last_ns = now;
}

/* (Re)builds the window state for the current share. */
static int replica_node__window_apply(struct nkey *k)
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

static void replica_node__set_share(struct nkey *k, double share, int64_t now)
{
    replica_node_refill(k, now);
    k->share = (float)share;
    double cap = replica_node_cap(k, k->share);
    if (k->tokens > cap)
        k->tokens = cap;
    if (replica_node__windowed(&k->p))
        (void)replica_node__window_apply(k);
}

/* ---- owners ---------------------------------------------------------------------- */

/* The share of a key before its first lease: 1/N of the live members; none
 * for a young life (a restarted node that has not heard the whole cluster
 * must not think itself alone, nor trust a view it has barely built). */
static double replica_node__default_share(const struct replica *r, int64_t now)
{
    if (replica__young(r, now))
        return 0.0;
    return 1.0 / (double)(r->nlive > 0 ? r->nlive : 1);
}

uint32_t replica_node_owner(struct replica *r, struct nkey *k, const char *key, size_t klen)
{
    if (k->view_gen != r->view_gen) {
        /* Keys still waiting for their first lease hold 1/N of the new N. */
        if (!(k->p.flags & NK_LEASED))
            replica_node__set_share(k, replica_node__default_share(r, r->now), r->now);
        uint32_t old = k->owner;
        size_t i = hrw_pick(hrw_hash(key, klen), r->live_hash, r->nlive);
        k->owner = (uint16_t)r->live[i];
        k->view_gen = r->view_gen;
        if (k->owner != old)
            k->p.flags = (uint8_t)((k->p.flags & ~NK_KNOWN) | NK_DIRTY);
    }
    return k->owner;
}

/* ---- key queues and the table's callbacks ------------------------------------- */

/* Queues node key k for a visit in the next pass (or in this one, if the
 * pass has not reached it yet).  Every key flagged NK_HOT has an entry in
 * hot or work holding its current index (replica_node_free keeps that true
 * when a key moves). */
static void replica_node__queue_on(struct nkey *k, struct replica__idxv *v)
{
    if (!(k->p.flags & NK_HOT) && replica_idx_push(v, k->idx) == 0)
        k->p.flags |= NK_HOT;
}

static void replica_node__queue(struct replica *r, struct nkey *k)
{
    replica_node__queue_on(k, &r->hot);
}

/* After a request or a lease: a key with news is visited at the next pass. */
static void replica_node__touch(struct replica *r, struct nkey *k)
{
    if ((k->p.flags & NK_DIRTY) || k->acc > 0.0F)
        replica_node__queue(r, k);
}

int64_t replica_node_drain(void *ud, const struct table_entry *e)
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
     * (replica_node__key_init) against a bucket that may still be empty. */
    double lack = (double)replica__limit(&k->p) - (double)k->level;
    if ((k->p.flags & NK_LEASED) && lack > 0.0) {
        double full = (double)k->last_lease + lack * replica__em(&k->p);
        if (full > (double)t)
            t = full >= 9e18 ? INT64_MAX : (int64_t)full;
    }
    return t;
}

void replica_node_free(void *ud, struct table_entry *e)
{
    struct replica *r = ud;
    struct nkey *k = nkey_of(e);
    if (k->w != NULL) {
        algo_free(&k->w->p, k->w->state);
        free(k->w);
        k->w = NULL;
    }
    if (k->own != NULL)
        okey_of(k->own)->mine = NULL;
    uint32_t i = k->idx;
    if (i < r->nnk && r->nk[i] == e) {
        r->nk[i] = r->nk[--r->nnk];
        if (i < r->nnk) {
            struct nkey *m = nkey_of(r->nk[i]);
            m->idx = i;
            /* Its queued entry names its old index: queue it anew. */
            if (m->p.flags & NK_HOT) {
                m->p.flags &= (uint8_t)~NK_HOT;
                replica_node__queue(r, m);
            }
            if (m->asked == ASK_QUEUED && replica_idx_push(&r->prompt, i) != 0)
                m->asked = ASK_NONE; /* the next pass reports it */
        }
    }
}

/* ---- deciding ------------------------------------------------------------------ */

/* Whether a first touch may take a unit on credit: a node-wide bucket of
 * FIRST_TOUCH_BURST first touches refilled at FIRST_TOUCH_RATE a second.
 * Spread demand makes first touches rare on each node, and they all pass;
 * a node that meets thousands of new keys at once (a cluster hammered from
 * its start) gives credit to a few, so first touches add at most
 * N x (FIRST_TOUCH_BURST + FIRST_TOUCH_RATE x window) over all keys. */
static int replica_node__first_touch(struct replica *r, int64_t now)
{
    return replica_take(&r->ft_tokens, &r->ft_last, FIRST_TOUCH_RATE, FIRST_TOUCH_BURST, now);
}

/* ---- prompt reports -------------------------------------------------------------- */

static int replica_node__needs(const struct nkey *k);
static double replica_node__level_seen(const struct nkey *k, int64_t now);

/* After a request: a bucket key out of units and free units while far
 * from hammered (replica_node__needs) asks its owner now, at the loop's
 * next turn (replica_tick), rather than at the next pass, up to an
 * interval later; the owner answers such a report at once
 * (replica_owner_on_report), so a node that just spent its first unit, or
 * its last free one, has its lease back in a round trip.  Before, spread
 * demand at half its limit on five real nodes was refused up to a point
 * more often than one central limiter, nearly all of it in the first
 * fifth of a second of a key or right after a node's free unit went. */
static void replica_node__ask(struct replica *r, struct nkey *k)
{
    if (k->asked != ASK_NONE || k->w != NULL || (k->p.flags & NK_YOUNG) || !replica_node__needs(k))
        return;
    /* A key of a unit or more per report period asks only under the limit,
     * by the demand known, and while the cluster has a unit to spare as
     * this node can tell: near the limit and beyond, refusals are due
     * anyway and the passes' reports suffice (asking up to the free
     * units' own limit, six times the rate, 100 nodes of 10,000 keys
     * hammered with 10% loss sent 1.6 MB/s a node instead of 1.0).  A
     * slower key asks at its limit too: its requests are few, and a unit
     * is seconds of its rate (per-minute keys on 16 nodes with 10% loss,
     * at 0.8 of their limit: 0.977 of one central limiter, 0.98 with). */
    double rate = replica__rate(&k->p) * (double)NUM_NS_PER_S;
    if (!replica__slow(&k->p, r->interval) &&
        ((double)k->demand + (double)k->others >= rate ||
         ((k->p.flags & NK_LEASED) && replica_node__level_seen(k, r->now) < 1.0)))
        return;
    /* A key never leased yet: nothing is known of its demand, and an owner
     * that hears one node alone gives it all the spare as free units.  Few
     * at once, as first touches (a cluster hammered from its start, every
     * node meeting a thousand keys in its first milliseconds, admitted 1.010
     * of one central limiter instead of 1.003, and 100 nodes of 10,000 keys
     * with 10% loss 1.045 instead of 1.013 at 1.7 MB/s a node). */
    if (!(k->p.flags & NK_LEASED) &&
        !replica_take(&r->pn_tokens, &r->pn_last, FIRST_TOUCH_RATE, FIRST_TOUCH_BURST, r->now))
        return;
    if (replica_idx_push(&r->prompt, k->idx) == 0)
        k->asked = ASK_QUEUED;
}

/* ---- notices ------------------------------------------------------------------ */

/* A number in [0, 1) from the replica's own generator (xorshift64): the
 * odds of a thin key are drawn per request. */
static double replica_node__coin(struct replica *r)
{
    uint64_t x = r->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->rng = x;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

int64_t replica_node_note_drain(void *ud, const struct table_entry *e)
{
    (void)ud;
    return ((const struct nnote *)table_entry_value((struct table_entry *)e))->until;
}

/* The notice held for a key, if still in time; NULL if none. */
static struct nnote *replica_node__note(struct replica *r, const char *key, size_t klen,
                                        int64_t now)
{
    if (table_count(r->notes) == 0)
        return NULL;
    struct table_entry *e = table_find(r->notes, key, klen);
    if (e == NULL)
        return NULL;
    struct nnote *n = table_entry_value(e);
    return n->until > now ? n : NULL;
}

/* Keeps a thin key's notice (replica_owner.c, "Thin keys"): for
 * NOTICE_TTL intervals a request for it that this node's own lease does
 * not cover is admitted with the notice's odds, up to its units, and a
 * first touch of it takes no unit on credit.  Out of memory or room, the
 * notice is dropped (the node then acts as without it). */
static void replica_node__notice(struct replica *r, const char *key, size_t klen,
                                 const struct wire_lease *l, int64_t now)
{
    r->st.notices_received++;
    struct table_entry *e = table_find(r->notes, key, klen);
    if (l->refuse_q == 0) { /* odds of 1: the bucket has units again */
        if (e != NULL)
            table_delete(r->notes, e);
        return;
    }
    if (e == NULL && table_insert(r->notes, key, klen, sizeof(struct nnote), 0, now, &e) != 0)
        return;
    struct nnote *n = table_entry_value(e);
    n->until = now + NOTICE_TTL * r->interval;
    n->chance = (float)(1.0 - (double)l->refuse_q / 65535.0);
    n->left = (uint32_t)l->free;
}

/* A fresh key: the first lease has not come.  Its share is 1/N of the
 * limit; an established node starts with that share of the burst plus a
 * hash-spread fraction of a unit (so all N bursting at once admit about one
 * burst in total), a young one with less than one unit. */
static void replica_node__key_init(struct replica *r, struct nkey *k, const char *key, size_t klen,
                                   const struct algo_params *p, enum policy_partition pol,
                                   int64_t now)
{
    replica__limit_of(&k->p, p);
    k->p.policy = (uint8_t)pol;
    /* The owner under the current view, from the one hash the fraction
     * below uses too (replica_node_owner recomputes it when the view
     * changes); computed twice it was 1.6% of a clustered node's CPU over
     * a million new keys. */
    uint64_t kh = hrw_hash(key, klen);
    k->owner = (uint16_t)r->live[hrw_pick(kh, r->live_hash, r->nlive)];
    k->view_gen = r->view_gen;
    k->p.flags = NK_DIRTY;
    k->chance_q = 65535;
    double n = r->nlive > 0 ? (double)r->nlive : 1.0;
    k->share = (float)replica_node__default_share(r, now);
    k->last_ns = k->last_lease = now;
    k->last_report = replica_node__ms(now);
    k->last_req = now;
    k->born = k->visited = replica_node__ms(now);
    /* The fractional part is spread by a hash of (key, node): were every
     * node to start at the same fraction, all would wait for their first
     * whole unit together and the cluster would lose N/2 units of rate. */
    double u = (double)(hrw_score(kh, r->mem[r->self].hash) >> 11) * (1.0 / 9007199254740992.0);
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
        double cap = replica_node_cap(k, k->share);
        if (k->tokens > cap)
            k->tokens = cap;
        /* First touch: when its part of the burst is less than a unit, one
         * unit on the cluster's credit, as a lease's free units
         * (replica_owner__free), until the owner answers.  Demand spread thin
         * over many nodes is mostly first touches, and a node that has not
         * heard of the key has no reason to think it drained (a node keeps
         * the keys it knows drained until they refill: replica_node_drain). */
        k->free = 0.0F;
        if (replica_node__note(r, key, klen, now) != NULL) {
            /* A notice: the cluster's bucket is drained; no whole unit to
             * start with, none on credit (the notice's odds decide). */
            k->tokens -= floor(k->tokens);
        } else if (k->tokens < 1.0 && replica_node__first_touch(r, now)) {
            k->free = 1.0F;
        }
    }
    if (replica_node__windowed(&k->p))
        (void)replica_node__window_apply(k);
    /* A key that was local until a reload made its policy global carries
     * what it used then: that much is this node's admitted count, which the
     * owner pours into the cluster's bucket with the first report (a new
     * record's count is taken whole, replica_owner_on_report), and this
     * node's own bucket or window starts that much lower, with no first
     * touch on credit.  Each node carries its own past: a key that every
     * node used in full as a local key starts the cluster in debt, repaid
     * before anyone admits, never with a fresh quota. */
    int64_t used = r->carry != NULL ? r->carry(r->carry_ud, key, klen, p) : 0;
    if (used > 0) {
        k->admitted = (uint64_t)used;
        k->free = 0.0F;
        k->tokens = k->tokens > (double)used ? k->tokens - (double)used : 0.0;
        if (k->w != NULL) /* at most this node's window: no debt past it */
            (void)algo_consume(&k->w->p, k->w->state, used < k->w->p.count ? used : k->w->p.count,
                               now);
    }
}

static int replica_node__params_equal(const struct rlimit *a, const struct algo_params *b)
{
    return a->kind == b->kind && a->burst == b->burst && a->count == b->count &&
           a->period_ns == b->period_ns && a->precision == b->precision;
}

/* The cluster's level at now as this node projects it: the owner's at the
 * last lease, less what this node admitted since, plus the refill since,
 * less taken (units/ns) for what the other nodes are expected to use
 * meanwhile (the owner's level is an estimate a lease old, so this is
 * too). */
static double replica_node__project(const struct nkey *k, int64_t now, double taken)
{
    double dt = now > k->last_lease ? (double)(now - k->last_lease) : 0.0;
    return (double)k->level + dt * (replica__rate(&k->p) - taken);
}

/* The cluster's level as this node can tell: the other nodes take all
 * their demand, and the level is at most the limit. */
static double replica_node__level(const struct nkey *k, int64_t now)
{
    double lv = replica_node__project(k, now, (double)k->others / (double)NUM_NS_PER_S);
    double limit = (double)replica__limit(&k->p);
    return lv > limit ? limit : lv;
}

/* The cluster's level as replica_node__level tells it, but for a thin
 * key's: its other nodes take what their odds let through, not all they
 * ask for (see replica_node__use_free). */
static double replica_node__level_seen(const struct nkey *k, int64_t now)
{
    if (!k->thin)
        return replica_node__level(k, now);
    return replica_node__project(
        k, now, (double)k->others / (double)NUM_NS_PER_S * (double)k->chance_q / 65535.0);
}

/* The level a refusal's retry_after counts on: as replica_node__level_seen,
 * but the other nodes' demand is not taken off ahead of time (one central
 * limiter's retry_after is when its bucket holds the request, whoever else
 * is asking: a key hammered elsewhere drains replica_node__level below 0
 * for as long as the hammering lasts, and said seconds where one unit's
 * time is due). */
static double replica_node__level_retry(const struct nkey *k, int64_t now)
{
    return k->thin ? replica_node__level_seen(k, now) : replica_node__project(k, now, 0.0);
}

/* Whether a draw with these odds (0..1) refuses; a refusal is counted. */
static int replica_node__draw_refuses(struct replica *r, double odds)
{
    if (replica_node__coin(r) < odds)
        return 0;
    r->st.chance_refusals++;
    return 1;
}

/* Admits qty on the cluster's credit (free units, odds, a notice, a first
 * touch): the owner hears of it at the next tick.  Returns 1. */
static int replica_node__on_credit(struct replica *r, struct nkey *k, int64_t qty)
{
    k->admitted += (uint64_t)qty;
    k->credit += (uint32_t)qty;
    k->p.flags |= NK_DIRTY;
    r->st.free_admits++;
    return 1;
}

/* Admits qty on the free units of k's last lease if they are still valid
 * and enough (see replica_owner__free); 1 if it did. */
static int replica_node__use_free(struct replica *r, struct nkey *k, int64_t qty)
{
    if (qty <= 0 || (double)k->free < (double)qty ||
        r->now - k->last_lease > FREE_TTL * r->interval)
        return 0;
    /* A thin key's odds already weigh the level (replica_owner.c): the
     * others take what their odds let through, not all they ask for, and
     * a part of a unit left, 1 / limit of one, is enough for the odds to
     * decide: a bucket of one unit (no burst) asked at many times its rate
     * is never fuller than a part of one between draws (100 a minute with
     * no burst, asked at twenty times that, admitted 0.05 of one central
     * limiter when a whole unit had to be left and the others were taken
     * to spend all they asked; 10 a minute of burst 5 asked at its rate,
     * 0.97).  A larger bucket still needs most of a unit left (with a
     * whole part allowed, 10 a minute of burst 1 at ten times its rate on
     * 100 nodes admitted 1.04 to 1.06 of the oracle). */
    if (k->p.flags & NK_LEASED) {
        double need = (double)qty;
        if (k->thin)
            need -= 1.0 / (double)replica__limit(&k->p);
        if (replica_node__level_seen(k, r->now) < need)
            return 0;
    }
    if (k->chance_q < 65535 && replica_node__draw_refuses(r, (double)k->chance_q / 65535.0))
        return 0;
    k->free -= (float)qty;
    return replica_node__on_credit(r, k, qty);
}

/* Admits qty on a thin key's notice (replica_node__notice) when this
 * node's own lease says nothing now (none yet, or past FREE_TTL); 1 if it
 * did.  With no notice, a slow key's node whose lease is past takes a
 * unit on credit as a first touch does: an owner sends notices while a
 * thin key's odds are below 1, and a slow key that is not thin has units
 * to spare, so none means the bucket has some (a node that asks once a
 * minute would otherwise be refused every time, its lease always past and
 * its units given back with its idle report: replica_node__report).  What
 * it admits is on the cluster's credit, as free units. */
static int replica_node__use_note(struct replica *r, struct nkey *k, const char *key, size_t klen,
                                  int64_t qty)
{
    if ((k->p.flags & NK_LEASED) && r->now - k->last_lease <= FREE_TTL * r->interval)
        return 0;
    struct nnote *n = replica_node__note(r, key, klen, r->now);
    if (n == NULL) {
        if (!(k->p.flags & NK_LEASED) || !replica__slow(&k->p, r->interval) || qty != 1 ||
            (k->thin && (k->p.flags & NK_DEGRADED)) || !replica_node__first_touch(r, r->now))
            return 0;
        return replica_node__on_credit(r, k, qty);
    }
    if ((int64_t)n->left < qty || replica_node__draw_refuses(r, (double)n->chance))
        return 0;
    n->left -= (uint32_t)qty;
    return replica_node__on_credit(r, k, qty);
}

static void replica_node__bucket_decide(struct replica *r, struct nkey *k, const char *key,
                                        size_t klen, int64_t qty, struct algo_result *out)
{
    double es = k->share;
    double cap = replica_node_cap(k, es);
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
    } else if (replica_node__use_free(r, k, qty) || replica_node__use_note(r, k, key, klen, qty)) {
        out->limited = 0;
        out->retry_after_ns = ALGO_NEVER;
    } else {
        out->limited = 1;
        double want = need > cap ? cap : need;
        int64_t t = replica__ns_for(want - k->tokens, rate);
        /* When the cluster's level will hold the request, as one central
         * limiter would say, where that is sooner than this node's bucket
         * (a share of 1/N refills N times slower than the cluster; a node
         * leased no rate, a thin key, has only this): a client spread over
         * the nodes may be admitted anywhere, and this node asked its owner
         * for units (replica_node_ask).  At least an interval: the next
         * lease may say more. */
        if (k->p.flags & NK_LEASED) {
            int64_t tc =
                replica__ns_for(need - replica_node__level_retry(k, r->now), replica__rate(&k->p));
            if (tc < t)
                t = tc;
        }
        out->retry_after_ns = t == INT64_MAX || t < r->interval ? r->interval : t;
    }
    out->remaining = k->tokens > 0 ? (int64_t)floor(k->tokens) : 0;
    int64_t reset = replica__ns_for(cap - k->tokens, rate);
    out->reset_after_ns = reset == INT64_MAX ? r->interval : reset;
}

int replica_node_decide(struct replica *r, const char *key, size_t klen,
                        const struct algo_params *p, enum policy_partition pol, int64_t qty,
                        int64_t now_ns, struct algo_result *out)
{
    uint32_t hash;
    struct table_entry *e = table_find_for_insert(r->nodes, key, klen, &hash);
    struct nkey *k;
    if (e == NULL) {
        struct table_stats ts0, ts1;
        table_get_stats(r->nodes, &ts0);
        int rc = table_insert_hashed(r->nodes, key, klen, hash, sizeof(struct nkey), 0, now_ns, &e);
        if (rc != 0) {
            if (rc == -SLUICE_EFULL)
                r->st.refused_full++;
            return rc;
        }
        table_get_stats(r->nodes, &ts1);
        r->st.evicted += ts1.evicted - ts0.evicted;
        k = nkey_of(e);
        k->idx = (uint32_t)r->nnk;
        if (replica_push(&r->nk, &r->nnk, &r->capnk, e) != 0) {
            table_delete(r->nodes, e);
            return -SLUICE_ENOMEM;
        }
        replica_node__key_init(r, k, key, klen, p, pol, now_ns);
    } else {
        k = nkey_of(e);
        if (!replica_node__params_equal(&k->p, p)) {
            replica__limit_of(&k->p, p);
            k->p.flags = (uint8_t)((k->p.flags & ~NK_KNOWN) | NK_DIRTY);
            replica_node__set_share(k, k->share, now_ns);
        }
        if (k->p.policy != (uint8_t)pol)
            k->p.flags = (uint8_t)(k->p.flags & ~NK_KNOWN);
        k->p.policy = (uint8_t)pol;
    }
    replica_node_refill(k, now_ns);
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
            replica_node__touch(r, k);
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
        else if (out->limited && qty <= k->p.count && replica_node__use_free(r, k, qty)) {
            out->limited = 0;
            out->retry_after_ns = ALGO_NEVER;
        }
    } else {
        replica_node__bucket_decide(r, k, key, klen, qty, out);
    }
    if (!out->limited && qty > 0)
        k->level -= (float)qty;
    if (k->p.flags & NK_LEASED) {
        /* What a caller sees is the cluster's: its level as this node can
         * tell (replica_node__level), not this node's part of it. */
        double lv = replica_node__level(k, now_ns);
        out->remaining = lv >= 1.0 ? (int64_t)floor(lv) : 0;
    }
    replica_node__touch(r, k);
    if (qty > 0)
        replica_node__ask(r, k);
    if (out->limited && qty > 0) {
        r->st.limited++;
        if (k->p.flags & NK_YOUNG)
            r->st.young_denials++;
    }
    return 0;
}

void replica_node_note_demand(struct replica *r, const char *key, size_t klen, int64_t qty,
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
    replica_node__touch(r, k);
}

/* ---- leases and reports ------------------------------------------------ */

/* Whether a node leased nothing (it went idle) gives back the units it
 * holds (replica_node__apply_lease): only while the cluster has units to
 * spare (the lease carries free units) and the other nodes ask for less
 * than 1.5 times the rate.  Then the owner can hand the units out again
 * (grants, free units), and a node that keeps them would strand them: a
 * hundred idle nodes holding one unit each are a hundred units the owner
 * must count as spent when it forgets them.  Near or beyond the limit the
 * owner has nothing to hand out, and a unit given back is one nobody
 * admits, where kept it admits the node's next request at once (demand
 * spread thin goes idle between requests: 0.85 of one central limiter
 * became 0.96 at 100 nodes and twice the limit). */
#define GIVE_BACK_DEMAND 1.5
static int replica_node__gives_back(const struct nkey *k)
{
    if (k->admitted == 0) /* it only peeked */
        return 1;
    double rate = replica__rate(&k->p) * (double)NUM_NS_PER_S;
    return k->free >= 1.0F && (double)k->others < GIVE_BACK_DEMAND * rate;
}

/* This node's part of the key's rate as its last lease told the demand:
 * below the limit, its own demand (none counts 0) and an equal part of
 * what the cluster's demand left of the rate; at or beyond it, its part
 * of that demand (0 with none).  The parts of all nodes sum to one rate.
 * It is the share a node takes while the key's owner is silent
 * (NK_DEGRADED), where its last lease gave less (a thin key's gave none),
 * and, averaged, its frozen share (replica_node__apply_lease, at a settled
 * lease): what its side keeps in a partition.  A node with no demand just
 * then (one asked every few seconds is idle in between) still has its part
 * of the room: with 0, the idle nodes of a per-minute key left their side
 * of a split with no part at all.  Demand spread
 * thin below the limit runs on free units with a share near 0
 * (replica_owner__free), and free units lapse FREE_TTL intervals after the
 * last lease: without the silent share, a key whose
 * owner was killed was refused on every other node until the owner was
 * declared dead (five nodes at the default probe interval, keys at half
 * their limit: half of their requests for seven seconds). */
static double replica_node__part(const struct replica *r, const struct nkey *k)
{
    double rate = replica__rate(&k->p) * (double)NUM_NS_PER_S;
    double d = (double)k->demand, o = (double)k->others;
    if (rate <= 0.0)
        return 0.0;
    /* No lease yet: the others' demand is not known, not none.  While the
     * failure detector has nothing against the owner (its leases lost, or
     * this node's reports), each node takes 1/N, as before its first
     * lease: taken as none, a node whose reports were all lost for a
     * second (eight nodes, 10% loss, a report budget: seven of nine lost
     * in a row) took the whole rate of a key the seven others were
     * spending too, 1.26 times one central limiter.  An owner suspected,
     * or not heard from lately, is likely dead: then availability first,
     * and a key new since (a user that came while it died) is not held to
     * 1/N of its rate until the verdict. */
    if (!(k->p.flags & NK_LEASED) && !r->mem[k->owner].suspect && !r->mem[k->owner].quiet)
        return 1.0 / (double)(r->nlive > 0 ? r->nlive : 1);
    double s;
    if (d + o >= rate)
        s = d > 0.0 ? d / (d + o) : 0.0;
    else
        s = (d + (rate - d - o) / (double)(r->nlive > 0 ? r->nlive : 1)) / rate;
    return s > 1.0 ? 1.0 : s;
}

static void replica_node__apply_lease(struct replica *r, struct nkey *k, const struct wire_lease *l,
                                      int64_t now)
{
    uint64_t owner_life = l->owner_life, flags = l->flags, grant_m = l->grant_milli;
    double share = (double)l->share / (double)WIRE_ONE;
    int64_t prev_lease = k->last_lease;
    k->last_lease = now;
    k->p.flags |= NK_KNOWN;
    if (k->asked == ASK_SENT)
        k->asked = ASK_NONE; /* answered: it may ask again */
    k->free = (float)l->free;
    k->chance_q = (uint16_t)(65535 - l->refuse_q);
    k->thin = (flags & WIRE_L_THIN) != 0;
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
    replica_node__set_share(k, share, now);
    /* A node that does not use the key (it only peeked, or stopped asking)
     * and is leased nothing by a settled owner gives back what it holds,
     * for the nodes that ask (it gets a share again when it asks), when
     * replica_node__gives_back says the owner can hand it out again.  What
     * it keeps is at most the one unit per node of the bound (replica.h),
     * and counts as held in the owner's account. */
    if (share <= 0.0 && k->demand <= 0.0F && k->acc <= 0.0F && (flags & WIRE_L_SETTLED) &&
        replica_node__gives_back(k) && k->tokens > 0.0)
        k->tokens = 0.0;
    /* A thin key's units are all in the cluster's bucket (replica_owner.c,
     * "Thin keys"): what this node holds goes back, or nobody else could
     * have it while this node waits for a request. */
    if ((flags & WIRE_L_THIN) && share <= 0.0 && k->tokens > 0.0)
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
         * this node admitted since on the cluster's credit (free units,
         * first touches) may already have spent some of it: the credit
         * count since that report (wire seen_credit).  Not what it
         * admitted from its tokens: the owner counted those as held, not
         * as spare, and taking them off the grant too left a node that
         * spent between a report and the lease that answered it a unit or
         * more short of the cluster's level for good (a new key's burst on
         * one node, 16 requests 100 ms apart: 15 admitted where one
         * central limiter admits 16).  From an owner that does not send
         * it, all its credit, at most all it admitted since. */
        double unseen = (double)(uint32_t)((uint32_t)k->admitted - (uint32_t)l->seen);
        double c = (double)(uint32_t)(k->credit - (uint32_t)l->seen_credit);
        if (c < unseen)
            unseen = c;
        k->tokens += g > unseen ? g - unseen : 0.0;
        k->granted_m = (uint32_t)grant_m;
        double cap = replica_node_cap(k, k->share);
        if (k->tokens > cap)
            k->tokens = cap;
    }
    k->p.flags = (uint8_t)((k->p.flags & ~NK_YOUNG) | NK_LEASED);
    if (flags & WIRE_L_SETTLED) {
        /* The part this node keeps if the cluster splits (the owner's
         * caution caps its share there, and a side's bucket refills at
         * the sum of its nodes' parts: replica_owner.c, "A side's
         * bucket"): its part (replica_node__part), so the parts of all
         * nodes sum to one rate; its share if it has no demand.  A share follows demand with
         * headroom (a node that just saw a few requests close together holds more), and it is near
         * 0 where free units do the work. */
        double part = replica_node__part(r, k);
        if (part <= 0.0)
            part = share;
        /* Averaged over the key's life here, the last FSHARE_TAU_S or its
         * period at most: a node asked every few seconds reads its demand
         * high just after a request and low once idle, and a part frozen
         * at either gave one side of a split nearly all of the rate and
         * its part of the level, and the other nothing (per-minute keys
         * at half their limit, six nodes cut 3 | 3: 0.90 to 0.93 of one
         * central limiter during the partition). */
        double tau = (double)replica_node__since(k->born, now) / (2.0 * (double)NUM_NS_PER_S);
        double tau_max = (double)k->p.period_ns / (double)NUM_NS_PER_S;
        if (tau_max < FSHARE_TAU_S)
            tau_max = FSHARE_TAU_S;
        if (tau > tau_max)
            tau = tau_max;
        double dt = (double)(now - prev_lease) / (double)NUM_NS_PER_S;
        if (k->fshare <= 0.0F)
            k->fshare = (float)part;
        else if (dt > 0.0 && tau > 0.0)
            k->fshare += (float)(dt / (tau + dt) * (part - (double)k->fshare));
        /* The demand over the cluster (a report's known_demand_milli, for
         * an outvoted side's owner: replica_owner__yield), averaged the
         * same way: a node cut off alone from two may see one of them
         * declared dead before it even suspects the other, count itself
         * a majority for a moment and lease itself the whole key as the
         * only node asking (the others' demand 0), and that lease alone
         * left the side half the rate it should have yielded (three real
         * nodes, one cut off at twice the limit: 1.13 to 1.17 times one
         * central limiter over the partition in one run of three). */
        double known = (double)k->demand + (double)k->others;
        if (k->known_d <= 0.0F)
            k->known_d = (float)known;
        else if (dt > 0.0 && tau > 0.0)
            k->known_d += (float)(dt / (tau + dt) * (known - (double)k->known_d));
        r->synced = 1; /* an owner that knows the cluster has answered */
    }
}

/* A lease from member from (not this node) to this node's life: applied
 * to the key only if from owns it by this node's view (two owners' splits
 * must not mix); a lease for an earlier life, or from another owner, is
 * counted stale and dropped, one for a key this node no longer holds is
 * dropped. */
void replica_node_on_lease(struct replica *r, uint32_t from, uint64_t life,
                           const struct wire_lease *l, uint32_t hash)
{
    r->st.lease_entries_received++;
    /* A notice may come from an owner that has not heard this life yet
     * (life 0): it is advice about a key, not a lease to a life. */
    if (life != r->life && !(life == 0 && (l->flags & WIRE_L_NOTICE))) {
        r->st.stale_leases++;
        return;
    }
    if (l->flags & WIRE_L_NOTICE) {
        /* Only from the key's owner by this node's view. */
        if (r->nlive == 0 ||
            r->live[hrw_pick(hrw_hash(l->key, l->klen), r->live_hash, r->nlive)] != from) {
            r->st.stale_leases++;
            return;
        }
        replica_node__notice(r, l->key, l->klen, l, r->now);
        return;
    }
    struct table_entry *e = table_find_hashed(r->nodes, l->key, l->klen, hash);
    if (e == NULL)
        return;
    struct nkey *k = nkey_of(e);
    /* Only the owner by this node's view: two owners' splits must not mix. */
    if (replica_node_owner(r, k, l->key, l->klen) != from) {
        r->st.stale_leases++;
        return;
    }
    replica_node__apply_lease(r, k, l, r->now);
    replica_node__touch(r, k);
}

/* The one way the owner side leases to this node's own node side (a key
 * this node both owns and serves): no message, the lease is applied at
 * once.  As from any owner: only to this life (life: the life the owner's
 * record is for) and only while this node owns the key by its own view (a
 * record left from an earlier view must not lease); otherwise nothing
 * happens. */
static void replica_node__deliver(struct replica *r, struct table_entry *ne, uint64_t life,
                                  const struct wire_lease *l, int64_t now)
{
    if (ne != NULL && life == r->life &&
        replica_node_owner(r, nkey_of(ne), l->key, l->klen) == r->self)
        replica_node__apply_lease(r, nkey_of(ne), l, now);
}

void replica_node_deliver(struct replica *r, const char *key, size_t klen, uint64_t life,
                          const struct wire_lease *l, int64_t now)
{
    if (l->flags & WIRE_L_NOTICE)
        replica_node__notice(r, key, klen, l, now);
    else
        replica_node__deliver(r, table_find(r->nodes, key, klen), life, l, now);
}

void replica_node_deliver_owned(struct replica *r, struct table_entry *ote, uint64_t life,
                                const struct wire_lease *l, int64_t now)
{
    if (l->flags & WIRE_L_NOTICE) {
        replica_node__notice(r, table_entry_key(ote), ote->klen, l, now);
        return;
    }
    struct table_entry *ne = okey_of(ote)->mine;
    if (ne == NULL) {
        ne = table_find_hashed(r->nodes, table_entry_key(ote), ote->klen, ote->hash);
        if (ne != NULL)
            replica__link(ne, ote);
    }
    replica_node__deliver(r, ne, life, l, now);
}

/* Demand: requested units per second, refused ones included.  A young key
 * (its first second) uses the average since its first request, that
 * request left out (the key was made by it; the time before it is
 * unknown): far steadier than one interval's count, whose Poisson noise
 * would hand a quiet node a large share and waste it.  Then an EWMA over
 * DEMAND_TAU_S, one step per visit (dt: since the key's previous visit). */
static void replica_node__demand(struct replica *r, struct nkey *k, int64_t now)
{
    double age = (double)replica_node__since(k->born, now) / (double)NUM_NS_PER_S;
    if (!(k->p.flags & NK_GROWN)) {
        k->visited = replica_node__ms(now);
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
    int64_t dt = replica_node__since(k->visited, now);
    k->visited = replica_node__ms(now);
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
static int replica_node__contested(const struct nkey *k)
{
    double own = replica__rate(&k->p) * (double)NUM_NS_PER_S * k->share;
    return k->demand > 0.0 && (k->demand >= 0.5 * own || k->tokens < 1.0);
}

/* Whether the key's reports are news, not a refresh: contested, or asked
 * again within KEEN_NS (a request after its first).  A keen key reports
 * at the quiet period of a node of few keys (every_keen) and ahead of the
 * quiet ones (replica_node_visit): spread demand below the limit leans on
 * fresh leases, and on five nodes of 50,000 keys touched once each, keys
 * at half their limit, reported with those, were refused 4% of the time
 * where one central limiter refuses 0.1%.  A key touched once (a quota
 * of a unit an hour, each user once) is not keen. */
static int replica_node__keen(const struct nkey *k, int64_t now)
{
    if (replica_node__contested(k))
        return 1;
    int64_t ago = now - k->last_req;
    return ago < KEEN_NS && replica_node__since(k->born, now) > ago + NUM_NS_PER_MS;
}

/* The report period of key k: an interval when contested, else the quiet
 * period of its kind (replica__quiet_every). */
static int64_t replica_node__period(const struct replica *r, const struct nkey *k, int64_t now)
{
    if (replica_node__contested(k))
        return r->interval;
    return replica_node__keen(k, now) ? r->every_keen : r->every;
}

static int replica_node__full(const struct nkey *k)
{
    return k->tokens >= replica_node_cap(k, k->share) - 1e-9;
}

/* Whether k is a slow key whose units went back with its idle report
 * (replica_node__report). */
static int replica_node__gave_back(const struct replica *r, const struct nkey *k)
{
    return (k->p.flags & NK_IDLE) && replica__slow(&k->p, r->interval) && k->tokens <= 0.0;
}

/* Idle: the bucket is full again (or its units went back with the idle
 * report) and nothing was asked for IDLE_AFTER_NS (nor two intervals):
 * the key is reported idle once, then dropped after the grace. */
static int replica_node__idle(const struct replica *r, const struct nkey *k, int64_t now)
{
    int64_t quiet = IDLE_AFTER_NS > 2 * r->interval ? IDLE_AFTER_NS : 2 * r->interval;
    return (replica_node__full(k) || replica_node__gave_back(r, k)) && now - k->last_req >= quiet;
}

/* Whether k is out of units and free units while its key is far enough
 * from hammered for free units to be given (the owner answers such a
 * report at once; a hammered key waits for the owner's tick: answering
 * every report of every node would multiply the leases). */
static int replica_node__needs(const struct nkey *k)
{
    double rate = replica__rate(&k->p) * (double)NUM_NS_PER_S;
    return k->tokens < 1.0 && k->free < 1.0F && k->acc > 0.0F &&
           (double)k->demand + (double)k->others < FREE_DEMAND_MAX * rate;
}

/* Queues k's report to its owner (or hands it to itself); returns the
 * bytes it takes, 0 if nothing was sent. */
static size_t replica_node__report(struct replica *r, struct table_entry *e, int64_t now)
{
    struct nkey *k = nkey_of(e);
    uint32_t owner = replica_node_owner(r, k, table_entry_key(e), e->klen);
    int idle = replica_node__idle(r, k, now);
    if (idle) {
        k->demand = 0.0F; /* what is left of the EWMA is history */
        k->acc = 0.0F;
        /* A slow key's units go back with its idle report (the owner
         * counts a node's reported tokens as held): a unit is seconds of
         * its rate, and a node that held most of the burst when it fell
         * quiet (its share had followed its demand) left the others
         * drained until it dropped the key, the grace later, or longer if
         * the report was lost (per-minute keys on 16 nodes of burst 5 at
         * 0.8 of their limit with 10% loss: 0.969-0.988 of one central
         * limiter over seeds 1-40; 0.994-1.003 over seeds 1-30 with
         * this).  Not to an owner silent for two silence windows (a
         * partition): what it holds may be all this side has.  Its next
         * request is admitted on the free units of its last lease, or on
         * credit once that lapsed (replica_node__use_note). */
        if (replica__slow(&k->p, r->interval) && (k->p.flags & NK_LEASED) && k->leased_by != 0 &&
            now - k->last_lease <= 2 * r->silence)
            k->tokens = 0.0;
    }
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
        .period_ms = (uint64_t)(replica_node__period(r, k, now) / 1000000LL),
        .flags = (uint64_t)(((k->p.flags & NK_YOUNG) ? WIRE_R_YOUNG : 0) |
                            (idle ? WIRE_R_IDLE : 0) | (replica_node__needs(k) ? WIRE_R_NEED : 0)),
        .tokens_milli = k->tokens > 0.0 ? (uint64_t)(k->tokens * 1000.0) : 0,
        .granted_milli = k->granted_m,
        .leased_by = k->leased_by,
        .credit = k->credit,
    };
    /* Only after a silence (an idle report, then none) may the owner have
     * dropped this node's record (replica_owner__compute): then what it
     * admitted on credit since its previous report goes along (what it
     * spent of the units it held, the owner counts by its tokens); else it
     * would cost bytes on every report for nothing. */
    if (replica_node__since(k->last_report, now) > r->silence)
        w.unreported = k->credit - k->reported;
    k->reported = k->credit;
    /* The level this node knows, for an owner that makes the key's record
     * anew (a partition's other side, a restarted owner, a key moved back
     * at a heal; replica_owner_on_report): without it that owner took the
     * bucket as empty, and a slow key refilled for minutes (per-minute
     * keys at half their limit, six nodes cut 3 | 3: 0.8 of one central
     * limiter during the partition).  Only from a settled lease of the
     * last KNOWN_LEVEL_FOR silence windows or the key's period, whichever
     * is longer (a node asks for a per-minute key spread over many nodes
     * every half minute or so), and as replica_node__level projects it
     * (the other nodes taking all their demand meanwhile). */
    int64_t known_for = KNOWN_LEVEL_FOR * r->silence;
    if (known_for < k->p.period_ns)
        known_for = k->p.period_ns;
    if (k->p.policy == POLICY_PARTITION_SHARE && (k->p.flags & NK_LEASED) && k->leased_by != 0 &&
        now - k->last_lease <= known_for) {
        double m = replica_node__level(k, now) * 1000.0; /* no overflow for huge limits */
        w.known_milli = m <= 0.0 ? 1 : m >= 1.8e19 ? UINT64_MAX : (uint64_t)m + 1;
        double d = (double)k->known_d * 1000.0;
        w.known_demand_milli = d <= 0.0 ? 1 : d >= 1.8e19 ? UINT64_MAX : (uint64_t)d + 1;
    }
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
    k->last_report = replica_node__ms(now);
    k->p.flags &= (uint8_t)~NK_DIRTY;
    if (idle)
        k->p.flags |= NK_IDLE;
    r->st.report_entries_sent++;
    if (owner == r->self) {
        replica_owner_on_self_report(r, e, &w);
        return 0;
    }
    size_t before = r->mem[owner].outbuf[0] ? r->mem[owner].out[0].len : 0;
    if (replica_append(r, owner, 0, r->life, &w, NULL) != 0)
        return 0;
    size_t after = r->mem[owner].out[0].len;
    return after > before ? after - before : 64;
}

/* Tells k's owner that this node dropped the key, with the units its
 * bucket still held.  An owner that let this node go when it fell quiet
 * took those units out of the cluster's bucket (it might come back and
 * spend them, replica_owner__compute); now that it never will, the owner
 * gives them back, or the cluster would lose up to a unit for every node
 * that touched the key and went quiet (a key of 10 a minute spread over
 * 16 nodes admitted 0.89 of one central limiter).  Sent only for a key a
 * settled owner leased; a lost message loses those units as before.  A
 * slow key that gave its units back with its idle report is told of too,
 * holding none: if that report was lost, the owner still counts the units
 * as held and the node's share as reserved until it hears more. */
static void replica_node__gone(struct replica *r, struct table_entry *e)
{
    struct nkey *k = nkey_of(e);
    if (!(k->p.flags & NK_LEASED) || k->leased_by == 0 ||
        (k->tokens < 0.001 && !replica_node__gave_back(r, k)))
        return;
    uint32_t owner = replica_node_owner(r, k, table_entry_key(e), e->klen);
    struct wire_report w = {
        .key = table_entry_key(e),
        .klen = e->klen,
        .flags = WIRE_R_GONE,
        .tokens_milli = (uint64_t)(k->tokens * 1000.0),
        .leased_by = k->leased_by,
    };
    r->st.report_entries_sent++;
    if (owner == r->self)
        replica_owner_on_self_report(r, e, &w);
    else
        (void)replica_append(r, owner, 0, r->life, &w, NULL);
}

/* Whether k is due for a report at now. */
static int replica_node__due(const struct replica *r, const struct nkey *k, int64_t now)
{
    if (k->p.flags & NK_DIRTY)
        return 1;
    if (replica_node__idle(r, k, now))
        return !(k->p.flags & NK_IDLE); /* one idle report, then silence */
    return replica_node__since(k->last_report, now) >=
           replica_node__period(r, k, now) - NUM_NS_PER_MS; /* ms-rounded */
}

int replica_node_prompt(struct replica *r, size_t i, int64_t now)
{
    if (i >= r->nnk)
        return 0;
    struct table_entry *e = r->nk[i];
    struct nkey *k = nkey_of(e);
    if (k->asked != ASK_QUEUED)
        return 0;
    k->asked = ASK_NONE;
    replica_node_refill(k, now);
    if (!replica_node__needs(k) ||
        !replica_take(&r->pr_tokens, &r->pr_last, PROMPT_RATE, PROMPT_RATE, now))
        return 0;        /* a lease came meanwhile; or the next pass reports it */
    k->asked = ASK_SENT; /* first: an owner on this node answers within the report */
    (void)replica_node__report(r, e, now);
    r->st.prompt_reports++;
    return 1;
}

/*
 * The share a node of an outvoted side keeps of a key whose owner is on
 * the other side (replica_node_visit): its part of what the majority's
 * demand leaves of the rate, as the owner side's yield has it
 * (replica_owner__yield, 1 - D (1 - P)), from what this node alone knows.
 * Until this side's failure detector declares the majority dead and the
 * key moves to an owner here, which yields for the side, its nodes kept
 * their frozen shares on top of the whole rate the majority lends itself
 * once it has declared this side dead: two of five real nodes cut off
 * for 10 s at twice the limit, their detector 2 to 7 s behind the
 * majority's (it fails most of its probes), admitted 1.03 to 1.15 times
 * one central limiter over the partition, 0.95 to 0.99 with this; at the
 * default 1 s probe interval, cut off for 20 s, 1.17 and 1.22, 1.03 and
 * 1.05 with this.  It yields as soon as it is outvoted, a few probe
 * intervals after the cut, about when the majority's verdict comes at
 * the default probe interval; with the tests' 200 ms probes the
 * majority's verdict comes later and the rate goes to nobody in between
 * (1.2 times the limit: 0.95, 0.98 before).  Waiting the majority's
 * shortest suspicion timeout more gave 1.02 and 0.97 there, but 1.14 and
 * 1.15 at the default interval.
 *
 * D is the key's demand over the cluster as this node's settled leases
 * told it (known_d), in rates; f its frozen share (its share if it has
 * none); the side's parts P are taken as f for each member of the side
 * (live, not quiet), the spread a load balancer makes.  Where this node
 * holds less than its side's mean the side yields more than the owner
 * side would, where more, less; below the limit (D <= 1) the yield leaves
 * more than P, and the node keeps its share.  At least SIDE_MIN of the
 * rate for the side, as the owner side's bucket.  Returns the share to
 * keep at most; 1 when nothing is known.
 */
static double replica_node__yield(const struct replica *r, const struct nkey *k)
{
    double rate = replica__rate(&k->p) * (double)NUM_NS_PER_S;
    double f = k->fshare > 0.0F ? (double)k->fshare : (double)k->share;
    if (rate <= 0.0 || k->known_d <= 0.0F || f <= 0.0)
        return 1.0;
    double part = f * (double)(r->side_n > 0 ? r->side_n : 1);
    if (part >= 1.0)
        return 1.0;
    /* The side's demand now as this node can tell: its own, times the
     * side's members (the same spread as part). */
    double d = (double)k->known_d / rate;
    double now_d = (double)k->demand * (double)(r->side_n > 0 ? r->side_n : 1) / rate;
    double left =
        replica__left(d, part, replica__moved(d, part, now_d, MOVED_GROWTH, (double)k->demand));
    if (left >= part)
        return 1.0;
    if (left < SIDE_MIN)
        left = SIDE_MIN;
    return f * left / part;
}

/* Visits node key i: demand, refill, owner, degradation; reports it when
 * dirty (always) or due (within the pass's byte budget); keeps it queued
 * while contested; drops it once drained.  Returns VISIT_DROPPED if it was
 * dropped (another key now sits at i), VISIT_REPORTED if a report was
 * built, else 0. */
int replica_node_visit(struct replica *r, size_t i, int64_t now)
{
    int rc = 0;
    struct table_entry *e = r->nk[i];
    struct nkey *k = nkey_of(e);
    k->p.flags &= (uint8_t)~NK_HOT;
    replica_node__demand(r, k, now);
    replica_node_refill(k, now);
    uint32_t owner = replica_node_owner(r, k, table_entry_key(e), e->klen);
    /* This side outvoted and the owner on the other (quiet: a dead one
     * owns no key): at most the share the majority's demand leaves.  Slow
     * keys keep theirs, as on the owner side (thin keys are slow). */
    double most = 1.0;
    if (owner != r->self && r->mem[owner].quiet && k->p.policy == POLICY_PARTITION_SHARE &&
        !replica__slow(&k->p, r->interval) && r->outvoted)
        most = replica_node__yield(r, k);
    /* Asked, no answer for two silence windows: shown as degraded (the
     * node keeps its last lease until the key moves to a live owner, its
     * share at least replica_node__part and its bucket a unit
     * larger: replica_node_cap). */
    if (owner != r->self && k->demand > 0.0 && now - k->last_lease > 2 * r->silence) {
        double s = replica_node__part(r, k);
        if (s > most)
            s = most;
        if (k->thin && !(k->p.flags & NK_DEGRADED)) {
            /* A thin key's units were all in the owner's bucket: the node
             * takes its part of the level it knew, and from then on its
             * part's refill, instead of a unit on credit for every request
             * once its lease lapsed (replica_node__use_note), which admitted
             * all a key's requests until the failure detector's verdict
             * (per-minute keys at twice their limit, six real nodes cut
             * 3 | 3: 1.08 to 1.18 times one central limiter over the
             * partition). */
            double lv = replica_node__level(k, now);
            k->tokens = lv > 0.0 ? s * lv : 0.0;
            k->last_ns = now;
        }
        k->p.flags |= NK_DEGRADED;
        if (s > (double)k->share)
            replica_node__set_share(k, s, now);
    }
    if (most < (double)k->share)
        replica_node__set_share(k, most, now);
    int starved = 0, keen = replica_node__keen(k, now);
    if (k->p.flags & NK_DIRTY) {
        rc = VISIT_REPORTED;
    } else if (replica_node__due(r, k, now)) {
        /* A quiet key reports only while the budget is above the keen
         * keys' part: those follow demand, and a quiet key's report can
         * wait (replica__quiet_every). */
        rc = r->budget > (keen ? 0 : replica__quiet_floor(r)) ? VISIT_REPORTED : 0;
        starved = rc == 0;
    }
    if (rc == VISIT_REPORTED) {
        size_t b = replica_node__report(r, e, now);
        r->budget = b > r->budget ? 0 : r->budget - b;
    }
    if (replica_node_drain(r, e) <= now) {
        r->st.gc_keys++;
        replica_node__gone(r, e);
        table_delete(r->nodes, e); /* moves the last key to i */
        return VISIT_DROPPED;
    }
    /* A due key the budget could not take goes first in the next pass's
     * part of its kind (a fair rotation: those reported queue up behind
     * it); a contested one is checked every interval. */
    if (starved)
        replica_node__queue_on(k, keen ? &r->curgent : &r->urgent);
    else if (replica_node__contested(k))
        replica_node__queue(r, k);
    return rc;
}
