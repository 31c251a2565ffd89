/*
 * libgossip wire codec (msgpack).
 *
 * Design note.  One datagram is one packet; a packet is a compound of small
 * messages so that membership news and application payloads ride on every
 * probe, ack and gossip packet (SWIM's piggybacking).  The codec knows nothing
 * of the protocol's rules: it turns bytes into structs and back.  Decoding
 * treats its input as hostile: every length and count is checked against the
 * bytes that remain before msgpack-c sees them (so a forged array header
 * cannot make it allocate gigabytes), strings and addresses are bounded,
 * unknown message types are skipped (a newer peer may send them) and any
 * other inconsistency returns -GOSSIP_EPROTO, never an assert.  Decoded
 * strings and payloads point into the caller's buffer (no copies).
 *
 * The plaintext below is what the keyring seals (gossip/keyring.h adds its
 * 42 bytes around it); the MTU bounds the sealed datagram.
 *
 *   packet = msgpack array (array32 header, so its count can be patched):
 *   +------------+---------+-------------+-----------+-------------+-----------+-------+---
 *   | dd NNNNNNNN| version | sender name | timestamp | sender inc. | sender    | msg 1 | ...
 *   | array32    | uint =2 | str <= 64   | uint64 ns | uint32      | life u64  | array |
 *   +------------+---------+-------------+-----------+-------------+-----------+-------+---
 *   N = 5 + number of messages.  The sender's incarnation in every header
 *   lets any packet from a member carry its refutation of a suspicion.  The
 *   timestamp is the sender's own monotonic clock: only compared with the
 *   same sender's earlier timestamps, within the same life (a random id
 *   drawn at each start), so no two hosts' clocks are ever compared.
 *
 *   each msg = [ type, fields... ]   (extra trailing fields are ignored)
 *     1 PING      [1, seq, target name]
 *     2 PING_REQ  [2, seq, target name, target addr, want_nack]
 *     3 ACK       [3, seq]
 *     4 NACK      [4, seq]
 *     5 ALIVE     [5, name, incarnation, addr, life u64, uptime_ms u64]
 *                 (life and uptime optional: the subject's, when it said so)
 *     6 SUSPECT   [6, name, incarnation, accuser name, life u64]
 *     7 DEAD      [7, name, incarnation, accuser name, life u64]
 *     8 LEFT      [8, name, incarnation, life u64]
 *                 (life optional: the subject life the news is about; news
 *                 of one life never touches another life of the same name,
 *                 so a refused second process's leave is its own)
 *     9 APP       [9, origin name, origin incarnation, seq u64, payload bin]
 *    10 PUSHPULL  [10, exchange id, flags, state bin]
 *    11 DIRECT    [11, payload bin]      an application message to this node
 *    12 CONFLICT  [12, name, life u64, uptime_ms u64]  "name is mine, and
 *                 alive": the answer to a packet that claims the receiver's
 *                 own name from another life
 *         A packet holding a PUSHPULL carries full-state membership entries
 *         (ALIVE/SUSPECT/DEAD/LEFT) next to it; flags bit 0 asks for a reply.
 *
 *   addr = bin: family u8 (4|6) | port u16 big-endian | ip (4 or 16 bytes)
 */
#ifndef GOSSIP_PROTO_H
#define GOSSIP_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "gossip/gossip.h"

#define PROTO_VERSION 2
/* Most messages one packet may carry (a 1400-byte packet holds ~200 ACKs). */
#define PROTO_MAX_MSGS 256
/* Largest packet header (array32, version, name, u64 timestamp, u32 incarnation,
 * u64 life). */
#define PROTO_HEADER_MAX (5 + 1 + 2 + GOSSIP_NAME_MAX + 9 + 5 + 9)
/* Bytes a DIRECT message adds around its payload (array, type, bin32 header). */
#define PROTO_DIRECT_OVERHEAD 7

enum proto_type {
    PROTO_PING = 1,
    PROTO_PING_REQ = 2,
    PROTO_ACK = 3,
    PROTO_NACK = 4,
    PROTO_ALIVE = 5,
    PROTO_SUSPECT = 6,
    PROTO_DEAD = 7,
    PROTO_LEFT = 8,
    PROTO_APP = 9,
    PROTO_PUSHPULL = 10,
    PROTO_DIRECT = 11,
    PROTO_CONFLICT = 12,
};

#define PROTO_PP_REQUEST 0x01u

/* A string view, not NUL-terminated; len <= GOSSIP_NAME_MAX for names. */
struct proto_str {
    const char *ptr;
    size_t len;
};

/* One message; fields not used by its type are zero. */
struct proto_msg {
    uint8_t type;
    uint8_t flags;           /* PING_REQ: want nack; PUSHPULL: PROTO_PP_REQUEST */
    uint32_t seq;            /* PING, PING_REQ, ACK, NACK; PUSHPULL exchange id */
    uint32_t incarnation;    /* ALIVE..LEFT; APP: origin incarnation */
    uint64_t app_seq;        /* APP */
    uint64_t life;           /* ALIVE..LEFT: the subject's life (0: not given), CONFLICT */
    uint64_t uptime_ms;      /* ALIVE, CONFLICT */
    struct proto_str name;   /* PING/PING_REQ target, ALIVE..LEFT subject, APP origin,
                                CONFLICT: the name claimed */
    struct proto_str from;   /* SUSPECT, DEAD: accuser */
    struct gossip_addr addr; /* PING_REQ target, ALIVE */
    const uint8_t *data;     /* APP and DIRECT payload, PUSHPULL state chunk */
    size_t data_len;
};

struct proto_packet {
    uint32_t version;
    struct proto_str sender;
    uint64_t timestamp;
    uint32_t incarnation; /* the sender's */
    uint64_t life;        /* the sender's life id */
    size_t nmsgs;
    struct proto_msg msgs[PROTO_MAX_MSGS];
};

/*
 * Encodes one message into buf[0..cap); sets *len.  -GOSSIP_ETOOBIG if it
 * does not fit, -GOSSIP_EINVAL for an unknown type or a name over the limit.
 */
int proto_encode_msg(const struct proto_msg *m, uint8_t *buf, size_t cap, size_t *len);

/*
 * Writes a packet header into buf; messages encoded by proto_encode_msg are
 * then appended by the caller, and proto_packet_finish patches the count.
 * -GOSSIP_ETOOBIG / -GOSSIP_EINVAL as above.
 */
int proto_packet_begin(uint8_t *buf, size_t cap, const char *sender, size_t sender_len,
                       uint64_t timestamp, uint32_t incarnation, uint64_t life, size_t *len);
void proto_packet_finish(uint8_t *buf, size_t nmsgs);

/*
 * Decodes an untrusted packet.  On success out's views point into buf, which
 * must outlive them.  Fails with -GOSSIP_EPROTO (malformed, truncated,
 * trailing bytes, too many messages, bad lengths) or -GOSSIP_EVERSION.
 */
int proto_decode(const uint8_t *buf, size_t len, struct proto_packet *out);

/* Encoded size bound of an address (bin8 header + 19). */
#define PROTO_ADDR_MAX 21

#endif
