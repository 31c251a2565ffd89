/*
 * sluiced: the sluice daemon.  main runs its steps in order: load the config
 * file, parse the flags over it, create the limiter, start the cluster,
 * create the command layers, start the listeners (the Unix socket last),
 * run the one libuv loop until SIGINT or SIGTERM (after SIGTERM's drain
 * period, if set) and shut down: close every client, remove the socket
 * and free everything.  SIGHUP reloads the policies, the ratelimit config
 * and the cluster's keys.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <uv.h>

#include "cluster.h"
#include "cluster_flags.h"
#include "commands.h"
#include "commands_sl.h"
#include "config.h"
#include "counters.h"
#include "daemon_rls.h"
#include "limiter.h"
#include "gossip/gossip.h"
#include "log.h"
#include "file.h"
#include "http.h"
#include "commands_lease.h"
#include "http_lease.h"
#include "http_throttle.h"
#include "info.h"
#include "metrics.h"
#include "readiness.h"
#include "slots.h"
#include "reload.h"
#include "policy.h"
#include "replica.h"
#include "rls/server.h"
#include "rls/service.h"
#include "server.h"
#include "sluice/client.h"
#include "sluice/error.h"
#include "version.h"

static void sluiced__usage(FILE *f)
{
    fprintf(f,
            "Usage: sluiced [OPTIONS]\n"
            "\n"
            "sluice daemon: answers CL.THROTTLE (and a small Redis command subset) over a\n"
            "Unix socket speaking the Redis protocol.\n"
            "\n"
            "Options:\n"
            "  --socket PATH            Unix socket to listen on (default: $SLUICE_SOCKET, else\n"
            "                           /run/sluice/sluice.sock if /run/sluice exists, else\n"
            "                           $XDG_RUNTIME_DIR/sluice/sluice.sock, else\n"
            "                           /tmp/sluice-UID/sluice.sock, its directory made 0700).\n"
            "                           A stale socket file is replaced; if a live daemon\n"
            "                           answers on it, sluiced refuses to start; so it does in\n"
            "                           a directory others may write to unless it is sticky,\n"
            "                           and there if the socket found is another user's.\n"
            "  --socket-mode MODE       octal permissions of the socket file (default 0660)\n"
            "  --socket-group GROUP     group (name or number) of the socket file, so that\n"
            "                           members may connect (default: the daemon's group)\n"
            "  --max-clients N          concurrent clients; more are answered\n"
            "                           '-ERR max number of clients reached' (default 10000)\n"
            "  --max-request-bytes N    largest accepted command, framing included\n"
            "                           (default 65536); larger ones close the connection\n"
            "  --max-client-memory N    bytes all clients' buffers may hold together (queued\n"
            "                           requests, unread replies, names); past it the\n"
            "                           heaviest clients are disconnected first (default\n"
            "                           67108864, 64 MiB; 0: no limit).  Per client: queued\n"
            "                           input stops being read past N + 64 KiB with N the\n"
            "                           --max-request-bytes, replies pause it past 256 KiB\n"
            "                           and past 16 MiB disconnect it\n"
            "  --max-key-bytes N        longest key (default 512); longer keys get an error\n"
            "  --max-keys N             keys held in memory (default 4194304), counted\n"
            "                           apart for local keys (the limiter's table) and\n"
            "                           global keys (the cluster's table): each may hold\n"
            "                           up to N, so a clustered node holds up to 2 N keys.\n"
            "                           Refusals of either (--on-full deny) are counted in\n"
            "                           INFO's and /metrics' overflow_denied\n"
            "  --on-full POLICY         when --max-keys keys are all still limiting:\n"
            "                           evict (default), deny (fail closed), allow (fail open)\n"
            "  --log-level LEVEL        debug, info (default), warn, error, off\n"
            "  --http HOST:PORT         serve HTTP at HOST:PORT, e.g. 127.0.0.1:9464 or\n"
            "                           [::1]:9464: Prometheus metrics at /metrics, /health,\n"
            "                           and decisions at /v1/throttle (README, \"HTTP\");\n"
            "                           'off' (default) serves nothing.  --metrics is the\n"
            "                           same flag.  Overrides the config file's http.\n"
            "  --listen HOST:PORT       also serve the Redis protocol over TCP (off by\n"
            "                           default), for client pools that assume TCP; beyond\n"
            "                           loopback a password is required\n"
            "  --max-tcp-clients N      TCP clients at once (default 1024), apart from\n"
            "                           --max-clients, which counts Unix socket clients\n"
            "                           only; past it a newcomer closes the worst TCP\n"
            "                           client (unauthenticated first, then longest idle)\n"
            "  --tcp-idle-timeout S     close a TCP client silent for S seconds (default\n"
            "                           0: never).  Without AUTH within 10 s a TCP client\n"
            "                           is closed whenever a password is required\n"
            "  --http-max-connections N  HTTP connections at once (default 256); past it a\n"
            "                           newcomer closes the connection stalled longest\n"
            "                           (idle, or not reading its answers)\n"
            "  --http-idle-timeout S    close an HTTP connection that has not completed a\n"
            "                           request and received its answer within S seconds\n"
            "                           (default 10)\n"
            "  --requirepass-file FILE  the password TCP clients must AUTH with (its first\n"
            "                           line); Unix socket clients need none\n"
            "  --admin-commands on|off  off: SL.RELOAD answers an error (SIGHUP still\n"
            "                           reloads); default on.  Reloads read the file only\n"
            "                           when it changed, so repeated ones cost a stat\n"
            "  --http-deny-status N     status of a refused /v1/throttle: 429 (default) or\n"
            "                           403 (nginx auth_request treats others as errors)\n"
            "  --http-decisions on|off|HOST:PORT  where /v1/throttle is served: on the\n"
            "                           --http listener (on, the default), nowhere (off),\n"
            "                           or on a listener of its own, so /metrics and\n"
            "                           /health can be exposed without letting their\n"
            "                           readers spend keys\n"
            "  --http-trust-headers on|off  on: /v1/throttle also reads its parameters\n"
            "                           from X-Sluice-* request headers; off (default)\n"
            "                           ignores them, since a proxy forwards its client's\n"
            "                           headers and a client could choose its own key or cost\n"
            "  --grpc HOST:PORT         serve Envoy's rate limit service (gRPC v3,\n"
            "                           envoy.service.ratelimit.v3.RateLimitService) over\n"
            "                           HTTP/2 cleartext; 'off' (default) serves nothing\n"
            "  --grpc-max-connections N  gRPC connections at once (default 1024); past it\n"
            "                           a newcomer closes the worst one: silent (no HTTP/2\n"
            "                           preface) first, then the longest idle.  A\n"
            "                           connection silent 10 s after connecting is closed\n"
            "  --grpc-idle-timeout S    close a gRPC connection with no call for S seconds\n"
            "                           (GOAWAY; default 0: never, as Envoy keeps them)\n"
            "  --ratelimit-config DIR   envoyproxy/ratelimit YAML files (*.yaml, *.yml) the\n"
            "                           service reads as is; SIGHUP re-reads them\n"
            "  --ratelimit-algorithm A  calendar (default: fixed windows aligned to the wall\n"
            "                           clock, as envoyproxy/ratelimit's) or gcra,\n"
            "                           token-bucket, fixed-window, sliding-window,\n"
            "                           sliding-log\n"
            "  --ratelimit-headers      add RateLimit-Limit, -Remaining and -Reset to the\n"
            "                           service's answers (LIMIT_RESPONSE_HEADERS_ENABLED)\n"
            "  --shutdown-drain S       on SIGTERM, drain for S seconds (or a duration:\n"
            "                           5s, 500ms; at most 1h) before exiting: /ready, the\n"
            "                           gRPC health service (Check and Watch) and INFO's\n"
            "                           cluster_state say not ready at once while every\n"
            "                           listener still answers; a second SIGTERM or a\n"
            "                           SIGINT exits at once.  Default 0: exit at once\n"
            "  --config FILE            read the configuration (deploy/sluice.conf documents\n"
            "                           it): its [sluiced] settings, named policies and\n"
            "                           cluster; flags given here override the file.  An\n"
            "                           invalid file stops sluiced (exit 2) naming the line.\n"
            "  --version                print the version and exit\n"
            "  --help                   print this help and exit\n"
            "\n"
            "Signals: SIGINT and SIGTERM shut down cleanly and remove the socket (SIGTERM\n"
            "after --shutdown-drain, if set).  SIGHUP reloads the policies from --config\n"
            "FILE (a bad file keeps the running ones and logs why); so does `sluicectl\n"
            "reload`.  SIGHUP also re-reads the cluster key file, so keys rotate without\n"
            "a restart (install, use, remove).\n");
    cluster_flags_usage(f);
}

/* Parses a decimal size in [min, max]; returns 0 or -1. */
static int sluiced__parse_size(const char *s, unsigned long long min, unsigned long long max,
                               unsigned long long *out)
{
    if (s == NULL || *s == '\0' || *s == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Drained keys are freed on use too; this timer frees them when traffic
 * stops, so memory follows the number of keys actually being limited. */
#define MAINTAIN_INTERVAL_MS 100
#define MAINTAIN_BUDGET      1024

/* Every module's stats struct, read once per scrape or INFO listeners. */
struct daemon_counters {
    struct limiter_stats lim;
    struct server_stats srv;
    struct http_stats http;
    struct daemon_rls_stats rls;
    struct commands_lease_stats lease_st;
    struct slots_stats slots;
    struct commands_sl_stats sl;
    struct gossip_stats gossip;
    struct replica_stats replica;
    struct cluster_stats cluster;
    struct metrics_keyed rls_keys[RLS_SERVICE_MAX_STATS + 1];
};

struct daemon {
    uv_loop_t loop;
    struct reload reload; /* the config file's policies for SL.RELOAD and SIGHUP */
    uv_signal_t sigint, sigterm, sighup;
    uv_timer_t maintain;
    uv_timer_t drain;  /* SIGTERM's drain period, then the shutdown */
    uint64_t drain_ms; /* --shutdown-drain; 0: SIGTERM shuts down at once */
    int draining;      /* SIGTERM came: not ready, still answering */
    struct commands_sl *sl;
    struct server *srv;
    struct commands *cmds;
    struct limiter *lim;
    struct cluster *cluster;        /* NULL when not clustered */
    struct http_server *http;       /* NULL when --http is off */
    struct metrics *metrics;        /* its /metrics and /health */
    struct http_server *dhttp;      /* --http-decisions HOST:PORT, else NULL */
    struct http_throttle *throttle; /* /v1/throttle, on http or dhttp (NULL: off) */
    struct http_lease *lease;       /* /v1/lease, beside /v1/throttle */
    struct daemon_rls *rls;         /* NULL when neither --grpc nor --ratelimit-config */
    /* --ratelimit-config's directory, watched: a change reloads it */
    uv_fs_event_t rls_watch;
    uv_timer_t rls_settle;
    const char *rls_dir;           /* NULL: not watched */
    struct readiness *ready;       /* /ready and INFO cluster_state */
    struct daemon_counters scrape; /* the stats a scrape's sections point at */
};

static int sluiced__collect_member(void *ud, const struct gossip_member_info *m)
{
    struct metrics_snapshot *s = ud;
    if ((unsigned)m->state < 4)
        s->members[m->state].value++;
    return 0;
}

/* The network listeners' counters: TCP RESP, HTTP, gRPC (zero when off). */
static void sluiced__listener_stats(struct daemon *d, struct daemon_counters *x)
{
    memset(&x->srv, 0, sizeof(x->srv));
    memset(&x->http, 0, sizeof(x->http));
    if (d->srv != NULL)
        server_get_stats(d->srv, &x->srv);
    /* Both HTTP listeners' crowds together: one set of counters. */
    struct http_server *hs_list[2] = {d->http, d->dhttp};
    for (int i = 0; i < 2; i++) {
        if (hs_list[i] == NULL)
            continue;
        struct http_stats hs;
        http_get_stats(hs_list[i], &hs);
        counter_table_add(&http_counters, &x->http, &hs);
    }
    daemon_rls_get_stats(d->rls, &x->rls);
}

/* INFO listeners: the same tables as /metrics' tcp_*, http_* and rls_*. */
static void sluiced__listeners_info(void *ud, struct resp_buf *t)
{
    struct daemon *d = ud;
    struct daemon_counters x;
    sluiced__listener_stats(d, &x);
    info_counters(t, &server_tcp_counters, &x.srv);
    info_counters(t, &http_counters, &x.http);
    info_counters(t, &daemon_rls_counters, &x.rls);
}

/* Fills a scrape from every module's counters (metrics.c knows none). */
static void sluiced__collect(void *ud, struct metrics_snapshot *s)
{
    struct daemon *d = ud;
    struct daemon_counters *x = &d->scrape;
    sluiced__listener_stats(d, x);
    limiter_get_stats(d->lim, &x->lim);
    commands_sl_get_stats(d->sl, &x->sl);
    metrics_snapshot_add(s, 0, &limiter_counters, &x->lim);
    metrics_snapshot_add(s, 0, &server_client_counters, &x->srv);
    metrics_snapshot_add(s, 0, &server_command_counters, &x->srv);
    metrics_snapshot_add(s, 0, &server_tcp_counters, &x->srv);
    metrics_snapshot_add(s, 0, &http_counters, &x->http);
    metrics_snapshot_add(s, 0, &commands_sl_counters, &x->sl);
    metrics_snapshot_add(s, 0, &daemon_rls_counters, &x->rls);
    s->nrls_keys = daemon_rls_descriptor_stats(d->rls, x->rls_keys,
                                               sizeof(x->rls_keys) / sizeof(x->rls_keys[0]));
    s->rls_keys = x->rls_keys;
    /* The set is retained by the limiter until the next reload, which
     * cannot happen while this scrape renders (one loop thread). */
    const struct policy_set *set = limiter_policies(d->lim);
    size_t np = policy_set_count(set);
    for (size_t i = 0; i < np; i++) {
        const struct policy *p = policy_set_at(set, i);
        size_t slot = i < METRICS_MAX_POLICIES ? i : METRICS_MAX_POLICIES;
        if (i <= METRICS_MAX_POLICIES)
            s->by_policy[slot].policy = i < METRICS_MAX_POLICIES ? p->name : "_other";
        s->by_policy[slot].decisions += p->counts->decisions;
        s->by_policy[slot].limited += p->counts->limited;
    }
    s->npolicy = np < METRICS_MAX_POLICIES + 1 ? np : METRICS_MAX_POLICIES + 1;
    commands_get_latency(d->cmds, &s->latency);
    server_get_loop_turns(d->srv, &s->loop_turns);
    x->lease_st = (struct commands_lease_stats){0};
    if (commands_sl_leases(d->sl) != NULL)
        commands_lease_get_stats(commands_sl_leases(d->sl), &x->lease_st);
    metrics_snapshot_add(s, 0, &commands_lease_counters, &x->lease_st);
    s->ready = readiness_ready(d->ready);
    struct gossip_node *g = cluster_gossip(d->cluster);
    if (g != NULL) {
        s->clustered = 1;
        for (int i = 0; i < 4; i++)
            s->members[i].label = gossip_member_state_name((enum gossip_member_state)i);
        s->nmembers = 4;
        gossip_node_members(g, sluiced__collect_member, s);
        gossip_node_stats(g, &x->gossip);
        for (int i = 0; i < GOSSIP_DROP_MAX_ && i < METRICS_MAX_LABELS; i++) {
            s->drops[i].label = gossip_drop_name(i);
            s->drops[i].value = x->gossip.drops[i];
            s->ndrops++;
        }
        metrics_snapshot_add(s, 1, &counters_gossip, &x->gossip);
        cluster_get_stats(d->cluster, &x->cluster);
        metrics_snapshot_add(s, 1, &cluster_counters, &x->cluster);
    }
    if (cluster_slots(d->cluster) != NULL) {
        slots_get_stats(cluster_slots(d->cluster), &x->slots);
        metrics_snapshot_add(s, 1, &slots_counters, &x->slots);
    }
    struct replica *r = cluster_replica(d->cluster);
    if (r != NULL) {
        replica_get_stats(r, &x->replica);
        metrics_snapshot_add(s, 1, &counters_replica, &x->replica);
        s->synced = replica_synced(r) ? 1 : 0;
    }
}

/* A key a reload turned global carries what it used as a local key (the
 * cluster's replica asks once, as it creates the key). */
static int64_t sluiced__carry(void *ud, const char *key, size_t klen, const struct algo_params *p)
{
    return limiter_used(ud, key, klen, p);
}

static void sluiced__on_maintain(uv_timer_t *t)
{
    struct daemon *d = t->data;
    limiter_maintain(d->lim, (int64_t)uv_hrtime(), MAINTAIN_BUDGET);
    readiness_tick(d->ready, (int64_t)uv_hrtime());
}

/* GET /ready: 200 "ready" when readiness_ready, else 503 with the reason.
 * /health stays liveness: it answers while the event loop runs. */
static void sluiced__on_ready(void *ud, const struct http_request *req, struct http_reply *rep)
{
    struct daemon *d = ud;
    char text[320];
    (void)req;
    readiness_tick(d->ready, (int64_t)uv_hrtime());
    if (readiness_ready(d->ready)) {
        http_reply_text(rep, 200, "ready\n");
        return;
    }
    snprintf(text, sizeof(text), "not ready: %s\n", readiness_reason(d->ready));
    http_reply_text(rep, 503, text);
}

/* Every client is a file descriptor: raise the soft limit to the hard one,
 * and say so when even that cannot hold --max-clients plus the daemon's own
 * descriptors (a client past it would be reset by accept, unexplained). */
#define DAEMON_OWN_FDS 64
static void sluiced__raise_nofile(size_t max_clients)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)(max_clients + DAEMON_OWN_FDS))
        log_warn("the file descriptor limit (%llu) is below --max-clients (%zu) plus %d: raise "
                 "it (ulimit -n, LimitNOFILE=) or lower --max-clients",
                 (unsigned long long)rl.rlim_cur, max_clients, DAEMON_OWN_FDS);
}

/* Closes every handle; the loop then ends on its own. */
static void sluiced__shutdown(struct daemon *d)
{
    server_close(d->srv);
    http_close(d->http);
    http_close(d->dhttp);
    daemon_rls_close(d->rls);
    commands_sl_close(d->sl); /* after server_close has cancelled the waiters' clients */
    uv_close((uv_handle_t *)&d->sighup, NULL);
    if (d->rls_dir != NULL) {
        uv_close((uv_handle_t *)&d->rls_watch, NULL);
        uv_close((uv_handle_t *)&d->rls_settle, NULL);
    }
    cluster_stop(d->cluster, NULL, NULL);
    uv_close((uv_handle_t *)&d->maintain, NULL);
    uv_close((uv_handle_t *)&d->drain, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
}

static void sluiced__on_drained(uv_timer_t *t)
{
    struct daemon *d = t->data;
    log_info("drain period over, shutting down");
    sluiced__shutdown(d);
}

/*
 * SIGTERM with a drain period: the node says it is not ready (/ready 503,
 * gRPC health NOT_SERVING, open Watch streams told at once) so that
 * Kubernetes and Envoy stop sending it work, while every listener keeps
 * answering for drain_ms; then the shutdown.  Without one, and for SIGINT
 * (a person at a terminal) or a second signal, the shutdown is at once.
 */
static void sluiced__on_signal(uv_signal_t *h, int signum)
{
    struct daemon *d = h->data;
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
    if (d->draining) {
        log_info("received %s while draining, shutting down now", name);
        sluiced__shutdown(d);
        return;
    }
    if (signum == SIGTERM && d->drain_ms > 0) {
        d->draining = 1;
        readiness_set_draining(d->ready);
        daemon_rls_health_changed(d->rls);
        log_info("received SIGTERM, draining for %llu ms: not ready (/ready 503, gRPC health "
                 "NOT_SERVING) while still answering; a second SIGTERM or a SIGINT stops at once",
                 (unsigned long long)d->drain_ms);
        uv_timer_start(&d->drain, sluiced__on_drained, d->drain_ms, 0);
        return;
    }
    log_info("received %s, shutting down", name);
    sluiced__shutdown(d);
}

/* SIGHUP: reload the policies; a bad file keeps the running ones (the
 * reload logs why and counts reload_failures). */
static void sluiced__on_sighup(uv_signal_t *h, int signum)
{
    struct daemon *d = h->data;
    char err[512];
    (void)signum;
    log_info("received SIGHUP, reloading");
    /* Off the loop (the file may be large); logged when applied. */
    if (reload_start(&d->reload, NULL) < 0)
        (void)reload_now(&d->reload, err, sizeof(err));
    if (daemon_rls_reload(d->rls, err, sizeof(err)) < 0)
        log_error("ratelimit: config not reloaded, keeping the one in use: %s", err);
    /* Key rotation: a bad key file keeps the keys in use. */
    if (cluster_reload_keys(d->cluster, err, sizeof(err)) < 0)
        log_error("cluster: key file not reloaded, keeping the keys in use: %s", err);
}

/*
 * envoyproxy/ratelimit reloads its YAML files when their directory changes
 * (a file added, changed or removed; a Kubernetes ConfigMap update swaps a
 * symlink there), without a signal; so does sluiced.  Changes come in
 * bursts (an editor's temporary file, then a rename), so the reload waits
 * until the directory has been quiet for RLS_WATCH_SETTLE_MS.  A bad file
 * keeps the config in use, as on SIGHUP.
 */
#define RLS_WATCH_SETTLE_MS 300

static void sluiced__on_rls_settled(uv_timer_t *t)
{
    struct daemon *d = t->data;
    char err[512];
    log_info("ratelimit: %s changed, reloading", d->rls_dir);
    if (daemon_rls_reload(d->rls, err, sizeof(err)) < 0)
        log_error("ratelimit: config not reloaded, keeping the one in use: %s", err);
}

static void sluiced__on_rls_dir_event(uv_fs_event_t *h, const char *name, int events, int status)
{
    struct daemon *d = h->data;
    (void)name;
    (void)events;
    if (status < 0)
        return;
    uv_timer_start(&d->rls_settle, sluiced__on_rls_settled, RLS_WATCH_SETTLE_MS, 0);
}

/* Starts watching dir; a failure (no inotify, too many watches) is logged
 * and leaves SIGHUP as the way to reload. */
static void sluiced__watch_rls_dir(struct daemon *d, const char *dir)
{
    uv_fs_event_init(&d->loop, &d->rls_watch);
    uv_timer_init(&d->loop, &d->rls_settle);
    d->rls_watch.data = d->rls_settle.data = d;
    d->rls_dir = dir;
    int rc = uv_fs_event_start(&d->rls_watch, sluiced__on_rls_dir_event, dir, 0);
    if (rc < 0)
        log_warn("ratelimit: cannot watch %s (%s): reload it with SIGHUP", dir, uv_strerror(rc));
}

/* Finds --config FILE / --config=FILE before the other flags are parsed,
 * so that the file gives defaults and the flags override them. */
static const char *sluiced__find_config_flag(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    return path;
}

/* The configuration file, kept until sluiced__shutdown_free (its strings are
 * used as flag values). */
static struct config sluiced__file_cfg;

enum {
    OPT_CONFIG = 200,
    OPT_SOCKET = 256,
    OPT_SOCKET_MODE,
    OPT_SOCKET_GROUP,
    OPT_MAX_CLIENTS,
    OPT_MAX_REQUEST,
    OPT_MAX_CLIENT_MEMORY,
    OPT_MAX_KEY,
    OPT_MAX_KEYS,
    OPT_ON_FULL,
    OPT_LOG_LEVEL,
    OPT_METRICS,
    OPT_HTTP_DENY,
    OPT_HTTP_TRUST,
    OPT_HTTP_DECISIONS,
    OPT_ADMIN,
    OPT_LISTEN,
    OPT_MAX_TCP_CLIENTS,
    OPT_TCP_IDLE,
    OPT_HTTP_MAX_CONNS,
    OPT_HTTP_IDLE,
    OPT_GRPC_MAX_CONNS,
    OPT_GRPC_IDLE,
    OPT_REQUIREPASS_FILE,
    OPT_GRPC,
    OPT_RL_CONFIG,
    OPT_RL_ALGORITHM,
    OPT_RL_HEADERS,
    OPT_SHUTDOWN_DRAIN,
    OPT_VERSION,
    OPT_HELP,
};

/* The directory of a default socket path: created 0700 when missing (not
 * /run/sluice, which a system set-up provides); refused, with a message on
 * stderr, when it exists but belongs to another user or others can write
 * to it.  0 or -1. */
static int sluiced__private_dir(const char *socket_path)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof(dir), "%s", socket_path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir || strncmp(dir, "/run/sluice/", 12) == 0)
        return 0;
    *slash = '\0';
    if (strcmp(dir, "/run/sluice") == 0)
        return 0;
    const char *named = getenv("SLUICE_SOCKET");
    if (named != NULL && named[0] != '\0')
        return 0; /* named by the user: the server's checks apply */
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "sluiced: cannot create the socket directory %s: %s\n", dir,
                strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        fprintf(stderr,
                "sluiced: the socket directory %s is not a private directory of this user "
                "(another user made it first?); pass --socket PATH\n",
                dir);
        return -1;
    }
    return 0;
}

/* What the config file and the flags decide, gathered before anything is
 * created; the steps of main read it, and the shutdown frees what it owns
 * (pass_buf, clopt's strings, policies until the limiter takes them). */
struct daemon_options {
    struct server_config scfg;
    char *pass_buf; /* --requirepass-file's password; lives as long as the daemon */
    struct commands_config ccfg;
    struct limiter_config lcfg;
    const char *socket_path;
    const char *metrics_addr; /* --http; NULL: off */
    /* --http-decisions: "on" (on the --http listener), "off", or an address */
    const char *decisions;
    struct http_throttle_config htcfg;
    struct daemon_rls_options rlsopt;
    struct http_config hcfg;
    uint64_t drain_ms; /* --shutdown-drain */
    struct cluster_options clopt;
    const char *config_path;     /* --config; NULL: none */
    struct policy_set *policies; /* the file's policies, until the limiter takes them */
    struct reload reload;        /* copied into the daemon once it exists */
};

/* sluiced__parse_options' answer when the daemon is to go on starting. */
#define DAEMON_GO_ON (-1)

static const struct option sluiced__long_options[] = {
    {"config", required_argument, NULL, OPT_CONFIG},
    {"socket", required_argument, NULL, OPT_SOCKET},
    {"socket-mode", required_argument, NULL, OPT_SOCKET_MODE},
    {"socket-group", required_argument, NULL, OPT_SOCKET_GROUP},
    {"max-clients", required_argument, NULL, OPT_MAX_CLIENTS},
    {"max-request-bytes", required_argument, NULL, OPT_MAX_REQUEST},
    {"max-client-memory", required_argument, NULL, OPT_MAX_CLIENT_MEMORY},
    {"max-key-bytes", required_argument, NULL, OPT_MAX_KEY},
    {"max-keys", required_argument, NULL, OPT_MAX_KEYS},
    {"on-full", required_argument, NULL, OPT_ON_FULL},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"http", required_argument, NULL, OPT_METRICS},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"http-deny-status", required_argument, NULL, OPT_HTTP_DENY},
    {"http-trust-headers", required_argument, NULL, OPT_HTTP_TRUST},
    {"http-decisions", required_argument, NULL, OPT_HTTP_DECISIONS},
    {"admin-commands", required_argument, NULL, OPT_ADMIN},
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"max-tcp-clients", required_argument, NULL, OPT_MAX_TCP_CLIENTS},
    {"tcp-idle-timeout", required_argument, NULL, OPT_TCP_IDLE},
    {"http-max-connections", required_argument, NULL, OPT_HTTP_MAX_CONNS},
    {"http-idle-timeout", required_argument, NULL, OPT_HTTP_IDLE},
    {"grpc-max-connections", required_argument, NULL, OPT_GRPC_MAX_CONNS},
    {"grpc-idle-timeout", required_argument, NULL, OPT_GRPC_IDLE},
    {"requirepass-file", required_argument, NULL, OPT_REQUIREPASS_FILE},
    {"grpc", required_argument, NULL, OPT_GRPC},
    {"ratelimit-config", required_argument, NULL, OPT_RL_CONFIG},
    {"ratelimit-algorithm", required_argument, NULL, OPT_RL_ALGORITHM},
    {"ratelimit-headers", no_argument, NULL, OPT_RL_HEADERS},
    {"shutdown-drain", required_argument, NULL, OPT_SHUTDOWN_DRAIN},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, OPT_HELP},
    CLUSTER_FLAGS_LONG_OPTIONS,
    {NULL, 0, NULL, 0},
};

/* Step 1, load the config file: finds --config among the flags and, when
 * one is named, reads it and builds its policies; its [sluiced] section
 * gives the defaults the flags then override.  Fails with 2 (the exit
 * status), the reason on stderr, when the file cannot be read or parsed or
 * its policies cannot be built; 0 otherwise, with or without a file. */
static int sluiced__load_config(struct daemon_options *o, int argc, char **argv)
{
    o->scfg.socket_mode = 0660;
    o->lcfg.max_keys = 0;
    o->lcfg.overflow = LIMITER_OVERFLOW_EVICT;
    o->decisions = "on";
    cluster_options_init(&o->clopt);
    o->config_path = sluiced__find_config_flag(argc, argv);
    reload_init(&o->reload, o->config_path);
    if (o->config_path == NULL)
        return 0;
    char cerr[512];
    struct stat cst;
    if (config_load_file(o->config_path, &sluiced__file_cfg, &cst, cerr, sizeof(cerr)) < 0) {
        fprintf(stderr, "sluiced: %s\n", cerr);
        return 2;
    }
    reload_loaded(&o->reload, &cst);
    if (policy_set_build(sluiced__file_cfg.policies, sluiced__file_cfg.npolicies, &o->policies) <
        0) {
        fprintf(stderr, "sluiced: %s: cannot build the policies\n", o->config_path);
        return 2;
    }
    /* [sluiced] gives the defaults the flags (sluiced__parse_options) override. */
    o->socket_path = sluiced__file_cfg.socket;
    o->scfg.socket_mode = sluiced__file_cfg.socket_mode;
    o->scfg.max_clients = sluiced__file_cfg.max_clients;
    o->scfg.max_client_memory = sluiced__file_cfg.max_client_memory == 0
                                    ? SERVER_CLIENT_MEMORY_UNLIMITED
                                    : (size_t)sluiced__file_cfg.max_client_memory;
    o->lcfg.max_keys = (size_t)sluiced__file_cfg.max_keys;
    o->lcfg.overflow = (enum limiter_overflow)sluiced__file_cfg.on_full;
    log_set_level((enum log_level)sluiced__file_cfg.log_level);
    o->metrics_addr = sluiced__file_cfg.metrics;
    o->htcfg.deny_status = sluiced__file_cfg.http_deny_status;
    o->htcfg.trust_headers = sluiced__file_cfg.http_trust_headers;
    if (sluiced__file_cfg.http_decisions != NULL)
        o->decisions = sluiced__file_cfg.http_decisions;
    o->ccfg.admin_off = sluiced__file_cfg.admin_off;
    o->scfg.listen = sluiced__file_cfg.listen;
    o->ccfg.requirepass = sluiced__file_cfg.requirepass;
    o->rlsopt.grpc = sluiced__file_cfg.grpc;
    o->rlsopt.config_dir = sluiced__file_cfg.ratelimit_config;
    o->rlsopt.algorithm = sluiced__file_cfg.ratelimit_algorithm;
    o->rlsopt.headers = sluiced__file_cfg.ratelimit_headers;
    o->scfg.max_tcp_clients = sluiced__file_cfg.max_tcp_clients;
    o->scfg.tcp_idle_timeout_ms = sluiced__file_cfg.tcp_idle_timeout_ms;
    o->hcfg.max_conns = sluiced__file_cfg.http_max_connections;
    o->hcfg.idle_timeout_ms = sluiced__file_cfg.http_idle_timeout_ms;
    o->rlsopt.max_connections = sluiced__file_cfg.grpc_max_connections;
    o->rlsopt.idle_timeout_ms = sluiced__file_cfg.grpc_idle_timeout_ms;
    o->drain_ms = sluiced__file_cfg.shutdown_drain_ms;
    return 0;
}

/* Step 2, parse the options: every flag over the file's defaults, then the
 * file's [cluster] section under the cluster flags, then the default socket
 * path (its directory made private).  DAEMON_GO_ON to start; otherwise the
 * exit status: 0 after --version or --help, 2 for a bad flag or value (the
 * reason on stderr), an unusable default socket directory or no memory. */
static int sluiced__parse_options(struct daemon_options *o, int argc, char **argv)
{
    int opt;
    unsigned long long v;
    while ((opt = getopt_long(argc, argv, "h", sluiced__long_options, NULL)) != -1) {
        switch (opt) {
        case OPT_CONFIG:
            break; /* read by sluiced__load_config */
        case OPT_SOCKET:
            o->socket_path = optarg;
            break;
        case OPT_SOCKET_MODE: {
            char *end;
            errno = 0;
            unsigned long m = strtoul(optarg, &end, 8);
            if (errno != 0 || *end != '\0' || *optarg == '\0' || m > 0777) {
                fprintf(stderr, "sluiced: --socket-mode: '%s' is not an octal mode like 0660\n",
                        optarg);
                return 2;
            }
            o->scfg.socket_mode = (unsigned)m;
            break;
        }
        case OPT_SOCKET_GROUP: {
            const struct group *gr = getgrnam(optarg);
            if (gr != NULL) {
                o->scfg.socket_gid = (unsigned)gr->gr_gid;
            } else if (sluiced__parse_size(optarg, 0, UINT32_MAX - 1, &v) == 0) {
                o->scfg.socket_gid = (unsigned)v;
            } else {
                fprintf(stderr, "sluiced: --socket-group: no group named '%s'\n", optarg);
                return 2;
            }
            o->scfg.set_socket_gid = 1;
            break;
        }
        case OPT_MAX_CLIENTS:
            if (sluiced__parse_size(optarg, 1, 1000000, &v) < 0) {
                fprintf(stderr, "sluiced: --max-clients: expected 1..1000000, got '%s'\n", optarg);
                return 2;
            }
            o->scfg.max_clients = (size_t)v;
            break;
        case OPT_MAX_TCP_CLIENTS:
            if (sluiced__parse_size(optarg, 1, 1000000, &v) < 0) {
                fprintf(stderr, "sluiced: --max-tcp-clients: expected 1..1000000, got '%s'\n",
                        optarg);
                return 2;
            }
            o->scfg.max_tcp_clients = (size_t)v;
            break;
        case OPT_TCP_IDLE:
            if (sluiced__parse_size(optarg, 0, 86400 * 365, &v) < 0) {
                fprintf(stderr, "sluiced: --tcp-idle-timeout: expected seconds, got '%s'\n",
                        optarg);
                return 2;
            }
            o->scfg.tcp_idle_timeout_ms = (uint64_t)v * 1000;
            break;
        case OPT_HTTP_MAX_CONNS:
        case OPT_GRPC_MAX_CONNS:
            if (sluiced__parse_size(optarg, 1, 1000000, &v) < 0) {
                fprintf(stderr, "sluiced: --%s-max-connections: expected 1..1000000, got '%s'\n",
                        opt == OPT_HTTP_MAX_CONNS ? "http" : "grpc", optarg);
                return 2;
            }
            if (opt == OPT_HTTP_MAX_CONNS)
                o->hcfg.max_conns = (size_t)v;
            else
                o->rlsopt.max_connections = (size_t)v;
            break;
        case OPT_HTTP_IDLE:
            if (sluiced__parse_size(optarg, 1, 86400, &v) < 0) {
                fprintf(stderr,
                        "sluiced: --http-idle-timeout: expected 1..86400 seconds, got '%s'\n",
                        optarg);
                return 2;
            }
            o->hcfg.idle_timeout_ms = (uint64_t)v * 1000;
            break;
        case OPT_SHUTDOWN_DRAIN: {
            int64_t ns;
            if (sluiced__parse_size(optarg, 0, 3600, &v) == 0) {
                ns = (int64_t)v * 1000000000;
            } else if (config_parse_duration(optarg, &ns) < 0 || ns > INT64_C(3600) * 1000000000) {
                fprintf(stderr,
                        "sluiced: --shutdown-drain: expected seconds or a duration up to 1h, "
                        "like 5s or 500ms, got '%s'\n",
                        optarg);
                return 2;
            }
            o->drain_ms = (uint64_t)(ns / 1000000);
            break;
        }
        case OPT_GRPC_IDLE:
            if (sluiced__parse_size(optarg, 0, 86400 * 365, &v) < 0) {
                fprintf(stderr, "sluiced: --grpc-idle-timeout: expected seconds, got '%s'\n",
                        optarg);
                return 2;
            }
            o->rlsopt.idle_timeout_ms = (uint64_t)v * 1000;
            break;
        case OPT_MAX_REQUEST:
            if (sluiced__parse_size(optarg, 64, 512ull * 1024 * 1024, &v) < 0) {
                fprintf(stderr, "sluiced: --max-request-bytes: expected 64..536870912, got '%s'\n",
                        optarg);
                return 2;
            }
            o->scfg.max_request = (size_t)v;
            break;
        case OPT_MAX_CLIENT_MEMORY:
            if (sluiced__parse_size(optarg, 0, (unsigned long long)SIZE_MAX / 2, &v) < 0 ||
                (v != 0 && v < 1024 * 1024)) {
                fprintf(stderr,
                        "sluiced: --max-client-memory: expected bytes, at least 1048576, or 0 "
                        "(no limit), got '%s'\n",
                        optarg);
                return 2;
            }
            o->scfg.max_client_memory = v == 0 ? SERVER_CLIENT_MEMORY_UNLIMITED : (size_t)v;
            break;
        case OPT_MAX_KEY:
            if (sluiced__parse_size(optarg, 1, 1024 * 1024, &v) < 0) {
                fprintf(stderr, "sluiced: --max-key-bytes: expected 1..1048576, got '%s'\n",
                        optarg);
                return 2;
            }
            o->ccfg.max_key_bytes = (size_t)v;
            break;
        case OPT_MAX_KEYS:
            if (sluiced__parse_size(optarg, 1, (unsigned long long)SIZE_MAX / 2, &v) < 0) {
                fprintf(stderr, "sluiced: --max-keys: expected a positive count, got '%s'\n",
                        optarg);
                return 2;
            }
            o->lcfg.max_keys = (size_t)v;
            break;
        case OPT_ON_FULL:
            if (strcmp(optarg, "evict") == 0) {
                o->lcfg.overflow = LIMITER_OVERFLOW_EVICT;
            } else if (strcmp(optarg, "deny") == 0) {
                o->lcfg.overflow = LIMITER_OVERFLOW_DENY;
            } else if (strcmp(optarg, "allow") == 0) {
                o->lcfg.overflow = LIMITER_OVERFLOW_ALLOW;
            } else {
                fprintf(stderr, "sluiced: --on-full: expected evict, deny or allow, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case OPT_LOG_LEVEL: {
            enum log_level lvl;
            if (log_parse_level(optarg, &lvl) < 0) {
                fprintf(stderr,
                        "sluiced: --log-level: expected debug, info, warn, error or off, got "
                        "'%s'\n",
                        optarg);
                return 2;
            }
            log_set_level(lvl);
            break;
        }
        case OPT_METRICS:
            o->metrics_addr = strcmp(optarg, "off") == 0 ? NULL : optarg;
            break;
        case OPT_LISTEN:
            o->scfg.listen = strcmp(optarg, "off") == 0 ? NULL : optarg;
            break;
        case OPT_REQUIREPASS_FILE: {
            char *buf, perr[300];
            size_t n;
            if (file_read_regular(optarg, 4096, &buf, &n, NULL, perr, sizeof(perr)) < 0) {
                fprintf(stderr, "sluiced: --requirepass-file: %s\n", perr);
                return 2;
            }
            /* The first line is the password (the README says so); an empty
             * one, or one a NUL cuts short, would turn AUTH off while the
             * log says it is required: refuse to start instead. */
            size_t line = 0;
            while (line < n && buf[line] != '\n' && buf[line] != '\r')
                line++;
            const char *why = line == 0                         ? "its first line is empty"
                              : memchr(buf, '\0', line) != NULL ? "its first line holds a NUL"
                              : line > COMMANDS_MAX_REQUIREPASS ? "its first line is over 512 bytes"
                                                                : NULL;
            if (why != NULL) {
                fprintf(stderr,
                        "sluiced: --requirepass-file %s: %s; refusing to start without "
                        "a usable password\n",
                        optarg, why);
                free(buf);
                return 2;
            }
            buf[line] = '\0';
            free(o->pass_buf);
            o->pass_buf = buf;
            o->ccfg.requirepass = o->pass_buf;
            break;
        }
        case OPT_ADMIN:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                fprintf(stderr, "sluiced: --admin-commands: expected on or off, got '%s'\n",
                        optarg);
                return 2;
            }
            o->ccfg.admin_off = strcmp(optarg, "off") == 0;
            break;
        case OPT_HTTP_DENY:
            if (strcmp(optarg, "429") != 0 && strcmp(optarg, "403") != 0) {
                fprintf(stderr, "sluiced: --http-deny-status: expected 429 or 403, got '%s'\n",
                        optarg);
                return 2;
            }
            o->htcfg.deny_status = atoi(optarg);
            break;
        case OPT_HTTP_TRUST:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0) {
                fprintf(stderr, "sluiced: --http-trust-headers: expected on or off, got '%s'\n",
                        optarg);
                return 2;
            }
            o->htcfg.trust_headers = strcmp(optarg, "on") == 0;
            break;
        case OPT_HTTP_DECISIONS:
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0 &&
                strchr(optarg, ':') == NULL) {
                fprintf(stderr,
                        "sluiced: --http-decisions: expected on, off or HOST:PORT, got '%s'\n",
                        optarg);
                return 2;
            }
            o->decisions = optarg;
            break;
        case OPT_GRPC:
            o->rlsopt.grpc = strcmp(optarg, "off") == 0 ? NULL : optarg;
            break;
        case OPT_RL_CONFIG:
            o->rlsopt.config_dir = optarg;
            break;
        case OPT_RL_ALGORITHM:
            o->rlsopt.algorithm = optarg;
            break;
        case OPT_RL_HEADERS:
            o->rlsopt.headers = 1;
            break;
        case OPT_VERSION:
            printf("sluiced %s\n", SLUICE_VERSION);
            return 0;
        case OPT_HELP:
        case 'h':
            sluiced__usage(stdout);
            return 0;
        default: {
            int taken = cluster_flags_parse(&o->clopt, opt, optarg);
            if (taken > 0)
                break;
            if (taken == 0)
                sluiced__usage(stderr);
            return 2;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sluiced: unexpected argument '%s'\n", argv[optind]);
        sluiced__usage(stderr);
        return 2;
    }
    /* The file's [cluster] section fills what the cluster flags left unset. */
    if (o->config_path != NULL && cluster_flags_apply_config(&o->clopt, &sluiced__file_cfg) < 0) {
        fprintf(stderr, "sluiced: out of memory\n");
        return 2;
    }
    if (o->socket_path == NULL) {
        o->socket_path = sluice_client_default_path();
        /* The default's directory is this user's alone: made private if
         * missing ($XDG_RUNTIME_DIR/sluice, /tmp/sluice-UID); an existing
         * one must be ours and closed to others. */
        if (sluiced__private_dir(o->socket_path) < 0)
            return 2;
    }
    o->scfg.socket_path = o->socket_path;
    return DAEMON_GO_ON;
}

/* Step 3, create the limiter (--max-keys, --on-full).  0, or a negative
 * error code, logged; nothing else exists yet. */
static int sluiced__create_limiter(struct daemon *d, struct daemon_options *o)
{
    int rc = limiter_create(&d->lim, &o->lcfg);
    if (rc < 0)
        log_error("cannot create the limiter: %s", sluice_strerror(rc));
    return rc;
}

/* Step 4, start the cluster (without cluster flags, d->cluster stays
 * NULL).  0, or a negative error code, logged. */
static int sluiced__start_cluster(struct daemon *d, struct daemon_options *o)
{
    char clerr[512];
    /* Global keys count against the same --max-keys, with the same --on-full. */
    o->clopt.max_keys = o->lcfg.max_keys ? o->lcfg.max_keys : LIMITER_DEFAULT_MAX_KEYS;
    o->clopt.evict = o->lcfg.overflow == LIMITER_OVERFLOW_EVICT;
    o->clopt.on_full_allow = o->lcfg.overflow == LIMITER_OVERFLOW_ALLOW;
    o->clopt.carry = sluiced__carry;
    o->clopt.carry_ud = d->lim;
    int rc = cluster_start(&d->loop, &o->clopt, &d->cluster, clerr, sizeof(clerr));
    if (rc < 0)
        log_error("cluster: %s", clerr);
    return rc;
}

/* Step 5, the layers above the limiter: the file's policies into the
 * limiter, the SL commands, the readiness check and the RESP commands.
 * 0, or a negative error code, logged; what was created is freed by
 * sluiced__shutdown_free. */
static int sluiced__create_commands(struct daemon *d, struct daemon_options *o)
{
    limiter_set_policies(d->lim, o->policies);
    policy_set_release(o->policies);
    o->policies = NULL;
    reload_attach(&d->reload, d->lim, &d->loop);
    struct commands_sl_config slcfg = {
        .max_key_bytes = o->ccfg.max_key_bytes,
        .loop = &d->loop,
        .reloader = {.reload = reload_request, .stats = reload_stats, .ud = &d->reload}};
    int rc = commands_sl_create(d->lim, &slcfg, &d->sl);
    if (rc < 0) {
        log_error("cannot create the command layer: %s", sluice_strerror(rc));
        return rc;
    }
    struct readiness_config rdcfg = {.cluster = d->cluster, .join = o->clopt.join};
    rc = readiness_create(&rdcfg, (int64_t)uv_hrtime(), &d->ready);
    if (rc < 0) {
        log_error("cannot create the readiness check: %s", sluice_strerror(rc));
        return rc;
    }
    o->ccfg.cluster = d->cluster;
    o->ccfg.sl = d->sl;
    o->ccfg.listeners_info = sluiced__listeners_info;
    o->ccfg.listeners_ud = d;
    o->ccfg.ready = d->ready;
    rc = commands_create(d->lim, &o->ccfg, &d->cmds);
    if (rc < 0)
        log_error("cannot create the command layer: %s", sluice_strerror(rc));
    return rc;
}

/* A listener failed to start: closes the ones started (the Unix socket's
 * server, --http, --http-decisions) and stops the cluster, then runs the
 * loop until their handles are closed. */
static void sluiced__close_listeners(struct daemon *d)
{
    http_close(d->http);
    http_close(d->dhttp);
    server_close(d->srv);
    cluster_stop(d->cluster, NULL, NULL);
    uv_run(&d->loop, UV_RUN_DEFAULT);
}

/* --http: /metrics, /health and /ready, and the decisions (/v1/throttle,
 * /v1/lease) unless --http-decisions puts them elsewhere.  0, or a negative
 * error code, logged, the listeners closed (sluiced__close_listeners). */
static int sluiced__start_http(struct daemon *d, struct daemon_options *o)
{
    int rc;
    o->hcfg.bind = o->metrics_addr;
    o->hcfg.budget = server_memory_budget(d->srv);
    rc = http_create(&d->loop, &o->hcfg, &d->http);
    if (rc == 0)
        rc = metrics_attach(d->http, sluiced__collect, d, &d->metrics);
    if (rc == 0)
        rc = http_route(d->http, "/ready", sluiced__on_ready, d);
    if (rc == 0 && strcmp(o->decisions, "on") == 0)
        rc = http_throttle_attach(d->http, d->lim, d->cluster, &o->htcfg, &d->throttle);
    /* Leases spend slots: they go where the decisions go. */
    if (rc == 0 && strcmp(o->decisions, "on") == 0)
        rc = http_lease_attach(d->http, d->cmds, &d->lease);
    if (rc == 0 && http_start(d->http) < 0) {
        log_error("%s", http_error(d->http));
        rc = -SLUICE_EIO;
    } else if (rc < 0) {
        log_error("cannot create the HTTP listener: %s", sluice_strerror(rc));
    }
    if (rc < 0) {
        sluiced__close_listeners(d);
        return rc;
    }
    log_info("HTTP on http://%s (/metrics, /health, /ready%s%s)", o->metrics_addr,
             strcmp(o->decisions, "on") == 0 ? ", " : "",
             strcmp(o->decisions, "on") == 0 ? HTTP_THROTTLE_PATH ", " HTTP_LEASE_PATH : "");
    return 0;
}

/* --http-decisions HOST:PORT: the decision endpoints on a listener of their
 * own.  0, or a negative error code, logged, the listeners closed. */
static int sluiced__start_decisions(struct daemon *d, struct daemon_options *o)
{
    int rc;
    /* The decision endpoint alone on a listener of its own: whoever may
     * read the metrics need not be able to spend keys.  Same caps,
     * timeouts and memory budget as the --http listener. */
    struct http_config dcfg = o->hcfg;
    dcfg.bind = o->decisions;
    dcfg.budget = server_memory_budget(d->srv);
    rc = http_create(&d->loop, &dcfg, &d->dhttp);
    if (rc == 0)
        rc = http_throttle_attach(d->dhttp, d->lim, d->cluster, &o->htcfg, &d->throttle);
    if (rc == 0)
        rc = http_lease_attach(d->dhttp, d->cmds, &d->lease);
    if (rc == 0 && http_start(d->dhttp) < 0) {
        log_error("%s", http_error(d->dhttp));
        rc = -SLUICE_EIO;
    } else if (rc < 0) {
        log_error("cannot create the decision listener: %s", sluice_strerror(rc));
    }
    if (rc < 0) {
        sluiced__close_listeners(d);
        return rc;
    }
    log_info("HTTP decisions on http://%s (%s)", o->decisions, HTTP_THROTTLE_PATH);
    return 0;
}

/* --grpc and --ratelimit-config: Envoy's rate limit service, and a watch on
 * the config directory.  0, or a negative error code, logged, with *status
 * 2 for a bad config (else 1) and the listeners closed. */
static int sluiced__start_rls(struct daemon *d, struct daemon_options *o, int *status)
{
    int rc;
    char rerr[512];
    o->rlsopt.budget = server_memory_budget(d->srv);
    o->rlsopt.ready = d->ready;
    rc = daemon_rls_start(&d->loop, d->lim, d->cluster, &o->rlsopt, &d->rls, rerr, sizeof(rerr));
    if (rc < 0) {
        log_error("ratelimit: %s", rerr);
        sluiced__close_listeners(d);
        *status = rc == -SLUICE_ECONFIG ? 2 : 1;
        return rc;
    }
    if (o->rlsopt.config_dir != NULL)
        sluiced__watch_rls_dir(d, o->rlsopt.config_dir);
    return 0;
}

/* The maintenance timer, SIGTERM's drain timer and the signal handlers
 * (SIGINT, SIGTERM, SIGHUP).  Cannot fail. */
static void sluiced__start_signals(struct daemon *d, struct daemon_options *o)
{
    uv_timer_init(&d->loop, &d->maintain);
    d->maintain.data = d;
    uv_timer_start(&d->maintain, sluiced__on_maintain, MAINTAIN_INTERVAL_MS, MAINTAIN_INTERVAL_MS);
    uv_timer_init(&d->loop, &d->drain);
    d->drain.data = d;
    d->drain_ms = o->drain_ms;
    uv_signal_init(&d->loop, &d->sigint);
    uv_signal_init(&d->loop, &d->sigterm);
    d->sigint.data = d;
    d->sigterm.data = d;
    uv_signal_start(&d->sigint, sluiced__on_signal, SIGINT);
    uv_signal_start(&d->sigterm, sluiced__on_signal, SIGTERM);
    uv_signal_init(&d->loop, &d->sighup);
    d->sighup.data = d;
    uv_signal_start(&d->sighup, sluiced__on_sighup, SIGHUP);
}

/* Step 6, start the listeners: creates the Unix socket's server, starts
 * --http (metrics, /ready, decisions), --http-decisions and the gRPC
 * ratelimit service, the timers and signal handlers, and last the Unix
 * socket (and --listen), so that once the socket exists everything
 * answers.  0, or a negative error code, logged, with *status set to the
 * exit status; on a failure past the server's creation the handles are
 * already closed and the loop run until they are. */
static int sluiced__start_listeners(struct daemon *d, struct daemon_options *o, int *status)
{
    /* TCP clients must AUTH when a password is set: unauthenticated ones
     * have a deadline and are evicted first. */
    o->scfg.tcp_auth = o->ccfg.requirepass != NULL && o->ccfg.requirepass[0] != '\0';
    int rc = server_create(&d->loop, &o->scfg, commands_dispatch, d->cmds, &d->srv);
    if (rc == 0)
        server_set_hint(d->srv, commands_hint);
    if (rc == -SLUICE_EINVAL) {
        log_error("invalid socket path '%s' (empty, or longer than %zu bytes)", o->socket_path,
                  sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
        return rc;
    }
    if (rc < 0) {
        log_error("cannot create the server: %s", sluice_strerror(rc));
        return rc;
    }
    /* Every other listener before the Unix socket: the socket is what
     * clients and supervisors wait for, so once it exists all of them
     * answer. */
    if (o->metrics_addr != NULL)
        rc = sluiced__start_http(d, o);
    if (rc == 0 && strcmp(o->decisions, "on") != 0 && strcmp(o->decisions, "off") != 0)
        rc = sluiced__start_decisions(d, o);
    if (rc == 0 && (o->rlsopt.grpc != NULL || o->rlsopt.config_dir != NULL))
        rc = sluiced__start_rls(d, o, status);
    if (rc < 0)
        return rc; /* the listeners are closed */
    /* Signals before the socket exists: a client or supervisor that sees it
     * may stop us at once (libuv holds the signal until the loop runs). */
    sluiced__start_signals(d, o);
    const struct server_config *s = &o->scfg;
    size_t http_conns = o->hcfg.max_conns ? o->hcfg.max_conns : HTTP_DEFAULT_MAX_CONNS;
    sluiced__raise_nofile(
        (s->max_clients ? s->max_clients : SERVER_DEFAULT_MAX_CLIENTS) +
        (s->listen != NULL
             ? (s->max_tcp_clients ? s->max_tcp_clients : SERVER_DEFAULT_MAX_TCP_CLIENTS)
             : 0) +
        (o->metrics_addr != NULL ? 2 * http_conns : 0) + (d->dhttp != NULL ? 2 * http_conns : 0) +
        (o->rlsopt.grpc != NULL ? 2 * (o->rlsopt.max_connections ? o->rlsopt.max_connections
                                                                 : RLS_DEFAULT_MAX_CONNECTIONS)
                                : 0));
    rc = server_start(d->srv);
    if (rc == 0 && s->listen != NULL && !server_tcp_loopback(d->srv) &&
        o->ccfg.requirepass == NULL) {
        /* Beyond loopback anyone on the network could decide and reload:
         * the Unix socket's permissions do not reach there. */
        log_error("--listen %s is not a loopback address: set requirepass (requirepass = under "
                  "[sluiced], or --requirepass-file FILE) so TCP clients must AUTH",
                  s->listen);
        rc = -SLUICE_ECONFIG;
        *status = 2;
    } else if (rc < 0) {
        log_error("%s", server_error(d->srv));
    }
    if (rc < 0) {
        sluiced__shutdown(d);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        return rc;
    }
    if (s->listen != NULL)
        log_info("RESP also on TCP %s (port %d)%s", s->listen, server_tcp_port(d->srv),
                 o->ccfg.requirepass != NULL ? ", AUTH required" : "");
    log_info("sluiced %s listening on %s (mode %04o, max %zu clients)", SLUICE_VERSION,
             o->socket_path, s->socket_mode,
             s->max_clients ? s->max_clients : SERVER_DEFAULT_MAX_CLIENTS);
    return 0;
}

/* Step 7, run: the loop until a signal's shutdown closes every handle.
 * Returns the exit status: 0, or 1 when the cluster stopped the loop
 * because it failed (the reason is logged); its handles are then closed
 * here. */
static int sluiced__run(struct daemon *d)
{
    int status = 0;
    uv_run(&d->loop, UV_RUN_DEFAULT);
    if (cluster_failed(d->cluster)) {
        /* The cluster stopped the loop: refuse to run (the reason is logged). */
        sluiced__shutdown(d);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        status = 1;
    }
    log_info("stopped");
    return status;
}

/* Step 8, shut down: frees everything steps 3 to 7 created, whichever of
 * them failed (rc < 0: a step failed, and a cluster it left running is
 * stopped here first), and what the options own.  Every free takes NULL.
 * Cannot fail; the loop itself is closed by main. */
static void sluiced__shutdown_free(struct daemon *d, struct daemon_options *o, int rc)
{
    daemon_rls_destroy(d->rls);
    http_destroy(d->http);
    http_destroy(d->dhttp);
    metrics_destroy(d->metrics);
    http_throttle_destroy(d->throttle);
    http_lease_destroy(d->lease);
    server_destroy(d->srv);
    commands_destroy(d->cmds);
    if (d->cluster != NULL && rc < 0) {
        cluster_stop(d->cluster, NULL, NULL);
        uv_run(&d->loop, UV_RUN_DEFAULT);
    }
    readiness_destroy(d->ready);
    cluster_destroy(d->cluster);
    cluster_options_free(&o->clopt);
    /* A start that failed never reached the shutdown that closes the SL
     * layer's handles (the lease timer): close them here, once. */
    commands_sl_close(d->sl);
    uv_run(&d->loop, UV_RUN_NOWAIT);
    commands_sl_destroy(d->sl);
    policy_set_release(o->policies);
    limiter_destroy(d->lim);
    free(o->pass_buf);
    config_free(&sluiced__file_cfg);
}

int main(int argc, char **argv)
{
    struct daemon_options o;
    struct daemon d;
    memset(&o, 0, sizeof(o));
    memset(&d, 0, sizeof(d));
    int status = sluiced__load_config(&o, argc, argv);
    if (status != 0)
        return status;
    status = sluiced__parse_options(&o, argc, argv);
    if (status != DAEMON_GO_ON)
        return status;

    /* A client vanishing mid-write must be an error return, not a signal. */
    signal(SIGPIPE, SIG_IGN);

    d.reload = o.reload;
    int rc = uv_loop_init(&d.loop);
    if (rc < 0) {
        log_error("cannot create the event loop: %s", uv_strerror(rc));
        return 1;
    }
    status = 1;
    rc = sluiced__create_limiter(&d, &o);
    if (rc == 0) {
        rc = sluiced__start_cluster(&d, &o);
        if (rc == 0)
            rc = sluiced__create_commands(&d, &o);
        if (rc == 0)
            rc = sluiced__start_listeners(&d, &o, &status);
        if (rc == 0)
            status = sluiced__run(&d);
        sluiced__shutdown_free(&d, &o, rc);
    }
    if (uv_loop_close(&d.loop) != 0)
        log_warn("event loop closed with handles still open");
    return status;
}
