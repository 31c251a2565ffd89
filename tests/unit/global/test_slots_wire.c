/*
 * Unit tests: every message of the global concurrency slots (global/slots.h)
 * as msgpack-c's own unpacker reads it.  Three fresh members hand a key's
 * slots out to each other through their public API; every packet they
 * send is unpacked with msgpack_unpack_next, checked against the wire
 * format that slots.h draws (its element counts and values), then
 * delivered.  The run must produce all five kinds: report, grant, ask,
 * answer and beat (pings and their answers).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "slots.h"
#include "wire.h"

#define MS    1000000LL
#define NODES 3
#define LIMIT 10
#define TTL   (1000 * MS)
#define KEY   "jobs:acme"

struct packet {
    int from;
    char to[8];
    uint8_t buf[1500];
    size_t len;
};

static struct {
    struct slots *s[NODES];
    uint64_t life[NODES];
    struct packet q[256];
    int nq;
    int kinds[6]; /* messages seen by kind */
    int pongs;    /* beats that answer a ping */
} W;

static const char *const names[NODES] = {"a", "b", "c"};

static int net_send(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    int from = (int)(intptr_t)ud;
    assert_true(W.nq < (int)(sizeof(W.q) / sizeof(W.q[0])));
    assert_true(len <= sizeof(W.q[0].buf));
    struct packet *p = &W.q[W.nq++];
    p->from = from;
    snprintf(p->to, sizeof(p->to), "%s", to);
    memcpy(p->buf, buf, len);
    p->len = len;
    return 0;
}

static void load(void *ud, const char *key, size_t klen, int64_t *held, int64_t *waiting)
{
    (void)ud;
    (void)key;
    (void)klen;
    *held = 0;
    *waiting = 1; /* every member has a waiter: it keeps asking */
}

static uint64_t uint_at(const msgpack_object *o)
{
    assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    return o->via.u64;
}

static int index_of(const char *name)
{
    for (int i = 0; i < NODES; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    fail_msg("a packet to an unknown member %s", name);
    return -1;
}

/* One packet as msgpack-c reads it, against slots.h's picture:
 *   fixarray(4) [ version type(WIRE_SLOTS) from:uint64 body ]
 *   report fixarray(10), grant (7), ask (4), answer (5), beat (4), each
 *   [ kind key:bin uint ... ] (a beat's key is the name of its addressee). */
static void check(const struct packet *p)
{
    static const uint32_t fields[6] = {0, 10, 7, 4, 5, 4};
    msgpack_unpacked u;
    size_t off = 0;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, (const char *)p->buf, p->len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    assert_int_equal(off, p->len);
    const msgpack_object *root = &u.data;
    assert_int_equal(root->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal(root->via.array.size, 4);
    const msgpack_object *h = root->via.array.ptr;
    assert_int_equal(uint_at(&h[0]), WIRE_VERSION);
    assert_int_equal(uint_at(&h[1]), WIRE_SLOTS);
    assert_true(uint_at(&h[2]) == W.life[p->from]);
    assert_int_equal(h[3].type, MSGPACK_OBJECT_ARRAY);
    const msgpack_object *f = h[3].via.array.ptr;
    uint64_t kind = uint_at(&f[0]);
    assert_true(kind >= 1 && kind <= 5);
    assert_int_equal(h[3].via.array.size, fields[kind]);
    assert_int_equal(f[1].type, MSGPACK_OBJECT_BIN);
    const char *key = kind == 5 ? p->to : KEY;
    assert_int_equal(f[1].via.bin.size, strlen(key));
    assert_memory_equal(f[1].via.bin.ptr, key, strlen(key));
    for (uint32_t i = 2; i < fields[kind]; i++)
        (void)uint_at(&f[i]);
    int to = index_of(p->to);
    if (kind == 1) { /* report: limit, ttl_ms, cap, held, want, gseq, rseq, served_by */
        assert_int_equal(uint_at(&f[2]), LIMIT);
        assert_int_equal(uint_at(&f[3]), TTL / MS);
        assert_true(uint_at(&f[4]) <= LIMIT && uint_at(&f[5]) <= LIMIT);
        assert_true(uint_at(&f[6]) >= 1 && uint_at(&f[6]) <= LIMIT); /* wants its waiter's */
        assert_true(uint_at(&f[8]) >= 1);                            /* rseq */
    } else if (kind == 2) { /* grant: to, grant, gseq, ack_rseq, flags */
        assert_true(uint_at(&f[2]) == W.life[to]);
        assert_true(uint_at(&f[3]) <= LIMIT);
        assert_true(uint_at(&f[4]) >= 1);
        assert_true(uint_at(&f[6]) <= 255);
    } else if (kind == 3) { /* ask: nonce, ttl_ms */
        assert_true(uint_at(&f[2]) != 0);
        assert_int_equal(uint_at(&f[3]), TTL / MS);
    } else if (kind == 4) { /* answer: nonce, state, hold_ms */
        assert_true(uint_at(&f[2]) != 0);
        assert_true(uint_at(&f[3]) <= 4);
    } else { /* beat: nonce, pong */
        assert_true(uint_at(&f[2]) != 0);
        assert_true(uint_at(&f[3]) <= 1);
        W.pongs += uint_at(&f[3]) == 1;
    }
    W.kinds[kind]++;
    msgpack_unpacked_destroy(&u);
}

static void test_slots_messages_read_by_msgpack_c(void **state)
{
    (void)state;
    memset(&W, 0, sizeof(W));
    int64_t now = 1000 * MS;
    for (int i = 0; i < NODES; i++) {
        struct slots_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.node_name = names[i];
        cfg.life = 0x1000u + (uint64_t)i * 0x10001u;
        cfg.fresh_ns = 300 * MS;
        cfg.restarted_known = 1; /* a fresh cluster: every member is new */
        cfg.send = net_send;
        cfg.send_ud = (void *)(intptr_t)i;
        cfg.load = load;
        W.life[i] = cfg.life;
        assert_int_equal(slots_create(&cfg, now, &W.s[i]), 0);
    }
    for (int i = 0; i < NODES; i++)
        assert_int_equal(slots_set_view(W.s[i], names, NULL, NODES, NODES, now), 0);
    int64_t held = 0;
    for (int step = 0; step < 400 && held < LIMIT; step++, now += 10 * MS) {
        held = 0;
        for (int i = 0; i < NODES; i++)
            held += slots_cap(W.s[i], KEY, strlen(KEY), LIMIT, TTL, 0, 1, now);
        for (int i = 0; i < NODES; i++)
            slots_tick(W.s[i], now);
        /* Deliver what was sent, and what that makes, until quiet. */
        for (int k = 0; k < W.nq; k++) {
            struct packet p = W.q[k];
            check(&p);
            assert_int_equal(slots_receive(W.s[index_of(p.to)], names[p.from], p.buf, p.len, now),
                             0);
        }
        W.nq = 0;
    }
    /* The key's n slots reached the members, and every kind went by. */
    assert_int_equal(held, LIMIT);
    for (int kind = 1; kind <= 5; kind++)
        assert_true(W.kinds[kind] > 0);
    assert_true(W.pongs > 0 && W.pongs < W.kinds[5]);
    print_message("messages read: %d reports, %d grants, %d asks, %d answers, %d beats (%d "
                  "answers)\n",
                  W.kinds[1], W.kinds[2], W.kinds[3], W.kinds[4], W.kinds[5], W.pongs);
    for (int i = 0; i < NODES; i++) {
        struct slots_stats st;
        slots_get_stats(W.s[i], &st);
        assert_int_equal(st.bad_packets, 0);
        slots_destroy(W.s[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_messages_read_by_msgpack_c),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
