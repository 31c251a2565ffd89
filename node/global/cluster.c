/* cluster: keyring + gossip adapter + replica for the daemon (see cluster.h). */
#include "cluster.h"

#include <errno.h>
#include <sys/stat.h>
#include <malloc.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "cputime.h"
#include "gossip/gossip.h"
#include "gossip/keyring.h"
#include "gossip/uv.h"
#include "log.h"
#include "replica.h"
#include "slots.h"
#include "sluice/error.h"
#include "num.h"

#define DEFAULT_INTERVAL_MS     100
#define DEFAULT_DNS_INTERVAL_MS 30000
#define TRIM_AFTER_GC           256 /* keys dropped since the last trim worth returning memory for */
#define GOSSIP_FANOUT           5 /* membership gossip: a broadcast reaches 1000 nodes in ~0.5 s */
/* Received replication messages are applied for at most this long a loop
 * turn (the rest at the next turns), and wait in a queue of at most
 * RX_QUEUE_MAX bytes: about 180 batches, some 50 ms of work at a million
 * keys, so a node that cannot keep up applies them late by that much at
 * most (past it they are applied at once, as they arrive). */
#define RX_TURN_NS   500000
#define RX_QUEUE_MAX ((size_t)256 << 10)

/* A replication message received and not yet applied. */
struct cluster_rx {
    struct cluster_rx *next;
    size_t len;
    char from[GOSSIP_NAME_MAX + 1];
    uint8_t msg[];
};

struct cluster {
    uv_loop_t *loop;
    struct gossip_keyring *kr;
    struct gossip_uv *g;
    struct replica *r;
    struct slots *sl;  /* global concurrency limits */
    int sl_known;      /* slots told whether a past life existed */
    int64_t taken_new; /* when it joined as new, while no elder has vouched (on_tick) */
    uv_timer_t tick, leave;
    uv_idle_t slice;      /* the rest of a replica pass (replica_tick), a slice per loop turn */
    unsigned slice_turns; /* alternates received messages and the pass (on_slice) */
    /* What a key made global by a reload used as a local key (cluster__carry). */
    int64_t (*carry)(void *ud, const char *key, size_t klen, const struct algo_params *p);
    void *carry_ud;
    const char *carry_key; /* the name clients use for the key being decided, when digested */
    size_t carry_klen;
    /* The longest stretch of replication work in one loop turn since the
     * last cluster_reset_max (on_slice, on_tick): wall and thread CPU ns. */
    uint64_t slice_max_ns, slice_max_cpu_ns;
    uint64_t slice_last_ns, slice_end_at; /* the last slice's wall time and end (on_slice) */
    struct cputime_sample slice_sample;   /* which slices have their CPU read */
    /* Replication messages waiting to be applied, oldest first (owned;
     * cluster__on_direct, cluster__rx_apply). */
    struct cluster_rx *rx_head, *rx_tail;
    size_t rx_bytes;
    int tick_open, leave_open;
    int64_t clock_offset; /* realtime - monotonic at start */
    uint64_t life;        /* this process's life id (random) */
    uint64_t view_version;
    int view_dirty;
    int view_degraded; /* the last view had a member declared dead or suspected */
    size_t view_quiet; /* ... and this many quiet ones (cluster__refresh_view) */
    int64_t probe_ms;  /* libgossip's probe interval */
    int failed;        /* refused to run (a live node has this name) */
    int on_full_allow;
    int allow_shared_key;
    uint64_t gc_since_trim, gc_seen;
    uint64_t keys_peak;    /* global + owned keys at their peak since the last trim */
    uint64_t drops_logged; /* auth/key/version drops already logged */
    int64_t drops_logged_at;
    uint64_t dns_logged; /* --join lookups failed, already logged */
    int64_t dns_logged_at;
    char *join; /* the --join list as given, for that line */
    int64_t trimmed_at;
    int64_t interval_ms;
    enum policy_scope default_scope;
    enum policy_partition partition;
    char name[GOSSIP_NAME_MAX + 1];
    char addr[GOSSIP_ADDR_STRLEN];
    char *key_file; /* NULL when running without encryption */
    int stopping, pending;
    void (*on_stopped)(void *ud);
    void *stopped_ud;
};

/* ---- options ---- */

void cluster_options_init(struct cluster_options *o)
{
    memset(o, 0, sizeof(*o));
    o->default_scope = -1;
    o->partition = -1;
    o->sync_timeout_ms = -1;
}

void cluster_options_free(struct cluster_options *o)
{
    if (o == NULL)
        return;
    if (o->join == o->join_buf)
        o->join = NULL;
    free(o->join_buf);
    o->join_buf = NULL;
}

/* ---- clock and lives ---- */

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * NUM_NS_PER_S + ts.tv_nsec;
}

int64_t cluster_now_ns(const struct cluster *c)
{
    return (int64_t)uv_hrtime() + c->clock_offset;
}

int64_t cluster_clock_ns(const struct cluster *c, int64_t mono_ns)
{
    return mono_ns + c->clock_offset;
}

/* ---- gossip callbacks: log membership, direct messages to the replica ---- */

static const char *event_name(enum gossip_event ev)
{
    static const char *const names[] = {"joined",  "is suspected", "is alive",
                                        "is dead", "left",         "is forgotten"};
    return (unsigned)ev < sizeof(names) / sizeof(names[0]) ? names[ev] : "changed";
}

static void cluster__on_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    struct cluster *c = ud;
    char addr[GOSSIP_ADDR_STRLEN];
    if (gossip_addr_format(&m->addr, addr, sizeof(addr)) != 0)
        strcpy(addr, "?");
    c->view_dirty = 1;
    if (ev == GOSSIP_EVENT_CONFLICT) {
        struct gossip_addr other;
        if (c->g != NULL && gossip_node_conflict(gossip_uv_node(c->g), &other)) {
            /* This process is the newcomer: refuse to run under the name. */
            log_error("cluster: node name %s is already alive at %s: refusing to run under the "
                      "same name (pick another --node-name)",
                      c->name, addr);
            c->failed = 1;
            uv_stop(c->loop);
        } else {
            log_error("cluster: name clash: another process at %s claims this node's name %s; "
                      "keeping the name and ignoring it",
                      addr, c->name);
        }
        return;
    }
    if (ev == GOSSIP_EVENT_SUSPECT || ev == GOSSIP_EVENT_DEAD)
        log_warn("cluster: member %s (%s) %s", m->name, addr, event_name(ev));
    else
        log_info("cluster: member %s (%s) %s", m->name, addr, event_name(ev));
}

static void on_slice(uv_idle_t *h);

/*
 * A direct message from member `from`.  A replication batch is not applied
 * here but queued and applied in the loop's next turns under a time budget
 * (cluster__rx_apply): libuv reads up to 32 datagrams a wakeup, and at a
 * million global keys 32 batches took 12 ms of CPU in one turn while
 * clients waited.  Past RX_QUEUE_MAX queued bytes, or without memory, it is
 * applied at once.  Slots messages are few and applied at once.
 */
static void cluster__on_direct(void *ud, const char *from, const uint8_t *msg, size_t len)
{
    struct cluster *c = ud;
    if (slots_is_message(msg, len)) {
        (void)slots_receive(c->sl, from, msg, len, cluster_now_ns(c)); /* bad ones counted */
        return;
    }
    struct cluster_rx *m = NULL;
    if (c->rx_bytes + len <= RX_QUEUE_MAX && strlen(from) <= GOSSIP_NAME_MAX)
        m = malloc(sizeof(*m) + len);
    if (m == NULL) {
        (void)replica_receive(c->r, from, msg, len, cluster_now_ns(c)); /* bad ones are counted */
        replica_flush(c->r);
        return;
    }
    m->next = NULL;
    m->len = len;
    strcpy(m->from, from);
    memcpy(m->msg, msg, len);
    if (c->rx_tail != NULL)
        c->rx_tail->next = m;
    else
        c->rx_head = m;
    c->rx_tail = m;
    c->rx_bytes += len;
    if (!c->stopping)
        uv_idle_start(&c->slice, on_slice);
}

/* Applies queued replication messages, oldest first, for at most
 * RX_TURN_NS (one at least). */
static void cluster__rx_apply(struct cluster *c)
{
    uint64_t t0 = uv_hrtime();
    while (c->rx_head != NULL) {
        struct cluster_rx *m = c->rx_head;
        c->rx_head = m->next;
        if (c->rx_head == NULL)
            c->rx_tail = NULL;
        c->rx_bytes -= m->len;
        (void)replica_receive(c->r, m->from, m->msg, m->len, cluster_now_ns(c));
        free(m);
        if (uv_hrtime() - t0 >= RX_TURN_NS)
            break;
    }
    replica_flush(c->r); /* what they made for other members, in shared batches */
}

static void cluster__rx_free(struct cluster *c)
{
    while (c->rx_head != NULL) {
        struct cluster_rx *m = c->rx_head;
        c->rx_head = m->next;
        free(m);
    }
    c->rx_tail = NULL;
    c->rx_bytes = 0;
}

/* The replica's clock: its passes end their turn on time. */
static int64_t cluster__clock(void *ud)
{
    return cluster_now_ns(ud);
}

/* The replica's carry (replica.h): what a key a reload made global used as
 * a local key, looked up in the local table by the name clients use.  A
 * long key's name in the cluster is its digest (cluster_key_id), which the
 * local table does not know: the decision that creates it lends the name
 * (carry_key), or the key would start fresh, a whole quota again. */
static int64_t cluster__carry(void *ud, const char *key, size_t klen, const struct algo_params *p)
{
    struct cluster *c = ud;
    if (c->carry_key != NULL) {
        key = c->carry_key;
        klen = c->carry_klen;
    }
    return c->carry(c->carry_ud, key, klen, p);
}

static int cluster__send(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    struct cluster *c = ud;
    if (c->g == NULL)
        return -SLUICE_EIO;
    return gossip_node_send(gossip_uv_node(c->g), to, buf, len) < 0 ? -SLUICE_EIO : 0;
}

/* The replica's member view, from libgossip's: alive and suspect members
 * own keys (a brief suspicion moves nothing), dead ones are unreachable,
 * left and forgotten ones are gone. */
struct cluster__view {
    struct replica_member *m;
    char (*names)[GOSSIP_NAME_MAX + 1];
    int64_t *heard; /* per member: when last heard directly (monotonic ns; 0: never) */
    size_t n, cap;
    unsigned char *suspect; /* per member: suspected */
    int complete;
    size_t dead, suspects, quiet; /* members declared dead, suspected, marked quiet */
};

static int cluster__view_one(void *ud, const struct gossip_member_info *mi)
{
    struct cluster__view *v = ud;
    if (mi->state == GOSSIP_MEMBER_LEFT || v->n == v->cap)
        return 0;
    memcpy(v->names[v->n], mi->name, sizeof(v->names[v->n]));
    v->m[v->n].name = v->names[v->n];
    v->m[v->n].live = mi->state == GOSSIP_MEMBER_ALIVE || mi->state == GOSSIP_MEMBER_SUSPECT;
    v->suspect[v->n] = mi->state == GOSSIP_MEMBER_SUSPECT;
    v->m[v->n].suspect = v->suspect[v->n];
    v->suspects += v->suspect[v->n];
    v->heard[v->n] = mi->is_self ? 0 : mi->last_heard_ns;
    if (!v->m[v->n].live) {
        v->complete = 0;
        v->dead++;
    }
    v->n++;
    return 0;
}

/*
 * Quiet members.  While a member is declared dead or suspected, a live one
 * (suspected or not) this node has not heard from directly (any packet:
 * probes, acks, gossip, replication) for one probe interval per live
 * member and one more is marked quiet.  The replica counts it in no
 * majority (replica_owner__majority) and against this node's side
 * (replica_owner_outvoted).
 *
 * The failure detector declares the other side of a cut dead one member at
 * a time, and not always in order: node 3 of three, cut off alone,
 * declared node 1 dead up to a second before it even suspected node 2,
 * counted itself and node 2 a majority, presumed node 1 dead and leased
 * itself the whole rate of the keys that moved to it (integration_test_
 * global_partition_minority: 1.12 to 1.17 times one central limiter over
 * the partition in one run of three).  And cut off with one other node
 * from three, a node's detector, failing most of its probes, declared the
 * three one at a time over up to 8 s, while its side kept its parts that
 * long after the majority's verdict.
 *
 * Every live member is heard within about that time (each probes one
 * member per interval, round robin, and is probed as often), so a member
 * merely late is seldom quiet, and one quiet member among the majority of
 * a real crash leaves it a majority.  Only while a member is dead or
 * suspected: a whole cluster counts every live member as before.
 */
static void cluster__mark_quiet(const struct cluster *c, struct cluster__view *v)
{
    v->quiet = 0;
    if (v->dead == 0 && v->suspects == 0)
        return;
    size_t live = 0;
    for (size_t i = 0; i < v->n; i++)
        live += v->m[i].live != 0;
    int64_t now = (int64_t)uv_hrtime();
    int64_t quiet_ns = (int64_t)(live + 1) * c->probe_ms * 1000000;
    for (size_t i = 0; i < v->n; i++) {
        v->m[i].quiet = v->m[i].live && v->heard[i] > 0 && now - v->heard[i] > quiet_ns;
        v->quiet += v->m[i].quiet != 0;
    }
}

/* The slots' view: the live names, and every member not gone. */
static int cluster__slots_view(struct cluster *c, const struct cluster__view *v)
{
    const char **live = calloc(v->n ? v->n : 1, sizeof(*live));
    unsigned char *sus = calloc(v->n ? v->n : 1, 1);
    size_t nl = 0;
    int rc = -SLUICE_ENOMEM;
    if (live != NULL && sus != NULL) {
        for (size_t i = 0; i < v->n; i++) {
            if (v->m[i].live) {
                sus[nl] = v->suspect[i];
                live[nl++] = v->m[i].name;
            }
        }
        rc = slots_set_view(c->sl, live, sus, nl, v->n, cluster_now_ns(c));
    }
    free(live);
    free(sus);
    return rc;
}

/* The replica's and the slots' views from libgossip's, when it changed,
 * or while a member is dead or suspected (each tick: who is quiet changes,
 * cluster__mark_quiet).  On allocation failure the views stay as they are
 * and the next tick tries again. */
static void cluster__refresh_view(struct cluster *c)
{
    struct gossip_node *g = gossip_uv_node(c->g);
    uint64_t ver = gossip_node_view_version(g);
    int moved = ver != c->view_version || c->view_dirty;
    if (!moved && !c->view_degraded)
        return;
    size_t cap = gossip_node_num_live(g) + 64;
    struct cluster__view v = {calloc(cap, sizeof(*v.m)),
                              calloc(cap, sizeof(*v.names)),
                              calloc(cap, sizeof(*v.heard)),
                              0,
                              cap,
                              calloc(cap, 1),
                              1,
                              0,
                              0,
                              0};
    if (v.m != NULL && v.names != NULL && v.heard != NULL && v.suspect != NULL) {
        gossip_node_members(g, cluster__view_one, &v);
        cluster__mark_quiet(c, &v);
        int degraded = v.dead > 0 || v.suspects > 0;
        if ((moved || v.quiet != c->view_quiet || degraded != c->view_degraded) &&
            replica_set_view(c->r, v.m, v.n, v.complete, cluster_now_ns(c)) == 0 &&
            cluster__slots_view(c, &v) == 0) {
            c->view_version = ver;
            c->view_dirty = 0;
            c->view_degraded = degraded;
            c->view_quiet = v.quiet;
        }
    }
    free(v.m);
    free(v.names);
    free(v.heard);
    free(v.suspect);
}

/* A --join name that does not resolve leaves the node alone (or short of
 * a seed) in silence otherwise: say so, once a minute at most. */
static void cluster__log_dns(struct cluster *c)
{
    struct gossip_uv_stats us;
    gossip_uv_stats(c->g, &us);
    int64_t now = cluster_now_ns(c);
    if (us.dns_failures > c->dns_logged &&
        (c->dns_logged_at == 0 || now - c->dns_logged_at >= 60 * NUM_NS_PER_S)) {
        log_warn("cluster: %llu lookups of the --join names failed since the last such line "
                 "(%s); retrying every --dns-interval-ms",
                 (unsigned long long)(us.dns_failures - c->dns_logged),
                 c->join != NULL ? c->join : "");
        c->dns_logged = us.dns_failures;
        c->dns_logged_at = now;
    }
}

/* A peer with another cluster key or label sits alone and says nothing:
 * say it here, once a minute at most, with the counts since the last line. */
static void cluster__log_drops(struct cluster *c)
{
    struct gossip_stats gs;
    gossip_node_stats(gossip_uv_node(c->g), &gs);
    uint64_t bad =
        gs.drops[GOSSIP_DROP_AUTH] + gs.drops[GOSSIP_DROP_NOKEY] + gs.drops[GOSSIP_DROP_VERSION];
    int64_t now = cluster_now_ns(c);
    if (bad > c->drops_logged &&
        (c->drops_logged_at == 0 || now - c->drops_logged_at >= 60 * NUM_NS_PER_S)) {
        log_warn("cluster: %llu gossip packets dropped since the last such line: %llu failed "
                 "authentication (another cluster key or label?), %llu sealed with a key id we "
                 "do not hold, %llu of another protocol version",
                 (unsigned long long)(bad - c->drops_logged),
                 (unsigned long long)gs.drops[GOSSIP_DROP_AUTH],
                 (unsigned long long)gs.drops[GOSSIP_DROP_NOKEY],
                 (unsigned long long)gs.drops[GOSSIP_DROP_VERSION]);
        c->drops_logged = bad;
        c->drops_logged_at = now;
    }
}

/* The next slice at the loop's next turn while work waits (see
 * cluster__run_replica). */
static void cluster__reschedule(struct cluster *c)
{
    if (replica_next_deadline(c->r) <= cluster_now_ns(c) || c->rx_head != NULL)
        uv_idle_start(&c->slice, on_slice);
    else
        uv_idle_stop(&c->slice);
}

/* One bounded slice of the replica's pass; while the pass is unfinished,
 * or received messages wait to be applied, the next slice runs at the
 * loop's next turn, after the I/O it polls, so answers are never kept
 * waiting behind the replication's walk. */
static void cluster__run_replica(struct cluster *c)
{
    replica_tick(c->r, cluster_now_ns(c));
    gossip_node_flush(gossip_uv_node(c->g)); /* the reports and leases go out together */
    /* An idle handle, not a timer of 0 ms: libuv (before 1.45) runs a
     * timer re-armed at 0 from its own callback again in the same turn,
     * and the whole pass ran in one turn (20 to 40 ms over 100,000 keys
     * while answers waited). */
    cluster__reschedule(c);
}

/* Keeps the longest replication stretch (cluster_max_slice); returns its
 * wall time.  cpu0 is the thread's CPU at its start, or 0 when it is not
 * among those measured (cputime_sample_take).  The thread's CPU clock is a
 * system call (no vDSO for it): read at the end only when the stretch
 * lasted longer than the longest CPU so far, since its CPU cannot exceed
 * its wall time (read at both ends of every slice, it took 6.5% of a
 * clustered node's CPU under 50 clients at -P 16). */
static uint64_t cluster__slice_end(struct cluster *c, uint64_t t0, uint64_t cpu0)
{
    uint64_t wall = uv_hrtime() - t0;
    if (wall > c->slice_max_ns)
        c->slice_max_ns = wall;
    if (cpu0 == 0 || wall <= c->slice_max_cpu_ns)
        return wall;
    uint64_t cpu = cputime_thread_ns();
    cpu = cpu > cpu0 ? cpu - cpu0 : 0;
    if (cpu > c->slice_max_cpu_ns)
        c->slice_max_cpu_ns = cpu;
    return wall;
}

static void cluster__slice(struct cluster *c);

static void on_slice(uv_idle_t *h)
{
    struct cluster *c = h->data;
    if (c->g == NULL || c->stopping) {
        uv_idle_stop(h);
        return;
    }
    /* Most slices are short (a received batch applied: 10 to 20 us), and
     * the CPU clock read at each start and at each loop turn (loopstat)
     * took 4% of the CPU of a node receiving batches: a sample of the
     * slices is measured, with each slice after a long one and the first
     * of a run (more than a millisecond after the last one ended), as a
     * backlog's are. */
    uint64_t t0 = uv_hrtime();
    uint64_t prev = t0 - c->slice_end_at > 1000000u ? CPUTIME_LONG_NS : c->slice_last_ns;
    uint64_t cpu0 = cputime_sample_take(&c->slice_sample, prev) ? cputime_thread_ns() : 0;
    cluster__slice(c);
    c->slice_last_ns = cluster__slice_end(c, t0, cpu0);
    c->slice_end_at = t0 + c->slice_last_ns;
    /* More replication work waits for the next turn: let the host's other
     * runnable threads (the processes this node answers, on a busy host)
     * go first.  A node mostly asleep has the scheduler's favour when it
     * wakes, and with a backlog of received batches it kept the CPU for
     * 5 ms in slices back to back while a client waited (perf sched: two
     * nodes of three on one host, 1.2-1.4 ms runs, a client's wait of
     * 5.2 ms); the yield costs the replication nothing when the CPU is
     * free.  Measured with tests/bench/clustered.sh at a million keys,
     * unpipelined: worst latency 3.0 and 4.7 ms against 8.9 and 5.9, the
     * longest turn 1.2 and 1.3 ms against 1.9 and 2.0. */
    if (uv_is_active((uv_handle_t *)&c->slice))
        (void)sched_yield();
}

static void cluster__slice(struct cluster *c)
{
    /* One slice of work a turn: received messages, or the pass, in turn
     * when both wait (each is bounded by its own budget, and a turn that
     * ran both, and a tick's start as well, kept clients waiting 1.5 ms). */
    int rx = c->rx_head != NULL &&
             (replica_next_deadline(c->r) > cluster_now_ns(c) || (c->slice_turns++ & 1u));
    if (rx) {
        cluster__rx_apply(c);
        gossip_node_flush(gossip_uv_node(c->g)); /* the leases that answer them */
        cluster__reschedule(c);
        return;
    }
    cluster__run_replica(c);
}

static void cluster__tick(struct cluster *c);

static void on_tick(uv_timer_t *t)
{
    struct cluster *c = t->data;
    if (c->g == NULL)
        return;
    uint64_t t0 = uv_hrtime(), cpu0 = cputime_thread_ns();
    cluster__tick(c);
    (void)cluster__slice_end(c, t0, cpu0);
}

static void cluster__tick(struct cluster *c)
{
    cluster__refresh_view(c);
    if (!replica_synced(c->r)) {
        /* A node new to the cluster (no past life of its name) has nothing
         * to recover: it serves at once instead of waiting out its young
         * period.  A restarted one waits for an owner that knows the key. */
        int prior = 0;
        if (gossip_node_joined(gossip_uv_node(c->g), &prior) && !prior) {
            replica_mark_synced(c->r);
            c->taken_new = cluster_now_ns(c);
            log_info("cluster: joined as a new member, serving global keys");
        }
    } else if (c->taken_new > 0) {
        /* Taken as new by members that could not know better: seeds
         * restarted together join each other first, and neither knows the
         * other's past life.  A member up before them names it when it
         * reaches them (within a second or two: it retries its seeds), and
         * they go back to waiting for an owner that knows the cluster
         * rather than spend a fresh quota meanwhile.  Only a member up for
         * longer than the young period is proof of being new. */
        struct gossip_node *gn = gossip_uv_node(c->g);
        int prior = 0;
        (void)gossip_node_joined(gn, &prior);
        if (prior) {
            c->taken_new = 0;
            replica_unsync(c->r, cluster_now_ns(c));
            slots_set_restarted(c->sl, 1);
            log_info("cluster: a past life of this name was named after all: "
                     "waiting for an owner that knows the cluster");
        } else if (gossip_node_elder_lead_ms(gn) * 1000000 >= replica_young_ns(c->r) ||
                   cluster_now_ns(c) - c->taken_new >= 5 * replica_young_ns(c->r)) {
            c->taken_new = 0; /* proven new, or long settled */
        }
    }
    cluster__log_drops(c);
    cluster__log_dns(c);
    if (!c->sl_known) {
        int prior = 0;
        if (gossip_node_joined(gossip_uv_node(c->g), &prior)) {
            slots_set_restarted(c->sl, prior);
            c->sl_known = 1;
        }
    }
    slots_tick(c->sl, cluster_now_ns(c)); /* its messages go out with the replica's flush */
    /* The pass starts in this turn's slice (on_slice, right after the
     * timers), not here: one slice of replica work a turn. */
    uv_idle_start(&c->slice, on_slice);
    struct replica_stats st;
    replica_get_stats(c->r, &st);
    c->gc_since_trim += st.gc_keys - c->gc_seen;
    c->gc_seen = st.gc_keys;
    int64_t now = cluster_now_ns(c);
    /* Drained keys were dropped: give their memory back once the keys held
     * fell to half their peak (at most once a second).  Their entries' pages
     * go back as they empty (the tables' slab); this is for what else they
     * held from malloc (window states, reporter arrays, batches).
     * malloc_trim walks the whole heap and stops the loop for as long:
     * under steady churn the memory is reused by new keys instead, so it
     * only runs after a real fall. */
    uint64_t held = st.keys + st.owned_keys;
    if (held > c->keys_peak)
        c->keys_peak = held;
    if (c->gc_since_trim >= TRIM_AFTER_GC && held <= c->keys_peak / 2 &&
        now - c->trimmed_at >= NUM_NS_PER_S) {
        malloc_trim(0);
        c->gc_since_trim = 0;
        c->trimmed_at = now;
        c->keys_peak = held;
    }
}

/* ---- start / stop ---- */

static void errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* The cluster key admits whoever holds it: a key file that others, or a
 * group other than the daemon's own, can use is refused (unless allowed on
 * purpose), saying why.  0, or -SLUICE_ECONFIG with the message in err. */
static int cluster__key_file_private(const char *path, int allow, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0; /* the loader reports a missing or unreadable file */
    if (!S_ISREG(st.st_mode)) {
        /* A FIFO would block the loader, and the loop with it. */
        errf(err, errlen, "cluster key file %s is not a regular file", path);
        return -SLUICE_ECONFIG;
    }
    /* Group access is fine for the daemon's own group (a Kubernetes secret
     * mounted with fsGroup); other groups and everyone else are not. */
    int group_ok = st.st_gid == getegid();
    if (allow || ((st.st_mode & 07) == 0 && ((st.st_mode & 070) == 0 || group_ok)))
        return 0;
    errf(err, errlen,
         "cluster key file %s is readable by others or by another group (mode %04o): anyone "
         "who can read "
         "it can join the cluster; chmod 600 %s (sluicectl keygen -o FILE makes a private "
         "file), or pass --allow-shared-key-file",
         path, (unsigned)(st.st_mode & 07777), path);
    return -SLUICE_ECONFIG;
}

int cluster_start(uv_loop_t *loop, const struct cluster_options *o, struct cluster **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    if (o->gossip_bind == NULL)
        return 0;
    if (o->key_file == NULL && !o->insecure) {
        errf(err, errlen,
             "a clustered node needs --cluster-key-file (create one with `sluicectl keygen`); "
             "to run without encryption anyway, pass --insecure-no-encryption");
        return -SLUICE_ECONFIG;
    }
    struct gossip_addr bind, adv;
    memset(&adv, 0, sizeof(adv));
    if (gossip_addr_parse(o->gossip_bind, &bind) != 0) {
        errf(err, errlen, "gossip bind address '%s': expected IP:PORT or [IPv6]:PORT",
             o->gossip_bind);
        return -SLUICE_ECONFIG;
    }
    if (o->advertise != NULL && gossip_addr_parse(o->advertise, &adv) != 0) {
        errf(err, errlen, "advertise address '%s': expected IP:PORT or [IPv6]:PORT", o->advertise);
        return -SLUICE_ECONFIG;
    }
    struct cluster *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -SLUICE_ENOMEM;
    c->loop = loop;
    c->interval_ms = o->gossip_interval_ms > 0 ? o->gossip_interval_ms : DEFAULT_INTERVAL_MS;
    c->default_scope =
        o->default_scope < 0 ? POLICY_SCOPE_GLOBAL : (enum policy_scope)o->default_scope;
    c->partition = o->partition == POLICY_PARTITION_OPTIMISTIC ? POLICY_PARTITION_OPTIMISTIC
                                                               : POLICY_PARTITION_SHARE;
    c->on_full_allow = o->on_full_allow;
    if (o->node_name != NULL) {
        snprintf(c->name, sizeof(c->name), "%s", o->node_name);
    } else if (gethostname(c->name, sizeof(c->name) - 1) != 0 || c->name[0] == '\0') {
        errf(err, errlen, "cannot read the host name; pass --node-name");
        free(c);
        return -SLUICE_ECONFIG;
    }
    int rc;
    if (o->key_file != NULL) {
        rc = gossip_keyring_create(&c->kr, o->label);
        if (rc < 0) {
            errf(err, errlen, "cluster label: at most %d bytes", GOSSIP_KEYRING_LABEL_MAX);
            free(c);
            return -SLUICE_ECONFIG;
        }
        c->allow_shared_key = o->allow_shared_key;
        if (cluster__key_file_private(o->key_file, c->allow_shared_key, err, errlen) < 0) {
            gossip_keyring_destroy(c->kr);
            free(c);
            return -SLUICE_ECONFIG;
        }
        rc = gossip_keyring_load_file(c->kr, o->key_file);
        if (rc < 0) {
            errf(err, errlen, "%s", gossip_keyring_last_error(c->kr));
            gossip_keyring_destroy(c->kr);
            free(c);
            return -SLUICE_ECONFIG;
        }
        c->key_file = strdup(o->key_file);
        if (c->key_file == NULL) {
            gossip_keyring_destroy(c->kr);
            free(c);
            return -SLUICE_ENOMEM;
        }
    } else {
        log_warn("cluster: gossip is NOT encrypted (--insecure-no-encryption)");
    }

    /* A life is a random 64-bit id: nothing about it depends on a clock, so
     * a host whose clock is wrong, or was, rejoins under its name. */
    randombytes_buf(&c->life, sizeof(c->life));
    if (c->life == 0)
        c->life = 1;
    c->clock_offset = realtime_ns() - (int64_t)uv_hrtime();

    struct replica_config rc_cfg;
    memset(&rc_cfg, 0, sizeof(rc_cfg));
    rc_cfg.node_name = c->name;
    rc_cfg.life_id = c->life;
    rc_cfg.interval_ns = c->interval_ms * 1000000;
    rc_cfg.default_policy = c->partition;
    rc_cfg.max_keys = o->max_keys;
    rc_cfg.evict = o->evict;
    rc_cfg.send = cluster__send;
    rc_cfg.send_ud = c;
    c->carry = o->carry;
    c->carry_ud = o->carry_ud;
    rc_cfg.carry = o->carry != NULL ? cluster__carry : NULL;
    rc_cfg.carry_ud = c;
    rc_cfg.clock = cluster__clock;
    rc_cfg.clock_ud = c;
    /* A replication message leaves 200 bytes of the datagram to libgossip's
     * header and seal (84 to 144 bytes: gossip_node_max_direct). */
    int64_t mtu = o->gossip_mtu > 0 ? o->gossip_mtu : CLUSTER_MTU_MIN;
    rc_cfg.max_msg = (size_t)mtu - 200;
    /* Kept for the log line of failed lookups; none if out of memory. */
    c->join = o->join != NULL ? strdup(o->join) : NULL;
    /* A lone first node (no seeds) has no past to recover. */
    if (o->join == NULL)
        rc_cfg.young_ns = 0;
    else
        rc_cfg.young_ns = o->sync_timeout_ms < 0 ? -1 : o->sync_timeout_ms * 1000000;
    rc = replica_create(&c->r, &rc_cfg, cluster_now_ns(c));
    if (rc == 0) {
        struct slots_config sc;
        memset(&sc, 0, sizeof(sc));
        sc.node_name = c->name;
        sc.life = c->life;
        sc.send = cluster__send;
        sc.send_ud = c;
        /* A lone first node (no seeds) has no past life to fear. */
        sc.restarted_known = o->join == NULL;
        c->sl_known = sc.restarted_known;
        rc = slots_create(&sc, cluster_now_ns(c), &c->sl);
        if (rc < 0)
            replica_destroy(c->r);
    }
    if (rc < 0) {
        errf(err, errlen, "cannot create the replica: %s", sluice_strerror(rc));
        gossip_keyring_destroy(c->kr);
        free(c->key_file);
        free(c->join);
        free(c);
        return rc == -SLUICE_ENOMEM ? rc : -SLUICE_ECONFIG;
    }

    struct gossip_config gc;
    gossip_config_default(&gc);
    gc.name = c->name;
    gc.advertise = adv;
    gc.keyring = c->kr;
    gc.life_id = c->life;
    gc.gossip_interval_ms = c->interval_ms;
    gc.gossip_nodes = GOSSIP_FANOUT;
    gc.mtu = (size_t)mtu;
    if (o->probe_interval_ms > 0) {
        gc.probe_interval_ms = o->probe_interval_ms;
        gc.probe_timeout_ms = o->probe_interval_ms / 2 > 0 ? o->probe_interval_ms / 2 : 1;
    }
    c->probe_ms = gc.probe_interval_ms;
    gc.cb.ud = c;
    gc.cb.on_event = cluster__on_event;
    gc.cb.on_direct = cluster__on_direct;
    rc = gossip_uv_start(loop, &gc, &bind, &c->g);
    if (rc < 0) {
        if (rc == -GOSSIP_EIO)
            errf(err, errlen, "cannot bind the gossip socket to %s (in use?)", o->gossip_bind);
        else if (rc == -GOSSIP_EINVAL)
            errf(err, errlen,
                 "cannot gossip on %s: a wildcard bind address needs --advertise IP:PORT",
                 o->gossip_bind);
        else
            errf(err, errlen, "cannot start gossip on %s: %s", o->gossip_bind, gossip_strerror(rc));
        replica_destroy(c->r);
        slots_destroy(c->sl);
        gossip_keyring_destroy(c->kr);
        free(c->key_file);
        free(c->join);
        free(c);
        return rc == -GOSSIP_EIO ? -SLUICE_EIO : -SLUICE_ECONFIG;
    }
    struct gossip_addr local = adv;
    if (local.family == 0)
        gossip_uv_local_addr(c->g, &local);
    if (gossip_addr_format(&local, c->addr, sizeof(c->addr)) != 0)
        strcpy(c->addr, "?");
    if (o->join != NULL) {
        int64_t dns = o->dns_interval_ms > 0 ? o->dns_interval_ms : DEFAULT_DNS_INTERVAL_MS;
        rc = gossip_uv_join_names(c->g, o->join, dns);
        if (rc < 0) {
            errf(err, errlen, "join list '%s': expected HOST:PORT[,HOST:PORT...]", o->join);
            gossip_uv_stop(c->g, NULL, NULL);
            c->g = NULL;
            uv_run(loop, UV_RUN_NOWAIT); /* let the adapter's handles close */
            replica_destroy(c->r);
            slots_destroy(c->sl);
            gossip_keyring_destroy(c->kr);
            free(c->key_file);
            free(c->join);
            free(c);
            return -SLUICE_ECONFIG;
        }
    }
    uv_timer_init(loop, &c->tick);
    c->tick.data = c;
    c->tick_open = 1;
    uv_timer_start(&c->tick, on_tick, (uint64_t)c->interval_ms, (uint64_t)c->interval_ms);
    uv_timer_init(loop, &c->leave);
    c->leave.data = c;
    c->leave_open = 1;
    uv_idle_init(loop, &c->slice);
    c->slice.data = c;
    log_info("cluster: node %s gossiping on %s (advertised %s), life %016llx, %s, default scope "
             "%s, partition policy %s",
             c->name, o->gossip_bind, c->addr, (unsigned long long)c->life,
             c->kr ? "encrypted" : "NOT encrypted",
             c->default_scope == POLICY_SCOPE_GLOBAL ? "global" : "local",
             c->partition == POLICY_PARTITION_SHARE ? "share" : "optimistic");
    *out = c;
    return 0;
}

static void cluster__closed_one(struct cluster *c)
{
    if (--c->pending == 0 && c->on_stopped != NULL)
        c->on_stopped(c->stopped_ud);
}

static void cluster__handle_closed(uv_handle_t *h)
{
    cluster__closed_one(h->data);
}

static void cluster__gossip_closed(void *ud)
{
    cluster__closed_one(ud);
}

static void cluster__finish(struct cluster *c)
{
    c->pending = 4;
    struct gossip_uv *g = c->g;
    c->g = NULL;
    gossip_uv_stop(g, cluster__gossip_closed, c);
    c->tick_open = c->leave_open = 0;
    uv_close((uv_handle_t *)&c->tick, cluster__handle_closed);
    uv_close((uv_handle_t *)&c->leave, cluster__handle_closed);
    uv_close((uv_handle_t *)&c->slice, cluster__handle_closed);
}

static void on_leave(uv_timer_t *t)
{
    cluster__finish(t->data);
}

void cluster_stop(struct cluster *c, void (*on_stopped)(void *ud), void *ud)
{
    if (c == NULL || c->stopping)
        return;
    c->stopping = 1;
    c->on_stopped = on_stopped;
    c->stopped_ud = ud;
    uv_timer_stop(&c->tick);
    uv_idle_stop(&c->slice);
    if (gossip_node_leave(gossip_uv_node(c->g)) == 0) {
        log_info("cluster: leaving");
        uv_timer_start(&c->leave, on_leave, (uint64_t)(2 * c->interval_ms + 50), 0);
    } else {
        cluster__finish(c);
    }
}

void cluster_destroy(struct cluster *c)
{
    if (c == NULL)
        return;
    cluster__rx_free(c);
    replica_destroy(c->r);
    slots_destroy(c->sl);
    gossip_keyring_destroy(c->kr);
    free(c->key_file);
    free(c->join);
    free(c);
}

int cluster_reload_keys(struct cluster *c, char *err, size_t errlen)
{
    if (c == NULL || c->kr == NULL)
        return 0;
    if (cluster__key_file_private(c->key_file, c->allow_shared_key, err, errlen) < 0)
        return -SLUICE_ECONFIG;
    if (gossip_keyring_load_file(c->kr, c->key_file) < 0) {
        errf(err, errlen, "%s", gossip_keyring_last_error(c->kr));
        return -SLUICE_ECONFIG;
    }
    log_info("cluster: reloaded %zu key(s) from %s, sealing with key %d",
             gossip_keyring_count(c->kr), c->key_file, gossip_keyring_in_use(c->kr));
    return 0;
}

/* ---- decisions and views ---- */

int cluster_is_global(const struct cluster *c, const struct policy *pol, int scope,
                      enum algo_kind kind)
{
    if (c == NULL || c->stopping || !algo_can_be_global(kind))
        return 0;
    if (pol != NULL)
        scope = (int)pol->scope;
    else if (scope < 0)
        scope = (int)c->default_scope;
    return scope == POLICY_SCOPE_GLOBAL;
}

int cluster_decide_global(struct cluster *c, const struct policy *pol, const char *key, size_t klen,
                          const struct algo_params *p, int64_t qty, int64_t now_ns,
                          struct algo_result *out)
{
    enum policy_partition rp = pol != NULL ? pol->partition : c->partition;
    int64_t now = cluster_clock_ns(c, now_ns);
    char buf[CLUSTER_KEY_ID_LEN];
    size_t idlen;
    const char *id = cluster_key_id(key, klen, buf, &idlen);
    if (id != key) { /* a digest: a key new to the replica carries by its name */
        c->carry_key = key;
        c->carry_klen = klen;
    }
    int rc = replica_throttle(c->r, id, idlen, p, rp, qty, now, out);
    c->carry_key = NULL;
    /* A prompt report asked for (replica.c): at the loop's next turn. */
    if (replica_prompt_pending(c->r))
        uv_idle_start(&c->slice, on_slice);
    return rc;
}

void cluster_prefetch(const struct cluster *c, const char *key, size_t klen, int stage, uint32_t *h)
{
    char buf[CLUSTER_KEY_ID_LEN];
    key = cluster_key_id(key, klen, buf, &klen);
    replica_prefetch(c->r, key, klen, stage, h);
}

void cluster_note_demand(struct cluster *c, const char *key, size_t klen, int64_t qty)
{
    char buf[CLUSTER_KEY_ID_LEN];
    key = cluster_key_id(key, klen, buf, &klen);
    replica_note_demand(c->r, key, klen, qty, cluster_now_ns(c));
}

const char *cluster_key_digest(const char *key, size_t klen, char buf[CLUSTER_KEY_ID_LEN],
                               size_t *idlen)
{
    buf[0] = (char)0xFF;
    /* BLAKE2b-256 cannot fail for these sizes (libsodium returns 0). */
    (void)crypto_generichash((unsigned char *)buf + 1, CLUSTER_KEY_ID_LEN - 1,
                             (const unsigned char *)key, klen, NULL, 0);
    *idlen = CLUSTER_KEY_ID_LEN;
    return buf;
}

struct gossip_node *cluster_gossip(struct cluster *c)
{
    return c != NULL && c->g != NULL ? gossip_uv_node(c->g) : NULL;
}

struct replica *cluster_replica(struct cluster *c)
{
    return c != NULL ? c->r : NULL;
}

struct slots *cluster_slots(struct cluster *c)
{
    return c != NULL ? c->sl : NULL;
}

const char *cluster_node_name(const struct cluster *c)
{
    return c->name;
}

const char *cluster_address(const struct cluster *c)
{
    return c->addr;
}

enum policy_scope cluster_default_scope(const struct cluster *c)
{
    return c->default_scope;
}

int cluster_failed(const struct cluster *c)
{
    return c != NULL && c->failed;
}

int cluster_on_full_allow(const struct cluster *c)
{
    return c != NULL && c->on_full_allow;
}

void cluster_get_stats(const struct cluster *c, struct cluster_stats *out)
{
    out->replication_max_slice_us = c != NULL ? c->slice_max_ns / 1000u : 0;
    out->replication_max_slice_cpu_us = c != NULL ? c->slice_max_cpu_ns / 1000u : 0;
    out->replication_max_pass_ms = 0;
    out->replication_backlog = 0;
    if (c != NULL && c->r != NULL) {
        out->replication_max_pass_ms =
            (uint64_t)replica_pass_max(c->r, cluster_now_ns(c)) / 1000000u;
        out->replication_backlog = replica_backlog(c->r);
        for (const struct cluster_rx *m = c->rx_head; m != NULL; m = m->next)
            out->replication_backlog++;
    }
}

static const struct counter_row cluster__rows[] = {
    COUNTER_ROW(struct cluster_stats, replication_max_slice_us, "replication_max_slice_us",
                "replication_max_slice_microseconds", COUNTER_GAUGE,
                "The longest stretch of replication work in one event loop turn since start or "
                "CONFIG RESETSTAT, in us."),
    COUNTER_ROW(struct cluster_stats, replication_max_slice_cpu_us, "replication_max_slice_cpu_us",
                "replication_max_slice_cpu_microseconds", COUNTER_GAUGE,
                "The most CPU time one stretch of replication work used since start or CONFIG "
                "RESETSTAT, in us."),
    COUNTER_ROW(struct cluster_stats, replication_max_pass_ms, "replication_max_pass_ms",
                "replication_max_pass_milliseconds", COUNTER_GAUGE,
                "The longest replication pass since start or CONFIG RESETSTAT, the one in "
                "progress included, in ms: a pass starts every gossip interval, and one that "
                "takes longer is a replication behind its keys."),
    COUNTER_ROW(struct cluster_stats, replication_backlog, "replication_backlog",
                "replication_backlog", COUNTER_GAUGE,
                "About how many keys (and received messages) wait for the replication's work; 0 "
                "once it has caught up with the requests."),
};
const struct counter_table cluster_counters = COUNTER_TABLE(cluster__rows);

void cluster_reset_max(struct cluster *c)
{
    if (c == NULL)
        return;
    c->slice_max_ns = 0;
    c->slice_max_cpu_ns = 0;
    if (c->r != NULL)
        replica_reset_max(c->r);
}
