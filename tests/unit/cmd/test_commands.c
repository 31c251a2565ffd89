/*
 * Command layer: exact reply bytes for CL.THROTTLE (redis-cell's answers and
 * error texts), strict integer parsing, the key bound, and the Redis
 * commands clients send on connect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "args.h"
#include "commands.h"
#include "sluice/error.h"

struct fixture {
    struct limiter *lim;
    struct commands *cmds;
    struct resp_buf out;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(limiter_create(&f->lim, NULL), 0);
    struct commands_config cfg = {.max_key_bytes = 8};
    assert_int_equal(commands_create(f->lim, &cfg, &f->cmds), 0);
    resp_buf_init(&f->out);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    commands_destroy(f->cmds);
    limiter_destroy(f->lim);
    resp_buf_free(&f->out);
    free(f);
    return 0;
}

/* Runs a command given as space-separated words; returns the reply text. */
static const char *run(struct fixture *f, const char *line, int *close_after)
{
    static char words[512];
    const char *argv[32];
    size_t argvlen[32];
    size_t argc = 0;
    snprintf(words, sizeof(words), "%s", line);
    for (char *tok = strtok(words, " "); tok != NULL; tok = strtok(NULL, " ")) {
        argv[argc] = tok;
        argvlen[argc] = strlen(tok);
        argc++;
    }
    f->out.len = 0;
    int rc = commands_dispatch(f->cmds, NULL, argc, argv, argvlen, &f->out);
    if (close_after)
        *close_after = rc == SERVER_CLOSE_AFTER_REPLY;
    resp_add_raw(&f->out, "", 1); /* NUL-terminate for comparison */
    return f->out.data;
}

static void test_throttle_transcript(void **state)
{
    struct fixture *f = *state;
    assert_string_equal(run(f, "CL.THROTTLE user123 15 30 60", NULL),
                        "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n");
    assert_string_equal(run(f, "cl.throttle user123 15 30 60 0", NULL),
                        "*5\r\n:0\r\n:16\r\n:15\r\n:-1\r\n:2\r\n");
    assert_string_equal(run(f, "Cl.Throttle user123 15 30 60 +1", NULL),
                        "*5\r\n:0\r\n:16\r\n:14\r\n:-1\r\n:4\r\n");
}

static void test_throttle_errors(void **state)
{
    struct fixture *f = *state;
    static const char usage[] = "-Cell error: Store error: Usage: cl.throttle <key> <max_burst> "
                                "<count per period> <period> [<quantity>]\r\n";
    assert_string_equal(run(f, "CL.THROTTLE", NULL), usage);
    assert_string_equal(run(f, "CL.THROTTLE k 1 1", NULL), usage);
    assert_string_equal(run(f, "CL.THROTTLE k 1 1 1 1 1", NULL), usage);
    assert_string_equal(run(f, "CL.THROTTLE k x 1 1", NULL),
                        "-Cell error: Store error: Couldn't parse as integer: x\r\n");
    assert_string_equal(run(f, "CL.THROTTLE k 1 1 1 1.5", NULL),
                        "-Cell error: Store error: Couldn't parse as integer: 1.5\r\n");
    assert_string_equal(run(f, "CL.THROTTLE k 9223372036854775808 1 1", NULL),
                        "-Cell error: Store error: Couldn't parse as integer: "
                        "9223372036854775808\r\n");
    assert_string_equal(run(f, "CL.THROTTLE k 1 0 1", NULL),
                        "-Cell error: Store error: Zero rates are not supported\r\n");
    assert_string_equal(run(f, "CL.THROTTLE k 1 1 0", NULL),
                        "-Cell error: Store error: Zero rates are not supported\r\n");
    assert_string_equal(run(f, "CL.THROTTLE k -1 1 1", NULL),
                        "-Cell error: Store error: max_burst must not be negative\r\n");
    assert_string_equal(run(f, "CL.THROTTLE k 1 1 1 -2", NULL),
                        "-Cell error: Store error: quantity must not be negative\r\n");
    assert_string_equal(run(f, "CL.THROTTLE 123456789 1 1 1", NULL),
                        "-ERR key too long (9 bytes, the limit is 8)\r\n");
    assert_string_equal(run(f, "CL.THROTTLE 12345678 1 1 1", NULL),
                        "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n");
    /* Huge but valid numbers are the limiter's to refuse, not a crash. */
    const char *r = run(f,
                        "CL.THROTTLE big 9223372036854775807 9223372036854775807 "
                        "9223372036854775807 9223372036854775807",
                        NULL);
    assert_true(r[0] == '*' ||
                strcmp(r, "-Cell error: Store error: arguments out of range (burst, period or "
                          "quantity too large for nanosecond arithmetic)\r\n") == 0);
}

static void test_parse_int64(void **state)
{
    int64_t v;
    assert_int_equal(args_parse_int64("0", 1, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(args_parse_int64("-9223372036854775808", 20, &v), 0);
    assert_true(v == INT64_MIN);
    assert_int_equal(args_parse_int64("9223372036854775807", 19, &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(args_parse_int64("+42", 3, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(args_parse_int64("9223372036854775808", 19, &v), -SLUICE_ERANGE);
    assert_int_equal(args_parse_int64("-9223372036854775809", 20, &v), -SLUICE_ERANGE);
    assert_int_equal(args_parse_int64("99999999999999999999999x", 24, &v), -SLUICE_EINVAL);
    assert_int_equal(args_parse_int64("", 0, &v), -SLUICE_EINVAL);
    assert_int_equal(args_parse_int64("-", 1, &v), -SLUICE_EINVAL);
    assert_int_equal(args_parse_int64(" 1", 2, &v), -SLUICE_EINVAL);
    assert_int_equal(args_parse_int64("1 ", 2, &v), -SLUICE_EINVAL);
    assert_int_equal(args_parse_int64("1\0", 2, &v), -SLUICE_EINVAL);
    assert_int_equal(args_parse_int64("0x10", 4, &v), -SLUICE_EINVAL);
}

static void test_connection_commands(void **state)
{
    struct fixture *f = *state;
    int close_after;
    assert_string_equal(run(f, "PING", &close_after), "+PONG\r\n");
    assert_false(close_after);
    assert_string_equal(run(f, "ping hello", NULL), "$5\r\nhello\r\n");
    assert_string_equal(run(f, "PING a b", NULL),
                        "-ERR wrong number of arguments for 'ping' command\r\n");
    assert_string_equal(run(f, "ECHO x", NULL), "$1\r\nx\r\n");
    assert_string_equal(run(f, "ECHO", NULL),
                        "-ERR wrong number of arguments for 'echo' command\r\n");
    assert_string_equal(run(f, "QUIT", &close_after), "+OK\r\n");
    assert_true(close_after);
    assert_string_equal(run(f, "SELECT 0", NULL), "+OK\r\n");
    assert_string_equal(run(f, "SELECT 1", NULL), "-ERR DB index is out of range\r\n");
    assert_string_equal(run(f, "SELECT x", NULL),
                        "-ERR value is not an integer or out of range\r\n");
    /* RESP3 is a property of a connection (server_client_proto); without one
     * HELLO 3 is refused.  The switch itself, and that it stays with its
     * connection, is tested on a real daemon (integration/test_policies.py,
     * integration/test_cluster_sl.py). */
    assert_string_equal(run(f, "HELLO 3", NULL), "-NOPROTO unsupported protocol version\r\n");
    assert_string_equal(run(f, "HELLO 4", NULL), "-NOPROTO unsupported protocol version\r\n");
    assert_string_equal(run(f, "HELLO x", NULL),
                        "-ERR Protocol version is not an integer or out of range\r\n");
    assert_string_equal(run(f, "HELLO 2 BOGUS", NULL),
                        "-ERR Syntax error in HELLO option 'BOGUS'\r\n");
    const char *hello = run(f, "HELLO 2", NULL);
    assert_memory_equal(hello, "*14\r\n$6\r\nserver\r\n$6\r\nsluice\r\n", 29);
    assert_non_null(strstr(hello, "$5\r\nproto\r\n:2\r\n"));
    assert_string_equal(run(f, "COMMAND DOCS", NULL), "*0\r\n");
    assert_string_equal(run(f, "AUTH default secret", NULL), "+OK\r\n");
    assert_string_equal(run(f, "AUTH bob secret", NULL),
                        "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    assert_string_equal(run(f, "AUTH secret", NULL), "+OK\r\n");
    assert_string_equal(run(f, "CONFIG GET appendonly", NULL),
                        "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
    const char *info = run(f, "INFO", NULL);
    assert_non_null(strstr(info, "# Server\r\nredis_version:"));
    assert_non_null(strstr(info, "connected_clients:"));
    assert_non_null(strstr(info, "# Limiter\r\ndecisions:"));
    info = run(f, "INFO limiter", NULL);
    assert_null(strstr(info, "# Server"));
    assert_non_null(strstr(info, "decisions:"));
}

static void test_scan(void **state)
{
    struct fixture *f = *state;
    run(f, "CL.THROTTLE a:1 1 1 60", NULL);
    run(f, "CL.THROTTLE a:2 1 1 60", NULL);
    run(f, "CL.THROTTLE b:1 1 1 60", NULL);
    /* Walk the whole keyspace, two keys at a time; every key shows up. */
    char cursor[32] = "0";
    int seen_a1 = 0, seen_a2 = 0, seen_b1 = 0, rounds = 0;
    do {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "SCAN %s COUNT 2", cursor);
        const char *r = run(f, cmd, NULL);
        assert_memory_equal(r, "*2\r\n$", 5);
        seen_a1 |= strstr(r, "$3\r\na:1\r\n") != NULL;
        seen_a2 |= strstr(r, "$3\r\na:2\r\n") != NULL;
        seen_b1 |= strstr(r, "$3\r\nb:1\r\n") != NULL;
        const char *c = strchr(r + 5, '\n') + 1;
        size_t clen = strcspn(c, "\r");
        assert_true(clen < sizeof(cursor));
        memcpy(cursor, c, clen);
        cursor[clen] = '\0';
        assert_true(++rounds < 1000);
    } while (strcmp(cursor, "0") != 0);
    assert_true(seen_a1 && seen_a2 && seen_b1);
    /* MATCH filters. */
    const char *r = run(f, "SCAN 0 MATCH b:* COUNT 1000", NULL);
    assert_non_null(strstr(r, "b:1"));
    assert_null(strstr(r, "a:1"));
    assert_string_equal(run(f, "SCAN x", NULL), "-ERR invalid cursor\r\n");
    assert_string_equal(run(f, "SCAN 0 COUNT 0", NULL), "-ERR syntax error\r\n");
    assert_string_equal(run(f, "SCAN 0 COUNT", NULL), "-ERR syntax error\r\n");
    assert_string_equal(run(f, "SCAN 0 TYPE string", NULL), "-ERR syntax error\r\n");
}

static void test_unknown_command(void **state)
{
    struct fixture *f = *state;
    assert_string_equal(run(f, "GET foo bar", NULL),
                        "-ERR unknown command 'GET', with args beginning with: 'foo' 'bar' \r\n");
    assert_string_equal(run(f, "FLUSHALL", NULL),
                        "-ERR unknown command 'FLUSHALL', with args beginning with: \r\n");
    /* Arguments are cut at 128 bytes like Redis does. */
    char line[400];
    memset(line, 0, sizeof(line));
    memcpy(line, "X ", 2);
    memset(line + 2, 'a', 300);
    const char *r = run(f, line, NULL);
    assert_true(strlen(r) < 128 + 80);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_throttle_transcript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_throttle_errors, setup, teardown),
        cmocka_unit_test(test_parse_int64),
        cmocka_unit_test_setup_teardown(test_connection_commands, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_command, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
