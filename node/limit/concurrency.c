/*
 * concurrency: counting semaphores with leases (contract in concurrency.h).
 *
 * Structure: a key table maps each key with live leases to a struct
 * conc_key (held units, its leases in a list); one binary min-heap orders
 * every live lease by expiry, so the next expiry is the heap's top and
 * conc_expire pops leases in order.  An owner is a list of its leases.
 *
 * Leases live in a pool of fixed-size chunks (allocated as the pool grows,
 * never moved, so a lease's address is stable), with a free list of ended
 * slots: a grant allocates nothing once the pool has warmed up.  A lease id
 * names its slot, so finding a lease by id is an index, not a search:
 *
 *   id (below 2^53) = counter << slot_bits | slot
 *
 * where slot_bits is the fewest bits that count max_leases slots and the
 * counter (53 - slot_bits bits, seeded by id_base, never 0) grows by one per
 * grant.  A lookup takes the slot from the id and checks that the slot holds
 * that very id (an ended slot holds 0, a reused one a newer counter), so an
 * id of a lease that ended is never taken for the slot's next lease until
 * the counter wraps (2^33 grants with the default max_leases).
 *
 * Ending a lease (concurrency__end) takes it out of the heap, its key and its
 * owner, puts its slot back on the free list, and forgets the key when that
 * was its last lease; the caller's freed hook runs only after that, with
 * the key's bytes still valid (a forgotten key is freed after the hook).
 */
#include "concurrency.h"

#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"
#include "table.h"

/* Leases per pool chunk. */
#define CONC_CHUNK_BITS 10u
#define CONC_CHUNK      ((size_t)1 << CONC_CHUNK_BITS)
/* Ids stay below 2^53: a JavaScript client reads an integer reply as a
 * double, exact only up to 2^53. */
#define CONC_ID_BITS 53u

struct conc_lease;

struct conc_key {
    int64_t held;
    size_t nleases;
    struct conc_lease *leases; /* doubly linked through kprev/knext */
    size_t klen;
    char key[];
};

struct conc_lease {
    uint64_t id; /* 0: a free slot */
    int64_t qty;
    int64_t expires;
    int64_t ttl; /* as granted (a renew without a TTL reuses it) */
    size_t heap_i;
    struct conc_key *k;
    struct conc_lease *kprev, *knext; /* knext links the free list too */
    struct conc_owner *owner;         /* NULL: none */
    struct conc_lease *oprev, *onext;
    uint32_t slot; /* its index in the pool */
};

struct conc_owner {
    struct conc_lease *leases;
    size_t n;
};

struct conc {
    struct table *keys; /* key -> struct conc_key * */
    struct conc_lease **heap;
    size_t nheap, heapcap;
    size_t max_leases;
    struct conc_lease **chunks; /* ceil(max_leases / CONC_CHUNK) pointers */
    size_t nchunks;             /* chunks allocated */
    size_t nslots;              /* slots handed out at least once */
    struct conc_lease *free;    /* ended slots */
    unsigned slot_bits;
    uint64_t ctr, ctr_mask;
    struct conc_stats st;
};

int conc_create(const struct conc_config *cfg, struct conc **out)
{
    struct table_config tc;
    struct conc *c;
    size_t max = cfg && cfg->max_leases ? cfg->max_leases : CONC_DEFAULT_MAX_LEASES;
    unsigned bits = 1;
    if (max > ((size_t)1 << 32))
        return -SLUICE_EINVAL;
    while (bits < 32 && ((size_t)1 << bits) < max)
        bits++;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -SLUICE_ENOMEM;
    c->chunks = calloc((max + CONC_CHUNK - 1) / CONC_CHUNK, sizeof(*c->chunks));
    memset(&tc, 0, sizeof(tc));
    if (c->chunks == NULL || table_create(&c->keys, &tc) < 0) {
        free(c->chunks);
        free(c);
        return -SLUICE_ENOMEM;
    }
    c->max_leases = max;
    c->slot_bits = bits;
    c->ctr_mask = ((uint64_t)1 << (CONC_ID_BITS - bits)) - 1;
    c->ctr = (cfg ? cfg->id_base : 0) & c->ctr_mask;
    *out = c;
    return 0;
}

void conc_destroy(struct conc *c)
{
    if (c == NULL)
        return;
    /* Every key is reached through a lease.  Owners are their holders'
     * (conc_owner_release frees them); leases still in one are taken out. */
    for (size_t i = 0; i < c->nheap; i++) {
        struct conc_lease *l = c->heap[i];
        struct conc_key *k = l->k;
        if (--k->nleases == 0)
            free(k);
        if (l->owner != NULL) {
            l->owner->leases = NULL;
            l->owner->n = 0;
        }
    }
    for (size_t i = 0; i < c->nchunks; i++)
        free(c->chunks[i]);
    free(c->chunks);
    free(c->heap);
    table_destroy(c->keys);
    free(c);
}

/* ---- the pool ---- */

static struct conc_lease *concurrency__slot(const struct conc *c, uint64_t slot)
{
    return &c->chunks[slot >> CONC_CHUNK_BITS][slot & (CONC_CHUNK - 1)];
}

/* A slot for a new lease, NULL when max_leases are live (-SLUICE_EFULL)
 * or a chunk cannot be allocated (*rc = -SLUICE_ENOMEM). */
static struct conc_lease *concurrency__slot_get(struct conc *c, int *rc)
{
    struct conc_lease *l = c->free;
    if (l != NULL) {
        c->free = l->knext;
        return l;
    }
    if (c->nslots >= c->max_leases) {
        *rc = -SLUICE_EFULL;
        return NULL;
    }
    if (c->nslots == c->nchunks * CONC_CHUNK) {
        struct conc_lease *ch = calloc(CONC_CHUNK, sizeof(*ch));
        if (ch == NULL) {
            *rc = -SLUICE_ENOMEM;
            return NULL;
        }
        c->chunks[c->nchunks++] = ch;
    }
    l = concurrency__slot(c, c->nslots);
    l->slot = (uint32_t)c->nslots++;
    return l;
}

static void concurrency__slot_put(struct conc *c, struct conc_lease *l)
{
    l->id = 0;
    l->knext = c->free;
    c->free = l;
}

/* ---- the expiry heap ---- */

static void concurrency__heap_set(struct conc *c, size_t i, struct conc_lease *l)
{
    c->heap[i] = l;
    l->heap_i = i;
}

static void concurrency__heap_up(struct conc *c, size_t i)
{
    struct conc_lease *l = c->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (c->heap[p]->expires <= l->expires)
            break;
        concurrency__heap_set(c, i, c->heap[p]);
        i = p;
    }
    concurrency__heap_set(c, i, l);
}

static void concurrency__heap_down(struct conc *c, size_t i)
{
    struct conc_lease *l = c->heap[i];
    for (;;) {
        size_t m = 2 * i + 1;
        if (m >= c->nheap)
            break;
        if (m + 1 < c->nheap && c->heap[m + 1]->expires < c->heap[m]->expires)
            m++;
        if (c->heap[m]->expires >= l->expires)
            break;
        concurrency__heap_set(c, i, c->heap[m]);
        i = m;
    }
    concurrency__heap_set(c, i, l);
}

static void concurrency__heap_remove(struct conc *c, struct conc_lease *l)
{
    size_t i = l->heap_i;
    struct conc_lease *last = c->heap[--c->nheap];
    if (last == l)
        return;
    concurrency__heap_set(c, i, last);
    concurrency__heap_up(c, i);
    concurrency__heap_down(c, last->heap_i);
}

/* ---- keys and leases ---- */

static struct conc_key *concurrency__find(struct conc *c, const char *key, size_t klen)
{
    struct table_entry *e = table_find(c->keys, key, klen);
    struct conc_key *k = NULL;
    if (e != NULL)
        memcpy(&k, table_entry_value(e), sizeof(k));
    return k;
}

static struct conc_lease *concurrency__lease(struct conc *c, const char *key, size_t klen,
                                             uint64_t id)
{
    uint64_t slot = id & (((uint64_t)1 << c->slot_bits) - 1);
    struct conc_lease *l;
    if (id == 0 || slot >= c->nslots)
        return NULL;
    l = concurrency__slot(c, slot);
    if (l->id != id || l->k->klen != klen || (klen > 0 && memcmp(l->k->key, key, klen) != 0))
        return NULL;
    return l;
}

/* Takes l out of everything; returns its key when that was the key's last
 * lease (the caller frees it after the freed hook), else NULL.  l's slot is
 * free again. */
static struct conc_key *concurrency__end(struct conc *c, struct conc_lease *l)
{
    struct conc_key *k = l->k;
    struct table_entry *e;
    concurrency__heap_remove(c, l);
    /* A key is freed only with its last lease (nleases reaches 0), so a
     * live lease's key is live; the analyzer cannot follow the count
     * across the owner's list (conc_owner_release). */
    if (l->kprev != NULL)
        l->kprev->knext = l->knext;
    else
        k->leases = l->knext; // NOLINT(clang-analyzer-unix.Malloc)
    if (l->knext != NULL)
        l->knext->kprev = l->kprev;
    if (l->owner != NULL) {
        struct conc_owner *o = l->owner;
        if (l->oprev != NULL)
            l->oprev->onext = l->onext;
        else
            o->leases = l->onext;
        if (l->onext != NULL)
            l->onext->oprev = l->oprev;
        o->n--;
    }
    k->held -= l->qty;
    k->nleases--;
    c->st.leases--;
    c->st.held -= (uint64_t)l->qty;
    concurrency__slot_put(c, l);
    if (k->nleases > 0)
        return NULL;
    e = table_find(c->keys, k->key, k->klen);
    if (e != NULL)
        table_delete(c->keys, e);
    c->st.keys--;
    return k;
}

/* Ends l and tells the caller; frees a forgotten key after the hook. */
static void concurrency__end_notify(struct conc *c, struct conc_lease *l, conc_freed_fn freed,
                                    void *ud)
{
    struct conc_key *k = l->k;
    struct conc_key *gone = concurrency__end(c, l);
    if (freed != NULL)
        freed(ud, k->key, k->klen); // NOLINT(clang-analyzer-unix.Malloc): see concurrency__end
    free(gone);
}

static int64_t concurrency__earliest(const struct conc_key *k)
{
    int64_t t = INT64_MAX;
    for (const struct conc_lease *l = k->leases; l != NULL; l = l->knext)
        if (l->expires < t)
            t = l->expires;
    return t;
}

int conc_acquire(struct conc *c, const char *key, size_t klen, int64_t cap, int64_t qty,
                 int64_t ttl_ns, struct conc_owner *o, int64_t now, struct conc_result *r)
{
    struct conc_key *k;
    struct conc_lease *l;
    struct table_entry *e;
    int rc;
    if (qty < 1 || cap < 0 || ttl_ns < 1 || ttl_ns > CONC_MAX_TTL_NS || now < 0 ||
        now > INT64_MAX - ttl_ns || (key == NULL && klen > 0))
        return -SLUICE_EINVAL;
    if (klen > TABLE_MAX_KEY)
        return -SLUICE_ETOOBIG;
    k = concurrency__find(c, key, klen);
    memset(r, 0, sizeof(*r));
    r->limit = cap;
    r->held = k != NULL ? k->held : 0;
    r->retry_after_ns = -1;
    if (qty > cap || r->held > cap - qty) {
        c->st.refused++;
        if (qty <= cap && k != NULL) {
            int64_t t = concurrency__earliest(k);
            r->retry_after_ns = t > now ? t - now : 0;
        }
        return 0;
    }
    if (c->nheap == c->heapcap) {
        size_t cap2 = c->heapcap ? 2 * c->heapcap : 64;
        struct conc_lease **h = realloc(c->heap, cap2 * sizeof(*h));
        if (h == NULL)
            return -SLUICE_ENOMEM;
        c->heap = h;
        c->heapcap = cap2;
    }
    rc = 0;
    l = concurrency__slot_get(c, &rc);
    if (l == NULL)
        return rc;
    if (k == NULL) {
        k = malloc(sizeof(*k) + klen);
        if (k == NULL) {
            concurrency__slot_put(c, l);
            return -SLUICE_ENOMEM;
        }
        rc = table_insert(c->keys, key, klen, sizeof(k), 0, now, &e);
        if (rc < 0) {
            free(k);
            concurrency__slot_put(c, l);
            return rc;
        }
        memcpy(table_entry_value(e), &k, sizeof(k));
        k->held = 0;
        k->nleases = 0;
        k->leases = NULL;
        k->klen = klen;
        if (klen > 0)
            memcpy(k->key, key, klen);
        c->st.keys++;
    }
    c->ctr = (c->ctr + 1) & c->ctr_mask;
    if (c->ctr == 0)
        c->ctr = 1; /* 0 is never an id */
    l->id = c->ctr << c->slot_bits | l->slot;
    l->qty = qty;
    l->expires = now + ttl_ns;
    l->ttl = ttl_ns;
    l->k = k;
    l->kprev = NULL;
    l->knext = k->leases;
    if (k->leases != NULL)
        k->leases->kprev = l;
    k->leases = l;
    k->nleases++;
    k->held += qty;
    l->owner = o;
    l->oprev = NULL;
    l->onext = NULL;
    if (o != NULL) {
        l->onext = o->leases;
        if (o->leases != NULL)
            o->leases->oprev = l;
        o->leases = l;
        o->n++;
    }
    c->nheap++;
    concurrency__heap_set(c, c->nheap - 1, l);
    concurrency__heap_up(c, c->nheap - 1);
    c->st.leases++;
    c->st.held += (uint64_t)qty;
    c->st.granted++;
    r->granted = 1;
    r->id = l->id;
    r->expires_ns = l->expires;
    r->held = k->held;
    return 0;
}

int64_t conc_held(struct conc *c, const char *key, size_t klen)
{
    struct conc_key *k = concurrency__find(c, key, klen);
    return k != NULL ? k->held : 0;
}

int64_t conc_earliest(struct conc *c, const char *key, size_t klen)
{
    struct conc_key *k = concurrency__find(c, key, klen);
    return k != NULL ? concurrency__earliest(k) : INT64_MAX;
}

int conc_release(struct conc *c, const char *key, size_t klen, uint64_t id, conc_freed_fn freed,
                 void *ud)
{
    struct conc_lease *l = concurrency__lease(c, key, klen, id);
    if (l == NULL)
        return -SLUICE_ENOENT;
    c->st.released++;
    concurrency__end_notify(c, l, freed, ud);
    return 0;
}

int conc_renew(struct conc *c, const char *key, size_t klen, uint64_t id, int64_t ttl_ns,
               int64_t now, int64_t *expires_ns)
{
    struct conc_lease *l;
    if (ttl_ns < 0 || ttl_ns > CONC_MAX_TTL_NS || now < 0)
        return -SLUICE_EINVAL;
    l = concurrency__lease(c, key, klen, id);
    if (l == NULL)
        return -SLUICE_ENOENT;
    if (ttl_ns == 0)
        ttl_ns = l->ttl;
    if (now > INT64_MAX - ttl_ns)
        return -SLUICE_EINVAL;
    l->expires = now + ttl_ns;
    concurrency__heap_up(c, l->heap_i);
    concurrency__heap_down(c, l->heap_i);
    *expires_ns = l->expires;
    return 0;
}

size_t conc_expire(struct conc *c, int64_t now, conc_freed_fn freed, void *ud)
{
    size_t n = 0;
    /* concurrency__end takes the ended lease out of the heap before freeing it,
     * so heap[0] is always live here (the analyzer cannot follow that). */
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc)
    while (c->nheap > 0 && c->heap[0]->expires <= now) {
        c->st.expired++;
        concurrency__end_notify(c, c->heap[0], freed, ud);
        n++;
    }
    return n;
}

int64_t conc_next_expiry(const struct conc *c)
{
    return c->nheap > 0 ? c->heap[0]->expires : INT64_MAX;
}

int conc_owner_new(struct conc *c, struct conc_owner **out)
{
    (void)c;
    *out = calloc(1, sizeof(**out));
    return *out != NULL ? 0 : -SLUICE_ENOMEM;
}

size_t conc_owner_leases(const struct conc_owner *o)
{
    return o != NULL ? o->n : 0;
}

size_t conc_owner_release(struct conc *c, struct conc_owner *o, conc_freed_fn freed, void *ud)
{
    size_t n = 0;
    if (o == NULL)
        return 0;
    /* A grant made from inside freed never goes to o (its connection is
     * closing), so the list only shrinks. */
    /* concurrency__end unlinks the ended lease from o before its slot is free. */
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc)
    while (o->leases != NULL) {
        c->st.disconnects++;
        concurrency__end_notify(c, o->leases, freed, ud); // NOLINT(clang-analyzer-unix.Malloc)
        n++;
    }
    free(o);
    return n;
}

void conc_get_stats(const struct conc *c, struct conc_stats *out)
{
    *out = c->st;
}
