/*
 * uv.c: the libuv adapter that drives one sans-I/O gossip node.
 *
 * Design note.  The core (libgossip/io.h) is pure state: it is handed
 * datagrams and the time, and hands back datagrams and its next deadline.  So
 * the adapter is small: one UDP socket, one timer re-armed at the core's
 * deadline after every call into the core, one repeating timer for DNS
 * re-resolution.  Sends try the non-blocking path first (uv_udp_try_send, no
 * allocation); only when the kernel queue is full is the datagram copied and
 * queued (bounded), because the core's buffer is valid only during the call.
 *
 * Lifetime: libuv closes handles asynchronously, so the adapter counts what is
 * still open or in flight (three handles, lookups, queued sends) and frees
 * itself when the count reaches zero after gossip_uv_stop.
 *
 * Timer arithmetic: libuv timers run on the loop's cached millisecond clock
 * (uv_now), which may lag uv_hrtime().  The delay is computed from uv_now
 * after uv_update_time and rounded up, so the timer never fires before the
 * deadline in uv_hrtime() terms and the core is not woken for nothing.
 */
#include "gossip/uv.h"
#include "gossip/error.h"
#include "io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#define RECV_BUF_BYTES 65536
#define SEND_QUEUE_MAX 256           /* copied datagrams waiting for the kernel */
#define NAMES_MAX      32            /* entries in a join list */
#define JOIN_MAX       64            /* addresses joined per resolution round */
#define MAX_DELAY_MS   3600000ull    /* cap on one timer arming */
#define SOCK_BUF_BYTES (1024 * 1024) /* requested kernel buffers; best effort */

struct uv_name {
    char host[256];
    char port[6];
};

struct dns_req {
    uv_getaddrinfo_t req;
    struct gossip_uv *h;
    int slot; /* index in h->reqs */
};

struct send_req {
    uv_udp_send_t req;
    struct gossip_uv *h;
    size_t len;
    uint8_t data[];
};

struct gossip_uv {
    uv_loop_t *loop;
    uv_udp_t udp;
    uv_timer_t timer;
    uv_timer_t dns_timer;
    struct gossip_node *node;
    struct gossip_addr local;
    int in_core;       /* inside gossip_node_receive/tick: arm afterwards */
    int stop_deferred; /* gossip_uv_stop called from inside the core */
    int started;       /* handles initialised: the timer may be armed */
    int stopping;      /* gossip_uv_stop was called */
    int refs;          /* open handles + lookups + queued sends */
    size_t send_inflight;
    void (*on_closed)(void *ud);
    void *closed_ud;

    struct uv_name *names;
    size_t nnames;
    int64_t dns_interval_ms;
    struct dns_req *reqs[NAMES_MAX]; /* lookups of the current round */
    int dns_pending;                 /* lookups in flight */
    int dns_again;                   /* list replaced during a round: redo */
    struct gossip_addr found[JOIN_MAX];
    size_t nfound;

    struct gossip_uv_stats stats;
    uint8_t recv_buf[RECV_BUF_BYTES];
};

/* ---- address conversion ------------------------------------------------- */

static int to_sockaddr(const struct gossip_addr *a, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (a->family == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(a->port);
        memcpy(&sin->sin_addr, a->ip, 4);
        return 0;
    }
    if (a->family == 6) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(a->port);
        memcpy(&sin6->sin6_addr, a->ip, 16);
        return 0;
    }
    return -GOSSIP_EINVAL;
}

static int from_sockaddr(const struct sockaddr *sa, struct gossip_addr *a)
{
    memset(a, 0, sizeof(*a));
    if (sa == NULL)
        return -GOSSIP_EINVAL;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        a->family = 4;
        a->port = ntohs(sin->sin_port);
        memcpy(a->ip, &sin->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        a->family = 6;
        a->port = ntohs(sin6->sin6_port);
        memcpy(a->ip, &sin6->sin6_addr, 16);
        return 0;
    }
    return -GOSSIP_EINVAL;
}

static int is_wildcard(const struct gossip_addr *a)
{
    size_t n = a->family == 4 ? 4 : 16;
    for (size_t i = 0; i < n; i++)
        if (a->ip[i] != 0)
            return 0;
    return 1;
}

/* ---- lifetime ----------------------------------------------------------- */

static void unref(struct gossip_uv *h)
{
    if (--h->refs > 0)
        return;
    void (*cb)(void *) = h->on_closed;
    void *ud = h->closed_ud;
    free(h->names);
    free(h);
    if (cb != NULL)
        cb(ud);
}

static void on_handle_closed(uv_handle_t *handle)
{
    unref(handle->data);
}

/* ---- the timer ---------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

/*
 * Arms the core timer at the node's next deadline.  after_tick: the core was
 * just ticked; if it still reports a deadline in the past, wait a millisecond
 * instead of spinning.
 */
static void arm(struct gossip_uv *h, int after_tick)
{
    if (!h->started || h->stopping || h->node == NULL)
        return;
    int64_t deadline = gossip_node_next_deadline(h->node);
    uv_update_time(h->loop);
    uint64_t base_ms = uv_now(h->loop);
    uint64_t delay;
    int64_t base_ns = (int64_t)(base_ms * 1000000ull);
    if (deadline <= base_ns) {
        delay = after_tick && deadline <= (int64_t)uv_hrtime() ? 1 : 0;
    } else {
        uint64_t d = (uint64_t)(deadline - base_ns);
        delay = d / 1000000ull + (d % 1000000ull != 0);
        if (delay > MAX_DELAY_MS)
            delay = MAX_DELAY_MS;
    }
    uv_timer_start(&h->timer, on_timer, delay, 0);
}

static void stop_now(struct gossip_uv *h);

/* Leaves the core; finishes a stop requested from inside it.  Returns 0 if
 * the adapter is now stopping. */
static int core_done(struct gossip_uv *h)
{
    h->in_core = 0;
    if (h->stop_deferred) {
        stop_now(h);
        return 0;
    }
    return 1;
}

static void on_timer(uv_timer_t *t)
{
    struct gossip_uv *h = t->data;
    if (h->stopping || h->node == NULL)
        return;
    h->in_core = 1;
    gossip_node_tick(h->node, (int64_t)uv_hrtime());
    if (core_done(h))
        arm(h, 1);
}

/* ---- io vtable given to the core ---------------------------------------- */

static void on_send_done(uv_udp_send_t *req, int status)
{
    struct send_req *s = req->data;
    struct gossip_uv *h = s->h;
    if (status != 0)
        h->stats.send_errors++;
    h->send_inflight--;
    free(s);
    unref(h);
}

static int io_send(void *ctx, const struct gossip_addr *to, const uint8_t *buf, size_t len)
{
    struct gossip_uv *h = ctx;
    struct sockaddr_storage ss;
    if (h->stopping || to == NULL || to->family != h->local.family || to_sockaddr(to, &ss) != 0) {
        h->stats.send_errors++;
        return -GOSSIP_EINVAL;
    }
    uv_buf_t b = uv_buf_init((char *)(uintptr_t)buf, (unsigned)len);
    int r = uv_udp_try_send(&h->udp, &b, 1, (const struct sockaddr *)&ss);
    if (r >= 0)
        return 0;
    if (r != UV_EAGAIN) {
        h->stats.send_errors++;
        return -GOSSIP_EIO;
    }
    /* The kernel queue is full (or earlier sends are queued): copy and queue. */
    if (h->send_inflight >= SEND_QUEUE_MAX) {
        h->stats.send_errors++;
        return -GOSSIP_EFULL;
    }
    struct send_req *s = malloc(sizeof(*s) + len);
    if (s == NULL) {
        h->stats.send_errors++;
        return -GOSSIP_ENOMEM;
    }
    s->h = h;
    s->len = len;
    memcpy(s->data, buf, len);
    s->req.data = s;
    b = uv_buf_init((char *)s->data, (unsigned)len);
    r = uv_udp_send(&s->req, &h->udp, &b, 1, (const struct sockaddr *)&ss, on_send_done);
    if (r != 0) {
        free(s);
        h->stats.send_errors++;
        return -GOSSIP_EIO;
    }
    h->stats.send_queued++;
    h->send_inflight++;
    h->refs++;
    return 0;
}

static void io_random(void *ctx, void *buf, size_t len)
{
    (void)ctx;
    randombytes_buf(buf, len);
}

static void io_wakeup(void *ctx)
{
    struct gossip_uv *h = ctx;
    if (!h->in_core) /* inside the core: armed right after it returns */
        arm(h, 0);
}

/* ---- receiving ---------------------------------------------------------- */

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    struct gossip_uv *h = handle->data;
    (void)suggested;
    *buf = uv_buf_init((char *)h->recv_buf, sizeof(h->recv_buf));
}

static void on_recv(uv_udp_t *u, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *sa,
                    unsigned flags)
{
    struct gossip_uv *h = u->data;
    if (nread < 0) {
        h->stats.recv_errors++;
        return;
    }
    if (sa == NULL) /* nothing more to read */
        return;
    if (flags & UV_UDP_PARTIAL) {
        h->stats.recv_truncated++;
        return;
    }
    struct gossip_addr from;
    if (h->stopping || h->node == NULL || from_sockaddr(sa, &from) != 0)
        return;
    h->in_core = 1;
    gossip_node_receive(h->node, &from, (const uint8_t *)buf->base, (size_t)nread,
                        (int64_t)uv_hrtime());
    if (core_done(h))
        arm(h, 0);
}

/* ---- start and stop ----------------------------------------------------- */

/* Opens and binds the socket without libuv so that failures need no close
 * callback.  Returns the fd or a negative gossip error. */
static int open_socket(const struct gossip_addr *bind_addr, struct gossip_addr *local)
{
    struct sockaddr_storage ss;
    if (to_sockaddr(bind_addr, &ss) != 0)
        return -GOSSIP_EINVAL;
    int domain = bind_addr->family == 4 ? AF_INET : AF_INET6;
    int fd = socket(domain, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -GOSSIP_EIO;
    if (domain == AF_INET6) {
        int on = 1;
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    }
    socklen_t sl = domain == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        close(fd);
        return -GOSSIP_EIO;
    }
    int sz = SOCK_BUF_BYTES;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        from_sockaddr((struct sockaddr *)&ss, local) != 0) {
        close(fd);
        return -GOSSIP_EIO;
    }
    return fd;
}

int gossip_uv_start(uv_loop_t *loop, const struct gossip_config *cfg,
                    const struct gossip_addr *bind_addr, struct gossip_uv **out)
{
    if (out == NULL)
        return -GOSSIP_EINVAL;
    *out = NULL;
    if (loop == NULL || cfg == NULL || bind_addr == NULL ||
        (bind_addr->family != 4 && bind_addr->family != 6))
        return -GOSSIP_EINVAL;
    if (sodium_init() < 0)
        return -GOSSIP_EIO;
    struct gossip_uv *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -GOSSIP_ENOMEM;
    h->loop = loop;
    int fd = open_socket(bind_addr, &h->local);
    if (fd < 0) {
        free(h);
        return fd;
    }
    struct gossip_config c = *cfg;
    if (c.advertise.family == 0) {
        if (is_wildcard(&h->local)) {
            close(fd);
            free(h);
            return -GOSSIP_EINVAL;
        }
        c.advertise = h->local;
    }
    struct gossip_io io = {.ctx = h, .send = io_send, .random = io_random, .wakeup = io_wakeup};
    int rc = gossip_node_create(&c, &io, (int64_t)uv_hrtime(), &h->node);
    if (rc != 0) {
        close(fd);
        free(h);
        return rc;
    }

    uv_udp_init(loop, &h->udp);
    uv_timer_init(loop, &h->timer);
    uv_timer_init(loop, &h->dns_timer);
    h->udp.data = h->timer.data = h->dns_timer.data = h;
    h->refs = 3;
    h->started = 1;
    if (uv_udp_open(&h->udp, (uv_os_sock_t)fd) != 0) {
        close(fd);
        gossip_uv_stop(h, NULL, NULL); /* frees h once the loop runs */
        return -GOSSIP_EIO;
    }
    if (uv_udp_recv_start(&h->udp, on_alloc, on_recv) != 0) {
        gossip_uv_stop(h, NULL, NULL);
        return -GOSSIP_EIO;
    }
    arm(h, 0);
    *out = h;
    return 0;
}

struct gossip_node *gossip_uv_node(struct gossip_uv *h)
{
    return h != NULL ? h->node : NULL;
}

int gossip_uv_local_addr(const struct gossip_uv *h, struct gossip_addr *out)
{
    if (h == NULL || out == NULL)
        return -GOSSIP_EINVAL;
    *out = h->local;
    return 0;
}

void gossip_uv_stats(const struct gossip_uv *h, struct gossip_uv_stats *out)
{
    if (out == NULL)
        return;
    if (h == NULL)
        memset(out, 0, sizeof(*out));
    else
        *out = h->stats;
}

/* Destroys the node and starts closing; the memory goes in unref(). */
static void stop_now(struct gossip_uv *h)
{
    h->stopping = 1;
    gossip_node_destroy(h->node);
    h->node = NULL;
    for (int i = 0; i < NAMES_MAX; i++)
        if (h->reqs[i] != NULL)
            uv_cancel((uv_req_t *)&h->reqs[i]->req); /* the callback still runs */
    uv_close((uv_handle_t *)&h->udp, on_handle_closed);
    uv_close((uv_handle_t *)&h->timer, on_handle_closed);
    uv_close((uv_handle_t *)&h->dns_timer, on_handle_closed);
}

void gossip_uv_stop(struct gossip_uv *h, void (*on_closed)(void *ud), void *ud)
{
    if (h == NULL || h->stopping || h->stop_deferred)
        return;
    h->on_closed = on_closed;
    h->closed_ud = ud;
    if (h->in_core) /* called from a gossip callback: the node is still busy */
        h->stop_deferred = 1;
    else
        stop_now(h);
}

/* ---- DNS joins ---------------------------------------------------------- */

static void dns_round(struct gossip_uv *h);

struct live_check {
    const struct gossip_addr *addr;
};

static int member_has_addr(void *ud, const struct gossip_member_info *m)
{
    const struct live_check *lc = ud;
    return (m->state == GOSSIP_MEMBER_ALIVE || m->state == GOSSIP_MEMBER_SUSPECT) &&
           gossip_addr_equal(&m->addr, lc->addr);
}

static void dns_finish_round(struct gossip_uv *h)
{
    struct gossip_addr join[JOIN_MAX];
    size_t n = 0;
    for (size_t i = 0; i < h->nfound; i++) {
        struct live_check lc = {.addr = &h->found[i]};
        if (!gossip_node_members(h->node, member_has_addr, &lc))
            join[n++] = h->found[i];
    }
    h->nfound = 0;
    if (n > 0 && gossip_node_join(h->node, join, n) == 0)
        h->stats.dns_joined += n;
    arm(h, 0);
    if (h->dns_again) {
        h->dns_again = 0;
        dns_round(h);
    }
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct dns_req *r = req->data;
    struct gossip_uv *h = r->h;
    h->reqs[r->slot] = NULL;
    free(r);
    h->dns_pending--;
    if (status != 0)
        h->stats.dns_failures++;
    if (!h->stopping) {
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
            struct gossip_addr a;
            if (from_sockaddr(ai->ai_addr, &a) != 0 || a.family != h->local.family)
                continue;
            int dup = 0;
            for (size_t i = 0; i < h->nfound && !dup; i++)
                dup = gossip_addr_equal(&h->found[i], &a);
            if (!dup && h->nfound < JOIN_MAX)
                h->found[h->nfound++] = a;
        }
    }
    uv_freeaddrinfo(res);
    if (!h->stopping && h->dns_pending == 0)
        dns_finish_round(h);
    unref(h);
}

/* Starts one lookup per name unless a round is still in flight. */
static void dns_round(struct gossip_uv *h)
{
    if (h->stopping || h->dns_pending > 0)
        return;
    h->nfound = 0;
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = h->local.family == 4 ? AF_INET : AF_INET6;
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICSERV;
    for (size_t i = 0; i < h->nnames && i < NAMES_MAX; i++) {
        struct dns_req *r = malloc(sizeof(*r));
        if (r == NULL) {
            h->stats.dns_failures++;
            continue;
        }
        r->h = h;
        r->slot = (int)i;
        r->req.data = r;
        h->stats.dns_lookups++;
        /* Counted before the call: a numeric host may resolve synchronously
         * inside uv_getaddrinfo on some platforms. */
        h->reqs[i] = r;
        h->dns_pending++;
        h->refs++;
        if (uv_getaddrinfo(h->loop, &r->req, on_resolved, h->names[i].host, h->names[i].port,
                           &hints) != 0) {
            h->reqs[i] = NULL;
            h->dns_pending--;
            h->refs--;
            free(r);
            h->stats.dns_failures++;
        }
    }
}

static void on_dns_timer(uv_timer_t *t)
{
    dns_round(t->data);
}

/* Parses one "host:port" or "[v6]:port" entry of len bytes. */
static int parse_name(const char *s, size_t len, struct uv_name *out)
{
    const char *host = s, *port;
    size_t hlen;
    if (len > 0 && s[0] == '[') {
        const char *end = memchr(s, ']', len);
        if (end == NULL || (size_t)(end - s) + 1 >= len || end[1] != ':')
            return -GOSSIP_EINVAL;
        host = s + 1;
        hlen = (size_t)(end - s) - 1;
        port = end + 2;
    } else {
        const char *colon = NULL;
        for (size_t i = 0; i < len; i++)
            if (s[i] == ':') {
                if (colon != NULL)
                    return -GOSSIP_EINVAL; /* bare IPv6 needs brackets */
                colon = s + i;
            }
        if (colon == NULL)
            return -GOSSIP_EINVAL;
        hlen = (size_t)(colon - s);
        port = colon + 1;
    }
    size_t plen = len - (size_t)(port - s);
    if (hlen == 0 || hlen >= sizeof(out->host) || plen == 0 || plen >= sizeof(out->port))
        return -GOSSIP_EINVAL;
    unsigned long v = 0;
    for (size_t i = 0; i < plen; i++) {
        if (port[i] < '0' || port[i] > '9')
            return -GOSSIP_EINVAL;
        v = v * 10 + (unsigned long)(port[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -GOSSIP_EINVAL;
    memcpy(out->host, host, hlen);
    out->host[hlen] = '\0';
    memcpy(out->port, port, plen);
    out->port[plen] = '\0';
    return 0;
}

int gossip_uv_join_names(struct gossip_uv *h, const char *list, int64_t interval_ms)
{
    if (h == NULL || list == NULL || interval_ms < 0 || h->stopping)
        return -GOSSIP_EINVAL;
    struct uv_name *names = calloc(NAMES_MAX, sizeof(*names));
    if (names == NULL)
        return -GOSSIP_ENOMEM;
    size_t n = 0;
    const char *p = list;
    for (;;) {
        while (*p == ' ')
            p++;
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (len > 0) {
            if (n == NAMES_MAX || parse_name(p, len, &names[n]) != 0) {
                free(names);
                return -GOSSIP_EINVAL;
            }
            n++;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    if (n == 0) {
        free(names);
        return -GOSSIP_EINVAL;
    }
    free(h->names);
    h->names = names;
    h->nnames = n;
    h->dns_interval_ms = interval_ms;
    uv_timer_stop(&h->dns_timer);
    if (interval_ms > 0)
        uv_timer_start(&h->dns_timer, on_dns_timer, (uint64_t)interval_ms, (uint64_t)interval_ms);
    if (h->dns_pending > 0)
        h->dns_again = 1; /* results of the old list still count; redo after */
    else
        dns_round(h);
    return 0;
}
