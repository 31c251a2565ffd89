/*
 * replica_int.h: the replica's internals, shared by its three files and by
 * no one else (not in include/, and no other module includes it).
 *
 *   replica.c        the API of replica.h: create/destroy, throttle, tick,
 *                    receive, views, introspection; the member table, the
 *                    key tables and their queues, outgoing batches, passes
 *   replica_node.c   the node side: the keys this node serves (decisions,
 *                    demand, reports, leases applied)
 *   replica_owner.c  the owner side: the keys this node owns (reports
 *                    received, the split, grants, free units, debt, leases
 *                    sent)
 *
 * A key this node both owns and serves crosses between the sides only
 * through replica_owner_on_report (its report) and replica_node_deliver
 * (its lease); its two entries point at each other (nkey.own, okey.mine,
 * replica__link), so neither crossing looks the key up again.  No I/O:
 * time is an argument, sending a callback.
 */
#ifndef SLUICE_REPLICA_INT_H
#define SLUICE_REPLICA_INT_H

#include <math.h>
#include <stdint.h>

#include "replica.h"
#include "table.h"
#include "wire.h"
#include "num.h"

#define DEMAND_TAU_S     1.0                /* demand estimate: shortest EWMA time constant */
#define DEMAND_TAU_MAX_S 10.0               /* ... and longest */
#define DEMAND_EVENTS    20.0               /* requests a time constant should span */
#define ACTIVE_EVERY     5                  /* intervals between reports of an uncontested key */
#define IDLE_AFTER_NS    (1000 * 1000000LL) /* no request this long + full bucket: idle */
#define SHARE_EPS        0.05               /* relative share decrease worth a lease */
#define SHARE_UP_EPS     0.25               /* ... and increase, unasked (replica_owner__compute) */
#define SHARE_CUT        0.5 /* a shrink to less than this part of the share is sent twice */
#define FREE_DEMAND_MAX                                                                            \
    6.0 /* total demand, in rates, beyond which free units stop over-committing */
#define BACK_AFTER        50   /* intervals of silence after which a report is a return */
#define FIRST_TOUCH_BURST 64.0 /* first touches on credit at once, per node */
#define FIRST_TOUCH_RATE  32.0 /* ... and per second */
/* Intervals a lease's free units stay valid: three report periods of a
 * quiet key (ACTIVE_EVERY), so a lease lost now and then does not leave a
 * node without them between two answers (16 nodes of burst 5 at half the
 * limit with 10% loss admitted 0.946 of one central limiter at 8, 0.977
 * at 16); what they may admit is still checked against the level. */
#define FREE_TTL 16
/* Intervals after which the record of a key new to the cluster (OK_BORN)
 * is settled: the first reports of the nodes that touched it about when
 * it was made (a touched key reports at its node's next pass) are in. */
#define BORN_SETTLE 2
/* Thin keys (replica_owner.c): notices go out at most every NOTICE_EVERY
 * intervals per key and hold NOTICE_TTL intervals at the receiver; an
 * owner sends at most NOTICE_RATE of them a second (NOTICE_RATE at once),
 * and a node keeps at most NOTICE_MAX. */
#define NOTICE_EVERY 10
#define NOTICE_TTL   30
#define NOTICE_RATE  4096.0
#define NOTICE_MAX   65536
#define FREE_AHEAD   4 /* intervals of refill a lease's free units count on */
/* Prompt reports (replica_node_ask): a key out of units and free units,
 * far from hammered, reports at the loop's next turn instead of the next
 * pass, and its owner answers at once; at most PROMPT_RATE a second per
 * node (PROMPT_RATE at once), one awaiting its lease per key. */
#define PROMPT_RATE 4096.0
#define ASK_NONE    0 /* nkey.asked */
#define ASK_QUEUED  1 /* in r->prompt */
#define ASK_SENT    2 /* reported promptly, its lease not back yet */
/* Intervals without a lease after which a report carries the limit again. */
#define KNOWN_FOR           8
#define REPLICA_MEMBERS_MAX 65535 /* names ever heard of */
/* Bounded work per replica_tick call (see "A pass" at replica_tick): key
 * visits per call, and background visits per interval beyond the keys
 * with news (every key is visited every interval up to SWEEP_MAX keys,
 * every n / SWEEP_MAX intervals beyond). */
#define TURN_VISITS  1024
#define TURN_NS      500000 /* replica work per loop turn, by the clock (replica__timed) */
#define TURN_CHECK   8      /* visits between two readings of the clock (replica__timed) */
#define SWEEP_MAX    16384
#define REPORT_COST  2 /* a report built, in key visits */
#define COMPUTE_COST 4 /* an owner's computation, in key visits */
/* Quiet keys' reports take at most QUIET_SHARE of a pass's byte budget,
 * and their period stretches until they fit in it (replica__quiet_every),
 * up to QUIET_EVERY_MAX_NS (a report's period travels in centiseconds, at
 * most 655 s); REPORT_BYTES_GUESS is a report's bytes until some were sent. */
#define QUIET_SHARE        0.5
#define QUIET_EVERY_MAX_NS (300 * 1000000000LL)
#define REPORT_BYTES_GUESS 40.0
/* A key asked again (not only its first request) within KEEN_NS is keen
 * (replica_node__keen): its reports keep their period and their place. */
#define KEEN_NS (5000 * 1000000LL)
/* A pass's slice also lasts at most 1 / TURN_SHARE of the time since the
 * previous slice ended, and TURN_MIN_NS at least (replica_tick). */
#define TURN_SHARE  4
#define TURN_MIN_NS 50000
/* The longest an entry waits for its batch to fill (replica__flush). */
#define BATCH_HOLD_NS 5000000
/* The least part of the rate a side's bucket is kept at (okey.side): below
 * it the side lends no free units, and what it admits empties its bucket. */
#define SIDE_MIN 0.01
/* A node's frozen share averages its part over this many seconds, or the
 * key's period if longer (replica_node__apply_lease). */
#define FSHARE_TAU_S 20.0
/* A report tells the level its node knows (wire known_milli) while its
 * last settled lease is at most this many silence windows old. */
#define KNOWN_LEVEL_FOR 20

/* Nobody is leased more than SPLIT_HEADROOM x its own demand (replica_owner_split). */
#define SPLIT_HEADROOM 3.0

/* A limit as the replica keeps it: the fields of struct algo_params it
 * needs (32 bytes instead of 160; a node may hold one per key twice), with
 * the key's partition policy and flags in what would be padding. */
struct rlimit {
    int64_t burst, count, period_ns;
    int32_t precision;
    uint8_t kind;
    uint8_t policy; /* enum policy_partition */
    uint8_t flags;  /* NK_* (node side) or OK_* (owner side) */
    uint8_t bucket; /* algo_has_burst(kind), kept: asked on every decision */
};
_Static_assert(sizeof(struct rlimit) == 32, "struct rlimit: 32 bytes, as its comment says");
_Static_assert(sizeof(struct algo_params) == 160,
               "struct algo_params: 160 bytes, as rlimit's comment says");

/* Units a fresh key admits at once: burst + 1, or the count of a window. */
static inline int64_t replica__limit(const struct rlimit *l)
{
    return l->bucket ? l->burst + 1 : l->count;
}

/* Nanoseconds per unit of the whole limit's rate. */
static inline double replica__em(const struct rlimit *l)
{
    return (double)l->period_ns / (double)l->count;
}

static inline void replica__limit_of(struct rlimit *l, const struct algo_params *p)
{
    l->burst = p->burst;
    l->count = p->count;
    l->period_ns = p->period_ns;
    l->precision = (int32_t)p->precision;
    l->kind = (uint8_t)p->kind;
    l->bucket = (uint8_t)algo_has_burst(p->kind);
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
    uint8_t suspect;    /* live but suspected: no part of a majority */
    uint8_t quiet;      /* live (suspected or not) but not heard from lately: no
                           part of a majority, one against this node's side */
    uint64_t life;      /* its life as last heard (0: never): notices go to it */
    uint8_t mark;       /* scratch of replica_owner__notices, 0 between calls */
    /* Pending outgoing batches (one per message type), allocated while a
     * tick or a receive fills them. */
    struct wire_writer out[2];
    uint8_t *outbuf[2];
    int64_t out_at[2];  /* when each pending batch took its first entry */
    uint8_t out_now[2]; /* it holds an entry to send at the end of this call */
    uint8_t out_rx[2];  /* ... at the end of this loop turn (replica_flush) */
};

/* ---- node side: a key this node serves ---------------------------------- */

#define NK_YOUNG    0x01u /* created while young: waits for a settled owner */
#define NK_DIRTY    0x02u /* report at the next tick */
#define NK_IDLE     0x04u /* the idle report went out */
#define NK_LEASED   0x08u /* a lease arrived at least once */
#define NK_DEGRADED 0x10u /* owner silent: last lease, or its demand part */
#define NK_GROWN    0x20u /* past its first second: demand is an EWMA */
#define NK_HOT      0x40u /* queued for a visit in this pass or the next (r->hot) */
#define NK_KNOWN                                                                                   \
    0x80u /* its owner answered with the limit as reported: reports                                \
             may leave the limit out (replica_node__report) */

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
                            born while the key is young: see replica_node__demand) */
    double tokens;       /* the lease bucket */
    int64_t last_ns;     /* last refill */
    int64_t last_req, last_lease;
    uint32_t last_report, born; /* ms, mod 2^32 (replica_node__ms): only recent ages matter */
    uint64_t admitted;
    uint32_t granted_m; /* grants received, running total (thousandths, mod 2^32) */
    uint32_t leased_by; /* wire_life_tag of the owner life that last leased it,
                           settled; 0: none (see replica_owner_on_report) */
    float free;         /* units it may still admit beyond its bucket, on the
                           cluster's credit, until FREE_TTL after last_lease */
    uint16_t chance_q;  /* the odds that a request on free units is admitted, in
                           1/65535 (65535 but for thin keys: replica_owner.c) */
    uint8_t thin;       /* the last lease was a thin key's */
    uint8_t asked;      /* ASK_*: a prompt report (replica_node_ask) */
    uint32_t reported;  /* the credit count (mod 2^32) of its last report */
    float level;        /* the cluster's level at the last lease (units), less
                           what this node admitted since */
    float others;       /* the other nodes' demand at the last lease, units/s */
    uint32_t credit;    /* units admitted on credit (free units), running total */
    uint32_t visited;   /* ms (replica_node__ms) of the last visit: demand's time step */
    float known_d;      /* the key's demand over the cluster as settled leases
                           told it, this node's included, averaged as fshare,
                           units/s (wire known_demand_milli) */
    struct wloc *w;     /* window kinds only */
    /* The key's record in r->owned while this node has one (a key it owns
     * and serves, or did under an earlier view): a report to its own owner
     * side goes there without a lookup.  Set by replica__link, cleared
     * when either entry is freed (replica_node_free, replica_owner_free);
     * NULL: look it up. */
    struct table_entry *own;
};

/* ---- owner side: a key this node aggregates ------------------------------ */

#define REP_YOUNG 0x01u
#define REP_IDLE  0x02u
#define REP_FRESH 0x04u /* reported since the last lease computation */
#define REP_AGAIN 0x08u /* a large shrink went out once: send it again (replica_owner__compute) */

/* Owner-side key flags (okey.p.flags). */
#define OK_FRESH  0x01u /* reported on since its last computation */
#define OK_QUEUED 0x02u /* queued for a computation (r->ohot) */
#define OK_THIN   0x04u /* a thin key whose notices out have odds below 1 */
/* This life took the key's bucket as empty on the report of a node another
 * owner leased: what it holds since is refill (replica_owner_compute). */
#define OK_EMPTIED 0x08u
/* The view split since it was last whole: the side's bucket holds its
 * part of the level (replica_owner_compute, "A side's bucket"). */
#define OK_SPLIT 0x10u
/* A key new to the cluster: the record was made on the report of a node
 * no owner ever leased it to, and no reporter since said otherwise
 * (replica_owner__report).  It settles in BORN_SETTLE intervals, not a
 * silence window (replica_owner_compute). */
#define OK_BORN 0x20u

/* 64 bytes: owner records are many (one per key and reporting node). */
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
    uint16_t free, sent_free; /* free units (replica_owner__free), and as last sent */
    uint8_t flags;
    uint8_t known_q; /* the key's demand over the cluster as its last settled lease
                        told it, in 1/KNOWN_Q_ONE of the rate (0: not known;
                        wire known_demand_milli; replica_owner__yield) */
    uint32_t credit; /* its credit total at its last report (wire field credit) */
};
_Static_assert(sizeof(struct orep) == 64, "struct orep: 64 bytes, as its comment says");

#define FSHARE_ONE  65535.0
#define KNOWN_Q_ONE 32.0 /* orep.known_q: up to almost 8 times the rate */

static inline double replica__rep_fshare(const struct orep *rp)
{
    return (double)rp->fshare_q / FSHARE_ONE;
}

struct okey {
    struct rlimit p;
    uint32_t idx;
    /* 0 while this owner's view is whole; else the part of the rate its
     * side has, as of the last computation (replica_owner.c, "A side's
     * bucket"): tat then takes em / side a unit. */
    float side;
    int64_t created_at, computed_at;
    /* The cluster's bucket as a GCRA: the consumption reported and, for
     * share keys, assumed (replica_owner.c, "The cluster's bucket"); optimistic keys
     * repay what goes beyond it (replica_owner_debt). */
    int64_t tat;
    uint32_t n, cap;
    struct orep *reps;
    float repay;                    /* units admitted on credit past the cluster's bucket, still to
                                       be repaid (see replica_owner_on_report) */
    uint16_t refuse_q, sent_refuse; /* a thin key's odds of refusal (wire
                                       refuse_q), and as last leased */
    uint32_t noticed_ms;            /* replica_node__ms of the last notices */
    uint16_t noticed_refuse;        /* ... and their odds of refusal */
    uint16_t merged;                /* the other owner whose side's spending this record
                                       counted last: its wire_life_tag's low bits, or'ed with 1
                                       (0: none; replica_owner__foreign) */
    /* The first reporter's record, in place: most keys have one reporter,
     * and a record of its own would cost an allocation and its header per
     * key (reps is &one while cap is 1; a second reporter moves both to a
     * heap array, replica_owner__add_rep). */
    struct orep one;
    /* The key's entry in r->nodes while this node serves it (nkey.own's
     * other end): the lease to this node's own node side goes there
     * without a lookup (replica_node_deliver_owned).  NULL: look it up. */
    struct table_entry *mine;
};
_Static_assert(sizeof(struct okey) == 168,
               "struct okey: 168 bytes with its first reporter, as replica.h's bounds say");

/* A notice this node holds for a key (replica_owner.c, "Thin keys"). */
struct nnote {
    int64_t until; /* held until then */
    float chance;  /* a request is admitted on it with these odds */
    uint32_t left; /* units it may still admit */
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
    replica_carry_fn carry;
    void *carry_ud;
    replica_clock_fn clock; /* replica__timed */
    void *clock_ud;
    int64_t slice_end; /* the clock at the last pass slice's end (replica_tick) */

    struct member *mem;
    size_t nmem, capmem;
    uint32_t *live;
    uint64_t *live_hash;
    size_t nlive;
    /* Of the last view (replica_set_view): its members live and not quiet,
     * this node included (an outvoted side's own, replica_node__yield),
     * and (outvoted, below) whether it is outvoted (replica_owner_outvoted). */
    size_t side_n;
    int complete;
    uint16_t view_gen; /* bumped on every change of the live set */
    uint8_t outvoted;
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
    } hot, urgent, uwork, curgent, cwork, work, ohot, owork;
    /* urgent: quiet due keys a pass's byte budget left unreported, next in
     * line once uwork is drained; curgent and cwork the same for contested
     * keys, ahead of the keys with news (replica_tick). */
    size_t uwpos, cwpos, wpos, owpos; /* next entry of uwork / cwork / work / owork */
    size_t sweep, sweep_left;         /* node sweep: cursor into nk, visits left this pass */
    size_t osweep, osweep_left;       /* owner sweep: cursor into ok, visits left */
    int in_pass, sweep_all;           /* sweep_all: the view changed, visit every key soon */
    int64_t pass_start, pass_max;     /* the pass in progress began; the longest since
                                         replica_reset_max (replica_pass_max) */
    int walking;           /* in a pass's walk: its reports wait for its end (replica__flush) */
    int in_rx;             /* in replica_receive */
    uint32_t answering;    /* the member whose ask is answered now (UINT32_MAX: none) */
    size_t budget;         /* report bytes left in this pass */
    int64_t every, oevery; /* report and refresh periods of quiet keys */
    int64_t every_keen;    /* ... of a quiet key asked again lately (replica_node__keen) */
    uint64_t nreps;        /* owner records held (sum of okey.n) */
    double ft_tokens;      /* first touches on credit (replica_node__first_touch) */
    int64_t ft_last;
    struct replica__idxv prompt; /* node keys asking for a lease now (replica_node_ask) */
    double pr_tokens;            /* prompt reports this node may still send (PROMPT_RATE) */
    int64_t pr_last;
    double pn_tokens; /* ... of keys never leased (as first touches: replica_node_ask) */
    int64_t pn_last;
    int prompting;    /* in replica__prompt: an owner answers its own node side at once */
    double nt_tokens; /* notices this owner may still send (NOTICE_RATE) */
    int64_t nt_last;
    struct table *notes; /* key -> struct nnote: notices received */
    uint64_t rng;        /* xorshift64: the odds of a thin key's free units */
    struct replica_stats st;
};

/* The budget a pass keeps for its contested keys' reports: quiet keys
 * report only while more is left (QUIET_SHARE). */
static inline size_t replica__quiet_floor(const struct replica *r)
{
    return (size_t)((double)r->tick_budget * (1.0 - QUIET_SHARE));
}

static inline struct nkey *nkey_of(struct table_entry *e)
{
    return (struct nkey *)table_entry_value(e);
}

static inline struct okey *okey_of(struct table_entry *e)
{
    return (struct okey *)table_entry_value(e);
}

/* Links node entry ne and owner entry oe of one key (nkey.own, okey.mine),
 * once either side has found the other by a lookup. */
static inline void replica__link(struct table_entry *ne, struct table_entry *oe)
{
    nkey_of(ne)->own = oe;
    okey_of(oe)->mine = ne;
}

/* ---- shared helpers ---------------------------------------------------------- */

static inline int replica__young(const struct replica *r, int64_t now)
{
    return !r->synced && now - r->born < r->young;
}

/* Units per ns of the whole limit. */
static inline double replica__rate(const struct rlimit *p)
{
    return (double)p->count / (double)p->period_ns;
}

/*
 * How much of the rest of the cluster's demand has moved to this side, 0
 * to 1, from the key's demand over the cluster d (in rates, as the side's
 * last settled leases told it), this side's parts of it then p, and this
 * side's demand now s (rates).  A load balancer moves demand, it does not
 * make more of it: a crashed majority's clients sent to the survivors
 * raise the survivors' demand from d p toward d, while a cut that leaves
 * each side its clients leaves it near d p.
 *
 * The estimates are noisy and lean up (replica_node__demand: a node's
 * steady 4/s visited every interval reads 1.6 times that, 1.1 times
 * visited every fifth), so nothing moved unless the side's demand at
 * least doubled (MOVED_GROWTH:
 * a side of a partition read up to half again its part, five nodes cut
 * 2 | 3 at twice the limit, and where the side is most of the cluster, p
 * near 1, a few percent of noise is most of the way from d p to d); and
 * of the way from d p to d, up to MOVED_LO is noise and from MOVED_HI on
 * all of it moved (demand spread over several nodes reads higher than the
 * same demand on one: two of three killed, their clients sent to the
 * third, at twice the limit, s read 0.8 d).
 */
#define MOVED_GROWTH 2.0
#define MOVED_LO     0.1
#define MOVED_HI     0.5
/* The growth a side that took moved demand at its last computation needs
 * to keep it (replica_owner__moved): without the margin, the noise of a
 * survivor's demand around twice its part took the rate from it and gave
 * it back every few computations, and each time its bucket refilled at
 * SIDE_MIN meanwhile. */
#define MOVED_GROWTH_KEEP 1.5
/* At and beyond the limit (d >= 1), where a side that took moved demand
 * by mistake admits more than its part, nothing moved unless the side's
 * nodes each see MOVED_NODE_RATE units a second or more (per_node): fewer
 * requests a visit and the estimates lean up more than the signal
 * (replica_node__demand: twice the demand at 2/s).  Keys of 3 and 5 a
 * second at twice the limit, one node of three cut off, admitted 1.12 and
 * 1.07 times one central limiter over the partition, 1.02 and 1.01 with
 * it.  Below the limit a side that took moved demand by mistake admits
 * what it is asked, which is less than the limit. */
#define MOVED_NODE_RATE 10.0
static inline double replica__moved(double d, double p, double s, double growth, double per_node)
{
    if (d <= 0.0 || p <= 0.0 || p >= 1.0 || s < growth * d * p ||
        (d >= 1.0 && per_node < MOVED_NODE_RATE))
        return 0.0;
    double mu = ((s / d - p) / (1.0 - p) - MOVED_LO) / (MOVED_HI - MOVED_LO);
    return mu < 0.0 ? 0.0 : mu > 1.0 ? 1.0 : mu;
}

/* What an outvoted side may take of the rate (replica_owner__yield,
 * replica_node__yield): what the majority's demand leaves, 1 - d (1 - p),
 * with d and p as replica__moved's, less the part `moved` of that demand
 * that moved here (replica__moved's answer).  0 to 1. */
static inline double replica__left(double d, double p, double moved)
{
    double m = d * (p < 1.0 ? 1.0 - p : 0.0) * (1.0 - moved);
    double left = 1.0 - m;
    return left > 0.0 ? left : 0.0;
}

/* Whether a limit refills less than a unit in a quiet key's report period
 * (ACTIVE_EVERY intervals): a slow key (thin keys, prompt reports). */
static inline int replica__slow(const struct rlimit *p, int64_t interval)
{
    return replica__rate(p) * (double)(ACTIVE_EVERY * interval) < 1.0;
}

/* Nanoseconds until units come at rate_per_ns: 0 for none, INT64_MAX for
 * never (no rate, or beyond the range). */
static inline int64_t replica__ns_for(double units, double rate_per_ns)
{
    if (units <= 0)
        return 0;
    if (rate_per_ns <= 0)
        return INT64_MAX;
    double t = ceil(units / rate_per_ns);
    return t >= 9.2e18 ? INT64_MAX : (int64_t)t;
}

/* ---- replica.c: tables and batches ---------------------------------------------- */

/* Appends i to v; -SLUICE_ENOMEM (and i is lost) when out of memory. */
int replica_idx_push(struct replica__idxv *v, uint32_t i);
/* Appends e to the array *arr of *n entries (capacity *cap), growing it;
 * -SLUICE_ENOMEM when out of memory (the array is unchanged). */
int replica_push(struct table_entry ***arr, size_t *n, size_t *cap, struct table_entry *e);
/* Queues a report (t 0, rep) or a lease (t 1, lease) for member id's life
 * in its pending batch, sent when full or at the end of the tick or
 * receive; 0, or -SLUICE_ENOMEM, or -SLUICE_ETOOBIG for an entry larger
 * than a message. */
int replica_append(struct replica *r, uint32_t id, int t, uint64_t life,
                   const struct wire_report *rep, const struct wire_lease *lease);

/* A token bucket of burst tokens refilled at rate a second, brought up to
 * now: takes one token and returns 1 if there was one, else 0. */
int replica_take(double *tokens, int64_t *last, double rate, double burst, int64_t now);

/* ---- replica_node.c: the node side ------------------------------------------------ */

/* replica_throttle's decision once replica.c has checked the arguments
 * and moved the clock: finds or makes the key, decides qty on its lease
 * bucket or window.  0, or -SLUICE_EFULL (key table full, nothing to
 * evict), -SLUICE_ENOMEM, or the algorithm's error. */
int replica_node_decide(struct replica *r, const char *key, size_t klen,
                        const struct algo_params *p, enum policy_partition pol, int64_t qty,
                        int64_t now_ns, struct algo_result *out);
/* replica_note_demand (replica.h): units refused without a decision, counted
 * as demand. */
void replica_node_note_demand(struct replica *r, const char *key, size_t klen, int64_t qty,
                              int64_t now_ns);
/* Visits node key i in a pass; returns 0, VISIT_REPORTED or VISIT_DROPPED. */
#define VISIT_REPORTED 1
#define VISIT_DROPPED  2
int replica_node_visit(struct replica *r, size_t i, int64_t now);
/* Sends node key i's prompt report if it is still asked for (ASK_QUEUED)
 * and the PROMPT_RATE budget allows; returns 1 if it was sent. */
int replica_node_prompt(struct replica *r, size_t i, int64_t now);
/* The table hook of r->notes: a notice is droppable once past its time. */
int64_t replica_node_note_drain(void *ud, const struct table_entry *e);
/* A lease entry received from member from (not this node), addressed to
 * life (a past life's is stale); hash is the key's in r->nodes
 * (table_hash). */
void replica_node_on_lease(struct replica *r, uint32_t from, uint64_t life,
                           const struct wire_lease *l, uint32_t hash);
/* A lease from this node's own owner side (see replica_owner.c):
 * replica_node_deliver by key, replica_node_deliver_owned for the key of
 * owner entry ote (its node entry through okey.mine, else looked up with
 * ote's hash: r->nodes and r->owned share a seed, and linked when found). */
void replica_node_deliver(struct replica *r, const char *key, size_t klen, uint64_t life,
                          const struct wire_lease *l, int64_t now);
void replica_node_deliver_owned(struct replica *r, struct table_entry *ote, uint64_t life,
                                const struct wire_lease *l, int64_t now);
/* The member that owns node key k by the current view (recomputed once per
 * view change). */
uint32_t replica_node_owner(struct replica *r, struct nkey *k, const char *key, size_t klen);
/* Refills k's lease bucket up to now. */
void replica_node_refill(struct nkey *k, int64_t now);
/* k's bucket capacity under share. */
double replica_node_cap(const struct nkey *k, double share);
/* The node table's drain and free callbacks (struct table_config). */
int64_t replica_node_drain(void *ud, const struct table_entry *e);
void replica_node_free(void *ud, struct table_entry *e);

/* ---- replica_owner.c: the owner side ---------------------------------------------- */

/* A report entry from member from's life life, with the key's hash in
 * r->owned (table_hash).  replica_owner_on_self_report is this node's own
 * report of node entry ne (its hash field is the key's in r->owned: the two
 * tables share a seed): its owner record through nkey.own, and the two
 * entries linked when the record is looked up or made. */
void replica_owner_on_report_hashed(struct replica *r, uint32_t from, uint64_t life,
                                    const struct wire_report *e, uint32_t hash);
void replica_owner_on_self_report(struct replica *r, struct table_entry *ne,
                                  const struct wire_report *e);
/* Computes owner key i in a pass if due; returns 0, OV_COMPUTED or OV_DROPPED. */
#define OV_COMPUTED 1
#define OV_DROPPED  2
int replica_owner_visit(struct replica *r, size_t i, int64_t now);
/* Sets rp->share of every live reporter of o: avail split by demand. */
void replica_owner_split(struct replica *r, struct okey *o, double avail, double dsum, int64_t now);
/* Whether reporter rp still speaks for itself at now. */
int replica_owner_rep_live(const struct replica *r, const struct orep *rp, int64_t now);
/* Whether the members this node sees declared dead or quiet are a strict
 * majority of those it knows: it is the side a majority presumes dead. */
int replica_owner_outvoted(const struct replica *r);
/* An optimistic key's debt in ns (<= 0: none). */
int64_t replica_owner_debt(const struct okey *o, int64_t now);
/* The owned table's drain and free callbacks (struct table_config). */
int64_t replica_owner_drain(void *ud, const struct table_entry *e);
void replica_owner_free(void *ud, struct table_entry *e);

#endif
