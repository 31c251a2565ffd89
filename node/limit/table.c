/*
 * table: chained hash table of owner-sized entries, with drained-key reclaim,
 * a max_keys bound and a Redis-style reverse-binary scan cursor.  Design and
 * memory figures are in table.h.
 *
 * Why chaining rather than open addressing: the chain link costs 8 bytes per
 * entry but the bucket array then needs only one pointer per key at load 1
 * (open addressing needs ~2 slots per key to stay fast), entries never move
 * on delete, and the reverse-binary scan cursor keeps its guarantee across
 * resizes, which linear probing with backward-shift deletion cannot give.
 */
#include "table.h"

#include "slab.h"
#include "sluice/error.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define TABLE_MIN_BUCKETS 16u
#define SAMPLE_ENTRIES    16u /* entries examined when full */
#define SAMPLE_BUCKETS    64u /* bound on buckets walked for that sample */
/* Buckets of the old array moved per insert or delete while a resize is
 * in progress: a growth moves n buckets over the n inserts that fill the
 * new array, a shrink over the n/16 deletes before the next one. */
#define REHASH_STEP 16u
/* A growth prepared ahead (table__prepare): over the last
 * 1/TABLE_PREP_WINDOW of the inserts before a growth, the array it will
 * take is mapped and faulted in, TABLE_PREP_CHUNK bytes every
 * TABLE_PREP_EVERY inserts (done three quarters of the way: 16 bytes of
 * array per bucket, n/16 inserts).  A fresh array is otherwise faulted
 * wherever the next keys land, each page twice when a lookup reads it
 * before an insert writes it: on the 2-core VM of the benchmarks, a loop
 * turn right after a table of a few hundred thousand keys grew took 400
 * faults and 6 ms.  Faulted ahead, it costs half as much (a call per 16
 * KiB instead of a trap per 4 KiB), a few microseconds at a time.  The
 * price is the next array's memory up to n/16 inserts early (16 bytes per
 * bucket of the current array, at most); a prepared array is let go if
 * the keys fall back below 1 - 2/TABLE_PREP_WINDOW of the buckets. */
#define TABLE_PREP_WINDOW 16u
#define TABLE_PREP_CHUNK  ((size_t)16 << 10)
#define TABLE_PREP_EVERY  48u
/* A prepared array is a power of two times SLAB_ARRAY_MAP bytes: whole
 * chunks fill it exactly. */
_Static_assert(SLAB_ARRAY_MAP % TABLE_PREP_CHUNK == 0, "prepared in whole chunks");

struct table {
    struct table_entry **buckets;
    uint64_t mask; /* nbuckets - 1 */
    /* A resize in progress (Redis's incremental rehash): the old array,
     * whose buckets below rehash_idx have moved to buckets already.  NULL
     * when none. */
    struct table_entry **old;
    uint64_t omask, rehash_idx;
    /* The array of the next growth while it is prepared (table__prepare):
     * next_n buckets, its first next_done bytes faulted in.  NULL when
     * none. */
    struct table_entry **next;
    uint64_t next_n;
    size_t next_done;
    uint32_t prep_tick;
    uint64_t grown_ready; /* growths that took a prepared array */
    size_t count;         /* entries */
    uint64_t reclaim_cursor;
    uint64_t rng;    /* splitmix state for eviction sampling */
    uint64_t k0, k1; /* SipHash key */
    struct table_config cfg;
    uint64_t reclaimed, evicted, full;
    /* Entries up to SLAB_MAX bytes (all but those of long keys) come from
     * here; larger ones from malloc, flagged TABLE_F_HEAP. */
    struct slab *slab;
};

/* ---- SipHash-1-3 (keyed, so bucket positions are not predictable) ---- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

static uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static uint32_t table__hash(const struct table *t, const char *key, size_t len)
{
    const unsigned char *in = (const unsigned char *)key;
    uint64_t v0 = t->k0 ^ 0x736f6d6570736575ULL;
    uint64_t v1 = t->k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = t->k0 ^ 0x6c7967656e657261ULL;
    uint64_t v3 = t->k1 ^ 0x7465646279746573ULL;
    uint64_t b = (uint64_t)len << 56, m;
    size_t left = len & 7;
    const unsigned char *end = in + (len - left);

    for (; in != end; in += 8) {
        m = load_le64(in);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    switch (left) {
    case 7:
        b |= (uint64_t)in[6] << 48;
        /* fall through */
    case 6:
        b |= (uint64_t)in[5] << 40;
        /* fall through */
    case 5:
        b |= (uint64_t)in[4] << 32;
        /* fall through */
    case 4:
        b |= (uint64_t)in[3] << 24;
        /* fall through */
    case 3:
        b |= (uint64_t)in[2] << 16;
        /* fall through */
    case 2:
        b |= (uint64_t)in[1] << 8;
        /* fall through */
    case 1:
        b |= (uint64_t)in[0];
        break;
    default:
        break;
    }
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    b = v0 ^ v1 ^ v2 ^ v3;
    return (uint32_t)(b ^ (b >> 32));
}

static uint64_t table__rand(struct table *t)
{
    uint64_t z = (t->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ---- lifecycle ---- */

int table_create(struct table **out, const struct table_config *cfg)
{
    struct table *t;

    if (out == NULL || cfg == NULL)
        return -SLUICE_EINVAL;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return -SLUICE_ENOMEM;
    t->buckets = slab_array_alloc(TABLE_MIN_BUCKETS * sizeof(*t->buckets));
    if (t->buckets == NULL || slab_create(&t->slab) != 0) {
        slab_array_free(t->buckets, TABLE_MIN_BUCKETS * sizeof(*t->buckets));
        free(t);
        return -SLUICE_ENOMEM;
    }
    t->mask = TABLE_MIN_BUCKETS - 1;
    t->cfg = *cfg;
    if (cfg->seed[0] == 0 && cfg->seed[1] == 0) {
        uint64_t s[2];
        if (getrandom(s, sizeof(s), 0) != (ssize_t)sizeof(s)) {
            /* No entropy source: still better than a fixed key. */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            s[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)t;
            s[1] = (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts;
        }
        t->k0 = s[0];
        t->k1 = s[1];
    } else {
        t->k0 = cfg->seed[0];
        t->k1 = cfg->seed[1];
    }
    t->rng = t->k0 ^ t->k1;
    *out = t;
    return 0;
}

static void table__free_entry(struct table *t, struct table_entry *e)
{
    if (t->cfg.free_value != NULL)
        t->cfg.free_value(t->cfg.ud, e);
    if (e->flags & TABLE_F_HEAP)
        free(e);
    else
        slab_free(t->slab, e);
}

static void table__free_chains(struct table *t, struct table_entry **b, uint64_t from,
                               uint64_t mask)
{
    for (uint64_t i = from; b != NULL && i <= mask; i++) {
        struct table_entry *e = b[i], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            table__free_entry(t, e);
        }
    }
}

void table_destroy(struct table *t)
{
    if (t == NULL)
        return;
    table__free_chains(t, t->buckets, 0, t->mask);
    table__free_chains(t, t->old, t->rehash_idx, t->omask);
    slab_array_free(t->buckets, (size_t)(t->mask + 1) * sizeof(*t->buckets));
    slab_array_free(t->old, (size_t)(t->omask + 1) * sizeof(*t->old));
    slab_array_free(t->next, (size_t)t->next_n * sizeof(*t->next));
    slab_destroy(t->slab);
    free(t);
}

/* Moves up to n buckets of the old array (a resize in progress) into the
 * current one; frees the old array when the last has moved. */
static void table__rehash_step(struct table *t, uint64_t n)
{
    for (; t->old != NULL && n > 0; n--) {
        struct table_entry *e = t->old[t->rehash_idx], *next;
        for (; e != NULL; e = next) {
            next = e->next;
            e->next = t->buckets[e->hash & t->mask];
            t->buckets[e->hash & t->mask] = e;
        }
        t->old[t->rehash_idx] = NULL;
        if (t->rehash_idx++ == t->omask) {
            slab_array_free(t->old, (size_t)(t->omask + 1) * sizeof(*t->old));
            t->old = NULL;
        }
    }
}

/* The old array's chain an entry of hash h may still sit in (a resize in
 * progress, its bucket not moved yet), else NULL.  Entries inserted since
 * the resize began are in the current array whatever their old bucket. */
static struct table_entry **table__old_head(struct table *t, uint32_t h)
{
    if (t->old != NULL && (h & t->omask) >= t->rehash_idx)
        return &t->old[h & t->omask];
    return NULL;
}

/* Lets a prepared array go (table__prepare). */
static void table__drop_next(struct table *t)
{
    slab_array_free(t->next, (size_t)t->next_n * sizeof(*t->next));
    t->next = NULL;
    t->next_n = 0;
}

/* Starts a resize to nbuckets (a power of two): a new array now (for a
 * growth, the one table__prepare faulted in), the entries moved
 * REHASH_STEP buckets per insert or delete, so no call stalls on a rehash
 * of millions (a turn of the event loop stays short).  A resize still in
 * progress is finished first (a rare, short walk: the steps finish a
 * growth before it fills the new array).  On allocation failure the table
 * simply stays at its current size: chains get longer, nothing breaks. */
static void table__resize(struct table *t, uint64_t nbuckets)
{
    table__rehash_step(t, UINT64_MAX);
    struct table_entry **nb;
    if (t->next != NULL && t->next_n == nbuckets) {
        nb = t->next; /* prepared: its pages are in already, or some of them */
        t->next = NULL;
        t->next_n = 0;
        t->grown_ready++;
    } else {
        table__drop_next(t);
        nb = slab_array_alloc((size_t)nbuckets * sizeof(*nb));
    }
    if (nb == NULL)
        return;
    t->old = t->buckets;
    t->omask = t->mask;
    t->rehash_idx = 0;
    t->buckets = nb;
    t->mask = nbuckets - 1;
    t->reclaim_cursor &= t->mask;
}

/* Keeps the load factor between 1/4 and 1 (grow above 1, shrink below 1/8 to
 * avoid flapping). */
static void table__maybe_shrink(struct table *t)
{
    uint64_t n = t->mask + 1;
    if (t->next != NULL && t->count < n - 2 * (n / TABLE_PREP_WINDOW))
        table__drop_next(t); /* the growth it was for is not coming soon */
    if (n > TABLE_MIN_BUCKETS && t->count < n / 8)
        table__resize(t, n / 2);
}

/* Prepares the next growth's array over the last inserts before it (see
 * TABLE_PREP_WINDOW), for an array large enough to be mapped and a table
 * whose max_keys lets it grow; without memory nothing is prepared and the
 * growth maps its array as it comes. */
static void table__prepare(struct table *t)
{
    uint64_t n = t->mask + 1;
    size_t len = (size_t)(2 * n) * sizeof(*t->buckets);
    if (t->old != NULL || len < SLAB_ARRAY_MAP || t->count < n - n / TABLE_PREP_WINDOW ||
        (t->cfg.max_keys != 0 && t->cfg.max_keys <= n))
        return;
    if (t->next == NULL) {
        t->next = slab_array_alloc(len);
        if (t->next == NULL)
            return;
        t->next_n = 2 * n;
        t->next_done = 0;
        t->prep_tick = 0;
    }
    if (t->next_done < len && t->prep_tick++ % TABLE_PREP_EVERY == 0) {
        slab_array_populate(t->next, len, t->next_done, TABLE_PREP_CHUNK);
        t->next_done += TABLE_PREP_CHUNK;
    }
}

/* ---- lookup ---- */

uint32_t table_hash(const struct table *t, const char *key, size_t klen)
{
    return table__hash(t, key, klen > TABLE_MAX_KEY ? 0 : klen);
}

void table_get_seed(const struct table *t, uint64_t seed[2])
{
    seed[0] = t->k0;
    seed[1] = t->k1;
}

/* The lookup of table_find, with key's hash h given. */
static inline struct table_entry *table__find(struct table *t, const char *key, size_t klen,
                                              uint32_t h)
{
    struct table_entry *e;

    for (e = t->buckets[h & t->mask]; e != NULL; e = e->next) {
        if (e->hash == h && e->klen == klen && memcmp(table_entry_key(e), key, klen) == 0)
            return e;
    }
    struct table_entry **old = table__old_head(t, h);
    for (e = old != NULL ? *old : NULL; e != NULL; e = e->next) {
        if (e->hash == h && e->klen == klen && memcmp(table_entry_key(e), key, klen) == 0)
            return e;
    }
    return NULL;
}

struct table_entry *table_find(struct table *t, const char *key, size_t klen)
{
    if (klen > TABLE_MAX_KEY)
        return NULL;
    return table__find(t, key, klen, table__hash(t, key, klen));
}

struct table_entry *table_find_for_insert(struct table *t, const char *key, size_t klen,
                                          uint32_t *hash)
{
    *hash = table__hash(t, key, klen > TABLE_MAX_KEY ? 0 : klen);
    return klen > TABLE_MAX_KEY ? NULL : table__find(t, key, klen, *hash);
}

struct table_entry *table_find_hashed(struct table *t, const char *key, size_t klen, uint32_t h)
{
    return klen > TABLE_MAX_KEY ? NULL : table__find(t, key, klen, h);
}

uint32_t table_prefetch(const struct table *t, const char *key, size_t klen)
{
    uint32_t h = table__hash(t, key, klen > TABLE_MAX_KEY ? 0 : klen);
    __builtin_prefetch(&t->buckets[h & t->mask]);
    if (t->old != NULL && (h & t->omask) >= t->rehash_idx)
        __builtin_prefetch(&t->old[h & t->omask]);
    return h;
}

void table_prefetch_chain(const struct table *t, uint32_t hash)
{
    const struct table_entry *e = t->buckets[hash & t->mask];
    if (e != NULL)
        __builtin_prefetch(e);
}

void table_prefetch_stage(const struct table *t, const char *key, size_t klen, int stage,
                          uint32_t *hash)
{
    if (stage == 0)
        *hash = table_prefetch(t, key, klen);
    else
        table_prefetch_chain(t, *hash);
}

/* Unlinks e from its chain (without resizing). */
static void table__unlink(struct table *t, struct table_entry *e)
{
    struct table_entry **pp = &t->buckets[e->hash & t->mask];
    while (*pp != NULL && *pp != e)
        pp = &(*pp)->next;
    if (*pp == NULL) { /* not moved yet: in the old array */
        pp = table__old_head(t, e->hash);
        while (pp != NULL && *pp != NULL && *pp != e)
            pp = &(*pp)->next;
        if (pp == NULL || *pp == NULL)
            return; /* not in this table: the caller's bug, nothing to unlink */
    }
    *pp = e->next;
    t->count--;
}

void table_delete(struct table *t, struct table_entry *e)
{
    table__unlink(t, e);
    table__free_entry(t, e);
    table__rehash_step(t, REHASH_STEP);
    table__maybe_shrink(t);
}

static int table__reclaimable(struct table *t, const struct table_entry *e, int64_t now,
                              int64_t *drain_at)
{
    if (t->cfg.drain == NULL || (e->flags & TABLE_F_PINNED)) {
        *drain_at = INT64_MAX;
        return 0;
    }
    *drain_at = t->cfg.drain(t->cfg.ud, e);
    return *drain_at <= now;
}

/* Frees the reclaimable entries of bucket i; returns how many. */
static size_t table__reclaim_bucket(struct table *t, uint64_t i, int64_t now)
{
    struct table_entry **pp = &t->buckets[i];
    size_t freed = 0;
    int64_t at;

    while (*pp != NULL) {
        struct table_entry *e = *pp;
        if (table__reclaimable(t, e, now, &at)) {
            *pp = e->next;
            t->count--;
            table__free_entry(t, e);
            freed++;
        } else {
            pp = &e->next;
        }
    }
    return freed;
}

size_t table_reclaim_step(struct table *t, int64_t now, size_t buckets)
{
    size_t freed = 0;

    if (t->cfg.drain == NULL || t->count == 0)
        return 0;
    table__rehash_step(t, buckets); /* entries not moved yet are reclaimed once they are */
    for (size_t n = 0; n < buckets; n++) {
        freed += table__reclaim_bucket(t, t->reclaim_cursor, now);
        t->reclaim_cursor = (t->reclaim_cursor + 1) & t->mask;
    }
    t->reclaimed += freed;
    if (freed > 0)
        table__maybe_shrink(t);
    return freed;
}

/*
 * Makes room for one entry at max_keys: samples entries from a random bucket
 * on, frees the drained ones, and otherwise evicts the sampled entry with the
 * earliest drain time.  Returns 0 when room was made, -SLUICE_EFULL if not.
 */
static int table__make_room(struct table *t, int64_t now)
{
    struct table_entry *best = NULL;
    int64_t best_at = INT64_MAX, at;
    /* During a resize most entries may still be in the old array: sample
     * there, among the buckets not moved yet. */
    struct table_entry **arr = t->buckets;
    uint64_t mask = t->mask, i = table__rand(t) & t->mask;
    if (t->old != NULL) {
        arr = t->old;
        mask = t->omask;
        i = t->rehash_idx + table__rand(t) % (t->omask + 1 - t->rehash_idx);
    }
    size_t seen = 0, freed = 0;

    for (size_t nb = 0; nb < SAMPLE_BUCKETS && seen < SAMPLE_ENTRIES; nb++) {
        struct table_entry **pp = &arr[i];
        while (*pp != NULL) {
            struct table_entry *e = *pp;
            seen++;
            if (table__reclaimable(t, e, now, &at)) {
                *pp = e->next;
                t->count--;
                table__free_entry(t, e);
                freed++;
                continue;
            }
            if (!(e->flags & TABLE_F_PINNED) && (best == NULL || at < best_at)) {
                best = e;
                best_at = at;
            }
            pp = &e->next;
        }
        i = (i + 1) & mask;
    }
    if (freed > 0) {
        t->reclaimed += freed;
        return 0;
    }
    if (t->cfg.evict && best != NULL) {
        table__unlink(t, best);
        table__free_entry(t, best);
        t->evicted++;
        return 0;
    }
    t->full++;
    return -SLUICE_EFULL;
}

int table_insert(struct table *t, const char *key, size_t klen, size_t vsize, uint8_t tag,
                 int64_t now, struct table_entry **out)
{
    if (klen > TABLE_MAX_KEY)
        return -SLUICE_EINVAL;
    return table_insert_hashed(t, key, klen, table__hash(t, key, klen), vsize, tag, now, out);
}

int table_insert_hashed(struct table *t, const char *key, size_t klen, uint32_t h, size_t vsize,
                        uint8_t tag, int64_t now, struct table_entry **out)
{
    struct table_entry *e;
    size_t kpad, size;

    if (klen > TABLE_MAX_KEY || vsize > SIZE_MAX / 2)
        return -SLUICE_EINVAL;
    if (t->cfg.max_keys != 0 && t->count >= t->cfg.max_keys) {
        int rc = table__make_room(t, now);
        if (rc < 0)
            return rc;
    }
    kpad = (klen + 7u) & ~(size_t)7u;
    size = sizeof(*e) + kpad + vsize;
    int heap = size > SLAB_MAX;
    e = heap ? malloc(size) : slab_alloc(t->slab, size);
    if (e == NULL)
        return -SLUICE_ENOMEM;
    e->hash = h;
    e->klen = (uint16_t)klen;
    e->tag = tag;
    e->flags = heap ? TABLE_F_HEAP : 0;
    if (klen > 0)
        memcpy((char *)(e + 1), key, klen);
    memset((char *)(e + 1) + klen, 0, kpad - klen + vsize);
    table__rehash_step(t, REHASH_STEP);
    if (t->count + 1 > t->mask + 1)
        table__resize(t, (t->mask + 1) * 2);
    e->next = t->buckets[h & t->mask]; /* new entries go to the current array */
    t->buckets[h & t->mask] = e;
    t->count++;
    table__prepare(t);
    *out = e;
    return 0;
}

/* ---- scan ---- */

static uint64_t rev64(uint64_t v)
{
    v = ((v >> 1) & 0x5555555555555555ULL) | ((v & 0x5555555555555555ULL) << 1);
    v = ((v >> 2) & 0x3333333333333333ULL) | ((v & 0x3333333333333333ULL) << 2);
    v = ((v >> 4) & 0x0f0f0f0f0f0f0f0fULL) | ((v & 0x0f0f0f0f0f0f0f0fULL) << 4);
    return __builtin_bswap64(v);
}

uint64_t table_scan(const struct table *t, uint64_t cursor, size_t count, table_scan_fn fn,
                    void *ud)
{
    size_t emitted = 0;
    uint64_t v = cursor;

    /* Reverse-binary increment: the high bits of the bucket index advance
     * first, so a bucket already visited at one table size maps to buckets
     * already visited at any other size (see Redis dictScan). */
    if (t->old == NULL) {
        do {
            const struct table_entry *e;
            for (e = t->buckets[v & t->mask]; e != NULL; e = e->next) {
                fn(ud, e);
                emitted++;
            }
            v |= ~t->mask;
            v = rev64(v);
            v++;
            v = rev64(v);
        } while (v != 0 && emitted < count);
        return v;
    }
    /* A resize in progress: each step visits bucket v of the smaller
     * array and every bucket of the larger one that it expands to (their
     * low bits are v's); advancing through those carries into the low
     * bits, the smaller array's next bucket.  So the guarantee holds
     * whichever array an entry sits in (Redis's dictScan does the same). */
    struct table_entry *const *small = t->buckets, *const *large = t->old;
    uint64_t m0 = t->mask, m1 = t->omask;
    if (m0 > m1) {
        small = t->old;
        large = t->buckets;
        m0 = t->omask;
        m1 = t->mask;
    }
    do {
        const struct table_entry *e;
        for (e = small[v & m0]; e != NULL; e = e->next) {
            fn(ud, e);
            emitted++;
        }
        do {
            for (e = large[v & m1]; e != NULL; e = e->next) {
                fn(ud, e);
                emitted++;
            }
            /* The next larger bucket with the same low bits (reverse binary). */
            v |= ~m1;
            v = rev64(v);
            v++;
            v = rev64(v);
        } while (v & (m0 ^ m1)); /* wrapped: the carry advanced v's low bits */
    } while (v != 0 && emitted < count);
    return v;
}

size_t table_count(const struct table *t)
{
    return t->count;
}

void table_get_stats(const struct table *t, struct table_stats *out)
{
    out->keys = t->count;
    out->buckets = t->mask + 1;
    out->reclaimed = t->reclaimed;
    out->evicted = t->evicted;
    out->full = t->full;
    out->grown_ready = t->grown_ready;
    out->prepared = t->next != NULL ? t->next_done : 0; /* chunks divide the array */
}
