/*
 * commands_sl: the SL.* commands byte for byte, without a socket.  Replies
 * in RESP2 and RESP3, every argument error, policies by name and prefix,
 * dry-run, SL.MULTI's all-or-nothing reply, SL.ACQUIRE's immediate answers,
 * SL.POLICIES, SL.RELOAD from a file (good, bad, missing) and INFO's
 * counters.
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

#include "commands_sl.h"
#include "config.h"
#include "limiter.h"
#include "policy.h"
#include "sluice/error.h"

struct fixture {
    struct limiter *lim;
    struct commands_sl *sl;
    struct resp_buf out;
    char path[64];
    char *text; /* last reply, NUL-terminated */
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
    struct commands_sl_config cfg = {.config_path = f->path};
    assert_int_equal(commands_sl_create(f->lim, &cfg, &f->sl), 0);
    char err[256];
    assert_int_equal(commands_sl_reload(f->sl, err, sizeof(err)), 0);
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
    commands_sl_dispatch(f->sl, NULL, resp3, argc, argv, argvlen, &f->out);
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

static void test_throttle_replies(void **state)
{
    struct fixture *f = *state;
    const char *spec = "SL.THROTTLE k ALGO fixed-window RATE 2 3600000";
    char line[128];
    assert_true(commands_sl_is("Sl.ThRoTtLe", 11));
    assert_false(commands_sl_is("sl.members", 10));
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
        {"SL.THROTTLE k BURST 3", "-ERR BURST, RATE and PRECISION need ALGO\r\n"},
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
        {"SL.NOPE", "-ERR unknown SL command\r\n"},
    };
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
    struct resp_buf t;
    resp_buf_init(&t);
    commands_sl_info(f->sl, &t);
    assert_non_null(t.data);
    assert_true(t.len > 0);
    char *text = strndup(t.data, t.len);
    assert_non_null(strstr(text, "dry_run_would_limit:2\r\n"));
    assert_non_null(strstr(text, "policies:2\r\n"));
    assert_non_null(strstr(text, "reloads:1\r\n"));
    free(text);
    resp_buf_free(&t);
    /* The same counters, as the metrics endpoint reads them. */
    struct commands_sl_stats st;
    commands_sl_get_stats(f->sl, &st);
    assert_int_equal(st.policies, 2);
    assert_int_equal(st.reloads, 1);
    assert_int_equal(st.reload_failures, 0);
    assert_int_equal(st.dry_run_would_limit, 2);
    assert_int_equal(st.waiting_acquires, 0);
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
    struct resp_buf t;
    resp_buf_init(&t);
    commands_sl_info(f->sl, &t);
    char *text = strndup(t.data, t.len);
    assert_non_null(strstr(text, "reload_failures:2\r\n"));
    assert_non_null(strstr(text, "reloads:2\r\n"));
    free(text);
    resp_buf_free(&t);
    struct commands_sl_stats st;
    commands_sl_get_stats(f->sl, &st);
    assert_int_equal(st.reloads, 2);
    assert_int_equal(st.reload_failures, 2);
    assert_int_equal(st.policies, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_throttle_replies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_multi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dry_run_and_info, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acquire_without_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_policies_and_reload, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
