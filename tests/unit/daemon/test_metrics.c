/*
 * The Prometheus endpoint: the request parser at every split point and on
 * malformed or oversized input, the exposition text byte for byte, and the
 * HTTP server over loopback (answers, keep-alive, errors that close, the
 * connection bound, the idle timeout).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "commands_lease.h"
#include "commands_sl.h"
#include "counters.h"
#include "daemon_rls.h"
#include "gossip/gossip.h"
#include "http.h"
#include "info.h"
#include "limiter.h"
#include "metrics.h"
#include "replica.h"
#include "resp.h"
#include "server.h"
#include "slots.h"
#include "sluice/error.h"
#include "testutil.h"

/* ---- parser ---- */

static void parse_ok(const char *req, size_t len, size_t head_len, struct http_request *r)
{
    /* Every strict prefix needs more bytes; the whole head parses, with or
     * without bytes of a next request after it. */
    for (size_t k = 0; k < head_len; k++) {
        struct http_request tmp;
        assert_int_equal(http_parse_request(req, k, HTTP_MAX_REQUEST, &tmp), 0);
    }
    for (size_t k = head_len; k <= len; k++)
        assert_int_equal(http_parse_request(req, k, HTTP_MAX_REQUEST, r), (int)head_len);
}

static void test_parse_get_every_split(void **state)
{
    (void)state;
    const char *req = "GET /metrics?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9464\r\n"
                      "Accept: text/plain;version=0.0.4\r\nUser-Agent: Prometheus/2\r\n\r\n"
                      "GET /health HTTP/1.1\r\n\r\n";
    size_t head = strstr(req, "\r\n\r\n") + 4 - req;
    struct http_request r;
    parse_ok(req, strlen(req), head, &r);
    assert_int_equal(r.method, HTTP_REQ_GET);
    assert_int_equal(r.path_len, 8);
    assert_memory_equal(r.path, "/metrics", 8);
    assert_int_equal(r.keep_alive, 1);
    assert_int_equal(r.has_body, 0);
    /* The next request in the same buffer. */
    assert_int_equal(http_parse_request(req + head, strlen(req + head), 8192, &r),
                     (int)strlen(req + head));
    assert_int_equal(r.path_len, 7);
    assert_memory_equal(r.path, "/health", 7);
}

static void test_parse_variants(void **state)
{
    (void)state;
    struct http_request r;
    const char *head10 = "HEAD /health HTTP/1.0\n\n"; /* bare LF, HTTP/1.0 */
    parse_ok(head10, strlen(head10), strlen(head10), &r);
    assert_int_equal(r.method, HTTP_REQ_HEAD);
    assert_int_equal(r.keep_alive, 0);

    const char *ka10 = "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
    parse_ok(ka10, strlen(ka10), strlen(ka10), &r);
    assert_int_equal(r.keep_alive, 1);
    assert_int_equal(r.path_len, 1);

    const char *close11 = "GET /metrics HTTP/1.1\r\nconnection: TE, close\r\n\r\n";
    parse_ok(close11, strlen(close11), strlen(close11), &r);
    assert_int_equal(r.keep_alive, 0);

    const char *post = "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
    size_t ph = strlen(post) - 5;
    parse_ok(post, strlen(post), ph, &r);
    assert_int_equal(r.method, HTTP_REQ_POST);
    assert_int_equal(r.has_body, 1);

    const char *del = "DELETE /v1/lease/7?key=k HTTP/1.1\r\n\r\n";
    parse_ok(del, strlen(del), strlen(del), &r);
    assert_int_equal(r.method, HTTP_REQ_DELETE);
    const char *put = "PUT /x HTTP/1.1\r\n\r\n";
    parse_ok(put, strlen(put), strlen(put), &r);
    assert_int_equal(r.method, HTTP_REQ_OTHER);

    const char *zero = "GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    parse_ok(zero, strlen(zero), strlen(zero), &r);
    assert_int_equal(r.has_body, 0);

    const char *chunked = "GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    parse_ok(chunked, strlen(chunked), strlen(chunked), &r);
    assert_int_equal(r.has_body, 1);
}

static void test_parse_malformed(void **state)
{
    (void)state;
    static const char *bad[] = {
        "GARBAGE\r\n\r\n",
        "get /metrics HTTP/1.1\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/2.0\r\n\r\n",
        "GET /metrics HTTP/1.1 extra\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET  /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        "GET /metrics HTTP/1.1\r\n: empty-name\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nContent-Length:\r\n\r\n",
        "GET /met\rrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nX: a\x01b\r\n\r\n",
        "ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct http_request r;
        int rc = http_parse_request(bad[i], strlen(bad[i]), HTTP_MAX_REQUEST, &r);
        if (rc != -SLUICE_EPROTO)
            fail_msg("case %zu (%s): got %d", i, bad[i], rc);
    }
    /* Noise is refused before a line end arrives (a TLS hello, a RESP
     * command sent to the wrong port). */
    struct http_request r;
    assert_int_equal(http_parse_request("\x16\x03\x01", 3, 8192, &r), -SLUICE_EPROTO);
    assert_int_equal(http_parse_request("*1\r\n$4\r\nPING", 12, 8192, &r), -SLUICE_EPROTO);
    assert_int_equal(http_parse_request("GE", 2, 8192, &r), 0);
}

static void test_parse_size_bound(void **state)
{
    (void)state;
    const size_t max = HTTP_MAX_REQUEST;
    char *buf = malloc(max + 64);
    assert_non_null(buf);
    /* A head of exactly max bytes is accepted... */
    const char *start = "GET /metrics HTTP/1.1\r\nX: ";
    size_t sl = strlen(start);
    memcpy(buf, start, sl);
    memset(buf + sl, 'a', max - sl - 4);
    memcpy(buf + max - 4, "\r\n\r\n", 4);
    struct http_request r;
    assert_int_equal(http_parse_request(buf, max, max, &r), (int)max);
    /* ...one byte more is not, whatever follows... */
    memset(buf + sl, 'a', max - sl - 3);
    memcpy(buf + max - 3, "\r\n\r\n", 4);
    assert_int_equal(http_parse_request(buf, max + 1, max, &r), -SLUICE_ETOOBIG);
    assert_int_equal(http_parse_request(buf, max, max, &r), -SLUICE_ETOOBIG);
    /* ...and short of the bound it simply needs more. */
    assert_int_equal(http_parse_request(buf, max - 1, max, &r), 0);
    free(buf);
}

/* Random bytes and mutated requests: the parser never claims more bytes
 * than it was given and never crashes (run under the sanitizers). */
static void test_parse_noise(void **state)
{
    (void)state;
    uint64_t seed = test_seed("test_parse_noise");
    const char *base = "GET /metrics HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
    size_t bl = strlen(base);
    char buf[128];
    for (int it = 0; it < 20000; it++) {
        size_t len = (size_t)test_rand_range(&seed, 0, (int64_t)bl);
        memcpy(buf, base, bl);
        int flips = (int)test_rand_range(&seed, 0, 3);
        for (int f = 0; f < flips; f++)
            buf[test_rand_range(&seed, 0, (int64_t)bl - 1)] = (char)test_rand(&seed);
        size_t max = (size_t)test_rand_range(&seed, 1, 128);
        struct http_request r;
        int rc = http_parse_request(buf, len, max, &r);
        assert_true(rc == 0 || rc == -SLUICE_EPROTO || rc == -SLUICE_ETOOBIG ||
                    (rc > 0 && (size_t)rc <= len && (size_t)rc <= max));
        if (rc > 0)
            assert_true(r.path >= buf && r.path + r.path_len <= buf + rc);
    }
}

/* ---- exposition ---- */

static struct limiter_stats fixed_lim;
static struct server_stats fixed_srv;
static struct commands_sl_stats fixed_sl;
static struct gossip_stats fixed_gossip;

static struct metrics_snapshot fixed_snapshot(int clustered)
{
    struct metrics_snapshot s;
    memset(&s, 0, sizeof(s));
    fixed_lim = (struct limiter_stats){.decisions = 42, .limited = 7, .keys = 3};
    fixed_srv = (struct server_stats){.connected_clients = 2};
    fixed_sl = (struct commands_sl_stats){.waiting_acquires = 1};
    fixed_gossip = (struct gossip_stats){.bytes_sent = 18446744073709551615ull};
    metrics_snapshot_add(&s, 0, &limiter_counters, &fixed_lim);
    metrics_snapshot_add(&s, 0, &server_client_counters, &fixed_srv);
    metrics_snapshot_add(&s, 0, &commands_sl_counters, &fixed_sl);
    metrics_snapshot_add(&s, 1, &counters_gossip, &fixed_gossip);
    s.clustered = clustered;
    s.members[0] = (struct metrics_label_value){"alive", 3};
    s.members[1] = (struct metrics_label_value){"sus\"p\\e\nct", 1};
    s.nmembers = 2;
    s.drops[0] = (struct metrics_label_value){"auth", 5};
    s.ndrops = 1;
    s.synced = 1;
    s.by_policy[0] = (struct metrics_policy_value){"api", 10, 4};
    s.by_policy[1] = (struct metrics_policy_value){"_other", 2, 0};
    s.npolicy = 2;
    s.latency.buckets[0] = 5;  /* <= 1 us */
    s.latency.buckets[2] = 1;  /* <= 5 us */
    s.latency.buckets[11] = 1; /* > 5 ms */
    s.latency.count = 7;
    s.latency.sum_ns = 6000000;
    s.loop_turns.buckets[6] = 3;  /* <= 100 us */
    s.loop_turns.buckets[11] = 1; /* > 5 ms: a stall shows */
    s.loop_turns.count = 4;
    s.loop_turns.sum_ns = 40000000;
    return s;
}

static void test_render_exact(void **state)
{
    (void)state;
    struct metrics_snapshot s = fixed_snapshot(0);
    struct metrics_buf b = {0};
    assert_int_equal(metrics_render(&s, &b), 0);
    const char *first =
        "# HELP sluice_decisions_total Rate-limit decisions answered on local keys. (INFO "
        "decisions)\n"
        "# TYPE sluice_decisions_total counter\n"
        "sluice_decisions_total 42\n"
        "# HELP sluice_limited_total Decisions on local keys that refused the "
        "request. (INFO limited)\n"
        "# TYPE sluice_limited_total counter\n"
        "sluice_limited_total 7\n"
        "# HELP sluice_keys Keys held in memory. (INFO keys)\n"
        "# TYPE sluice_keys gauge\n"
        "sluice_keys 3\n";
    assert_true(b.len > strlen(first));
    assert_memory_equal(b.data, first, strlen(first));
    const char *waiting = "# HELP sluice_waiting_acquires SL.ACQUIRE requests waiting now. "
                          "(INFO waiting_acquires)\n"
                          "# TYPE sluice_waiting_acquires gauge\n"
                          "sluice_waiting_acquires 1\n";
    assert_non_null(strstr(b.data, waiting));
    assert_non_null(strstr(b.data, "# TYPE sluice_policy_decisions_total counter\n"
                                   "sluice_policy_decisions_total{policy=\"api\"} 10\n"
                                   "sluice_policy_decisions_total{policy=\"_other\"} 2\n"));
    assert_non_null(strstr(b.data, "sluice_policy_limited_total{policy=\"api\"} 4\n"
                                   "sluice_policy_limited_total{policy=\"_other\"} 0\n"));
    /* Cumulative buckets, then sum (seconds) and count. */
    const char *last = "# TYPE sluice_decision_duration_seconds histogram\n"
                       "sluice_decision_duration_seconds_bucket{le=\"1e-06\"} 5\n"
                       "sluice_decision_duration_seconds_bucket{le=\"2.5e-06\"} 5\n"
                       "sluice_decision_duration_seconds_bucket{le=\"5e-06\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"1e-05\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"2.5e-05\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"5e-05\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"0.0001\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"0.00025\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"0.0005\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"0.001\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"0.005\"} 6\n"
                       "sluice_decision_duration_seconds_bucket{le=\"+Inf\"} 7\n"
                       "sluice_decision_duration_seconds_sum 0.006000000\n"
                       "sluice_decision_duration_seconds_count 7\n";
    assert_true(b.len >= strlen(last));
    assert_string_equal(b.data + b.len - strlen(last), last);
    assert_non_null(strstr(b.data, "\nsluice_connected_clients 2\n"));
    assert_non_null(strstr(b.data, "sluice_loop_turn_seconds_bucket{le=\"0.001\"} 3\n"
                                   "sluice_loop_turn_seconds_bucket{le=\"0.005\"} 3\n"
                                   "sluice_loop_turn_seconds_bucket{le=\"+Inf\"} 4\n"
                                   "sluice_loop_turn_seconds_sum 0.040000000\n"
                                   "sluice_loop_turn_seconds_count 4\n"));
    assert_non_null(strstr(b.data, "# TYPE sluice_ready gauge\nsluice_ready 0\n"));
    assert_null(strstr(b.data, "gossip"));
    assert_null(strstr(b.data, "sluice_synced"));
    metrics_buf_free(&b);

    s = fixed_snapshot(1);
    assert_int_equal(metrics_render(&s, &b), 0);
    const char *members = "# HELP sluice_cluster_members Cluster members known, by state.\n"
                          "# TYPE sluice_cluster_members gauge\n"
                          "sluice_cluster_members{state=\"alive\"} 3\n"
                          "sluice_cluster_members{state=\"sus\\\"p\\\\e\\nct\"} 1\n";
    assert_non_null(strstr(b.data, members));
    assert_non_null(strstr(b.data, "# TYPE sluice_gossip_drops_total counter\n"
                                   "sluice_gossip_drops_total{reason=\"auth\"} 5\n"));
    assert_non_null(strstr(b.data, "\nsluice_gossip_bytes_sent_total 18446744073709551615\n"));
    const char *tail = "# TYPE sluice_synced gauge\nsluice_synced 1\n";
    assert_string_equal(b.data + b.len - strlen(tail), tail);
    metrics_buf_free(&b);
}

/* Every line of the text is a HELP, a TYPE or a sample of the family the
 * last TYPE named; no family appears twice. */
static void test_render_grammar(void **state)
{
    (void)state;
    struct metrics_snapshot s = fixed_snapshot(1);
    struct metrics_buf b = {0};
    assert_int_equal(metrics_render(&s, &b), 0);
    assert_true(b.len > 0 && b.data[b.len - 1] == '\n');
    char fam[128] = "", seen[8192] = " ";
    size_t samples = 0;
    for (char *line = b.data; *line != '\0';) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        char name[128], kind[32];
        if (strncmp(line, "# HELP ", 7) == 0) {
            assert_int_equal(sscanf(line + 7, "%127s", name), 1);
            assert_int_equal(strncmp(name, "sluice_", 7), 0);
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            assert_int_equal(sscanf(line + 7, "%127s %31s", name, kind), 2);
            assert_true(strcmp(kind, "counter") == 0 || strcmp(kind, "gauge") == 0 ||
                        strcmp(kind, "histogram") == 0);
            if (strcmp(kind, "counter") == 0)
                assert_non_null(strstr(name, "_total"));
            char key[140];
            snprintf(key, sizeof(key), " %s ", name);
            assert_null(strstr(seen, key));
            strncat(seen, key + 1, sizeof(seen) - strlen(seen) - 1);
            snprintf(fam, sizeof(fam), "%s", name);
        } else {
            size_t fl = strlen(fam);
            assert_true(fl > 0);
            assert_int_equal(strncmp(line, fam, fl), 0);
            const char *v = line + fl;
            /* A histogram's samples: NAME_bucket{le=...}, NAME_sum (a
             * decimal number of seconds), NAME_count. */
            int is_sum = strncmp(v, "_sum ", 5) == 0;
            if (strncmp(v, "_bucket{", 8) == 0 || strncmp(v, "_count ", 7) == 0)
                v = strchr(v, v[1] == 'b' ? '{' : ' ');
            else if (is_sum)
                v += 4;
            if (*v == '{') {
                v = strstr(v, "\"} ");
                assert_non_null(v);
                v += 2;
            }
            assert_int_equal(*v, ' ');
            char *end;
            errno = 0;
            if (is_sum)
                (void)strtod(v + 1, &end);
            else
                (void)strtoull(v + 1, &end, 10);
            assert_int_equal(errno, 0);
            assert_int_equal(*end, '\0');
            samples++;
        }
        line = nl + 1;
    }
    assert_true(samples >= 25);
    metrics_buf_free(&b);
}

/* Every counter table the daemon renders (sluiced.c), each with a stats
 * struct big enough for any of them; the last NCLUSTER are the cluster's
 * (rendered after its labelled families).  A table the daemon renders in
 * only one of INFO and /metrics is caught on a live node by
 * tests/integration/test_metrics.py (InfoAgreesTest). */
static const struct counter_table *const all_tables[] = {
    &limiter_counters, &server_client_counters, &server_command_counters, &server_tcp_counters,
    &http_counters,    &commands_sl_counters,   &daemon_rls_counters,     &commands_lease_counters,
    &counters_gossip,  &slots_counters,         &counters_replica,
};
#define NTABLES  (sizeof(all_tables) / sizeof(all_tables[0]))
#define NCLUSTER 3

/* The value of "name:" in INFO text, or -1. */
static long long info_value(const char *text, const char *name)
{
    char key[160];
    snprintf(key, sizeof(key), "\n%s:", name);
    const char *p = strstr(text, key);
    return p != NULL ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* INFO and /metrics agree for every counter: each row of every table is
 * one INFO line and one family whose HELP names that INFO line, with the
 * same value, and no two rows share a name on either side. */
static void test_info_and_metrics_agree(void **state)
{
    (void)state;
    static uint64_t stats[NTABLES][64];
    struct metrics_snapshot s;
    memset(&s, 0, sizeof(s));
    s.clustered = 1;
    struct resp_buf info;
    resp_buf_init(&info);
    resp_add_raw(&info, "\n", 1);
    uint64_t next = 1000;
    size_t rows = 0;
    for (size_t t = 0; t < NTABLES; t++) {
        for (size_t k = 0; k < 64; k++)
            stats[t][k] = next++; /* every field its own value */
        assert_true(all_tables[t]->n > 0);
        for (size_t k = 0; k < all_tables[t]->n; k++)
            assert_true(all_tables[t]->rows[k].off + 8 <= sizeof(stats[t]));
        metrics_snapshot_add(&s, t >= NTABLES - NCLUSTER, all_tables[t], stats[t]);
        info_counters(&info, all_tables[t], stats[t]);
        rows += all_tables[t]->n;
    }
    resp_add_raw(&info, "\0", 1);
    struct metrics_buf b = {0};
    assert_int_equal(metrics_render(&s, &b), 0);
    size_t paired = 0;
    for (size_t t = 0; t < NTABLES; t++) {
        for (size_t k = 0; k < all_tables[t]->n; k++) {
            const struct counter_row *r = &all_tables[t]->rows[k];
            char help[200], sample[200];
            /* The family's HELP names the INFO field... */
            snprintf(help, sizeof(help), "# HELP sluice_%s ", r->metric);
            const char *h = strstr(b.data, help);
            assert_non_null(h);
            assert_null(strstr(h + 1, help)); /* one family per name */
            snprintf(help, sizeof(help), "(INFO %s)\n", r->info);
            const char *eol = strchr(h, '\n');
            assert_true(strstr(h, help) != NULL && strstr(h, help) + strlen(help) - 1 == eol);
            /* ...whose value is the sample's. */
            long long iv = info_value(info.data, r->info);
            assert_int_equal(iv, (long long)counter_value(r, stats[t]));
            snprintf(sample, sizeof(sample), "\nsluice_%s %lld\n", r->metric, iv);
            assert_non_null(strstr(b.data, sample));
            /* No other row has this INFO name. */
            char key[160];
            snprintf(key, sizeof(key), "\n%s:", r->info);
            assert_null(strstr(strstr(info.data, key) + 1, key));
            paired++;
        }
    }
    assert_int_equal(paired, rows);
    metrics_buf_free(&b);
    resp_buf_free(&info);
}

/* Each row is well formed: a running total's family ends in _total and a
 * gauge's does not (Prometheus' naming), names are lower-case
 * [a-z0-9_], and no two rows of a table read the same field (a row copied
 * and left unedited). */
static void test_counter_tables_well_formed(void **state)
{
    (void)state;
    for (size_t t = 0; t < NTABLES; t++) {
        const struct counter_table *tab = all_tables[t];
        for (size_t k = 0; k < tab->n; k++) {
            const struct counter_row *r = &tab->rows[k];
            size_t ml = strlen(r->metric);
            int total = ml > 6 && strcmp(r->metric + ml - 6, "_total") == 0;
            if (total != (r->kind == COUNTER_TOTAL))
                fail_msg("%s: kind %d", r->metric, (int)r->kind);
            assert_int_equal(strspn(r->metric, "abcdefghijklmnopqrstuvwxyz0123456789_"), ml);
            assert_int_equal(strspn(r->info, "abcdefghijklmnopqrstuvwxyz0123456789_"),
                             strlen(r->info));
            assert_true(strlen(r->help) > 0 && r->help[strlen(r->help) - 1] != '\n');
            for (size_t j = 0; j < k; j++)
                if (tab->rows[j].off == r->off)
                    fail_msg("%s and %s read one field", tab->rows[j].metric, r->metric);
        }
    }
}

/* counter_table_add sums every row (two HTTP listeners are one set of
 * counters) and leaves fields no row names alone. */
static void test_counter_table_add(void **state)
{
    (void)state;
    struct http_stats a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    uint64_t *pa = (uint64_t *)(void *)&a, *pb = (uint64_t *)(void *)&b;
    for (size_t i = 0; i < sizeof(a) / sizeof(uint64_t); i++) {
        pa[i] = 100 + i;
        pb[i] = 1000 * (i + 1);
    }
    struct http_stats sum = a;
    counter_table_add(&http_counters, &sum, &b);
    for (size_t k = 0; k < http_counters.n; k++) {
        const struct counter_row *r = &http_counters.rows[k];
        assert_int_equal(counter_value(r, &sum), counter_value(r, &a) + counter_value(r, &b));
    }
    assert_int_equal(sum.deferred, a.deferred + b.deferred);
    assert_int_equal(sum.too_big, a.too_big); /* no row: not summed */
}

/* ---- the server over loopback ---- */

static uv_loop_t loop;
static int collects;

static struct limiter_stats collected;

static void collect(void *ud, struct metrics_snapshot *out)
{
    (void)ud;
    collects++;
    collected.decisions = 1000 + (uint64_t)collects;
    metrics_snapshot_add(out, 0, &limiter_counters, &collected);
}

/* The metrics routes of the listener start() made. */
static struct metrics *mobj;

static struct http_server *start(size_t max_conns, uint64_t idle_ms)
{
    struct http_config cfg = {
        .bind = "127.0.0.1:0", .max_conns = max_conns, .idle_timeout_ms = idle_ms};
    struct http_server *m;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(http_create(&loop, &cfg, &m), 0);
    assert_int_equal(metrics_attach(m, collect, NULL, &mobj), 0);
    assert_int_equal(http_start(m), 0);
    assert_true(http_port(m) > 0);
    return m;
}

static void stop(struct http_server *m)
{
    http_close(m);
    uv_run(&loop, UV_RUN_DEFAULT);
    http_destroy(m);
    metrics_destroy(mobj);
    mobj = NULL;
    assert_int_equal(uv_loop_close(&loop), 0);
}

static int dial(struct http_server *m)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)http_port(m));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
    return fd;
}

struct reply {
    char data[65536];
    size_t len;
    int closed;
};

/* Complete responses (head + Content-Length body) at the start of r. */
static int complete(const struct reply *r)
{
    int n = 0;
    size_t pos = 0;
    while (pos < r->len) {
        const char *end = memmem(r->data + pos, r->len - pos, "\r\n\r\n", 4);
        if (end == NULL)
            break;
        const char *cl =
            memmem(r->data + pos, (size_t)(end - r->data) - pos, "Content-Length: ", 16);
        if (cl == NULL)
            break;
        size_t body = strtoul(cl + 16, NULL, 10);
        size_t total = (size_t)(end + 4 - r->data) - pos + body;
        if (pos + total > r->len)
            break;
        pos += total;
        n++;
    }
    return n;
}

/* Sends req (may be NULL) and runs the loop until `want` responses arrived
 * or (want < 0) the server closed; bounded by an iteration count. */
static void exchange(int fd, const char *req, size_t len, int want, struct reply *r)
{
    size_t sent = 0;
    for (int i = 0; i < 200000; i++) {
        if (req != NULL && sent < len) {
            ssize_t n = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
            if (n > 0)
                sent += (size_t)n;
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, r->data + r->len, sizeof(r->data) - r->len - 1, 0);
        if (n > 0) {
            r->len += (size_t)n;
            r->data[r->len] = '\0';
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            r->closed = 1;
            return;
        }
        if (want >= 0 && complete(r) >= want && sent == len)
            return;
        usleep(50);
    }
}

/* Runs the loop and reads for about ms milliseconds (less if closed). */
static void pump_ms(int fd, int ms, struct reply *r)
{
    for (int i = 0; i < ms * 10 && !r->closed; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, r->data + r->len, sizeof(r->data) - r->len - 1, 0);
        if (n > 0)
            r->len += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            r->closed = 1;
        usleep(100);
    }
}

static void test_server_answers(void **state)
{
    (void)state;
    struct http_server *m = start(0, 0);
    int fd = dial(m);
    struct reply r = {.len = 0};
    const char *two = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\n\r\n";
    exchange(fd, two, strlen(two), 2, &r);
    assert_int_equal(complete(&r), 2);
    assert_int_equal(strncmp(r.data, "HTTP/1.1 200 OK\r\n", 17), 0);
    assert_non_null(strstr(r.data, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    assert_non_null(strstr(r.data, "Connection: keep-alive\r\n"));
    assert_non_null(strstr(r.data, "\nsluice_decisions_total 1001\n"));
    const char *h = strstr(r.data + 17, "HTTP/1.1 200 OK\r\n");
    assert_non_null(h);
    assert_non_null(strstr(h, "\r\n\r\nok\n"));
    assert_int_equal(r.closed, 0);

    /* The same connection still answers: 404, a HEAD without a body, then
     * a 405 that closes. */
    memset(&r, 0, sizeof(r));
    const char *more = "GET /nope HTTP/1.1\r\n\r\nHEAD /metrics HTTP/1.1\r\n\r\n"
                       "DELETE /metrics HTTP/1.1\r\n\r\n";
    exchange(fd, more, strlen(more), -1, &r);
    assert_int_equal(r.closed, 1);
    assert_int_equal(strncmp(r.data, "HTTP/1.1 404 Not Found\r\n", 24), 0);
    const char *head = strstr(r.data + 1, "HTTP/1.1 200 OK\r\n");
    assert_non_null(head);
    const char *m405 = strstr(head, "HTTP/1.1 405 Method Not Allowed\r\n");
    assert_non_null(m405);
    /* HEAD: headers only, so the 405 follows the blank line at once. */
    assert_ptr_equal(strstr(head, "\r\n\r\n") + 4, m405);
    assert_non_null(strstr(m405, "Allow: GET, HEAD\r\n"));
    assert_non_null(strstr(m405, "Connection: close\r\n"));
    close(fd);

    struct http_stats st;
    http_get_stats(m, &st);
    assert_int_equal(metrics_scrapes(mobj), 2); /* GET and HEAD of /metrics */
    assert_int_equal(st.requests, 5);
    stop(m);
}

static void test_server_errors_close(void **state)
{
    (void)state;
    struct http_server *m = start(0, 0);
    /* Garbage: 400 and the connection ends. */
    int fd = dial(m);
    struct reply r = {.len = 0};
    const char *junk = "\x16\x03\x01\x02\x00 hello\r\n\r\n";
    exchange(fd, junk, strlen(junk), -1, &r);
    assert_int_equal(r.closed, 1);
    assert_int_equal(strncmp(r.data, "HTTP/1.1 400 Bad Request\r\n", 26), 0);
    assert_non_null(strstr(r.data, "Connection: close\r\n"));
    close(fd);

    /* A head larger than the bound: 431, whatever the client keeps sending. */
    fd = dial(m);
    memset(&r, 0, sizeof(r));
    size_t big = HTTP_MAX_REQUEST + 4096;
    char *req = malloc(big);
    assert_non_null(req);
    memcpy(req, "GET /metrics HTTP/1.1\r\nX: ", 26);
    memset(req + 26, 'a', big - 26);
    exchange(fd, req, big, -1, &r);
    free(req);
    assert_int_equal(r.closed, 1);
    assert_int_equal(strncmp(r.data, "HTTP/1.1 431 ", 13), 0);
    close(fd);

    /* HTTP/1.0 without keep-alive: answered, then closed. */
    fd = dial(m);
    memset(&r, 0, sizeof(r));
    exchange(fd, "GET /health HTTP/1.0\r\n\r\n", 24, -1, &r);
    assert_int_equal(r.closed, 1);
    assert_int_equal(strncmp(r.data, "HTTP/1.1 200 OK\r\n", 17), 0);
    close(fd);

    struct http_stats st;
    http_get_stats(m, &st);
    assert_int_equal(st.bad_requests, 1);
    assert_int_equal(st.too_big, 1);
    stop(m);
}

static void test_server_bounds(void **state)
{
    (void)state;
    struct http_server *m = start(2, 100);
    int a = dial(m), b = dial(m);
    struct reply ra = {.len = 0}, rb = {.len = 0}, rc = {.len = 0};
    /* Half a request on each: they hold both slots. */
    exchange(a, "GET /met", 8, 0, &ra);
    exchange(b, "GET /met", 8, 0, &rb);
    /* A third client still gets its answer: the oldest waiting connection
     * (a) is closed, unanswered, to make room. */
    int c = dial(m);
    exchange(c, "GET /health HTTP/1.1\r\n\r\n", 24, 1, &rc);
    assert_int_equal(complete(&rc), 1);
    assert_int_equal(strncmp(rc.data, "HTTP/1.1 200 OK\r\n", 17), 0);
    exchange(a, NULL, 0, -1, &ra);
    assert_int_equal(ra.closed, 1);
    assert_int_equal(ra.len, 0);
    close(a);
    close(c);
    /* Trickling bytes does not keep a connection: a byte every ~30 ms
     * for three idle periods, and the idle timer still closes it without
     * an answer. */
    for (int i = 0; i < 10 && !rb.closed; i++) {
        exchange(b, "r", 1, 0, &rb);
        pump_ms(b, 30, &rb);
    }
    assert_int_equal(rb.closed, 1);
    assert_int_equal(rb.len, 0);
    close(b);
    /* A slot is free again. */
    int d = dial(m);
    struct reply rd = {.len = 0};
    exchange(d, "GET /health HTTP/1.1\r\n\r\n", 24, 1, &rd);
    assert_int_equal(complete(&rd), 1);
    close(d);
    struct http_stats st;
    http_get_stats(m, &st);
    assert_int_equal(st.evicted, 1);
    assert_int_equal(st.refused, 0);
    assert_int_equal(st.timeouts, 1);
    stop(m);
}

/* [::1]:0 binds IPv6 loopback and answers there (skipped without IPv6). */
static void test_ipv6(void **state)
{
    (void)state;
    struct http_config cfg = {.bind = "[::1]:0"};
    struct http_server *m;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(http_create(&loop, &cfg, &m), 0);
    assert_int_equal(metrics_attach(m, collect, NULL, &mobj), 0);
    int rc = http_start(m);
    int fd = rc == 0 ? socket(AF_INET6, SOCK_STREAM, 0) : -1;
    if (fd >= 0) {
        struct sockaddr_in6 a;
        memset(&a, 0, sizeof(a));
        a.sin6_family = AF_INET6;
        a.sin6_port = htons((uint16_t)http_port(m));
        a.sin6_addr = in6addr_loopback;
        assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
        struct reply r = {.len = 0};
        exchange(fd, "GET /health HTTP/1.1\r\n\r\n", 24, 1, &r);
        assert_int_equal(complete(&r), 1);
        assert_non_null(strstr(r.data, "\r\n\r\nok\n"));
        close(fd);
    }
    http_close(m);
    uv_run(&loop, UV_RUN_DEFAULT);
    http_destroy(m);
    metrics_destroy(mobj);
    mobj = NULL;
    assert_int_equal(uv_loop_close(&loop), 0);
    if (rc != 0)
        skip();
}

static void test_bad_bind(void **state)
{
    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    static const char *bad[] = {"nocolon", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:8x",
                                "no.such.host.invalid:9464"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct http_config cfg = {.bind = bad[i]};
        struct http_server *m;
        assert_int_equal(http_create(&loop, &cfg, &m), 0);
        assert_int_equal(http_start(m), -SLUICE_EINVAL);
        assert_non_null(strstr(http_error(m), "http"));
        http_close(m);
        uv_run(&loop, UV_RUN_DEFAULT);
        http_destroy(m);
    }
    struct http_config none = {.bind = NULL};
    struct http_server *m;
    assert_int_equal(http_create(&loop, &none, &m), -SLUICE_EINVAL);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_and_metrics_agree),
        cmocka_unit_test(test_counter_tables_well_formed),
        cmocka_unit_test(test_counter_table_add),
        cmocka_unit_test(test_parse_get_every_split),
        cmocka_unit_test(test_parse_variants),
        cmocka_unit_test(test_parse_malformed),
        cmocka_unit_test(test_parse_size_bound),
        cmocka_unit_test(test_parse_noise),
        cmocka_unit_test(test_render_exact),
        cmocka_unit_test(test_render_grammar),
        cmocka_unit_test(test_server_answers),
        cmocka_unit_test(test_server_errors_close),
        cmocka_unit_test(test_server_bounds),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_bad_bind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
