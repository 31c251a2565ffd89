/*
 * gossip_agent: one libgossip node on a real UDP socket, for integration tests
 * and manual experiments.
 *
 *   gossip_agent --name NAME --bind IP:PORT [--join host:port,...]
 *                [--key-file PATH] [--label LABEL] [--probe-interval-ms N]
 *                [--probe-timeout-ms N] [--gossip-interval-ms N]
 *                [--suspicion-mult N] [--pushpull-interval-ms N]
 *                [--dead-reap-ms N] [--join-interval-ms N]
 *
 * Prints to stdout, one line each, flushed:
 *   ready NAME IP:PORT
 *   event join|alive|suspect|dead|left|reap NAME IP:PORT inc=N
 * and on SIGUSR1 the member list and the drop counters:
 *   member NAME IP:PORT alive|suspect|dead|left inc=N [self]
 *   stats sent=N received=N drop_auth=N drop_nokey=N drop_malformed=N
 *   members end
 * SIGTERM or SIGINT: leaves the cluster gracefully and exits 0.
 * Without --key-file packets are not sealed (tests of the core only).
 * Exit status 2 for bad arguments, 1 for a failure to start.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "gossip/error.h"
#include "gossip/gossip.h"
#include "gossip/keyring.h"
#include "gossip/uv.h"

struct agent {
    uv_loop_t *loop;
    struct gossip_uv *g;
    struct gossip_keyring *kr;
    uv_signal_t sigterm, sigint, sigusr1;
    uv_timer_t leave_timer;
    int64_t gossip_interval_ms;
    int leaving;
};

static const char *event_name(enum gossip_event ev)
{
    switch (ev) {
    case GOSSIP_EVENT_JOIN:
        return "join";
    case GOSSIP_EVENT_SUSPECT:
        return "suspect";
    case GOSSIP_EVENT_ALIVE:
        return "alive";
    case GOSSIP_EVENT_DEAD:
        return "dead";
    case GOSSIP_EVENT_LEFT:
        return "left";
    case GOSSIP_EVENT_REAP:
        return "reap";
    case GOSSIP_EVENT_CONFLICT:
        return "conflict";
    }
    return "unknown";
}

static void on_event(void *ud, enum gossip_event ev, const struct gossip_member_info *m)
{
    (void)ud;
    char addr[GOSSIP_ADDR_STRLEN];
    if (gossip_addr_format(&m->addr, addr, sizeof(addr)) != 0)
        snprintf(addr, sizeof(addr), "?");
    printf("event %s %s %s inc=%u\n", event_name(ev), m->name, addr, (unsigned)m->incarnation);
    fflush(stdout);
}

static int print_member(void *ud, const struct gossip_member_info *m)
{
    (void)ud;
    char addr[GOSSIP_ADDR_STRLEN];
    if (gossip_addr_format(&m->addr, addr, sizeof(addr)) != 0)
        snprintf(addr, sizeof(addr), "?");
    printf("member %s %s %s inc=%u%s\n", m->name, addr, gossip_member_state_name(m->state),
           (unsigned)m->incarnation, m->is_self ? " self" : "");
    return 0;
}

static void on_sigusr1(uv_signal_t *s, int signum)
{
    struct agent *a = s->data;
    (void)signum;
    struct gossip_node *node = gossip_uv_node(a->g);
    if (node == NULL)
        return;
    gossip_node_members(node, print_member, NULL);
    struct gossip_stats st;
    gossip_node_stats(node, &st);
    printf("stats sent=%llu received=%llu drop_auth=%llu drop_nokey=%llu drop_malformed=%llu\n",
           (unsigned long long)st.packets_sent, (unsigned long long)st.packets_received,
           (unsigned long long)st.drops[GOSSIP_DROP_AUTH],
           (unsigned long long)st.drops[GOSSIP_DROP_NOKEY],
           (unsigned long long)st.drops[GOSSIP_DROP_MALFORMED]);
    printf("members end\n");
    fflush(stdout);
}

static void on_closed(void *ud)
{
    struct agent *a = ud;
    a->g = NULL;
}

static void finish(struct agent *a)
{
    gossip_uv_stop(a->g, on_closed, a);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sigusr1, NULL);
    uv_close((uv_handle_t *)&a->leave_timer, NULL);
}

static void on_leave_timer(uv_timer_t *t)
{
    finish(t->data);
}

static void on_sigterm(uv_signal_t *s, int signum)
{
    struct agent *a = s->data;
    (void)signum;
    if (a->leaving) {
        finish(a); /* second signal: stop at once */
        return;
    }
    a->leaving = 1;
    gossip_node_leave(gossip_uv_node(a->g));
    /* Give the "left" message a couple of gossip rounds to go out. */
    uv_timer_start(&a->leave_timer, on_leave_timer, (uint64_t)(2 * a->gossip_interval_ms + 50), 0);
}

static void usage(void)
{
    fprintf(stderr, "usage: gossip_agent --name NAME --bind IP:PORT [--join host:port,...]\n"
                    "  [--key-file PATH] [--label LABEL] [--probe-interval-ms N]\n"
                    "  [--probe-timeout-ms N] [--gossip-interval-ms N] [--suspicion-mult N]\n"
                    "  [--pushpull-interval-ms N] [--dead-reap-ms N] [--join-interval-ms N]\n");
    exit(2);
}

static long long num_arg(const char *flag, const char *v)
{
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || n < 0) {
        fprintf(stderr, "gossip_agent: %s needs a non-negative number, got \"%s\"\n", flag, v);
        exit(2);
    }
    return n;
}

int main(int argc, char **argv)
{
    struct gossip_config cfg;
    gossip_config_default(&cfg);
    const char *bind_s = NULL, *join = NULL, *key_file = NULL, *label = "";
    long long join_interval_ms = 1000;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(f, "--name") == 0)
            cfg.name = v;
        else if (strcmp(f, "--bind") == 0)
            bind_s = v;
        else if (strcmp(f, "--join") == 0)
            join = v;
        else if (strcmp(f, "--key-file") == 0)
            key_file = v;
        else if (strcmp(f, "--label") == 0)
            label = v;
        else if (strcmp(f, "--probe-interval-ms") == 0)
            cfg.probe_interval_ms = num_arg(f, v);
        else if (strcmp(f, "--probe-timeout-ms") == 0)
            cfg.probe_timeout_ms = num_arg(f, v);
        else if (strcmp(f, "--gossip-interval-ms") == 0)
            cfg.gossip_interval_ms = num_arg(f, v);
        else if (strcmp(f, "--suspicion-mult") == 0)
            cfg.suspicion_mult = (int)num_arg(f, v);
        else if (strcmp(f, "--pushpull-interval-ms") == 0)
            cfg.pushpull_interval_ms = num_arg(f, v);
        else if (strcmp(f, "--dead-reap-ms") == 0)
            cfg.dead_reap_ms = num_arg(f, v);
        else if (strcmp(f, "--join-interval-ms") == 0)
            join_interval_ms = num_arg(f, v);
        else
            usage();
    }
    struct gossip_addr bind_addr;
    if (cfg.name == NULL || bind_s == NULL || gossip_addr_parse(bind_s, &bind_addr) != 0)
        usage();

    static struct agent a;
    a.loop = uv_default_loop();
    a.gossip_interval_ms = cfg.gossip_interval_ms;
    if (key_file != NULL) {
        int rc = gossip_keyring_create(&a.kr, label);
        if (rc == 0)
            rc = gossip_keyring_load_file(a.kr, key_file);
        if (rc != 0) {
            fprintf(stderr, "gossip_agent: key file: %s\n",
                    a.kr != NULL && gossip_keyring_last_error(a.kr)[0] != '\0'
                        ? gossip_keyring_last_error(a.kr)
                        : gossip_strerror(rc));
            gossip_keyring_destroy(a.kr);
            return 1;
        }
        cfg.keyring = a.kr;
    }
    cfg.cb.on_event = on_event;
    cfg.cb.ud = &a;

    int rc = gossip_uv_start(a.loop, &cfg, &bind_addr, &a.g);
    if (rc != 0) {
        fprintf(stderr, "gossip_agent: cannot start on %s: %s\n", bind_s, gossip_strerror(rc));
        gossip_keyring_destroy(a.kr);
        uv_run(a.loop, UV_RUN_DEFAULT); /* completes any close */
        uv_loop_close(a.loop);
        return 1;
    }
    if (join != NULL && *join != '\0') {
        rc = gossip_uv_join_names(a.g, join, join_interval_ms);
        if (rc != 0) {
            fprintf(stderr, "gossip_agent: bad --join list \"%s\": %s\n", join,
                    gossip_strerror(rc));
            gossip_uv_stop(a.g, NULL, NULL);
            uv_run(a.loop, UV_RUN_DEFAULT);
            uv_loop_close(a.loop);
            gossip_keyring_destroy(a.kr);
            return 2;
        }
    }

    uv_signal_init(a.loop, &a.sigterm);
    uv_signal_init(a.loop, &a.sigint);
    uv_signal_init(a.loop, &a.sigusr1);
    uv_timer_init(a.loop, &a.leave_timer);
    a.sigterm.data = a.sigint.data = a.sigusr1.data = a.leave_timer.data = &a;
    uv_signal_start(&a.sigterm, on_sigterm, SIGTERM);
    uv_signal_start(&a.sigint, on_sigterm, SIGINT);
    uv_signal_start(&a.sigusr1, on_sigusr1, SIGUSR1);

    struct gossip_addr local;
    char local_s[GOSSIP_ADDR_STRLEN];
    gossip_uv_local_addr(a.g, &local);
    gossip_addr_format(&local, local_s, sizeof(local_s));
    printf("ready %s %s\n", cfg.name, local_s);
    fflush(stdout);

    uv_run(a.loop, UV_RUN_DEFAULT);
    int close_rc = uv_loop_close(a.loop);
    gossip_keyring_destroy(a.kr);
    if (close_rc != 0) {
        fprintf(stderr, "gossip_agent: loop still busy at exit\n");
        return 1;
    }
    return 0;
}
