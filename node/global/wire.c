/* wire: codec of global-limit messages (see wire.h for the format). */
#include "wire.h"

#include <string.h>

#include "sluice/error.h"

/* ---- encoding ------------------------------------------------------------ */

/* A scratch encoder over [p, end): every put checks room and sets bad. */
struct enc {
    uint8_t *p, *end;
    int bad;
};

static void wire__put(struct enc *e, const void *src, size_t n)
{
    if (e->bad || (size_t)(e->end - e->p) < n) {
        e->bad = 1;
        return;
    }
    memcpy(e->p, src, n);
    e->p += n;
}

static void wire__put_be(struct enc *e, uint8_t tag, uint64_t v, int n)
{
    uint8_t b[9];
    b[0] = tag;
    for (int i = n; i >= 1; i--) {
        b[i] = (uint8_t)v;
        v >>= 8;
    }
    wire__put(e, b, (size_t)n + 1);
}

static void wire__uint(struct enc *e, uint64_t v)
{
    if (v <= 0x7f) {
        uint8_t b = (uint8_t)v;
        wire__put(e, &b, 1);
    } else if (v <= 0xff) {
        wire__put_be(e, 0xcc, v, 1);
    } else if (v <= 0xffff) {
        wire__put_be(e, 0xcd, v, 2);
    } else if (v <= 0xffffffffu) {
        wire__put_be(e, 0xce, v, 4);
    } else {
        wire__put_be(e, 0xcf, v, 8);
    }
}

static void wire__int(struct enc *e, int64_t v)
{
    if (v >= 0) {
        wire__uint(e, (uint64_t)v);
    } else if (v >= -32) {
        uint8_t b = (uint8_t)(int8_t)v;
        wire__put(e, &b, 1);
    } else if (v >= INT8_MIN) {
        wire__put_be(e, 0xd0, (uint64_t)v, 1);
    } else if (v >= INT16_MIN) {
        wire__put_be(e, 0xd1, (uint64_t)v, 2);
    } else if (v >= INT32_MIN) {
        wire__put_be(e, 0xd2, (uint64_t)v, 4);
    } else {
        wire__put_be(e, 0xd3, (uint64_t)v, 8);
    }
}

static void wire__bin(struct enc *e, const char *s, size_t n)
{
    if (n <= 0xff)
        wire__put_be(e, 0xc4, n, 1);
    else
        wire__put_be(e, 0xc5, n, 2);
    wire__put(e, s, n);
}

uint64_t wire_life_tag(uint64_t life)
{
    uint64_t t = (life ^ (life >> 32)) & 0xffffffffu;
    return t != 0 ? t : 1;
}

void wire_writer_init(struct wire_writer *w, uint8_t *buf, size_t cap, enum wire_type type,
                      uint64_t life, uint64_t from)
{
    w->buf = buf;
    w->cap = cap;
    w->len = cap >= WIRE_HEADER ? WIRE_HEADER : cap;
    w->n = 0;
    w->type = (uint8_t)type;
    w->life = life;
    w->from = from;
}

/* Commits an entry encoded into [buf + len, e.p) if it fitted. */
static int wire__commit(struct wire_writer *w, const struct enc *e)
{
    if (e->bad)
        return -SLUICE_ETOOBIG;
    w->len = (size_t)(e->p - w->buf);
    w->n++;
    return 0;
}

int wire_add_report(struct wire_writer *w, const struct wire_report *r)
{
    if (w->type != WIRE_REPORT || r->klen == 0 || r->klen > WIRE_KEY_MAX)
        return -SLUICE_EINVAL;
    if (w->cap < WIRE_HEADER)
        return -SLUICE_ETOOBIG;
    struct enc e = {w->buf + w->len, w->buf + w->cap, 0};
    uint8_t a = 0x9f; /* fixarray(15) */
    wire__put(&e, &a, 1);
    wire__bin(&e, r->key, r->klen);
    wire__uint(&e, r->kind);
    wire__uint(&e, r->policy);
    wire__int(&e, r->burst);
    wire__int(&e, r->count);
    wire__int(&e, r->period_ns);
    wire__int(&e, r->precision);
    wire__uint(&e, r->demand_milli);
    wire__uint(&e, r->admitted);
    wire__uint(&e, r->frozen_share);
    wire__uint(&e, r->period_ms);
    wire__uint(&e, r->flags);
    wire__uint(&e, r->tokens_milli);
    wire__uint(&e, r->granted_milli);
    wire__uint(&e, r->leased_by);
    return wire__commit(w, &e);
}

int wire_add_lease(struct wire_writer *w, const struct wire_lease *l)
{
    if (w->type != WIRE_LEASE || l->klen == 0 || l->klen > WIRE_KEY_MAX || l->share > WIRE_ONE)
        return -SLUICE_EINVAL;
    if (w->cap < WIRE_HEADER)
        return -SLUICE_ETOOBIG;
    struct enc e = {w->buf + w->len, w->buf + w->cap, 0};
    uint8_t a = 0x98; /* fixarray(8) */
    wire__put(&e, &a, 1);
    wire__bin(&e, l->key, l->klen);
    wire__uint(&e, l->share);
    wire__uint(&e, l->flags);
    wire__uint(&e, l->grant_milli);
    wire__uint(&e, l->free);
    wire__int(&e, l->level_milli);
    wire__uint(&e, l->demand_milli);
    wire__uint(&e, l->seen);
    return wire__commit(w, &e);
}

size_t wire_writer_finish(struct wire_writer *w)
{
    if (w->cap < WIRE_HEADER)
        return 0;
    struct enc e = {w->buf, w->buf + WIRE_HEADER, 0};
    uint8_t h[3] = {0x95, WIRE_VERSION, w->type};
    wire__put(&e, h, 3);
    wire__put_be(&e, 0xcf, w->life, 8);
    wire__put_be(&e, 0xcf, w->from, 8);
    wire__put_be(&e, 0xdd, w->n, 4);
    return w->len;
}

/* ---- decoding ------------------------------------------------------------ */

struct dec {
    const uint8_t *p, *end;
};

static const uint8_t *wire__take(struct dec *d, size_t n)
{
    if ((size_t)(d->end - d->p) < n)
        return NULL;
    const uint8_t *r = d->p;
    d->p += n;
    return r;
}

static uint64_t wire__be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Any msgpack integer: *neg set for negative values (*v then holds the
 * two's complement); *neg = 2 for an unsigned value above INT64_MAX. */
static int wire__intany(struct dec *d, uint64_t *v, int *neg)
{
    const uint8_t *t = wire__take(d, 1), *p;
    int n, sign = 0;
    if (t == NULL)
        return -SLUICE_EPROTO;
    *neg = 0;
    if (*t <= 0x7f) {
        *v = *t;
        return 0;
    }
    if (*t >= 0xe0) {
        *v = (uint64_t)(int64_t)(int8_t)*t;
        *neg = 1;
        return 0;
    }
    switch (*t) {
    case 0xcc:
        n = 1;
        break;
    case 0xcd:
        n = 2;
        break;
    case 0xce:
        n = 4;
        break;
    case 0xcf:
        n = 8;
        break;
    case 0xd0:
        n = 1;
        sign = 1;
        break;
    case 0xd1:
        n = 2;
        sign = 1;
        break;
    case 0xd2:
        n = 4;
        sign = 1;
        break;
    case 0xd3:
        n = 8;
        sign = 1;
        break;
    default:
        return -SLUICE_EPROTO;
    }
    if ((p = wire__take(d, (size_t)n)) == NULL)
        return -SLUICE_EPROTO;
    uint64_t u = wire__be(p, n);
    if (sign && n < 8 && ((u >> (8 * n - 1)) & 1u))
        u |= ~(uint64_t)0 << (8 * n);
    *v = u;
    *neg = sign && (u >> 63) != 0;
    if (!sign && n == 8 && (u >> 63) != 0)
        *neg = 2;
    return 0;
}

static int wire__u64(struct dec *d, uint64_t max, uint64_t *out)
{
    int neg;
    if (wire__intany(d, out, &neg) != 0 || neg == 1 || *out > max)
        return -SLUICE_EPROTO;
    return 0;
}

static int wire__i64(struct dec *d, int64_t *out)
{
    uint64_t v;
    int neg;
    if (wire__intany(d, &v, &neg) != 0 || neg == 2)
        return -SLUICE_EPROTO;
    *out = (int64_t)v; /* two's complement either way */
    return 0;
}

static int wire__key(struct dec *d, const char **key, size_t *klen)
{
    const uint8_t *t = wire__take(d, 1), *p;
    size_t n;
    if (t == NULL)
        return -SLUICE_EPROTO;
    if (*t == 0xc4 && (p = wire__take(d, 1)) != NULL)
        n = p[0];
    else if (*t == 0xc5 && (p = wire__take(d, 2)) != NULL)
        n = (size_t)wire__be(p, 2);
    else
        return -SLUICE_EPROTO;
    if (n == 0 || n > WIRE_KEY_MAX || (p = wire__take(d, n)) == NULL)
        return -SLUICE_EPROTO;
    *key = (const char *)p;
    *klen = n;
    return 0;
}

static int wire__report(struct dec *d, struct wire_report *r)
{
    const uint8_t *a = wire__take(d, 1);
    uint64_t kind, pol;
    if (a == NULL || *a != 0x9f || wire__key(d, &r->key, &r->klen) != 0 ||
        wire__u64(d, 255, &kind) != 0 || wire__u64(d, 255, &pol) != 0 ||
        wire__i64(d, &r->burst) != 0 || wire__i64(d, &r->count) != 0 ||
        wire__i64(d, &r->period_ns) != 0 || wire__i64(d, &r->precision) != 0 ||
        wire__u64(d, UINT64_MAX, &r->demand_milli) != 0 ||
        wire__u64(d, UINT64_MAX, &r->admitted) != 0 ||
        wire__u64(d, WIRE_ONE, &r->frozen_share) != 0 ||
        wire__u64(d, UINT32_MAX, &r->period_ms) != 0 || wire__u64(d, 255, &r->flags) != 0 ||
        wire__u64(d, UINT64_MAX, &r->tokens_milli) != 0 ||
        wire__u64(d, UINT32_MAX, &r->granted_milli) != 0 ||
        wire__u64(d, UINT32_MAX, &r->leased_by) != 0)
        return -SLUICE_EPROTO;
    r->kind = (uint8_t)kind;
    r->policy = (uint8_t)pol;
    return 0;
}

static int wire__lease(struct dec *d, struct wire_lease *l)
{
    const uint8_t *a = wire__take(d, 1);
    if (a == NULL || *a != 0x98 || wire__key(d, &l->key, &l->klen) != 0 ||
        wire__u64(d, WIRE_ONE, &l->share) != 0 || wire__u64(d, 255, &l->flags) != 0 ||
        wire__u64(d, UINT32_MAX, &l->grant_milli) != 0 ||
        wire__u64(d, WIRE_FREE_MAX, &l->free) != 0 || wire__i64(d, &l->level_milli) != 0 ||
        wire__u64(d, UINT64_MAX, &l->demand_milli) != 0 || wire__u64(d, UINT32_MAX, &l->seen) != 0)
        return -SLUICE_EPROTO;
    return 0;
}

/* One pass over the entries; delivers them when h is not NULL. */
static int wire__entries(const uint8_t *buf, size_t len, const struct wire_handler *h,
                         uint8_t *type, uint64_t *life)
{
    struct dec d = {buf, buf + len};
    const uint8_t *p = wire__take(&d, 3);
    /* Version 1's header was an array of 4: told apart by its version. */
    if (p == NULL || (p[0] != 0x95 && p[0] != 0x94))
        return -SLUICE_EPROTO;
    if (p[1] != WIRE_VERSION || (p[2] != WIRE_REPORT && p[2] != WIRE_LEASE))
        return -SLUICE_EINVAL;
    uint64_t from;
    *type = p[2];
    if (p[0] != 0x95 || wire__u64(&d, UINT64_MAX, life) != 0 ||
        wire__u64(&d, UINT64_MAX, &from) != 0)
        return -SLUICE_EPROTO;
    const uint8_t *t = wire__take(&d, 1);
    uint64_t n;
    if (t == NULL)
        return -SLUICE_EPROTO;
    if (*t >= 0x90 && *t <= 0x9f)
        n = *t & 0x0fu;
    else if (*t == 0xdc && (p = wire__take(&d, 2)) != NULL)
        n = wire__be(p, 2);
    else if (*t == 0xdd && (p = wire__take(&d, 4)) != NULL)
        n = wire__be(p, 4);
    else
        return -SLUICE_EPROTO;
    /* Every entry takes at least 5 bytes: a count beyond that is a lie. */
    if (n > len / 5)
        return -SLUICE_EPROTO;
    for (uint64_t i = 0; i < n; i++) {
        if (*type == WIRE_REPORT) {
            struct wire_report r;
            if (wire__report(&d, &r) != 0)
                return -SLUICE_EPROTO;
            if (h != NULL && h->report != NULL)
                h->report(h->ud, *life, &r);
        } else {
            struct wire_lease l;
            if (wire__lease(&d, &l) != 0)
                return -SLUICE_EPROTO;
            l.owner_life = from;
            if (h != NULL && h->lease != NULL)
                h->lease(h->ud, *life, &l);
        }
    }
    if (d.p != d.end)
        return -SLUICE_EPROTO;
    return (int)n;
}

int wire_decode(const uint8_t *buf, size_t len, const struct wire_handler *h)
{
    uint8_t type;
    uint64_t life;
    if (buf == NULL || len == 0)
        return -SLUICE_EPROTO;
    int rc = wire__entries(buf, len, NULL, &type, &life);
    if (rc < 0 || h == NULL)
        return rc;
    return wire__entries(buf, len, h, &type, &life);
}
