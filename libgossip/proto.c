/*
 * proto_*: the msgpack codec of libgossip packets; see proto.h for the
 * layout.  Encoding goes through msgpack-c's packer into a bounded buffer;
 * decoding first walks the raw bytes to bound every count (msgpack-c sizes
 * its allocations from the counts it reads), then lets msgpack-c build the
 * object tree and checks each field's type and range.
 */
#include "proto.h"

#include <msgpack.h>
#include <string.h>

/* ---- encoding ------------------------------------------------------------ */

struct bounded {
    uint8_t *buf;
    size_t cap;
    size_t len;
};

static int bounded_write(void *data, const char *p, size_t n)
{
    struct bounded *b = data;
    if (n > b->cap - b->len)
        return -1;
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    return 0;
}

static int pack_str(msgpack_packer *pk, const char *s, size_t len)
{
    if (msgpack_pack_str(pk, len) != 0)
        return -1;
    return msgpack_pack_str_body(pk, s, len);
}

static int pack_addr(msgpack_packer *pk, const struct gossip_addr *a)
{
    uint8_t raw[19];
    size_t n = a->family == 6 ? 16 : 4;
    raw[0] = a->family == 6 ? 6 : 4;
    raw[1] = (uint8_t)(a->port >> 8);
    raw[2] = (uint8_t)a->port;
    memcpy(raw + 3, a->ip, n);
    if (msgpack_pack_bin(pk, 3 + n) != 0)
        return -1;
    return msgpack_pack_bin_body(pk, raw, 3 + n);
}

/* Encodes one message; -GOSSIP_ETOOBIG when cap is short. */
int proto_encode_msg(const struct proto_msg *m, uint8_t *buf, size_t cap, size_t *len)
{
    struct bounded b = {buf, cap, 0};
    msgpack_packer pk;
    int r = 0;
    if (m->name.len > GOSSIP_NAME_MAX || m->from.len > GOSSIP_NAME_MAX)
        return -GOSSIP_EINVAL;
    msgpack_packer_init(&pk, &b, bounded_write);
    switch (m->type) {
    case PROTO_PING:
        r |= msgpack_pack_array(&pk, 3);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= msgpack_pack_uint32(&pk, m->seq);
        r |= pack_str(&pk, m->name.ptr, m->name.len);
        break;
    case PROTO_PING_REQ:
        r |= msgpack_pack_array(&pk, 5);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= msgpack_pack_uint32(&pk, m->seq);
        r |= pack_str(&pk, m->name.ptr, m->name.len);
        r |= pack_addr(&pk, &m->addr);
        r |= msgpack_pack_uint8(&pk, m->flags);
        break;
    case PROTO_ACK:
    case PROTO_NACK:
        r |= msgpack_pack_array(&pk, 2);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= msgpack_pack_uint32(&pk, m->seq);
        break;
    case PROTO_ALIVE:
        r |= msgpack_pack_array(&pk, m->life != 0 ? 6 : 4);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= pack_str(&pk, m->name.ptr, m->name.len);
        r |= msgpack_pack_uint32(&pk, m->incarnation);
        r |= pack_addr(&pk, &m->addr);
        if (m->life != 0) {
            r |= msgpack_pack_uint64(&pk, m->life);
            r |= msgpack_pack_uint64(&pk, m->uptime_ms);
        }
        break;
    case PROTO_SUSPECT:
    case PROTO_DEAD:
        r |= msgpack_pack_array(&pk, m->life != 0 ? 5 : 4);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= pack_str(&pk, m->name.ptr, m->name.len);
        r |= msgpack_pack_uint32(&pk, m->incarnation);
        r |= pack_str(&pk, m->from.ptr, m->from.len);
        if (m->life != 0)
            r |= msgpack_pack_uint64(&pk, m->life);
        break;
    case PROTO_LEFT:
        r |= msgpack_pack_array(&pk, m->life != 0 ? 4 : 3);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= pack_str(&pk, m->name.ptr, m->name.len);
        r |= msgpack_pack_uint32(&pk, m->incarnation);
        if (m->life != 0)
            r |= msgpack_pack_uint64(&pk, m->life);
        break;
    case PROTO_APP:
        r |= msgpack_pack_array(&pk, 5);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= pack_str(&pk, m->name.ptr, m->name.len);
        r |= msgpack_pack_uint32(&pk, m->incarnation);
        r |= msgpack_pack_uint64(&pk, m->app_seq);
        r |= msgpack_pack_bin(&pk, m->data_len);
        r |= msgpack_pack_bin_body(&pk, m->data, m->data_len);
        break;
    case PROTO_PUSHPULL:
        r |= msgpack_pack_array(&pk, 4);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= msgpack_pack_uint32(&pk, m->seq);
        r |= msgpack_pack_uint8(&pk, m->flags);
        r |= msgpack_pack_bin(&pk, m->data_len);
        r |= msgpack_pack_bin_body(&pk, m->data, m->data_len);
        break;
    case PROTO_DIRECT:
        r |= msgpack_pack_array(&pk, 2);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= msgpack_pack_bin(&pk, m->data_len);
        r |= msgpack_pack_bin_body(&pk, m->data, m->data_len);
        break;
    case PROTO_CONFLICT:
        r |= msgpack_pack_array(&pk, 4);
        r |= msgpack_pack_uint8(&pk, m->type);
        r |= pack_str(&pk, m->name.ptr, m->name.len);
        r |= msgpack_pack_uint64(&pk, m->life);
        r |= msgpack_pack_uint64(&pk, m->uptime_ms);
        break;
    default:
        return -GOSSIP_EINVAL;
    }
    if (r != 0)
        return -GOSSIP_ETOOBIG;
    *len = b.len;
    return 0;
}

/* The header uses array32 so the message count can be patched in place. */
int proto_packet_begin(uint8_t *buf, size_t cap, const char *sender, size_t sender_len,
                       uint64_t timestamp, uint32_t incarnation, uint64_t life, size_t *len)
{
    struct bounded b = {buf, cap, 0};
    msgpack_packer pk;
    int r = 0;
    static const uint8_t arr32[5] = {0xdd, 0, 0, 0, 5};
    if (sender_len == 0 || sender_len > GOSSIP_NAME_MAX)
        return -GOSSIP_EINVAL;
    msgpack_packer_init(&pk, &b, bounded_write);
    r |= bounded_write(&b, (const char *)arr32, sizeof(arr32));
    r |= msgpack_pack_uint8(&pk, PROTO_VERSION);
    r |= pack_str(&pk, sender, sender_len);
    r |= msgpack_pack_uint64(&pk, timestamp);
    r |= msgpack_pack_uint32(&pk, incarnation);
    r |= msgpack_pack_uint64(&pk, life);
    if (r != 0)
        return -GOSSIP_ETOOBIG;
    *len = b.len;
    return 0;
}

void proto_packet_finish(uint8_t *buf, size_t nmsgs)
{
    uint32_t n = (uint32_t)(5 + nmsgs);
    buf[1] = (uint8_t)(n >> 24);
    buf[2] = (uint8_t)(n >> 16);
    buf[3] = (uint8_t)(n >> 8);
    buf[4] = (uint8_t)n;
}

/* ---- structural pre-check ------------------------------------------------ */

static uint32_t be(const uint8_t *p, int n)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

#define MAX_DEPTH 4

/*
 * Walks one msgpack value tree over buf[0..len) without building anything.
 * Rejects: truncation, nesting deeper than MAX_DEPTH, maps and ext types (the
 * protocol uses neither), counts larger than the bytes left, and trailing
 * bytes.  After this, msgpack-c's allocations are bounded by len.
 */
static int precheck(const uint8_t *buf, size_t len)
{
    size_t pending[MAX_DEPTH + 1];
    int depth = 0;
    size_t off = 0;
    pending[0] = 1; /* one top-level value */
    while (depth >= 0) {
        if (pending[depth] == 0) {
            depth--;
            continue;
        }
        pending[depth]--;
        if (off >= len)
            return -GOSSIP_EPROTO;
        uint8_t t = buf[off++];
        size_t skip = 0, count = 0;
        int is_array = 0;
        if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
            skip = 0;
        } else if (t >= 0xa0 && t <= 0xbf) {
            skip = t & 0x1f;
        } else if (t >= 0x90 && t <= 0x9f) {
            is_array = 1;
            count = t & 0x0f;
        } else {
            int hdr;
            switch (t) {
            case 0xcc:
            case 0xd0:
                skip = 1;
                break;
            case 0xcd:
            case 0xd1:
                skip = 2;
                break;
            case 0xce:
            case 0xd2:
            case 0xca:
                skip = 4;
                break;
            case 0xcf:
            case 0xd3:
            case 0xcb:
                skip = 8;
                break;
            case 0xc4:
            case 0xd9:
            case 0xc5:
            case 0xda:
            case 0xc6:
            case 0xdb:
                hdr = (t == 0xc4 || t == 0xd9) ? 1 : (t == 0xc5 || t == 0xda) ? 2 : 4;
                if (len - off < (size_t)hdr)
                    return -GOSSIP_EPROTO;
                skip = be(buf + off, hdr);
                off += (size_t)hdr;
                break;
            case 0xdc:
            case 0xdd:
                hdr = t == 0xdc ? 2 : 4;
                if (len - off < (size_t)hdr)
                    return -GOSSIP_EPROTO;
                count = be(buf + off, hdr);
                off += (size_t)hdr;
                is_array = 1;
                break;
            default: /* maps, ext, never-used 0xc1 */
                return -GOSSIP_EPROTO;
            }
        }
        if (is_array) {
            if (count > len - off || depth == MAX_DEPTH)
                return -GOSSIP_EPROTO;
            pending[++depth] = count;
        } else {
            if (skip > len - off)
                return -GOSSIP_EPROTO;
            off += skip;
        }
    }
    return off == len ? 0 : -GOSSIP_EPROTO;
}

/* ---- decoding ------------------------------------------------------------ */

static int get_uint(const msgpack_object *o, uint64_t max, uint64_t *out)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return -1;
    *out = o->via.u64;
    return 0;
}

static int get_name(const msgpack_object *o, struct proto_str *out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 || o->via.str.size > GOSSIP_NAME_MAX)
        return -1;
    for (uint32_t i = 0; i < o->via.str.size; i++)
        if (o->via.str.ptr[i] == '\0')
            return -1; /* names are used as C strings */
    out->ptr = o->via.str.ptr;
    out->len = o->via.str.size;
    return 0;
}

static int get_bin(const msgpack_object *o, const uint8_t **data, size_t *len)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return -1;
    *data = (const uint8_t *)o->via.bin.ptr;
    *len = o->via.bin.size;
    return 0;
}

static int get_addr(const msgpack_object *o, struct gossip_addr *a)
{
    const uint8_t *p;
    size_t n;
    if (get_bin(o, &p, &n) != 0 || n < 3)
        return -1;
    memset(a, 0, sizeof(*a));
    if (p[0] == 4 && n == 7)
        a->family = 4;
    else if (p[0] == 6 && n == 19)
        a->family = 6;
    else
        return -1;
    a->port = (uint16_t)((p[1] << 8) | p[2]);
    memcpy(a->ip, p + 3, n - 3);
    return 0;
}

/* Minimum element count per type (index = type). */
static const uint8_t min_fields[] = {0, 3, 5, 2, 2, 4, 4, 4, 3, 5, 4, 2, 4};

/* Fills m from array o; 1 = unknown type (skip), 0 = ok, -1 = malformed. */
static int decode_msg(const msgpack_object *o, struct proto_msg *m)
{
    uint64_t v;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 1)
        return -1;
    const msgpack_object *f = o->via.array.ptr;
    uint32_t n = o->via.array.size;
    if (get_uint(&f[0], 255, &v) != 0)
        return -1;
    if (v == 0 || v > PROTO_CONFLICT)
        return 1;
    memset(m, 0, sizeof(*m));
    m->type = (uint8_t)v;
    if (n < min_fields[m->type])
        return -1;
    switch (m->type) {
    case PROTO_PING:
    case PROTO_PING_REQ:
        if (get_uint(&f[1], UINT32_MAX, &v) != 0 || get_name(&f[2], &m->name) != 0)
            return -1;
        m->seq = (uint32_t)v;
        if (m->type == PROTO_PING_REQ) {
            if (get_addr(&f[3], &m->addr) != 0 || get_uint(&f[4], 255, &v) != 0)
                return -1;
            m->flags = (uint8_t)v;
        }
        return 0;
    case PROTO_ACK:
    case PROTO_NACK:
        if (get_uint(&f[1], UINT32_MAX, &v) != 0)
            return -1;
        m->seq = (uint32_t)v;
        return 0;
    case PROTO_ALIVE:
    case PROTO_SUSPECT:
    case PROTO_DEAD:
    case PROTO_LEFT:
        if (get_name(&f[1], &m->name) != 0 || get_uint(&f[2], UINT32_MAX, &v) != 0)
            return -1;
        m->incarnation = (uint32_t)v;
        if (m->type == PROTO_ALIVE && get_addr(&f[3], &m->addr) != 0)
            return -1;
        if (m->type == PROTO_ALIVE && n >= 6 &&
            (get_uint(&f[4], UINT64_MAX, &m->life) != 0 ||
             get_uint(&f[5], UINT64_MAX, &m->uptime_ms) != 0))
            return -1;
        if ((m->type == PROTO_SUSPECT || m->type == PROTO_DEAD) && get_name(&f[3], &m->from) != 0)
            return -1;
        if ((m->type == PROTO_SUSPECT || m->type == PROTO_DEAD) && n >= 5 &&
            get_uint(&f[4], UINT64_MAX, &m->life) != 0)
            return -1;
        if (m->type == PROTO_LEFT && n >= 4 && get_uint(&f[3], UINT64_MAX, &m->life) != 0)
            return -1;
        return 0;
    case PROTO_APP:
        if (get_name(&f[1], &m->name) != 0 || get_uint(&f[2], UINT32_MAX, &v) != 0)
            return -1;
        m->incarnation = (uint32_t)v;
        if (get_uint(&f[3], UINT64_MAX, &m->app_seq) != 0 ||
            get_bin(&f[4], &m->data, &m->data_len) != 0)
            return -1;
        return 0;
    case PROTO_PUSHPULL:
        if (get_uint(&f[1], UINT32_MAX, &v) != 0)
            return -1;
        m->seq = (uint32_t)v;
        if (get_uint(&f[2], 255, &v) != 0 || get_bin(&f[3], &m->data, &m->data_len) != 0)
            return -1;
        m->flags = (uint8_t)v;
        return 0;
    case PROTO_DIRECT:
        return get_bin(&f[1], &m->data, &m->data_len) != 0 ? -1 : 0;
    case PROTO_CONFLICT:
        if (get_name(&f[1], &m->name) != 0 || get_uint(&f[2], UINT64_MAX, &m->life) != 0 ||
            get_uint(&f[3], UINT64_MAX, &m->uptime_ms) != 0)
            return -1;
        return 0;
    }
    return -1;
}

/*
 * msgpack_unpack references strings and bins in the input buffer (it never
 * copies them), so the views stay valid after the zone is freed; the zone
 * only holds the object arrays.
 */
int proto_decode(const uint8_t *buf, size_t len, struct proto_packet *out)
{
    msgpack_zone zone;
    msgpack_object root;
    size_t off = 0;
    uint64_t v;
    int rc = -GOSSIP_EPROTO;

    out->nmsgs = 0;
    if (buf == NULL || len == 0 || precheck(buf, len) != 0)
        return -GOSSIP_EPROTO;
    if (!msgpack_zone_init(&zone, 1024))
        return -GOSSIP_ENOMEM;
    if (msgpack_unpack((const char *)buf, len, &off, &zone, &root) != MSGPACK_UNPACK_SUCCESS ||
        off != len)
        goto done;
    if (root.type != MSGPACK_OBJECT_ARRAY || root.via.array.size < 5)
        goto done;
    const msgpack_object *e = root.via.array.ptr;
    if (get_uint(&e[0], UINT32_MAX, &v) != 0)
        goto done;
    if (v != PROTO_VERSION) {
        rc = -GOSSIP_EVERSION;
        goto done;
    }
    out->version = (uint32_t)v;
    if (get_name(&e[1], &out->sender) != 0 || get_uint(&e[2], UINT64_MAX, &out->timestamp) != 0 ||
        get_uint(&e[3], UINT32_MAX, &v) != 0 || get_uint(&e[4], UINT64_MAX, &out->life) != 0)
        goto done;
    out->incarnation = (uint32_t)v;
    for (uint32_t i = 5; i < root.via.array.size; i++) {
        if (out->nmsgs == PROTO_MAX_MSGS)
            goto done;
        int r = decode_msg(&e[i], &out->msgs[out->nmsgs]);
        if (r < 0)
            goto done;
        if (r == 0)
            out->nmsgs++;
    }
    rc = 0;
done:
    msgpack_zone_destroy(&zone);
    if (rc != 0)
        out->nmsgs = 0;
    return rc;
}
