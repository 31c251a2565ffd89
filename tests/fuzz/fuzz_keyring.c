/*
 * Fuzz target for the keyring's two decoders of untrusted bytes: the sealed
 * packet opener (network input) and the key file parser (operator input).
 *
 * The first byte picks the decoder: even opens the rest as a packet with a
 * ring holding keys 1 and 2, odd writes the rest to an in-memory file and
 * loads it as a key file.  Besides "no crash, no leak", it checks the
 * contracts a caller relies on and aborts when one breaks:
 *   - a packet that opens has exactly len - GOSSIP_KEYRING_OVERHEAD bytes of
 *     plaintext and names an installed key;
 *   - a key file that fails leaves the ring unchanged and names the reason;
 *     one that loads leaves a key in use that is in the ring.
 * Seed inputs are genuine sealed packets, so mutations reach the AEAD.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gossip/error.h"
#include "gossip/keyring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static struct gossip_keyring *fuzz_ring(void)
{
    uint8_t k1[GOSSIP_KEY_BYTES], k2[GOSSIP_KEY_BYTES];
    for (int i = 0; i < GOSSIP_KEY_BYTES; i++) {
        k1[i] = (uint8_t)i;
        k2[i] = (uint8_t)(0xa5 ^ i);
    }
    struct gossip_keyring *kr = NULL;
    if (gossip_keyring_create(&kr, "fuzz") != 0)
        abort();
    gossip_keyring_install(kr, 1, k1);
    gossip_keyring_install(kr, 2, k2);
    return kr;
}

#define NSEEDS 4
static uint8_t seed_buf[NSEEDS][1 + 300 + GOSSIP_KEYRING_OVERHEAD];
static size_t seed_len[NSEEDS + 1];
static const char *seed_ptr[NSEEDS + 2];

const char *const *fuzz_seed_inputs(size_t **lens)
{
    struct gossip_keyring *kr = fuzz_ring();
    static const size_t plain_len[NSEEDS] = {0, 1, 64, 300};
    uint8_t plain[300];
    memset(plain, 'p', sizeof(plain));
    for (int i = 0; i < NSEEDS; i++) {
        gossip_keyring_use(kr, (uint8_t)(1 + (i & 1)));
        size_t n = 0;
        seed_buf[i][0] = 0; /* selector: packet */
        gossip_keyring_seal(kr, plain, plain_len[i], seed_buf[i] + 1, sizeof(seed_buf[i]) - 1, &n);
        seed_len[i] = n + 1;
        seed_ptr[i] = (const char *)seed_buf[i];
    }
    static const char keyfile[] = "\x01# keys\n1 "
                                  "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
                                  " use\n";
    seed_ptr[NSEEDS] = keyfile;
    seed_len[NSEEDS] = sizeof(keyfile) - 1;
    seed_ptr[NSEEDS + 1] = NULL;
    gossip_keyring_destroy(kr);
    *lens = seed_len;
    return seed_ptr;
}

static void fuzz_packet(const uint8_t *data, size_t size)
{
    static struct gossip_keyring *kr;
    if (kr == NULL)
        kr = fuzz_ring(); /* lives for the process, like a daemon's ring */
    uint8_t plain[4096];
    size_t n = 0;
    int rc = gossip_keyring_open(kr, data, size, plain, sizeof(plain), &n);
    if (rc == 0) {
        if (size < GOSSIP_KEYRING_OVERHEAD || n != size - GOSSIP_KEYRING_OVERHEAD ||
            !gossip_keyring_has(kr, data[1]))
            abort();
    } else if (rc != -GOSSIP_EPROTO && rc != -GOSSIP_EVERSION && rc != -GOSSIP_ENOKEY &&
               rc != -GOSSIP_EAUTH && rc != -GOSSIP_ETOOBIG) {
        abort();
    }
}

static void fuzz_key_file(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-keys", 0);
    if (fd < 0)
        return;
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct gossip_keyring *kr = fuzz_ring();
    int rc = gossip_keyring_load_file(kr, path);
    if (rc == 0) {
        int use = gossip_keyring_in_use(kr);
        if (use < 0 || !gossip_keyring_has(kr, (uint8_t)use) || gossip_keyring_count(kr) == 0)
            abort();
    } else {
        if (gossip_keyring_count(kr) != 2 || gossip_keyring_in_use(kr) != 1 ||
            gossip_keyring_last_error(kr)[0] == '\0')
            abort();
    }
    gossip_keyring_destroy(kr);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if ((data[0] & 1) == 0)
        fuzz_packet(data + 1, size - 1);
    else
        fuzz_key_file(data + 1, size - 1);
    return 0;
}
