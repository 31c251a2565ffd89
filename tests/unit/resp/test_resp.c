/*
 * RESP parser and writer: commands come out identical however the bytes are
 * split across reads, malformed and oversize input is refused with the right
 * error, and replies are byte-exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "resp.h"
#include "sluice/error.h"
#include "testutil.h"

/* A connection's input as the server keeps it: appended, parsed, compacted.
 * The buffer is reallocated on every append so the parser must not keep
 * pointers between calls. */
struct feeder {
    struct resp_parser p;
    char *buf;
    size_t len;
    char out[4096]; /* commands seen, rendered as "a|b|c;" */
    size_t outlen;
    int err; /* first error, 0 if none */
};

static void feeder_init(struct feeder *f, size_t max_request, size_t max_args)
{
    memset(f, 0, sizeof(*f));
    resp_parser_init(&f->p, max_request, max_args);
}

static void feeder_free(struct feeder *f)
{
    resp_parser_free(&f->p);
    free(f->buf);
}

static void feed(struct feeder *f, const char *data, size_t n)
{
    if (f->err)
        return;
    char *nb = malloc(f->len + n + 1);
    assert_non_null(nb);
    if (f->len)
        memcpy(nb, f->buf, f->len);
    memcpy(nb + f->len, data, n);
    free(f->buf);
    f->buf = nb;
    f->len += n;
    size_t pos = 0;
    for (;;) {
        struct resp_cmd cmd;
        int rc = resp_parse(&f->p, f->buf + pos, f->len - pos, &cmd);
        if (rc == 0)
            break;
        if (rc < 0) {
            f->err = rc;
            return;
        }
        assert_true(cmd.consumed > 0);
        assert_true(cmd.consumed <= f->len - pos);
        for (size_t i = 0; i < cmd.argc; i++) {
            assert_true(f->outlen + cmd.argvlen[i] + 2 < sizeof(f->out));
            memcpy(f->out + f->outlen, cmd.argv[i], cmd.argvlen[i]);
            f->outlen += cmd.argvlen[i];
            f->out[f->outlen++] = i + 1 < cmd.argc ? '|' : ';';
        }
        pos += cmd.consumed;
    }
    memmove(f->buf, f->buf + pos, f->len - pos);
    f->len -= pos;
}

static const char pipelined[] = "*3\r\n$11\r\nCL.THROTTLE\r\n$3\r\nk:1\r\n$2\r\n15\r\n"
                                "PING\r\n"
                                "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"
                                "*0\r\n"
                                "  cl.throttle\tuser  1 2 3 \n"
                                "\r\n"
                                "*1\r\n$6\r\na\r\nb\nc\r\n"
                                "*2\r\n$4\r\nECHO\r\n$5\r\n\0\1\2\3\4\r\n";
static const char pipelined_out[] = "CL.THROTTLE|k:1|15;PING;ECHO|;cl.throttle|user|1|2|3;"
                                    "a\r\nb\nc;ECHO|\0\1\2\3\4;";

static void expect_pipelined(struct feeder *f)
{
    assert_int_equal(f->err, 0);
    assert_int_equal(f->outlen, sizeof(pipelined_out) - 1);
    assert_memory_equal(f->out, pipelined_out, sizeof(pipelined_out) - 1);
    assert_int_equal(f->len, 0);
}

static void test_whole(void **state)
{
    struct feeder f;
    feeder_init(&f, 0, 0);
    feed(&f, pipelined, sizeof(pipelined) - 1);
    expect_pipelined(&f);
    feeder_free(&f);
}

static void test_byte_by_byte(void **state)
{
    struct feeder f;
    feeder_init(&f, 0, 0);
    for (size_t i = 0; i < sizeof(pipelined) - 1; i++)
        feed(&f, pipelined + i, 1);
    expect_pipelined(&f);
    feeder_free(&f);
}

static void test_every_two_way_split(void **state)
{
    size_t n = sizeof(pipelined) - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        struct feeder f;
        feeder_init(&f, 0, 0);
        feed(&f, pipelined, cut);
        feed(&f, pipelined + cut, n - cut);
        expect_pipelined(&f);
        feeder_free(&f);
    }
}

static void test_random_chunks(void **state)
{
    uint64_t rng = test_seed("test_resp.random_chunks");
    size_t n = sizeof(pipelined) - 1;
    for (int round = 0; round < 500; round++) {
        struct feeder f;
        feeder_init(&f, 0, 0);
        size_t pos = 0;
        while (pos < n) {
            size_t take = (size_t)test_rand_range(&rng, 1, 20);
            if (take > n - pos)
                take = n - pos;
            feed(&f, pipelined + pos, take);
            pos += take;
        }
        expect_pipelined(&f);
        feeder_free(&f);
    }
}

static void test_incomplete_waits(void **state)
{
    static const char *const partial[] = {"*",
                                          "*2",
                                          "*2\r",
                                          "*2\r\n$4",
                                          "*2\r\n$4\r\nPI",
                                          "*2\r\n$4\r\nPING\r",
                                          "*2\r\n$4\r\nPING\r\n",
                                          "PING"};
    for (size_t i = 0; i < sizeof(partial) / sizeof(partial[0]); i++) {
        struct feeder f;
        feeder_init(&f, 0, 0);
        feed(&f, partial[i], strlen(partial[i]));
        assert_int_equal(f.err, 0);
        assert_int_equal(f.outlen, 0);
        feeder_free(&f);
    }
}

struct bad_case {
    const char *in;
    size_t len;
    int err;
    const char *msg;
};

#define BAD(s, e, m)                                                                               \
    {                                                                                              \
        s, sizeof(s) - 1, e, m                                                                     \
    }

static void test_malformed(void **state)
{
    static const struct bad_case cases[] = {
        BAD("*1\r\n%4\r\nPING\r\n", -SLUICE_EPROTO, "Protocol error: expected '$'"),
        BAD("*1\r\n$-1\r\n", -SLUICE_EPROTO, "Protocol error: invalid bulk length"),
        BAD("*1\r\n$x\r\n", -SLUICE_EPROTO, "Protocol error: invalid bulk length"),
        BAD("*1\r\n$\r\n", -SLUICE_EPROTO, "Protocol error: invalid bulk length"),
        BAD("*1\r\n$4x\r\nPING\r\n", -SLUICE_EPROTO, "Protocol error: invalid bulk length"),
        BAD("*x\r\n", -SLUICE_EPROTO, "Protocol error: invalid multibulk length"),
        BAD("*1\n$4\r\nPING\r\n", -SLUICE_EPROTO, "Protocol error: invalid multibulk length"),
        BAD("*1\r\n$4\rxPING\r\n", -SLUICE_EPROTO, "Protocol error: invalid bulk length"),
        BAD("*1\r\n$4\r\nPINGxx", -SLUICE_EPROTO,
            "Protocol error: expected CRLF after bulk string"),
        BAD("*1\r\n$99999999999999999999\r\n", -SLUICE_EPROTO,
            "Protocol error: invalid bulk length"),
        BAD("*1\r\n$9223372036854775807\r\n", -SLUICE_ETOOBIG, "Protocol error: request too large"),
        BAD("*1\r\n$000000000000000000000000000000000000000001", -SLUICE_EPROTO,
            "Protocol error: invalid bulk length"),
        BAD("*9223372036854775807\r\n", -SLUICE_ETOOBIG, "Protocol error: too many arguments"),
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct feeder f;
        feeder_init(&f, 0, 0);
        feed(&f, cases[i].in, cases[i].len);
        if (f.err != cases[i].err)
            fail_msg("case %zu: got %d, want %d", i, f.err, cases[i].err);
        assert_string_equal(resp_parser_error(&f.p), cases[i].msg);
        feeder_free(&f);
    }
}

static void test_bounds(void **state)
{
    struct feeder f;
    /* A bulk that cannot fit is refused at its header, before any payload. */
    feeder_init(&f, 100, 0);
    feed(&f, "*1\r\n$200\r\n", 10);
    assert_int_equal(f.err, -SLUICE_ETOOBIG);
    feeder_free(&f);

    /* Exactly at the bound is accepted: 4+5+2+86 ... build one of 100 bytes. */
    char req[200];
    int hdr = snprintf(req, sizeof(req), "*1\r\n$%d\r\n", 100 - 9 - 2);
    assert_int_equal(hdr, 9);
    memset(req + hdr, 'x', 89);
    memcpy(req + hdr + 89, "\r\n", 2);
    feeder_init(&f, 100, 0);
    feed(&f, req, 100);
    assert_int_equal(f.err, 0);
    assert_int_equal(f.outlen, 90);
    feeder_free(&f);
    /* One byte more is not. */
    hdr = snprintf(req, sizeof(req), "*1\r\n$%d\r\n", 90);
    feeder_init(&f, 100, 0);
    feed(&f, req, (size_t)hdr);
    assert_int_equal(f.err, -SLUICE_ETOOBIG);
    feeder_free(&f);

    /* An inline line without a newline is refused once past the bound. */
    feeder_init(&f, 100, 0);
    memset(req, 'a', 101);
    feed(&f, req, 60);
    assert_int_equal(f.err, 0);
    feed(&f, req, 41);
    assert_int_equal(f.err, -SLUICE_ETOOBIG);
    assert_string_equal(resp_parser_error(&f.p), "Protocol error: too big inline request");
    feeder_free(&f);

    /* Too many arguments, both forms. */
    feeder_init(&f, 0, 3);
    feed(&f, "*4\r\n", 4);
    assert_int_equal(f.err, -SLUICE_ETOOBIG);
    feeder_free(&f);
    feeder_init(&f, 0, 3);
    feed(&f, "a b c\r\n", 7);
    assert_int_equal(f.err, 0);
    feed(&f, "a b c d\r\n", 9);
    assert_int_equal(f.err, -SLUICE_ETOOBIG);
    feeder_free(&f);
}

static void test_many_args_grow(void **state)
{
    /* 300 arguments: the argument arrays grow past their first size. */
    char req[4096];
    size_t n = (size_t)snprintf(req, sizeof(req), "*300\r\n");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(req + n, sizeof(req) - n, "$1\r\n%c\r\n", 'a' + i % 26);
    struct resp_parser p;
    resp_parser_init(&p, 0, 0);
    struct resp_cmd cmd;
    assert_int_equal(resp_parse(&p, req, n, &cmd), 1);
    assert_int_equal(cmd.argc, 300);
    assert_int_equal(cmd.consumed, n);
    assert_memory_equal(cmd.argv[299], "n", 1);
    resp_parser_free(&p);
}

static void test_writer(void **state)
{
    struct resp_buf b;
    resp_buf_init(&b);
    assert_int_equal(resp_add_array(&b, 5), 0);
    assert_int_equal(resp_add_int(&b, 0), 0);
    assert_int_equal(resp_add_int(&b, -1), 0);
    assert_int_equal(resp_add_int(&b, INT64_MAX), 0);
    assert_int_equal(resp_add_int(&b, INT64_MIN), 0);
    assert_int_equal(resp_add_simple(&b, "OK"), 0);
    assert_int_equal(resp_add_error(&b, "ERR bad\r\ninjected"), 0);
    assert_int_equal(resp_add_errorf(&b, "ERR %s %d", "x", 7), 0);
    assert_int_equal(resp_add_bulk(&b, "a\0b", 3), 0);
    assert_int_equal(resp_add_bulk(&b, "", 0), 0);
    assert_int_equal(resp_add_null(&b), 0);
    assert_int_equal(resp_add_bulk_str(&b, "hello"), 0);
    static const char want[] = "*5\r\n:0\r\n:-1\r\n:9223372036854775807\r\n"
                               ":-9223372036854775808\r\n+OK\r\n-ERR bad  injected\r\n"
                               "-ERR x 7\r\n$3\r\na\0b\r\n$0\r\n\r\n$-1\r\n$5\r\nhello\r\n";
    assert_int_equal(b.len, sizeof(want) - 1);
    assert_memory_equal(b.data, want, sizeof(want) - 1);

    /* Growth keeps earlier bytes. */
    for (int i = 0; i < 10000; i++)
        assert_int_equal(resp_add_int(&b, i), 0);
    assert_memory_equal(b.data, want, sizeof(want) - 1);
    resp_buf_free(&b);
}

static void test_writer_roundtrip(void **state)
{
    /* What the writer emits as an array of bulks, the parser reads back. */
    uint64_t rng = test_seed("test_resp.roundtrip");
    for (int round = 0; round < 200; round++) {
        struct resp_buf b;
        resp_buf_init(&b);
        size_t argc = (size_t)test_rand_range(&rng, 1, 20);
        char args[20][64];
        size_t lens[20];
        resp_add_array(&b, argc);
        for (size_t i = 0; i < argc; i++) {
            lens[i] = (size_t)test_rand_range(&rng, 0, 63);
            for (size_t j = 0; j < lens[i]; j++)
                args[i][j] = (char)test_rand(&rng);
            resp_add_bulk(&b, args[i], lens[i]);
        }
        struct resp_parser p;
        resp_parser_init(&p, 0, 0);
        struct resp_cmd cmd;
        assert_int_equal(resp_parse(&p, b.data, b.len, &cmd), 1);
        assert_int_equal(cmd.argc, argc);
        assert_int_equal(cmd.consumed, b.len);
        for (size_t i = 0; i < argc; i++) {
            assert_int_equal(cmd.argvlen[i], lens[i]);
            if (lens[i])
                assert_memory_equal(cmd.argv[i], args[i], lens[i]);
        }
        resp_parser_free(&p);
        resp_buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_every_two_way_split),
        cmocka_unit_test(test_random_chunks),
        cmocka_unit_test(test_incomplete_waits),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_many_args_grow),
        cmocka_unit_test(test_writer),
        cmocka_unit_test(test_writer_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
