/*
 * Fuzz target: the global concurrency limits' messages (global/slots.h)
 * and what a node does with one.  The input goes to a node as a direct
 * message from a peer, once to the key's owner and once to the other node
 * (so reports and grants are both applied); every message either sends
 * back while receiving and ticking must be accepted again by a fresh node.
 * Checks that no input reads out of bounds, crashes, leaks, allocates by a
 * lying count, or makes a node write a message it cannot read back.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slots.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static uint8_t seed_buf[2][256];
static size_t seed_lens[3];
static const char *seeds[3];
static int nseed;

static void no_load(void *ud, const char *key, size_t klen, int64_t *held, int64_t *waiting)
{
    (void)ud;
    (void)key;
    (void)klen;
    *held = 1;
    *waiting = 2;
}

static int capture(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    (void)ud;
    (void)to;
    if (nseed < 2 && len <= sizeof(seed_buf[0])) {
        memcpy(seed_buf[nseed], buf, len);
        seed_lens[nseed] = len;
        nseed++;
    }
    return 0;
}

static int check_send(void *ud, const char *to, const uint8_t *buf, size_t len);

static struct slots *mk(const char *name, uint64_t life,
                        int (*send)(void *, const char *, const uint8_t *, size_t))
{
    struct slots *s;
    struct slots_config c;
    const char *live[2] = {"node-a", "node-b"};
    memset(&c, 0, sizeof(c));
    c.node_name = name;
    c.life = life;
    c.restarted_known = 1;
    c.send = send;
    c.load = no_load;
    if (slots_create(&c, 0, &s) != 0)
        abort();
    slots_set_view(s, live, NULL, 2, 2, 0);
    return s;
}

static int check_send(void *ud, const char *to, const uint8_t *buf, size_t len)
{
    (void)ud;
    (void)to;
    struct slots *fresh = mk(strcmp(to, "node-a") == 0 ? "node-a" : "node-b", 9, check_send);
    if (slots_receive(fresh, strcmp(to, "node-a") == 0 ? "node-b" : "node-a", buf, len, 10) != 0)
        abort(); /* a node wrote what another cannot read */
    slots_destroy(fresh);
    return 0;
}

const char *const *fuzz_seed_inputs(size_t **lens)
{
    /* a report and the grant that answers it, as two nodes write them */
    struct slots *a = mk("node-a", 5, capture), *b = mk("node-b", 6, capture);
    const char *key = NULL;
    char kb[16];
    for (int i = 0; i < 100 && key == NULL; i++) {
        /* a key node-b owns, so node-a's report goes out */
        snprintf(kb, sizeof(kb), "user:%d", i);
        slots_cap(a, kb, strlen(kb), 5, 1000000000, 0, 1, 1);
        slots_tick(a, 2);
        if (nseed > 0)
            key = kb;
    }
    if (nseed > 0)
        slots_receive(b, "node-a", seed_buf[0], seed_lens[0], 3);
    slots_destroy(a);
    slots_destroy(b);
    for (int i = 0; i < nseed; i++)
        seeds[i] = (const char *)seed_buf[i];
    seeds[nseed] = NULL;
    *lens = seed_lens;
    return seeds;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct slots *a = mk("node-a", 5, check_send), *b = mk("node-b", 6, check_send);
    for (int i = 0; i < 4; i++) {
        char kb[16];
        snprintf(kb, sizeof(kb), "user:%d", i);
        slots_cap(a, kb, strlen(kb), 5, 1000000000, 0, 1, 1);
        slots_cap(b, kb, strlen(kb), 5, 1000000000, 0, 1, 1);
    }
    slots_tick(a, 2);
    slots_tick(b, 2);
    (void)slots_receive(a, "node-b", data, size, 3);
    (void)slots_receive(b, "node-a", data, size, 3);
    slots_tick(a, 200000000);
    slots_tick(b, 200000000);
    slots_tick(a, 20000000000LL);
    slots_destroy(a);
    slots_destroy(b);
    return 0;
}
