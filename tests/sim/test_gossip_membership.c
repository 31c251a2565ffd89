/*
 * libgossip membership scenarios on the simulator: convergence, failure
 * detection, no false deaths under loss, partitions, slow nodes (Lifeguard),
 * graceful leave, replays and restarts.  Seeded: SLUICE_SEED=<n> replays a
 * run.  SLUICE_SIM_QUICK=1 shortens the long scenarios (simutil.h);
 * SLUICE_SIM_ONLY=<pattern> (cmocka's, e.g. test_stalled*) runs the
 * matching scenarios alone, to sweep a new one over many seeds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "simutil.h"
#include "testutil.h"

static uint64_t seed;

static uint64_t total_stat(struct gossip_sim *s, size_t off)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < gossip_sim_count(s); i++) {
        struct gossip_node *n = gossip_sim_node(s, (int)i);
        struct gossip_stats st;
        if (n == NULL)
            continue;
        gossip_node_stats(n, &st);
        sum += *(const uint64_t *)((const char *)&st + off);
    }
    return sum;
}
#define TOTAL(s, field) total_stat((s), offsetof(struct gossip_stats, field))

static struct gossip_sim *new_sim(double loss)
{
    struct gossip_sim *s;
    struct gossip_sim_link l = {.drop = loss, .delay_ns = 1 * MSEC, .jitter_ns = 2 * MSEC};
    assert_int_equal(gossip_sim_create(&s, seed, &l), 0);
    return s;
}

static void converge(int n)
{
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, NULL);
    int64_t t = sim_converge(s, (size_t)n, 100 * MSEC, 120 * SEC);
    fprintf(stderr, "  %d nodes: full membership after %.1f s\n", n, (double)t / SEC);
    assert_true(t >= 0);
    gossip_sim_destroy(s);
}

static void test_five_nodes_converge(void **state)
{
    (void)state;
    converge(5);
}

static void test_hundred_nodes_converge(void **state)
{
    (void)state;
    converge(100);
}

/* Every survivor declares a crashed node dead within the bound implied by
 * the configuration: one probe round to notice (at most the cluster size in
 * probe intervals, in practice a few), the maximum suspicion timeout, and a
 * few seconds of dissemination. */
static void test_killed_node_declared_dead(void **state)
{
    (void)state;
    const int n = 16;
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, NULL);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    gossip_sim_run(s, 5 * SEC);
    struct gossip_config def;
    gossip_config_default(&def);
    double scale = log10((double)n) > 1 ? log10((double)n) : 1.0;
    int64_t max_susp = (int64_t)(def.suspicion_mult * scale * def.probe_interval_ms * MSEC) *
                       def.suspicion_max_timeout_mult;
    int64_t bound = 5 * def.probe_interval_ms * MSEC + max_susp + 5 * SEC;
    int victim = 7;
    assert_int_equal(gossip_sim_kill(s, victim), 0);
    int64_t t0 = gossip_sim_now(s), took = -1;
    while (gossip_sim_now(s) - t0 <= bound) {
        gossip_sim_run(s, 100 * MSEC);
        int all = 1;
        for (int i = 0; i < n && all; i++)
            if (i != victim)
                all = sim_state_of(s, i, "node-007") == GOSSIP_MEMBER_DEAD;
        if (all) {
            took = gossip_sim_now(s) - t0;
            break;
        }
    }
    fprintf(stderr, "  dead everywhere after %.1f s (bound %.1f s)\n", (double)took / SEC,
            (double)bound / SEC);
    assert_true(took >= 0);
    /* Nobody else was harmed. */
    for (int i = 0; i < n; i++)
        if (i != victim)
            assert_int_equal(sim_view(s, i).alive, n - 1);
    gossip_sim_destroy(s);
}

/* 10% loss on every link for 10 simulated minutes: suspicions happen (and
 * are refuted) but nobody is ever declared dead. */
static void test_no_false_deaths_under_loss(void **state)
{
    (void)state;
    const int n = sim_full() ? 100 : 20;
    const int64_t minutes = sim_full() ? 10 : 3;
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, NULL);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    /* Jitter reorders packets and 2% arrive twice, on top of the loss. */
    struct gossip_sim_link lossy = {
        .drop = 0.10, .duplicate = 0.02, .delay_ns = 1 * MSEC, .jitter_ns = 20 * MSEC};
    gossip_sim_set_default_link(s, &lossy);
    gossip_sim_run(s, minutes * 60 * SEC);
    uint64_t deaths = TOTAL(s, deaths), susp = TOTAL(s, suspicions);
    fprintf(stderr, "  %d nodes, %lld min at 10%% loss: %llu suspicions, %llu deaths\n", n,
            (long long)minutes, (unsigned long long)susp, (unsigned long long)deaths);
    assert_int_equal(deaths, 0);
    /* Under loss a member may be suspect at any instant, never dead. */
    for (int i = 0; i < n; i++) {
        struct sim_count c = sim_view(s, i);
        assert_int_equal(c.alive + c.suspect, n);
        assert_int_equal(c.dead + c.left, 0);
    }
    gossip_sim_destroy(s);
}

/* A 5|5 partition long enough for each side to declare the other dead;
 * after it heals, both sides merge back into one cluster. */
static void test_partition_heals(void **state)
{
    (void)state;
    const int n = 10;
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, NULL);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    for (int i = n / 2; i < n; i++)
        gossip_sim_set_group(s, i, 1);
    gossip_sim_run(s, 90 * SEC);
    assert_int_equal(sim_view(s, 0).alive, n / 2);
    assert_int_equal(sim_view(s, n - 1).alive, n / 2);
    for (int i = 0; i < n; i++)
        gossip_sim_set_group(s, i, 0);
    int64_t t = sim_converge(s, n, 500 * MSEC, 10 * 60 * SEC);
    fprintf(stderr, "  partition healed: full membership after %.1f s\n", (double)t / SEC);
    assert_true(t >= 0);
    gossip_sim_destroy(s);
}

/* Two clusters that know nothing of each other find each other through
 * their seeds: (1) a 5|5 partition longer than the tombstones, after which
 * each side has forgotten the other and is whole in its own eyes; (2) six
 * nodes started during a partition, 3..5 seeded with node 0 and node 3, so
 * that 3..5 form a cluster of their own.  Before the seeds were retried
 * both stayed two clusters for good, each reporting itself whole. */
static void test_separated_clusters_meet(void **state)
{
    (void)state;
    const int n = 10;
    struct gossip_config def;
    gossip_config_default(&def);
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, NULL);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    for (int i = n / 2; i < n; i++)
        gossip_sim_set_group(s, i, 1);
    gossip_sim_run(s, def.tombstone_ms * MSEC + 2 * def.dead_reap_ms * MSEC);
    for (int i = 0; i < n; i++) /* forgotten: each side is all it knows */
        assert_int_equal(sim_view(s, i).alive + sim_view(s, i).dead + sim_view(s, i).left,
                         (size_t)n / 2);
    for (int i = 0; i < n; i++)
        gossip_sim_set_group(s, i, 0);
    int64_t t1 = sim_converge(s, n, 500 * MSEC, 4 * def.pushpull_interval_ms * MSEC);
    gossip_sim_destroy(s);

    const int m = 6;
    s = new_sim(0);
    for (int i = 0; i < m; i++) {
        struct gossip_config cfg;
        char name[32];
        sim_cfg(&cfg, name, i);
        assert_int_equal(gossip_sim_add(s, &cfg), i);
        gossip_sim_set_group(s, i, i >= m / 2);
    }
    struct gossip_addr seeds[2] = {*gossip_sim_addr(s, 0), *gossip_sim_addr(s, m / 2)};
    for (int i = 1; i < m; i++)
        assert_int_equal(gossip_node_join(gossip_sim_node(s, i), seeds, i >= m / 2 ? 2 : 1), 0);
    gossip_sim_run(s, 60 * SEC);
    assert_int_equal(sim_view(s, 0).alive, (size_t)m / 2);
    assert_int_equal(sim_view(s, m - 1).alive, (size_t)m / 2);
    for (int i = 0; i < m; i++)
        gossip_sim_set_group(s, i, 0);
    int64_t t2 = sim_converge(s, (size_t)m, 500 * MSEC, 4 * def.pushpull_interval_ms * MSEC);
    fprintf(stderr,
            "  clusters that forgot each other (partition of %lld s): one after %.1f s; "
            "islands formed at start: one after %.1f s\n",
            (long long)(def.tombstone_ms / 1000 + 2 * def.dead_reap_ms / 1000), (double)t1 / SEC,
            (double)t2 / SEC);
    assert_true(t1 >= 0);
    assert_true(t2 >= 0);
    gossip_sim_destroy(s);
}

/* Deaths each node declares, and the simulated time of the last one, by
 * side of a partition (node i's side is i >= n / 2); recorded only while
 * `heal_watch` is set. */
#define HEAL_N 10
static int heal_watch;
static int heal_same_side, heal_other_side;

static void heal_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    int viewer = (int)(intptr_t)ud, subject = atoi(m->name + 5); /* "node-007" */
    if (!heal_watch || ev != GOSSIP_EVENT_DEAD)
        return;
    if ((viewer >= HEAL_N / 2) == (subject >= HEAL_N / 2))
        heal_same_side++;
    else
        heal_other_side++;
}

static void heal_tweak(struct gossip_config *cfg, int i)
{
    cfg->cb.ud = (void *)(intptr_t)i;
    cfg->cb.on_event = heal_event;
}

/* When a partition heals, each side's verdicts about the other (dead at the
 * incarnation it had) reach members that can reach the accused: a node
 * whose own last probe of a member did not fail only suspects it on such
 * news, so the member refutes, and nobody on its side declares it dead.
 * (A suspicion of the other side still running at the heal may expire
 * before the refutation arrives: the detector judging what it saw, printed
 * and not asserted.) */
static void test_partition_heal_no_false_deaths(void **state)
{
    (void)state;
    const int n = HEAL_N;
    struct gossip_sim *s = new_sim(0);
    heal_watch = 0;
    heal_same_side = heal_other_side = 0;
    sim_cluster(s, n, NULL, heal_tweak);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    for (int i = n / 2; i < n; i++)
        gossip_sim_set_group(s, i, 1);
    /* Long enough for each side to declare most of the other dead, short
     * enough that the verdicts still ride on every packet at the heal. */
    gossip_sim_run(s, 15 * SEC);
    heal_watch = 1;
    for (int i = 0; i < n; i++)
        gossip_sim_set_group(s, i, 0);
    int64_t t = sim_converge(s, n, 100 * MSEC, 10 * 60 * SEC);
    gossip_sim_run(s, 30 * SEC);
    fprintf(stderr,
            "  partition healed: whole after %.1f s; deaths declared after the heal: %d of a "
            "member on the same side, %d across\n",
            (double)t / SEC, heal_same_side, heal_other_side);
    assert_true(t >= 0);
    assert_int_equal(heal_same_side, 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(sim_view(s, i).alive, n);
    heal_watch = 0;
    gossip_sim_destroy(s);
}

/* A one-way link failure (5 cannot reach 3, 3 still reaches 5): probes
 * between them fail directly but succeed through others, so nobody dies. */
static void test_one_way_link(void **state)
{
    (void)state;
    const int n = 10;
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, NULL);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    assert_int_equal(gossip_sim_block(s, 5, 3, 1), 0);
    gossip_sim_run(s, 5 * 60 * SEC);
    uint64_t indirect = TOTAL(s, indirect_probes);
    fprintf(stderr, "  one-way failure, 5 min: %llu indirect probes, %llu suspicions\n",
            (unsigned long long)indirect, (unsigned long long)TOTAL(s, suspicions));
    assert_true(indirect > 0);
    assert_int_equal(TOTAL(s, deaths), 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(sim_view(s, i).dead, 0);
    gossip_sim_destroy(s);
}

struct slow_result {
    uint64_t suspicions, deaths;
    int health;
};

static void no_lifeguard(struct gossip_config *cfg, int i)
{
    (void)i;
    cfg->lifeguard = 0;
}

static struct slow_result slow_run(int lifeguard, int64_t minutes)
{
    const int n = 16, slow = 3;
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, lifeguard ? NULL : no_lifeguard);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    uint64_t before = TOTAL(s, suspicions);
    /* Its packets wait 1.2 s before it handles them: longer than a probe
     * interval, so its own probes of healthy nodes fail. */
    gossip_sim_set_slow(s, slow, 1200 * MSEC);
    gossip_sim_run(s, minutes * 60 * SEC);
    struct slow_result r = {TOTAL(s, suspicions) - before, TOTAL(s, deaths),
                            gossip_node_health(gossip_sim_node(s, slow))};
    gossip_sim_destroy(s);
    return r;
}

/* Lifeguard: a node that handles its packets late must not get healthy nodes
 * declared dead.  The same run without Lifeguard is printed for comparison
 * (it is expected to raise more suspicions, but that is not asserted). */
static void test_slow_node_lifeguard(void **state)
{
    (void)state;
    int64_t minutes = sim_full() ? 5 : 2;
    struct slow_result on = slow_run(1, minutes);
    struct slow_result off = slow_run(0, minutes);
    fprintf(stderr,
            "  slow node, %lld min: lifeguard on: %llu suspicions, %llu deaths, health %d; "
            "off: %llu suspicions, %llu deaths\n",
            (long long)minutes, (unsigned long long)on.suspicions, (unsigned long long)on.deaths,
            on.health, (unsigned long long)off.suspicions, (unsigned long long)off.deaths);
    assert_int_equal(on.deaths, 0);
}

/* ---- leave and replay ---- */

#define MAX_REC 4096
struct recorder {
    int from;
    int active;
    size_t n;
    struct {
        int to;
        size_t len;
        uint8_t *pkt;
    } rec[MAX_REC];
};

static void record_tap(void *ud, int from, int to, const uint8_t *pkt, size_t len)
{
    struct recorder *r = ud;
    if (!r->active || from != r->from || r->n == MAX_REC)
        return;
    r->rec[r->n].to = to;
    r->rec[r->n].len = len;
    r->rec[r->n].pkt = malloc(len);
    memcpy(r->rec[r->n].pkt, pkt, len);
    r->n++;
}

static void replay(struct gossip_sim *s, struct recorder *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (gossip_sim_node(s, r->rec[i].to) != NULL)
            gossip_sim_inject(s, r->from, r->rec[i].to, r->rec[i].pkt, r->rec[i].len);
}

static void assert_not_resurrected(struct gossip_sim *s, int n, int who, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (i == who)
            continue;
        int st = sim_state_of(s, i, name);
        assert_true(st == -1 || st == GOSSIP_MEMBER_LEFT);
    }
}

static void test_left_node_not_resurrected(void **state)
{
    (void)state;
    const int n = 8, who = 5;
    static struct recorder rec;
    memset(&rec, 0, sizeof(rec));
    rec.from = who;
    rec.active = 1;
    struct gossip_sim *s = new_sim(0);
    gossip_sim_set_tap(s, record_tap, &rec);
    sim_cluster(s, n, NULL, NULL);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    gossip_sim_run(s, 10 * SEC); /* record some ordinary traffic of node 5 */
    rec.active = 0;
    assert_true(rec.n > 10);
    assert_int_equal(gossip_node_leave(gossip_sim_node(s, who)), 0);
    gossip_sim_run(s, 2 * SEC);
    gossip_sim_kill(s, who);
    gossip_sim_run(s, 5 * SEC);
    for (int i = 0; i < n; i++)
        if (i != who)
            assert_int_equal(sim_state_of(s, i, "node-005"), GOSSIP_MEMBER_LEFT);
    /* Replays while the leave is fresh: incarnation order must hold. */
    replay(s, &rec);
    gossip_sim_run(s, 10 * SEC);
    assert_not_resurrected(s, n, who, "node-005");
    /* Replays after it was forgotten: the tombstone and the packet timestamp
     * window must hold. */
    gossip_sim_run(s, 60 * SEC);
    replay(s, &rec);
    gossip_sim_run(s, 10 * SEC);
    assert_not_resurrected(s, n, who, "node-005");
    uint64_t stale = TOTAL(s, drops[GOSSIP_DROP_STALE]);
    fprintf(stderr, "  replayed %zu packets twice; dropped as stale: %llu\n", rec.n,
            (unsigned long long)stale);
    assert_true(stale >= rec.n); /* the late replay is refused outright */
    for (int i = 0; i < n; i++)
        if (i != who)
            assert_int_equal(sim_view(s, i).alive, n - 1);
    for (size_t i = 0; i < rec.n; i++)
        free(rec.rec[i].pkt);
    gossip_sim_destroy(s);
}

/* A crashed node that restarts (state wiped, higher incarnation) is alive
 * again everywhere; nothing else brings a dead node back. */
static void test_restarted_node_rejoins(void **state)
{
    (void)state;
    const int n = 8, who = 2;
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, NULL);
    assert_true(sim_converge(s, n, 100 * MSEC, 60 * SEC) >= 0);
    gossip_sim_kill(s, who);
    gossip_sim_run(s, 25 * SEC);
    for (int i = 0; i < n; i++)
        if (i != who)
            assert_int_equal(sim_state_of(s, i, "node-002"), GOSSIP_MEMBER_DEAD);
    gossip_sim_run(s, 60 * SEC); /* forgotten (reaped) by now */
    assert_int_equal(gossip_sim_restart(s, who, 0), 0);
    int64_t t = sim_converge(s, n, 100 * MSEC, 60 * SEC);
    fprintf(stderr, "  restarted node alive everywhere after %.1f s\n", (double)t / SEC);
    assert_true(t >= 0);
    gossip_sim_destroy(s);
}

/* ---- a stalled process (SIGSTOP) ---- */

/* The shortest stall that can get a member declared dead, by SWIM with
 * Lifeguard's suspicion timeouts (memberlist's formula): a probe sent just
 * before the stall fails at the end of its probe interval, and the
 * suspicion it starts lasts at least suspicion_mult * max(1, log10 n)
 * probe intervals (the minimum, reached once enough members confirm it,
 * or at once in a cluster too small to expect confirmations).  Anything
 * shorter must pass unnoticed but for suspicions. */
static int64_t stall_bound(const struct gossip_config *c, int n)
{
    double scale = n > 10 ? log10((double)n) : 1.0;
    return c->probe_interval_ms * MSEC +
           (int64_t)(c->suspicion_mult * scale * (double)c->probe_interval_ms * MSEC);
}

static int64_t stall_probe_ms;
static void stall_tweak(struct gossip_config *c, int i)
{
    (void)i;
    c->probe_interval_ms = stall_probe_ms;
    c->probe_timeout_ms = stall_probe_ms / 2; /* as sluiced sets them */
}

/* Freezes one member after another, each for 90% of stall_bound at a
 * random phase of the probe cycle: no death anywhere, everyone whole after
 * each thaw.  Then one stall well past the longest suspicion: declared
 * dead, and alive everywhere again soon after the thaw (it refutes). */
static void stall_run(int n, int64_t probe_ms, uint64_t *rng)
{
    struct gossip_config c;
    gossip_config_default(&c);
    stall_probe_ms = probe_ms;
    stall_tweak(&c, 0);
    struct gossip_sim *s = new_sim(0);
    sim_cluster(s, n, NULL, stall_tweak);
    assert_true(sim_converge(s, (size_t)n, 100 * MSEC, 60 * SEC) >= 0);
    gossip_sim_run(s, 5 * SEC);
    int64_t bound = stall_bound(&c, n), stall = bound * 9 / 10;
    const int trials = 12;
    uint64_t susp0 = TOTAL(s, suspicions);
    for (int k = 0; k < trials; k++) {
        int v = (int)(test_rand(rng) % (uint64_t)n);
        gossip_sim_run(s, (int64_t)(test_rand(rng) % (uint64_t)(probe_ms * MSEC)));
        gossip_sim_freeze(s, v, stall);
        gossip_sim_run(s, stall + 20 * probe_ms * MSEC);
        assert_int_equal(TOTAL(s, deaths), 0);
        for (int i = 0; i < n; i++)
            assert_int_equal(sim_view(s, i).alive, n);
    }
    uint64_t susp = TOTAL(s, suspicions) - susp0;
    /* Past the longest suspicion (its maximum, no confirmation) and a full
     * probe round to notice: dead. */
    double scale = n > 10 ? log10((double)n) : 1.0;
    int64_t max_susp = (int64_t)(c.suspicion_mult * scale * (double)probe_ms * MSEC) *
                       c.suspicion_max_timeout_mult;
    int64_t long_stall = (int64_t)n * probe_ms * MSEC + max_susp + 10 * probe_ms * MSEC;
    gossip_sim_freeze(s, 1, long_stall);
    gossip_sim_run(s, long_stall);
    assert_true(TOTAL(s, deaths) > 0);
    int64_t back = sim_converge(s, (size_t)n, 100 * MSEC, 60 * SEC);
    fprintf(stderr,
            "  %d nodes, %lld ms probes: %d stalls of %.2f s (bound %.2f s): 0 deaths, "
            "%llu suspicions; a %.1f s stall: dead, alive again %.1f s after the thaw\n",
            n, (long long)probe_ms, trials, (double)stall / SEC, (double)bound / SEC,
            (unsigned long long)susp, (double)long_stall / SEC, (double)back / SEC);
    assert_true(back >= 0);
    gossip_sim_destroy(s);
}

static void test_stalled_node_survives(void **state)
{
    (void)state;
    uint64_t rng = seed ^ 0x57a11ull;
    stall_run(3, 1000, &rng);
    stall_run(5, 1000, &rng);
    stall_run(5, 200, &rng);
    stall_run(16, 200, &rng);
}

/* Started one after another, every node naming the same seeds, itself
 * included (one unit file for all): the first seed's own join goes out
 * before any peer runs, and the peers join it instead.  An application
 * waits for gossip_node_joined before it trusts its view (a daemon lends no
 * concurrency slot before), so the first seed must count as joined as soon
 * as a peer has answered it, not at its next periodic push-pull (up to 30 s
 * away).  `seeded` 0: the first node names no seed at all (it was started
 * without --join and the others join it). */
static int64_t first_seed_run(double loss, int seeded, int64_t gap, uint64_t variant)
{
    struct gossip_sim *s;
    struct gossip_sim_link l = {.drop = loss, .delay_ns = 1 * MSEC, .jitter_ns = 2 * MSEC};
    assert_int_equal(gossip_sim_create(&s, seed ^ (variant << 32), &l), 0);
    struct gossip_addr seeds[3];
    const int n = 3;
    int64_t started = 0;
    for (int i = 0; i < n; i++) {
        struct gossip_config cfg;
        char name[32];
        sim_cfg(&cfg, name, i);
        assert_int_equal(gossip_sim_add(s, &cfg), i);
        seeds[i] = *gossip_sim_addr(s, i);
    }
    /* Added up front for their addresses; all but the first are killed
     * until their turn (a dead node answers nothing). */
    for (int i = 1; i < n; i++)
        assert_int_equal(gossip_sim_kill(s, i), 0);
    if (seeded)
        assert_int_equal(gossip_node_join(gossip_sim_node(s, 0), seeds, n), 0);
    for (int i = 1; i < n; i++) {
        gossip_sim_run(s, gap);
        assert_int_equal(gossip_sim_restart_fresh(s, i, -1), 0);
        assert_int_equal(gossip_node_join(gossip_sim_node(s, i), seeds, n), 0);
    }
    started = gossip_sim_now(s);
    int64_t all = -1;
    for (int64_t t = 0; t <= 30 * SEC; t += 10 * MSEC) {
        int joined = 0;
        for (int i = 0; i < n; i++) {
            int prior = 1;
            joined += gossip_node_joined(gossip_sim_node(s, i), &prior) && !prior;
        }
        if (joined == n) {
            all = gossip_sim_now(s) - started;
            break;
        }
        gossip_sim_run(s, 10 * MSEC);
    }
    if (all >= 0) /* and the views meet (by gossip, if an exchange was lost) */
        assert_true(sim_converge(s, (size_t)n, 100 * MSEC, 20 * SEC) >= 0);
    gossip_sim_destroy(s);
    return all;
}

static void test_first_seed_joins(void **state)
{
    (void)state;
    int64_t quiet = first_seed_run(0, 1, 300 * MSEC, 1);
    int64_t unseeded = first_seed_run(0, 0, 300 * MSEC, 2);
    int64_t lossy = first_seed_run(0.05, 1, 300 * MSEC, 3);
    fprintf(stderr,
            "  3 nodes started 300 ms apart: all joined %lld ms after the last start (no "
            "loss), %lld ms (first node without seeds), %lld ms (5%% loss)\n",
            (long long)(quiet / MSEC), (long long)(unseeded / MSEC), (long long)(lossy / MSEC));
    /* Lossless: within one probe interval of the last start (the exchange
     * takes a few round trips).  Under loss an exchange can be lost and is
     * retried every 2 s: six tries fail together about once in a million
     * runs at 5% loss. */
    assert_true(quiet >= 0 && quiet < 1 * SEC);
    assert_true(unseeded >= 0 && unseeded < 1 * SEC);
    assert_true(lossy >= 0 && lossy < 12 * SEC);
}

int main(void)
{
    seed = test_seed("sim_gossip_membership");
    /* SLUICE_SIM_ONLY=<pattern>: run the matching scenarios alone (sweeps) */
    const char *only = getenv("SLUICE_SIM_ONLY");
    if (only != NULL && *only != '\0')
        cmocka_set_test_filter(only);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_five_nodes_converge),
        cmocka_unit_test(test_hundred_nodes_converge),
        cmocka_unit_test(test_killed_node_declared_dead),
        cmocka_unit_test(test_no_false_deaths_under_loss),
        cmocka_unit_test(test_partition_heals),
        cmocka_unit_test(test_partition_heal_no_false_deaths),
        cmocka_unit_test(test_separated_clusters_meet),
        cmocka_unit_test(test_one_way_link),
        cmocka_unit_test(test_slow_node_lifeguard),
        cmocka_unit_test(test_left_node_not_resurrected),
        cmocka_unit_test(test_restarted_node_rejoins),
        cmocka_unit_test(test_stalled_node_survives),
        cmocka_unit_test(test_first_seed_joins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
