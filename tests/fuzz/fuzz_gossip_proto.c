/*
 * Fuzz target: libgossip's packet decoder, and a whole node's receive path
 * (decode, membership rules, replies), on arbitrary bytes.  Neither may
 * crash, leak or trip a sanitizer; the node must stay usable.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct proto_packet pk;
static struct gossip_node *node;
static uint64_t sent;
static uint64_t rng = 1;

static int fuzz_send(void *ctx, const struct gossip_addr *to, const uint8_t *buf, size_t len)
{
    (void)ctx;
    (void)to;
    (void)buf;
    sent += len;
    return 0;
}

static void fuzz_random(void *ctx, void *buf, size_t len)
{
    (void)ctx;
    uint8_t *p = buf;
    for (size_t i = 0; i < len; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(rng >> 56);
    }
}

static void cleanup(void)
{
    gossip_node_destroy(node);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int64_t now = 1000000000;
    if (node == NULL) {
        struct gossip_config cfg;
        struct gossip_io io = {.send = fuzz_send, .random = fuzz_random};
        gossip_config_default(&cfg);
        cfg.name = "fuzz-target";
        gossip_addr_parse("10.0.0.1:7946", &cfg.advertise);
        if (gossip_node_create(&cfg, &io, now, &node) != 0)
            abort();
        atexit(cleanup);
    }
    if (proto_decode(data, size, &pk) == 0) {
        for (size_t i = 0; i < pk.nmsgs; i++)
            if (pk.msgs[i].name.len > GOSSIP_NAME_MAX)
                abort();
    }
    struct gossip_addr from;
    gossip_addr_parse("10.0.0.2:7946", &from);
    gossip_node_receive(node, &from, data, size, now);
    now += 10000000; /* 10 ms per input, so timers fire as well */
    gossip_node_tick(node, now);
    return 0;
}

/* Seed inputs for the driver's mutator: a valid packet of every message type. */
const char *const *fuzz_seed_inputs(size_t **lens);
const char *const *fuzz_seed_inputs(size_t **lens)
{
    static uint8_t buf[1400];
    static const char *seeds[2];
    static size_t seed_lens[2];
    struct gossip_addr a;
    size_t len, one;
    gossip_addr_parse("10.0.0.3:7946", &a);
    struct proto_msg m[] = {
        {.type = PROTO_ALIVE, .name = {"peer-b", 6}, .incarnation = 3, .addr = a},
        {.type = PROTO_PING, .seq = 1, .name = {"fuzz-target", 11}},
        {.type = PROTO_PING_REQ, .seq = 2, .name = {"peer-b", 6}, .addr = a, .flags = 1},
        {.type = PROTO_SUSPECT, .name = {"peer-b", 6}, .incarnation = 3, .from = {"x", 1}},
        {.type = PROTO_DEAD, .name = {"fuzz-target", 11}, .incarnation = 0, .from = {"x", 1}},
        {.type = PROTO_APP, .name = {"peer-b", 6}, .app_seq = 9, .data = buf, .data_len = 4},
        {.type = PROTO_PUSHPULL, .seq = 5, .flags = 1, .data = buf, .data_len = 2},
        {.type = PROTO_LEFT, .name = {"peer-c", 6}, .incarnation = 1},
        {.type = PROTO_ACK, .seq = 1},
    };
    proto_packet_begin(buf, sizeof(buf), "peer-a", 6, 5, 1, 9, &len);
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        proto_encode_msg(&m[i], buf + len, sizeof(buf) - len, &one);
        len += one;
    }
    proto_packet_finish(buf, sizeof(m) / sizeof(m[0]));
    seeds[0] = (const char *)buf;
    seed_lens[0] = len;
    seeds[1] = NULL;
    *lens = seed_lens;
    return seeds;
}
