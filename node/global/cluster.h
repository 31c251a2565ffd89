/*
 * cluster: the daemon's side of global limits.  One object owns the gossip
 * keyring, the libgossip libuv adapter and the replica (global/replica.h), the
 * clock global decisions use, and the scope rules that say which keys are
 * global.
 *
 * Without a gossip bind address there is no cluster object at all (the
 * daemon passes NULL around): every key is then local, whatever its scope
 * says, and a single node behaves exactly like a standalone limiter.
 *
 * Clock.  Nothing of a time crosses the wire (global/replica.h): each node
 * measures durations on its own monotonic clock.  The cluster clock is that
 * clock plus (realtime - monotonic) captured once at start, so that the
 * replica's window algorithms line up with the wall clock: cluster_now_ns()
 * now, cluster_clock_ns() for a reading of the monotonic clock a decision
 * was given (global/decide.h); a host whose clock is off changes only what
 * that host admits.
 *
 * Lives.  Each start draws a random 64-bit life id: the epoch of this
 * node's counts in the replica and its life in libgossip.  Nothing about it
 * depends on a clock, so a host whose clock was wrong rejoins under its name
 * once it is corrected.  A second live process with the same name is
 * refused (cluster_failed() then says so and the loop is stopped).
 *
 * Everything runs on the event-loop thread.  Functions return 0 or a
 * negative enum sluice_err.
 */
#ifndef SLUICE_CLUSTER_H
#define SLUICE_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "algo.h"
#include "counter.h"
#include "policy.h"

struct cluster;
struct gossip_node;
struct replica;

/*
 * What the daemon's flags and the config file's [cluster] section say.
 * Strings are borrowed until cluster_start() returns, except join, which
 * cluster_options_apply_config() may point at the options' own buffer
 * (freed by cluster_options_free).
 */
struct cluster_options {
    const char *node_name;      /* NULL: the host name */
    const char *gossip_bind;    /* "IP:PORT"; NULL: no cluster */
    const char *advertise;      /* "IP:PORT" peers send to; NULL: the bound address */
    const char *join;           /* "host:port,host:port", names resolved; NULL: none */
    const char *key_file;       /* gossip key file (gossip/keyring.h) */
    const char *label;          /* cluster label; NULL: "" */
    int insecure;               /* 1: run without a key file (unsealed packets) */
    int allow_shared_key;       /* 1: accept a key file readable by group or others */
    int64_t gossip_interval_ms; /* delta and gossip period; 0 = 100 */
    int default_scope;          /* enum policy_scope, or -1: global when clustered */
    int partition;              /* enum policy_partition, or -1: share */
    int64_t probe_interval_ms;  /* 0: libgossip's default (1000) */
    int64_t sync_timeout_ms;    /* -1: 2000; fail-closed bound after a start */
    int64_t dns_interval_ms;    /* join list re-resolution; 0 = 30000 */
    int64_t gossip_mtu;         /* largest datagram sent, bytes; 0 = 1400 (see cluster.c) */
    size_t max_keys;            /* global keys held (--max-keys); 0 = 1M */
    int evict;                  /* --on-full evict: make room for a new global key */
    int on_full_allow;          /* --on-full allow: a new key beyond max_keys is allowed */
    char *join_buf;             /* owned by the options; see above */
    /* Units a key used as a local key before a reload made its policy
     * global (replica.h's replica_carry_fn, here without the replica's
     * header); NULL: such keys start fresh. */
    int64_t (*carry)(void *ud, const char *key, size_t klen, const struct algo_params *p);
    void *carry_ud;
};

/* --gossip-mtu's range: from libgossip's default, for which the
 * replication's and the slots' messages are sized (a 512-byte key's entry
 * in each, cluster_key_id), to the most libgossip receives, a jumbo frame.
 * A larger MTU carries more entries a datagram: at 9,216 bytes a node of
 * three serving a million keys spent 8% less CPU a request, the two
 * others 30% less (fewer datagrams to send, wake up for and read). */
#define CLUSTER_MTU_MIN 1400
#define CLUSTER_MTU_MAX 9216

/* Sets every field to "not given". */
void cluster_options_init(struct cluster_options *o);
/* Frees what the options own. */
void cluster_options_free(struct cluster_options *o);

/*
 * Starts the cluster on loop: loads the key file, binds the gossip socket,
 * creates the replica, joins the seeds.  Returns 0 with *out NULL when
 * o->gossip_bind is NULL (no cluster).  On failure writes a message for a
 * person into err (errlen bytes) and returns -SLUICE_ECONFIG (bad options:
 * no key file without --insecure-no-encryption, a bad address or key file),
 * -SLUICE_EIO (the socket could not be bound) or -SLUICE_ENOMEM; nothing is
 * left running.  The caller owns *out: cluster_stop, run the loop until it
 * reports, then cluster_destroy.
 */
int cluster_start(uv_loop_t *loop, const struct cluster_options *o, struct cluster **out, char *err,
                  size_t errlen);

/*
 * Leaves the cluster gracefully (a "left" message, two gossip intervals to
 * send it), then closes every handle; on_stopped(ud) (optional) runs on the
 * loop when the last one has closed.  NULL or a second call: no-op.
 */
void cluster_stop(struct cluster *c, void (*on_stopped)(void *ud), void *ud);

/* Frees everything.  Only after cluster_stop has completed (or the loop
 * has finished running).  NULL is a no-op. */
void cluster_destroy(struct cluster *c);

/*
 * Whether a decision under pol (or, for an inline limit, pol NULL) goes to
 * the replica; the one place that says whether a key is global, for every
 * command (CL.THROTTLE, SL.*, the Envoy service): the scope is pol's; for an inline limit it is
 * scope (enum policy_scope, given explicitly by the client) or, when scope < 0, the cluster's
 * default; and the algorithm must be able to be global.  Always 0 when c is NULL or stopping. Never
 * fails.
 */
int cluster_is_global(const struct cluster *c, const struct policy *pol, int scope,
                      enum algo_kind kind);

/*
 * A global key's name in the cluster: in the replica's tables and on the
 * wire.  A replication message is one datagram (1,200 bytes of entries at
 * the default MTU), so a key longer than CLUSTER_KEY_INLINE, which
 * --max-key-bytes allows, could not be reported to its owner: each node
 * then held it alone and the cluster admitted N times its limit (and
 * keys over 4,096 bytes were refused).  Such a key travels as its digest,
 * CLUSTER_KEY_ID_LEN bytes: 0xFF and the key's BLAKE2b-256.  A key that
 * starts with byte 0xFF (never the first byte of UTF-8 text) is digested
 * too, whatever its length, so no key's own name is another's digest.
 * Every node maps a key the same way, so it has one owner and one state.
 * What it costs: such a key's BLAKE2b per request, and SL.KEY's answer
 * and the owner's tables show the digest.  The mapping is made where a
 * key enters the cluster (cluster_decide_global, cluster_prefetch,
 * cluster_note_demand, SL.KEY): their callers pass the key as given.
 * Global concurrency keys (SL.LEASE, global/slots.h) are not mapped: one
 * longer than CLUSTER_KEY_INLINE is refused.
 */
#define CLUSTER_KEY_INLINE 512
#define CLUSTER_KEY_ID_LEN 33
const char *cluster_key_digest(const char *key, size_t klen, char buf[CLUSTER_KEY_ID_LEN],
                               size_t *idlen);
/* The key's name in the cluster: key itself, or its digest written to buf;
 * *idlen is its length.  Never fails. */
static inline const char *cluster_key_id(const char *key, size_t klen, char buf[CLUSTER_KEY_ID_LEN],
                                         size_t *idlen)
{
    if (klen <= CLUSTER_KEY_INLINE && (klen == 0 || (unsigned char)key[0] != 0xFFu)) {
        *idlen = klen;
        return key;
    }
    return cluster_key_digest(key, klen, buf, idlen);
}

/*
 * The replica's decision on qty units (0 peeks) of a key the caller found
 * global with cluster_is_global, under pol's partition policy or the
 * cluster's, at now_ns on the loop's monotonic clock (uv_hrtime; converted
 * with cluster_clock_ns).  Nothing else: a dry-run policy, the on-full
 * answer and the policy counters are the decision entry's
 * (global/decide.h), which is the one caller.  c must not be NULL.
 * Returns 0 with *out filled or replica_throttle's errors (-SLUICE_EINVAL,
 * -SLUICE_EFULL when --max-keys global keys are held and none is evicted,
 * -SLUICE_ENOMEM), nothing changed then.
 */
int cluster_decide_global(struct cluster *c, const struct policy *pol, const char *key, size_t klen,
                          const struct algo_params *p, int64_t qty, int64_t now_ns,
                          struct algo_result *out);

/* cluster_decide_global's look-ahead hint (replica_prefetch). */
void cluster_prefetch(const struct cluster *c, const char *key, size_t klen, int stage,
                      uint32_t *h);

/* A global key's request refused by a check that did not decide through
 * cluster_decide_global (SL.MULTI's all-or-nothing peek, a charge the
 * replica could not admit): counted as demand so the key's owner leases by
 * it.  c must not be NULL. */
void cluster_note_demand(struct cluster *c, const char *key, size_t klen, int64_t qty);

/*
 * Re-reads the key file given at start (SIGHUP), so keys rotate without a
 * restart: install the new key everywhere, then `use` it everywhere, then
 * remove the old one (gossip/keyring.h).  All or nothing: on error the ring
 * in use is kept and err names the file, line and reason.  Returns 0 (also
 * when c is NULL or runs without a key file) or -SLUICE_ECONFIG.
 */
int cluster_reload_keys(struct cluster *c, char *err, size_t errlen);

/* The cluster clock (see above), now, or at a reading mono_ns of the
 * loop's monotonic clock (uv_hrtime). */
int64_t cluster_now_ns(const struct cluster *c);
int64_t cluster_clock_ns(const struct cluster *c, int64_t mono_ns);

/* 1 when the node refused to run (another live process has its name); the
 * daemon then exits with an error.  0 for NULL. */
int cluster_failed(const struct cluster *c);

/* 1 when a new global key beyond --max-keys is allowed without state
 * (--on-full allow), 0 when it is refused (deny; evict makes room in the
 * replica instead).  0 for NULL. */
int cluster_on_full_allow(const struct cluster *c);

/* Borrowed views for introspection; valid until cluster_stop. */
struct gossip_node *cluster_gossip(struct cluster *c);
struct replica *cluster_replica(struct cluster *c);
/* The global concurrency limits (global/slots.h); NULL for NULL c. */
struct slots *cluster_slots(struct cluster *c);
/* The longest stretch of replication work the loop ran in one go since
 * start or the last cluster_reset_max (a slice of a pass, a turn's
 * received messages, a tick), as wall time and as the loop thread's CPU
 * time: what the replication adds to a turn (loop_max_turn_us is the whole
 * turn, clients' requests included). */
struct cluster_stats {
    uint64_t replication_max_slice_us, replication_max_slice_cpu_us;
    uint64_t replication_max_pass_ms; /* replica_pass_max */
    uint64_t replication_backlog;     /* replica_backlog plus messages waiting to be applied */
};
/* Its counter table (INFO's "# Cluster", /metrics). */
extern const struct counter_table cluster_counters;
/* Fills *out; zeroes for a NULL cluster. */
void cluster_get_stats(const struct cluster *c, struct cluster_stats *out);
void cluster_reset_max(struct cluster *c);
const char *cluster_node_name(const struct cluster *c);
/* The advertised gossip address, "IP:PORT". */
const char *cluster_address(const struct cluster *c);
enum policy_scope cluster_default_scope(const struct cluster *c);

#endif
