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

int main(void)
{
    seed = test_seed("test_gossip_restart");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quick_restart_gets_state),
        cmocka_unit_test(test_restart_after_death_gets_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
