/*
 * rls grpc: gRPC's length-prefixed message framing, its status codes and
 * its grpc-timeout header, as the gRPC over HTTP/2 protocol defines them.
 * Pure functions on bytes.
 */
#ifndef SLUICE_RLS_GRPC_H
#define SLUICE_RLS_GRPC_H

#include <stddef.h>
#include <stdint.h>

/* The gRPC status codes sluice answers with. */
enum rls_grpc_status {
    RLS_GRPC_OK = 0,
    RLS_GRPC_INVALID_ARGUMENT = 3,
    RLS_GRPC_DEADLINE_EXCEEDED = 4,
    RLS_GRPC_NOT_FOUND = 5,
    RLS_GRPC_RESOURCE_EXHAUSTED = 8,
    RLS_GRPC_UNIMPLEMENTED = 12,
    RLS_GRPC_INTERNAL = 13,
    RLS_GRPC_UNAVAILABLE = 14,
};

#define RLS_GRPC_PREFIX 5

/*
 * One length-prefixed message at the start of buf:
 *
 *   +------------+----------------------+------------------+
 *   | compressed | length (4, big end.) | message (length) |
 *   +------------+----------------------+------------------+
 *
 * Returns 0 with *msg and *msglen set and *used = the frame's size;
 * -SLUICE_EAGAIN when buf holds less than a whole frame (nothing set);
 * -SLUICE_ETOOBIG as soon as the prefix declares more than max bytes;
 * -SLUICE_EPROTO for a compressed flag other than 0 (sluice negotiates no
 * compression: gRPC answers that with INTERNAL).
 */
int rls_grpc_frame(const uint8_t *buf, size_t len, size_t max, const uint8_t **msg, size_t *msglen,
                   size_t *used);

/* Writes the 5-byte prefix of an uncompressed message of len bytes. */
void rls_grpc_prefix(uint8_t out[RLS_GRPC_PREFIX], size_t len);

/*
 * grpc-timeout's value: 1 to 8 ASCII digits and a unit, H M S m u n (hours
 * .. nanoseconds).  Returns 0 with *ns, or -SLUICE_EINVAL.  Saturates at
 * INT64_MAX.
 */
int rls_grpc_timeout(const char *v, size_t len, int64_t *ns);

#endif
