/*
 * libgossip in the simulator: direct messages (delivery, batching, replies
 * from the callback), the member view's version, a node that restarts from
 * incarnation 0 (its clock went back: nothing of its past is known to it)
 * and rejoins under its name, and two live processes with one name (the
 * later one is refused, the earlier one keeps the name and is told).
 * Seeded: SLUICE_SEED=<n> replays a run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "simutil.h"
#include "testutil.h"

static uint64_t seed;

struct got {
    int msgs, bytes, echo;
    int conflicts, yielded;
    int bad_news; /* suspect, dead or left events about node-001 */
    struct gossip_sim *s;
    int idx;
};
static struct got got[8];

static void on_direct(void *ud, const char *from, const uint8_t *msg, size_t len)
{
    struct got *g = ud;
    g->msgs++;
    g->bytes += (int)len;
    if (g->echo && len > 0 && msg[0] == 'q') {
        uint8_t a[64];
        memcpy(a, msg, len < sizeof(a) ? len : sizeof(a));
        a[0] = 'a';
        gossip_node_send(gossip_sim_node(g->s, g->idx), from, a, len < sizeof(a) ? len : sizeof(a));
    }
}

static void on_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    struct got *g = ud;
    if ((ev == GOSSIP_EVENT_SUSPECT || ev == GOSSIP_EVENT_DEAD || ev == GOSSIP_EVENT_LEFT) &&
        strcmp(m->name, "node-001") == 0)
        g->bad_news++;
    if (ev == GOSSIP_EVENT_CONFLICT) {
        g->conflicts++;
        g->yielded = gossip_node_conflict(gossip_sim_node(g->s, g->idx), NULL);
    }
}

static void tweak(struct gossip_config *cfg, int i)
{
    cfg->cb.ud = &got[i];
    cfg->cb.on_direct = on_direct;
    cfg->cb.on_event = on_event;
}

static struct gossip_sim *cluster(int n)
{
    struct gossip_sim *s;
    memset(got, 0, sizeof(got));
    assert_int_equal(gossip_sim_create(&s, seed, NULL), 0);
    for (int i = 0; i < 8; i++) {
        got[i].s = s;
        got[i].idx = i;
    }
    sim_cluster(s, n, NULL, tweak);
    gossip_sim_run(s, 3 * SEC);
    return s;
}

/* 60 small messages to one member leave in a few datagrams and all arrive;
 * answers sent from the callback come back. */
static void test_direct_batching(void **state)
{
    (void)state;
    struct gossip_sim *s = cluster(3);
    struct gossip_node *a = gossip_sim_node(s, 0);
    got[1].echo = 1;
    struct gossip_stats before, after;
    gossip_node_stats(a, &before);
    uint8_t m[40];
    memset(m, 'q', sizeof(m));
    for (int i = 0; i < 60; i++)
        assert_int_equal(gossip_node_send(a, "node-001", m, sizeof(m)), 0);
    gossip_node_flush(a);
    gossip_node_stats(a, &after);
    uint64_t pkts = after.direct_packets_sent - before.direct_packets_sent;
    /* 60 x ~46 bytes: three packets of 1358 bytes would do. */
    assert_true(pkts >= 1 && pkts <= 3);
    gossip_sim_run(s, 200 * MSEC);
    assert_int_equal(got[1].msgs, 60);
    assert_int_equal(got[0].msgs, 60); /* the echoes */
    /* errors: unknown member, oversize, itself */
    assert_int_equal(gossip_node_send(a, "nobody", m, 1), -GOSSIP_ENOENT);
    assert_int_equal(gossip_node_send(a, "node-000", m, 1), -GOSSIP_ENOENT);
    uint8_t big[2000] = {0};
    assert_true(gossip_node_max_direct(a) < sizeof(big));
    assert_int_equal(gossip_node_send(a, "node-001", big, sizeof(big)), -GOSSIP_ETOOBIG);
    gossip_sim_destroy(s);
}

/* Lossy links lose some direct messages, never corrupt them. */
static void test_direct_loss(void **state)
{
    (void)state;
    struct gossip_sim *s = cluster(2);
    struct gossip_sim_link lossy = {.drop = 0.3, .delay_ns = MSEC, .jitter_ns = MSEC / 2};
    gossip_sim_set_link(s, 0, 1, &lossy);
    uint8_t m[20] = {'x'};
    for (int round = 0; round < 100; round++) {
        gossip_node_send(gossip_sim_node(s, 0), "node-001", m, sizeof(m));
        gossip_node_flush(gossip_sim_node(s, 0));
        gossip_sim_run(s, 10 * MSEC);
    }
    assert_true(got[1].msgs > 40 && got[1].msgs < 95);
    assert_int_equal(got[1].bytes, got[1].msgs * 20);
    gossip_sim_destroy(s);
}

/* The view version moves when a member joins and when one dies. */
static void test_view_version(void **state)
{
    (void)state;
    struct gossip_sim *s = cluster(3);
    struct gossip_node *a = gossip_sim_node(s, 0);
    uint64_t v0 = gossip_node_view_version(a);
    gossip_sim_run(s, 2 * SEC);
    assert_true(gossip_node_view_version(a) == v0); /* nothing changed */
    gossip_sim_kill(s, 2);
    gossip_sim_run(s, 20 * SEC);
    uint64_t v1 = gossip_node_view_version(a);
    assert_true(v1 > v0);
    assert_int_equal(gossip_node_num_live(a), 2);
    gossip_sim_destroy(s);
}

/* A node restarted with nothing of its past (incarnation 0, a new life id:
 * as after its clock went back by an hour) rejoins under its name. */
static void test_restart_from_zero(void **state)
{
    (void)state;
    struct gossip_sim *s = cluster(3);
    uint64_t old_life = gossip_node_life_id(gossip_sim_node(s, 1));
    gossip_sim_kill(s, 1);
    gossip_sim_run(s, 20 * SEC); /* declared dead by the others */
    assert_int_equal(gossip_sim_restart_fresh(s, 1, 0), 0);
    uint64_t life = gossip_node_life_id(gossip_sim_node(s, 1));
    assert_true(life != old_life);
    int prior = 0;
    gossip_sim_run(s, 5 * SEC);
    assert_true(gossip_node_joined(gossip_sim_node(s, 1), &prior));
    assert_int_equal(prior, 1); /* the cluster remembered its name */
    struct gossip_member_info mi;
    for (int i = 0; i < 3; i += 2) {
        assert_int_equal(gossip_node_member(gossip_sim_node(s, i), "node-001", &mi), 0);
        assert_int_equal(mi.state, GOSSIP_MEMBER_ALIVE);
        assert_true(mi.life_id == life);
    }
    gossip_sim_destroy(s);
}

/* A second live process named like a member is refused; the member keeps
 * its name and address and is told of the clash. */
static void test_name_conflict(void **state)
{
    (void)state;
    struct gossip_sim *s = cluster(3);
    struct gossip_config cfg;
    char name[32];
    sim_cfg(&cfg, name, 1); /* "node-001" again, at another address */
    tweak(&cfg, 3);
    assert_int_equal(gossip_sim_add(s, &cfg), 3);
    assert_int_equal(gossip_sim_join(s, 3, 0), 0);
    gossip_sim_run(s, 5 * SEC);
    assert_true(got[3].conflicts >= 1);
    assert_int_equal(got[3].yielded, 1);
    assert_int_equal(gossip_node_conflict(gossip_sim_node(s, 3), NULL), 1);
    assert_true(got[1].conflicts >= 1);
    assert_int_equal(gossip_node_conflict(gossip_sim_node(s, 1), NULL), 0);
    gossip_sim_kill(s, 3); /* the refused process exits */
    gossip_sim_run(s, 10 * SEC);
    struct gossip_member_info mi, self;
    gossip_node_member(gossip_sim_node(s, 1), "node-001", &self);
    assert_int_equal(gossip_node_member(gossip_sim_node(s, 0), "node-001", &mi), 0);
    assert_int_equal(mi.state, GOSSIP_MEMBER_ALIVE);
    assert_true(gossip_addr_equal(&mi.addr, &self.addr));
    gossip_sim_destroy(s);
}

/* A refused newcomer leaves as a daemon does (a graceful leave, then it
 * exits), restarts (once within the second), and leaves again: none of it
 * may touch the incumbent.
 * Its leave, any suspicion of it and its incarnation are its own life's,
 * not the name's: every member keeps the incumbent alive, at its address
 * and life, and the incumbent keeps every member alive. */
static void test_refused_newcomer_leaves_no_trace(void **state)
{
    (void)state;
    struct gossip_sim *s = cluster(3);
    assert_true(sim_converge(s, 3, 100 * MSEC, 30 * SEC) >= 0);
    uint64_t life = gossip_node_life_id(gossip_sim_node(s, 1));
    struct gossip_member_info self;
    assert_int_equal(gossip_node_member(gossip_sim_node(s, 1), "node-001", &self), 0);
    for (int attempt = 0; attempt < 4; attempt++) {
        struct gossip_config cfg;
        char name[32];
        sim_cfg(&cfg, name, 1); /* "node-001" again, at another address */
        tweak(&cfg, 3);
        got[3].conflicts = got[3].yielded = 0;
        if (attempt == 0) {
            assert_int_equal(gossip_sim_add(s, &cfg), 3);
            assert_int_equal(gossip_sim_join(s, 3, attempt % 3 == 1 ? 2 : 0), 0);
        } else {
            assert_int_equal(gossip_sim_restart_fresh(s, 3, attempt == 3 ? 1 : 2), 0);
        }
        for (int t = 0; t < 100 && !got[3].yielded; t++)
            gossip_sim_run(s, 100 * MSEC);
        assert_int_equal(got[3].yielded, 1);
        /* The daemon's way out: leave, keep the loop turning a little, exit. */
        gossip_node_leave(gossip_sim_node(s, 3));
        gossip_sim_run(s, 500 * MSEC);
        gossip_sim_kill(s, 3);
        /* The third copy starts at once after the second: the incumbent
         * must answer it too, though it answered another a moment ago. */
        if (attempt != 1)
            gossip_sim_run(s, 20 * SEC);
    }
    gossip_sim_run(s, 60 * SEC);
    for (int i = 0; i < 3; i++) {
        struct gossip_member_info mi;
        assert_int_equal(sim_view(s, i).alive, 3);
        assert_int_equal(got[i].bad_news, 0);
        if (i == 1)
            continue;
        assert_int_equal(gossip_node_member(gossip_sim_node(s, i), "node-001", &mi), 0);
        assert_int_equal(mi.state, GOSSIP_MEMBER_ALIVE);
        assert_true(gossip_addr_equal(&mi.addr, &self.addr));
        assert_true(mi.life_id == life);
    }
    assert_int_equal(gossip_node_conflict(gossip_sim_node(s, 1), NULL), 0);
    gossip_sim_destroy(s);
}

int main(void)
{
    seed = test_seed("sim_test_gossip_direct");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_batching),
        cmocka_unit_test(test_direct_loss),
        cmocka_unit_test(test_view_version),
        cmocka_unit_test(test_restart_from_zero),
        cmocka_unit_test(test_name_conflict),
        cmocka_unit_test(test_refused_newcomer_leaves_no_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
