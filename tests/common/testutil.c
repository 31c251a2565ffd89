#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t test_seed(const char *test_name)
{
    const char *env = getenv("SLUICE_SEED");
    uint64_t seed;
    if (env != NULL && *env != '\0') {
        seed = strtoull(env, NULL, 10);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    }
    fprintf(stderr, "[%s] seed %llu (replay with SLUICE_SEED=%llu)\n", test_name,
            (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

uint64_t test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t test_rand_range(uint64_t *state, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1u;
    if (span == 0)
        return (int64_t)test_rand(state);
    return (int64_t)((uint64_t)lo + test_rand(state) % span);
}
