/*
 * libgossip: cluster membership (SWIM with the Lifeguard refinements),
 * piggybacked dissemination, an application payload channel and periodic
 * anti-entropy, over encrypted and authenticated datagrams.
 *
 * The library knows nothing about rate limits.  Its protocol core does no I/O:
 * a node object is driven by an adapter (libgossip/io.h: gossip_node_create,
 * gossip_node_receive, gossip_node_tick, gossip_node_next_deadline) that owns
 * the socket and the clock.  Two adapters exist: the libuv one (gossip/uv.h)
 * for the daemon and the simulator (gossip/sim.h) for tests.
 *
 * This header is the application-facing API: configuration, join, leave,
 * broadcast, membership, statistics.  Types are opaque; functions return 0 or
 * a negative enum gossip_err (gossip/error.h).  A node is single-threaded: call
 * everything from the thread that drives it (the event loop).
 */
#ifndef GOSSIP_GOSSIP_H
#define GOSSIP_GOSSIP_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gossip_node;    /* opaque: one member of a cluster */
struct gossip_keyring; /* opaque: gossip/keyring.h */

/* ---- addresses ---------------------------------------------------------- */

/* A UDP endpoint; ip holds 4 bytes (family 4) or 16 bytes (family 6). */
struct gossip_addr {
    uint8_t family; /* 4 or 6 */
    uint16_t port;  /* host byte order */
    uint8_t ip[16];
};

/* Longest text form written by gossip_addr_format, with the NUL. */
#define GOSSIP_ADDR_STRLEN 56

/*
 * Parses "1.2.3.4:7946" or "[::1]:7946" (numeric only; names are the
 * adapter's business).  -GOSSIP_EINVAL on anything else; *out is zeroed first.
 */
int gossip_addr_parse(const char *s, struct gossip_addr *out);

/* Writes the text form into buf (cap bytes, GOSSIP_ADDR_STRLEN is enough).
 * -GOSSIP_ETOOBIG if it does not fit, -GOSSIP_EINVAL for a bad family. */
int gossip_addr_format(const struct gossip_addr *a, char *buf, size_t cap);

/* 1 if both name the same endpoint (family, ip bytes in use, port). */
int gossip_addr_equal(const struct gossip_addr *a, const struct gossip_addr *b);

/* ---- members and events ------------------------------------------------- */

/* A node's identity; it is not its address (a node may move). */
#define GOSSIP_NAME_MAX 64

enum gossip_member_state {
    GOSSIP_MEMBER_ALIVE = 0,
    GOSSIP_MEMBER_SUSPECT = 1,
    GOSSIP_MEMBER_DEAD = 2,
    GOSSIP_MEMBER_LEFT = 3,
};

/* Static name of a member state ("alive", "suspect", "dead", "left"), as
 * INFO, SL.MEMBERS and the metrics label it; "unknown" for any other value. */
const char *gossip_member_state_name(enum gossip_member_state s);

/* A copy of one member's state; owned by whoever holds it. */
struct gossip_member_info {
    char name[GOSSIP_NAME_MAX + 1];
    struct gossip_addr addr;
    enum gossip_member_state state;
    uint32_t incarnation;
    uint64_t life_id;      /* the member's life (random per start); 0 if not known yet */
    int64_t last_heard_ns; /* adapter clock; 0 if never heard directly */
    int64_t state_since_ns;
    int is_self;
};

enum gossip_event {
    GOSSIP_EVENT_JOIN = 0,    /* a member appeared, or came back alive */
    GOSSIP_EVENT_SUSPECT = 1, /* a member is suspected */
    GOSSIP_EVENT_ALIVE = 2,   /* a suspect member refuted, or an update */
    GOSSIP_EVENT_DEAD = 3,    /* declared dead */
    GOSSIP_EVENT_LEFT = 4,    /* left gracefully */
    GOSSIP_EVENT_REAP = 5,    /* a dead or left member is forgotten */
    /* Another live process claims this node's name.  The member info is
     * this node's name with the other process's address.  When
     * gossip_node_conflict() then returns 1 this node is the newcomer and
     * should stop (it no longer refutes); otherwise the other one is, and is
     * told so. */
    GOSSIP_EVENT_CONFLICT = 6,
};

/* ---- configuration ------------------------------------------------------ */

/*
 * Application callbacks.  All are optional (NULL).  They run inside
 * gossip_node_receive/gossip_node_tick; they must not destroy the node, but
 * may call gossip_node_broadcast.  Pointers passed to them are valid only
 * during the call.
 */
struct gossip_callbacks {
    void *ud;
    /* Membership change of any member other than this node. */
    void (*on_event)(void *ud, enum gossip_event ev, const struct gossip_member_info *m);
    /* An application payload broadcast by `from_name` (delivered once per
     * node, barring a duplicate window overflow; payloads must be idempotent). */
    void (*on_payload)(void *ud, const char *from_name, const uint8_t *payload, size_t len);
    /* A direct message sent to this node by member `from_name` with
     * gossip_node_send.  May call gossip_node_send (replies batch with the
     * rest and leave when the receive returns). */
    void (*on_direct)(void *ud, const char *from_name, const uint8_t *msg, size_t len);
    /* Anti-entropy: write the next chunk of application state into buf (at
     * most cap bytes), advancing *cursor; return the bytes written, 0 at the
     * end of the state.  The cursor starts at 0 and persists across
     * exchanges: when an exchange's packet budget runs out, the next one
     * resumes there; after a 0 it restarts at 0.  Chunks must make sense on
     * their own (each is merged alone, and any may be lost). */
    size_t (*state_fill)(void *ud, uint64_t *cursor, uint8_t *buf, size_t cap);
    /* Anti-entropy: merge one chunk produced by a peer's state_fill. */
    void (*state_merge)(void *ud, const char *from_name, const uint8_t *buf, size_t len);
};

/*
 * Tunables.  gossip_config_default fills values close to memberlist's
 * DefaultLANConfig; change any field before gossip_node_create.
 */
struct gossip_config {
    const char *name;               /* required, 1..GOSSIP_NAME_MAX bytes; copied */
    struct gossip_addr advertise;   /* the address peers send to */
    struct gossip_keyring *keyring; /* borrowed; NULL = unsealed packets (tests) */
    uint32_t incarnation;           /* initial (0 is fine: a restarted node learns its
                                       name's last incarnation and refutes above it) */
    uint64_t life_id;               /* this process's life: random, drawn at each start
                                       (0: the node draws one from io->random) */
    int64_t probe_interval_ms;      /* 1000 */
    int64_t probe_timeout_ms;       /* 500 */
    int indirect_checks;            /* 3 */
    int suspicion_mult;             /* 4 */
    int suspicion_max_timeout_mult; /* 6 */
    int retransmit_mult;            /* 4 */
    int app_retransmit_mult;        /* 0 = retransmit_mult; payloads' own limit */
    int64_t gossip_interval_ms;     /* 200 */
    int gossip_nodes;               /* 3 */
    int64_t gossip_to_dead_ms;      /* 30000: keep gossiping to the dead this long */
    int64_t pushpull_interval_ms;   /* 30000; 0 disables periodic push-pull */
    int pushpull_max_packets;       /* 16 packets per direction per exchange */
    int awareness_max_multiplier;   /* 8 */
    int lifeguard;                  /* 1: LHM, nacks, dynamic suspicion; 0: plain SWIM */
    int64_t dead_reap_ms;           /* 30000: dead/left members are then forgotten */
    int64_t tombstone_ms;           /* 600000: their incarnation is kept this long */
    size_t mtu;                     /* 1400, whole datagram including seal overhead */
    size_t app_budget;              /* 640: bytes per packet first offered to payloads */
    size_t app_queue_max;           /* 1024 queued payloads, then oldest dropped */
    size_t member_queue_max;        /* 4096 queued membership messages */
    struct gossip_callbacks cb;
};

/* Fills cfg with defaults (name NULL, advertise zero, keyring NULL). */
void gossip_config_default(struct gossip_config *cfg);

/* ---- the node ------------------------------------------------------------ */

/* Creation, receive, tick and deadline are in libgossip/io.h (adapters). */

/* Frees the node and everything it owns.  NULL is a no-op. */
void gossip_node_destroy(struct gossip_node *node);

/*
 * Joins a cluster through seed addresses: an anti-entropy exchange is started
 * with every seed at the next tick (and retried at each push-pull interval
 * while no other member is known).  Copies the array.  -GOSSIP_EINVAL for
 * count > 64.  Joining with no seed is valid: the node waits to be joined.
 */
int gossip_node_join(struct gossip_node *node, const struct gossip_addr *seeds, size_t count);

/*
 * Leaves gracefully: a "left" message is sent to several members at once and
 * queued for gossip; the node stops probing.  Keep driving the node for about
 * a gossip interval or two so it goes out, then destroy it.  -GOSSIP_ESTATE if
 * already left, or if this process yielded its name to an older live one
 * (gossip_node_conflict): it stops without a word, since any leave under the
 * name would be read as the incumbent's; destroy it at once.
 */
int gossip_node_leave(struct gossip_node *node);

/*
 * Queues an opaque payload (copied) for dissemination to every member.
 * -GOSSIP_ETOOBIG if it cannot fit one packet (see gossip_node_max_payload),
 * -GOSSIP_ESTATE after leave.  When the queue is full the most transmitted,
 * then oldest, payload is dropped (counted in stats.app_dropped).
 */
int gossip_node_broadcast(struct gossip_node *node, const uint8_t *payload, size_t len);

/* Largest payload gossip_node_broadcast accepts with this node's MTU. */
size_t gossip_node_max_payload(const struct gossip_node *node);

/*
 * Direct messages: an opaque message (copied) for one member, alive or
 * suspect, sealed like every packet.  Messages to the same member are
 * batched into as few datagrams as the MTU allows; the batches leave on
 * gossip_node_flush and at the end of every gossip_node_tick and
 * gossip_node_receive.  Datagrams: a message may be lost, duplicated or
 * reordered, so applications send idempotent, cumulative state.
 * -GOSSIP_ENOENT for a member that is unknown, dead or left (or this node),
 * -GOSSIP_ETOOBIG over gossip_node_max_direct, -GOSSIP_ESTATE after leave,
 * -GOSSIP_ENOMEM when the pending bytes are at their bound (counted in
 * stats.direct_dropped).
 */
int gossip_node_send(struct gossip_node *node, const char *member_name, const uint8_t *msg,
                     size_t len);
void gossip_node_flush(struct gossip_node *node);
size_t gossip_node_max_direct(const struct gossip_node *node);

/* Bumped whenever a member enters or leaves the live set (alive or
 * suspect: a brief suspicion moves nothing), or is forgotten, so an
 * application can cache what it derives from the member list. */
uint64_t gossip_node_view_version(const struct gossip_node *node);

/* This process's life id. */
uint64_t gossip_node_life_id(const struct gossip_node *node);

/* 1 once an anti-entropy exchange this node started was answered (it knows
 * the cluster).  *prior_life (may be NULL) is set to 1 if the cluster has
 * spoken so far of this node's name from another life: a restart, not a
 * new member (see gossip_node_elder_lead_ms for when silence is proof). */
int gossip_node_joined(const struct gossip_node *node, int *prior_life);

/* How long before this node the eldest member that exchanged its full state
 * with it (a push-pull either way) began its life, in ms (0 if none did).
 * Only such a member's silence about a past life of this node's name means
 * something: two nodes restarted together know only each other, and
 * neither can tell the other it lived before, while a member up long before
 * them keeps their tombstones and names their past lives in its state. */
int64_t gossip_node_elder_lead_ms(const struct gossip_node *node);

/* 1 if another live process with this node's name started before it (this
 * node must not run under the name; *other, if not NULL, gets its
 * address); 0 otherwise. */
int gossip_node_conflict(const struct gossip_node *node, struct gossip_addr *other);

/* Calls fn for every member known (self included; forgotten ones excluded)
 * until fn returns nonzero, which is returned.  Returns 0 otherwise. */
int gossip_node_members(const struct gossip_node *node,
                        int (*fn)(void *ud, const struct gossip_member_info *m), void *ud);

/* Member by name; -GOSSIP_ENOENT if unknown or forgotten. */
int gossip_node_member(const struct gossip_node *node, const char *name,
                       struct gossip_member_info *out);

/* Members alive or suspect, self included. */
size_t gossip_node_num_live(const struct gossip_node *node);

const char *gossip_node_name(const struct gossip_node *node);
uint32_t gossip_node_incarnation(const struct gossip_node *node);
/* Lifeguard's local health score: 0 healthy .. awareness_max_multiplier-1. */
int gossip_node_health(const struct gossip_node *node);

/* Why an incoming datagram was dropped: index of gossip_stats.drops. */
enum gossip_drop {
    GOSSIP_DROP_SHORT = 0, /* too short or too long to be a packet */
    GOSSIP_DROP_AUTH,      /* failed to open: wrong key bytes, label, tampered */
    GOSSIP_DROP_NOKEY,     /* sealed with a key id we do not hold */
    GOSSIP_DROP_VERSION,   /* unknown seal or protocol version */
    GOSSIP_DROP_MALFORMED, /* opened, but the message encoding is invalid */
    GOSSIP_DROP_SELF,      /* claims to come from this node's name */
    GOSSIP_DROP_STALE,     /* outside the sender's packet timestamp window */
    GOSSIP_DROP_LEFT,      /* this node has left */
    GOSSIP_DROP_MAX_
};

struct gossip_stats {
    uint64_t packets_sent, bytes_sent, send_errors;
    uint64_t packets_received, bytes_received;
    uint64_t drops[GOSSIP_DROP_MAX_];
    uint64_t member_msgs_queued, member_msgs_dropped;
    uint64_t app_queued, app_dropped, app_delivered, app_duplicates;
    uint64_t probes, probe_failures, indirect_probes, nacks_received;
    uint64_t suspicions, refutations, deaths, leaves;
    uint64_t pushpulls, state_chunks_sent, state_chunks_merged;
    uint64_t direct_sent, direct_bytes_sent, direct_packets_sent;
    uint64_t direct_received, direct_bytes_received, direct_dropped;
    uint64_t conflicts;
    /* Deaths others declared of a member we heard from lately, taken as
     * suspicions instead (after a partition heals, say). */
    uint64_t deaths_doubted;
    /* Not totals: Lifeguard's health score now (gossip_node_health), and
     * the probes that failed in a row since the last one answered (a
     * node whose packets reach nobody sees only failures). */
    uint64_t health, probe_fail_streak;
};

/* Copies the counters.  Never fails. */
void gossip_node_stats(const struct gossip_node *node, struct gossip_stats *out);

/* Static name of a drop reason ("auth", "malformed", ...). */
const char *gossip_drop_name(int reason);

#ifdef __cplusplus
}
#endif
#endif
