/*
 * concurrency: counting semaphores with leases, the core behind SL.LEASE
 * (a cap on what is in flight, not on a rate).  No I/O: time is an
 * argument (a monotonic clock in nanoseconds), and nothing here waits.
 *
 * A key holds at most `cap` units at once, counted over its live leases.
 * A lease is one grant of qty units: an id (unique within a conc and never
 * reused while it lives), an expiry on the caller's monotonic clock, and an
 * optional owner (a connection: conc_owner_release frees every lease it
 * holds at once).  A lease ends in exactly one way: released by id,
 * released with its owner, or expired (conc_expire at or after its expiry).
 * Exact: a grant is made only when held + qty <= cap, checked against the
 * leases alive at that call; nothing is ever held beyond the cap except
 * when the caller lowers the cap under what is held (global keys, whose cap
 * is the slots the cluster lent this node): then nothing new is granted
 * until enough leases end.
 *
 * Ordering and fairness are the caller's (the waiting queue): a grant here
 * is first come, first served at the moment of the call.
 *
 * Memory: a key with live leases is one table entry plus a small struct;
 * a lease is a slot of a pool (about 100 bytes, allocated 1024 at a time
 * and kept for reuse: the pool holds as many slots as were ever live at
 * once) and a pointer in the expiry heap.  A key with no lease left is
 * forgotten at once.  Leases in all are bounded (max_leases); past it a
 * grant fails with -SLUICE_EFULL.
 *
 * Complexity: grant, renew O(log L) (the expiry heap; L = live leases),
 * usually O(1) (a new lease expires last); a lease is found by its id
 * without a search (the id names its slot); release O(log L);
 * conc_expire O(k log L) for k leases expired.
 *
 * Not thread-safe: one thread owns a conc.
 */
#ifndef SLUICE_CONCURRENCY_H
#define SLUICE_CONCURRENCY_H

#include <stddef.h>
#include <stdint.h>

/* Leases alive at once when not configured. */
#define CONC_DEFAULT_MAX_LEASES 1000000
/* The longest TTL a lease may have: one day. */
#define CONC_MAX_TTL_NS ((int64_t)86400 * 1000000000)

struct conc;
struct conc_owner;

struct conc_config {
    size_t max_leases; /* 0 = CONC_DEFAULT_MAX_LEASES; at most 2^32 */
    /* Seeds the ids: their counter starts at id_base modulo 2^(53 - b), b
     * the bits that count max_leases (20 by default), so a daemon passing
     * a random base does not hand out the ids of its past life.  Ids are
     * below 2^53 (exact in a double); with id_base below 2^(53 - b) the
     * first ones are greater than id_base. */
    uint64_t id_base;
};

/* One grant decision. */
struct conc_result {
    int granted;        /* 1: the lease below was made */
    uint64_t id;        /* the lease id (granted) */
    int64_t expires_ns; /* its expiry on the caller's clock (granted) */
    int64_t limit;      /* the cap the decision was made against */
    int64_t held;       /* units held on the key after the call */
    /* Refused: how long until the earliest lease of the key expires (the
     * latest a unit can be freed without a release), -1 when qty can never
     * fit (qty > cap, or cap 0 with nothing held).  Granted: -1. */
    int64_t retry_after_ns;
};

/* Counters since conc_create. */
struct conc_stats {
    uint64_t keys;        /* keys with live leases now */
    uint64_t leases;      /* live leases now */
    uint64_t held;        /* units held now, all keys */
    uint64_t granted;     /* leases made */
    uint64_t refused;     /* requests refused (full) */
    uint64_t released;    /* leases ended by release (by id) */
    uint64_t expired;     /* leases ended by their TTL */
    uint64_t disconnects; /* leases ended with their owner (a closed connection) */
};

/* Called when a lease of key ended, after the conc is consistent again:
 * the caller may grant (a waiter) from inside it. */
typedef void (*conc_freed_fn)(void *ud, const char *key, size_t klen);

/* Creates an empty set.  cfg may be NULL (defaults).  -SLUICE_ENOMEM,
 * -SLUICE_EINVAL (max_leases above 2^32). */
int conc_create(const struct conc_config *cfg, struct conc **out);
/* Frees every key and lease; owners stay their holders' (each is freed by
 * conc_owner_release, which then finds it empty).  NULL is a no-op. */
void conc_destroy(struct conc *c);

/*
 * Grants qty units (>= 1) of key for ttl_ns (1 .. CONC_MAX_TTL_NS) at now
 * if held + qty <= cap (cap >= 0), with owner o (NULL: none).  Fills *r
 * either way.  Returns 0, or -SLUICE_EINVAL (bad qty, ttl or cap),
 * -SLUICE_ETOOBIG (key longer than TABLE_MAX_KEY), -SLUICE_EFULL
 * (max_leases live), -SLUICE_ENOMEM; nothing changes then.
 */
int conc_acquire(struct conc *c, const char *key, size_t klen, int64_t cap, int64_t qty,
                 int64_t ttl_ns, struct conc_owner *o, int64_t now, struct conc_result *r);

/* Units key holds now (0 for an unknown key).  Leases past their expiry
 * still count until conc_expire runs. */
int64_t conc_held(struct conc *c, const char *key, size_t klen);

/* The earliest expiry of key's leases, INT64_MAX when it holds none. */
int64_t conc_earliest(struct conc *c, const char *key, size_t klen);

/*
 * Ends lease id of key.  Returns 0 and calls freed(ud, key) (NULL: no
 * call), or -SLUICE_ENOENT when key has no such lease (never made, already
 * ended, or another key's).
 */
int conc_release(struct conc *c, const char *key, size_t klen, uint64_t id, conc_freed_fn freed,
                 void *ud);

/* Moves lease id of key to expire at now + ttl_ns (0: the TTL it was
 * granted with); *expires_ns the new expiry.  -SLUICE_ENOENT as
 * conc_release; -SLUICE_EINVAL for a bad ttl. */
int conc_renew(struct conc *c, const char *key, size_t klen, uint64_t id, int64_t ttl_ns,
               int64_t now, int64_t *expires_ns);

/* Ends every lease whose expiry is <= now, earliest first, calling freed
 * after each (a grant made from inside freed expires later than now, so
 * it is not ended by the same call).  Returns how many leases ended. */
size_t conc_expire(struct conc *c, int64_t now, conc_freed_fn freed, void *ud);

/* The earliest expiry of any live lease, INT64_MAX when none. */
int64_t conc_next_expiry(const struct conc *c);

/* A new owner with no lease.  -SLUICE_ENOMEM. */
int conc_owner_new(struct conc *c, struct conc_owner **out);
/* Ends every lease o holds (counted as disconnects) and frees o, calling
 * freed after each lease.  Returns how many ended.  NULL o: 0. */
size_t conc_owner_release(struct conc *c, struct conc_owner *o, conc_freed_fn freed, void *ud);
/* Leases o holds now. */
size_t conc_owner_leases(const struct conc_owner *o);
void conc_get_stats(const struct conc *c, struct conc_stats *out);

#endif
