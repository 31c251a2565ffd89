/*
 * libgossip keyring: the keys that seal (encrypt and authenticate) and open
 * every gossip datagram.
 *
 * Why a ring and not one key: keys must rotate without downtime.  Every node
 * can hold up to 256 keys, addressed by a one-byte id carried in clear in each
 * packet, and seals new packets with exactly one of them (the key "in use").
 * A rotation across a running cluster is three rolling steps, each of which
 * leaves every pair of nodes able to talk:
 *
 *   1. install the new key B everywhere       (all still seal with A, open A or B)
 *   2. use B everywhere                       (nodes seal with B, still open A)
 *   3. remove A everywhere                    (A packets now fail with ENOKEY)
 *
 * The cluster label is bound into every packet as associated data, so two
 * clusters sharing a network (or a key by mistake) silently ignore each
 * other's packets: they fail to open with -GOSSIP_EAUTH.
 *
 * Wire format of a sealed packet (AEAD = XChaCha20-Poly1305-IETF, libsodium):
 *
 *   0         1         2                        26                  len-16   len
 *   +---------+---------+------------------------+---------- ... ------+--------+
 *   | version | key_id  |  nonce (24, random)    |  ciphertext         |  tag   |
 *   |   u8=1  |   u8    |                        |  (same len as plain)|  (16)  |
 *   +---------+---------+------------------------+---------- ... ------+--------+
 *
 *   associated data = version | key_id | cluster label bytes (not sent)
 *
 * Nonces are random (24 bytes is large enough that collisions are not a
 * concern), so no nonce state has to survive a restart.
 *
 * Key file format (gossip_keyring_load_file), one key per line:
 *
 *   # comment lines and blank lines are ignored
 *   1  6f1c...64 hex digits...e2   use      # key 1, the one new packets use
 *   2  9a0b...64 hex digits...41            # key 2, accepted on receive
 *
 * The id is decimal 0..255, the key exactly 64 hex digits (32 bytes).  The
 * key marked `use` seals new packets; when no line is marked, the first key
 * of the file is used.  Ids must be unique; at most one line says `use`; a
 * file must hold at least one key.  Text after `#` is a comment.  Keep the
 * file readable by the daemon's user only (mode 0600).
 *
 * Threading: a keyring is not locked; use it from one thread (the event loop)
 * or serialise calls.  Functions return 0 or a negative enum gossip_err.
 */
#ifndef GOSSIP_KEYRING_H
#define GOSSIP_KEYRING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gossip_keyring; /* opaque */

#define GOSSIP_KEY_BYTES           32
#define GOSSIP_KEY_HEX_BYTES       (2 * GOSSIP_KEY_BYTES + 1) /* with the NUL */
#define GOSSIP_KEYRING_VERSION     1
#define GOSSIP_KEYRING_NONCE_BYTES 24
#define GOSSIP_KEYRING_TAG_BYTES   16
#define GOSSIP_KEYRING_HEADER      (2 + GOSSIP_KEYRING_NONCE_BYTES)
/* Bytes that gossip_keyring_seal adds to a plaintext: header + nonce + tag (42). */
#define GOSSIP_KEYRING_OVERHEAD (GOSSIP_KEYRING_HEADER + GOSSIP_KEYRING_TAG_BYTES)
/* Longest cluster label accepted by gossip_keyring_create. */
#define GOSSIP_KEYRING_LABEL_MAX 128

/*
 * Creates an empty keyring bound to cluster_label ("" or NULL for none; at
 * most GOSSIP_KEYRING_LABEL_MAX bytes, -GOSSIP_EINVAL otherwise).  Initialises
 * libsodium on first use (-GOSSIP_EIO if that fails).  The caller owns *out and
 * frees it with gossip_keyring_destroy.  Until a key is installed and used,
 * seal fails with -GOSSIP_ENOKEY.
 */
int gossip_keyring_create(struct gossip_keyring **out, const char *cluster_label);

/* Wipes every key and frees the ring.  NULL is a no-op. */
void gossip_keyring_destroy(struct gossip_keyring *kr);

/*
 * Installs (or replaces) the key with this id.  The key is copied into locked,
 * guarded memory; the caller may wipe its copy afterwards.  Installing does not
 * change the key in use, except that the first key installed into an empty
 * ring becomes the key in use.  Replacing the key in use is allowed (the new
 * bytes take effect for the next seal).
 */
int gossip_keyring_install(struct gossip_keyring *kr, uint8_t key_id,
                           const uint8_t key[GOSSIP_KEY_BYTES]);

/* Makes key_id the key new packets are sealed with; -GOSSIP_ENOKEY if absent. */
int gossip_keyring_use(struct gossip_keyring *kr, uint8_t key_id);

/*
 * Removes and wipes a key.  -GOSSIP_ENOKEY if absent; -GOSSIP_ESTATE for the
 * key in use (switch to another key first, so a node never loses its ability
 * to send).
 */
int gossip_keyring_remove(struct gossip_keyring *kr, uint8_t key_id);

/* Id of the key in use (0..255), or -GOSSIP_ENOKEY when the ring is empty. */
int gossip_keyring_in_use(const struct gossip_keyring *kr);

/* 1 if a key with this id is installed, 0 otherwise. */
int gossip_keyring_has(const struct gossip_keyring *kr, uint8_t key_id);

/* Number of installed keys. */
size_t gossip_keyring_count(const struct gossip_keyring *kr);

/*
 * Seals plain[0..len) with the key in use into out[0..cap), setting *out_len
 * to len + GOSSIP_KEYRING_OVERHEAD.  plain and out must not overlap.
 * Fails with -GOSSIP_ENOKEY (no key in use), -GOSSIP_ETOOBIG (cap too small),
 * -GOSSIP_EINVAL (NULL arguments).  On failure out is unspecified.
 */
int gossip_keyring_seal(struct gossip_keyring *kr, const uint8_t *plain, size_t len, uint8_t *out,
                        size_t cap, size_t *out_len);

/*
 * Opens a sealed packet (untrusted network input) into plain[0..cap), setting
 * *plain_len to len - GOSSIP_KEYRING_OVERHEAD.  pkt and plain must not overlap.
 * Fails, writing nothing trustworthy to plain, with:
 *   -GOSSIP_EPROTO   shorter than GOSSIP_KEYRING_OVERHEAD
 *   -GOSSIP_EVERSION version byte is not GOSSIP_KEYRING_VERSION
 *   -GOSSIP_ENOKEY   no key with the packet's key id
 *   -GOSSIP_EAUTH    tag mismatch: tampered, wrong key bytes or other label
 *   -GOSSIP_ETOOBIG  cap too small for the plaintext
 */
int gossip_keyring_open(struct gossip_keyring *kr, const uint8_t *pkt, size_t len, uint8_t *plain,
                        size_t cap, size_t *plain_len);

/*
 * Replaces the ring's keys with the keys of a key file (format above) and
 * uses the key the file designates.  All or nothing: on any error the ring is
 * left exactly as it was and gossip_keyring_last_error() names the file, the
 * line and the reason, e.g. "keys.txt:3: key must be 64 hex digits".
 * Fails with -GOSSIP_EIO (cannot open or read the file) or -GOSSIP_EINVAL
 * (bad content).  Reloading the same file is harmless, so a daemon can call
 * this on SIGHUP to rotate keys.
 */
int gossip_keyring_load_file(struct gossip_keyring *kr, const char *path);

/*
 * The message of the last failed gossip_keyring_load_file on this ring, or ""
 * if none failed yet.  The string belongs to the ring and is valid until the
 * next call on it.
 */
const char *gossip_keyring_last_error(const struct gossip_keyring *kr);

/* Fills out with a fresh random key (for `sluicectl keygen`).  Never fails. */
void gossip_keyring_generate_key(uint8_t out[GOSSIP_KEY_BYTES]);

/* Writes the key as 64 lowercase hex digits and a NUL into out.  Never fails. */
void gossip_keyring_key_to_hex(const uint8_t key[GOSSIP_KEY_BYTES], char out[GOSSIP_KEY_HEX_BYTES]);

/*
 * Parses exactly 64 hex digits (either case, nothing else; hex need not be
 * NUL-terminated past them if len is given) into out.  -GOSSIP_EINVAL if hex
 * is not exactly 64 hex digits long.
 */
int gossip_keyring_key_from_hex(const char *hex, size_t len, uint8_t out[GOSSIP_KEY_BYTES]);

#ifdef __cplusplus
}
#endif
#endif
