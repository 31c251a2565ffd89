/*
 * Fuzz target: the decoding path of Envoy's rate limit service, as the
 * server runs it on a request's DATA: gRPC framing (rls_grpc_frame), then
 * the RateLimitRequest protobuf, descriptor matching against a config with
 * nested, wildcard, unlimited, shadow and replaces rules, and key mapping,
 * deciding through a fake decider, and the dynamic_metadata built from the
 * request and the limits' metadata.  Every input must be answered (a framed
 * response that decodes, dynamic_metadata included) or refused with a reason and an error code that
 * maps to a gRPC status; nothing may crash or leak (ASan).  The first byte
 * of the input also feeds grpc-timeout's parser.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "rls/config.h"
#include "rls/grpc.h"
#include "rls/service.h"
#include "sluice/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static const char config_text[] = "domain: d\n"
                                  "descriptors:\n"
                                  "  - key: k\n"
                                  "    rate_limit: {unit: second, requests_per_unit: 3}\n"
                                  "    metadata: {name: k, svc: {a: 1, l: [x, ~, true]}}\n"
                                  "  - key: k\n"
                                  "    value: v\n"
                                  "    rate_limit: {unit: hour, requests_per_unit: 1, name: n}\n"
                                  "    metadata: {name: kv, svc: {a: 2, b: 2.5}}\n"
                                  "    descriptors:\n"
                                  "      - key: s\n"
                                  "        shadow_mode: true\n"
                                  "        rate_limit: {unit: day, requests_per_unit: 0}\n"
                                  "  - key: w\n"
                                  "    value: a*\n"
                                  "    metadata: {svc: flat, w: yes}\n"
                                  "    rate_limit: {unit: week, requests_per_unit: 2,\n"
                                  "                 replaces: [{name: n}]}\n"
                                  "  - key: u\n"
                                  "    rate_limit: {unlimited: true}\n";

/* Accepts what fits in a small per-key counter keyed by the key's hash. */
static int fake_decide(void *ud, const struct rls_decide_req *q, struct rls_decide_res *res)
{
    static int64_t used[64];
    uint32_t h = 2166136261u;
    (void)ud;
    if (q->key == NULL || q->klen == 0 || q->klen > RLS_SERVICE_MAX_KEY ||
        q->requests_per_unit < 1 || q->period_s < 1 || q->hits < 0)
        __builtin_trap(); /* the service must never ask this */
    for (size_t i = 0; i < q->klen; i++)
        h = (h ^ (uint8_t)q->key[i]) * 16777619u;
    int64_t *u = &used[h % 64];
    if (q->klen > 1000)
        return -SLUICE_ETOOBIG;
    res->limited = q->hits > q->requests_per_unit - *u;
    if (!res->limited)
        *u += q->hits;
    if (*u >= q->requests_per_unit)
        *u = 0;
    res->remaining = q->requests_per_unit - *u;
    res->reset_after_ms = q->period_s * 1000;
    return 0;
}

static struct rls_service *svc;

static void setup(void)
{
    struct rls_config *cfg;
    char err[256];
    struct rls_service_config sc = {.headers = 1, .dynamic_metadata = 1};
    if (rls_service_create(&sc, fake_decide, NULL, &svc) != 0 || rls_config_create(&cfg) != 0 ||
        rls_config_add_buffer(cfg, "fuzz.yaml", config_text, sizeof(config_text) - 1, err,
                              sizeof(err)) != 0)
        __builtin_trap();
    rls_service_set_config(svc, cfg);
}

/* Seeds: framed requests, the same as tests/fuzz/corpus/fuzz_rls/seed-*:
 * one entry; two nested entries with hits_addend; a wildcard and a
 * replaced limit with a descriptor hits_addend of 0; a limit override in an
 * unknown domain; an unlimited key with an empty value; a descriptor
 * hits_addend of 0, an override and a request hits_addend (dynamic
 * metadata's every field). */
static const char s0[] =
    "\x00\x00\x00\x00\x0f\x0a\x01\x64\x12\x0a\x0a\x08\x0a\x01\x6b\x12\x03\x61\x62\x63";
static const char s1[] = "\x00\x00\x00\x00\x17\x0a\x01\x64\x12\x10\x0a\x06\x0a\x01\x6b\x12\x01\x76"
                         "\x0a\x06\x0a\x01\x73\x12\x01\x78\x18\x05";
static const char s2[] = "\x00\x00\x00\x00\x1d\x0a\x01\x64\x12\x0a\x0a\x08\x0a\x01\x77\x12\x03\x61"
                         "\x62\x63\x12\x0a\x0a\x06\x0a\x01\x6b\x12\x01\x76\x1a\x00\x18\x02";
static const char s3[] = "\x00\x00\x00\x00\x13\x0a\x01\x78\x12\x0e\x0a\x06\x0a\x01\x6b\x12\x01\x76"
                         "\x12\x04\x08\x02\x10\x03";
static const char s4[] = "\x00\x00\x00\x00\x0a\x0a\x01\x64\x12\x05\x0a\x03\x0a\x01\x75";
static const char s5[] = "\x00\x00\x00\x00\x35\x0a\x01\x64\x12\x0a\x0a\x06\x0a\x01\x6b\x12\x01\x76"
                         "\x1a\x00\x12\x10\x0a\x08\x0a\x01\x77\x12\x03\x61\x62\x63\x12\x04\x08\x07"
                         "\x10\x03\x12\x10\x0a\x06\x0a\x01\x6b\x12\x01\x7a\x0a\x06\x0a\x01\x73\x12"
                         "\x01\x78\x18\x02";
static const char *const seeds[] = {s0, s1, s2, s3, s4, s5, NULL};
static size_t seed_lens[] = {sizeof(s0) - 1,
                             sizeof(s1) - 1,
                             sizeof(s2) - 1,
                             sizeof(s3) - 1,
                             sizeof(s4) - 1,
                             sizeof(s5) - 1,
                             0};

const char *const *fuzz_seed_inputs(size_t **lens)
{
    *lens = seed_lens;
    return seeds;
}

/* One message through the service, checked as the header comment says. */
static void fuzz_call(const uint8_t *msg, size_t msglen)
{
    uint8_t *out = NULL;
    size_t outlen = 0;
    char why[160];
    why[0] = '\0';
    int rc = rls_service_call(svc, msg, msglen, &out, &outlen, why, sizeof(why));
    if (rc == 0) {
        const uint8_t *rmsg;
        size_t rlen, rused;
        if (out == NULL || rls_grpc_frame(out, outlen, SIZE_MAX >> 1, &rmsg, &rlen, &rused) != 0 ||
            rused != outlen)
            __builtin_trap();
        Envoy__Service__Ratelimit__V3__RateLimitResponse *r =
            envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, rlen, rmsg);
        if (r == NULL || r->n_statuses == 0 || r->dynamic_metadata == NULL ||
            r->dynamic_metadata->n_fields < 2)
            __builtin_trap();
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
        free(out);
    } else if (out != NULL || why[0] == '\0' || rls_service_grpc_status(rc) == 0) {
        __builtin_trap(); /* every refusal says why, with an error status */
    }
    /* The same bytes as a health check: SERVING (0x08 0x01) or a refusal
     * that says why. */
    out = NULL;
    why[0] = '\0';
    rc = rls_service_health(svc, msg, msglen, &out, &outlen, why, sizeof(why));
    if (rc == 0) {
        if (out == NULL || outlen != RLS_GRPC_PREFIX + 2 || out[RLS_GRPC_PREFIX] != 0x08 ||
            out[RLS_GRPC_PREFIX + 1] != 0x01)
            __builtin_trap();
        free(out);
    } else if (out != NULL || why[0] == '\0' || rls_service_grpc_status(rc) == 0) {
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (svc == NULL)
        setup();
    int64_t ns;
    if (size > 0)
        (void)rls_grpc_timeout((const char *)data + 1, size - 1 < 10 ? size - 1 : 10, &ns);
    const uint8_t *msg;
    size_t msglen, used;
    int rc = rls_grpc_frame(data, size, 65536, &msg, &msglen, &used);
    if (rc == 0) {
        if (used > size || msglen + RLS_GRPC_PREFIX != used)
            __builtin_trap();
        fuzz_call(msg, msglen);
    } else if (rc != -SLUICE_EAGAIN && rc != -SLUICE_ETOOBIG && rc != -SLUICE_EPROTO) {
        __builtin_trap();
    }
    /* Mutations mostly break the prefix's length: decode the rest anyway so
     * that the protobuf and matching paths see every input. */
    if (size >= RLS_GRPC_PREFIX && (rc != 0 || used != size))
        fuzz_call(data + RLS_GRPC_PREFIX, size - RLS_GRPC_PREFIX);
    return 0;
}
