/*
 * commands_sl: the SL.* commands byte for byte, without a socket.  Replies
 * in RESP2 and RESP3, every argument error, policies by name and prefix,
 * dry-run, SL.MULTI's all-or-nothing reply, SL.ACQUIRE's immediate answers,
 * SL.POLICIES, SL.RELOAD from a file (good, bad, missing), INFO's counters
 * and commands_sl_get_stats, the SCOPE option's errors, and, on a node in a
 * one-node cluster, global keys: held by the replica, SL.REFUND and SL.RESET
 * refused, SL.MULTI over a global and a local key all or nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <uv.h>

#include "cluster.h"
#include "commands.h"
#include "commands_sl.h"
#include "config.h"
#include "info.h"
#include "limiter.h"
#include "policy.h"
#include "reload.h"
#include "replica.h"
#include "sluice/error.h"

struct fixture {
    struct limiter *lim;
    struct commands_sl *sl;
    struct resp_buf out;
    char path[64];
    struct reload reload; /* the config file's policies for SL.RELOAD */
    char *text;           /* last reply, NUL-terminated */
};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const char *CONF = "[policy login]\nalgorithm = sliding-log\nrate = 2 per 1m\n"
                          "match = login:\n"
                          "[policy trial]\nalgorithm = fixed-window\nrate = 1 per 1h\n"
                          "match = trial:\ndry_run = true\n";

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->path, sizeof(f->path), "/tmp/sluice-test-sl-%ld.conf", (long)getpid());
    write_file(f->path, CONF);
    assert_int_equal(limiter_create(&f->lim, NULL), 0);
    reload_init(&f->reload, f->path);
    reload_attach(&f->reload, f->lim, NULL);
    struct commands_sl_config cfg = {
        .reloader = {.reload = reload_request, .stats = reload_stats, .ud = &f->reload}};
    assert_int_equal(commands_sl_create(f->lim, &cfg, &f->sl), 0);
    char err[256];
    assert_int_equal(reload_now(&f->reload, err, sizeof(err)), 0);
    resp_buf_init(&f->out);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    commands_sl_close(f->sl);
    commands_sl_destroy(f->sl);
    limiter_destroy(f->lim);
    resp_buf_free(&f->out);
    unlink(f->path);
    free(f->text);
    free(f);
    return 0;
}

/* Runs a space-separated command line and returns the reply text. */
static const char *run3(struct fixture *f, int resp3, const char *line)
{
    char buf[1024];
    const char *argv[64];
    size_t argvlen[64], argc = 0;
    snprintf(buf, sizeof(buf), "%s", line);
    for (char *tok = strtok(buf, " "); tok != NULL && argc < 64; tok = strtok(NULL, " ")) {
        argv[argc] = tok;
        argvlen[argc] = strlen(tok);
        argc++;
    }
    f->out.len = 0;
    commands_sl_fn fn = commands_row_sl(commands_find(argv[0], argvlen[0]));
    assert_non_null(fn);
    fn(f->sl, NULL, resp3, argc, argv, argvlen, &f->out);
    free(f->text);
    f->text = malloc(f->out.len + 1);
    assert_non_null(f->text);
    memcpy(f->text, f->out.data, f->out.len);
    f->text[f->out.len] = '\0';
    return f->text;
}

static const char *run(struct fixture *f, const char *line)
{
    return run3(f, 0, line);
}

/* INFO's "# Policies" and "# Limiter" lines as text (valid until the next
 * run or info). */
static const char *info(struct fixture *f)
{
    struct commands_sl_stats st;
    struct limiter_stats ls;
    commands_sl_get_stats(f->sl, &st);
    limiter_get_stats(f->lim, &ls);
    f->out.len = 0;
    resp_add_raw(&f->out, "# Policies\r\n", 12);
    info_counters(&f->out, &commands_sl_counters, &st);
    info_counters(&f->out, &limiter_counters, &ls);
    free(f->text);
    f->text = strndup(f->out.data, f->out.len);
    assert_non_null(f->text);
    assert_true(strncmp(f->text, "# Policies\r\n", 12) == 0);
    return f->text;
}

static void test_throttle_replies(void **state)
{
    struct fixture *f = *state;
    const char *spec = "SL.THROTTLE k ALGO fixed-window RATE 2 3600000";
    char line[128];
    assert_non_null(commands_row_sl(commands_find("Sl.ThRoTtLe", 11)));
    assert_null(commands_row_sl(commands_find("sl.members", 10)));
    /* RESP2: CL.THROTTLE's shape in milliseconds */
    const char *r = run(f, spec);
    assert_true(strncmp(r, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:", 22) == 0);
    r = run(f, spec);
    assert_true(strncmp(r, "*5\r\n:0\r\n:2\r\n:0\r\n:-1\r\n", 20) == 0);
    r = run(f, spec);
    assert_true(strncmp(r, "*5\r\n:1\r\n:2\r\n:0\r\n:", 16) == 0);
    assert_true(strstr(r, ":-1") == NULL); /* a retry time when limited */
    /* PEEK and SL.PEEK take nothing; QTY 0 neither */
    snprintf(line, sizeof(line), "%s PEEK", spec);
    assert_true(strncmp(run(f, line), "*5\r\n:0\r\n:2\r\n:0\r\n", 16) == 0);
    assert_true(strncmp(run(f, "SL.PEEK k ALGO fixed-window RATE 2 3600000"),
                        "*5\r\n:0\r\n:2\r\n:0\r\n", 16) == 0);
    /* refund one */
    assert_true(strncmp(run(f, "SL.REFUND k ALGO fixed-window RATE 2 3600000 QTY 1"),
                        "*5\r\n:0\r\n:2\r\n:1\r\n", 16) == 0);
    assert_string_equal(run(f, "SL.RESET k"), ":1\r\n");
    assert_string_equal(run(f, "SL.RESET k"), ":0\r\n");
    /* RESP3: a map naming the algorithm and the policy (null inline) */
    assert_string_equal(run3(f, 1, "SL.THROTTLE k2 ALGO gcra RATE 1 1000"),
                        "%7\r\n$7\r\nlimited\r\n:0\r\n$5\r\nlimit\r\n:1\r\n$9\r\nremaining\r\n:"
                        "0\r\n$14\r\nretry_after_ms\r\n:-1\r\n$14\r\nreset_after_ms\r\n:1000\r\n"
                        "$9\r\nalgorithm\r\n$4\r\ngcra\r\n$6\r\npolicy\r\n_\r\n");
    r = run3(f, 1, "SL.THROTTLE login:a");
    assert_non_null(strstr(r, "$11\r\nsliding-log\r\n$6\r\npolicy\r\n$5\r\nlogin\r\n"));
}

/* SL.CHARGE counts whatever the key holds: a cost known after the work
 * drives the key into a debt that SL.THROTTLE then waits out. */
static void test_charge_post_paid(void **state)
{
    struct fixture *f = *state;
    const char *spec = "ALGO fixed-window RATE 10 3600000";
    char line[160];
    /* 7 of 10, then a charge of 7 more: over by 4, yet counted */
    snprintf(line, sizeof(line), "SL.CHARGE c %s QTY 7", spec);
    assert_true(strncmp(run(f, line), "*5\r\n:0\r\n:10\r\n:3\r\n:-1\r\n", 22) == 0);
    const char *r = run(f, line);
    assert_true(strncmp(r, "*5\r\n:1\r\n:10\r\n:0\r\n:", 18) == 0);
    assert_null(strstr(r, ":-1")); /* when one unit fits again */
    /* a request now is refused, and a look says over */
    snprintf(line, sizeof(line), "SL.THROTTLE c %s", spec);
    assert_true(strncmp(run(f, line), "*5\r\n:1\r\n", 8) == 0);
    snprintf(line, sizeof(line), "SL.CHARGE c %s QTY 0", spec);
    assert_true(strncmp(run(f, line), "*5\r\n:1\r\n:10\r\n:0\r\n", 16) == 0);
    /* gcra: the debt is repaid at the rate; exactly at the limit is not over */
    assert_true(strncmp(run(f, "SL.CHARGE g ALGO gcra BURST 1 RATE 2 3600000 QTY 2"),
                        "*5\r\n:0\r\n:2\r\n:0\r\n:-1\r\n", 21) == 0);
    r = run(f, "SL.CHARGE g ALGO gcra BURST 1 RATE 2 3600000 QTY 1");
    assert_true(strncmp(r, "*5\r\n:1\r\n:2\r\n:0\r\n", 16) == 0);
    /* 3 units in a bucket of 2 at 2 per hour: one unit fits once the
     * debt and one unit are repaid, an hour on */
    assert_non_null(strstr(r, ":3600000\r\n"));
    /* a dry-run policy answers allowed, but the units are counted */
    assert_true(strncmp(run(f, "SL.CHARGE trial:a QTY 5"), "*5\r\n:0\r\n:1\r\n:0\r\n", 16) == 0);
    assert_true(strncmp(run(f, "SL.CHARGE k ALGO gcra RATE 1 1000"), "-ERR QTY is required", 20) ==
                0);
}

static void test_errors(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *line, *want;
    } cases[] = {
        {"SL.THROTTLE", "-ERR wrong number of arguments"},
        {"SL.THROTTLE nomatch", "-ERR no policy matches key and no ALGO given\r\n"},
        {"SL.THROTTLE k POLICY nope", "-ERR no such policy 'nope'\r\n"},
        {"SL.THROTTLE k ALGO leaky RATE 1 1", "-ERR unknown algorithm 'leaky'"},
        {"SL.THROTTLE k ALGO gcra", "-ERR ALGO needs RATE count period_ms\r\n"},
        {"SL.THROTTLE k ALGO gcra RATE 0 5", "-ERR invalid limit"},
        {"SL.THROTTLE k ALGO gcra RATE 1 -5", "-ERR invalid limit"},
        {"SL.THROTTLE k ALGO gcra RATE 1 9223372036854775807", "-ERR invalid limit"},
        {"SL.THROTTLE k ALGO sliding-window RATE 1 1000 PRECISION 5000", "-ERR invalid limit"},
        {"SL.THROTTLE k ALGO gcra RATE 1x 5", "-ERR value is not an integer or out of range\r\n"},
        {"SL.THROTTLE k BURST 3", "-ERR BURST, RATE, PRECISION, WARMUP and COLD need ALGO\r\n"},
        {"SL.THROTTLE k POLICY login ALGO gcra RATE 1 1", "-ERR POLICY and ALGO are exclusive\r\n"},
        {"SL.THROTTLE login:x QTY -2", "-ERR QTY must not be negative\r\n"},
        {"SL.THROTTLE login:x TIMEOUT 5", "-ERR syntax error near 'TIMEOUT'\r\n"},
        {"SL.PEEK login:x PEEK", "-ERR syntax error near 'PEEK'\r\n"},
        {"SL.REFUND login:x", "-ERR QTY is required"},
        {"SL.RESET", "-ERR wrong number of arguments: SL.RESET key\r\n"},
        {"SL.ACQUIRE login:x", "-ERR TIMEOUT ms is required\r\n"},
        {"SL.ACQUIRE login:x TIMEOUT 99999999999", "-ERR TIMEOUT must be"},
        {"SL.MULTI", "-ERR wrong number of arguments"},
        {"SL.MULTI KEY", "-ERR syntax error near 'KEY'\r\n"},
        {"SL.MULTI login:a", "-ERR syntax error near 'login:a'\r\n"},
        {"SL.MULTI KEY login:a KEY login:a", "-ERR duplicate key in SL.MULTI\r\n"},
    };
    /* An unknown SL.* name has no row: the dispatcher answers it as Redis
     * answers any unknown command. */
    assert_null(commands_find("SL.NOPE", 7));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *r = run(f, cases[i].line);
        if (strncmp(r, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("%s: got %s", cases[i].line, r);
    }
    /* 17 keys */
    char line[512] = "SL.MULTI";
    for (int i = 0; i < 17; i++) {
        char k[32];
        snprintf(k, sizeof(k), " KEY login:%d", i);
        strcat(line, k);
    }
    assert_string_equal(run(f, line), "-ERR at most 16 keys\r\n");
    /* a key over the bound */
    char big[600] = "SL.THROTTLE ";
    memset(big + 12, 'k', 520);
    big[532] = '\0';
    assert_true(strncmp(run(f, big), "-ERR key too long", 17) == 0);
    /* nothing was created by any of it */
    struct limiter_stats st;
    limiter_get_stats(f->lim, &st);
    assert_int_equal(st.keys, 0);
}

static void test_multi(void **state)
{
    struct fixture *f = *state;
    const char *ok = "SL.MULTI QTY 2 KEY edge ALGO fixed-window RATE 10 3600000 KEY login:m";
    const char *r = run(f, ok);
    assert_true(strncmp(r, "*3\r\n:0\r\n*5\r\n:0\r\n:10\r\n:8\r\n", 25) == 0);
    assert_non_null(strstr(r, "*5\r\n:0\r\n:2\r\n:0\r\n"));
    r = run(f, "SL.MULTI KEY edge ALGO fixed-window RATE 10 3600000 KEY login:m");
    assert_true(strncmp(r, "*3\r\n:1\r\n*5\r\n:0\r\n:10\r\n:8\r\n", 25) == 0);
    assert_non_null(strstr(r, "*5\r\n:1\r\n:2\r\n:0\r\n"));
    /* edge was not charged */
    assert_true(strncmp(run(f, "SL.PEEK edge ALGO fixed-window RATE 10 3600000"),
                        "*5\r\n:0\r\n:10\r\n:8\r\n", 17) == 0);
    /* a per-key QTY overrides the request's */
    r = run(f, "SL.MULTI QTY 5 KEY edge ALGO fixed-window RATE 10 3600000 QTY 1 KEY x ALGO "
               "gcra RATE 1 1000 QTY 1");
    assert_true(strncmp(r, "*3\r\n:0\r\n*5\r\n:0\r\n:10\r\n:7\r\n", 25) == 0);
}

static void test_dry_run_and_info(void **state)
{
    struct fixture *f = *state;
    for (int i = 0; i < 3; i++)
        assert_true(strncmp(run(f, "SL.THROTTLE trial:x"), "*5\r\n:0\r\n", 8) == 0);
    const char *text = info(f);
    assert_non_null(strstr(text, "dry_run_would_limit:2\r\n"));
    assert_non_null(strstr(text, "policies:2\r\n"));
    assert_non_null(strstr(text, "reloads:1\r\n"));
    /* The same counters, as the metrics endpoint reads them. */
    struct commands_sl_stats st;
    commands_sl_get_stats(f->sl, &st);
    assert_int_equal(st.policies, 2);
    assert_int_equal(st.reloads, 1);
    assert_int_equal(st.reload_failures, 0);
    assert_int_equal(st.waiting_acquires, 0);
    struct limiter_stats ls;
    limiter_get_stats(f->lim, &ls);
    assert_int_equal(ls.dry_run_would_limit, 2);
}

static void test_acquire_without_connection(void **state)
{
    struct fixture *f = *state;
    /* no loop configured: SL.ACQUIRE is refused */
    assert_string_equal(run(f, "SL.ACQUIRE login:q TIMEOUT 10"),
                        "-ERR SL.ACQUIRE is not available\r\n");
}

static void test_policies_and_reload(void **state)
{
    struct fixture *f = *state;
    const char *r = run(f, "SL.POLICIES");
    assert_true(strncmp(r, "*2\r\n*20\r\n$4\r\nname\r\n$5\r\nlogin\r\n", 30) == 0);
    assert_non_null(strstr(r, "$5\r\nmatch\r\n$6\r\ntrial:\r\n$7\r\ndry_run\r\n:1\r\n"));
    r = run3(f, 1, "SL.POLICIES");
    assert_true(strncmp(r, "*2\r\n%10\r\n", 9) == 0);
    /* a key with state keeps it across a reload that changes its limit */
    run(f, "SL.THROTTLE login:k");
    run(f, "SL.THROTTLE login:k");
    assert_true(strncmp(run(f, "SL.THROTTLE login:k"), "*5\r\n:1\r\n", 8) == 0);
    write_file(f->path, "[policy login]\nalgorithm = sliding-log\nrate = 3 per 1m\n"
                        "match = login:\n");
    assert_string_equal(run(f, "SL.RELOAD"), "+OK\r\n");
    assert_true(strncmp(run(f, "SL.THROTTLE login:k"), "*5\r\n:0\r\n:3\r\n:0\r\n", 16) == 0);
    /* a bad file: the error names the line, the old set stays */
    write_file(f->path, "[policy login]\nalgorithm = sliding-log\nrate = lots\n");
    r = run(f, "SL.RELOAD");
    assert_true(strncmp(r, "-ERR reload failed: ", 20) == 0);
    assert_non_null(strstr(r, ".conf:3:"));
    assert_true(strncmp(run(f, "SL.PEEK login:k"), "*5\r\n:0\r\n:3\r\n", 12) == 0);
    /* a missing file */
    unlink(f->path);
    assert_true(strncmp(run(f, "SL.RELOAD"), "-ERR reload failed: ", 20) == 0);
    const char *text = info(f);
    assert_non_null(strstr(text, "reload_failures:2\r\n"));
    assert_non_null(strstr(text, "reloads:2\r\n"));
    struct commands_sl_stats st;
    commands_sl_get_stats(f->sl, &st);
    assert_int_equal(st.reloads, 2);
    assert_int_equal(st.reload_failures, 2);
    assert_int_equal(st.policies, 1);
    /* a warmup policy shows its warm-up and cold factor */
    write_file(f->path, "[policy w]\nalgorithm = warmup\nrate = 10 per 1s\nwarmup = 4s\n"
                        "cold_factor = 5\n");
    assert_string_equal(run(f, "SL.RELOAD"), "+OK\r\n");
    r = run(f, "SL.POLICIES");
    assert_true(strncmp(r, "*1\r\n*24\r\n", 9) == 0);
    assert_non_null(
        strstr(r, "$9\r\nwarmup_ms\r\n:4000\r\n$11\r\ncold_factor\r\n:5\r\n$5\r\nscope"));
    assert_true(strncmp(run3(f, 1, "SL.POLICIES"), "*1\r\n%12\r\n", 9) == 0);
    /* concurrency policies follow the rates: limit, TTL, scope, match */
    write_file(f->path, "[policy w]\nalgorithm = warmup\nrate = 10 per 1s\nwarmup = 4s\n"
                        "cold_factor = 5\n\n[policy exports]\nalgorithm = concurrency\n"
                        "limit = 50\nttl = 90s\nscope = local\nmatch = export:\n");
    assert_string_equal(run(f, "SL.RELOAD"), "+OK\r\n");
    r = run(f, "SL.POLICIES");
    assert_true(strncmp(r, "*2\r\n*24\r\n", 9) == 0);
    assert_non_null(strstr(r, "*12\r\n$4\r\nname\r\n$7\r\nexports\r\n$9\r\nalgorithm\r\n"
                              "$11\r\nconcurrency\r\n$5\r\nlimit\r\n:50\r\n$6\r\nttl_ms\r\n"
                              ":90000\r\n$5\r\nscope\r\n$5\r\nlocal\r\n$5\r\nmatch\r\n"
                              "$7\r\nexport:\r\n"));
    r = run3(f, 1, "SL.POLICIES");
    assert_non_null(strstr(r, "%6\r\n$4\r\nname\r\n$7\r\nexports\r\n"));
}

/* Runs line and fails, showing the reply, unless it starts with want. */
static void expect(struct fixture *f, const char *line, const char *want)
{
    const char *r = run(f, line);
    if (strncmp(r, want, strlen(want)) != 0)
        fail_msg("%s: got %s", line, r);
}

/* The SCOPE option's errors: it needs ALGO (a policy has its own scope),
 * a value that is local or global, at most once, and sliding-log cannot be
 * global.  Checked on a lone node, where no key is global anyway. */
static void test_scope_errors(void **state)
{
    struct fixture *f = *state;
    static const struct {
        const char *line, *want;
    } cases[] = {
        {"SL.THROTTLE k POLICY login SCOPE global",
         "-ERR SCOPE needs ALGO (a policy has its own scope)\r\n"},
        {"SL.THROTTLE login:x SCOPE local",
         "-ERR SCOPE needs ALGO (a policy has its own scope)\r\n"},
        {"SL.THROTTLE k ALGO sliding-log RATE 2 1000 SCOPE global",
         "-ERR sliding-log cannot be global (exactness needs every timestamp)\r\n"},
        {"SL.THROTTLE k ALGO gcra RATE 2 1000 SCOPE everywhere",
         "-ERR SCOPE must be local or global\r\n"},
        {"SL.THROTTLE k ALGO gcra RATE 2 1000 SCOPE", "-ERR syntax error near 'SCOPE'\r\n"},
        {"SL.THROTTLE k ALGO gcra RATE 2 1000 SCOPE local SCOPE global",
         "-ERR syntax error near 'SCOPE'\r\n"},
        {"SL.MULTI KEY a ALGO sliding-log RATE 2 1000 SCOPE global",
         "-ERR sliding-log cannot be global"},
        {"SL.ACQUIRE k ALGO gcra RATE 2 1000 SCOPE nowhere TIMEOUT 5",
         "-ERR SCOPE must be local or global\r\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *r = run(f, cases[i].line);
        if (strncmp(r, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("%s: got %s", cases[i].line, r);
    }
    /* The valid forms, any case; a lone node decides them locally. */
    expect(f, "SL.THROTTLE k ALGO sliding-log RATE 2 1000 scope LOCAL", "*5\r\n:0\r\n:2\r\n:1\r\n");
    expect(f, "SL.THROTTLE g ALGO gcra BURST 1 RATE 2 1000 SCOPE Global",
           "*5\r\n:0\r\n:2\r\n:1\r\n");
    struct limiter_stats st;
    limiter_get_stats(f->lim, &st);
    assert_int_equal(st.keys, 2);
}

/* A node in a cluster of its own (loopback gossip, no seeds: synced at
 * once), so that global keys exist without other nodes. */
struct cfixture {
    uv_loop_t loop;
    struct cluster *cl;
    struct fixture f;
};

static int csetup(void **state)
{
    struct cfixture *cf = calloc(1, sizeof(*cf));
    assert_non_null(cf);
    assert_int_equal(uv_loop_init(&cf->loop), 0);
    struct cluster_options o;
    cluster_options_init(&o);
    o.gossip_bind = "127.0.0.1:0";
    o.insecure = 1;
    o.node_name = "unit";
    char err[512];
    assert_int_equal(cluster_start(&cf->loop, &o, &cf->cl, err, sizeof(err)), 0);
    assert_non_null(cf->cl);
    cluster_options_free(&o);
    struct fixture *f = &cf->f;
    snprintf(f->path, sizeof(f->path), "/tmp/sluice-test-slc-%ld.conf", (long)getpid());
    write_file(f->path, "[policy shared]\nalgorithm = token-bucket\nburst = 1\nrate = 2 per 1h\n"
                        "scope = global\nmatch = shared:\n"
                        "[policy mine]\nalgorithm = gcra\nburst = 1\nrate = 2 per 1h\n"
                        "scope = local\nmatch = mine:\n");
    assert_int_equal(limiter_create(&f->lim, NULL), 0);
    reload_init(&f->reload, f->path);
    reload_attach(&f->reload, f->lim, &cf->loop);
    struct commands_sl_config cfg = {
        .reloader = {.reload = reload_request, .stats = reload_stats, .ud = &f->reload},
        .loop = &cf->loop};
    assert_int_equal(commands_sl_create(f->lim, &cfg, &f->sl), 0);
    commands_sl_set_cluster(f->sl, cf->cl);
    assert_int_equal(reload_now(&f->reload, err, sizeof(err)), 0);
    resp_buf_init(&f->out);
    *state = cf;
    return 0;
}

static int cteardown(void **state)
{
    struct cfixture *cf = *state;
    struct fixture *f = &cf->f;
    commands_sl_close(f->sl);
    cluster_stop(cf->cl, NULL, NULL);
    uv_run(&cf->loop, UV_RUN_DEFAULT);
    commands_sl_destroy(f->sl);
    cluster_destroy(cf->cl);
    limiter_destroy(f->lim);
    assert_int_equal(uv_loop_close(&cf->loop), 0);
    resp_buf_free(&f->out);
    unlink(f->path);
    free(f->text);
    free(cf);
    return 0;
}

/* On a clustered node: global keys (a global policy, an inline ALGO with
 * the default scope or SCOPE global) are held by the replica, not the local
 * limiter; SL.REFUND and SL.RESET refuse them with their reason; local keys
 * (SCOPE local, a local policy, sliding-log) refund and reset as alone. */
static void test_global_refund_reset_refused(void **state)
{
    struct cfixture *cf = *state;
    struct fixture *f = &cf->f;
    struct replica *rep = cluster_replica(cf->cl);
    static const char *refund_err =
        "-ERR SL.REFUND cannot give back units of a global key (the cluster's counts only "
        "grow; they drain at the limit's rate)\r\n";
    static const char *reset_err = "-ERR SL.RESET cannot reset a global key (the cluster's "
                                   "counts only grow; it is fresh again once they have "
                                   "drained)\r\n";
    /* an inline limit takes the default scope (global) */
    expect(f, "SL.THROTTLE g ALGO gcra BURST 1 RATE 2 3600000", "*5\r\n:0\r\n:2\r\n:1\r\n");
    assert_int_equal(replica_key_total(rep, "g", 1), 1);
    expect(f, "SL.REFUND g ALGO gcra BURST 1 RATE 2 3600000 QTY 1", refund_err);
    expect(f, "SL.RESET g", reset_err);
    /* nothing was given back */
    assert_int_equal(replica_key_total(rep, "g", 1), 1);
    /* a charge on a global key is an admission the replica counts (and
     * reports to the key's owner)... */
    expect(f, "SL.CHARGE g ALGO gcra BURST 1 RATE 2 3600000 QTY 1", "*5\r\n:0\r\n:2\r\n");
    assert_int_equal(replica_key_total(rep, "g", 1), 2);
    /* ...as far as the replica admits it: beyond, it is answered over the
     * limit and not counted (replica.h has no call for a debt yet) */
    expect(f, "SL.CHARGE g ALGO gcra BURST 1 RATE 2 3600000 QTY 5", "*5\r\n:1\r\n:2\r\n:0\r\n");
    assert_int_equal(replica_key_total(rep, "g", 1), 2);
    expect(f, "SL.PEEK g ALGO gcra BURST 1 RATE 2 3600000", "*5\r\n:0\r\n:2\r\n:0\r\n");
    /* SCOPE global, and a global policy by prefix or by name: refused
     * before anything is decided */
    expect(f, "SL.REFUND h ALGO gcra BURST 1 RATE 2 3600000 SCOPE global QTY 1", refund_err);
    expect(f, "SL.REFUND shared:a QTY 1", refund_err);
    expect(f, "SL.REFUND x POLICY shared QTY 1", refund_err);
    expect(f, "SL.THROTTLE shared:a", "*5\r\n:0\r\n:2\r\n:1\r\n");
    expect(f, "SL.RESET shared:a", reset_err);

    /* local keys: refund and reset work */
    const char *l = "SL.THROTTLE l ALGO gcra BURST 1 RATE 2 3600000 SCOPE local";
    expect(f, l, "*5\r\n:0\r\n:2\r\n:1\r\n");
    expect(f, l, "*5\r\n:0\r\n:2\r\n:0\r\n");
    expect(f, "SL.REFUND l ALGO gcra BURST 1 RATE 2 3600000 SCOPE local QTY 1",
           "*5\r\n:0\r\n:2\r\n:1\r\n");
    assert_int_equal(replica_key_total(rep, "l", 1), -1);
    expect(f, "SL.RESET l", ":1\r\n");
    run(f, "SL.THROTTLE mine:a");
    run(f, "SL.THROTTLE mine:a");
    expect(f, "SL.REFUND mine:a QTY 1", "*5\r\n:0\r\n:2\r\n:1\r\n");
    expect(f, "SL.RESET mine:a", ":1\r\n");
    run(f, "SL.THROTTLE s ALGO sliding-log RATE 2 3600000");
    assert_int_equal(replica_key_total(rep, "s", 1), -1);
    expect(f, "SL.RESET s", ":1\r\n");
    /* a key nobody holds */
    expect(f, "SL.RESET nobody", ":0\r\n");
    /* the local limiter never held a global key */
    struct limiter_stats st;
    limiter_get_stats(f->lim, &st);
    assert_int_equal(st.keys, 0);
}

/* SL.MULTI over a global and a local key on a clustered node: all or
 * nothing, and a refusal charges neither; SL.ACQUIRE without a connection
 * answers a global key that fits at once. */
static void test_global_multi_and_acquire(void **state)
{
    struct cfixture *cf = *state;
    struct fixture *f = &cf->f;
    struct replica *rep = cluster_replica(cf->cl);
    const char *both = "SL.MULTI KEY shared:m KEY l ALGO fixed-window RATE 1 3600000 SCOPE local";
    const char *r = run(f, both);
    assert_true(strncmp(r, "*3\r\n:0\r\n", 8) == 0);
    assert_int_equal(replica_key_total(rep, "shared:m", 8), 1);
    /* the local key is spent: the global one is not charged */
    r = run(f, both);
    assert_true(strncmp(r, "*3\r\n:1\r\n", 8) == 0);
    assert_int_equal(replica_key_total(rep, "shared:m", 8), 1);
    /* SL.ACQUIRE of a global key that fits: answered at once, waited 0 */
    expect(f, "SL.ACQUIRE shared:m TIMEOUT 1000", "*6\r\n:0\r\n:2\r\n:0\r\n:-1\r\n");
    assert_int_equal(replica_key_total(rep, "shared:m", 8), 2);
    /* ... that does not fit within the timeout: limited at once */
    r = run(f, "SL.ACQUIRE shared:m TIMEOUT 10");
    assert_true(strncmp(r, "*6\r\n:1\r\n:2\r\n:0\r\n", 16) == 0);
    struct commands_sl_stats st;
    commands_sl_get_stats(f->sl, &st);
    assert_int_equal(st.waiting_acquires, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_throttle_replies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_multi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dry_run_and_info, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acquire_without_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_charge_post_paid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_policies_and_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scope_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_global_refund_reset_refused, csetup, cteardown),
        cmocka_unit_test_setup_teardown(test_global_multi_and_acquire, csetup, cteardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
