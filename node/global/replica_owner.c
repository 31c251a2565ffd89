/*
 * replica_owner: the owner side of the replica (see replica.h), the keys
 * this node owns by rendezvous hashing (hrw.h).  It keeps a record per key
 * and reporting node from the reports it receives, the cluster's bucket of
 * the key (a GCRA), splits the key's limit between the reporters by demand,
 * grants the units nobody holds, gives free units, tracks debt and its
 * repayment, and sends the leases.  A lease for this node's own node side
 * goes through replica_node_deliver, the one way into the node side.  The
 * shared state (struct replica, struct okey, struct orep) is in
 * replica_int.h; no I/O here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replica_int.h"
#include "sluice/error.h"

/* Queues owner key o for a computation. */
static void replica_owner__oqueue(struct replica *r, struct okey *o)
{
    if (!(o->p.flags & OK_QUEUED) && replica_idx_push(&r->ohot, o->idx) == 0)
        o->p.flags |= OK_QUEUED;
}

/* An owner key is as good as absent once no reporter is left and, for a
 * bucket, the cluster's bucket has refilled: until then o->tat holds what
 * the cluster admitted, and a report would otherwise make the key anew,
 * full, a fresh quota.  Reporters are dropped when silent for long, and a
 * quiet key's reports may be minutes apart (replica__quiet_every): a
 * hundred thousand keys of a unit an hour, each node's reporters of them
 * dropped before their next report came, were dropped with them. */
int64_t replica_owner_drain(void *ud, const struct table_entry *e)
{
    (void)ud;
    const struct okey *o = (const struct okey *)table_entry_value((struct table_entry *)e);
    if (o->n > 0)
        return INT64_MAX;
    return o->p.bucket ? o->tat : 0;
}

void replica_owner_free(void *ud, struct table_entry *e)
{
    struct replica *r = ud;
    struct okey *o = okey_of(e);
    r->nreps -= o->n;
    if (o->reps != &o->one)
        free(o->reps);
    o->reps = NULL;
    if (o->mine != NULL)
        nkey_of(o->mine)->own = NULL;
    uint32_t i = o->idx;
    if (i < r->nok && r->ok[i] == e) {
        r->ok[i] = r->ok[--r->nok];
        if (i < r->nok) {
            struct okey *m = okey_of(r->ok[i]);
            m->idx = i;
            if (m->p.flags & OK_QUEUED) {
                m->p.flags &= (uint8_t)~OK_QUEUED;
                replica_owner__oqueue(r, m);
            }
        }
    }
}

/* ---- reports received ------------------------------------------------------ */

/* Makes room for one more reporter in o->reps: the record's own slot for
 * the first (o->one), then a heap array that doubles.  Fails with
 * -SLUICE_ENOMEM, o unchanged. */
static int replica_owner__add_rep(struct okey *o)
{
    if (o->n < o->cap)
        return 0;
    if (o->cap == 0) {
        o->reps = &o->one;
        o->cap = 1;
        return 0;
    }
    uint32_t nc = o->cap * 2;
    struct orep *a;
    if (o->reps == &o->one) {
        a = malloc(nc * sizeof(*a));
        if (a != NULL)
            memcpy(a, o->reps, o->n * sizeof(*a));
    } else {
        a = realloc(o->reps, nc * sizeof(*a));
    }
    if (a == NULL)
        return -SLUICE_ENOMEM;
    o->reps = a;
    o->cap = nc;
    return 0;
}

static struct orep *replica_owner__rep(struct okey *o, uint32_t member)
{
    for (uint32_t i = 0; i < o->n; i++)
        if (o->reps[i].member == member)
            return &o->reps[i];
    return NULL;
}

/* The part of the rate o's bucket refills at: 1, or a side's (o->side). */
static double replica_owner__part(const struct okey *o)
{
    return o->side > 0.0F ? (double)o->side : 1.0;
}

/* Units a second o's bucket refills at: the whole rate, or a side's part. */
static double replica_owner__rate(const struct okey *o)
{
    return replica__rate(&o->p) * (double)NUM_NS_PER_S * replica_owner__part(o);
}

/* Units of the cluster's bucket o->tat taken at now (of a side's bucket
 * while the view is split: replica_owner__compute). */
static double replica_owner__used(const struct okey *o, int64_t now)
{
    return o->tat > now ? (double)(o->tat - now) / replica__em(&o->p) * replica_owner__part(o)
                        : 0.0;
}

/* Units below empty that are report timing, not excess: one unit and an
 * interval's refill (the debt rule of replica_owner__compute and the credit rule
 * of replica_owner_on_report both allow it). */
static double replica_owner__timing(const struct replica *r, const struct okey *o)
{
    return 1.0 + (double)r->interval / replica__em(&o->p);
}

/* Pours units into the cluster's bucket o->tat (a GCRA) as if they came
 * from `from` on (from <= now: units spread over [from, now] are taken as
 * one central GCRA would have taken them); negative units give some back at
 * now, never below a full bucket. */
static void replica_owner__pour_from(struct okey *o, double units, int64_t from, int64_t now)
{
    double add = units * replica__em(&o->p) / replica_owner__part(o);
    int64_t at = add >= 0.0 ? from : now;
    int64_t base = o->tat > at ? o->tat : at;
    if (add >= 0.0)
        o->tat = add > 9e18 - (double)base ? INT64_MAX : base + (int64_t)add;
    else
        o->tat = (double)(base - now) > -add ? base + (int64_t)add : now;
}

/* Pours units into the cluster's bucket at now (replica_owner__pour_from). */
static void replica_owner__pour(struct okey *o, double units, int64_t now)
{
    replica_owner__pour_from(o, units, now, now);
}

static void replica_owner__compute(struct replica *r, struct table_entry *te, int64_t now,
                                   uint32_t asker);

/* Takes the cluster's bucket to at most level units left at now. */
static void replica_owner__at_most(struct okey *o, double level, int64_t now)
{
    double limit = (double)replica__limit(&o->p);
    double want = limit - (level > 0.0 ? level : 0.0) - replica_owner__used(o, now);
    if (want > 0.0)
        replica_owner__pour(o, want, now);
}

/*
 * A share key's reporter that another owner leased (a key that moved: to
 * the other side of a split, back at its heal, to a restarted owner).
 * This owner cannot know what the key's other users took meanwhile, so it
 * counts the level that reporter knows (wire known_milli; none known: the
 * bucket is taken as empty, as for a restarted node, which knows none):
 *  - a record new with this report, or one that already counted that
 *    other owner's side (o->merged), holds at most that level;
 *  - a record this owner kept (a heal: its own side spent from the same
 *    bucket) holds at most its level plus that level less the limit:
 *    both sides spent from the level at the cut, and both levels include
 *    the refill since, so that much is left at most.
 * Each side then keeps its part of that level ("A side's bucket", in
 * replica_owner__compute); over a long partition each side's bucket may
 * refill to a burst of its own (the bound's burst term, replica.h).
 * Before the level was reported, every such record was taken as empty,
 * and a slow key refilled for minutes (per-minute keys at half their
 * limit, six nodes cut 3 | 3: 0.8 of one central limiter during the
 * partition).
 */
static void replica_owner__foreign(struct okey *o, const struct wire_report *e, int made,
                                   int64_t now)
{
    double limit = (double)replica__limit(&o->p);
    double known = e->known_milli > 0 ? (double)(e->known_milli - 1) / 1000.0 : 0.0;
    if (known > limit)
        known = limit;
    uint16_t tag = (uint16_t)(e->leased_by | 1u);
    if (made || o->merged == tag)
        replica_owner__at_most(o, known, now);
    else
        replica_owner__at_most(o, known - replica_owner__used(o, now), now);
    o->merged = tag;
    o->p.flags |= OK_EMPTIED;
}

/* A report entry, as replica_owner_on_report_hashed; ne: the reporting
 * node entry when the report is this node's own (NULL otherwise), whose
 * record is found through nkey.own and linked to it (okey.mine) once
 * found or made. */
static void replica_owner__report(struct replica *r, uint32_t from, uint64_t life,
                                  const struct wire_report *e, uint32_t hash,
                                  struct table_entry *ne)
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
    struct table_entry *te = ne != NULL ? nkey_of(ne)->own : NULL;
    if (te == NULL)
        te = table_find_hashed(r->owned, e->key, e->klen, hash);
    struct okey *o;
    int made = 0; /* the record is new with this report */
    if (te == NULL) {
        if (e->flags & WIRE_R_GONE)
            return;
        if (bare) {
            /* Not known here (a new life, a record dropped): no lease goes
             * back, and the reporter sends the limit again. */
            r->st.bare_unknown++;
            return;
        }
        if (table_insert_hashed(r->owned, e->key, e->klen, hash, sizeof(struct okey), 0, r->now,
                                &te) != 0)
            return;
        o = okey_of(te);
        o->idx = (uint32_t)r->nok;
        if (replica_push(&r->ok, &r->nok, &r->capok, te) != 0) {
            table_delete(r->owned, te);
            return;
        }
        o->created_at = r->now;
        o->computed_at = r->now;
        o->tat = r->now;
        made = 1;
        if (e->leased_by == 0 && !(e->flags & WIRE_R_YOUNG))
            o->p.flags |= OK_BORN;
    } else {
        o = okey_of(te);
    }
    if (ne != NULL)
        replica__link(ne, te);
    if (!bare) {
        replica__limit_of(&o->p, &p);
        o->p.policy = e->policy == POLICY_PARTITION_OPTIMISTIC ? POLICY_PARTITION_OPTIMISTIC
                                                               : POLICY_PARTITION_SHARE;
    }
    struct orep *rp = replica_owner__rep(o, from);
    if (e->flags & WIRE_R_GONE) {
        if (rp != NULL) {
            /* Its record is still here: what it held was never taken out
             * of the bucket, and it is gone with the node's key. */
            *rp = o->reps[--o->n];
            r->nreps--;
        } else if (o->p.bucket && o->p.policy == POLICY_PARTITION_SHARE &&
                   e->leased_by == wire_life_tag(r->life)) {
            /* This owner let it go when it fell quiet and took what it held
             * out of the bucket (replica_owner__compute, rounded up the
             * same way): it will never spend it now. */
            replica_owner__pour(o, -ceil((double)e->tokens_milli / 1000.0), r->now);
        }
        o->p.flags |= OK_FRESH;
        replica_owner__oqueue(r, o);
        return;
    }
    if (rp == NULL) {
        if (replica_owner__add_rep(o) != 0)
            return;
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
        if (e->leased_by != 0 || (e->flags & WIRE_R_YOUNG))
            o->p.flags &= (uint8_t)~OK_BORN; /* the key has a past, or may have */
        if (e->leased_by == 0) {
            replica_owner__pour(o, (double)e->admitted, r->now);
        } else if (e->leased_by != wire_life_tag(r->life)) {
            if (share)
                replica_owner__foreign(o, e, made, r->now);
        } else if (share) {
            /* Back after this owner let it go (and took what it held out
             * of the bucket): what it still holds is counted as held, and
             * what it admitted on credit since its previous report (a
             * thin key's odds or notices, above all) is counted now: the
             * record that knew its count is gone (what it spent of the
             * units it held, its tokens tell). */
            replica_owner__pour(o, (double)e->unreported - (double)e->tokens_milli / 1000.0,
                                r->now);
        }
    } else if (e->admitted >= rp->admitted) {
        /* What a side admitted beyond the limit during a partition arrives
         * here at once after healing (optimistic keys repay it).  A share
         * key's node kept to its last share while silent (BACK_AFTER
         * intervals or more: a partition, not a report late in a long
         * rotation): what it admitted then was that share's refill, spent
         * long ago, so it may empty the bucket but not put it in debt. */
        int back = share && r->now - rp->last_at > BACK_AFTER * r->interval;
        int64_t empty = r->now + (int64_t)((double)replica__limit(&o->p) * replica__em(&o->p) /
                                           replica_owner__part(o));
        int64_t tat0 = o->tat;
        /* The units came over the time since its last report, not at
         * once: poured from then (at most two report periods back), a
         * node that admits at the rate keeps the bucket where one central
         * GCRA would, where poured at now a report's batch looked like a
         * debt (a key of burst 0 at its rate on one node, reported every
         * 100 to 150 ms: 10 to 15 units at once, and its share went to 0
         * for a fifth of a second at a time). */
        int64_t since = rp->last_at, span = 2 * (int64_t)rp->period_cs * 10000000LL;
        if (span < 2 * r->interval)
            span = 2 * r->interval;
        if (since < r->now - span)
            since = r->now - span;
        replica_owner__pour_from(o, (double)(e->admitted - rp->admitted), since, r->now);
        if (back && o->tat > empty)
            o->tat = tat0 > empty ? tat0 : empty;
    } else {
        /* The node dropped the key and made it anew: its counts restarted. */
        replica_owner__pour(o, (double)e->admitted, r->now);
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
        double over = replica_owner__used(o, r->now) - (double)replica__limit(&o->p) -
                      replica_owner__timing(r, o);
        if (over > 0.0)
            o->repay += (float)(over < (double)dcredit ? over : (double)dcredit);
    }
    rp->tokens = (float)((double)e->tokens_milli / 1000.0);
    rp->demand = (float)((double)e->demand_milli / 1000.0);
    /* A node that dropped the key and made it anew knows no frozen share
     * (none until its next settled lease): the record keeps the last. */
    if (e->frozen_share > 0 || !same_life)
        rp->fshare_q = (uint16_t)floor((double)e->frozen_share / (double)WIRE_ONE * FSHARE_ONE);
    double kq = 0.0;
    if (e->known_demand_milli > 0) {
        kq = (double)(e->known_demand_milli - 1) / 1000.0 /
             (replica__rate(&o->p) * (double)NUM_NS_PER_S) * KNOWN_Q_ONE;
        kq = kq < 1.0 ? 1.0 : kq > 255.0 ? 255.0 : kq + 0.5;
    }
    rp->known_q = (uint8_t)kq;
    rp->admitted = e->admitted;
    uint64_t cs = (e->period_ms + 9) / 10;
    rp->period_cs = (uint16_t)(cs < 1 ? 1 : cs > 65535 ? 65535 : cs);
    rp->last_at = r->now;
    rp->flags = (uint8_t)(REP_FRESH | ((e->flags & WIRE_R_YOUNG) ? REP_YOUNG : 0) |
                          ((e->flags & WIRE_R_IDLE) ? REP_IDLE : 0));
    o->p.flags |= OK_FRESH;
    replica_owner__oqueue(r, o);
    /* A node out of units and free units asks: answer now, not at this
     * owner's next tick (the lease goes out with this receive's batch); a
     * prompt report of this node's own (replica_node_prompt) too. */
    if ((e->flags & WIRE_R_NEED) && (from != r->self || r->prompting)) {
        r->answering = from; /* its lease goes out at once (replica__flush) */
        replica_owner__compute(r, te, r->now, from);
        r->answering = UINT32_MAX;
    }
}

void replica_owner_on_report_hashed(struct replica *r, uint32_t from, uint64_t life,
                                    const struct wire_report *e, uint32_t hash)
{
    replica_owner__report(r, from, life, e, hash, NULL);
}

void replica_owner_on_self_report(struct replica *r, struct table_entry *ne,
                                  const struct wire_report *e)
{
    replica_owner__report(r, r->self, r->life, e, ne->hash, ne);
}

/* Whether a reporter still speaks for itself: it reported within three of
 * its periods (at least a silence window). */
int replica_owner_rep_live(const struct replica *r, const struct orep *rp, int64_t now)
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

/* A silent reporter whose share is released rather than held: the failure
 * detector calls it unreachable and this node sees a strict majority of
 * the members it knows.  A side that has lost the majority (or an even
 * split) cannot tell a death from a partition and holds every silent
 * share; a majority lets a dead minority's share go, so a crash costs the
 * others nothing for long.  Suspects make no majority (as the slots'
 * quorum, slots.c): the failure detector declares the members of the
 * other side of a split dead one at a time, and counting those not yet
 * declared, each side of six nodes cut 3 | 3 had a majority of 5, then 4,
 * of 6 for about 2 s, released the parts of the members already declared
 * and admitted up to 1.3 times one central limiter over the partition at
 * twice the limit (integration_test_global_partition_spread's shape);
 * by then those not yet declared are suspected.  Nor do quiet members
 * (not heard from for a while: cluster.c): a node cut off alone from two
 * saw one of them declared dead before it even suspected the other, and
 * counted itself a majority for up to a second, presuming the first dead
 * and leasing itself the whole rate of the keys that moved to it. */
static int replica_owner__majority(const struct replica *r)
{
    size_t known = 0, sure = 0;
    for (size_t i = 0; i < r->nmem; i++) {
        known += r->mem[i].in_view;
        sure += r->mem[i].in_view && r->mem[i].live && !r->mem[i].suspect && !r->mem[i].quiet;
    }
    return 2 * sure > known;
}

/* The other side of a split: the members this node sees declared dead or
 * quiet (not heard from lately, suspected or not: cluster.c) are a strict
 * majority of those it knows, so they are, or are about to be, the side
 * that presumes this one dead (replica_owner__majority) and spends its
 * part.  Quiet ones count: the minority's failure detector, failing most
 * of its probes, declares the majority's members one at a time, seconds
 * after the majority has declared the minority's.  Not every suspect: in
 * the simulator, whose detector suspects both sides at once, a minority
 * that yielded at its suspicions, before the majority's verdict, admitted
 * 0.85 to 0.90 of one central limiter over the partition (16 nodes cut
 * 7 | 9, 7 cut 3 | 4, at three times the limit). */
int replica_owner_outvoted(const struct replica *r)
{
    size_t known = 0, dead = 0;
    for (size_t i = 0; i < r->nmem; i++) {
        known += r->mem[i].in_view;
        dead += r->mem[i].in_view && (!r->mem[i].live || r->mem[i].quiet);
    }
    return 2 * dead > known;
}

/* What replica_owner__compute sums over a key's live reporters, for the
 * outvoted side's yield and the demand that moved: their parts (frozen
 * shares, or shares for those without one: part; frozen shares only:
 * fsum), the key's demand over the cluster as their settled leases told
 * them (known over nknown, in rates), and how many ask (not idle, demand
 * above 0). */
struct replica_owner__live {
    double part, fsum, known;
    uint32_t nknown, asking;
};

static void replica_owner__live_add(struct replica_owner__live *lv, const struct orep *rp)
{
    double f = replica__rep_fshare(rp);
    lv->part += f > 0.0 ? f : (double)rp->share;
    lv->fsum += f;
    lv->asking += !(rp->flags & REP_IDLE) && rp->demand > 0.0F;
    if (rp->known_q > 0) {
        lv->known += (double)rp->known_q / KNOWN_Q_ONE;
        lv->nknown++;
    }
}

/* The growth of its demand a side needs to have taken moved demand
 * (replica__moved): less if it had at its last computation, its side's
 * part (o->side) then well beyond its parts p. */
static double replica_owner__growth(const struct okey *o, double p)
{
    return (double)o->side > 1.25 * p && p > 0.0 ? MOVED_GROWTH_KEEP : MOVED_GROWTH;
}

/*
 * How much of the unreachable reporters' demand has moved to the live ones
 * (replica__moved), 0 to 1, with the live ones' parts p: the key's demand
 * over the cluster as their settled leases told them (orep.known_q, their
 * mean) and their demand now (dsum, units/s), from struct
 * replica_owner__live.  The outvoted side's yield takes p as their parts
 * (replica_owner__yield); what is held for the others and how far frozen
 * shares may grow take their frozen shares (replica_owner__compute): the
 * parts held for the others (reserved) are held for what did not move: a
 * load balancer that sent a crashed node's clients to the others moved
 * its demand, and its part held for nobody refused them (two of three
 * killed, their clients sent to the third, at half the limit: 0.74 of one
 * central limiter); and the live ones may grow beyond their frozen shares
 * by as much while the owner is cautious (the survivor then held its
 * third of the rate: 0.76).
 */
static double replica_owner__moved(const struct okey *o, const struct replica_owner__live *lv,
                                   double dsum, double p)
{
    double rate = replica__rate(&o->p) * (double)NUM_NS_PER_S;
    if (lv->nknown == 0 || rate <= 0.0)
        return 0.0;
    return replica__moved(lv->known / (double)lv->nknown, p, dsum / rate,
                          replica_owner__growth(o, p), lv->asking > 0 ? dsum / lv->asking : 0.0);
}

/*
 * What an outvoted side may take of the rate (replica_owner_compute): what
 * the majority's demand leaves of it.  The majority, presuming this side
 * dead, lends the whole rate to its own nodes, which spend as much of it
 * as they ask for; the parts this side kept from the whole cluster came on
 * top of that, and at and beyond the limit a partition admitted the
 * minority's part more (one node of three cut off for 10 s at twice the
 * limit: 1.34 to 1.37 times one central limiter over the partition).
 *
 * The majority's demand is the key's demand over the cluster as this
 * side's nodes' last settled leases told them (orep.known_q, their mean),
 * less this side's part of it: at or beyond the limit a node's part (its
 * frozen share) is its part of the demand, so with P the sum of this
 * side's parts and D that demand in rates, the majority asks D (1 - P) and
 * leaves 1 - D (1 - P).  Below the limit (D < 1) that is more than P, and
 * the side keeps its parts.  Not this side's demand now in place of D P:
 * the estimates are noisy, and the estimate took from a side the room the
 * majority left it (16 nodes cut 7 | 9 at three times the limit: 0.80 of
 * one central limiter over the partition).  Slow keys keep their parts
 * (the caller): a node asked for a per-minute key every few seconds reads
 * its demand several times too high after each request.
 *
 * A side cannot tell a partition from its majority's death.  What tells
 * them apart, now and then, is where the demand went: a load balancer
 * sends a crashed majority's clients to the survivors, whose demand then
 * grows toward D, and the majority's part of it is taken off as far as
 * it moved (replica__moved: the side's demand now, dnow).  A crash whose
 * clients go nowhere costs the survivors, for keys at or beyond their
 * limit, what the dead majority's last demand would take, until the dead
 * come back or are forgotten (libgossip's dead members' retention, 30 s).
 * Returns a part of the rate, 0 to 1; 1 when no node of the side knows
 * the demand.
 */
static double replica_owner__yield(const struct okey *o, const struct replica_owner__live *lv,
                                   double dsum)
{
    if (lv->nknown == 0 || replica__rate(&o->p) <= 0.0)
        return 1.0;
    return replica__left(lv->known / (double)lv->nknown, lv->part,
                         replica_owner__moved(o, lv, dsum, lv->part));
}

static int replica_owner__presumed_dead(const struct replica *r, const struct orep *rp)
{
    const struct member *m = &r->mem[rp->member];
    if (!m->in_view || m->live)
        return 0;
    return replica_owner__majority(r);
}

/* How far an optimistic key's reported consumption is beyond what the
 * limit allows (ns; <= 0: none).  The allowance is the burst plus 2 s of
 * the rate, so reports that arrive late or together never look like debt. */
int64_t replica_owner_debt(const struct okey *o, int64_t now)
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
void replica_owner_split(struct replica *r, struct okey *o, double avail, double dsum, int64_t now)
{
    double rate = (double)o->p.count * (double)NUM_NS_PER_S / (double)o->p.period_ns;
    uint32_t nl = 0;
    for (uint32_t i = 0; i < o->n; i++)
        if (replica_owner_rep_live(r, &o->reps[i], now)) {
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
            if (!replica_owner_rep_live(r, rp, now))
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
        if (rp->share > -0.5 || !replica_owner_rep_live(r, rp, now))
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
static double replica_owner__held(const struct replica *r, const struct orep *rp, int64_t now,
                                  double em, double limit, double *room)
{
    double had = rp->sent_share > 0.0F ? rp->sent_share : 0.0;
    double since = now > rp->last_at ? (double)(now - rp->last_at) : 0.0;
    /* Leased nothing, a node cannot spend a part of a unit: it is not
     * held (a share later refills it, a unit early at most). */
    double h = had > 0.0 ? rp->tokens + had * since / em : floor(rp->tokens);
    double out = (double)(uint32_t)(rp->g_sent - rp->g_ack) / 1000.0;
    *room = 0.0;
    if (replica_owner_rep_live(r, rp, now)) {
        double cap = had * limit < 1.0 ? 1.0 : had * limit;
        if (h > cap + 1.0)
            h = cap + 1.0; /* a bucket holds no more (headroom included) */
        /* Only a node that asks gets grants: units given to one that only
         * peeked would sit there while the others are refused. */
        if (rp->share > 0.0F && rp->demand > 0.0F && !(rp->flags & REP_IDLE)) {
            double room_ = (rp->share * limit < 1.0 ? 1.0 : rp->share * limit) - h - out;
            *room = room_ > 0.0 ? room_ : 0.0;
        }
    } else if (replica_owner__presumed_dead(r, rp)) {
        return -1.0; /* what it held died with it */
    }
    return h + out;
}

/* The room of rp (replica_owner__held's) while its key's record settled
 * early (replica_owner__compute): what its demand takes over early_s
 * seconds, a unit more, less what it holds (grants not acknowledged
 * included).  early_s 0: the room. */
static double replica_owner__early_room(const struct orep *rp, double h, double room,
                                        double early_s)
{
    if (early_s <= 0.0)
        return room;
    double most = (double)rp->demand * early_s + 1.0 - (h > 0.0 ? h : 0.0);
    return room < most ? room : most > 0.0 ? most : 0.0;
}

/* Grants the central bucket's units that nobody holds to the live
 * reporters with room, in proportion to the room (see above), each at most
 * what replica_owner__early_room leaves it while early_s > 0.  What the
 * nodes hold beyond the bucket (the first units of a key each node takes
 * before its owner hears of it) leaves nothing to grant. */
static void replica_owner__grant(const struct replica *r, struct okey *o, int64_t now,
                                 double early_s)
{
    double em = replica__em(&o->p);
    double limit = (double)replica__limit(&o->p);
    double slack = limit - replica_owner__used(o, now), roomsum = 0.0, room;
    for (uint32_t i = 0; i < o->n; i++) {
        double h = replica_owner__held(r, &o->reps[i], now, em, limit, &room);
        if (h > 0.0)
            slack -= h;
        roomsum += replica_owner__early_room(&o->reps[i], h, room, early_s);
    }
    if (slack < 0.001 || roomsum <= 0.0) /* parts of a unit too: they complete one */
        return;
    double give = slack < roomsum ? slack : roomsum;
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        double h = replica_owner__held(r, rp, now, em, limit, &room);
        room = replica_owner__early_room(rp, h, room, early_s);
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
static void replica_owner__free(const struct replica *r, struct okey *o, double dsum, int settled,
                                int64_t now)
{
    /* A side's bucket (o->side) refills at its part of the rate. */
    double part_of = replica_owner__part(o);
    double limit = (double)replica__limit(&o->p);
    double spare = limit - replica_owner__used(o, now);
    double rate = replica_owner__rate(o);
    /* Below the limit the bucket refills faster than it drains: what it
     * will have by the time the next leases are in use counts too. */
    double ahead = spare + FREE_AHEAD * (double)r->interval / replica__em(&o->p) * part_of;
    uint32_t nl = 0;
    double dall = 0.0; /* every reporter's demand, late ones included */
    for (uint32_t i = 0; i < o->n; i++) {
        nl += (uint32_t)replica_owner_rep_live(r, &o->reps[i], now);
        dall += (o->reps[i].flags & REP_IDLE) ? 0.0 : o->reps[i].demand;
    }
    /* Free units over-commit only while the demand is within a few times
     * the rate, or the spare covers all of it for twice the time until the
     * next leases with a unit to spare.  The second matters for a slow
     * key: a minute's limit asked a few times a minute on each node reads
     * as many times its rate on a node that just saw two requests close
     * together, and its free units stopped while the bucket held most of
     * its burst (5 nodes of burst 16 at twice a per-minute limit admitted
     * 0.91 of one central limiter, 0.99 with this).  Twice, not once: a
     * burst-dominated key truly asked at ten times its rate (15 at once,
     * 30 a minute) has that much spare now and then, and free units on top
     * of the grants put its worst key at up to 1.27 times the oracle (1.23
     * with twice, 1.17 without the rule, over 80 seeds). */
    double horizon = FREE_AHEAD * (double)r->interval / (double)NUM_NS_PER_S;
    int over_commit = dall < FREE_DEMAND_MAX * rate || spare >= 2.0 * dall * horizon + 1.0;
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        double d = (rp->flags & REP_IDLE) ? 0.0 : rp->demand;
        double f = 0.0;
        /* A young life (a restart) gets no credit: no fresh quota. */
        if (settled && spare >= 1.0 && replica_owner_rep_live(r, rp, now) &&
            !(rp->flags & REP_YOUNG)) {
            /* What the bucket has ahead (its spare plus FREE_AHEAD
             * intervals of refill) by demand plus the same in equal parts,
             * rounded up: the free units of all nodes sum to at most twice
             * that plus one unit per node. */
            if (over_commit) {
                double part = (dsum > 0.0 ? d / dsum : 0.0) + 1.0 / (double)nl;
                f = ceil(ahead * part);
                if (f < 1.0)
                    f = 1.0;
            }
            /* Demand this far beyond the rate takes any spare at once: the
             * grants share it out (replica_owner__grant); free units on top
             * would give it twice. */
            if (f > ahead)
                f = ceil(ahead);
            if (f > WIRE_FREE_MAX)
                f = WIRE_FREE_MAX;
        }
        rp->free = (uint16_t)f;
    }
}

/*
 * Thin keys.  A key whose rate is slow (less than a unit in a quiet key's
 * report period: 10 a minute, 100 a minute) cannot be split well by
 * shares once its demand reaches its rate: each node's share of the rate
 * is a part of a unit that fills in minutes, so the nodes hold parts of
 * units nobody can spend (up to half a unit each; 100 nodes of 10 a
 * minute at ten times the limit admitted a third of one central limiter
 * that way), and the first touches and free units that make up for it
 * give a unit per node too many (four times the oracle on 100 nodes).
 * So while a slow key's known demand is at least its rate, or its bucket
 * is spent (replica_owner__is_thin), the owner keeps all of the limit in
 * the cluster's bucket: every node's share is 0
 * and it gives back what it holds (the lease says WIRE_L_THIN), and a
 * lease's free units come with odds, the chance that a request is
 * admitted on them:
 *
 *     odds = (slack + rate x H) / (demand x H)   (at most 1; 0 if negative)
 *
 * where slack is what the bucket has beyond what the nodes hold, demand
 * the key's known demand and H the FREE_AHEAD intervals free units count
 * on.  A request on any node then passes with those odds, so the cluster
 * admits about the slack plus the rate over H, whichever node the request
 * lands on, and holds nothing in between: one central bucket, drawn by
 * lot.  What is admitted is reported and poured into the bucket, whose
 * slack sets the next odds (below the limit, 1; held at it, about rate /
 * demand); a debt is in the slack already, so there is no separate
 * repayment.  A node's free units still cap what it admits until its next
 * lease (its expected part twice over, at least one), so the free units
 * of the bound (replica.h) cover these too.
 *
 * A node that does not report the key (it has not asked for it lately, or
 * never) would take a first touch on credit: a hundred nodes each asking
 * once a minute are a hundred units.  So while the odds are below 1, the
 * owner sends every live member that does not report the key a notice
 * (a lease entry flagged WIRE_L_NOTICE, share 0) every NOTICE_EVERY
 * intervals: for NOTICE_TTL intervals the member's requests for the key
 * that its own lease does not cover pass with the notice's odds, one unit
 * per notice, and it takes no first touch.  Without a notice (the odds
 * are 1: units to spare), a node whose thin lease has lapsed takes a unit
 * on credit as a first touch does, or a node asked once a minute would be
 * refused every time.  Notices are at most NOTICE_RATE a second per
 * owner; beyond that a key waits for a later computation.
 */
static int replica_owner__is_thin(const struct replica *r, const struct okey *o, uint32_t nl,
                                  double dall)
{
    if (o->p.policy != POLICY_PARTITION_SHARE || !o->p.bucket || nl < 2 ||
        !replica__slow(&o->p, r->interval))
        return 0;
    double rate = replica_owner__rate(o);
    if (dall >= rate)
        return 1;
    /* Demand read low (each node asks about once a minute and its
     * estimate fades between requests) while the bucket is spent: still
     * thin, or each node's free units (a unit at least) would give a unit
     * per node again (100 nodes of burst 1 at ten times the limit, spread
     * evenly: the worst key at 1.4-1.6 times its oracle over two minutes,
     * with this 1.05-1.10). */
    return replica_owner__used(o, r->now) > (double)replica__limit(&o->p) - 1.0;
}

/* A thin key's odds and free units (see above), written to o->refuse_q and
 * each live reporter's share and free. */
static void replica_owner__chance(const struct replica *r, struct okey *o, double dall, int64_t now)
{
    double em = replica__em(&o->p);
    double limit = (double)replica__limit(&o->p);
    double rate = replica_owner__rate(o);
    double h = (double)(FREE_AHEAD * r->interval) / (double)NUM_NS_PER_S;
    double slack = limit - replica_owner__used(o, now), room;
    for (uint32_t i = 0; i < o->n; i++) {
        o->reps[i].share = 0.0F;
        double held = replica_owner__held(r, &o->reps[i], now, em, limit, &room);
        if (held > 0.0)
            slack -= held;
    }
    double a = slack + rate * h;
    /* What went past the bucket is in its level already (slack < 0 until
     * it refilled): no separate repayment, which would count it twice. */
    o->repay = 0.0F;
    /* No demand known (nodes that only peeked, or asked so seldom that
     * their estimates faded): from half a unit ahead, odds of that part,
     * so that a request admits on average what the bucket has; below
     * half, none.  Odds of 1 on any part let a peeker spend a spent
     * bucket's first crumbs of refill (1 an hour, spent on another node
     * seconds before: admitted); odds of its part would still admit it
     * now and then (a percent of the time); and none below a whole unit
     * left the refill waiting while requests went by (10 a minute of
     * burst 5 on 100 nodes at 0.8 of the limit: 0.955 of one central
     * limiter, 0.970 with these odds; 16 nodes at the limit with 10% of
     * the messages lost: 0.972, now 0.980). */
    double c = a <= 0.0 ? 0.0 : dall > 0.0 ? a / (dall * h) : a >= 1.0 ? 1.0 : a >= 0.5 ? a : 0.0;
    /* A whole unit in the bucket is spent within about an interval, not
     * over H: a bucket of one unit (no burst) that waits for a lucky draw
     * is full and throws its refill away (50 a minute with no burst,
     * asked at twenty times that: 0.92 of one central limiter over H). */
    double i_s = (double)r->interval / (double)NUM_NS_PER_S;
    if (slack >= 1.0 && dall > 0.0 && slack / (dall * i_s) > c)
        c = slack / (dall * i_s);
    if (c > 1.0)
        c = 1.0;
    o->refuse_q = (uint16_t)(c >= 1.0 ? 0 : (uint32_t)ceil((1.0 - c) * 65535.0));
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        double d = (rp->flags & REP_IDLE) ? 0.0 : rp->demand;
        double f = c > 0.0 ? 1.0 + floor(2.0 * c * d * h) : 0.0;
        rp->free = (uint16_t)(f > WIRE_FREE_MAX ? WIRE_FREE_MAX : f);
    }
}

/* Whether odds of refusal q moved enough from those last sent, s, to send
 * them unasked: the odds of admission by a quarter, or to or from none. */
static int replica_owner__odds_moved(uint16_t q, uint16_t sent)
{
    double c = 1.0 - (double)q / 65535.0, s = 1.0 - (double)sent / 65535.0;
    if ((c <= 0.0) != (s <= 0.0))
        return 1;
    return fabs(c - s) > 0.25 * (c > s ? c : s);
}

/* Sends a thin key's notice (see above) to every live member that does
 * not report it, if NOTICE_EVERY intervals have passed and the budget
 * allows all of them. */
static void replica_owner__notices(struct replica *r, struct table_entry *te, double dall,
                                   int64_t level_m, int64_t now)
{
    struct okey *o = okey_of(te);
    uint32_t ms = (uint32_t)(uint64_t)(now / NUM_NS_PER_MS);
    /* Again after NOTICE_EVERY intervals, or sooner (2 intervals at least)
     * when the odds moved by a quarter (replica_owner__chance_moved): a
     * notice that still said "none" when the bucket had refilled would
     * refuse the next requests of every node for NOTICE_TTL. */
    int64_t since = (int64_t)(uint32_t)(ms - o->noticed_ms) * NUM_NS_PER_MS;
    if ((o->p.flags & OK_THIN) && since < NOTICE_EVERY * r->interval &&
        (since < 2 * r->interval || !replica_owner__odds_moved(o->refuse_q, o->noticed_refuse)))
        return;
    if (now > r->nt_last) {
        r->nt_tokens += (double)(now - r->nt_last) * NOTICE_RATE / (double)NUM_NS_PER_S;
        if (r->nt_tokens > NOTICE_RATE)
            r->nt_tokens = NOTICE_RATE;
        r->nt_last = now;
    }
    size_t want = r->nlive;
    for (uint32_t i = 0; i < o->n; i++)
        if (replica_owner_rep_live(r, &o->reps[i], now)) {
            r->mem[o->reps[i].member].mark = 1;
            want--;
        }
    if ((double)want <= r->nt_tokens) {
        r->nt_tokens -= (double)want;
        o->noticed_ms = ms;
        o->noticed_refuse = o->refuse_q;
        struct wire_lease l = {.key = table_entry_key(te),
                               .klen = te->klen,
                               .flags = WIRE_L_NOTICE | WIRE_L_SETTLED,
                               .free = o->refuse_q < 65535 ? 1 : 0,
                               .level_milli = level_m,
                               .demand_milli = (uint64_t)(dall > 1e15 ? 1e18 : dall * 1000.0),
                               .refuse_q = o->refuse_q};
        for (size_t i = 0; i < r->nlive; i++) {
            uint32_t m = r->live[i];
            if (r->mem[m].mark)
                continue;
            if (m == r->self)
                replica_node_deliver(r, l.key, l.klen, r->life, &l, now);
            else if (replica_append(r, m, 1, r->mem[m].life, NULL, &l) == 0)
                r->st.notices_sent++;
        }
    }
    for (uint32_t i = 0; i < o->n; i++)
        r->mem[o->reps[i].member].mark = 0;
}

/* Splits a key's limit between its reporters and sends the leases that
 * changed or were asked for.  Answering one reporter's ask (asker, a
 * member id; NO_ASKER for a pass's computation) for a key that is not
 * slow, the others get theirs now only if their share or free units
 * shrank (the bound needs it: with free units held back too, nodes
 * restarted in a simulator run admitted 1,200 units in their first 200 ms
 * where one central limiter admits 678) or the odds moved; the rest waits for the pass, which
 * computes the key again (answering an ask sent every reporter of a
 * hammered key a new lease: 100 nodes of 10,000 keys with 10% loss sent
 * 1.05 MB/s a node, 0.95 with this).  A slow key's nodes get theirs at
 * once: their free units are what they admit on (per-minute keys on 16
 * nodes with 10% loss, at their limit: 0.970 of one central limiter when
 * held back, 0.984 not). */
#define NO_ASKER UINT32_MAX
static void replica_owner__compute(struct replica *r, struct table_entry *te, int64_t now,
                                   uint32_t asker)
{
    struct okey *o = okey_of(te);
    double reserved = 0.0, dsum = 0.0, dheld = 0.0; /* dheld: the reserved ones' demand */
    int unreachable = 0; /* a reserved one's member is suspected or declared */
    uint32_t nlive = 0;
    struct replica_owner__live lv = {0};
    /* Drop reporters that are gone; sum live demand and reserved shares. */
    for (uint32_t i = 0; i < o->n;) {
        struct orep *rp = &o->reps[i];
        int live = replica_owner_rep_live(r, rp, now);
        int idle = (rp->flags & REP_IDLE) != 0;
        int gone = !r->mem[rp->member].in_view && r->mem[rp->member].was_viewed;
        if (!live && (idle || gone || now - rp->last_at > r->phantom_max)) {
            /* A node that went quiet still holds what its bucket held and
             * may spend it when it comes back: out of the cluster's bucket
             * until it reports again (replica_owner_on_report gives back what
             * it then still holds).  A gone node's units went with it. */
            if (!gone && o->p.bucket && o->p.policy == POLICY_PARTITION_SHARE && rp->tokens > 0.0F)
                replica_owner__pour(o, ceil(rp->tokens), now);
            *rp = o->reps[--o->n];
            r->nreps--;
            continue;
        }
        if (live) {
            nlive++;
            dsum += idle ? 0.0 : rp->demand;
            replica_owner__live_add(&lv, rp);
        } else if (o->p.policy == POLICY_PARTITION_SHARE && !idle &&
                   !replica_owner__presumed_dead(r, rp)) {
            /* Its part as the whole cluster last left it: a side cut off
             * from this one keeps that part (its frozen share, "A side's
             * bucket" below); without one, its last lease's share. */
            double f = replica__rep_fshare(rp);
            reserved += f > 0.0 ? f : (double)(rp->sent_share > 0.0F ? rp->sent_share : 0.0F);
            dheld += rp->demand;
            unreachable |= !r->mem[rp->member].live || r->mem[rp->member].suspect;
        }
        i++;
    }
    o->p.flags &= (uint8_t)~OK_FRESH;
    if (o->repay > 0.0F && now > o->computed_at) {
        /* Repaying: the refill since the last computation went to nobody
         * (avail 0 below), so it pays the credit back. */
        double paid = (double)(now - o->computed_at) / replica__em(&o->p) * replica_owner__part(o);
        o->repay = (double)o->repay > paid ? (float)((double)o->repay - paid) : 0.0F;
    }
    o->computed_at = now;
    if (nlive == 0)
        return;
    /* Settled: the view has held still for a silence window, this owner is
     * not new to it, the record is not (a silence window, or BORN_SETTLE
     * intervals: below), and the view is whole or this side is a strict
     * majority (whose silent minority is presumed dead).  A record made on
     * a moved key's reports waits the silence window: a missing report is
     * not zero demand, and its nodes' reports come at their periods.  A
     * key new to the cluster (OK_BORN) that one node alone asks for (its
     * demand known: it asked twice or more), whose first part on each node
     * is a unit or more, settles in BORN_SETTLE intervals: a node that
     * touched it reports it at its next pass, so those intervals hear the
     * first touches made about when the record was, and one made later is
     * a first touch as after any settling.  Waiting the whole window held
     * a new user's burst on one node to that node's first share for half a
     * second (16 requests 50 ms apart on a key of burst 16, three nodes: 10
     * admitted where one central limiter admits 16; real daemons, 5 nodes:
     * 0.46 of it, 0.90 to 0.96 now).  Not with a second reporter (a contested key:
     * a lost first report of a third is seconds of its share), and not
     * where each node's part is less than a unit: every node that touches
     * such a key after its units were granted takes a first touch on
     * credit (per-minute keys of burst 5 at ten times their limit over 16
     * nodes: a key at 1.28 times one central limiter, 1.04 without). */
    int early = (o->p.flags & OK_BORN) && o->n == 1 && o->reps[0].demand > 0.0F &&
                !(o->reps[0].flags & REP_IDLE) &&
                (double)replica__limit(&o->p) >= (double)r->nlive &&
                BORN_SETTLE * r->interval < r->silence;
    int64_t born_for = early ? BORN_SETTLE * r->interval : r->silence;
    /* Until the silence window has passed, though, its grants are what
     * its demand takes over FREE_AHEAD intervals (replica_owner__early_room,
     * topped up at each pass), not the whole bucket: a node that touches the key later takes its
     * first part as its own (a unit or more), and the units granted early that its one reporter
     * would not spend soon were spent twice (keys of burst 15, 30 a minute, at ten times their
     * limit skewed over 5 nodes: a key at 1.27 times one central limiter, 1.03 without). */
    double early_s = early && now - o->created_at < r->silence
                         ? (double)(FREE_AHEAD * r->interval) / (double)NUM_NS_PER_S
                         : 0.0;
    int whole = r->complete || replica_owner__majority(r);
    int settled = whole && now - r->view_changed_at >= r->silence &&
                  now - o->created_at >= born_for && now - r->born >= r->silence &&
                  !replica__young(r, now);
    /* Held for what did not move (replica_owner__moved).  Not for slow
     * keys, whose nodes read their demand several times too high after
     * each request (as replica_owner__yield's caller): per-minute keys at
     * three times their limit, one node of three cut off, admitted 1.36
     * to 1.42 times one central limiter over the partition (1.30 to 1.35
     * without). */
    double gone =
        !replica__slow(&o->p, r->interval) && (reserved > 0.0 || (r->outvoted && !settled))
            ? replica_owner__moved(o, &lv, dsum, lv.fsum)
            : 0.0;
    reserved *= 1.0 - gone;
    double avail = o->p.policy == POLICY_PARTITION_SHARE ? 1.0 - reserved : 1.0;
    if (o->p.policy == POLICY_PARTITION_SHARE && !replica__slow(&o->p, r->interval) &&
        r->outvoted) {
        double left = replica_owner__yield(o, &lv, dsum);
        if (avail > left)
            avail = left;
    }
    if (o->p.policy == POLICY_PARTITION_OPTIMISTIC && replica_owner_debt(o, now) > 0)
        avail = 0.0; /* repaying: nobody admits until the cluster is back */
    if (o->p.policy == POLICY_PARTITION_SHARE && o->p.bucket) {
        /* Free units and first touches can take the cluster's bucket below
         * empty (the bound of replica.h): the shares shrink until the debt
         * is repaid, so the overshoot is a window's, not a lasting rate.
         * One unit and an interval's refill are report timing, not debt. */
        double limit = (double)replica__limit(&o->p);
        /* Each node with demand may hold a whole unit however small its
         * share, and one more under pressure (replica_node_cap): spending what
         * they hold takes the bucket that far below empty with no excess
         * over the leases (a hammered key on 100 nodes would otherwise
         * look in debt most of the time and shrink its own rate). */
        double held = 0.0;
        for (uint32_t i = 0; i < o->n; i++) {
            const struct orep *rp = &o->reps[i];
            if (!replica_owner_rep_live(r, rp, now) || (rp->flags & REP_IDLE) || rp->demand <= 0.0F)
                continue;
            double part = (rp->sent_share > 0.0F ? rp->sent_share : 0.0) * limit;
            held += (part < 1.0 ? 1.0 - part : 0.0) + 1.0;
        }
        double debt = replica_owner__used(o, now) - limit - replica_owner__timing(r, o) - held;
        if (debt > 0.0)
            avail = debt >= 0.5 * limit ? 0.0 : avail * limit / (limit + debt);
        if (o->repay > 0.0F)
            avail = 0.0;
    }
    if (avail < 0.0)
        avail = 0.0;
    int caution = o->p.policy == POLICY_PARTITION_SHARE && !settled;
    replica_owner_split(r, o, avail, dsum, now);
    if (caution) {
        /* Until the owner has heard everyone through a settled, complete
         * view, nobody grows beyond the share it held when the cluster was
         * whole, and reporters without one split what those leave. */
        double held = 0.0, fresh = 0.0;
        /* ... but for what moved here of the others' demand, with their
         * part of the rate (replica_owner__moved), up to avail. */
        double grow = 1.0;
        if (gone > 0.0 && lv.fsum > 0.0 && lv.fsum < 1.0) {
            double most = lv.fsum + (1.0 - lv.fsum) * gone;
            if (most > avail)
                most = avail;
            grow = most > lv.fsum ? most / lv.fsum : 1.0;
        }
        for (uint32_t i = 0; i < o->n; i++) {
            struct orep *rp = &o->reps[i];
            if (!replica_owner_rep_live(r, rp, now))
                continue;
            if (rp->fshare_q > 0) {
                double most = replica__rep_fshare(rp) * grow;
                if (rp->share > most)
                    rp->share = (float)most;
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
            if (replica_owner_rep_live(r, rp, now) && rp->fshare_q == 0)
                rp->share *= (float)(room / fresh);
        }
    }
    /*
     * A side's bucket.  While this owner's view is not whole (a partition
     * with no strict majority here, or the minority side), or it holds the
     * part of a silent reporter (one the failure detector has not declared
     * yet, or not in a majority), the side it sees has the part of the
     * rate its live nodes held when the cluster was whole: the sum of their frozen shares (each
     * node's part of the demand, replica_node__apply_lease; a node without one, its share now), at
     * most what the silent nodes' parts leave (avail).  The record's bucket then refills at that
     * part of the rate (o->side: units are poured at em / side, and replica_owner__used counts them
     * back), holds the burst, and lends free units to the side's nodes as
     * the cluster's bucket does to all: demand spread thin below the limit
     * pools within each side as in a whole cluster.  Each side may spend
     * one burst of its own over the partition, the burst term of the
     * bound (replica.h).  Without it, each node of a side had only its own
     * share's bucket (a unit or two): six nodes split three and three for
     * 10 s at half the limit admitted 0.72 to 0.92 of one central limiter
     * during the partition, 0.98 to 1.00 with it (global_scale
     * --partition; sim_test_global_fleet's test_partition_spread).
     * A silent reporter's part is held from its silence on, once the
     * failure detector suspects its member, not only once the view splits
     * (a reporter merely late, as quiet keys' are under a budget, does not
     * count: held for those, spread keys beside 100,000 quiet ones were
     * refused 1% of the time, test_global_quiet_keys): its side keeps
     * spending it, and a bucket refilling
     * at the whole rate lent the rest free units on top of it, so six real
     * nodes cut 3 | 3 at twice the limit admitted 1.2 to 1.3 times one
     * central limiter over the partition (1.04 now,
     * integration_test_global_partition_spread).  A death looks the same
     * until the verdict: at or beyond the limit the others admit the rate
     * less the dead node's part meanwhile (five nodes at three times the
     * limit: 0.8 for the 2 s of the simulator's detection; below the
     * limit nothing is refused for it).
     */
    int split = o->p.policy == POLICY_PARTITION_SHARE && (!whole || unreachable);
    double sidesum = 0.0;
    for (uint32_t i = 0; split && i < o->n; i++) {
        const struct orep *rp = &o->reps[i];
        double f = replica__rep_fshare(rp);
        if (replica_owner_rep_live(r, rp, now))
            sidesum += f > (double)rp->share ? f : (double)rp->share;
    }
    if (sidesum > avail)
        sidesum = avail;
    float side = !split ? 0.0F : (float)(sidesum < SIDE_MIN ? SIDE_MIN : sidesum);
    if (side != o->side) {
        /* The bucket keeps its level in units as its rate changes. */
        double was = replica_owner__part(o);
        o->side = side;
        if (o->tat > now)
            o->tat = now + (int64_t)((double)(o->tat - now) * was / replica_owner__part(o));
    }
    /* Once the view has split (not only a member suspected), the side keeps
     * its part of the level the bucket had, as of its part of the rate,
     * and what free units over-commit anyway (FREE_AHEAD intervals of the
     * rate): the other side's new owner starts from the level its nodes
     * knew (replica_owner__foreign) and does the same, so the two spend the
     * level about once between them.  With all of it on each side,
     * per-minute keys drained to a few units and asked at twice their
     * limit admitted 1.23 to 1.35 times one central limiter over the
     * partition, 1.15 to 1.41 from the failure detector's verdict to the
     * heal (six real nodes cut 3 | 3);
     * with only the part, keys of ten a second and a burst of 4 at half
     * their limit lost 2% of the oracle's admissions during the partition,
     * the level they lend free units from. */
    if (o->side > 0.0F && !whole) {
        if (!(o->p.flags & OK_SPLIT)) {
            o->p.flags |= OK_SPLIT;
            double level = (double)replica__limit(&o->p) - replica_owner__used(o, now);
            double ahead = (double)(FREE_AHEAD * r->interval) / replica__em(&o->p);
            if (level > 0.0 && level * (double)o->side + ahead < level)
                replica_owner__at_most(o, level * (double)o->side + ahead, now);
        }
    } else if (whole) {
        o->p.flags &= (uint8_t)~OK_SPLIT;
    }
    /* Every reporter's demand, late ones included (as replica_owner__free). */
    double dall = 0.0;
    for (uint32_t i = 0; i < o->n; i++)
        dall += (o->reps[i].flags & REP_IDLE) ? 0.0 : o->reps[i].demand;
    int sided = split && sidesum >= SIDE_MIN;
    double dthin = o->side > 0.0F ? dsum : dall; /* a side's odds: its own nodes' demand */
    int thin =
        (whole || sided) && !replica__young(r, now) && replica_owner__is_thin(r, o, nlive, dthin);
    if (thin)
        for (uint32_t i = 0; i < o->n; i++)
            o->reps[i].share = 0.0F; /* the bucket keeps it all: no grants either */
    else if (settled && o->p.bucket)
        replica_owner__grant(r, o, now, early_s);
    /* Free units need a whole view and an owner past its young period, not
     * a settled record: a record this owner made anew starts from what its
     * reporters say they took (a new key's first touches included), and one
     * that moved here or whose past this owner cannot know is taken as
     * empty (replica_owner_on_report), which leaves no spare.  Nor from a
     * life younger than a silence window, even one a settled owner has
     * already answered (synced: its young period is over): the reports of
     * the nodes that did not restart may not all have come in yet, and a
     * record built from those of the restarted alone has room it does not
     * have (two of three nodes killed and restarted, their asks answered
     * within milliseconds: up to 12 units a key in their first 200 ms).
     * A life with no young period (a lone first node) has no past.
     * But a record this life took as empty on the report of a node
     * another owner leased (OK_EMPTIED) holds only what refilled since:
     * no fresh quota, and a report that comes later takes it as empty
     * again if it must.  Its spare may be lent at once: lending nothing
     * for a restarted owner's young period, the other nodes refused 18 to
     * 39% of the requests for its keys asked at half their limit while it
     * rejoined, where one central limiter refused 0 to 2.4% (five nodes;
     * 0 to 10.9% lent: test_global_restart_spread.py). */
    int grown = r->young == 0 || now - r->born >= r->silence;
    int known = (!replica__young(r, now) && grown) || (o->p.flags & OK_EMPTIED);
    replica_owner__free(r, o, dsum, known && (whole || sided), now);
    if (thin)
        replica_owner__chance(r, o, dthin, now);
    else
        o->refuse_q = 0;
    int moved = replica_owner__odds_moved(o->refuse_q, o->sent_refuse), later = 0;
    if (asker != NO_ASKER && replica__slow(&o->p, r->interval))
        asker = NO_ASKER;
    double lvl = (double)replica__limit(&o->p) - replica_owner__used(o, now);
    int64_t level_m = lvl < -9e15  ? (int64_t)-9e18
                      : lvl > 9e15 ? (int64_t)9e18
                                   : (int64_t)(lvl * 1000.0); /* no overflow for huge limits */
    for (uint32_t i = 0; i < o->n; i++) {
        struct orep *rp = &o->reps[i];
        if (!replica_owner_rep_live(r, rp, now))
            continue;
        double w = rp->share;
        double diff = fabs(w - rp->sent_share);
        /* Unasked, a share goes out when it shrank (the bound needs it) or
         * grew a lot; a small rise waits for the reporter's next report,
         * which every lease answers.  Demand estimates wander by a few
         * percent on every report, so a key asked on a hundred nodes would
         * otherwise send each of them a lease at nearly every report of
         * any (most of a fleet's replication traffic).  Free units go
         * out when they changed, but a key's only reporter that held units
         * at its last report gets a rise by less than SHARE_UP_EPS with its
         * next lease (and asks if it runs out: replica_node_ask).  The
         * cluster's bucket refilling the unit a new key's first request
         * took rose its free units by one a few intervals later: a second
         * lease for most new keys.  Not where nodes share a key: held
         * there too, the least-served key of 100 nodes with 10% loss
         * admitted a sixth less (global_scale). */
        double eps = w < rp->sent_share ? SHARE_EPS : SHARE_UP_EPS;
        int free_held = nlive == 1 && rp->tokens >= 1.0F && rp->free > rp->sent_free &&
                        (double)rp->free <= (double)rp->sent_free * (1.0 + SHARE_UP_EPS);
        int free_moved = rp->free != rp->sent_free && !free_held;
        int changed =
            rp->sent_share < 0.0 || diff > eps * (rp->sent_share + 0.01) || free_moved || moved;
        /* A grant not acknowledged yet goes out again (running total), and
         * a large shrink once more (REP_AGAIN, below). */
        int again = (rp->flags & REP_AGAIN) != 0;
        if (!changed && !again && !(rp->flags & REP_FRESH) && rp->g_sent == rp->g_ack)
            continue;
        if (asker != NO_ASKER && rp->member != asker && !moved && rp->sent_share >= 0.0 &&
            w >= rp->sent_share - SHARE_EPS * (rp->sent_share + 0.01) &&
            rp->free >= rp->sent_free) {
            later = 1; /* the pass's computation sends it */
            continue;
        }
        /* A large shrink goes out twice, the second time at the next pass.
         * The node holds its old share until a lease arrives, and this
         * owner counts it at the new one from now on (what it reserves for
         * a silent reporter, what the others are lent): a shrink lost
         * stays lost until the node's next report is answered, which under
         * a report budget and loss can take seconds (a key hammered on
         * eight nodes with 10% loss: its least busy node, leased the whole
         * share while it was the only reporter, lost the shrink, its next
         * report and the lease that answered it, and admitted at the
         * whole share for 2.4 s, 1.26 times one central limiter).  Twice
         * is one lost in a hundred, not ten.  Not to an idle node (its
         * share goes to 0 as it stops asking): it spends nothing until it
         * asks again, and its next request brings a report. */
        if (!again && rp->member != r->self && !(rp->flags & REP_IDLE) && rp->sent_share > 0.0F &&
            w < SHARE_CUT * rp->sent_share) {
            rp->flags |= REP_AGAIN;
            later = 1;
        } else {
            rp->flags &= (uint8_t)~REP_AGAIN;
        }
        rp->flags &= (uint8_t)~REP_FRESH;
        rp->sent_share = (float)w;
        rp->sent_free = rp->free;
        uint64_t lflags = (settled ? WIRE_L_SETTLED : 0) | (thin ? WIRE_L_THIN : 0);
        uint64_t s = (uint64_t)(w * (double)WIRE_ONE);
        if (s > WIRE_ONE)
            s = WIRE_ONE;
        /* The others' demand includes the silent nodes whose part is held
         * for them: a node's frozen share is its part of the demand as this
         * lease tells it, and without theirs, the parts a settled owner
         * told one side while the other had just gone silent summed to a
         * whole rate on that side alone (a 3 | 3 cut before the failure
         * detector's verdict).  A side's nodes project the level
         * (replica_node__project) as if the other sides took the rest of
         * the rate instead: their bucket refills at the side's part. */
        double others =
            (o->side > 0.0F ? dsum : dsum + dheld) - ((rp->flags & REP_IDLE) ? 0.0 : rp->demand);
        if (o->side > 0.0F)
            others += (1.0 - (double)o->side) * replica__rate(&o->p) * (double)NUM_NS_PER_S;
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
                               o->refuse_q,
                               rp->credit,
                               r->life};
        if (rp->member == r->self) {
            /* This node's own node side: no message (it checks, as for any
             * owner, that this node owns the key by its own view). */
            replica_node_deliver_owned(r, te, rp->life, &l, now);
            continue;
        }
        if (replica_append(r, rp->member, 1, rp->life, NULL, &l) == 0)
            r->st.lease_entries_sent++;
    }
    o->sent_refuse = o->refuse_q;
    /* A record that settles early (above) is computed again at each pass
     * until the silence window has passed, so its grants go out as it
     * settles and follow its reporter's demand until they are whole, not
     * with the answers to the node's reports (a quiet key's come
     * ACTIVE_EVERY intervals apart). */
    if (early_s > 0.0)
        later = 1;
    if (later) { /* leases held back for the pass, or to send again (see above) */
        o->p.flags |= OK_FRESH;
        replica_owner__oqueue(r, o);
    }
    /* Notices while the odds are below 1, and once more when they are
     * back to 1 (or the key is no longer thin), which lifts them. */
    if ((thin && o->refuse_q > 0) || (o->p.flags & OK_THIN))
        replica_owner__notices(r, te, dthin, level_m, now);
    /* OK_THIN: the notices out say less than 1 (lifted only by sending). */
    o->p.flags = (uint8_t)(o->noticed_refuse > 0 ? o->p.flags | OK_THIN : o->p.flags & ~OK_THIN);
}

/* Computes owner key i if it is due (reported on, or not refreshed for
 * oevery); drops it when no reporter is left and its bucket has refilled
 * (replica_owner_drain).  Returns OV_DROPPED if it was dropped (another
 * key now sits at i), OV_COMPUTED if it was computed and kept, 0 if it was
 * only looked at. */
int replica_owner_visit(struct replica *r, size_t i, int64_t now)
{
    struct table_entry *te = r->ok[i];
    struct okey *o = okey_of(te);
    o->p.flags &= (uint8_t)~OK_QUEUED;
    if (!(o->p.flags & OK_FRESH) && now - o->computed_at < r->oevery && o->n > 0)
        return 0;
    replica_owner__compute(r, te, now, NO_ASKER);
    /* Every reporter idle, gone or silent for long, and the cluster's
     * bucket full again (replica_owner_drain). */
    if (o->n == 0 && replica_owner_drain(r, te) <= now) {
        r->st.owned_gc++;
        table_delete(r->owned, te); /* moves the last key to i */
        return OV_DROPPED;
    }
    return OV_COMPUTED;
}
