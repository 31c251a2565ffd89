/*
 * keyring.c: sealing and opening gossip datagrams with a ring of keys.
 *
 * Design note.  Every datagram carries the id of the key that sealed it, so a
 * receiver looks the key up directly instead of trying each one (constant
 * cost per packet, and a packet for an unknown id is rejected before any
 * crypto).  The cluster label is never sent: it enters the tag as associated
 * data, so a packet from another cluster fails authentication exactly like a
 * forged one.  Keys live in one sodium_malloc'd block (guard pages, mlock'd,
 * never swapped) and are wiped with sodium_memzero when removed or replaced.
 *
 *   +---------+---------+------------------------+-------------------+--------+
 *   | version | key_id  |  nonce (24, random)    |  ciphertext       |  tag   |
 *   |   u8=1  |   u8    |                        |                   |  (16)  |
 *   +---------+---------+------------------------+-------------------+--------+
 *   AD = version | key_id | label
 *
 * See include/gossip/keyring.h for the key file format and the API contract.
 */
/* getline() is POSIX.1-2008; the build defines _GNU_SOURCE, which implies it. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "gossip/keyring.h"
#include "gossip/error.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <sodium.h>

#define NKEYS 256

struct gossip_keyring {
    uint8_t *keys;                            /* NKEYS * GOSSIP_KEY_BYTES, sodium_malloc'd */
    uint8_t present[NKEYS / 8];               /* bitmap of installed ids */
    int in_use;                               /* id of the sealing key, -1 when none */
    size_t count;                             /* installed keys */
    size_t ad_len;                            /* 2 + label length */
    uint8_t ad[2 + GOSSIP_KEYRING_LABEL_MAX]; /* version, key_id, label */
    char err[512];                            /* last load_file error */
};

static int bit_get(const uint8_t *bm, unsigned id)
{
    return (bm[id >> 3] >> (id & 7)) & 1;
}

static void bit_set(uint8_t *bm, unsigned id, int on)
{
    if (on)
        bm[id >> 3] |= (uint8_t)(1u << (id & 7));
    else
        bm[id >> 3] &= (uint8_t) ~(1u << (id & 7));
}

/* sodium_init is idempotent and thread-safe; 1 means "already done". */
static int keyring__sodium_ready(void)
{
    return sodium_init() >= 0;
}

int gossip_keyring_create(struct gossip_keyring **out, const char *cluster_label)
{
    if (out == NULL)
        return -GOSSIP_EINVAL;
    *out = NULL;
    size_t label_len = cluster_label != NULL ? strlen(cluster_label) : 0;
    if (label_len > GOSSIP_KEYRING_LABEL_MAX)
        return -GOSSIP_EINVAL;
    if (!keyring__sodium_ready())
        return -GOSSIP_EIO;
    struct gossip_keyring *kr = calloc(1, sizeof(*kr));
    if (kr == NULL)
        return -GOSSIP_ENOMEM;
    kr->keys = sodium_malloc((size_t)NKEYS * GOSSIP_KEY_BYTES);
    if (kr->keys == NULL) {
        free(kr);
        return -GOSSIP_ENOMEM;
    }
    sodium_memzero(kr->keys, (size_t)NKEYS * GOSSIP_KEY_BYTES);
    kr->in_use = -1;
    kr->ad[0] = GOSSIP_KEYRING_VERSION;
    if (label_len > 0)
        memcpy(kr->ad + 2, cluster_label, label_len);
    kr->ad_len = 2 + label_len;
    *out = kr;
    return 0;
}

void gossip_keyring_destroy(struct gossip_keyring *kr)
{
    if (kr == NULL)
        return;
    sodium_free(kr->keys); /* sodium_free wipes before unmapping */
    sodium_memzero(kr, sizeof(*kr));
    free(kr);
}

int gossip_keyring_install(struct gossip_keyring *kr, uint8_t key_id,
                           const uint8_t key[GOSSIP_KEY_BYTES])
{
    if (kr == NULL || key == NULL)
        return -GOSSIP_EINVAL;
    memcpy(kr->keys + (size_t)key_id * GOSSIP_KEY_BYTES, key, GOSSIP_KEY_BYTES);
    if (!bit_get(kr->present, key_id)) {
        bit_set(kr->present, key_id, 1);
        kr->count++;
    }
    if (kr->in_use < 0)
        kr->in_use = key_id;
    return 0;
}

int gossip_keyring_use(struct gossip_keyring *kr, uint8_t key_id)
{
    if (kr == NULL)
        return -GOSSIP_EINVAL;
    if (!bit_get(kr->present, key_id))
        return -GOSSIP_ENOKEY;
    kr->in_use = key_id;
    return 0;
}

int gossip_keyring_remove(struct gossip_keyring *kr, uint8_t key_id)
{
    if (kr == NULL)
        return -GOSSIP_EINVAL;
    if (!bit_get(kr->present, key_id))
        return -GOSSIP_ENOKEY;
    if (kr->in_use == key_id)
        return -GOSSIP_ESTATE;
    sodium_memzero(kr->keys + (size_t)key_id * GOSSIP_KEY_BYTES, GOSSIP_KEY_BYTES);
    bit_set(kr->present, key_id, 0);
    kr->count--;
    return 0;
}

int gossip_keyring_in_use(const struct gossip_keyring *kr)
{
    if (kr == NULL || kr->in_use < 0)
        return -GOSSIP_ENOKEY;
    return kr->in_use;
}

int gossip_keyring_has(const struct gossip_keyring *kr, uint8_t key_id)
{
    return kr != NULL && bit_get(kr->present, key_id);
}

size_t gossip_keyring_count(const struct gossip_keyring *kr)
{
    return kr != NULL ? kr->count : 0;
}

int gossip_keyring_seal(struct gossip_keyring *kr, const uint8_t *plain, size_t len, uint8_t *out,
                        size_t cap, size_t *out_len)
{
    if (kr == NULL || out == NULL || out_len == NULL || (plain == NULL && len > 0))
        return -GOSSIP_EINVAL;
    if (kr->in_use < 0)
        return -GOSSIP_ENOKEY;
    if (len > cap || cap - len < GOSSIP_KEYRING_OVERHEAD)
        return -GOSSIP_ETOOBIG;
    uint8_t id = (uint8_t)kr->in_use;
    out[0] = GOSSIP_KEYRING_VERSION;
    out[1] = id;
    randombytes_buf(out + 2, GOSSIP_KEYRING_NONCE_BYTES);
    kr->ad[1] = id;
    unsigned long long clen = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + GOSSIP_KEYRING_HEADER, &clen, plain, len,
                                               kr->ad, kr->ad_len, NULL, out + 2,
                                               kr->keys + (size_t)id * GOSSIP_KEY_BYTES);
    *out_len = GOSSIP_KEYRING_HEADER + (size_t)clen;
    return 0;
}

int gossip_keyring_open(struct gossip_keyring *kr, const uint8_t *pkt, size_t len, uint8_t *plain,
                        size_t cap, size_t *plain_len)
{
    if (kr == NULL || plain_len == NULL || (pkt == NULL && len > 0) || (plain == NULL && cap > 0))
        return -GOSSIP_EINVAL;
    if (len < GOSSIP_KEYRING_OVERHEAD)
        return -GOSSIP_EPROTO;
    if (pkt[0] != GOSSIP_KEYRING_VERSION)
        return -GOSSIP_EVERSION;
    uint8_t id = pkt[1];
    if (!bit_get(kr->present, id))
        return -GOSSIP_ENOKEY;
    size_t need = len - GOSSIP_KEYRING_OVERHEAD;
    if (need > cap)
        return -GOSSIP_ETOOBIG;
    /* libsodium may write to plain even when zero-length: give it a byte. */
    uint8_t dummy;
    kr->ad[1] = id;
    unsigned long long mlen = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            need > 0 ? plain : &dummy, &mlen, NULL, pkt + GOSSIP_KEYRING_HEADER,
            len - GOSSIP_KEYRING_HEADER, kr->ad, kr->ad_len, pkt + 2,
            kr->keys + (size_t)id * GOSSIP_KEY_BYTES) != 0)
        return -GOSSIP_EAUTH;
    *plain_len = (size_t)mlen;
    return 0;
}

/* ---- key file ----------------------------------------------------------- */

static int keyring__fail(struct gossip_keyring *kr, int code, const char *path, unsigned line,
                         const char *fmt, ...)
{
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(kr->err, sizeof(kr->err), "%s:%u: %s", path, line, reason);
    else
        snprintf(kr->err, sizeof(kr->err), "%s: %s", path, reason);
    return code;
}

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return p;
}

static const char *token_end(const char *p)
{
    while (*p != '\0' && *p != '#' && !isspace((unsigned char)*p))
        p++;
    return p;
}

/* A line longer than this is refused rather than split. */
#define LINE_MAX_BYTES 512

int gossip_keyring_load_file(struct gossip_keyring *kr, const char *path)
{
    if (kr == NULL || path == NULL)
        return -GOSSIP_EINVAL;
    kr->err[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return keyring__fail(kr, -GOSSIP_EIO, path, 0, "%s", strerror(errno));

    /* Parse into a scratch ring so that a bad file changes nothing. */
    uint8_t *keys = sodium_malloc((size_t)NKEYS * GOSSIP_KEY_BYTES);
    if (keys == NULL) {
        fclose(f);
        return keyring__fail(kr, -GOSSIP_ENOMEM, path, 0, "out of memory");
    }
    sodium_memzero(keys, (size_t)NKEYS * GOSSIP_KEY_BYTES);
    uint8_t present[NKEYS / 8] = {0};
    size_t count = 0;
    int first = -1, marked = -1;
    unsigned marked_line = 0;
    char *buf = NULL;
    size_t bufcap = 0;
    ssize_t got;
    unsigned lineno = 0;
    int rc = 0;

    while ((got = getline(&buf, &bufcap, f)) >= 0) {
        lineno++;
        if (got > LINE_MAX_BYTES) {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno, "line longer than %d bytes",
                               LINE_MAX_BYTES);
            break;
        }
        if (memchr(buf, '\0', (size_t)got) != NULL) {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno, "NUL byte in line");
            break;
        }
        const char *p = skip_space(buf);
        if (*p == '\0' || *p == '#')
            continue;

        /* id */
        const char *e = token_end(p);
        if (e - p > 3 || e == p) {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno, "key id must be 0..255");
            break;
        }
        unsigned id = 0;
        for (const char *q = p; q < e; q++) {
            if (*q < '0' || *q > '9') {
                id = 256;
                break;
            }
            id = id * 10 + (unsigned)(*q - '0');
        }
        if (id > 255) {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno, "key id must be 0..255");
            break;
        }
        if (bit_get(present, id)) {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno, "duplicate key id %u", id);
            break;
        }

        /* key */
        p = skip_space(e);
        e = token_end(p);
        if (e == p) {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno, "missing key after id %u", id);
            break;
        }
        if (gossip_keyring_key_from_hex(p, (size_t)(e - p), keys + (size_t)id * GOSSIP_KEY_BYTES) !=
            0) {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno, "key must be 64 hex digits");
            break;
        }

        /* optional "use", then nothing but a comment */
        p = skip_space(e);
        e = token_end(p);
        if (e - p == 3 && memcmp(p, "use", 3) == 0) {
            if (marked >= 0) {
                rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno,
                                   "second key marked use (first on line %u)", marked_line);
                break;
            }
            marked = (int)id;
            marked_line = lineno;
            p = skip_space(e);
        }
        if (*p != '\0' && *p != '#') {
            rc = keyring__fail(kr, -GOSSIP_EINVAL, path, lineno,
                               "unexpected text after key (only `use` or a # comment)");
            break;
        }
        bit_set(present, id, 1);
        count++;
        if (first < 0)
            first = (int)id;
    }
    if (buf != NULL) {
        sodium_memzero(buf, bufcap);
        free(buf);
    }
    if (rc == 0 && ferror(f))
        rc = keyring__fail(kr, -GOSSIP_EIO, path, 0, "read error");
    fclose(f);
    if (rc == 0 && count == 0)
        rc = keyring__fail(kr, -GOSSIP_EINVAL, path, 0, "no key in file");
    if (rc != 0) {
        sodium_free(keys);
        return rc;
    }

    /* Swap the scratch ring in; the old key block is wiped by sodium_free. */
    sodium_free(kr->keys);
    kr->keys = keys;
    memcpy(kr->present, present, sizeof(present));
    kr->count = count;
    kr->in_use = marked >= 0 ? marked : first;
    return 0;
}

const char *gossip_keyring_last_error(const struct gossip_keyring *kr)
{
    return kr != NULL ? kr->err : "";
}

void gossip_keyring_generate_key(uint8_t out[GOSSIP_KEY_BYTES])
{
    (void)keyring__sodium_ready();
    crypto_aead_xchacha20poly1305_ietf_keygen(out);
}

void gossip_keyring_key_to_hex(const uint8_t key[GOSSIP_KEY_BYTES], char out[GOSSIP_KEY_HEX_BYTES])
{
    sodium_bin2hex(out, GOSSIP_KEY_HEX_BYTES, key, GOSSIP_KEY_BYTES);
}

int gossip_keyring_key_from_hex(const char *hex, size_t len, uint8_t out[GOSSIP_KEY_BYTES])
{
    if (hex == NULL || out == NULL || len != 2 * GOSSIP_KEY_BYTES)
        return -GOSSIP_EINVAL;
    size_t bin_len = 0;
    const char *end = NULL;
    if (sodium_hex2bin(out, GOSSIP_KEY_BYTES, hex, len, NULL, &bin_len, &end) != 0 ||
        bin_len != GOSSIP_KEY_BYTES || end != hex + len) {
        sodium_memzero(out, GOSSIP_KEY_BYTES);
        return -GOSSIP_EINVAL;
    }
    return 0;
}
