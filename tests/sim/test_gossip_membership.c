/*
 * libgossip membership scenarios on the simulator: convergence, failure
 * detection, no false deaths under loss, partitions, slow nodes (Lifeguard),
 * graceful leave and replays.  Seeded: SLUICE_SEED=<n> replays a run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "simutil.h"
#include "testutil.h"

static uint64_t seed;

static void converge(int n)
{
    struct gossip_sim *s;
    assert_int_equal(gossip_sim_create(&s, seed, NULL), 0);
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

int main(void)
{
    seed = test_seed("sim_gossip_membership");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_five_nodes_converge),
        cmocka_unit_test(test_hundred_nodes_converge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
