/*
 * concurrency: counting semaphores with leases (contract in concurrency.h).
 *
 * Structure: a key table maps each key with live leases to a struct
 * conc_key (held units, its leases in a list); an id table maps each live
 * lease id to its struct conc_lease; one binary min-heap orders every live
 * lease by expiry, so the next expiry is the heap's top and conc_expire
 * pops leases in order.  An owner is a list of its leases.
 *
 * Ending a lease (conc__end) takes it out of the heap, the id table, its
 * key and its owner, and forgets the key when that was its last lease; the
 * caller's freed hook runs only after that, with the key's bytes still
 * valid (a forgotten key is freed after the hook).
 */
#include "concurrency.h"

#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"
#include "table.h"

struct conc_lease;

struct conc_key {
    int64_t held;
    size_t nleases;
    struct conc_lease *leases; /* doubly linked through kprev/knext */
    size_t klen;
    char key[];
};

struct conc_lease {
    uint64_t id;
    int64_t qty;
    int64_t expires;
    int64_t ttl; /* as granted (a renew without a TTL reuses it) */
    size_t heap_i;
    struct conc_key *k;
    struct conc_lease *kprev, *knext;
    struct conc_owner *owner; /* NULL: none */
    struct conc_lease *oprev, *onext;
};

struct conc_owner {
    struct conc_lease *leases;
    size_t n;
};

struct conc {
    struct table *keys; /* key -> struct conc_key * */
    struct table *ids;  /* 8-byte id -> struct conc_lease * */
    struct conc_lease **heap;
    size_t nheap, heapcap;
    size_t max_leases;
    uint64_t next_id;
    struct conc_stats st;
};

int conc_create(const struct conc_config *cfg, struct conc **out)
{
    struct table_config tc;
    struct conc *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -SLUICE_ENOMEM;
    memset(&tc, 0, sizeof(tc));
    if (table_create(&c->keys, &tc) < 0 || table_create(&c->ids, &tc) < 0) {
        table_destroy(c->keys);
        free(c);
        return -SLUICE_ENOMEM;
    }
    c->max_leases = cfg && cfg->max_leases ? cfg->max_leases : CONC_DEFAULT_MAX_LEASES;
    c->next_id = cfg ? cfg->id_base : 0;
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
        free(l);
    }
    free(c->heap);
    table_destroy(c->keys);
    table_destroy(c->ids);
    free(c);
}

/* ---- the expiry heap ---- */

static void conc__heap_set(struct conc *c, size_t i, struct conc_lease *l)
{
    c->heap[i] = l;
    l->heap_i = i;
}

static void conc__heap_up(struct conc *c, size_t i)
{
    struct conc_lease *l = c->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (c->heap[p]->expires <= l->expires)
            break;
        conc__heap_set(c, i, c->heap[p]);
        i = p;
    }
    conc__heap_set(c, i, l);
}

static void conc__heap_down(struct conc *c, size_t i)
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
        conc__heap_set(c, i, c->heap[m]);
        i = m;
    }
    conc__heap_set(c, i, l);
}

static void conc__heap_remove(struct conc *c, struct conc_lease *l)
{
    size_t i = l->heap_i;
    struct conc_lease *last = c->heap[--c->nheap];
    if (last == l)
        return;
    conc__heap_set(c, i, last);
    conc__heap_up(c, i);
    conc__heap_down(c, last->heap_i);
}

/* ---- keys and leases ---- */

static struct conc_key *conc__find(struct conc *c, const char *key, size_t klen)
{
    struct table_entry *e = table_find(c->keys, key, klen);
    struct conc_key *k = NULL;
    if (e != NULL)
        memcpy(&k, table_entry_value(e), sizeof(k));
    return k;
}

static struct conc_lease *conc__lease(struct conc *c, const char *key, size_t klen, uint64_t id)
{
    struct table_entry *e = table_find(c->ids, (const char *)&id, sizeof(id));
    struct conc_lease *l = NULL;
    if (e == NULL)
        return NULL;
    memcpy(&l, table_entry_value(e), sizeof(l));
    if (l->k->klen != klen || (klen > 0 && memcmp(l->k->key, key, klen) != 0))
        return NULL;
    return l;
}

/* Takes l out of everything; returns its key when that was the key's last
 * lease (the caller frees it after the freed hook), else NULL.  l is freed. */
static struct conc_key *conc__end(struct conc *c, struct conc_lease *l)
{
    struct conc_key *k = l->k;
    struct table_entry *e;
    conc__heap_remove(c, l);
    e = table_find(c->ids, (const char *)&l->id, sizeof(l->id));
    if (e != NULL)
        table_delete(c->ids, e);
    if (l->kprev != NULL)
        l->kprev->knext = l->knext;
    else
        k->leases = l->knext;
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
    free(l);
    if (k->nleases > 0)
        return NULL;
    e = table_find(c->keys, k->key, k->klen);
    if (e != NULL)
        table_delete(c->keys, e);
    c->st.keys--;
    return k;
}

/* Ends l and tells the caller; frees a forgotten key after the hook. */
static void conc__end_notify(struct conc *c, struct conc_lease *l, conc_freed_fn freed, void *ud)
{
    struct conc_key *k = l->k;
    struct conc_key *gone = conc__end(c, l);
    if (freed != NULL)
        freed(ud, k->key, k->klen);
    free(gone);
}

static int64_t conc__earliest(const struct conc_key *k)
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
    k = conc__find(c, key, klen);
    memset(r, 0, sizeof(*r));
    r->limit = cap;
    r->held = k != NULL ? k->held : 0;
    r->retry_after_ns = -1;
    if (qty > cap || r->held > cap - qty) {
        c->st.refused++;
        if (qty <= cap && k != NULL) {
            int64_t t = conc__earliest(k);
            r->retry_after_ns = t > now ? t - now : 0;
        }
        return 0;
    }
    if (c->st.leases >= c->max_leases)
        return -SLUICE_EFULL;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -SLUICE_ENOMEM;
    if (c->nheap == c->heapcap) {
        size_t cap2 = c->heapcap ? 2 * c->heapcap : 64;
        struct conc_lease **h = realloc(c->heap, cap2 * sizeof(*h));
        if (h == NULL) {
            free(l);
            return -SLUICE_ENOMEM;
        }
        c->heap = h;
        c->heapcap = cap2;
    }
    if (k == NULL) {
        k = calloc(1, sizeof(*k) + klen);
        if (k == NULL) {
            free(l);
            return -SLUICE_ENOMEM;
        }
        rc = table_insert(c->keys, key, klen, sizeof(k), 0, now, &e);
        if (rc < 0) {
            free(k);
            free(l);
            return rc;
        }
        memcpy(table_entry_value(e), &k, sizeof(k));
        k->klen = klen;
        if (klen > 0)
            memcpy(k->key, key, klen);
        c->st.keys++;
    }
    l->id = ++c->next_id;
    if (l->id == 0)
        l->id = ++c->next_id; /* 0 is never an id */
    rc = table_insert(c->ids, (const char *)&l->id, sizeof(l->id), sizeof(l), 0, now, &e);
    if (rc < 0) {
        if (k->nleases == 0) {
            e = table_find(c->keys, key, klen);
            if (e != NULL)
                table_delete(c->keys, e);
            c->st.keys--;
            free(k);
        }
        free(l);
        return rc;
    }
    memcpy(table_entry_value(e), &l, sizeof(l));
    l->qty = qty;
    l->expires = now + ttl_ns;
    l->ttl = ttl_ns;
    l->k = k;
    l->knext = k->leases;
    if (k->leases != NULL)
        k->leases->kprev = l;
    k->leases = l;
    k->nleases++;
    k->held += qty;
    if (o != NULL) {
        l->owner = o;
        l->onext = o->leases;
        if (o->leases != NULL)
            o->leases->oprev = l;
        o->leases = l;
        o->n++;
    }
    c->nheap++;
    conc__heap_set(c, c->nheap - 1, l);
    conc__heap_up(c, c->nheap - 1);
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
    struct conc_key *k = conc__find(c, key, klen);
    return k != NULL ? k->held : 0;
}

int64_t conc_earliest(struct conc *c, const char *key, size_t klen)
{
    struct conc_key *k = conc__find(c, key, klen);
    return k != NULL ? conc__earliest(k) : INT64_MAX;
}

int conc_release(struct conc *c, const char *key, size_t klen, uint64_t id, conc_freed_fn freed,
                 void *ud)
{
    struct conc_lease *l = conc__lease(c, key, klen, id);
    if (l == NULL)
        return -SLUICE_ENOENT;
    c->st.released++;
    conc__end_notify(c, l, freed, ud);
    return 0;
}

int conc_renew(struct conc *c, const char *key, size_t klen, uint64_t id, int64_t ttl_ns,
               int64_t now, int64_t *expires_ns)
{
    struct conc_lease *l;
    if (ttl_ns < 0 || ttl_ns > CONC_MAX_TTL_NS || now < 0)
        return -SLUICE_EINVAL;
    l = conc__lease(c, key, klen, id);
    if (l == NULL)
        return -SLUICE_ENOENT;
    if (ttl_ns == 0)
        ttl_ns = l->ttl;
    if (now > INT64_MAX - ttl_ns)
        return -SLUICE_EINVAL;
    l->expires = now + ttl_ns;
    conc__heap_up(c, l->heap_i);
    conc__heap_down(c, l->heap_i);
    *expires_ns = l->expires;
    return 0;
}

size_t conc_expire(struct conc *c, int64_t now, conc_freed_fn freed, void *ud)
{
    size_t n = 0;
    /* conc__end takes the ended lease out of the heap before freeing it,
     * so heap[0] is always live here (the analyzer cannot follow that). */
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc)
    while (c->nheap > 0 && c->heap[0]->expires <= now) {
        c->st.expired++;
        conc__end_notify(c, c->heap[0], freed, ud);
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
    /* conc__end unlinks the ended lease from o before freeing it. */
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc)
    while (o->leases != NULL) {
        c->st.disconnects++;
        conc__end_notify(c, o->leases, freed, ud); // NOLINT(clang-analyzer-unix.Malloc)
        n++;
    }
    free(o);
    return n;
}

void conc_get_stats(const struct conc *c, struct conc_stats *out)
{
    *out = c->st;
}
