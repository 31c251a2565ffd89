/*
 * The envoyproxy/ratelimit YAML loader: the examples of envoyproxy/ratelimit's
 * README (written here from it) load and match as it documents them, the
 * service applies replaces and shadow_mode as documented, and every error
 * is refused naming its file and line.  Descriptor metadata is read with
 * YAML 1.1's types and given back in dynamic_metadata as
 * envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does; the health
 * service follows readiness.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "google/protobuf/struct.pb-c.h"
#include "rls/config.h"
#include "rls/service.h"
#include "sluice/error.h"

/* Loads one file's text as "t.yaml"; fails the test on error. */
static struct rls_config *load(const char *text)
{
    struct rls_config *cfg;
    char err[512];
    assert_int_equal(rls_config_create(&cfg), 0);
    int rc = rls_config_add_buffer(cfg, "t.yaml", text, strlen(text), err, sizeof(err));
    if (rc != 0)
        fail_msg("load failed: %s", err);
    return cfg;
}

/* Matches a descriptor given as "k1", "v1", "k2", "v2", ..., NULL. */
static const struct rls_limit *match(const struct rls_config *cfg, const char *domain, ...)
{
    struct rls_entry e[8];
    size_t n = 0;
    va_list ap;
    va_start(ap, domain);
    const char *k;
    while ((k = va_arg(ap, const char *)) != NULL && n < 8) {
        const char *v = va_arg(ap, const char *);
        e[n].key = k;
        e[n].klen = strlen(k);
        e[n].value = v;
        e[n].vlen = strlen(v);
        n++;
    }
    va_end(ap);
    return rls_config_match(cfg, domain, strlen(domain), e, n, NULL);
}

static void assert_limit(const struct rls_limit *l, uint32_t rpu, enum rls_unit unit)
{
    assert_non_null(l);
    assert_int_equal(l->requests_per_unit, rpu);
    assert_int_equal(l->unit, unit);
    assert_false(l->unlimited);
}

/* Example 1: two values of one key, each its own limit. */
static void test_example1(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: mongo_cps\n"
                                  "descriptors:\n"
                                  "  - key: database\n"
                                  "    value: users\n"
                                  "    rate_limit:\n"
                                  "      unit: second\n"
                                  "      requests_per_unit: 500\n"
                                  "\n"
                                  "  - key: database\n"
                                  "    value: default\n"
                                  "    rate_limit:\n"
                                  "      unit: second\n"
                                  "      requests_per_unit: 500\n");
    assert_int_equal(rls_config_domains(cfg), 1);
    const struct rls_limit *l = match(cfg, "mongo_cps", "database", "users", NULL);
    assert_limit(l, 500, RLS_UNIT_SECOND);
    assert_string_equal(l->full_key, "mongo_cps.database_users");
    assert_limit(match(cfg, "mongo_cps", "database", "default", NULL), 500, RLS_UNIT_SECOND);
    assert_null(match(cfg, "mongo_cps", "database", "other", NULL));
    assert_null(match(cfg, "other_domain", "database", "users", NULL));
    rls_config_free(cfg);
}

/* Example 2: nested descriptors; a key with no value matches any value; a
 * placeholder without a limit matches nothing by itself. */
static void test_example2_nested(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: messaging\n"
                                  "descriptors:\n"
                                  "  # Only allow 5 marketing messages a day\n"
                                  "  - key: message_type\n"
                                  "    value: marketing\n"
                                  "    descriptors:\n"
                                  "      - key: to_number\n"
                                  "        rate_limit:\n"
                                  "          unit: day\n"
                                  "          requests_per_unit: 5\n"
                                  "\n"
                                  "  # Only allow 100 messages a day to any unique phone number\n"
                                  "  - key: to_number\n"
                                  "    rate_limit:\n"
                                  "      unit: day\n"
                                  "      requests_per_unit: 100\n");
    assert_limit(
        match(cfg, "messaging", "message_type", "marketing", "to_number", "2061111111", NULL), 5,
        RLS_UNIT_DAY);
    assert_limit(
        match(cfg, "messaging", "message_type", "marketing", "to_number", "2062222222", NULL), 5,
        RLS_UNIT_DAY);
    assert_limit(match(cfg, "messaging", "to_number", "2061111111", NULL), 100, RLS_UNIT_DAY);
    assert_null(match(cfg, "messaging", "message_type", "marketing", NULL));
    assert_null(match(cfg, "messaging", "message_type", "transactional", "to_number", "1", NULL));
    rls_config_free(cfg);
}

/* Example 3: key and value is tried before the key alone. */
static void test_example3_order(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: edge_proxy_per_ip\n"
                                  "descriptors:\n"
                                  "  - key: remote_address\n"
                                  "    rate_limit:\n"
                                  "      unit: second\n"
                                  "      requests_per_unit: 10\n"
                                  "\n"
                                  "  # Black list IP\n"
                                  "  - key: remote_address\n"
                                  "    value: 50.0.0.5\n"
                                  "    rate_limit:\n"
                                  "      unit: second\n"
                                  "      requests_per_unit: 0\n");
    assert_limit(match(cfg, "edge_proxy_per_ip", "remote_address", "50.0.0.1", NULL), 10,
                 RLS_UNIT_SECOND);
    assert_limit(match(cfg, "edge_proxy_per_ip", "remote_address", "50.0.0.5", NULL), 0,
                 RLS_UNIT_SECOND);
    rls_config_free(cfg);
}

/* Example 4: a request matches only at its own depth. */
static void test_example4_depth(void **state)
{
    (void)state;
    struct rls_config *a = load("domain: example4\n"
                                "descriptors:\n"
                                "  - key: key\n"
                                "    value: value\n"
                                "    rate_limit:\n"
                                "      requests_per_unit: 300\n"
                                "      unit: second\n");
    assert_null(match(a, "example4", "key", "value", "subkey", "subvalue", NULL));
    assert_limit(match(a, "example4", "key", "value", NULL), 300, RLS_UNIT_SECOND);
    rls_config_free(a);
    struct rls_config *b = load("domain: example4\n"
                                "descriptors:\n"
                                "  - key: key\n"
                                "    value: value\n"
                                "    descriptors:\n"
                                "      - key: subkey\n"
                                "        rate_limit:\n"
                                "          requests_per_unit: 300\n"
                                "          unit: second\n");
    assert_limit(match(b, "example4", "key", "value", "subkey", "subvalue", NULL), 300,
                 RLS_UNIT_SECOND);
    rls_config_free(b);
}

/* Example 5: unlimited descriptors. */
static void test_example5_unlimited(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: internal\n"
                                  "descriptors:\n"
                                  "  - key: ldap\n"
                                  "    rate_limit:\n"
                                  "      unlimited: true\n"
                                  "\n"
                                  "  - key: azure\n"
                                  "    rate_limit:\n"
                                  "      unit: minute\n"
                                  "      requests_per_unit: 100\n");
    const struct rls_limit *l = match(cfg, "internal", "ldap", "x", NULL);
    assert_non_null(l);
    assert_true(l->unlimited);
    assert_limit(match(cfg, "internal", "azure", "y", NULL), 100, RLS_UNIT_MINUTE);
    rls_config_free(cfg);
}

static const char example6[] = "domain: example6\n"
                               "descriptors:\n"
                               "  - key: service\n"
                               "    descriptors:\n"
                               "      - key: user\n"
                               "        value: user-a\n"
                               "        rate_limit:\n"
                               "          requests_per_unit: 10\n"
                               "          unit: second\n"
                               "        shadow_mode: true\n"
                               "      - key: user\n"
                               "        value: user-b\n"
                               "        rate_limit:\n"
                               "          requests_per_unit: 20\n"
                               "          unit: second\n";

/* Example 6: shadow_mode on one limit only. */
static void test_example6_shadow(void **state)
{
    (void)state;
    struct rls_config *cfg = load(example6);
    const struct rls_limit *a =
        match(cfg, "example6", "service", "auth-service", "user", "user-a", NULL);
    assert_limit(a, 10, RLS_UNIT_SECOND);
    assert_true(a->shadow_mode);
    const struct rls_limit *b =
        match(cfg, "example6", "service", "auth-service", "user", "user-b", NULL);
    assert_limit(b, 20, RLS_UNIT_SECOND);
    assert_false(b->shadow_mode);
    rls_config_free(cfg);
}

static const char example7[] = "domain: example7\n"
                               "descriptors:\n"
                               "  - key: key_1\n"
                               "    value: value_1\n"
                               "    descriptors:\n"
                               "      - key: user\n"
                               "        value: bkthomps\n"
                               "        rate_limit:\n"
                               "          name: specific_limit\n"
                               "          requests_per_unit: 5\n"
                               "          unit: second\n"
                               "  - key: key_2\n"
                               "    value: value_2\n"
                               "    descriptors:\n"
                               "      - key: user\n"
                               "        value: bkthomps\n"
                               "        rate_limit:\n"
                               "          replaces:\n"
                               "            - name: specific_limit\n"
                               "          requests_per_unit: 10\n"
                               "          unit: second\n";

/* Example 8: detailed_metric is read. */
static void test_example8_detailed_metric(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: example8\n"
                                  "descriptors:\n"
                                  "  - key: key1\n"
                                  "    detailed_metric: true\n"
                                  "    rate_limit:\n"
                                  "      unit: minute\n"
                                  "      requests_per_unit: 10\n"
                                  "  - key: key1\n"
                                  "    value: value1\n"
                                  "    rate_limit:\n"
                                  "      unit: minute\n"
                                  "      requests_per_unit: 20\n");
    const struct rls_limit *a = match(cfg, "example8", "key1", "unspecified_value", NULL);
    assert_limit(a, 10, RLS_UNIT_MINUTE);
    assert_true(a->detailed_metric);
    assert_limit(match(cfg, "example8", "key1", "value1", NULL), 20, RLS_UNIT_MINUTE);
    rls_config_free(cfg);
}

/* Trailing and inner '*' in a value match as envoyproxy/ratelimit's
 * wildcards; an exact value still wins. */
static void test_wildcard(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: w\n"
                                  "descriptors:\n"
                                  "  - key: path\n"
                                  "    value: /api/*\n"
                                  "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
                                  "  - key: path\n"
                                  "    value: /api/exact\n"
                                  "    rate_limit: {unit: hour, requests_per_unit: 2}\n"
                                  "  - key: file\n"
                                  "    value: a*c*e\n"
                                  "    rate_limit: {unit: hour, requests_per_unit: 3}\n");
    assert_limit(match(cfg, "w", "path", "/api/users", NULL), 1, RLS_UNIT_HOUR);
    assert_limit(match(cfg, "w", "path", "/api/exact", NULL), 2, RLS_UNIT_HOUR);
    assert_null(match(cfg, "w", "path", "/web", NULL));
    assert_limit(match(cfg, "w", "file", "abcde", NULL), 3, RLS_UNIT_HOUR);
    assert_null(match(cfg, "w", "file", "abcd", NULL));
    rls_config_free(cfg);
}

/* ---- the service applies replaces and shadow_mode ---- */

struct fake {
    int calls;
    int64_t used[8];
    char keys[8][64];
};

/* A counter per key, "requests_per_unit per window" with no time. */
static int fake_decide(void *ud, const struct rls_decide_req *q, struct rls_decide_res *res)
{
    struct fake *f = ud;
    int slot = -1;
    for (int i = 0; i < 8 && slot < 0; i++)
        if (f->keys[i][0] == '\0' ||
            (strlen(f->keys[i]) == q->klen && memcmp(f->keys[i], q->key, q->klen) == 0))
            slot = i;
    assert_true(slot >= 0 && q->klen < 64);
    memcpy(f->keys[slot], q->key, q->klen);
    f->keys[slot][q->klen] = '\0';
    f->calls++;
    res->limited = f->used[slot] + q->hits > q->requests_per_unit;
    if (!res->limited)
        f->used[slot] += q->hits;
    res->remaining = q->requests_per_unit - f->used[slot];
    res->reset_after_ms = 1000;
    return 0;
}

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;

/* Builds a request of descriptors given as key/value pairs, one descriptor
 * per string "k=v,k=v", and answers it. */
static resp_t *call(struct rls_service *svc, const char *domain, const char *const *descs, size_t n)
{
    Envoy__Service__Ratelimit__V3__RateLimitRequest req =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d[4], *dp[4];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e[4][4], *ep[4][4];
    char buf[4][128];
    req.domain = (char *)domain;
    req.n_descriptors = n;
    req.descriptors = dp;
    for (size_t i = 0; i < n; i++) {
        envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&d[i]);
        dp[i] = &d[i];
        snprintf(buf[i], sizeof(buf[i]), "%s", descs[i]);
        size_t m = 0;
        for (char *tok = strtok(buf[i], ","); tok != NULL && m < 4; tok = strtok(NULL, ",")) {
            envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(&e[i][m]);
            char *eq = strchr(tok, '=');
            *eq = '\0';
            e[i][m].key = tok;
            e[i][m].value = eq + 1;
            ep[i][m] = &e[i][m];
            m++;
        }
        d[i].n_entries = m;
        d[i].entries = ep[i];
    }
    uint8_t in[1024];
    size_t len = envoy__service__ratelimit__v3__rate_limit_request__pack(&req, in);
    uint8_t *out;
    size_t outlen;
    char why[128];
    int rc = rls_service_call(svc, in, len, &out, &outlen, why, sizeof(why));
    if (rc != 0)
        fail_msg("call failed: %s", why);
    resp_t *r =
        envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, outlen - 5, out + 5);
    free(out);
    assert_non_null(r);
    return r;
}

#define OK   ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
#define OVER ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT

/* Example 7's three cases, and that the replaced limit keeps its own count. */
static void test_example7_replaces(void **state)
{
    (void)state;
    struct fake f;
    memset(&f, 0, sizeof(f));
    struct rls_service *svc;
    assert_int_equal(rls_service_create(NULL, fake_decide, &f, &svc), 0);
    rls_service_set_config(svc, load(example7));
    const char *both[] = {"key_1=value_1,user=bkthomps", "key_2=value_2,user=bkthomps"};
    resp_t *r = call(svc, "example7", both, 2);
    assert_int_equal(r->overall_code, OK);
    assert_null(r->statuses[0]->current_limit); /* replaced */
    assert_int_equal(r->statuses[1]->current_limit->requests_per_unit, 10);
    assert_int_equal(r->statuses[1]->limit_remaining, 9);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    assert_int_equal(f.calls, 1);
    r = call(svc, "example7", both, 1);
    assert_int_equal(r->statuses[0]->current_limit->requests_per_unit, 5);
    assert_int_equal(r->statuses[0]->limit_remaining, 4); /* untouched by the first call */
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    rls_service_destroy(svc);
}

/* shadow_mode: over the limit, still OK; the other limit still refuses. */
static void test_example6_service(void **state)
{
    (void)state;
    struct fake f;
    memset(&f, 0, sizeof(f));
    struct rls_service *svc;
    assert_int_equal(rls_service_create(NULL, fake_decide, &f, &svc), 0);
    rls_service_set_config(svc, load(example6));
    const char *a[] = {"service=auth-service,user=user-a"};
    const char *b[] = {"service=auth-service,user=user-b"};
    for (int i = 0; i < 25; i++) {
        resp_t *ra = call(svc, "example6", a, 1);
        resp_t *rb = call(svc, "example6", b, 1);
        assert_int_equal(ra->overall_code, OK);
        assert_int_equal(ra->statuses[0]->code, OK);
        assert_int_equal(rb->overall_code, i < 20 ? OK : OVER);
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(ra, NULL);
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(rb, NULL);
    }
    struct rls_service_stats st;
    rls_service_get_stats(svc, &st);
    assert_int_equal(st.shadowed, 15);
    assert_int_equal(st.over_limit, 5);
    rls_service_destroy(svc);
}

/* Example 3's blacklist (0 per second) refuses without asking the limiter. */
static void test_zero_limit(void **state)
{
    (void)state;
    struct fake f;
    memset(&f, 0, sizeof(f));
    struct rls_service *svc;
    assert_int_equal(rls_service_create(NULL, fake_decide, &f, &svc), 0);
    rls_service_set_config(svc, load("domain: e\n"
                                     "descriptors:\n"
                                     "  - key: remote_address\n"
                                     "    value: 50.0.0.5\n"
                                     "    rate_limit: {unit: second, requests_per_unit: 0}\n"));
    const char *d[] = {"remote_address=50.0.0.5"};
    resp_t *r = call(svc, "e", d, 1);
    assert_int_equal(r->overall_code, OVER);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    assert_int_equal(f.calls, 0);
    rls_service_destroy(svc);
}

/* ---- every error names its line ---- */

static void expect_error(const char *text, const char *want)
{
    struct rls_config *cfg;
    char err[512];
    assert_int_equal(rls_config_create(&cfg), 0);
    int rc = rls_config_add_buffer(cfg, "t.yaml", text, strlen(text), err, sizeof(err));
    rls_config_free(cfg);
    assert_int_equal(rc, -SLUICE_ECONFIG);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("for:\n%s\nwant '%s...'\ngot  '%s'", text, want, err);
}

static void test_errors_name_their_line(void **state)
{
    (void)state;
    expect_error("domain: d\ndescriptors: [\n", "t.yaml:3: ");
    expect_error("domain: d\n  bad: indent\n", "t.yaml:2: ");
    expect_error("descriptors: []\n", "t.yaml:1: config file cannot have empty domain");
    expect_error("domain: \"\"\n", "t.yaml:1: config file cannot have empty domain");
    expect_error("", "t.yaml: config file cannot have empty domain");
    expect_error("- a\n", "t.yaml:1: expected a mapping with a domain");
    expect_error("domain: d\nfoo: 1\n", "t.yaml:2: config error, unknown key 'foo'");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n",
                 "t.yaml:4: config error, unknown key 'rate_limt'");
    expect_error("domain: d\ndescriptors:\n  - key: k\n  - 5\n",
                 "t.yaml:4: config error, yaml file contains list of type other than map");
    expect_error("domain: d\ndescriptors: 5\n", "t.yaml:2: descriptors: expected a list");
    expect_error("domain: d\ndescriptors:\n  - value: v\n", "t.yaml:3: descriptor has empty key");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n",
                 "t.yaml:5: invalid rate limit unit 'fortnight'");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"
                 "      requests_per_unit: 5\n",
                 "t.yaml:5: invalid rate limit unit ''");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"
                 "      unlimited: true\n      unit: second\n",
                 "t.yaml:6: should not specify rate limit unit when unlimited");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"
                 "      unit: second\n      requests_per_unit: many\n",
                 "t.yaml:6: requests_per_unit: expected a whole number");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"
                 "      unit: second\n      requests_per_unit: 4294967296\n",
                 "t.yaml:6: requests_per_unit: expected a whole number");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n"
                 "    rate_limit: {unit: second}\n",
                 "t.yaml:4: shadow_mode: expected true or false");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit: 5\n",
                 "t.yaml:4: rate_limit: expected a mapping");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
                 "      replaces:\n        - name: \"\"\n",
                 "t.yaml:7: should not have an empty replaces entry");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
                 "      name: me\n      replaces:\n        - name: me\n",
                 "t.yaml:8: replaces should not contain name of same descriptor");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
                 "      replaces: me\n",
                 "t.yaml:6: replaces: expected a list");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
                 "t.yaml:5: duplicate descriptor composite key 'd.k_v'");
    expect_error("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: k\n"
                 "      - key: k\n",
                 "t.yaml:6: duplicate descriptor composite key 'd.a.k'");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    value: {key: 1}\n",
                 "t.yaml:4: value: expected a string");
    /* nested deeper than the bound */
    char deep[4096];
    size_t at = (size_t)snprintf(deep, sizeof(deep), "domain: d\ndescriptors:\n");
    for (int i = 0; i < RLS_CONFIG_MAX_DEPTH + 2; i++)
        at += (size_t)snprintf(deep + at, sizeof(deep) - at, "%*s- key: k\n%*s  descriptors:\n",
                               2 * i, "", 2 * i, "");
    expect_error(deep, "t.yaml:");
}

static void test_duplicate_domain_across_files(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: d\n");
    char err[256];
    assert_int_equal(rls_config_add_buffer(cfg, "b.yaml", "\n\ndomain: d\n", 11, err, sizeof(err)),
                     -SLUICE_ECONFIG);
    assert_string_equal(err, "b.yaml:3: duplicate domain 'd' in config file");
    rls_config_free(cfg);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A directory: every .yaml and .yml file, nothing else; an error names the
 * file's path and line. */
static void test_load_dir(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-rls-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_file(dir, "a.yaml",
               "domain: a\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: week, requests_per_unit: 7}\n");
    write_file(dir, "b.yml", "domain: b\n");
    write_file(dir, "notes.txt", "domain: [\n");
    write_file(dir, ".hidden.yaml", "domain: [\n");
    struct rls_config *cfg = NULL;
    char err[512];
    assert_int_equal(rls_config_load_dir(dir, &cfg, err, sizeof(err)), 0);
    assert_int_equal(rls_config_domains(cfg), 2);
    assert_limit(match(cfg, "a", "k", "x", NULL), 7, RLS_UNIT_WEEK);
    rls_config_free(cfg);
    write_file(dir, "c.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n");
    cfg = NULL;
    assert_int_equal(rls_config_load_dir(dir, &cfg, err, sizeof(err)), -SLUICE_ECONFIG);
    assert_null(cfg);
    char want[600];
    snprintf(want, sizeof(want), "%s/c.yaml:4: invalid rate limit unit 'eon'", dir);
    assert_string_equal(err, want);
    assert_int_equal(rls_config_load_dir("/nonexistent-sluice-dir", &cfg, err, sizeof(err)),
                     -SLUICE_EIO);
    assert_non_null(strstr(err, "/nonexistent-sluice-dir"));
    const char *names[] = {"a.yaml", "b.yml", "notes.txt", ".hidden.yaml", "c.yaml"};
    for (size_t i = 0; i < 5; i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void test_units(void **state)
{
    (void)state;
    enum rls_unit u;
    assert_int_equal(rls_unit_parse("MINUTE", &u), 0);
    assert_int_equal(u, RLS_UNIT_MINUTE);
    assert_int_equal(rls_unit_seconds(RLS_UNIT_WEEK), 604800);
    assert_int_equal(rls_unit_seconds(RLS_UNIT_MONTH), 2592000);
    assert_int_equal(rls_unit_seconds(RLS_UNIT_YEAR), 31536000);
    assert_int_equal(rls_unit_seconds(0), 0);
    assert_int_equal(rls_unit_parse("fortnight", &u), -SLUICE_EINVAL);
}

/* ---- metadata and dynamic_metadata ---- */

/* The value of field k in struct m (a config value), or NULL. */
static const struct rls_meta *meta_get(const struct rls_meta *m, const char *k)
{
    assert_non_null(m);
    assert_int_equal(m->kind, RLS_META_STRUCT);
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], k) == 0)
            return &m->items[i];
    return NULL;
}

static void assert_meta_number(const struct rls_meta *m, double want)
{
    assert_non_null(m);
    assert_int_equal(m->kind, RLS_META_NUMBER);
    assert_true(m->number == want);
}

static void assert_meta_string(const struct rls_meta *m, const char *want)
{
    assert_non_null(m);
    assert_int_equal(m->kind, RLS_META_STRING);
    assert_string_equal(m->string, want);
}

/* Scalars are typed as YAML 1.1 types them (Go's yaml.v2, which
 * envoyproxy/ratelimit reads its files with): null, bool, number, else a
 * string; quoted scalars are strings.  Only a limit keeps its metadata. */
static void test_metadata_values(void **state)
{
    (void)state;
    struct rls_config *cfg = load("domain: m\n"
                                  "descriptors:\n"
                                  "  - key: k\n"
                                  "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                                  "    metadata:\n"
                                  "      s: plain words\n"
                                  "      q: \"42\"\n"
                                  "      i: 42\n"
                                  "      big: 1_000_000\n"
                                  "      hex: 0x1F\n"
                                  "      oct: 0o17\n"
                                  "      f: 1.5e3\n"
                                  "      neg: -7\n"
                                  "      b: yes\n"
                                  "      bf: off\n"
                                  "      qb: 'true'\n"
                                  "      n: ~\n"
                                  "      empty: \"\"\n"
                                  "      ver: 1.2.3\n"
                                  "      nested: {a: [1, two, {x: null}]}\n"
                                  "      dup: 1\n"
                                  "      dup: 2\n"
                                  "  - key: nolimit\n"
                                  "    metadata: {a: 1}\n"
                                  "    descriptors:\n"
                                  "      - key: leaf\n"
                                  "        rate_limit: {unit: second, requests_per_unit: 1}\n"
                                  "  - key: nometa\n"
                                  "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                                  "    metadata: {}\n");
    const struct rls_limit *l = match(cfg, "m", "k", "v", NULL);
    assert_non_null(l);
    const struct rls_meta *m = l->metadata;
    assert_non_null(m);
    assert_int_equal(m->n, 16); /* dup once */
    assert_meta_string(meta_get(m, "s"), "plain words");
    assert_meta_string(meta_get(m, "q"), "42");
    assert_meta_number(meta_get(m, "i"), 42);
    assert_meta_number(meta_get(m, "big"), 1000000);
    assert_meta_number(meta_get(m, "hex"), 31);
    assert_meta_number(meta_get(m, "oct"), 15);
    assert_meta_number(meta_get(m, "f"), 1500);
    assert_meta_number(meta_get(m, "neg"), -7);
    assert_int_equal(meta_get(m, "b")->kind, RLS_META_BOOL);
    assert_int_equal(meta_get(m, "b")->boolean, 1);
    assert_int_equal(meta_get(m, "bf")->kind, RLS_META_BOOL);
    assert_int_equal(meta_get(m, "bf")->boolean, 0);
    assert_meta_string(meta_get(m, "qb"), "true");
    assert_int_equal(meta_get(m, "n")->kind, RLS_META_NULL);
    assert_meta_string(meta_get(m, "empty"), "");
    assert_meta_string(meta_get(m, "ver"), "1.2.3");
    const struct rls_meta *a = meta_get(meta_get(m, "nested"), "a");
    assert_int_equal(a->kind, RLS_META_LIST);
    assert_int_equal(a->n, 3);
    assert_meta_number(&a->items[0], 1);
    assert_meta_string(&a->items[1], "two");
    assert_int_equal(meta_get(&a->items[2], "x")->kind, RLS_META_NULL);
    assert_meta_number(meta_get(m, "dup"), 2); /* the later value, as a YAML map */
    l = match(cfg, "m", "nolimit", "x", "leaf", "y", NULL);
    assert_non_null(l);
    assert_null(l->metadata); /* the metadata of a node without a limit stays there */
    assert_null(match(cfg, "m", "nometa", "x", NULL)->metadata);
    rls_config_free(cfg);
}

/* As expect_error, the message holding want somewhere. */
static void expect_error_has(const char *text, const char *want)
{
    struct rls_config *cfg;
    char err[512];
    assert_int_equal(rls_config_create(&cfg), 0);
    int rc = rls_config_add_buffer(cfg, "t.yaml", text, strlen(text), err, sizeof(err));
    rls_config_free(cfg);
    assert_int_equal(rc, -SLUICE_ECONFIG);
    if (strstr(err, want) == NULL)
        fail_msg("for:\n%s\nwant '...%s...'\ngot  '%s'", text, want, err);
}

static void test_metadata_errors(void **state)
{
    (void)state;
    expect_error("domain: d\ndescriptors:\n  - key: k\n    metadata: 5\n",
                 "t.yaml:4: metadata: expected a mapping");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    metadata: [1]\n",
                 "t.yaml:4: metadata: expected a mapping");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    metadata:\n      ? [a]\n      : 1\n",
                 "t.yaml:5: metadata: a key must be a scalar");
    /* aliases are followed: a value that would explode is refused */
    expect_error_has("domain: d\ndescriptors:\n  - key: k\n    metadata:\n"
                     "      a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                     "      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                     "      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                     "      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                     "      e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
                     "metadata: more than 16384 values");
    /* a list holding itself ends at the depth bound */
    expect_error_has("domain: d\ndescriptors:\n  - key: k\n    metadata:\n      a: &a [1, *a]\n",
                     "metadata nested deeper than 32 levels");
}

typedef Google__Protobuf__Struct pstruct_t;
typedef Google__Protobuf__Value pvalue_t;

static const pvalue_t *pfield(const pstruct_t *s, const char *k)
{
    assert_non_null(s);
    for (size_t i = 0; i < s->n_fields; i++)
        if (strcmp(s->fields[i]->key, k) == 0)
            return s->fields[i]->value;
    return NULL;
}

static const char *pstring(const pvalue_t *v)
{
    assert_non_null(v);
    assert_int_equal(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
    return v->string_value;
}

static const pstruct_t *pstruct(const pvalue_t *v)
{
    assert_non_null(v);
    assert_int_equal(v->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
    return v->struct_value;
}

static const char dm_config[] = "domain: dm\n"
                                "descriptors:\n"
                                "  - key: a\n"
                                "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
                                "    metadata: {name: from_a, svc: {region: eu, tier: 1}}\n"
                                "  - key: b\n"
                                "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                                "    metadata: {name: from_b, other: 2.5,\n"
                                "               svc: {region: us, zone: z1}, l: [true, ~]}\n"
                                "  - key: c\n"
                                "    detailed_metric: true\n"
                                "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                                "    metadata: {svc: flat, c_only: c}\n"
                                "  - key: u\n"
                                "    rate_limit: {unlimited: true}\n"
                                "    metadata: {name: from_u, u_only: 1}\n";

/* RESPONSE_DYNAMIC_METADATA: the answer echoes the request and merges the
 * metadata of the limits that passed, the first value of a name winning,
 * structs merged field by field; an over-limit or unlimited descriptor
 * gives none; without the setting the field is absent. */
static void test_dynamic_metadata(void **state)
{
    (void)state;
    struct fake f = {0};
    struct rls_service *svc;
    struct rls_service_config sc = {.dynamic_metadata = 1};
    assert_int_equal(rls_service_create(&sc, fake_decide, &f, &svc), 0);
    rls_service_set_config(svc, load(dm_config));

    const char *d1[] = {"a=1", "b=2", "c=3", "u=4"};
    resp_t *r = call(svc, "dm", d1, 4);
    assert_int_equal(r->overall_code, OK);
    const pstruct_t *dm = r->dynamic_metadata;
    assert_non_null(dm);
    assert_string_equal(pstring(pfield(dm, "domain")), "dm");
    assert_null(pfield(dm, "hitsAddend")); /* the request's 0 is left out */
    const pvalue_t *ds = pfield(dm, "descriptors");
    assert_int_equal(ds->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE);
    assert_int_equal(ds->list_value->n_values, 4);
    const pstruct_t *d0 = pstruct(ds->list_value->values[0]);
    const pvalue_t *ents = pfield(d0, "entries");
    assert_int_equal(ents->list_value->n_values, 1);
    assert_string_equal(pstring(ents->list_value->values[0]), "a=1");
    assert_null(pfield(d0, "limit"));
    assert_null(pfield(d0, "hitsAddend"));
    const pstruct_t *md = pstruct(pfield(dm, "metadata"));
    assert_string_equal(pstring(pfield(md, "name")), "from_a");
    assert_true(pfield(md, "other")->number_value == 2.5);
    assert_string_equal(pstring(pfield(md, "c_only")), "c"); /* detailed_metric keeps it */
    const pstruct_t *svcm = pstruct(pfield(md, "svc"));
    assert_string_equal(pstring(pfield(svcm, "region")), "eu");
    assert_true(pfield(svcm, "tier")->number_value == 1);
    assert_string_equal(pstring(pfield(svcm, "zone")), "z1");
    assert_int_equal(svcm->n_fields, 3);
    const pvalue_t *l = pfield(md, "l");
    assert_int_equal(l->list_value->n_values, 2);
    assert_int_equal(l->list_value->values[0]->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
    assert_int_equal(l->list_value->values[1]->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
    assert_null(pfield(md, "u_only")); /* unlimited: not a passed limit */
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);

    /* the merge left a's own metadata as it was (b's zone is not in it) */
    const char *da[] = {"a=1"};
    for (int i = 0; i < 2; i++) {
        r = call(svc, "dm", da, 1);
        assert_int_equal(r->overall_code, OK);
        svcm = pstruct(pfield(pstruct(pfield(r->dynamic_metadata, "metadata")), "svc"));
        assert_int_equal(svcm->n_fields, 2);
        assert_null(pfield(svcm, "zone"));
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    }

    /* a is now over its 3 per minute: b's name wins, a gives nothing */
    const char *d2[] = {"a=1", "b=2"};
    r = call(svc, "dm", d2, 2);
    assert_int_equal(r->statuses[0]->code, OVER);
    md = pstruct(pfield(r->dynamic_metadata, "metadata"));
    assert_string_equal(pstring(pfield(md, "name")), "from_b");
    assert_string_equal(pstring(pfield(pstruct(pfield(md, "svc")), "region")), "us");
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);

    /* nothing passed with metadata: no "metadata" field */
    const char *d3[] = {"a=1", "zz=1"};
    r = call(svc, "dm", d3, 2);
    assert_null(pfield(r->dynamic_metadata, "metadata"));
    assert_non_null(pfield(r->dynamic_metadata, "domain"));
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    rls_service_destroy(svc);

    /* off (the default): no dynamic_metadata at all */
    struct fake g = {0};
    assert_int_equal(rls_service_create(NULL, fake_decide, &g, &svc), 0);
    rls_service_set_config(svc, load(dm_config));
    r = call(svc, "dm", d1, 4);
    assert_null(r->dynamic_metadata);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    rls_service_destroy(svc);
}

/* A metadata struct large enough to need multi-byte lengths at every
 * level decodes back whole (the encoder moves content to fit them). */
static void test_dynamic_metadata_long(void **state)
{
    (void)state;
    static char text[65536];
    size_t at = (size_t)snprintf(text, sizeof(text),
                                 "domain: big\ndescriptors:\n  - key: k\n"
                                 "    rate_limit: {unit: minute, requests_per_unit: 9}\n"
                                 "    metadata:\n      outer:\n        inner:\n");
    for (int i = 0; i < 400; i++)
        at += (size_t)snprintf(text + at, sizeof(text) - at, "          f%03d: value-%03d\n", i, i);
    struct fake f = {0};
    struct rls_service *svc;
    struct rls_service_config sc = {.dynamic_metadata = 1};
    assert_int_equal(rls_service_create(&sc, fake_decide, &f, &svc), 0);
    rls_service_set_config(svc, load(text));
    const char *d[] = {"k=v"};
    resp_t *r = call(svc, "big", d, 1);
    const pstruct_t *in = pstruct(pfield(
        pstruct(pfield(pstruct(pfield(r->dynamic_metadata, "metadata")), "outer")), "inner"));
    assert_int_equal(in->n_fields, 400);
    assert_string_equal(pstring(pfield(in, "f399")), "value-399");
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    rls_service_destroy(svc);
}

/* The health service follows the daemon's readiness. */
static int ready_flag;
static int ready_fn(void *ud)
{
    (void)ud;
    return ready_flag;
}

static void test_health_follows_readiness(void **state)
{
    (void)state;
    struct fake f = {0};
    struct rls_service *svc;
    struct rls_service_config sc = {.ready = ready_fn, .healthy_needs_config = 1};
    assert_int_equal(rls_service_create(&sc, fake_decide, &f, &svc), 0);
    uint8_t *out;
    size_t outlen;
    char why[128];
    const uint8_t req[] = {0x0a, 0x09, 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't'};
    struct {
        int ready, config;
        uint8_t want;
    } cases[] = {{1, 0, 2}, {1, 1, 1}, {0, 1, 2}, {1, 1, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ready_flag = cases[i].ready;
        if (cases[i].config && i == 1)
            rls_service_set_config(svc, load(dm_config));
        assert_int_equal(rls_service_health(svc, req, sizeof(req), &out, &outlen, why, sizeof(why)),
                         0);
        assert_int_equal(outlen, 5 + 2);
        assert_int_equal(out[5], 0x08);
        assert_int_equal(out[6], cases[i].want); /* 1 SERVING, 2 NOT_SERVING */
        free(out);
    }
    struct rls_service_stats st;
    rls_service_get_stats(svc, &st);
    assert_int_equal(st.health_checks, 2);
    assert_int_equal(st.health_not_serving, 2);
    rls_service_destroy(svc);
}

/* Watch's start and messages: known names follow readiness, an unknown
 * one is SERVICE_UNKNOWN (not an error), a malformed request is refused. */
static void test_health_watch(void **state)
{
    (void)state;
    struct fake f = {0};
    struct rls_service *svc;
    struct rls_service_config sc = {.ready = ready_fn};
    assert_int_equal(rls_service_create(&sc, fake_decide, &f, &svc), 0);
    char why[128];
    int known = -1;
    const uint8_t rl[] = {0x0a, 0x09, 'r', 'a', 't', 'e', 'l', 'i', 'm', 'i', 't'};
    const uint8_t foo[] = {0x0a, 0x03, 'f', 'o', 'o'};
    const uint8_t bad[] = {0x0a, 0x09, 'r'};
    assert_int_equal(rls_service_health_watch(svc, rl, sizeof(rl), &known, why, sizeof(why)), 0);
    assert_int_equal(known, 1);
    assert_int_equal(rls_service_health_watch(svc, NULL, 0, &known, why, sizeof(why)), 0);
    assert_int_equal(known, 1); /* "": the server as a whole */
    assert_int_equal(rls_service_health_watch(svc, foo, sizeof(foo), &known, why, sizeof(why)), 0);
    assert_int_equal(known, 0);
    assert_int_equal(rls_service_health_watch(svc, bad, sizeof(bad), &known, why, sizeof(why)),
                     -SLUICE_EPROTO);
    ready_flag = 1;
    assert_int_equal(rls_service_health_status(svc), RLS_HEALTH_SERVING);
    ready_flag = 0;
    assert_int_equal(rls_service_health_status(svc), RLS_HEALTH_NOT_SERVING);
    uint8_t msg[RLS_HEALTH_MSG_MAX];
    const int statuses[] = {RLS_HEALTH_SERVING, RLS_HEALTH_NOT_SERVING, RLS_HEALTH_SERVICE_UNKNOWN};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(rls_service_health_pack(statuses[i], msg), 7);
        const uint8_t want[] = {0, 0, 0, 0, 2, 0x08, (uint8_t)statuses[i]};
        assert_memory_equal(msg, want, 7);
    }
    struct rls_service_stats st;
    rls_service_get_stats(svc, &st);
    assert_int_equal(st.health_watches, 3);
    assert_int_equal(st.health_checks + st.health_not_serving, 0); /* status reads count none */
    rls_service_destroy(svc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example1),
        cmocka_unit_test(test_example2_nested),
        cmocka_unit_test(test_example3_order),
        cmocka_unit_test(test_example4_depth),
        cmocka_unit_test(test_example5_unlimited),
        cmocka_unit_test(test_example6_shadow),
        cmocka_unit_test(test_example6_service),
        cmocka_unit_test(test_example7_replaces),
        cmocka_unit_test(test_example8_detailed_metric),
        cmocka_unit_test(test_wildcard),
        cmocka_unit_test(test_zero_limit),
        cmocka_unit_test(test_errors_name_their_line),
        cmocka_unit_test(test_duplicate_domain_across_files),
        cmocka_unit_test(test_load_dir),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_metadata_values),
        cmocka_unit_test(test_metadata_errors),
        cmocka_unit_test(test_dynamic_metadata),
        cmocka_unit_test(test_dynamic_metadata_long),
        cmocka_unit_test(test_health_follows_readiness),
        cmocka_unit_test(test_health_watch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
