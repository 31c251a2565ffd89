/* member_*: the membership table (see member.h). */
#include "member.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a, then a mixer so that linear probing sees well-spread low bits. */
uint64_t member_hash(const char *name, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)name[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h | 1; /* never 0: 0 means "no accuser" elsewhere */
}

int member_table_init(struct member_table *t)
{
    memset(t, 0, sizeof(*t));
    t->nslots = 16;
    t->slots = calloc(t->nslots, sizeof(*t->slots));
    return t->slots ? 0 : -GOSSIP_ENOMEM;
}

void member_table_free(struct member_table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i]);
    free(t->v);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

static size_t slot_of(const struct member_table *t, const char *name, size_t len)
{
    return (size_t)member_hash(name, len) & (t->nslots - 1);
}

struct member *member_find(const struct member_table *t, const char *name, size_t len)
{
    if (len == 0 || len > GOSSIP_NAME_MAX)
        return NULL;
    for (size_t i = slot_of(t, name, len);; i = (i + 1) & (t->nslots - 1)) {
        struct member *m = t->slots[i];
        if (m == NULL)
            return NULL;
        if (m->name_len == len && memcmp(m->name, name, len) == 0)
            return m;
    }
}

static void slot_insert(struct member_table *t, struct member *m)
{
    size_t i = slot_of(t, m->name, m->name_len);
    while (t->slots[i] != NULL)
        i = (i + 1) & (t->nslots - 1);
    t->slots[i] = m;
}

static int grow_slots(struct member_table *t)
{
    size_t old_n = t->nslots;
    struct member **old = t->slots;
    struct member **s = calloc(old_n * 2, sizeof(*s));
    if (s == NULL)
        return -1;
    t->slots = s;
    t->nslots = old_n * 2;
    for (size_t i = 0; i < old_n; i++)
        if (old[i] != NULL)
            slot_insert(t, old[i]);
    free(old);
    return 0;
}

struct member *member_add(struct member_table *t, const char *name, size_t len)
{
    if (len == 0 || len > GOSSIP_NAME_MAX)
        return NULL;
    if ((t->n + 1) * 2 > t->nslots && grow_slots(t) != 0)
        return NULL;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct member **v = realloc(t->v, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        t->v = v;
        t->cap = cap;
    }
    struct member *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    memcpy(m->name, name, len);
    m->name[len] = '\0';
    m->name_len = (uint8_t)len;
    m->idx = t->n;
    t->v[t->n++] = m;
    slot_insert(t, m);
    return m;
}

void member_remove(struct member_table *t, struct member *m)
{
    size_t mask = t->nslots - 1;
    size_t i = slot_of(t, m->name, m->name_len);
    while (t->slots[i] != m)
        i = (i + 1) & mask;
    /* Backward-shift deletion keeps every probe chain unbroken. */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        struct member *x = t->slots[j];
        if (x == NULL)
            break;
        size_t home = slot_of(t, x->name, x->name_len);
        /* x may move into hole i unless its home lies cyclically in (i, j]. */
        int in_between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_between) {
            t->slots[i] = x;
            i = j;
        }
    }
    t->slots[i] = NULL;
    size_t k = m->idx;
    t->v[k] = t->v[--t->n];
    t->v[k]->idx = k;
    free(m);
}

int64_t member_suspicion_timeout(int64_t min_ns, int64_t max_ns, int k, int c)
{
    if (k < 1 || c >= k)
        return min_ns;
    double frac = log((double)c + 1.0) / log((double)k + 1.0);
    double raw = (double)max_ns - frac * (double)(max_ns - min_ns);
    int64_t t = (int64_t)raw;
    return t < min_ns ? min_ns : t;
}

void member_info(const struct member *m, struct gossip_member_info *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->name, m->name, m->name_len);
    out->addr = m->addr;
    out->state = m->state;
    out->incarnation = m->incarnation;
    out->life_id = m->life;
    out->last_heard_ns = m->last_heard;
    out->state_since_ns = m->state_since;
    out->is_self = m->is_self;
}
