/*
 * slab: size classes on 64 KiB pages of 2 MiB regions (see slab.h).
 *
 *   region (2 MiB, 2 MiB-aligned)
 *   +-----------+-----------+-----     -+-----------+
 *   | page      | page      |   ...     | page      |   32 pages of 64 KiB
 *   +-----------+-----------+-----     -+-----------+
 *   page: | header (48 B) | object | object | ... | never used yet |
 *
 * A class's objects are 8 x class bytes; a page serves one class until it
 * is empty and released.  Its header (found from an object's address: the
 * page is the address rounded down to 64 KiB) holds its class, its free
 * objects, its count of live ones, where its never-used part begins, and
 * its links in the class's list of pages with room, so an object needs no
 * header of its own.
 */
#include "slab.h"

#include "sluice/error.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SLAB_PAGE    (64u * 1024u)
#define SLAB_REGION  (2u * 1024u * 1024u)
#define SLAB_HDR     48u
#define SLAB_CLASSES (SLAB_MAX / 8u + 1u) /* class c holds objects of 8c bytes; 0 unused */

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#ifdef SLAB_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#define SLAB_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
/* Entries point at memory of malloc's (a sliding log's ring): the leak
 * checker must look for pointers in the regions, as it does in malloc's
 * blocks, or it reports what a live entry holds as leaked. */
#define SLAB_ROOT(p, n)   __lsan_register_root_region((p), (n))
#define SLAB_UNROOT(p, n) __lsan_unregister_root_region((p), (n))
#else
#define SLAB_POISON(p, n)   ((void)(p), (void)(n))
#define SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#define SLAB_ROOT(p, n)     ((void)(p), (void)(n))
#define SLAB_UNROOT(p, n)   ((void)(p), (void)(n))
#endif

struct slab__page {
    struct slab__page *next, *prev; /* in s->avail[cls] while it has room */
    void *free;                     /* this page's free objects, linked through their first word */
    uint32_t cls, live;
    uint32_t bump; /* offset of its first never-used object */
};
/* Objects begin SLAB_HDR bytes into a page, 16-aligned for the first. */
_Static_assert(sizeof(struct slab__page) <= SLAB_HDR, "a page header fits in SLAB_HDR bytes");

struct slab {
    struct slab__page *avail[SLAB_CLASSES]; /* each class's pages with room, allocated from first */
    char *next_page, *reg_end;              /* pages of the newest region never given out */
    char **regions;
    size_t nregions, capregions;
    char **spare; /* released pages (their memory back with the system), taken first */
    size_t nspare, capspare;
    struct slab_stats st;
};

int slab_create(struct slab **out)
{
    if (out == NULL)
        return -SLUICE_EINVAL;
    *out = calloc(1, sizeof(**out));
    return *out == NULL ? -SLUICE_ENOMEM : 0;
}

void slab_destroy(struct slab *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nregions; i++) {
        SLAB_UNPOISON(s->regions[i], SLAB_REGION);
        SLAB_UNROOT(s->regions[i], SLAB_REGION);
        munmap(s->regions[i], SLAB_REGION);
    }
    free(s->regions);
    free(s->spare);
    free(s);
}

/* Grows a vector of pointers to hold one more; -SLUICE_ENOMEM if it cannot. */
static int slab__reserve(char ***v, size_t n, size_t *cap)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 8;
    char **a = realloc(*v, nc * sizeof(*a));
    if (a == NULL)
        return -SLUICE_ENOMEM;
    *v = a;
    *cap = nc;
    return 0;
}

/* A new 2 MiB region, 2 MiB-aligned (mapped twice as large, the excess
 * unmapped); NULL when out of memory. */
static char *slab__region(struct slab *s)
{
    if (slab__reserve(&s->regions, s->nregions, &s->capregions) != 0)
        return NULL;
    size_t len = 2 * (size_t)SLAB_REGION;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)m + SLAB_REGION - 1) & ~(uintptr_t)(SLAB_REGION - 1);
    char *r = (char *)a;
    if (r > m)
        munmap(m, (size_t)(r - m));
    if (r + SLAB_REGION < m + len)
        munmap(r + SLAB_REGION, (size_t)(m + len - (r + SLAB_REGION)));
    SLAB_POISON(r, SLAB_REGION);
    SLAB_ROOT(r, SLAB_REGION);
    s->regions[s->nregions++] = r;
    s->st.regions++;
    return r;
}

static void slab__link(struct slab *s, struct slab__page *pg)
{
    struct slab__page **head = &s->avail[pg->cls];
    pg->prev = NULL;
    pg->next = *head;
    if (*head != NULL)
        (*head)->prev = pg;
    *head = pg;
}

/* Whether pg is in its class's list (it has room). */
static int slab__listed(const struct slab *s, const struct slab__page *pg)
{
    return pg->prev != NULL || s->avail[pg->cls] == pg;
}

static void slab__unlink(struct slab *s, struct slab__page *pg)
{
    if (pg->prev != NULL)
        pg->prev->next = pg->next;
    else
        s->avail[pg->cls] = pg->next;
    if (pg->next != NULL)
        pg->next->prev = pg->prev;
    pg->next = pg->prev = NULL;
}

/* Faults [p, p + len) in whole, in one call (a slab page, or part of a
 * table's array: slab_array_populate): a table past its first region is
 * growing by thousands of entries, and faulting its pages 4 KiB at a time
 * costs a trap each (on the 2-core VM of the benchmarks, 2 MiB took 5.5 ms
 * faulted 4 KiB at a time, 2.7 ms populated 64 KiB at a time).  Not huge
 * pages: those took as long in all, but a single fault of 2 MiB stalled
 * the loop 2 to 6 ms.
 * A kernel before 5.14 says EINVAL, and the page faults in as it is used;
 * the first region is left to fault so, so a small table (most of a
 * daemon's) holds only the 4 KiB pages it uses. */
static void slab__populate(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
    (void)madvise(p, len, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)len;
#endif
}

/* A page for class c, listed in s->avail[c]: a released one first, else
 * the next of the newest region; NULL when out of memory. */
static struct slab__page *slab__page(struct slab *s, uint32_t c)
{
    char *p;
    if (s->nspare > 0) {
        p = s->spare[--s->nspare];
    } else {
        if (s->next_page == s->reg_end) {
            char *r = slab__region(s);
            if (r == NULL)
                return NULL;
            s->next_page = r;
            s->reg_end = r + SLAB_REGION;
        }
        p = s->next_page;
        s->next_page += SLAB_PAGE;
    }
    if (s->nregions > 1)
        slab__populate(p, SLAB_PAGE);
    SLAB_UNPOISON(p, SLAB_HDR);
    struct slab__page *pg = (struct slab__page *)(void *)p;
    memset(pg, 0, sizeof(*pg));
    pg->cls = c;
    pg->bump = SLAB_HDR;
    slab__link(s, pg);
    s->st.pages++;
    return pg;
}

void *slab_alloc(struct slab *s, size_t size)
{
    if (size == 0 || size > SLAB_MAX)
        return NULL;
    uint32_t c = (uint32_t)((size + 7u) / 8u);
    uint32_t sz = c * 8u;
    struct slab__page *pg = s->avail[c];
    if (pg == NULL && (pg = slab__page(s, c)) == NULL)
        return NULL;
    char *p = pg->free;
    if (p != NULL) {
        SLAB_UNPOISON(p, sz);
        memcpy(&pg->free, p, sizeof(pg->free)); /* the next free object */
    } else {
        p = (char *)pg + pg->bump;
        pg->bump += sz;
        SLAB_UNPOISON(p, sz);
    }
    pg->live++;
    if (pg->free == NULL && SLAB_PAGE - pg->bump < sz)
        slab__unlink(s, pg); /* full */
    s->st.live++;
    return p;
}

/* Gives empty page pg's memory back and keeps its address for any class. */
static void slab__release(struct slab *s, struct slab__page *pg)
{
    slab__unlink(s, pg);
    s->st.pages--;
    s->st.released++;
    (void)madvise(pg, SLAB_PAGE, MADV_DONTNEED); /* on failure it stays resident, reusable */
    SLAB_POISON(pg, SLAB_PAGE);
    if (slab__reserve(&s->spare, s->nspare, &s->capspare) == 0)
        s->spare[s->nspare++] = (char *)pg;
    /* else: its address is lost until slab_destroy; its memory is not */
}

void *slab_array_alloc(size_t len)
{
    if (len < SLAB_ARRAY_MAP)
        return calloc(1, len);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    SLAB_ROOT(p, len);
    return p;
}

void slab_array_free(void *p, size_t len)
{
    if (p == NULL)
        return;
    if (len < SLAB_ARRAY_MAP) {
        free(p);
        return;
    }
    SLAB_UNROOT(p, len);
    munmap(p, len);
}

void slab_array_populate(void *p, size_t len, size_t off, size_t n)
{
    if (len < SLAB_ARRAY_MAP || off >= len)
        return;
    if (n > len - off)
        n = len - off;
    /* Whole pages only: mapped arrays start on a page, and their parts
     * are asked for in multiples of 4 KiB. */
    uintptr_t a = ((uintptr_t)p + off + 4095u) & ~(uintptr_t)4095u;
    uintptr_t end = ((uintptr_t)p + off + n) & ~(uintptr_t)4095u;
    if (end > a)
        slab__populate((void *)a, end - a);
}

void slab_free(struct slab *s, void *p)
{
    if (p == NULL)
        return;
    struct slab__page *pg = (struct slab__page *)((uintptr_t)p & ~(uintptr_t)(SLAB_PAGE - 1));
#ifdef SLAB_ASAN
    /* A freed entry's pointers must not hide a leak from the checker. */
    memset(p, 0, (size_t)pg->cls * 8u);
#endif
    memcpy(p, &pg->free, sizeof(pg->free));
    pg->free = p;
    SLAB_POISON(p, (size_t)pg->cls * 8u);
    pg->live--;
    s->st.live--;
    if (!slab__listed(s, pg))
        slab__link(s, pg);
    /* Empty: back to the system, unless it is its class's one page with
     * room (kept, or a key made and dropped over and over at a page's
     * edge would fault the page in each time). */
    if (pg->live == 0 && (s->avail[pg->cls] != pg || pg->next != NULL))
        slab__release(s, pg);
}

void slab_get_stats(const struct slab *s, struct slab_stats *out)
{
    *out = s->st;
}
