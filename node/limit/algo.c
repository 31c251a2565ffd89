/*
 * algo: parameter validation and dispatch to the per-algorithm state
 * machines (algo_gcra.c, algo_token_bucket.c, algo_fixed_window.c,
 * algo_sliding_window.c, algo_sliding_log.c, algo_warmup.c), which it
 * knows only through their ops table (algo.h), their own knobs included.
 * See algo.h for the contract.
 *
 * Arguments are checked here once, so the per-algorithm code may assume a
 * valid params struct, qty >= 0 and a time >= 0.
 */
#include "algo.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define ALGO_MAGIC 0x616c676fu /* "algo" */

static const struct algo_ops *const algo_table[ALGO_KIND_COUNT_] = {
    [ALGO_GCRA] = &algo_gcra_ops,
    [ALGO_TOKEN_BUCKET] = &algo_token_bucket_ops,
    [ALGO_FIXED_WINDOW] = &algo_fixed_window_ops,
    [ALGO_SLIDING_WINDOW] = &algo_sliding_window_ops,
    [ALGO_SLIDING_LOG] = &algo_sliding_log_ops,
    [ALGO_WARMUP] = &algo_warmup_ops,
};

const char *algo_name(enum algo_kind kind)
{
    if ((unsigned)kind >= ALGO_KIND_COUNT_)
        return "?";
    return algo_table[kind]->name;
}

int algo_from_name(const char *name, enum algo_kind *out)
{
    if (name == NULL)
        return -SLUICE_EINVAL;
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        if (strcmp(name, algo_table[k]->name) == 0) {
            *out = (enum algo_kind)k;
            return 0;
        }
    }
    return -SLUICE_EINVAL;
}

int algo_can_be_global(enum algo_kind kind)
{
    return (unsigned)kind < ALGO_KIND_COUNT_ && (algo_table[kind]->flags & ALGO_F_GLOBAL) != 0;
}

const char *algo_why_local(enum algo_kind kind)
{
    if ((unsigned)kind >= ALGO_KIND_COUNT_ || algo_table[kind]->why_local == NULL)
        return "";
    return algo_table[kind]->why_local;
}

int algo_has_burst(enum algo_kind kind)
{
    return (unsigned)kind < ALGO_KIND_COUNT_ && (algo_table[kind]->flags & ALGO_F_BURST) != 0;
}

enum algo_carry algo_carry(enum algo_kind kind)
{
    return (unsigned)kind < ALGO_KIND_COUNT_ ? algo_table[kind]->carry : ALGO_CARRY_ABSOLUTE;
}

int algo__bucket_burst(struct algo_params *q, int64_t burst)
{
    if (burst < 0)
        return -SLUICE_EINVAL;
    if (burst == INT64_MAX)
        return -SLUICE_ERANGE;
    q->burst = burst;
    q->limit = burst + 1;
    return 0;
}

int64_t algo_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? ALGO_DEBT_BOUND : -ALGO_DEBT_BOUND;
    if (r > ALGO_DEBT_BOUND)
        return ALGO_DEBT_BOUND;
    if (r < -ALGO_DEBT_BOUND)
        return -ALGO_DEBT_BOUND;
    return r;
}

int algo_params_init(struct algo_params *p, enum algo_kind kind, int64_t burst, int64_t count,
                     int64_t period_ns, int64_t precision)
{
    struct algo_params q;
    memset(&q, 0, sizeof(q));
    if (p == NULL || (unsigned)kind >= ALGO_KIND_COUNT_ || count < 1 || period_ns < 1)
        return -SLUICE_EINVAL;
    q.kind = kind;
    q.count = count;
    q.period_ns = period_ns;
    int rc = algo_table[kind]->params(&q, burst, precision);
    if (rc < 0)
        return rc;
    q.magic = ALGO_MAGIC;
    *p = q;
    return 0;
}

static const struct algo_ops *algo__ops(const struct algo_params *p)
{
    if (p == NULL || p->magic != ALGO_MAGIC || (unsigned)p->kind >= ALGO_KIND_COUNT_)
        return NULL;
    return algo_table[p->kind];
}

/* An algorithm's own knob, through its ops: -SLUICE_EINVAL unless p is
 * valid and its algorithm owns the knob. */
static int algo__knob(struct algo_params *p, enum algo_knob knob, const int64_t *v)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL || ops->knob == NULL)
        return -SLUICE_EINVAL;
    return ops->knob(p, knob, v);
}

int algo_params_set_warmup(struct algo_params *p, int64_t warmup_ns, int64_t cold_factor)
{
    const int64_t v[2] = {warmup_ns, cold_factor};
    return algo__knob(p, ALGO_KNOB_WARMUP, v);
}

int algo_params_set_phase(struct algo_params *p, int64_t phase_ns)
{
    return algo__knob(p, ALGO_KNOB_PHASE, &phase_ns);
}

const struct algo_option *algo_option_at(size_t i, enum algo_kind *kind)
{
    for (int k = 0; k < ALGO_KIND_COUNT_; k++) {
        const struct algo_ops *ops = algo_table[k];
        if (i < ops->noptions) {
            if (kind != NULL)
                *kind = (enum algo_kind)k;
            return &ops->options[i];
        }
        i -= ops->noptions;
    }
    return NULL;
}

int algo_option_find(const char *name, size_t len, int word)
{
    const struct algo_option *o;
    for (size_t i = 0; (o = algo_option_at(i, NULL)) != NULL; i++) {
        const char *n = word ? o->word : o->conf;
        if (strlen(n) == len && (word ? strncasecmp(name, n, len) == 0 : memcmp(name, n, len) == 0))
            return (int)i;
    }
    return -SLUICE_ENOENT;
}

const char *algo_option_list(enum algo_kind kind, int word, const char *lead, char *buf, size_t cap)
{
    const char *item[ALGO_OPTIONS_MAX + 1];
    size_t n = 0;
    const struct algo_option *o;
    enum algo_kind k;
    if (lead != NULL && *lead != '\0')
        item[n++] = lead;
    for (size_t i = 0; n <= ALGO_OPTIONS_MAX && (o = algo_option_at(i, &k)) != NULL; i++)
        if (kind == ALGO_KIND_COUNT_ || k == kind)
            item[n++] = word ? o->word : o->conf;
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && len < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " and " : ", ";
        int w = snprintf(buf + len, cap - len, "%s%s", sep, item[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    return buf;
}

int64_t algo_option_value(const struct algo_params *p, const struct algo_option *o)
{
    int64_t v;
    memcpy(&v, (const char *)p + o->off, sizeof(v));
    return v;
}

int algo_params_set_options(struct algo_params *p, const int64_t *vals, const int *given)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL)
        return -SLUICE_EINVAL;
    struct algo_params t = *p;
    int done[ALGO_OPTIONS_MAX] = {0};
    const struct algo_option *o;
    enum algo_kind kind;
    for (size_t i = 0; i < ALGO_OPTIONS_MAX && (o = algo_option_at(i, &kind)) != NULL; i++) {
        if (!given[i] || done[i])
            continue;
        if (kind != p->kind)
            return -SLUICE_EINVAL;
        /* The knob's values: t's, then every option of it that is given. */
        int64_t v[ALGO_KNOB_VALUES] = {0};
        const struct algo_option *r;
        enum algo_kind rk;
        for (size_t j = 0; (r = algo_option_at(j, &rk)) != NULL; j++) {
            if (rk != kind || r->knob != o->knob || r->slot < 0 || r->slot >= ALGO_KNOB_VALUES)
                continue;
            int g = j < ALGO_OPTIONS_MAX && given[j];
            v[r->slot] = g ? vals[j] : algo_option_value(&t, r);
            if (g)
                done[j] = 1;
        }
        int rc = algo__knob(&t, o->knob, v);
        if (rc < 0)
            return rc;
    }
    *p = t;
    return 0;
}

size_t algo_state_size(const struct algo_params *p)
{
    const struct algo_ops *ops = algo__ops(p);
    return ops ? ops->state_size(p) : 0;
}

void algo_init(const struct algo_params *p, void *state)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops != NULL && state != NULL)
        ops->init(p, state);
}

int algo_decide(const struct algo_params *p, void *state, int64_t qty, int64_t now_ns,
                struct algo_result *out)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL || state == NULL || out == NULL || qty < 0 || now_ns < 0)
        return -SLUICE_EINVAL;
    return ops->eval(p, state, qty, now_ns, qty > 0, out);
}

int algo_refund(const struct algo_params *p, void *state, int64_t qty, int64_t now_ns)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL || state == NULL || qty < 0 || now_ns < 0)
        return -SLUICE_EINVAL;
    if (qty == 0)
        return 0;
    return ops->refund(p, state, qty, now_ns);
}

void algo_free(const struct algo_params *p, void *state)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL || state == NULL)
        return;
    if (ops->free != NULL)
        ops->free(p, state);
    else
        ops->init(p, state);
}

int algo_drained(const struct algo_params *p, const void *state, int64_t now_ns)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL || state == NULL || now_ns < 0)
        return 0;
    return ops->drained(p, state, now_ns);
}

int algo_earliest_fit(const struct algo_params *p, const void *state, int64_t qty, int64_t now_ns,
                      int64_t *delay_ns)
{
    const struct algo_ops *ops = algo__ops(p);
    struct algo_result r;
    int rc;
    if (ops == NULL || state == NULL || delay_ns == NULL || qty < 0 || now_ns < 0)
        return -SLUICE_EINVAL;
    /* eval with apply = 0 never writes to state; the cast only shares the
     * signature with the deciding path. */
    rc = ops->eval(p, (void *)(uintptr_t)state, qty, now_ns, 0, &r);
    if (rc < 0)
        return rc;
    *delay_ns = r.limited ? r.retry_after_ns : 0;
    return 0;
}

int algo_over(const struct algo_params *p, const void *state, int64_t now_ns)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL || state == NULL || now_ns < 0 || ops->over == NULL)
        return 0;
    return ops->over(p, state, now_ns);
}

int algo_consume(const struct algo_params *p, void *state, int64_t qty, int64_t at_ns)
{
    const struct algo_ops *ops = algo__ops(p);
    if (ops == NULL || state == NULL || qty < 0 || at_ns < 0)
        return -SLUICE_EINVAL;
    if (qty == 0)
        return 0;
    return ops->consume(p, state, qty, at_ns);
}
