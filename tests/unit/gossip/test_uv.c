/*
 * The libuv adapter on real loopback sockets: nodes found through a name list
 * see each other (IPv4 and IPv6), bad arguments and busy ports are refused
 * without leaving anything open, and a stop releases every handle so the loop
 * closes (LeakSanitizer checks the memory).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "gossip/error.h"
#include "gossip/gossip.h"
#include "gossip/keyring.h"
#include "gossip/uv.h"

#define WAIT_MS 15000 /* bound on any convergence wait */

/* A host name that fails to resolve without asking any DNS server. */
#define UNRESOLVABLE                                                                               \
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.invalid"

static void fast_config(struct gossip_config *cfg, const char *name, struct gossip_keyring *kr)
{
    gossip_config_default(cfg);
    cfg->name = name;
    cfg->keyring = kr;
    cfg->probe_interval_ms = 100;
    cfg->probe_timeout_ms = 50;
    cfg->gossip_interval_ms = 20;
    cfg->pushpull_interval_ms = 500;
}

/* Runs the loop until pred(ud) holds or WAIT_MS pass; returns pred's value. */
struct waiter {
    int (*pred)(void *ud);
    void *ud;
    uint64_t deadline;
    int ok;
};

static void on_poll(uv_timer_t *t)
{
    struct waiter *w = t->data;
    w->ok = w->pred(w->ud);
    if (w->ok || uv_now(t->loop) >= w->deadline)
        uv_stop(t->loop);
}

static int run_until(uv_loop_t *loop, int (*pred)(void *), void *ud)
{
    struct waiter w = {.pred = pred, .ud = ud, .deadline = uv_now(loop) + WAIT_MS};
    uv_timer_t t;
    uv_timer_init(loop, &t);
    t.data = &w;
    uv_timer_start(&t, on_poll, 10, 10);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return w.ok;
}

struct pair {
    struct gossip_uv *a, *b;
};

static int both_see_two(void *ud)
{
    struct pair *p = ud;
    return gossip_node_num_live(gossip_uv_node(p->a)) == 2 &&
           gossip_node_num_live(gossip_uv_node(p->b)) == 2;
}

static int closed;
static void on_closed(void *ud)
{
    (void)ud;
    closed++;
}

/* Stops both adapters and checks that every handle is released. */
static void stop_and_close(uv_loop_t *loop, struct gossip_uv *a, struct gossip_uv *b)
{
    closed = 0;
    gossip_uv_stop(a, on_closed, NULL);
    gossip_uv_stop(b, on_closed, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(closed, (a != NULL) + (b != NULL));
}

static void pair_over(const char *bind_s, const char *fmt)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct gossip_keyring *kr = NULL;
    uint8_t key[GOSSIP_KEY_BYTES];
    gossip_keyring_generate_key(key);
    assert_int_equal(gossip_keyring_create(&kr, "uv-test"), 0);
    assert_int_equal(gossip_keyring_install(kr, 1, key), 0);

    struct gossip_addr ba;
    assert_int_equal(gossip_addr_parse(bind_s, &ba), 0);
    struct gossip_config cfg;
    struct pair p = {0};
    fast_config(&cfg, "a", kr);
    int rc = gossip_uv_start(&loop, &cfg, &ba, &p.a);
    if (rc == -GOSSIP_EIO && ba.family == 6) {
        /* No IPv6 loopback on this host: nothing to test. */
        gossip_keyring_destroy(kr);
        assert_int_equal(uv_loop_close(&loop), 0);
        skip();
    }
    assert_int_equal(rc, 0);
    fast_config(&cfg, "b", kr);
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &p.b), 0);

    struct gossip_addr la;
    assert_int_equal(gossip_uv_local_addr(p.a, &la), 0);
    assert_int_not_equal(la.port, 0); /* port 0 was bound to a real port */
    char list[128];
    snprintf(list, sizeof(list), fmt, (unsigned)la.port);
    assert_int_equal(gossip_uv_join_names(p.b, list, 200), 0);

    assert_true(run_until(&loop, both_see_two, &p));
    struct gossip_member_info m;
    assert_int_equal(gossip_node_member(gossip_uv_node(p.a), "b", &m), 0);
    assert_int_equal(m.state, GOSSIP_MEMBER_ALIVE);
    assert_int_equal(m.addr.family, ba.family);

    struct gossip_uv_stats st;
    gossip_uv_stats(p.b, &st);
    assert_true(st.dns_lookups >= 1);
    assert_true(st.dns_joined >= 1);
    struct gossip_stats ns;
    gossip_node_stats(gossip_uv_node(p.a), &ns);
    assert_true(ns.packets_received > 0);
    assert_int_equal(ns.drops[GOSSIP_DROP_AUTH], 0);

    stop_and_close(&loop, p.a, p.b);
    assert_int_equal(uv_loop_close(&loop), 0);
    gossip_keyring_destroy(kr);
}

static void test_pair_ipv4_by_name(void **state)
{
    (void)state;
    /* An unresolvable entry in the list must not stop the good one.  Its
     * 70-byte label is over DNS's 63-byte limit, so the resolver refuses it
     * locally and no query leaves the machine. */
    pair_over("127.0.0.1:0", UNRESOLVABLE ":1, localhost:%u");
}

static void test_pair_ipv6(void **state)
{
    (void)state;
    pair_over("[::1]:0", "[::1]:%u");
}

static void test_refusals(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct gossip_config cfg;
    fast_config(&cfg, "x", NULL);
    struct gossip_uv *g = (struct gossip_uv *)&cfg; /* must be reset to NULL */
    struct gossip_addr ba;

    /* A port already bound by someone else. */
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    socklen_t sl = sizeof(sin);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
    char busy[64];
    snprintf(busy, sizeof(busy), "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
    assert_int_equal(gossip_addr_parse(busy, &ba), 0);
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &g), -GOSSIP_EIO);
    assert_null(g);
    close(fd);

    /* A wildcard address cannot be advertised. */
    assert_int_equal(gossip_addr_parse("0.0.0.0:0", &ba), 0);
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &g), -GOSSIP_EINVAL);
    /* ... unless an advertise address is given. */
    assert_int_equal(gossip_addr_parse("127.0.0.1:7946", &cfg.advertise), 0);
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &g), 0);

    /* Malformed name lists; the adapter keeps running. */
    static const char *const bad[] = {
        "",       " , ",     "host",   "host:", "host:0",  "host:65536",
        "::1:80", "[::1]80", "[::1]:", ":80",   "host:8x", NULL};
    for (int i = 0; bad[i] != NULL; i++)
        assert_int_equal(gossip_uv_join_names(g, bad[i], 0), -GOSSIP_EINVAL);

    /* Missing node name: the core refuses, nothing stays open. */
    struct gossip_uv *g2 = NULL;
    cfg.name = NULL;
    assert_int_equal(gossip_addr_parse("127.0.0.1:0", &ba), 0);
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &g2), -GOSSIP_EINVAL);
    assert_null(g2);
    assert_int_equal(gossip_uv_start(NULL, &cfg, &ba, &g2), -GOSSIP_EINVAL);

    stop_and_close(&loop, g, NULL);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Stopping while lookups are in flight still frees everything. */
static void test_stop_during_lookup(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct gossip_config cfg;
    fast_config(&cfg, "s", NULL);
    struct gossip_addr ba;
    assert_int_equal(gossip_addr_parse("127.0.0.1:0", &ba), 0);
    struct gossip_uv *g = NULL;
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &g), 0);
    assert_int_equal(gossip_uv_join_names(g, "localhost:1,127.0.0.1:2," UNRESOLVABLE ":3", 10), 0);
    /* A second list while the first round runs replaces it. */
    assert_int_equal(gossip_uv_join_names(g, "127.0.0.1:4", 10), 0);
    stop_and_close(&loop, g, NULL);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* A gossip callback may stop its own adapter (the stop waits for the core). */
struct self_stop {
    struct gossip_uv *g;
    int events;
};

static void stop_on_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    struct self_stop *s = ud;
    (void)ev;
    (void)m;
    s->events++;
    gossip_uv_stop(s->g, on_closed, NULL);
}

static int one_closed(void *ud)
{
    (void)ud;
    return closed == 1;
}

static void test_stop_from_callback(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct gossip_addr ba;
    assert_int_equal(gossip_addr_parse("127.0.0.1:0", &ba), 0);
    struct self_stop s = {0};
    struct gossip_config cfg;
    fast_config(&cfg, "a", NULL);
    cfg.cb.ud = &s;
    cfg.cb.on_event = stop_on_event;
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &s.g), 0);
    struct gossip_uv *b = NULL;
    fast_config(&cfg, "b", NULL);
    assert_int_equal(gossip_uv_start(&loop, &cfg, &ba, &b), 0);
    struct gossip_addr la;
    assert_int_equal(gossip_uv_local_addr(s.g, &la), 0);
    assert_int_equal(gossip_node_join(gossip_uv_node(b), &la, 1), 0);
    closed = 0;
    assert_true(run_until(&loop, one_closed, NULL)); /* a saw b, stopped, closed */
    assert_true(s.events >= 1);
    stop_and_close(&loop, b, NULL);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair_ipv4_by_name),  cmocka_unit_test(test_pair_ipv6),
        cmocka_unit_test(test_refusals),           cmocka_unit_test(test_stop_during_lookup),
        cmocka_unit_test(test_stop_from_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
