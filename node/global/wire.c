/*
 * wire: codec of global-limit messages (see wire.h for the format).
 * Encoding is msgpack-c's packer writing into the caller's buffer;
 * decoding walks the bytes once, bounding every count and length by the
 * bytes left before it is trusted, and hands over entries only after the
 * whole batch has passed (wire_decode), from what that walk decoded.
 */
#include "wire.h"

#include <msgpack.h>
#include <stddef.h>
#include <string.h>

#include "sluice/error.h"

/* ---- the field tables (from WIRE_*_FIELDS) ------------------------------------ */

struct wire__field {
    uint8_t id;   /* the map key */
    uint8_t sign; /* WIRE_U or WIRE_I */
    uint8_t size; /* of the member: 1 or 8 bytes */
    size_t off;   /* of the member in its struct */
    uint64_t max; /* WIRE_U: largest value accepted */
};

#define WIRE__REPORT_ROW(id, member, type, sign, max)                                              \
    {id, sign, sizeof(type), offsetof(struct wire_report, member), (uint64_t)(max)},
#define WIRE__LEASE_ROW(id, member, type, sign, max)                                               \
    {id, sign, sizeof(type), offsetof(struct wire_lease, member), (uint64_t)(max)},

static const struct wire__field wire__report_fields[] = {WIRE_REPORT_FIELDS(WIRE__REPORT_ROW)};
static const struct wire__field wire__lease_fields[] = {WIRE_LEASE_FIELDS(WIRE__LEASE_ROW)};

#define WIRE__NREPORT (sizeof(wire__report_fields) / sizeof(wire__report_fields[0]))
#define WIRE__NLEASE  (sizeof(wire__lease_fields) / sizeof(wire__lease_fields[0]))
/* Field ids index a 64-bit "seen" mask. */
_Static_assert(WIRE__NREPORT < 63 && WIRE__NLEASE < 63, "field ids must stay below 64");

/* A member as 64 bits (an int64 as its two's complement). */
static uint64_t wire__get(const void *entry, const struct wire__field *f)
{
    const char *p = (const char *)entry + f->off;
    if (f->size == 1)
        return *(const uint8_t *)p;
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static void wire__set(void *entry, const struct wire__field *f, uint64_t v)
{
    char *p = (char *)entry + f->off;
    if (f->size == 1)
        *(uint8_t *)p = (uint8_t)v;
    else
        memcpy(p, &v, sizeof(v));
}

/* ---- encoding: msgpack-c's packer into the batch's room ------------------------ */

/* Where the packer writes: [p, end); a write that does not fit sets bad. */
struct wire__room {
    uint8_t *p, *end;
    int bad;
};

static int wire__write(void *data, const char *buf, size_t len)
{
    struct wire__room *r = data;
    if (r->bad || (size_t)(r->end - r->p) < len) {
        r->bad = 1;
        return -1;
    }
    memcpy(r->p, buf, len);
    r->p += len;
    return 0;
}

/* Packs one entry (a map: the key, then every field that is not 0) after
 * the entries already in w; commits it only if all of it fitted. */
static int wire__add(struct wire_writer *w, const char *key, size_t klen, const void *entry,
                     const struct wire__field *fields, size_t nfields)
{
    if (w->cap < WIRE_HEADER)
        return -SLUICE_ETOOBIG;
    struct wire__room room = {w->buf + w->len, w->buf + w->cap, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &room, wire__write);
    uint32_t n = 1;
    for (size_t i = 0; i < nfields; i++)
        n += wire__get(entry, &fields[i]) != 0;
    msgpack_pack_map(&pk, n);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_bin(&pk, klen);
    msgpack_pack_bin_body(&pk, key, klen);
    for (size_t i = 0; i < nfields; i++) {
        uint64_t v = wire__get(entry, &fields[i]);
        if (v == 0)
            continue;
        msgpack_pack_uint8(&pk, fields[i].id);
        if (fields[i].sign == WIRE_I)
            msgpack_pack_int64(&pk, (int64_t)v);
        else
            msgpack_pack_uint64(&pk, v);
    }
    if (room.bad)
        return -SLUICE_ETOOBIG;
    w->len = (size_t)(room.p - w->buf);
    w->n++;
    return 0;
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

int wire_add_report(struct wire_writer *w, const struct wire_report *r)
{
    if (w->type != WIRE_REPORT || r->klen == 0 || r->klen > WIRE_KEY_MAX)
        return -SLUICE_EINVAL;
    return wire__add(w, r->key, r->klen, r, wire__report_fields, WIRE__NREPORT);
}

int wire_add_lease(struct wire_writer *w, const struct wire_lease *l)
{
    if (w->type != WIRE_LEASE || l->klen == 0 || l->klen > WIRE_KEY_MAX || l->share > WIRE_ONE)
        return -SLUICE_EINVAL;
    return wire__add(w, l->key, l->klen, l, wire__lease_fields, WIRE__NLEASE);
}

/* The header as the picture in wire.h draws it: fixarray, version, type,
 * two uint64s, an array32. */
_Static_assert(WIRE_HEADER == 1 + 1 + 1 + 9 + 9 + 5, "the batch header is 26 bytes");

size_t wire_writer_finish(struct wire_writer *w)
{
    if (w->cap < WIRE_HEADER)
        return 0;
    struct wire__room room = {w->buf, w->buf + WIRE_HEADER, 0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &room, wire__write);
    msgpack_pack_array(&pk, 5);
    msgpack_pack_uint8(&pk, WIRE_VERSION);
    msgpack_pack_uint8(&pk, w->type);
    msgpack_pack_fix_uint64(&pk, w->life);
    msgpack_pack_fix_uint64(&pk, w->from);
    /* The entries' array always as an array32, whatever its count, so the
     * header's size is known before the count is (msgpack-c packs the
     * smallest form, which would not do here). */
    uint8_t a32[5] = {0xdd, (uint8_t)(w->n >> 24), (uint8_t)(w->n >> 16), (uint8_t)(w->n >> 8),
                      (uint8_t)w->n};
    wire__write(&room, (const char *)a32, sizeof(a32));
    return room.bad ? 0 : w->len;
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

/* Values nested deeper than this in an unknown field are refused. */
#define WIRE__MAX_DEPTH 8

/* Skips one value of any type (an unknown field, from a newer node): every
 * length is checked against the bytes left and nesting is bounded, so
 * hostile input costs at most one pass over its bytes. */
static int wire__skip(struct dec *d, int depth)
{
    const uint8_t *t = wire__take(d, 1), *p;
    uint64_t n = 0, items = 0;
    if (t == NULL || depth > WIRE__MAX_DEPTH)
        return -SLUICE_EPROTO;
    uint8_t c = *t;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)
        return 0;
    if (c >= 0xa0 && c <= 0xbf)
        n = c & 0x1fu;
    else if (c >= 0x90 && c <= 0x9f)
        items = c & 0x0fu;
    else if (c >= 0x80 && c <= 0x8f)
        items = 2u * (c & 0x0fu);
    else {
        switch (c) {
        case 0xcc:
        case 0xd0:
        case 0xd4:
            n = c == 0xd4 ? 2 : 1;
            break;
        case 0xcd:
        case 0xd1:
        case 0xd5:
            n = c == 0xd5 ? 3 : 2;
            break;
        case 0xce:
        case 0xd2:
        case 0xca:
            n = 4;
            break;
        case 0xcf:
        case 0xd3:
        case 0xcb:
            n = 8;
            break;
        case 0xd6:
            n = 5;
            break;
        case 0xd7:
            n = 9;
            break;
        case 0xd8:
            n = 17;
            break;
        case 0xc4:
        case 0xd9:
        case 0xc7:
            if ((p = wire__take(d, 1)) == NULL)
                return -SLUICE_EPROTO;
            n = p[0] + (c == 0xc7 ? 1u : 0u);
            break;
        case 0xc5:
        case 0xda:
        case 0xc8:
            if ((p = wire__take(d, 2)) == NULL)
                return -SLUICE_EPROTO;
            n = wire__be(p, 2) + (c == 0xc8 ? 1u : 0u);
            break;
        case 0xc6:
        case 0xdb:
        case 0xc9:
            if ((p = wire__take(d, 4)) == NULL)
                return -SLUICE_EPROTO;
            n = wire__be(p, 4) + (c == 0xc9 ? 1u : 0u);
            break;
        case 0xdc:
        case 0xde:
            if ((p = wire__take(d, 2)) == NULL)
                return -SLUICE_EPROTO;
            items = wire__be(p, 2) * (c == 0xde ? 2u : 1u);
            break;
        case 0xdd:
        case 0xdf:
            if ((p = wire__take(d, 4)) == NULL)
                return -SLUICE_EPROTO;
            items = wire__be(p, 4) * (c == 0xdf ? 2u : 1u);
            break;
        default: /* 0xc1: never used */
            return -SLUICE_EPROTO;
        }
    }
    if (n > 0 && wire__take(d, (size_t)n) == NULL)
        return -SLUICE_EPROTO;
    /* Every item takes at least a byte: a count beyond the rest is a lie. */
    if (items > (uint64_t)(d->end - d->p))
        return -SLUICE_EPROTO;
    for (uint64_t i = 0; i < items; i++)
        if (wire__skip(d, depth + 1) != 0)
            return -SLUICE_EPROTO;
    return 0;
}

/* One entry: a map with the key (id 1) and fields by id into *entry (which
 * starts zeroed: a missing field is 0).  Unknown ids are skipped; a field
 * twice, a key that is not an unsigned integer, a value of the wrong sign
 * or beyond its bound are errors. */
static int wire__entry(struct dec *d, void *entry, const char **key, size_t *klen,
                       const struct wire__field *fields, size_t nfields)
{
    const uint8_t *t = wire__take(d, 1), *p;
    uint64_t pairs, seen = 0;
    if (t == NULL)
        return -SLUICE_EPROTO;
    if (*t >= 0x80 && *t <= 0x8f)
        pairs = *t & 0x0fu;
    else if (*t == 0xde && (p = wire__take(d, 2)) != NULL)
        pairs = wire__be(p, 2);
    else if (*t == 0xdf && (p = wire__take(d, 4)) != NULL)
        pairs = wire__be(p, 4);
    else
        return -SLUICE_EPROTO;
    if (pairs > (uint64_t)(d->end - d->p) / 2)
        return -SLUICE_EPROTO;
    for (uint64_t i = 0; i < pairs; i++) {
        uint64_t id, v;
        int neg;
        if (wire__u64(d, UINT64_MAX, &id) != 0)
            return -SLUICE_EPROTO;
        if (id < 64) {
            if (seen & ((uint64_t)1 << id))
                return -SLUICE_EPROTO;
            seen |= (uint64_t)1 << id;
        }
        if (id == 1) {
            if (wire__key(d, key, klen) != 0)
                return -SLUICE_EPROTO;
            continue;
        }
        const struct wire__field *f = NULL;
        for (size_t k = 0; k < nfields && f == NULL; k++)
            if (fields[k].id == id)
                f = &fields[k];
        if (f == NULL) {
            if (wire__skip(d, 0) != 0)
                return -SLUICE_EPROTO;
            continue;
        }
        if (wire__intany(d, &v, &neg) != 0)
            return -SLUICE_EPROTO;
        if (f->sign == WIRE_U ? (neg == 1 || v > f->max) : neg == 2)
            return -SLUICE_EPROTO;
        wire__set(entry, f, v);
    }
    return (seen & 2u) ? 0 : -SLUICE_EPROTO; /* the key is required */
}

/* The batch's header: its type, the life it names and the sender's, and
 * its entry count (bounded by the bytes: every entry takes at least 5). */
static int wire__header(struct dec *d, size_t len, uint8_t *type, uint64_t *life, uint64_t *from,
                        uint64_t *n)
{
    const uint8_t *p = wire__take(d, 3);
    /* Version 1's header was an array of 4: told apart by its version. */
    if (p == NULL || (p[0] != 0x95 && p[0] != 0x94))
        return -SLUICE_EPROTO;
    if (p[1] != WIRE_VERSION || (p[2] != WIRE_REPORT && p[2] != WIRE_LEASE))
        return -SLUICE_EINVAL;
    *type = p[2];
    if (p[0] != 0x95 || wire__u64(d, UINT64_MAX, life) != 0 || wire__u64(d, UINT64_MAX, from) != 0)
        return -SLUICE_EPROTO;
    const uint8_t *t = wire__take(d, 1);
    if (t == NULL)
        return -SLUICE_EPROTO;
    if (*t >= 0x90 && *t <= 0x9f)
        *n = *t & 0x0fu;
    else if (*t == 0xdc && (p = wire__take(d, 2)) != NULL)
        *n = wire__be(p, 2);
    else if (*t == 0xdd && (p = wire__take(d, 4)) != NULL)
        *n = wire__be(p, 4);
    else
        return -SLUICE_EPROTO;
    return *n > len / 5 ? -SLUICE_EPROTO : 0;
}

/* An entry of either type, decoded. */
union wire__any {
    struct wire_report r;
    struct wire_lease l;
};

/* Decodes the next entry of a batch of type into *e; 0 or -SLUICE_EPROTO. */
static int wire__next(struct dec *d, uint8_t type, uint64_t from, union wire__any *e)
{
    memset(e, 0, sizeof(*e));
    if (type == WIRE_REPORT)
        return wire__entry(d, &e->r, &e->r.key, &e->r.klen, wire__report_fields, WIRE__NREPORT);
    if (wire__entry(d, &e->l, &e->l.key, &e->l.klen, wire__lease_fields, WIRE__NLEASE) != 0)
        return -SLUICE_EPROTO;
    e->l.owner_life = from;
    return 0;
}

static void wire__deliver(const struct wire_handler *h, uint8_t type, uint64_t life,
                          const union wire__any *e)
{
    if (type == WIRE_REPORT && h->report != NULL)
        h->report(h->ud, life, &e->r);
    else if (type == WIRE_LEASE && h->lease != NULL)
        h->lease(h->ud, life, &e->l);
}

/* Entries a decode keeps from its checking walk to hand over without
 * decoding them again: a batch of a datagram's size holds about 40. */
#define WIRE__KEEP 64

int wire_decode(const uint8_t *buf, size_t len, const struct wire_handler *h)
{
    if (buf == NULL || len == 0)
        return -SLUICE_EPROTO;
    struct dec d = {buf, buf + len};
    uint8_t type;
    uint64_t life, from, n;
    int rc = wire__header(&d, len, &type, &life, &from, &n);
    if (rc != 0)
        return rc;
    /* The checking walk: every entry is decoded, the first WIRE__KEEP
     * kept, and peek sees each; nothing is handed over until the whole
     * batch has passed.  Entries beyond those kept (a batch larger than a
     * datagram's usual size) are decoded again to be handed over. */
    union wire__any kept[WIRE__KEEP], one;
    struct dec rest = d;
    for (uint64_t i = 0; i < n; i++) {
        union wire__any *e = i < WIRE__KEEP ? &kept[i] : &one;
        if (wire__next(&d, type, from, e) != 0)
            return -SLUICE_EPROTO;
        if (i + 1 == WIRE__KEEP)
            rest = d;
        if (h != NULL && h->peek != NULL) {
            if (type == WIRE_REPORT)
                h->peek(h->ud, type, e->r.key, e->r.klen);
            else
                h->peek(h->ud, type, e->l.key, e->l.klen);
        }
    }
    if (d.p != d.end)
        return -SLUICE_EPROTO;
    if (h == NULL)
        return (int)n;
    for (uint64_t i = 0; i < n && i < WIRE__KEEP; i++)
        wire__deliver(h, type, life, &kept[i]);
    for (uint64_t i = WIRE__KEEP; i < n; i++) {
        (void)wire__next(&rest, type, from, &one); /* checked above */
        wire__deliver(h, type, life, &one);
    }
    return (int)n;
}
