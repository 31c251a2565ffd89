/*
 * table: the key table.  Maps binary-safe keys to small owner-defined state
 * blobs, reclaims keys whose state has drained, and stays within max_keys.
 *
 * Structure: a power-of-two array of bucket heads with separate chaining
 * (the chain link lives in the entry).  Each entry is one block of the
 * table's slab (slab.h), or of malloc beyond SLAB_MAX bytes (long keys):
 *
 *   +------+------+------+-----+-------+-----------------+----------------+
 *   | next | hash | klen | tag | flags | key bytes, pad8 | value (vsize)  |
 *   |  8   |  4   |  2   |  1  |   1   |  klen -> 8k     | owner-defined  |
 *   +------+------+------+-----+-------+-----------------+----------------+
 *
 * The value area is 8-byte aligned and its size and layout belong to the
 * owner (one int64 TAT for GCRA; an algorithm may put a pointer to a
 * separately allocated ring there, and the replication layer a pointer to its
 * CRDT slots).  The table never reads it: it asks the owner through two hooks,
 * drain_at (when does this entry become equal to an absent key) and
 * free_value (release anything the value area points to).
 *
 * Memory per key: 16 header + round8(klen) + vsize, exactly (the slab's
 * classes are 8 bytes apart and its objects carry no header), plus 8 bytes
 * of bucket head (load factor kept between 1/4 and 1).  "user:123456" with
 * an 8-byte GCRA state: 40 bytes, + 8..16 bytes of buckets, about 52 bytes
 * per key (malloc made it a 48-byte chunk).  Over the last sixteenth of the
 * inserts before a growth, the next array is held as well (up to 16 bytes
 * a bucket more): it is faulted in ahead, a little per insert, so the
 * growth does not fault it in wherever new keys land (table.c,
 * TABLE_PREP_WINDOW).
 *
 * Complexity: find/insert/delete O(1) expected (keyed SipHash-1-3, so clients
 * cannot aim at a chain); growth and shrink move the entries to the new
 * bucket array a few buckets per insert or delete (Redis's incremental
 * rehash), so no call stalls on a million-key rehash; reclaim steps and
 * scans cost O(entries visited).
 *
 * Reclaim: an entry is reclaimable at `now` when drain_at(entry) <= now and
 * it is not TABLE_F_PINNED.  table_reclaim_step() visits a few buckets per
 * call from a rotating cursor; owners also delete drained entries they touch.
 *
 * Bounds: at max_keys, table_insert first reclaims drained entries it finds
 * in a bounded sample; if none, it either evicts the sampled unpinned entry
 * with the earliest drain_at (evict mode) or fails with -SLUICE_EFULL.
 *
 * Not thread-safe: one thread owns a table.
 */
#ifndef SLUICE_TABLE_H
#define SLUICE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define TABLE_F_PINNED 0x01u /* never reclaimed or evicted (e.g. referenced) */
#define TABLE_F_HEAP   0x02u /* the table's own: the entry came from malloc (slab.h) */
#define TABLE_MAX_KEY  65535u

struct table_entry {
    struct table_entry *next;
    uint32_t hash;
    uint16_t klen;
    uint8_t tag;   /* owner-defined: which algorithm's state the value holds */
    uint8_t flags; /* TABLE_F_* and owner bits 0x10..0x80 */
    /* followed by key bytes, padding to 8, then the value area */
};

/* Owner hooks.  drain_at returns the time from which the entry is equivalent
 * to an absent key (INT64_MAX: never).  free_value, if set, is called once
 * before any entry is freed (delete, reclaim, evict, destroy). */
typedef int64_t (*table_drain_fn)(void *ud, const struct table_entry *e);
typedef void (*table_free_fn)(void *ud, struct table_entry *e);

struct table_config {
    size_t max_keys;      /* 0 = unbounded */
    int evict;            /* at max_keys: 1 evict nearest-to-drained, 0 fail */
    uint64_t seed[2];     /* hash key; {0,0} = random */
    table_drain_fn drain; /* required for reclaim/evict; NULL = never drained */
    table_free_fn free_value;
    void *ud; /* passed to the hooks */
};

struct table_stats {
    uint64_t keys;
    uint64_t buckets;
    uint64_t reclaimed;   /* drained entries freed by the table */
    uint64_t evicted;     /* undrained entries evicted at max_keys */
    uint64_t full;        /* inserts refused with -SLUICE_EFULL */
    uint64_t grown_ready; /* growths whose bucket array was faulted in ahead */
    uint64_t prepared;    /* bytes of the next growth's array faulted in so far */
};

struct table;

/* Creates an empty table.  Fails with -SLUICE_ENOMEM or -SLUICE_EINVAL (NULL
 * cfg).  The table copies cfg. */
int table_create(struct table **out, const struct table_config *cfg);

/* Frees every entry (calling free_value) and the table.  NULL is a no-op. */
void table_destroy(struct table *t);

static inline const char *table_entry_key(const struct table_entry *e)
{
    return (const char *)(e + 1);
}

static inline void *table_entry_value(struct table_entry *e)
{
    return (char *)(e + 1) + (((size_t)e->klen + 7u) & ~(size_t)7u);
}

/* Finds key; NULL when absent.  The entry stays owned by the table and is
 * valid until the next insert, delete, reclaim step or destroy. */
struct table_entry *table_find(struct table *t, const char *key, size_t klen);

/* The hash table_find and table_insert compute for key (what an entry keeps
 * in its hash field), for a caller that looks a key up more than once or
 * in two tables of the same seed: table_find_hashed and table_insert_hashed
 * take it instead of computing it again.  A hash that is not key's in t
 * finds nothing, or files the entry where nothing finds it. */
uint32_t table_hash(const struct table *t, const char *key, size_t klen);
struct table_entry *table_find_hashed(struct table *t, const char *key, size_t klen, uint32_t hash);
/* table_find that leaves key's hash in *hash (table_hash), for the
 * table_insert_hashed of a key it did not find. */
struct table_entry *table_find_for_insert(struct table *t, const char *key, size_t klen,
                                          uint32_t *hash);
/* The table's hash key (seed): a table created with it hashes every key as
 * t does, so an entry's hash field serves lookups in both. */
void table_get_seed(const struct table *t, uint64_t seed[2]);

/* Prefetching for a batch of lookups (a received batch of keys): stage one
 * asks the cache for key's bucket and returns its hash, stage two, called
 * with that hash a little later (the bucket arrived meanwhile), asks for
 * the first entry of its chain.  Hints only: nothing is read beyond the
 * bucket array, nothing changes, and a later table_find finds the same. */
uint32_t table_prefetch(const struct table *t, const char *key, size_t klen);
void table_prefetch_chain(const struct table *t, uint32_t hash);
/* The two stages as one call, for a hint that reaches the table through
 * its owner (server_hint_fn): stage 0 is table_prefetch, keeping the hash
 * in *hash; stage 1 is table_prefetch_chain with it. */
void table_prefetch_stage(const struct table *t, const char *key, size_t klen, int stage,
                          uint32_t *hash);

/*
 * Inserts key (which must be absent) with a zeroed value area of vsize bytes
 * and the given tag.  now is the time used to decide what is drained if the
 * table is full.  On success *out is the new entry; other entries may have
 * been reclaimed or evicted (pointers from table_find are then stale).
 * Fails with -SLUICE_EINVAL (klen > TABLE_MAX_KEY), -SLUICE_ENOMEM, or
 * -SLUICE_EFULL (at max_keys, nothing reclaimable, not in evict mode or every
 * sampled entry is pinned).
 */
int table_insert(struct table *t, const char *key, size_t klen, size_t vsize, uint8_t tag,
                 int64_t now, struct table_entry **out);
/* table_insert with key's hash in t (table_hash) given. */
int table_insert_hashed(struct table *t, const char *key, size_t klen, uint32_t hash, size_t vsize,
                        uint8_t tag, int64_t now, struct table_entry **out);

/* Removes and frees e (calling free_value).  e must belong to t. */
void table_delete(struct table *t, struct table_entry *e);

/* Visits up to `buckets` buckets from a rotating cursor and frees the
 * reclaimable entries found; returns how many it freed. */
size_t table_reclaim_step(struct table *t, int64_t now, size_t buckets);

/*
 * Cursor scan, like Redis SCAN: start with cursor 0, call again with the
 * returned cursor until it returns 0.  Every key present for the whole scan
 * is visited at least once even if the table grows, shrinks or changes
 * between calls (a key may be visited more than once).  Each call visits
 * whole buckets until at least `count` entries were passed to fn.  fn must
 * not modify the table.
 */
typedef void (*table_scan_fn)(void *ud, const struct table_entry *e);
uint64_t table_scan(const struct table *t, uint64_t cursor, size_t count, table_scan_fn fn,
                    void *ud);

size_t table_count(const struct table *t);
void table_get_stats(const struct table *t, struct table_stats *out);

#endif
