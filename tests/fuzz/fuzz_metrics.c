/*
 * Fuzz target: the metrics endpoint's HTTP request-head parser on arbitrary
 * bytes.  The first byte picks the size bound (so the "too big" path is
 * reached as often as the "need more" one); every accepted head must lie
 * inside the input and its path inside the head.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

static const char *const seeds[] = {
    "\x40GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "\x40HEAD /health HTTP/1.0\r\n\r\n",
    "\x10POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    "\xffGET /metrics?x=1 HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    NULL,
};
const char *const *fuzz_seed_inputs(size_t **lens);
const char *const *fuzz_seed_inputs(size_t **lens)
{
    (void)lens; /* text seeds: the driver takes their strlen */
    return seeds;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t max = (size_t)data[0] * 32u + 1u;
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    struct metrics_request req;
    int n = metrics_parse_request(buf, len, max, &req);
    if (n > 0) {
        if ((size_t)n > len || req.path < buf || req.path + req.path_len > buf + n)
            abort();
    }
    return 0;
}
