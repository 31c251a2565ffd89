/*
 * client: blocking RESP2 client over a Unix socket (see sluice/client.h).
 *
 * Replies are parsed recursively from a read buffer that grows as needed;
 * a reply nested deeper than CLIENT_MAX_DEPTH or with an absurd length is a
 * protocol error, so a hostile server cannot exhaust the stack or memory.
 */
#include "sluice/client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "resp.h"
#include "sluice/error.h"

#define CLIENT_MAX_DEPTH 16
#define CLIENT_MAX_BULK  (512u * 1024 * 1024)

struct sluice_client {
    int fd;
    char *buf;
    size_t len, pos, cap;
};

const char *sluice_client_default_path(void)
{
    /* Per thread: a composed path outlives the call, as documented. */
    static _Thread_local char buf[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const char *env = getenv("SLUICE_SOCKET");
    if (env != NULL && env[0] != '\0')
        return env;
    struct stat st;
    if (stat("/run/sluice", &st) == 0 && S_ISDIR(st.st_mode))
        return "/run/sluice/sluice.sock";
    /* Directories only this user can create in: never a shared /tmp name,
     * which another user could bind first. */
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg != NULL && xdg[0] == '/') {
        int n = snprintf(buf, sizeof(buf), "%s/sluice/sluice.sock", xdg);
        if (n > 0 && (size_t)n < sizeof(buf))
            return buf;
    }
    snprintf(buf, sizeof(buf), "/tmp/sluice-%lu/sluice.sock", (unsigned long)geteuid());
    return buf;
}

/*
 * Whether a client may trust what answers at path, found by default rather
 * than named by the user.  The directory decides, since whoever owns it
 * chooses what is bound in it:
 *   - /run/sluice (a system daemon's): trusted when /run is root's and no
 *     one else may write to it, so only root could have made the directory;
 *     the daemon may be its owner (systemd's RuntimeDirectory);
 *   - any other (the per-user $XDG_RUNTIME_DIR/sluice, /tmp/sluice-UID):
 *     it must be ours (or root's) and private, mode 0700 - a 0755 directory
 *     another user made first under our name is theirs to fill.
 * On success *peer_ok1 and *peer_ok2 are the uids (besides root) the process
 * answering may run as: checked with SO_PEERCRED once connected.  0, or
 * -SLUICE_EIO with errno EPERM.
 */
static int client__trusted(const char *path, uid_t *peer_ok1, uid_t *peer_ok2)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct stat ds, ps;
    uid_t me = geteuid();
    *peer_ok1 = *peer_ok2 = me;
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) {
        errno = EPERM;
        return -SLUICE_EIO;
    }
    *slash = '\0';
    if (stat(dir, &ds) < 0)
        return 0; /* connect reports it */
    if (strcmp(dir, "/run/sluice") == 0) {
        if (stat("/run", &ps) < 0 || ps.st_uid != 0 || (ps.st_mode & (S_IWGRP | S_IWOTH)) != 0 ||
            (ds.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
            errno = EPERM;
            return -SLUICE_EIO;
        }
        *peer_ok2 = ds.st_uid;
        return 0;
    }
    if ((ds.st_uid != me && ds.st_uid != 0) || (ds.st_mode & 077) != 0) {
        errno = EPERM;
        return -SLUICE_EIO;
    }
    return 0;
}

/* The process at the other end of fd runs as root, ok1 or ok2: 0, or
 * -SLUICE_EIO with errno EPERM (an impostor bound the socket). */
static int client__peer_ok(int fd, uid_t ok1, uid_t ok2)
{
#ifdef SO_PEERCRED
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || len != sizeof(cred)) {
        errno = EPERM;
        return -SLUICE_EIO;
    }
    if (cred.uid != 0 && cred.uid != ok1 && cred.uid != ok2) {
        errno = EPERM;
        return -SLUICE_EIO;
    }
#else
    (void)fd;
    (void)ok1;
    (void)ok2;
#endif
    return 0;
}

int sluice_client_connect(const char *path, struct sluice_client **out)
{
    struct sockaddr_un sun;
    int by_default = path == NULL;
    uid_t ok1 = 0, ok2 = 0;
    if (by_default) {
        path = sluice_client_default_path();
        if (client__trusted(path, &ok1, &ok2) < 0)
            return -SLUICE_EIO;
    }
    size_t plen = strlen(path);
    if (plen >= sizeof(sun.sun_path))
        return -SLUICE_EINVAL;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, path, plen + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -SLUICE_EIO;
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
        (by_default && client__peer_ok(fd, ok1, ok2) < 0)) {
        int e = errno;
        close(fd);
        errno = e;
        return -SLUICE_EIO;
    }
    int rc = sluice_client_from_fd(fd, out);
    if (rc < 0)
        close(fd);
    return rc;
}

int sluice_client_from_fd(int fd, struct sluice_client **out)
{
    if (fd < 0)
        return -SLUICE_EINVAL;
    struct sluice_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -SLUICE_ENOMEM;
    c->fd = fd;
    *out = c;
    return 0;
}

void sluice_client_close(struct sluice_client *c)
{
    if (c == NULL)
        return;
    close(c->fd);
    free(c->buf);
    free(c);
}

void sluice_reply_free(struct sluice_reply *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nelem; i++)
        sluice_reply_free(r->elements[i]);
    free(r->elements);
    free(r->str);
    free(r);
}

static int client__write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -SLUICE_EIO;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads more bytes into the buffer; -SLUICE_EIO on EOF or error. */
static int client__fill(struct sluice_client *c)
{
    if (c->cap - c->len < 4096) {
        size_t cap = c->cap ? c->cap * 2 : 16384;
        char *nb = realloc(c->buf, cap);
        if (nb == NULL)
            return -SLUICE_ENOMEM;
        c->buf = nb;
        c->cap = cap;
    }
    for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -SLUICE_EIO;
        c->len += (size_t)r;
        return 0;
    }
}

/* Returns the next line (without CRLF) as [*start, *start+*n), reading as needed. */
static int client__read_line(struct sluice_client *c, size_t *start, size_t *n)
{
    size_t scanned = c->pos;
    for (;;) {
        for (size_t i = scanned; i + 1 < c->len; i++) {
            if (c->buf[i] == '\r' && c->buf[i + 1] == '\n') {
                *start = c->pos;
                *n = i - c->pos;
                c->pos = i + 2;
                return 0;
            }
        }
        scanned = c->len > c->pos ? c->len - 1 : c->pos;
        if (c->len - c->pos > 64 * 1024)
            return -SLUICE_EPROTO;
        int rc = client__fill(c);
        if (rc < 0)
            return rc;
    }
}

static int client__parse_len(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (n > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n || n - i > 18)
        return -SLUICE_EPROTO;
    int64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -SLUICE_EPROTO;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static char *client__copy_str(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s != NULL) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

static int client__read_reply(struct sluice_client *c, int depth, struct sluice_reply **out)
{
    if (depth > CLIENT_MAX_DEPTH)
        return -SLUICE_EPROTO;
    size_t start, n;
    int rc = client__read_line(c, &start, &n);
    if (rc < 0)
        return rc;
    if (n == 0)
        return -SLUICE_EPROTO;
    struct sluice_reply *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -SLUICE_ENOMEM;
    /* Copy the header: c->buf may move while reading the payload. */
    char type = c->buf[start];
    char hdr[64];
    size_t hlen = n - 1 < sizeof(hdr) ? n - 1 : sizeof(hdr) - 1;
    memcpy(hdr, c->buf + start + 1, hlen);
    int64_t v = 0;
    switch (type) {
    case '+':
    case '-':
        r->type = type == '+' ? SLUICE_REPLY_STATUS : SLUICE_REPLY_ERROR;
        r->str = client__copy_str(c->buf + start + 1, n - 1);
        r->len = n - 1;
        if (r->str == NULL)
            rc = -SLUICE_ENOMEM;
        break;
    case ':':
        r->type = SLUICE_REPLY_INTEGER;
        rc = client__parse_len(hdr, hlen, &r->integer);
        break;
    case '$':
        rc = client__parse_len(hdr, hlen, &v);
        if (rc < 0)
            break;
        if (v < 0) {
            r->type = SLUICE_REPLY_NIL;
            break;
        }
        if ((uint64_t)v > CLIENT_MAX_BULK) {
            rc = -SLUICE_EPROTO;
            break;
        }
        /* Grow with the data that actually arrives, not with the claimed
         * length: a lying header costs nothing. */
        while (c->len - c->pos < (size_t)v + 2 && rc == 0)
            rc = client__fill(c);
        if (rc < 0)
            break;
        r->type = SLUICE_REPLY_STRING;
        r->str = client__copy_str(c->buf + c->pos, (size_t)v);
        r->len = (size_t)v;
        c->pos += (size_t)v + 2;
        if (r->str == NULL)
            rc = -SLUICE_ENOMEM;
        break;
    case '*':
        rc = client__parse_len(hdr, hlen, &v);
        if (rc < 0)
            break;
        if (v < 0) {
            r->type = SLUICE_REPLY_NIL;
            break;
        }
        if (v > 1024 * 1024) {
            rc = -SLUICE_EPROTO;
            break;
        }
        r->type = SLUICE_REPLY_ARRAY;
        /* The element array grows as elements arrive, so a header claiming
         * a million elements costs nothing until they are sent. */
        for (int64_t i = 0; i < v && rc == 0; i++) {
            if ((r->nelem & (r->nelem - 1)) == 0) { /* 0, 1, 2, 4, ...: full */
                size_t cap = r->nelem ? r->nelem * 2 : 1;
                struct sluice_reply **ne = realloc(r->elements, cap * sizeof(*ne));
                if (ne == NULL) {
                    rc = -SLUICE_ENOMEM;
                    break;
                }
                r->elements = ne;
            }
            rc = client__read_reply(c, depth + 1, &r->elements[r->nelem]);
            if (rc == 0)
                r->nelem++;
        }
        break;
    default:
        rc = -SLUICE_EPROTO;
    }
    if (rc < 0) {
        sluice_reply_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int sluice_client_command(struct sluice_client *c, int argc, const char *const *argv,
                          const size_t *argvlen, struct sluice_reply **reply)
{
    if (argc <= 0)
        return -SLUICE_EINVAL;
    size_t total = 16;
    for (int i = 0; i < argc; i++)
        total += 32 + (argvlen ? argvlen[i] : strlen(argv[i]));
    char *req = malloc(total);
    if (req == NULL)
        return -SLUICE_ENOMEM;
    size_t n = 0;
    req[n++] = '*';
    n += resp_format_int(req + n, argc);
    req[n++] = '\r';
    req[n++] = '\n';
    for (int i = 0; i < argc; i++) {
        size_t l = argvlen ? argvlen[i] : strlen(argv[i]);
        req[n++] = '$';
        n += resp_format_int(req + n, (int64_t)l);
        req[n++] = '\r';
        req[n++] = '\n';
        memcpy(req + n, argv[i], l);
        n += l;
        req[n++] = '\r';
        req[n++] = '\n';
    }
    int rc = client__write_all(c->fd, req, n);
    free(req);
    if (rc < 0)
        return rc;
    /* Drop bytes of earlier replies so the buffer does not creep. */
    if (c->pos > 0) {
        memmove(c->buf, c->buf + c->pos, c->len - c->pos);
        c->len -= c->pos;
        c->pos = 0;
    }
    return client__read_reply(c, 0, reply);
}
