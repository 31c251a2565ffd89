/*
 * The libgossip wire codec: every message type round-trips; a packet cut at
 * any byte, a packet with any single byte changed, and random bytes are
 * either decoded into well-formed structs or refused, never trusted blindly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "testutil.h"

static uint64_t seed;
static struct proto_packet pk;

static struct proto_str S(const char *s) {
    struct proto_str p = {s, strlen(s)};
    return p;
}

/* One message of every type. */
static size_t
sample(struct proto_msg *m)
{
    static const uint8_t payload[] = {1, 2, 3, 0, 255};
    struct gossip_addr a4, a6;
    assert_int_equal(gossip_addr_parse("10.1.2.3:7946", &a4), 0);
    assert_int_equal(gossip_addr_parse("[fe80::1]:65535", &a6), 0);
    memset(m, 0, 10 * sizeof(*m));
    m[0] = (struct proto_msg){.type = PROTO_PING, .seq = 7, .name = S("alpha")};
    m[1] = (struct proto_msg){
        .type = PROTO_PING_REQ, .seq = UINT32_MAX, .name = S("b"), .addr = a6, .flags = 1};
    m[2] = (struct proto_msg){.type = PROTO_ACK, .seq = 0};
    m[3] = (struct proto_msg){.type = PROTO_NACK, .seq = 99};
    m[4] = (struct proto_msg){.type = PROTO_ALIVE, .name = S("c"), .incarnation = 5, .addr = a4};
    m[5] = (struct proto_msg){
        .type = PROTO_SUSPECT, .name = S("d"), .incarnation = 6, .from = S("alpha"), .life = 9};
    m[6] = (struct proto_msg){.type = PROTO_DEAD, .name = S("e"), .incarnation = 0, .from = S("f")};
    m[7] = (struct proto_msg){
        .type = PROTO_LEFT, .name = S("g"), .incarnation = UINT32_MAX, .life = UINT64_MAX};
    m[8] = (struct proto_msg){.type = PROTO_APP,
                              .name = S("h"),
                              .incarnation = 1,
                              .app_seq = UINT64_MAX,
                              .data = payload,
                              .data_len = sizeof(payload)};
    m[9] = (struct proto_msg){.type = PROTO_PUSHPULL,
                              .seq = 3,
                              .flags = PROTO_PP_REQUEST,
                              .data = payload,
                              .data_len = 0};
    return 10;
}

static size_t build(uint8_t *buf, size_t cap, const struct proto_msg *m, size_t n)
{
    size_t len, one;
    assert_int_equal(proto_packet_begin(buf, cap, "sender-1", 8, 123456789, 42, 77, &len), 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(proto_encode_msg(&m[i], buf + len, cap - len, &one), 0);
        len += one;
    }
    proto_packet_finish(buf, n);
    return len;
}

static int str_eq(struct proto_str a, struct proto_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    struct proto_msg m[10];
    uint8_t buf[1400];
    size_t n = sample(m);
    size_t len = build(buf, sizeof(buf), m, n);
    assert_int_equal(proto_decode(buf, len, &pk), 0);
    assert_int_equal(pk.nmsgs, n);
    assert_true(str_eq(pk.sender, S("sender-1")));
    assert_int_equal(pk.timestamp, 123456789);
    assert_int_equal(pk.incarnation, 42);
    for (size_t i = 0; i < n; i++) {
        const struct proto_msg *a = &m[i], *b = &pk.msgs[i];
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->seq, b->seq);
        assert_int_equal(a->incarnation, b->incarnation);
        assert_int_equal(a->app_seq, b->app_seq);
        assert_int_equal(a->flags, b->flags);
        assert_true(a->life == b->life); /* news names its subject's life, or 0 */
        assert_true(str_eq(a->name, b->name));
        assert_true(str_eq(a->from, b->from));
        assert_int_equal(a->data_len, b->data_len);
        if (a->data_len)
            assert_memory_equal(a->data, b->data, a->data_len);
        if (a->type == PROTO_ALIVE || a->type == PROTO_PING_REQ)
            assert_true(gossip_addr_equal(&a->addr, &b->addr));
    }
}

static void test_encode_bounds(void **state)
{
    (void)state;
    struct proto_msg m[10];
    uint8_t buf[64];
    size_t len;
    char longname[GOSSIP_NAME_MAX + 2];
    sample(m);
    /* Too small a buffer is an error, at every size. */
    for (size_t cap = 0; cap < 8; cap++)
        assert_int_equal(proto_encode_msg(&m[4], buf, cap, &len), -GOSSIP_ETOOBIG);
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    struct proto_msg bad = {.type = PROTO_PING, .name = S(longname)};
    assert_int_equal(proto_encode_msg(&bad, buf, sizeof(buf), &len), -GOSSIP_EINVAL);
    bad.type = 77;
    bad.name = S("a");
    assert_int_equal(proto_encode_msg(&bad, buf, sizeof(buf), &len), -GOSSIP_EINVAL);
    assert_int_equal(proto_packet_begin(buf, sizeof(buf), "", 0, 1, 1, 1, &len), -GOSSIP_EINVAL);
}

/* Every proper prefix of a valid packet is refused. */
static void test_truncated_everywhere(void **state)
{
    (void)state;
    struct proto_msg m[10];
    uint8_t buf[1400];
    size_t len = build(buf, sizeof(buf), m, sample(m));
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        assert_int_not_equal(proto_decode(copy, cut, &pk), 0);
        assert_int_equal(pk.nmsgs, 0);
        free(copy);
    }
    /* And a trailing byte is refused too. */
    buf[len] = 0xc0;
    assert_int_equal(proto_decode(buf, len + 1, &pk), -GOSSIP_EPROTO);
}

static void test_version_and_unknown_types(void **state)
{
    (void)state;
    uint8_t buf[64];
    size_t len;
    assert_int_equal(proto_packet_begin(buf, sizeof(buf), "a", 1, 1, 1, 1, &len), 0);
    /* An unknown message type [200, "x"] is skipped, not an error. */
    buf[len++] = 0x92;
    buf[len++] = 0xcc;
    buf[len++] = 200;
    buf[len++] = 0xa1;
    buf[len++] = 'x';
    proto_packet_finish(buf, 1);
    assert_int_equal(proto_decode(buf, len, &pk), 0);
    assert_int_equal(pk.nmsgs, 0);
    buf[5] = 3; /* an unknown version */
    assert_int_equal(proto_decode(buf, len, &pk), -GOSSIP_EVERSION);
}

static void test_hostile_counts(void **state)
{
    (void)state;
    /* array32 claiming 4 billion elements, in 5 bytes. */
    const uint8_t huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(proto_decode(huge, sizeof(huge), &pk), -GOSSIP_EPROTO);
    /* str32 claiming 4 GB. */
    const uint8_t bigstr[] = {0x94, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff, 'a'};
    assert_int_equal(proto_decode(bigstr, sizeof(bigstr), &pk), -GOSSIP_EPROTO);
    /* Deep nesting. */
    uint8_t deep[64];
    memset(deep, 0x91, sizeof(deep));
    assert_int_equal(proto_decode(deep, sizeof(deep), &pk), -GOSSIP_EPROTO);
    /* A map where an array belongs. */
    const uint8_t map[] = {0x81, 0x01, 0x02};
    assert_int_equal(proto_decode(map, sizeof(map), &pk), -GOSSIP_EPROTO);
    /* A name with a NUL inside. */
    uint8_t buf[64];
    size_t len;
    assert_int_equal(proto_packet_begin(buf, sizeof(buf), "ab", 2, 1, 1, 1, &len), 0);
    proto_packet_finish(buf, 0);
    buf[8] = '\0';
    assert_int_equal(proto_decode(buf, len, &pk), -GOSSIP_EPROTO);
}

/* Single-byte mutations and random bytes: either refused or decoded into
 * bounded fields. */
static void test_mutations_and_noise(void **state)
{
    (void)state;
    struct proto_msg m[10];
    uint8_t buf[1400], copy[1400];
    uint64_t rng = seed;
    size_t len = build(buf, sizeof(buf), m, sample(m));
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = len;
        memcpy(copy, buf, len);
        if (iter % 2 == 0) {
            copy[test_rand(&rng) % len] = (uint8_t)test_rand(&rng);
        } else {
            n = (size_t)test_rand_range(&rng, 0, sizeof(copy));
            for (size_t i = 0; i < n; i++)
                copy[i] = (uint8_t)test_rand(&rng);
        }
        if (proto_decode(copy, n, &pk) == 0) {
            accepted++;
            assert_true(pk.sender.len >= 1 && pk.sender.len <= GOSSIP_NAME_MAX);
            assert_true(pk.nmsgs <= PROTO_MAX_MSGS);
            for (size_t i = 0; i < pk.nmsgs; i++) {
                assert_true(pk.msgs[i].name.len <= GOSSIP_NAME_MAX);
                assert_true(pk.msgs[i].data_len <= n);
            }
        }
    }
    fprintf(stderr, "  %d of 20000 mutated or random inputs decoded\n", accepted);
}

static void test_addr_parse_format(void **state)
{
    (void)state;
    struct gossip_addr a;
    char s[GOSSIP_ADDR_STRLEN];
    assert_int_equal(gossip_addr_parse("127.0.0.1:7946", &a), 0);
    assert_int_equal(a.family, 4);
    assert_int_equal(a.port, 7946);
    assert_int_equal(gossip_addr_format(&a, s, sizeof(s)), 0);
    assert_string_equal(s, "127.0.0.1:7946");
    assert_int_equal(gossip_addr_parse("[::1]:1", &a), 0);
    assert_int_equal(gossip_addr_format(&a, s, sizeof(s)), 0);
    assert_string_equal(s, "[::1]:1");
    assert_int_equal(gossip_addr_format(&a, s, 4), -GOSSIP_ETOOBIG);
    const char *bad[] = {"",        "1.2.3.4",    "1.2.3.4:", "1.2.3.4:65536", "[::1]", "[::1]7946",
                         "host:80", "1.2.3.4:8x", "::1:80",   "[zz]:1",        NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(gossip_addr_parse(bad[i], &a), -GOSSIP_EINVAL);
    assert_int_equal(gossip_addr_parse(NULL, &a), -GOSSIP_EINVAL);
}

int main(void)
{
    seed = test_seed("unit_proto");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_encode_bounds),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_version_and_unknown_types),
        cmocka_unit_test(test_hostile_counts),
        cmocka_unit_test(test_mutations_and_noise),
        cmocka_unit_test(test_addr_parse_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
