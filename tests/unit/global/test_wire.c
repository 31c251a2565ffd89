/* Unit tests: the codec of global-limit reports and leases (wire.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <msgpack.h>

#include "sluice/error.h"
#include "wire.h"

struct got {
    int reports, leases;
    uint64_t life;
    struct wire_report r[8];
    struct wire_lease l[8];
    char keys[8][64];
};

static void on_report(void *ud, uint64_t life, const struct wire_report *e)
{
    struct got *g = ud;
    g->life = life;
    memcpy(g->keys[g->reports], e->key, e->klen);
    g->r[g->reports] = *e;
    g->r[g->reports].key = g->keys[g->reports];
    g->reports++;
}

static void on_lease(void *ud, uint64_t life, const struct wire_lease *e)
{
    struct got *g = ud;
    g->life = life;
    memcpy(g->keys[g->leases], e->key, e->klen);
    g->l[g->leases] = *e;
    g->l[g->leases].key = g->keys[g->leases];
    g->leases++;
}

static const struct wire_report R1 = {.key = "user:42",
                                      .klen = 7,
                                      .kind = 1,
                                      .policy = 1,
                                      .burst = 15,
                                      .count = 30,
                                      .period_ns = 60000000000LL,
                                      .precision = 0,
                                      .demand_milli = 123456,
                                      .admitted = 99,
                                      .frozen_share = WIRE_ONE / 3,
                                      .period_ms = 100,
                                      .flags = WIRE_R_YOUNG,
                                      .tokens_milli = 4500,
                                      .granted_milli = 0,
                                      .leased_by = 0,
                                      .known_milli = 7501,
                                      .known_demand_milli = 30001};
static const struct wire_report R2 = {.key = "k",
                                      .klen = 1,
                                      .kind = 3,
                                      .policy = 0,
                                      .burst = -5,
                                      .count = INT64_MAX,
                                      .period_ns = INT64_MIN,
                                      .precision = 1000,
                                      .demand_milli = UINT64_MAX,
                                      .admitted = UINT64_MAX,
                                      .frozen_share = WIRE_ONE,
                                      .period_ms = UINT32_MAX,
                                      .flags = WIRE_R_IDLE | WIRE_R_GONE,
                                      .tokens_milli = UINT64_MAX,
                                      .granted_milli = UINT32_MAX,
                                      .leased_by = UINT32_MAX,
                                      .known_milli = UINT64_MAX,
                                      .known_demand_milli = UINT64_MAX};

static size_t build_reports(uint8_t *buf, size_t cap)
{
    struct wire_writer w;
    wire_writer_init(&w, buf, cap, WIRE_REPORT, 0x0123456789abcdefULL, 0xfeedULL);
    assert_int_equal(wire_add_report(&w, &R1), 0);
    assert_int_equal(wire_add_report(&w, &R2), 0);
    return wire_writer_finish(&w);
}

static void test_report_roundtrip(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = build_reports(buf, sizeof(buf));
    struct got g = {0};
    struct wire_handler h = {&g, on_report, on_lease, NULL};
    assert_int_equal(wire_decode(buf, n, &h), 2);
    assert_int_equal(g.reports, 2);
    assert_int_equal(g.leases, 0);
    assert_true(g.life == 0x0123456789abcdefULL);
    assert_memory_equal(g.r[0].key, "user:42", 7);
    assert_int_equal(g.r[0].burst, 15);
    assert_true(g.r[0].period_ns == 60000000000LL);
    assert_true(g.r[0].demand_milli == 123456);
    assert_true(g.r[0].frozen_share == WIRE_ONE / 3);
    assert_int_equal(g.r[0].flags, WIRE_R_YOUNG);
    assert_true(g.r[0].tokens_milli == 4500);
    assert_true(g.r[0].granted_milli == 0);
    assert_true(g.r[1].tokens_milli == UINT64_MAX);
    assert_true(g.r[1].granted_milli == UINT32_MAX);
    assert_int_equal(g.r[1].flags, WIRE_R_IDLE | WIRE_R_GONE);
    assert_true(g.r[1].leased_by == UINT32_MAX);
    assert_true(g.r[0].known_milli == 7501);
    assert_true(g.r[1].known_milli == UINT64_MAX);
    assert_true(g.r[0].known_demand_milli == 30001);
    assert_true(g.r[1].known_demand_milli == UINT64_MAX);
    assert_int_equal(g.r[1].burst, -5);
    assert_true(g.r[1].count == INT64_MAX);
    assert_true(g.r[1].period_ns == INT64_MIN);
    assert_true(g.r[1].demand_milli == UINT64_MAX);
    assert_true(g.r[1].period_ms == UINT32_MAX);
    assert_int_equal(g.r[1].kind, 3);
}

static void test_lease_roundtrip(void **state)
{
    (void)state;
    uint8_t buf[256];
    struct wire_writer w;
    wire_writer_init(&w, buf, sizeof(buf), WIRE_LEASE, 7, 0xfeedULL);
    struct wire_lease l1 = {.key = "a:b",
                            .klen = 3,
                            .share = WIRE_ONE / 4,
                            .grant_milli = 15500,
                            .free = 3,
                            .level_milli = -2500,
                            .demand_milli = 12000};
    struct wire_lease l2 = {.key = "zz",
                            .klen = 2,
                            .share = WIRE_ONE,
                            .flags = WIRE_L_SETTLED,
                            .grant_milli = UINT32_MAX,
                            .free = WIRE_FREE_MAX,
                            .level_milli = 17000,
                            .seen_credit = UINT32_MAX};
    assert_int_equal(wire_add_lease(&w, &l1), 0);
    assert_int_equal(wire_add_lease(&w, &l2), 0);
    /* a report cannot go into a lease batch, nor a share above one */
    assert_int_equal(wire_add_report(&w, &R1), -SLUICE_EINVAL);
    struct wire_lease bad = {.key = "x", .klen = 1, .share = WIRE_ONE + 1};
    assert_int_equal(wire_add_lease(&w, &bad), -SLUICE_EINVAL);
    size_t n = wire_writer_finish(&w);
    struct got g = {0};
    struct wire_handler h = {&g, on_report, on_lease, NULL};
    assert_int_equal(wire_decode(buf, n, &h), 2);
    assert_int_equal(g.leases, 2);
    assert_true(g.life == 7);
    assert_true(g.l[0].share == WIRE_ONE / 4);
    assert_int_equal(g.l[0].flags, 0);
    assert_true(g.l[0].grant_milli == 15500);
    assert_true(g.l[1].share == WIRE_ONE);
    assert_int_equal(g.l[1].flags, WIRE_L_SETTLED);
    assert_true(g.l[1].grant_milli == UINT32_MAX);
    assert_true(g.l[0].free == 3 && g.l[1].free == WIRE_FREE_MAX);
    assert_true(g.l[0].level_milli == -2500 && g.l[1].level_milli == 17000);
    assert_true(g.l[0].demand_milli == 12000 && g.l[1].demand_milli == 0);
    /* seen_credit: 0 when left out (an older owner's), up to 2^32 - 1 */
    assert_true(g.l[0].seen_credit == 0 && g.l[1].seen_credit == UINT32_MAX);
    assert_true(g.l[0].owner_life == 0xfeedULL); /* the batch's from */
}

/* Every truncation of a valid batch is refused as a whole: nothing is
 * delivered from a batch that does not decode to its end. */
static void test_truncated_everywhere(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = build_reports(buf, sizeof(buf));
    for (size_t cut = 0; cut < n; cut++) {
        struct got g = {0};
        struct wire_handler h = {&g, on_report, on_lease, NULL};
        int rc = wire_decode(buf, cut, &h);
        assert_true(rc < 0);
        assert_int_equal(g.reports, 0);
    }
}

/* peek sees every entry's key, in order, before the first entry is handed
 * over; on a batch cut short it may see some, and nothing is handed over. */
struct peeked {
    struct got g;
    int peeks;
    char keys[8][64];
};

static void on_peek(void *ud, uint8_t type, const char *key, size_t klen)
{
    struct peeked *p = ud;
    assert_int_equal(type, WIRE_REPORT);
    assert_int_equal(p->g.reports, 0); /* nothing handed over yet */
    memcpy(p->keys[p->peeks], key, klen);
    p->keys[p->peeks][klen] = 0;
    p->peeks++;
}

static void on_peeked_report(void *ud, uint64_t life, const struct wire_report *e)
{
    on_report(&((struct peeked *)ud)->g, life, e);
}

static void test_peek_before_delivery(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = build_reports(buf, sizeof(buf));
    struct peeked p;
    memset(&p, 0, sizeof(p));
    struct wire_handler h = {&p, on_peeked_report, NULL, on_peek};
    assert_int_equal(wire_decode(buf, n, &h), 2);
    assert_int_equal(p.peeks, 2);
    assert_string_equal(p.keys[0], "user:42");
    assert_string_equal(p.keys[1], "k");
    assert_int_equal(p.g.reports, 2);
    for (size_t cut = 0; cut < n; cut++) {
        memset(&p, 0, sizeof(p));
        assert_true(wire_decode(buf, cut, &h) < 0);
        assert_true(p.peeks <= 1);
        assert_int_equal(p.g.reports, 0);
    }
}

/* A batch of more entries than a decode keeps from its checking walk
 * (a large datagram, or entries of a few bytes): every entry is handed
 * over once, in order, with its own fields, both those kept and those
 * decoded again; a batch cut anywhere hands over none of them. */
struct many {
    int n, bad;
};

static void on_many_lease(void *ud, uint64_t life, const struct wire_lease *e)
{
    struct many *m = ud;
    char key[16];
    int len = snprintf(key, sizeof(key), "k%d", m->n);
    (void)life;
    if (e->klen != (size_t)len || memcmp(e->key, key, e->klen) != 0 ||
        e->free != (uint64_t)m->n + 1 || e->share != (uint64_t)m->n * 1000 ||
        e->owner_life != 0xfeedULL)
        m->bad++;
    m->n++;
}

static void test_large_batch_in_order(void **state)
{
    (void)state;
    static uint8_t buf[16384];
    struct wire_writer w;
    wire_writer_init(&w, buf, sizeof(buf), WIRE_LEASE, 7, 0xfeedULL);
    for (int i = 0; i < 300; i++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "k%d", i);
        struct wire_lease l = {.key = key, .klen = (size_t)len};
        l.free = (uint64_t)i + 1;
        l.share = (uint64_t)i * 1000;
        assert_int_equal(wire_add_lease(&w, &l), 0);
    }
    size_t n = wire_writer_finish(&w);
    struct many m = {0, 0};
    struct wire_handler h = {&m, NULL, on_many_lease, NULL};
    assert_int_equal(wire_decode(buf, n, &h), 300);
    assert_int_equal(m.n, 300);
    assert_int_equal(m.bad, 0);
    for (size_t cut = n - 40; cut < n; cut++) {
        m.n = m.bad = 0;
        assert_true(wire_decode(buf, cut, &h) < 0);
        assert_int_equal(m.n, 0);
    }
}

/* Trailing bytes, a wrong version, an entry count that lies, a key too
 * long or empty: refused. */
static void test_malformed(void **state)
{
    (void)state;
    uint8_t buf[600];
    size_t n = build_reports(buf, sizeof(buf));
    buf[n] = 0xc0;
    assert_int_equal(wire_decode(buf, n + 1, NULL), -SLUICE_EPROTO);
    uint8_t v = buf[1];
    buf[1] = 9;
    assert_int_equal(wire_decode(buf, n, NULL), -SLUICE_EINVAL);
    buf[1] = v;
    buf[2] = 9;
    assert_int_equal(wire_decode(buf, n, NULL), -SLUICE_EINVAL);
    buf[2] = WIRE_REPORT;
    buf[25] = 3; /* three entries claimed, two present */
    assert_int_equal(wire_decode(buf, n, NULL), -SLUICE_EPROTO);
    buf[22] = 0xff; /* four billion claimed */
    assert_int_equal(wire_decode(buf, n, NULL), -SLUICE_EPROTO);
    assert_int_equal(wire_decode(NULL, 0, NULL), -SLUICE_EPROTO);
    /* version 1 (an array of 4) is told apart and refused as a version */
    uint8_t v1[] = {0x94, 0x01, WIRE_REPORT, 0x00, 0x90};
    assert_int_equal(wire_decode(v1, sizeof(v1), NULL), -SLUICE_EINVAL);

    struct wire_writer w;
    wire_writer_init(&w, buf, sizeof(buf), WIRE_REPORT, 1, 0xfeedULL);
    struct wire_report e = R1;
    e.klen = 0;
    assert_int_equal(wire_add_report(&w, &e), -SLUICE_EINVAL);
    e.klen = WIRE_KEY_MAX + 1;
    assert_int_equal(wire_add_report(&w, &e), -SLUICE_EINVAL);
}

/* A full batch refuses the next entry and stays valid as it was. */
static void test_full_batch(void **state)
{
    (void)state;
    uint8_t buf[100];
    struct wire_writer w;
    wire_writer_init(&w, buf, sizeof(buf), WIRE_REPORT, 1, 0xfeedULL);
    int added = 0;
    while (wire_add_report(&w, &R1) == 0)
        added++;
    assert_true(added >= 1);
    assert_int_equal(wire_add_report(&w, &R1), -SLUICE_ETOOBIG);
    size_t n = wire_writer_finish(&w);
    assert_true(n <= sizeof(buf));
    assert_int_equal(wire_decode(buf, n, NULL), added);
    /* below a header nothing fits */
    wire_writer_init(&w, buf, 10, WIRE_REPORT, 1, 0xfeedULL);
    assert_int_equal(wire_add_report(&w, &R1), -SLUICE_ETOOBIG);
    assert_int_equal(wire_writer_finish(&w), 0);
}

/* ---- any msgpack reader reads every message ---- */

static const struct wire_lease L1 = {.key = "a:b",
                                     .klen = 3,
                                     .share = WIRE_ONE / 4,
                                     .flags = WIRE_L_SETTLED,
                                     .grant_milli = 2500,
                                     .free = 3,
                                     .level_milli = -1500,
                                     .demand_milli = 7000,
                                     .seen = 41};

/* The value of integer key id in map m, or NULL. */
static const msgpack_object *map_get(const msgpack_object *m, uint64_t id)
{
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        assert_int_equal(kv->key.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        if (kv->key.via.u64 == id)
            return &kv->val;
    }
    return NULL;
}

/* Unpacks buf with msgpack-c's own unpacker: one array that takes every
 * byte, the header, then n maps with unsigned integer keys and a bin key. */
static const msgpack_object *unpack(msgpack_unpacked *u, const uint8_t *buf, size_t len,
                                    uint64_t type, uint32_t n)
{
    size_t off = 0;
    msgpack_unpacked_init(u);
    assert_int_equal(msgpack_unpack_next(u, (const char *)buf, len, &off), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, len);
    const msgpack_object *root = &u->data;
    assert_int_equal(root->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(root->via.array.size, 5);
    const msgpack_object *h = root->via.array.ptr;
    assert_true(h[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER && h[0].via.u64 == WIRE_VERSION);
    assert_true(h[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER && h[1].via.u64 == type);
    assert_int_equal(h[4].type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(h[4].via.array.size, n);
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *e = &h[4].via.array.ptr[i];
        assert_int_equal(e->type, MSGPACK_OBJECT_MAP);
        const msgpack_object *k = map_get(e, 1);
        assert_non_null(k);
        assert_int_equal(k->type, MSGPACK_OBJECT_BIN);
    }
    return h[4].via.array.ptr;
}

static uint64_t uval(const msgpack_object *m, uint64_t id)
{
    const msgpack_object *v = map_get(m, id);
    if (v == NULL)
        return 0; /* left out: 0 */
    assert_int_equal(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    return v->via.u64;
}

static int64_t ival(const msgpack_object *m, uint64_t id)
{
    const msgpack_object *v = map_get(m, id);
    if (v == NULL)
        return 0;
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return (int64_t)v->via.u64;
    assert_int_equal(v->type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    return v->via.i64;
}

/* Every field of every message, as msgpack-c reads it, under the id the
 * field list gives it. */
#define CHECK_U(e, id, member, want) assert_true(uval(e, id) == (uint64_t)(want).member)
#define CHECK_I(e, id, member, want) assert_true(ival(e, id) == (int64_t)(want).member)
#define CHECK_REPORT(id, member, type, sign, max)                                                  \
    if (sign == WIRE_U)                                                                            \
        CHECK_U(e, id, member, *want);                                                             \
    else                                                                                           \
        CHECK_I(e, id, member, *want);
#define CHECK_LEASE CHECK_REPORT

static void test_msgpack_reads_every_message(void **state)
{
    (void)state;
    uint8_t buf[512];
    msgpack_unpacked u;
    size_t n = build_reports(buf, sizeof(buf));
    const msgpack_object *es = unpack(&u, buf, n, WIRE_REPORT, 2);
    const struct wire_report *reports[2] = {&R1, &R2};
    for (int i = 0; i < 2; i++) {
        const msgpack_object *e = &es[i];
        const struct wire_report *want = reports[i];
        const msgpack_object *k = map_get(e, 1);
        assert_int_equal(k->via.bin.size, want->klen);
        assert_memory_equal(k->via.bin.ptr, want->key, want->klen);
        WIRE_REPORT_FIELDS(CHECK_REPORT)
    }
    /* A field that is 0 is left out (R1's granted_milli and leased_by). */
    assert_null(map_get(&es[0], 14));
    assert_null(map_get(&es[0], 15));
    assert_int_equal(es[0].via.map.size, 1 + 13);
    msgpack_unpacked_destroy(&u);

    struct wire_writer w;
    wire_writer_init(&w, buf, sizeof(buf), WIRE_LEASE, 7, 0xfeedULL);
    assert_int_equal(wire_add_lease(&w, &L1), 0);
    n = wire_writer_finish(&w);
    es = unpack(&u, buf, n, WIRE_LEASE, 1);
    {
        const msgpack_object *e = &es[0];
        const struct wire_lease *want = &L1;
        WIRE_LEASE_FIELDS(CHECK_LEASE)
    }
    msgpack_unpacked_destroy(&u);
    /* An empty batch too. */
    wire_writer_init(&w, buf, sizeof(buf), WIRE_REPORT, 7, 0xfeedULL);
    n = wire_writer_finish(&w);
    assert_int_equal(n, WIRE_HEADER);
    (void)unpack(&u, buf, n, WIRE_REPORT, 0);
    msgpack_unpacked_destroy(&u);
}

/* A batch written by msgpack-c from scratch, as a newer node might: fields
 * in another order, one this node does not know (id 40, a nested value),
 * one left out.  It decodes; the unknown one is skipped, the missing one is
 * 0.  A field twice, a string key or a negative unsigned are refused. */
static size_t pack_by_hand(uint8_t *buf, size_t cap, int variant)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 5);
    msgpack_pack_uint8(&pk, WIRE_VERSION);
    msgpack_pack_uint8(&pk, WIRE_LEASE);
    msgpack_pack_uint64(&pk, 9); /* any width will do */
    msgpack_pack_uint64(&pk, 0xfeed);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_map(&pk, variant == 0 ? 4 : 5);
    msgpack_pack_uint8(&pk, 5); /* free */
    msgpack_pack_uint8(&pk, 2);
    msgpack_pack_uint8(&pk, 40); /* unknown: [1, {"x": "y"}, 2.5] */
    msgpack_pack_array(&pk, 3);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "x", 1);
    msgpack_pack_str_with_body(&pk, "y", 1);
    msgpack_pack_double(&pk, 2.5);
    msgpack_pack_uint8(&pk, 1); /* the key, not first */
    msgpack_pack_bin_with_body(&pk, "k:1", 3);
    msgpack_pack_uint8(&pk, 6); /* level */
    msgpack_pack_int64(&pk, -42);
    if (variant == 1) { /* free again */
        msgpack_pack_uint8(&pk, 5);
        msgpack_pack_uint8(&pk, 2);
    } else if (variant == 2) { /* a string key */
        msgpack_pack_str_with_body(&pk, "share", 5);
        msgpack_pack_uint8(&pk, 2);
    } else if (variant == 3) { /* a negative share */
        msgpack_pack_uint8(&pk, 2);
        msgpack_pack_int64(&pk, -1);
    }
    assert_true(sb.size <= cap);
    memcpy(buf, sb.data, sb.size);
    size_t n = sb.size;
    msgpack_sbuffer_destroy(&sb);
    return n;
}

static void test_fields_added_and_missing(void **state)
{
    (void)state;
    uint8_t buf[256];
    size_t n = pack_by_hand(buf, sizeof(buf), 0);
    struct got g = {0};
    struct wire_handler h = {&g, on_report, on_lease, NULL};
    assert_int_equal(wire_decode(buf, n, &h), 1);
    assert_int_equal(g.leases, 1);
    assert_memory_equal(g.l[0].key, "k:1", 3);
    assert_true(g.l[0].free == 2);
    assert_true(g.l[0].level_milli == -42);
    assert_true(g.l[0].share == 0 && g.l[0].seen == 0 && g.l[0].grant_milli == 0);
    assert_true(g.l[0].owner_life == 0xfeed);
    for (int v = 1; v <= 3; v++) {
        n = pack_by_hand(buf, sizeof(buf), v);
        assert_int_equal(wire_decode(buf, n, NULL), -SLUICE_EPROTO);
    }
}

/* Version 3 (arrays of fixed fields) is another version: refused, and the
 * replica counts it as a bad packet. */
static void test_old_version_refused(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t n = build_reports(buf, sizeof(buf));
    buf[1] = 3;
    assert_int_equal(wire_decode(buf, n, NULL), -SLUICE_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_roundtrip),
        cmocka_unit_test(test_lease_roundtrip),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_peek_before_delivery),
        cmocka_unit_test(test_large_batch_in_order),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_full_batch),
        cmocka_unit_test(test_msgpack_reads_every_message),
        cmocka_unit_test(test_fields_added_and_missing),
        cmocka_unit_test(test_old_version_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
