/*
 * delta_*: msgpack codec of global-limit deltas and anti-entropy chunks.
 *
 * Design note.  A packet is one msgpack array.  Its header has a fixed size
 * (the entry count is an array32 patched when the packet is finished), so a
 * writer can fill entries first and still know exactly how much room is
 * left.  Entries are self-contained (key, limit, slots): a receiver that
 * never saw the key builds it from the entry alone.  Integers use msgpack's
 * smallest encoding, so a typical delta entry ("user:42", a small limit, one
 * slot) is about 50 bytes.  The version is checked first; a receiver drops
 * packets of a version it does not know.
 *
 *   packet  = fixarray(4) [ version:uint  type:uint  now_ns:int64  entries ]
 *             +------+------+------+--------------+----------------------+
 *             | 0x94 | 0x01 | type | 0xd3 + 8 B   | 0xdd + 4 B count ... |
 *             +------+------+------+--------------+----------------------+
 *   entries = array32 of entry
 *   entry   = fixarray(9) [ key:bin  kind:uint  policy:uint  burst:int
 *                           count:int  period_ns:int  precision:int  slots
 *                           now-tat:int | nil ]
 *   slots   = array of slot (at most DELTA_SLOTS_MAX)
 *   slot    = fixarray(7) [ node:str (empty = origin)  epoch:uint
 *                           count:int  now-at:int  now-vtat:int
 *                           now-stamp:int  demand_milli:uint ]
 *
 * The tat and the three times of a slot travel as differences from the header's now_ns
 * (saturated to int64), usually 1 to 5 bytes each instead of 9.
 */
#include "delta.h"

#include <msgpack.h>
#include <string.h>

#include "sluice/error.h"

/* ---- encoding ------------------------------------------------------------ */

struct bounded {
    uint8_t *buf;
    size_t cap, len;
};

/* a - b, saturated. */
static int64_t sat_sub(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static int bounded_write(void *data, const char *p, size_t n)
{
    struct bounded *b = data;
    if (n > b->cap - b->len)
        return -1;
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    return 0;
}

void delta_writer_init(struct delta_writer *w, uint8_t *buf, size_t cap, enum delta_type type,
                       int64_t now_ns)
{
    w->buf = buf;
    w->cap = cap;
    w->len = cap >= DELTA_HEADER ? DELTA_HEADER : cap;
    w->nentries = 0;
    w->type = (uint8_t)type;
    w->now_ns = now_ns;
}

int delta_writer_add(struct delta_writer *w, const struct delta_entry *e,
                     const struct delta_slot *slots, size_t n)
{
    if (e->klen == 0 || e->klen > DELTA_KEY_MAX || n > DELTA_SLOTS_MAX)
        return -SLUICE_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (slots[i].node_len > DELTA_NAME_MAX || slots[i].count < 0)
            return -SLUICE_EINVAL;
    if (w->cap < DELTA_HEADER || w->nentries == UINT32_MAX)
        return -SLUICE_ETOOBIG;
    struct bounded b = {w->buf, w->cap, w->len};
    msgpack_packer pk;
    int r = 0;
    msgpack_packer_init(&pk, &b, bounded_write);
    r |= msgpack_pack_array(&pk, 9);
    r |= msgpack_pack_bin(&pk, e->klen);
    r |= msgpack_pack_bin_body(&pk, e->key, e->klen);
    r |= msgpack_pack_uint8(&pk, e->kind);
    r |= msgpack_pack_uint8(&pk, e->policy);
    r |= msgpack_pack_int64(&pk, e->burst);
    r |= msgpack_pack_int64(&pk, e->count);
    r |= msgpack_pack_int64(&pk, e->period_ns);
    r |= msgpack_pack_int64(&pk, e->precision);
    r |= msgpack_pack_array(&pk, n);
    for (size_t i = 0; i < n && r == 0; i++) {
        const struct delta_slot *s = &slots[i];
        r |= msgpack_pack_array(&pk, 7);
        r |= msgpack_pack_str(&pk, s->node_len);
        r |= msgpack_pack_str_body(&pk, s->node, s->node_len);
        r |= msgpack_pack_uint64(&pk, s->epoch);
        r |= msgpack_pack_int64(&pk, s->count);
        r |= msgpack_pack_int64(&pk, sat_sub(w->now_ns, s->at_ns));
        r |= msgpack_pack_int64(&pk, sat_sub(w->now_ns, s->vtat_ns));
        r |= msgpack_pack_int64(&pk, sat_sub(w->now_ns, s->stamp_ns));
        r |= msgpack_pack_uint64(&pk, s->demand_milli);
    }
    if (e->has_tat)
        r |= msgpack_pack_int64(&pk, sat_sub(w->now_ns, e->tat_ns));
    else
        r |= msgpack_pack_nil(&pk);
    if (r != 0)
        return -SLUICE_ETOOBIG; /* w->len untouched: the partial entry is discarded */
    w->len = b.len;
    w->nentries++;
    return 0;
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

size_t delta_writer_finish(struct delta_writer *w)
{
    if (w->cap < DELTA_HEADER)
        return 0;
    uint8_t *h = w->buf;
    h[0] = 0x94;
    h[1] = DELTA_VERSION;
    h[2] = w->type;
    h[3] = 0xd3;
    put_be(h + 4, (uint64_t)w->now_ns, 8);
    h[12] = 0xdd;
    put_be(h + 13, w->nentries, 4);
    return w->len;
}

/* ---- decoding ------------------------------------------------------------ */

struct reader {
    const uint8_t *p;
    size_t len, off;
};

static uint64_t get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Takes n bytes; NULL when fewer are left. */
static const uint8_t *take(struct reader *r, size_t n)
{
    if (n > r->len - r->off)
        return NULL;
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

static int rd_byte(struct reader *r, uint8_t *t)
{
    const uint8_t *p = take(r, 1);
    if (p == NULL)
        return -SLUICE_EPROTO;
    *t = *p;
    return 0;
}

/* Any msgpack integer into a signed or unsigned 64-bit view.  neg is set
 * when the value is negative (then *v holds its two's complement). */
static int rd_intany(struct reader *r, uint64_t *v, int *neg)
{
    uint8_t t;
    const uint8_t *p;
    int n = 0, sign = 0;
    if (rd_byte(r, &t) != 0)
        return -SLUICE_EPROTO;
    *neg = 0;
    if (t <= 0x7f) {
        *v = t;
        return 0;
    }
    if (t >= 0xe0) {
        *v = (uint64_t)(int64_t)(int8_t)t;
        *neg = 1;
        return 0;
    }
    switch (t) {
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
    if ((p = take(r, (size_t)n)) == NULL)
        return -SLUICE_EPROTO;
    uint64_t u = get_be(p, n);
    if (sign && n < 8 && (u >> (8 * n - 1)) & 1u)
        u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    *v = u;
    *neg = sign && (u >> 63) != 0;
    if (!sign && n == 8 && (u >> 63) != 0)
        *neg = 2; /* unsigned above INT64_MAX */
    return 0;
}

static int rd_i64(struct reader *r, int64_t *out)
{
    uint64_t v;
    int neg;
    if (rd_intany(r, &v, &neg) != 0 || neg == 2)
        return -SLUICE_EPROTO;
    if (neg)
        *out = v == ((uint64_t)1 << 63) ? INT64_MIN : -(int64_t)(~v + 1u);
    else
        *out = (int64_t)v;
    return 0;
}

static int rd_u64(struct reader *r, uint64_t *out)
{
    int neg;
    if (rd_intany(r, out, &neg) != 0 || neg == 1)
        return -SLUICE_EPROTO;
    return 0;
}

static int rd_array(struct reader *r, size_t *n)
{
    uint8_t t;
    const uint8_t *p;
    if (rd_byte(r, &t) != 0)
        return -SLUICE_EPROTO;
    if (t >= 0x90 && t <= 0x9f) {
        *n = t & 0x0fu;
    } else if (t == 0xdc && (p = take(r, 2)) != NULL) {
        *n = (size_t)get_be(p, 2);
    } else if (t == 0xdd && (p = take(r, 4)) != NULL) {
        *n = (size_t)get_be(p, 4);
    } else {
        return -SLUICE_EPROTO;
    }
    /* Every element takes at least one byte. */
    return *n <= r->len - r->off ? 0 : -SLUICE_EPROTO;
}

/* bin (want_str 0) or str (want_str 1) of at most max bytes. */
static int rd_bytes(struct reader *r, int want_str, size_t max, const char **s, size_t *n)
{
    uint8_t t;
    const uint8_t *p;
    size_t len;
    if (rd_byte(r, &t) != 0)
        return -SLUICE_EPROTO;
    if (want_str && t >= 0xa0 && t <= 0xbf) {
        len = t & 0x1fu;
    } else if ((t == (want_str ? 0xd9 : 0xc4)) && (p = take(r, 1)) != NULL) {
        len = p[0];
    } else if ((t == (want_str ? 0xda : 0xc5)) && (p = take(r, 2)) != NULL) {
        len = (size_t)get_be(p, 2);
    } else if ((t == (want_str ? 0xdb : 0xc6)) && (p = take(r, 4)) != NULL) {
        len = (size_t)get_be(p, 4);
    } else {
        return -SLUICE_EPROTO;
    }
    if (len > max || (p = take(r, len)) == NULL)
        return -SLUICE_EPROTO;
    *s = (const char *)p;
    *n = len;
    return 0;
}

/* The entry's trailing tat (after its slots): nil or an int. */
static int rd_tat(struct reader *r, int64_t now, struct delta_entry *e)
{
    if (r->off < r->len && r->p[r->off] == 0xc0) {
        r->off++;
        e->has_tat = 0;
        e->tat_ns = 0;
        return 0;
    }
    if (rd_i64(r, &e->tat_ns) != 0)
        return -SLUICE_EPROTO;
    e->has_tat = 1;
    e->tat_ns = sat_sub(now, e->tat_ns);
    return 0;
}

static int rd_entry(struct reader *r, struct delta_entry *e, size_t *nslots)
{
    size_t n;
    uint64_t kind, policy;
    if (rd_array(r, &n) != 0 || n != 9)
        return -SLUICE_EPROTO;
    if (rd_bytes(r, 0, DELTA_KEY_MAX, &e->key, &e->klen) != 0 || e->klen == 0)
        return -SLUICE_EPROTO;
    if (rd_u64(r, &kind) != 0 || kind > 255 || rd_u64(r, &policy) != 0 || policy > 255)
        return -SLUICE_EPROTO;
    e->kind = (uint8_t)kind;
    e->policy = (uint8_t)policy;
    if (rd_i64(r, &e->burst) != 0 || rd_i64(r, &e->count) != 0 || rd_i64(r, &e->period_ns) != 0 ||
        rd_i64(r, &e->precision) != 0)
        return -SLUICE_EPROTO;
    if (rd_array(r, nslots) != 0 || *nslots > DELTA_SLOTS_MAX)
        return -SLUICE_EPROTO;
    return 0;
}

static int rd_slot(struct reader *r, int64_t now, struct delta_slot *s)
{
    size_t n;
    if (rd_array(r, &n) != 0 || n != 7)
        return -SLUICE_EPROTO;
    if (rd_bytes(r, 1, DELTA_NAME_MAX, &s->node, &s->node_len) != 0)
        return -SLUICE_EPROTO;
    if (rd_u64(r, &s->epoch) != 0 || rd_i64(r, &s->count) != 0 || s->count < 0 ||
        rd_i64(r, &s->at_ns) != 0 || rd_i64(r, &s->vtat_ns) != 0 || rd_i64(r, &s->stamp_ns) != 0 ||
        rd_u64(r, &s->demand_milli) != 0)
        return -SLUICE_EPROTO;
    s->at_ns = sat_sub(now, s->at_ns);
    s->vtat_ns = sat_sub(now, s->vtat_ns);
    s->stamp_ns = sat_sub(now, s->stamp_ns);
    return 0;
}

/* One pass over the packet; fn NULL only validates. */
static int walk(const uint8_t *buf, size_t len, enum delta_type *type, int64_t *now_ns,
                delta_slot_fn fn, void *ud)
{
    struct reader r = {buf, len, 0};
    size_t n, nentries;
    uint64_t version, t;
    int64_t now;
    if (buf == NULL || rd_array(&r, &n) != 0 || n != 4)
        return -SLUICE_EPROTO;
    if (rd_u64(&r, &version) != 0)
        return -SLUICE_EPROTO;
    if (version != DELTA_VERSION)
        return -SLUICE_EINVAL;
    if (rd_u64(&r, &t) != 0 || t > DELTA_T_STATE || rd_i64(&r, &now) != 0)
        return -SLUICE_EPROTO;
    if (rd_array(&r, &nentries) != 0)
        return -SLUICE_EPROTO;
    for (size_t i = 0; i < nentries; i++) {
        struct delta_entry e;
        size_t nslots;
        if (rd_entry(&r, &e, &nslots) != 0)
            return -SLUICE_EPROTO;
        /* The tat follows the slots: find it first, then replay them. */
        struct reader slots = r;
        for (size_t j = 0; j < nslots; j++) {
            struct delta_slot s;
            if (rd_slot(&r, now, &s) != 0)
                return -SLUICE_EPROTO;
        }
        if (rd_tat(&r, now, &e) != 0)
            return -SLUICE_EPROTO;
        for (size_t j = 0; fn != NULL && j < nslots; j++) {
            struct delta_slot s;
            if (rd_slot(&slots, now, &s) != 0)
                return -SLUICE_EPROTO;
            fn(ud, &e, &s);
        }
    }
    if (r.off != len)
        return -SLUICE_EPROTO;
    if (type != NULL)
        *type = (enum delta_type)t;
    if (now_ns != NULL)
        *now_ns = now;
    return 0;
}

int delta_decode(const uint8_t *buf, size_t len, enum delta_type *type, int64_t *now_ns,
                 delta_slot_fn fn, void *ud)
{
    int rc = walk(buf, len, type, now_ns, NULL, NULL);
    if (rc != 0 || fn == NULL)
        return rc;
    return walk(buf, len, NULL, NULL, fn, ud);
}
