/*
 * A loop turn's work is bounded whatever the clients do: a storm of
 * connections is accepted at most ACCEPTGATE_DEFAULT a turn, and requests
 * for a costly HTTP route wait for later turns once a turn's answers took
 * HTTP_TURN_BUDGET_NS, while a cheap route (/health) is answered at once;
 * connections that hang up together are closed at most
 * CLOSEBUDGET_PER_TURN a turn, the rest at the next turns.
 * Real sockets on 127.0.0.1, the loop run one turn at a time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "acceptgate.h"
#include "closebudget.h"
#include "http.h"

#define CLIENTS 100 /* under the listen backlog (128): all wait in the kernel */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static uint64_t open_conns(struct http_server *h)
{
    struct http_stats st;
    http_get_stats(h, &st);
    return st.open_conns;
}

static struct http_server *start(uv_loop_t *loop)
{
    struct http_config cfg = {.bind = "127.0.0.1:0", .max_conns = 1000};
    struct http_server *h = NULL;
    assert_int_equal(http_create(loop, &cfg, &h), 0);
    return h;
}

static void stop(uv_loop_t *loop, struct http_server *h)
{
    http_close(h);
    uv_run(loop, UV_RUN_DEFAULT);
    http_destroy(h);
    assert_int_equal(uv_loop_close(loop), 0);
}

static void test_connection_storm_accepted_a_budget_a_turn(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct http_server *h = start(&loop);
    assert_int_equal(http_start(h), 0);
    int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        fds[i] = connect_to(http_port(h));
    int turns = 0;
    uint64_t before = 0;
    while (open_conns(h) < CLIENTS && turns < 1000) {
        uv_run(&loop, UV_RUN_NOWAIT);
        uint64_t now = open_conns(h);
        /* never more than the budget in one turn (all were waiting) */
        assert_true(now - before <= ACCEPTGATE_DEFAULT);
        before = now;
        turns++;
    }
    assert_int_equal(open_conns(h), CLIENTS);
    assert_true(turns >= (CLIENTS + ACCEPTGATE_DEFAULT - 1) / ACCEPTGATE_DEFAULT);
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    stop(&loop, h);
}

static void test_hang_ups_closed_a_budget_a_turn(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct http_server *h = start(&loop);
    assert_int_equal(http_start(h), 0);
    int fds[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        fds[i] = connect_to(http_port(h));
    for (int t = 0; t < 1000 && open_conns(h) < CLIENTS; t++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(open_conns(h), CLIENTS);
    /* every one hangs up before the next turn */
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    int turns = 0;
    uint64_t before = CLIENTS;
    while (open_conns(h) > 0 && turns < 1000) {
        uv_run(&loop, UV_RUN_NOWAIT);
        uint64_t now = open_conns(h);
        assert_true(before - now <= CLOSEBUDGET_PER_TURN);
        before = now;
        turns++;
    }
    assert_int_equal(open_conns(h), 0); /* every one closed in the end */
    assert_true(turns >= (CLIENTS + CLOSEBUDGET_PER_TURN - 1) / CLOSEBUDGET_PER_TURN);
    struct http_stats st;
    http_get_stats(h, &st);
    assert_true(st.deferred_closes > 0);
    stop(&loop, h);
}

static int slow_answers;

static void slow_route(void *ud, const struct http_request *req, struct http_reply *rep)
{
    (void)ud;
    (void)req;
    /* a render that takes twice a turn's budget */
    uint64_t until = uv_hrtime() + 2 * HTTP_TURN_BUDGET_NS;
    while (uv_hrtime() < until) {
    }
    slow_answers++;
    http_reply_text(rep, 200, "slow\n");
}

static void cheap_route(void *ud, const struct http_request *req, struct http_reply *rep)
{
    (void)ud;
    (void)req;
    http_reply_text(rep, 200, "ok\n");
}

static void test_costly_route_waits_cheap_route_does_not(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct http_server *h = start(&loop);
    assert_int_equal(http_route(h, "/slow", slow_route, NULL), 0);
    assert_int_equal(http_route(h, "/health", cheap_route, NULL), 0);
    assert_int_equal(http_start(h), 0);
    enum { SLOW = 8 };
    int fds[SLOW + 1];
    /* one slow answer first, so the route's cost is known */
    fds[0] = connect_to(http_port(h));
    const char *slow = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(write(fds[0], slow, strlen(slow)), (ssize_t)strlen(slow));
    for (int t = 0; t < 100 && slow_answers == 0; t++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(slow_answers, 1);
    slow_answers = 0;
    /* then many at once, and a /health behind them */
    for (int i = 1; i < SLOW; i++)
        fds[i] = connect_to(http_port(h));
    fds[SLOW] = connect_to(http_port(h));
    for (int i = 1; i < SLOW; i++)
        assert_int_equal(write(fds[i], slow, strlen(slow)), (ssize_t)strlen(slow));
    const char *health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(write(fds[SLOW], health, strlen(health)), (ssize_t)strlen(health));
    int turns = 0, health_turn = -1, prev = 0;
    char buf[256];
    while ((slow_answers < SLOW - 1 || health_turn < 0) && turns < 1000) {
        uv_run(&loop, UV_RUN_NOWAIT);
        turns++;
        /* a costly answer starts a turn at most once its budget is spent:
         * with each one over the budget, at most one a turn */
        assert_true(slow_answers - prev <= 1);
        prev = slow_answers;
        if (health_turn < 0 && recv(fds[SLOW], buf, sizeof(buf), MSG_DONTWAIT) > 0)
            health_turn = turns;
    }
    assert_int_equal(slow_answers, SLOW - 1);
    /* /health never waited behind the queue of renders */
    assert_true(health_turn >= 0);
    assert_true(health_turn <= 3);
    struct http_stats st;
    http_get_stats(h, &st);
    assert_true(st.deferred > 0);
    for (int i = 0; i <= SLOW; i++)
        close(fds[i]);
    stop(&loop, h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connection_storm_accepted_a_budget_a_turn),
        cmocka_unit_test(test_costly_route_waits_cheap_route_does_not),
        cmocka_unit_test(test_hang_ups_closed_a_budget_a_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
