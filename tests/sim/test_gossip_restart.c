/*
 * A restarted node gets the cluster's state when it joins, even though its
 * push-pull ids start again at 1 and a seed answered id 1 in the node's
 * previous life.  The seed must tell the lives apart (by the incarnation in
 * the packet header), or it takes the new request for a duplicate of the old
 * one and never answers: the restarted node would then wait for a join retry
 * (or a periodic push-pull) for any state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "simutil.h"
#include "testutil.h"

static uint64_t seed;

/* Chunks merged by each node from the other, per life. */
static int merged[2];

static size_t fill(void *ud, uint64_t *cursor, uint8_t *buf, size_t cap)
{
    (void)ud;
    if (*cursor != 0 || cap < 5)
        return 0;
    memcpy(buf, "state", 5);
    *cursor = 1;
    return 5;
}

static void merge(void *ud, const char *from, const uint8_t *buf, size_t len)
{
    int i = (int)(intptr_t)ud;
    (void)from;
    if (len == 5 && memcmp(buf, "state", 5) == 0)
        merged[i]++;
}

static void tweak(struct gossip_config *cfg, int i)
{
    cfg->cb.ud = (void *)(intptr_t)i;
    cfg->cb.state_fill = fill;
    cfg->cb.state_merge = merge;
    /* Far beyond the test's horizon: only the join exchange can deliver. */
    cfg->pushpull_interval_ms = 600000;
}

static void run_restart(int kill_for_ms)
{
    struct gossip_sim *s;
    memset(merged, 0, sizeof(merged));
    assert_int_equal(gossip_sim_create(&s, seed, NULL), 0);
    sim_cluster(s, 2, NULL, tweak);
    gossip_sim_run(s, 2 * SEC);
    /* The first life joined with push-pull id 1 and got the seed's state. */
    assert_true(merged[1] >= 1);
    assert_int_equal(gossip_sim_kill(s, 1), 0);
    gossip_sim_run(s, (int64_t)kill_for_ms * MSEC);
    merged[1] = 0;
    assert_int_equal(gossip_sim_restart(s, 1, 0), 0);
    /* Within the first join exchange, well before the join retry (2 s)
     * whose fresh id would hide the bug: a daemon's replica stops waiting
     * for state after its sync timeout, so the first exchange must work. */
    gossip_sim_run(s, 1 * SEC);
    fprintf(stderr, "  down %d ms: restarted node merged %d chunk(s) from the seed\n", kill_for_ms,
            merged[1]);
    assert_true(merged[1] >= 1);
    gossip_sim_destroy(s);
}

/* Back before the seed even suspects it: same member entry, new life. */
static void test_quick_restart_gets_state(void **state)
{
    (void)state;
    run_restart(200);
}

/* Back after the seed declared it dead (the entry is kept, not reaped). */
static void test_restart_after_death_gets_state(void **state)
{
    (void)state;
    run_restart(15000);
}

static void default_pushpull(struct gossip_config *cfg, int i)
{
    (void)cfg;
    (void)i;
}

/* Both seeds killed, declared dead, and restarted together (a rolling
 * restart gone wrong, or the seeds' host rebooted): each finds only the
 * other through its seed list, and the members that count them dead do not
 * probe them.  Unless a member reaches them, they form a cluster of two,
 * whole in their own eyes, that serves global keys on its own once its
 * sync timeout (2 s) ends.  Every member tries its seeds that are not live
 * members about once a second, so the island merges well within that. */
/* Whether node i counts `name` live (alive or suspect). */
static int sim_live(struct gossip_sim *s, int i, const char *name)
{
    int st = sim_state_of(s, i, name);
    return st == GOSSIP_MEMBER_ALIVE || st == GOSSIP_MEMBER_SUSPECT;
}

static void test_seeds_restarted_together_rejoin(void **state)
{
    (void)state;
    struct gossip_sim *s;
    assert_int_equal(gossip_sim_create(&s, seed, NULL), 0);
    /* Nodes 2..4 join through node 0, node 1 too: node 0 is every
     * member's seed, as in a --join list of the seeds. */
    sim_cluster(s, 5, NULL, default_pushpull);
    assert_true(sim_converge(s, 5, 100 * MSEC, 10 * SEC) >= 0);
    assert_int_equal(gossip_sim_kill(s, 0), 0);
    assert_int_equal(gossip_sim_kill(s, 1), 0);
    /* Until the others count both seeds dead (nobody probes them then;
     * with half the cluster gone at once, Lifeguard slows the probes, so
     * it may take longer than the usual suspicion timeout). */
    int gone = 0;
    for (int64_t t = 0; t < 60 * SEC && !gone; t += 500 * MSEC) {
        gossip_sim_run(s, 500 * MSEC);
        gone = 1;
        for (int i = 2; i < 5; i++)
            gone &= sim_state_of(s, i, "node-000") == GOSSIP_MEMBER_DEAD &&
                    sim_state_of(s, i, "node-001") == GOSSIP_MEMBER_DEAD;
    }
    assert_true(gone);
    /* Node 1 first, through node 0 (not yet back): alone; then node 0
     * through node 1: the two meet, and know nobody else. */
    assert_int_equal(gossip_sim_restart_fresh(s, 1, 0), 0);
    gossip_sim_run(s, 100 * MSEC);
    assert_int_equal(gossip_sim_restart_fresh(s, 0, 1), 0);
    /* The island is gone when the seeds count every member live (alive or
     * suspect: what global keys' owners are chosen from) and most of the
     * others count both seeds live: before the seeds' sync timeout (2 s),
     * or they serve as a cluster of their own.  A member that missed the
     * seeds' refutations (dissemination is probabilistic) learns them from
     * the next packet a seed sends it, at the latest a probe round later:
     * every view is whole within 10 s, long before a periodic push-pull. */
    int64_t met = -1, whole = -1, named = -1;
    for (int64_t t = 0; t <= 10 * SEC && (whole < 0 || named < 0); t += 50 * MSEC) {
        int seeds_see = 1, others_see = 0, all = 1, knew = 1;
        for (int i = 0; i < 2; i++) {
            /* Each seed joined the other first, as new: it must hear of
             * its past life once the others reach it, or it would go on
             * serving as a new member (a fresh quota). */
            int prior = 0;
            (void)gossip_node_joined(gossip_sim_node(s, i), &prior);
            knew &= prior;
        }
        if (named < 0 && knew)
            named = t;
        for (int i = 0; i < 5; i++) {
            struct sim_count c = sim_view(s, i);
            all &= c.alive + c.suspect == 5;
            if (i < 2)
                seeds_see &= c.alive + c.suspect == 5;
            else
                others_see += sim_live(s, i, "node-000") && sim_live(s, i, "node-001");
        }
        if (met < 0 && seeds_see && others_see >= 2)
            met = t;
        if (all && whole < 0)
            whole = t;
        if (whole < 0 || named < 0)
            gossip_sim_run(s, 50 * MSEC);
    }
    if (met >= 0 && whole >= 0 && named >= 0)
        fprintf(stderr,
                "  seeds restarted together: island merged after %lld ms, every view whole after "
                "%lld ms, both told of their past lives after %lld ms\n",
                (long long)(met / MSEC), (long long)(whole / MSEC), (long long)(named / MSEC));
    else
        fprintf(stderr, "  seeds restarted together: views not whole, or past lives not named, "
                        "after 10 s\n");
    assert_true(met >= 0 && whole >= 0 && named >= 0);
    assert_true(met < 2 * SEC);
    /* A seed died lately: the others try it four times a second. */
    assert_true(named < 1 * SEC);
    gossip_sim_destroy(s);
}

static void thin_gossip(struct gossip_config *cfg, int i)
{
    (void)i;
    /* Dissemination at its thinnest: one peer per round, each piece of
     * news sent once.  Gossip then reaches few members, and what it misses
     * must come some other way. */
    cfg->gossip_nodes = 1;
    cfg->retransmit_mult = 1;
}

/* A member declared dead comes back in a new life (restarted from nothing,
 * incarnation 0): it refutes the verdict it hears when it joins.  The
 * members that hold the verdict neither probe it nor gossip to it, so one
 * that the refutation's gossip missed would count it dead until its next
 * packet to that member, up to a probe round away (seconds more under
 * Lifeguard).  The refuting member tells every live member directly, so
 * each view is whole a round trip after it joins, however thin the gossip. */
static void test_refutation_reaches_everyone(void **state)
{
    (void)state;
    struct gossip_sim *s;
    const int n = 8;
    assert_int_equal(gossip_sim_create(&s, seed, NULL), 0);
    sim_cluster(s, n, NULL, thin_gossip);
    assert_true(sim_converge(s, (size_t)n, 100 * MSEC, 30 * SEC) >= 0);
    assert_int_equal(gossip_sim_kill(s, 1), 0);
    /* Until every other member has declared it dead.  Not all at once:
     * with gossip this thin a member can miss every verdict and find the
     * death by its own probe and suspicion, up to the suspicion's longest
     * timeout (24 s here) later, by which time the first to declare may
     * have reaped it (30 s after): that one then sees the restarted member
     * join anew (seed 50742). */
    int gone = 0, declared[8] = {0};
    for (int64_t t = 0; t < 90 * SEC && !gone; t += 500 * MSEC) {
        gossip_sim_run(s, 500 * MSEC);
        gone = 1;
        for (int i = 0; i < n; i++) {
            declared[i] |= sim_state_of(s, i, "node-001") == GOSSIP_MEMBER_DEAD;
            gone &= i == 1 || declared[i];
        }
    }
    assert_true(gone);
    assert_int_equal(gossip_sim_restart_fresh(s, 1, 0), 0);
    int64_t whole = -1;
    for (int64_t t = 0; t <= 10 * SEC; t += 10 * MSEC) {
        int all = 1;
        for (int i = 0; i < n; i++)
            all &= sim_state_of(s, i, "node-001") == GOSSIP_MEMBER_ALIVE;
        if (all) {
            whole = t;
            break;
        }
        gossip_sim_run(s, 10 * MSEC);
    }
    fprintf(stderr, "  restarted from nothing, thin gossip: alive in all %d views after %lld ms\n",
            n, (long long)(whole / MSEC));
    /* The join exchange and the announcement: a few round trips (1-1.5 ms
     * each here); well under one probe interval (1 s). */
    assert_true(whole >= 0 && whole < 500 * MSEC);
    gossip_sim_destroy(s);
}

int main(void)
{
    seed = test_seed("test_gossip_restart");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quick_restart_gets_state),
        cmocka_unit_test(test_restart_after_death_gets_state),
        cmocka_unit_test(test_seeds_restarted_together_rejoin),
        cmocka_unit_test(test_refutation_reaches_everyone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
