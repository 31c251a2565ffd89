/*
 * gossip_node_*: the I/O-free protocol core: SWIM failure detection with the
 * Lifeguard refinements, piggybacked dissemination, the application payload
 * channel and push-pull anti-entropy over datagrams.
 *
 * Design notes.
 *  - Probing (SWIM): every probe interval one member, taken in a shuffled
 *    round-robin order, is pinged.  Without an ack within probe_timeout, k
 *    members are asked to ping it for us (PING_REQ); they ack on its behalf
 *    or, with Lifeguard, send a NACK when they heard nothing either.  With no
 *    ack by the end of the interval the member becomes suspect.
 *  - Lifeguard: a local health multiplier (LHM, "awareness") grows when this
 *    node misses acks it should get (missed nacks, having to refute a
 *    suspicion about itself) and shrinks on every successful probe; the probe
 *    interval is scaled by it, so a slow or overloaded node accuses less.
 *    Suspicion timeouts start at max and shrink as independent accusers
 *    confirm (member_suspicion_timeout).
 *  - Incarnations order all news about a member: news with a lower
 *    incarnation loses; at equal incarnation suspect beats alive and dead or
 *    left beat both, so a replayed alive can never undo a death.  Only the
 *    member itself raises its incarnation (refutation), which is how a
 *    restarted node comes back.
 *  - Dissemination: membership messages and application payloads wait in two
 *    bounded queues and ride on every packet; each queue first gets its own
 *    share of the packet (app_budget for payloads), then leftovers are shared.
 *  - Anti-entropy: a push-pull is a burst of packets holding full membership
 *    plus application state chunks (state_fill); a request asks the peer to
 *    answer with its own burst.  Loss only makes an exchange less complete.
 *    State larger than one burst (pushpull_max_packets) resumes where the
 *    last burst stopped, so every part of it goes out in turn.
 *  - Every timer is an absolute deadline checked in gossip_node_tick;
 *    gossip_node_next_deadline reports the earliest one.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "broadcast.h"
#include "io.h"
#include "member.h"
#include "proto.h"
#include "gossip/keyring.h"

#define MS            1000000LL
#define MAX_SEEDS     64
#define MAX_RELAYS    64
#define MAX_MEMBERS   65536 /* members and tombstones kept */
#define TS_WINDOW_NS  (30000 * MS)
#define REAP_CHECK_NS (1000 * MS)
#define JOIN_RETRY_NS (2000 * MS)
/* Seeds that are not alive members get a push-pull from each node every
 * SEED_RETRY_NS, or live x SEED_RETRY_PER_NS in a larger cluster (about
 * 1 / SEED_RETRY_PER_NS exchanges a second over the cluster): see
 * seed_reconnect. */
#define SEED_RETRY_NS     (1000 * MS)
#define SEED_RETRY_PER_NS (200 * MS)
/* Four times as often while a seed died lately (SEED_LATE_NS): seeds
 * restarted together find each other first, and take themselves as a new
 * cluster until another member reaches them and names their past lives. */
#define SEED_FAST_NS       (250 * MS)
#define SEED_FAST_PER_NS   (50 * MS)
#define SEED_LATE_NS       (60000 * MS)
#define PKT_MAX            9216        /* largest datagram handled (jumbo frame) */
#define PP_MSG_OVERHEAD    16          /* PUSHPULL message without its chunk */
#define LEAVE_FANOUT       64          /* members told of a leave directly; gossip tells the rest */
#define DIRECT_PENDING_MAX (4u << 20)  /* bytes of direct messages waiting */
#define CONFLICT_REPLY_NS  (1000 * MS) /* at most one CONFLICT answer a second */
#define STRANGER_NS        (200 * MS)  /* push-pull with unknown senders at most this often */

struct probe {
    int active, acked, indirect_sent;
    char target[GOSSIP_NAME_MAX + 1];
    size_t target_len;
    uint32_t target_inc; /* the target's incarnation and life when pinged */
    uint64_t target_life;
    uint32_t seq;
    int64_t timeout_at, end_at;
    int expected_nacks, nacks;
};

struct relay {
    int used, want_nack;
    uint32_t our_seq, their_seq;
    struct gossip_addr requester;
    int64_t nack_at;
};

/* A packet under construction (plaintext). */
struct pktbuf {
    uint8_t buf[PKT_MAX];
    size_t len, cap, nmsgs;
};

/* Direct messages batched for one member until the next flush. */
struct direct_batch {
    struct member *to;
    struct pktbuf *pb;
};

struct gossip_node {
    struct gossip_config cfg;
    struct gossip_io io;
    char name[GOSSIP_NAME_MAX + 1];
    size_t name_len;
    struct member_table t;
    struct member *self;
    struct broadcast_queue mq, aq;
    struct member **plist; /* probe order */
    size_t pn, pcap, pidx;
    struct member **sus; /* members under suspicion */
    size_t sn, scap;
    struct probe probe;
    struct relay relays[MAX_RELAYS];
    int nrelays;
    uint32_t seq, pp_xid;
    uint64_t app_seq, last_ts, packet_id, pp_cursor;
    int awareness, left, leave_pending, join_pending, probe_turn;
    int revived_pending; /* we refuted our death: tell every live member (tick) */
    struct gossip_addr seeds[MAX_SEEDS];
    size_t nseeds, seed_turn;
    int64_t now, next_probe, next_gossip, next_pushpull, next_reap, next_join, next_seed;
    size_t live; /* alive + suspect members, self included */
    struct gossip_stats st;
    size_t plain_cap; /* mtu minus seal overhead */
    struct proto_packet pkt;
    struct pktbuf out;
    /* direct messages waiting for the next flush, one batch per member */
    struct direct_batch *dq;
    size_t dn, dcap, dbytes;
    uint64_t view_version;
    int64_t born;
    /* name conflicts: a claim on this node's name from another address */
    int conflict, claim_pending;
    int joined, prior_life; /* an exchange answered; our name had a past life */
    int64_t elder_lead_ms;  /* gossip_node_elder_lead_ms */
    int64_t next_stranger;
    int64_t next_ask_back; /* not joined yet: asking a peer that asked us */
    int64_t next_verdict;  /* a dead member's new life told its verdict (on_alive) */
    struct gossip_addr conflict_addr, claim_addr;
    uint32_t claim_inc;
    int64_t claim_deadline, conflict_reply_at;
    uint64_t conflict_reply_life; /* the other life last answered */
    uint64_t conflict_seen_life;
    uint8_t sealed[PKT_MAX];
    uint8_t opened[PKT_MAX];
};

static const char *const drop_names[GOSSIP_DROP_MAX_] = {
    [GOSSIP_DROP_SHORT] = "short",         [GOSSIP_DROP_AUTH] = "auth",
    [GOSSIP_DROP_NOKEY] = "nokey",         [GOSSIP_DROP_VERSION] = "version",
    [GOSSIP_DROP_MALFORMED] = "malformed", [GOSSIP_DROP_SELF] = "self",
    [GOSSIP_DROP_STALE] = "stale",         [GOSSIP_DROP_LEFT] = "left",
};

const char *gossip_member_state_name(enum gossip_member_state s)
{
    switch (s) {
    case GOSSIP_MEMBER_ALIVE:
        return "alive";
    case GOSSIP_MEMBER_SUSPECT:
        return "suspect";
    case GOSSIP_MEMBER_DEAD:
        return "dead";
    case GOSSIP_MEMBER_LEFT:
        return "left";
    }
    return "unknown";
}

const char *gossip_drop_name(int reason)
{
    if (reason < 0 || reason >= GOSSIP_DROP_MAX_)
        return "unknown";
    return drop_names[reason];
}

void gossip_config_default(struct gossip_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->probe_interval_ms = 1000;
    cfg->probe_timeout_ms = 500;
    cfg->indirect_checks = 3;
    cfg->suspicion_mult = 4;
    cfg->suspicion_max_timeout_mult = 6;
    cfg->retransmit_mult = 4;
    cfg->gossip_interval_ms = 200;
    cfg->gossip_nodes = 3;
    cfg->gossip_to_dead_ms = 30000;
    cfg->pushpull_interval_ms = 30000;
    cfg->pushpull_max_packets = 16;
    cfg->awareness_max_multiplier = 8;
    cfg->lifeguard = 1;
    cfg->dead_reap_ms = 30000;
    cfg->tombstone_ms = 600000;
    cfg->mtu = 1400;
    cfg->app_budget = 640;
    cfg->app_queue_max = 1024;
    cfg->member_queue_max = 4096;
}

/* ---- small helpers -------------------------------------------------------- */

static uint64_t rnd(struct gossip_node *n)
{
    uint64_t v = 0;
    n->io.random(n->io.ctx, &v, sizeof(v));
    return v;
}

static int64_t scaled(const struct gossip_node *n, int64_t ms)
{
    return ms * MS * (n->awareness + 1);
}

static void awareness_delta(struct gossip_node *n, int d)
{
    if (!n->cfg.lifeguard)
        return;
    n->awareness += d;
    if (n->awareness < 0)
        n->awareness = 0;
    if (n->awareness > n->cfg.awareness_max_multiplier - 1)
        n->awareness = n->cfg.awareness_max_multiplier - 1;
}

/* mult * ceil(log10(N + 1)), N = live members. */
static uint32_t retransmit_limit(const struct gossip_node *n, int mult)
{
    uint32_t lg = 0;
    for (size_t x = n->live + 1; x > 1; x = (x + 9) / 10)
        lg++; /* ceil(log10(N + 1)) */
    if (lg == 0)
        lg = 1;
    return (uint32_t)mult * lg;
}

static int is_live(const struct member *m)
{
    return !m->reaped && (m->state == GOSSIP_MEMBER_ALIVE || m->state == GOSSIP_MEMBER_SUSPECT);
}

static void emit(struct gossip_node *n, enum gossip_event ev, const struct member *m)
{
    if (n->cfg.cb.on_event == NULL || m->is_self)
        return;
    struct gossip_member_info info;
    member_info(m, &info);
    n->cfg.cb.on_event(n->cfg.cb.ud, ev, &info);
}

static struct proto_str pstr(const char *s, size_t len)
{
    struct proto_str p = {s, len};
    return p;
}

/* ---- probe list and suspect list ----------------------------------------- */

static void plist_add(struct gossip_node *n, struct member *m)
{
    if (m->in_plist || m->is_self)
        return;
    if (n->pn == n->pcap) {
        size_t cap = n->pcap ? n->pcap * 2 : 16;
        struct member **v = realloc(n->plist, cap * sizeof(*v));
        if (v == NULL)
            return; /* the member is simply not probed; push-pull still sees it */
        n->plist = v;
        n->pcap = cap;
    }
    /* A random position, so a newcomer is not probed by everyone at once. */
    size_t pos = (size_t)(rnd(n) % (n->pn + 1));
    n->plist[n->pn++] = n->plist[pos];
    n->plist[pos] = m;
    m->in_plist = 1;
}

static void plist_remove(struct gossip_node *n, struct member *m)
{
    if (!m->in_plist)
        return;
    for (size_t i = 0; i < n->pn; i++) {
        if (n->plist[i] == m) {
            memmove(n->plist + i, n->plist + i + 1, (n->pn - i - 1) * sizeof(*n->plist));
            n->pn--;
            if (n->pidx > i)
                n->pidx--;
            break;
        }
    }
    m->in_plist = 0;
}

static void sus_remove(struct gossip_node *n, struct member *m)
{
    for (size_t i = 0; i < n->sn; i++) {
        if (n->sus[i] == m) {
            n->sus[i] = n->sus[--n->sn];
            return;
        }
    }
}

static int sus_add(struct gossip_node *n, struct member *m)
{
    if (n->sn == n->scap) {
        size_t cap = n->scap ? n->scap * 2 : 8;
        struct member **v = realloc(n->sus, cap * sizeof(*v));
        if (v == NULL)
            return -GOSSIP_ENOMEM;
        n->sus = v;
        n->scap = cap;
    }
    n->sus[n->sn++] = m;
    return 0;
}

/* ---- sending ----------------------------------------------------------- */

static void pb_begin(struct gossip_node *n, struct pktbuf *pb)
{
    uint64_t ts = (uint64_t)n->now;
    if (ts <= n->last_ts)
        ts = n->last_ts + 1;
    n->last_ts = ts;
    pb->cap = n->plain_cap;
    pb->nmsgs = 0;
    /* Cannot fail: plain_cap >= PROTO_HEADER_MAX was checked at creation. */
    proto_packet_begin(pb->buf, pb->cap, n->name, n->name_len, ts, n->self->incarnation,
                       n->cfg.life_id, &pb->len);
}

static int pb_add(struct pktbuf *pb, const struct proto_msg *m)
{
    size_t len;
    int rc = proto_encode_msg(m, pb->buf + pb->len, pb->cap - pb->len, &len);
    if (rc != 0)
        return rc;
    pb->len += len;
    pb->nmsgs++;
    return 0;
}

/* Piggybacks queued membership news and payloads, each queue first within
 * its own share, then into whatever room is left. */
static void pb_piggyback(struct gossip_node *n, struct pktbuf *pb)
{
    uint32_t limit = retransmit_limit(n, n->cfg.retransmit_mult);
    uint32_t app_limit = retransmit_limit(
        n, n->cfg.app_retransmit_mult > 0 ? n->cfg.app_retransmit_mult : n->cfg.retransmit_mult);
    size_t room = pb->cap - pb->len;
    size_t app_share = n->cfg.app_budget < room ? n->cfg.app_budget : room;
    size_t mcap = pb->cap - app_share;
    uint64_t id = ++n->packet_id;
    broadcast_fill(&n->mq, limit, id, pb->buf, mcap, &pb->len, &pb->nmsgs);
    broadcast_fill(&n->aq, app_limit, id, pb->buf, pb->cap, &pb->len, &pb->nmsgs);
    broadcast_fill(&n->mq, limit, id, pb->buf, pb->cap, &pb->len, &pb->nmsgs);
}

static void pb_send(struct gossip_node *n, struct pktbuf *pb, const struct gossip_addr *to)
{
    const uint8_t *wire = pb->buf;
    size_t len = pb->len;
    /* A process that yielded its name to an older one says nothing more
     * under it: its acks, refutations and leave would all read as the
     * incumbent's. */
    if (n->conflict)
        return;
    if (pb->nmsgs > PROTO_MAX_MSGS)
        return; /* cannot happen with sane MTUs; never send what peers reject */
    proto_packet_finish(pb->buf, pb->nmsgs);
    if (n->cfg.keyring != NULL) {
        if (gossip_keyring_seal(n->cfg.keyring, pb->buf, pb->len, n->sealed, sizeof(n->sealed),
                                &len) != 0) {
            n->st.send_errors++;
            return;
        }
        wire = n->sealed;
    }
    if (n->io.send(n->io.ctx, to, wire, len) != 0) {
        n->st.send_errors++;
        return;
    }
    n->st.packets_sent++;
    n->st.bytes_sent += len;
}

/* Sends one message (plus piggybacked news) to an address. */
static void send_one(struct gossip_node *n, const struct gossip_addr *to, const struct proto_msg *m)
{
    struct pktbuf *pb = &n->out;
    pb_begin(n, pb);
    if (pb_add(pb, m) != 0)
        return;
    pb_piggyback(n, pb);
    pb_send(n, pb, to);
}

static void queue_member_msg(struct gossip_node *n, const struct proto_msg *m)
{
    uint8_t buf[PROTO_HEADER_MAX + 2 * GOSSIP_NAME_MAX + PROTO_ADDR_MAX + 32];
    size_t len;
    if (proto_encode_msg(m, buf, sizeof(buf), &len) != 0)
        return;
    if (broadcast_push(&n->mq, member_hash(m->name.ptr, m->name.len), buf, len) == 0)
        n->st.member_msgs_queued++;
    n->st.member_msgs_dropped = n->mq.dropped;
}

static void member_msg(const struct member *m, const struct gossip_node *n, struct proto_msg *out)
{
    memset(out, 0, sizeof(*out));
    out->name = pstr(m->name, m->name_len);
    out->incarnation = m->incarnation;
    out->life = m->life; /* every piece of news names the life it is about */
    switch (m->state) {
    case GOSSIP_MEMBER_ALIVE:
        out->type = PROTO_ALIVE;
        out->addr = m->addr;
        out->life = m->life;
        if (m->life != 0 && n->now > m->born_est)
            out->uptime_ms = (uint64_t)((n->now - m->born_est) / MS);
        break;
    case GOSSIP_MEMBER_SUSPECT:
        out->type = PROTO_SUSPECT;
        out->from = pstr(n->name, n->name_len);
        break;
    case GOSSIP_MEMBER_DEAD:
        out->type = PROTO_DEAD;
        out->from = pstr(n->name, n->name_len);
        break;
    case GOSSIP_MEMBER_LEFT:
        out->type = PROTO_LEFT;
        break;
    }
}

static void broadcast_member(struct gossip_node *n, const struct member *m)
{
    struct proto_msg msg;
    member_msg(m, n, &msg);
    queue_member_msg(n, &msg);
}

/* Up to k distinct random members matching `want`, excluding `skip`. */
static size_t pick_random(struct gossip_node *n, size_t k, const struct member *skip,
                          int (*want)(const struct gossip_node *, const struct member *),
                          struct member **out)
{
    size_t got = 0;
    if (n->t.n == 0)
        return 0;
    for (size_t tries = 0; got < k && tries < 3 * k + 8; tries++) {
        struct member *m = n->t.v[rnd(n) % n->t.n];
        if (m == skip || m->is_self || !want(n, m))
            continue;
        int dup = 0;
        for (size_t i = 0; i < got; i++)
            dup |= out[i] == m;
        if (!dup)
            out[got++] = m;
    }
    return got;
}

static int want_live(const struct gossip_node *n, const struct member *m)
{
    return is_live(m);
}

static int want_gossip(const struct gossip_node *n, const struct member *m)
{
    if (is_live(m))
        return 1;
    /* Keep telling the recently dead, so a falsely accused node hears it. */
    return !m->reaped && m->state == GOSSIP_MEMBER_DEAD &&
           n->now - m->state_since < n->cfg.gossip_to_dead_ms * MS;
}

static int want_dead(const struct gossip_node *n, const struct member *m)
{
    return m->state == GOSSIP_MEMBER_DEAD; /* reaped ones too, until their tombstone expires */
}

/* ---- state changes ------------------------------------------------------ */

static void set_state(struct gossip_node *n, struct member *m, enum gossip_member_state s)
{
    int was_live = is_live(m);
    if (m->state == GOSSIP_MEMBER_SUSPECT && s != GOSSIP_MEMBER_SUSPECT)
        sus_remove(n, m);
    m->state = s;
    m->state_since = n->now;
    int now_live = is_live(m);
    if (was_live && !now_live)
        n->live--;
    else if (!was_live && now_live)
        n->live++;
    if (was_live != now_live)
        n->view_version++;
}

static void refute(struct gossip_node *n, uint32_t accused_inc)
{
    struct member *self = n->self;
    if (n->left || n->conflict)
        return;
    self->incarnation = (accused_inc >= self->incarnation ? accused_inc : self->incarnation) + 1;
    n->st.refutations++;
    awareness_delta(n, 1);
    broadcast_member(n, self);
}

/* A new, unreaped or tombstoned member coming (back) to life. */
static void revive(struct gossip_node *n, struct member *m, uint32_t inc,
                   const struct gossip_addr *addr)
{
    int was_reaped = m->reaped;
    int was_state = m->state;
    if (was_reaped) {
        m->reaped = 0;
        m->state = GOSSIP_MEMBER_DEAD; /* not live: set_state counts it */
    }
    m->incarnation = inc;
    m->addr = *addr;
    set_state(n, m, GOSSIP_MEMBER_ALIVE);
    plist_add(n, m);
    broadcast_member(n, m);
    emit(n,
         (was_reaped || was_state == GOSSIP_MEMBER_DEAD || was_state == GOSSIP_MEMBER_LEFT)
             ? GOSSIP_EVENT_JOIN
             : GOSSIP_EVENT_ALIVE,
         m);
}

static void send_conflict(struct gossip_node *n, const struct gossip_addr *to, uint64_t life);

/* Someone says this node's name is alive at another address, from another
 * life: a previous life of ours that moved (gone: refute), or a second live
 * process with our name.  Ask it (CONFLICT) and refute only if no answer
 * comes within a probe timeout (see tick); the older process keeps the name. */
static void claim_on_self(struct gossip_node *n, const struct proto_msg *msg)
{
    if (n->conflict)
        return; /* we yielded: nothing more to say */
    if (msg->life != n->cfg.life_id)
        n->prior_life = 1;
    if (msg->life == n->cfg.life_id || gossip_addr_equal(&msg->addr, &n->self->addr) ||
        msg->life == 0) {
        if (msg->incarnation > n->self->incarnation)
            refute(n, msg->incarnation); /* gossip from a previous life of ours */
        return;
    }
    if (!n->claim_pending) {
        n->claim_pending = 1;
        n->claim_addr = msg->addr;
        n->claim_deadline = n->now + n->cfg.probe_timeout_ms * MS * 2;
    }
    if (msg->incarnation > n->claim_inc)
        n->claim_inc = msg->incarnation;
    send_conflict(n, &msg->addr, msg->life);
}

static void on_alive(struct gossip_node *n, const struct proto_msg *msg)
{
    struct member *m = member_find(&n->t, msg->name.ptr, msg->name.len);
    if (m != NULL && m->is_self) {
        claim_on_self(n, msg);
        return;
    }
    /* Another life claiming a live member's name from another address is a
     * second process with the name (it will be refused), not a restart: a
     * restart in place keeps the address, and one that moved takes the name
     * once its old life is found dead.  Whatever its incarnation, it must
     * not push the live one aside in our view. */
    if (m != NULL && !m->reaped && msg->life != 0 && m->life != 0 && msg->life != m->life &&
        is_live(m) && !gossip_addr_equal(&msg->addr, &m->addr))
        return;
    if (m != NULL && msg->life != 0 && msg->life != m->life && msg->incarnation > m->incarnation) {
        m->life = msg->life;
        m->born_est =
            n->now - (int64_t)(msg->uptime_ms > (uint64_t)(n->now / MS) ? (uint64_t)(n->now / MS)
                                                                        : msg->uptime_ms) *
                         MS;
    }
    if (m == NULL) {
        if (n->t.n >= MAX_MEMBERS)
            return; /* bound memory whatever peers claim */
        m = member_add(&n->t, msg->name.ptr, msg->name.len);
        if (m == NULL)
            return;
        m->state = GOSSIP_MEMBER_DEAD; /* not yet live: revive counts it, emits JOIN */
        m->life = msg->life;
        m->born_est = n->now;
    } else if (msg->incarnation <= m->incarnation) {
        /* Equal incarnation never wins: suspect/dead/left beat alive there.
         * But a new life of a member we count dead or gone, still at an
         * incarnation it cannot know to be too low (it started from 0),
         * refutes only once it hears our verdict: tell it now.  Relayed
         * news of it may be all we ever get (two seeds restarted together
         * know only each other, and nobody gossips to the dead), and it
         * would stay outside our view, in a cluster of its own. */
        if (!is_live(m) && !m->reaped && msg->life != 0 && msg->life != m->life &&
            n->now >= n->next_verdict) {
            struct proto_msg verdict;
            n->next_verdict = n->now + STRANGER_NS;
            member_msg(m, n, &verdict);
            send_one(n, &msg->addr, &verdict);
        }
        return;
    }
    revive(n, m, msg->incarnation, &msg->addr);
}

/* Suspicion bounds (memberlist): min = mult * max(1, log10(N)) * probe
 * interval, max = max_mult * min; without Lifeguard the timeout is fixed. */
static void suspicion_bounds(const struct gossip_node *n, int64_t *min, int64_t *max)
{
    double scale = n->live > 10 ? log10((double)n->live) : 1.0;
    *min = (int64_t)(n->cfg.suspicion_mult * scale * (double)n->cfg.probe_interval_ms * MS);
    *max = n->cfg.lifeguard ? *min * n->cfg.suspicion_max_timeout_mult : *min;
}

static void start_suspicion(struct gossip_node *n, struct member *m, uint64_t accuser)
{
    int64_t min, max;
    int k = n->cfg.suspicion_mult - 2;
    suspicion_bounds(n, &min, &max);
    if ((int)n->live - 2 < k || !n->cfg.lifeguard)
        k = 0;
    m->susp_start = n->now;
    m->susp_check = 0;
    m->susp_k = k;
    m->susp_confirmations = 0;
    memset(m->susp_accusers, 0, sizeof(m->susp_accusers));
    m->susp_accusers[0] = accuser;
    m->susp_deadline = n->now + member_suspicion_timeout(min, max, k, 0);
    sus_add(n, m);
}

/* A new distinct accuser shortens the timeout; returns 1 if it counted. */
static int confirm_suspicion(struct gossip_node *n, struct member *m, uint64_t accuser)
{
    if (m->susp_k < 1 || m->susp_confirmations >= m->susp_k)
        return 0;
    for (int i = 0; i < MEMBER_MAX_ACCUSERS; i++) {
        if (m->susp_accusers[i] == accuser)
            return 0;
        if (m->susp_accusers[i] == 0) {
            m->susp_accusers[i] = accuser;
            break;
        }
    }
    m->susp_confirmations++;
    int64_t min, max;
    suspicion_bounds(n, &min, &max);
    m->susp_deadline =
        m->susp_start + member_suspicion_timeout(min, max, m->susp_k, m->susp_confirmations);
    return 1;
}

/* 1 if news about life `life` of m concerns another life than the one we
 * know (0 on either side: unknown, so it counts). */
static int other_life_news(const struct gossip_node *n, const struct member *m, uint64_t life)
{
    uint64_t ours = m->is_self ? n->cfg.life_id : m->life;
    return life != 0 && ours != 0 && life != ours;
}

/* Queues the news that m (at incarnation inc, its life) is suspected by
 * `from` (from_len bytes; the caller's buffer, copied into the message). */
static void queue_suspect(struct gossip_node *n, const struct member *m, uint32_t inc,
                          const char *from, size_t from_len)
{
    struct proto_msg msg = {.type = PROTO_SUSPECT,
                            .name = pstr(m->name, m->name_len),
                            .incarnation = inc,
                            .life = m->life,
                            .from = pstr(from, from_len)};
    queue_member_msg(n, &msg);
}

static void on_suspect(struct gossip_node *n, const char *name, size_t len, uint32_t inc,
                       uint64_t life, const char *from, size_t from_len)
{
    struct member *m = member_find(&n->t, name, len);
    if (m == NULL || m->reaped || inc < m->incarnation)
        return;
    /* A suspicion of another life of this name (a refused second process,
     * or a life that ended) is not about the member we know. */
    if (!m->is_self && other_life_news(n, m, life))
        return;
    if (m->is_self) {
        /* News of our name from another life: a past life, heard before
         * or after our join (seeds restarted together join each other
         * first, and hear of their past lives from the others later).  Of
         * this life it is only a peer that knew us first (it probed us
         * while our join was on its way, or lost). */
        if (life != n->cfg.life_id)
            n->prior_life = 1;
        if (!n->left)
            refute(n, inc);
        return;
    }
    uint64_t accuser = member_hash(from, from_len);
    if (m->state == GOSSIP_MEMBER_SUSPECT && inc > m->incarnation) {
        /* It refuted the suspicion we hold (the news of it missed us) and
         * is suspected again: our timer belongs to the refuted incarnation.
         * Start over at the new one, or a member that refutes every time
         * (a slow one) dies on the first timer set in our view. */
        m->incarnation = inc;
        sus_remove(n, m);
        start_suspicion(n, m, accuser);
        n->st.suspicions++;
        queue_suspect(n, m, inc, from, from_len);
        return;
    }
    if (m->state == GOSSIP_MEMBER_SUSPECT) {
        if (confirm_suspicion(n, m, accuser)) {
            queue_suspect(n, m, m->incarnation, from, from_len);
        }
        return;
    }
    if (m->state != GOSSIP_MEMBER_ALIVE) {
        /* The accuser missed the member's leave or death (dissemination is
         * probabilistic): tell the cluster again, so the accuser learns the
         * final word before its own suspicion times out. */
        if (m->state == GOSSIP_MEMBER_LEFT || m->state == GOSSIP_MEMBER_DEAD)
            broadcast_member(n, m);
        return;
    }
    m->incarnation = inc;
    set_state(n, m, GOSSIP_MEMBER_SUSPECT);
    start_suspicion(n, m, accuser);
    n->st.suspicions++;
    queue_suspect(n, m, inc, from, from_len);
    emit(n, GOSSIP_EVENT_SUSPECT, m);
}

/* Whether our own latest evidence about m agrees that it is unreachable:
 * our last probe of it failed and nothing came from it since.  A member
 * that really failed is soon in this state at every node that probes it
 * (suspects are probed first); a member that some other node cannot reach
 * but we hear from is not. */
static int unreachable_here(const struct member *m)
{
    return m->probe_failed != 0 && m->probe_failed >= m->last_heard;
}

/* A death (left = 0) or leave (left = 1) of `name` at incarnation inc.
 * `from` names the member that declared the death when the news came by
 * gossip (NULL for our own suspicion timing out, and for a leave). */
static void on_dead(struct gossip_node *n, const char *name, size_t len, uint32_t inc,
                    uint64_t life, int left, const char *from, size_t from_len)
{
    struct member *m = member_find(&n->t, name, len);
    if (m == NULL || m->reaped || inc < m->incarnation)
        return;
    /* The death or leave of another life of the name (say a refused
     * duplicate's graceful leave) leaves the life we know untouched. */
    if (!m->is_self && other_life_news(n, m, life))
        return;
    /* Someone else's verdict against a member our own evidence does not
     * find unreachable is taken as a suspicion (its author counted as an
     * accuser): the member learns of it and refutes, and if it is really
     * gone our own probe of it fails (suspects are probed first) and our
     * timer, or the next verdict we hear, declares it dead.  Taken as final,
     * the verdicts each side of a healed partition made about the other
     * kill members that everyone who can reach them sees alive, until they
     * refute. */
    if (!left && from != NULL && !m->is_self &&
        (m->state == GOSSIP_MEMBER_ALIVE || m->state == GOSSIP_MEMBER_SUSPECT) &&
        !unreachable_here(m)) {
        n->st.deaths_doubted++;
        on_suspect(n, name, len, inc, life, from, from_len);
        return;
    }
    if (m->state == GOSSIP_MEMBER_DEAD || m->state == GOSSIP_MEMBER_LEFT) {
        /* A leave outranks a death at the same incarnation (graceful).  A
         * death reported of a member we know left: say so again. */
        if (!(left && m->state == GOSSIP_MEMBER_DEAD)) {
            if (!left && m->state == GOSSIP_MEMBER_LEFT && !m->is_self)
                broadcast_member(n, m);
            return;
        }
    }
    if (m->is_self) {
        if (life != n->cfg.life_id)
            n->prior_life = 1; /* as in on_suspect */
        if (!n->left) {
            refute(n, inc);
            n->revived_pending = 1;
        }
        return;
    }
    m->incarnation = inc;
    set_state(n, m, left ? GOSSIP_MEMBER_LEFT : GOSSIP_MEMBER_DEAD);
    if (left)
        n->st.leaves++;
    else
        n->st.deaths++;
    broadcast_member(n, m);
    emit(n, left ? GOSSIP_EVENT_LEFT : GOSSIP_EVENT_DEAD, m);
}

/* ---- probing -------------------------------------------------------------- */

static void probe_finish(struct gossip_node *n)
{
    struct probe *p = &n->probe;
    p->active = 0;
    if (p->acked) {
        n->st.probe_fail_streak = 0;
        return;
    }
    n->st.probe_failures++;
    n->st.probe_fail_streak++;
    /* Lifeguard: missed nacks mean our own network is suspect, not theirs. */
    if (p->expected_nacks > 0) {
        if (p->nacks < p->expected_nacks)
            awareness_delta(n, p->expected_nacks - p->nacks);
    } else {
        awareness_delta(n, 1);
    }
    /* A failed probe of a member already suspect is our independent
     * confirmation (Lifeguard): it shortens the suspicion everywhere.
     * Without it a suspicion started by one accuser and spread by gossip
     * runs to its maximum timeout, since nobody else ever accuses. */
    /* Only of the incarnation we pinged: a member that refuted, or came
     * back in a new life, while the probe ran (a probe of a member then
     * suspect, that died and restarted) is not the one that failed to
     * answer, and a suspicion of it would undo its refutation. */
    struct member *m = member_find(&n->t, p->target, p->target_len);
    if (m != NULL && !m->reaped && m->incarnation == p->target_inc && m->life == p->target_life &&
        (m->state == GOSSIP_MEMBER_ALIVE || m->state == GOSSIP_MEMBER_SUSPECT)) {
        m->probe_failed = n->now;
        on_suspect(n, m->name, m->name_len, m->incarnation, m->life, n->name, n->name_len);
    }
}

static struct member *next_probe_target(struct gossip_node *n)
{
    for (size_t tries = 0; tries <= n->pn; tries++) {
        if (n->pidx >= n->pn) {
            n->pidx = 0;
            /* Fisher-Yates: a fresh random order every round. */
            for (size_t i = n->pn; i > 1; i--) {
                size_t j = (size_t)(rnd(n) % i);
                struct member *x = n->plist[i - 1];
                n->plist[i - 1] = n->plist[j];
                n->plist[j] = x;
            }
        }
        if (n->pn == 0)
            return NULL;
        struct member *m = n->plist[n->pidx++];
        if (is_live(m))
            return m;
    }
    return NULL;
}

static void probe_start(struct gossip_node *n)
{
    struct member *m;
    /* Every other probe goes to a member we suspect, if any: its ack header
     * carries its refutation even when gossip of it missed us, and the ping
     * carries the suspicion to it (Lifeguard's buddy system). */
    n->probe_turn ^= 1;
    m = NULL;
    for (size_t i = 0; i < n->sn && m == NULL; i++)
        if (n->sus[i]->susp_check == 1)
            m = n->sus[i]; /* its timer waits for this probe (gossip_node_tick) */
    if (m != NULL)
        m->susp_check = 2;
    else if (n->sn > 0 && n->probe_turn)
        m = n->sus[rnd(n) % n->sn];
    else
        m = next_probe_target(n);
    int64_t interval = scaled(n, n->cfg.probe_interval_ms);
    n->next_probe = n->now + interval;
    if (m == NULL)
        return;
    struct probe *p = &n->probe;
    memset(p, 0, sizeof(*p));
    p->active = 1;
    memcpy(p->target, m->name, m->name_len + 1);
    p->target_len = m->name_len;
    p->target_inc = m->incarnation;
    p->target_life = m->life;
    p->seq = ++n->seq;
    p->timeout_at = n->now + n->cfg.probe_timeout_ms * MS;
    p->end_at = n->now + interval;
    n->st.probes++;
    struct proto_msg msg = {.type = PROTO_PING, .seq = p->seq, .name = pstr(m->name, m->name_len)};
    struct pktbuf *pb = &n->out;
    pb_begin(n, pb);
    if (m->state == GOSSIP_MEMBER_SUSPECT) {
        struct proto_msg sus = {.type = PROTO_SUSPECT,
                                .name = pstr(m->name, m->name_len),
                                .incarnation = m->incarnation,
                                .life = m->life,
                                .from = pstr(n->name, n->name_len)};
        pb_add(pb, &sus); /* before the ping: the ack then carries the refutation */
    }
    if (pb_add(pb, &msg) != 0)
        return;
    pb_piggyback(n, pb);
    pb_send(n, pb, &m->addr);
}

static void probe_indirect(struct gossip_node *n)
{
    struct probe *p = &n->probe;
    struct member *target = member_find(&n->t, p->target, p->target_len);
    struct member *peers[16];
    size_t k = (size_t)n->cfg.indirect_checks;
    p->indirect_sent = 1;
    if (target == NULL || k == 0)
        return;
    if (k > 16)
        k = 16;
    k = pick_random(n, k, target, want_live, peers);
    struct proto_msg msg = {.type = PROTO_PING_REQ,
                            .seq = p->seq,
                            .name = pstr(target->name, target->name_len),
                            .addr = target->addr,
                            .flags = (uint8_t)(n->cfg.lifeguard ? 1 : 0)};
    for (size_t i = 0; i < k; i++) {
        n->st.indirect_probes++;
        send_one(n, &peers[i]->addr, &msg);
    }
    if (n->cfg.lifeguard)
        p->expected_nacks = (int)k;
}

static void on_ping_req(struct gossip_node *n, const struct gossip_addr *from,
                        const struct proto_msg *msg)
{
    struct relay *r = NULL;
    for (int i = 0; i < MAX_RELAYS; i++) {
        if (!n->relays[i].used) {
            r = &n->relays[i];
            break;
        }
    }
    if (r == NULL)
        return; /* too many at once: the requester gets neither ack nor nack */
    r->used = 1;
    r->want_nack = msg->flags & 1;
    r->their_seq = msg->seq;
    r->our_seq = ++n->seq;
    r->requester = *from;
    /* The requester sent this at its probe timeout and counts nacks only
     * until the end of its probe interval (two probe timeouts by default):
     * a nack sent a whole probe timeout from now would arrive after that,
     * every time, and each healthy prober of a slow member would raise its
     * own awareness by the nacks it "missed" (probing ever less often, so
     * hearing the member's refutations too late).  Four fifths leave the
     * way back room. */
    r->nack_at = n->now + n->cfg.probe_timeout_ms * MS * 4 / 5;
    n->nrelays++;
    struct proto_msg ping = {.type = PROTO_PING, .seq = r->our_seq, .name = msg->name};
    send_one(n, &msg->addr, &ping);
}

static void on_ack(struct gossip_node *n, uint32_t seq, int nack)
{
    struct probe *p = &n->probe;
    if (p->active && seq == p->seq) {
        if (nack) {
            n->st.nacks_received++;
            p->nacks++;
        } else if (!p->acked) {
            p->acked = 1;
            awareness_delta(n, -1);
            probe_finish(n);
        }
        return;
    }
    if (nack || n->nrelays == 0)
        return;
    for (int i = 0; i < MAX_RELAYS; i++) {
        struct relay *r = &n->relays[i];
        if (r->used && r->our_seq == seq) {
            struct proto_msg ack = {.type = PROTO_ACK, .seq = r->their_seq};
            r->used = 0;
            n->nrelays--;
            send_one(n, &r->requester, &ack);
            return;
        }
    }
}

/* ---- application payloads -------------------------------------------------- */

/* 1 if (inc, seq) from m was not seen before, recording it. */
static int app_fresh(struct member *m, uint32_t inc, uint64_t seq)
{
    if (!m->app_init || inc > m->app_inc) {
        m->app_init = 1;
        m->app_inc = inc;
        m->app_max = seq;
        m->app_mask = 1;
        return 1;
    }
    if (inc < m->app_inc)
        return 0;
    if (seq > m->app_max) {
        uint64_t d = seq - m->app_max;
        m->app_mask = d >= 64 ? 0 : m->app_mask << d;
        m->app_mask |= 1;
        m->app_max = seq;
        return 1;
    }
    uint64_t d = m->app_max - seq;
    if (d >= 64 || (m->app_mask & (1ull << d)))
        return 0;
    m->app_mask |= 1ull << d;
    return 1;
}

static void on_app(struct gossip_node *n, const struct proto_msg *msg)
{
    struct member *m = member_find(&n->t, msg->name.ptr, msg->name.len);
    char origin[GOSSIP_NAME_MAX + 1];
    if (m != NULL && m->is_self)
        return;
    if (m != NULL && !app_fresh(m, msg->incarnation, msg->app_seq)) {
        n->st.app_duplicates++;
        return;
    }
    memcpy(origin, msg->name.ptr, msg->name.len);
    origin[msg->name.len] = '\0';
    n->st.app_delivered++;
    /* Relay only what can be de-duplicated, or an unknown origin would echo.
     * Encoded here, not on receipt: duplicates (most copies) never need it. */
    if (m != NULL) {
        uint8_t raw[PKT_MAX];
        size_t raw_len;
        if (proto_encode_msg(msg, raw, sizeof(raw), &raw_len) == 0)
            broadcast_push(&n->aq, 0, raw, raw_len);
    }
    n->st.app_dropped = n->aq.dropped;
    if (n->cfg.cb.on_payload != NULL)
        n->cfg.cb.on_payload(n->cfg.cb.ud, origin, msg->data, msg->data_len);
}

/* ---- push-pull ------------------------------------------------------------ */

static void pushpull_send(struct gossip_node *n, const struct gossip_addr *to, uint32_t xid,
                          int request)
{
    struct pktbuf *pb = &n->out;
    size_t mi = 0;
    int state_done = n->cfg.cb.state_fill == NULL;
    uint64_t cursor = n->pp_cursor;
    uint8_t chunk[PKT_MAX];
    int budget = n->cfg.pushpull_max_packets > 0 ? n->cfg.pushpull_max_packets : 1;
    n->st.pushpulls++;
    for (int pkt = 0; pkt < budget; pkt++) {
        pb_begin(n, pb);
        size_t room = pb->cap - pb->len - PP_MSG_OVERHEAD;
        /* Members first, but leave half the packet to state while it lasts. */
        size_t mlimit = state_done ? pb->cap - PP_MSG_OVERHEAD : pb->len + room / 2;
        while (mi < n->t.n) {
            struct member *m = n->t.v[mi];
            /* Forgotten dead members still go out: a member we think dead
             * learns it from this and refutes (how partitions re-merge). */
            if (m->reaped && m->state != GOSSIP_MEMBER_DEAD) {
                mi++;
                continue;
            }
            struct proto_msg msg;
            member_msg(m, n, &msg);
            size_t save = pb->cap;
            pb->cap = mlimit;
            int rc = pb_add(pb, &msg);
            pb->cap = save;
            if (rc != 0)
                break;
            mi++;
        }
        size_t chunk_len = 0;
        if (!state_done) {
            size_t cap = pb->cap - pb->len - PP_MSG_OVERHEAD;
            chunk_len = n->cfg.cb.state_fill(n->cfg.cb.ud, &cursor, chunk, cap);
            if (chunk_len == 0 || chunk_len > cap) {
                chunk_len = 0;
                state_done = 1;
            } else {
                n->st.state_chunks_sent++;
            }
        }
        struct proto_msg pp = {.type = PROTO_PUSHPULL,
                               .seq = xid,
                               .flags = (uint8_t)(request ? PROTO_PP_REQUEST : 0),
                               .data = chunk,
                               .data_len = chunk_len};
        if (pb_add(pb, &pp) != 0)
            break;
        pb_send(n, pb, to);
        if (mi >= n->t.n && state_done)
            break;
    }
    /* State too large for one exchange continues in the next one. */
    n->pp_cursor = state_done ? 0 : cursor;
}

static void pushpull_start(struct gossip_node *n, const struct gossip_addr *to)
{
    pushpull_send(n, to, ++n->pp_xid, 1);
}

/* ---- name conflicts -------------------------------------------------------- */

static int64_t uptime_ms(const struct gossip_node *n)
{
    return (n->now - n->born) / MS;
}

/* Tells the process at `to`, which claims our name, that we hold it and
 * since when (rate-limited: one answer a second). */
static void send_conflict(struct gossip_node *n, const struct gossip_addr *to, uint64_t life)
{
    /* The limit is per claimant: a second duplicate started within the
     * second after the first must be answered too, or it never learns it
     * lost (nobody else gossips to it: its claim moves no view) and runs
     * on, cut off, until a periodic push-pull. */
    if (n->conflict || (n->now < n->conflict_reply_at && life == n->conflict_reply_life))
        return;
    n->conflict_reply_at = n->now + CONFLICT_REPLY_NS;
    n->conflict_reply_life = life;
    struct proto_msg msg = {.type = PROTO_CONFLICT,
                            .name = pstr(n->name, n->name_len),
                            .life = n->cfg.life_id,
                            .uptime_ms = (uint64_t)uptime_ms(n)};
    send_one(n, to, &msg);
}

/* Tells the application, once per other life, that another process uses
 * our name (GOSSIP_EVENT_CONFLICT; gossip_node_conflict says who yields). */
static void conflict_seen(struct gossip_node *n, const struct gossip_addr *from, uint64_t life)
{
    if (n->conflict_seen_life == life && life != 0)
        return;
    n->conflict_seen_life = life;
    n->st.conflicts++;
    if (n->cfg.cb.on_event != NULL) {
        struct gossip_member_info info;
        member_info(n->self, &info);
        info.addr = *from;
        info.life_id = life;
        n->cfg.cb.on_event(n->cfg.cb.ud, GOSSIP_EVENT_CONFLICT, &info);
    }
}

/* A CONFLICT from the process at `from` (life `life`, up for `their_ms`)
 * that has our name: the one that started later yields (ties: the lower
 * life id). */
static void on_conflict(struct gossip_node *n, const struct gossip_addr *from, uint64_t life,
                        uint64_t their_ms)
{
    uint64_t ours = (uint64_t)uptime_ms(n);
    int we_yield = their_ms > ours || (their_ms == ours && life > n->cfg.life_id);
    if (n->conflict)
        return;
    if (we_yield) {
        n->conflict = 1;
        n->claim_pending = 0;
        n->conflict_addr = *from;
        n->conflict_seen_life = 0; /* always tell the application this one */
    } else {
        send_conflict(n, from, life);
    }
    conflict_seen(n, from, life);
}

int gossip_node_conflict(const struct gossip_node *n, struct gossip_addr *other)
{
    if (n->conflict && other != NULL)
        *other = n->conflict_addr;
    return n->conflict;
}

/* ---- direct messages -------------------------------------------------------- */

size_t gossip_node_max_direct(const struct gossip_node *n)
{
    size_t room = n->plain_cap - PROTO_HEADER_MAX - PROTO_DIRECT_OVERHEAD;
    return room;
}

static void direct_send_batch(struct gossip_node *n, struct direct_batch *b)
{
    if (b->pb->nmsgs > 0) {
        pb_send(n, b->pb, &b->to->addr);
        n->st.direct_packets_sent++;
    }
    n->dbytes -= b->pb->len;
    pb_begin(n, b->pb);
    n->dbytes += b->pb->len;
}

int gossip_node_send(struct gossip_node *n, const char *member_name, const uint8_t *msg, size_t len)
{
    if (n->left)
        return -GOSSIP_ESTATE;
    if (len > gossip_node_max_direct(n))
        return -GOSSIP_ETOOBIG;
    struct member *m = member_find(&n->t, member_name, strlen(member_name));
    if (m == NULL || m->is_self || !is_live(m))
        return -GOSSIP_ENOENT;
    if (n->dbytes + len + PROTO_HEADER_MAX > DIRECT_PENDING_MAX) {
        n->st.direct_dropped++;
        return -GOSSIP_ENOMEM;
    }
    struct direct_batch *b = NULL;
    for (size_t i = 0; i < n->dn; i++)
        if (n->dq[i].to == m)
            b = &n->dq[i];
    if (b == NULL) {
        if (n->dn == n->dcap) {
            size_t cap = n->dcap ? n->dcap * 2 : 8;
            struct direct_batch *v = realloc(n->dq, cap * sizeof(*v));
            if (v == NULL) {
                n->st.direct_dropped++;
                return -GOSSIP_ENOMEM;
            }
            n->dq = v;
            n->dcap = cap;
        }
        struct pktbuf *pb = malloc(sizeof(*pb));
        if (pb == NULL) {
            n->st.direct_dropped++;
            return -GOSSIP_ENOMEM;
        }
        b = &n->dq[n->dn++];
        b->to = m;
        b->pb = pb;
        pb_begin(n, pb);
        n->dbytes += pb->len;
    }
    struct proto_msg dm = {.type = PROTO_DIRECT, .data = msg, .data_len = len};
    size_t before = b->pb->len;
    if (pb_add(b->pb, &dm) != 0 || b->pb->nmsgs > PROTO_MAX_MSGS) {
        if (b->pb->nmsgs > PROTO_MAX_MSGS) {
            b->pb->len = before; /* undo: too many messages for one packet */
            b->pb->nmsgs--;
        }
        direct_send_batch(n, b);
        before = b->pb->len;
        if (pb_add(b->pb, &dm) != 0) {
            n->st.direct_dropped++;
            return -GOSSIP_ETOOBIG;
        }
    }
    n->dbytes += b->pb->len - before;
    n->st.direct_sent++;
    n->st.direct_bytes_sent += len;
    return 0;
}

void gossip_node_flush(struct gossip_node *n)
{
    for (size_t i = 0; i < n->dn; i++) {
        struct direct_batch *b = &n->dq[i];
        /* A member that died since keeps its batch: it is dropped unsent. */
        if (b->pb->nmsgs > 0 && is_live(b->to)) {
            pb_send(n, b->pb, &b->to->addr);
            n->st.direct_packets_sent++;
        }
        free(b->pb);
    }
    n->dn = 0;
    n->dbytes = 0;
}

uint64_t gossip_node_view_version(const struct gossip_node *n)
{
    return n->view_version;
}

uint64_t gossip_node_life_id(const struct gossip_node *n)
{
    return n->cfg.life_id;
}

int gossip_node_joined(const struct gossip_node *n, int *prior_life)
{
    if (prior_life != NULL)
        *prior_life = n->prior_life;
    return n->joined;
}

int64_t gossip_node_elder_lead_ms(const struct gossip_node *n)
{
    return n->elder_lead_ms;
}

/* ---- receive ------------------------------------------------------------ */

static int drop(struct gossip_node *n, int reason, int err)
{
    n->st.drops[reason]++;
    return err;
}

/*
 * Receiving a packet, in stages as tarantool's swim_on_input dispatches to
 * swim_process_*: open and decode it (receive__open), settle a packet under
 * this node's own name (receive__from_self), check the sender's replay
 * window (receive__window), act on each message (receive__dispatch), note
 * what the packet says of its sender (receive__sender), then answer and
 * merge its push-pull exchanges (receive__pushpulls).
 */

/* What receive__window learnt of the sender, for the later stages. */
struct receive__ctx {
    int pushpull;   /* the packet holds a push-pull */
    int newer_life; /* it brings the sender's new incarnation or life */
    int other_life; /* another life of the name that moves nothing yet */
};

/* Opens pkt (with the keyring, if any) and decodes it into n->pkt.  0, or
 * the error of the drop it counts (short, no key, version, auth,
 * malformed). */
static int receive__open(struct gossip_node *n, const uint8_t *pkt, size_t len)
{
    const uint8_t *plain = pkt;
    size_t plain_len = len;
    int rc;
    if (pkt == NULL || len == 0 || len > PKT_MAX)
        return drop(n, GOSSIP_DROP_SHORT, -GOSSIP_EPROTO);
    if (n->cfg.keyring != NULL) {
        rc =
            gossip_keyring_open(n->cfg.keyring, pkt, len, n->opened, sizeof(n->opened), &plain_len);
        if (rc != 0) {
            int reason = rc == -GOSSIP_ENOKEY     ? GOSSIP_DROP_NOKEY
                         : rc == -GOSSIP_EVERSION ? GOSSIP_DROP_VERSION
                         : rc == -GOSSIP_EAUTH    ? GOSSIP_DROP_AUTH
                                                  : GOSSIP_DROP_SHORT;
            return drop(n, reason, rc);
        }
        plain = n->opened;
    }
    rc = proto_decode(plain, plain_len, &n->pkt);
    if (rc != 0)
        return drop(n, rc == -GOSSIP_EVERSION ? GOSSIP_DROP_VERSION : GOSSIP_DROP_MALFORMED, rc);
    return 0;
}

/* Whether p is under this node's own name (then it is dropped); from
 * another life, it settles who keeps the name. */
static int receive__from_self(struct gossip_node *n, const struct gossip_addr *from,
                              const struct proto_packet *p)
{
    if (p->sender.len != n->name_len || memcmp(p->sender.ptr, n->name, n->name_len) != 0)
        return 0;
    /* Our name from another life: a second process, or a previous life
     * of ours.  A CONFLICT it carries settles who keeps the name; any
     * other packet gets our CONFLICT in answer. */
    if (p->life != n->cfg.life_id && !n->left) {
        int answered = 0;
        for (size_t i = 0; i < p->nmsgs; i++)
            if (p->msgs[i].type == PROTO_CONFLICT && p->msgs[i].name.len == n->name_len &&
                memcmp(p->msgs[i].name.ptr, n->name, n->name_len) == 0) {
                on_conflict(n, from, p->life, p->msgs[i].uptime_ms);
                answered = 1;
            }
        if (!answered) {
            send_conflict(n, from, p->life);
            conflict_seen(n, from, p->life);
        }
    }
    return 1;
}

/* The sender's replay window and life (*c); 0, or -GOSSIP_EREPLAY for a
 * stale packet or a past life's (counted as a drop). */
static int receive__window(struct gossip_node *n, const struct gossip_addr *from,
                           const struct proto_packet *p, struct receive__ctx *c)
{
    /* Timestamp window: the sender's clock now is estimated as the newest
     * timestamp seen from it plus the time elapsed here since; a packet
     * stamped more than TS_WINDOW_NS before that is a replay, unless it
     * brings the sender's new incarnation (a restarted sender's clock may
     * start over). */
    struct member *snd = member_find(&n->t, p->sender.ptr, p->sender.len);
    int pushpull = 0;
    int newer_life = snd != NULL && p->incarnation > snd->incarnation;
    /* The window belongs to one life of the sender: a new life starts a new
     * window whatever its clock says (a host whose clock went back, or
     * another host), and a life it had before is a replay. */
    int other_life = 0;
    if (snd != NULL && p->life != snd->ts_life) {
        for (size_t i = 0; i < sizeof(snd->old_lives) / sizeof(snd->old_lives[0]); i++)
            if (snd->old_lives[i] != 0 && snd->old_lives[i] == p->life)
                return drop(n, GOSSIP_DROP_STALE, -GOSSIP_EREPLAY);
        /* Another life takes over the name (and the window) only when that
         * one is gone, or it is the life we already accepted (its alive
         * came first), or it outranks it (it refuted) from the same address
         * (a restart in place); until then its packets are read but move
         * nothing, so a second process with the name cannot push the live
         * one aside, whatever incarnation it reaches. */
        if (snd->ts_life == 0 || !is_live(snd) || p->life == snd->life ||
            (p->incarnation > snd->incarnation && gossip_addr_equal(from, &snd->addr)))
            newer_life = 1;
        else
            other_life = 1;
    }
    for (size_t i = 0; i < p->nmsgs; i++) {
        const struct proto_msg *m = &p->msgs[i];
        pushpull |= m->type == PROTO_PUSHPULL;
        if (snd != NULL && !other_life && m->type == PROTO_ALIVE && m->name.len == p->sender.len &&
            memcmp(m->name.ptr, p->sender.ptr, m->name.len) == 0 &&
            m->incarnation > snd->incarnation)
            newer_life = 1;
    }
    if (snd != NULL && snd->has_ts && !newer_life &&
        p->timestamp + (uint64_t)TS_WINDOW_NS < snd->max_ts + (uint64_t)(n->now - snd->max_ts_at))
        return drop(n, GOSSIP_DROP_STALE, -GOSSIP_EREPLAY);
    c->pushpull = pushpull;
    c->newer_life = newer_life;
    c->other_life = other_life;
    return 0;
}

/* Acts on each message of p (push-pulls come later: receive__pushpulls). */
static void receive__dispatch(struct gossip_node *n, const struct gossip_addr *from,
                              const struct proto_packet *p, int pushpull)
{
    for (size_t i = 0; i < p->nmsgs; i++) {
        const struct proto_msg *m = &p->msgs[i];
        switch (m->type) {
        case PROTO_PING:
            if (m->name.len == n->name_len && memcmp(m->name.ptr, n->name, n->name_len) == 0) {
                struct proto_msg ack = {.type = PROTO_ACK, .seq = m->seq};
                send_one(n, from, &ack);
            }
            break;
        case PROTO_PING_REQ:
            on_ping_req(n, from, m);
            break;
        case PROTO_ACK:
        case PROTO_NACK:
            on_ack(n, m->seq, m->type == PROTO_NACK);
            break;
        case PROTO_ALIVE:
            on_alive(n, m);
            break;
        case PROTO_SUSPECT:
            on_suspect(n, m->name.ptr, m->name.len, m->incarnation, m->life, m->from.ptr,
                       m->from.len);
            break;
        case PROTO_DEAD:
            /* A full-state dead entry only makes us suspect (the member may
             * still refute); gossip of a death is acted on directly. */
            if (pushpull) {
                uint32_t inc = n->self->incarnation;
                on_suspect(n, m->name.ptr, m->name.len, m->incarnation, m->life, m->from.ptr,
                           m->from.len);
                if (n->self->incarnation != inc)
                    n->revived_pending = 1; /* we refuted a death: see tick */
            } else
                on_dead(n, m->name.ptr, m->name.len, m->incarnation, m->life, 0, m->from.ptr,
                        m->from.len);
            break;
        case PROTO_LEFT:
            on_dead(n, m->name.ptr, m->name.len, m->incarnation, m->life, 1, NULL, 0);
            break;
        case PROTO_APP:
            on_app(n, m);
            break;
        case PROTO_PUSHPULL:
            break; /* after membership, below */
        case PROTO_DIRECT:
            n->st.direct_received++;
            n->st.direct_bytes_received += m->data_len;
            if (n->cfg.cb.on_direct != NULL) {
                char sender[GOSSIP_NAME_MAX + 1];
                memcpy(sender, p->sender.ptr, p->sender.len);
                sender[p->sender.len] = '\0';
                n->cfg.cb.on_direct(n->cfg.cb.ud, sender, m->data, m->data_len);
            }
            break;
        case PROTO_CONFLICT:
            break; /* only meaningful from our own name (above) */
        }
    }
}

/* What the packet says of its sender once its messages are applied: an
 * exchange with a member not counted live, the header as an alive message,
 * the replay window moved on.  Returns the sender as now known (or NULL). */
static struct member *receive__sender(struct gossip_node *n, const struct gossip_addr *from,
                                      const struct proto_packet *p, const struct receive__ctx *c)
{
    struct member *snd = member_find(&n->t, p->sender.ptr, p->sender.len);
    int pushpull = c->pushpull, newer_life = c->newer_life, other_life = c->other_life;
    if ((snd == NULL || snd->reaped || !is_live(snd)) && !pushpull && !n->left &&
        n->now >= n->next_stranger) {
        /* A sealed packet from a member we do not count as live (we
         * restarted and know only our seeds; it came back): exchange state
         * with it now rather than at the next periodic push-pull, seconds
         * away.  At most one such exchange per STRANGER_NS. */
        n->next_stranger = n->now + STRANGER_NS;
        pushpull_start(n, from);
    }
    if (snd != NULL && !other_life && p->incarnation > snd->incarnation &&
        (p->life == snd->life || gossip_addr_equal(from, &snd->addr))) {
        /* The header is the sender speaking for itself: as good as an alive
         * message, so a refutation rides on every packet it sends.  Only
         * for the life we know, or one at its address: another process
         * with the name speaks for its own life, not this one. */
        struct proto_msg alive = {.type = PROTO_ALIVE,
                                  .name = p->sender,
                                  .incarnation = p->incarnation,
                                  .life = p->life,
                                  .addr = snd->addr};
        on_alive(n, &alive);
    }
    if (snd != NULL && !other_life) {
        snd->last_heard = n->now;
        if (p->life != snd->ts_life) {
            if (snd->ts_life != 0) {
                memmove(snd->old_lives + 1, snd->old_lives,
                        sizeof(snd->old_lives) - sizeof(snd->old_lives[0]));
                snd->old_lives[0] = snd->ts_life;
            }
            snd->ts_life = p->life;
        }
        if (newer_life || !snd->has_ts || p->timestamp > snd->max_ts) {
            snd->max_ts = p->timestamp;
            snd->max_ts_at = n->now;
        }
        snd->has_ts = 1;
    }
    return snd;
}

/* Notes how long before this node the sender of a push-pull began its
 * life, from the sender's own entry among the packet's full state (its
 * ALIVE, with its uptime).  The entries were applied first (they come
 * before the push-pull in receive__dispatch), so a past life of ours that
 * the sender knew is already counted when its lead is. */
static void receive__elder(struct gossip_node *n, const struct proto_packet *p)
{
    int64_t ours = uptime_ms(n);
    for (size_t i = 0; i < p->nmsgs; i++) {
        const struct proto_msg *m = &p->msgs[i];
        if (m->type != PROTO_ALIVE || m->life != p->life || m->name.len != p->sender.len ||
            memcmp(m->name.ptr, p->sender.ptr, p->sender.len) != 0 || m->uptime_ms > INT64_MAX)
            continue;
        int64_t lead = (int64_t)m->uptime_ms - ours;
        if (lead > n->elder_lead_ms)
            n->elder_lead_ms = lead;
    }
}

/* Answers and merges the push-pull exchanges of p (snd: its sender). */
static void receive__pushpulls(struct gossip_node *n, const struct gossip_addr *from,
                               const struct proto_packet *p, struct member *snd)
{
    for (size_t i = 0; i < p->nmsgs; i++) {
        const struct proto_msg *m = &p->msgs[i];
        if (m->type != PROTO_PUSHPULL)
            continue;
        if (!(m->flags & PROTO_PP_REQUEST))
            n->joined = 1; /* an answer to our exchange: we know the cluster */
        receive__elder(n, p);
        if (m->data_len > 0 && n->cfg.cb.state_merge != NULL) {
            char sender[GOSSIP_NAME_MAX + 1];
            memcpy(sender, p->sender.ptr, p->sender.len);
            sender[p->sender.len] = '\0';
            n->st.state_chunks_merged++;
            n->cfg.cb.state_merge(n->cfg.cb.ud, sender, m->data, m->data_len);
        }
        /* Answer each request once, though all its packets ask.  A request
         * is named by (sender's incarnation, id): a restarted sender numbers
         * its requests from 1 again, and must still be answered. */
        if ((m->flags & PROTO_PP_REQUEST) && snd != NULL &&
            !(snd->pp_replied_valid && snd->pp_replied_xid == m->seq &&
              snd->pp_replied_life == p->life)) {
            snd->pp_replied_valid = 1;
            snd->pp_replied_xid = m->seq;
            snd->pp_replied_life = p->life;
            pushpull_send(n, from, m->seq, 0);
            if (!n->joined && n->now >= n->next_ask_back) {
                /* A peer joins us, but no exchange of ours has been
                 * answered: the first seed, whose own join went out before
                 * its peers ran.  Ask the peer back at once rather than at
                 * the next periodic push-pull (up to 30 s away), so this
                 * node counts as joined one round trip after it does.  At
                 * most one such exchange per STRANGER_NS; it stands for a
                 * join retry too. */
                n->next_ask_back = n->now + STRANGER_NS;
                n->next_join = n->now + JOIN_RETRY_NS;
                pushpull_start(n, from);
            }
        }
    }
}

int gossip_node_receive(struct gossip_node *n, const struct gossip_addr *from, const uint8_t *pkt,
                        size_t len, int64_t now_ns)
{
    if (now_ns > n->now)
        n->now = now_ns;
    n->st.packets_received++;
    n->st.bytes_received += len;
    int rc = receive__open(n, pkt, len);
    if (rc != 0)
        return rc;
    const struct proto_packet *p = &n->pkt;
    if (receive__from_self(n, from, p))
        return drop(n, GOSSIP_DROP_SELF, -GOSSIP_EPROTO);
    if (n->left)
        return drop(n, GOSSIP_DROP_LEFT, -GOSSIP_ESTATE);
    struct receive__ctx c;
    rc = receive__window(n, from, p, &c);
    if (rc != 0)
        return rc;
    receive__dispatch(n, from, p, c.pushpull);
    struct member *snd = receive__sender(n, from, p, &c);
    receive__pushpulls(n, from, p, snd);
    gossip_node_flush(n); /* replies the application queued from its callbacks */
    return 0;
}

/* ---- tick ---------------------------------------------------------------- */

static void gossip_round(struct gossip_node *n)
{
    struct member *peers[32];
    size_t k = (size_t)n->cfg.gossip_nodes;
    if (k > 32)
        k = 32;
    if (n->mq.n == 0 && n->aq.n == 0)
        return;
    k = pick_random(n, k, NULL, want_gossip, peers);
    for (size_t i = 0; i < k; i++) {
        struct pktbuf *pb = &n->out;
        pb_begin(n, pb);
        pb_piggyback(n, pb);
        if (pb->nmsgs == 0)
            return;
        pb_send(n, pb, &peers[i]->addr);
    }
}

static void reap(struct gossip_node *n)
{
    for (size_t i = 0; i < n->t.n;) {
        struct member *m = n->t.v[i];
        int gone = m->state == GOSSIP_MEMBER_DEAD || m->state == GOSSIP_MEMBER_LEFT;
        if (gone && !m->reaped && n->now - m->state_since >= n->cfg.dead_reap_ms * MS) {
            m->reaped = 1;
            n->view_version++;
            plist_remove(n, m);
            emit(n, GOSSIP_EVENT_REAP, m);
        }
        if (m->reaped && n->now - m->state_since >= n->cfg.tombstone_ms * MS) {
            member_remove(&n->t, m);
            continue; /* slot i now holds another member */
        }
        i++;
    }
}

/* 1 if a member other than this node, alive (not suspect), is at address a.
 * A suspect seed may be a dead one whose suspicion runs long (few
 * confirmations under Lifeguard) and that restarted meanwhile, knowing only
 * its seeds: it must be reached like a dead one. */
static int addr_of_alive_member(const struct gossip_node *n, const struct gossip_addr *a)
{
    for (size_t i = 0; i < n->t.n; i++) {
        const struct member *m = n->t.v[i];
        if (!m->is_self && m->state == GOSSIP_MEMBER_ALIVE && gossip_addr_equal(&m->addr, a))
            return 1;
    }
    return 0;
}

/* 1 if a member at address a stopped being alive less than SEED_LATE_NS
 * ago (suspect or dead since, not gone: a leave is not a restart). */
static int addr_of_late_member(const struct gossip_node *n, const struct gossip_addr *a)
{
    for (size_t i = 0; i < n->t.n; i++) {
        const struct member *m = n->t.v[i];
        if (!m->is_self && (m->state == GOSSIP_MEMBER_SUSPECT || m->state == GOSSIP_MEMBER_DEAD) &&
            n->now - m->state_since < SEED_LATE_NS && gossip_addr_equal(&m->addr, a))
            return 1;
    }
    return 0;
}

/* Whether a seed died lately (addr_of_late_member): seed_reconnect's pace. */
static int seed_died_lately(const struct gossip_node *n)
{
    for (size_t k = 0; k < n->nseeds; k++)
        if (!gossip_addr_equal(&n->seeds[k], &n->cfg.advertise) &&
            addr_of_late_member(n, &n->seeds[k]))
            return 1;
    return 0;
}

/* Every SEED_RETRY_NS (longer in a large cluster), one seed (in turn) that
 * is neither this node nor an alive member gets a push-pull.  Members believed
 * dead are tried at the periodic push-pull, but only until their tombstones
 * expire: a partition longer than that leaves two clusters that have
 * forgotten each other, each whole in its own eyes, and so does a cluster
 * whose nodes first met as separate islands (a partition at start-up).  The
 * seeds are how they meet again.  And not at the push-pull's pace (30 s):
 * seeds that were declared dead and restarted together know only each
 * other, take themselves as a new cluster (nobody they met knew their past
 * lives) and serve as one until the first exchange from any other member
 * names their past lives and merges them back; the interval is four times
 * shorter while a seed died lately, to keep that short.  One exchange per
 * interval, none while every seed is an alive member. */
static void seed_reconnect(struct gossip_node *n)
{
    for (size_t k = 0; k < n->nseeds; k++) {
        const struct gossip_addr *a = &n->seeds[n->seed_turn++ % n->nseeds];
        if (gossip_addr_equal(a, &n->cfg.advertise) || addr_of_alive_member(n, a))
            continue;
        pushpull_start(n, a);
        return;
    }
}

void gossip_node_tick(struct gossip_node *n, int64_t now_ns)
{
    if (now_ns > n->now)
        n->now = now_ns;
    int64_t now = n->now;

    if (n->join_pending || (n->nseeds > 0 && n->live <= 1 && !n->left && now >= n->next_join)) {
        n->join_pending = 0;
        n->next_join = now + JOIN_RETRY_NS;
        /* Not our own address: every node may list itself among the seeds
         * (one seed list for all), and our packet would only come back to
         * us as our own. */
        for (size_t i = 0; i < n->nseeds; i++)
            if (!gossip_addr_equal(&n->seeds[i], &n->cfg.advertise))
                pushpull_start(n, &n->seeds[i]);
    } else if (!n->joined && n->live > 1 && !n->left && now >= n->next_join) {
        /* Members know us, but no exchange of ours was answered yet (it was
         * lost, or went out before they ran): one live member gets one,
         * every JOIN_RETRY_NS until an answer comes. */
        struct member *peer;
        n->next_join = now + JOIN_RETRY_NS;
        if (pick_random(n, 1, NULL, want_live, &peer) == 1)
            pushpull_start(n, &peer->addr);
    }
    if (n->leave_pending) {
        /* Told directly to every live member (up to LEAVE_FANOUT), not left
         * to gossip alone: a member that misses it would suspect us, then
         * report us dead rather than gone. */
        struct member *peers[LEAVE_FANOUT];
        size_t k = 0;
        n->leave_pending = 0;
        for (size_t i = 0; i < n->t.n && k < LEAVE_FANOUT; i++)
            if (!n->t.v[i]->is_self && is_live(n->t.v[i]))
                peers[k++] = n->t.v[i];
        struct proto_msg msg = {.type = PROTO_LEFT,
                                .name = pstr(n->name, n->name_len),
                                .incarnation = n->self->incarnation,
                                .life = n->cfg.life_id};
        for (size_t i = 0; i < k; i++)
            send_one(n, &peers[i]->addr, &msg);
    }
    if (n->revived_pending && n->joined) {
        /* We refuted a verdict of death (or a leave of our name): members
         * that hold it neither probe nor gossip to us, and the refutation's
         * gossip, a few retransmissions, can miss some of them; they would
         * learn it only from our next packet to them, up to a probe round
         * away (longer under Lifeguard's slowed probes).  Tell every live
         * member directly (up to LEAVE_FANOUT; gossip tells the rest), once
         * the packet that accused us was read, so members it taught us are
         * told too, and not before our join is answered: a new life is
         * told of its death as its join is read, before the answer that
         * names the members. */
        struct member *peers[LEAVE_FANOUT];
        size_t k = 0;
        n->revived_pending = 0;
        for (size_t i = 0; i < n->t.n && k < LEAVE_FANOUT; i++)
            if (!n->t.v[i]->is_self && is_live(n->t.v[i]))
                peers[k++] = n->t.v[i];
        struct proto_msg msg;
        member_msg(n->self, n, &msg);
        if (!n->left && !n->conflict && msg.type == PROTO_ALIVE)
            for (size_t i = 0; i < k; i++)
                send_one(n, &peers[i]->addr, &msg);
    }
    if (!n->left) {
        struct probe *p = &n->probe;
        if (p->active && !p->acked && !p->indirect_sent && now >= p->timeout_at)
            probe_indirect(n);
        if (p->active && now >= p->end_at)
            probe_finish(n);
        if (now >= n->next_probe && !p->active)
            probe_start(n);
    }
    for (size_t i = 0; i < n->sn;) {
        struct member *m = n->sus[i];
        if (now >= m->susp_deadline && m->susp_check == 0 && !n->left &&
            !(m->probe_failed >= m->susp_start && unreachable_here(m))) {
            /* Others' word alone, none of our probes of it failed since:
             * probe it ourselves first (the ping carries the suspicion,
             * its ack the refutation), and judge two probe intervals
             * later (the probe running now may hold ours back one).  Its
             * refutation's gossip can miss us: after a healed partition
             * the queues are full of the verdicts each side made, and a
             * node that held a suspicion nobody else still held declared
             * a live member dead (one seed in 1,200 of
             * test_partition_heal_no_false_deaths, the member refuted 4 s
             * before, nothing from it in between).  A dead member fails
             * that probe and dies up to two probe intervals later than it
             * would.  Once per suspicion: then the timer rules. */
            m->susp_check = 1;
            m->susp_deadline = now + 2 * scaled(n, n->cfg.probe_interval_ms);
            if (!n->probe.active) {
                n->next_probe = now;
                probe_start(n);
            }
            i++;
            continue;
        }
        if (now >= m->susp_deadline) {
            /* removes m from sus */
            on_dead(n, m->name, m->name_len, m->incarnation, m->life, 0, NULL, 0);
            if (i < n->sn && n->sus[i] == m)
                sus_remove(n, m); /* never leave an expired deadline behind */
            continue;
        }
        i++;
    }
    if (n->nrelays > 0) {
        for (int i = 0; i < MAX_RELAYS; i++) {
            struct relay *r = &n->relays[i];
            if (r->used && now >= r->nack_at) {
                r->used = 0;
                n->nrelays--;
                if (r->want_nack && n->cfg.lifeguard) {
                    struct proto_msg nack = {.type = PROTO_NACK, .seq = r->their_seq};
                    send_one(n, &r->requester, &nack);
                }
            }
        }
    }
    if (now >= n->next_gossip) {
        n->next_gossip = now + n->cfg.gossip_interval_ms * MS;
        gossip_round(n);
    }
    if (!n->left && n->cfg.pushpull_interval_ms > 0 && now >= n->next_pushpull) {
        struct member *peer;
        /* memberlist scales the interval up in large clusters. */
        int64_t iv = n->cfg.pushpull_interval_ms * MS;
        for (size_t x = n->live; x > 32; x /= 2)
            iv += n->cfg.pushpull_interval_ms * MS / 2;
        n->next_pushpull = now + iv;
        if (pick_random(n, 1, NULL, want_live, &peer) == 1)
            pushpull_start(n, &peer->addr);
        /* Reconnect: also try one member we believe dead.  After a partition
         * heals, this is how the two sides find each other again (each side
         * thinks the other is dead and would otherwise never talk to it). */
        if (pick_random(n, 1, NULL, want_dead, &peer) == 1)
            pushpull_start(n, &peer->addr);
    }
    if (!n->left && n->nseeds > 0 && now >= n->next_seed) {
        int late = seed_died_lately(n);
        int64_t iv = (int64_t)n->live * (late ? SEED_FAST_PER_NS : SEED_RETRY_PER_NS);
        if (iv < (late ? SEED_FAST_NS : SEED_RETRY_NS))
            iv = late ? SEED_FAST_NS : SEED_RETRY_NS;
        /* Jittered by half an interval: the members' tries spread out. */
        n->next_seed = now + iv / 2 + (int64_t)(rnd(n) % (uint64_t)iv);
        seed_reconnect(n);
    }
    if (now >= n->next_reap) {
        n->next_reap = now + REAP_CHECK_NS;
        reap(n);
    }
    /* A claim on our name from another address that nobody answered for:
     * a previous life of ours that moved and is gone.  Take the name back. */
    if (n->claim_pending && now >= n->claim_deadline) {
        n->claim_pending = 0;
        if (!n->conflict)
            refute(n, n->claim_inc);
    }
    gossip_node_flush(n);
}

int64_t gossip_node_next_deadline(const struct gossip_node *n)
{
    int64_t d = n->next_gossip;
#define EARLIER(x)                                                                                 \
    do {                                                                                           \
        if ((x) < d)                                                                               \
            d = (x);                                                                               \
    } while (0)
    EARLIER(n->next_reap);
    if (n->join_pending || n->leave_pending || (n->revived_pending && n->joined))
        EARLIER(n->now);
    if (!n->left && ((n->nseeds > 0 && n->live <= 1) || (!n->joined && n->live > 1)))
        EARLIER(n->next_join);
    if (!n->left) {
        if (!n->probe.active) {
            EARLIER(n->next_probe);
        } else {
            EARLIER(n->probe.end_at);
            if (!n->probe.acked && !n->probe.indirect_sent)
                EARLIER(n->probe.timeout_at);
        }
        if (n->cfg.pushpull_interval_ms > 0)
            EARLIER(n->next_pushpull);
        if (n->nseeds > 0)
            EARLIER(n->next_seed);
    }
    for (size_t i = 0; i < n->sn; i++)
        EARLIER(n->sus[i]->susp_deadline);
    if (n->claim_pending)
        EARLIER(n->claim_deadline);
    if (n->nrelays > 0)
        for (int i = 0; i < MAX_RELAYS; i++)
            if (n->relays[i].used)
                EARLIER(n->relays[i].nack_at);
#undef EARLIER
    return d < n->now ? n->now : d;
}

/* ---- lifecycle and API ------------------------------------------------------ */

int gossip_node_create(const struct gossip_config *cfg, const struct gossip_io *io, int64_t now_ns,
                       struct gossip_node **out)
{
    size_t overhead;
    if (cfg == NULL || io == NULL || out == NULL || cfg->name == NULL || io->send == NULL ||
        io->random == NULL)
        return -GOSSIP_EINVAL;
    size_t name_len = strlen(cfg->name);
    overhead = cfg->keyring ? GOSSIP_KEYRING_OVERHEAD : 0;
    if (name_len == 0 || name_len > GOSSIP_NAME_MAX || cfg->mtu < overhead + 256 ||
        cfg->mtu > PKT_MAX || cfg->probe_interval_ms <= 0 || cfg->probe_timeout_ms <= 0 ||
        cfg->gossip_interval_ms <= 0 || cfg->awareness_max_multiplier < 1 ||
        cfg->suspicion_mult < 1 || cfg->suspicion_max_timeout_mult < 1 ||
        cfg->retransmit_mult < 1 || cfg->indirect_checks < 0 || cfg->gossip_nodes < 0)
        return -GOSSIP_EINVAL;
    struct gossip_node *n = calloc(1, sizeof(*n));
    if (n == NULL)
        return -GOSSIP_ENOMEM;
    n->cfg = *cfg;
    n->io = *io;
    memcpy(n->name, cfg->name, name_len + 1);
    n->name_len = name_len;
    n->cfg.name = n->name;
    n->plain_cap = cfg->mtu - overhead;
    n->now = now_ns;
    broadcast_init(&n->mq, cfg->member_queue_max);
    broadcast_init(&n->aq, cfg->app_queue_max);
    if (member_table_init(&n->t) != 0)
        goto fail;
    n->self = member_add(&n->t, n->name, name_len);
    if (n->self == NULL)
        goto fail;
    n->self->is_self = 1;
    n->self->incarnation = cfg->incarnation;
    while (n->cfg.life_id == 0)
        n->cfg.life_id = rnd(n);
    n->self->life = n->cfg.life_id;
    n->self->born_est = now_ns;
    n->born = now_ns;
    n->self->addr = cfg->advertise;
    n->self->state = GOSSIP_MEMBER_ALIVE;
    n->self->state_since = now_ns;
    n->live = 1;
    /* Spread first timers over one interval so a cluster started at once
     * does not probe in lockstep. */
    n->next_probe = now_ns + (int64_t)(rnd(n) % (uint64_t)(cfg->probe_interval_ms * MS));
    n->next_gossip = now_ns + (int64_t)(rnd(n) % (uint64_t)(cfg->gossip_interval_ms * MS));
    n->next_pushpull =
        now_ns + (cfg->pushpull_interval_ms > 0
                      ? (int64_t)(rnd(n) % (uint64_t)(cfg->pushpull_interval_ms * MS))
                      : 0);
    n->next_reap = now_ns + REAP_CHECK_NS;
    n->next_seed = now_ns + SEED_RETRY_NS;
    broadcast_member(n, n->self);
    *out = n;
    return 0;
fail:
    gossip_node_destroy(n);
    return -GOSSIP_ENOMEM;
}

void gossip_node_destroy(struct gossip_node *n)
{
    if (n == NULL)
        return;
    member_table_free(&n->t);
    broadcast_free(&n->mq);
    broadcast_free(&n->aq);
    free(n->plist);
    free(n->sus);
    for (size_t i = 0; i < n->dn; i++)
        free(n->dq[i].pb);
    free(n->dq);
    free(n);
}

static void wakeup(struct gossip_node *n)
{
    if (n->io.wakeup != NULL)
        n->io.wakeup(n->io.ctx);
}

int gossip_node_join(struct gossip_node *n, const struct gossip_addr *seeds, size_t count)
{
    if (count > MAX_SEEDS || (count > 0 && seeds == NULL))
        return -GOSSIP_EINVAL;
    if (n->left)
        return -GOSSIP_ESTATE;
    if (count > 0)
        memcpy(n->seeds, seeds, count * sizeof(*seeds));
    n->nseeds = count;
    n->join_pending = count > 0;
    n->next_join = n->now;
    wakeup(n);
    return 0;
}

int gossip_node_leave(struct gossip_node *n)
{
    if (n->left)
        return -GOSSIP_ESTATE;
    if (n->conflict) {
        /* We yielded the name: the leave would be read as the incumbent's.
         * Stop quietly; there is nothing to announce. */
        n->left = 1;
        n->probe.active = 0;
        return -GOSSIP_ESTATE;
    }
    set_state(n, n->self, GOSSIP_MEMBER_LEFT);
    broadcast_member(n, n->self);
    n->left = 1;
    n->leave_pending = 1;
    n->probe.active = 0;
    wakeup(n);
    return 0;
}

size_t gossip_node_max_payload(const struct gossip_node *n)
{
    /* header + APP message framing (array, type, origin, incarnation, seq,
     * bin32 header) must fit too. */
    size_t framing = PROTO_HEADER_MAX + 1 + 1 + 2 + GOSSIP_NAME_MAX + 5 + 9 + 5;
    return n->plain_cap > framing ? n->plain_cap - framing : 0;
}

int gossip_node_broadcast(struct gossip_node *n, const uint8_t *payload, size_t len)
{
    uint8_t buf[PKT_MAX];
    size_t enc;
    if (n->left)
        return -GOSSIP_ESTATE;
    if (len > gossip_node_max_payload(n) || (len > 0 && payload == NULL))
        return -GOSSIP_ETOOBIG;
    struct proto_msg m = {.type = PROTO_APP,
                          .name = pstr(n->name, n->name_len),
                          .incarnation = n->self->incarnation,
                          .app_seq = ++n->app_seq,
                          .data = payload,
                          .data_len = len};
    int rc = proto_encode_msg(&m, buf, sizeof(buf), &enc);
    if (rc != 0)
        return rc;
    rc = broadcast_push(&n->aq, 0, buf, enc);
    if (rc != 0)
        return rc;
    n->st.app_queued++;
    n->st.app_dropped = n->aq.dropped;
    wakeup(n);
    return 0;
}

int gossip_node_members(const struct gossip_node *n,
                        int (*fn)(void *ud, const struct gossip_member_info *m), void *ud)
{
    struct gossip_member_info info;
    for (size_t i = 0; i < n->t.n; i++) {
        if (n->t.v[i]->reaped)
            continue;
        member_info(n->t.v[i], &info);
        int rc = fn(ud, &info);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int gossip_node_member(const struct gossip_node *n, const char *name,
                       struct gossip_member_info *out)
{
    const struct member *m = member_find(&n->t, name, strlen(name));
    if (m == NULL || m->reaped)
        return -GOSSIP_ENOENT;
    member_info(m, out);
    return 0;
}

size_t gossip_node_num_live(const struct gossip_node *n)
{
    return n->live;
}

const char *gossip_node_name(const struct gossip_node *n)
{
    return n->name;
}

uint32_t gossip_node_incarnation(const struct gossip_node *n)
{
    return n->self->incarnation;
}

int gossip_node_health(const struct gossip_node *n)
{
    return n->awareness;
}

void gossip_node_stats(const struct gossip_node *n, struct gossip_stats *out)
{
    *out = n->st;
    out->health = (uint64_t)(n->awareness > 0 ? n->awareness : 0);
}
