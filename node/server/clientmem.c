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
