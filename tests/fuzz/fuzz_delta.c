/*
 * Fuzz target: the global-limit delta codec and the replica's merge.  The
 * input is decoded as a delta packet; whatever decodes is merged into a
 * replica (as a gossip payload and as an anti-entropy chunk), which then
 * ticks and re-encodes its state; that state must decode again.  Checks
 * that no input reads out of bounds, crashes, leaks or makes the replica
 * produce a packet it cannot read back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delta.h"
#include "replica.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

/* Seeds: a valid delta and a valid state chunk, built at first use. */
static uint8_t seed_buf[2][512];
static const char *seeds[3];
static size_t seed_lens[3];

const char *const *fuzz_seed_inputs(size_t **lens)
{
    struct delta_entry e = {.key = "user:42",
                            .klen = 7,
                            .kind = 0,
                            .policy = 1,
                            .burst = 20,
                            .count = 100,
                            .period_ns = 1000000000};
    struct delta_slot s[2] = {
        {.node = "",
         .node_len = 0,
         .epoch = 7,
         .count = 12,
         .at_ns = 5,
         .vtat_ns = 9,
         .stamp_ns = 5,
         .demand_milli = 1500},
        {.node = "node-002",
         .node_len = 8,
         .epoch = 9,
         .count = 3,
         .at_ns = 4,
         .vtat_ns = 100,
         .stamp_ns = 4,
         .demand_milli = 0},
    };
    for (int t = 0; t < 2; t++) {
        struct delta_writer w;
        delta_writer_init(&w, seed_buf[t], sizeof(seed_buf[t]), (enum delta_type)t, 10);
        delta_writer_add(&w, &e, s, t ? 2 : 1);
        seed_lens[t] = delta_writer_finish(&w);
        seeds[t] = (const char *)seed_buf[t];
    }
    seeds[2] = NULL;
    *lens = seed_lens;
    return seeds;
}

static void nop(void *ud, const struct delta_entry *e, const struct delta_slot *s)
{
    (void)e;
    (void)s;
    (*(size_t *)ud)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = 0;
    if (delta_decode(data, size, NULL, NULL, nop, &n) != 0)
        return 0;
    struct replica *r;
    struct replica_config c = {.node_name = "node-001", .boot_epoch = 3};
    if (replica_create(&r, &c) != 0)
        abort();
    replica_tick(r, 1000);
    if (replica_receive(r, "node-000", data, size) != 0)
        abort();                                /* it decoded above */
    replica_receive(r, "node-001", data, size); /* as if about itself */
    replica_tick(r, 2000000000LL);
    uint8_t buf[1400];
    uint64_t cursor = 0;
    size_t len;
    int chunks = 0;
    while ((len = replica_state_fill(r, &cursor, buf, sizeof(buf))) > 0 && chunks++ < 64) {
        size_t m = 0;
        if (delta_decode(buf, len, NULL, NULL, nop, &m) != 0)
            abort();
    }
    replica_destroy(r);
    return 0;
}
