/*
 * libgossip over sealed packets on the simulator: key rotation across a
 * running cluster loses no member; a node with the wrong key, the wrong
 * cluster label or an unknown key id cannot join, and its packets are
 * dropped and counted by reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gossip/keyring.h"
#include "simutil.h"
#include "testutil.h"

#define N 8

static uint64_t seed;

static void make_key(uint8_t key[GOSSIP_KEY_BYTES], uint8_t fill)
{
    memset(key, fill, GOSSIP_KEY_BYTES);
}

static struct gossip_keyring *ring(const char *label, uint8_t id, uint8_t fill)
{
    struct gossip_keyring *kr;
    uint8_t key[GOSSIP_KEY_BYTES];
    make_key(key, fill);
    assert_int_equal(gossip_keyring_create(&kr, label), 0);
    assert_int_equal(gossip_keyring_install(kr, id, key), 0);
    assert_int_equal(gossip_keyring_use(kr, id), 0);
    return kr;
}

static uint64_t deaths(struct gossip_sim *s)
{
    uint64_t d = 0;
    for (size_t i = 0; i < gossip_sim_count(s); i++) {
        struct gossip_stats st;
        gossip_node_stats(gossip_sim_node(s, (int)i), &st);
        d += st.deaths;
    }
    return d;
}

static void assert_full(struct gossip_sim *s, int n)
{
    for (int i = 0; i < n; i++)
        assert_int_equal(sim_view(s, i).alive, n);
}

static void test_key_rotation(void **state)
{
    (void)state;
    struct gossip_keyring *kr[N];
    struct gossip_sim *s;
    uint8_t k2[GOSSIP_KEY_BYTES];
    make_key(k2, 0x22);
    for (int i = 0; i < N; i++)
        kr[i] = ring("prod", 1, 0x11);
    assert_int_equal(gossip_sim_create(&s, seed, NULL), 0);
    sim_cluster(s, N, kr, NULL);
    assert_true(sim_converge(s, N, 100 * MSEC, 60 * SEC) >= 0);
    /* Rolling steps, with traffic between every node's change. */
    for (int i = 0; i < N; i++) {
        assert_int_equal(gossip_keyring_install(kr[i], 2, k2), 0);
        gossip_sim_run(s, 700 * MSEC);
    }
    assert_full(s, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(gossip_keyring_use(kr[i], 2), 0);
        gossip_sim_run(s, 700 * MSEC);
    }
    assert_full(s, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(gossip_keyring_remove(kr[i], 1), 0);
        gossip_sim_run(s, 700 * MSEC);
    }
    gossip_sim_run(s, 60 * SEC);
    assert_full(s, N);
    assert_int_equal(deaths(s), 0);
    /* Nothing was sealed with a key that was gone. */
    for (int i = 0; i < N; i++) {
        struct gossip_stats st;
        gossip_node_stats(gossip_sim_node(s, i), &st);
        assert_int_equal(st.drops[GOSSIP_DROP_NOKEY] + st.drops[GOSSIP_DROP_AUTH], 0);
    }
    gossip_sim_destroy(s);
    for (int i = 0; i < N; i++)
        gossip_keyring_destroy(kr[i]);
}

/* The intruder (last node) uses `bad`; nobody may list it, and the seed
 * counts its packets under `reason`. */
static void intruder(struct gossip_keyring *bad, int reason)
{
    struct gossip_keyring *kr[N + 1];
    struct gossip_sim *s;
    for (int i = 0; i < N; i++)
        kr[i] = ring("prod", 1, 0x11);
    kr[N] = bad;
    assert_int_equal(gossip_sim_create(&s, seed, NULL), 0);
    sim_cluster(s, N + 1, kr, NULL);
    gossip_sim_run(s, 30 * SEC);
    for (int i = 0; i < N; i++) {
        assert_int_equal(sim_view(s, i).alive, N);
        assert_int_equal(sim_state_of(s, i, "node-008"), -1);
    }
    assert_int_equal(sim_view(s, N).alive, 1); /* it learned nobody either */
    struct gossip_stats st;
    gossip_node_stats(gossip_sim_node(s, 0), &st);
    fprintf(stderr, "  seed dropped %llu packets as %s\n", (unsigned long long)st.drops[reason],
            gossip_drop_name(reason));
    assert_true(st.drops[reason] > 0);
    gossip_sim_destroy(s);
    for (int i = 0; i <= N; i++)
        gossip_keyring_destroy(kr[i]);
}

static void test_wrong_key_cannot_join(void **state)
{
    (void)state;
    intruder(ring("prod", 1, 0x99), GOSSIP_DROP_AUTH);
}

static void test_wrong_label_cannot_join(void **state)
{
    (void)state;
    intruder(ring("staging", 1, 0x11), GOSSIP_DROP_AUTH);
}

static void test_unknown_key_id_cannot_join(void **state)
{
    (void)state;
    intruder(ring("prod", 7, 0x11), GOSSIP_DROP_NOKEY);
}

int main(void)
{
    seed = test_seed("sim_gossip_security");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_rotation),
        cmocka_unit_test(test_wrong_key_cannot_join),
        cmocka_unit_test(test_wrong_label_cannot_join),
        cmocka_unit_test(test_unknown_key_id_cannot_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
