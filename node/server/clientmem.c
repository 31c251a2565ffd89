/* clientmem: the heaviest clients first (see clientmem.h). */
#include "clientmem.h"

size_t clientmem_pick(struct clientmem_entry *e, size_t n, size_t total, size_t budget)
{
    size_t k = 0;
    /* Selection, not a sort: an eviction usually takes one or two clients,
     * so this is a pass or two over the clients, not n log n. */
    while (total > budget && k < n) {
        size_t max = k;
        for (size_t i = k + 1; i < n; i++) {
            if (e[i].bytes > e[max].bytes)
                max = i;
        }
        struct clientmem_entry t = e[k];
        e[k] = e[max];
        e[max] = t;
        total = e[k].bytes < total ? total - e[k].bytes : 0;
        k++;
    }
    return k;
}

void clientmem_budget_init(struct clientmem_budget *b, size_t max)
{
    b->max = max;
    b->pools = NULL;
    b->enforcing = 0;
    b->freed = NULL;
    b->freed_ud = NULL;
}

void clientmem_join(struct clientmem_budget *b, struct clientmem_pool *p)
{
    p->budget = b;
    p->next = b->pools;
    b->pools = p;
}

void clientmem_leave(struct clientmem_pool *p)
{
    if (p->budget == NULL)
        return;
    for (struct clientmem_pool **pp = &p->budget->pools; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    p->budget = NULL;
    p->next = NULL;
}

size_t clientmem_total(const struct clientmem_budget *b)
{
    size_t t = 0;
    for (const struct clientmem_pool *p = b->pools; p != NULL; p = p->next)
        t += p->bytes;
    return t;
}

void clientmem_charge(struct clientmem_pool *p, size_t was, size_t now)
{
    p->bytes = p->bytes - was + now;
    if (now < was && p->budget != NULL && p->budget->freed != NULL)
        p->budget->freed(p->budget->freed_ud, was - now);
}

int clientmem_over(const struct clientmem_pool *p)
{
    return p->budget != NULL && clientmem_total(p->budget) > p->budget->max;
}

size_t clientmem_enforce(struct clientmem_budget *b)
{
    if (b->enforcing)
        return 0;
    b->enforcing = 1;
    size_t k = 0;
    while (clientmem_total(b) > b->max) {
        struct clientmem_pool *wp = NULL;
        void *worst = NULL;
        size_t wbytes = 0;
        for (struct clientmem_pool *p = b->pools; p != NULL; p = p->next) {
            size_t bytes = 0;
            void *c = p->heaviest(p->ud, &bytes);
            if (c != NULL && (worst == NULL || bytes > wbytes)) {
                wp = p;
                worst = c;
                wbytes = bytes;
            }
        }
        if (worst == NULL)
            break;
        size_t before = wp->bytes;
        wp->evict(wp->ud, worst);
        k++;
        if (wp->bytes >= before)
            break; /* the pool did not give its bytes back: no progress possible */
    }
    b->enforcing = 0;
    return k;
}
