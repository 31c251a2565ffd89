/*
 * The config loader: the shipped example loads and means what it says;
 * every kind of error is refused with the right line number and reason;
 * helpers parse rates and durations exactly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "limiter.h"
#include "policy.h"
#include "server.h"
#include "testutil.h"

#define S 1000000000LL

/* deploy/sluice.conf, found from this file's path (tests/unit/...). */
static void example_path(char *out, size_t n)
{
    const char *f = __FILE__;
    const char *cut = strstr(f, "tests/unit/daemon/test_config.c");
    assert_non_null(cut);
    snprintf(out, n, "%.*sdeploy/sluice.conf", (int)(cut - f), f);
}

static void test_example_loads(void **unused)
{
    char path[4096], err[256];
    struct config cfg;
    example_path(path, sizeof(path));
    int rc = config_load(path, &cfg, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_string_equal(cfg.socket, "/run/sluice/sluice.sock");
    assert_int_equal(cfg.socket_mode, 0660);
    assert_int_equal(cfg.max_keys, LIMITER_DEFAULT_MAX_KEYS); /* the file states the default */
    assert_int_equal(cfg.max_clients, SERVER_DEFAULT_MAX_CLIENTS);
    assert_int_equal(cfg.max_client_memory, SERVER_DEFAULT_MAX_CLIENT_MEMORY);
    assert_int_equal(cfg.on_full, CONFIG_ON_FULL_EVICT);
    assert_null(cfg.metrics);
    assert_int_equal(cfg.cluster, 1);
    assert_string_equal(cfg.node_name, "host-a");
    assert_int_equal(cfg.njoin, 2);
    assert_string_equal(cfg.join[1], "sluice-1.sluice:7946");
    assert_string_equal(cfg.cluster_label, "prod");
    assert_int_equal(cfg.default_scope, POLICY_SCOPE_GLOBAL);
    assert_int_equal(cfg.gossip_interval_ms, 100);
    assert_int_equal(cfg.npolicies, 5);
    assert_true(cfg.policies[4].concurrency);
    assert_int_equal(cfg.policies[4].lease_limit, 50);
    assert_int_equal(cfg.policies[4].lease_ttl_ns, 30 * S);
    struct policy_spec *p = &cfg.policies[0];
    assert_string_equal(p->name, "reply");
    assert_int_equal(p->algo.kind, ALGO_GCRA);
    assert_int_equal(p->algo.limit, 16);
    assert_int_equal(p->algo.count, 30);
    assert_int_equal(p->algo.period_ns, 60 * S);
    assert_int_equal(p->scope, POLICY_SCOPE_GLOBAL);
    assert_int_equal(p->partition, POLICY_PARTITION_SHARE);
    assert_string_equal(p->match, "reply:");
    assert_int_equal(p->dry_run, 0);
    assert_int_equal(cfg.policies[1].algo.kind, ALGO_SLIDING_LOG);
    assert_int_equal(cfg.policies[1].scope, POLICY_SCOPE_LOCAL);
    assert_int_equal(cfg.policies[2].algo.kind, ALGO_SLIDING_WINDOW);
    assert_int_equal(cfg.policies[2].algo.precision, 10);
    /* the api policy takes the cluster's default scope */
    assert_int_equal(cfg.policies[2].scope, POLICY_SCOPE_GLOBAL);
    assert_int_equal(cfg.policies[3].algo.kind, ALGO_WARMUP);
    assert_int_equal(cfg.policies[3].algo.warmup_ns, 30 * S);
    assert_int_equal(cfg.policies[3].scope, POLICY_SCOPE_LOCAL);
    config_free(&cfg);
    config_free(&cfg); /* harmless twice */
}

static void test_empty_is_defaults(void **unused)
{
    char err[256];
    struct config cfg;
    assert_int_equal(config_load_buffer("empty", "", 0, &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.cluster, 0);
    assert_int_equal(cfg.npolicies, 0);
    assert_int_equal(cfg.default_scope, POLICY_SCOPE_LOCAL);
    assert_string_equal(cfg.gossip_bind, "0.0.0.0:7946");
    /* one set of defaults: a config file that does not set them leaves the
     * flags' defaults (a file once turned 10000 clients into 1024) */
    assert_int_equal(cfg.max_keys, LIMITER_DEFAULT_MAX_KEYS);
    assert_int_equal(cfg.max_clients, SERVER_DEFAULT_MAX_CLIENTS);
    assert_int_equal(cfg.max_client_memory, SERVER_DEFAULT_MAX_CLIENT_MEMORY);
    /* no socket = in the file: the daemon's default path, which honours
     * $SLUICE_SOCKET, not a fixed one */
    assert_null(cfg.socket);
    config_free(&cfg);
}

/* shutdown_drain: seconds or a duration, up to an hour; absent is 0. */
static void test_shutdown_drain(void **unused)
{
    (void)unused;
    char err[256];
    struct config cfg;
    const struct {
        const char *text;
        uint64_t ms;
    } good[] = {{"[sluiced]\nshutdown_drain = 5\n", 5000},
                {"[sluiced]\nshutdown_drain = 500ms\n", 500},
                {"[sluiced]\nshutdown_drain = 1h\n", 3600000},
                {"[sluiced]\nshutdown_drain = 0\n", 0},
                {"[sluiced]\n", 0}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_int_equal(
            config_load_buffer("t", good[i].text, strlen(good[i].text), &cfg, err, sizeof(err)), 0);
        assert_int_equal(cfg.shutdown_drain_ms, good[i].ms);
        config_free(&cfg);
    }
    const char *bad[] = {"[sluiced]\nshutdown_drain = 2h\n", "[sluiced]\nshutdown_drain = -1\n",
                         "[sluiced]\nshutdown_drain = soon\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(config_load_buffer("t", bad[i], strlen(bad[i]), &cfg, err, sizeof(err)),
                         -SLUICE_ECONFIG);
        assert_non_null(strstr(err, "shutdown_drain"));
    }
}

static void test_listener_crowd_keys(void **unused)
{
    char err[256];
    struct config cfg;
    const char *text = "[sluiced]\nmax_tcp_clients = 64\ntcp_idle_timeout = 5m\n"
                       "http_max_connections = 32\nhttp_idle_timeout = 30\n"
                       "grpc_max_connections = 2048\ngrpc_idle_timeout = 0\n";
    assert_int_equal(config_load_buffer("t", text, strlen(text), &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.max_tcp_clients, 64);
    assert_int_equal(cfg.tcp_idle_timeout_ms, 300000);
    assert_int_equal(cfg.http_max_connections, 32);
    assert_int_equal(cfg.http_idle_timeout_ms, 30000);
    assert_int_equal(cfg.grpc_max_connections, 2048);
    assert_int_equal(cfg.grpc_idle_timeout_ms, 0);
    config_free(&cfg);
    const char *bad[] = {
        "[sluiced]\nhttp_max_connections = 0\n", "[sluiced]\ngrpc_max_connections = lots\n",
        "[sluiced]\nhttp_idle_timeout = 0\n", "[sluiced]\ntcp_idle_timeout = soon\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(config_load_buffer("t", bad[i], strlen(bad[i]), &cfg, err, sizeof(err)),
                         -SLUICE_ECONFIG);
        assert_non_null(strstr(err, ":2:"));
    }
}

struct bad {
    const char *text;
    int line;
    const char *reason;
};

static const struct bad bads[] = {
    {"[policy c]\nalgorithm = concurrency\nttl = 5s\n", 1, "missing required key 'limit'"},
    {"[policy c]\nalgorithm = concurrency\nlimit = 0\n", 3, "limit"},
    {"[policy c]\nalgorithm = concurrency\nlimit = 2\nrate = 1 per 1s\n", 4,
     "concurrency limit takes"},
    {"[policy c]\nalgorithm = concurrency\nlimit = 2\nttl = 25h\n", 4, "ttl"},
    {"[policy c]\nrate = 1 per 1s\nlimit = 3\n", 3, "limit applies to algorithm = concurrency"},
    {"[policy a]\nalgorithm = concurrency\nlimit = 2\nmatch = x\n"
     "[policy b]\nalgorithm = concurrency\nlimit = 2\nmatch = x\n",
     8, "already used"},
    {"[sluiced]\nsocket_mode = 0990\n", 2, "socket_mode"},
    {"[sluiced]\nmax_keys = 12x\n", 2, "max_keys"},
    {"[sluiced]\nmax_keys = 99999999999999999999999\n", 2, "max_keys"},
    {"[sluiced]\nbogus = 1\n", 2, "unknown key 'bogus'"},
    {"[sluiced]\non_full = drop\n", 2, "on_full"},
    {"[sluiced]\nlog_level = loud\n", 2, "log_level"},
    {"\n\n[nonsense]\n", 3, "unknown section"},
    {"[sluiced\n", 1, "missing ']'"},
    {"[sluiced]\n[sluiced]\n", 2, "duplicate section"},
    {"socket = /x\n", 1, "outside of any section"},
    {"[sluiced]\nthis line has no equals sign\n", 2, "syntax error"},
    {"[sluiced]\nsocket = /a\nsocket = /b\n", 3, "duplicate key"},
    {"[cluster]\njoin = a:1,,b:2\n", 2, "join"},
    {"[cluster]\njoin = a:1, b\n", 2, "join"},
    {"[cluster]\ngossip_bind = nowhere\n", 2, "gossip_bind"},
    {"[cluster]\ngossip_interval_ms = 0\n", 2, "gossip_interval_ms"},
    {"[cluster]\ngossip_mtu = 1399\n", 2, "gossip_mtu"},
    {"[cluster]\ngossip_mtu = 9217\n", 2, "gossip_mtu"},
    {"[cluster]\ndefault_scope = planet\n", 2, "default_scope"},
    {"[policy a]\nrate = 10 per 60\n", 2, "rate"},
    {"[policy a]\nrate = 10 per 60y\n", 2, "rate"},
    {"[policy a]\nrate = ten per 60s\n", 2, "rate"},
    {"[policy a]\nrate = 10 per 9999999999999h\n", 2, "too large"},
    {"[policy a]\nrate = 0 per 1s\n", 2, "rate"},
    {"[policy a]\nrate = 1 per 1s\nburst = -1\n", 3, "burst"},
    {"[policy a]\nrate = 1 per 1s\n\n[policy a]\n", 4,
     "duplicate policy 'a' (first defined on line 1)"},
    {"[policy a]\nburst = 3\n", 1, "missing required key 'rate'"},
    {"[policy]\n", 1, "unknown section"},
    {"[policy bad name!]\n", 1, "bad policy name"},
    {"[policy a]\nalgorithm = leaky\n", 2, "algorithm"},
    {"[policy a]\nrate = 5 per 1m\nalgorithm = sliding-log\nscope = global\n", 4,
     "cannot be global"},
    {"[cluster]\ndefault_scope = global\n[policy a]\nrate = 5 per 1m\nalgorithm = sliding-log\n", 3,
     "default_scope (line 2)"},
    {"[policy a]\nalgorithm = fixed-window\nburst = 3\nrate = 5 per 1s\n", 3, "burst is not used"},
    {"[policy a]\nrate = 5 per 1s\nprecision = 4\n", 3, "sliding-window only"},
    {"[policy a]\nalgorithm = sliding-window\nrate = 5 per 1s\nprecision = 1001\n", 4, "precision"},
    {"[policy a]\nrate = 2000000000 per 1s\n", 2, "out of range"},
    {"[policy a]\nrate = 1 per 1s\nmatch = x:\n[policy b]\nrate = 1 per 1s\nmatch = x:\n", 6,
     "already used by policy 'a'"},
    {"[policy a]\nrate = 1 per 1s\ndry_run = maybe\n", 3, "dry_run"},
    {"[policy a]\nrate = 1 per 1s\npartition = split\n", 3, "partition"},
    {"[policy a]\nrate = 1 per 1s\ncolour = red\n", 3, "unknown key 'colour' in [policy a]"},
    {"[policy a]\nrate = 5 per 1s\nwarmup = 10s\n", 3, "warmup applies to warmup only"},
    {"[policy a]\nrate = 5 per 1s\ncold_factor = 2\n", 3, "cold_factor applies to warmup only"},
    {"[policy a]\nalgorithm = warmup\nrate = 5 per 1s\nwarmup = soon\n", 4, "warmup"},
    {"[policy a]\nalgorithm = warmup\nrate = 5 per 1s\ncold_factor = 0\n", 4, "cold_factor"},
    {"[policy a]\nalgorithm = warmup\nrate = 5 per 1s\ncold_factor = 1001\n", 4, "cold_factor"},
    {"[policy a]\nalgorithm = warmup\nrate = 5 per 1s\nscope = global\n", 4,
     "warmup cannot be global (the warm-up is one node's history of demand)"},
};

/* A warmup policy: its warm-up and cold factor, and the defaults. */
static void test_warmup_policy(void **unused)
{
    const char *text = "[policy cache]\nalgorithm = warmup\nrate = 100 per 1s\nburst = 5\n"
                       "warmup = 10s\ncold_factor = 4\n"
                       "[policy plain]\nalgorithm = warmup\nrate = 10 per 2s\n";
    char err[512];
    struct config cfg;
    assert_int_equal(config_load_buffer("t.conf", text, strlen(text), &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.npolicies, 2);
    assert_int_equal(cfg.policies[0].algo.kind, ALGO_WARMUP);
    assert_int_equal(cfg.policies[0].algo.warmup_ns, 10000000000LL);
    assert_int_equal(cfg.policies[0].algo.cold_factor, 4);
    assert_int_equal(cfg.policies[0].algo.limit, 6);
    assert_int_equal(cfg.policies[1].algo.warmup_ns, 2000000000LL); /* one period */
    assert_int_equal(cfg.policies[1].algo.cold_factor, 3);
    config_free(&cfg);
}

static void test_concurrency_policy(void **unused)
{
    const char *text = "[policy exports]\nalgorithm = concurrency\nlimit = 50\nttl = 2m\n"
                       "match = export:\nscope = global\n"
                       "[policy gpu]\nalgorithm = concurrency\nlimit = 8\n"
                       "[policy rate]\nrate = 10 per 1s\nmatch = export:\n";
    char err[512];
    struct config cfg;
    struct policy_set *set;
    assert_int_equal(config_load_buffer("t.conf", text, strlen(text), &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.npolicies, 3);
    assert_true(cfg.policies[0].concurrency);
    assert_int_equal(cfg.policies[0].lease_limit, 50);
    assert_int_equal(cfg.policies[0].lease_ttl_ns, 120000000000LL);
    assert_int_equal(cfg.policies[1].lease_ttl_ns, CONFIG_DEFAULT_LEASE_TTL_NS);
    assert_false(cfg.policies[2].concurrency);
    assert_int_equal(policy_set_build(cfg.policies, cfg.npolicies, &set), 0);
    /* two namespaces: a throttle finds only the rate, a lease only the
     * concurrency limits, by name and by the same match prefix */
    assert_int_equal(policy_set_count(set), 1);
    assert_int_equal(policy_set_lease_count(set), 2);
    assert_null(policy_set_find(set, "exports", 7));
    assert_string_equal(policy_set_match(set, "export:1", 8)->name, "rate");
    const struct policy_lease *pl = policy_set_lease_match(set, "export:1", 8);
    assert_non_null(pl);
    assert_string_equal(pl->name, "exports");
    assert_int_equal(pl->limit, 50);
    assert_int_equal(pl->scope, POLICY_SCOPE_GLOBAL);
    assert_int_equal(policy_set_lease_find(set, "gpu", 3)->limit, 8);
    assert_null(policy_set_lease_find(set, "rate", 4));
    assert_null(policy_set_lease_match(set, "other", 5));
    policy_set_release(set);
    config_free(&cfg);
}

static void test_errors_name_their_line(void **unused)
{
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        char err[512], want[32];
        struct config cfg;
        int rc = config_load_buffer("t.conf", bads[i].text, strlen(bads[i].text), &cfg, err,
                                    sizeof(err));
        if (rc != -SLUICE_ECONFIG || strstr(err, bads[i].reason) == NULL)
            fprintf(stderr, "case %zu: rc %d, message '%s'\n", i, rc, err);
        assert_int_equal(rc, -SLUICE_ECONFIG);
        snprintf(want, sizeof(want), "t.conf:%d: ", bads[i].line);
        if (strncmp(err, want, strlen(want)) != 0)
            fprintf(stderr, "case %zu: want '%s', got '%s'\n", i, want, err);
        assert_true(strncmp(err, want, strlen(want)) == 0);
        assert_non_null(strstr(err, bads[i].reason));
        assert_int_equal(cfg.npolicies, 0); /* nothing left allocated */
        assert_null(cfg.socket);
    }
}

static void test_lines_nul_and_size(void **unused)
{
    char err[256];
    struct config cfg;
    char big[600];
    memset(big, 'x', sizeof(big));
    memcpy(big, "[sluiced]\nsocket = ", 19);
    assert_int_equal(config_load_buffer("t", big, sizeof(big), &cfg, err, sizeof(err)),
                     -SLUICE_ECONFIG);
    assert_non_null(strstr(err, "t:2: line too long"));
    assert_int_equal(
        config_load_buffer("t", "[sluiced]\nso\0cket = 1\n", 22, &cfg, err, sizeof(err)),
        -SLUICE_ECONFIG);
    assert_non_null(strstr(err, "t:2: NUL byte"));
    assert_int_equal(config_load("/nonexistent/sluice.conf", &cfg, err, sizeof(err)), -SLUICE_EIO);
    assert_non_null(strstr(err, "/nonexistent/sluice.conf: cannot open"));
    /* CRLF, BOM, indentation and inline comments are fine */
    const char *ok = "\xEF\xBB\xBF[policy a]\r\n  rate = 3 per 500ms ; comment\r\n# c\r\n";
    assert_int_equal(config_load_buffer("t", ok, strlen(ok), &cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg.policies[0].algo.period_ns, 500000000LL);
    assert_int_equal(cfg.policies[0].algo.count, 3);
    config_free(&cfg);
    /* a tiny error buffer is still terminated */
    char tiny[4];
    assert_int_equal(config_load_buffer("t", "[x]", 3, &cfg, tiny, sizeof(tiny)), -SLUICE_ECONFIG);
    assert_int_equal(strlen(tiny), 3);
}

static void test_rate_and_duration(void **unused)
{
    int64_t c, p;
    assert_int_equal(config_parse_rate("30 per 60s", &c, &p), 0);
    assert_int_equal(c, 30);
    assert_int_equal(p, 60 * S);
    assert_int_equal(config_parse_rate("5 per s", &c, &p), 0);
    assert_int_equal(p, S);
    assert_int_equal(config_parse_rate("100/1h", &c, &p), 0);
    assert_int_equal(p, 3600 * S);
    assert_int_equal(config_parse_rate("7 per 2m", &c, &p), 0);
    assert_int_equal(p, 120 * S);
    assert_int_equal(config_parse_rate("7 per", &c, &p), -SLUICE_EINVAL);
    assert_int_equal(config_parse_rate("7 per 0s", &c, &p), -SLUICE_EINVAL);
    assert_int_equal(config_parse_rate("7 perk 1s", &c, &p), -SLUICE_EINVAL);
    assert_int_equal(config_parse_rate("99999999999999999999 per 1s", &c, &p), -SLUICE_ERANGE);
    assert_int_equal(config_parse_duration("250ms", &p), 0);
    assert_int_equal(p, 250000000LL);
    assert_int_equal(config_parse_duration("s", &p), -SLUICE_EINVAL);
    assert_int_equal(config_parse_duration("3000000000h", &p), -SLUICE_ERANGE);
}

/* Policy sets: lookup by name and by longest prefix, against brute force. */
static void test_policy_set(void **unused)
{
    static const char *const prefixes[] = {"a", "ab", "abc", "b:", "user:", "user:42:", "z"};
    const size_t np = sizeof(prefixes) / sizeof(prefixes[0]);
    char text[4096], err[256];
    size_t off = 0;
    struct config cfg;
    struct policy_set *set;
    uint64_t rng = test_seed("test_config/policy");
    for (size_t i = 0; i < np; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off,
                                "[policy p%zu]\nrate = %zu per 1s\nmatch = %s\n", i, i + 1,
                                prefixes[i]);
    off += (size_t)snprintf(text + off, sizeof(text) - off, "[policy nomatch]\nrate = 1 per 1h\n");
    assert_int_equal(config_load_buffer("t", text, off, &cfg, err, sizeof(err)), 0);
    assert_int_equal(policy_set_build(cfg.policies, cfg.npolicies, &set), 0);
    config_free(&cfg); /* the set holds copies */
    assert_int_equal(policy_set_count(set), np + 1);
    assert_null(policy_set_at(set, np + 1));
    const struct policy *p = policy_set_find(set, "nomatch", 7);
    assert_non_null(p);
    assert_int_equal(p->index, np);
    assert_int_equal(p->algo.period_ns, 3600 * S);
    assert_null(policy_set_find(set, "nomatc", 6));
    assert_null(policy_set_find(set, "nomatchx", 8));
    assert_string_equal(policy_set_find(set, "p3", 2)->match, "b:");
    assert_string_equal(policy_set_match(set, "user:42:reply", 13)->name, "p5");
    assert_string_equal(policy_set_match(set, "user:43", 7)->name, "p4");
    assert_null(policy_set_match(set, "us", 2));
    assert_null(policy_set_match(set, "", 0));
    /* randomized keys over a small alphabet against a brute-force longest match */
    static const char alpha[] = "abcuz:42ser";
    for (int i = 0; i < 20000; i++) {
        char key[12];
        size_t kl = (size_t)test_rand_range(&rng, 0, sizeof(key));
        for (size_t k = 0; k < kl; k++)
            key[k] = alpha[test_rand_range(&rng, 0, (int64_t)sizeof(alpha) - 2)];
        const char *best = NULL;
        size_t bl = 0;
        for (size_t j = 0; j < np; j++) {
            size_t l = strlen(prefixes[j]);
            if (l <= kl && memcmp(prefixes[j], key, l) == 0 && (best == NULL || l > bl)) {
                best = prefixes[j];
                bl = l;
            }
        }
        p = policy_set_match(set, key, kl);
        if (best == NULL)
            assert_null(p);
        else
            assert_string_equal(p->match, best);
    }
    /* a reload: a bad file leaves the running set alone; a good one swaps */
    struct policy_set *running = set, *fresh = NULL;
    const char *bad = "[policy x]\nrate = nope\n";
    const char *good = "[policy x]\nrate = 1 per 1s\nmatch = x:\n";
    if (config_load_buffer("t", bad, strlen(bad), &cfg, err, sizeof(err)) == 0)
        fail();
    assert_non_null(policy_set_match(running, "user:1", 6));
    assert_int_equal(config_load_buffer("t", good, strlen(good), &cfg, err, sizeof(err)), 0);
    assert_int_equal(policy_set_build(cfg.policies, cfg.npolicies, &fresh), 0);
    config_free(&cfg);
    struct policy_set *held = policy_set_retain(running); /* e.g. a waiting acquire */
    policy_set_release(running);
    running = fresh;
    assert_non_null(policy_set_match(held, "user:1", 6)); /* still valid while held */
    policy_set_release(held);
    assert_null(policy_set_match(running, "user:1", 6));
    assert_non_null(policy_set_match(running, "x:1", 3));
    policy_set_release(running);
    /* an empty config gives an empty set */
    assert_int_equal(config_load_buffer("t", "", 0, &cfg, err, sizeof(err)), 0);
    assert_int_equal(policy_set_build(cfg.policies, cfg.npolicies, &set), 0);
    assert_null(policy_set_match(set, "abc", 3));
    assert_null(policy_set_find(set, "a", 1));
    policy_set_release(set);
    config_free(&cfg);
}

int main(void)
{
    (void)test_seed("test_config");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_loads),
        cmocka_unit_test(test_empty_is_defaults),
        cmocka_unit_test(test_errors_name_their_line),
        cmocka_unit_test(test_warmup_policy),
        cmocka_unit_test(test_lines_nul_and_size),
        cmocka_unit_test(test_rate_and_duration),
        cmocka_unit_test(test_listener_crowd_keys),
        cmocka_unit_test(test_shutdown_drain),
        cmocka_unit_test(test_policy_set),
        cmocka_unit_test(test_concurrency_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
