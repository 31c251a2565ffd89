/*
 * global_slots: measures cluster-wide concurrency limits (SL.LEASE ...
 * SCOPE global: global/slots.h lending the slots, limit/concurrency.h
 * holding the leases) on a simulated cluster, a command rather than a
 * test (tests/sim/test_slots.c holds the pass/fail scenarios; the suite
 * runs a short smoke of this tool).
 *
 *   global_slots [--nodes N] [--limit n] [--clients C] [--ttl-ms T]
 *                [--fresh-ms F] [--loss PCT] [--seconds S] [--crashes K]
 *                [--seed SEED]
 *
 * N nodes (default 5) share one key of limit n (default 20).  Node i runs
 * C + 2i clients (default: the fewest that keep demand above 1.4 n even
 * with the busiest minority of the nodes dead), so demand is uneven across
 * nodes and always exceeds n.  A client thinks 0-50 ms, asks for one unit, waits in its
 * node's FIFO until the node's slots let it in (as SL.LEASE ... TIMEOUT
 * waits), holds it 20-220 ms (one in ten holds 0.5-3 s and renews it every
 * TTL/3 while its node is fresh), then releases it.  The network delays
 * messages 1-30 ms, reorders them and loses PCT% (default 2).  Gossip ticks
 * every 50 ms; a dead node leaves the others' view 400 ms after it died.
 *
 * Phases: 2 s of warm-up, then S seconds (default 20) of steady hammering
 * (utilisation and fairness are measured there), then K crashes (default
 * 100): after a random 0-1.5 s, a random node (the key's owner as often as
 * any) is killed as by kill -9 (its state is gone; the leases its clients
 * hold stay in use until their TTL, since the clients cannot know) and
 * restarts as a new process after a random 50 ms - 3 s.  At the end demand
 * stops, every lease drains, and demand starts again.
 *
 * Reported:
 *   - the most units in flight at any millisecond (leases of the living
 *     and of the dead until their expiry) against n;
 *   - utilisation: the mean units held while demand exceeded n, against
 *     the target of 90% of n;
 *   - waiting-time fairness: per node, its share of the demand (held +
 *     waiting) and of the units held, and the mean and 99th percentile
 *     wait of its clients; Jain's index of the clients' waits;
 *   - per crash, how long until the living held n again (against the
 *     bound fresh + TTL + detection + report periods), and slots leaked:
 *     after the last crash and the drain, n minus what demand can hold
 *     again (target 0), plus any crash the cluster never recovered from.
 * Exit status 1 when a target is missed (in flight above n, utilisation
 * below 90%, a slot leaked or a crash not recovered from in time).
 * Seeded: the seed is printed; --seed or SLUICE_SEED replays a run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "concurrency.h"
#include "hrw.h"
#include "slots.h"
#include "sluice/error.h"
#include "testutil.h"

#define MS          ((int64_t)1000000)
#define NMAX        16
#define CMAX        64 /* clients per node */
#define TICK        (50 * MS)
#define DETECT      (400 * MS)
#define MAX_DEAD    256
#define WAIT_BUCKET 10000 /* ms of wait the histogram resolves */

static const char KEY[] = "tenant:1";
#define KLEN (sizeof(KEY) - 1)

enum { C_THINK, C_WAIT, C_HOLD };

struct client {
    int state;
    int64_t at;    /* C_THINK: wants at; C_WAIT: waiting since; C_HOLD: releases at */
    int64_t renew; /* C_HOLD: next renewal */
    uint64_t id;
    int next; /* the node's FIFO of waiters */
};

struct node {
    char name[16];
    int alive;
    int64_t dead_at, back_at, restarted_at;
    struct slots *s;
    struct conc *c;
    int nclients;
    struct client cl[CMAX];
    int head, tail, nwait; /* FIFO of waiting clients (indices) */
    /* steady-phase figures */
    double demand_ms, held_ms;
    uint64_t waits, wait_hist[WAIT_BUCKET + 1];
    double wait_sum;
};

struct msg {
    int64_t at;
    uint64_t seq;
    int from, to;
    uint64_t from_life;
    size_t len;
    uint8_t buf[1400];
};

static struct sim {
    struct node n[NMAX];
    int nn;
    int64_t limit, ttl, fresh;
    int loss_pct;
    int64_t now;
    uint64_t rng;
    struct msg **heap; /* pending messages, earliest first */
    size_t nheap, capheap;
    uint64_t seq;
    uint64_t life[NMAX];
    struct conc *dead[MAX_DEAD];
    int ndead;
    int demand;
    int measuring;
    int64_t max_inflight;
    int64_t expect;      /* the living hold n again by then (the bound) */
    int owner;           /* the key's owner in the view (-1: none yet) */
    int64_t owner_since; /* when it became the owner */
    int was_live[NMAX];  /* in the last view */
    double util_sum;
    int64_t util_ms;
} S;

/* ---- the network ---- */

static int msg_before(const struct msg *a, const struct msg *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static int idx_of(const char *name)
{
    for (int i = 0; i < S.nn; i++)
        if (strcmp(S.n[i].name, name) == 0)
            return i;
    return -1;
}

static int net_send(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    struct node *from = ud;
    int t = idx_of(to);
    struct msg *m;
    if (t < 0 || len > sizeof(m->buf))
        return -SLUICE_EINVAL;
    if ((int)(test_rand(&S.rng) % 100) < S.loss_pct)
        return 0;
    if (S.nheap == S.capheap) {
        size_t c2 = S.capheap ? 2 * S.capheap : 1024;
        struct msg **h = realloc(S.heap, c2 * sizeof(*h));
        if (h == NULL)
            return -SLUICE_ENOMEM;
        S.heap = h;
        S.capheap = c2;
    }
    m = malloc(sizeof(*m));
    if (m == NULL)
        return -SLUICE_ENOMEM;
    m->at = S.now + test_rand_range(&S.rng, 1, 30) * MS;
    m->seq = ++S.seq;
    m->from = (int)(from - S.n);
    m->from_life = S.life[m->from];
    m->to = t;
    m->len = len;
    memcpy(m->buf, buf, len);
    size_t i = S.nheap++;
    while (i > 0 && msg_before(m, S.heap[(i - 1) / 2])) {
        S.heap[i] = S.heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S.heap[i] = m;
    return 0;
}

static struct msg *net_pop(void)
{
    struct msg *top = S.heap[0], *last = S.heap[--S.nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= S.nheap)
            break;
        if (c + 1 < S.nheap && msg_before(S.heap[c + 1], S.heap[c]))
            c++;
        if (!msg_before(S.heap[c], last))
            break;
        S.heap[i] = S.heap[c];
        i = c;
    }
    if (S.nheap > 0)
        S.heap[i] = last;
    return top;
}

static void deliver(void)
{
    while (S.nheap > 0 && S.heap[0]->at <= S.now) {
        struct msg *m = net_pop();
        struct node *to = &S.n[m->to];
        /* a message from or to a process that died is gone with it */
        if (to->alive && S.n[m->from].alive && S.life[m->from] == m->from_life)
            (void)slots_receive(to->s, S.n[m->from].name, m->buf, m->len, S.now);
        free(m);
    }
}

/* ---- nodes and clients ---- */

static void on_slots(void *ud, const char *key, size_t klen)
{
    (void)ud;
    (void)key;
    (void)klen;
}

static void load(void *ud, const char *key, size_t klen, int64_t *held, int64_t *waiting)
{
    struct node *n = ud;
    *held = conc_held(n->c, key, klen);
    *waiting = n->nwait;
}

static int64_t bound_at(int64_t t);
static int64_t bound_gone_at(int64_t t);

static void set_views(void)
{
    const char *live[NMAX];
    uint64_t mh[NMAX];
    int who[NMAX];
    size_t nl = 0;
    for (int i = 0; i < S.nn; i++)
        if (S.n[i].alive || S.now < S.n[i].dead_at + DETECT) {
            live[nl] = S.n[i].name;
            mh[nl] = hrw_hash(S.n[i].name, strlen(S.n[i].name));
            who[nl++] = i;
        }
    /* A new owner (the old one seen dead, or back): its ledger lends only
     * after fresh + TTL, and then the living hold n again. */
    int owner = nl > 0 ? who[hrw_pick(hrw_hash(KEY, KLEN), mh, nl)] : -1;
    if (S.owner >= 0 && owner != S.owner && bound_gone_at(S.now) > S.expect)
        S.expect = bound_gone_at(S.now);
    if (owner != S.owner)
        S.owner_since = S.now;
    S.owner = owner;
    /* A new ledger asks the members that rank next for the key whether
     * they lent slots (slots.h); one that leaves the view before it answers
     * may have lent until then, so the ledger holds for fresh + TTL from
     * the moment it is seen gone: a death while the owner's ledger is
     * young starts the wait again at its detection. */
    int live_now[NMAX] = {0};
    for (size_t k = 0; k < nl; k++)
        live_now[who[k]] = 1;
    for (int i = 0; i < S.nn; i++) {
        if (S.was_live[i] && !live_now[i] && i != owner &&
            S.now - S.owner_since <= S.fresh + S.ttl + (S.fresh + S.ttl) / 100 + 50 * MS &&
            bound_gone_at(S.now) > S.expect)
            S.expect = bound_gone_at(S.now);
        S.was_live[i] = live_now[i];
    }
    for (int i = 0; i < S.nn; i++)
        if (S.n[i].alive && slots_set_view(S.n[i].s, live, NULL, nl, (size_t)S.nn, S.now) < 0)
            abort();
}

static int start_node(int i, int restarted)
{
    struct node *n = &S.n[i];
    struct slots_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    S.life[i] = test_rand(&S.rng) | 1;
    cfg.node_name = n->name;
    cfg.life = S.life[i];
    cfg.fresh_ns = S.fresh;
    cfg.restarted = restarted;
    cfg.restarted_known = 1;
    cfg.send = net_send;
    cfg.send_ud = n;
    cfg.on_slots = on_slots;
    cfg.load = load;
    cfg.ud = n;
    if (slots_create(&cfg, S.now, &n->s) < 0 || conc_create(NULL, &n->c) < 0)
        return -1;
    memset(n->cl, 0, sizeof(n->cl));
    for (int j = 0; j < n->nclients; j++) {
        n->cl[j].state = C_THINK;
        n->cl[j].at = S.now + test_rand_range(&S.rng, 0, 50) * MS;
        n->cl[j].next = -1;
    }
    n->head = n->tail = -1;
    n->nwait = 0;
    n->alive = 1;
    return 0;
}

/* kill -9: the process and its state are gone; the leases its clients
 * hold stay in use until their expiry (counted in flight till then).
 * Returns 1 when the node owned the key. */
static int kill_node(int i)
{
    struct node *n = &S.n[i];
    struct slots_stats st;
    slots_get_stats(n->s, &st);
    n->alive = 0;
    n->dead_at = S.now;
    slots_destroy(n->s);
    n->s = NULL;
    if (S.ndead < MAX_DEAD)
        S.dead[S.ndead++] = n->c;
    else
        abort(); /* more dead processes with live leases than the model holds */
    n->c = NULL;
    return st.owned > 0;
}

static void enqueue(struct node *n, int j)
{
    n->cl[j].next = -1;
    if (n->tail >= 0)
        n->cl[n->tail].next = j;
    else
        n->head = j;
    n->tail = j;
    n->nwait++;
}

static void note_wait(struct node *n, int64_t waited)
{
    int64_t ms = waited / MS;
    if (!S.measuring)
        return;
    n->waits++;
    n->wait_sum += (double)waited / (double)MS;
    n->wait_hist[ms < WAIT_BUCKET ? ms : WAIT_BUCKET]++;
}

static void node_step(struct node *n)
{
    /* leases that ran out (a client that could not renew loses it) */
    conc_expire(n->c, S.now, NULL, NULL);
    for (int j = 0; j < n->nclients; j++) {
        struct client *c = &n->cl[j];
        if (c->state == C_HOLD) {
            int64_t e;
            if (S.now >= c->at) {
                (void)conc_release(n->c, KEY, KLEN, c->id, NULL, NULL);
                slots_note_held(n->s, KEY, KLEN, conc_held(n->c, KEY, KLEN), S.now);
                c->state = C_THINK;
                c->at = S.now + test_rand_range(&S.rng, 0, 50) * MS;
            } else if (S.now >= c->renew) {
                c->renew = S.now + S.ttl / 3;
                if (slots_may_renew(n->s, KEY, KLEN, S.now) &&
                    conc_renew(n->c, KEY, KLEN, c->id, 0, S.now, &e) != 0) {
                    c->state = C_THINK; /* it had expired */
                    c->at = S.now;
                }
            }
        } else if (c->state == C_THINK && S.demand && S.now >= c->at) {
            c->state = C_WAIT;
            c->at = S.now;
            enqueue(n, j);
        }
    }
    /* serve the FIFO head first while the node's slots let it in */
    while (n->head >= 0) {
        struct client *c = &n->cl[n->head];
        struct conc_result r;
        int64_t held = conc_held(n->c, KEY, KLEN);
        int64_t cap = slots_cap(n->s, KEY, KLEN, S.limit, S.ttl, held, 1, S.now);
        if (conc_acquire(n->c, KEY, KLEN, cap, 1, S.ttl, NULL, S.now, &r) < 0 || !r.granted)
            break;
        note_wait(n, S.now - c->at);
        n->head = c->next;
        if (n->head < 0)
            n->tail = -1;
        n->nwait--;
        c->state = C_HOLD;
        c->id = r.id;
        if (test_rand(&S.rng) % 10 == 0)
            c->at = S.now + test_rand_range(&S.rng, 500, 3000) * MS;
        else
            c->at = S.now + test_rand_range(&S.rng, 20, 220) * MS;
        c->renew = S.now + S.ttl / 3;
    }
}

/*
 * When the living hold n again at the latest after an event at t that
 * starts a wait of fresh + TTL (+1% +50 ms, slots.h): a node's death (its
 * last report was before t), a new owner (seen dead or back at t):
 * that wait, plus the last report's age (SLOTS_REPORT_EVERY ticks), the
 * ticks at which a view change is seen, a reclaim is made and a lost
 * message is sent again, and two message delays for a report and a grant.
 */
static int64_t bound_at(int64_t t)
{
    int64_t wait = S.fresh + S.ttl;
    return t + wait + wait / 100 + 50 * MS + (SLOTS_REPORT_EVERY + 4) * TICK + 120 * MS;
}

/* The same after an owner left the view (a new owner, or an asked member
 * gone): the wait is longer by the beat window and a beat round (fresh / 2
 * + fresh / 8: a cut-off owner keeps its majority that long, slots.c). */
static int64_t bound_gone_at(int64_t t)
{
    int64_t more = S.fresh / 2 + S.fresh / 8;
    return bound_at(t) + more + more / 100;
}

/* Units held by the living; *inflight adds the dead's unexpired leases. */
static int64_t held_now(int64_t *inflight)
{
    int64_t living = 0, all;
    for (int i = 0; i < S.nn; i++)
        if (S.n[i].alive)
            living += conc_held(S.n[i].c, KEY, KLEN);
    all = living;
    for (int d = 0; d < S.ndead;) {
        conc_expire(S.dead[d], S.now, NULL, NULL);
        int64_t h = conc_held(S.dead[d], KEY, KLEN);
        if (h == 0) {
            conc_destroy(S.dead[d]);
            S.dead[d] = S.dead[--S.ndead];
            continue;
        }
        all += h;
        d++;
    }
    *inflight = all;
    return living;
}

/* One simulated millisecond; returns the units the living hold. */
static int64_t step(void)
{
    int64_t inflight, living, demand = 0;
    S.now += MS;
    deliver();
    if (S.now % TICK == 0) {
        set_views();
        for (int i = 0; i < S.nn; i++)
            if (S.n[i].alive)
                slots_tick(S.n[i].s, S.now);
    }
    for (int i = 0; i < S.nn; i++) {
        struct node *n = &S.n[i];
        if (n->alive && n->back_at == 0)
            node_step(n);
    }
    for (int i = 0; i < S.nn; i++) {
        struct node *n = &S.n[i];
        if (!n->alive && n->back_at != 0 && S.now >= n->back_at) {
            n->back_at = 0;
            n->restarted_at = S.now;
            /* a restarted owner lends only after fresh + TTL, or after
             * the longer wait of a change of owner when its first views
             * (before it heard of everyone) gave the key to another */
            if (i == S.owner && bound_gone_at(S.now) > S.expect)
                S.expect = bound_gone_at(S.now);
            if (getenv("GLOBAL_SLOTS_TRACE") != NULL)
                fprintf(stderr, "trace: at %" PRId64 " ms: %s restarts\n", S.now / MS, n->name);
            if (start_node(i, 1) < 0)
                abort();
        }
    }
    living = held_now(&inflight);
    if (inflight > S.limit && S.max_inflight <= S.limit) {
        fprintf(stderr, "at %" PRId64 " ms: %" PRId64 " in flight > %" PRId64 ":", S.now / MS,
                inflight, S.limit);
        for (int i = 0; i < S.nn; i++) {
            struct slots_stats st = {0};
            if (S.n[i].alive)
                slots_get_stats(S.n[i].s, &st);
            fprintf(stderr, " %s %s held %" PRId64 " slots %" PRIu64 "%s;", S.n[i].name,
                    S.n[i].alive ? "alive" : "dead",
                    S.n[i].alive ? conc_held(S.n[i].c, KEY, KLEN) : 0, st.slots,
                    st.owned ? " (owner)" : "");
        }
        for (int d = 0; d < S.ndead; d++)
            fprintf(stderr, " dead lease set %d holds %" PRId64 ";", d,
                    conc_held(S.dead[d], KEY, KLEN));
        fprintf(stderr, "\n");
    }
    if (inflight > S.max_inflight)
        S.max_inflight = inflight;
    for (int i = 0; i < S.nn; i++) {
        struct node *n = &S.n[i];
        if (!n->alive)
            continue;
        int64_t h = conc_held(n->c, KEY, KLEN);
        demand += h + n->nwait;
        if (S.measuring) {
            n->held_ms += (double)h;
            n->demand_ms += (double)(h + n->nwait);
        }
    }
    if (S.measuring && demand > S.limit) {
        S.util_sum += (double)living;
        S.util_ms++;
    }
    return living;
}

static void run(int64_t dur)
{
    int64_t end = S.now + dur;
    while (S.now < end)
        (void)step();
}

static int64_t wait_pct(const struct node *n, double pct)
{
    uint64_t want = (uint64_t)ceil(pct * (double)n->waits), seen = 0;
    for (int b = 0; b <= WAIT_BUCKET; b++) {
        seen += n->wait_hist[b];
        if (seen >= want && want > 0)
            return b;
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int usage(const char *me)
{
    fprintf(stderr,
            "usage: %s [--nodes N] [--limit n] [--clients C] [--ttl-ms T] [--fresh-ms F]\n"
            "          [--loss PCT] [--seconds S] [--crashes K] [--seed SEED]\n"
            "          [--min-share R]   (fail when a node holds less than R of its\n"
            "                             share of the demand; default 0.1)\n",
            me);
    return 2;
}

int main(int argc, char **argv)
{
    long nodes = 5, limit = 20, clients = 0, ttl_ms = 800, fresh_ms = 300, loss = 2;
    long seconds = 20, crashes = 100;
    double min_share = 0.1;
    uint64_t seed = 0;
    int have_seed = 0, fail = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return usage(argv[0]);
        const char *v = argv[++i];
        if (strcmp(a, "--nodes") == 0)
            nodes = atol(v);
        else if (strcmp(a, "--limit") == 0)
            limit = atol(v);
        else if (strcmp(a, "--clients") == 0)
            clients = atol(v);
        else if (strcmp(a, "--ttl-ms") == 0)
            ttl_ms = atol(v);
        else if (strcmp(a, "--fresh-ms") == 0)
            fresh_ms = atol(v);
        else if (strcmp(a, "--loss") == 0)
            loss = atol(v);
        else if (strcmp(a, "--seconds") == 0)
            seconds = atol(v);
        else if (strcmp(a, "--crashes") == 0)
            crashes = atol(v);
        else if (strcmp(a, "--min-share") == 0)
            min_share = atof(v);
        else if (strcmp(a, "--seed") == 0) {
            seed = strtoull(v, NULL, 10);
            have_seed = 1;
        } else
            return usage(argv[0]);
    }
    if (nodes < 3 || nodes > NMAX || limit < 1 || limit > 10000 || ttl_ms < 100 || fresh_ms < 50 ||
        loss < 0 || loss > 50 || seconds < 1 || crashes < 0 || clients < 0 || min_share < 0 ||
        min_share > 1)
        return usage(argv[0]);
    if (clients == 0) {
        /* the fewest per node that keep demand above 1.4 n with the busiest
         * minority of the nodes dead */
        for (clients = 2; clients < CMAX; clients++) {
            long sum = 0;
            for (long i = 0; i < nodes - (nodes - 1) / 2; i++)
                sum += clients + 2 * i;
            if (sum * 10 >= limit * 14)
                break;
        }
    }
    if (clients + 2 * (nodes - 1) > CMAX) {
        fprintf(stderr, "too many clients per node (at most %d)\n", CMAX);
        return 2;
    }
    seed = have_seed ? seed : test_seed("global_slots");
    memset(&S, 0, sizeof(S));
    S.rng = seed;
    S.nn = (int)nodes;
    S.limit = limit;
    S.ttl = ttl_ms * MS;
    S.fresh = fresh_ms * MS;
    S.loss_pct = (int)loss;
    S.now = 1000 * MS;
    S.owner = -1;
    printf("seed %" PRIu64 "\n", seed);
    printf("cluster %ld nodes, limit %ld, clients %ld + 2i on node i, ttl %ld ms, fresh %ld ms, "
           "tick %lld ms, detection %lld ms, loss %ld%%\n",
           nodes, limit, clients, ttl_ms, fresh_ms, (long long)(TICK / MS),
           (long long)(DETECT / MS), loss);
    for (int i = 0; i < S.nn; i++) {
        snprintf(S.n[i].name, sizeof(S.n[i].name), "node-%d", i);
        S.n[i].nclients = (int)clients + 2 * i;
        if (start_node(i, 0) < 0)
            return 1;
    }
    S.demand = 1;
    run(2000 * MS);

    /* steady hammering */
    S.measuring = 1;
    run(seconds * 1000 * MS);
    /* A client still waiting has waited this long at least: a node whose
     * clients are never served must not count as waiting nothing. */
    for (int i = 0; i < S.nn; i++)
        for (int j = 0; j < S.n[i].nclients; j++)
            if (S.n[i].alive && S.n[i].cl[j].state == C_WAIT)
                note_wait(&S.n[i], S.now - S.n[i].cl[j].at);
    S.measuring = 0;
    double util = S.util_ms > 0 ? S.util_sum / (double)S.util_ms / (double)S.limit : 0;
    printf("steady %ld s: in flight at most %" PRId64 " of %ld; utilisation %.1f%% of n while "
           "demand exceeded n (target >= 90%%)\n",
           seconds, S.max_inflight, limit, 100 * util);
    if (util < 0.9)
        fail = 1;
    double dsum = 0, hsum = 0, jn = 0, js = 0, js2 = 0;
    for (int i = 0; i < S.nn; i++) {
        dsum += S.n[i].demand_ms;
        hsum += S.n[i].held_ms;
    }
    printf("fairness per node: clients, share of demand, share held, mean wait, p99 wait\n");
    for (int i = 0; i < S.nn; i++) {
        struct node *n = &S.n[i];
        double mean = n->waits ? n->wait_sum / (double)n->waits : 0;
        printf("  %s  %2d clients  demand %5.1f%%  held %5.1f%%  wait mean %6.1f ms  p99 %4" PRId64
               " ms\n",
               n->name, n->nclients, 100 * n->demand_ms / dsum, 100 * n->held_ms / hsum, mean,
               wait_pct(n, 0.99));
        /* Jain's index over clients of their mean wait (each node's
         * clients count once each) */
        jn += n->nclients;
        js += n->nclients * mean;
        js2 += n->nclients * mean * mean;
    }
    printf("  Jain's index of the clients' mean waits %.3f (1 = all wait alike)\n",
           js2 > 0 ? js * js / (jn * js2) : 1.0);
    /* No node is starved: each holds at least min_share (a tenth unless
     * told) of its share of the demand (with fewer slots than nodes, the
     * rounding must move between them; slots.c's allocate). */
    double least = 1e9;
    const char *least_name = "";
    for (int i = 0; i < S.nn; i++) {
        struct node *n = &S.n[i];
        if (n->demand_ms <= 0 || dsum <= 0 || hsum <= 0)
            continue;
        double r = (n->held_ms / hsum) / (n->demand_ms / dsum);
        if (r < least) {
            least = r;
            least_name = n->name;
        }
    }
    if (least < 1e9) {
        printf("  least served: %s held %.2f of its share of the demand (target >= %.2f)\n",
               least_name, least, min_share);
        if (least < min_share)
            fail = 1;
    }

    /* crashes */
    int64_t *rec = calloc((size_t)crashes + 1, sizeof(*rec));
    int64_t worst_over = INT64_MIN;
    long owners = 0, unrecovered = 0;
    if (rec == NULL)
        return 1;
    for (long k = 0; k < crashes; k++) {
        run(test_rand_range(&S.rng, 0, 1500) * MS);
        int alive = 0, victim;
        for (int i = 0; i < S.nn; i++)
            alive += S.n[i].alive;
        /* a victim whose death leaves a majority alive */
        while ((alive - 1) * 2 <= S.nn) {
            (void)step();
            alive = 0;
            for (int i = 0; i < S.nn; i++)
                alive += S.n[i].alive;
        }
        do
            victim = (int)(test_rand(&S.rng) % (uint64_t)S.nn);
        while (!S.n[victim].alive);
        int64_t t_kill = S.now;
        int was_owner = kill_node(victim);
        owners += was_owner;
        if (getenv("GLOBAL_SLOTS_TRACE") != NULL)
            fprintf(stderr, "trace: crash %ld at %" PRId64 " ms: node-%d%s killed\n", k,
                    t_kill / MS, victim, was_owner ? " (the owner)" : "");
        /* its slots come back after its last report + fresh + TTL (the
         * owner's death: set_views sees the new owner) */
        if (bound_at(t_kill) > S.expect)
            S.expect = bound_at(t_kill);
        S.n[victim].back_at = S.now + test_rand_range(&S.rng, 50, 3000) * MS;
        rec[k] = -1;
        while (S.now <= S.expect + 2000 * MS) {
            if (step() == S.limit) {
                rec[k] = S.now - t_kill;
                break;
            }
        }
        if (rec[k] >= 0 && t_kill + rec[k] - S.expect > worst_over)
            worst_over = t_kill + rec[k] - S.expect;
        if (rec[k] < 0 || t_kill + rec[k] > S.expect) {
            unrecovered++;
            fprintf(stderr,
                    "crash %ld at %" PRId64 " ms (node-%d%s, %d of %d alive before): held n "
                    "again after %" PRId64 " ms, %" PRId64 " ms beyond the bound\n",
                    k, t_kill / MS, victim, was_owner ? ", the owner" : "", alive, S.nn,
                    rec[k] / MS, (t_kill + rec[k] - S.expect) / MS);
        }
    }
    /* every node back, demand off, everything drains; demand again */
    for (int i = 0; i < S.nn; i++)
        if (!S.n[i].alive && S.n[i].back_at != 0)
            S.n[i].back_at = S.now;
    (void)step();
    /* Demand off: the waiters give up too (served one by one, dozens of
     * them behind a single slot outlasted the drain). */
    S.demand = 0;
    for (int i = 0; i < S.nn; i++) {
        struct node *n = &S.n[i];
        for (int j = 0; j < n->nclients; j++)
            if (n->cl[j].state == C_WAIT)
                n->cl[j].state = C_THINK;
        n->head = n->tail = -1;
        n->nwait = 0;
    }
    run(4000 * MS + S.ttl * 4);
    int64_t inflight, drained = held_now(&inflight), reached = 0;
    S.demand = 1;
    for (int64_t t = 0; t < bound_at(0) + 2000 * MS && reached < S.limit; t += MS) {
        int64_t h = step();
        if (h > reached)
            reached = h;
    }
    int64_t leaked = S.limit - reached;
    if (crashes > 0) {
        qsort(rec, (size_t)crashes, sizeof(*rec), cmp_i64);
        double sum = 0;
        long nrec = 0;
        for (long k = 0; k < crashes; k++)
            if (rec[k] >= 0) {
                sum += (double)rec[k] / (double)MS;
                nrec++;
            }
        printf("crashes %ld (the key's owner %ld times): n held again after mean %.0f ms, "
               "p99 %" PRId64 " ms, max %" PRId64 " ms; closest to the bound %" PRId64
               " ms (bound: fresh + TTL + 1%% + 50 ms + %lld ms of ticks and delays after a "
               "death, and fresh / 2 + fresh / 8 more after a change of owner); %ld beyond "
               "it\n",
               crashes, owners, nrec ? sum / (double)nrec : 0,
               rec[(size_t)((double)crashes * 0.99)] / MS, rec[crashes - 1] / MS, worst_over / MS,
               (long long)(((SLOTS_REPORT_EVERY + 4) * TICK + 120 * MS) / MS), unrecovered);
    }
    printf("after the drain: %" PRId64 " held (%" PRId64 " in flight); demand again holds %" PRId64
           " of %ld: leaked %" PRId64 "\n",
           drained, inflight, reached, limit, leaked);
    printf("in flight at most %" PRId64 " of %ld over the whole run\n", S.max_inflight, limit);
    if (S.max_inflight > S.limit || leaked != 0 || unrecovered != 0 || drained != 0)
        fail = 1;
    printf("%s\n", fail ? "FAIL" : "ok");
    for (int i = 0; i < S.nn; i++) {
        slots_destroy(S.n[i].s);
        conc_destroy(S.n[i].c);
    }
    for (int d = 0; d < S.ndead; d++)
        conc_destroy(S.dead[d]);
    while (S.nheap > 0)
        free(net_pop());
    free(S.heap);
    free(rec);
    return fail;
}
