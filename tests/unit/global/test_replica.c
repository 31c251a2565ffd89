/*
 * Unit tests: the lease replication of global limits (replica.h), with up
 * to three replicas on an in-memory network delivering at once, and a
 * clock the test moves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replica.h"
#include "sluice/error.h"
#include "wire.h"

#define MS  1000000LL
#define SEC 1000000000LL
#define N   3

struct msg {
    int from, to;
    size_t len;
    uint8_t buf[1500];
};

static struct {
    struct replica *r[N];
    const char *name[N];
    struct msg q[4096];
    size_t nq;
    int64_t now;
    int drop; /* drop everything sent */
} net;

static int idx(const char *name)
{
    for (int i = 0; i < N; i++)
        if (strcmp(net.name[i], name) == 0)
            return i;
    return -1;
}

static int sendfn(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    int from = (int)(intptr_t)ud;
    if (net.drop || net.nq == 4096 || len > 1500)
        return 0;
    struct msg *m = &net.q[net.nq++];
    m->from = from;
    m->to = idx(to);
    m->len = len;
    memcpy(m->buf, buf, len);
    return 0;
}

static void pump(void)
{
    for (size_t i = 0; i < net.nq; i++) {
        struct msg *m = &net.q[i];
        if (m->to >= 0 && net.r[m->to] != NULL)
            replica_receive(net.r[m->to], net.name[m->from], m->buf, m->len, net.now);
    }
    net.nq = 0;
    for (int i = 0; i < N; i++) /* as the daemon's loop, after a turn's messages */
        if (net.r[i] != NULL)
            replica_flush(net.r[i]);
}

static struct replica *mk(int i, int64_t young, size_t max_keys, int evict)
{
    struct replica_config c = {0};
    c.node_name = net.name[i];
    c.life_id = 1000 + (uint64_t)i + (uint64_t)net.now;
    c.interval_ns = 100 * MS;
    c.young_ns = young;
    c.max_keys = max_keys;
    c.evict = evict;
    c.default_policy = POLICY_PARTITION_SHARE;
    c.send = sendfn;
    c.send_ud = (void *)(intptr_t)i;
    struct replica *r;
    assert_int_equal(replica_create(&r, &c, net.now), 0);
    return r;
}

static void view(int n)
{
    struct replica_member m[N];
    for (int i = 0; i < n; i++) {
        m[i].name = net.name[i];
        m[i].live = 1;
        m[i].suspect = 0;
        m[i].quiet = 0;
    }
    for (int i = 0; i < n; i++)
        if (net.r[i] != NULL)
            replica_set_view(net.r[i], m, (size_t)n, 1, net.now);
}

static int setup(void **state)
{
    (void)state;
    memset(&net, 0, sizeof(net));
    net.name[0] = "a";
    net.name[1] = "b";
    net.name[2] = "c";
    net.now = 10 * SEC;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        replica_destroy(net.r[i]);
    return 0;
}

static struct algo_params limit(int64_t burst, int64_t count, int64_t period_ns)
{
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_GCRA, burst, count, period_ns, 0), 0);
    return p;
}

static int ask(int i, const char *key, const struct algo_params *p, int64_t qty)
{
    struct algo_result res;
    assert_int_equal(
        replica_throttle(net.r[i], key, strlen(key), p, POLICY_PARTITION_SHARE, qty, net.now, &res),
        0);
    return !res.limited;
}

/* Advances the clock by ms in 10 ms steps, ticking every replica each
 * interval (and its pass's further slices at once, as the daemon's loop
 * runs them turn after turn) and delivering messages at once. */
static void run_ms(int64_t ms)
{
    for (int64_t t = 0; t < ms; t += 10) {
        net.now += 10 * MS;
        for (int i = 0; i < N; i++)
            for (int slice = 0;
                 slice < 100000 && net.r[i] != NULL && net.now >= replica_next_deadline(net.r[i]);
                 slice++)
                replica_tick(net.r[i], net.now);
        pump();
    }
}

/* N replicas, all in one view, a second on: their owners settled. */
static void settled_cluster(void)
{
    for (int i = 0; i < N; i++)
        net.r[i] = mk(i, 0, 0, 0);
    view(N);
    run_ms(1000);
}

/* A node alone has the whole limit: the burst at once, then the rate. */
static void test_lone_node(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    struct algo_params p = limit(9, 10, SEC); /* 10 at once, 10/s */
    int ok = 0;
    for (int i = 0; i < 30; i++)
        ok += ask(0, "k", &p, 1);
    assert_int_equal(ok, 10);
    run_ms(1000);
    ok = 0;
    for (int i = 0; i < 30; i++)
        ok += ask(0, "k", &p, 1);
    assert_true(ok >= 9 && ok <= 11);
}

/* A key without a burst (burst 0, 100 a second) asked at just under its
 * rate on one node, a request every 10.5 ms: one central GCRA admits every
 * request, and so must the cluster once the owner has answered (before,
 * the node holds 1/N of the rate), alone or with others that do not ask.
 * Reports poured at once used to look like debt: 60% admitted on a real
 * daemon, in runs of 20 refusals. */
static void paced_no_burst(int nodes, int tick_ms)
{
    for (int i = 0; i < nodes; i++)
        net.r[i] = mk(i, 0, 0, 0);
    view(nodes);
    run_ms(1000);
    struct algo_params p = limit(0, 100, SEC);
    int ok = 0, n = 0, run = 0, worst = 0; /* worst: printed */
    int64_t t = 0;
    for (int step = 0; step < 4000; step++) { /* 4 s in 1 ms steps */
        net.now += MS;
        for (int i = 0; i < nodes && step % tick_ms == 0; i++)
            for (int slice = 0; slice < 100000 && net.now >= replica_next_deadline(net.r[i]);
                 slice++)
                replica_tick(net.r[i], net.now);
        pump();
        t += 1000;
        if (t >= 10500) {
            t -= 10500;
            int a = ask(0, "nb", &p, 1);
            if (step < 300) /* the owner's first answer */
                continue;
            ok += a;
            n++;
            run = a ? 0 : run + 1;
            if (run > worst)
                worst = run;
        }
    }
    fprintf(stderr,
            "no burst, %d node(s), ticks every %d ms: admitted %d of %d, longest refusal run %d\n",
            nodes, tick_ms, ok, n, worst);
    assert_true(ok == n);
}

static void test_paced_no_burst(void **state)
{
    (void)state;
    /* The daemon's loop ticks the replica late now and then: a tick every
     * 150 ms makes every report span one and a half intervals. */
    for (int nodes = 1; nodes <= N; nodes += 2)
        for (int tick_ms = 1; tick_ms <= 150; tick_ms += 149) {
            paced_no_burst(nodes, tick_ms);
            for (int i = 0; i < N; i++) {
                replica_destroy(net.r[i]);
                net.r[i] = NULL;
            }
        }
}

/* Three nodes with demand: the owner's shares never sum above one, and
 * the demanding node gets most of the limit once others go idle. */
static void test_shares_follow_demand(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        net.r[i] = mk(i, 0, 0, 0);
    view(N);
    struct algo_params p = limit(10, 100, SEC);
    int admitted[N] = {0};
    for (int step = 0; step < 300; step++) { /* 3 s: a at 300/s, b and c at 100/s */
        for (int j = 0; j < 3; j++)
            admitted[0] += ask(0, "hot", &p, 1);
        admitted[1] += ask(1, "hot", &p, 1);
        admitted[2] += ask(2, "hot", &p, 1);
        run_ms(10);
    }
    int total = admitted[0] + admitted[1] + admitted[2];
    /* The cluster admits one limit: 11 + 100/s over 3 s. */
    assert_true(total <= 11 + 300 + 15);
    assert_true(total >= 280);
    assert_true(admitted[0] > admitted[1]);
    double sum = 0;
    for (int i = 0; i < N; i++) {
        struct replica_key_info ki;
        assert_int_equal(replica_key_info(net.r[i], "hot", 3, net.now, &ki, NULL, NULL), 0);
        sum += ki.share;
    }
    assert_true(sum <= 1.0 + 1e-6);
    assert_true(sum >= 0.9);
    /* b and c stop: a's share grows to nearly all of it */
    for (int step = 0; step < 300; step++) {
        for (int j = 0; j < 3; j++)
            ask(0, "hot", &p, 1);
        run_ms(10);
    }
    struct replica_key_info ki;
    assert_int_equal(replica_key_info(net.r[0], "hot", 3, net.now, &ki, NULL, NULL), 0);
    assert_true(ki.share > 0.9);
}

/* A node that uses a key alone gets the whole burst: what it takes before
 * its first lease is its 1/N, the lease tops the rest up. */
static void test_lone_consumer_whole_burst(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        net.r[i] = mk(i, 0, 0, 0);
    view(N);
    struct algo_params p = limit(9, 1, 3600 * SEC); /* 10 at once, then 1 an hour */
    int ok = 0;
    for (int step = 0; step < 100; step++) { /* 10/s for 1 s */
        if (step % 10 == 0)
            ok += ask(0, "alone", &p, 1);
        run_ms(10);
    }
    for (int i = 0; i < 20; i++)
        ok += ask(0, "alone", &p, 1);
    assert_int_equal(ok, 10);
    /* another node that comes later gets at most its first-touch part */
    int late = 0;
    for (int i = 0; i < 10; i++)
        late += ask(1, "alone", &p, 1);
    assert_true(late <= 10 / N + 1);
}

/* A burst-only key (1 an hour) used round robin from three nodes admits
 * its whole burst, however the shares move as demand shifts, and no more;
 * and when the users change, the burst left follows them. */
static void test_burst_follows_users(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(29, 1, 3600 * SEC); /* 30 at once, then 1 an hour */
    int ok[N] = {0};
    for (int step = 0; step < 270; step++) { /* one request every 20 ms, round robin */
        ok[step % N] += ask(step % N, "spread", &p, 1);
        run_ms(20);
    }
    int total = ok[0] + ok[1] + ok[2];
    fprintf(stderr, "spread %d %d %d\n", ok[0], ok[1], ok[2]);
    assert_true(total >= 28);
    /* availability first: free units may overshoot by about a unit per
     * node, well within replica.h's bound (2 x 30 + 3 N) */
    assert_true(total <= 30 + N);
    assert_true(ok[0] > 0 && ok[1] > 0 && ok[2] > 0);

    /* a takes a third of another key's burst, then only b and c ask: they
     * get the rest, not a third each */
    int a = 0, bc = 0;
    for (int step = 0; step < 10; step++) {
        a += ask(0, "moving", &p, 1);
        run_ms(100);
    }
    for (int step = 0; step < 200; step++) {
        bc += ask(1 + step % 2, "moving", &p, 1);
        run_ms(20);
    }
    fprintf(stderr, "moving a %d bc %d\n", a, bc);
    assert_true(a + bc >= 28);
    assert_true(a + bc <= 30 + N);
    assert_true(bc >= 18);
}

/* A thin key (replica_owner.c): 6 a minute with a burst of 1, hammered
 * from two nodes at a hundred times its rate, admits what one central
 * bucket would (2 at once, then one each 10 s), not a unit per node per
 * lease; the owner keeps the limit in the cluster's bucket (leases carry
 * odds, shares are 0), and the third node, which never asked, is sent
 * notices, so its own first requests take no unit on credit. */
static void test_thin_key_central(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(1, 6, 60 * SEC);
    int ok = 0;
    for (int step = 0; step < 600; step++) { /* 60 s, 10 requests a second */
        ok += ask(step % 2, "thin", &p, 1);
        run_ms(100);
    }
    fprintf(stderr, "thin: %d admitted in 60 s (one central bucket: 8)\n", ok);
    assert_true(ok >= 6 && ok <= 10);
    struct replica_stats st;
    replica_get_stats(net.r[2], &st);
    fprintf(stderr, "thin: node c received %llu notices\n",
            (unsigned long long)st.notices_received);
    assert_true(st.notices_received > 0);
    /* c asks 20 times, 10 ms apart, before any lease of its own: no
     * first touch on credit while a notice says the bucket is drained;
     * what passes, passes on the notice's odds (a unit at most). */
    int c = 0;
    for (int step = 0; step < 20; step++) {
        c += ask(2, "thin", &p, 1);
        net.now += 10 * MS;
    }
    assert_true(c <= 1);
    struct replica_key_info ki;
    assert_int_equal(replica_key_info(net.r[0], "thin", 4, net.now, &ki, NULL, NULL), 0);
    assert_true(ki.share == 0.0);
}

/* A node that spent its first unit of a key (its part of a small burst)
 * asks its owner at once rather than at its next tick, and the owner
 * answers at once: the next request, before any tick, is admitted on the
 * free units of that lease, whichever node owns the key (this one too).
 * Then, all in one instant, 60 requests over the three nodes with only
 * prompt reports in between admit what one central bucket has plus the
 * refill the free units count on and a unit per node, not a unit per
 * request. */
static void prompt_turn(void)
{
    for (int i = 0; i < N; i++)
        if (replica_prompt_pending(net.r[i]))
            replica_tick(net.r[i], net.now);
    pump(); /* the reports */
    pump(); /* the leases */
}

static void test_prompt_lease(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(2, 10, SEC); /* 3 at once, 10/s: a unit per node */
    char key[8];
    for (int k = 0; k < 6; k++) {
        snprintf(key, sizeof(key), "p%d", k);
        int i = k % N;
        assert_true(ask(i, key, &p, 1));
        assert_true(replica_prompt_pending(net.r[i]));
        prompt_turn();
        assert_true(ask(i, key, &p, 1));
    }
    struct replica_stats st;
    uint64_t prompts = 0;
    for (int i = 0; i < N; i++) {
        replica_get_stats(net.r[i], &st);
        prompts += st.prompt_reports;
    }
    assert_true(prompts >= 6);
    int ok = 0;
    for (int n = 0; n < 60; n++) {
        ok += ask(n % N, "q", &p, 1);
        prompt_turn();
    }
    fprintf(stderr, "prompt: %d of 60 admitted at once (one central bucket: 3)\n", ok);
    assert_true(ok >= 3 && ok <= 3 + 4 + N);
}

/* A refusal's retry_after is when the cluster would admit, as one central
 * limiter would say, not when the refusing node's share refills: a key of
 * 5 a second that node 1 hammers (50 a second) holds a small share on node
 * 0, which asks twice a second; node 0's refusals say at most a unit's time
 * of the whole rate (0.2 s) and an interval (2.7 s was said before, node
 * 0's own share's time; 0.8 s with the other nodes' demand taken off the
 * level ahead of time). */
static void test_retry_after_is_the_clusters(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(9, 300, 60 * SEC); /* 10 at once, 5 a second */
    int64_t worst = 0, sum = 0;
    int seen = 0;
    for (int n = 0; n < 500; n++) { /* 10 s; node 1 asks 50 a second, node 0 2 */
        (void)ask(1, "r", &p, 1);
        if (n % 25 == 0) {
            struct algo_result res;
            assert_int_equal(
                replica_throttle(net.r[0], "r", 1, &p, POLICY_PARTITION_SHARE, 1, net.now, &res),
                0);
            if (res.limited && n >= 250) {
                seen++;
                sum += res.retry_after_ns;
                if (res.retry_after_ns > worst)
                    worst = res.retry_after_ns;
            }
        }
        run_ms(20);
    }
    fprintf(stderr,
            "retry_after: mean %.3f s, worst %.3f s over %d refusals (one central limiter: "
            "0.2)\n",
            seen ? (double)sum / seen / 1e9 : 0.0, (double)worst / 1e9, seen);
    assert_true(seen >= 5);
    assert_true(worst <= 300 * MS);
}

/* Nodes that only peek at a key hold nothing of it once their owner has
 * answered: a burst of one unit (burst 0, 1 an hour) peeked at on every
 * node, the owner first (alone in its record, it leases itself all of it
 * and its first-touch unit may be whole), still admits its unit on the
 * node that asks, and only one.  Eight keys, so that some owner's first
 * touch is a whole unit. */
static void test_peekers_hold_nothing(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(0, 1, 3600 * SEC);
    char key[8][8];
    for (int k = 0; k < 8; k++) {
        snprintf(key[k], sizeof(key[k]), "one%d", k);
        struct replica_key_info ki;
        assert_int_equal(ask(0, key[k], &p, 0), 1); /* a peek */
        assert_int_equal(
            replica_key_info(net.r[0], key[k], strlen(key[k]), net.now, &ki, NULL, NULL), 0);
        int owner = idx(ki.owner);
        assert_true(owner >= 0);
        assert_int_equal(ask(owner, key[k], &p, 0), 1);
    }
    run_ms(300);
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < N; i++)
            assert_int_equal(ask(i, key[k], &p, 0), 1);
    run_ms(2000); /* reported, leased; a peeker's full bucket goes idle */
    int ok[8] = {0};
    for (int step = 0; step < 100; step++) { /* b asks every 20 ms for 2 s */
        for (int k = 0; k < 8; k++)
            ok[k] += ask(1, key[k], &p, 1);
        run_ms(20);
    }
    for (int k = 0; k < 8; k++) {
        for (int i = 0; i < N; i++)
            ok[k] += ask(i, key[k], &p, 1);
        assert_int_equal(ok[k], 1);
    }
}

/* A restarted (young) node starts a key below one unit: no fresh quota
 * while another node uses the key; a cold key (nobody else uses it) fills
 * from the owner's grants. */
static void test_young_no_fresh_quota(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    net.r[1] = mk(1, 0, 0, 0);
    view(2);
    struct algo_params p = limit(10, 10, SEC);
    for (int step = 0; step < 200; step++) {
        ask(0, "busy", &p, 1);
        ask(1, "busy", &p, 1);
        run_ms(10);
    }
    /* b restarts (a new life, young for 2 s) */
    replica_destroy(net.r[1]);
    net.r[1] = mk(1, 2 * SEC, 0, 0);
    view(2);
    assert_int_equal(replica_synced(net.r[1]), 0);
    int ok = 0;
    for (int i = 0; i < 20; i++)
        ok += ask(1, "busy", &p, 1);
    assert_int_equal(ok, 0); /* nothing at once */
    struct replica_stats st;
    replica_get_stats(net.r[1], &st);
    assert_true(st.young_denials > 0);
    /* over 500 ms it gets at most its part of the rate (10/s) */
    for (int step = 0; step < 50; step++) {
        ok += ask(1, "busy", &p, 1);
        ask(0, "busy", &p, 1);
        run_ms(10);
    }
    assert_true(ok <= 6);
    /* a key nobody uses: once the young period is over (or an owner that
     * knows the cluster answers) the owner grants it the unused burst */
    ask(1, "quiet", &p, 1);
    run_ms(2500);
    ok = 0;
    for (int i = 0; i < 20; i++)
        ok += ask(1, "quiet", &p, 1);
    assert_true(ok >= 5);
}

/* A node taken as new (nobody it met knew a past life of its name: seeds
 * restarted together meet each other first) that learns of a past life
 * afterwards keeps nothing it took as new: every key drops below one unit
 * at once, and it serves again only on a settled owner's lease. */
static void test_unsync_drops_what_was_taken_as_new(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    net.r[1] = mk(1, 2 * SEC, 0, 0);
    replica_mark_synced(net.r[1]); /* joined as new */
    view(2);
    struct algo_params p = limit(10, 10, SEC);
    int ok = 0;
    for (int i = 0; i < 3; i++)
        ok += ask(1, "k", &p, 1);
    assert_true(ok >= 1); /* a new member serves at once */
    run_ms(20);
    replica_unsync(net.r[1], net.now);
    assert_int_equal(replica_synced(net.r[1]), 0);
    struct replica_stats st0, st1;
    replica_get_stats(net.r[1], &st0);
    ok = 0;
    for (int i = 0; i < 20; i++)
        ok += ask(1, "k", &p, 1);
    assert_int_equal(ok, 0);
    replica_get_stats(net.r[1], &st1);
    assert_true(st1.young_denials > st0.young_denials);
    /* The owner (a, settled) leases it again within a few intervals. */
    run_ms(500);
    assert_int_equal(replica_synced(net.r[1]), 1);
    ok = 0;
    for (int i = 0; i < 20; i++)
        ok += ask(1, "k", &p, 1);
    assert_true(ok >= 1);
}

/* Counts the reports in a batch and those that leave the limit out. */
static void count_report(void *ud, uint64_t life, const struct wire_report *e)
{
    (void)life;
    int *c = ud;
    c[0]++;
    c[1] += e->count == 0;
}

static void count_bare(int c[2])
{
    struct wire_handler h = {c, count_report, NULL, NULL};
    for (size_t i = 0; i < net.nq; i++)
        (void)wire_decode(net.q[i].buf, net.q[i].len, &h);
}

/* A report leaves the limit out once the key's owner has answered; an
 * owner that lost its record (restarted) drops such reports, and the
 * reporter sends the limit again within KNOWN_FOR intervals, so the key is
 * leased again. */
static void test_owner_relearns_limit(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    net.r[1] = mk(1, 0, 0, 0);
    view(2);
    struct algo_params p = limit(10, 10, SEC);
    char key[16] = "";
    for (int i = 0; i < 64 && key[0] == '\0'; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        ask(0, k, &p, 0);
        struct replica_key_info info;
        assert_int_equal(replica_key_info(net.r[0], k, strlen(k), net.now, &info, NULL, NULL), 0);
        if (strcmp(info.owner, "b") == 0)
            snprintf(key, sizeof(key), "%s", k);
    }
    assert_true(key[0] != '\0');
    struct replica_stats b;
    /* the first reports carry the limit, the later ones leave it out */
    int first[2] = {0, 0}, later[2] = {0, 0};
    for (int step = 0; step < 200; step++) {
        ask(0, key, &p, 1);
        net.now += 10 * MS;
        for (int i = 0; i < N; i++)
            while (net.r[i] != NULL && net.now >= replica_next_deadline(net.r[i]))
                replica_tick(net.r[i], net.now);
        count_bare(step < 5 ? first : later);
        pump();
    }
    printf("reports: first %d (%d without the limit), later %d (%d)\n", first[0], first[1],
           later[0], later[1]);
    assert_true(first[0] > 0 && first[1] == 0);
    assert_true(later[1] >= later[0] * 3 / 4 && later[1] > 10);
    /* b restarts and knows nothing of the key */
    replica_destroy(net.r[1]);
    net.r[1] = mk(1, 0, 0, 0);
    view(2);
    int ok = 0;
    for (int step = 0; step < 300; step++) {
        ok += ask(0, key, &p, 1);
        run_ms(10);
    }
    replica_get_stats(net.r[1], &b);
    assert_true(b.bare_unknown > 0);
    assert_int_equal(b.owned_keys, 1);
    /* leased again: about the rate over the last 3 s (10/s) */
    assert_true(ok >= 20);
}

/* Ticks only the owners b and c for ms (node a stays quiet: no report
 * after the ones already sent), delivering messages at once. */
static void run_owners_ms(int64_t ms)
{
    for (int64_t t = 0; t < ms; t += 10) {
        net.now += 10 * MS;
        for (int i = 1; i < N; i++)
            for (int slice = 0; slice < 100000 && net.now >= replica_next_deadline(net.r[i]);
                 slice++)
                replica_tick(net.r[i], net.now);
        pump();
    }
}

/* New keys asked once on node a alone (15 at once, 60 a minute) get one
 * lease per report from their owners.  The cluster's bucket refilling the
 * unit taken raises a key's free units by one a few intervals later; for
 * a key's only reporter, which holds units, that rise waits for the key's
 * next report instead of going out alone (over a million new keys it was
 * a second lease for most, half the owners' lease traffic).  The next
 * report is answered with it, and the keys keep their whole burst. */
static void test_one_lease_per_new_key(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(15, 60, 60 * SEC);
    struct replica_stats st0[N], st1[N];
    for (int i = 1; i < N; i++)
        replica_get_stats(net.r[i], &st0[i]);
    char k[16];
    for (int i = 0; i < 60; i++) {
        snprintf(k, sizeof(k), "new%d", i);
        assert_true(ask(0, k, &p, 1));
    }
    net.now = replica_next_deadline(net.r[0]);
    replica_tick(net.r[0], net.now); /* a reports them, once */
    pump();
    run_owners_ms(1400); /* the unit taken is back: the free units rose */
    uint64_t reports = 0, leases = 0;
    for (int i = 1; i < N; i++) {
        replica_get_stats(net.r[i], &st1[i]);
        reports += st1[i].report_entries_received - st0[i].report_entries_received;
        leases += st1[i].lease_entries_sent - st0[i].lease_entries_sent;
    }
    printf("owners b and c: %llu report entries received, %llu lease entries sent\n",
           (unsigned long long)reports, (unsigned long long)leases);
    assert_true(reports >= 20); /* about two thirds of the 60 keys */
    assert_int_equal(leases, reports);
    /* a reports again (every key, at its next pass): each report is
     * answered, with the free units as they are now */
    run_ms(1000);
    int ok = 0;
    for (int i = 0; i < 60; i++) {
        snprintf(k, sizeof(k), "new%d", i);
        for (int j = 0; j < 16; j++)
            ok += ask(0, k, &p, 1);
    }
    printf("asked again: %d of %d admitted\n", ok, 60 * 16);
    assert_int_equal(ok, 60 * 16);
}

/* A node whose key was never leased (its reports and the leases all lost)
 * knows nothing of the others' demand: once it counts the owner silent it
 * holds 1/N of the rate, as before its first lease, not the whole rate as
 * if nobody else asked; unless the owner is suspected. */
static void test_never_leased_silent_owner(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(9, 30, SEC); /* 10 at once, 30/s */
    char key[16] = "";
    for (int k = 0; k < 200; k++) { /* a key a owns */
        struct replica_key_info ki;
        snprintf(key, sizeof(key), "u%d", k);
        ask(1, key, &p, 0); /* a peek: nothing taken */
        if (replica_key_info(net.r[1], key, strlen(key), net.now, &ki, NULL, NULL) == 0 &&
            ki.owner != NULL && strcmp(ki.owner, "a") == 0)
            break;
    }
    struct replica_key_info ki;
    assert_int_equal(replica_key_info(net.r[1], key, strlen(key), net.now, &ki, NULL, NULL), 0);
    assert_string_equal(ki.owner, "a");
    net.drop = 1;
    int ok = 0;
    for (int step = 0; step < 300; step++) { /* b at 100/s for 3 s */
        ok += ask(1, key, &p, 1);
        run_ms(10);
    }
    assert_int_equal(replica_key_info(net.r[1], key, strlen(key), net.now, &ki, NULL, NULL), 0);
    fprintf(stderr, "never leased: share %.3f, degraded %d, %d of 300 admitted\n", ki.share,
            ki.degraded, ok);
    assert_true(ki.degraded);
    assert_true(fabs(ki.share - 1.0 / N) < 1e-3);
    /* Its third of the burst and of 3 s of the rate, a unit or two more
     * (first touches, the degraded bucket's extra unit); the whole rate
     * from the silence on would be 70 or more. */
    assert_true(ok <= 10 / N + 30 + 4);
    /* Once b's failure detector suspects a, a is likely dead: b takes
     * what its own demand asks (availability first), not 1/N of it until
     * the verdict. */
    struct replica_member m[N] = {{"a", 1, 1, 0}, {"b", 1, 0, 0}, {"c", 1, 0, 0}};
    assert_int_equal(replica_set_view(net.r[1], m, N, 1, net.now), 0);
    ok = 0;
    for (int step = 0; step < 100; step++) { /* 1 s more at 100/s */
        ok += ask(1, key, &p, 1);
        run_ms(10);
    }
    assert_int_equal(replica_key_info(net.r[1], key, strlen(key), net.now, &ki, NULL, NULL), 0);
    fprintf(stderr, "owner suspected: share %.3f, %d of 100 admitted\n", ki.share, ok);
    assert_true(ki.share > 0.99);
    assert_true(ok >= 25);
}

/* A lease for another life of this name is ignored; garbage is counted and
 * dropped. */
static void test_stale_and_garbage(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    net.r[1] = mk(1, 0, 0, 0);
    view(2);
    struct algo_params p = limit(10, 10, SEC);
    ask(0, "x", &p, 1);
    ask(1, "x", &p, 1);
    /* a lease addressed to a life that is not b's */
    uint8_t buf[128];
    struct wire_writer w;
    wire_writer_init(&w, buf, sizeof(buf), WIRE_LEASE, 424242, 99);
    struct wire_lease l = {
        .key = "x", .klen = 1, .share = WIRE_ONE, .flags = WIRE_L_SETTLED, .grant_milli = 5000};
    assert_int_equal(wire_add_lease(&w, &l), 0);
    size_t n = wire_writer_finish(&w);
    assert_int_equal(replica_receive(net.r[1], "a", buf, n, net.now), 0);
    struct replica_stats st;
    replica_get_stats(net.r[1], &st);
    assert_int_equal(st.stale_leases, 1);
    uint8_t junk[] = {0x95, 0x02, 0x02, 0xff, 0x00};
    assert_true(replica_receive(net.r[1], "a", junk, sizeof(junk), net.now) < 0);
    assert_true(replica_receive(net.r[1], "b", buf, n, net.now) < 0); /* from itself */
    replica_get_stats(net.r[1], &st);
    assert_int_equal(st.bad_packets, 2);
}

/* Global keys are bounded: refused at max_keys, or the nearest-idle one
 * evicted. */
static void test_max_keys(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 4, 0);
    net.r[1] = mk(1, 0, 4, 1);
    struct algo_params p = limit(10, 10, SEC);
    struct algo_result res;
    char key[16];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(replica_throttle(net.r[0], key, strlen(key), &p, POLICY_PARTITION_SHARE, 1,
                                          net.now, &res),
                         0);
        assert_int_equal(replica_throttle(net.r[1], key, strlen(key), &p, POLICY_PARTITION_SHARE, 1,
                                          net.now, &res),
                         0);
    }
    assert_int_equal(
        replica_throttle(net.r[0], "k9", 2, &p, POLICY_PARTITION_SHARE, 1, net.now, &res),
        -SLUICE_EFULL);
    assert_int_equal(
        replica_throttle(net.r[1], "k9", 2, &p, POLICY_PARTITION_SHARE, 1, net.now, &res), 0);
    struct replica_stats st;
    replica_get_stats(net.r[0], &st);
    assert_int_equal(st.refused_full, 1);
    assert_int_equal(st.keys, 4);
    replica_get_stats(net.r[1], &st);
    assert_int_equal(st.evicted, 1);
    assert_int_equal(st.keys, 4);
}

/* An idle key is dropped on the node after the grace, and its owner record
 * after a silence window. */
static void test_idle_keys_reclaimed(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    net.r[1] = mk(1, 0, 0, 0);
    view(2);
    struct algo_params p = limit(5, 50, SEC);
    char key[16];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "u%d", i);
        ask(i % 2, key, &p, 1);
    }
    run_ms(200);
    struct replica_stats a, b;
    replica_get_stats(net.r[0], &a);
    replica_get_stats(net.r[1], &b);
    assert_int_equal(a.keys + b.keys, 200);
    assert_true(a.owned_keys + b.owned_keys > 0);
    run_ms(7000); /* grace 5 s */
    replica_get_stats(net.r[0], &a);
    replica_get_stats(net.r[1], &b);
    assert_int_equal(a.keys + b.keys, 0);
    assert_int_equal(a.owned_keys + b.owned_keys, 0);
}

/* Churn at 10,000 new keys a second keeps up: a key lives about 6 s after
 * its request (idle after 1 s of quiet, dropped after the 5 s grace; beyond
 * SWEEP_MAX keys a quiet key is visited every n / SWEEP_MAX intervals,
 * about 0.2 s here, each time later), so the table levels off near 65,000
 * keys, and all are gone 8 s after the churn stops. */
static void test_churn_10k_per_second(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    struct algo_params p = limit(5, 10, SEC);
    char key[32];
    size_t peak = 0;
    for (int step = 0; step < 1000; step++) { /* 10 s: 100 keys every 10 ms */
        for (int j = 0; j < 100; j++) {
            snprintf(key, sizeof(key), "churn:%d:%d", step, j);
            ask(0, key, &p, 1);
        }
        run_ms(10);
        struct replica_stats st;
        replica_get_stats(net.r[0], &st);
        if (st.keys > peak)
            peak = st.keys;
    }
    fprintf(stderr, "  churn: peak %zu keys\n", peak);
    assert_true(peak <= 80000);
    run_ms(8000);
    struct replica_stats st;
    replica_get_stats(net.r[0], &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.owned_keys, 0);
    assert_true(st.gc_keys >= 100000);
}

/* A host clock that moves 0.2 ms at every reading: a pass's turn (0.5 ms
 * of its clock) ends after a few dozen key visits, as on a loaded host. */
static int64_t slow_clock(void *ud)
{
    int64_t *t = ud;
    return *t += 200000;
}

/* Replica i on a host clock the test moves through clock (replica__timed). */
static void mk_clocked(int i, replica_clock_fn clock, int64_t *host)
{
    struct replica_config c = {0};
    c.node_name = net.name[i];
    c.life_id = 1000 + (uint64_t)i;
    c.interval_ns = 100 * MS;
    c.default_policy = POLICY_PARTITION_SHARE;
    c.send = sendfn;
    c.send_ud = (void *)(intptr_t)i;
    c.clock = clock;
    c.clock_ud = host;
    assert_int_equal(replica_create(&net.r[i], &c, net.now), 0);
}

/* A pass that runs over many loop turns sends its reports in full batches,
 * not a small batch to every owner at the end of every turn: each batch
 * costs a 26-byte header, and the lease that answers it another (100 nodes
 * of 10,000 keys sent two or three entries a batch). */
static void test_pass_batches_fill(void **state)
{
    (void)state;
    int64_t host = 0;
    for (int i = 0; i < N; i++)
        mk_clocked(i, slow_clock, &host);
    view(N);
    run_ms(1000);
    struct algo_params p = limit(100, 100, SEC);
    char key[32];
    for (int j = 0; j < 300; j++) {
        snprintf(key, sizeof(key), "batch:%d", j);
        ask(0, key, &p, 1);
    }
    run_ms(1000); /* every key leased, its first reports and prompts done */
    struct replica_stats a, b;
    replica_get_stats(net.r[0], &a);
    for (int j = 0; j < 300; j++) {
        snprintf(key, sizeof(key), "batch:%d", j);
        assert_true(ask(0, key, &p, 1));
    }
    run_ms(100); /* one pass reports them all */
    replica_get_stats(net.r[0], &b);
    uint64_t entries = b.report_entries_sent - a.report_entries_sent;
    uint64_t msgs = b.reports_sent - a.reports_sent;
    uint64_t bytes = b.report_bytes_sent - a.report_bytes_sent;
    fprintf(stderr, "  a pass's reports: %llu entries in %llu messages, %llu bytes\n",
            (unsigned long long)entries, (unsigned long long)msgs, (unsigned long long)bytes);
    /* About 200 go to the two other owners, in batches of up to 1200 bytes. */
    assert_true(entries >= 150);
    assert_true(msgs <= bytes / 1000 + 4);
}

/* A host clock that moves 5 us at every reading (eight key visits). */
static int64_t visit_clock(void *ud)
{
    int64_t *t = ud;
    return *t += 5000;
}

/* A pass behind its keys (20,000 new ones at once) takes a slice of each
 * loop turn: between turns of 1 ms of clients' work, a quarter of that
 * (TURN_SHARE), not TURN_NS (a third of the loop, and more between the
 * shorter turns of unpipelined clients); on an idle loop, a whole TURN_NS.
 * The pass still ends. */
/* Replica 0 on the host clock *host, with 20,000 new keys asked at once
 * and the pass that reports them due. */
static void pass_behind(int64_t *host)
{
    mk_clocked(0, visit_clock, host);
    view(1);
    run_ms(1000);
    struct algo_params p = limit(100, 100, SEC);
    char key[32];
    for (int j = 0; j < 20000; j++) {
        snprintf(key, sizeof(key), "new:%d", j);
        assert_true(ask(0, key, &p, 1));
    }
    net.now += 100 * MS; /* the next pass is due */
}

static void test_pass_slice_shares_the_loop(void **state)
{
    (void)state;
    int64_t host = 0;
    pass_behind(&host);
    int64_t longest_busy = 0, longest_idle = 0;
    int turns = 0;
    for (; turns < 10000 && net.now >= replica_next_deadline(net.r[0]); turns++) {
        int idle = turns % 10 == 9; /* every tenth turn follows 50 ms of quiet */
        host += idle ? 50 * MS : 1 * MS;
        int64_t before = host;
        replica_tick(net.r[0], net.now);
        int64_t took = host - before;
        if (idle && took > longest_idle)
            longest_idle = took;
        if (!idle && took > longest_busy)
            longest_busy = took;
        pump();
    }
    fprintf(stderr, "  %d turns; longest slice %lld us after 1 ms, %lld us after 50 ms\n", turns,
            (long long)(longest_busy / 1000), (long long)(longest_idle / 1000));
    assert_true(turns < 10000);          /* the pass ended */
    assert_true(longest_busy <= 300000); /* a quarter of 1 ms, and a reading or two */
    assert_true(longest_idle >= 400000); /* the loop had time: a whole slice */
}

/* How long a pass takes is told (replica_pass_max): the pass in progress
 * while it runs, the longest since the last reset once it ended, nothing
 * after a reset; and how much waits for it (replica_backlog), until none.
 * 20,000 new keys between turns of 1 ms of clients' work take a pass of
 * many turns, longer than the interval: the replication is behind its
 * keys, and says so. */
static void test_pass_length_reported(void **state)
{
    (void)state;
    int64_t host = 0;
    pass_behind(&host);
    assert_true(replica_pass_max(net.r[0], net.now) < 100 * MS); /* the passes of the settling */
    replica_reset_max(net.r[0]);
    assert_int_equal(replica_pass_max(net.r[0], net.now), 0);
    assert_true(replica_backlog(net.r[0]) >= 20000); /* every new key waits for its report */
    int turns = 0;
    for (; turns < 10000 && net.now >= replica_next_deadline(net.r[0]); turns++) {
        replica_tick(net.r[0], net.now);
        if (turns == 20) /* still running: its length so far */
            assert_true(replica_pass_max(net.r[0], net.now) >= 20 * MS);
        net.now += MS;
        host += MS;
        pump();
    }
    int64_t took = replica_pass_max(net.r[0], net.now);
    fprintf(stderr, "  %d turns; the longest pass %lld ms\n", turns, (long long)(took / MS));
    assert_true(turns < 10000);
    assert_true(took > 100 * MS);                   /* longer than the interval */
    assert_true(took <= turns * MS);                /* no longer than the turns it ran over */
    assert_int_equal(replica_backlog(net.r[0]), 0); /* caught up */
    replica_reset_max(net.r[0]);
    assert_int_equal(replica_pass_max(net.r[0], net.now), 0);
}

/* Bad arguments change nothing. */
static void test_bad_arguments(void **state)
{
    (void)state;
    net.r[0] = mk(0, 0, 0, 0);
    struct algo_params p = limit(5, 50, SEC), log;
    assert_int_equal(algo_params_init(&log, ALGO_SLIDING_LOG, 0, 5, SEC, 0), 0);
    struct algo_result res;
    assert_int_equal(
        replica_throttle(net.r[0], "k", 1, &log, POLICY_PARTITION_SHARE, 1, net.now, &res),
        -SLUICE_EINVAL);
    assert_int_equal(
        replica_throttle(net.r[0], "k", 1, &p, POLICY_PARTITION_SHARE, -1, net.now, &res),
        -SLUICE_EINVAL);
    assert_int_equal(
        replica_throttle(net.r[0], "", 0, &p, POLICY_PARTITION_SHARE, 1, net.now, &res),
        -SLUICE_EINVAL);
    struct replica_stats st;
    replica_get_stats(net.r[0], &st);
    assert_int_equal(st.keys, 0);
    struct replica_config c = {0};
    struct replica *r;
    assert_int_equal(replica_create(&r, &c, 0), -SLUICE_EINVAL);
}

/* A global fixed window of 1 a minute on 3 nodes, asked on every node
 * every second for 4 minutes: a node whose part of the count is less than
 * a unit admits only on the cluster's credit, so the cluster admits about
 * one a minute (plus the free units of nodes asking at the same instant,
 * then repaid), not one per node a minute (12). */
static void test_window_part_below_a_unit(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p;
    assert_int_equal(algo_params_init(&p, ALGO_FIXED_WINDOW, 0, 1, 60 * SEC, 0), 0);
    /* every node holds the key and has heard from its owner */
    for (int i = 0; i < N; i++)
        ask(i, "w1", &p, 0);
    run_ms(500);
    int ok = 0;
    for (int step = 0; step < 240; step++) {
        for (int i = 0; i < N; i++)
            ok += ask(i, "w1", &p, 1);
        run_ms(1000);
    }
    fprintf(stderr, "window 1/min on %d nodes: %d admitted in 4 min\n", N, ok);
    assert_true(ok >= 3);
    assert_true(ok <= 4 + N - 1);
}

/* A quantity beyond the limit is refused everywhere and is not demand: a
 * client asking for it on one node does not pull the key's share there
 * from the node whose client asks for what can pass. */
static void test_impossible_quantity_not_demand(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(4, 10, SEC); /* 5 at once, 10 a second */
    int ok = 0;
    for (int step = 0; step < 300; step++) { /* 3 s */
        assert_int_equal(ask(0, "q", &p, 50), 0);
        ok += ask(1, "q", &p, 1);
        run_ms(10);
    }
    struct replica_key_info ki;
    assert_int_equal(replica_key_info(net.r[1], "q", 1, net.now, &ki, NULL, NULL), 0);
    fprintf(stderr, "impossible quantities elsewhere: share %.2f here, %d of 300 admitted\n",
            ki.share, ok);
    assert_true(ki.share > 0.9);
    assert_true(ok >= 25); /* 10 a second for 3 s, less the first lease */
}

/* A new user's burst on one node: 16 requests 50 ms apart (and 100 ms
 * apart) on keys of burst 16 nobody used before, all on node a, as one
 * central bucket admits all 16.  The key's owner grants the node what its
 * demand takes once the record of a key new to the cluster has settled
 * (BORN_SETTLE intervals, not a silence window: 10 of 16 passed at 50 ms
 * apart, the node held to its first third of the burst for half a
 * second), and a grant is not cut by what the node admitted from its own
 * tokens since the report it answers (the owner counted those as held:
 * 15 of 16 at 100 ms apart).  Keys of each owner: a's own, b's and c's. */
static void test_new_key_burst_one_node(void **state)
{
    (void)state;
    settled_cluster();
    struct algo_params p = limit(15, 30, 60 * SEC); /* 16 at once, 30 a minute */
    int owners[N] = {0};
    for (int gap = 50; gap <= 100; gap += 50) {
        for (int k = 0; k < 9; k++) {
            char key[32];
            snprintf(key, sizeof(key), "user:%d:%d", gap, k);
            int ok = 0;
            for (int j = 0; j < 16; j++) {
                ok += ask(0, key, &p, 1);
                run_ms(gap);
            }
            struct replica_key_info ki;
            assert_int_equal(replica_key_info(net.r[0], key, strlen(key), net.now, &ki, NULL, NULL),
                             0);
            owners[idx(ki.owner)]++;
            if (ok != 16)
                fprintf(stderr, "burst %d ms apart, key %s (owner %s): %d of 16\n", gap, key,
                        ki.owner, ok);
            assert_int_equal(ok, 16);
            run_ms(1000);
        }
    }
    assert_true(owners[0] > 0 && owners[1] > 0 && owners[2] > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lone_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paced_no_burst, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shares_follow_demand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lone_consumer_whole_burst, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_follows_users, setup, teardown),
        cmocka_unit_test_setup_teardown(test_thin_key_central, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prompt_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_after_is_the_clusters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peekers_hold_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_young_no_fresh_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsync_drops_what_was_taken_as_new, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_and_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_keys_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_churn_10k_per_second, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pass_batches_fill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pass_slice_shares_the_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pass_length_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_part_below_a_unit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_impossible_quantity_not_demand, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_relearns_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_lease_per_new_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_never_leased_silent_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_key_burst_one_node, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
