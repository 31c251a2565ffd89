/*
 * Keyring: sealed packets open only with the right key and label, rotation
 * works in the documented three steps, and bad input (packets or key files)
 * is refused with the documented error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gossip/error.h"
#include "gossip/keyring.h"
#include "testutil.h"

static uint64_t rng;

static void fill(uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)test_rand(&rng);
}

static struct gossip_keyring *ring(const char *label, uint8_t id, const uint8_t key[32])
{
    struct gossip_keyring *kr = NULL;
    assert_int_equal(gossip_keyring_create(&kr, label), 0);
    assert_non_null(kr);
    assert_int_equal(gossip_keyring_install(kr, id, key), 0);
    return kr;
}

static size_t seal(struct gossip_keyring *kr, const uint8_t *plain, size_t len, uint8_t *out,
                   size_t cap)
{
    size_t n = 0;
    assert_int_equal(gossip_keyring_seal(kr, plain, len, out, cap, &n), 0);
    assert_int_equal(n, len + GOSSIP_KEYRING_OVERHEAD);
    return n;
}

static int open_pkt(struct gossip_keyring *kr, const uint8_t *pkt, size_t len)
{
    uint8_t plain[2048];
    size_t n = 0;
    return gossip_keyring_open(kr, pkt, len, plain, sizeof(plain), &n);
}

static void test_round_trip(void **state)
{
    (void)state;
    uint8_t key[32];
    fill(key, sizeof(key));
    struct gossip_keyring *a = ring("prod", 7, key);
    struct gossip_keyring *b = ring("prod", 7, key);
    size_t sizes[] = {0, 1, 15, 16, 17, 500, 1400};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint8_t plain[1400], pkt[1400 + GOSSIP_KEYRING_OVERHEAD], back[1400];
        fill(plain, sizes[s]);
        size_t n = seal(a, plain, sizes[s], pkt, sizeof(pkt));
        assert_int_equal(pkt[0], GOSSIP_KEYRING_VERSION);
        assert_int_equal(pkt[1], 7);
        size_t m = 12345;
        assert_int_equal(gossip_keyring_open(b, pkt, n, back, sizeof(back), &m), 0);
        assert_int_equal(m, sizes[s]);
        if (m > 0)
            assert_memory_equal(back, plain, m);
    }
    /* Two seals of the same plaintext differ (random nonce). */
    uint8_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8}, x[64], y[64];
    seal(a, p, 8, x, sizeof(x));
    seal(a, p, 8, y, sizeof(y));
    assert_memory_not_equal(x, y, 8 + GOSSIP_KEYRING_OVERHEAD);
    gossip_keyring_destroy(a);
    gossip_keyring_destroy(b);
}

static void test_tamper_every_byte(void **state)
{
    (void)state;
    uint8_t key[32], plain[100], pkt[200];
    fill(key, sizeof(key));
    fill(plain, sizeof(plain));
    struct gossip_keyring *kr = ring("", 1, key);
    size_t n = seal(kr, plain, sizeof(plain), pkt, sizeof(pkt));
    assert_int_equal(open_pkt(kr, pkt, n), 0);
    for (size_t i = 0; i < n; i++) {
        uint8_t flip = (uint8_t)(1u << (test_rand(&rng) % 8));
        pkt[i] ^= flip;
        int rc = open_pkt(kr, pkt, n);
        if (i == 0)
            assert_int_equal(rc, -GOSSIP_EVERSION);
        else if (i == 1)
            assert_int_equal(rc, -GOSSIP_ENOKEY); /* id 1 flipped to another id */
        else
            assert_int_equal(rc, -GOSSIP_EAUTH);
        pkt[i] ^= flip;
    }
    assert_int_equal(open_pkt(kr, pkt, n), 0);
    gossip_keyring_destroy(kr);
}

static void test_wrong_label_and_wrong_key(void **state)
{
    (void)state;
    uint8_t key[32], other[32], plain[40], pkt[128];
    fill(key, sizeof(key));
    fill(other, sizeof(other));
    fill(plain, sizeof(plain));
    struct gossip_keyring *prod = ring("prod", 3, key);
    struct gossip_keyring *staging = ring("staging", 3, key);
    struct gossip_keyring *nolabel = ring("", 3, key);
    struct gossip_keyring *wrongkey = ring("prod", 3, other);
    size_t n = seal(prod, plain, sizeof(plain), pkt, sizeof(pkt));
    assert_int_equal(open_pkt(prod, pkt, n), 0);
    assert_int_equal(open_pkt(staging, pkt, n), -GOSSIP_EAUTH);
    assert_int_equal(open_pkt(nolabel, pkt, n), -GOSSIP_EAUTH);
    assert_int_equal(open_pkt(wrongkey, pkt, n), -GOSSIP_EAUTH);
    gossip_keyring_destroy(prod);
    gossip_keyring_destroy(staging);
    gossip_keyring_destroy(nolabel);
    gossip_keyring_destroy(wrongkey);
}

static void test_unknown_key_id(void **state)
{
    (void)state;
    uint8_t k1[32], plain[10], pkt[64];
    fill(k1, sizeof(k1));
    fill(plain, sizeof(plain));
    struct gossip_keyring *a = ring("x", 1, k1);
    struct gossip_keyring *b = ring("x", 2, k1); /* same bytes, other id */
    size_t n = seal(a, plain, sizeof(plain), pkt, sizeof(pkt));
    assert_int_equal(open_pkt(b, pkt, n), -GOSSIP_ENOKEY);
    gossip_keyring_destroy(a);
    gossip_keyring_destroy(b);
}

static void test_rotation(void **state)
{
    (void)state;
    uint8_t ka[32], kb[32], plain[64], pa[128], pb[128];
    fill(ka, sizeof(ka));
    fill(kb, sizeof(kb));
    fill(plain, sizeof(plain));
    struct gossip_keyring *n1 = ring("c", 1, ka);
    struct gossip_keyring *n2 = ring("c", 1, ka);
    assert_int_equal(gossip_keyring_in_use(n1), 1);

    size_t la = seal(n1, plain, sizeof(plain), pa, sizeof(pa));
    /* Step 1: install B everywhere; sealing still uses A. */
    assert_int_equal(gossip_keyring_install(n1, 2, kb), 0);
    assert_int_equal(gossip_keyring_install(n2, 2, kb), 0);
    assert_int_equal(gossip_keyring_in_use(n1), 1);
    assert_int_equal(gossip_keyring_count(n1), 2);
    assert_int_equal(open_pkt(n2, pa, la), 0);

    /* Step 2: use B on n1 only: n2 (still on A) opens both. */
    assert_int_equal(gossip_keyring_use(n1, 2), 0);
    size_t lb = seal(n1, plain, sizeof(plain), pb, sizeof(pb));
    assert_int_equal(pb[1], 2);
    assert_int_equal(open_pkt(n2, pb, lb), 0);
    assert_int_equal(open_pkt(n2, pa, la), 0);
    assert_int_equal(open_pkt(n1, pa, la), 0); /* old packets still open */
    assert_int_equal(gossip_keyring_use(n2, 2), 0);

    /* The key in use cannot be removed. */
    assert_int_equal(gossip_keyring_remove(n1, 2), -GOSSIP_ESTATE);
    assert_true(gossip_keyring_has(n1, 2));

    /* Step 3: remove A: A packets are now ENOKEY, B still opens. */
    assert_int_equal(gossip_keyring_remove(n1, 1), 0);
    assert_int_equal(gossip_keyring_remove(n1, 1), -GOSSIP_ENOKEY);
    assert_false(gossip_keyring_has(n1, 1));
    assert_int_equal(gossip_keyring_count(n1), 1);
    assert_int_equal(open_pkt(n1, pa, la), -GOSSIP_ENOKEY);
    assert_int_equal(open_pkt(n1, pb, lb), 0);
    assert_int_equal(gossip_keyring_use(n1, 1), -GOSSIP_ENOKEY);

    gossip_keyring_destroy(n1);
    gossip_keyring_destroy(n2);
}

static void test_empty_ring_and_bounds(void **state)
{
    (void)state;
    struct gossip_keyring *kr = NULL;
    uint8_t plain[16] = {0}, out[128];
    size_t n = 0;
    assert_int_equal(gossip_keyring_create(&kr, NULL), 0);
    assert_int_equal(gossip_keyring_in_use(kr), -GOSSIP_ENOKEY);
    assert_int_equal(gossip_keyring_seal(kr, plain, 16, out, sizeof(out), &n), -GOSSIP_ENOKEY);
    uint8_t key[32];
    fill(key, sizeof(key));
    assert_int_equal(gossip_keyring_install(kr, 0, key), 0);
    assert_int_equal(gossip_keyring_in_use(kr), 0);
    /* Output one byte too small. */
    assert_int_equal(gossip_keyring_seal(kr, plain, 16, out, 16 + GOSSIP_KEYRING_OVERHEAD - 1, &n),
                     -GOSSIP_ETOOBIG);
    n = seal(kr, plain, 16, out, 16 + GOSSIP_KEYRING_OVERHEAD);
    uint8_t back[16];
    size_t m;
    assert_int_equal(gossip_keyring_open(kr, out, n, back, 15, &m), -GOSSIP_ETOOBIG);
    assert_int_equal(gossip_keyring_open(kr, out, n, back, 16, &m), 0);
    gossip_keyring_destroy(kr);

    /* Label bound. */
    char label[GOSSIP_KEYRING_LABEL_MAX + 2];
    memset(label, 'l', sizeof(label) - 1);
    label[sizeof(label) - 1] = '\0';
    assert_int_equal(gossip_keyring_create(&kr, label), -GOSSIP_EINVAL);
    assert_null(kr);
    label[GOSSIP_KEYRING_LABEL_MAX] = '\0';
    assert_int_equal(gossip_keyring_create(&kr, label), 0);
    gossip_keyring_destroy(kr);
    gossip_keyring_destroy(NULL);
}

static void test_truncated_every_length(void **state)
{
    (void)state;
    uint8_t key[32], plain[64], pkt[128];
    fill(key, sizeof(key));
    fill(plain, sizeof(plain));
    struct gossip_keyring *kr = ring("t", 9, key);
    size_t n = seal(kr, plain, sizeof(plain), pkt, sizeof(pkt));
    for (size_t len = 0; len < n; len++) {
        /* Exact-size heap copy so a read past the end is caught by ASan. */
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, pkt, len);
        int rc = open_pkt(kr, copy, len);
        if (len < GOSSIP_KEYRING_OVERHEAD)
            assert_int_equal(rc, -GOSSIP_EPROTO);
        else
            assert_int_equal(rc, -GOSSIP_EAUTH);
        free(copy);
    }
    assert_int_equal(open_pkt(kr, NULL, 0), -GOSSIP_EPROTO);
    gossip_keyring_destroy(kr);
}

/* ---- key files ---- */

static char tmpdir[64];

static int files_setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/keyring-test-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int files_teardown(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s/keys", tmpdir);
    unlink(path);
    return rmdir(tmpdir);
}

static const char *write_file(const char *text)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/keys", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

#define HEX_A "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define HEX_B "F0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEF"

static void test_key_file_good(void **state)
{
    (void)state;
    struct gossip_keyring *kr = NULL;
    assert_int_equal(gossip_keyring_create(&kr, "c"), 0);
    const char *p = write_file("# cluster keys\n"
                               "\n"
                               "  5 " HEX_A "   # old key\n"
                               "200\t" HEX_B " use\n");
    assert_int_equal(gossip_keyring_load_file(kr, p), 0);
    assert_string_equal(gossip_keyring_last_error(kr), "");
    assert_int_equal(gossip_keyring_count(kr), 2);
    assert_int_equal(gossip_keyring_in_use(kr), 200);
    assert_true(gossip_keyring_has(kr, 5));

    /* The file's key bytes are the ones used: a ring installed by hand opens. */
    uint8_t kb[32];
    assert_int_equal(gossip_keyring_key_from_hex(HEX_B, 64, kb), 0);
    struct gossip_keyring *manual = ring("c", 200, kb);
    uint8_t plain[5] = "hello", pkt[64];
    size_t n = seal(kr, plain, 5, pkt, sizeof(pkt));
    assert_int_equal(open_pkt(manual, pkt, n), 0);
    gossip_keyring_destroy(manual);

    /* Without `use`, the first key is used; a reload replaces the ring. */
    p = write_file("9 " HEX_B "\n7 " HEX_A);
    assert_int_equal(gossip_keyring_load_file(kr, p), 0);
    assert_int_equal(gossip_keyring_in_use(kr), 9);
    assert_int_equal(gossip_keyring_count(kr), 2);
    assert_false(gossip_keyring_has(kr, 5));
    assert_false(gossip_keyring_has(kr, 200));
    assert_int_equal(open_pkt(kr, pkt, n), -GOSSIP_ENOKEY);
    gossip_keyring_destroy(kr);
}

static void test_key_file_bad(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *error; /* expected substring after the path */
    } cases[] = {
        {"", ": no key in file"},
        {"# only comments\n\n", ": no key in file"},
        {"1 " HEX_A "\n256 " HEX_B "\n", ":2: key id must be 0..255"},
        {"x1 " HEX_A "\n", ":1: key id must be 0..255"},
        {"-1 " HEX_A "\n", ":1: key id must be 0..255"},
        {"1\n", ":1: missing key after id 1"},
        {"1 " HEX_A "0\n", ":1: key must be 64 hex digits"},
        {"1 0001\n", ":1: key must be 64 hex digits"},
        {"\n\n1 zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
         ":3: key must be 64 hex digits"},
        {"1 " HEX_A "\n1 " HEX_B "\n", ":2: duplicate key id 1"},
        {"1 " HEX_A " use\n2 " HEX_B " use\n", ":2: second key marked use (first on line 1)"},
        {"1 " HEX_A " used\n", ":1: unexpected text after key"},
        {"1 " HEX_A " use extra\n", ":1: unexpected text after key"},
    };
    uint8_t key[32];
    fill(key, sizeof(key));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gossip_keyring *kr = ring("c", 42, key);
        const char *p = write_file(cases[i].text);
        assert_int_equal(gossip_keyring_load_file(kr, p), -GOSSIP_EINVAL);
        const char *msg = gossip_keyring_last_error(kr);
        if (strncmp(msg, p, strlen(p)) != 0 || strstr(msg, cases[i].error) == NULL) {
            fprintf(stderr, "case %zu: got \"%s\", want \"%s%s\"\n", i, msg, p, cases[i].error);
            fail();
        }
        /* All or nothing: the ring is unchanged. */
        assert_int_equal(gossip_keyring_count(kr), 1);
        assert_int_equal(gossip_keyring_in_use(kr), 42);
        gossip_keyring_destroy(kr);
    }

    /* Long line and NUL byte. */
    struct gossip_keyring *kr = ring("c", 42, key);
    char longline[700];
    memset(longline, ' ', sizeof(longline) - 1);
    longline[sizeof(longline) - 1] = '\0';
    const char *p = write_file(longline);
    assert_int_equal(gossip_keyring_load_file(kr, p), -GOSSIP_EINVAL);
    assert_non_null(strstr(gossip_keyring_last_error(kr), ":1: line longer than"));
    FILE *f = fopen(p, "w");
    fwrite("1 \0" HEX_A "\n", 1, 68, f);
    fclose(f);
    assert_int_equal(gossip_keyring_load_file(kr, p), -GOSSIP_EINVAL);
    assert_non_null(strstr(gossip_keyring_last_error(kr), ":1: NUL byte"));

    /* Missing file. */
    char missing[128];
    snprintf(missing, sizeof(missing), "%s/does-not-exist", tmpdir);
    assert_int_equal(gossip_keyring_load_file(kr, missing), -GOSSIP_EIO);
    assert_non_null(strstr(gossip_keyring_last_error(kr), "does-not-exist: "));
    assert_int_equal(gossip_keyring_in_use(kr), 42);
    gossip_keyring_destroy(kr);
}

static void test_hex_and_generate(void **state)
{
    (void)state;
    uint8_t a[32], b[32], back[32];
    gossip_keyring_generate_key(a);
    gossip_keyring_generate_key(b);
    assert_memory_not_equal(a, b, 32);
    char hex[GOSSIP_KEY_HEX_BYTES];
    gossip_keyring_key_to_hex(a, hex);
    assert_int_equal(strlen(hex), 64);
    assert_int_equal(gossip_keyring_key_from_hex(hex, 64, back), 0);
    assert_memory_equal(a, back, 32);
    assert_int_equal(gossip_keyring_key_from_hex(hex, 63, back), -GOSSIP_EINVAL);
    hex[10] = 'g';
    assert_int_equal(gossip_keyring_key_from_hex(hex, 64, back), -GOSSIP_EINVAL);
}

int main(void)
{
    rng = test_seed("test_keyring");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_tamper_every_byte),
        cmocka_unit_test(test_wrong_label_and_wrong_key),
        cmocka_unit_test(test_unknown_key_id),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_empty_ring_and_bounds),
        cmocka_unit_test(test_truncated_every_length),
        cmocka_unit_test(test_hex_and_generate),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc != 0)
        return rc;
    const struct CMUnitTest file_tests[] = {
        cmocka_unit_test(test_key_file_good),
        cmocka_unit_test(test_key_file_bad),
    };
    return cmocka_run_group_tests(file_tests, files_setup, files_teardown);
}
