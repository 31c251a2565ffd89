/*
 * slab: the key table's entry allocator (table.c).
 *
 * A table holds up to millions of small entries of a few sizes (a header,
 * a key of a few bytes, an algorithm's state or a replica record), made
 * and freed one at a time on the event loop.  malloc gives each its own
 * header and rounds it up to 16 bytes, and a table that grows by a million
 * keys takes each new page of memory with a fault of its own.  Here:
 *
 *   - sizes are classes of 8 bytes up to SLAB_MAX; an object costs its
 *     class, nothing more;
 *   - each class carves objects from 64 KiB pages of its own; a freed
 *     object goes on its page's free list, and a class fills the pages it
 *     has room in before it takes a new one;
 *   - a page whose last object is freed goes back to the system
 *     (MADV_DONTNEED) and to a pool any class takes pages from, so a table
 *     that held a million keys and dropped them gives their memory back,
 *     as malloc_trim would (a class keeps one empty page, so a table that
 *     adds and drops a key at a page's edge does not fault each time);
 *   - pages come from 2 MiB regions, aligned, so a page's class is found
 *     from an object's address (the page's header says it); past the
 *     first region a page is faulted in whole when a class takes it
 *     (MADV_POPULATE_WRITE), one call instead of 16 traps, so a table
 *     growing by a million keys pays about half as much for its memory
 *     (a small one keeps the few 4 KiB pages it uses).
 *
 * What it does not do: move objects (a page with one live object keeps
 * its 64 KiB), or unmap regions before slab_destroy (their pages' memory
 * goes back, their addresses stay reserved).  Under AddressSanitizer, free
 * objects and the unused part of a page are poisoned, so a use after free
 * is reported as it would be with malloc.
 *
 * One thread: a slab belongs to its table, on the loop that owns it.
 */
#ifndef SLUICE_SLAB_H
#define SLUICE_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_MAX 1024u /* the largest object; larger ones are the caller's (malloc) */

struct slab;

struct slab_stats {
    uint64_t regions;  /* 2 MiB regions mapped */
    uint64_t pages;    /* 64 KiB pages a class holds now */
    uint64_t released; /* pages given back to the system, running total */
    uint64_t live;     /* objects allocated and not freed */
};

/* Creates an empty slab (no memory mapped until the first object).  Fails
 * with -SLUICE_ENOMEM or -SLUICE_EINVAL (NULL out). */
int slab_create(struct slab **out);

/* Unmaps every region: every object of s is gone.  NULL is a no-op. */
void slab_destroy(struct slab *s);

/* An object of size bytes (1..SLAB_MAX), 8-byte aligned, its contents
 * undefined; NULL when size is out of range or no memory is left. */
void *slab_alloc(struct slab *s, size_t size);

/* Frees p, an object slab_alloc of s returned (NULL: a no-op). */
void slab_free(struct slab *s, void *p);

void slab_get_stats(const struct slab *s, struct slab_stats *out);

/*
 * Large zeroed arrays of a table's own (its bucket arrays), mapped apart
 * from malloc's heap.  An array of SLAB_ARRAY_MAP bytes or more is an
 * anonymous mapping: freed, it goes back to the system at once, and it can
 * be faulted in ahead of its use (slab_array_populate), a part at a time;
 * a smaller one comes from calloc.  From malloc's heap instead, a large
 * array was either faulted 4 KiB at a time wherever a new key landed, or,
 * once malloc had raised its mapping threshold, cleared with memset in one
 * go.  Under AddressSanitizer a mapped array is a root region of the leak
 * checker, as a region is (an entry of a long key, from malloc, is reached
 * only through it).
 */
#define SLAB_ARRAY_MAP ((size_t)64 << 10)

/* A zeroed array of len bytes; NULL when out of memory. */
void *slab_array_alloc(size_t len);

/* Frees an array slab_array_alloc gave for len bytes (NULL: a no-op). */
void slab_array_free(void *p, size_t len);

/* Faults in the 4 KiB pages of [off, off + n) of an array of len bytes
 * from slab_array_alloc, in one call (MADV_POPULATE_WRITE) instead of a
 * trap each as they are first touched.  A hint: a calloc'd array, a kernel
 * before 5.14 or a failure leaves the pages to fault as they are used. */
void slab_array_populate(void *p, size_t len, size_t off, size_t n);

#endif
