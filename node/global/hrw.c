/* hrw: rendezvous hashing (see hrw.h). */
#include "hrw.h"

static uint64_t hrw__mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t hrw_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return hrw__mix(h);
}

uint64_t hrw_score(uint64_t kh, uint64_t mh)
{
    return hrw__mix(kh ^ hrw__mix(mh + 0x9e3779b97f4a7c15ULL));
}

size_t hrw_pick(uint64_t kh, const uint64_t *mh, size_t n)
{
    size_t best = 0;
    uint64_t top = hrw_score(kh, mh[0]);
    for (size_t i = 1; i < n; i++) {
        uint64_t s = hrw_score(kh, mh[i]);
        if (s > top) {
            top = s;
            best = i;
        }
    }
    return best;
}
