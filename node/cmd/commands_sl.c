/* commands_sl: the SL.* commands (grammar and replies in commands_sl.h). */
#include "commands_sl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acquire.h"
#include "cluster.h"
#include "commands_lease.h"
#include "args.h"
#include "decide.h"
#include "info.h"
#include "policy.h"
#include "replica.h"
#include "sluice/error.h"
#include "num.h"

#define SL_DEFAULT_MAX_KEY 512
/* Longest SL.ACQUIRE wait: one day. */
#define SL_MAX_TIMEOUT_MS ((int64_t)86400000)

struct commands_sl {
    struct limiter *lim;
    struct cluster *cl;            /* borrowed; NULL: a node running alone */
    struct acquire *acq;           /* NULL without a loop */
    struct commands_lease *leases; /* SL.LEASE & co; NULL without a loop */
    size_t max_key;
    struct commands_sl_reloader reloader; /* SL.RELOAD's engine (reload NULL: none) */
};

int commands_sl_create(struct limiter *lim, const struct commands_sl_config *cfg,
                       struct commands_sl **out)
{
    struct commands_sl *sl = calloc(1, sizeof(*sl));
    if (sl == NULL)
        return -SLUICE_ENOMEM;
    sl->lim = lim;
    sl->max_key = cfg && cfg->max_key_bytes ? cfg->max_key_bytes : SL_DEFAULT_MAX_KEY;
    if (cfg != NULL)
        sl->reloader = cfg->reloader;
    if (cfg && cfg->loop != NULL) {
        int rc = acquire_create(cfg->loop, lim, cfg->max_waiters, &sl->acq);
        if (rc == 0 &&
            (rc = commands_lease_create(cfg->loop, lim, sl->acq, sl->max_key, &sl->leases)) < 0)
            acquire_destroy(sl->acq);
        if (rc < 0) {
            free(sl);
            return rc;
        }
    }
    *out = sl;
    return 0;
}

void commands_sl_set_cluster(struct commands_sl *sl, struct cluster *cl)
{
    if (sl != NULL) {
        sl->cl = cl;
        commands_lease_set_cluster(sl->leases, cl);
    }
}

struct commands_lease *commands_sl_leases(struct commands_sl *sl)
{
    return sl != NULL ? sl->leases : NULL;
}

void commands_sl_close(struct commands_sl *sl)
{
    if (sl != NULL) {
        acquire_close(sl->acq);
        commands_lease_close(sl->leases);
    }
}

void commands_sl_destroy(struct commands_sl *sl)
{
    if (sl == NULL)
        return;
    acquire_destroy(sl->acq);
    commands_lease_destroy(sl->leases);
    free(sl);
}

/* Which of the throttle-shaped commands commands_sl__throttle serves. */
enum { SL_THROTTLE, SL_PEEK, SL_REFUND, SL_CHARGE };

/* ---- arguments ---- */

/* Options a command accepts after SPEC. */
#define OPT_QTY     0x1u
#define OPT_PEEK    0x2u
#define OPT_TIMEOUT 0x4u

struct sl_spec {
    const struct policy *pol; /* the policy, or NULL for an inline limit */
    struct algo_params inline_p;
    const struct algo_params *p; /* what decides: &pol->algo or &inline_p */
    int64_t qty;
    int has_qty;
    int peek;
    int64_t timeout_ms;
    int has_timeout;
    int scope; /* SCOPE given with ALGO: enum policy_scope; -1 not given */
};

static int commands_sl__int(const char *s, size_t len, int64_t *v, struct resp_buf *out)
{
    if (args_parse_int64(s, len, v) < 0) {
        resp_add_error(out, "ERR value is not an integer or out of range");
        return -1;
    }
    return 0;
}

/* Sets the algorithm's own words given in an ALGO spec on p (durations in
 * whole ms).  0, or -1 with the error reply appended: a value out of range
 * for its knob. */
static int commands_sl__options(struct algo_params *p, const int *given, const int64_t *vals,
                                struct resp_buf *out)
{
    int64_t v[ALGO_OPTIONS_MAX] = {0};
    int ok = 1;
    const struct algo_option *o;
    for (size_t k = 0; k < ALGO_OPTIONS_MAX && (o = algo_option_at(k, NULL)) != NULL; k++) {
        if (!given[k])
            continue;
        v[k] = vals[k];
        if (o->type == ALGO_VALUE_NS &&
            (vals[k] < 0 || __builtin_mul_overflow(vals[k], NUM_NS_PER_MS, &v[k])))
            ok = 0;
    }
    if (ok && algo_params_set_options(p, v, given) == 0)
        return 0;
    /* "WARMUP must be >= 1 ms and COLD 1..1000": each word of the
     * algorithm, with what its knob accepts. */
    char msg[256];
    size_t len = 0;
    enum algo_kind kind;
    for (size_t k = 0; (o = algo_option_at(k, &kind)) != NULL && len < sizeof(msg); k++) {
        if (kind != p->kind)
            continue;
        char range[64];
        if (o->type == ALGO_VALUE_NS)
            snprintf(range, sizeof(range), ">= %lld ms",
                     (long long)((o->min + NUM_NS_PER_MS - 1) / NUM_NS_PER_MS));
        else
            snprintf(range, sizeof(range), "%lld..%lld", (long long)o->min, (long long)o->max);
        int w = snprintf(msg + len, sizeof(msg) - len, len == 0 ? "%s must be %s" : " and %s %s",
                         o->word, range);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    resp_add_errorf(out, "ERR invalid limit: %s", msg);
    return -1;
}

static void commands_sl__syntax(struct resp_buf *out, const char *arg, size_t len)
{
    int shown = len > 64 ? 64 : (int)len;
    resp_add_errorf(out, "ERR syntax error near '%.*s'", shown, arg);
}

/*
 * Parses SPEC and the allowed options from argv[*i] up to argc or (for
 * SL.MULTI, stop_at_key) the next KEY word, for the key given.  On error
 * appends the error reply and returns -1.
 */
static int commands_sl__parse(struct commands_sl *sl, const char *key, size_t klen, size_t argc,
                              const char **argv, const size_t *argvlen, size_t *i, unsigned opts,
                              int stop_at_key, struct sl_spec *s, struct resp_buf *out)
{
    const char *algo = NULL, *pname = NULL;
    size_t algolen = 0, pnamelen = 0;
    int64_t burst = 0, count = 0, period_ms = 0, precision = 0;
    int has_burst = 0, has_rate = 0, has_precision = 0;
    /* The algorithms' own words (algo_option_at's numbers): given, value. */
    int opt_given[ALGO_OPTIONS_MAX] = {0}, has_opt = 0;
    int64_t opt_v[ALGO_OPTIONS_MAX] = {0};
    int opt;

    memset(s, 0, sizeof(*s));
    s->qty = 1;
    s->scope = -1;
    while (*i < argc) {
        const char *a = argv[*i];
        size_t al = argvlen[*i];
        size_t left = argc - *i - 1;
        if (stop_at_key && args_is(a, al, "KEY"))
            break;
        if (args_is(a, al, "POLICY") && left >= 1 && pname == NULL) {
            pname = argv[*i + 1];
            pnamelen = argvlen[*i + 1];
            *i += 2;
        } else if (args_is(a, al, "ALGO") && left >= 1 && algo == NULL) {
            algo = argv[*i + 1];
            algolen = argvlen[*i + 1];
            *i += 2;
        } else if (args_is(a, al, "BURST") && left >= 1) {
            if (commands_sl__int(argv[*i + 1], argvlen[*i + 1], &burst, out) < 0)
                return -1;
            has_burst = 1;
            *i += 2;
        } else if (args_is(a, al, "RATE") && left >= 2) {
            if (commands_sl__int(argv[*i + 1], argvlen[*i + 1], &count, out) < 0 ||
                commands_sl__int(argv[*i + 2], argvlen[*i + 2], &period_ms, out) < 0)
                return -1;
            has_rate = 1;
            *i += 3;
        } else if (args_is(a, al, "PRECISION") && left >= 1) {
            if (commands_sl__int(argv[*i + 1], argvlen[*i + 1], &precision, out) < 0)
                return -1;
            has_precision = 1;
            *i += 2;
        } else if (args_is(a, al, "QTY") && left >= 1 && (opts & OPT_QTY)) {
            if (commands_sl__int(argv[*i + 1], argvlen[*i + 1], &s->qty, out) < 0)
                return -1;
            if (s->qty < 0) {
                resp_add_error(out, "ERR QTY must not be negative");
                return -1;
            }
            s->has_qty = 1;
            *i += 2;
        } else if (args_is(a, al, "SCOPE") && left >= 1 && s->scope < 0) {
            if (args_is(argv[*i + 1], argvlen[*i + 1], "local")) {
                s->scope = POLICY_SCOPE_LOCAL;
            } else if (args_is(argv[*i + 1], argvlen[*i + 1], "global")) {
                s->scope = POLICY_SCOPE_GLOBAL;
            } else {
                resp_add_error(out, "ERR SCOPE must be local or global");
                return -1;
            }
            *i += 2;
        } else if (args_is(a, al, "PEEK") && (opts & OPT_PEEK)) {
            s->peek = 1;
            *i += 1;
        } else if (args_is(a, al, "TIMEOUT") && left >= 1 && (opts & OPT_TIMEOUT)) {
            if (commands_sl__int(argv[*i + 1], argvlen[*i + 1], &s->timeout_ms, out) < 0)
                return -1;
            if (s->timeout_ms < 0 || s->timeout_ms > SL_MAX_TIMEOUT_MS) {
                resp_add_errorf(out, "ERR TIMEOUT must be 0..%lld ms",
                                (long long)SL_MAX_TIMEOUT_MS);
                return -1;
            }
            s->has_timeout = 1;
            *i += 2;
        } else if ((opt = algo_option_find(a, al, 1)) >= 0 && opt < ALGO_OPTIONS_MAX && left >= 1) {
            if (commands_sl__int(argv[*i + 1], argvlen[*i + 1], &opt_v[opt], out) < 0)
                return -1;
            opt_given[opt] = 1;
            has_opt = 1;
            *i += 2;
        } else {
            commands_sl__syntax(out, a, al);
            return -1;
        }
    }
    if (pname != NULL && algo != NULL) {
        resp_add_error(out, "ERR POLICY and ALGO are exclusive");
        return -1;
    }
    if (algo == NULL && (has_burst || has_rate || has_precision || has_opt)) {
        char words[160];
        resp_add_errorf(
            out, "ERR %s need ALGO",
            algo_option_list(ALGO_KIND_COUNT_, 1, "BURST, RATE, PRECISION", words, sizeof(words)));
        return -1;
    }
    if (algo == NULL && s->scope >= 0) {
        resp_add_error(out, "ERR SCOPE needs ALGO (a policy has its own scope)");
        return -1;
    }
    struct policy_set *set = limiter_policies(sl->lim);
    if (pname != NULL) {
        s->pol = policy_set_find(set, pname, pnamelen);
        if (s->pol == NULL) {
            int shown = pnamelen > 64 ? 64 : (int)pnamelen;
            resp_add_errorf(out, "ERR no such policy '%.*s'", shown, pname);
            return -1;
        }
        s->p = &s->pol->algo;
        return 0;
    }
    if (algo != NULL) {
        char name[32];
        enum algo_kind kind;
        if (algolen >= sizeof(name)) {
            algolen = sizeof(name) - 1;
        }
        memcpy(name, algo, algolen);
        name[algolen] = '\0';
        if (memchr(algo, '\0', algolen) != NULL || algo_from_name(name, &kind) < 0) {
            char known[128] = "";
            for (int k = 0; k < ALGO_KIND_COUNT_; k++)
                snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s",
                         k > 0 ? ", " : "", algo_name((enum algo_kind)k));
            resp_add_errorf(out, "ERR unknown algorithm '%s' (%s)", name, known);
            return -1;
        }
        for (size_t k = 0; k < ALGO_OPTIONS_MAX; k++) {
            enum algo_kind owner;
            if (!opt_given[k] || algo_option_at(k, &owner) == NULL || owner == kind)
                continue;
            char words[128];
            resp_add_errorf(out, "ERR %s apply to %s only",
                            algo_option_list(owner, 1, "", words, sizeof(words)), algo_name(owner));
            return -1;
        }
        if (!has_rate) {
            resp_add_error(out, "ERR ALGO needs RATE count period_ms");
            return -1;
        }
        int64_t period_ns;
        if (count < 1 || period_ms < 1 || burst < 0 || precision < 0) {
            resp_add_error(out, "ERR invalid limit: count and period_ms must be positive, "
                                "burst and precision not negative");
            return -1;
        }
        if (__builtin_mul_overflow(period_ms, NUM_NS_PER_MS, &period_ns)) {
            resp_add_error(out, "ERR invalid limit: period_ms too large");
            return -1;
        }
        int rc = algo_params_init(&s->inline_p, kind, burst, count, period_ns, precision);
        if (rc < 0) {
            resp_add_errorf(out, "ERR invalid limit: %s",
                            rc == -SLUICE_ERANGE ? "out of range for the algorithm"
                                                 : "precision must be 1..1000");
            return -1;
        }
        if (has_opt && commands_sl__options(&s->inline_p, opt_given, opt_v, out) < 0)
            return -1;
        if (s->scope == POLICY_SCOPE_GLOBAL && !algo_can_be_global(kind)) {
            resp_add_errorf(out, "ERR %s cannot be global (%s)", algo_name(kind),
                            algo_why_local(kind));
            return -1;
        }
        s->p = &s->inline_p;
        return 0;
    }
    s->pol = policy_set_match(set, key, klen);
    if (s->pol == NULL) {
        resp_add_error(out, "ERR no policy matches key and no ALGO given");
        return -1;
    }
    s->p = &s->pol->algo;
    return 0;
}

/* ---- replies ---- */

static int64_t commands_sl__ms(int64_t ns)
{
    if (ns <= 0)
        return 0;
    return ns / NUM_NS_PER_MS + (ns % NUM_NS_PER_MS != 0);
}

/* One decision (see commands_sl.h); waited_ns < 0: no waited_ms field. */
static void commands_sl__reply(struct resp_buf *out, int resp3, const struct algo_result *r,
                               enum algo_kind kind, const struct policy *pol, int64_t waited_ns)
{
    int64_t retry =
        r->limited && r->retry_after_ns != ALGO_NEVER ? commands_sl__ms(r->retry_after_ns) : -1;
    int64_t remaining = r->remaining > 0 ? r->remaining : 0;
    if (!resp3) {
        resp_add_array(out, waited_ns >= 0 ? 6 : 5);
        resp_add_int(out, r->limited ? 1 : 0);
        resp_add_int(out, r->limit);
        resp_add_int(out, remaining);
        resp_add_int(out, retry);
        resp_add_int(out, commands_sl__ms(r->reset_after_ns));
        if (waited_ns >= 0)
            resp_add_int(out, commands_sl__ms(waited_ns));
        return;
    }
    resp_add_map(out, waited_ns >= 0 ? 8 : 7);
    resp_add_pair_int(out, "limited", r->limited ? 1 : 0);
    resp_add_pair_int(out, "limit", r->limit);
    resp_add_pair_int(out, "remaining", remaining);
    resp_add_pair_int(out, "retry_after_ms", retry);
    resp_add_pair_int(out, "reset_after_ms", commands_sl__ms(r->reset_after_ns));
    resp_add_pair_str(out, "algorithm", algo_name(kind));
    resp_add_bulk_str(out, "policy");
    if (pol != NULL)
        resp_add_bulk_str(out, pol->name);
    else
        resp_add_null3(out);
    if (waited_ns >= 0)
        resp_add_pair_int(out, "waited_ms", commands_sl__ms(waited_ns));
}

static void commands_sl__limiter_error(struct resp_buf *out, int rc)
{
    if (rc == -SLUICE_ENOMEM)
        resp_add_error(out, "ERR out of memory");
    else if (rc == -SLUICE_EFULL)
        resp_add_error(out, "ERR too many global keys (the replica's table is full)");
    else if (rc == -SLUICE_ETOOBIG)
        resp_add_error(out, "ERR key too long");
    else
        resp_add_errorf(out, "ERR %s", sluice_strerror(rc));
}

static int commands_sl__key_ok(struct commands_sl *sl, size_t klen, struct resp_buf *out)
{
    if (klen > sl->max_key) {
        resp_add_errorf(out, "ERR key too long (%zu bytes, the limit is %zu)", klen, sl->max_key);
        return 0;
    }
    return 1;
}

/* ---- scope ---- */

/* The decision entry's request for qty units of key under spec s. */
static struct decide_req commands_sl__req(const struct sl_spec *s, const char *key, size_t klen,
                                          int64_t qty, enum decide_op op)
{
    return (struct decide_req){.key = key,
                               .klen = klen,
                               .pol = s->pol,
                               .p = s->pol != NULL ? NULL : s->p,
                               .scope = s->scope,
                               .qty = qty,
                               .op = op};
}

/* 1 when the key of spec s is decided by the cluster's replica. */
static int commands_sl__is_global(const struct commands_sl *sl, const struct sl_spec *s)
{
    struct decide d = {sl->lim, sl->cl};
    struct decide_req q = commands_sl__req(s, "", 0, 0, DECIDE_TAKE);
    return decide_is_global(&d, &q);
}

/* The acquire layer's decider for global keys: the decision entry, on a
 * reading of the clock taken now, charged at at_ns when the layer says the
 * waiter's slot came earlier (a late wake-up: acquire.h). */
static int commands_sl__global_decide(void *ud, const char *key, size_t klen,
                                      const struct algo_params *p, const struct policy *pol,
                                      int64_t qty, int64_t at_ns, struct algo_result *r)
{
    struct commands_sl *sl = ud;
    struct decide d = {sl->lim, sl->cl};
    struct decide_req q = {.key = key,
                           .klen = klen,
                           .pol = pol,
                           .p = pol != NULL ? NULL : p,
                           .scope = POLICY_SCOPE_GLOBAL, /* the caller found it global */
                           .qty = qty,
                           .at_ns = at_ns};
    return decide_run(&d, &q, (int64_t)uv_hrtime(), r);
}

/* Turns a global key's peek (qty 0) into the refusal of qty: the replica
 * cannot say when qty fits without trying, so the wait is estimated as
 * the missing units at the limit's rate (gcra, token-bucket) or the time
 * until the window has passed (windows); other nodes' traffic may make it
 * longer. */
static void commands_sl__global_refusal(const struct algo_params *p, int64_t qty,
                                        struct algo_result *r)
{
    r->limited = 1;
    if (qty > r->limit) {
        r->retry_after_ns = ALGO_NEVER;
    } else if (algo_has_burst(p->kind)) {
        int64_t missing = qty - (r->remaining > 0 ? r->remaining : 0);
        int64_t em = p->period_ns / p->count > 0 ? p->period_ns / p->count : 1;
        r->retry_after_ns = num_mul_sat(missing > 0 ? missing : 1, em);
    } else {
        r->retry_after_ns = r->reset_after_ns > 0 ? r->reset_after_ns : 1;
    }
}

/* ---- SL.THROTTLE, SL.PEEK, SL.REFUND, SL.RESET ---- */

static void commands_sl__throttle(struct commands_sl *sl, struct server_client *c, int resp3,
                                  int cmd, size_t argc, const char **argv, const size_t *argvlen,
                                  struct resp_buf *out)
{
    static const char *const usage[] = {
        [SL_THROTTLE] = ("SL.THROTTLE key [POLICY name | ALGO algorithm [BURST b] RATE count "
                         "period_ms [PRECISION p] [WARMUP ms] [COLD f]] [QTY q] [PEEK]"),
        [SL_PEEK] = "SL.PEEK key [POLICY name | ALGO ...] [QTY q]",
        [SL_REFUND] = "SL.REFUND key [POLICY name | ALGO ...] QTY q",
        [SL_CHARGE] = "SL.CHARGE key [POLICY name | ALGO ...] QTY q",
    };
    struct sl_spec s;
    struct algo_result r = {0};
    size_t i = 2;
    int rc;
    if (argc < 2) {
        resp_add_errorf(out, "ERR wrong number of arguments: %s", usage[cmd]);
        return;
    }
    if (!commands_sl__key_ok(sl, argvlen[1], out))
        return;
    unsigned opts = cmd == SL_THROTTLE ? OPT_QTY | OPT_PEEK : OPT_QTY;
    if (commands_sl__parse(sl, argv[1], argvlen[1], argc, argv, argvlen, &i, opts, 0, &s, out) < 0)
        return;
    int64_t now = server_client_now_ns(c);
    int global = commands_sl__is_global(sl, &s);
    struct decide d = {sl->lim, sl->cl};
    if (cmd == SL_CHARGE) {
        if (!s.has_qty) {
            resp_add_errorf(out, "ERR QTY is required: %s", usage[cmd]);
            return;
        }
        struct decide_req q = commands_sl__req(&s, argv[1], argvlen[1], s.qty, DECIDE_CHARGE);
        rc = decide_run(&d, &q, now, &r);
    } else if (cmd == SL_REFUND) {
        if (!s.has_qty) {
            resp_add_errorf(out, "ERR QTY is required: %s", usage[cmd]);
            return;
        }
        if (global) {
            /* Every node has already counted the units in its slot of a
             * grow-only counter: no node can take them back. */
            resp_add_error(out, "ERR SL.REFUND cannot give back units of a global key (the "
                                "cluster's counts only grow; they drain at the limit's rate)");
            return;
        }
        rc = limiter_refund(sl->lim, argv[1], argvlen[1], s.p, s.qty, now);
        if (rc == 0)
            rc = limiter_decide(sl->lim, argv[1], argvlen[1], s.p, 0, now, &r);
    } else {
        int64_t qty = cmd == SL_PEEK || s.peek ? 0 : s.qty;
        struct decide_req q = commands_sl__req(&s, argv[1], argvlen[1], qty, DECIDE_TAKE);
        rc = decide_run(&d, &q, now, &r);
    }
    if (rc < 0) {
        commands_sl__limiter_error(out, rc);
        return;
    }
    commands_sl__reply(out, resp3, &r, s.p->kind, s.pol, -1);
}

/* ---- SL.ACQUIRE ---- */

struct sl_wait {
    struct commands_sl *sl;
    struct server_client *c;
    struct acquire_waiter *w;
    int resp3;
    enum algo_kind kind;
    const struct policy *pol; /* valid while the waiter holds its set */
};

static void commands_sl__acquire_done(void *ud, const struct algo_result *r, int64_t waited_ns)
{
    struct sl_wait *x = ud;
    commands_sl__reply(server_client_out(x->c), x->resp3, r, x->kind, x->pol, waited_ns);
    server_client_unblock(x->c);
    free(x);
}

static void commands_sl__acquire_cancel(struct server_client *c, void *arg)
{
    struct sl_wait *x = arg;
    (void)c;
    acquire_cancel(x->sl->acq, x->w);
    free(x);
}

static void commands_sl__acquire(struct commands_sl *sl, struct server_client *c, int resp3,
                                 size_t argc, const char **argv, const size_t *argvlen,
                                 struct resp_buf *out)
{
    struct sl_spec s;
    size_t i = 2;
    if (argc < 2) {
        resp_add_error(out, "ERR wrong number of arguments: SL.ACQUIRE key [POLICY name | ALGO "
                            "...] [QTY q] TIMEOUT ms");
        return;
    }
    if (!commands_sl__key_ok(sl, argvlen[1], out))
        return;
    if (commands_sl__parse(sl, argv[1], argvlen[1], argc, argv, argvlen, &i, OPT_QTY | OPT_TIMEOUT,
                           0, &s, out) < 0)
        return;
    if (!s.has_timeout) {
        resp_add_error(out, "ERR TIMEOUT ms is required");
        return;
    }
    if (sl->acq == NULL) {
        resp_add_error(out, "ERR SL.ACQUIRE is not available");
        return;
    }
    struct sl_wait *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        resp_add_error(out, "ERR out of memory");
        return;
    }
    x->sl = sl;
    x->c = c;
    x->resp3 = resp3;
    x->kind = s.p->kind;
    x->pol = s.pol;
    struct acquire_req req = {argv[1],
                              argvlen[1],
                              s.pol ? NULL : s.p,
                              s.pol,
                              s.pol ? limiter_policies(sl->lim) : NULL,
                              s.qty,
                              s.timeout_ms * NUM_NS_PER_MS};
    struct algo_result r;
    int64_t waited;
    int rc;
    if (commands_sl__is_global(sl, &s))
        rc = acquire_submit_via(sl->acq, &req, commands_sl__global_decide, sl,
                                server_client_now_ns(c), commands_sl__acquire_done, x, &r, &waited,
                                &x->w);
    else
        /* A fresh reading, not the time of the last read: a due time
         * counted from a stale one would be early. */
        rc = acquire_submit(sl->acq, &req, (int64_t)uv_hrtime(), commands_sl__acquire_done, x, &r,
                            &waited, &x->w);
    if (rc == 1) {
        free(x);
        commands_sl__reply(out, resp3, &r, s.p->kind, s.pol, waited);
    } else if (rc == 0 && c == NULL) {
        acquire_cancel(sl->acq, x->w);
        free(x);
        resp_add_error(out, "ERR SL.ACQUIRE needs a connection to wait");
    } else if (rc == 0) {
        server_client_block(c, commands_sl__acquire_cancel, x);
    } else {
        free(x);
        if (rc == -SLUICE_EFULL)
            resp_add_error(out, "ERR too many waiting requests");
        else
            commands_sl__limiter_error(out, rc);
    }
}

/* ---- SL.MULTI ---- */

/*
 * SL.MULTI when some keys are global: every key is first evaluated without
 * change (a global key by a replica peek, qty 0: it fits when qty <=
 * remaining; a local key by limiter_earliest_fit; dry-run policies always
 * fit), and only if all fit are the global keys charged and then, if each
 * was admitted, the local ones (limiter_multi).  Everything runs in one
 * event-loop turn, so no local key changes between the check and the
 * charge.  Errors as limiter_multi.
 */
static int commands_sl__multi_mixed(struct commands_sl *sl, const struct sl_spec *specs,
                                    const struct limiter_req *reqs, size_t n, int64_t now,
                                    struct algo_result *outs, int *allowed)
{
    struct limiter_req locals[LIMITER_MULTI_MAX];
    struct algo_result louts[LIMITER_MULTI_MAX];
    struct decide d = {sl->lim, sl->cl};
    size_t nl = 0;
    int all = 1, rc;
    for (size_t k = 0; k < n; k++) {
        for (size_t j = 0; j < k; j++) {
            if (reqs[j].klen == reqs[k].klen && memcmp(reqs[j].key, reqs[k].key, reqs[k].klen) == 0)
                return -SLUICE_EINVAL;
        }
    }
    for (size_t k = 0; k < n; k++) {
        const struct sl_spec *s = &specs[k];
        int dry = s->pol != NULL && s->pol->dry_run, fits;
        if (commands_sl__is_global(sl, s)) {
            struct decide_req q = commands_sl__req(s, reqs[k].key, reqs[k].klen, 0, DECIDE_TAKE);
            rc = decide_run(&d, &q, now, &outs[k]);
            if (rc < 0)
                return rc;
            fits = dry || (!outs[k].limited && reqs[k].qty <= outs[k].remaining);
            if (!fits) {
                commands_sl__global_refusal(s->p, reqs[k].qty, &outs[k]);
                cluster_note_demand(sl->cl, reqs[k].key, reqs[k].klen, reqs[k].qty);
            }
        } else {
            int64_t delay;
            rc = limiter_earliest_fit(sl->lim, reqs[k].key, reqs[k].klen, s->p, reqs[k].qty, now,
                                      &delay, &outs[k]);
            if (rc < 0)
                return rc;
            fits = dry || delay == 0;
            outs[k].limited = !fits;
            if (fits)
                outs[k].retry_after_ns = ALGO_NEVER;
            locals[nl++] = reqs[k];
        }
        all = all && fits;
    }
    *allowed = all;
    if (!all)
        return 0;
    /* The global keys are charged first, and the local ones only if every
     * global one was admitted: a global peek's remaining is the cluster's
     * level, while the charge is decided on this node's part of it (a node
     * holding less than a unit of a key's burst is refused while the
     * cluster still has one), so a global charge can be refused after its
     * peek fit.  Charged after the local keys, such a refusal left them
     * charged: a client retrying a refused SL.MULTI spent a local key's
     * window one unit a try.  A global key charged before another global
     * key's refusal stays charged (there is no giving back a global unit:
     * SL.REFUND). */
    for (size_t k = 0; k < n; k++) {
        const struct sl_spec *s = &specs[k];
        if (!commands_sl__is_global(sl, s))
            continue;
        struct decide_req q =
            commands_sl__req(s, reqs[k].key, reqs[k].klen, reqs[k].qty, DECIDE_TAKE);
        rc = decide_run(&d, &q, now, &outs[k]);
        if (rc < 0)
            return rc;
        if (outs[k].limited) { /* a dry run's is settled in decide_run */
            *allowed = 0;
            return 0;
        }
    }
    if (nl > 0) {
        int lallowed = 0;
        rc = limiter_multi(sl->lim, locals, nl, now, louts, &lallowed);
        if (rc < 0)
            return rc;
        if (!lallowed) {
            *allowed = 0; /* cannot happen in one loop turn; nothing local was charged */
            return 0;
        }
    }
    for (size_t k = 0, l = 0; k < n; k++)
        if (!commands_sl__is_global(sl, &specs[k]))
            outs[k] = louts[l++];
    return 0;
}

static void commands_sl__multi(struct commands_sl *sl, struct server_client *c, int resp3,
                               size_t argc, const char **argv, const size_t *argvlen,
                               struct resp_buf *out)
{
    struct sl_spec specs[LIMITER_MULTI_MAX];
    struct limiter_req reqs[LIMITER_MULTI_MAX];
    struct algo_result outs[LIMITER_MULTI_MAX];
    int64_t qty = 1;
    size_t i = 1, n = 0;
    if (i + 1 < argc && args_is(argv[i], argvlen[i], "QTY")) {
        if (commands_sl__int(argv[i + 1], argvlen[i + 1], &qty, out) < 0)
            return;
        if (qty < 0) {
            resp_add_error(out, "ERR QTY must not be negative");
            return;
        }
        i += 2;
    }
    while (i < argc) {
        if (!args_is(argv[i], argvlen[i], "KEY") || i + 1 >= argc) {
            commands_sl__syntax(out, argv[i], argvlen[i]);
            return;
        }
        if (n == LIMITER_MULTI_MAX) {
            resp_add_errorf(out, "ERR at most %d keys", LIMITER_MULTI_MAX);
            return;
        }
        const char *key = argv[i + 1];
        size_t klen = argvlen[i + 1];
        if (!commands_sl__key_ok(sl, klen, out))
            return;
        i += 2;
        if (commands_sl__parse(sl, key, klen, argc, argv, argvlen, &i, OPT_QTY, 1, &specs[n], out) <
            0)
            return;
        reqs[n] = (struct limiter_req){key, klen, specs[n].pol ? NULL : specs[n].p, specs[n].pol,
                                       specs[n].has_qty ? specs[n].qty : qty};
        n++;
    }
    if (n == 0) {
        resp_add_error(out, "ERR wrong number of arguments: SL.MULTI [QTY q] KEY k1 [SPEC] "
                            "[QTY q1] KEY k2 ...");
        return;
    }
    int allowed = 0, rc, nglobal = 0;
    for (size_t k = 0; k < n; k++)
        nglobal += commands_sl__is_global(sl, &specs[k]);
    if (nglobal > 0)
        rc = commands_sl__multi_mixed(sl, specs, reqs, n, server_client_now_ns(c), outs, &allowed);
    else
        rc = limiter_multi(sl->lim, reqs, n, server_client_now_ns(c), outs, &allowed);
    if (rc == -SLUICE_EINVAL) {
        resp_add_error(out, "ERR duplicate key in SL.MULTI");
        return;
    }
    if (rc < 0) {
        commands_sl__limiter_error(out, rc);
        return;
    }
    resp_add_array(out, n + 1);
    resp_add_int(out, allowed ? 0 : 1);
    for (size_t k = 0; k < n; k++)
        commands_sl__reply(out, resp3, &outs[k], specs[k].p->kind, specs[k].pol, -1);
}

/* ---- SL.POLICIES, SL.RELOAD ---- */

static void commands_sl__policies(struct commands_sl *sl, int resp3, struct resp_buf *out)
{
    struct policy_set *set = limiter_policies(sl->lim);
    size_t n = policy_set_count(set), nl = policy_set_lease_count(set);
    resp_add_array(out, n + nl);
    for (size_t i = 0; i < n; i++) {
        const struct policy *p = policy_set_at(set, i);
        /* the algorithm's own values follow its precision */
        size_t nown = 0;
        const struct algo_option *o;
        enum algo_kind kind;
        for (size_t k = 0; algo_option_at(k, &kind) != NULL; k++)
            nown += kind == p->algo.kind;
        if (resp3)
            resp_add_map(out, 10 + nown);
        else
            resp_add_array(out, 2 * (10 + nown));
        resp_add_pair_str(out, "name", p->name);
        resp_add_pair_str(out, "algorithm", algo_name(p->algo.kind));
        resp_add_pair_int(out, "burst", p->algo.burst);
        resp_add_pair_int(out, "count", p->algo.count);
        resp_add_pair_int(out, "period_ms", commands_sl__ms(p->algo.period_ns));
        resp_add_pair_int(out, "precision", p->algo.precision);
        for (size_t k = 0; (o = algo_option_at(k, &kind)) != NULL; k++) {
            if (kind != p->algo.kind)
                continue;
            int64_t v = algo_option_value(&p->algo, o);
            resp_add_pair_int(out, o->shown, o->type == ALGO_VALUE_NS ? commands_sl__ms(v) : v);
        }
        resp_add_pair_str(out, "scope", p->scope == POLICY_SCOPE_GLOBAL ? "global" : "local");
        resp_add_pair_str(out, "partition",
                          p->partition == POLICY_PARTITION_SHARE ? "share" : "optimistic");
        resp_add_bulk_str(out, "match");
        if (p->match == NULL)
            resp3 ? resp_add_null3(out) : resp_add_null(out);
        else
            resp_add_bulk(out, p->match, p->match_len);
        resp_add_pair_int(out, "dry_run", p->dry_run ? 1 : 0);
    }
    /* Concurrency limits (SL.LEASE) after the rates: a cap on units held
     * at once and a lease's default TTL instead of a rate. */
    for (size_t i = 0; i < nl; i++) {
        const struct policy_lease *p = policy_set_lease_at(set, i);
        if (resp3)
            resp_add_map(out, 6);
        else
            resp_add_array(out, 12);
        resp_add_pair_str(out, "name", p->name);
        resp_add_pair_str(out, "algorithm", "concurrency");
        resp_add_pair_int(out, "limit", p->limit);
        resp_add_pair_int(out, "ttl_ms", commands_sl__ms(p->ttl_ns));
        resp_add_pair_str(out, "scope", p->scope == POLICY_SCOPE_GLOBAL ? "global" : "local");
        resp_add_bulk_str(out, "match");
        if (p->match == NULL)
            resp3 ? resp_add_null3(out) : resp_add_null(out);
        else
            resp_add_bulk(out, p->match, p->match_len);
    }
}

void commands_sl_get_stats(const struct commands_sl *sl, struct commands_sl_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->policies = policy_set_count(limiter_policies(sl->lim));
    if (sl->reloader.stats != NULL)
        sl->reloader.stats(sl->reloader.ud, out);
    out->waiting_acquires = sl->acq ? acquire_waiting(sl->acq) : 0;
}

static const struct counter_row commands_sl__rows[] = {
    COUNTER_ROW(struct commands_sl_stats, policies, "policies", "policies", COUNTER_GAUGE,
                "Named policies loaded."),
    COUNTER_ROW(struct commands_sl_stats, reloads, "reloads", "reloads_total", COUNTER_TOTAL,
                "Successful configuration reloads."),
    COUNTER_ROW(struct commands_sl_stats, reload_failures, "reload_failures",
                "reload_failures_total", COUNTER_TOTAL,
                "Reloads refused (the running policies were kept)."),
    COUNTER_ROW(struct commands_sl_stats, reloads_unchanged, "reloads_unchanged",
                "reloads_unchanged_total", COUNTER_TOTAL,
                "Reloads that found the configuration unchanged."),
    COUNTER_ROW(struct commands_sl_stats, waiting_acquires, "waiting_acquires", "waiting_acquires",
                COUNTER_GAUGE, "SL.ACQUIRE requests waiting now."),
};

const struct counter_table commands_sl_counters = COUNTER_TABLE(commands_sl__rows);

/* ---- the handlers (rows of the command table in commands.c) ---- */

int commands_sl_throttle(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    commands_sl__throttle(sl, c, resp3, SL_THROTTLE, argc, argv, argvlen, out);
    return SERVER_CONTINUE;
}

int commands_sl_peek(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                     const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    commands_sl__throttle(sl, c, resp3, SL_PEEK, argc, argv, argvlen, out);
    return SERVER_CONTINUE;
}

int commands_sl_refund(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                       const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    commands_sl__throttle(sl, c, resp3, SL_REFUND, argc, argv, argvlen, out);
    return SERVER_CONTINUE;
}

int commands_sl_charge(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                       const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    commands_sl__throttle(sl, c, resp3, SL_CHARGE, argc, argv, argvlen, out);
    return SERVER_CONTINUE;
}

int commands_sl_reset(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                      const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    if (argc != 2) {
        resp_add_error(out, "ERR wrong number of arguments: SL.RESET key");
        return SERVER_CONTINUE;
    }
    if (cluster_replica(sl->cl) != NULL &&
        replica_key_total(cluster_replica(sl->cl), argv[1], argvlen[1]) >= 0) {
        /* Forgetting it here would only hand this node a fresh quota
         * while every other node still counts what it admitted. */
        resp_add_error(out, "ERR SL.RESET cannot reset a global key (the cluster's counts "
                            "only grow; it is fresh again once they have drained)");
        return SERVER_CONTINUE;
    }
    resp_add_int(out, limiter_reset(sl->lim, argv[1], argvlen[1]));
    return SERVER_CONTINUE;
}

int commands_sl_acquire(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                        const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    commands_sl__acquire(sl, c, resp3, argc, argv, argvlen, out);
    return SERVER_CONTINUE;
}

int commands_sl_multi(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                      const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    commands_sl__multi(sl, c, resp3, argc, argv, argvlen, out);
    return SERVER_CONTINUE;
}

int commands_sl_policies(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                         const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    commands_sl__policies(sl, resp3, out);
    return SERVER_CONTINUE;
}

int commands_sl_reload_cmd(struct commands_sl *sl, struct server_client *c, int resp3, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    char err[512];
    int rc;
    if (sl->reloader.reload == NULL) {
        snprintf(err, sizeof(err), "no config file (start sluiced with --config FILE)");
        rc = -SLUICE_EINVAL;
    } else {
        rc = sl->reloader.reload(sl->reloader.ud, c, err, sizeof(err));
    }
    if (rc > 0)
        return SERVER_CONTINUE; /* blocked: answered once reloaded */
    if (rc < 0)
        resp_add_errorf(out, "ERR reload failed: %s", err);
    else
        resp_add_simple(out, "OK");
    return SERVER_CONTINUE;
}
