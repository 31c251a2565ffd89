/*
 * rls config: envoyproxy/ratelimit's YAML configuration (see config.h).
 *
 * A file, as envoyproxy/ratelimit documents it:
 *
 *   domain: mongo_cps
 *   descriptors:
 *     - key: database              <- one tree node: "database_users"
 *       value: users
 *       rate_limit:
 *         unit: second             second|minute|hour|day|week|month|year
 *         requests_per_unit: 500
 *         name: db                 optional; others may replace it
 *         replaces: [{name: x}]    limits named x do not apply when this does
 *         unlimited: false         true: never limited (no unit then)
 *       shadow_mode: false         true: over-limit answers say OK
 *       quota_mode: false          true: refuses only with every quota limit
 *       detailed_metric: false
 *       metadata: {any: value}     given back in dynamic_metadata when
 *                                  this limit passes (see meta.h)
 *       descriptors: [...]         nested entries, same shape
 *
 * Parsing uses libyaml's document API (the whole file is one tree with line
 * marks), so every error can name its line.  As envoyproxy/ratelimit does, a
 * mapping key that is none of the known field names is an error wherever it
 * appears, a known name in an unexpected place is ignored, and the keys
 * under `metadata` are anything (its scalars are typed as YAML 1.1 types
 * them, as envoyproxy's Go YAML decoder does: null, bool, number, else
 * string).  share_threshold on a wildcard makes every value it
 * matches share one counter (the pattern stands for the value in the key);
 * value_to_metric is accepted and has no effect in sluice.
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "file.h"
#include "sluice/error.h"

/* One descriptor of the tree.  value NULL: the key's default entry. */
struct rls_node {
    char *key;
    char *value;
    int wildcard;     /* value holds '*' */
    int has_wildcard; /* some child is a wildcard */
    int share;        /* share_threshold: values matching the wildcard share one counter */
    int has_limit;
    struct rls_limit limit;
    struct rls_node *children;
    size_t nchildren, cap;
};

struct rls_domain {
    char *name;
    struct rls_node root; /* its key and value are unused */
};

struct rls_config {
    struct rls_domain *domains;
    size_t ndomains, cap;
    int merge; /* rls_config__set_merge */
};

/* ---- units ---- */

static const char *const rls_unit_names[] = {
    [RLS_UNIT_SECOND] = "second", [RLS_UNIT_MINUTE] = "minute", [RLS_UNIT_HOUR] = "hour",
    [RLS_UNIT_DAY] = "day",       [RLS_UNIT_MONTH] = "month",   [RLS_UNIT_YEAR] = "year",
    [RLS_UNIT_WEEK] = "week",
};

int64_t rls_unit_seconds(int unit)
{
    switch (unit) {
    case RLS_UNIT_SECOND:
        return 1;
    case RLS_UNIT_MINUTE:
        return 60;
    case RLS_UNIT_HOUR:
        return 3600;
    case RLS_UNIT_DAY:
        return 86400;
    case RLS_UNIT_WEEK:
        return 7 * 86400;
    case RLS_UNIT_MONTH:
        return 30 * 86400;
    case RLS_UNIT_YEAR:
        return 365 * 86400;
    default:
        return 0;
    }
}

const char *rls_unit_name(int unit)
{
    if (unit <= 0 || unit > RLS_UNIT_WEEK)
        return NULL;
    return rls_unit_names[unit];
}

int rls_unit_parse(const char *s, enum rls_unit *out)
{
    for (int u = RLS_UNIT_SECOND; u <= RLS_UNIT_WEEK; u++) {
        if (s != NULL && strcasecmp(s, rls_unit_names[u]) == 0) {
            *out = (enum rls_unit)u;
            return 0;
        }
    }
    return -SLUICE_EINVAL;
}

/* ---- freeing ---- */

static void rls_config__node_free(struct rls_node *n)
{
    for (size_t i = 0; i < n->nchildren; i++)
        rls_config__node_free(&n->children[i]);
    free(n->children);
    free(n->key);
    free(n->value);
    free((char *)n->limit.name);
    free((char *)n->limit.full_key);
    for (size_t i = 0; i < n->limit.nreplaces; i++)
        free((char *)n->limit.replaces[i]);
    free((void *)n->limit.replaces);
    if (n->limit.metadata != NULL) {
        rls_meta_clear((struct rls_meta *)n->limit.metadata);
        free((void *)n->limit.metadata);
    }
}

void rls_config_free(struct rls_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->ndomains; i++) {
        free(cfg->domains[i].name);
        rls_config__node_free(&cfg->domains[i].root);
    }
    free(cfg->domains);
    free(cfg);
}

int rls_config_create(struct rls_config **out)
{
    *out = calloc(1, sizeof(**out));
    return *out == NULL ? -SLUICE_ENOMEM : 0;
}

/* on: a file whose domain is already loaded adds its descriptors to it
 * (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG) instead of being refused as
 * a duplicate domain; a descriptor both define is still refused
 * ("duplicate descriptor composite key").  Off by default. */
static void rls_config__set_merge(struct rls_config *cfg, int on)
{
    if (cfg != NULL)
        cfg->merge = on != 0;
}

int rls_config_env_true(const char *name)
{
    const char *v = getenv(name);
    static const char *const yes[] = {"1", "t", "T", "true", "TRUE", "True"};
    for (size_t i = 0; v != NULL && i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcmp(v, yes[i]) == 0)
            return 1;
    return 0;
}

size_t rls_config_domains(const struct rls_config *cfg)
{
    return cfg == NULL ? 0 : cfg->ndomains;
}

/* ---- loading ---- */

struct rls_load {
    yaml_document_t *doc;
    const char *name;
    char *err;
    size_t errlen;
    int rc;
    size_t meta_nodes; /* metadata values made from this file */
};

/* Records the first error, "name:LINE: why" (line 1-based); returns rc. */
__attribute__((format(printf, 4, 5))) static int
rls_config__fail(struct rls_load *ld, int rc, const yaml_node_t *at, const char *fmt, ...)
{
    if (ld->rc == 0) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (ld->err != NULL && ld->errlen > 0) {
            if (at != NULL)
                snprintf(ld->err, ld->errlen, "%s:%zu: %s", ld->name, at->start_mark.line + 1, msg);
            else
                snprintf(ld->err, ld->errlen, "%s: %s", ld->name, msg);
        }
        ld->rc = rc;
    }
    return rc;
}

static int rls_config__nomem(struct rls_load *ld)
{
    return rls_config__fail(ld, -SLUICE_ENOMEM, NULL, "out of memory");
}

/* envoyproxy/ratelimit's set of field names (validKeys). */
static int rls_config__known_key(const char *k)
{
    static const char *const keys[] = {
        "domain",
        "key",
        "value",
        "descriptors",
        "rate_limit",
        "unit",
        "requests_per_unit",
        "unlimited",
        "shadow_mode",
        "quota_mode",
        "name",
        "replaces",
        "detailed_metric",
        "value_to_metric",
        "share_threshold",
        "metadata",
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(k, keys[i]) == 0)
            return 1;
    return 0;
}

/* A plain (unquoted) scalar that YAML reads as a number, as envoyproxy's
 * Go YAML decoder does: such a mapping key is not a string to it. */
static int rls_config__plain_number(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
        n->data.scalar.length == 0)
        return 0;
    const char *s = (const char *)n->data.scalar.value;
    char *end = NULL;
    errno = 0;
    (void)strtod(s, &end);
    return end != s && *end == '\0' && !isalpha((unsigned char)s[0]);
}

static const char *rls_config__scalar(const yaml_node_t *n)
{
    return n != NULL && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* A scalar that YAML would read as null ("", "~", "null"). */
static int rls_config__is_null(const yaml_node_t *n)
{
    const char *s = rls_config__scalar(n);
    if (s == NULL || n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
        n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
        return 0;
    return *s == '\0' || strcmp(s, "~") == 0 || strcasecmp(s, "null") == 0;
}

/* Checks every mapping key under n is a field name (metadata unread). */
static int rls_config__check_keys(struct rls_load *ld, const yaml_node_t *n, int depth)
{
    if (depth > RLS_CONFIG_MAX_DEPTH * 4)
        return rls_config__fail(ld, -SLUICE_ECONFIG, n, "nested too deeply");
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++) {
            const yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
            if (e->type != YAML_MAPPING_NODE)
                return rls_config__fail(ld, -SLUICE_ECONFIG, e,
                                        "config error, yaml file contains list of type other "
                                        "than map");
            if (rls_config__check_keys(ld, e, depth + 1) < 0)
                return ld->rc;
        }
    } else if (n->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            const yaml_node_t *k = yaml_document_get_node(ld->doc, p->key);
            const yaml_node_t *v = yaml_document_get_node(ld->doc, p->value);
            const char *ks = rls_config__scalar(k);
            if (ks == NULL)
                return rls_config__fail(ld, -SLUICE_ECONFIG, k,
                                        "config error, key is not of type string");
            if (rls_config__plain_number(k))
                return rls_config__fail(ld, -SLUICE_ECONFIG, k,
                                        "config error, key is not of type string: %s", ks);
            if (!rls_config__known_key(ks))
                return rls_config__fail(ld, -SLUICE_ECONFIG, k, "config error, unknown key '%s'",
                                        ks);
            if (strcmp(ks, "metadata") != 0 && rls_config__check_keys(ld, v, depth + 1) < 0)
                return ld->rc;
        }
    }
    return 0;
}

/* The value of field name in mapping m, or NULL. */
static const yaml_node_t *rls_config__field(struct rls_load *ld, const yaml_node_t *m,
                                            const char *name)
{
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *ks = rls_config__scalar(yaml_document_get_node(ld->doc, p->key));
        if (ks != NULL && strcmp(ks, name) == 0)
            return yaml_document_get_node(ld->doc, p->value);
    }
    return NULL;
}

/* A string field: "" when absent or null; an error when not a scalar. */
static int rls_config__str(struct rls_load *ld, const yaml_node_t *m, const char *name,
                           const char **out)
{
    const yaml_node_t *v = rls_config__field(ld, m, name);
    *out = "";
    if (v == NULL || rls_config__is_null(v))
        return 0;
    if (v->type != YAML_SCALAR_NODE)
        return rls_config__fail(ld, -SLUICE_ECONFIG, v, "%s: expected a string", name);
    *out = rls_config__scalar(v);
    return 0;
}

/* A boolean field as YAML 1.1 spells it; absent or null is false. */
static int rls_config__bool(struct rls_load *ld, const yaml_node_t *m, const char *name, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "y"};
    static const char *const no[] = {"false", "no", "off", "n"};
    const yaml_node_t *v = rls_config__field(ld, m, name);
    *out = 0;
    if (v == NULL || rls_config__is_null(v))
        return 0;
    const char *s = rls_config__scalar(v);
    for (size_t i = 0; s != NULL && i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0)
            return 0;
    }
    return rls_config__fail(ld, -SLUICE_ECONFIG, v, "%s: expected true or false", name);
}

static int rls_config__u32(struct rls_load *ld, const yaml_node_t *m, const char *name,
                           uint32_t *out)
{
    const yaml_node_t *v = rls_config__field(ld, m, name);
    *out = 0;
    if (v == NULL || rls_config__is_null(v))
        return 0;
    const char *s = rls_config__scalar(v);
    char *end = NULL;
    unsigned long long x = 0;
    errno = 0;
    if (s != NULL && isdigit((unsigned char)*s))
        x = strtoull(s, &end, 10);
    if (end == NULL || errno != 0 || *end != '\0' || x > UINT32_MAX)
        return rls_config__fail(ld, -SLUICE_ECONFIG, v,
                                "%s: expected a whole number from 0 to 4294967295", name);
    *out = (uint32_t)x;
    return 0;
}

static char *rls_config__dup(const char *s)
{
    return s == NULL ? NULL : strdup(s);
}

/* ---- metadata ---- */

/* One of the words s is exactly. */
static int rls_config__word(const char *s, const char *const *words)
{
    for (; *words != NULL; words++)
        if (strcmp(s, *words) == 0)
            return 1;
    return 0;
}

/* A plain scalar as a number the way YAML 1.1 (Go's yaml.v2) reads one:
 * an integer (decimal, 0x, 0o, 0b or a leading-0 octal, '_' ignored), a
 * float, .inf or .nan.  1 and *out when it is one, else 0. */
static int rls_config__yaml_number(const char *s, double *out)
{
    static const char *const inf[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", NULL};
    static const char *const ninf[] = {"-.inf", "-.Inf", "-.INF", NULL};
    static const char *const nan[] = {".nan", ".NaN", ".NAN", NULL};
    char t[72] = {0}; /* zeroed: the scans below stop at its NUL */
    size_t n = 0;
    if (rls_config__word(s, inf) || rls_config__word(s, ninf)) {
        *out = rls_config__word(s, inf) ? INFINITY : -INFINITY;
        return 1;
    }
    if (rls_config__word(s, nan)) {
        *out = NAN;
        return 1;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (*p == '_')
            continue;
        if (n + 1 >= sizeof(t))
            return 0;
        t[n++] = *p;
    }
    t[n] = '\0';
    const char *d = t + (t[0] == '+' || t[0] == '-');
    int neg = t[0] == '-';
    int base = 10;
    if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X'))
        base = 16, d += 2;
    else if (d[0] == '0' && (d[1] == 'o' || d[1] == 'O'))
        base = 8, d += 2;
    else if (d[0] == '0' && (d[1] == 'b' || d[1] == 'B'))
        base = 2, d += 2;
    else if (d[0] == '0' && d[1] != '\0' && d[1] != '.' && d[1] != 'e' && d[1] != 'E')
        base = 8, d += 1;
    if (*d != '\0' && isalnum((unsigned char)*d)) {
        char *end = NULL;
        errno = 0;
        unsigned long long u = strtoull(d, &end, base);
        if (*end == '\0' && errno == 0 && *d != '-' && *d != '+') {
            *out = neg ? -(double)u : (double)u;
            return 1;
        }
    }
    /* A float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
    const char *p = t + (t[0] == '+' || t[0] == '-');
    size_t digits = 0;
    while (isdigit((unsigned char)*p))
        p++, digits++;
    if (*p == '.') {
        p++;
        size_t frac = 0;
        while (isdigit((unsigned char)*p))
            p++, frac++;
        if (digits == 0 && frac == 0)
            return 0;
    } else if (digits == 0) {
        return 0;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return 0;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p != '\0')
        return 0;
    *out = strtod(t, NULL);
    return 1;
}

/* A scalar as a Value: quoted ones are strings; plain ones are null, a
 * bool or a number when YAML 1.1 reads them so, else strings. */
static int rls_config__meta_scalar(struct rls_load *ld, const yaml_node_t *n, struct rls_meta *m)
{
    static const char *const yes[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                      "True", "TRUE", "on",  "On",  "ON",  NULL};
    static const char *const no[] = {"n",     "N",     "no",  "No",  "NO",  "false",
                                     "False", "FALSE", "off", "Off", "OFF", NULL};
    const char *s = (const char *)n->data.scalar.value;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (rls_config__is_null(n)) {
            m->kind = RLS_META_NULL;
            return 0;
        }
        if (rls_config__word(s, yes) || rls_config__word(s, no)) {
            m->kind = RLS_META_BOOL;
            m->boolean = rls_config__word(s, yes);
            return 0;
        }
        if (rls_config__yaml_number(s, &m->number)) {
            m->kind = RLS_META_NUMBER;
            return 0;
        }
    }
    m->kind = RLS_META_STRING;
    m->string = strdup(s);
    return m->string == NULL ? rls_config__nomem(ld) : 0;
}

/* YAML node n as a Value into m (zeroed by the caller); bounded in depth
 * and in values per file (aliases are followed, so count them). */
static int rls_config__meta(struct rls_load *ld, const yaml_node_t *n, struct rls_meta *m,
                            int depth)
{
    if (depth > RLS_META_MAX_DEPTH)
        return rls_config__fail(ld, -SLUICE_ECONFIG, n, "metadata nested deeper than %d levels",
                                RLS_META_MAX_DEPTH);
    if (++ld->meta_nodes > RLS_META_MAX_NODES)
        return rls_config__fail(ld, -SLUICE_ECONFIG, n, "metadata: more than %d values",
                                RLS_META_MAX_NODES);
    if (n->type == YAML_SCALAR_NODE)
        return rls_config__meta_scalar(ld, n, m);
    size_t cap;
    if (n->type == YAML_SEQUENCE_NODE) {
        m->kind = RLS_META_LIST;
        cap = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
        m->items = calloc(cap ? cap : 1, sizeof(*m->items));
        if (m->items == NULL)
            return rls_config__nomem(ld);
        for (size_t i = 0; i < cap; i++) {
            const yaml_node_t *e = yaml_document_get_node(ld->doc, n->data.sequence.items.start[i]);
            m->n = i + 1;
            if (rls_config__meta(ld, e, &m->items[i], depth + 1) < 0)
                return ld->rc;
        }
        return 0;
    }
    /* A mapping: a Struct.  A name given twice keeps the later value, as a
     * YAML decoder into a map does. */
    m->kind = RLS_META_STRUCT;
    cap = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    m->items = calloc(cap ? cap : 1, sizeof(*m->items));
    m->keys = calloc(cap ? cap : 1, sizeof(*m->keys));
    if (m->items == NULL || m->keys == NULL)
        return rls_config__nomem(ld);
    m->n = 0;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(ld->doc, p->key);
        const char *ks = rls_config__scalar(k);
        if (ks == NULL)
            return rls_config__fail(ld, -SLUICE_ECONFIG, k, "metadata: a key must be a scalar");
        size_t at = m->n;
        for (size_t i = 0; i < m->n; i++) {
            if (strcmp(m->keys[i], ks) == 0) {
                rls_meta_clear(&m->items[i]);
                at = i;
            }
        }
        if (at == m->n) {
            if ((m->keys[at] = strdup(ks)) == NULL)
                return rls_config__nomem(ld);
            m->n++;
        }
        if (rls_config__meta(ld, yaml_document_get_node(ld->doc, p->value), &m->items[at],
                             depth + 1) < 0)
            return ld->rc;
    }
    return 0;
}

/* A descriptor's `metadata`: *out is a new STRUCT, or NULL when absent,
 * null or empty.  A value other than a mapping is an error. */
static int rls_config__metadata(struct rls_load *ld, const yaml_node_t *d, struct rls_meta **out)
{
    const yaml_node_t *v = rls_config__field(ld, d, "metadata");
    *out = NULL;
    if (v == NULL || rls_config__is_null(v))
        return 0;
    if (v->type != YAML_MAPPING_NODE)
        return rls_config__fail(ld, -SLUICE_ECONFIG, v, "metadata: expected a mapping");
    struct rls_meta *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return rls_config__nomem(ld);
    int rc = rls_config__meta(ld, v, m, 1);
    if (rc < 0 || m->n == 0) {
        rls_meta_clear(m);
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

static int rls_config__limit(struct rls_load *ld, struct rls_node *node, const yaml_node_t *d,
                             const yaml_node_t *rl, const char *full_key)
{
    struct rls_limit *l = &node->limit;
    const char *unit, *name;
    if (rl->type != YAML_MAPPING_NODE)
        return rls_config__fail(ld, -SLUICE_ECONFIG, rl, "rate_limit: expected a mapping");
    if (rls_config__str(ld, rl, "unit", &unit) < 0 ||
        rls_config__u32(ld, rl, "requests_per_unit", &l->requests_per_unit) < 0 ||
        rls_config__bool(ld, rl, "unlimited", &l->unlimited) < 0 ||
        rls_config__str(ld, rl, "name", &name) < 0 ||
        rls_config__bool(ld, d, "shadow_mode", &l->shadow_mode) < 0 ||
        rls_config__bool(ld, d, "quota_mode", &l->quota_mode) < 0 ||
        rls_config__bool(ld, d, "detailed_metric", &l->detailed_metric) < 0)
        return ld->rc;
    enum rls_unit u = RLS_UNIT_UNKNOWN;
    int valid_unit = rls_unit_parse(unit, &u) == 0;
    const yaml_node_t *at = rls_config__field(ld, rl, "unit");
    if (l->unlimited && valid_unit)
        return rls_config__fail(ld, -SLUICE_ECONFIG, at,
                                "should not specify rate limit unit when unlimited");
    if (!l->unlimited && !valid_unit)
        return rls_config__fail(ld, -SLUICE_ECONFIG, at != NULL ? at : rl,
                                "invalid rate limit unit '%s'", unit);
    l->unit = u;
    node->has_limit = 1;
    l->name = rls_config__dup(name);
    l->full_key = rls_config__dup(full_key);
    if (l->name == NULL || l->full_key == NULL)
        return rls_config__nomem(ld);
    const yaml_node_t *rep = rls_config__field(ld, rl, "replaces");
    if (rep == NULL || rls_config__is_null(rep))
        return 0;
    if (rep->type != YAML_SEQUENCE_NODE)
        return rls_config__fail(ld, -SLUICE_ECONFIG, rep, "replaces: expected a list");
    size_t n = (size_t)(rep->data.sequence.items.top - rep->data.sequence.items.start);
    l->replaces = calloc(n ? n : 1, sizeof(char *));
    if (l->replaces == NULL)
        return rls_config__nomem(ld);
    for (size_t i = 0; i < n; i++) {
        const yaml_node_t *e = yaml_document_get_node(ld->doc, rep->data.sequence.items.start[i]);
        const char *rn;
        if (rls_config__str(ld, e, "name", &rn) < 0)
            return ld->rc;
        if (*rn == '\0')
            return rls_config__fail(ld, -SLUICE_ECONFIG, e,
                                    "should not have an empty replaces entry");
        if (strcmp(rn, l->name) == 0)
            return rls_config__fail(ld, -SLUICE_ECONFIG, e,
                                    "replaces should not contain name of same descriptor");
        char *copy = strdup(rn);
        if (copy == NULL)
            return rls_config__nomem(ld);
        ((const char **)l->replaces)[i] = copy;
        l->nreplaces = i + 1;
    }
    return 0;
}

static int rls_config__cmp(const char *ak, const char *av, const char *bk, const char *bv)
{
    int c = strcmp(ak, bk);
    if (c != 0)
        return c;
    if (av == NULL || bv == NULL)
        return (av != NULL) - (bv != NULL);
    return strcmp(av, bv);
}

static int rls_config__child_cmp(const void *a, const void *b)
{
    const struct rls_node *x = a, *y = b;
    return rls_config__cmp(x->key, x->value, y->key, y->value);
}

static int rls_config__descriptors(struct rls_load *ld, struct rls_node *parent,
                                   const yaml_node_t *list, const char *parent_key, int depth)
{
    if (list == NULL || rls_config__is_null(list))
        return 0;
    if (list->type != YAML_SEQUENCE_NODE)
        return rls_config__fail(ld, -SLUICE_ECONFIG, list, "descriptors: expected a list");
    if (depth > RLS_CONFIG_MAX_DEPTH)
        return rls_config__fail(ld, -SLUICE_ECONFIG, list,
                                "descriptors nested deeper than %d levels", RLS_CONFIG_MAX_DEPTH);
    for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top;
         it++) {
        const yaml_node_t *d = yaml_document_get_node(ld->doc, *it);
        const char *key, *value;
        if (rls_config__str(ld, d, "key", &key) < 0 || rls_config__str(ld, d, "value", &value) < 0)
            return ld->rc;
        if (*key == '\0')
            return rls_config__fail(ld, -SLUICE_ECONFIG, d, "descriptor has empty key");
        size_t fklen = strlen(parent_key) + strlen(key) + strlen(value) + 3;
        char *full = malloc(fklen);
        if (full == NULL)
            return rls_config__nomem(ld);
        snprintf(full, fklen, "%s%s%s%s", parent_key, key, *value ? "_" : "", value);
        const char *v = *value ? value : NULL;
        for (size_t i = 0; i < parent->nchildren; i++) {
            if (rls_config__cmp(parent->children[i].key, parent->children[i].value, key, v) == 0) {
                rls_config__fail(ld, -SLUICE_ECONFIG, d, "duplicate descriptor composite key '%s'",
                                 full);
                free(full);
                return ld->rc;
            }
        }
        if (parent->nchildren == parent->cap) {
            size_t cap = parent->cap ? parent->cap * 2 : 4;
            struct rls_node *c = realloc(parent->children, cap * sizeof(*c));
            if (c == NULL) {
                free(full);
                return rls_config__nomem(ld);
            }
            parent->children = c;
            parent->cap = cap;
        }
        struct rls_node *node = &parent->children[parent->nchildren++];
        memset(node, 0, sizeof(*node));
        node->key = strdup(key);
        node->value = v != NULL ? strdup(v) : NULL;
        node->wildcard = v != NULL && strchr(v, '*') != NULL;
        parent->has_wildcard |= node->wildcard;
        if (node->key == NULL || (v != NULL && node->value == NULL)) {
            free(full);
            return rls_config__nomem(ld);
        }
        if (rls_config__bool(ld, d, "share_threshold", &node->share) < 0) {
            free(full);
            return ld->rc;
        }
        const yaml_node_t *rl = rls_config__field(ld, d, "rate_limit");
        struct rls_meta *meta = NULL;
        int rc = rls_config__metadata(ld, d, &meta);
        if (rc == 0 && rl != NULL && !rls_config__is_null(rl))
            rc = rls_config__limit(ld, node, d, rl, full);
        if (rc == 0 && node->has_limit) {
            node->limit.metadata = meta; /* only a limit gives it back */
            meta = NULL;
        }
        if (meta != NULL) {
            rls_meta_clear(meta);
            free(meta);
        }
        if (rc == 0) {
            size_t plen = strlen(full);
            full[plen] = '.';
            full[plen + 1] = '\0';
            rc = rls_config__descriptors(ld, node, rls_config__field(ld, d, "descriptors"), full,
                                         depth + 1);
        }
        free(full);
        if (rc < 0)
            return rc;
    }
    qsort(parent->children, parent->nchildren, sizeof(*parent->children), rls_config__child_cmp);
    return 0;
}

static int rls_config__document(struct rls_config *cfg, struct rls_load *ld)
{
    const yaml_node_t *root = yaml_document_get_root_node(ld->doc);
    if (root == NULL)
        return rls_config__fail(ld, -SLUICE_ECONFIG, NULL, "config file cannot have empty domain");
    if (root->type != YAML_MAPPING_NODE)
        return rls_config__fail(ld, -SLUICE_ECONFIG, root, "expected a mapping with a domain");
    if (rls_config__check_keys(ld, root, 0) < 0)
        return ld->rc;
    const char *domain;
    if (rls_config__str(ld, root, "domain", &domain) < 0)
        return ld->rc;
    if (*domain == '\0')
        return rls_config__fail(ld, -SLUICE_ECONFIG, root, "config file cannot have empty domain");
    struct rls_domain *dom = NULL;
    for (size_t i = 0; i < cfg->ndomains; i++) {
        if (strcmp(cfg->domains[i].name, domain) != 0)
            continue;
        if (!cfg->merge)
            return rls_config__fail(ld, -SLUICE_ECONFIG, rls_config__field(ld, root, "domain"),
                                    "duplicate domain '%s' in config file", domain);
        dom = &cfg->domains[i]; /* merged: its descriptors join the domain's */
    }
    if (dom == NULL && cfg->ndomains == cfg->cap) {
        size_t cap = cfg->cap ? cfg->cap * 2 : 4;
        struct rls_domain *d = realloc(cfg->domains, cap * sizeof(*d));
        if (d == NULL)
            return rls_config__nomem(ld);
        cfg->domains = d;
        cfg->cap = cap;
    }
    if (dom == NULL) {
        dom = &cfg->domains[cfg->ndomains++];
        memset(dom, 0, sizeof(*dom));
        dom->name = strdup(domain);
        if (dom->name == NULL)
            return rls_config__nomem(ld);
    }
    size_t plen = strlen(domain) + 2;
    char *prefix = malloc(plen);
    if (prefix == NULL)
        return rls_config__nomem(ld);
    snprintf(prefix, plen, "%s.", domain);
    int rc = rls_config__descriptors(ld, &dom->root, rls_config__field(ld, root, "descriptors"),
                                     prefix, 1);
    free(prefix);
    return rc;
}

int rls_config_add_buffer(struct rls_config *cfg, const char *name, const char *buf, size_t len,
                          char *err, size_t errlen)
{
    struct rls_load ld = {.name = name, .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_document_t doc;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (len > RLS_CONFIG_MAX_FILE_BYTES)
        return rls_config__fail(&ld, -SLUICE_ECONFIG, NULL, "larger than %u bytes",
                                RLS_CONFIG_MAX_FILE_BYTES);
    if (!yaml_parser_initialize(&parser))
        return rls_config__nomem(&ld);
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc)) {
        if (parser.error == YAML_MEMORY_ERROR) {
            rls_config__nomem(&ld);
        } else if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s:%zu: %s%s%s", name, parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "invalid YAML", parser.context ? " " : "",
                     parser.context ? parser.context : "");
            ld.rc = -SLUICE_ECONFIG;
        } else {
            ld.rc = -SLUICE_ECONFIG;
        }
        yaml_parser_delete(&parser);
        return ld.rc;
    }
    ld.doc = &doc;
    int rc = rls_config__document(cfg, &ld);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

static int rls_config__yaml_name(const char *n)
{
    size_t l = strlen(n);
    if (n[0] == '.')
        return 0;
    return (l > 5 && strcmp(n + l - 5, ".yaml") == 0) || (l > 4 && strcmp(n + l - 4, ".yml") == 0);
}

static int rls_config__name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int rls_config_load_dir(const char *dir, struct rls_config **out, char *err, size_t errlen)
{
    char **names = NULL;
    size_t n = 0;
    int rc;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(err, errlen, "%s: cannot open the directory: %s", dir, strerror(errno));
        return -SLUICE_EIO;
    }
    names = calloc(RLS_CONFIG_MAX_FILES, sizeof(char *));
    if (names == NULL) {
        closedir(d);
        return -SLUICE_ENOMEM;
    }
    const struct dirent *e;
    rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (!rls_config__yaml_name(e->d_name))
            continue;
        if (n == RLS_CONFIG_MAX_FILES) {
            snprintf(err, errlen, "%s: more than %d YAML files", dir, RLS_CONFIG_MAX_FILES);
            rc = -SLUICE_ECONFIG;
            break;
        }
        if ((names[n] = strdup(e->d_name)) == NULL) {
            rc = -SLUICE_ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    struct rls_config *cfg = NULL;
    if (rc == 0)
        rc = rls_config_create(&cfg);
    if (rc == 0)
        rls_config__set_merge(cfg, rls_config_env_true("MERGE_DOMAIN_CONFIG"));
    qsort(names, n, sizeof(char *), rls_config__name_cmp);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t plen = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(plen);
        char *buf = NULL;
        size_t len = 0;
        if (path == NULL) {
            rc = -SLUICE_ENOMEM;
            break;
        }
        snprintf(path, plen, "%s/%s", dir, names[i]);
        /* Regular files only, read without blocking (a FIFO named *.yaml
         * would hang the daemon's loop on a reload), bounded in size. */
        rc = file_read_regular(path, RLS_CONFIG_MAX_FILE_BYTES, &buf, &len, NULL, err, errlen);
        if (rc == -SLUICE_EINVAL || rc == -SLUICE_ETOOBIG)
            rc = -SLUICE_ECONFIG;
        if (rc == 0)
            rc = rls_config_add_buffer(cfg, path, buf, len, err, errlen);
        free(buf);
        free(path);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc < 0) {
        if (rc == -SLUICE_ENOMEM && err != NULL && errlen > 0 && err[0] == '\0')
            snprintf(err, errlen, "%s: out of memory", dir);
        rls_config_free(cfg);
        return rc;
    }
    *out = cfg;
    return 0;
}

/* ---- matching ---- */

/* s (len bytes) equals the NUL-terminated t. */
static int rls_config__eq(const char *s, size_t len, const char *t)
{
    return strncmp(s, t, len) == 0 && t[len] == '\0';
}

/* Compares request (key, value) with a child, in rls_config__child_cmp's
 * order; value NULL is the default entry. */
static int rls_config__cmp_req(const char *k, size_t kl, const char *v, size_t vl,
                               const struct rls_node *c)
{
    int r = strncmp(k, c->key, kl);
    if (r == 0 && c->key[kl] != '\0')
        r = -1;
    if (r != 0)
        return r;
    if (v == NULL || c->value == NULL)
        return (v != NULL) - (c->value != NULL);
    r = strncmp(v, c->value, vl);
    if (r == 0 && c->value[vl] != '\0')
        r = -1;
    return r;
}

static const struct rls_node *rls_config__find(const struct rls_node *p, const char *k, size_t kl,
                                               const char *v, size_t vl)
{
    size_t lo = 0, hi = p->nchildren;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = rls_config__cmp_req(k, kl, v, vl, &p->children[mid]);
        if (c == 0)
            return &p->children[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* '*' matches any run of bytes, as envoyproxy/ratelimit's wildcardMatch. */
static int rls_config__glob(const char *pat, const char *s, size_t len)
{
    const char *star = NULL;
    size_t i = 0, back = 0;
    while (i < len) {
        if (*pat == '*') {
            star = pat++;
            back = i;
        } else if (*pat != '\0' && *pat == s[i]) {
            pat++;
            i++;
        } else if (star != NULL) {
            pat = star + 1;
            i = ++back;
        } else {
            return 0;
        }
    }
    while (*pat == '*')
        pat++;
    return *pat == '\0';
}

int rls_config_has_domain(const struct rls_config *cfg, const char *domain, size_t dlen)
{
    for (size_t i = 0; cfg != NULL && i < cfg->ndomains; i++)
        if (rls_config__eq(domain, dlen, cfg->domains[i].name))
            return 1;
    return 0;
}

const struct rls_limit *rls_config_match(const struct rls_config *cfg, const char *domain,
                                         size_t dlen, const struct rls_entry *entries, size_t n,
                                         const char **shared)
{
    const struct rls_node *level = NULL;
    for (size_t i = 0; shared != NULL && i < n; i++)
        shared[i] = NULL;
    if (cfg == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->ndomains && level == NULL; i++)
        if (rls_config__eq(domain, dlen, cfg->domains[i].name))
            level = &cfg->domains[i].root;
    const struct rls_limit *found = NULL;
    for (size_t i = 0; level != NULL && i < n; i++) {
        const struct rls_entry *e = &entries[i];
        const struct rls_node *next = rls_config__find(level, e->key, e->klen, e->value, e->vlen);
        for (size_t c = 0;
             next == NULL && level->has_wildcard && level->children != NULL && c < level->nchildren;
             c++) {
            const struct rls_node *w = &level->children[c];
            if (w->wildcard && rls_config__eq(e->key, e->klen, w->key) &&
                rls_config__glob(w->value, e->value, e->vlen)) {
                next = w;
                if (shared != NULL && w->share)
                    shared[i] = w->value;
            }
        }
        if (next == NULL)
            next = rls_config__find(level, e->key, e->klen, NULL, 0);
        if (next != NULL && next->has_limit && i == n - 1)
            found = &next->limit;
        if (next == NULL || next->nchildren == 0)
            break;
        level = next;
    }
    return found;
}
