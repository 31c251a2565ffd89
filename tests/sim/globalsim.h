/*
 * A harness for global-limit scenarios: n simulated nodes, each a libgossip
 * node plus a replica, one global key, clients at every node sending
 * requests at a skewed demand, and an oracle: a single algorithm state that
 * sees every request the cluster receives at the same simulated time.
 * Partitions, loss, kill/restart, a freeze (SIGSTOP-like) and a synchronized
 * first burst are options.
 *
 * Freeze: node `frozen` stops for freeze_len from freeze_at: no ticks, no
 * requests (its clients wait, nobody decides them, the oracle included), and
 * its replica neither receives nor sends; the gossip payloads and state
 * chunks addressed to it queue (GS_BACKLOG, beyond it they are dropped, like
 * a full socket buffer).  At the thaw it does what an event loop does after
 * SIGCONT: the overdue tick first, then the whole backlog at once, then new
 * requests.  Its libgossip node keeps running (the simulator cannot pause
 * it), so only the replica's silence tells its peers it is gone, as the
 * replica's silence detection would on a real freeze.
 * Everything random comes from the seed, so a run replays exactly.
 */
#ifndef SLUICE_GLOBALSIM_H
#define SLUICE_GLOBALSIM_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "gossip/gossip.h"
#include "gossip/sim.h"
#include "io.h"
#include "replica.h"
#include "testutil.h"

#define GS_MAX     32
#define GS_SEC     1000000000LL
#define GS_MSEC    1000000LL
#define GS_STEP    (1 * GS_MSEC)
#define GS_PROBE   4096
#define GS_BACKLOG 4096

struct gs_cfg {
    int n;
    double weight[GS_MAX]; /* demand share per node (normalized) */
    double demand_mult;    /* total demand / limit rate */
    enum algo_kind kind;
    int64_t burst, count, period_ns;
    enum replica_policy pol;
    double loss;
    int64_t interval_ns;
    int64_t duration_ns;
    uint64_t seed;
    /* partition: nodes [0, split) vs [split, n) during [part_at, part_at + part_len) */
    int split;
    int64_t part_at, part_len;
    /* kill node `victim` at kill_at, restart at restart_at (0 = none) */
    int victim;
    int64_t kill_at, restart_at;
    /* every node sends `burst_each` requests at the same instant burst_at */
    int64_t burst_at;
    int burst_each;
    int track_prop;   /* measure per-delta propagation */
    int gossip_nodes; /* libgossip fanout; 0 = its default */
    /* freeze node `frozen` during [freeze_at, freeze_at + freeze_len) */
    int frozen;
    int64_t freeze_at, freeze_len;
    /* per-node admissions counted during [fair_at, fair_at + fair_len) */
    int64_t fair_at, fair_len;
    /* Background load: every node sends cold_rate requests/s, each to one of
     * cold_keys other global keys (limit cold_count per second, burst
     * cold_count) picked at random, far below their limits.  With cold keys
     * the replicas tick at their own deadline (as the daemon's timer does),
     * not every step: each tick walks every key. */
    int cold_keys;
    double cold_rate;
    int64_t cold_count;
    int64_t cold_until;  /* cold requests stop this long after the start; 0 = never */
    int64_t gc_grace_ns; /* replicas' gc grace; 0 = their default */
};

struct gs_result {
    int64_t admitted, oracle;           /* whole run */
    int64_t admitted_win, oracle_win;   /* inside the watched window */
    int64_t admitted_post, oracle_post; /* from the window's end to the run's end */
    int64_t burst_admitted;             /* admitted at burst_at */
    int64_t restart_first;              /* admitted by the victim in its first 2 s back */
    int64_t restart_oracle_first;       /* oracle admissions in those 2 s */
    int64_t restart_cluster_first;      /* whole cluster in those 2 s */
    int64_t restart_reset_ns;           /* victim's mean reset_after 0.1-0.6 s after restart */
    int64_t restart_oracle_reset_ns;    /* the oracle's at the same times */
    int64_t restart_peer_reset_ns;      /* another node's at the same times */
    int64_t restart_early;              /* victim admissions in its first 600 ms back */
    double prop_p50, prop_p99;          /* in gossip intervals, from admission */
    double send_p50, send_p99;          /* in gossip intervals, from the flush that sent it */
    size_t prop_n, prop_lost;
    double bytes_node_s; /* gossip bytes sent per node per second (all traffic) */
    double bytes_delta;  /* replica delta bytes per key delta entry */
    double delta_bytes_node_s;
    struct replica_stats st; /* summed */
    /* The fairness window (fair_len > 0): per node, requests made and units
     * admitted; and what the oracle admitted for the whole cluster. */
    int64_t fair_req[GS_MAX], fair_admitted[GS_MAX], fair_oracle;
    size_t backlog_dropped; /* payloads lost to a full backlog during a freeze */
    int64_t cold_requests, cold_admitted;
    uint64_t app_dropped; /* payloads libgossip dropped from full queues, all nodes */
    uint64_t keys_end;    /* global keys held at the end, all nodes */
};

struct gs;
struct gs_msg {
    char from[GOSSIP_NAME_MAX + 1];
    uint8_t *buf;
    size_t len;
    int state; /* a state chunk (anti-entropy), not a payload */
};
struct gs_node {
    struct gs *gs;
    int idx;
    struct replica *r;
    uint32_t boot;
    double next_arrival;
    int64_t admitted;
    double next_cold;
    int frozen;
    struct gs_msg *backlog; /* GS_BACKLOG entries while frozen */
    size_t nbacklog, dropped;
};

struct gs_probe {
    int node;
    int64_t count, t0, tsend;
    int done;
};

struct gs {
    struct gs_cfg c;
    struct gossip_sim *sim;
    struct gs_node nodes[GS_MAX];
    struct algo_params p;
    struct algo_params cold_p;
    struct algo_params oracle_p; /* what oracle_state was made for (p may be replaced) */
    void *oracle_state;          /* algo_state_size(&p) bytes: a sliding window's grows with
                                    its precision (88 bytes at 10) */
    uint64_t rng;
    char names[GS_MAX][16];
    struct gs_probe probes[GS_PROBE];
    size_t nprobes;
    double prop[GS_PROBE], prop_send[GS_PROBE];
    size_t nprop;
};

/* Queues a message for a frozen node; 1 if queued (or dropped), 0 if the
 * node is not frozen. */
static inline int gs_hold(struct gs_node *nd, const char *from, const uint8_t *b, size_t len,
                          int state)
{
    if (!nd->frozen)
        return 0;
    if (nd->backlog == NULL)
        nd->backlog = calloc(GS_BACKLOG, sizeof(*nd->backlog));
    if (nd->backlog == NULL || nd->nbacklog >= GS_BACKLOG) {
        nd->dropped++;
        return 1;
    }
    struct gs_msg *m = &nd->backlog[nd->nbacklog];
    m->buf = malloc(len);
    if (m->buf == NULL) {
        nd->dropped++;
        return 1;
    }
    memcpy(m->buf, b, len);
    m->len = len;
    m->state = state;
    snprintf(m->from, sizeof(m->from), "%s", from);
    nd->nbacklog++;
    return 1;
}

static inline void gs_payload(void *ud, const char *from, const uint8_t *b, size_t len)
{
    struct gs_node *nd = ud;
    if (gs_hold(nd, from, b, len, 0))
        return;
    if (nd->r != NULL)
        replica_receive(nd->r, from, b, len);
}

static inline size_t gs_fill(void *ud, uint64_t *cursor, uint8_t *buf, size_t cap)
{
    struct gs_node *nd = ud;
    if (nd->frozen)
        return 0;
    return nd->r != NULL ? replica_state_fill(nd->r, cursor, buf, cap) : 0;
}

static inline void gs_merge(void *ud, const char *from, const uint8_t *b, size_t len)
{
    struct gs_node *nd = ud;
    if (gs_hold(nd, from, b, len, 1))
        return;
    if (nd->r != NULL && replica_receive(nd->r, from, b, len) == 0)
        replica_mark_synced(nd->r);
}

static inline void gs_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    struct gs_node *nd = ud;
    if (nd->r != NULL && !nd->frozen)
        replica_member_event(nd->r, ev, m->name);
}

/* The thaw: delivers the backlog in arrival order and frees it. */
static inline void gs_thaw(struct gs_node *nd)
{
    nd->frozen = 0;
    for (size_t i = 0; i < nd->nbacklog; i++) {
        struct gs_msg *m = &nd->backlog[i];
        if (m->state)
            gs_merge(nd, m->from, m->buf, m->len);
        else
            gs_payload(nd, m->from, m->buf, m->len);
        free(m->buf);
    }
    nd->nbacklog = 0;
    free(nd->backlog);
    nd->backlog = NULL;
}

static inline int gs_new_replica(struct gs *g, int i, int64_t sync_timeout)
{
    struct replica_config rc = {0};
    rc.node_name = g->names[i];
    rc.boot_epoch = g->nodes[i].boot;
    rc.interval_ns = g->c.interval_ns;
    rc.default_policy = g->c.pol;
    rc.sync_timeout_ns = sync_timeout;
    rc.gc_grace_ns = g->c.gc_grace_ns;
    if (replica_create(&g->nodes[i].r, &rc) != 0)
        return -1;
    replica_attach(g->nodes[i].r, gossip_sim_node(g->sim, i));
    return 0;
}

static inline double gs_exp(struct gs *g, double rate_per_ns)
{
    double u = ((double)(test_rand(&g->rng) >> 11) + 0.5) / 9007199254740992.0;
    return -log(u) / rate_per_ns;
}

static inline int gs_init(struct gs *g, const struct gs_cfg *c)
{
    memset(g, 0, sizeof(*g));
    g->c = *c;
    g->rng = c->seed ^ 0x5eedULL;
    if (g->c.interval_ns == 0)
        g->c.interval_ns = 100 * GS_MSEC;
    if (algo_params_init(&g->p, c->kind, c->burst, c->count, c->period_ns, 0) != 0)
        return -1;
    if (c->cold_keys > 0 &&
        algo_params_init(&g->cold_p, ALGO_GCRA, c->cold_count, c->cold_count, GS_SEC, 0) != 0)
        return -1;
    /* calloc: 8-aligned, as algo_init wants. */
    g->oracle_p = g->p;
    g->oracle_state = calloc(1, algo_state_size(&g->p));
    if (g->oracle_state == NULL)
        return -1;
    algo_init(&g->p, g->oracle_state);
    struct gossip_sim_link l = {.drop = c->loss, .delay_ns = 1 * GS_MSEC, .jitter_ns = 2 * GS_MSEC};
    if (gossip_sim_create(&g->sim, c->seed, &l) != 0)
        return -1;
    double wsum = 0;
    for (int i = 0; i < c->n; i++)
        wsum += c->weight[i] > 0 ? c->weight[i] : 0;
    for (int i = 0; i < c->n; i++) {
        struct gossip_config gc;
        gossip_config_default(&gc);
        snprintf(g->names[i], sizeof(g->names[i]), "node-%03d", i);
        gc.name = g->names[i];
        gc.gossip_interval_ms = g->c.interval_ns / GS_MSEC;
        if (g->c.gossip_nodes > 0)
            gc.gossip_nodes = g->c.gossip_nodes;
        gc.pushpull_interval_ms = 10000;
        gc.cb.ud = &g->nodes[i];
        gc.cb.on_payload = gs_payload;
        gc.cb.state_fill = gs_fill;
        gc.cb.state_merge = gs_merge;
        gc.cb.on_event = gs_event;
        g->nodes[i].gs = g;
        g->nodes[i].idx = i;
        g->nodes[i].boot = 1000;
        if (gossip_sim_add(g->sim, &gc) != i)
            return -1;
        if (i > 0)
            gossip_sim_join(g->sim, i, 0);
        if (gs_new_replica(g, i, 0) != 0)
            return -1;
        g->c.weight[i] = wsum > 0 ? c->weight[i] / wsum : 0;
    }
    /* Let membership converge before traffic starts. */
    for (int k = 0; k < 200; k++) {
        gossip_sim_run(g->sim, 50 * GS_MSEC);
        if (gossip_node_num_live(gossip_sim_node(g->sim, 0)) == (size_t)c->n)
            break;
    }
    gossip_sim_run(g->sim, 2 * GS_SEC);
    return 0;
}

static inline void gs_destroy(struct gs *g)
{
    for (int i = 0; i < g->c.n; i++) {
        for (size_t j = 0; j < g->nodes[i].nbacklog; j++)
            free(g->nodes[i].backlog[j].buf);
        free(g->nodes[i].backlog);
        replica_destroy(g->nodes[i].r);
    }
    gossip_sim_destroy(g->sim);
    if (g->oracle_state != NULL)
        algo_free(&g->oracle_p, g->oracle_state);
    free(g->oracle_state);
}

/* The count node i's replica holds in node j's slot, or -1. */
struct gs_find {
    const char *name;
    int64_t count;
    uint64_t epoch;
};
static inline void gs_find_cb(void *ud, const struct replica_slot_info *s)
{
    struct gs_find *f = ud;
    if (strcmp(s->node, f->name) == 0 && (f->count < 0 || s->epoch >= f->epoch)) {
        f->count = s->count;
        f->epoch = s->epoch;
    }
}

static inline int64_t gs_seen(struct gs *g, int viewer, int origin)
{
    struct replica_key_info info;
    struct gs_find f = {g->names[origin], -1, 0};
    struct gs_node *nd = &g->nodes[viewer];
    if (nd->r == NULL)
        return -1;
    if (replica_key_info(nd->r, "k", 1, gossip_sim_now(g->sim), &info, gs_find_cb, &f) != 0)
        return -1;
    return f.count;
}

static inline void gs_check_probes(struct gs *g, int64_t now)
{
    for (size_t i = 0; i < g->nprobes; i++) {
        struct gs_probe *pr = &g->probes[i];
        if (pr->done)
            continue;
        int all = 1;
        for (int j = 0; j < g->c.n && all; j++)
            if (j != pr->node)
                all = gs_seen(g, j, pr->node) >= pr->count;
        if (all) {
            pr->done = 1;
            g->prop_send[g->nprop] = (double)(now - pr->tsend) / (double)g->c.interval_ns;
            g->prop[g->nprop++] = (double)(now - pr->t0) / (double)g->c.interval_ns;
        }
    }
}

static inline int gs_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One request of qty 1 at node i; returns 1 if the node admitted it. */
static inline int gs_request(struct gs *g, int i, int64_t now, struct gs_result *res, int in_win,
                             int post)
{
    struct algo_result ar, orc;
    struct gs_node *nd = &g->nodes[i];
    if (nd->r == NULL || nd->frozen)
        return 0; /* the node is down: nobody sees this request */
    algo_decide(&g->p, g->oracle_state, 1, now, &orc);
    if (replica_throttle(nd->r, "k", 1, &g->p, g->c.pol, 1, now, &ar) != 0)
        abort();
    int ok = !ar.limited;
    res->admitted += ok;
    res->oracle += !orc.limited;
    if (in_win) {
        res->admitted_win += ok;
        res->oracle_win += !orc.limited;
    }
    if (post) {
        res->admitted_post += ok;
        res->oracle_post += !orc.limited;
    }
    nd->admitted += ok;
    if (g->c.fair_len > 0 && now >= g->c.fair_at && now < g->c.fair_at + g->c.fair_len) {
        res->fair_req[i]++;
        res->fair_admitted[i] += ok;
        res->fair_oracle += !orc.limited;
    }
    if (ok && g->c.track_prop && g->nprobes < GS_PROBE && test_rand(&g->rng) % 8 == 0) {
        struct replica_key_info info;
        struct gs_find f = {g->names[i], -1, 0};
        replica_key_info(nd->r, "k", 1, now, &info, gs_find_cb, &f);
        int64_t tsend = replica_next_deadline(nd->r);
        g->probes[g->nprobes++] = (struct gs_probe){i, f.count, now, tsend > now ? tsend : now, 0};
    }
    return ok;
}

static inline void gs_run(struct gs *g, struct gs_result *res)
{
    memset(res, 0, sizeof(*res));
    int64_t start = gossip_sim_now(g->sim), end = start + g->c.duration_ns;
    double rate = (double)g->c.count / (double)g->c.period_ns * g->c.demand_mult;
    int64_t win_a = start + g->c.part_at, win_b = win_a + g->c.part_len;
    if (g->c.restart_at > 0) {
        win_a = start + g->c.restart_at;
        win_b = win_a + 2 * GS_SEC;
    }
    if (g->c.fair_len > 0)
        g->c.fair_at += start; /* relative in the config, absolute from here on */
    for (int i = 0; i < g->c.n; i++) {
        g->nodes[i].next_arrival =
            (double)start + (g->c.weight[i] > 0 ? gs_exp(g, rate * g->c.weight[i]) : 1e30);
        g->nodes[i].next_cold =
            (double)start +
            (g->c.cold_keys > 0 && g->c.cold_rate > 0 ? gs_exp(g, g->c.cold_rate / GS_SEC) : 1e30);
    }
    int parted = 0, killed = 0, restarted = 0;
    uint64_t b0[GS_MAX], b1[GS_MAX];
    for (int i = 0; i < g->c.n; i++)
        gossip_sim_bytes(g->sim, i, &b0[i], &b1[i]);
    int64_t probe_check = start;
    while (gossip_sim_now(g->sim) < end) {
        int64_t now = gossip_sim_now(g->sim), rel = now - start;
        if (g->c.part_len > 0 && !parted && rel >= g->c.part_at) {
            for (int i = g->c.split; i < g->c.n; i++)
                gossip_sim_set_group(g->sim, i, 1);
            parted = 1;
        }
        if (parted == 1 && rel >= g->c.part_at + g->c.part_len) {
            for (int i = 0; i < g->c.n; i++)
                gossip_sim_set_group(g->sim, i, 0);
            parted = 2;
        }
        if (g->c.kill_at > 0 && !killed && rel >= g->c.kill_at) {
            gossip_sim_kill(g->sim, g->c.victim);
            replica_destroy(g->nodes[g->c.victim].r);
            g->nodes[g->c.victim].r = NULL;
            killed = 1;
        }
        if (killed && !restarted && rel >= g->c.restart_at) {
            int seed = g->c.victim == 0 ? 1 : 0;
            gossip_sim_restart(g->sim, g->c.victim, seed);
            g->nodes[g->c.victim].boot++;
            gs_new_replica(g, g->c.victim, 2 * GS_SEC);
            g->nodes[g->c.victim].admitted = 0;
            restarted = 1;
        }
        int thawed = -1;
        if (g->c.freeze_len > 0) {
            struct gs_node *fz = &g->nodes[g->c.frozen];
            if (!fz->frozen && rel >= g->c.freeze_at && rel < g->c.freeze_at + g->c.freeze_len)
                fz->frozen = 1;
            else if (fz->frozen && rel >= g->c.freeze_at + g->c.freeze_len) {
                /* SIGCONT: the overdue timer, then the queued packets. */
                if (fz->r != NULL)
                    replica_tick(fz->r, now);
                gs_thaw(fz);
                thawed = g->c.frozen;
            }
        }
        int in_win = now >= win_a && now < win_b;
        int post = now >= win_b;
        if (g->c.burst_each > 0 && now == start + g->c.burst_at) {
            for (int k = 0; k < g->c.burst_each; k++)
                for (int i = 0; i < g->c.n; i++)
                    res->burst_admitted += gs_request(g, i, now, res, in_win, post);
        }
        for (int i = 0; i < g->c.n; i++) {
            struct gs_node *nd = &g->nodes[i];
            while (nd->next_arrival <= (double)now) {
                gs_request(g, i, now, res, in_win, post);
                nd->next_arrival += gs_exp(g, rate * g->c.weight[i]);
            }
            while (nd->next_cold <= (double)now) {
                char key[24];
                struct algo_result ar;
                int len = snprintf(key, sizeof(key), "cold:%u",
                                   (unsigned)(test_rand(&g->rng) % (uint64_t)g->c.cold_keys));
                if (nd->r != NULL && !nd->frozen &&
                    (g->c.cold_until == 0 || rel < g->c.cold_until)) {
                    if (replica_throttle(nd->r, key, (size_t)len, &g->cold_p, g->c.pol, 1, now,
                                         &ar) != 0)
                        abort();
                    res->cold_requests++;
                    res->cold_admitted += !ar.limited;
                }
                nd->next_cold += gs_exp(g, g->c.cold_rate / GS_SEC);
            }
            if (nd->r != NULL && !nd->frozen && i != thawed &&
                (g->c.cold_keys == 0 || now >= replica_next_deadline(nd->r)))
                replica_tick(nd->r, now);
        }
        if (restarted && in_win) {
            res->restart_first = g->nodes[g->c.victim].admitted;
            /* Sampled every 10 ms from 100 to 600 ms after the restart. */
            int64_t since = now - win_a;
            if (since < 600 * GS_MSEC)
                res->restart_early = g->nodes[g->c.victim].admitted;
            if (since >= 100 * GS_MSEC && since < 600 * GS_MSEC && since % (10 * GS_MSEC) == 0) {
                struct replica_key_info info;
                struct algo_result orc;
                int other = g->c.victim == 0 ? 1 : 0;
                if (replica_key_info(g->nodes[g->c.victim].r, "k", 1, now, &info, NULL, NULL) == 0)
                    res->restart_reset_ns += info.reset_after_ns / 50;
                if (replica_key_info(g->nodes[other].r, "k", 1, now, &info, NULL, NULL) == 0)
                    res->restart_peer_reset_ns += info.reset_after_ns / 50;
                algo_decide(&g->p, g->oracle_state, 0, now, &orc);
                res->restart_oracle_reset_ns += orc.reset_after_ns / 50;
            }
        }
        if (g->c.track_prop && now >= probe_check) {
            gs_check_probes(g, now);
            probe_check = now + 5 * GS_MSEC;
        }
        gossip_sim_run(g->sim, GS_STEP);
    }
    if (g->c.restart_at > 0) {
        res->restart_cluster_first = res->admitted_win;
        res->restart_oracle_first = res->oracle_win;
    }
    double secs = (double)g->c.duration_ns / GS_SEC;
    uint64_t total = 0;
    for (int i = 0; i < g->c.n; i++) {
        uint64_t s, r;
        gossip_sim_bytes(g->sim, i, &s, &r);
        total += s - b0[i];
        struct gossip_stats gst;
        gossip_node_stats(gossip_sim_node(g->sim, i), &gst);
        res->app_dropped += gst.app_dropped;
        struct replica_stats st;
        if (g->nodes[i].r == NULL)
            continue;
        replica_get_stats(g->nodes[i].r, &st);
        res->st.deltas_sent += st.deltas_sent;
        res->st.delta_entries_sent += st.delta_entries_sent;
        res->st.delta_bytes_sent += st.delta_bytes_sent;
        res->st.pours += st.pours;
        res->st.debt_events += st.debt_events;
        res->st.phantom_units += st.phantom_units;
        res->st.refunded_units += st.refunded_units;
        res->st.unsynced_denials += st.unsynced_denials;
        res->st.gc_keys += st.gc_keys;
        res->st.bad_packets += st.bad_packets;
        res->keys_end += st.keys;
    }
    for (int i = 0; i < g->c.n; i++)
        res->backlog_dropped += g->nodes[i].dropped;
    res->bytes_node_s = (double)total / g->c.n / secs;
    res->delta_bytes_node_s = (double)res->st.delta_bytes_sent / g->c.n / secs;
    res->bytes_delta = res->st.delta_entries_sent
                           ? (double)res->st.delta_bytes_sent / (double)res->st.delta_entries_sent
                           : 0;
    if (g->nprop > 0) {
        qsort(g->prop, g->nprop, sizeof(double), gs_cmp);
        res->prop_p50 = g->prop[g->nprop / 2];
        res->prop_p99 = g->prop[(size_t)((double)(g->nprop - 1) * 0.99)];
        qsort(g->prop_send, g->nprop, sizeof(double), gs_cmp);
        res->send_p50 = g->prop_send[g->nprop / 2];
        res->send_p99 = g->prop_send[(size_t)((double)(g->nprop - 1) * 0.99)];
    }
    res->prop_n = g->nprop;
    for (size_t i = 0; i < g->nprobes; i++) /* the last second's may still be on the way */
        res->prop_lost += !g->probes[i].done && g->probes[i].t0 < end - GS_SEC;
}

/* Scale of simulated durations: SLUICE_SIM_SCALE (0 < x <= 1), default 1.
 * The scenarios are cheap (about a second of CPU under the sanitizers), so
 * they run at full length everywhere; a shorter run makes the one-time
 * overshoot of the first gossip delay a larger fraction of the total. */
static inline double gs_scale(void)
{
    const char *e = getenv("SLUICE_SIM_SCALE");
    if (e != NULL && atof(e) > 0 && atof(e) <= 1)
        return atof(e);
    return 1.0;
}

static inline void gs_default(struct gs_cfg *c, uint64_t seed)
{
    static const double skew[5] = {0.50, 0.20, 0.15, 0.10, 0.05};
    memset(c, 0, sizeof(*c));
    c->n = 5;
    for (int i = 0; i < 5; i++)
        c->weight[i] = skew[i];
    c->demand_mult = 10;
    c->kind = ALGO_GCRA;
    c->burst = 20;
    c->count = 100;
    c->period_ns = GS_SEC;
    c->pol = REPLICA_SHARE;
    c->interval_ns = 100 * GS_MSEC;
    c->duration_ns = 30 * GS_SEC;
    c->seed = seed;
}

#endif
