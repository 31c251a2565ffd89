/*
 * rls meta: dynamic_metadata's Struct, encoded by hand (see meta.h).
 *
 * Wire format (google/protobuf/struct.proto; tag = field << 3 | type, type
 * 0 varint, 1 fixed64, 2 length-delimited):
 *
 *   Struct     fields (map<string, Value>) = 1: one entry per field
 *                0x0a len | 0x0a len KEY | 0x12 len VALUE
 *   Value      a oneof, written even when it holds its zero:
 *                null_value = 1    0x08 0x00
 *                number_value = 2  0x11 <8 bytes, IEEE double, little endian>
 *                string_value = 3  0x1a len BYTES
 *                bool_value = 4    0x20 0|1
 *                struct_value = 5  0x2a len STRUCT
 *                list_value = 6    0x32 len LISTVALUE
 *   ListValue  values = 1: 0x0a len VALUE, repeated
 *
 * A length comes before its content, so a nested message is opened with a
 * one-byte length, written, then closed: when its length needs more bytes
 * the content moves up to make room.  That keeps one pass over a merged
 * view that is never built (a merged struct's fields are looked up in
 * every source as they are written).
 */
#include "meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"

void rls_meta_clear(struct rls_meta *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++) {
        if (m->keys != NULL)
            free(m->keys[i]);
        if (m->items != NULL)
            rls_meta_clear(&m->items[i]);
    }
    free(m->keys);
    free(m->items);
    free(m->string);
    memset(m, 0, sizeof(*m));
}

/* Room for n more bytes; 0, or sets failed and returns -1. */
static int rls_meta__room(struct rls_meta_buf *b, size_t n)
{
    if (b->failed)
        return -1;
    if (n > b->max || b->len > b->max - n) {
        b->failed = -SLUICE_ETOOBIG;
        return -1;
    }
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    if (cap > b->max)
        cap = b->max;
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL) {
        b->failed = -SLUICE_ENOMEM;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void rls_meta__raw(struct rls_meta_buf *b, const void *s, size_t n)
{
    if (rls_meta__room(b, n) < 0)
        return;
    if (n > 0)
        memcpy(b->p + b->len, s, n);
    b->len += n;
}

static size_t rls_meta__varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t rls_meta__varint_at(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

void rls_meta_put_varint(struct rls_meta_buf *b, uint64_t v)
{
    uint8_t tmp[10];
    rls_meta__raw(b, tmp, rls_meta__varint_at(tmp, v));
}

static void rls_meta__tag(struct rls_meta_buf *b, uint32_t field, uint32_t type)
{
    rls_meta_put_varint(b, (uint64_t)field << 3 | type);
}

static void rls_meta__bytes(struct rls_meta_buf *b, uint32_t field, const char *s, size_t n)
{
    rls_meta__tag(b, field, 2);
    rls_meta_put_varint(b, n);
    rls_meta__raw(b, s, n);
}

/* Opens a length-delimited field; returns where its content starts. */
static size_t rls_meta__open(struct rls_meta_buf *b, uint32_t field)
{
    rls_meta__tag(b, field, 2);
    rls_meta__raw(b, "", 1); /* the length, one byte for now */
    return b->len;
}

static void rls_meta__close(struct rls_meta_buf *b, size_t start)
{
    if (b->failed)
        return;
    size_t n = b->len - start;
    size_t extra = rls_meta__varint_len(n) - 1;
    if (extra > 0) {
        if (rls_meta__room(b, extra) < 0)
            return;
        memmove(b->p + start + extra, b->p + start, n);
        b->len += extra;
    }
    rls_meta__varint_at(b->p + start - 1, n);
}

/* Value fields. */
enum {
    V_NULL = 1,
    V_NUMBER = 2,
    V_STRING = 3,
    V_BOOL = 4,
    V_STRUCT = 5,
    V_LIST = 6,
};

static void rls_meta__number(struct rls_meta_buf *b, double d)
{
    uint64_t u;
    uint8_t le[8];
    memcpy(&u, &d, sizeof(u));
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(u >> (8 * i));
    rls_meta__tag(b, V_NUMBER, 1);
    rls_meta__raw(b, le, sizeof(le));
}

static void rls_meta__string_value(struct rls_meta_buf *b, const char *s, size_t n)
{
    rls_meta__bytes(b, V_STRING, s, n);
}

static void rls_meta__struct_fields(struct rls_meta_buf *b, const struct rls_meta *m);

/* The fields of one Value (what goes inside its length). */
static void rls_meta__value(struct rls_meta_buf *b, const struct rls_meta *m)
{
    size_t at;
    switch (m->kind) {
    case RLS_META_NULL:
        rls_meta__tag(b, V_NULL, 0);
        rls_meta_put_varint(b, 0);
        break;
    case RLS_META_NUMBER:
        rls_meta__number(b, m->number);
        break;
    case RLS_META_STRING:
        rls_meta__string_value(b, m->string, strlen(m->string));
        break;
    case RLS_META_BOOL:
        rls_meta__tag(b, V_BOOL, 0);
        rls_meta_put_varint(b, m->boolean != 0);
        break;
    case RLS_META_STRUCT:
        at = rls_meta__open(b, V_STRUCT);
        rls_meta__struct_fields(b, m);
        rls_meta__close(b, at);
        break;
    case RLS_META_LIST:
        at = rls_meta__open(b, V_LIST);
        for (size_t i = 0; i < m->n && !b->failed; i++) {
            size_t v = rls_meta__open(b, 1);
            rls_meta__value(b, &m->items[i]);
            rls_meta__close(b, v);
        }
        rls_meta__close(b, at);
        break;
    }
}

/* Opens one map entry of a Struct with its key; returns the entry's start
 * and the start of its value (*vat), to be closed value first. */
static size_t rls_meta__entry(struct rls_meta_buf *b, const char *key, size_t *vat)
{
    size_t e = rls_meta__open(b, 1);
    rls_meta__bytes(b, 1, key, strlen(key));
    *vat = rls_meta__open(b, 2);
    return e;
}

static void rls_meta__struct_fields(struct rls_meta_buf *b, const struct rls_meta *m)
{
    for (size_t i = 0; i < m->n && !b->failed; i++) {
        size_t v, e = rls_meta__entry(b, m->keys[i], &v);
        rls_meta__value(b, &m->items[i]);
        rls_meta__close(b, v);
        rls_meta__close(b, e);
    }
}

/* The value of field key in struct m, or NULL. */
static const struct rls_meta *rls_meta__get(const struct rls_meta *m, const char *key)
{
    for (size_t i = 0; m != NULL && m->kind == RLS_META_STRUCT && i < m->n; i++)
        if (strcmp(m->keys[i], key) == 0)
            return &m->items[i];
    return NULL;
}

/* Source s seen through path[0..depth): the struct there, or NULL when
 * some step is missing or not a struct. */
static const struct rls_meta *rls_meta__at(const struct rls_meta *s, const char *const *path,
                                           size_t depth)
{
    for (size_t d = 0; s != NULL && d < depth; d++)
        s = rls_meta__get(s, path[d]);
    return s != NULL && s->kind == RLS_META_STRUCT ? s : NULL;
}

/*
 * The fields of the merge of srcs at path: the sources that hold a struct
 * there, in order; each field name once, its value the first source's;
 * when that value is a struct, the merge one level down.
 */
static void rls_meta__merged(struct rls_meta_buf *b, const struct rls_meta *const *srcs, size_t n,
                             const char **path, size_t depth)
{
    for (size_t s = 0; s < n && !b->failed; s++) {
        const struct rls_meta *m = rls_meta__at(srcs[s], path, depth);
        for (size_t f = 0; m != NULL && f < m->n && !b->failed; f++) {
            const char *k = m->keys[f];
            int seen = 0;
            for (size_t e = 0; e < s && !seen; e++)
                seen = rls_meta__get(rls_meta__at(srcs[e], path, depth), k) != NULL;
            if (seen)
                continue;
            size_t v, e = rls_meta__entry(b, k, &v);
            if (m->items[f].kind == RLS_META_STRUCT && depth < RLS_META_MAX_DEPTH) {
                size_t at = rls_meta__open(b, V_STRUCT);
                path[depth] = k;
                rls_meta__merged(b, srcs + s, n - s, path, depth + 1);
                rls_meta__close(b, at);
            } else {
                rls_meta__value(b, &m->items[f]);
            }
            rls_meta__close(b, v);
            rls_meta__close(b, e);
        }
    }
}

/* envoy.type.v3.RateLimitUnit's names, by number. */
static const char *rls_meta__unit(int u)
{
    static const char *const names[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                        "DAY",     "MONTH",  "YEAR",   "WEEK"};
    return u >= 0 && u < (int)(sizeof(names) / sizeof(names[0])) ? names[u] : NULL;
}

/* The override as protobuf's text format prints it (fields at their zero
 * value left out): "requests_per_unit:42 unit:HOUR". */
static void rls_meta__limit_text(struct rls_meta_buf *b, const struct rls_meta_desc *d)
{
    char text[64];
    size_t n = 0;
    const char *u = rls_meta__unit(d->limit_unit);
    if (d->limit_rpu != 0)
        n += (size_t)snprintf(text + n, sizeof(text) - n, "requests_per_unit:%u", d->limit_rpu);
    if (d->limit_unit != 0) {
        if (u != NULL)
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%sunit:%s", n ? " " : "", u);
        else
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%sunit:%d", n ? " " : "",
                                  d->limit_unit);
    }
    rls_meta__string_value(b, text, n);
}

/* One descriptor's struct fields. */
static void rls_meta__desc(struct rls_meta_buf *b, const struct rls_meta_desc *d)
{
    size_t v, e = rls_meta__entry(b, "entries", &v);
    size_t list = rls_meta__open(b, V_LIST);
    for (size_t i = 0; i < d->nentries; i++) {
        size_t item = rls_meta__open(b, 1);
        size_t s = rls_meta__open(b, V_STRING);
        rls_meta__raw(b, d->keys[i], strlen(d->keys[i]));
        rls_meta__raw(b, "=", 1);
        rls_meta__raw(b, d->values[i], strlen(d->values[i]));
        rls_meta__close(b, s);
        rls_meta__close(b, item);
    }
    rls_meta__close(b, list);
    rls_meta__close(b, v);
    rls_meta__close(b, e);
    if (d->has_limit) {
        e = rls_meta__entry(b, "limit", &v);
        rls_meta__limit_text(b, d);
        rls_meta__close(b, v);
        rls_meta__close(b, e);
    }
    if (d->has_hits) {
        e = rls_meta__entry(b, "hitsAddend", &v);
        rls_meta__number(b, (double)d->hits);
        rls_meta__close(b, v);
        rls_meta__close(b, e);
    }
}

int rls_meta_encode(struct rls_meta_buf *b, const char *domain, uint32_t hits_addend,
                    const struct rls_meta_desc *descs, size_t ndescs,
                    const struct rls_meta *const *passed, size_t npassed)
{
    size_t v, e;
    b->len = 0;
    b->failed = 0;
    e = rls_meta__entry(b, "domain", &v);
    rls_meta__string_value(b, domain, strlen(domain));
    rls_meta__close(b, v);
    rls_meta__close(b, e);

    e = rls_meta__entry(b, "descriptors", &v);
    size_t list = rls_meta__open(b, V_LIST);
    for (size_t i = 0; i < ndescs && !b->failed; i++) {
        size_t item = rls_meta__open(b, 1);
        size_t st = rls_meta__open(b, V_STRUCT);
        rls_meta__desc(b, &descs[i]);
        rls_meta__close(b, st);
        rls_meta__close(b, item);
    }
    rls_meta__close(b, list);
    rls_meta__close(b, v);
    rls_meta__close(b, e);

    if (hits_addend != 0) {
        e = rls_meta__entry(b, "hitsAddend", &v);
        rls_meta__number(b, (double)hits_addend);
        rls_meta__close(b, v);
        rls_meta__close(b, e);
    }

    int any = 0;
    for (size_t i = 0; i < npassed; i++)
        any = any || (passed[i] != NULL && passed[i]->kind == RLS_META_STRUCT && passed[i]->n > 0);
    if (any) {
        const char *path[RLS_META_MAX_DEPTH];
        e = rls_meta__entry(b, "metadata", &v);
        size_t st = rls_meta__open(b, V_STRUCT);
        rls_meta__merged(b, passed, npassed, path, 0);
        rls_meta__close(b, st);
        rls_meta__close(b, v);
        rls_meta__close(b, e);
    }
    return b->failed;
}
