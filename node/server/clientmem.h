/*
 * clientmem: which clients to disconnect when their memory is over budget.
 *
 * The server counts, per client, the bytes its buffers hold (input, output,
 * name, the command layer's state) and keeps the sum.  When the sum passes
 * the budget (--max-client-memory) the heaviest clients are disconnected
 * first, one after the other, until the sum is within the budget again, as
 * Redis does with maxmemory-clients.  The choice is kept apart from the
 * sockets so that it can be tested alone.
 */
#ifndef SLUICE_CLIENTMEM_H
#define SLUICE_CLIENTMEM_H

#include <stddef.h>

struct clientmem_entry {
    size_t bytes; /* what the client holds */
    void *client; /* the caller's */
};

/*
 * total is the sum over every client (it may include clients not in e);
 * budget the most allowed.  Reorders e[0..n) so that its first k entries are
 * the clients to disconnect, heaviest first, and returns k: the fewest of
 * the heaviest whose removal brings total to at most budget (all n when even
 * that is not enough).  Returns 0 when total is within budget.  Never fails.
 */
size_t clientmem_pick(struct clientmem_entry *e, size_t n, size_t total, size_t budget);

#endif
