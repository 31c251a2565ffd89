/*
 * resp: RESP2 request parser and reply writer.
 *
 * Design note.  A request is either an array of bulk strings or an inline
 * line.  The parser walks the bytes once, remembering its offset between
 * calls, and keeps argument positions as offsets so the caller may move the
 * buffer while a request is incomplete.  Every length is checked against the
 * request bound before any byte of the payload is awaited, so a peer cannot
 * make a connection hold more than max_request bytes for one command.
 *
 * Wire format (requests):
 *
 *   multibulk:  *<argc>\r\n  then argc times  $<len>\r\n<len bytes>\r\n
 *
 *     +---+------+----+---+-----+----+---------+----+---+-----
 *     | * | argc | CRLF | $ | len | CRLF | payload | CRLF | $ | ...
 *     +---+------+----+---+-----+----+---------+----+---+-----
 *
 *   inline:     arg1 SP arg2 SP ... argN [CR] LF      (no leading '*')
 *
 * Replies:  +simple\r\n   -ERR message\r\n   :123\r\n   $<len>\r\n<bytes>\r\n
 *           $-1\r\n (null)   *<n>\r\n followed by n replies
 */
#include "resp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"

/* A length line longer than this is malformed: int64 needs at most 20 chars. */
#define RESP_MAX_LINE 32

enum { MODE_NONE = 0, MODE_MULTIBULK = 1, MODE_INLINE = 2 };

void resp_parser_init(struct resp_parser *p, size_t max_request, size_t max_args)
{
    memset(p, 0, sizeof(*p));
    p->max_request = max_request ? max_request : RESP_DEFAULT_MAX_REQUEST;
    p->max_args = max_args ? max_args : RESP_DEFAULT_MAX_ARGS;
    resp_parser_reset(p);
}

void resp_parser_free(struct resp_parser *p)
{
    free(p->off);
    free(p->argvlen);
    free(p->argv);
    p->off = NULL;
    p->argvlen = NULL;
    p->argv = NULL;
    p->cap = 0;
}

void resp_parser_reset(struct resp_parser *p)
{
    p->mode = MODE_NONE;
    p->nargs = -1;
    p->argi = 0;
    p->bulklen = -1;
    p->pos = 0;
    p->err = "Protocol error";
}

const char *resp_parser_error(const struct resp_parser *p)
{
    return p->err ? p->err : "Protocol error";
}

static int resp__fail(struct resp_parser *p, int code, const char *msg)
{
    p->err = msg;
    return code;
}

/* Grows the argument arrays to hold at least n entries (n <= max_args). */
static int resp__ensure_cap(struct resp_parser *p, size_t n)
{
    if (n <= p->cap)
        return 0;
    size_t cap = p->cap ? p->cap : 8;
    while (cap < n)
        cap *= 2;
    size_t *off = realloc(p->off, cap * sizeof(*off));
    if (off == NULL)
        return -SLUICE_ENOMEM;
    p->off = off;
    size_t *lens = realloc(p->argvlen, cap * sizeof(*lens));
    if (lens == NULL)
        return -SLUICE_ENOMEM;
    p->argvlen = lens;
    const char **argv = realloc(p->argv, cap * sizeof(*argv));
    if (argv == NULL)
        return -SLUICE_ENOMEM;
    p->argv = argv;
    p->cap = cap;
    return 0;
}

/*
 * Reads a "<integer>\r\n" line starting at buf[start].  Returns 1 with *val
 * and *next set, 0 if the line is incomplete, or a negative error (the
 * message names `what`).  Strict: optional '-', then 1..19 digits, nothing
 * else; overflow is an error.
 */
static int resp__read_int_line(struct resp_parser *p, const char *buf, size_t len, size_t start,
                               int64_t *val, size_t *next, const char *badmsg)
{
    size_t avail = len - start;
    size_t window = avail < RESP_MAX_LINE ? avail : RESP_MAX_LINE;
    const char *cr = memchr(buf + start, '\r', window);
    if (cr == NULL) {
        if (avail >= RESP_MAX_LINE)
            return resp__fail(p, -SLUICE_EPROTO, badmsg);
        return 0;
    }
    size_t crpos = (size_t)(cr - buf);
    if (crpos + 1 >= len)
        return 0;
    if (buf[crpos + 1] != '\n')
        return resp__fail(p, -SLUICE_EPROTO, badmsg);
    const char *s = buf + start;
    const char *e = cr;
    int neg = 0;
    if (s < e && *s == '-') {
        neg = 1;
        s++;
    }
    if (s == e || e - s > 19)
        return resp__fail(p, -SLUICE_EPROTO, badmsg);
    uint64_t v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return resp__fail(p, -SLUICE_EPROTO, badmsg);
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return resp__fail(p, -SLUICE_EPROTO, badmsg);
    *val = neg ? -(int64_t)v : (int64_t)v;
    *next = crpos + 2;
    return 1;
}

static void resp__complete(struct resp_parser *p, const char *buf, size_t argc, size_t consumed,
                           struct resp_cmd *out)
{
    for (size_t i = 0; i < argc; i++)
        p->argv[i] = buf + p->off[i];
    out->argc = argc;
    out->argv = p->argv;
    out->argvlen = p->argvlen;
    out->consumed = consumed;
    resp_parser_reset(p);
}

static int resp__parse_inline(struct resp_parser *p, const char *buf, size_t len,
                              struct resp_cmd *out)
{
    const char *nl = memchr(buf + p->pos, '\n', len - p->pos);
    if (nl == NULL) {
        p->pos = len;
        if (len > p->max_request)
            return resp__fail(p, -SLUICE_ETOOBIG, "Protocol error: too big inline request");
        return 0;
    }
    size_t end = (size_t)(nl - buf);
    if (end + 1 > p->max_request)
        return resp__fail(p, -SLUICE_ETOOBIG, "Protocol error: too big inline request");
    size_t consumed = end + 1;
    if (end > 0 && buf[end - 1] == '\r')
        end--;
    size_t argc = 0;
    size_t i = 0;
    while (i < end) {
        while (i < end && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        if (i == end)
            break;
        size_t start = i;
        while (i < end && buf[i] != ' ' && buf[i] != '\t')
            i++;
        if (argc == p->max_args)
            return resp__fail(p, -SLUICE_ETOOBIG, "Protocol error: too many arguments");
        int rc = resp__ensure_cap(p, argc + 1);
        if (rc < 0)
            return resp__fail(p, rc, "out of memory");
        p->off[argc] = start;
        p->argvlen[argc] = i - start;
        argc++;
    }
    resp__complete(p, buf, argc, consumed, out);
    return 1;
}

int resp_parse(struct resp_parser *p, const char *buf, size_t len, struct resp_cmd *out)
{
    if (p->mode == MODE_NONE) {
        if (len == 0)
            return 0;
        p->mode = buf[0] == '*' ? MODE_MULTIBULK : MODE_INLINE;
        p->pos = 0;
    }
    if (p->mode == MODE_INLINE)
        return resp__parse_inline(p, buf, len, out);

    int rc;
    if (p->nargs < 0) {
        int64_t n;
        size_t next;
        rc = resp__read_int_line(p, buf, len, 1, &n, &next,
                                 "Protocol error: invalid multibulk length");
        if (rc <= 0)
            return rc;
        if (n <= 0) {
            /* Redis treats *0 and *-1 as an empty request. */
            resp__complete(p, buf, 0, next, out);
            return 1;
        }
        if ((uint64_t)n > p->max_args)
            return resp__fail(p, -SLUICE_ETOOBIG, "Protocol error: too many arguments");
        p->nargs = n;
        p->pos = next;
    }
    while (p->argi < (size_t)p->nargs) {
        if (p->bulklen < 0) {
            if (p->pos >= len)
                return 0;
            if (buf[p->pos] != '$')
                return resp__fail(p, -SLUICE_EPROTO, "Protocol error: expected '$'");
            int64_t blen;
            size_t next;
            rc = resp__read_int_line(p, buf, len, p->pos + 1, &blen, &next,
                                     "Protocol error: invalid bulk length");
            if (rc <= 0)
                return rc;
            if (blen < 0)
                return resp__fail(p, -SLUICE_EPROTO, "Protocol error: invalid bulk length");
            if ((uint64_t)blen > p->max_request || next + (size_t)blen + 2 > p->max_request)
                return resp__fail(p, -SLUICE_ETOOBIG, "Protocol error: request too large");
            p->bulklen = blen;
            p->pos = next;
        }
        size_t need = (size_t)p->bulklen + 2;
        if (len - p->pos < need)
            return 0;
        if (buf[p->pos + (size_t)p->bulklen] != '\r' ||
            buf[p->pos + (size_t)p->bulklen + 1] != '\n')
            return resp__fail(p, -SLUICE_EPROTO, "Protocol error: expected CRLF after bulk string");
        rc = resp__ensure_cap(p, p->argi + 1);
        if (rc < 0)
            return resp__fail(p, rc, "out of memory");
        p->off[p->argi] = p->pos;
        p->argvlen[p->argi] = (size_t)p->bulklen;
        p->argi++;
        p->pos += need;
        p->bulklen = -1;
    }
    resp__complete(p, buf, p->argi, p->pos, out);
    return 1;
}

/* ---- writer ---- */

void resp_buf_init(struct resp_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void resp_buf_free(struct resp_buf *b)
{
    free(b->data);
    resp_buf_init(b);
}

int resp_buf_reserve(struct resp_buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return 0;
    if (n > SIZE_MAX / 2 - b->len)
        return -SLUICE_ENOMEM;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (d == NULL)
        return -SLUICE_ENOMEM;
    b->data = d;
    b->cap = cap;
    return 0;
}

int resp_add_raw(struct resp_buf *b, const char *p, size_t n)
{
    if (resp_buf_reserve(b, n) < 0)
        return -SLUICE_ENOMEM;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

size_t resp_format_int(char *dst, int64_t v)
{
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    size_t len = 0;
    if (v < 0)
        dst[len++] = '-';
    while (n > 0)
        dst[len++] = tmp[--n];
    return len;
}

/* Appends <prefix><v>\r\n. */
static int resp__add_prefixed_int(struct resp_buf *b, char prefix, int64_t v)
{
    if (resp_buf_reserve(b, 24) < 0)
        return -SLUICE_ENOMEM;
    char *d = b->data + b->len;
    d[0] = prefix;
    size_t n = 1 + resp_format_int(d + 1, v);
    d[n++] = '\r';
    d[n++] = '\n';
    b->len += n;
    return 0;
}

int resp_add_int(struct resp_buf *b, int64_t v)
{
    return resp__add_prefixed_int(b, ':', v);
}

int resp_add_array(struct resp_buf *b, size_t n)
{
    return resp__add_prefixed_int(b, '*', (int64_t)n);
}

int resp_add_null(struct resp_buf *b)
{
    return resp_add_raw(b, "$-1\r\n", 5);
}

int resp_add_map(struct resp_buf *b, size_t npairs)
{
    return resp__add_prefixed_int(b, '%', (int64_t)npairs);
}

int resp_add_null3(struct resp_buf *b)
{
    return resp_add_raw(b, "_\r\n", 3);
}

/* Appends <prefix><line>\r\n with CR/LF in line turned into spaces. */
static int resp__add_line(struct resp_buf *b, char prefix, const char *line)
{
    size_t n = strlen(line);
    if (resp_buf_reserve(b, n + 3) < 0)
        return -SLUICE_ENOMEM;
    char *d = b->data + b->len;
    d[0] = prefix;
    for (size_t i = 0; i < n; i++)
        d[1 + i] = (line[i] == '\r' || line[i] == '\n') ? ' ' : line[i];
    d[n + 1] = '\r';
    d[n + 2] = '\n';
    b->len += n + 3;
    return 0;
}

int resp_add_simple(struct resp_buf *b, const char *str)
{
    return resp__add_line(b, '+', str);
}

int resp_add_error(struct resp_buf *b, const char *msg)
{
    return resp__add_line(b, '-', msg);
}

int resp_add_errorf(struct resp_buf *b, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return resp__add_line(b, '-', msg);
}

int resp_add_bulk(struct resp_buf *b, const char *p, size_t n)
{
    if (resp_buf_reserve(b, n + 32) < 0)
        return -SLUICE_ENOMEM;
    resp__add_prefixed_int(b, '$', (int64_t)n);
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len++] = '\r';
    b->data[b->len++] = '\n';
    return 0;
}

int resp_add_bulk_str(struct resp_buf *b, const char *s)
{
    return resp_add_bulk(b, s, strlen(s));
}

int resp_add_pair_int(struct resp_buf *b, const char *k, int64_t v)
{
    if (resp_add_bulk_str(b, k) < 0)
        return -SLUICE_ENOMEM;
    return resp_add_int(b, v);
}

int resp_add_pair_str(struct resp_buf *b, const char *k, const char *v)
{
    if (resp_add_bulk_str(b, k) < 0)
        return -SLUICE_ENOMEM;
    return resp_add_bulk_str(b, v);
}
