/*
 * policy: an immutable, reference-counted set of named limits.
 *
 * Layout: the policies in file order; an index sorted by name for
 * policy_set_find; and the policies with a match prefix grouped by prefix
 * length (longest first), each group sorted by prefix bytes, so a key is
 * matched by one binary search per distinct length, longest first: the first
 * hit is the longest matching prefix.
 */
#include "policy.h"

#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"

struct policy_group {
    size_t len;                   /* prefix length of every member */
    const struct policy **sorted; /* by prefix bytes */
    size_t n;
};

struct policy_set {
    unsigned refs;
    struct policy *pol;           /* file order */
    struct policy_counts *counts; /* one per policy, same order */
    size_t n;
    const struct policy **by_name;
    struct policy_group *groups; /* longest prefix length first */
    size_t ngroups;
    const struct policy **group_mem; /* storage of every group's array */
    struct policy_lease *leases;     /* the concurrency limits, file order */
    size_t nleases;
};

static int policy__cmp_name(const void *a, const void *b)
{
    const struct policy *x = *(const struct policy *const *)a;
    const struct policy *y = *(const struct policy *const *)b;
    return strcmp(x->name, y->name);
}

/* By prefix length descending, then bytes. */
static int policy__cmp_prefix(const void *a, const void *b)
{
    const struct policy *x = *(const struct policy *const *)a;
    const struct policy *y = *(const struct policy *const *)b;
    if (x->match_len != y->match_len)
        return x->match_len > y->match_len ? -1 : 1;
    return memcmp(x->match, y->match, x->match_len);
}

static void policy__free(struct policy_set *set)
{
    for (size_t i = 0; i < set->n; i++) {
        free((char *)(uintptr_t)set->pol[i].name);
        free((char *)(uintptr_t)set->pol[i].match);
    }
    for (size_t i = 0; i < set->nleases; i++) {
        free((char *)(uintptr_t)set->leases[i].name);
        free((char *)(uintptr_t)set->leases[i].match);
    }
    free(set->leases);
    free(set->pol);
    free(set->counts);
    free(set->by_name);
    free(set->groups);
    free(set->group_mem);
    free(set);
}

static char *policy__dup(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d != NULL)
        memcpy(d, s, n + 1);
    return d;
}

int policy_set_build(const struct policy_spec *specs, size_t n, struct policy_set **out)
{
    struct policy_set *set;
    size_t nm = 0;
    if ((specs == NULL && n > 0) || out == NULL)
        return -SLUICE_EINVAL;
    set = calloc(1, sizeof(*set));
    if (set == NULL)
        return -SLUICE_ENOMEM;
    set->refs = 1;
    for (size_t i = 0; i < n; i++)
        set->nleases += specs[i].concurrency != 0;
    set->n = n - set->nleases;
    set->leases = calloc(set->nleases ? set->nleases : 1, sizeof(*set->leases));
    set->pol = calloc(set->n ? set->n : 1, sizeof(*set->pol));
    set->counts = calloc(set->n ? set->n : 1, sizeof(*set->counts));
    set->by_name = calloc(set->n ? set->n : 1, sizeof(*set->by_name));
    set->group_mem = calloc(set->n ? set->n : 1, sizeof(*set->group_mem));
    set->groups = calloc(set->n ? set->n : 1, sizeof(*set->groups));
    if (set->pol == NULL || set->counts == NULL || set->by_name == NULL || set->group_mem == NULL ||
        set->groups == NULL || set->leases == NULL)
        goto nomem;
    for (size_t i = 0, nl = 0; i < n; i++) {
        const struct policy_spec *c = &specs[i];
        struct policy_lease *q;
        if (!c->concurrency)
            continue;
        q = &set->leases[nl++];
        q->limit = c->lease_limit;
        q->ttl_ns = c->lease_ttl_ns;
        q->scope = c->scope;
        q->name = policy__dup(c->name);
        if (q->name == NULL)
            goto nomem;
        if (c->match != NULL) {
            q->match = policy__dup(c->match);
            if (q->match == NULL)
                goto nomem;
            q->match_len = strlen(c->match);
        }
        for (size_t j = 0; j + 1 < nl; j++)
            if (strcmp(set->leases[j].name, q->name) == 0 ||
                (q->match != NULL && set->leases[j].match != NULL &&
                 strcmp(set->leases[j].match, q->match) == 0))
                goto exists;
    }
    for (size_t i = 0, j = 0; i < n; i++) {
        const struct policy_spec *c = &specs[i];
        if (c->concurrency)
            continue;
        struct policy *p = &set->pol[j];
        p->name = policy__dup(c->name);
        if (p->name == NULL)
            goto nomem;
        if (c->match != NULL) {
            p->match = policy__dup(c->match);
            if (p->match == NULL)
                goto nomem;
            p->match_len = strlen(c->match);
            set->group_mem[nm++] = p;
        }
        p->algo = c->algo;
        p->scope = c->scope;
        p->partition = c->partition;
        p->dry_run = c->dry_run;
        p->index = (uint32_t)j;
        p->counts = &set->counts[j];
        set->by_name[j] = p;
        j++;
    }
    qsort(set->by_name, set->n, sizeof(*set->by_name), policy__cmp_name);
    for (size_t i = 1; i < set->n; i++)
        if (strcmp(set->by_name[i - 1]->name, set->by_name[i]->name) == 0)
            goto exists;
    qsort(set->group_mem, nm, sizeof(*set->group_mem), policy__cmp_prefix);
    for (size_t i = 0; i < nm; i++) {
        if (i > 0 && policy__cmp_prefix(&set->group_mem[i - 1], &set->group_mem[i]) == 0)
            goto exists;
        if (i == 0 || set->group_mem[i]->match_len != set->group_mem[i - 1]->match_len) {
            struct policy_group *g = &set->groups[set->ngroups++];
            g->len = set->group_mem[i]->match_len;
            g->sorted = &set->group_mem[i];
        }
        set->groups[set->ngroups - 1].n++;
    }
    *out = set;
    return 0;
nomem:
    policy__free(set);
    return -SLUICE_ENOMEM;
exists:
    policy__free(set);
    return -SLUICE_EEXIST;
}

struct policy_set *policy_set_retain(struct policy_set *set)
{
    if (set != NULL)
        set->refs++;
    return set;
}

void policy_set_release(struct policy_set *set)
{
    if (set != NULL && --set->refs == 0)
        policy__free(set);
}

void policy_set_carry(struct policy_set *to, const struct policy_set *from)
{
    if (to == NULL || from == NULL || to == from)
        return;
    for (size_t i = 0; i < to->n; i++) {
        struct policy *p = &to->pol[i];
        const struct policy *old = policy_set_find(from, p->name, strlen(p->name));
        if (old == NULL)
            continue;
        to->counts[i] = *old->counts;
        if (old->algo.kind != p->algo.kind) {
            p->prev = old->algo;
            p->has_prev = 1;
        } else if (old->has_prev && old->prev.kind != p->algo.kind) {
            p->prev = old->prev;
            p->has_prev = 1;
        }
    }
}

size_t policy_set_count(const struct policy_set *set)
{
    return set ? set->n : 0;
}

const struct policy *policy_set_at(const struct policy_set *set, size_t i)
{
    return set && i < set->n ? &set->pol[i] : NULL;
}

const struct policy *policy_set_find(const struct policy_set *set, const char *name, size_t len)
{
    size_t lo = 0, hi;
    if (set == NULL || name == NULL)
        return NULL;
    hi = set->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *m = set->by_name[mid]->name;
        size_t ml = strlen(m);
        int c = memcmp(m, name, ml < len ? ml : len);
        if (c == 0)
            c = ml < len ? -1 : ml > len ? 1 : 0;
        if (c == 0)
            return set->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct policy *policy_set_match(const struct policy_set *set, const char *key, size_t klen)
{
    if (set == NULL || (key == NULL && klen > 0))
        return NULL;
    if (key == NULL)
        key = ""; /* memcmp must not see NULL, even for zero bytes */
    for (size_t g = 0; g < set->ngroups; g++) {
        const struct policy_group *gr = &set->groups[g];
        size_t lo = 0, hi = gr->n;
        if (gr->len > klen)
            continue;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = memcmp(gr->sorted[mid]->match, key, gr->len);
            if (c == 0)
                return gr->sorted[mid];
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    return NULL;
}

const struct policy_lease *policy_set_lease_find(const struct policy_set *set, const char *name,
                                                 size_t len)
{
    if (set == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < set->nleases; i++)
        if (strlen(set->leases[i].name) == len && memcmp(set->leases[i].name, name, len) == 0)
            return &set->leases[i];
    return NULL;
}

const struct policy_lease *policy_set_lease_match(const struct policy_set *set, const char *key,
                                                  size_t klen)
{
    const struct policy_lease *best = NULL;
    if (set == NULL || (key == NULL && klen > 0))
        return NULL;
    if (key == NULL)
        key = ""; /* memcmp must not see NULL, even for zero bytes */
    for (size_t i = 0; i < set->nleases; i++) {
        const struct policy_lease *q = &set->leases[i];
        if (q->match != NULL && q->match_len <= klen && memcmp(q->match, key, q->match_len) == 0 &&
            (best == NULL || q->match_len > best->match_len))
            best = q;
    }
    return best;
}

size_t policy_set_lease_count(const struct policy_set *set)
{
    return set ? set->nleases : 0;
}

const struct policy_lease *policy_set_lease_at(const struct policy_set *set, size_t i)
{
    return set && i < set->nleases ? &set->leases[i] : NULL;
}
