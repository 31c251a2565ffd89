/*
 * Global concurrency limits (global/slots.h) on a simulated cluster: N
 * nodes, each a slots instance and a lease semaphore (limit/concurrency.h)
 * with clients that take, hold, renew and release leases, on a simulated
 * network (random delay, loss, reordering) and clock, seeded (printed;
 * SLUICE_SEED replays; SLUICE_SIM_ONLY=<pattern> runs the matching
 * scenarios alone).  Checked at every millisecond:
 *
 *   - the units held cluster-wide by leases still alive (a killed node's
 *     leases count until their expiry: its clients may still hold the
 *     resource) never exceed n;
 *   - under demand above n the cluster holds >= 90% of n on average;
 *   - after a node (sometimes the key's owner) is killed, its slots come
 *     back: the survivors hold n again within fresh + TTL + detection and
 *     a few report periods, and never before the killed node's leases
 *     expired beyond n (the first check);
 *   - after every crash and at the end, nothing leaked: with demand again
 *     the survivors reach n;
 *   - members new to the cluster that win a hammered key (one, or two at
 *     once) lend nothing the old owner's holders still have;
 *   - a fresh cluster hammered at once serves within a second.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <msgpack.h>

#include "concurrency.h"
#include "hrw.h"
#include "slots.h"
#include "sluice/error.h"
#include "testutil.h"
#include "wire.h"

#define MS      ((int64_t)1000000)
#define NMAX    8
#define NMSG    20000
#define LIMIT   10
#define TTL     (800 * MS)
#define FRESH   (300 * MS)
#define TICK    (50 * MS)
#define DETECT  (400 * MS) /* failure detection: the view drops a dead node */
#define CLIENTS 8          /* per node */

struct msg {
    int live;
    int64_t at;
    int from, to;
    size_t len;
    uint8_t buf[1400];
};

struct client {
    uint64_t id; /* 0: holds nothing */
    int64_t until;
};

struct node {
    char name[16];
    int alive;
    struct slots *s;
    struct conc *c;
    struct client cl[CLIENTS];
    int64_t dead_at;
    int gone;  /* left (or dead and forgotten): no longer a member at all */
    int calm;  /* its clients ask for no new leases (they keep the ones they hold) */
    int older; /* runs a release without asks: drops asks and answers as malformed */
};

static struct sim {
    struct node n[NMAX];
    int nn;
    struct msg q[NMSG];
    int64_t now;
    uint64_t rng;
    int loss_pct;
    int demand; /* 1: clients want leases */
    int64_t wakes;
    /* A partition: while part_on, nodes of different sides exchange
     * nothing and, DETECT after part_at, see each other dead. */
    int part_on;
    int64_t part_at;
    int side[NMAX];
} S;

static const char *KEY = "tenant:1";

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
    assert_true(t >= 0);
    assert_true(len <= sizeof(S.q[0].buf));
    if ((int)(test_rand(&S.rng) % 100) < S.loss_pct)
        return 0;
    for (int i = 0; i < NMSG; i++) {
        if (!S.q[i].live) {
            S.q[i].live = 1;
            S.q[i].at = S.now + (int64_t)(1 + test_rand(&S.rng) % 30) * MS;
            S.q[i].from = (int)(from - S.n);
            S.q[i].to = t;
            S.q[i].len = len;
            memcpy(S.q[i].buf, buf, len);
            return 0;
        }
    }
    return -SLUICE_EFULL;
}

static void on_slots(void *ud, const char *key, size_t klen)
{
    (void)ud;
    (void)key;
    (void)klen;
    S.wakes++;
}

static void load(void *ud, const char *key, size_t klen, int64_t *held, int64_t *waiting)
{
    struct node *n = ud;
    *held = conc_held(n->c, key, klen);
    *waiting = 0;
}

static void set_views(void)
{
    const char *live[NMAX];
    size_t nl = 0;
    size_t members = 0;
    for (int i = 0; i < S.nn; i++) {
        if (S.n[i].gone)
            continue;
        members++;
        if (S.n[i].alive || S.now < S.n[i].dead_at + DETECT)
            live[nl++] = S.n[i].name;
    }
    for (int i = 0; i < S.nn; i++) {
        if (!S.n[i].alive)
            continue;
        if (S.part_on && S.now >= S.part_at + DETECT) {
            /* its own side only; the others are dead but not forgotten */
            const char *mine[NMAX];
            size_t nm = 0;
            for (int j = 0; j < S.nn; j++)
                if (!S.n[j].gone && S.side[j] == S.side[i] &&
                    (S.n[j].alive || S.now < S.n[j].dead_at + DETECT))
                    mine[nm++] = S.n[j].name;
            assert_int_equal(slots_set_view(S.n[i].s, mine, NULL, nm, members, S.now), 0);
            continue;
        }
        assert_int_equal(slots_set_view(S.n[i].s, live, NULL, nl, members, S.now), 0);
    }
}

static void start_node(int i, int restarted)
{
    struct node *n = &S.n[i];
    struct slots_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.node_name = n->name;
    cfg.life = test_rand(&S.rng) | 1;
    cfg.fresh_ns = FRESH;
    cfg.restarted = restarted;
    cfg.restarted_known = 1;
    cfg.send = net_send;
    cfg.send_ud = n;
    cfg.on_slots = on_slots;
    cfg.load = load;
    cfg.ud = n;
    assert_int_equal(slots_create(&cfg, S.now, &n->s), 0);
    assert_int_equal(conc_create(NULL, &n->c), 0);
    memset(n->cl, 0, sizeof(n->cl));
    n->alive = 1;
}

/* A node's process dies: its daemon state is gone, but the leases its
 * clients hold stay in use until they expire (the clients cannot renew). */
static struct conc *dead_leases[64];
static int ndead;

static void kill_node(int i)
{
    struct node *n = &S.n[i];
    n->alive = 0;
    n->dead_at = S.now;
    slots_destroy(n->s);
    n->s = NULL;
    assert_true(ndead < 64);
    dead_leases[ndead++] = n->c; /* frozen: counted until each lease expires */
    n->c = NULL;
    for (int k = 0; k < NMSG; k++)
        if (S.q[k].live && (S.q[k].to == i || S.q[k].from == i))
            S.q[k].live = 0;
}

/* Units held cluster-wide by leases alive at now. */
static int64_t held_now(int64_t *survivors)
{
    int64_t total = 0, surv = 0;
    for (int i = 0; i < S.nn; i++) {
        if (!S.n[i].alive)
            continue;
        conc_expire(S.n[i].c, S.now, NULL, NULL);
        surv += conc_held(S.n[i].c, KEY, strlen(KEY));
    }
    total = surv;
    for (int d = 0; d < ndead; d++) {
        conc_expire(dead_leases[d], S.now, NULL, NULL);
        total += conc_held(dead_leases[d], KEY, strlen(KEY));
    }
    if (survivors != NULL)
        *survivors = surv;
    return total;
}

static void clients_step(struct node *n)
{
    size_t kl = strlen(KEY);
    for (int j = 0; j < CLIENTS; j++) {
        struct client *c = &n->cl[j];
        if (c->id != 0) {
            int64_t e;
            if (S.now >= c->until) {
                (void)conc_release(n->c, KEY, kl, c->id, NULL, NULL);
                slots_note_held(n->s, KEY, kl, conc_held(n->c, KEY, kl), S.now);
                c->id = 0;
            } else if (test_rand(&S.rng) % 200 == 0) {
                /* renew, only while the node's slots are fresh */
                if (slots_may_renew(n->s, KEY, kl, S.now) &&
                    conc_renew(n->c, KEY, kl, c->id, 0, S.now, &e) != 0)
                    c->id = 0; /* it had expired */
            } else if (conc_earliest(n->c, KEY, kl) <= S.now) {
                conc_expire(n->c, S.now, NULL, NULL);
            }
            continue;
        }
        if (!S.demand || n->calm || test_rand(&S.rng) % 4 != 0)
            continue;
        struct conc_result r;
        int64_t held = conc_held(n->c, KEY, kl);
        int64_t cap = slots_cap(n->s, KEY, kl, LIMIT, TTL, held, 1, S.now);
        assert_int_equal(conc_acquire(n->c, KEY, kl, cap, 1, TTL, NULL, S.now, &r), 0);
        if (r.granted) {
            c->id = r.id;
            c->until = S.now + (int64_t)(20 + test_rand(&S.rng) % 200) * MS;
        }
    }
}

/* The kind of a slots message (1 report, 2 grant, 3 ask, 4 answer; see
 * the wire format in slots.h), or 0. */
static int msg_kind(const struct msg *m)
{
    static const size_t uint_len[4] = {2, 3, 5, 9};
    size_t at = 3; /* past fixarray(4), version, type */
    if (m->len < 5)
        return 0;
    if (m->buf[at] >= 0xcc && m->buf[at] <= 0xcf)
        at += uint_len[m->buf[at] - 0xcc];
    else if (m->buf[at] <= 0x7f)
        at++;
    else
        return 0;
    return at + 1 < m->len && (m->buf[at] & 0xf0) == 0x90 ? m->buf[at + 1] : 0;
}

static void deliver(void)
{
    for (int k = 0; k < NMSG; k++) {
        struct msg *m = &S.q[k];
        if (!m->live || m->at > S.now)
            continue;
        m->live = 0;
        if (S.n[m->to].older && (msg_kind(m) == 3 || msg_kind(m) == 4))
            continue; /* an older release drops what it cannot decode */
        if (S.part_on && S.side[m->from] != S.side[m->to])
            continue; /* cut */
        if (S.n[m->to].alive && S.n[m->from].alive)
            (void)slots_receive(S.n[m->to].s, S.n[m->from].name, m->buf, m->len, S.now);
    }
}

/* A fresh simulation of nn nodes node-0..node-(nn-1) for the scenario
 * named test (its seed), with a random loss of 0 to loss_mod - 1 percent,
 * every node up and seeing the others, its clients asking. */
static void sim_start(const char *test, int nn, int loss_mod)
{
    memset(&S, 0, sizeof(S));
    ndead = 0;
    S.rng = test_seed(test);
    S.nn = nn;
    S.loss_pct = (int)(test_rand(&S.rng) % (uint64_t)loss_mod);
    for (int i = 0; i < S.nn; i++) {
        snprintf(S.n[i].name, sizeof(S.n[i].name), "node-%d", i);
        start_node(i, 0);
    }
    set_views();
    S.demand = 1;
}

/* Frees nodes 0..n-1 and the leases of the dead. */
static void sim_free(int n)
{
    for (int i = 0; i < n; i++) {
        slots_destroy(S.n[i].s);
        conc_destroy(S.n[i].c);
    }
    for (int d = 0; d < ndead; d++)
        conc_destroy(dead_leases[d]);
    ndead = 0;
}

/* Runs for dur; returns the average units held by survivors. */
static double run(int64_t dur, int64_t *max_total)
{
    double sum = 0;
    int64_t steps = 0;
    int64_t end = S.now + dur;
    while (S.now < end) {
        S.now += MS;
        deliver();
        if (S.now % TICK == 0) {
            set_views();
            for (int i = 0; i < S.nn; i++)
                if (S.n[i].alive)
                    slots_tick(S.n[i].s, S.now);
        }
        for (int i = 0; i < S.nn; i++)
            if (S.n[i].alive)
                clients_step(&S.n[i]);
        int64_t surv, total = held_now(&surv);
        if (total > LIMIT)
            fprintf(stderr, "at %lld ms: %lld held > %d\n", (long long)(S.now / MS),
                    (long long)total, LIMIT);
        assert_true(total <= LIMIT);
        if (total > *max_total)
            *max_total = total;
        sum += (double)surv;
        steps++;
    }
    return steps ? sum / (double)steps : 0;
}

static void test_slots_cluster(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_slots_cluster");
    int rounds = 6;
    memset(&S, 0, sizeof(S));
    ndead = 0;
    S.rng = seed;
    S.nn = 3 + (int)(test_rand(&S.rng) % 3);
    S.loss_pct = (int)(test_rand(&S.rng) % 6);
    for (int i = 0; i < S.nn; i++) {
        snprintf(S.n[i].name, sizeof(S.n[i].name), "node-%d", i);
        start_node(i, 0);
    }
    set_views();
    S.demand = 1;
    int64_t max_total = 0;
    /* warm up, then hammer: utilisation */
    (void)run(2000 * MS, &max_total);
    double util = run(4000 * MS, &max_total);
    printf("[slots] %d nodes, loss %d%%: held on average %.2f of %d under hammering\n", S.nn,
           S.loss_pct, util, LIMIT);
    assert_true(util >= 0.9 * LIMIT);
    /* crashes: kill a node (a random one, the owner among them), restart
     * it, and check the survivors get everything back */
    for (int r = 0; r < rounds; r++) {
        int victim = (int)(test_rand(&S.rng) % (uint64_t)S.nn);
        int64_t t_kill = S.now;
        kill_node(victim);
        /* the survivors hold n again, within fresh + TTL + detection + a
         * few report periods */
        int64_t limit_t = FRESH + TTL + DETECT + 1000 * MS;
        int64_t back = -1;
        while (S.now - t_kill < limit_t + 2000 * MS) {
            int64_t surv;
            (void)run(10 * MS, &max_total);
            (void)held_now(&surv);
            if (surv == LIMIT) {
                back = S.now - t_kill;
                break;
            }
        }
        printf("[slots] round %d: node-%d killed; survivors hold %d again after %lld ms\n", r,
               victim, LIMIT, (long long)(back / MS));
        assert_true(back >= 0);
        assert_true(back <= limit_t + 2000 * MS);
        /* the node comes back as a new life */
        conc_destroy(S.n[victim].c);
        start_node(victim, 1);
        S.n[victim].dead_at = 0;
        (void)run(3000 * MS, &max_total);
    }
    /* no leak: after demand stops and everything drains, demand again
     * reaches n */
    S.demand = 0;
    (void)run(3000 * MS, &max_total);
    int64_t surv;
    assert_int_equal(held_now(&surv), 0);
    S.demand = 1;
    int64_t reached = 0;
    for (int k = 0; k < 400 && reached < LIMIT; k++) {
        (void)run(10 * MS, &max_total);
        (void)held_now(&surv);
        if (surv > reached)
            reached = surv;
    }
    printf("[slots] after the crashes: %lld of %d reachable (leaked %lld); most in flight %lld\n",
           (long long)reached, LIMIT, (long long)(LIMIT - reached), (long long)max_total);
    assert_int_equal(reached, LIMIT);
    sim_free(S.nn);
}

/* Slots node i holds (may hand out) now. */
static uint64_t slots_of(int i)
{
    struct slots_stats st;
    slots_get_stats(S.n[i].s, &st);
    return st.slots;
}

/* The key's owner (or -1). */
static int owner_of_key(void)
{
    for (int i = 0; i < S.nn; i++) {
        struct slots_stats st;
        if (!S.n[i].alive)
            continue;
        slots_get_stats(S.n[i].s, &st);
        if (st.owned > 0)
            return i;
    }
    return -1;
}

/*
 * Ownership that leaves a node and comes back to it: the owner dies, a
 * second node owns the key and lends, the first restarts (owning the key
 * again for a moment) and dies at once, and the second owns it again.  Its
 * new ledger must not take the nodes that report first (served by its
 * own life earlier, or never served) for all the holders: it lends nothing
 * beyond what is reported until fresh + TTL after it last saw another
 * owner.  Checked every millisecond by run(): never more than n in flight.
 */
static void test_slots_owner_comes_back(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_slots_owner_comes_back");
    memset(&S, 0, sizeof(S));
    ndead = 0;
    S.rng = seed;
    S.nn = 5;
    for (int i = 0; i < S.nn; i++) {
        snprintf(S.n[i].name, sizeof(S.n[i].name), "node-%d", i);
        start_node(i, 0);
    }
    set_views();
    S.demand = 1;
    int64_t max_total = 0;
    for (int round = 0; round < 4; round++) {
        (void)run(2000 * MS, &max_total);
        int a = owner_of_key();
        assert_true(a >= 0);
        kill_node(a);
        /* the next owner takes over and lends */
        (void)run(DETECT + FRESH + TTL + 1000 * MS, &max_total);
        int b = owner_of_key();
        assert_true(b >= 0 && b != a);
        /* a comes back just before a view change, owns the key for one
         * tick, and dies again */
        while (S.now % TICK != TICK - 5 * MS)
            (void)run(MS, &max_total);
        conc_destroy(S.n[a].c);
        start_node(a, 1);
        S.n[a].dead_at = 0;
        (void)run(20 * MS, &max_total);
        kill_node(a);
        (void)run(DETECT + FRESH + TTL + 2000 * MS, &max_total);
        printf("[slots] round %d: node-%d (owner) killed, node-%d owned, node-%d back for 20 ms; "
               "most in flight %lld of %d\n",
               round, a, b, a, (long long)max_total, LIMIT);
        conc_destroy(S.n[a].c);
        start_node(a, 1);
        S.n[a].dead_at = 0;
    }
    assert_true(max_total <= LIMIT);
    sim_free(S.nn);
}

/*
 * Two nodes.  One killed: the survivor cannot tell a crash from a
 * partition (one of two is no majority), so it grants nothing beyond its
 * freshness until the dead member is forgotten; then it counts itself
 * whole and serves all n.  One leaving (a graceful stop): the survivor is
 * the whole cluster at once and keeps serving.  Never more than n.
 */
static void test_slots_two_nodes(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_slots_two_nodes");
    memset(&S, 0, sizeof(S));
    ndead = 0;
    S.rng = seed;
    S.nn = 2;
    for (int i = 0; i < S.nn; i++) {
        snprintf(S.n[i].name, sizeof(S.n[i].name), "node-%d", i);
        start_node(i, 0);
    }
    set_views();
    S.demand = 1;
    int64_t max_total = 0, surv;
    for (int round = 0; round < 2; round++) {
        (void)run(2000 * MS, &max_total);
        /* round 0 kills the key's owner, round 1 the other node */
        int victim = owner_of_key();
        assert_true(victim >= 0);
        if (round == 1)
            victim = 1 - victim;
        int other = 1 - victim;
        kill_node(victim);
        /* once the death is seen, past the survivor's freshness and its
         * last leases (held up to 220 ms): nothing */
        (void)run(DETECT + TICK + FRESH + 300 * MS, &max_total);
        for (int t = 0; t < 3000; t += 10) {
            (void)run(10 * MS, &max_total);
            (void)held_now(&surv);
            assert_int_equal(surv, 0);
        }
        /* forgotten: the survivor alone is the cluster, and serves n */
        S.n[victim].gone = 1;
        int64_t t0 = S.now, back = -1;
        while (S.now - t0 < FRESH + TTL + 2000 * MS) {
            (void)run(10 * MS, &max_total);
            if (slots_of(other) == LIMIT) {
                back = S.now - t0;
                break;
            }
        }
        printf("[slots] 2 nodes, node-%d killed: node-%d held 0 while it was a member, all %d "
               "slots %lld ms after it was forgotten\n",
               victim, other, LIMIT, (long long)(back / MS));
        assert_true(back >= 0);
        /* it comes back */
        conc_destroy(S.n[victim].c);
        start_node(victim, 1);
        S.n[victim].dead_at = 0;
        S.n[victim].gone = 0;
    }
    /* a graceful leave: the survivor goes on */
    (void)run(3000 * MS, &max_total);
    int leaver = owner_of_key();
    assert_true(leaver >= 0);
    kill_node(leaver);
    S.n[leaver].gone = 1;
    int64_t t0 = S.now, back = -1;
    while (S.now - t0 < FRESH + TTL + 2000 * MS) {
        (void)run(10 * MS, &max_total);
        if (slots_of(1 - leaver) == LIMIT) {
            back = S.now - t0;
            break;
        }
    }
    printf("[slots] 2 nodes, node-%d (the owner) left: the other held all %d slots after %lld ms; "
           "most in flight %lld\n",
           leaver, LIMIT, (long long)(back / MS), (long long)max_total);
    assert_true(back >= 0);
    assert_true(max_total <= LIMIT);
    sim_free(S.nn);
}

/* Units held now by the live nodes of one side of a partition. */
static int64_t side_held(int side)
{
    int64_t h = 0;
    for (int i = 0; i < S.nn; i++)
        if (S.n[i].alive && S.side[i] == side)
            h += conc_held(S.n[i].c, KEY, strlen(KEY));
    return h;
}

/*
 * A partition: two of five nodes cut off from the other three for 4 s,
 * the key's owner in the minority, then in the majority.  Checked every
 * millisecond by run(): never more than n in flight, the two sides
 * together.  The minority has no majority of the members it knows, so it
 * grants and renews nothing once its freshness ran out, and holds nothing
 * once its last leases ended; the majority holds all n again once the
 * minority's slots can have expired (fresh + TTL after its last answered
 * report, plus detection and report periods), never before; after the
 * heal the whole cluster shares n again.
 */
static void test_slots_partition(void **state)
{
    (void)state;
    sim_start("test_slots_partition", 5, 4);
    int64_t max_total = 0;
    (void)run(2000 * MS, &max_total);
    for (int round = 0; round < 2; round++) {
        int owner = owner_of_key();
        assert_true(owner >= 0);
        int a = round == 0 ? owner : (owner + 1) % S.nn, b = (a + (round == 0 ? 1 : 2)) % S.nn;
        for (int i = 0; i < S.nn; i++)
            S.side[i] = i == a || i == b;
        S.part_on = 1;
        S.part_at = S.now;
        int64_t limit_t = FRESH + TTL + DETECT + 1000 * MS, back = -1;
        while (S.now - S.part_at < limit_t + 2000 * MS) {
            (void)run(10 * MS, &max_total);
            if (back < 0 && side_held(0) == LIMIT)
                back = S.now - S.part_at;
            if (back >= 0 && S.now - S.part_at >= 4000 * MS)
                break;
        }
        int64_t minority = side_held(1);
        printf("[slots] partition node-%d,node-%d | the other three (the owner in the %s): the "
               "majority held all %d again after %lld ms; the minority held %lld at 4 s\n",
               a, b, round == 0 ? "minority" : "majority", LIMIT, (long long)(back / MS),
               (long long)minority);
        assert_true(back >= 0);
        assert_true(back <= limit_t + 2000 * MS);
        assert_int_equal(minority, 0);
        /* heal: the views are whole again, the minority's nodes ask again */
        S.part_on = 0;
        (void)run(1000 * MS, &max_total);
        double util = run(2000 * MS, &max_total);
        printf("[slots] healed: %.2f of %d held on average\n", util, LIMIT);
        assert_true(util >= 0.9 * LIMIT);
    }
    assert_true(max_total <= LIMIT);
    sim_free(S.nn);
}

/* A name never used in this run (node-N, N from 5 up) that wins KEY over
 * nodes 0..base-1. */
static void new_name(char *out, size_t cap, int base, int *serial)
{
    uint64_t kh = hrw_hash(KEY, strlen(KEY));
    for (;; (*serial)++) {
        snprintf(out, cap, "node-%d", *serial);
        uint64_t mine = hrw_score(kh, hrw_hash(out, strlen(out)));
        int wins = 1;
        for (int i = 0; i < base && wins; i++)
            wins = hrw_score(kh, hrw_hash(S.n[i].name, strlen(S.n[i].name))) < mine;
        if (wins) {
            (*serial)++;
            return;
        }
    }
}

/*
 * Members new to the cluster (names never seen, so not "restarted") join
 * while a key is hammered, one of them winning its ownership.  The new
 * owner's ledger starts empty, and the first reports it gets may come from
 * nodes the old owner never served (itself among them) before the holders
 * report: it must not lend them slots the holders still have.  `joiners`
 * names that each outrank the `base` members for the key join at the same
 * instant (hammering it too), stay, and leave gracefully; four rounds.
 * Checked every millisecond by run(): never more than n in flight; and the
 * cluster holds n again after each join (nothing leaked or stuck).
 */
static void new_members_take_over(const char *name, int base, int joiners, int calm)
{
    uint64_t seed = test_seed(name);
    memset(&S, 0, sizeof(S));
    ndead = 0;
    S.rng = seed;
    S.nn = base;
    S.loss_pct = (int)(test_rand(&S.rng) % 4);
    for (int i = 0; i < S.nn; i++) {
        snprintf(S.n[i].name, sizeof(S.n[i].name), "node-%d", i);
        start_node(i, 0);
    }
    set_views();
    S.demand = 1;
    int64_t max_total = 0, worst_back = 0;
    double worst_util = LIMIT;
    int serial = 5;
    (void)run(2000 * MS, &max_total);
    for (int round = 0; round < 4; round++) {
        /* calm: the old members' clients keep the leases they hold but ask
         * for no more from a tick or two before the join, so none of them
         * is short: they report only every few ticks, and the holders are
         * the last to reach the new owner */
        for (int i = 0; i < base; i++)
            S.n[i].calm = calm;
        if (calm)
            (void)run((int64_t)(50 + test_rand(&S.rng) % 60) * MS, &max_total);
        /* join at a random point of the tick */
        (void)run((int64_t)(1 + test_rand(&S.rng) % 50) * MS, &max_total);
        for (int j = base; j < base + joiners; j++) {
            new_name(S.n[j].name, sizeof(S.n[j].name), base, &serial);
            S.n[j].gone = 0;
            S.n[j].dead_at = 0;
            start_node(j, 0);
        }
        S.nn = base + joiners;
        int64_t t_join = S.now, back = -1;
        double sum = 0;
        int steps = 0;
        while (S.now - t_join < FRESH + TTL + 3000 * MS) {
            int64_t surv;
            sum += run(10 * MS, &max_total);
            steps++;
            (void)held_now(&surv);
            if (back < 0 && S.now - t_join > 50 * MS && surv == LIMIT)
                back = S.now - t_join;
        }
        int owner = owner_of_key();
        assert_true(owner >= base);
        double util = sum / steps;
        printf("[slots] round %d: %d new member(s) joined, %s took the key over; %d held again "
               "after %lld ms; %.2f of %d held on average over the %lld ms after the join; most "
               "in flight %lld of %d\n",
               round, joiners, S.n[owner].name, LIMIT, (long long)(back / MS), util, LIMIT,
               (long long)((S.now - t_join) / MS), (long long)max_total, LIMIT);
        assert_true(back >= 0);
        if (back > worst_back)
            worst_back = back;
        if (util < worst_util)
            worst_util = util;
        /* they leave gracefully; their clients' leases stay counted until
         * they expire */
        for (int j = base; j < base + joiners; j++) {
            kill_node(j);
            S.n[j].gone = 1;
        }
        for (int i = 0; i < base; i++)
            S.n[i].calm = 0;
        (void)run(FRESH + TTL + 2000 * MS, &max_total);
        S.nn = base;
    }
    printf("[slots] %d new member(s) at a time taking a hammered key over (loss %d%%): most in "
           "flight %lld of %d; n held again at most %lld ms after a join; at least %.2f of %d "
           "held on average after a join\n",
           joiners, S.loss_pct, (long long)max_total, LIMIT, (long long)(worst_back / MS),
           worst_util, LIMIT);
    assert_true(max_total <= LIMIT);
    sim_free(base);
}

/* One new member that wins the key joins four. */
static void test_slots_new_member_takes_over(void **state)
{
    (void)state;
    new_members_take_over("test_slots_new_member_takes_over", 4, 1, 0);
}

/* Two new members, each outranking the three old ones for the key, join
 * at once: the old owner is only the third for the key. */
static void test_slots_two_new_members(void **state)
{
    (void)state;
    new_members_take_over("test_slots_two_new_members", 3, 2, 0);
}

/* Three new members, each outranking the three old ones for the key, join
 * at once: the old owner is only the fourth for the key, below every
 * member the new owner asks first, and all of those are as new as it. */
static void test_slots_three_new_members(void **state)
{
    (void)state;
    new_members_take_over("test_slots_three_new_members", 3, 3, 1);
}

/* Four new members over four old ones: half the cluster is new at once
 * (the old members keep the majority of the view). */
static void test_slots_four_new_members(void **state)
{
    (void)state;
    new_members_take_over("test_slots_four_new_members", 4, 4, 1);
}

/*
 * A rolling upgrade from a release without asks: five nodes run it (they
 * drop asks and answers as malformed, so their asks, and a new owner's
 * asks to them, are answered by nobody and time out fresh + TTL after the
 * ledger began); one at a time each restarts on the new release (the same
 * name, a new life: "restarted") and runs a while, as when each waits for
 * /ready.  Midway a member new to the cluster, on the new release and
 * outranking everyone for the key, joins and later leaves.  Hammered all
 * along; checked every millisecond by run(): never more than n in flight;
 * and the cluster holds n again after the upgrade (nothing leaked).
 */
static void test_slots_rolling_upgrade(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_slots_rolling_upgrade");
    memset(&S, 0, sizeof(S));
    ndead = 0;
    S.rng = seed;
    S.nn = 5;
    S.loss_pct = (int)(test_rand(&S.rng) % 4);
    for (int i = 0; i < S.nn; i++) {
        snprintf(S.n[i].name, sizeof(S.n[i].name), "node-%d", i);
        S.n[i].older = 1;
        start_node(i, 0);
    }
    set_views();
    S.demand = 1;
    int64_t max_total = 0, surv;
    int serial = 5;
    (void)run(2000 * MS, &max_total);
    for (int i = 0; i < 5; i++) {
        /* a graceful restart: stop, start on the new release */
        (void)run((int64_t)(1 + test_rand(&S.rng) % 50) * MS, &max_total);
        kill_node(i);
        (void)run((int64_t)(100 + test_rand(&S.rng) % 400) * MS, &max_total);
        conc_destroy(S.n[i].c);
        S.n[i].older = 0;
        start_node(i, 1);
        S.n[i].dead_at = 0;
        (void)run(1500 * MS, &max_total);
        if (i == 2) {
            /* a new member, new release, winning the key */
            new_name(S.n[5].name, sizeof(S.n[5].name), 5, &serial);
            S.n[5].gone = 0;
            S.n[5].dead_at = 0;
            S.n[5].older = 0;
            start_node(5, 0);
            S.nn = 6;
            (void)run(FRESH + TTL + 1500 * MS, &max_total);
            assert_int_equal(owner_of_key(), 5);
            kill_node(5);
            S.n[5].gone = 1;
            (void)run(500 * MS, &max_total);
            S.nn = 5;
        }
    }
    /* all upgraded: the cluster holds n again */
    int64_t t0 = S.now, back = -1;
    while (S.now - t0 < FRESH + TTL + 3000 * MS && back < 0) {
        (void)run(10 * MS, &max_total);
        (void)held_now(&surv);
        if (surv == LIMIT)
            back = S.now - t0;
    }
    printf("[slots] rolling upgrade of 5 nodes from a release without asks, a new member joining "
           "midway (loss %d%%): most in flight %lld of %d; %d held %lld ms after the last "
           "restart\n",
           S.loss_pct, (long long)max_total, LIMIT, LIMIT, (long long)(back / MS));
    assert_true(back >= 0);
    assert_true(max_total <= LIMIT);
    sim_free(5);
}

/*
 * A cluster started fresh and hammered at once serves global leases at
 * once: no past owner can have lent, so the owner's caution about past
 * owners costs at most a round trip.  5 nodes, every client asking from
 * the first millisecond.
 */
static void test_slots_fresh_cluster(void **state)
{
    (void)state;
    sim_start("test_slots_fresh_cluster", 5, 4);
    int64_t max_total = 0, first = -1, all = -1, surv;
    while (S.now < 2000 * MS && all < 0) {
        (void)run(MS, &max_total);
        (void)held_now(&surv);
        if (first < 0 && surv > 0)
            first = S.now;
        if (surv == LIMIT)
            all = S.now;
    }
    printf("[slots] fresh cluster of %d (loss %d%%): first lease after %lld ms, all %d held after "
           "%lld ms\n",
           S.nn, S.loss_pct, (long long)(first / MS), LIMIT, (long long)(all / MS));
    assert_true(first >= 0 && first <= 1000 * MS);
    assert_true(all >= 0 && all <= 1000 * MS);
    sim_free(S.nn);
}

/* Malformed and foreign messages are dropped and counted, never applied. */
static int sink_send(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    (void)ud;
    (void)to;
    (void)buf;
    (void)len;
    return 0;
}

static void test_slots_bad_input(void **state)
{
    (void)state;
    struct node n;
    struct slots_config cfg;
    struct slots_stats st;
    memset(&n, 0, sizeof(n));
    strcpy(n.name, "a");
    assert_int_equal(conc_create(NULL, &n.c), 0);
    memset(&cfg, 0, sizeof(cfg));
    cfg.node_name = "a";
    cfg.life = 7;
    cfg.restarted_known = 1;
    cfg.send = net_send;
    cfg.send_ud = &n;
    cfg.load = load;
    cfg.ud = &n;
    assert_int_equal(slots_create(&cfg, 0, &n.s), 0);
    const uint8_t junk[] = {0x94, WIRE_VERSION, WIRE_SLOTS, 0xc0};
    assert_true(slots_receive(n.s, "b", junk, sizeof(junk), 0) < 0);
    const uint8_t other[] = {0x95, WIRE_VERSION, WIRE_REPORT};
    assert_false(slots_is_message(other, sizeof(other)));
    assert_true(slots_receive(n.s, "a", junk, sizeof(junk), 0) < 0); /* from itself */
    uint64_t seed = test_seed("test_slots_bad_input"), r = seed;
    uint8_t buf[64];
    for (int i = 0; i < 20000; i++) {
        size_t len = 3 + test_rand(&r) % 60;
        for (size_t k = 0; k < len; k++)
            buf[k] = (uint8_t)test_rand(&r);
        buf[0] = 0x94;
        buf[1] = WIRE_VERSION;
        buf[2] = WIRE_SLOTS;
        (void)slots_receive(n.s, "b", buf, len, 0);
    }
    slots_get_stats(n.s, &st);
    assert_true(st.bad_packets > 19000);
    assert_int_equal(st.slots, 0);
    /* Well-formed msgpack of the right header, with bodies of any kind,
     * length and values (huge, zero, a key too long or empty): refused or
     * taken, never a crash, and what it takes stays within the limits. */
    slots_destroy(n.s);
    cfg.send = sink_send; /* its answers go nowhere: "b" is no node here */
    assert_int_equal(slots_create(&cfg, 0, &n.s), 0);
    uint64_t bad0 = 0;
    static char key[WIRE_KEY_MAX + 2];
    memset(key, 'k', sizeof(key));
    for (int i = 0; i < 20000; i++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_uint8(&pk, WIRE_VERSION);
        msgpack_pack_uint8(&pk, WIRE_SLOTS);
        msgpack_pack_uint64(&pk, test_rand(&r) % 4);
        uint32_t nf = (uint32_t)(test_rand(&r) % 12);
        msgpack_pack_array(&pk, nf);
        for (uint32_t f = 0; f < nf; f++) {
            uint64_t v = test_rand(&r);
            if (f == 1) {
                size_t kl = test_rand(&r) % 4 == 0 ? (size_t)(v % sizeof(key)) : 1 + v % 8;
                msgpack_pack_bin(&pk, kl);
                msgpack_pack_bin_body(&pk, key, kl);
            } else {
                static const uint64_t shapes[4] = {0, 1, UINT64_MAX, 10};
                msgpack_pack_uint64(&pk, f == 0 ? v % 6 : v % 3 == 0 ? shapes[v % 4] : v % 50);
            }
        }
        (void)slots_receive(n.s, "b", (const uint8_t *)sb.data, sb.size, 0);
        msgpack_sbuffer_destroy(&sb);
    }
    slots_get_stats(n.s, &st);
    print_message("structured input: %llu taken, %llu refused\n", (unsigned long long)st.received,
                  (unsigned long long)st.bad_packets);
    assert_true(st.bad_packets > bad0 && st.received > 0);
    assert_true(st.slots <= 50);
    slots_destroy(n.s);
    conc_destroy(n.c);
}

int main(void)
{
    /* SLUICE_SIM_ONLY=<pattern>: run the matching scenarios alone (sweeps) */
    const char *only = getenv("SLUICE_SIM_ONLY");
    if (only != NULL && *only != '\0')
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_cluster),
        cmocka_unit_test(test_slots_owner_comes_back),
        cmocka_unit_test(test_slots_two_nodes),
        cmocka_unit_test(test_slots_partition),
        cmocka_unit_test(test_slots_new_member_takes_over),
        cmocka_unit_test(test_slots_two_new_members),
        cmocka_unit_test(test_slots_three_new_members),
        cmocka_unit_test(test_slots_four_new_members),
        cmocka_unit_test(test_slots_rolling_upgrade),
        cmocka_unit_test(test_slots_fresh_cluster),
        cmocka_unit_test(test_slots_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
