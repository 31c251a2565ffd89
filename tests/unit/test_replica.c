/*
 * Unit tests of global-limit replication without gossip: the delta codec
 * (round trip, truncation at every byte, random bytes), the CRDT merge laws
 * (any order, duplicates and loss give the same slots), epochs (a restarted
 * or re-created slot is neither ignored nor counted twice), debt from remote
 * pours, fail-closed before sync, and cluster-wide GC.  Seeded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delta.h"
#include "replica.h"
#include "testutil.h"

#define SEC  1000000000LL
#define MSEC 1000000LL

static uint64_t seed;

/* ---- codec --------------------------------------------------------------- */

struct rec {
    struct delta_entry e;
    struct delta_slot s;
    char key[32], node[DELTA_NAME_MAX + 1];
};

struct collect {
    struct rec v[64];
    size_t n;
};

static void collect_cb(void *ud, const struct delta_entry *e, const struct delta_slot *s)
{
    struct collect *c = ud;
    if (c->n >= 64)
        return;
    struct rec *r = &c->v[c->n++];
    r->e = *e;
    r->s = *s;
    assert_true(e->klen < sizeof(r->key));
    memcpy(r->key, e->key, e->klen);
    memcpy(r->node, s->node, s->node_len);
    r->e.key = r->key;
    r->s.node = r->node;
}

static int64_t rnd_i64(uint64_t *rng)
{
    switch (test_rand(rng) % 4) {
    case 0:
        return test_rand_range(rng, -100, 100);
    case 1:
        return (int64_t)test_rand(rng);
    case 2:
        return test_rand(rng) % 2 ? INT64_MAX : INT64_MIN;
    default:
        return test_rand_range(rng, 0, 4 * SEC);
    }
}

static size_t build_random(uint64_t *rng, uint8_t *buf, size_t cap, struct collect *want,
                           int64_t now)
{
    struct delta_writer w;
    delta_writer_init(&w, buf, cap, DELTA_T_STATE, now);
    want->n = 0;
    size_t ne = (size_t)test_rand_range(rng, 0, 5);
    for (size_t i = 0; i < ne; i++) {
        char key[32];
        char names[4][DELTA_NAME_MAX + 1];
        struct delta_entry e = {0};
        struct delta_slot s[4];
        int klen = snprintf(key, sizeof(key), "key:%llu", (unsigned long long)test_rand(rng));
        e.key = key;
        e.klen = (size_t)klen;
        e.kind = (uint8_t)(test_rand(rng) % 5);
        e.policy = (uint8_t)(test_rand(rng) % 2);
        e.burst = rnd_i64(rng);
        e.count = rnd_i64(rng);
        e.period_ns = rnd_i64(rng);
        e.precision = rnd_i64(rng);
        e.has_tat = (int)(test_rand(rng) % 2);
        e.tat_ns = e.has_tat ? now + (rnd_i64(rng) >> 2) : 0;
        size_t ns = (size_t)test_rand_range(rng, 0, 4);
        for (size_t j = 0; j < ns; j++) {
            size_t nl = (size_t)test_rand_range(rng, 0, DELTA_NAME_MAX);
            memset(names[j], 'a' + (int)j, nl);
            s[j].node = names[j];
            s[j].node_len = nl;
            s[j].epoch = test_rand(rng);
            s[j].count = rnd_i64(rng) & INT64_MAX;
            /* Times within 2^62 of now round-trip exactly. */
            s[j].at_ns = now + (rnd_i64(rng) >> 2);
            s[j].vtat_ns = now + (rnd_i64(rng) >> 2);
            s[j].stamp_ns = now + (rnd_i64(rng) >> 2);
            s[j].demand_milli = test_rand(rng);
        }
        if (delta_writer_add(&w, &e, s, ns) != 0)
            break;
        for (size_t j = 0; j < ns; j++) {
            struct rec *r = &want->v[want->n++];
            r->e = e;
            r->s = s[j];
            memcpy(r->key, key, e.klen);
            memcpy(r->node, names[j], s[j].node_len);
        }
    }
    return delta_writer_finish(&w);
}

static void test_codec_roundtrip(void **state)
{
    (void)state;
    uint64_t rng = seed;
    uint8_t buf[4096];
    for (int it = 0; it < 2000; it++) {
        struct collect want, got = {.n = 0};
        int64_t now = (int64_t)(test_rand(&rng) >> 3);
        size_t len = build_random(&rng, buf, sizeof(buf), &want, now);
        enum delta_type type;
        int64_t sent;
        assert_true(len >= DELTA_HEADER);
        assert_int_equal(delta_decode(buf, len, &type, &sent, collect_cb, &got), 0);
        assert_int_equal(type, DELTA_T_STATE);
        assert_int_equal(sent, now);
        assert_int_equal(got.n, want.n);
        for (size_t i = 0; i < got.n; i++) {
            const struct rec *a = &got.v[i], *b = &want.v[i];
            assert_int_equal(a->e.klen, b->e.klen);
            assert_memory_equal(a->key, b->key, a->e.klen);
            assert_int_equal(a->e.kind, b->e.kind);
            assert_int_equal(a->e.policy, b->e.policy);
            assert_int_equal(a->e.burst, b->e.burst);
            assert_int_equal(a->e.count, b->e.count);
            assert_int_equal(a->e.period_ns, b->e.period_ns);
            assert_int_equal(a->e.precision, b->e.precision);
            assert_int_equal(a->e.has_tat, b->e.has_tat);
            assert_int_equal(a->e.tat_ns, b->e.tat_ns);
            assert_int_equal(a->s.node_len, b->s.node_len);
            assert_memory_equal(a->node, b->node, a->s.node_len);
            assert_true(a->s.epoch == b->s.epoch);
            assert_int_equal(a->s.count, b->s.count);
            assert_int_equal(a->s.at_ns, b->s.at_ns);
            assert_int_equal(a->s.vtat_ns, b->s.vtat_ns);
            assert_int_equal(a->s.stamp_ns, b->s.stamp_ns);
            assert_true(a->s.demand_milli == b->s.demand_milli);
        }
    }
}

static void count_cb(void *ud, const struct delta_entry *e, const struct delta_slot *s)
{
    (void)e;
    (void)s;
    (*(size_t *)ud)++;
}

/* Every strict prefix is rejected before any callback; so is any trailing
 * byte; random bytes never crash and never call back unless valid. */
static void test_codec_truncation_and_garbage(void **state)
{
    (void)state;
    uint64_t rng = seed ^ 1;
    uint8_t buf[4096], junk[512];
    for (int it = 0; it < 200; it++) {
        struct collect want;
        size_t len = build_random(&rng, buf, sizeof(buf) - 1, &want, 12345);
        for (size_t cut = 0; cut < len; cut++) {
            size_t calls = 0;
            assert_true(delta_decode(buf, cut, NULL, NULL, count_cb, &calls) < 0);
            assert_int_equal(calls, 0);
        }
        buf[len] = 0x00;
        size_t calls = 0;
        assert_int_equal(delta_decode(buf, len + 1, NULL, NULL, count_cb, &calls), -SLUICE_EPROTO);
        assert_int_equal(calls, 0);
    }
    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)test_rand_range(&rng, 0, sizeof(junk));
        for (size_t i = 0; i < n; i++)
            junk[i] = (uint8_t)test_rand(&rng);
        if (n > 0 && it % 2)
            junk[0] = 0x94;
        size_t calls = 0;
        (void)delta_decode(junk, n, NULL, NULL, count_cb, &calls);
    }
    /* Unknown version. */
    struct delta_writer w;
    delta_writer_init(&w, buf, sizeof(buf), DELTA_T_DELTA, 1);
    size_t len = delta_writer_finish(&w);
    buf[1] = DELTA_VERSION + 1;
    assert_int_equal(delta_decode(buf, len, NULL, NULL, NULL, NULL), -SLUICE_EINVAL);
}

static void test_codec_bounds(void **state)
{
    (void)state;
    uint8_t buf[256];
    struct delta_writer w;
    struct delta_entry e = {.key = "k", .klen = 1, .count = 1, .period_ns = SEC};
    struct delta_slot s = {.node = "n", .node_len = 1, .count = 5};
    delta_writer_init(&w, buf, sizeof(buf), DELTA_T_DELTA, 0);
    e.klen = 0;
    assert_int_equal(delta_writer_add(&w, &e, &s, 1), -SLUICE_EINVAL);
    e.klen = 1;
    s.count = -1;
    assert_int_equal(delta_writer_add(&w, &e, &s, 1), -SLUICE_EINVAL);
    s.count = 5;
    int added = 0;
    while (delta_writer_add(&w, &e, &s, 1) == 0)
        added++;
    assert_true(added > 2);
    size_t len = delta_writer_finish(&w);
    assert_true(len <= sizeof(buf));
    size_t calls = 0;
    assert_int_equal(delta_decode(buf, len, NULL, NULL, count_cb, &calls), 0);
    assert_int_equal(calls, (size_t)added);
}

/* ---- replicas on a direct bus ------------------------------------------- */

struct bus;
struct member {
    struct bus *bus;
    int idx;
    struct replica *r;
};
#define BUS_MAX 8
struct bus {
    struct member m[BUS_MAX];
    int n;
    int down[BUS_MAX];
    char names[BUS_MAX][16];
};

static int bus_send(void *ud, const uint8_t *buf, size_t len)
{
    struct member *m = ud;
    struct bus *b = m->bus;
    if (b->down[m->idx])
        return 0;
    for (int i = 0; i < b->n; i++)
        if (i != m->idx && !b->down[i] && b->m[i].r != NULL)
            replica_receive(b->m[i].r, b->names[m->idx], buf, len);
    return 0;
}

static void bus_start(struct bus *b, int i, uint32_t boot)
{
    struct replica_config c = {0};
    b->m[i].bus = b;
    b->m[i].idx = i;
    c.node_name = b->names[i];
    c.boot_epoch = boot;
    c.broadcast = bus_send;
    c.broadcast_ud = &b->m[i];
    c.cluster_size = (size_t)b->n;
    c.gc_grace_ns = 5 * SEC;
    assert_int_equal(replica_create(&b->m[i].r, &c), 0);
}

static void bus_init(struct bus *b, int n)
{
    memset(b, 0, sizeof(*b));
    b->n = n;
    for (int i = 0; i < n; i++) {
        snprintf(b->names[i], sizeof(b->names[i]), "n%d", i);
        bus_start(b, i, 1);
    }
}

static void bus_free(struct bus *b)
{
    for (int i = 0; i < b->n; i++)
        replica_destroy(b->m[i].r);
}

static void bus_tick(struct bus *b, int64_t now)
{
    for (int i = 0; i < b->n; i++)
        if (b->m[i].r != NULL)
            replica_tick(b->m[i].r, now);
}

/* Full anti-entropy from i to j. */
static void bus_sync(struct bus *b, int i, int j)
{
    uint8_t buf[1400];
    uint64_t cur = 0;
    size_t len;
    while ((len = replica_state_fill(b->m[i].r, &cur, buf, sizeof(buf))) > 0)
        assert_int_equal(replica_receive(b->m[j].r, b->names[i], buf, len), 0);
    replica_mark_synced(b->m[j].r);
}

static struct algo_params limit(int64_t burst, int64_t count, int64_t period)
{
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, burst, count, period, 0), 0);
    return p;
}

static int64_t take(struct replica *r, const char *key, const struct algo_params *p, int64_t n,
                    int64_t now)
{
    int64_t ok = 0;
    struct algo_result res;
    if (n == 0) /* a peek: makes the key known */
        assert_int_equal(replica_throttle(r, key, strlen(key), p, REPLICA_OPTIMISTIC, 0, now, &res),
                         0);
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(replica_throttle(r, key, strlen(key), p, REPLICA_OPTIMISTIC, 1, now, &res),
                         0);
        ok += !res.limited;
    }
    return ok;
}

/* Remote pours push the state past full: a node that heard the others used
 * the whole burst admits nothing until the debt is repaid by the rate. */
static void test_remote_debt(void **state)
{
    (void)state;
    struct bus b;
    bus_init(&b, 3);
    struct algo_params p = limit(9, 10, SEC); /* 10 at once, 10/s */
    int64_t now = 10 * SEC;
    for (int i = 0; i < 3; i++)
        take(b.m[i].r, "k", &p, 0, now); /* every node knows the key */
    bus_tick(&b, now);
    now += SEC; /* past the learning window: an idle cluster, full shares */
    bus_tick(&b, now);
    /* n0 and n1 each admit what their view allows. */
    struct replica_key_info info;
    assert_int_equal(replica_key_info(b.m[0].r, "k", 1, now, &info, NULL, NULL), 0);
    assert_true(info.share == 1.0);
    int64_t a0 = take(b.m[0].r, "k", &p, 30, now);
    int64_t a1 = take(b.m[1].r, "k", &p, 30, now);
    bus_tick(&b, now + 100 * MSEC); /* flush deltas */
    now += 100 * MSEC;
    assert_int_equal(replica_key_info(b.m[2].r, "k", 1, now, &info, NULL, NULL), 0);
    fprintf(stderr, "  n0 %lld n1 %lld admitted; n2 debt %lld ms\n", (long long)a0, (long long)a1,
            (long long)(info.debt_ns / MSEC));
    assert_true(a0 + a1 > 10); /* the two views overlapped (AP) */
    assert_true(info.debt_ns > 0);
    assert_int_equal(take(b.m[2].r, "k", &p, 5, now), 0);
    assert_int_equal(replica_key_total(b.m[2].r, "k", 1), a0 + a1);
    bus_free(&b);
}

/*
 * A global token bucket of 10 (burst 9), refilling one unit every 6 minutes:
 * one node takes all 10, one every 100 ms, its deltas reaching the others
 * 70 ms after each admission.  Every other node must then see nothing left
 * and admit nothing until a unit refills, and exactly one unit after that.
 * The pours reach a bucket through the consumption history's TAT, which
 * runs ahead of "now" by less than a whole unit's time (the delivery lag):
 * rounding that part down left one unit in every other node's bucket.
 */
static void test_token_bucket_exact_capacity(void **state)
{
    (void)state;
    struct bus b;
    struct algo_params p;
    struct algo_result res;
    const int64_t hour = 3600 * SEC, em = hour / 10;
    assert_int_equal(algo_params_init(&p, ALGO_TOKEN_BUCKET, 9, 10, hour, 0), 0);
    bus_init(&b, 3);
    int64_t now = 10 * SEC;
    for (int i = 0; i < 3; i++) /* every node knows the key, none has demand */
        assert_int_equal(replica_throttle(b.m[i].r, "tb", 2, &p, REPLICA_OPTIMISTIC, 0, now, &res),
                         0);
    bus_tick(&b, now);
    now += SEC; /* past the learning window */
    bus_tick(&b, now);
    int64_t got = 0;
    for (int i = 0; i < 10; i++) {
        now += 30 * MSEC;
        assert_int_equal(replica_throttle(b.m[0].r, "tb", 2, &p, REPLICA_OPTIMISTIC, 1, now, &res),
                         0);
        got += !res.limited;
        now += 70 * MSEC;
        /* The peers' clocks are at the delivery time (as in the daemon,
         * which reads its clock every loop turn), then n0 flushes: they
         * hear of the unit 70 ms after it was taken. */
        for (int k = 2; k >= 0; k--)
            replica_tick(b.m[k].r, now);
    }
    assert_int_equal(got, 10);
    now += 800 * MSEC;
    bus_tick(&b, now);
    for (int i = 1; i < 3; i++) {
        struct replica_key_info info;
        assert_int_equal(replica_key_info(b.m[i].r, "tb", 2, now, &info, NULL, NULL), 0);
        fprintf(stderr, "  node %d: remaining %lld\n", i, (long long)info.remaining);
        assert_int_equal(info.remaining, 0);
        assert_int_equal(replica_throttle(b.m[i].r, "tb", 2, &p, REPLICA_OPTIMISTIC, 1, now, &res),
                         0);
        assert_true(res.limited);
        assert_true(res.retry_after_ns > 0 && res.retry_after_ns <= em);
    }
    assert_int_equal(replica_key_total(b.m[1].r, "tb", 2), 10);
    /* One refill later: exactly one more unit in the whole cluster. */
    int64_t t = now;
    for (int64_t step = 0; step < em / SEC + 2; step++) {
        t += SEC;
        bus_tick(&b, t);
    }
    int64_t more = 0;
    for (int i = 1; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            assert_int_equal(
                replica_throttle(b.m[i].r, "tb", 2, &p, REPLICA_OPTIMISTIC, 1, t, &res), 0);
            more += !res.limited;
            t += 100 * MSEC;
            for (int k = 2; k >= 0; k--)
                replica_tick(b.m[k].r, t);
        }
    assert_int_equal(more, 1);
    bus_free(&b);
}

/*
 * A node that alone asks for a key nobody has used gets the whole burst:
 * one request every 100 ms on a cold key of 10 (burst 9, 10 per hour) in a
 * cluster of 3 is allowed 10 times in a row, then limited.  A young key's
 * burst is split among the peers not heard from yet; the idle ones are heard
 * within about an interval (they announce themselves when they learn of the
 * key), so the lone node is not refused in the middle of its burst.
 */
static void test_lone_consumer_full_burst(void **state)
{
    (void)state;
    struct bus b;
    struct algo_params p;
    struct algo_result res;
    char got[16] = {0};
    assert_int_equal(algo_params_init(&p, ALGO_TOKEN_BUCKET, 9, 10, 3600 * SEC, 0), 0);
    bus_init(&b, 3);
    int64_t now = 10 * SEC;
    bus_tick(&b, now);
    for (int i = 0; i < 14; i++) {
        now += 30 * MSEC;
        assert_int_equal(replica_throttle(b.m[0].r, "tb", 2, &p, REPLICA_OPTIMISTIC, 1, now, &res),
                         0);
        got[i] = res.limited ? '1' : '0';
        now += 70 * MSEC;
        for (int k = 2; k >= 0; k--)
            replica_tick(b.m[k].r, now);
    }
    fprintf(stderr, "  lone node answered %s\n", got);
    assert_string_equal(got, "00000000001111");
    bus_free(&b);
}

/* Random slot histories delivered in any order, duplicated or partly lost
 * (the latest record of each node always arrives): the same final slots. */
struct slot_view {
    char node[8][16];
    uint64_t epoch[8];
    int64_t count[8];
    int n;
};
static void view_cb(void *ud, const struct replica_slot_info *s)
{
    struct slot_view *v = ud;
    snprintf(v->node[v->n], sizeof(v->node[0]), "%s", s->node);
    v->epoch[v->n] = s->epoch;
    v->count[v->n++] = s->count;
}

static void view_of(struct replica *r, struct slot_view *v)
{
    struct replica_key_info info;
    memset(v, 0, sizeof(*v));
    assert_int_equal(replica_key_info(r, "k", 1, 0, &info, view_cb, v), 0);
}

static int64_t view_count(const struct slot_view *v, const char *node, uint64_t *epoch)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->node[i], node) == 0) {
            *epoch = v->epoch[i];
            return v->count[i];
        }
    return -1;
}

static void test_merge_laws(void **state)
{
    (void)state;
    uint64_t rng = seed ^ 2;
    struct algo_params p = limit(100, 1000, SEC);
    for (int round = 0; round < 50; round++) {
        /* Four origins, each a history of (epoch, count) records. */
        uint8_t pk[64][256];
        size_t pl[64];
        int origin[64];
        uint64_t want_e[4] = {0};
        int64_t want_c[4] = {0};
        int np = 0;
        for (int o = 0; o < 4; o++) {
            uint64_t epoch = 1 + test_rand(&rng) % 3;
            int64_t count = 0;
            for (int k = 0; k < 10; k++) {
                if (test_rand(&rng) % 5 == 0) {
                    epoch++;
                    count = 0;
                }
                count += test_rand_range(&rng, 0, 7);
                char name[8];
                snprintf(name, sizeof(name), "o%d", o);
                struct delta_entry e = {.key = "k",
                                        .klen = 1,
                                        .kind = ALGO_GCRA,
                                        .burst = 100,
                                        .count = 1000,
                                        .period_ns = SEC};
                struct delta_slot s = {.node = name,
                                       .node_len = 2,
                                       .epoch = epoch,
                                       .count = count,
                                       .at_ns = 1000 + k,
                                       .vtat_ns = 5 * SEC,
                                       .stamp_ns = 1000 + k};
                struct delta_writer w;
                delta_writer_init(&w, pk[np], sizeof(pk[0]), DELTA_T_STATE, 2000);
                assert_int_equal(delta_writer_add(&w, &e, &s, 1), 0);
                pl[np] = delta_writer_finish(&w);
                origin[np++] = o;
                want_e[o] = epoch;
                want_c[o] = count;
            }
        }
        struct slot_view first;
        for (int trial = 0; trial < 3; trial++) {
            struct replica *r;
            struct replica_config c = {.node_name = "me", .boot_epoch = 1};
            assert_int_equal(replica_create(&r, &c), 0);
            take(r, "k", &p, 0, 1);
            int order[64];
            for (int i = 0; i < np; i++)
                order[i] = i;
            for (int i = np - 1; i > 0; i--) {
                int j = (int)(test_rand(&rng) % (uint64_t)(i + 1));
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            for (int i = 0; i < np; i++) {
                int x = order[i];
                int last = x == np - 1 || origin[x + 1] != origin[x];
                if (!last && test_rand(&rng) % 4 == 0)
                    continue;                                 /* lost */
                int times = test_rand(&rng) % 3 == 0 ? 2 : 1; /* duplicated */
                for (int t = 0; t < times; t++)
                    assert_int_equal(replica_receive(r, "relay", pk[x], pl[x]), 0);
            }
            struct slot_view v;
            view_of(r, &v);
            for (int o = 0; o < 4; o++) {
                char name[8];
                uint64_t e;
                snprintf(name, sizeof(name), "o%d", o);
                assert_int_equal(view_count(&v, name, &e), want_c[o]);
                assert_true(e == want_e[o]);
            }
            if (trial == 0)
                first = v;
            else
                assert_int_equal(v.n, first.n);
            replica_destroy(r);
        }
    }
}

/* A slot's epoch replaced: the new count is poured from zero, neither
 * ignored nor added to the old one; an old epoch arriving late is ignored. */
static void test_epoch_replacement(void **state)
{
    (void)state;
    struct algo_params p = limit(1000, 1, SEC); /* 1/s: pours stay visible */
    struct replica *r;
    struct replica_config c = {.node_name = "me", .boot_epoch = 1};
    assert_int_equal(replica_create(&r, &c), 0);
    take(r, "k", &p, 0, 0);
    int64_t now = 100 * SEC;
    uint8_t buf[256];
    struct delta_entry e = {
        .key = "k", .klen = 1, .kind = ALGO_GCRA, .burst = 1000, .count = 1, .period_ns = SEC};
    struct {
        uint64_t epoch;
        int64_t count;
    } seq[] = {{5, 10}, {5, 10}, {6, 3}, {5, 50}, {6, 4}};
    int64_t want_reset[] = {10, 10, 13, 13, 14};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        struct delta_slot s = {.node = "",
                               .node_len = 0,
                               .epoch = seq[i].epoch,
                               .count = seq[i].count,
                               .at_ns = now,
                               .vtat_ns = now + 1000 * SEC,
                               .stamp_ns = now + (int64_t)i};
        struct delta_writer w;
        delta_writer_init(&w, buf, sizeof(buf), DELTA_T_DELTA, now);
        assert_int_equal(delta_writer_add(&w, &e, &s, 1), 0);
        assert_int_equal(replica_receive(r, "peer", buf, delta_writer_finish(&w)), 0);
        struct replica_key_info info;
        assert_int_equal(replica_key_info(r, "k", 1, now, &info, NULL, NULL), 0);
        assert_int_equal(info.reset_after_ns, want_reset[i] * SEC);
    }
    replica_destroy(r);
}

/* A restarted node (new boot epoch) recovers, by anti-entropy, both its own
 * earlier life's consumption and the others'; its new slot is a new epoch
 * that peers pour from zero. */
static void test_restart_recovers(void **state)
{
    (void)state;
    struct bus b;
    bus_init(&b, 2);
    struct algo_params p = limit(99, 10, SEC); /* 100 at once, 10/s */
    int64_t now = SEC;
    take(b.m[0].r, "k", &p, 0, now);
    take(b.m[1].r, "k", &p, 0, now);
    bus_tick(&b, now);
    now += SEC;
    bus_tick(&b, now);
    assert_int_equal(take(b.m[0].r, "k", &p, 40, now), 40);
    assert_int_equal(take(b.m[1].r, "k", &p, 30, now), 30);
    now += 100 * MSEC;
    bus_tick(&b, now);
    /* kill -9 n0, restart with a higher boot epoch: unsynced, fail closed. */
    replica_destroy(b.m[0].r);
    b.m[0].r = NULL;
    struct replica_config c = {.node_name = "n0",
                               .boot_epoch = 2,
                               .cluster_size = 2,
                               .broadcast = bus_send,
                               .broadcast_ud = &b.m[0]};
    c.sync_timeout_ns = 5 * SEC;
    assert_int_equal(replica_create(&b.m[0].r, &c), 0);
    struct algo_result res;
    assert_int_equal(replica_throttle(b.m[0].r, "k", 1, &p, REPLICA_OPTIMISTIC, 1, now, &res), 0);
    assert_int_equal(res.limited, 1);
    bus_sync(&b, 1, 0);
    assert_true(replica_synced(b.m[0].r));
    struct replica_key_info i0, i1;
    assert_int_equal(replica_key_info(b.m[0].r, "k", 1, now, &i0, NULL, NULL), 0);
    assert_int_equal(replica_key_info(b.m[1].r, "k", 1, now, &i1, NULL, NULL), 0);
    /* 70 of 100 used 100 ms ago, 1 drained since: both see ~69 in use. */
    fprintf(stderr, "  reset_after: restarted %lld ms, peer %lld ms\n",
            (long long)(i0.reset_after_ns / MSEC), (long long)(i1.reset_after_ns / MSEC));
    assert_true(i0.reset_after_ns >= 6500 * MSEC);
    assert_true(i0.reset_after_ns <= i1.reset_after_ns + 100 * MSEC);
    /* New life's admissions reach the peer as a new epoch, poured once. */
    now += SEC;
    int64_t got = take(b.m[0].r, "k", &p, 5, now);
    bus_tick(&b, now + 100 * MSEC);
    bus_tick(&b, now + 200 * MSEC);
    assert_int_equal(replica_key_total(b.m[1].r, "k", 1), 30 + got);
    bus_sync(&b, 0, 1);
    bus_sync(&b, 1, 0);
    assert_int_equal(replica_key_total(b.m[1].r, "k", 1), 30 + got);
    bus_free(&b);
}

/* Idle keys are collected on every node; a stale slot coming back later
 * does not resurrect consumption; a key used again starts a new epoch that
 * peers count (not ignored as old, not added to the old count). */
static void test_gc_cluster_wide(void **state)
{
    (void)state;
    struct bus b;
    bus_init(&b, 2);
    struct algo_params p = limit(9, 10, SEC);
    int64_t now = SEC;
    take(b.m[0].r, "k", &p, 0, now);
    take(b.m[1].r, "k", &p, 0, now);
    bus_tick(&b, now);
    now += SEC;
    bus_tick(&b, now);
    assert_int_equal(take(b.m[0].r, "k", &p, 10, now), 10);
    bus_tick(&b, now);
    uint8_t stale[1400];
    uint64_t cur = 0;
    size_t stale_len = replica_state_fill(b.m[0].r, &cur, stale, sizeof(stale));
    assert_true(stale_len > 0);
    for (int i = 0; i < 100; i++) {
        now += 100 * MSEC;
        bus_tick(&b, now);
    }
    struct replica_stats s0, s1;
    replica_get_stats(b.m[0].r, &s0);
    replica_get_stats(b.m[1].r, &s1);
    assert_int_equal(s0.keys, 0);
    assert_int_equal(s1.keys, 0);
    /* The stale chunk arrives late: drained, it builds nothing. */
    assert_int_equal(replica_receive(b.m[1].r, "n0", stale, stale_len), 0);
    replica_get_stats(b.m[1].r, &s1);
    assert_int_equal(s1.keys, 0);
    /* Used again: n1 counts the new epoch from zero. */
    take(b.m[0].r, "k", &p, 0, now);
    take(b.m[1].r, "k", &p, 0, now);
    bus_tick(&b, now);
    now += SEC;
    bus_tick(&b, now);
    assert_int_equal(take(b.m[0].r, "k", &p, 3, now), 3);
    bus_tick(&b, now + 100 * MSEC);
    assert_int_equal(replica_key_total(b.m[1].r, "k", 1), 3);
    bus_free(&b);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct replica *r;
    struct replica_config c = {.node_name = ""};
    assert_int_equal(replica_create(&r, &c), -SLUICE_EINVAL);
    c.node_name = "me";
    assert_int_equal(replica_create(&r, &c), 0);
    struct algo_params p = limit(1, 1, SEC), log;
    assert_int_equal(algo_params_init(&log, ALGO_SLIDING_LOG, 0, 5, SEC, 0), 0);
    struct algo_result res;
    assert_int_equal(replica_throttle(r, "k", 1, &log, REPLICA_SHARE, 1, 0, &res), -SLUICE_EINVAL);
    assert_int_equal(replica_throttle(r, "k", 1, &p, REPLICA_SHARE, -1, 0, &res), -SLUICE_EINVAL);
    assert_int_equal(replica_throttle(r, "k", 0, &p, REPLICA_SHARE, 1, 0, &res), -SLUICE_EINVAL);
    assert_int_equal(replica_receive(r, "x", (const uint8_t *)"\x94", 1), -SLUICE_EPROTO);
    struct replica_stats st;
    replica_get_stats(r, &st);
    assert_int_equal(st.bad_packets, 1);
    replica_destroy(r);
}

/* One delta from `from` carrying a single slot of gcra key k (burst 9, 10/s)
 * with the given times, encoded at sender clock 0 so that the decoded times
 * are exactly these. */
static void send_slot(struct replica *r, const char *from, uint64_t epoch, int64_t count,
                      int64_t at, int64_t vtat, int64_t stamp)
{
    struct delta_entry e = {.key = "k",
                            .klen = 1,
                            .kind = ALGO_GCRA,
                            .policy = REPLICA_OPTIMISTIC,
                            .burst = 9,
                            .count = 10,
                            .period_ns = SEC};
    struct delta_slot sl = {.node = "",
                            .node_len = 0,
                            .epoch = epoch,
                            .count = count,
                            .at_ns = at,
                            .vtat_ns = vtat,
                            .stamp_ns = stamp};
    uint8_t buf[512];
    struct delta_writer w;
    delta_writer_init(&w, buf, sizeof(buf), DELTA_T_DELTA, 0);
    assert_int_equal(delta_writer_add(&w, &e, &sl, 1), 0);
    size_t len = delta_writer_finish(&w);
    assert_true(len > 0);
    assert_int_equal(replica_receive(r, from, buf, len), 0);
}

/*
 * Times at the ends of int64 from a peer (a sender's "never" arrives as
 * -9223372036854775803; hostile packets send anything) are merged without
 * overflow (UBSan) and keep their meaning: the counts are merged, a unit
 * dated absurdly far ahead is taken within the hour rather than decades
 * ahead, and the key recovers at its rate afterwards.
 */
static void test_merge_extreme_times(void **state)
{
    (void)state;
    struct bus b;
    bus_init(&b, 1);
    struct algo_params p = limit(9, 10, SEC);
    int64_t now = 100 * SEC;
    bus_tick(&b, now);
    struct replica *r = b.m[0].r;
    send_slot(r, "n1", 1, 1, now, now + 100 * MSEC, now);
    send_slot(r, "n1", 1, 3, INT64_MIN + 5, INT64_MAX, INT64_MIN + 5);
    send_slot(r, "n1", 1, 4, INT64_MAX, INT64_MIN, INT64_MAX);
    send_slot(r, "n1", 2, 2, INT64_MIN + 5, INT64_MAX - 3, INT64_MAX);
    send_slot(r, "n1", 3, 1, INT64_MAX, INT64_MAX, INT64_MIN);
    assert_int_equal(replica_key_total(r, "k", 1), 1);
    /* Three hours later every unit has drained: the whole burst is there. */
    now += 3 * 3600 * SEC;
    bus_tick(&b, now);
    assert_int_equal(take(r, "k", &p, 20, now), 10);
    bus_free(&b);
}

/*
 * Pours while the clock is within a history horizon (6.4 s) of zero: the
 * oldest bucket's index is negative there, and the ring slot of bucket -1
 * was read far outside the history (ASan).  The pours must also count: the
 * node that heard a peer take the whole burst admits nothing.
 */
static void test_pour_near_clock_zero(void **state)
{
    (void)state;
    struct bus b;
    bus_init(&b, 1);
    struct algo_params p = limit(9, 10, SEC);
    int64_t now = 100 * MSEC;
    take(b.m[0].r, "k", &p, 0, now);
    bus_tick(&b, now);
    /* A peer took 12 at clock 0 (all 12 undrained then), then 2 more: the
     * TAT is 1.4 s, 1.3 s past now, beyond the 1 s a full burst allows. */
    send_slot(b.m[0].r, "p", 7, 12, 0, 1200 * MSEC, 0);
    send_slot(b.m[0].r, "p", 7, 14, 0, 1400 * MSEC, 0);
    assert_int_equal(replica_key_total(b.m[0].r, "k", 1), 14);
    assert_int_equal(take(b.m[0].r, "k", &p, 5, now), 0);
    bus_free(&b);
}

int main(void)
{
    seed = test_seed("test_replica");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_roundtrip),
        cmocka_unit_test(test_codec_truncation_and_garbage),
        cmocka_unit_test(test_codec_bounds),
        cmocka_unit_test(test_remote_debt),
        cmocka_unit_test(test_token_bucket_exact_capacity),
        cmocka_unit_test(test_lone_consumer_full_burst),
        cmocka_unit_test(test_merge_laws),
        cmocka_unit_test(test_epoch_replacement),
        cmocka_unit_test(test_restart_recovers),
        cmocka_unit_test(test_gc_cluster_wide),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_merge_extreme_times),
        cmocka_unit_test(test_pour_near_clock_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
