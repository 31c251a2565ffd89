/*
 * fleetsim: global limits at fleet scale in one process.  N replicas
 * (global/replica.h) on a simulated message network (latency, jitter, loss,
 * partitions), K global keys each hammered from every node at a skewed
 * demand, and one oracle per key: a single GCRA that sees every request the
 * cluster receives, in time order.  Membership is given to each node
 * directly (the simulator knows who is alive), after a detection delay, as
 * libgossip would report it; libgossip itself is tested on its own.
 *
 * Time moves in 1 ms steps.  Requests are Poisson per (node, key) stream,
 * kept on a timing wheel, so a step costs what arrives in it.  Each node
 * may run on its own clock offset (a skewed host): the replica only ever
 * sees its own clock.  Everything random comes from the seed.
 */
#ifndef SLUICE_FLEETSIM_H
#define SLUICE_FLEETSIM_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "replica.h"
#include "testutil.h"

#define FS_SEC       1000000000LL
#define FS_MSEC      1000000LL
#define FS_WHEEL     8192 /* ms slots; arrivals further out wait a turn */
#define FS_ORC_WORDS 16   /* int64 words of oracle state per key (precision <= 14) */

struct fs_cfg {
    int n;                    /* nodes */
    int keys;                 /* global keys, each busy on every node */
    double demand;            /* per key: total demand / limit rate */
    double skew;              /* node i's demand weight ~ 1 / (i + 1)^skew */
    enum algo_kind kind;      /* every key's algorithm (gcra by default) */
    int64_t burst;            /* per key (gcra, token-bucket) */
    int64_t rate_lo, rate_hi; /* per key: units per period, uniform */
    int64_t period_ns;        /* the keys' period; 0 = 1 s */
    double loss;              /* message loss */
    int64_t latency_ns, jitter_ns;
    int64_t interval_ns;
    int64_t seconds;   /* simulated */
    int64_t detect_ns; /* membership change seen after this */
    enum policy_partition pol;
    uint64_t seed;
    /* events (0 = none) */
    int64_t part_at, part_len;
    int split; /* [0,split) | [split,n) */
    int64_t kill_at, restart_at;
    int victims;     /* nodes 0..victims-1 */
    int64_t join_at; /* node n-1 absent until then */
    int64_t leave_at;
    int leaver; /* graceful leave */
    int64_t die_at;
    int dier; /* crash, no restart */
    int64_t skew_node;
    int64_t skew_ns; /* node skew_node's clock offset */
    int64_t skew_node2;
    int64_t skew2_ns;
    int64_t burst_at;
    int burst_each;         /* every node, every key, at once */
    int64_t restart_window; /* restarted_ok counts this long */
    /* A cluster started from nothing: every node starts young, sees only
     * itself until cold_start_ns (gossip converging), then everyone, and is told
     * it is new (what a node joining as a new member learns). */
    int64_t cold_start_ns;
    /* The side of a partition with fewer than half the nodes suspects the
     * others as early as the majority does but declares them dead this
     * much later (0: at the same time), as a real node's detector does
     * when it fails most of its probes (Lifeguard stretches its
     * suspicions); from the majority's verdict on, it marks the members
     * it cannot reach quiet meanwhile, as cluster.c does for members not
     * heard from lately. */
    int64_t minority_lag_ns;
    /* A load balancer in front: a dead node's clients are sent to a live
     * node drawn at random, request by request (0: they get no answer). */
    int redirect;
    int trace; /* print cumulative admitted and oracle every 250 ms */
};

struct fs_msg {
    int64_t at;
    int from, to;
    size_t len;
    uint8_t *buf;
};

struct fs_stream {
    int node, key;
    double lambda; /* per ns */
    int64_t next;
};

struct fs_node {
    struct replica *r;
    char name[32];
    int up, member; /* running; in the cluster (joined, not left) */
    int64_t offset; /* clock offset */
    int64_t next_tick;
    int64_t down_since, up_since;
    uint64_t life;
};

struct fleetsim {
    struct fs_cfg c;
    uint64_t rng;
    struct fs_node *nd;
    char **keyname;
    struct algo_params *kp;
    int64_t *orc_state; /* oracle state per key (FS_ORC_WORDS words) */
    uint64_t *orc_ok, *ok, *req;
    uint64_t *win_ok, *win_orc; /* inside the partition window */
    uint64_t win_side_ok[2];    /* ... admitted by nodes [0, split) and the others */
    /* The "above" measure per key: x = admitted - rate x t, its least value
     * before an admission so far, and the largest excess of any window over
     * the limit's envelope (rate x window + burst + 1), in units. */
    double *ab_x, *ab_min, *ab_excess;
    struct fs_stream *st;
    size_t nst;
    /* timing wheel of stream indices */
    uint32_t **slot;
    size_t *slot_n, *slot_cap;
    /* messages: binary heap by time */
    struct fs_msg *q;
    size_t nq, capq;
    int64_t now, t0; /* now: the simulation's clock; t0: the scenario's start */
    uint64_t bytes_sent, msgs_sent, msgs_lost;
    int view_dirty;
    int64_t view_at;
    /* restart check: what restarted nodes admit in their first second */
    uint64_t restarted_ok;
    /* the same window: what every node admitted, and what one central
     * GCRA admitted of every node's requests */
    uint64_t restart_window_all, restart_window_orc;
    double restarted_share_bound;
};

static inline double fs_rand01(struct fleetsim *s)
{
    return (double)(test_rand(&s->rng) >> 11) * (1.0 / 9007199254740992.0);
}

static inline int64_t fs_exp(struct fleetsim *s, double lambda)
{
    double u = fs_rand01(s);
    if (u < 1e-12)
        u = 1e-12;
    double t = -log(u) / lambda;
    return t > 1e17 ? (int64_t)1e17 : (int64_t)t + 1;
}

static inline void fs_slot_push(struct fleetsim *s, uint32_t stream)
{
    int64_t ms = s->st[stream].next / FS_MSEC;
    size_t i = (size_t)(ms % FS_WHEEL);
    if (s->slot_n[i] == s->slot_cap[i]) {
        size_t nc = s->slot_cap[i] ? s->slot_cap[i] * 2 : 16;
        s->slot[i] = realloc(s->slot[i], nc * sizeof(uint32_t));
        s->slot_cap[i] = nc;
    }
    s->slot[i][s->slot_n[i]++] = stream;
}

/* ---- network ---- */

static inline int fs_reachable(const struct fleetsim *s, int a, int b, int64_t t)
{
    if (!s->nd[a].up || !s->nd[b].up)
        return 0;
    t -= s->t0;
    if (s->c.part_len > 0 && t >= s->c.part_at && t < s->c.part_at + s->c.part_len)
        return (a < s->c.split) == (b < s->c.split);
    return 1;
}

static inline void fs_q_push(struct fleetsim *s, struct fs_msg m)
{
    if (s->nq == s->capq) {
        s->capq = s->capq ? s->capq * 2 : 1024;
        s->q = realloc(s->q, s->capq * sizeof(*s->q));
    }
    size_t i = s->nq++;
    while (i > 0 && s->q[(i - 1) / 2].at > m.at) {
        s->q[i] = s->q[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->q[i] = m;
}

static inline struct fs_msg fs_q_pop(struct fleetsim *s)
{
    struct fs_msg top = s->q[0], last = s->q[--s->nq];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->nq)
            break;
        if (c + 1 < s->nq && s->q[c + 1].at < s->q[c].at)
            c++;
        if (s->q[c].at >= last.at)
            break;
        s->q[i] = s->q[c];
        i = c;
    }
    if (s->nq > 0)
        s->q[i] = last;
    return top;
}

struct fs_sender {
    struct fleetsim *s;
    int from;
};
static struct fs_sender fs_senders[1024];

static inline int fs_send(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    struct fs_sender *x = ud;
    struct fleetsim *s = x->s;
    int dst = atoi(to + 1); /* names are "n<i>" */
    s->bytes_sent += len;
    s->msgs_sent++;
    if (dst < 0 || dst >= s->c.n || fs_rand01(s) < s->c.loss) {
        s->msgs_lost++;
        return 0;
    }
    struct fs_msg m = {s->now + s->c.latency_ns + (int64_t)(fs_rand01(s) * (double)s->c.jitter_ns),
                       x->from, dst, len, malloc(len)};
    memcpy(m.buf, buf, len);
    fs_q_push(s, m);
    return 0;
}

/* ---- membership: each node sees who it can reach, after detect_ns ---- */

/* Whether nodes i and j are on two sides of the partition at t (ns since
 * the start). */
static inline int fs_cut(const struct fleetsim *s, int64_t t, int i, int j)
{
    return s->c.part_len > 0 && t >= s->c.part_at && t < s->c.part_at + s->c.part_len &&
           (i < s->c.split) != (j < s->c.split);
}

/* Whether node i is on the side of the partition with fewer than half
 * the nodes. */
static inline int fs_minority(const struct fleetsim *s, int i)
{
    int side = i < s->c.split ? s->c.split : s->c.n - s->c.split;
    return s->c.part_len > 0 && 2 * side < s->c.n;
}

static inline void fs_views(struct fleetsim *s)
{
    int64_t t0 = s->now - s->t0 - s->c.detect_ns; /* what failure detection reports now */
    struct replica_member *m = malloc((size_t)s->c.n * sizeof(*m));
    int alone = s->c.cold_start_ns > 0 && s->now - s->t0 < s->c.cold_start_ns;
    for (int i = 0; i < s->c.n; i++) {
        if (!s->nd[i].up)
            continue;
        int64_t lag = fs_minority(s, i) ? s->c.minority_lag_ns : 0;
        int64_t t = t0 - lag; /* its verdicts */
        size_t k = 0;
        int complete = 1;
        for (int j = 0; j < s->c.n; j++) {
            if ((!s->nd[j].member || alone) && j != i)
                continue;
            /* reach: as failure detection reports it now (detect_ns
             * late); sure: still reachable half of that later, else a
             * suspect (suspected before it is declared, as SWIM does). */
            int reach, sure;
            int64_t h = s->c.detect_ns / 2;
            if (j == i) {
                reach = sure = 1;
            } else if (s->nd[j].up) {
                reach = !fs_cut(s, t, i, j);
                sure = !fs_cut(s, t0 + h, i, j);
            } else {
                reach = s->now - s->nd[j].down_since < s->c.detect_ns;
                sure = s->now - s->nd[j].down_since < h;
            }
            if (!reach)
                complete = 0;
            m[k].name = s->nd[j].name;
            m[k].live = reach;
            m[k].suspect = reach && !sure;
            /* Cut off since the majority's verdict, not declared yet. */
            m[k].quiet = lag > 0 && reach && j != i && s->nd[j].up && fs_cut(s, t0, i, j);
            k++;
        }
        replica_set_view(s->nd[i].r, m, k, complete, s->now + s->nd[i].offset);
    }
    free(m);
}

static inline int fs_start_node(struct fleetsim *s, int i, int64_t young)
{
    struct replica_config rc = {0};
    rc.node_name = s->nd[i].name;
    rc.life_id = test_rand(&s->rng);
    rc.interval_ns = s->c.interval_ns;
    rc.default_policy = s->c.pol;
    rc.young_ns = young;
    rc.send = fs_send;
    fs_senders[i].s = s;
    fs_senders[i].from = i;
    rc.send_ud = &fs_senders[i];
    s->nd[i].life = rc.life_id;
    int rc2 = replica_create(&s->nd[i].r, &rc, s->now + s->nd[i].offset);
    if (rc2 != 0)
        return rc2;
    s->nd[i].up = 1;
    s->nd[i].up_since = s->now;
    s->nd[i].next_tick = s->now + (int64_t)(fs_rand01(s) * (double)s->c.interval_ns);
    return 0;
}

static inline void fs_stop_node(struct fleetsim *s, int i)
{
    replica_destroy(s->nd[i].r);
    s->nd[i].r = NULL;
    s->nd[i].up = 0;
    s->nd[i].down_since = s->now;
}

static inline int fs_init(struct fleetsim *s, const struct fs_cfg *c)
{
    memset(s, 0, sizeof(*s));
    s->c = *c;
    if (c->n > 1024)
        return -1;
    s->rng = c->seed ? c->seed : 1;
    s->now = s->t0 = 2 * 3600 * FS_SEC; /* room for clocks an hour behind */
    s->nd = calloc((size_t)c->n, sizeof(*s->nd));
    s->keyname = calloc((size_t)c->keys, sizeof(char *));
    s->kp = calloc((size_t)c->keys, sizeof(*s->kp));
    s->orc_state = calloc((size_t)c->keys * FS_ORC_WORDS, sizeof(int64_t));
    s->orc_ok = calloc((size_t)c->keys, sizeof(uint64_t));
    s->ok = calloc((size_t)c->keys, sizeof(uint64_t));
    s->req = calloc((size_t)c->keys, sizeof(uint64_t));
    s->win_ok = calloc((size_t)c->keys, sizeof(uint64_t));
    s->win_orc = calloc((size_t)c->keys, sizeof(uint64_t));
    s->ab_x = calloc((size_t)c->keys, sizeof(double));
    s->ab_min = calloc((size_t)c->keys, sizeof(double));
    s->ab_excess = calloc((size_t)c->keys, sizeof(double));
    s->slot = calloc(FS_WHEEL, sizeof(uint32_t *));
    s->slot_n = calloc(FS_WHEEL, sizeof(size_t));
    s->slot_cap = calloc(FS_WHEEL, sizeof(size_t));
    for (int i = 0; i < c->n; i++) {
        snprintf(s->nd[i].name, sizeof(s->nd[i].name), "n%d", i);
        s->nd[i].member = !(c->join_at > 0 && i == c->n - 1);
        if (i == c->skew_node && c->skew_ns != 0)
            s->nd[i].offset = c->skew_ns;
        if (i == c->skew_node2 && c->skew2_ns != 0)
            s->nd[i].offset = c->skew2_ns;
        if (s->nd[i].member && fs_start_node(s, i, c->cold_start_ns > 0 ? -1 : 0) != 0)
            return -1;
    }
    double wsum = 0;
    for (int i = 0; i < c->n; i++)
        wsum += 1.0 / pow((double)(i + 1), c->skew);
    s->st = calloc((size_t)c->n * (size_t)c->keys, sizeof(*s->st));
    for (int k = 0; k < c->keys; k++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "tenant:%d:api", k);
        s->keyname[k] = strdup(buf);
        int64_t rate = c->rate_lo + (int64_t)(fs_rand01(s) * (double)(c->rate_hi - c->rate_lo + 1));
        if (rate > c->rate_hi)
            rate = c->rate_hi;
        int64_t period = c->period_ns > 0 ? c->period_ns : FS_SEC;
        if (algo_params_init(&s->kp[k], c->kind, c->burst, rate, period, 0) != 0 ||
            algo_state_size(&s->kp[k]) > FS_ORC_WORDS * sizeof(int64_t))
            return -1;
        algo_init(&s->kp[k], &s->orc_state[(size_t)k * FS_ORC_WORDS]);
        for (int i = 0; i < c->n; i++) {
            struct fs_stream *x = &s->st[s->nst];
            x->node = i;
            x->key = k;
            x->lambda = c->demand * (double)rate / (double)period *
                        (1.0 / pow((double)(i + 1), c->skew)) / wsum;
            x->next = s->now + fs_exp(s, x->lambda);
            fs_slot_push(s, (uint32_t)s->nst);
            s->nst++;
        }
    }
    s->view_dirty = 1;
    return 0;
}

static inline void fs_destroy(struct fleetsim *s)
{
    for (int i = 0; i < s->c.n; i++)
        replica_destroy(s->nd[i].r);
    for (int k = 0; k < s->c.keys; k++)
        free(s->keyname[k]);
    for (size_t i = 0; i < FS_WHEEL; i++)
        free(s->slot[i]);
    for (size_t i = 0; i < s->nq; i++)
        free(s->q[i].buf);
    free(s->q);
    free(s->slot);
    free(s->slot_n);
    free(s->slot_cap);
    free(s->st);
    free(s->nd);
    free(s->keyname);
    free(s->kp);
    free(s->orc_state);
    free(s->orc_ok);
    free(s->ok);
    free(s->req);
    free(s->win_ok);
    free(s->win_orc);
    free(s->ab_x);
    free(s->ab_min);
    free(s->ab_excess);
}

/* Units a key's limit admits at once: burst + 1 for the buckets, the count
 * for the windows. */
static inline double fs_key_limit(const struct fleetsim *s, int k)
{
    return algo_has_burst(s->kp[k].kind) ? (double)s->kp[k].burst + 1.0 : (double)s->kp[k].count;
}

/* The stated bound of replica.h: the most a key admits beyond its envelope
 * over any window, 2 (burst + 1 + 14 r) + 3 N units (N: the nodes it is
 * asked on, r: units the key refills per interval). */
static inline double fs_bound(const struct fleetsim *s, int k)
{
    double r = (double)s->kp[k].count * (double)s->c.interval_ns / (double)s->kp[k].period_ns;
    return 2.0 * (fs_key_limit(s, k) + 14.0 * r) + 3.0 * (double)s->c.n;
}

/* Records one admission of key k at t (ns since the start) for the "above"
 * measure: for every window [t0, t] ending at an admission, what was
 * admitted in it less the limit's envelope (count x window / period +
 * burst + 1).  One central GCRA never exceeds 0 here. */
static inline void fs_above_admit(struct fleetsim *s, int k, int64_t t)
{
    double rate = (double)s->kp[k].count / (double)s->kp[k].period_ns;
    double x = s->ab_x[k] - rate * (double)t; /* before this admission */
    if (x < s->ab_min[k])
        s->ab_min[k] = x;
    s->ab_x[k] += 1.0;
    double ex = x + 1.0 - s->ab_min[k] - fs_key_limit(s, k);
    if (ex > s->ab_excess[k])
        s->ab_excess[k] = ex;
}

static inline int fs_in_window(const struct fleetsim *s, int64_t t)
{
    t -= s->t0;
    return s->c.part_len > 0 && t >= s->c.part_at && t < s->c.part_at + s->c.part_len;
}

static inline void fs_request(struct fleetsim *s, struct fs_stream *x, int64_t t0)
{
    int i = x->node, k = x->key;
    if (!s->nd[i].up && s->c.redirect) {
        int up = 0;
        for (int j = 0; j < s->c.n; j++)
            up += s->nd[j].up;
        int pick = up > 0 ? (int)(fs_rand01(s) * up) : 0;
        for (int j = 0; j < s->c.n && up > 0; j++)
            if (s->nd[j].up && pick-- == 0) {
                i = j;
                break;
            }
    }
    if (!s->nd[i].up) /* clients of a dead node get no answer; the oracle sees nothing */
        return;
    struct algo_result ro, rr;
    algo_decide(&s->kp[k], &s->orc_state[(size_t)k * FS_ORC_WORDS], 1, s->now - t0, &ro);
    s->req[k]++;
    if (!ro.limited)
        s->orc_ok[k]++;
    int64_t rw = s->c.restart_window > 0 ? s->c.restart_window : FS_SEC;
    int in_restart =
        s->c.restart_at > 0 && s->now - t0 >= s->c.restart_at && s->now - t0 < s->c.restart_at + rw;
    if (in_restart && !ro.limited)
        s->restart_window_orc++;
    int rc = replica_throttle(s->nd[i].r, s->keyname[k], strlen(s->keyname[k]), &s->kp[k], s->c.pol,
                              1, s->now + s->nd[i].offset, &rr);
    if (rc == 0 && !rr.limited) {
        s->ok[k]++;
        fs_above_admit(s, k, s->now - t0);
        if (in_restart && i < s->c.victims)
            s->restarted_ok++;
        if (in_restart)
            s->restart_window_all++;
    }
    if (fs_in_window(s, s->now)) {
        if (!ro.limited)
            s->win_orc[k]++;
        if (rc == 0 && !rr.limited) {
            s->win_ok[k]++;
            s->win_side_ok[i < s->c.split ? 0 : 1]++;
        }
    }
}

/* Runs the whole scenario. */
static inline void fs_run(struct fleetsim *s)
{
    int64_t t0 = s->now;
    int64_t end = t0 + s->c.seconds * FS_SEC;
    int64_t last_view = 0;
    while (s->now < end) {
        int64_t rel = s->now - t0;
        /* events */
        if (s->c.kill_at > 0 && rel == s->c.kill_at)
            for (int v = 0; v < s->c.victims; v++) {
                fs_stop_node(s, v);
                s->view_dirty = 1;
            }
        if (s->c.restart_at > 0 && rel == s->c.restart_at)
            for (int v = 0; v < s->c.victims; v++) {
                fs_start_node(s, v, -1);
                s->view_dirty = 1;
            }
        if (s->c.join_at > 0 && rel == s->c.join_at) {
            s->nd[s->c.n - 1].member = 1;
            fs_start_node(s, s->c.n - 1, -1);
            s->view_dirty = 1;
        }
        if (s->c.leave_at > 0 && rel == s->c.leave_at) {
            fs_stop_node(s, s->c.leaver);
            s->nd[s->c.leaver].member = 0; /* left: others forget it at once */
            s->view_dirty = 1;
        }
        if (s->c.die_at > 0 && rel == s->c.die_at) {
            fs_stop_node(s, s->c.dier);
            s->view_dirty = 1;
        }
        if (s->c.cold_start_ns > 0 && rel == s->c.cold_start_ns) {
            for (int i = 0; i < s->c.n; i++)
                if (s->nd[i].up)
                    replica_mark_synced(s->nd[i].r);
            s->view_dirty = 1;
        }
        if (s->c.burst_at > 0 && rel == s->c.burst_at)
            for (int i = 0; i < s->c.n; i++)
                for (int k = 0; k < s->c.keys; k++)
                    for (int b = 0; b < s->c.burst_each; b++) {
                        struct fs_stream x = {.node = i, .key = k};
                        fs_request(s, &x, t0);
                    }
        /* views: refreshed every 50 ms (detection delays make them move) */
        if (s->view_dirty || s->now - last_view >= 50 * FS_MSEC) {
            fs_views(s);
            last_view = s->now;
            s->view_dirty = 0;
        }
        /* messages due, and the batches they left waiting, as the
         * daemon's loop flushes them after the messages of a turn */
        int got = 0;
        while (s->nq > 0 && s->q[0].at <= s->now) {
            struct fs_msg m = fs_q_pop(s);
            if (fs_reachable(s, m.from, m.to, s->now) && s->nd[m.to].r != NULL) {
                replica_receive(s->nd[m.to].r, s->nd[m.from].name, m.buf, m.len,
                                s->now + s->nd[m.to].offset);
                got = 1;
            }
            free(m.buf);
        }
        for (int i = 0; got && i < s->c.n; i++)
            if (s->nd[i].r != NULL)
                replica_flush(s->nd[i].r);
        /* arrivals in this ms */
        size_t si = (size_t)((s->now / FS_MSEC) % FS_WHEEL);
        size_t cnt = s->slot_n[si];
        uint32_t *list = s->slot[si];
        s->slot[si] = NULL;
        s->slot_n[si] = 0;
        s->slot_cap[si] = 0;
        for (size_t j = 0; j < cnt; j++) {
            struct fs_stream *x = &s->st[list[j]];
            if (x->next / FS_MSEC > s->now / FS_MSEC) {
                fs_slot_push(s, list[j]); /* a later turn of the wheel */
                continue;
            }
            /* every arrival of this stream within this ms */
            while (x->next / FS_MSEC <= s->now / FS_MSEC) {
                fs_request(s, x, t0);
                x->next += fs_exp(s, x->lambda);
            }
            fs_slot_push(s, list[j]);
        }
        free(list);
        /* ticks, and the prompt reports asked for in this ms (the
         * daemon's loop runs them at its next turn) */
        for (int i = 0; i < s->c.n; i++)
            if (s->nd[i].up && s->now < s->nd[i].next_tick && replica_prompt_pending(s->nd[i].r))
                replica_tick(s->nd[i].r, s->now + s->nd[i].offset);
        for (int i = 0; i < s->c.n; i++)
            if (s->nd[i].up && s->now >= s->nd[i].next_tick) {
                /* A pass and its further slices at once, as the daemon's
                 * loop runs them turn after turn. */
                int64_t t = s->now + s->nd[i].offset;
                replica_tick(s->nd[i].r, t);
                for (int k = 0; k < 100000 && replica_next_deadline(s->nd[i].r) <= t; k++)
                    replica_tick(s->nd[i].r, t);
                s->nd[i].next_tick += s->c.interval_ns;
            }
        s->now += FS_MSEC;
        if (s->c.trace && (s->now - t0) % (250 * FS_MSEC) == 0) {
            uint64_t a = 0, o = 0;
            for (int k = 0; k < s->c.keys; k++) {
                a += s->ok[k];
                o += s->orc_ok[k];
            }
            fprintf(stderr, "t=%.2f admitted=%llu oracle=%llu side0=%llu side1=%llu\n",
                    (double)(s->now - t0) / 1e9, (unsigned long long)a, (unsigned long long)o,
                    (unsigned long long)s->win_side_ok[0], (unsigned long long)s->win_side_ok[1]);
        }
    }
}

struct fs_result {
    double ratio, p99_key, worst_key, min_key, win_ratio;
    /* above: the largest excess of any key over its envelope, in units,
     * and as a fraction of the key's envelope over one period (count +
     * burst + 1), which bounds admitted / envelope over every window of a
     * period or longer from above */
    double above_units, above;
    /* the largest excess of any key as a fraction of the stated bound
     * (fs_bound); at most 1 when the bound holds */
    double of_bound;
    double bytes_node_s, mem_key_node;
    uint64_t ok, orc;
};

static inline int fs_cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline void fs_result(struct fleetsim *s, struct fs_result *out)
{
    memset(out, 0, sizeof(*out));
    double *rk = malloc((size_t)s->c.keys * sizeof(double));
    uint64_t wok = 0, worc = 0;
    for (int k = 0; k < s->c.keys; k++) {
        out->ok += s->ok[k];
        out->orc += s->orc_ok[k];
        wok += s->win_ok[k];
        worc += s->win_orc[k];
        rk[k] = s->orc_ok[k] ? (double)s->ok[k] / (double)s->orc_ok[k] : 1.0;
    }
    qsort(rk, (size_t)s->c.keys, sizeof(double), fs_cmp_d);
    out->ratio = out->orc ? (double)out->ok / (double)out->orc : 1.0;
    out->worst_key = rk[s->c.keys - 1];
    out->min_key = rk[0];
    out->p99_key = rk[(size_t)((double)(s->c.keys - 1) * 0.99)];
    out->win_ratio = worc ? (double)wok / (double)worc : 1.0;
    for (int k = 0; k < s->c.keys; k++) {
        double env = (double)s->kp[k].count + fs_key_limit(s, k);
        double a = 1.0 + s->ab_excess[k] / env;
        if (s->ab_excess[k] > out->above_units)
            out->above_units = s->ab_excess[k];
        if (a > out->above)
            out->above = a;
        double b = s->ab_excess[k] / fs_bound(s, k);
        if (b > out->of_bound)
            out->of_bound = b;
    }
    if (out->above < 1.0)
        out->above = 1.0;
    free(rk);
    out->bytes_node_s = (double)s->bytes_sent / (double)s->c.n / (double)s->c.seconds;
    /* Memory from the structures' sizes: the node side's key entries and
     * the owner records with their reporters, per key per node. */
    double bytes = 0;
    for (int i = 0; i < s->c.n; i++) {
        if (s->nd[i].r == NULL)
            continue;
        struct replica_stats st;
        replica_get_stats(s->nd[i].r, &st);
        bytes += (double)st.keys * (double)(replica_key_bytes() + 48) +
                 (double)st.owned_keys * 160.0 + (double)st.owned_reporters * 64.0;
    }
    out->mem_key_node = bytes / (double)s->c.n / (double)(s->c.keys ? s->c.keys : 1);
}

static inline void fs_default(struct fs_cfg *c, uint64_t seed)
{
    memset(c, 0, sizeof(*c));
    c->n = 5;
    c->keys = 100;
    c->demand = 10.0;
    c->skew = 1.0;
    c->burst = 10;
    c->rate_lo = 20;
    c->rate_hi = 100;
    c->latency_ns = 300000;
    c->jitter_ns = 400000;
    c->interval_ns = 100 * FS_MSEC;
    c->seconds = 20;
    c->detect_ns = 2 * FS_SEC;
    c->pol = POLICY_PARTITION_SHARE;
    c->seed = seed;
    c->skew_node = c->skew_node2 = -1;
}

#endif
