/*
 * Fuzz target: the HTTP listener's request-head parser (libhttp-parser
 * behind http_parse_request) and the query and header lookups of the
 * decision endpoint, on arbitrary bytes.  The first byte picks the size
 * bound (so the "too big" path is reached as often as the "need more"
 * one); every accepted head must lie inside the input, and its path, query
 * and headers inside the head; a decoded query value must fit its buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "sluice/error.h"

static const char *const seeds[] = {
    "\x40GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "\x40HEAD /health HTTP/1.0\r\n\r\n",
    "\x10POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    "\xffGET /metrics?x=1 HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    "\xffGET /v1/throttle?key=a%20b&policy=p&cost=2 HTTP/1.1\r\nX-Sluice-Key: k\r\n\r\n",
    "\xffGET /v1/throttle?key=%zz&burst=+1 HTTP/1.1\r\n\r\n",
    /* libhttp-parser's head ends past the first empty line (refused). */
    "\xffGET /m?Ro&key= H:\n\r\n1.1\r\nonino:\n\r\n",
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
    struct http_request req;
    int n = http_parse_request(buf, len, max, &req);
    if (n > 0) {
        const char *end = buf + n;
        if ((size_t)n > len || req.path < buf || req.path + req.path_len > end)
            abort();
        if (req.query != NULL && (req.query < buf || req.query + req.query_len > end))
            abort();
        for (size_t i = 0; i < req.nheaders; i++) {
            const struct http_header *h = &req.headers[i];
            if (h->name < buf || h->name + h->name_len > end || h->value < buf ||
                h->value + h->value_len > end)
                abort();
        }
        char v[16];
        int k = http_query_get(req.query, req.query_len, "key", v, sizeof(v));
        if (k >= 0 && ((size_t)k >= sizeof(v) || v[k] != '\0' || strlen(v) != (size_t)k))
            abort();
        if (k < 0 && k != -SLUICE_ENOENT && k != -SLUICE_ETOOBIG && k != -SLUICE_EPROTO)
            abort();
        size_t hl;
        (void)http_request_header(&req, "X-Sluice-Key", &hl);
    }
    return 0;
}
