/*
 * readiness: see readiness.h.  The checks, in the order they win:
 *
 *   --join without --gossip-bind    alone: the seeds are never contacted
 *   never joined, peers' packets    refused: they fail authentication here
 *     fail authentication here
 *   never joined                    alone: no seed has answered
 *   no other member alive           alone (saying so when packets go out
 *                                   and none has been accepted for
 *                                   SILENT_NS, with a warning)
 *   live members seen <= half       partitioned
 *   UNANSWERED probes in a row      unreachable: this node hears the
 *     failed, health >= LOW_HEALTH    others but they do not hear it (an
 *                                     egress firewall, or a cluster key it
 *                                     seals with that they lack): they have
 *                                     it dead while it sees them alive
 *   replica not synced              not_synced
 *
 * "Members seen" are the names this node has seen alive or suspect within
 * FORGET_NS (a name that leaves gracefully is dropped at once: it said so),
 * self included, so a crashed member counts against the majority until it is
 * forgotten, as a partitioned one must.
 */
#include "readiness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "gossip/gossip.h"
#include "log.h"
#include "num.h"
#include "replica.h"
#include "sluice/error.h"

#define EVAL_NS    (250 * NUM_NS_PER_MS)
#define FORGET_NS  (600 * NUM_NS_PER_S) /* as libgossip's tombstones */
#define GRACE_NS   (5 * NUM_NS_PER_S)   /* a join takes a round trip; warn after this */
#define SILENT_NS  (15 * NUM_NS_PER_S)  /* sending and hearing nothing this long */
#define AUTH_NS    (60 * NUM_NS_PER_S)  /* authentication failures this recent count */
#define WARN_NS    (60 * NUM_NS_PER_S)  /* one warning of a kind per minute */
#define REASON_MAX 256
/* Probes failing in a row, each after its indirect probes through others
 * failed too (at 10% packet loss on every link one probe fails about once
 * in 130), while Lifeguard's health score says the nacks of the members
 * asked to relay are missing as well (0..7; it stays under 4 at 10% loss
 * in the simulator, and reaches 7 within two probes when nobody hears this
 * node, before they declare it dead). */
#define UNANSWERED 2
#define LOW_HEALTH 4

struct readiness__seen {
    char name[GOSSIP_NAME_MAX + 1];
    int64_t last_live;
    int live; /* alive or suspect at the last evaluation */
};

enum readiness__warn { WARN_NOBIND, WARN_SEEDS, WARN_SILENT, WARN_AUTH, WARN_UNREACHED, WARN_MAX_ };

struct readiness {
    struct cluster *cluster;
    char *join;
    size_t nseeds; /* addresses in join */
    int64_t started, next_eval;
    int ready;
    char reason[REASON_MAX];
    struct readiness__seen *seen;
    size_t nseen, capseen;
    uint64_t accepted, sent, auth_drops;
    int64_t accepted_at; /* last time an accepted packet arrived (or start) */
    int64_t auth_at;     /* last time a packet failed authentication (0: never) */
    int ever_joined;
    int draining; /* readiness_set_draining: overrides the rest */
    int64_t warned_at[WARN_MAX_];
    int warned[WARN_MAX_];
};

int readiness_create(const struct readiness_config *cfg, int64_t now_ns, struct readiness **out)
{
    struct readiness *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -SLUICE_ENOMEM;
    r->cluster = cfg != NULL ? cfg->cluster : NULL;
    if (cfg != NULL && cfg->join != NULL && cfg->join[0] != '\0') {
        r->join = strdup(cfg->join);
        if (r->join == NULL) {
            free(r);
            return -SLUICE_ENOMEM;
        }
        r->nseeds = 1;
        for (const char *p = r->join; *p != '\0'; p++)
            r->nseeds += *p == ',';
    }
    r->started = now_ns;
    r->accepted_at = now_ns;
    r->ready = 1;
    strcpy(r->reason, "none");
    *out = r;
    readiness_tick(r, now_ns);
    return 0;
}

void readiness_destroy(struct readiness *r)
{
    if (r == NULL)
        return;
    free(r->seen);
    free(r->join);
    free(r);
}

/* Logs one warning of kind k unless one was logged within WARN_NS. */
static int readiness__due(struct readiness *r, enum readiness__warn k, int64_t now)
{
    if (r->warned[k] && now - r->warned_at[k] < WARN_NS)
        return 0;
    r->warned[k] = 1;
    r->warned_at[k] = now;
    return 1;
}

static struct readiness__seen *readiness__find(struct readiness *r, const char *name)
{
    for (size_t i = 0; i < r->nseen; i++)
        if (strcmp(r->seen[i].name, name) == 0)
            return &r->seen[i];
    return NULL;
}

static void readiness__forget(struct readiness *r, struct readiness__seen *s)
{
    *s = r->seen[--r->nseen];
}

struct readiness__walk {
    struct readiness *r;
    int64_t now;
};

static int readiness__member(void *ud, const struct gossip_member_info *m)
{
    struct readiness__walk *w = ud;
    struct readiness *r = w->r;
    struct readiness__seen *s = readiness__find(r, m->name);
    int live = m->state == GOSSIP_MEMBER_ALIVE || m->state == GOSSIP_MEMBER_SUSPECT;
    if (m->state == GOSSIP_MEMBER_LEFT) {
        if (s != NULL)
            readiness__forget(r, s); /* it left on purpose: not a missing member */
        return 0;
    }
    if (s == NULL) {
        if (!live)
            return 0; /* dead before we ever saw it alive: not ours to count */
        if (r->nseen == r->capseen) {
            size_t cap = r->capseen ? 2 * r->capseen : 16;
            struct readiness__seen *v = realloc(r->seen, cap * sizeof(*v));
            if (v == NULL)
                return 0; /* counted at the next evaluation */
            r->seen = v;
            r->capseen = cap;
        }
        s = &r->seen[r->nseen++];
        snprintf(s->name, sizeof(s->name), "%s", m->name);
    }
    if (live)
        s->last_live = w->now;
    return 0;
}

static void readiness__set(struct readiness *r, int ready, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void readiness__set(struct readiness *r, int ready, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
    va_end(ap);
    r->ready = ready;
}

/* Without gossip: ready, unless seeds were named (--join without
 * --gossip-bind: the operator meant a cluster and got a lone node). */
static void readiness__alone_node(struct readiness *r, int64_t now)
{
    if (r->join == NULL) {
        readiness__set(r, 1, "none");
        return;
    }
    readiness__set(r, 0, "alone: --join is set but --gossip-bind is not, so no seed is contacted");
    if (readiness__due(r, WARN_NOBIND, now))
        log_warn("cluster: --join %s is set without --gossip-bind: this node runs alone and "
                 "never contacts the seeds; add --gossip-bind IP:PORT (and "
                 "--cluster-key-file) to join the cluster, or drop --join",
                 r->join);
}

void readiness_tick(struct readiness *r, int64_t now)
{
    if (r == NULL || now < r->next_eval)
        return;
    r->next_eval = now + EVAL_NS;
    struct gossip_node *g = cluster_gossip(r->cluster);
    if (g == NULL) {
        readiness__alone_node(r, now);
        return;
    }
    struct gossip_stats st;
    gossip_node_stats(g, &st);
    uint64_t dropped = 0;
    for (int i = 0; i < GOSSIP_DROP_MAX_; i++)
        dropped += st.drops[i];
    uint64_t accepted = st.packets_received > dropped ? st.packets_received - dropped : 0;
    uint64_t auth = st.drops[GOSSIP_DROP_AUTH] + st.drops[GOSSIP_DROP_NOKEY];
    if (accepted != r->accepted) {
        r->accepted = accepted;
        r->accepted_at = now;
        r->sent = st.packets_sent; /* sent since the last packet heard */
    }
    if (auth != r->auth_drops) {
        r->auth_drops = auth;
        r->auth_at = now;
    }
    /* Joined: an exchange we started was answered, or another member is
     * alive (the first seed's own join goes out before its peers run; they
     * join it instead, and its own exchange is answered a round trip
     * later, or at its 2 s retry under loss). */
    r->ever_joined |= gossip_node_joined(g, NULL) || gossip_node_num_live(g) > 1;

    struct readiness__walk w = {r, now};
    gossip_node_members(g, readiness__member, &w);
    size_t seen = 0, live = 0;
    for (size_t i = 0; i < r->nseen;) {
        struct readiness__seen *s = &r->seen[i];
        if (now - s->last_live > FORGET_NS) {
            readiness__forget(r, s);
            continue;
        }
        seen++;
        live += s->last_live == now;
        i++;
    }
    size_t nlive = gossip_node_num_live(g);
    int authfail = r->auth_at != 0 && now - r->auth_at < AUTH_NS;
    uint64_t unanswered = st.packets_sent - r->sent;
    int silent = now - r->accepted_at >= SILENT_NS && unanswered > 0;
    int64_t quiet_s = (now - r->accepted_at) / NUM_NS_PER_S;

    if (r->join != NULL && !r->ever_joined) {
        if (authfail) {
            readiness__set(r, 0,
                           "refused: packets from peers fail authentication here (this node's "
                           "cluster key or label differs from theirs)");
            /* cluster.c already logs the drops with their count. */
        } else {
            readiness__set(r, 0, "alone: no seed has answered yet (%zu named in --join)",
                           r->nseeds);
            if (now - r->started >= GRACE_NS && readiness__due(r, WARN_SEEDS, now))
                log_warn("cluster: no seed has answered in %lld s (--join %s): check the "
                         "addresses, that the seeds run and are reachable over UDP, and that "
                         "--cluster-key-file holds their key (peers drop packets sealed with "
                         "another key or label without an answer)",
                         (long long)((now - r->started) / NUM_NS_PER_S), r->join);
        }
        return;
    }
    if (nlive <= 1 && (r->join != NULL || seen > 1)) {
        if (silent) {
            readiness__set(r, 0,
                           "alone: %llu packets sent in %lld s and none answered (peers down "
                           "or this node's cluster key or label differs from theirs)",
                           (unsigned long long)unanswered, (long long)quiet_s);
            if (readiness__due(r, WARN_SILENT, now))
                log_warn("cluster: %llu packets sent in %lld s and none answered: the peers are "
                         "down or unreachable, or drop this node's packets because its cluster "
                         "key or label differs from theirs (compare --cluster-key-file with "
                         "theirs)",
                         (unsigned long long)unanswered, (long long)quiet_s);
        } else {
            readiness__set(r, 0, "alone: no other member is alive (%zu seen)", seen);
        }
        return;
    }
    if (seen > 1 && 2 * live <= seen) {
        readiness__set(r, 0,
                       "partitioned: %zu of the %zu members seen in the last %d s are alive (a "
                       "majority is needed)",
                       live, seen, (int)(FORGET_NS / NUM_NS_PER_S));
        return;
    }
    if (st.probe_fail_streak >= UNANSWERED && st.health >= LOW_HEALTH) {
        readiness__set(r, 0,
                       "unreachable: the last %llu probes of other members went unanswered, "
                       "directly and through others (they may not hear this node: a firewall, "
                       "or a cluster key or label they do not hold)",
                       (unsigned long long)st.probe_fail_streak);
        if (readiness__due(r, WARN_UNREACHED, now))
            log_warn("cluster: the last %llu probes of other members went unanswered while their "
                     "packets arrive here: they do not hear this node, and declare it dead; check "
                     "that its packets reach them (firewall, --advertise) and that they hold the "
                     "key this node seals with (the key marked use in --cluster-key-file)",
                     (unsigned long long)st.probe_fail_streak);
        return;
    }
    struct replica *rep = cluster_replica(r->cluster);
    if (rep != NULL && !replica_synced(rep)) {
        readiness__set(r, 0,
                       "not_synced: waiting for the owners' state of global keys (after a "
                       "restart)");
        return;
    }
    readiness__set(r, 1, "none");
}

void readiness_set_draining(struct readiness *r)
{
    if (r != NULL)
        r->draining = 1;
}

int readiness_ready(const struct readiness *r)
{
    return r == NULL || (r->ready && !r->draining);
}

const char *readiness_state(const struct readiness *r)
{
    return readiness_ready(r) ? "ok" : "not_ready";
}

const char *readiness_reason(const struct readiness *r)
{
    if (r != NULL && r->draining)
        return "draining: shutting down after SIGTERM, still answering until the drain period "
               "ends";
    return r == NULL ? "none" : r->reason;
}
