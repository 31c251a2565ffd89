/*
 * Global scope for every algorithm that can be global (algo_can_be_global):
 * gcra, token-bucket, fixed-window and sliding-window, each on the
 * simulator against an oracle running the SAME algorithm on every request
 * the cluster received, at the same simulated time.  Five nodes with
 * skewed demand (50/20/15/10/5%) at 10x the limit, 30 simulated seconds,
 * no loss, gossip and replica interval 100 ms.  Seeded: SLUICE_SEED=<n>
 * replays a run.
 *
 * Tolerances (admitted / oracle over the run):
 *   gcra, token-bucket   +-2%, the target for the funnel.
 *   fixed-window,        +-5%, and no single window may admit more than
 *   sliding-window       count * 1.25.  Why not 2%: a window is a burst of
 *                        the whole count at each boundary, which every node
 *                        sees empty at once; what keeps the nodes from
 *                        each admitting their demand until the others'
 *                        deltas arrive (1.7x the limit before shares) is
 *                        each node's cap on its own admissions, its
 *                        demand-weighted share of the count.  The caps add
 *                        up to the count only as far as the nodes' views of
 *                        the demands agree: each knows its own demand now
 *                        and the others' as last gossiped (an EWMA of 1 s),
 *                        so the caps' sum drifts a few percent above the
 *                        count (measured: +1..+3.5% over a run, at most
 *                        +15% in one window).  The windows' own weak spot
 *                        (2x count across a boundary) is the oracle's too.
 * The sliding log is refused as global by the config loader
 * (tests/unit/test_config.c) and by the replica itself (below).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "globalsim.h"

static uint64_t seed;

struct ga_result {
    int64_t admitted, oracle;
    int64_t windows;       /* whole windows observed (window algorithms) */
    int64_t worst_window;  /* most the cluster admitted in one window */
    int64_t oracle_window; /* most the oracle admitted in one window */
};

/*
 * One run.  The harness (globalsim.h) provides the nodes, the gossip
 * simulator, the replicas and the oracle (its state sized for the
 * algorithm: a sliding window needs 8 bytes per sub-window).
 */
static void run_algo(enum algo_kind kind, int64_t burst, int64_t count, int64_t period_ns,
                     struct ga_result *res)
{
    struct gs_cfg c;
    struct gs *g = calloc(1, sizeof(*g));
    assert_non_null(g);
    gs_default(&c, seed);
    c.kind = kind;
    c.burst = burst;
    c.count = count;
    c.period_ns = period_ns;
    assert_int_equal(gs_init(g, &c), 0);
    void *oracle = g->oracle_state;

    memset(res, 0, sizeof(*res));
    int64_t start = gossip_sim_now(g->sim), end = start + (int64_t)(30 * GS_SEC * gs_scale());
    double rate = (double)count / (double)period_ns * c.demand_mult;
    for (int i = 0; i < c.n; i++)
        g->nodes[i].next_arrival = (double)start + gs_exp(g, rate * g->c.weight[i]);
    int64_t win = start / period_ns, in_win = 0, or_win = 0;
    int first = 1;
    while (gossip_sim_now(g->sim) < end) {
        int64_t now = gossip_sim_now(g->sim);
        if (now / period_ns != win) {
            if (!first) { /* the first window was only partly observed */
                res->windows++;
                if (in_win > res->worst_window)
                    res->worst_window = in_win;
                if (or_win > res->oracle_window)
                    res->oracle_window = or_win;
            }
            first = 0;
            win = now / period_ns;
            in_win = or_win = 0;
        }
        for (int i = 0; i < c.n; i++) {
            struct gs_node *nd = &g->nodes[i];
            while (nd->next_arrival <= (double)now) {
                struct algo_result ar, orc;
                assert_int_equal(algo_decide(&g->p, oracle, 1, now, &orc), 0);
                assert_int_equal(replica_throttle(nd->r, "k", 1, &g->p, c.pol, 1, now, &ar), 0);
                res->admitted += !ar.limited;
                res->oracle += !orc.limited;
                in_win += !ar.limited;
                or_win += !orc.limited;
                nd->next_arrival += gs_exp(g, rate * g->c.weight[i]);
            }
            replica_tick(nd->r, now);
        }
        gossip_sim_run(g->sim, GS_STEP);
    }
    for (int i = 0; i < c.n; i++) {
        struct replica_stats st;
        replica_get_stats(g->nodes[i].r, &st);
        assert_int_equal(st.bad_packets, 0);
    }
    gs_destroy(g);
    free(g);
    fprintf(stderr,
            "  %-14s burst %lld, %lld per %lld ms: admitted %lld oracle %lld ratio %.4f; "
            "most in one window: cluster %lld oracle %lld (%lld windows)\n",
            algo_name(kind), (long long)burst, (long long)count, (long long)(period_ns / GS_MSEC),
            (long long)res->admitted, (long long)res->oracle,
            (double)res->admitted / (double)res->oracle, (long long)res->worst_window,
            (long long)res->oracle_window, (long long)res->windows);
}

static double ratio(const struct ga_result *r)
{
    return (double)r->admitted / (double)r->oracle;
}

/* The window algorithms' bounds (see the top of the file). */
static void window_ok(const struct ga_result *r, int64_t count)
{
    assert_true(fabs(ratio(r) - 1) <= 0.05);
    assert_true(r->windows >= 20);
    assert_true(r->worst_window <= count + count / 4);
    /* ...and the limit is used, not starved by the caps. */
    assert_true(r->oracle_window == count);
}

static void test_gcra(void **state)
{
    (void)state;
    struct ga_result r;
    run_algo(ALGO_GCRA, 20, 100, GS_SEC, &r);
    assert_true(fabs(ratio(&r) - 1) <= 0.02);
    run_algo(ALGO_GCRA, 100, 1000, GS_SEC, &r);
    assert_true(fabs(ratio(&r) - 1) <= 0.02);
}

static void test_token_bucket(void **state)
{
    (void)state;
    struct ga_result r;
    run_algo(ALGO_TOKEN_BUCKET, 20, 100, GS_SEC, &r);
    assert_true(fabs(ratio(&r) - 1) <= 0.02);
    run_algo(ALGO_TOKEN_BUCKET, 100, 1000, GS_SEC, &r);
    assert_true(fabs(ratio(&r) - 1) <= 0.02);
}

static void test_fixed_window(void **state)
{
    (void)state;
    struct ga_result r;
    run_algo(ALGO_FIXED_WINDOW, 0, 100, GS_SEC, &r);
    window_ok(&r, 100);
    run_algo(ALGO_FIXED_WINDOW, 0, 1000, GS_SEC, &r);
    window_ok(&r, 1000);
}

static void test_sliding_window(void **state)
{
    (void)state;
    struct ga_result r;
    run_algo(ALGO_SLIDING_WINDOW, 0, 100, GS_SEC, &r);
    window_ok(&r, 100);
    run_algo(ALGO_SLIDING_WINDOW, 0, 1000, GS_SEC, &r);
    window_ok(&r, 1000);
}

/* The replica refuses a kind that cannot be global, changing nothing. */
static void test_sliding_log_refused(void **state)
{
    (void)state;
    struct replica *r;
    struct replica_config rc = {.node_name = "solo", .boot_epoch = 1};
    struct algo_params p;
    struct algo_result out;
    struct replica_stats st;
    assert_false(algo_can_be_global(ALGO_SLIDING_LOG));
    assert_int_equal(replica_create(&r, &rc), 0);
    assert_int_equal(algo_params_init(&p, ALGO_SLIDING_LOG, 0, 10, GS_SEC, 0), 0);
    assert_int_equal(replica_throttle(r, "k", 1, &p, REPLICA_SHARE, 1, GS_SEC, &out),
                     -SLUICE_EINVAL);
    replica_get_stats(r, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.decisions, 0);
    replica_destroy(r);
}

int main(void)
{
    seed = test_seed("test_global_algos");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gcra),
        cmocka_unit_test(test_token_bucket),
        cmocka_unit_test(test_fixed_window),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_sliding_log_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
