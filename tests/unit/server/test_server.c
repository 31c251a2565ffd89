/*
 * The server's deferred replies: a command answered later (by a timer) keeps
 * its place among pipelined replies, further commands wait for it, and a
 * client that leaves (or a server that shuts down) while blocked cancels the
 * pending reply exactly once without leaking.  Pipelined commands are looked
 * at ahead (server_hint_fn) and still run once each, in order.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "server.h"

struct waiter {
    uv_timer_t timer;
    struct server_client *c;
};

static uv_loop_t loop;
static int blocked_now;
static int bigs_done;
static int cancels;
static int unblocks;

static void free_waiter(uv_handle_t *h)
{
    free(h->data);
}

static void on_cancel(struct server_client *c, void *arg)
{
    struct waiter *w = arg;
    cancels++;
    blocked_now = 0;
    uv_close((uv_handle_t *)&w->timer, free_waiter);
}

static void on_timer(uv_timer_t *t)
{
    struct waiter *w = t->data;
    resp_add_simple(server_client_out(w->c), "DONE");
    unblocks++;
    blocked_now = 0;
    server_client_unblock(w->c);
    uv_close((uv_handle_t *)t, free_waiter);
}

/* BLOCK <ms>: answers +DONE after ms milliseconds; PING; ECHO x. */
static int dispatch(void *ud, struct server_client *c, size_t argc, const char **argv,
                    const size_t *argvlen, struct resp_buf *out)
{
    if (argvlen[0] == 5 && memcmp(argv[0], "BLOCK", 5) == 0 && argc == 2) {
        struct waiter *w = calloc(1, sizeof(*w));
        assert_non_null(w);
        w->c = c;
        w->timer.data = w;
        uv_timer_init(&loop, &w->timer);
        uv_timer_start(&w->timer, on_timer, (uint64_t)strtoull(argv[1], NULL, 10), 0);
        server_client_block(c, on_cancel, w);
        blocked_now = 1;
        return SERVER_CONTINUE;
    }
    if (argvlen[0] == 6 && memcmp(argv[0], "NOWAIT", 6) == 0) {
        /* Blocks and answers at once, from inside the handler. */
        server_client_block(c, on_cancel, NULL);
        resp_add_simple(out, "NOW");
        server_client_unblock(c);
        return SERVER_CONTINUE;
    }
    if (argvlen[0] == 3 && memcmp(argv[0], "BIG", 3) == 0 && argc == 2) {
        /* A bulk reply of n bytes 'z'. */
        size_t n = (size_t)strtoull(argv[1], NULL, 10);
        char *z = malloc(n);
        assert_non_null(z);
        memset(z, 'z', n);
        resp_add_bulk(out, z, n);
        free(z);
        bigs_done++;
        return SERVER_CONTINUE;
    }
    if (argvlen[0] == 4 && memcmp(argv[0], "ECHO", 4) == 0 && argc == 2) {
        resp_add_bulk(out, argv[1], argvlen[1]);
        return SERVER_CONTINUE;
    }
    resp_add_simple(out, "PONG");
    return SERVER_CONTINUE;
}

static char sock_path[108];

static struct server *start_server_cfg(struct server_config *cfg)
{
    snprintf(sock_path, sizeof(sock_path), "/tmp/sluice-test-server-%d.sock", (int)getpid());
    unlink(sock_path);
    assert_int_equal(uv_loop_init(&loop), 0);
    cfg->socket_path = sock_path;
    cfg->socket_mode = 0600;
    struct server *s;
    assert_int_equal(server_create(&loop, cfg, dispatch, NULL, &s), 0);
    assert_int_equal(server_start(s), 0);
    cancels = unblocks = blocked_now = bigs_done = 0;
    return s;
}

static struct server *start_server_limits(size_t soft, size_t hard)
{
    struct server_config cfg = {.out_soft_limit = soft, .out_hard_limit = hard};
    return start_server_cfg(&cfg);
}

static struct server *start_server(void)
{
    return start_server_limits(0, 0);
}

static void stop_server(struct server *s)
{
    server_close(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    server_destroy(s);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_int_equal(access(sock_path, F_OK), -1); /* socket removed */
}

static int connect_client(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, sock_path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
    return fd;
}

/* Runs the loop until cond() holds; a bound on iterations catches hangs. */
static void pump_until(int (*cond)(void *), void *arg)
{
    for (int i = 0; i < 20000 && !cond(arg); i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(200);
    }
    assert_true(cond(arg));
}

struct reader {
    int fd;
    char buf[256];
    size_t len, want;
};

static int read_enough(void *arg)
{
    struct reader *r = arg;
    ssize_t n = recv(r->fd, r->buf + r->len, sizeof(r->buf) - r->len, MSG_DONTWAIT);
    if (n > 0)
        r->len += (size_t)n;
    return r->len >= r->want;
}

static int is_blocked(void *arg)
{
    return blocked_now;
}

static int one_cancel(void *arg)
{
    return cancels == 1;
}

static void test_deferred_reply_keeps_pipeline_order(void **state)
{
    struct server *s = start_server();
    int fd = connect_client();
    static const char req[] = "PING\r\nBLOCK 30\r\nECHO a\r\nBLOCK 1\r\nNOWAIT\r\nPING\r\n";
    assert_int_equal(send(fd, req, sizeof(req) - 1, 0), (ssize_t)sizeof(req) - 1);
    static const char want[] = "+PONG\r\n+DONE\r\n$1\r\na\r\n+DONE\r\n+NOW\r\n+PONG\r\n";
    struct reader r = {.fd = fd, .want = sizeof(want) - 1};
    pump_until(read_enough, &r);
    assert_int_equal(r.len, sizeof(want) - 1);
    assert_memory_equal(r.buf, want, sizeof(want) - 1);
    assert_int_equal(unblocks, 2);
    assert_int_equal(cancels, 0);

    /* The client is read from again after being unblocked. */
    assert_int_equal(send(fd, "ECHO b\r\n", 8, 0), 8);
    struct reader r2 = {.fd = fd, .want = 7};
    pump_until(read_enough, &r2);
    assert_memory_equal(r2.buf, "$1\r\nb\r\n", 7);
    close(fd);
    stop_server(s);
}

static void test_disconnect_while_blocked_cancels(void **state)
{
    struct server *s = start_server();
    int fd = connect_client();
    assert_int_equal(send(fd, "BLOCK 100000\r\nPING\r\n", 20, 0), 20);
    pump_until(is_blocked, NULL);
    close(fd);
    pump_until(one_cancel, NULL);
    assert_int_equal(unblocks, 0);
    stop_server(s);
    assert_int_equal(cancels, 1);
}

static void test_shutdown_while_blocked_cancels(void **state)
{
    struct server *s = start_server();
    int fd = connect_client();
    assert_int_equal(send(fd, "BLOCK 100000\r\n", 14, 0), 14);
    pump_until(is_blocked, NULL);
    stop_server(s);
    assert_int_equal(cancels, 1);
    assert_int_equal(unblocks, 0);
    char c;
    assert_int_equal(recv(fd, &c, 1, 0), 0); /* closed without a reply */
    close(fd);
}

static void pump(int iterations)
{
    for (int i = 0; i < iterations; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(200);
    }
}

static void test_slow_reader_paused_then_drained(void **state)
{
    /* 40 replies of 100 KB requested and not read: the server executes only
     * until about 64 KiB are unsent, then waits; once the client reads,
     * every reply arrives, in order. */
    struct server *s = start_server_limits(64 * 1024, 64 * 1024 * 1024);
    int fd = connect_client();
    for (int i = 0; i < 40; i++)
        assert_int_equal(send(fd, "BIG 100000\r\n", 12, 0), 12);
    pump(500);
    assert_true(bigs_done > 0);
    assert_true(bigs_done < 40);
    static char buf[1 << 16];
    size_t want = 40 * (size_t)(9 + 100000 + 2), got = 0;
    size_t zs = 0;
    for (int i = 0; i < 200000 && got < want; i++) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            for (ssize_t j = 0; j < n; j++)
                zs += buf[j] == 'z';
        } else {
            uv_run(&loop, UV_RUN_NOWAIT);
        }
    }
    assert_int_equal(got, want);
    assert_int_equal(zs, 40 * 100000);
    assert_int_equal(bigs_done, 40);
    close(fd);
    stop_server(s);
}

static int client_count_zero(void *arg)
{
    struct server_stats st;
    server_get_stats(arg, &st);
    return st.total_connections == 1 && st.connected_clients == 0;
}

static void test_output_past_hard_limit_disconnects(void **state)
{
    struct server *s = start_server_limits(64 * 1024, 256 * 1024);
    int fd = connect_client();
    assert_int_equal(send(fd, "BIG 4000000\r\n", 14, 0), 14);
    pump_until(client_count_zero, s);
    struct server_stats st;
    server_get_stats(s, &st);
    assert_int_equal(st.output_limit_disconnects, 1);
    close(fd);
    stop_server(s);
}

static int bigs_one(void *arg)
{
    return bigs_done == 1;
}

static int one_memory_disconnect(void *arg)
{
    struct server_stats st;
    server_get_stats(arg, &st);
    return st.client_memory_disconnects == 1;
}

static int trimmed(void *arg)
{
    struct server_stats st;
    server_get_stats(arg, &st);
    return st.memory_trims >= 1;
}

static int peer_closed(void *arg)
{
    char buf[65536];
    int fd = *(int *)arg;
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
        ;
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static void read_reply(int fd, size_t want)
{
    static char buf[1 << 16];
    size_t got = 0;
    for (int i = 0; i < 200000 && got < want; i++) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0)
            got += (size_t)n;
        else
            uv_run(&loop, UV_RUN_NOWAIT);
    }
    assert_int_equal(got, want);
}

/*
 * Past --max-client-memory the heaviest client goes, and only it: a reader
 * that stopped reading a 1.5 MB reply is disconnected, one with a smaller
 * backlog and an idle one stay; the freed memory is then trimmed.
 */
static void test_client_memory_budget_disconnects_heaviest(void **state)
{
    struct server_config cfg = {
        .out_soft_limit = 8u << 20, .out_hard_limit = 64u << 20, .max_client_memory = 1u << 20};
    struct server *s = start_server_cfg(&cfg);
    int idle = connect_client();
    int medium = connect_client();
    assert_int_equal(send(medium, "BIG 300000\r\n", 12, 0), 12);
    pump_until(bigs_one, NULL);
    pump(50);
    struct server_stats st;
    server_get_stats(s, &st);
    assert_int_equal(st.client_memory_disconnects, 0);
    assert_true(st.client_memory > 0 && st.client_memory <= cfg.max_client_memory);

    int heavy = connect_client();
    assert_int_equal(send(heavy, "BIG 1500000\r\n", 13, 0), 13);
    pump_until(one_memory_disconnect, s);
    pump_until(peer_closed, &heavy);
    server_get_stats(s, &st);
    assert_int_equal(st.connected_clients, 2);
    assert_true(st.client_memory <= cfg.max_client_memory);

    /* The others are still served, the medium one its whole reply. */
    read_reply(medium, 9 + 300000 + 2);
    assert_int_equal(send(idle, "PING\r\n", 6, 0), 6);
    struct reader r = {.fd = idle, .want = 7};
    pump_until(read_enough, &r);
    assert_memory_equal(r.buf, "+PONG\r\n", 7);
    pump_until(trimmed, s);
    close(heavy);
    close(medium);
    close(idle);
    stop_server(s);
}

static int got_pong(void *arg)
{
    struct reader *r = arg;
    return read_enough(r) && r->len >= 7;
}

/*
 * An input buffer that grew for a large request goes back to a small one
 * once the request is consumed, though a partial command follows it.
 */
static void test_input_buffer_shrinks_after_large_request(void **state)
{
    struct server_config cfg = {.max_request = 4u << 20};
    struct server *s = start_server_cfg(&cfg);
    int fd = connect_client();
    size_t big = 2000000;
    char head[64];
    int hn = snprintf(head, sizeof(head), "*2\r\n$3\r\nFOO\r\n$%zu\r\n", big);
    static const char tail[] = "\r\n*1\r\n$4\r\nPI"; /* a partial PING follows */
    char *req = malloc((size_t)hn + big + sizeof(tail));
    assert_non_null(req);
    memcpy(req, head, (size_t)hn);
    memset(req + hn, 'q', big);
    memcpy(req + (size_t)hn + big, tail, sizeof(tail) - 1);
    size_t len = (size_t)hn + big + sizeof(tail) - 1, off = 0;
    for (int i = 0; i < 100000 && off < len; i++) {
        ssize_t n = send(fd, req + off, len - off, MSG_DONTWAIT);
        if (n > 0)
            off += (size_t)n;
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    assert_int_equal(off, len);
    struct reader r = {.fd = fd, .want = 7};
    pump_until(got_pong, &r);
    assert_memory_equal(r.buf, "+PONG\r\n", 7);
    struct server_stats st;
    server_get_stats(s, &st);
    assert_true(st.client_memory < 256 * 1024);
    free(req);
    close(fd);
    stop_server(s);
}

/*
 * A client pipelining without pause is executed one read (64 KiB) a loop
 * turn, as Redis reads a client once an iteration: libuv would hand the
 * callback up to 32 reads of a busy socket in one turn.  The rest is kept
 * for the next turns (held_reads) and every command is answered, in order.
 */
static void test_one_read_a_turn_per_client(void **state)
{
    struct server *s = start_server();
    int fd = connect_client();
    static const char ping[] = "*1\r\n$4\r\nPING\r\n"; /* 14 bytes */
    enum { CMDS = 30000 };
    size_t len = CMDS * (sizeof(ping) - 1), off = 0, got = 0;
    char *req = malloc(len);
    assert_non_null(req);
    for (size_t i = 0; i < CMDS; i++)
        memcpy(req + i * (sizeof(ping) - 1), ping, sizeof(ping) - 1);
    /* as much as the socket takes before the loop runs */
    for (;;) {
        ssize_t n = send(fd, req + off, len - off, MSG_DONTWAIT);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    assert_true(off > 2 * 64 * 1024); /* more than two reads' worth waits */
    uint64_t before = 0;
    char buf[65536];
    for (int turn = 0; turn < 100000 && got < (size_t)CMDS * 7; turn++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        struct server_stats st;
        server_get_stats(s, &st);
        /* one read a turn: at most 64 KiB of 14-byte commands, and one
         * begun in the previous read */
        assert_true(st.total_commands - before <= 64 * 1024 / 14 + 1);
        before = st.total_commands;
        ssize_t n;
        while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            got += (size_t)n; /* "+PONG\r\n": 7 bytes a command */
        if (off < len) {
            n = send(fd, req + off, len - off, MSG_DONTWAIT);
            if (n > 0)
                off += (size_t)n;
        }
    }
    assert_int_equal(got, (size_t)CMDS * 7);
    struct server_stats st;
    server_get_stats(s, &st);
    assert_int_equal(st.total_commands, CMDS);
    assert_true(st.held_reads > 0);
    free(req);
    close(fd);
    stop_server(s);
}

/* ---- look-ahead ------------------------------------------------------- */

#define AHEAD_KEYS 64
static int hinted[AHEAD_KEYS][2]; /* ECHO k: stage 0 and 1 seen */
static int ran_hinted, ran_alone, hint_order_bad;

/* Records which ECHO keys were hinted; stage 1 must follow stage 0. */
static void hint(void *ud, size_t argc, const char **argv, const size_t *argvlen, int stage,
                 uint32_t *state)
{
    (void)ud;
    if (argc != 2 || argvlen[0] != 4 || memcmp(argv[0], "ECHO", 4) != 0)
        return;
    int k = atoi(argv[1]);
    if (k < 0 || k >= AHEAD_KEYS)
        return;
    if (stage == 0)
        *state = (uint32_t)k + 1;
    else if (*state != (uint32_t)k + 1 || !hinted[k][0])
        hint_order_bad++;
    hinted[k][stage]++;
}

static int ahead_dispatch(void *ud, struct server_client *c, size_t argc, const char **argv,
                          const size_t *argvlen, struct resp_buf *out)
{
    if (argc == 2 && argvlen[0] == 4 && memcmp(argv[0], "ECHO", 4) == 0) {
        int k = atoi(argv[1]);
        if (k >= 0 && k < AHEAD_KEYS) {
            if (hinted[k][0] >= 1 && hinted[k][1] >= 1)
                ran_hinted++;
            else
                ran_alone++;
        }
    }
    return dispatch(ud, c, argc, argv, argvlen, out);
}

/*
 * A pipeline of ECHOs with a blocking command, a command too long for the
 * look-ahead and a framing error in it: every command before the error is
 * answered once, in order, the error last, then the connection closes; the
 * hint saw each ECHO (both stages, in order) before it ran, but for one
 * that ran alone.
 */
static void test_lookahead_hints_and_keeps_order(void **state)
{
    (void)state;
    memset(hinted, 0, sizeof(hinted));
    ran_hinted = ran_alone = hint_order_bad = 0;
    snprintf(sock_path, sizeof(sock_path), "/tmp/sluice-test-server-%d.sock", (int)getpid());
    unlink(sock_path);
    assert_int_equal(uv_loop_init(&loop), 0);
    struct server_config cfg = {.socket_path = sock_path, .socket_mode = 0600};
    struct server *s;
    assert_int_equal(server_create(&loop, &cfg, ahead_dispatch, NULL, &s), 0);
    server_set_hint(s, hint);
    assert_int_equal(server_start(s), 0);
    cancels = unblocks = blocked_now = bigs_done = 0;

    char req[2048], want[2048];
    size_t rl = 0, wl = 0;
    for (int k = 0; k < 40; k++) {
        rl += (size_t)snprintf(req + rl, sizeof(req) - rl, "*2\r\n$4\r\nECHO\r\n$%d\r\n%d\r\n",
                               k < 10 ? 1 : 2, k);
        wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "$%d\r\n%d\r\n", k < 10 ? 1 : 2, k);
        if (k == 5) { /* blocks mid-window: the rest waits, then runs */
            rl += (size_t)snprintf(req + rl, sizeof(req) - rl, "BLOCK 5\r\n");
            wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "+DONE\r\n");
        }
        if (k == 20) { /* more arguments than the look-ahead keeps */
            rl += (size_t)snprintf(req + rl, sizeof(req) - rl, "PING 1 2 3 4 5 6 7 8 9 10\r\n");
            wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "+PONG\r\n");
        }
    }
    rl += (size_t)snprintf(req + rl, sizeof(req) - rl, "*2\r\n$x\r\nECHO 41\r\n");
    wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "-ERR Protocol error");
    int fd = connect_client();
    assert_int_equal(send(fd, req, rl, 0), (ssize_t)rl);
    char got[2048];
    size_t gl = 0;
    for (int i = 0; i < 20000; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, got + gl, sizeof(got) - gl, MSG_DONTWAIT);
        if (n == 0)
            break; /* closed after the error */
        if (n > 0)
            gl += (size_t)n;
        usleep(100);
    }
    assert_true(gl >= wl);
    assert_memory_equal(got, want, wl);
    assert_int_equal(unblocks, 1);
    assert_int_equal(hint_order_bad, 0);
    assert_int_equal(ran_hinted + ran_alone, 40);
    assert_true(ran_alone <= 2);
    close(fd);
    stop_server(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deferred_reply_keeps_pipeline_order),
        cmocka_unit_test(test_disconnect_while_blocked_cancels),
        cmocka_unit_test(test_shutdown_while_blocked_cancels),
        cmocka_unit_test(test_slow_reader_paused_then_drained),
        cmocka_unit_test(test_output_past_hard_limit_disconnects),
        cmocka_unit_test(test_client_memory_budget_disconnects_heaviest),
        cmocka_unit_test(test_input_buffer_shrinks_after_large_request),
        cmocka_unit_test(test_one_read_a_turn_per_client),
        cmocka_unit_test(test_lookahead_hints_and_keeps_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
