/*
 * tcp: TCP listeners from "HOST:PORT" (see tcp.h).
 */
#include "tcp.h"

#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "sluice/error.h"

/* Splits "HOST:PORT" or "[V6]:PORT" ("*:PORT" and ":PORT" mean 0.0.0.0)
 * into host and port; the port must be decimal.  0 or -1. */
static int tcp__split_hostport(const char *s, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= plen)
        return -1;
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= hlen)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    if (n == 0 || strcmp(host, "*") == 0)
        snprintf(host, hlen, "0.0.0.0");
    for (const char *p = colon + 1; *p != '\0'; p++)
        if (*p < '0' || *p > '9')
            return -1;
    if (atoi(colon + 1) > 65535)
        return -1;
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

int tcp_listen(uv_loop_t *loop, uv_tcp_t *t, const char *bind, uv_connection_cb cb, int *opened,
               int *port, int *loopback, char *err, size_t errlen)
{
    char host[256], portstr[8];
    *opened = 0;
    if (tcp__split_hostport(bind, host, sizeof(host), portstr, sizeof(portstr)) < 0) {
        snprintf(err, errlen, "'%s' is not HOST:PORT", bind);
        return -SLUICE_EINVAL;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        if (res != NULL)
            freeaddrinfo(res);
        return -SLUICE_EINVAL;
    }
    if (loopback != NULL) {
        const struct sockaddr *sa = res->ai_addr;
        *loopback = (sa->sa_family == AF_INET &&
                     (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127) ||
                    (sa->sa_family == AF_INET6 &&
                     IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr));
    }
    uv_tcp_init(loop, t);
    *opened = 1;
    rc = uv_tcp_bind(t, res->ai_addr, 0);
    freeaddrinfo(res);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)t, TCP_LISTEN_BACKLOG, cb);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", bind, uv_strerror(rc));
        return -SLUICE_EIO;
    }
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (port != NULL && uv_tcp_getsockname(t, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return 0;
}
