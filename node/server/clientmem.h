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

/*
 * The one budget every listener shares.  The RESP server, the HTTP listener
 * and the gRPC listener each keep a pool: the bytes their connections hold
 * (kept current by the owner at each read and write) and two callbacks, the
 * pool's heaviest connection and how to close one.  Past the budget the
 * heaviest connection of any pool is closed, then the next, until the sum
 * is within it: a crowd of HTTP/2 streams cannot grow the daemon past the
 * bound that holds RESP clients, and a RESP client is not closed to pay for
 * them.  All on the loop thread.
 */
struct clientmem_pool;
struct clientmem_budget {
    size_t max; /* (size_t)-1: no limit */
    struct clientmem_pool *pools;
    int enforcing;
    /* Told of every decrease (for malloc_trim), or NULL. */
    void (*freed)(void *ud, size_t bytes);
    void *freed_ud;
};

struct clientmem_pool {
    size_t bytes; /* the sum over the pool's connections (clientmem_charge) */
    /* The heaviest connection that may be closed now and its bytes, or NULL. */
    void *(*heaviest)(void *ud, size_t *bytes);
    /* Closes conn; its bytes must leave the pool before this returns. */
    void (*evict)(void *ud, void *conn);
    void *ud;
    struct clientmem_budget *budget; /* NULL until joined */
    struct clientmem_pool *next;
};

void clientmem_budget_init(struct clientmem_budget *b, size_t max);
/* Adds p (its callbacks set, bytes 0) to b; p must stay put until left. */
void clientmem_join(struct clientmem_budget *b, struct clientmem_pool *p);
/* Takes p out of its budget (harmless when it never joined). */
void clientmem_leave(struct clientmem_pool *p);
/* Bytes held under b: the sum of its pools. */
size_t clientmem_total(const struct clientmem_budget *b);
/* A connection of p went from was to now bytes. */
void clientmem_charge(struct clientmem_pool *p, size_t was, size_t now);
/* Nonzero when p's budget is exceeded (p may be unjoined: never). */
int clientmem_over(const struct clientmem_pool *p);
/* Past the budget, closes the heaviest connections of any pool until within
 * it (or no pool offers one); returns how many.  Reentry does nothing. */
size_t clientmem_enforce(struct clientmem_budget *b);

#endif
