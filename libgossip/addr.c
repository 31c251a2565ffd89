/* gossip_addr_*: numeric UDP endpoints, parsed and printed without the
 * resolver (names belong to the adapter). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip.h"

static int parse_port(const char *s, uint16_t *port)
{
    if (*s == '\0')
        return -GOSSIP_EINVAL;
    unsigned long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -GOSSIP_EINVAL;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535)
            return -GOSSIP_EINVAL;
    }
    *port = (uint16_t)v;
    return 0;
}

/* Accepts "a.b.c.d:port" and "[v6]:port"; fails with -GOSSIP_EINVAL. */
int gossip_addr_parse(const char *s, struct gossip_addr *out)
{
    char host[64];
    const char *port;
    if (out == NULL)
        return -GOSSIP_EINVAL;
    memset(out, 0, sizeof(*out));
    if (s == NULL)
        return -GOSSIP_EINVAL;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (end == NULL || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(host))
            return -GOSSIP_EINVAL;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        host[end - s - 1] = '\0';
        port = end + 2;
        if (inet_pton(AF_INET6, host, out->ip) != 1)
            return -GOSSIP_EINVAL;
        out->family = 6;
    } else {
        const char *colon = strrchr(s, ':');
        if (colon == NULL || (size_t)(colon - s) >= sizeof(host))
            return -GOSSIP_EINVAL;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        port = colon + 1;
        if (inet_pton(AF_INET, host, out->ip) != 1)
            return -GOSSIP_EINVAL;
        out->family = 4;
    }
    if (parse_port(port, &out->port) != 0) {
        memset(out, 0, sizeof(*out));
        return -GOSSIP_EINVAL;
    }
    return 0;
}

/* Prints "a.b.c.d:port" or "[v6]:port"; -GOSSIP_ETOOBIG if cap is short. */
int gossip_addr_format(const struct gossip_addr *a, char *buf, size_t cap)
{
    char host[INET6_ADDRSTRLEN];
    int n;
    if (a == NULL || buf == NULL)
        return -GOSSIP_EINVAL;
    if (a->family == 4) {
        if (inet_ntop(AF_INET, a->ip, host, sizeof(host)) == NULL)
            return -GOSSIP_EINVAL;
        n = snprintf(buf, cap, "%s:%u", host, (unsigned)a->port);
    } else if (a->family == 6) {
        if (inet_ntop(AF_INET6, a->ip, host, sizeof(host)) == NULL)
            return -GOSSIP_EINVAL;
        n = snprintf(buf, cap, "[%s]:%u", host, (unsigned)a->port);
    } else {
        return -GOSSIP_EINVAL;
    }
    if (n < 0 || (size_t)n >= cap)
        return -GOSSIP_ETOOBIG;
    return 0;
}

int gossip_addr_equal(const struct gossip_addr *a, const struct gossip_addr *b)
{
    if (a->family != b->family || a->port != b->port)
        return 0;
    return memcmp(a->ip, b->ip, a->family == 4 ? 4 : 16) == 0;
}
