/*
 * slots: cluster-wide concurrency limits (design note and wire format in
 * slots.h).
 *
 * Structure: two key tables, one for the keys this node uses (struct
 * slots_need: its cap, its grants, its freshness) and one for the keys it
 * owns (struct slots_ledger: one struct slots_peer per node life that
 * reported).  Both are also linked lists for the tick.  A node that owns
 * a key it uses talks to itself by function call, not by packet.
 */
#include "slots.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "hrw.h"
#include "sluice/error.h"
#include "table.h"
#include "wire.h"

#define SLOTS_DEFAULT_FRESH_NS ((int64_t)2000000000)
#define SLOTS_MSG_MAX          1400
#define SLOTS_PEND             8  /* grants in flight to one node life */
#define SLOTS_RTIMES           16 /* report send times remembered (freshness) */
#define SLOTS_IDLE_TICKS       50 /* an owned key idle this many ticks is forgotten */
#define SLOTS_VIEWS            32 /* past views remembered (who owned a key lately) */
#define SLOTS_ASK              2  /* members a new ledger asks first whether they lent the key */
#define SLOTS_ASK_MAX          64 /* members it asks at most (new members pass the ask on) */
/* Beats (see "Majority" in slots.h): while it uses or owns global lease
 * keys, a node pings every live member every fresh / 8, and a member
 * counts toward its majority while it answered a ping sent within the
 * last fresh / 2. */
#define SLOTS_BEAT_RING      16
#define SLOTS_BEAT_EVERY(s)  ((s)->fresh_ns / 8)
#define SLOTS_BEAT_WINDOW(s) ((s)->fresh_ns / 2)

#define SLOTS_HOLD_MAX_MS 604800000 /* the longest hold an answer may ask for (7 days) */
/* Rounding's rotation (slots__allocate): a peer that holds a slot of the
 * remainder keeps it until another is owed this many slot-seconds more,
 * and what a peer is owed is kept within +-SLOTS_OWED_MAX. */
#define SLOTS_ROTATE_HOLD 0.5
#define SLOTS_OWED_MAX    2.0

/* An answer to an ask (see slots.h). */
#define SLOTS_A_FREE 0 /* it lent nothing of the key that may still be held */
#define SLOTS_A_BUSY 1 /* it did (or cannot tell): hold for hold_ms */
#define SLOTS_A_WAIT 2 /* it still owns the key in its view: ask again */
/* The same as free and busy from a member that joined the cluster less
 * than fresh + TTL ago: it cannot vouch for the owners before it joined,
 * so the asker asks the next member too. */
#define SLOTS_A_FREE_NEW 3
#define SLOTS_A_BUSY_NEW 4

/* ---- state ---- */

struct slots_need { /* a key this node uses */
    struct slots_need *next, *prev;
    int64_t limit, ttl_ns;
    int64_t cap;                 /* slots this node may hand out */
    int64_t grant;               /* the owner's last grant */
    uint64_t gseq;               /* its sequence */
    uint64_t served_by;          /* the owner life that set cap (0: none) */
    char owner[64];              /* that owner's name */
    uint64_t rseq;               /* last report sent */
    int64_t rtime[SLOTS_RTIMES]; /* send time of report rseq % SLOTS_RTIMES */
    int64_t fresh_until;
    int64_t asked;     /* most units asked for (held + qty) since the last report */
    int64_t active_at; /* last time anything was held, wanted or lent */
    int need;          /* short of slots: report at the next tick */
    int quiet;         /* ticks since the last report */
    size_t klen;
    char key[];
};

struct slots_peer { /* one node life on an owner's ledger */
    char name[64];
    uint64_t life;
    int64_t bound; /* the most it may hold now */
    int64_t cap, held, want;
    uint64_t rseq; /* newest report seen */
    uint64_t gseq; /* newest grant sent */
    struct {
        uint64_t seq;
        int64_t val;
    } pend[SLOTS_PEND]; /* grants sent and not yet acknowledged */
    int npend;
    int64_t grant; /* last grant sent */
    int64_t heard; /* when its last report arrived */
    int64_t target;
    double frac;       /* the target's rounded-off fraction (demand above n) */
    double exact;      /* its share of n by demand, unrounded (demand above n) */
    double owed;       /* slot-seconds its share was held by others (see allocate) */
    uint64_t ack_rseq; /* report to acknowledge in the next grant (0: none) */
    int ghost;         /* an older life of a node that restarted */
};

struct slots_ledger { /* a key this node owns */
    struct slots_ledger *next, *prev;
    int64_t limit, ttl_ns;
    int64_t hold_until; /* no free slots lent before */
    int64_t moved_at;   /* the last time another node may have owned it (0: never) */
    int64_t created;
    int64_t alloc_at; /* the last share-out (the owed slot-seconds grow from it) */
    /* The members that would own the key without this node, asked whether
     * they lent it (a new ledger lends nothing beyond what is reported
     * until they answer, or until ask_until); owned by the ledger, freed
     * once every ask is answered. */
    struct slots_asked {
        char name[64];
        uint64_t nonce;
        int done;
    } * ask;
    int nask, cap_ask, asking; /* asked; room; not answered yet */
    int asked;                 /* the asks went out (once, when the ledger began) */
    int vouched;               /* a member that was in the cluster before answered */
    int64_t ask_until;
    /* != 0: this node no longer owns the key; the ledger is kept, lending
     * nothing, to answer the new owner's asks until its loans have ended */
    int64_t lost_until;
    struct slots_peer *peers;
    size_t npeers, cap_peers;
    int idle;
    size_t klen;
    char key[];
};

struct slots {
    char name[64];
    uint64_t life;
    int64_t fresh_ns;
    int64_t started;
    int64_t joined_at; /* the first view with another member in it (0: none yet) */
    int64_t noq_at;    /* when it last had no majority of the members (0: never) */
    int noq;           /* its view has no majority of the members now */
    int restarted;
    int known; /* restarted is known */
    slots_send_fn send;
    void *send_ud;
    slots_key_fn on_slots;
    slots_load_fn load;
    void *ud;
    struct table *needs, *ledgers;
    struct slots_need *need_list;
    struct slots_ledger *ledger_list;
    /* the view */
    char (*live)[64];
    uint64_t *live_hash;
    size_t nlive, cap_live, total;
    /* Per live member, in live order: suspected in the gossip view; when
     * it last answered a beat (the send time of the ping it answered, at
     * least 1; 0: never, so it does not speak beats, or not yet). */
    uint8_t *live_sus;
    int64_t *beat_at;
    /* Beats: the next round's time, when this spell of rounds began (0:
     * not beating), the rounds' send times by nonce, and the majority as
     * last computed (slots__quorum_update). */
    int64_t beat_next, beat_since;
    int64_t beat_lost_at; /* since when beats make no majority (0: they do) */
    int64_t beat_sent[SLOTS_BEAT_RING];
    uint64_t beat_nonce;
    int q;
    int viewed; /* a view was set */
    uint64_t self_hash;
    /* past views, newest last: a ring of SLOTS_VIEWS (hashes of the live
     * members and when the view ended) */
    struct {
        uint64_t *hash;
        size_t n;
        int64_t ended;
    } past[SLOTS_VIEWS];
    size_t npast, past_head;
    int64_t past_lost; /* when the newest view dropped from the ring ended (0: none) */
    uint64_t nonce;    /* of the last ask sent */
    struct slots_stats st;
};

/* The 1% clock-rate margin and a fixed slack on every wait for silence. */
static int64_t slots__margin(int64_t d)
{
    return d + d / 100 + 50000000;
}

/* How long after another owner left this node's view that owner may have
 * gone on lending and making its nodes fresh: cut off in a minority, it
 * keeps its majority until its beats of the majority's members are older
 * than the beat window (checked every tick), then its nodes' freshness
 * and their leases run out.  Without beats it would keep the majority
 * until it suspected the others, which on real daemons came up to 2 s
 * after they had declared it dead. */
static int64_t slots__gone_wait(const struct slots *s, int64_t ttl_ns)
{
    return slots__margin(s->fresh_ns + ttl_ns + SLOTS_BEAT_WINDOW(s) + SLOTS_BEAT_EVERY(s));
}

int slots_create(const struct slots_config *cfg, int64_t now, struct slots **out)
{
    struct table_config tc;
    struct slots *s;
    if (cfg == NULL || cfg->node_name == NULL || strlen(cfg->node_name) >= 64 || cfg->life == 0 ||
        cfg->send == NULL)
        return -SLUICE_EINVAL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -SLUICE_ENOMEM;
    memset(&tc, 0, sizeof(tc));
    if (table_create(&s->needs, &tc) < 0 || table_create(&s->ledgers, &tc) < 0) {
        table_destroy(s->needs);
        free(s);
        return -SLUICE_ENOMEM;
    }
    strcpy(s->name, cfg->node_name);
    s->self_hash = hrw_hash(s->name, strlen(s->name));
    s->life = cfg->life;
    s->fresh_ns = cfg->fresh_ns > 0 ? cfg->fresh_ns : SLOTS_DEFAULT_FRESH_NS;
    s->started = now;
    s->q = 1; /* no view yet: alone */
    s->restarted = cfg->restarted;
    s->known = cfg->restarted_known;
    s->send = cfg->send;
    s->send_ud = cfg->send_ud;
    s->on_slots = cfg->on_slots;
    s->load = cfg->load;
    s->ud = cfg->ud;
    *out = s;
    return 0;
}

void slots_set_client(struct slots *s, slots_key_fn on_slots, slots_load_fn load, void *ud)
{
    s->on_slots = on_slots;
    s->load = load;
    s->ud = ud;
}

void slots_set_restarted(struct slots *s, int restarted)
{
    s->restarted = restarted;
    s->known = 1;
}

void slots_destroy(struct slots *s)
{
    if (s == NULL)
        return;
    while (s->need_list != NULL) {
        struct slots_need *n = s->need_list;
        s->need_list = n->next;
        free(n);
    }
    while (s->ledger_list != NULL) {
        struct slots_ledger *l = s->ledger_list;
        s->ledger_list = l->next;
        free(l->ask);
        free(l->peers);
        free(l);
    }
    table_destroy(s->needs);
    table_destroy(s->ledgers);
    for (size_t i = 0; i < SLOTS_VIEWS; i++)
        free(s->past[i].hash);
    free(s->live);
    free(s->live_hash);
    free(s->live_sus);
    free(s->beat_at);
    free(s);
}

static int slots__cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Keeps the view that ends now (its members' hashes, sorted) in the ring
 * of past views.  A view that cannot be kept (no memory) counts as lost,
 * as does the oldest one when the ring is full. */
static void slots__past_push(struct slots *s, int64_t now)
{
    size_t i = (s->past_head + s->npast) % SLOTS_VIEWS;
    if (s->npast == SLOTS_VIEWS) {
        i = s->past_head;
        s->past_lost = s->past[i].ended;
        s->past_head = (s->past_head + 1) % SLOTS_VIEWS;
        s->npast--;
    }
    uint64_t *h = realloc(s->past[i].hash, (s->nlive ? s->nlive : 1) * sizeof(*h));
    if (h == NULL) {
        s->past_lost = now;
        return;
    }
    memcpy(h, s->live_hash, s->nlive * sizeof(*h));
    qsort(h, s->nlive, sizeof(*h), slots__cmp_u64);
    s->past[i].hash = h;
    s->past[i].n = s->nlive;
    s->past[i].ended = now;
    s->npast++;
}

/*
 * The last time another node may have owned key: the end of the newest
 * past view in which this node was not its owner (a view without it, or
 * one where another member won it), or of a view lost from the ring; 0
 * when every remembered view gave it to this node.  Such an owner may have
 * lent slots whose holders this node has not heard from yet.
 */
static int64_t slots__moved_at(const struct slots *s, const char *key, size_t klen)
{
    uint64_t kh = hrw_hash(key, klen);
    int64_t at = s->past_lost;
    for (size_t k = 0; k < s->npast; k++) {
        size_t i = (s->past_head + k) % SLOTS_VIEWS;
        int mine = 0;
        if (s->past[i].n > 0)
            mine = s->past[i].hash[hrw_pick(kh, s->past[i].hash, s->past[i].n)] == s->self_hash;
        if (!mine && s->past[i].ended > at)
            at = s->past[i].ended;
    }
    return at;
}

struct slots__member {
    uint64_t hash;
    const char *name;
    size_t len;
    int suspect;
};

static int slots__cmp_member(const void *a, const void *b)
{
    return slots__cmp_u64(&((const struct slots__member *)a)->hash,
                          &((const struct slots__member *)b)->hash);
}

static int slots__quorum(const struct slots *s);
static void slots__quorum_update(struct slots *s, int64_t now);

int slots_set_view(struct slots *s, const char *const *live, const unsigned char *suspect,
                   size_t nlive, size_t total, int64_t now)
{
    struct slots__member *m = malloc((nlive ? nlive : 1) * sizeof(*m));
    size_t nm = 0, same;
    if (m == NULL)
        return -SLUICE_ENOMEM;
    for (size_t i = 0; i < nlive; i++) {
        size_t n = strlen(live[i]);
        if (n >= 64)
            continue;
        m[nm].hash = hrw_hash(live[i], n);
        m[nm].name = live[i];
        m[nm].len = n;
        m[nm].suspect = suspect != NULL && suspect[i];
        nm++;
    }
    /* In hash order: a view is then the same set iff the same sequence. */
    qsort(m, nm, sizeof(*m), slots__cmp_member);
    same = nm == s->nlive;
    for (size_t i = 0; same && i < nm; i++)
        same = m[i].hash == s->live_hash[i];
    /* A membership change: remember the view that ends (an owner is chosen
     * by the members' hashes alone, so they are the view). */
    if (s->viewed && !same)
        slots__past_push(s, now);
    s->viewed = 1;
    if (s->joined_at == 0 && nm >= 2)
        s->joined_at = now;
    /* The members' beats carry over to the new view (by hash: both views
     * are in hash order). */
    size_t na = nm ? nm : 1;
    uint8_t *sus = malloc(na);
    int64_t *at = calloc(na, sizeof(*at));
    if (sus == NULL || at == NULL) {
        free(sus);
        free(at);
        free(m);
        return -SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < nm; i++) {
        const uint64_t *o =
            s->nlive > 0 ? bsearch(&m[i].hash, s->live_hash, s->nlive, sizeof(*o), slots__cmp_u64)
                         : NULL;
        sus[i] = (uint8_t)m[i].suspect;
        if (o != NULL) {
            size_t j = (size_t)(o - s->live_hash);
            at[i] = s->beat_at[j];
        }
    }
    if (nm > s->cap_live) {
        char(*nl)[64] = realloc(s->live, nm * sizeof(*nl));
        uint64_t *nh = nl != NULL ? realloc(s->live_hash, nm * sizeof(*nh)) : NULL;
        if (nl != NULL)
            s->live = nl;
        if (nh == NULL) {
            free(sus);
            free(at);
            free(m);
            return -SLUICE_ENOMEM;
        }
        s->live_hash = nh;
        s->cap_live = nm;
    }
    for (size_t i = 0; i < nm; i++) {
        memcpy(s->live[i], m[i].name, m[i].len + 1);
        s->live_hash[i] = m[i].hash;
    }
    free(s->live_sus);
    free(s->beat_at);
    s->live_sus = sus;
    s->beat_at = at;
    s->nlive = nm;
    free(m);
    s->total = total > s->nlive ? total : s->nlive;
    slots__quorum_update(s, now);
    return 0;
}

/* The owner of key in this node's view ("" when the view is empty: the
 * node alone owns it). */
static const char *slots__owner(const struct slots *s, const char *key, size_t klen)
{
    if (s->nlive == 0)
        return s->name;
    return s->live[hrw_pick(hrw_hash(key, klen), s->live_hash, s->nlive)];
}

/* The majority as last computed by slots__quorum_update. */
static int slots__quorum(const struct slots *s)
{
    return s->q;
}

/*
 * Recomputes the majority (see "Majority" in slots.h): more than half of
 * the members known count, this node itself and each live member that is
 * not suspected and, once this node has been beating for a beat window,
 * answered a ping sent within the window (a member that never answered
 * one, an older release, counts by the gossip view alone).  Suspects and
 * silent members still own their keys; they only do not make a majority.
 *
 * A period without a majority (noq, ended at noq_at: the heal's hold in
 * slots__allocate) is one without a majority in the gossip view, or
 * without answered beats for fresh_ns or more.  A shorter lapse of beats
 * (answers lost, a member paused) stops the fresh answers and the loans
 * while it lasts but holds nothing after: a majority's new owner lends
 * only fresh_ns + TTL after the lapse began (slots__gone_wait), so nothing
 * was lent elsewhere meanwhile.  (Held after every lapse, 2% loss on five
 * nodes with two of them down delayed recoveries past their bound.)
 */
static void slots__quorum_update(struct slots *s, int64_t now)
{
    int gq = 1, bq = 1;
    if (s->nlive > 0) {
        int strict = s->beat_since > 0 && now - s->beat_since >= SLOTS_BEAT_WINDOW(s);
        size_t view = 0, beats = 0;
        for (size_t i = 0; i < s->nlive; i++) {
            if (s->live_hash[i] == s->self_hash && strcmp(s->live[i], s->name) == 0) {
                view++;
                beats++;
            } else if (!s->live_sus[i]) {
                view++;
                if (!strict || s->beat_at[i] == 0 || now - s->beat_at[i] <= SLOTS_BEAT_WINDOW(s))
                    beats++;
            }
        }
        gq = 2 * view > s->total;
        bq = 2 * beats > s->total;
    }
    if (bq)
        s->beat_lost_at = 0;
    else if (s->beat_lost_at == 0)
        s->beat_lost_at = now;
    int lost = !gq || (!bq && now - s->beat_lost_at >= s->fresh_ns);
    if (lost || s->noq)
        s->noq_at = now;
    s->noq = lost;
    s->q = gq && bq;
}

/* ---- the codec (msgpack-c) ---- */

/*
 * The bodies' fields after the kind and the key, in wire order, each
 * declared once: X(member, largest value a reader accepts, 1 when 0 is
 * refused).  The struct members, the encoder, the decoder and the element
 * counts checked on reading all expand these lists, so a field is one row
 * (appended: a body is a positional array, and a reader refuses a body of
 * another length, so a new field needs a new wire version; see the
 * README's "Rolling upgrades").
 */
#define SLOTS_UNITS_MAX  ((uint64_t)INT64_MAX / 4) /* units of a limit */
#define SLOTS_TTL_MAX_MS 86400000                  /* 24 h, the longest lease TTL */

enum slots_kind {
    SLOTS_K_REPORT = 1,
    SLOTS_K_GRANT = 2,
    SLOTS_K_ASK = 3,
    SLOTS_K_ANSWER = 4,
    SLOTS_K_BEAT = 5
};

#define SLOTS_REPORT_FIELDS(X)                                                                     \
    X(limit, SLOTS_UNITS_MAX, 1)                                                                   \
    X(ttl_ms, SLOTS_TTL_MAX_MS, 1)                                                                 \
    X(cap, SLOTS_UNITS_MAX, 0)                                                                     \
    X(held, SLOTS_UNITS_MAX, 0)                                                                    \
    X(want, SLOTS_UNITS_MAX, 0)                                                                    \
    X(gseq, UINT64_MAX, 0)                                                                         \
    X(rseq, UINT64_MAX, 1)                                                                         \
    X(served_by, UINT64_MAX, 0)

#define SLOTS_GRANT_FIELDS(X)                                                                      \
    X(to, UINT64_MAX, 0)                                                                           \
    X(grant, SLOTS_UNITS_MAX, 0)                                                                   \
    X(gseq, UINT64_MAX, 1)                                                                         \
    X(ack_rseq, UINT64_MAX, 0)                                                                     \
    X(flags, 255, 0)

#define SLOTS_ASK_FIELDS(X)                                                                        \
    X(nonce, UINT64_MAX, 1)                                                                        \
    X(ttl_ms, SLOTS_TTL_MAX_MS, 1)

#define SLOTS_ANSWER_FIELDS(X)                                                                     \
    X(nonce, UINT64_MAX, 1)                                                                        \
    X(state, SLOTS_A_BUSY_NEW, 0)                                                                  \
    X(hold_ms, SLOTS_HOLD_MAX_MS, 0)

#define SLOTS_BEAT_FIELDS(X)                                                                       \
    X(nonce, UINT64_MAX, 1)                                                                        \
    X(pong, 1, 0)

#define SLOTS_MEMBER_(m, max, nonzero) uint64_t m;
#define SLOTS_COUNT_(m, max, nonzero)  +1

struct slots_report {
    const char *key;
    size_t klen;
    SLOTS_REPORT_FIELDS(SLOTS_MEMBER_)
};

struct slots_grant {
    const char *key;
    size_t klen;
    SLOTS_GRANT_FIELDS(SLOTS_MEMBER_)
};

/* An ask or its answer: the members of SLOTS_ASK_FIELDS and
 * SLOTS_ANSWER_FIELDS (an expansion of either list names them, so the two
 * cannot drift apart). */
struct slots_ask {
    const char *key;
    size_t klen;
    uint64_t nonce, ttl_ms, state, hold_ms;
};

/* A beat: its key is the name of the member it is for. */
struct slots_beat {
    const char *key;
    size_t klen;
    SLOTS_BEAT_FIELDS(SLOTS_MEMBER_)
};

struct slots__buf {
    uint8_t *p;
    size_t cap, len;
};

static int slots__write(void *data, const char *p, size_t n)
{
    struct slots__buf *b = data;
    if (n > b->cap - b->len)
        return -1;
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

/* The body's opening: an array of its kind, its key and nfields values. */
static int slots__pack_head(msgpack_packer *pk, enum slots_kind kind, size_t nfields,
                            const char *key, size_t klen)
{
    int e = msgpack_pack_array(pk, 2 + nfields);
    e |= msgpack_pack_uint8(pk, (uint8_t)kind);
    e |= msgpack_pack_bin(pk, klen);
    e |= msgpack_pack_bin_body(pk, key, klen);
    return e;
}

#define SLOTS_PACK_(m, max, nonzero) e |= msgpack_pack_uint64(&pk, v->m);

/* One kind's case of slots__encode: its head, then its fields in order. */
#define SLOTS_ENCODE_CASE_(k, type, FIELDS)                                                        \
    case k: {                                                                                      \
        const type *v = body;                                                                      \
        e |= slots__pack_head(&pk, kind, 0 FIELDS(SLOTS_COUNT_), v->key, v->klen);                 \
        FIELDS(SLOTS_PACK_)                                                                        \
        break;                                                                                     \
    }

/* Encodes a message of kind from body (a struct slots_report,
 * slots_grant, slots_ask or slots_beat as kind says) into buf: its length, or 0 when
 * it does not fit. */
static size_t slots__encode(uint8_t *buf, size_t cap, uint64_t from, enum slots_kind kind,
                            const void *body)
{
    struct slots__buf b = {buf, cap, 0};
    msgpack_packer pk;
    int e = 0;
    msgpack_packer_init(&pk, &b, slots__write);
    e |= msgpack_pack_array(&pk, 4);
    e |= msgpack_pack_uint8(&pk, WIRE_VERSION);
    e |= msgpack_pack_uint8(&pk, WIRE_SLOTS);
    e |= msgpack_pack_uint64(&pk, from);
    switch (kind) {
        SLOTS_ENCODE_CASE_(SLOTS_K_REPORT, struct slots_report, SLOTS_REPORT_FIELDS)
        SLOTS_ENCODE_CASE_(SLOTS_K_GRANT, struct slots_grant, SLOTS_GRANT_FIELDS)
        SLOTS_ENCODE_CASE_(SLOTS_K_ASK, struct slots_ask, SLOTS_ASK_FIELDS)
        SLOTS_ENCODE_CASE_(SLOTS_K_ANSWER, struct slots_ask, SLOTS_ANSWER_FIELDS)
        SLOTS_ENCODE_CASE_(SLOTS_K_BEAT, struct slots_beat, SLOTS_BEAT_FIELDS)
    default:
        e = -1;
    }
    return e == 0 ? b.len : 0;
}

int slots_is_message(const uint8_t *buf, size_t len)
{
    return len >= 3 && buf[0] == 0x94 && buf[1] == WIRE_VERSION && buf[2] == WIRE_SLOTS;
}

/*
 * Walks one msgpack object of buf[*pos..len) without allocating, admitting
 * only what a slots message holds (fixarrays, unsigned integers, bins) and
 * checking every length against the bytes left, so msgpack-c, which sizes
 * its allocations from the counts it reads, never sees a lying count.
 * 0, or -1 for anything else.
 */
static int slots__walk(const uint8_t *buf, size_t len, size_t *pos, int depth)
{
    static const uint8_t uint_bytes[4] = {1, 2, 4, 8};
    if (*pos >= len || depth > 3)
        return -1;
    uint8_t b = buf[(*pos)++];
    size_t n;
    if (b <= 0x7f)
        return 0; /* positive fixint */
    if (b >= 0x90 && b <= 0x9f) {
        n = b & 0x0fu;
        for (size_t i = 0; i < n; i++)
            if (slots__walk(buf, len, pos, depth + 1) < 0)
                return -1;
        return 0;
    }
    if (b >= 0xcc && b <= 0xcf) { /* uint 8/16/32/64 */
        n = uint_bytes[b - 0xcc];
        if (len - *pos < n)
            return -1;
        *pos += n;
        return 0;
    }
    if (b >= 0xc4 && b <= 0xc6) { /* bin 8/16/32 */
        size_t w = (size_t)1 << (b - 0xc4);
        if (len - *pos < w)
            return -1;
        n = 0;
        for (size_t i = 0; i < w; i++)
            n = n << 8 | buf[*pos + i];
        *pos += w;
        if (len - *pos < n)
            return -1;
        *pos += n;
        return 0;
    }
    return -1;
}

/* A field's unsigned value, at most max. */
static int slots__u(const msgpack_object *o, uint64_t max, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
        return -1;
    *v = o->via.u64;
    return 0;
}

#define SLOTS_READ_(m, max, nonzero)                                                               \
    if (slots__u(&f[i++], (max), &v->m) < 0 || ((nonzero) && v->m == 0))                           \
        goto out;

/* One kind's case of slots__decode: a body of exactly its fields, read
 * into *dst (key and klen from the body's head). */
#define SLOTS_DECODE_CASE_(k, type, dst, FIELDS)                                                   \
    case k: {                                                                                      \
        type *v = (dst);                                                                           \
        if (n != 2 FIELDS(SLOTS_COUNT_))                                                           \
            goto out;                                                                              \
        memset(v, 0, sizeof(*v));                                                                  \
        v->key = key;                                                                              \
        v->klen = klen;                                                                            \
        FIELDS(SLOTS_READ_)                                                                        \
        break;                                                                                     \
    }

/* Decodes buf: its kind (*r for a report, *g for a grant, *a for an ask
 * or an answer, *b for a beat), or a negative error.  Strings point into
 * buf. */
static int slots__decode(const uint8_t *buf, size_t len, uint64_t *from, struct slots_report *r,
                         struct slots_grant *g, struct slots_ask *a, struct slots_beat *b)
{
    msgpack_zone zone;
    msgpack_object root;
    size_t off = 0;
    int rc = -SLUICE_EPROTO;
    uint64_t kind;
    if (!slots_is_message(buf, len) || len > SLOTS_MSG_MAX)
        return -SLUICE_EINVAL;
    if (slots__walk(buf, len, &off, 0) < 0 || off != len)
        return -SLUICE_EPROTO;
    off = 0;
    if (!msgpack_zone_init(&zone, 2048))
        return -SLUICE_ENOMEM;
    if (msgpack_unpack((const char *)buf, len, &off, &zone, &root) != MSGPACK_UNPACK_SUCCESS ||
        off != len || root.type != MSGPACK_OBJECT_ARRAY || root.via.array.size != 4)
        goto out;
    const msgpack_object *h = root.via.array.ptr;
    const msgpack_object *body = &h[3];
    if (slots__u(&h[2], UINT64_MAX, from) < 0 || *from == 0 || body->type != MSGPACK_OBJECT_ARRAY ||
        body->via.array.size < 2)
        goto out;
    const msgpack_object *f = body->via.array.ptr;
    size_t n = body->via.array.size, i = 2;
    if (slots__u(&f[0], SLOTS_K_BEAT, &kind) < 0 || f[1].type != MSGPACK_OBJECT_BIN ||
        f[1].via.bin.size == 0 || f[1].via.bin.size > WIRE_KEY_MAX)
        goto out;
    const char *key = f[1].via.bin.ptr;
    size_t klen = f[1].via.bin.size;
    switch (kind) {
        SLOTS_DECODE_CASE_(SLOTS_K_REPORT, struct slots_report, r, SLOTS_REPORT_FIELDS)
        SLOTS_DECODE_CASE_(SLOTS_K_GRANT, struct slots_grant, g, SLOTS_GRANT_FIELDS)
        SLOTS_DECODE_CASE_(SLOTS_K_ASK, struct slots_ask, a, SLOTS_ASK_FIELDS)
        SLOTS_DECODE_CASE_(SLOTS_K_ANSWER, struct slots_ask, a, SLOTS_ANSWER_FIELDS)
        SLOTS_DECODE_CASE_(SLOTS_K_BEAT, struct slots_beat, b, SLOTS_BEAT_FIELDS)
    default:
        goto out;
    }
    rc = (int)kind;
out:
    msgpack_zone_destroy(&zone);
    return rc;
}

/* ---- lookups ---- */

static void *slots__find(struct table *t, const char *key, size_t klen)
{
    struct table_entry *e = table_find(t, key, klen);
    void *p = NULL;
    if (e != NULL)
        memcpy(&p, table_entry_value(e), sizeof(p));
    return p;
}

static int slots__put(struct table *t, const char *key, size_t klen, void *p)
{
    struct table_entry *e;
    int rc = table_insert(t, key, klen, sizeof(p), 0, 0, &e);
    if (rc == 0)
        memcpy(table_entry_value(e), &p, sizeof(p));
    return rc;
}

static void slots__del(struct table *t, const char *key, size_t klen)
{
    struct table_entry *e = table_find(t, key, klen);
    if (e != NULL)
        table_delete(t, e);
}

static struct slots_need *slots__need(struct slots *s, const char *key, size_t klen, int create)
{
    struct slots_need *n = slots__find(s->needs, key, klen);
    if (n != NULL || !create || klen == 0 || klen > WIRE_KEY_MAX)
        return n;
    n = calloc(1, sizeof(*n) + klen);
    if (n == NULL)
        return NULL;
    memcpy(n->key, key, klen);
    n->klen = klen;
    if (slots__put(s->needs, key, klen, n) < 0) {
        free(n);
        return NULL;
    }
    n->next = s->need_list;
    if (s->need_list != NULL)
        s->need_list->prev = n;
    s->need_list = n;
    s->st.keys++;
    return n;
}

static void slots__need_free(struct slots *s, struct slots_need *n)
{
    slots__del(s->needs, n->key, n->klen);
    if (n->prev != NULL)
        n->prev->next = n->next;
    else
        s->need_list = n->next;
    if (n->next != NULL)
        n->next->prev = n->prev;
    s->st.keys--;
    free(n);
}

static void slots__ledger_free(struct slots *s, struct slots_ledger *l);

static struct slots_ledger *slots__ledger(struct slots *s, const char *key, size_t klen, int create,
                                          int64_t now)
{
    struct slots_ledger *l = slots__find(s->ledgers, key, klen);
    int64_t lost_until = 0;
    if (l != NULL && l->lost_until != 0 && create) {
        /* Owned again: a new ledger (whose moved_at sees the other owner),
         * which lends nothing new while the old one's loans may be held. */
        lost_until = l->lost_until;
        slots__ledger_free(s, l);
        l = NULL;
    }
    if (l != NULL || !create)
        return l;
    l = calloc(1, sizeof(*l) + klen);
    if (l == NULL)
        return NULL;
    memcpy(l->key, key, klen);
    l->klen = klen;
    l->created = now;
    l->moved_at = slots__moved_at(s, key, klen);
    l->hold_until = lost_until;
    if (slots__put(s->ledgers, key, klen, l) < 0) {
        free(l);
        return NULL;
    }
    l->next = s->ledger_list;
    if (s->ledger_list != NULL)
        s->ledger_list->prev = l;
    s->ledger_list = l;
    s->st.owned++;
    return l;
}

static void slots__ledger_free(struct slots *s, struct slots_ledger *l)
{
    slots__del(s->ledgers, l->key, l->klen);
    if (l->prev != NULL)
        l->prev->next = l->next;
    else
        s->ledger_list = l->next;
    if (l->next != NULL)
        l->next->prev = l->prev;
    if (l->lost_until == 0)
        s->st.owned--;
    free(l->ask);
    free(l->peers);
    free(l);
}

/* ---- the node side ---- */

static int64_t slots__held(struct slots *s, const struct slots_need *n, int64_t *waiting)
{
    int64_t held = 0, w = 0;
    if (s->load != NULL)
        s->load(s->ud, n->key, n->klen, &held, &w);
    if (waiting != NULL)
        *waiting = w;
    return held;
}

static void slots__set_cap(struct slots *s, struct slots_need *n, int64_t cap)
{
    s->st.slots += (uint64_t)(cap - n->cap);
    n->cap = cap;
}

int64_t slots_cap(struct slots *s, const char *key, size_t klen, int64_t limit, int64_t ttl_ns,
                  int64_t held, int64_t qty, int64_t now)
{
    struct slots_need *n = slots__need(s, key, klen, 1);
    if (n == NULL)
        return 0;
    n->limit = limit;
    if (ttl_ns > n->ttl_ns)
        n->ttl_ns = ttl_ns; /* the longest lease this node gives on the key */
    n->active_at = now;
    if (held + qty > n->asked)
        n->asked = held + qty;
    if (held + qty > n->cap || now >= n->fresh_until)
        n->need = 1;
    if (now < n->fresh_until)
        return n->cap;
    if (held + qty <= n->cap)
        s->st.stale++; /* it has the slots, but may not use them now */
    return held;
}

void slots_note_held(struct slots *s, const char *key, size_t klen, int64_t held, int64_t now)
{
    struct slots_need *n = slots__need(s, key, klen, 0);
    (void)now;
    if (n == NULL)
        return;
    /* Above the grant (the owner asked for slots back): give back what
     * ended; the owner counts them free once it hears the lower cap. */
    if (n->cap > n->grant) {
        int64_t c = held > n->grant ? held : n->grant;
        if (c < n->cap) {
            slots__set_cap(s, n, c);
            n->need = 1;
        }
    }
}

int slots_uses(struct slots *s, const char *key, size_t klen)
{
    return slots__need(s, key, klen, 0) != NULL;
}

int slots_may_renew(struct slots *s, const char *key, size_t klen, int64_t now)
{
    struct slots_need *n = slots__need(s, key, klen, 0);
    if (n != NULL && now >= n->fresh_until)
        s->st.stale++;
    return n != NULL && now < n->fresh_until;
}

static void slots__owner_report(struct slots *s, const char *from, uint64_t from_life,
                                const struct slots_report *r, int64_t now);

static void slots__send_report(struct slots *s, struct slots_need *n, int64_t now)
{
    int64_t waiting = 0, held = slots__held(s, n, &waiting);
    const char *owner = slots__owner(s, n->key, n->klen);
    struct slots_report r;
    uint8_t buf[SLOTS_MSG_MAX];
    if (strcmp(owner, n->owner) != 0) {
        /* A new owner: its grants count from 1 again. */
        snprintf(n->owner, sizeof(n->owner), "%s", owner);
        n->gseq = 0;
    }
    /* Demand: what is held and waits, or the most a request asked for
     * since the last report (requests that do not wait ask only once). */
    int64_t want = held + waiting > n->asked ? held + waiting : n->asked;
    n->asked = 0;
    /* Not capped at the limit: above n the owner shares in proportion to
     * want, so a node with ten waiting clients gets about ten times the
     * time of a node with one, also when n = 1 (capped at n, each node got
     * an equal part whatever its clients).  An owner of an older release
     * caps it itself. */
    if ((uint64_t)want > SLOTS_UNITS_MAX)
        want = (int64_t)SLOTS_UNITS_MAX;
    n->rseq++;
    n->rtime[n->rseq % SLOTS_RTIMES] = now;
    r.key = n->key;
    r.klen = n->klen;
    r.limit = (uint64_t)n->limit;
    r.ttl_ms = (uint64_t)((n->ttl_ns + 999999) / 1000000);
    r.cap = (uint64_t)n->cap;
    r.held = (uint64_t)held;
    r.want = (uint64_t)want;
    r.gseq = n->gseq;
    r.rseq = n->rseq;
    r.served_by = n->served_by;
    n->need = 0;
    n->quiet = 0;
    s->st.reports_sent++;
    if (strcmp(owner, s->name) == 0) {
        slots__owner_report(s, s->name, s->life, &r, now);
        return;
    }
    size_t len = slots__encode(buf, sizeof(buf), s->life, SLOTS_K_REPORT, &r);
    if (len > 0)
        (void)s->send(s->send_ud, owner, buf, len);
}

static void slots__node_grant(struct slots *s, const char *from, uint64_t from_life,
                              const struct slots_grant *g, int64_t now)
{
    struct slots_need *n = slots__need(s, g->key, g->klen, 0);
    int was_fresh, more = 0;
    if (n == NULL || g->to != s->life || strcmp(slots__owner(s, g->key, g->klen), from) != 0)
        return; /* not ours, or not from the owner this node reports to */
    was_fresh = now < n->fresh_until;
    if (strcmp(n->owner, from) != 0) {
        snprintf(n->owner, sizeof(n->owner), "%s", from);
        n->gseq = 0;
    }
    if (from_life != n->served_by && g->gseq > 0) {
        /* Another life of the owner (it restarted): its grants count anew. */
        n->gseq = 0;
    }
    if (g->gseq > n->gseq) {
        int64_t held = slots__held(s, n, NULL), old = n->cap;
        n->gseq = g->gseq;
        n->served_by = from_life;
        n->grant = (int64_t)g->grant;
        if (n->grant >= n->cap)
            slots__set_cap(s, n, n->grant);
        else
            slots__set_cap(s, n, held > n->grant ? held : n->grant);
        if (n->cap < old)
            n->need = 1; /* tell the owner the lower cap soon */
        more = n->cap > old;
    }
    /* Fresh from the send time of the report this answers (never from its
     * receipt: a delayed answer must not stretch it). */
    if ((g->flags & SLOTS_F_FRESH) && g->ack_rseq != 0 && g->ack_rseq <= n->rseq &&
        n->rseq - g->ack_rseq < SLOTS_RTIMES) {
        int64_t f = n->rtime[g->ack_rseq % SLOTS_RTIMES] + s->fresh_ns;
        if (f > n->fresh_until)
            n->fresh_until = f;
    }
    if (n->cap > 0 && now < n->fresh_until && (more || !was_fresh) && s->on_slots != NULL)
        s->on_slots(s->ud, n->key, n->klen);
}

/* ---- the owner side ---- */

static struct slots_peer *slots__peer(struct slots_ledger *l, const char *name, uint64_t life)
{
    for (size_t i = 0; i < l->npeers; i++)
        if (l->peers[i].life == life && strcmp(l->peers[i].name, name) == 0)
            return &l->peers[i];
    if (l->npeers == l->cap_peers) {
        size_t c = l->cap_peers ? 2 * l->cap_peers : 4;
        struct slots_peer *np = realloc(l->peers, c * sizeof(*np));
        if (np == NULL)
            return NULL;
        l->peers = np;
        l->cap_peers = c;
    }
    struct slots_peer *p = &l->peers[l->npeers++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->life = life;
    /* Older lives of this name live on as ghosts until their leases end. */
    for (size_t i = 0; i + 1 < l->npeers; i++)
        if (strcmp(l->peers[i].name, name) == 0)
            l->peers[i].ghost = 1;
    return p;
}

/* The most p may hold: its cap, or more if grants it has not confirmed
 * are in flight. */
static int64_t slots__bound(const struct slots_peer *p)
{
    int64_t b = p->cap;
    for (int i = 0; i < p->npend; i++)
        if (p->pend[i].val > b)
            b = p->pend[i].val;
    return b;
}

/* Shares out the key's slots (see the note): sets each peer's target and
 * lends free slots to those below it. */
static void slots__allocate(struct slots *s, struct slots_ledger *l, int64_t now)
{
    int64_t n = l->limit, used = 0, demand = 0;
    size_t active = 0;
    for (size_t i = 0; i < l->npeers; i++) {
        struct slots_peer *p = &l->peers[i];
        p->bound = slots__bound(p);
        used += p->bound;
        if (!p->ghost) {
            int64_t w = p->want;
            demand = demand > INT64_MAX - w ? INT64_MAX : demand + w;
            if (p->want > 0 || p->held > 0)
                active++;
        }
    }
    /* Targets.  Demand within n: each peer its want, the spare evenly over
     * the active peers (below).  Demand above n: n shared in proportion to
     * want (held + waiting, not capped at n), so a waiting request has
     * about the same chance on every node, whichever node the load
     * balancer sent it to; the rounding remainder goes to the peers owed
     * most (below). */
    int64_t given = 0;
    for (size_t i = 0; i < l->npeers; i++) {
        struct slots_peer *p = &l->peers[i];
        int64_t w = p->ghost ? 0 : p->want;
        p->target = w;
        p->frac = 0;
        if (demand > n && w > 0) {
            /* n * w / demand exactly while n * w fits in 63 bits */
            if (n > 0 && w <= INT64_MAX / n && demand < INT64_MAX) {
                p->target = n * w / demand;
                p->frac = (double)(n * w % demand) / (double)demand;
            } else {
                double t = (double)n * ((double)w / (double)demand);
                p->target = (int64_t)t;
                p->frac = t - (double)p->target;
            }
            p->exact = (double)p->target + p->frac;
        } else {
            p->exact = (double)w;
        }
        given += p->target;
    }
    /* The rounding remainder, one slot each.  Given by fraction alone it
     * went to the same peers every time, and with fewer slots than peers
     * that want them the others were never served (5 nodes, n = 3: two
     * nodes' clients waited the whole run).  So the peers owed most come
     * first: what a peer is owed grows by its exact share less what it may
     * hold, per second (below), and one that holds a remainder slot now
     * keeps it until another is owed SLOTS_ROTATE_HOLD more (each move
     * idles a slot until its lease ends and the grant arrives).  Only
     * targets move: a slot is lent again only once its holder gave it
     * back, so the rotation never puts more than n in flight. */
    while (demand > n && given < n) {
        struct slots_peer *best = NULL;
        double best_rank = 0;
        for (size_t i = 0; i < l->npeers; i++) {
            struct slots_peer *p = &l->peers[i];
            if (p->ghost || p->target >= p->want || p->frac < 0)
                continue;
            double rank = p->owed + p->frac + (p->bound > p->target ? SLOTS_ROTATE_HOLD : 0.0);
            if (best == NULL || rank > best_rank) {
                best = p;
                best_rank = rank;
            }
        }
        if (best == NULL)
            break;
        best->target++;
        best->frac = -1; /* one each */
        given++;
    }
    /* What each peer is owed: its exact share less what it may hold, over
     * the time since the last share-out (at most a second of it); nothing
     * while demand fits in n. */
    double dt = l->alloc_at > 0 && now > l->alloc_at ? (double)(now - l->alloc_at) / 1e9 : 0.0;
    if (dt > 1.0)
        dt = 1.0;
    l->alloc_at = now;
    for (size_t i = 0; i < l->npeers; i++) {
        struct slots_peer *p = &l->peers[i];
        if (p->ghost || demand <= n) {
            p->owed = 0;
            continue;
        }
        p->owed += (p->exact - (double)p->bound) * dt;
        if (p->owed > SLOTS_OWED_MAX)
            p->owed = SLOTS_OWED_MAX;
        else if (p->owed < -SLOTS_OWED_MAX)
            p->owed = -SLOTS_OWED_MAX;
    }
    int64_t spare = n - given;
    for (size_t i = 0; i < l->npeers && spare > 0; i++) {
        struct slots_peer *p = &l->peers[i];
        if (p->ghost || (p->want == 0 && p->held == 0))
            continue;
        int64_t extra = active > 0 ? (n - given + (int64_t)active - 1) / (int64_t)active : 0;
        if (extra > spare)
            extra = spare;
        if (demand > n && p->want <= p->target)
            extra = 0; /* only the unsatisfied take the rounding remainder */
        p->target += extra;
        spare -= extra;
    }
    /* Cut off from a majority (the minority side of a partition), this
     * node lent nothing, but the majority's owner of the key may have lent
     * its slots, also those of nodes this ledger still counts and those it
     * reclaimed as silent: back with a majority, it lends nothing beyond
     * what is reported until those loans are reported or have ended, as a
     * new owner waits (before, a 4 s partition healed into 11 of 10 held). */
    int64_t healed = s->noq_at > 0 ? s->noq_at + slots__margin(s->fresh_ns + l->ttl_ns) : 0;
    int lend =
        s->known && slots__quorum(s) && now >= l->hold_until && now >= healed && l->asking == 0;
    /* Caps confirmed from a view that may be stale (no majority now, just
     * back from none, or caps that add up to more than n: the two sides of
     * a partition each granted them) are cut to what each peer holds: a
     * node uses its cap only once a grant with a majority behind it says
     * it is fresh, and that grant carries the cut cap.  Holders keep their
     * leases; only unused caps go. */
    int stale = !slots__quorum(s) || now < healed || used > n;
    int64_t free_slots = n - used;
    for (size_t i = 0; i < l->npeers; i++) {
        struct slots_peer *p = &l->peers[i];
        if (p->ghost)
            continue;
        int64_t g = p->target, lent = 0;
        if (g > p->bound) {
            int64_t more = lend && free_slots > 0 ? g - p->bound : 0;
            if (more > free_slots)
                more = free_slots;
            lent = more > 0 ? more : 0;
            g = p->bound + lent;
            free_slots -= lent;
            if (g < p->cap && !stale)
                g = p->cap;
        }
        if (stale && g > p->held)
            g = p->held > 0 ? p->held : 0;
        if (g != p->grant && p->npend < SLOTS_PEND) {
            s->st.lent += (uint64_t)lent;
            p->grant = g;
            p->gseq++;
            p->pend[p->npend].seq = p->gseq;
            p->pend[p->npend].val = g;
            p->npend++;
            if (p->ack_rseq == 0)
                p->ack_rseq = p->rseq; /* a grant always says how fresh */
        }
    }
}

static void slots__send_grant(struct slots *s, struct slots_ledger *l, struct slots_peer *p,
                              int64_t now)
{
    struct slots_grant g;
    uint8_t buf[SLOTS_MSG_MAX];
    g.key = l->key;
    g.klen = l->klen;
    g.to = p->life;
    g.grant = (uint64_t)(p->grant > 0 ? p->grant : 0);
    g.gseq = p->gseq > 0 ? p->gseq : 1;
    g.ack_rseq = p->ack_rseq;
    g.flags = slots__quorum(s) ? SLOTS_F_FRESH : 0;
    p->ack_rseq = 0;
    s->st.grants_sent++;
    if (p->gseq == 0) {
        /* Nothing granted yet: the first grant (0) opens the sequence, so
         * the answer still carries the freshness. */
        p->gseq = 1;
        p->grant = 0;
        p->pend[p->npend].seq = 1;
        p->pend[p->npend].val = 0;
        p->npend++;
    }
    if (strcmp(p->name, s->name) == 0 && p->life == s->life) {
        slots__node_grant(s, s->name, s->life, &g, now);
        return;
    }
    size_t len = slots__encode(buf, sizeof(buf), s->life, SLOTS_K_GRANT, &g);
    if (len > 0)
        (void)s->send(s->send_ud, p->name, buf, len);
}

/* Lends what the ledger may lend now and sends the grants that made. */
static void slots__lend(struct slots *s, struct slots_ledger *l, int64_t now)
{
    slots__allocate(s, l, now);
    for (size_t i = 0; i < l->npeers; i++) {
        struct slots_peer *p = &l->peers[i];
        if (!p->ghost && p->ack_rseq != 0)
            slots__send_grant(s, l, p, now);
    }
}

/*
 * Until when slots this ledger lent may still be held, or it cannot tell
 * (a hold or its own asks still run); 0 when nothing it knows of is out.
 * A lost ledger's answer was fixed when it was lost (no report reaches it
 * since: its holders moved to the new owner or stopped being fresh).
 */
static int64_t slots__busy_until(const struct slots *s, const struct slots_ledger *l, int64_t now)
{
    int64_t until = l->lost_until, any = 0;
    if (until == 0) {
        for (size_t i = 0; i < l->npeers; i++)
            any |= slots__bound(&l->peers[i]);
        if (any != 0)
            until = now + slots__margin(s->fresh_ns + l->ttl_ns);
        if (l->hold_until > until)
            until = l->hold_until;
        if (l->asking > 0 && l->ask_until > until)
            until = l->ask_until;
    }
    return until > now ? until : 0;
}

static void slots__send_ask(struct slots *s, const struct slots_ledger *l, int i)
{
    struct slots_ask a;
    uint8_t buf[SLOTS_MSG_MAX];
    memset(&a, 0, sizeof(a));
    a.key = l->key;
    a.klen = l->klen;
    a.nonce = l->ask[i].nonce;
    a.ttl_ms = (uint64_t)((l->ttl_ns + 999999) / 1000000);
    if (a.ttl_ms == 0)
        a.ttl_ms = 1;
    size_t len = slots__encode(buf, sizeof(buf), s->life, SLOTS_K_ASK, &a);
    if (len > 0)
        (void)s->send(s->send_ud, l->ask[i].name, buf, len);
}

/* Every ask is answered (or given up on): the list goes. */
static void slots__asks_end(struct slots_ledger *l)
{
    free(l->ask);
    l->ask = NULL;
    l->nask = 0;
    l->cap_ask = 0;
}

/* Adds the live member that ranks highest for the key after this node and
 * the members already asked, and asks it.  0 when none is left, -1 when
 * the ledger asked SLOTS_ASK_MAX already (or has no memory for one more). */
static int slots__ask_next(struct slots *s, struct slots_ledger *l)
{
    uint64_t kh = hrw_hash(l->key, l->klen), bs = 0;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < s->nlive; i++) {
        int taken = strcmp(s->live[i], s->name) == 0;
        for (int j = 0; j < l->nask && !taken; j++)
            taken = strcmp(s->live[i], l->ask[j].name) == 0;
        uint64_t sc = hrw_score(kh, s->live_hash[i]);
        if (!taken && (best == SIZE_MAX || sc > bs)) {
            best = i;
            bs = sc;
        }
    }
    if (best == SIZE_MAX)
        return 0;
    if (l->nask == l->cap_ask) {
        int c = l->cap_ask ? 2 * l->cap_ask : SLOTS_ASK;
        struct slots_asked *na = NULL;
        if (c <= SLOTS_ASK_MAX)
            na = realloc(l->ask, (size_t)c * sizeof(*na));
        if (na == NULL)
            return -1;
        l->ask = na;
        l->cap_ask = c;
    }
    int k = l->nask++;
    memcpy(l->ask[k].name, s->live[best], sizeof(l->ask[k].name));
    if (++s->nonce == 0)
        s->nonce = 1;
    l->ask[k].nonce = s->nonce;
    l->ask[k].done = 0;
    l->asking++;
    slots__send_ask(s, l, k);
    return 1;
}

/*
 * A new ledger asks the SLOTS_ASK live members that rank highest for the
 * key after this node (the one that owned it before this node joined, and
 * the next, in case it joined too) whether they lent slots that may still
 * be held, and lends nothing beyond what is reported until they answer.
 * A node that has been a member all along knows the past owners from its
 * past views; a node new to the cluster does not, and its first
 * reporters (itself, nodes never served) are not all the holders.  An
 * asked member that is itself new to the cluster passes the ask on (see
 * slots__got_answer), so the asks go down the ranking until a member that
 * was there before answers: the old owner ranks at or above it.
 */
static void slots__start_asks(struct slots *s, struct slots_ledger *l, int64_t now)
{
    l->asked = 1;
    l->nask = 0;
    l->asking = 0;
    l->vouched = 0;
    l->ask_until = now + slots__margin(s->fresh_ns + l->ttl_ns);
    for (int k = 0; k < SLOTS_ASK; k++) {
        int rc = slots__ask_next(s, l);
        if (rc < 0 && l->ask_until > l->hold_until)
            l->hold_until = l->ask_until; /* no memory to ask: wait instead */
        if (rc <= 0)
            break;
    }
}

/*
 * Until when an owner this node saw lately, and that is no longer a
 * member, may have lent slots of the key that are still held (0: none).
 * A member that left (or died) cannot be asked, and the new owner, if it
 * is new to the cluster, never saw it own the key: this node vouches for
 * what it saw.  A view lost from the ring counts as such an owner.
 */
static int64_t slots__gone_until(const struct slots *s, const char *key, size_t klen,
                                 int64_t ttl_ns)
{
    uint64_t kh = hrw_hash(key, klen);
    int64_t at = s->past_lost;
    for (size_t k = 0; k < s->npast; k++) {
        size_t i = (s->past_head + k) % SLOTS_VIEWS;
        if (s->past[i].n == 0 || s->past[i].ended <= at)
            continue;
        uint64_t o = s->past[i].hash[hrw_pick(kh, s->past[i].hash, s->past[i].n)];
        if (o != s->self_hash && s->nlive > 0 &&
            bsearch(&o, s->live_hash, s->nlive, sizeof(o), slots__cmp_u64) == NULL)
            at = s->past[i].ended;
    }
    return at > 0 ? at + slots__gone_wait(s, ttl_ns) : 0;
}

/* An ask from the owner of a key (this node would own it without that
 * one): did this node lend slots of it that may still be held, or did it
 * see an owner that is gone lend them; and was it in the cluster long
 * enough to vouch for the owners before the asker? */
static void slots__answer_ask(struct slots *s, const char *from, const struct slots_ask *q,
                              int64_t now)
{
    struct slots_ask a;
    uint8_t buf[SLOTS_MSG_MAX];
    int64_t until = 0, ttl_ns = (int64_t)q->ttl_ms * 1000000;
    memset(&a, 0, sizeof(a));
    a.key = q->key;
    a.klen = q->klen;
    a.nonce = q->nonce;
    a.state = SLOTS_A_FREE;
    if (strcmp(slots__owner(s, q->key, q->klen), s->name) == 0) {
        /* Still the owner in this view (it may lend on): ask again. */
        a.state = SLOTS_A_WAIT;
    } else {
        struct slots_ledger *l = slots__ledger(s, q->key, q->klen, 0, now);
        if (l != NULL)
            until = slots__busy_until(s, l, now);
        int64_t g = slots__gone_until(s, q->key, q->klen, ttl_ns);
        if (g > until)
            until = g;
        /* A past life of this node may have lent (its holders report as
         * served by another life, which holds the new ledger anyway; this
         * covers the ones that have not reported yet).  A node that does
         * not know yet answers from its ledger alone: it learns whether it
         * had a past life only once its join is answered (for the first
         * seed, one round trip after a peer joins it, or a 2 s retry under
         * loss), and a fresh cluster must not wait for it. */
        if (s->known && s->restarted) {
            int64_t r = s->started + slots__margin(s->fresh_ns + ttl_ns);
            if (r > until)
                until = r;
        }
        int fresh_member =
            s->joined_at == 0 || now < s->joined_at + slots__margin(s->fresh_ns + ttl_ns);
        if (until > now) {
            int64_t ms = (until - now + 999999) / 1000000;
            a.state = fresh_member ? SLOTS_A_BUSY_NEW : SLOTS_A_BUSY;
            a.hold_ms = (uint64_t)(ms < SLOTS_HOLD_MAX_MS ? ms : SLOTS_HOLD_MAX_MS);
        } else if (fresh_member) {
            a.state = SLOTS_A_FREE_NEW;
        }
    }
    size_t len = slots__encode(buf, sizeof(buf), s->life, SLOTS_K_ANSWER, &a);
    if (len > 0)
        (void)s->send(s->send_ud, from, buf, len);
}

/* An answer to one of this node's asks: a busy one holds the ledger's
 * free slots for what it says; one from a member new to the cluster asks
 * the next member in the ranking too, until one that was there before
 * answers (or none is left: every member is new, nobody lent before); the
 * last answer lets it lend. */
static void slots__got_answer(struct slots *s, const char *from, const struct slots_ask *a,
                              int64_t now)
{
    struct slots_ledger *l = slots__ledger(s, a->key, a->klen, 0, now);
    if (l == NULL || l->lost_until != 0 || a->state == SLOTS_A_WAIT)
        return; /* a wait: the ask goes again at the next tick */
    for (int i = 0; i < l->nask; i++) {
        if (l->ask[i].done || l->ask[i].nonce != a->nonce || strcmp(l->ask[i].name, from) != 0)
            continue;
        if (a->state == SLOTS_A_BUSY || a->state == SLOTS_A_BUSY_NEW) {
            int64_t h = now + (int64_t)a->hold_ms * 1000000;
            if (h > l->hold_until)
                l->hold_until = h;
        }
        l->ask[i].done = 1;
        if (a->state == SLOTS_A_FREE || a->state == SLOTS_A_BUSY)
            l->vouched = 1;
        else if (!l->vouched && slots__ask_next(s, l) < 0 && l->ask_until > l->hold_until)
            l->hold_until = l->ask_until; /* too many new members to ask (or no memory): wait */
        if (--l->asking == 0) {
            slots__asks_end(l);
            if (strcmp(slots__owner(s, l->key, l->klen), s->name) == 0)
                slots__lend(s, l, now);
        }
        return;
    }
}

/* The asks still unanswered at a tick: an asked member that left the view
 * may have lent until now (hold for fresh + TTL); past ask_until, what an
 * asked member lent before this ledger began has ended; else ask again
 * (asks and answers may be lost). */
static void slots__tick_asks(struct slots *s, struct slots_ledger *l, int64_t now)
{
    for (int i = 0; i < l->nask && l->asking > 0; i++) {
        int present = 0;
        if (l->ask[i].done)
            continue;
        for (size_t k = 0; k < s->nlive && !present; k++)
            present = strcmp(s->live[k], l->ask[i].name) == 0;
        if (now >= l->ask_until || !present) {
            if (!present) {
                int64_t h = now + slots__gone_wait(s, l->ttl_ns);
                if (h > l->hold_until)
                    l->hold_until = h;
            }
            l->ask[i].done = 1;
            l->asking--;
            continue;
        }
        slots__send_ask(s, l, i);
    }
    if (l->asking == 0)
        slots__asks_end(l);
}

static void slots__owner_report(struct slots *s, const char *from, uint64_t from_life,
                                const struct slots_report *r, int64_t now)
{
    if (strcmp(slots__owner(s, r->key, r->klen), s->name) != 0)
        return; /* not the owner in this view: the reporter will move on */
    struct slots_ledger *l = slots__ledger(s, r->key, r->klen, 1, now);
    if (l == NULL)
        return;
    struct slots_peer *p = slots__peer(l, from, from_life);
    if (p == NULL || r->rseq <= p->rseq)
        return; /* old or repeated */
    int64_t ttl = (int64_t)r->ttl_ms * 1000000;
    l->limit = (int64_t)r->limit;
    if (ttl > l->ttl_ns)
        l->ttl_ns = ttl;
    /* A reporter served by another owner life, or this node's own past
     * life, may mean holders this ledger does not know: lend nothing new
     * until their leases have surely ended. */
    if ((r->served_by != 0 && r->served_by != s->life) ||
        (s->restarted && now < s->started + slots__margin(s->fresh_ns + l->ttl_ns))) {
        int64_t h = l->created + slots__margin(s->fresh_ns + l->ttl_ns);
        if (h > l->hold_until)
            l->hold_until = h;
    }
    /* Another node owned the key lately (in a view this node saw end):
     * it may have lent slots to nodes that have not reported here yet,
     * even if every reporter so far says it was never served, or served
     * by this very life in an earlier spell of ownership. */
    if (l->moved_at > 0) {
        int64_t h = l->moved_at + slots__gone_wait(s, l->ttl_ns);
        if (h > l->hold_until)
            l->hold_until = h;
    }
    if (!l->asked)
        slots__start_asks(s, l, now);
    /* A node this ledger has not granted to yet may have applied grants of
     * an earlier ledger of this life: number the new ones above them, or
     * it would take them for old ones. */
    if (p->gseq == 0 && p->npend == 0 && r->gseq > 0 && r->served_by == s->life)
        p->gseq = r->gseq;
    p->rseq = r->rseq;
    if ((int64_t)r->cap < p->cap)
        s->st.returned += (uint64_t)(p->cap - (int64_t)r->cap);
    p->cap = (int64_t)r->cap;
    p->held = (int64_t)r->held;
    p->want = (int64_t)r->want;
    p->heard = now;
    p->ack_rseq = r->rseq;
    /* Grants it confirms are no longer in flight. */
    int k = 0;
    for (int i = 0; i < p->npend; i++)
        if (p->pend[i].seq > r->gseq)
            p->pend[k++] = p->pend[i];
    p->npend = k;
    l->idle = 0;
    slots__allocate(s, l, now);
    slots__send_grant(s, l, p, now);
}

/* Peers silent for fresh + TTL (+ margin) hold nothing any more. */
static void slots__reclaim(struct slots *s, struct slots_ledger *l, int64_t now)
{
    int64_t wait = slots__margin(s->fresh_ns + l->ttl_ns);
    size_t k = 0;
    for (size_t i = 0; i < l->npeers; i++) {
        struct slots_peer *p = &l->peers[i];
        if (now - p->heard >= wait) {
            s->st.reclaimed += (uint64_t)slots__bound(p);
            continue;
        }
        l->peers[k++] = *p;
    }
    l->npeers = k;
}

/* ---- beats (see "Majority" in slots.h) ---- */

static void slots__send_beat(struct slots *s, const char *to, uint64_t nonce, int pong)
{
    struct slots_beat b;
    uint8_t buf[SLOTS_MSG_MAX];
    b.key = to;
    b.klen = strlen(to);
    b.nonce = nonce;
    b.pong = (uint64_t)pong;
    size_t len = slots__encode(buf, sizeof(buf), s->life, SLOTS_K_BEAT, &b);
    if (len > 0)
        (void)s->send(s->send_ud, to, buf, len);
}

/* While it uses or keeps the ledger of a global lease key, a round of
 * pings to every other live member every SLOTS_BEAT_EVERY; the spell of
 * rounds ends with the last of them.  Not only owners beat: a node that
 * becomes a key's owner because its old owner left the view (cut off in a
 * minority, say) must be strict at once, or members it has not suspected
 * yet would make it a majority and its first answers would make its
 * nodes' old caps fresh again beside the old owner's new loans (on five
 * real daemons: 14 of 10 held). */
static void slots__tick_beats(struct slots *s, int64_t now)
{
    if (s->ledger_list == NULL && s->need_list == NULL) {
        s->beat_since = 0;
        return;
    }
    if (s->beat_since == 0) {
        s->beat_since = now;
        s->beat_next = now;
    }
    if (now < s->beat_next)
        return;
    s->beat_next = now + SLOTS_BEAT_EVERY(s);
    s->beat_nonce++;
    s->beat_sent[s->beat_nonce % SLOTS_BEAT_RING] = now > 0 ? now : 1; /* 0 is "never" */
    for (size_t i = 0; i < s->nlive; i++)
        if (strcmp(s->live[i], s->name) != 0)
            slots__send_beat(s, s->live[i], s->beat_nonce, 0);
}

/* A ping for this node is answered; an answer to one of its recent pings
 * marks the member heard at that ping's send time (the majority is
 * recomputed at the next tick: an answer only adds to it).  Beats for
 * another name are ignored. */
static void slots__got_beat(struct slots *s, const char *from, const struct slots_beat *b)
{
    if (b->klen != strlen(s->name) || memcmp(b->key, s->name, b->klen) != 0)
        return;
    if (!b->pong) {
        slots__send_beat(s, from, b->nonce, 1);
        return;
    }
    if (b->nonce > s->beat_nonce || s->beat_nonce - b->nonce >= SLOTS_BEAT_RING)
        return; /* not one of ours, or too old to tell when it was sent */
    uint64_t h = hrw_hash(from, strlen(from));
    const uint64_t *o =
        s->nlive > 0 ? bsearch(&h, s->live_hash, s->nlive, sizeof(*o), slots__cmp_u64) : NULL;
    if (o == NULL)
        return;
    size_t i = (size_t)(o - s->live_hash);
    int64_t at = s->beat_sent[b->nonce % SLOTS_BEAT_RING];
    if (at > s->beat_at[i])
        s->beat_at[i] = at;
}

int slots_receive(struct slots *s, const char *from, const uint8_t *buf, size_t len, int64_t now)
{
    struct slots_report r;
    struct slots_grant g;
    struct slots_ask a;
    struct slots_beat b;
    uint64_t life;
    int rc;
    if (from == NULL || strlen(from) >= 64 || strcmp(from, s->name) == 0) {
        s->st.bad_packets++;
        return -SLUICE_EINVAL;
    }
    rc = slots__decode(buf, len, &life, &r, &g, &a, &b);
    if (rc < 0) {
        s->st.bad_packets++;
        return rc;
    }
    s->st.received++;
    if (rc == SLOTS_K_REPORT)
        slots__owner_report(s, from, life, &r, now);
    else if (rc == SLOTS_K_GRANT)
        slots__node_grant(s, from, life, &g, now);
    else if (rc == SLOTS_K_ASK)
        slots__answer_ask(s, from, &a, now);
    else if (rc == SLOTS_K_ANSWER)
        slots__got_answer(s, from, &a, now);
    else
        slots__got_beat(s, from, &b);
    return 0;
}

void slots_tick(struct slots *s, int64_t now)
{
    struct slots_need *n, *nn;
    struct slots_ledger *l, *ln;
    slots__tick_beats(s, now);
    slots__quorum_update(s, now); /* beats age */
    for (n = s->need_list; n != NULL; n = nn) {
        int64_t waiting = 0, held = slots__held(s, n, &waiting);
        nn = n->next;
        int idle = held == 0 && waiting == 0 && n->cap == 0 && n->asked == 0 && !n->need;
        if (!idle) {
            n->active_at = now;
        } else if (now - n->active_at >= slots__margin(s->fresh_ns + n->ttl_ns)) {
            /* Forgotten only once its history (which owner served it)
             * no longer matters to a new owner's caution. */
            slots__need_free(s, n);
            continue;
        }
        /* Reports keep the node fresh and the owner's view current: at
         * once when short, else every SLOTS_REPORT_EVERY ticks while
         * anything is held, wanted or lent. */
        if (n->need || (++n->quiet >= SLOTS_REPORT_EVERY && !idle) ||
            (n->cap > 0 && now + s->fresh_ns / 2 >= n->fresh_until))
            slots__send_report(s, n, now);
    }
    for (l = s->ledger_list; l != NULL; l = ln) {
        ln = l->next;
        if (l->lost_until != 0) {
            if (now >= l->lost_until)
                slots__ledger_free(s, l);
            continue;
        }
        if (strcmp(slots__owner(s, l->key, l->klen), s->name) != 0) {
            /* No longer the owner: the reporters move to the new one, whose
             * ledger starts from their reports.  While slots it lent may
             * still be held, the ledger stays to tell the new owner so. */
            int64_t until = slots__busy_until(s, l, now);
            if (until > now) {
                l->lost_until = until;
                s->st.owned--;
            } else {
                slots__ledger_free(s, l);
            }
            continue;
        }
        if (l->asking > 0)
            slots__tick_asks(s, l, now);
        slots__reclaim(s, l, now);
        int64_t any = 0;
        for (size_t i = 0; i < l->npeers; i++)
            any |= slots__bound(&l->peers[i]) | l->peers[i].want | l->peers[i].held;
        if (l->npeers == 0 || (any == 0 && ++l->idle >= SLOTS_IDLE_TICKS)) {
            slots__ledger_free(s, l);
            continue;
        }
        if (any != 0)
            l->idle = 0;
        /* Lend what freed up (silent peers reclaimed, caps given back);
         * grants go out with the answers to reports, and to peers below
         * their target now. */
        slots__lend(s, l, now);
    }
}

void slots_get_stats(const struct slots *s, struct slots_stats *out)
{
    *out = s->st;
}

#define SLOTS_ROW(field, info, metric, kind, help)                                                 \
    COUNTER_ROW(struct slots_stats, field, info, metric, kind, help)
static const struct counter_row slots__rows[] = {
    SLOTS_ROW(keys, "global_lease_keys", "global_lease_keys", COUNTER_GAUGE,
              "Global concurrency keys this node uses."),
    SLOTS_ROW(owned, "global_lease_owned_keys", "global_lease_owned_keys", COUNTER_GAUGE,
              "Global concurrency keys whose slots this node lends as their owner."),
    SLOTS_ROW(slots, "slots_held", "slots_held", COUNTER_GAUGE,
              "Slots of global concurrency keys this node holds (may hand out) now."),
    SLOTS_ROW(lent, "slots_lent", "slots_lent_total", COUNTER_TOTAL,
              "Slots this node lent to nodes as the owner of their keys."),
    SLOTS_ROW(returned, "slots_returned", "slots_returned_total", COUNTER_TOTAL,
              "Slots nodes gave back to this node as the owner of their keys."),
    SLOTS_ROW(reclaimed, "slots_expired_by_silence", "slots_expired_by_silence_total",
              COUNTER_TOTAL,
              "Slots of silent nodes counted free again after their last report, "
              "freshness and TTL."),
    SLOTS_ROW(stale, "global_lease_stale_refusals", "global_lease_stale_refusals_total",
              COUNTER_TOTAL,
              "Global lease grants and renewals refused because this node's slots were "
              "not fresh (no answer from the key's owner with a majority lately)."),
    SLOTS_ROW(reports_sent, "slots_reports_sent", "slots_reports_sent_total", COUNTER_TOTAL,
              "Slot reports sent to owners."),
    SLOTS_ROW(grants_sent, "slots_grants_sent", "slots_grants_sent_total", COUNTER_TOTAL,
              "Slot grants sent as an owner."),
    SLOTS_ROW(bad_packets, "slots_bad_packets", "slots_bad_packets_total", COUNTER_TOTAL,
              "Slot messages dropped as malformed or foreign."),
};
#undef SLOTS_ROW
const struct counter_table slots_counters = COUNTER_TABLE(slots__rows);
