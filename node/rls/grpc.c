/*
 * rls grpc: framing, statuses and deadlines of gRPC over HTTP/2 (grpc.h).
 *
 * Design note: a request is one HTTP/2 stream, POST to /SERVICE/METHOD
 * with content-type application/grpc; its DATA is a sequence of messages,
 * each behind a 5-byte prefix (flag, big-endian length).  The answer is
 * HEADERS (:status 200), DATA (one prefixed message) and trailing HEADERS
 * with grpc-status and grpc-message; an error may be "trailers only": one
 * HEADERS frame with both the status and END_STREAM.
 *
 *   byte 0      1     2     3     4     5 ...
 *       +-----+-----+-----+-----+-----+-----------------+
 *       |  0  |  length, big-endian   |  protobuf bytes |
 *       +-----+-----+-----+-----+-----+-----------------+
 */
#include "grpc.h"

#include "sluice/error.h"

int rls_grpc_frame(const uint8_t *buf, size_t len, size_t max, const uint8_t **msg, size_t *msglen,
                   size_t *used)
{
    if (len < 1)
        return -SLUICE_EAGAIN;
    if (buf[0] != 0)
        return -SLUICE_EPROTO;
    if (len < RLS_GRPC_PREFIX)
        return -SLUICE_EAGAIN;
    size_t n = (size_t)buf[1] << 24 | (size_t)buf[2] << 16 | (size_t)buf[3] << 8 | buf[4];
    if (n > max)
        return -SLUICE_ETOOBIG;
    if (len - RLS_GRPC_PREFIX < n)
        return -SLUICE_EAGAIN;
    *msg = buf + RLS_GRPC_PREFIX;
    *msglen = n;
    *used = RLS_GRPC_PREFIX + n;
    return 0;
}

void rls_grpc_prefix(uint8_t out[RLS_GRPC_PREFIX], size_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

int rls_grpc_timeout(const char *v, size_t len, int64_t *ns)
{
    if (v == NULL || len < 2 || len > 9)
        return -SLUICE_EINVAL;
    int64_t n = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -SLUICE_EINVAL;
        n = n * 10 + (v[i] - '0');
    }
    int64_t mul;
    switch (v[len - 1]) {
    case 'H':
        mul = 3600000000000LL;
        break;
    case 'M':
        mul = 60000000000LL;
        break;
    case 'S':
        mul = 1000000000LL;
        break;
    case 'm':
        mul = 1000000LL;
        break;
    case 'u':
        mul = 1000LL;
        break;
    case 'n':
        mul = 1;
        break;
    default:
        return -SLUICE_EINVAL;
    }
    if (__builtin_mul_overflow(n, mul, ns))
        *ns = INT64_MAX;
    return 0;
}
