/*
 * Fuzz target: the global-limit codec (wire.h) and what a replica does
 * with a message.  The input goes to a replica as a direct message from a
 * peer (report or lease, whichever it claims to be); every message the
 * replica sends back while receiving and ticking must decode again.
 * Checks that no input reads out of bounds, crashes, leaks or makes the
 * replica write a message it cannot read back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "replica.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static uint8_t seed_buf[2][256];
static const char *seeds[3];
static size_t seed_lens[3];

const char *const *fuzz_seed_inputs(size_t **lens)
{
    struct wire_report r = {.key = "user:42",
                            .klen = 7,
                            .kind = 0,
                            .policy = 1,
                            .burst = 20,
                            .count = 100,
                            .period_ns = 1000000000,
                            .demand_milli = 150000,
                            .admitted = 12,
                            .frozen_share = WIRE_ONE / 2,
                            .period_ms = 100,
                            .flags = 0,
                            .tokens_milli = 3500,
                            .granted_milli = 1000,
                            .leased_by = 0x1234567};
    struct wire_lease l = {.key = "user:42",
                           .klen = 7,
                           .share = WIRE_ONE / 3,
                           .flags = WIRE_L_SETTLED,
                           .grant_milli = 2000,
                           .free = 2,
                           .level_milli = 1500,
                           .demand_milli = 4000};
    struct wire_writer w;
    wire_writer_init(&w, seed_buf[0], sizeof(seed_buf[0]), WIRE_REPORT, 5, 5);
    wire_add_report(&w, &r);
    seed_lens[0] = wire_writer_finish(&w);
    wire_writer_init(&w, seed_buf[1], sizeof(seed_buf[1]), WIRE_LEASE, 77, 78);
    wire_add_lease(&w, &l);
    seed_lens[1] = wire_writer_finish(&w);
    seeds[0] = (const char *)seed_buf[0];
    seeds[1] = (const char *)seed_buf[1];
    seeds[2] = NULL;
    *lens = seed_lens;
    return seeds;
}

static int check_send(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    (void)ud;
    (void)to;
    if (wire_decode(buf, len, NULL) < 0)
        abort(); /* the replica wrote what it cannot read */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct replica *r;
    struct replica_config c = {.node_name = "node-001", .life_id = 77, .young_ns = 0};
    c.send = check_send;
    if (replica_create(&r, &c, 1000) != 0)
        abort();
    struct replica_member m[2] = {{"node-000", 1, 0, 0}, {"node-001", 1, 0, 0}};
    replica_set_view(r, m, 2, 1, 1000);
    struct algo_params p;
    struct algo_result res;
    if (algo_params_init(&p, ALGO_GCRA, 20, 100, 1000000000, 0) == 0)
        replica_throttle(r, "user:42", 7, &p, POLICY_PARTITION_SHARE, 1, 2000, &res);
    int rc = replica_receive(r, "node-000", data, size, 3000);
    if ((rc == 0) != (wire_decode(data, size, NULL) >= 0))
        abort(); /* accepted exactly what decodes */
    replica_tick(r, 200000000LL);
    replica_tick(r, 2000000000LL);
    replica_throttle(r, "user:42", 7, &p, POLICY_PARTITION_SHARE, 1, 2000000001LL, &res);
    replica_destroy(r);
    return 0;
}
