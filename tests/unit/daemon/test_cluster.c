/*
 * cluster: the daemon's flags and config for clustering, the refusals a
 * person must see at start, and which keys go to the replica.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "decide.h"
#include "limiter.h"
#include "cluster_flags.h"
#include "config.h"
#include "policy.h"
#include "replica.h"
#include "sluice/error.h"

static void test_flags(void **state)
{
    (void)state;
    struct cluster_options o;
    cluster_options_init(&o);
    assert_null(o.gossip_bind);
    assert_int_equal(o.default_scope, -1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 1, "127.0.0.1:7946"), 1);
    assert_string_equal(o.gossip_bind, "127.0.0.1:7946");
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 7, "local"), 1);
    assert_int_equal(o.default_scope, POLICY_SCOPE_LOCAL);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 8, "optimistic"), 1);
    assert_int_equal(o.partition, POLICY_PARTITION_OPTIMISTIC);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 6, "250"), 1);
    assert_int_equal(o.gossip_interval_ms, 250);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 9, NULL), 1);
    assert_int_equal(o.insecure, 1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 14, "9000"), 1);
    assert_int_equal(o.gossip_mtu, 9000);
    /* Bad values are refused with a message, unknown options passed on. */
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 7, "everywhere"), -1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 8, "pessimistic"), -1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 6, "5"), -1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 6, "12x"), -1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 0, ""), -1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 14, "1399"), -1);
    assert_int_equal(cluster_flags_parse(&o, CLUSTER_FLAGS_BASE + 14, "9217"), -1);
    assert_int_equal(cluster_flags_parse(&o, 'h', NULL), 0);
    cluster_options_free(&o);
}

static void test_config_fills_what_flags_leave(void **state)
{
    (void)state;
    static const char text[] = "[cluster]\n"
                               "node_name = from-file\n"
                               "gossip_bind = 127.0.0.1:7000\n"
                               "advertise = 127.0.0.1:7001\n"
                               "join = a:1, b:2\n"
                               "cluster_key_file = /etc/k\n"
                               "partition_policy = optimistic\n"
                               "gossip_mtu = 9000\n";
    struct config cfg;
    char err[256];
    assert_int_equal(config_load_buffer("t.conf", text, strlen(text), &cfg, err, sizeof(err)), 0);
    struct cluster_options o;
    cluster_options_init(&o);
    o.node_name = "from-flag";
    assert_int_equal(cluster_flags_apply_config(&o, &cfg), 0);
    assert_string_equal(o.node_name, "from-flag"); /* flags win */
    assert_string_equal(o.gossip_bind, "127.0.0.1:7000");
    assert_string_equal(o.advertise, "127.0.0.1:7001");
    assert_string_equal(o.join, "a:1,b:2");
    assert_string_equal(o.key_file, "/etc/k");
    assert_int_equal(o.partition, POLICY_PARTITION_OPTIMISTIC);
    assert_int_equal(o.gossip_mtu, 9000);
    /* default_scope not in the file: inline limits stay global. */
    assert_int_equal(o.default_scope, -1);
    cluster_options_free(&o);
    config_free(&cfg);

    /* No [cluster] section: nothing changes, no cluster. */
    assert_int_equal(config_load_buffer("e.conf", "", 0, &cfg, err, sizeof(err)), 0);
    cluster_options_init(&o);
    assert_int_equal(cluster_flags_apply_config(&o, &cfg), 0);
    assert_null(o.gossip_bind);
    cluster_options_free(&o);
    config_free(&cfg);
}

static void finish(uv_loop_t *loop, struct cluster *c)
{
    cluster_stop(c, NULL, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    cluster_destroy(c);
}

static void test_start_refusals(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct cluster_options o;
    struct cluster *c = (struct cluster *)1;
    char err[512];

    cluster_options_init(&o);
    assert_int_equal(cluster_start(&loop, &o, &c, err, sizeof(err)), 0);
    assert_null(c); /* no bind address: no cluster, a lone node */

    o.gossip_bind = "127.0.0.1:0";
    assert_int_equal(cluster_start(&loop, &o, &c, err, sizeof(err)), -SLUICE_ECONFIG);
    assert_non_null(strstr(err, "--cluster-key-file"));
    assert_non_null(strstr(err, "--insecure-no-encryption"));
    assert_non_null(strstr(err, "sluicectl keygen"));

    o.key_file = "/nonexistent/sluice.key";
    assert_int_equal(cluster_start(&loop, &o, &c, err, sizeof(err)), -SLUICE_ECONFIG);
    assert_non_null(strstr(err, "/nonexistent/sluice.key"));

    o.key_file = NULL;
    o.insecure = 1;
    o.gossip_bind = "localhost:7946";
    assert_int_equal(cluster_start(&loop, &o, &c, err, sizeof(err)), -SLUICE_ECONFIG);
    assert_non_null(strstr(err, "IP:PORT"));

    o.gossip_bind = "0.0.0.0:0";
    assert_int_equal(cluster_start(&loop, &o, &c, err, sizeof(err)), -SLUICE_ECONFIG);
    assert_non_null(strstr(err, "--advertise"));

    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A lone clustered node ("unit", no seeds, unsealed) on a new loop; the
 * test ends it with finish(). */
static struct cluster *start_lone(uv_loop_t *loop)
{
    assert_int_equal(uv_loop_init(loop), 0);
    struct cluster_options o;
    cluster_options_init(&o);
    o.gossip_bind = "127.0.0.1:0";
    o.insecure = 1;
    o.node_name = "unit";
    struct cluster *c;
    char err[512];
    assert_int_equal(cluster_start(loop, &o, &c, err, sizeof(err)), 0);
    return c;
}

static void test_scope_routing(void **state)
{
    (void)state;
    uv_loop_t loop;
    struct cluster *c = start_lone(&loop);
    assert_non_null(c);
    assert_string_equal(cluster_node_name(c), "unit");
    assert_int_equal(cluster_default_scope(c), POLICY_SCOPE_GLOBAL);
    assert_non_null(cluster_gossip(c));

    struct algo_params gcra, log;
    assert_int_equal(algo_params_init(&gcra, ALGO_GCRA, 2, 10, 1000000000, 0), 0);
    assert_int_equal(algo_params_init(&log, ALGO_SLIDING_LOG, 0, 10, 1000000000, 0), 0);
    struct algo_result r;
    struct limiter *lim;
    assert_int_equal(limiter_create(&lim, NULL), 0);
    struct decide d = {lim, c};
    struct limiter_stats ls;
    int64_t now = (int64_t)uv_hrtime();
#define REQ(k, pol_, p_, qty_)                                                                     \
    (&(struct decide_req){                                                                         \
        .key = k, .klen = strlen(k), .pol = pol_, .p = p_, .scope = -1, .qty = qty_})

    /* Inline keys of a clustered node are global: the replica answers
     * (a lone first node, no seeds, is synced at once). */
    assert_int_equal(decide_is_global(&d, REQ("k", NULL, &gcra, 1)), 1);
    assert_int_equal(decide_run(&d, REQ("k", NULL, &gcra, 1), now, &r), 0);
    assert_int_equal(r.limited, 0);
    assert_int_equal(r.limit, 3);
    limiter_get_stats(lim, &ls);
    assert_int_equal(ls.keys, 0); /* ... the replica holds the key, not the limiter */

    /* A sliding log cannot be global: the limiter decides it. */
    assert_int_equal(decide_is_global(&d, REQ("l", NULL, &log, 1)), 0);
    assert_int_equal(decide_run(&d, REQ("l", NULL, &log, 1), now, &r), 0);
    limiter_get_stats(lim, &ls);
    assert_int_equal(ls.keys, 1);

    /* A policy's scope wins over the default. */
    struct policy local = {.name = "p", .algo = gcra, .scope = POLICY_SCOPE_LOCAL};
    assert_int_equal(decide_is_global(&d, REQ("k2", &local, NULL, 1)), 0);
    struct policy_counts dry_counts = {0}, real_counts = {0};
    struct policy dry = {.name = "d",
                         .algo = gcra,
                         .scope = POLICY_SCOPE_GLOBAL,
                         .partition = POLICY_PARTITION_SHARE,
                         .dry_run = 1,
                         .counts = &dry_counts};
    int limited_seen = 0;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(decide_run(&d, REQ("d", &dry, NULL, 1), now, &r), 0);
        limited_seen |= r.limited;
    }
    assert_int_equal(limited_seen, 0); /* dry run: always answered allowed */
    /* ...and its refusals are counted as a local key's are (7 of 10 beyond
     * burst + 1). */
    limiter_get_stats(lim, &ls);
    assert_int_equal(ls.dry_run_would_limit, 7);
    assert_int_equal(dry_counts.decisions, 10);
    assert_int_equal(dry_counts.limited, 0);

    /* The same limit without dry run refuses beyond burst + 1. */
    struct policy real = dry;
    real.dry_run = 0;
    real.counts = &real_counts;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(decide_run(&d, REQ("e", &real, NULL, 1), now, &r), 0);
        limited_seen |= r.limited;
    }
    assert_int_equal(limited_seen, 1);
    assert_int_equal(real_counts.limited, 7);
    limiter_get_stats(lim, &ls);
    assert_int_equal(ls.dry_run_would_limit, 7);

    /* No cluster: everything is local. */
    struct decide alone = {lim, NULL};
    assert_int_equal(decide_is_global(&alone, REQ("k", NULL, &gcra, 1)), 0);
#undef REQ
    limiter_destroy(lim);
    finish(&loop, c);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Global keys longer than a replication message holds, and keys that
 * start with byte 0xFF, are named in the cluster by their digest
 * (cluster.h): one fixed-size name per key, never another key's own name,
 * and decided by the replica as any global key (before, a key over 4,096
 * bytes was refused and one over about 1,150 never reached its owner). */
static void test_long_keys_digest(void **state)
{
    (void)state;
    char buf[CLUSTER_KEY_ID_LEN], buf2[CLUSTER_KEY_ID_LEN];
    static char key[CLUSTER_KEY_INLINE * 20];
    memset(key, 'k', sizeof(key));
    size_t n;
    /* Up to CLUSTER_KEY_INLINE bytes: the key itself. */
    assert_ptr_equal(cluster_key_id(key, 3, buf, &n), key);
    assert_int_equal(n, 3);
    assert_ptr_equal(cluster_key_id(key, CLUSTER_KEY_INLINE, buf, &n), key);
    assert_int_equal(n, CLUSTER_KEY_INLINE);
    /* Longer: 0xFF and 32 bytes, the same for the same key, another for
     * another key. */
    const char *id = cluster_key_id(key, CLUSTER_KEY_INLINE + 1, buf, &n);
    assert_ptr_equal(id, buf);
    assert_int_equal(n, CLUSTER_KEY_ID_LEN);
    assert_int_equal((unsigned char)buf[0], 0xFF);
    (void)cluster_key_id(key, CLUSTER_KEY_INLINE + 1, buf2, &n);
    assert_memory_equal(buf, buf2, CLUSTER_KEY_ID_LEN);
    (void)cluster_key_id(key, CLUSTER_KEY_INLINE + 2, buf2, &n);
    assert_memory_not_equal(buf, buf2, CLUSTER_KEY_ID_LEN);
    /* A key that looks like a digest is digested too, so no key's own
     * name is another key's digest. */
    char fake[CLUSTER_KEY_ID_LEN];
    memcpy(fake, buf, sizeof(fake));
    id = cluster_key_id(fake, sizeof(fake), buf2, &n);
    assert_ptr_equal(id, buf2);
    assert_memory_not_equal(buf, buf2, CLUSTER_KEY_ID_LEN);

    /* Decided by the replica: burst 2 admits 3 of 5, for a key of 10,240
     * bytes as for a short one, and the replica holds one key for it. */
    uv_loop_t loop;
    struct cluster *c = start_lone(&loop);
    struct limiter *lim;
    assert_int_equal(limiter_create(&lim, NULL), 0);
    struct decide d = {lim, c};
    struct algo_params gcra;
    assert_int_equal(algo_params_init(&gcra, ALGO_GCRA, 2, 10, 3600000000000, 0), 0);
    int64_t now = (int64_t)uv_hrtime();
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        struct decide_req q = {.key = key, .klen = sizeof(key), .p = &gcra, .scope = -1, .qty = 1};
        struct algo_result r;
        assert_int_equal(decide_run(&d, &q, now, &r), 0);
        admitted += !r.limited;
    }
    assert_int_equal(admitted, 3);
    struct replica_stats rs;
    replica_get_stats(cluster_replica(c), &rs);
    assert_int_equal(rs.keys, 1);
    limiter_destroy(lim);
    finish(&loop, c);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_config_fills_what_flags_leave),
        cmocka_unit_test(test_start_refusals),
        cmocka_unit_test(test_scope_routing),
        cmocka_unit_test(test_long_keys_digest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
