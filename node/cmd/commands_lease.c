/*
 * commands_lease: SL.LEASE, SL.RELEASE, SL.RENEW (grammar and replies in
 * commands_lease.h).
 *
 * Pieces: the semaphores (limit/concurrency.h) hold every lease of this
 * node, local and global keys alike; for a global key the cap is the slots
 * the key's owner lent this node (global/slots.h) instead of n.  A request
 * that does not fit waits in acquire.h's queue for its key (the same FIFO
 * and deadlines as SL.ACQUIRE): it is asked again only when a unit may have
 * freed (acquire_wake from a release, an expiry, a closed connection, or
 * slots arriving), head first and one waiter per freed unit.
 *
 * One libuv timer ends expired leases, armed for the earliest expiry.  A
 * connection that took leases carries a close hook (server.h) that ends
 * them; its owner record is made at its first lease.
 */
#include "commands_lease.h"

#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cluster.h"
#include "concurrency.h"
#include "info.h"
#include "num.h"
#include "policy.h"
#include "slots.h"
#include "sluice/error.h"

struct commands_lease {
    uv_loop_t *loop;
    struct limiter *lim;
    struct acquire *acq;
    struct cluster *cl; /* NULL: every key is local */
    struct conc *conc;
    size_t max_key;
    uv_timer_t timer; /* the earliest expiry */
    int64_t timer_at; /* when it is armed for (INT64_MAX: not armed) */
    int closed;
    uint64_t waiting, refused;
    uint64_t global_granted, global_refused;
};

/* A connection's leases: the close hook's argument. */
struct lease_conn {
    struct commands_lease *l;
    struct conc_owner *o;
};

/* One SL.LEASE request, answered at once or after waiting. */
struct lease_req {
    struct commands_lease *l;
    struct server_client *c;
    struct acquire_waiter *w;
    int resp3;
    int global;
    int64_t limit, qty, ttl_ns;
    struct conc_owner *owner; /* NULL: detached */
    const char *policy;       /* a copy of the policy's name, or NULL */
    struct conc_result res;   /* the last decision */
    size_t klen;
    char key[]; /* klen bytes, then the policy name */
};

static void commands_lease__on_timer(uv_timer_t *t);
static void commands_lease__on_slots(void *ud, const char *key, size_t klen);
static void commands_lease__load(void *ud, const char *key, size_t klen, int64_t *held,
                                 int64_t *waiting);

int commands_lease_create(uv_loop_t *loop, struct limiter *lim, struct acquire *acq, size_t max_key,
                          struct commands_lease **out)
{
    struct commands_lease *l = calloc(1, sizeof(*l));
    struct conc_config cc;
    int rc;
    if (l == NULL)
        return -SLUICE_ENOMEM;
    memset(&cc, 0, sizeof(cc));
    /* A restarted daemon must not hand out its past life's ids: a client
     * still holding one would release someone else's lease. */
    /* The semaphores keep ids below 2^53: a JavaScript client (ioredis)
     * reads an integer reply as a double, exact only up to 2^53. */
    cc.id_base =
        ((uint64_t)uv_hrtime() ^ ((uint64_t)(uintptr_t)l << 12)) & (((uint64_t)1 << 52) - 1);
    rc = conc_create(&cc, &l->conc);
    if (rc < 0) {
        free(l);
        return rc;
    }
    l->loop = loop;
    l->lim = lim;
    l->acq = acq;
    l->max_key = max_key;
    l->timer_at = INT64_MAX;
    uv_timer_init(loop, &l->timer);
    l->timer.data = l;
    /* Only leases keep the timer armed; it alone must not keep the loop
     * alive at shutdown. */
    uv_unref((uv_handle_t *)&l->timer);
    *out = l;
    return 0;
}

void commands_lease_set_cluster(struct commands_lease *l, struct cluster *cl)
{
    if (l == NULL)
        return;
    l->cl = cl;
    if (cluster_slots(cl) != NULL)
        slots_set_client(cluster_slots(cl), commands_lease__on_slots, commands_lease__load, l);
}

void commands_lease_close(struct commands_lease *l)
{
    if (l == NULL || l->closed)
        return;
    l->closed = 1;
    uv_timer_stop(&l->timer);
    uv_close((uv_handle_t *)&l->timer, NULL);
}

void commands_lease_destroy(struct commands_lease *l)
{
    if (l == NULL)
        return;
    conc_destroy(l->conc);
    free(l);
}

static int64_t commands_lease__ms(int64_t ns)
{
    if (ns <= 0)
        return 0;
    return ns / NUM_NS_PER_MS + (ns % NUM_NS_PER_MS != 0);
}

static struct slots *commands_lease__slots(const struct commands_lease *l)
{
    return l->cl != NULL ? cluster_slots(l->cl) : NULL;
}

/* Arms the expiry timer for the earliest lease, if sooner than armed. */
static void commands_lease__arm(struct commands_lease *l)
{
    int64_t at = conc_next_expiry(l->conc), now;
    if (l->closed || at >= l->timer_at)
        return;
    now = (int64_t)uv_hrtime();
    /* whole milliseconds from the loop's cached time, rounded up: the
     * timer never fires before the lease's expiry */
    uint64_t delay_ms = at > now ? (uint64_t)commands_lease__ms(at - now) : 0;
    uint64_t behind = uv_hrtime() / 1000000 - uv_now(l->loop);
    uv_timer_start(&l->timer, commands_lease__on_timer, delay_ms + behind, 0);
    l->timer_at = at;
}

/* A lease of key ended: its units (and, for a global key, its slots) may
 * serve a waiter. */
static void commands_lease__freed(void *ud, const char *key, size_t klen)
{
    struct commands_lease *l = ud;
    struct slots *s = commands_lease__slots(l);
    if (s != NULL)
        slots_note_held(s, key, klen, conc_held(l->conc, key, klen), cluster_now_ns(l->cl));
    acquire_wake(l->acq, key, klen);
}

/* Slots of a global key arrived: its waiters may fit now. */
static void commands_lease__on_slots(void *ud, const char *key, size_t klen)
{
    struct commands_lease *l = ud;
    acquire_wake(l->acq, key, klen);
}

/* What this node holds of a global key and what waits for it. */
static void commands_lease__load(void *ud, const char *key, size_t klen, int64_t *held,
                                 int64_t *waiting)
{
    struct commands_lease *l = ud;
    *held = conc_held(l->conc, key, klen);
    *waiting = acquire_queued(l->acq, key, klen);
}

static void commands_lease__on_timer(uv_timer_t *t)
{
    struct commands_lease *l = t->data;
    l->timer_at = INT64_MAX;
    conc_expire(l->conc, (int64_t)uv_hrtime(), commands_lease__freed, l);
    commands_lease__arm(l);
}

/* The close hook: ends the connection's leases. */
static void commands_lease__conn_closed(struct server_client *c, void *arg)
{
    struct lease_conn *lc = arg;
    (void)c;
    conc_owner_release(lc->l->conc, lc->o, commands_lease__freed, lc->l);
    free(lc);
}

/* c's owner record, made at its first lease.  NULL on failure. */
static struct conc_owner *commands_lease__owner(struct commands_lease *l, struct server_client *c)
{
    struct lease_conn *lc = server_client_close_arg(c);
    if (lc != NULL)
        return lc->o;
    lc = calloc(1, sizeof(*lc));
    if (lc == NULL)
        return NULL;
    if (conc_owner_new(l->conc, &lc->o) < 0) {
        free(lc);
        return NULL;
    }
    lc->l = l;
    server_client_set_close_hook(c, commands_lease__conn_closed, lc);
    return lc->o;
}

/*
 * The decider the acquire queue asks (the request is its ud): takes the
 * units if the key's cap has room.  r says limited or not, r->limit is n
 * (so the queue answers at once a qty that can never fit) and
 * retry_after_ns is ALGO_NEVER: a lease ends when its holder says so, and
 * the queue is woken then (acquire_submit_woken).
 */
static int commands_lease__decide(void *ud, const char *key, size_t klen,
                                  const struct algo_params *p, const struct policy *pol,
                                  int64_t qty, int64_t at_ns, struct algo_result *r)
{
    struct lease_req *q = ud;
    struct commands_lease *l = q->l;
    int64_t now = (int64_t)uv_hrtime();
    int64_t cap = q->limit;
    struct slots *s = q->global ? commands_lease__slots(l) : NULL;
    int rc;
    (void)p;
    (void)pol;
    (void)at_ns; /* leases are not paced: a slot frees when its holder says so */
    if (s != NULL)
        cap = slots_cap(s, key, klen, q->limit, q->ttl_ns, conc_held(l->conc, key, klen), qty,
                        cluster_now_ns(l->cl));
    rc = conc_acquire(l->conc, key, klen, cap, qty, q->ttl_ns, q->owner, now, &q->res);
    if (rc < 0)
        return rc;
    if (q->res.granted) {
        l->global_granted += (uint64_t)q->global;
        commands_lease__arm(l);
    } else if (q->global && qty <= q->limit) {
        /* The slots this node holds may grow (the owner lends more, about
         * a gossip interval and a round trip after it asks): the wait is
         * open-ended, not "never". */
        if (q->res.retry_after_ns < 0)
            q->res.retry_after_ns = NUM_NS_PER_S / 5;
    }
    memset(r, 0, sizeof(*r));
    r->limited = !q->res.granted;
    r->limit = q->limit;
    r->remaining = q->limit - q->res.held > 0 ? q->limit - q->res.held : 0;
    r->retry_after_ns = ALGO_NEVER;
    return 0;
}

static void commands_lease__reply(struct resp_buf *out, int resp3, const struct lease_req *q,
                                  int64_t waited_ns)
{
    const struct conc_result *res = &q->res;
    int64_t remaining = q->limit - res->held;
    int64_t retry =
        !res->granted && res->retry_after_ns >= 0 ? commands_lease__ms(res->retry_after_ns) : -1;
    int64_t id = res->granted ? (int64_t)res->id : 0;
    int64_t ttl = res->granted ? commands_lease__ms(q->ttl_ns) : -1;
    if (remaining < 0)
        remaining = 0;
    if (!res->granted && retry == 0)
        retry = 1;
    if (!resp3) {
        resp_add_array(out, 7);
        resp_add_int(out, res->granted ? 0 : 1);
        resp_add_int(out, q->limit);
        resp_add_int(out, remaining);
        resp_add_int(out, retry);
        resp_add_int(out, id);
        resp_add_int(out, ttl);
        resp_add_int(out, commands_lease__ms(waited_ns));
        return;
    }
    resp_add_map(out, 8);
    resp_add_pair_int(out, "limited", res->granted ? 0 : 1);
    resp_add_pair_int(out, "limit", q->limit);
    resp_add_pair_int(out, "remaining", remaining);
    resp_add_pair_int(out, "retry_after_ms", retry);
    resp_add_pair_int(out, "id", id);
    resp_add_pair_int(out, "ttl_ms", ttl);
    resp_add_pair_int(out, "waited_ms", commands_lease__ms(waited_ns));
    resp_add_bulk_str(out, "policy");
    if (q->policy != NULL)
        resp_add_bulk_str(out, q->policy);
    else
        resp_add_null3(out);
}

/* q is refused as of now: what is held and the wait that would still be
 * needed. */
static void commands_lease__refusal(struct commands_lease *l, struct lease_req *q, const char *key,
                                    size_t klen)
{
    int64_t now = (int64_t)uv_hrtime(), t = conc_earliest(l->conc, key, klen);
    l->refused++;
    l->global_refused += (uint64_t)q->global;
    q->res.granted = 0;
    q->res.retry_after_ns = q->qty > q->limit ? -1 : t == INT64_MAX ? -1 : t > now ? t - now : 0;
    q->res.held = conc_held(l->conc, key, klen);
}

static void commands_lease__done(void *ud, const struct algo_result *r, int64_t waited_ns)
{
    struct lease_req *q = ud;
    struct commands_lease *l = q->l;
    (void)r;
    l->waiting--;
    if (!q->res.granted)
        commands_lease__refusal(l, q, q->key, q->klen);
    commands_lease__reply(server_client_out(q->c), q->resp3, q, waited_ns);
    server_client_unblock(q->c);
    free(q);
}

static void commands_lease__cancel(struct server_client *c, void *arg)
{
    struct lease_req *q = arg;
    (void)c;
    q->l->waiting--;
    acquire_cancel(q->l->acq, q->w);
    free(q);
}

static int commands_lease__int(const char *s, size_t len, int64_t lo, int64_t hi, int64_t *v,
                               const char *what, struct resp_buf *out)
{
    if (args_parse_int64(s, len, v) < 0 || *v < lo || *v > hi) {
        resp_add_errorf(out, "ERR %s must be an integer from %lld to %lld", what, (long long)lo,
                        (long long)hi);
        return -1;
    }
    return 0;
}

#define LEASE_USAGE                                                                                \
    "SL.LEASE key [CONCURRENCY n | POLICY name] [QTY q] [TTL ms] [TIMEOUT ms] [SCOPE "             \
    "local|global] [DETACH]"
/* The longest wait, as SL.ACQUIRE's: one day. */
#define LEASE_MAX_TIMEOUT_MS ((int64_t)86400000)

int commands_lease_lease(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    struct commands_lease *l = commands_sl_leases(sl);
    const struct policy_lease *pl = NULL;
    int64_t limit = -1, qty = 1, ttl_ms = -1, timeout_ms = 0;
    int scope = -1, detach = c == NULL;
    if (l == NULL) {
        resp_add_error(out, "ERR SL.LEASE is not available");
        return SERVER_CONTINUE;
    }
    if (argc < 2) {
        resp_add_error(out, "ERR wrong number of arguments: " LEASE_USAGE);
        return SERVER_CONTINUE;
    }
    if (argvlen[1] > l->max_key) {
        resp_add_errorf(out, "ERR key too long (%zu bytes, the limit is %zu)", argvlen[1],
                        l->max_key);
        return SERVER_CONTINUE;
    }
    for (size_t i = 2; i < argc; i++) {
        const char *a = argv[i];
        size_t al = argvlen[i];
        int more = i + 1 < argc;
        if (args_is(a, al, "CONCURRENCY") && more && limit < 0 && pl == NULL) {
            i++;
            if (commands_lease__int(argv[i], argvlen[i], 1, INT64_MAX / 2, &limit, "CONCURRENCY",
                                    out) < 0)
                return SERVER_CONTINUE;
        } else if (args_is(a, al, "POLICY") && more && limit < 0 && pl == NULL) {
            i++;
            pl = policy_set_lease_find(limiter_policies(l->lim), argv[i], argvlen[i]);
            if (pl == NULL) {
                resp_add_errorf(out, "ERR no concurrency policy named '%.*s'",
                                (int)(argvlen[i] > 64 ? 64 : argvlen[i]), argv[i]);
                return SERVER_CONTINUE;
            }
        } else if (args_is(a, al, "QTY") && more) {
            i++;
            if (commands_lease__int(argv[i], argvlen[i], 1, INT64_MAX / 2, &qty, "QTY", out) < 0)
                return SERVER_CONTINUE;
        } else if (args_is(a, al, "TTL") && more) {
            i++;
            if (commands_lease__int(argv[i], argvlen[i], 1, CONC_MAX_TTL_NS / NUM_NS_PER_MS,
                                    &ttl_ms, "TTL", out) < 0)
                return SERVER_CONTINUE;
        } else if (args_is(a, al, "TIMEOUT") && more) {
            i++;
            if (commands_lease__int(argv[i], argvlen[i], 0, LEASE_MAX_TIMEOUT_MS, &timeout_ms,
                                    "TIMEOUT", out) < 0)
                return SERVER_CONTINUE;
        } else if (args_is(a, al, "SCOPE") && more && scope < 0) {
            i++;
            if (args_is(argv[i], argvlen[i], "local")) {
                scope = POLICY_SCOPE_LOCAL;
            } else if (args_is(argv[i], argvlen[i], "global")) {
                scope = POLICY_SCOPE_GLOBAL;
            } else {
                resp_add_error(out, "ERR SCOPE must be local or global");
                return SERVER_CONTINUE;
            }
        } else if (args_is(a, al, "DETACH")) {
            detach = 1;
        } else {
            resp_add_errorf(out, "ERR syntax error near '%.*s': " LEASE_USAGE,
                            (int)(al > 64 ? 64 : al), a);
            return SERVER_CONTINUE;
        }
    }
    if (limit < 0 && pl == NULL) {
        pl = policy_set_lease_match(limiter_policies(l->lim), argv[1], argvlen[1]);
        if (pl == NULL) {
            resp_add_error(out, "ERR no concurrency policy matches key and no CONCURRENCY given");
            return SERVER_CONTINUE;
        }
    }
    if (pl != NULL && scope >= 0) {
        resp_add_error(out, "ERR SCOPE needs CONCURRENCY (a policy has its own scope)");
        return SERVER_CONTINUE;
    }
    /* Only a request that may wait outlives the command (the queue keeps
     * it), so only it is allocated, with copies of the key and the policy
     * name.  One that may not wait (no TIMEOUT, or no connection to answer
     * later, as HTTP's) lives on the stack and borrows them: it is answered
     * at once, refused if others wait for the key (they came first). */
    int64_t timeout_ns = c != NULL ? timeout_ms * NUM_NS_PER_MS : 0;
    struct lease_req now_q;
    struct lease_req *q = &now_q;
    const char *key = argv[1];
    if (timeout_ns > 0) {
        size_t nlen = pl != NULL ? strlen(pl->name) + 1 : 0;
        q = malloc(sizeof(*q) + argvlen[1] + nlen);
        if (q == NULL) {
            resp_add_error(out, "ERR out of memory");
            return SERVER_CONTINUE;
        }
    }
    memset(q, 0, sizeof(*q));
    q->l = l;
    q->c = c;
    q->resp3 = resp3;
    q->qty = qty;
    q->klen = argvlen[1];
    if (q != &now_q) {
        memcpy(q->key, argv[1], argvlen[1]);
        key = q->key;
        if (pl != NULL) {
            memcpy(q->key + q->klen, pl->name, strlen(pl->name) + 1);
            q->policy = q->key + q->klen;
        }
    } else if (pl != NULL) {
        q->policy = pl->name;
    }
    if (pl != NULL) {
        q->limit = pl->limit;
        q->ttl_ns = ttl_ms > 0 ? ttl_ms * NUM_NS_PER_MS : pl->ttl_ns;
        scope = (int)pl->scope;
    } else {
        q->limit = limit;
        q->ttl_ns = (ttl_ms > 0 ? ttl_ms : COMMANDS_LEASE_DEFAULT_TTL_MS) * NUM_NS_PER_MS;
    }
    /* The one place that says whether a key is global decides leases too
     * (gcra: any algorithm that can be global; the scope is what counts). */
    q->global =
        commands_lease__slots(l) != NULL && cluster_is_global(l->cl, NULL, scope, ALGO_GCRA);
    if (q->global && q->klen > CLUSTER_KEY_INLINE) {
        /* Its slots' messages could not carry it: refused here, not left
         * waiting for slots that never come (cluster.h). */
        resp_add_errorf(out,
                        "ERR key too long for a global concurrency limit (%zu bytes, the limit "
                        "is %d)",
                        q->klen, CLUSTER_KEY_INLINE);
        if (q != &now_q)
            free(q);
        return SERVER_CONTINUE;
    }
    if (timeout_ns == 0 && acquire_has_waiters(l->acq, key, q->klen)) {
        commands_lease__refusal(l, q, key, q->klen);
        commands_lease__reply(out, resp3, q, 0);
        return SERVER_CONTINUE;
    }
    if (!detach && (q->owner = commands_lease__owner(l, c)) == NULL) {
        if (q != &now_q)
            free(q);
        resp_add_error(out, "ERR out of memory");
        return SERVER_CONTINUE;
    }
    static const struct algo_params unused; /* acquire wants a limit; the decider has its own */
    struct acquire_req req = {key, q->klen, &unused, NULL, NULL, qty, timeout_ns};
    struct algo_result r;
    int64_t waited;
    int rc = acquire_submit_woken(l->acq, &req, commands_lease__decide, q, (int64_t)uv_hrtime(),
                                  commands_lease__done, q, &r, &waited, &q->w);
    if (rc == 1) {
        if (!q->res.granted) {
            l->refused++;
            l->global_refused += (uint64_t)q->global;
        }
        commands_lease__reply(out, resp3, q, 0);
    } else if (rc == 0) {
        /* Only with a TIMEOUT and a connection: q was allocated. */
        l->waiting++;
        server_client_block(c, commands_lease__cancel, q);
        return SERVER_CONTINUE;
    } else if (rc == -SLUICE_EFULL) {
        resp_add_error(out, "ERR too many leases or waiting requests");
    } else {
        resp_add_errorf(out, "ERR %s", sluice_strerror(rc));
    }
    if (q != &now_q)
        free(q);
    return SERVER_CONTINUE;
}

/* SL.RELEASE / SL.RENEW's key and id; -1 after an error reply. */
static int commands_lease__key_id(struct commands_lease *l, size_t argc, const char **argv,
                                  const size_t *argvlen, const char *usage, uint64_t *id,
                                  struct resp_buf *out)
{
    int64_t v;
    if (l == NULL) {
        resp_add_error(out, "ERR leases are not available");
        return -1;
    }
    if (argc < 3) {
        resp_add_errorf(out, "ERR wrong number of arguments: %s", usage);
        return -1;
    }
    if (args_parse_int64(argv[2], argvlen[2], &v) < 0 || v < 1) {
        resp_add_error(out, "ERR a lease id is a positive integer");
        return -1;
    }
    *id = (uint64_t)v;
    return 0;
}

int commands_lease_release(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    struct commands_lease *l = commands_sl_leases(sl);
    uint64_t id;
    (void)c;
    (void)resp3;
    if (commands_lease__key_id(l, argc, argv, argvlen, "SL.RELEASE key id", &id, out) < 0)
        return SERVER_CONTINUE;
    if (argc != 3) {
        resp_add_error(out, "ERR wrong number of arguments: SL.RELEASE key id");
        return SERVER_CONTINUE;
    }
    resp_add_int(out,
                 conc_release(l->conc, argv[1], argvlen[1], id, commands_lease__freed, l) == 0);
    return SERVER_CONTINUE;
}

int commands_lease_renew(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    struct commands_lease *l = commands_sl_leases(sl);
    int64_t ttl_ms = 0, expires;
    uint64_t id;
    (void)c;
    (void)resp3;
    if (commands_lease__key_id(l, argc, argv, argvlen, "SL.RENEW key id [TTL ms]", &id, out) < 0)
        return SERVER_CONTINUE;
    if (argc == 5 && args_is(argv[3], argvlen[3], "TTL")) {
        if (commands_lease__int(argv[4], argvlen[4], 1, CONC_MAX_TTL_NS / NUM_NS_PER_MS, &ttl_ms,
                                "TTL", out) < 0)
            return SERVER_CONTINUE;
    } else if (argc != 3) {
        resp_add_error(out, "ERR syntax error: SL.RENEW key id [TTL ms]");
        return SERVER_CONTINUE;
    }
    int64_t now = (int64_t)uv_hrtime();
    struct slots *s = commands_lease__slots(l);
    /* A global key's lease is renewed only while this node's slots are
     * current: a node cut off from the key's owner lets its leases run
     * out, so the owner can count their slots free after a TTL. */
    if (s != NULL && slots_uses(s, argv[1], argvlen[1]) &&
        !slots_may_renew(s, argv[1], argvlen[1], cluster_now_ns(l->cl))) {
        resp_add_int(out, -2);
        return SERVER_CONTINUE;
    }
    int rc = conc_renew(l->conc, argv[1], argvlen[1], id, ttl_ms * NUM_NS_PER_MS, now, &expires);
    if (rc == -SLUICE_ENOENT) {
        resp_add_int(out, -2);
        return SERVER_CONTINUE;
    }
    if (rc < 0) {
        resp_add_errorf(out, "ERR %s", sluice_strerror(rc));
        return SERVER_CONTINUE;
    }
    commands_lease__arm(l);
    resp_add_int(out, commands_lease__ms(expires - now));
    return SERVER_CONTINUE;
}

void commands_lease_get_stats(const struct commands_lease *l, struct commands_lease_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (l == NULL)
        return;
    conc_get_stats(l->conc, &out->conc);
    out->waiting = l->waiting;
    out->refused = l->refused;
    out->global_granted = l->global_granted;
    out->global_refused = l->global_refused;
}

#define LEASE_ROW(field, info, metric, kind, help)                                                 \
    COUNTER_ROW(struct commands_lease_stats, field, info, metric, kind, help)
static const struct counter_row commands_lease__rows[] = {
    LEASE_ROW(conc.keys, "lease_keys", "lease_keys", COUNTER_GAUGE,
              "Keys with concurrency leases held on this node."),
    LEASE_ROW(conc.leases, "leases", "leases", COUNTER_GAUGE,
              "Concurrency leases alive on this node."),
    LEASE_ROW(conc.held, "leases_held", "leases_held", COUNTER_GAUGE,
              "Units held by concurrency leases on this node."),
    LEASE_ROW(waiting, "leases_waiting", "leases_waiting", COUNTER_GAUGE,
              "SL.LEASE requests waiting for a unit."),
    LEASE_ROW(conc.granted, "leases_granted", "leases_granted_total", COUNTER_TOTAL,
              "Concurrency leases granted."),
    LEASE_ROW(refused, "leases_refused", "leases_refused_total", COUNTER_TOTAL,
              "SL.LEASE requests answered limited."),
    LEASE_ROW(conc.released, "leases_released", "leases_released_total", COUNTER_TOTAL,
              "Leases ended by SL.RELEASE or DELETE /v1/lease."),
    LEASE_ROW(conc.expired, "leases_expired", "leases_expired_total", COUNTER_TOTAL,
              "Leases ended by their TTL."),
    LEASE_ROW(conc.disconnects, "leases_released_by_disconnect",
              "leases_released_by_disconnect_total", COUNTER_TOTAL,
              "Leases ended because the connection that took them closed."),
    LEASE_ROW(global_granted, "leases_global_granted", "leases_global_granted_total", COUNTER_TOTAL,
              "Concurrency leases granted on global keys (from lent slots)."),
    LEASE_ROW(global_refused, "leases_global_refused", "leases_global_refused_total", COUNTER_TOTAL,
              "SL.LEASE requests on global keys answered limited."),
};
#undef LEASE_ROW
const struct counter_table commands_lease_counters = COUNTER_TABLE(commands_lease__rows);

void commands_lease_info(const struct commands_lease *l, struct resp_buf *text)
{
    struct commands_lease_stats st;
    commands_lease_get_stats(l, &st);
    resp_add_raw(text, "# Leases\r\n", 10);
    info_counters(text, &commands_lease_counters, &st);
    if (l != NULL && commands_lease__slots(l) != NULL) {
        struct slots_stats ss;
        slots_get_stats(commands_lease__slots(l), &ss);
        info_counters(text, &slots_counters, &ss);
    }
    resp_add_raw(text, "\r\n", 2);
}
