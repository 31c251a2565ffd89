/*
 * args: the argument helpers every command module shares (see args.h).
 */
#include "args.h"

#include <string.h>
#include <strings.h>

#include "resp.h"
#include "sluice/error.h"

int args_parse_int64(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == len)
        return -SLUICE_EINVAL;
    uint64_t v = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int overflow = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -SLUICE_EINVAL;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (limit - d) / 10)
            overflow = 1; /* keep scanning: junk is EINVAL, not ERANGE */
        else
            v = v * 10 + d;
    }
    if (overflow)
        return -SLUICE_ERANGE;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

int args_is(const char *arg, size_t len, const char *word)
{
    return strlen(word) == len && strncasecmp(arg, word, len) == 0;
}

void args_reply_cell(struct resp_buf *out, const int64_t v[5])
{
    if (resp_buf_reserve(out, 4 + 5 * 24) < 0)
        return;
    char *d = out->data + out->len;
    size_t n = 4;
    memcpy(d, "*5\r\n", 4);
    for (int i = 0; i < 5; i++) {
        d[n++] = ':';
        n += resp_format_int(d + n, v[i]);
        d[n++] = '\r';
        d[n++] = '\n';
    }
    out->len += n;
}
