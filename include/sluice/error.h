/*
 * sluice error codes.
 *
 * Every sluice function that can fail returns 0 on success or one of these
 * codes, negated (-SLUICE_EINVAL, ...).  sluice_strerror() gives a short
 * human-readable string for any value, including unknown ones, and never
 * fails; the string is static and must not be freed.
 */
#ifndef SLUICE_ERROR_H
#define SLUICE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum sluice_err {
    SLUICE_OK = 0,
    SLUICE_EINVAL = 1,     /* invalid argument */
    SLUICE_ENOMEM = 2,     /* out of memory */
    SLUICE_ERANGE = 3,     /* value out of the representable range */
    SLUICE_EFULL = 4,      /* a bounded table or queue is full */
    SLUICE_ENOENT = 5,     /* no such key or object */
    SLUICE_EPROTO = 6,     /* malformed protocol input */
    SLUICE_ETOOBIG = 7,    /* input exceeds a configured size bound */
    SLUICE_EAGAIN = 8,     /* incomplete input: need more bytes */
    SLUICE_EIO = 9,        /* an operating-system call failed */
    SLUICE_ECONFIG = 10,   /* invalid configuration */
    SLUICE_EEXIST = 11,    /* already exists */
    SLUICE_ECANCELED = 12, /* operation cancelled */
    SLUICE_ETIMEDOUT = 13, /* deadline passed */
    SLUICE_ERR_MAX_
};

/* Returns a static string for err (positive or negative); never NULL. */
const char *sluice_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
