/*
 * slots: cluster-wide concurrency limits (SL.LEASE ... SCOPE global).  The
 * owner of a key (rendezvous hashing over the live members, hrw.h) lends
 * the key's n slots to the nodes by demand; a node hands out leases only
 * from the slots it holds (limit/concurrency.h, cap = its slots), and
 * slots flow back to the owner as leases end.  No I/O here: time is an
 * argument, messages go out through a send function and come in through
 * slots_receive, so the simulator drives it as the daemon does.
 *
 * Design note (the owner's ledger and the bound).
 *
 * - Counted, not estimated.  For each node the owner keeps `bound`, the
 *   most slots that node may hold now: the cap it last reported if it had
 *   applied the owner's latest grant, else the larger of that cap and
 *   every grant still in flight to it.  New slots are lent only from
 *   n - sum(bound) (free), so however messages are lost, repeated or
 *   reordered, the slots held at any instant sum to at most n.  A node
 *   applies a grant only if it is newer (gseq) than the last it applied
 *   from that owner life; a lowered grant takes effect as its leases end
 *   (its cap never drops below what it holds), and the owner counts the
 *   slots free only once the node reports the lower cap.
 * - Freshness.  A node grants a lease, or renews one, only while it is
 *   fresh: within fresh_ns of sending a report that an owner with a
 *   majority of the members answered.  So a node cut off from its owner
 *   (kill -9, a partition, a lost owner) has no lease alive later than
 *   (its last answered report) + fresh_ns + TTL.  The owner counts a
 *   silent node's slots free only after (the last report it received
 *   from it) + fresh_ns + the key's TTL + a 1% clock-rate margin: never
 *   before its leases can have ended (no double grant), never much later
 *   (no leak).  fresh_ns plays the part of failure detection.
 * - A new ledger (a key new to this owner: the first use, or the owner
 *   changed or restarted) lends nothing beyond what nodes report holding
 *   for fresh_ns + TTL when a reporter was served by another owner life,
 *   or this node restarted (a past life of its own may have lent slots):
 *   their holders may still be out there.  Nor, for fresh_ns + TTL after
 *   a view ended in which another member owned the key (the owner keeps
 *   the last SLOTS_VIEWS views it saw end; a view that fell out of them
 *   counts as such): that owner may have lent to nodes that have not
 *   reported yet, so the first reporters (never served, or served by this
 *   very life in an earlier spell of ownership) are not all the holders.
 *   A key new to an established cluster is served after one round trip
 *   (asks; more while the cluster is fresh).
 * - Asks.  A node new to the cluster has no past views: the owner before
 *   it joined is unknown to it, and its first reporters (itself, nodes
 *   never served) are not all the holders.  So every new ledger asks the
 *   SLOTS_ASK (2) live members that rank next for the key (the one that
 *   owned it before this node joined, and the next, in case it joined
 *   too) whether they lent slots that may still be held, and lends
 *   nothing beyond what is reported until each has answered: "free", or
 *   "busy" with how long to hold (fresh_ns + TTL after it stopped owning
 *   the key, its own hold, or fresh_ns + TTL after it restarted), or
 *   "wait" (it still owns the key in its view: asked again at every
 *   tick).  A member that loses a key keeps its ledger,
 *   lending nothing, while its loans may be held, to answer so.  An asked
 *   member also answers busy, until fresh_ns + TTL after that view ended,
 *   for an owner it saw lately that is no longer a member (nobody can ask
 *   it).  An asked member that joined the cluster less than fresh_ns +
 *   TTL ago cannot vouch for the owners before it: it says so ("free,
 *   new", "busy, new"), and the ledger asks the next member in the
 *   ranking too, and so on (up to 64 members, else it holds for
 *   fresh_ns + TTL), until a member that was there before answers: the
 *   old owner ranks at or above that one, so however many new members
 *   outrank it, it is asked.  An asked member that leaves the view makes
 *   the ledger hold for fresh_ns + TTL; one silent until fresh_ns + TTL
 *   after the ledger began is taken as free (what it lent before then has
 *   ended).  In a fresh cluster every member is new and the asks go down
 *   the whole ranking, two at a time (two round trips for 5 members).
 * - Majority.  An owner answers "fresh" and lends free slots only while
 *   more than half of the members it knows (alive, suspect, dead but not
 *   yet forgotten) count: itself, and each live member that is not
 *   suspected and answered one of its beats sent within the last
 *   fresh_ns / 2 (a member that never answered a beat, an older release,
 *   counts by the gossip view alone; so does every member in the first
 *   fresh_ns / 2 after the owner starts beating).  While it uses or owns
 *   a key, a node pings every live member every fresh_ns / 8 (so that a
 *   node that becomes a key's owner when the old one leaves its view is
 *   strict at once: by the gossip view, members it has not suspected yet
 *   would make a minority a majority).  Cut off in a
 *   minority, an owner therefore loses its majority within
 *   fresh_ns / 2 + fresh_ns / 8 of the cut, whatever the failure
 *   detector does, its nodes stop granting fresh_ns later and their
 *   leases end TTL after that; the majority's new owner, which saw the
 *   old one leave its view after the cut, lends their slots only
 *   fresh_ns + TTL + fresh_ns / 2 + fresh_ns / 8 after that: no double
 *   grant across a partition.  (By the gossip view alone the minority
 *   kept its majority until it suspected the others, which on five real
 *   daemons cut 2 | 3 came up to 3 s after the cut and 2 s after the
 *   majority had declared it dead: 14 and 16 of 10 leases held.)  Back with
 *   a majority (the heal), an owner lends nothing beyond what is reported
 *   for fresh_ns + TTL, and while its view may be stale (no majority, just
 *   back, or reported caps adding up to more than n: each side granted
 *   them) it cuts every node's unused cap to what the node holds, so a
 *   minority node's old cap is not made fresh again beside the majority
 *   owner's loans.
 * - Demand.  Each node reports held + waiting (want).  Within n each node
 *   gets its want and the spare goes evenly to nodes that hold or want
 *   some, so a node can grant without asking; above n, n is shared in
 *   proportion to want (not capped at n), and the rounding remainder moves
 *   between nodes by the slot-seconds each is owed (slots__allocate), so
 *   fewer slots than nodes still serve every node in turn.  A node short
 *   of slots reports at once (next tick); others every REPORT_EVERY ticks.
 *
 * The bound: slots held at one instant, cluster-wide, <= n, provided that
 * (1) monotonic clocks run at the same rate within 1%, (2) members agree on
 * a key's owner within fresh_ns + TTL of a membership change, and (3) a
 * partition heals before libgossip forgets the dead members (dead_reap_ms,
 * 30 s): a side that outlives that counts itself whole and may lend n again
 * (each side up to n, as the optimistic partition policy of rate limits).
 *
 * Wire (msgpack, one key per message, sent as a libgossip direct message):
 *
 *   msg    = fixarray(4) [ version:uint type:uint(WIRE_SLOTS) from:uint64 body ]
 *            +------+---------+------+------------+------ ... -----+
 *            | 0x94 | version | 0x03 | 0xcf + 8 B | body           |
 *            +------+---------+------+------------+------ ... -----+
 *   from   = the sender's life id
 *   body   = report | grant | ask | answer | beat
 *   report = fixarray(10) [ 1 key:bin limit:uint ttl_ms:uint cap:uint
 *            held:uint want:uint gseq:uint rseq:uint served_by:uint64 ]
 *            (node -> owner; served_by: the owner life whose grant set cap,
 *            0 for none)
 *   grant  = fixarray(7)  [ 2 key:bin to:uint64 grant:uint gseq:uint
 *            ack_rseq:uint flags:uint ]
 *            (owner -> node; to: the node life it answers; flags
 *            SLOTS_F_FRESH: the owner has a majority, the ack makes the
 *            node fresh)
 *   ask    = fixarray(4)  [ 3 key:bin nonce:uint ttl_ms:uint ]
 *            (a new owner -> a member that ranks next for the key)
 *   answer = fixarray(5)  [ 4 key:bin nonce:uint state:uint hold_ms:uint ]
 *            (-> the owner that asked, echoing its nonce; state 0 free,
 *            1 busy: lend nothing beyond what is reported for hold_ms,
 *            2 wait: ask again, 3 free and 4 busy from a member new to
 *            the cluster: ask the next member too; a node that knows
 *            fewer states drops the answer, and its ask times out)
 *   beat   = fixarray(4)  [ 5 key:bin nonce:uint pong:uint ]
 *            (an owner -> every live member, pong 0; the answer echoes
 *            the nonce with pong 1.  key: the addressee's node name, not
 *            a limit's key.  A release without beats counts the message
 *            as bad and does not answer: the owner then counts it by the
 *            gossip view, as before)
 *
 * Each body's fields after the key are declared once, in this order, by
 * slots.c's SLOTS_*_FIELDS lists (with the largest value a reader takes);
 * a reader refuses a body of another length or kind.
 *
 * Nothing on the wire is a time; TTLs are durations.  Everything runs on
 * one thread.  Functions return 0 or a negative enum sluice_err.
 */
#ifndef SLUICE_SLOTS_H
#define SLUICE_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "counter.h"

#define SLOTS_F_FRESH 0x01u
/* Ticks between the reports of a node that has the slots it needs. */
#define SLOTS_REPORT_EVERY 5

struct slots;

/* Sends buf to member `to`; fire and forget.  Called from slots_tick and
 * slots_receive only. */
typedef int (*slots_send_fn)(void *ud, const char *to, const uint8_t *buf, size_t len);
/* Slots of key arrived (its waiters may fit). */
typedef void (*slots_key_fn)(void *ud, const char *key, size_t klen);
/* What this node holds of key and what waits for it, in units. */
typedef void (*slots_load_fn)(void *ud, const char *key, size_t klen, int64_t *held,
                              int64_t *waiting);

struct slots_config {
    const char *node_name; /* copied */
    uint64_t life;         /* this process's life id, != 0 */
    int64_t fresh_ns;      /* 0 = 2 s */
    int restarted;         /* 1: a past life of this name existed (see the note) */
    slots_send_fn send;
    void *send_ud;
    slots_key_fn on_slots; /* may be NULL */
    slots_load_fn load;    /* may be NULL: see slots_set_client */
    void *ud;              /* for on_slots and load */
    int restarted_known;   /* 1: restarted is known at creation */
};

struct slots_stats {
    uint64_t keys;  /* keys this node uses */
    uint64_t owned; /* keys whose ledger this node keeps */
    uint64_t slots; /* slots this node holds now (sum of caps) */
    uint64_t reports_sent, grants_sent, received, bad_packets;
    uint64_t reclaimed; /* slots of silent nodes counted free again (as owner) */
    uint64_t lent;      /* slots lent out of the free ones (as owner) */
    uint64_t returned;  /* slots nodes gave back, by reporting a lower cap (as owner) */
    uint64_t stale;     /* grants and renewals refused because this node was not fresh */
};

int slots_create(const struct slots_config *cfg, int64_t now, struct slots **out);
void slots_destroy(struct slots *s);

/* Sets (or replaces) the callbacks of the layer that holds the leases:
 * the daemon makes the slots with the cluster, before that layer exists.
 * Until load is set, this node holds and waits for nothing. */
void slots_set_client(struct slots *s, slots_key_fn on_slots, slots_load_fn load, void *ud);
/* Whether a past life of this node's name existed (the cluster learns it
 * on joining).  Until it is known, this node lends no free slots. */
void slots_set_restarted(struct slots *s, int restarted);

/*
 * The members: live (alive or suspect, self included, names borrowed for
 * the call), suspect (parallel to live: 1 for a suspected member; NULL:
 * none), and total, the members known (live, plus dead ones not yet
 * forgotten).  Owners are chosen over the live ones; suspects do not make
 * a majority (see "Majority" above).  -SLUICE_ENOMEM.
 */
int slots_set_view(struct slots *s, const char *const *live, const unsigned char *suspect,
                   size_t nlive, size_t total, int64_t now);

/*
 * The slots this node may hand out for key now (limit n, leases of ttl_ns),
 * given held units and a request of qty: its cap while fresh, else held
 * (nothing new).  Registers the key (it is reported from now on) and, when
 * held + qty exceeds the cap, asks the owner for more at the next tick.
 * Never fails: an unknown key with no memory for it gets 0.
 */
int64_t slots_cap(struct slots *s, const char *key, size_t klen, int64_t limit, int64_t ttl_ns,
                  int64_t held, int64_t qty, int64_t now);
/* A lease of key ended: a cap above the owner's grant falls back to it. */
void slots_note_held(struct slots *s, const char *key, size_t klen, int64_t held, int64_t now);
/* 1 when key is a global key this node uses (leases or slots). */
int slots_uses(struct slots *s, const char *key, size_t klen);
/* 1 when a lease of key may be renewed now (this node is fresh). */
int slots_may_renew(struct slots *s, const char *key, size_t klen, int64_t now);

/* 1 when buf is a slots message (the type after the version). */
int slots_is_message(const uint8_t *buf, size_t len);
/* Handles a message from member `from`.  -SLUICE_EPROTO / -SLUICE_EINVAL
 * for a malformed or foreign one (counted, dropped). */
int slots_receive(struct slots *s, const char *from, const uint8_t *buf, size_t len, int64_t now);
/* Sends reports and grants that are due, reclaims silent nodes' slots and
 * forgets idle keys.  Call every gossip interval. */
void slots_tick(struct slots *s, int64_t now);

void slots_get_stats(const struct slots *s, struct slots_stats *out);
/* struct slots_stats' rows for INFO's "# Leases" and /metrics. */
extern const struct counter_table slots_counters;

#endif
