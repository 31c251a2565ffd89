/*
 * libgossip error codes.
 *
 * Every libgossip function that can fail returns 0 on success or one of these
 * codes, negated.  gossip_strerror() returns a static string for any value and
 * never fails.  Codes starting at GOSSIP_EDROP_ describe why an incoming packet
 * was dropped; they are also the indices of the drop counters in the stats.
 */
#ifndef GOSSIP_ERROR_H
#define GOSSIP_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum gossip_err {
    GOSSIP_OK = 0,
    GOSSIP_EINVAL = 1,   /* invalid argument */
    GOSSIP_ENOMEM = 2,   /* out of memory */
    GOSSIP_EPROTO = 3,   /* malformed packet or message */
    GOSSIP_ETOOBIG = 4,  /* does not fit the MTU or a bound */
    GOSSIP_EAUTH = 5,    /* authentication failed (wrong key, label or tampering) */
    GOSSIP_ENOKEY = 6,   /* no key with that id in the keyring */
    GOSSIP_EVERSION = 7, /* unsupported wire version */
    GOSSIP_EREPLAY = 8,  /* replayed or stale packet */
    GOSSIP_EFULL = 9,    /* bounded queue or table full */
    GOSSIP_ENOENT = 10,  /* no such member or key */
    GOSSIP_EIO = 11,     /* an operating-system call failed */
    GOSSIP_ESTATE = 12,  /* operation not valid in the current state */
    GOSSIP_EEXIST = 13,  /* already exists */
    GOSSIP_ERR_MAX_
};

/* Returns a static string for err (positive or negative); never NULL. */
const char *gossip_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
