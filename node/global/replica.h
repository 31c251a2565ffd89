/*
 * replica: global limits at fleet scale.  Demand-weighted leases handed out
 * by an owner per key, chosen by rendezvous hashing; no I/O here.
 *
 * Design note.
 *
 * Why this design.  The first design let every node learn every node's
 * counter of every key through one epidemic channel: traffic and memory per
 * node grew with N x keys, the channel saturated at a few hundred busy keys,
 * and a peer whose counter had not arrived counted as idle, so the cluster
 * failed open (2.3x the limit at 5 nodes x 200 keys).  Here a node talks
 * only to the owners of the keys it serves, and its own admissions are
 * bounded by construction instead of by how fresh its view is:
 *
 *  - Owner.  Each global key has one owner, the highest-scoring live member
 *    for the key under rendezvous hashing (global/hrw.h).  Ranking the rest
 *    gives the successors: when the owner dies, leaves or is cut off, the
 *    next one takes the key over; a join moves about 1/N of the keys.  An
 *    owner's state is soft: it is rebuilt from the next reports, so there is
 *    no replica of it to keep consistent and no central store.
 *  - Report.  Every node that serves a key reports it to the key's owner,
 *    many keys per direct message (global/wire.h): the limit, the node's
 *    demand (requested units per second, denied ones included), what it
 *    admitted, the units left in its bucket, and its part of the key's
 *    rate as the cluster last left it while whole (its frozen share: its
 *    part of the demand, as a silent owner's node counts it).  Contested
 *    keys report
 *    every interval, active ones every few, an idle key once when it goes
 *    idle, then never.
 *  - Lease.  The owner splits the limit between the nodes reporting demand,
 *    by demand, and answers each with its share s.  A node enforces its
 *    lease locally, in microseconds: a bucket of capacity max(1, s x limit)
 *    refilled at s x rate.  The shares sum to at most 1, so near the limit
 *    the cluster admits about one limit of burst plus the rate, like one
 *    central bucket (burst capacity is at least one unit per node with
 *    demand, and free units below add a bounded overshoot).
 *  - Grant.  Shares split the rate well, but the burst badly: a share that
 *    shrinks throws units away and one that grows gets none, so a key whose
 *    burst outweighs its rate (15 a minute, burst 15, on many nodes) would
 *    admit a fraction of one central bucket.  The owner therefore keeps the
 *    central bucket too, fed by what its reporters admitted, and grants
 *    what no node holds to the nodes with room (replica_owner.c, "The cluster's
 *    bucket").  Its account errs on the side of holding: a moved key's
 *    unknown past counts as spent, a silent node as spending.
 *  - Free units (availability first).  Shares and grants alone keep each
 *    node to its part of the cluster's bucket, so demand spread thin over
 *    many nodes would be refused on the node it lands on while the bucket
 *    is nearly full.  So while the owner's bucket has a unit to spare (and
 *    the key's demand is under 6x its rate), every lease also carries free
 *    units: what the node may admit beyond its bucket until its next lease,
 *    if the cluster's level as the node can tell (the owner's level, less
 *    what it admitted since, plus the refill, less the others' demand)
 *    still holds the request.  A first touch below one unit takes one free
 *    unit from a node-wide bucket.  What is admitted is poured into the
 *    owner's bucket; below empty, the shares shrink until repaid.  Bound:
 *    over any window a key admits at most its envelope (count x window /
 *    period + burst + 1) plus 2 (burst + 1 + 14 r) + 3 N units, r the
 *    refill of one interval, for keys reported every fifth interval or
 *    more often (README "The bound" gives the term for the longer report
 *    periods of a node's many quiet keys: replica__quiet_every).  Leases
 *    carry the level, so `remaining` is the cluster's.
 *  - Thin keys.  A slow key (less than a unit of refill in a quiet key's
 *    report period, such as 10 a minute) asked at its rate or more (or
 *    whose bucket is spent) cannot
 *    be split into shares: each node's share is a part of a unit that
 *    fills in minutes, stranded where no request comes, and the first
 *    touches and free units that made up for it gave a unit per node too
 *    many.  Its owner keeps the whole limit in the cluster's bucket (all
 *    shares 0, nodes give back what they hold) and leases odds instead: a
 *    request on any node is admitted with the chance (slack + rate x H) /
 *    (demand x H), so the cluster admits what the bucket has, wherever
 *    the request lands.  Members that do not report the key get notices
 *    with the odds while they are below 1, so their first requests take
 *    no first touch (replica_owner.c, "Thin keys").
 *  - Debt.  The window algorithms and the optimistic partition policy can
 *    admit more than the lease (a window's count is rounded per node; an
 *    optimistic side uses the full limit): the node runs a shadow bucket at
 *    its share that may go negative, and once the owner answers again the
 *    debt is repaid at its share's rate before it admits.
 *
 * Join.  A new member takes over the keys it wins; their reporters move to
 *   it at their next report and it leases from what they report.
 * Leave, failure.  Keys move to the next owner in rank.  A new owner never
 *   lets a node's share grow until it has owned the key for a silence window
 *   with the view complete: a missing report is not zero demand.  A key
 *   new to the cluster that one node alone asks for settles in two
 *   intervals (the first touches made about then are reported by then),
 *   granted what its demand takes a few intervals ahead until the silence
 *   window has passed, so a new user's burst on one node is served.
 * Silence.  A reporter that stops reporting (frozen, cut off) keeps its last
 *   share reserved under the share policy for phantom_max_ns, so the others
 *   do not take it; idle reports release it at once.
 * Partition.  Each side's owner leases only to its side.  share: nodes keep
 *   their last lease, a new owner caps every reporter at its frozen share,
 *   so each side holds its last known share; an owner holds a silent
 *   reporter's part once its member is suspected, and its bucket for the side
 *   refills at the sum of its live nodes' frozen shares and lends free
 *   units from it, so demand spread thin pools within the side (one burst
 *   per side over the partition).  optimistic: a node whose owner is
 *   silent enforces the full limit and repays the excess after healing.
 * Restart.  A new life's key starts with less than one unit, not a fresh
 *   quota, and gets nothing from an owner that is not settled; a settled
 *   owner grants it what the central bucket has left, so a key the others
 *   spent stays spent and a key nobody used fills.  A new cluster (no owner
 *   holds anything) serves as soon as its owners settle.
 * Skew.  Nothing on the wire is a time: reports and leases carry counts,
 *   rates and fractions; each node measures durations on its own monotonic
 *   clock.  A host whose clock is off by an hour admits exactly what its
 *   lease allows.
 * Bounds.  Node side: at most max_keys global keys (the daemon's --max-keys,
 *   evict or refuse as --on-full says), about 200 bytes each; a key whose
 *   bucket is full and that saw no request for gc_grace_ns is dropped.
 *   Owner side: at most max_owned key records, each 168 bytes with its
 *   first reporting node, plus 64 per further one; a record with no live
 *   reporter is dropped after a silence window (phantom_max_ns for
 *   reserved shares).  Notices: at most NOTICE_MAX (65,536) held per node,
 *   each the key plus 16 bytes, dropped when their time is past or evicted
 *   nearest it first; an owner sends at most NOTICE_RATE (4,096) a second.
 *
 * Everything runs on one thread (the event loop); nothing here locks.  Time
 * is an int64 of nanoseconds on a monotonic clock, passed in.  Functions
 * return 0 or a negative enum sluice_err.  The replica copies keys and
 * names; callers own their buffers.
 */
#ifndef SLUICE_REPLICA_H
#define SLUICE_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "policy.h"

/* Sends one direct message to member `to`; 0 or negative (then dropped).
 * The replica calls it from replica_tick, replica_receive and
 * replica_flush only. */
typedef int (*replica_send_fn)(void *ud, const char *to, const uint8_t *buf, size_t len);

/* Units of p's limit that key used before it was a global key here (its
 * local state, when a reload turned its policy global), asked once as the
 * key is created on this node; 0: none.  Optional. */
typedef int64_t (*replica_carry_fn)(void *ud, const char *key, size_t klen,
                                    const struct algo_params *p);

/* The host's monotonic clock in ns, read while a pass runs to end its turn
 * on time: half a millisecond at most, and a quarter of the time since its
 * previous turn ended.  Optional (a simulator passes none: its turns end by
 * count). */
typedef int64_t (*replica_clock_fn)(void *ud);

struct replica_config {
    const char *node_name; /* required, 1..REPLICA_NAME_MAX bytes; copied */
    uint64_t life_id;      /* this process's life (random per start) */
    int64_t interval_ns;   /* report and lease period; 0 = 100 ms */
    size_t max_keys;       /* node-side global keys; 0 = 1M */
    int evict;             /* at max_keys: 1 evict the key nearest idle, 0 refuse */
    size_t max_owned;      /* owner-side key records; 0 = 4 x max_keys */
    enum policy_partition default_policy;
    int64_t young_ns;       /* < 0: 2 s; 0: none (the first node of a cluster) */
    int64_t gc_grace_ns;    /* 0 = 5 s */
    int64_t silence_ns;     /* 0 = 5 intervals */
    int64_t phantom_max_ns; /* 0 = 60 s */
    size_t max_msg;         /* largest message send may carry; 0 = 1200 */
    replica_send_fn send;
    void *send_ud;
    replica_carry_fn carry; /* NULL: keys start fresh */
    void *carry_ud;
    replica_clock_fn clock; /* NULL: a turn ends after TURN_VISITS visits only */
    void *clock_ud;
};

#define REPLICA_NAME_MAX 64

/* A member of the view, as the transport knows it. */
struct replica_member {
    const char *name;
    int live;    /* 1: alive or suspect (owns keys); 0: unreachable, not gone */
    int suspect; /* 1: live but suspected: not counted in a majority */
    int quiet;   /* 1: live (suspected or not), not heard from lately: not
                    counted in a majority, counted against this node's side
                    (the caller decides when: cluster.c marks members quiet
                    only while one is dead or suspected) */
};

struct replica_stats {
    uint64_t keys, owned_keys, owned_reporters;
    uint64_t reports_sent, report_entries_sent, report_bytes_sent;
    uint64_t leases_sent, lease_entries_sent, lease_bytes_sent;
    uint64_t reports_received, report_entries_received;
    uint64_t leases_received, lease_entries_received;
    uint64_t bytes_received, bad_packets, stale_leases, send_errors, bare_unknown;
    uint64_t decisions, limited, young_denials, debt_events, free_admits;
    uint64_t gc_keys, owned_gc, refused_full, evicted, view_changes;
    uint64_t notices_sent, notices_received, chance_refusals, prompt_reports;
};

/* One reporter of a key (on its owner), or this node's own lease. */
struct replica_slot_info {
    const char *node; /* NUL-terminated, valid during the callback */
    uint64_t epoch;   /* the node's life id */
    int64_t count;    /* units it admitted in that life */
    int64_t age_ns;   /* since its last report (self: 0) */
    double demand;    /* units/s */
    double share;     /* 0..1 */
    int reachable;    /* 1 if it reports (self: 1) */
    double frozen;    /* its frozen share, 0 if none */
};

struct replica_key_info {
    struct algo_params params;
    enum policy_partition policy;
    int64_t debt_ns;        /* how long until the shadow bucket is out of debt */
    int64_t reset_after_ns; /* until the local bucket is full */
    int64_t remaining;      /* units this node would admit now */
    double share;           /* this node's share */
    double demand;          /* this node's demand, units/s */
    const char *owner;      /* the key's owner by this node's view */
    int owned;              /* 1 if this node owns it */
    int degraded;           /* 1 if its owner has been silent for a silence window */
    int64_t lease_age_ns;   /* since this node's last lease of the key; -1: none yet */
    size_t nslots;
};

struct replica;

/* Creates a replica whose view holds only itself.  Fails with
 * -SLUICE_EINVAL (no/long name, no send) or -SLUICE_ENOMEM.  The caller owns
 * *out (replica_destroy). */
int replica_create(struct replica **out, const struct replica_config *cfg, int64_t now_ns);
/* Frees everything.  NULL is a no-op. */
void replica_destroy(struct replica *r);

/*
 * Replaces the member view (self is added if missing).  complete: no member
 * is unreachable.  Owners are recomputed lazily.  Fails with -SLUICE_ENOMEM
 * (the old view is kept) or -SLUICE_EINVAL (a bad name).
 */
int replica_set_view(struct replica *r, const struct replica_member *m, size_t n, int complete,
                     int64_t now_ns);

/*
 * Decides qty units (0 peeks) of a global key at now_ns under limit p
 * (algo_can_be_global(p->kind)) and policy pol.  A key first seen here is
 * created with p; a changed p replaces the limit (the lease is kept).
 * Fails with -SLUICE_EINVAL (bad arguments), -SLUICE_EFULL (max_keys, not
 * evicting), -SLUICE_ENOMEM; nothing changes then.
 */
int replica_throttle(struct replica *r, const char *key, size_t klen, const struct algo_params *p,
                     enum policy_partition pol, int64_t qty, int64_t now_ns,
                     struct algo_result *out);

/* A look-ahead hint for a decision on key soon (server_hint_fn): stage 0
 * asks the cache for its bucket in the node's key table and keeps the hash
 * in *h, stage 1 for the first entry of that bucket's chain.  Changes
 * nothing. */
void replica_prefetch(const struct replica *r, const char *key, size_t klen, int stage,
                      uint32_t *h);

/* Counts qty units asked for key (held here) that a caller refused without
 * deciding through replica_throttle (SL.MULTI's all-or-nothing check), so
 * that the demand the key's owner splits by includes them.  No-op for a key
 * not held. */
void replica_note_demand(struct replica *r, const char *key, size_t klen, int64_t qty,
                         int64_t now_ns);

/* Sends due reports and leases, updates demand, drops idle keys: a slice
 * of at most a few thousand key visits of the current pass (a pass starts
 * every interval and visits the keys with news plus a slice of the rest).
 * Call it at replica_next_deadline: every interval, and again at once while
 * a pass is unfinished (more often is harmless).  Never fails. */
void replica_tick(struct replica *r, int64_t now_ns);

/* Next time replica_tick has work: the replica's latest clock reading
 * while a pass is unfinished, else the start of the next pass. */
int64_t replica_next_deadline(const struct replica *r);

/* Whether prompt reports wait (a key out of units asked for its lease
 * now): replica_tick sends them at once, without starting a pass early. */
int replica_prompt_pending(const struct replica *r);

/*
 * A direct message from member `from`.  A malformed one is counted and
 * dropped: -SLUICE_EPROTO / -SLUICE_EINVAL.  May send (leases) through the
 * send function: the answer to an ask at once; the leases it sends to
 * other members wait for replica_flush (or the next replica_tick), so
 * that those of the messages received in one loop turn share batches.
 */
int replica_receive(struct replica *r, const char *from, const uint8_t *buf, size_t len,
                    int64_t now_ns);

/* Sends what the receives since the last call left waiting (and what a
 * finished pass left).  Call it after the messages of a loop turn. */
void replica_flush(struct replica *r);

/* The longest pass since replica_create or replica_reset_max, the one in
 * progress at now_ns included, in ns: from its start to the visit of its
 * last key.  A pass starts every interval; one that takes longer is a
 * replication behind its keys (their reports wait longer than an
 * interval), as when new keys come faster than a pass's share of the loop
 * visits them.  Never fails. */
int64_t replica_pass_max(const struct replica *r, int64_t now_ns);
void replica_reset_max(struct replica *r);

/* About how many keys wait for the replication's work (news for a pass to
 * report or compute, prompt reports, due keys a pass's byte budget left
 * for the next): 0 once it has caught up with its keys' requests, some
 * every interval while keys are contested.  A key may be counted twice and
 * one that left still counted until its entry is skipped.  Never fails. */
size_t replica_backlog(const struct replica *r);

/* 1 once this life is past its young period (or got a lease from an owner
 * that knows the cluster). */
int replica_synced(const struct replica *r);

/* Ends the young period now: the node learnt it is new to the cluster (no
 * past life of its name), so it has no past to recover. */
void replica_mark_synced(struct replica *r);

/* Undoes replica_mark_synced: the node was taken as new (nobody it met
 * knew a past life of its name) and has learnt of one since (seeds
 * restarted together join each other first and hear of their past lives
 * when the others reach them).  Young again from now_ns, and every key it
 * holds keeps less than one unit, as a young life's start: what it took as
 * new is not spent twice.  Its owner side learns the keys' use from the
 * reporters, as any restarted owner does. */
void replica_unsync(struct replica *r, int64_t now_ns);

/* The young period: how long a restarted life waits for an owner that knows
 * the cluster before it serves global keys on its own (0: none). */
int64_t replica_young_ns(const struct replica *r);

/* Describes a key held here (as a node or as its owner): fills *info and
 * calls fn (may be NULL) once per reporter (owner) or once for itself.
 * -SLUICE_ENOENT when neither side holds the key. */
typedef void (*replica_slot_fn)(void *ud, const struct replica_slot_info *s);
int replica_key_info(struct replica *r, const char *key, size_t klen, int64_t now_ns,
                     struct replica_key_info *info, replica_slot_fn fn, void *ud);

/* Units admitted for key as this node knows them (its owner record's sum,
 * else its own); -1 if the key is not held here. */
int64_t replica_key_total(struct replica *r, const char *key, size_t klen);

void replica_get_stats(const struct replica *r, struct replica_stats *out);

/* Bytes of heap a node-side key and an owner record take, for the
 * documentation and the memory benchmark. */
size_t replica_key_bytes(void);

#endif
