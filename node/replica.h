/*
 * replica: global limits.  Each node keeps, per global key, the limit's
 * local algorithm state plus a grow-only counter with one slot per node, and
 * replicates the slots over libgossip so every node's state converges on the
 * cluster's consumption.  All of it runs on the event-loop thread; nothing
 * here locks.
 *
 * Clock.  Every call takes now_ns from a cluster-comparable clock (in the
 * daemon "monotonic + (realtime - monotonic at start)": it never jumps and is
 * comparable across NTP-synced hosts; in the simulator, the sim clock).
 * Gossip callbacks carry no time: they use the latest now_ns seen.
 *
 * Slots.  A slot is (node, epoch, count, at, vtat, stamp, demand):
 *  - epoch = (boot_epoch << 32) | n, where boot_epoch is strictly increasing
 *    across the node's lives (the daemon passes its start time) and n counts
 *    the keys this life created.  A key created again after garbage
 *    collection, or by a restarted node, starts a new epoch from zero.
 *  - merge: a higher epoch replaces the slot, an equal epoch takes the max
 *    count, a lower epoch is ignored.  Commutative, associative, idempotent.
 *  - count grows by the units the node admitted; at is the origin's clock at
 *    the last increase; the increase seen is poured into the local state with
 *    algo_consume() at `at` (the origin's time), never clamped: remote
 *    consumption may push the state into debt, so N nodes cannot each refill
 *    what others used.  An old count arriving late, poured at its old time,
 *    cannot limit anything now: gcra and token-bucket keys keep a history
 *    of consumption in 50 ms buckets over 6.4 s (2064 bytes per key while
 *    it is active, freed after a horizon of idle time) and recompute the
 *    in-order TAT from the pour's bucket on, so a late pour (a node thawed
 *    after SIGSTOP handling seconds of deltas at once) weighs what it would
 *    have in order; older than the horizon, it is charged at the horizon's
 *    start.  Units that span a gap of more than 2 intervals since the
 *    slot's previous record are spread over the gap.
 *  - vtat: the time at which this slot's consumption alone would have drained
 *    (vtat = max(vtat, t) + q * emission).  A slot never seen before (new
 *    peer, new epoch, restarted receiver, key created from gossip) is poured
 *    as its still-undrained part, min(count, ceil((vtat - at) / emission)),
 *    not its whole history: a resurrected stale slot changes nothing, a
 *    restarted node recovers exactly the recent consumption.
 *  - a node's slot from a previous life (same name, lower epoch) is poured
 *    once by that node (remembered as prev_epoch/prev_count), so a restarted
 *    node recovers its own past consumption too.
 *
 * Deltas.  Every interval (default 100 ms) replica_tick() broadcasts the
 * changed own slots of many keys per payload (node/delta.h), each with its
 * limit's parameters so a peer that never saw the key can build it, and a
 * heartbeat (an empty delta) at least every 2 intervals while it holds keys.
 *
 * Flush budget.  libgossip's payload channel carries, per gossip interval,
 * about fanout packets of one payload each, and every payload is sent
 * retransmit_mult x ceil(log10(N + 1)) times; its queue sends the newest
 * first and drops the oldest when full.  Broadcasting every changed key
 * each interval (20,000 active keys, ~67 bytes an entry) overflowed it: the
 * hot keys' deltas waited behind or were dropped with the rest, and each
 * node admitted the full limit (2.8x the oracle in the soak).  So a flush
 * sends at most fanout x max_payload / transmits bytes, the keys chosen by
 * pressure: a key whose cluster demand nears its rate, or whose unsent
 * units near its burst, goes first (up to 3/4 of the budget); the rest of
 * the budget goes to the other keys, longest waiting first, so none waits
 * forever.  Keys not sent stay dirty: slots are cumulative, a postponed
 * delta loses only time.
 * Anti-entropy (gossip push-pull) sends every slot of every key, chunked
 * with the table's SCAN cursor; successive exchanges continue where the last
 * one stopped, so a table larger than one exchange is covered over several.
 * For gcra keys a chunk also carries the sender's TAT (its merged view of
 * every slot): after pouring the chunk's slot increments, a receiver that
 * holds no history for the key (it never saw it, or was idle for a horizon)
 * takes TAT = max(its TAT, the sender's); one with a history does not, as
 * the max copied one node's transient debt (phantom not yet taken back) to
 * the others, which then starved.  Both are lower bounds of the cluster's
 * consumption, so the max never counts anything twice, and a node that never
 * saw the key (a restarted one) learns its recent history at once; per-slot
 * vtat pours alone would miss consumption that only the union of the slots
 * keeps undrained.
 *
 * Shares.  Each node estimates its demand per key
 * (EWMA, 1 s, of requested units/s, denied included) and gossips it.  The
 * local admission check uses this node's share of the burst: share =
 * demand_self / sum(demand of reachable-or-charged nodes), at least one unit;
 * for a key whose peers' demand is not known yet (cold key, first burst)
 * share = 1 / (live nodes not heard from since the key appeared here): a
 * peer counts as heard once a packet it sent half an interval after that
 * has arrived (any packet sent after a node's first request for a key
 * carries the key), and a node that learns a key from gossip heartbeats
 * every flush for LEARN_INTERVALS, so a lone consumer has the whole burst
 * after about one interval.  N nodes starting a burst at once thus admit about
 * one burst in total (bound: burst + 1 + N - 1, from rounding up to one
 * unit), not N bursts.  Remote consumption still flows in as pours, so the
 * rate converges on the global rate.  gcra and token-bucket keys also cap
 * this node's own admissions (a gcra state) at its share of the burst and
 * 1.1 x its share of the rate (at least 2% of it), while the merged state is
 * checked under the full limit with room kept aside for the peers'
 * admissions not heard of yet (their rates times the measured delivery
 * delay plus half an interval): with the burst share alone on the merged
 * state, the nodes with larger shares kept it beyond the smaller ones' reach
 * (the smallest of 5 got 8% of its demand-weighted share).  Window algorithms (fixed-window,
 * sliding-window) check a request against the merged window under the full
 * count AND against this node's own admissions under its share of the count
 * (at least one unit): every window boundary is a burst of the whole count
 * that all nodes see at once, and without the share cap each node admitted
 * its demand until the others' deltas arrived (1.7x the limit at 10x
 * demand in the simulator; within a few percent with it).
 *
 * Partitions.  A peer is unreachable when libgossip calls it suspect, dead or
 * left, or nothing was heard from it for silence_ns (default 5 intervals;
 * heartbeats make silence meaningful).  Per limit:
 *  - REPLICA_OPTIMISTIC: each side enforces the full limit; when the
 *    partition heals the other side's counts arrive as one pour, the debt,
 *    repaid by the refill rate before anyone admits again.
 *  - REPLICA_SHARE: while a peer with demand is unreachable, its last known
 *    share of the rate is charged locally as phantom consumption (for at
 *    most phantom_max_ns, then it is assumed gone; never for a peer that
 *    left), and only for time since it became unreachable (a node that was
 *    frozen itself charges nothing for its own silence).  Any record of that
 *    node (any epoch: a restarted node's new life too) made after the charge
 *    takes the phantom back where it was charged (through the history) and
 *    its real counts are poured at their own times: no double counting.  A
 *    node that sees a peer come back re-sends its own slots with a fresh
 *    stamp so the peer can settle even keys it has not admitted on since.
 *    SUSPECT/DEAD events are ignored for a peer heard within 2 intervals.
 *
 * Restart.  A new replica is "unsynced" until it merges its first
 * anti-entropy chunk (libgossip pushes and pulls with a seed at join) or
 * sync_timeout_ns passes; meanwhile global keys are answered "limited" (fail
 * closed, bounded), so a restarted node never hands out a fresh quota.
 * sync_timeout_ns = 0 starts synced (a lone first node).
 *
 * GC.  A key is dropped when its state has drained, no slot changed for
 * gc_grace_ns, it has nothing unsent and no phantom outstanding.  A slot
 * that reappears later from a lagging peer is harmless (see vtat, epochs).
 *
 * Ownership: the replica copies keys and names; callers own their buffers.
 * Functions return 0 or a negative enum sluice_err.
 */
#ifndef SLUICE_REPLICA_H
#define SLUICE_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "gossip/gossip.h"

enum replica_policy {
    REPLICA_OPTIMISTIC = 0, /* each side of a partition enforces the full limit */
    REPLICA_SHARE = 1,      /* each side enforces its last known share */
};

/* Sends one payload to every node; returns 0 or negative.  The replica
 * calls it from replica_tick() only. */
typedef int (*replica_broadcast_fn)(void *ud, const uint8_t *buf, size_t len);

struct replica_config {
    const char *node_name; /* required, 1..GOSSIP_NAME_MAX bytes; copied */
    uint32_t boot_epoch;   /* strictly increasing across this node's lives */
    int64_t interval_ns;   /* delta flush period; 0 = 100 ms */
    size_t max_keys;       /* 0 = 1M; beyond it new global keys are refused */
    enum replica_policy default_policy;
    int64_t sync_timeout_ns; /* < 0 = 2 s; 0 = start synced */
    int64_t gc_grace_ns;     /* 0 = 30 s */
    int64_t silence_ns;      /* 0 = 5 intervals */
    int64_t phantom_max_ns;  /* 0 = 60 s */
    /* Without replica_attach: how to send, payload size, cluster size. */
    replica_broadcast_fn broadcast;
    void *broadcast_ud;
    size_t max_payload;  /* 0 = 1200 */
    size_t cluster_size; /* live nodes assumed when no gossip node; 0 = 1 */
    /* The payload channel's capacity (see "Flush budget"): libgossip's
     * gossip_nodes and app retransmit multiplier as configured; 0 = its
     * defaults (3, 4).  flush_bytes > 0 overrides the derived budget. */
    int gossip_fanout;
    int retransmit_mult;
    size_t flush_bytes;
};

struct replica_stats {
    uint64_t keys;
    uint64_t deltas_sent, delta_entries_sent, delta_bytes_sent;
    uint64_t deltas_received, delta_bytes_received, slots_merged;
    uint64_t state_chunks_sent, state_chunks_merged;
    uint64_t pours, units_poured, debt_events, phantom_units, refunded_units;
    uint64_t gc_keys, bad_packets, refused_full;
    uint64_t decisions, limited, unsynced_denials;
};

/* One slot as replica_key_info reports it. */
struct replica_slot_info {
    const char *node; /* NUL-terminated, valid during the callback */
    uint64_t epoch;
    int64_t count, at_ns;
    double demand;   /* units/s */
    double share;    /* of the burst/rate, 0..1 */
    int reachable;   /* 1 if the node is reachable (self: 1) */
    int64_t phantom; /* units charged for it while unreachable, not yet matched */
};

struct replica_key_info {
    struct algo_params params;
    enum replica_policy policy;
    int64_t debt_ns;        /* how far the state is beyond full (0 = no debt) */
    int64_t reset_after_ns; /* until the state is fresh */
    int64_t remaining;      /* units this node would admit now */
    double share;           /* this node's share */
    size_t nslots;
};

struct replica;

/* Creates a replica.  Fails with -SLUICE_EINVAL (no/long name) or
 * -SLUICE_ENOMEM.  The caller owns *out (replica_destroy). */
int replica_create(struct replica **out, const struct replica_config *cfg);
/* Frees everything.  NULL is a no-op. */
void replica_destroy(struct replica *r);

/* Uses g (borrowed; NULL detaches) for broadcast, max payload and the live
 * count.  Call again when the gossip node object is replaced. */
void replica_attach(struct replica *r, struct gossip_node *g);

/* Sets cb->ud, on_payload, state_fill, state_merge and on_event to the
 * replica's; other fields untouched. */
void replica_callbacks(struct replica *r, struct gossip_callbacks *cb);

/*
 * Decides qty units of a global key at now_ns under limit p (from
 * algo_params_init; algo_can_be_global(p->kind) must hold) and policy pol.
 * A key first seen here is created with p; if it exists with other
 * parameters, p replaces them (state kept for the same kind, reset otherwise).
 * Fails with -SLUICE_EINVAL (bad arguments, kind not global),
 * -SLUICE_EFULL (max_keys), -SLUICE_ENOMEM; nothing changes then.
 */
int replica_throttle(struct replica *r, const char *key, size_t klen, const struct algo_params *p,
                     enum replica_policy pol, int64_t qty, int64_t now_ns, struct algo_result *out);

/* Flushes deltas, re-estimates demand and shares, charges phantom, collects
 * idle keys.  Call every interval (more often is harmless).  Never fails. */
void replica_tick(struct replica *r, int64_t now_ns);

/* Next time replica_tick has work (the next flush). */
int64_t replica_next_deadline(const struct replica *r);

/* The gossip callbacks, also usable directly (tests, other transports).
 * from is the origin's name.  A bad packet is counted and dropped:
 * -SLUICE_EPROTO / -SLUICE_EINVAL. */
int replica_receive(struct replica *r, const char *from, const uint8_t *buf, size_t len);
size_t replica_state_fill(struct replica *r, uint64_t *cursor, uint8_t *buf, size_t cap);
void replica_member_event(struct replica *r, enum gossip_event ev, const char *name);

/* Marks the replica synced now (e.g. the first node of a new cluster). */
void replica_mark_synced(struct replica *r);
int replica_synced(const struct replica *r);

/*
 * Describes a key: fills *info and calls fn (may be NULL) once per slot.
 * -SLUICE_ENOENT when the replica does not hold the key.
 */
typedef void (*replica_slot_fn)(void *ud, const struct replica_slot_info *s);
int replica_key_info(struct replica *r, const char *key, size_t klen, int64_t now_ns,
                     struct replica_key_info *info, replica_slot_fn fn, void *ud);

/* Total units the cluster admitted for key as far as this node knows (sum
 * of the current slots' counts, previous lives excluded); -1 if absent. */
int64_t replica_key_total(struct replica *r, const char *key, size_t klen);

void replica_get_stats(const struct replica *r, struct replica_stats *out);

#endif
