/*
 * A stand-in for libFuzzer so that every fuzz target gets a bounded smoke run
 * with any compiler (and under the sanitizers in CI).
 *
 *   fuzz_x [--runs N] [--seed S] [FILE...]
 *
 * Each FILE is fed as is; then N inputs are generated from seed S (default:
 * SLUICE_SEED or the clock, printed): random bytes, and mutations (bit flips,
 * truncations, splices, byte repeats) of earlier inputs, so a structured
 * decoder is reached past its first length check.  Exits 0 when every input
 * returned; a crash is the failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional: a target may provide seed inputs, NULL-terminated, and their
 * lengths in *lens; a target whose seeds are all NUL-terminated text may leave
 * *lens NULL, and each seed's length is then its strlen. */
__attribute__((weak)) const char *const *fuzz_seed_inputs(size_t **lens);

static uint64_t rng;
static uint64_t next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define POOL   64
#define MAXLEN 4096

static void run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, buf, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
}

int main(int argc, char **argv)
{
    long runs = 10000;
    int have_seed = 0;
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
            have_seed = 1;
        } else if (argv[i][0] == '-') {
            /* libFuzzer-style flags (-max_total_time=...) are ignored. */
        } else {
            run_file(argv[i]);
        }
    }
    if (!have_seed) {
        const char *env = getenv("SLUICE_SEED");
        if (env != NULL && *env != '\0') {
            seed = strtoull(env, NULL, 10);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_sec ^ (uint64_t)ts.tv_nsec;
        }
    }
    fprintf(stderr, "%s: seed %llu (replay with --seed %llu), %ld runs\n", argv[0],
            (unsigned long long)seed, (unsigned long long)seed, runs);
    rng = seed;

    static uint8_t pool[POOL][MAXLEN];
    static size_t pool_len[POOL];
    size_t npool = 0;
    if (fuzz_seed_inputs != NULL) {
        size_t *lens = NULL;
        const char *const *seeds = fuzz_seed_inputs(&lens);
        for (size_t i = 0; seeds != NULL && seeds[i] != NULL && npool < POOL; i++) {
            size_t l = lens != NULL ? lens[i] : strlen(seeds[i]);
            if (l > MAXLEN)
                l = MAXLEN;
            memcpy(pool[npool], seeds[i], l);
            pool_len[npool++] = l;
        }
    }

    uint8_t *input = malloc(MAXLEN);
    for (long r = 0; r < runs; r++) {
        size_t len;
        uint64_t kind = next() % 4;
        if (npool == 0 || kind == 0) {
            len = next() % 512;
            for (size_t i = 0; i < len; i++)
                input[i] = (uint8_t)next();
        } else {
            size_t src = next() % npool;
            len = pool_len[src];
            memcpy(input, pool[src], len);
            int edits = 1 + (int)(next() % 4);
            for (int e = 0; e < edits; e++) {
                uint64_t op = next() % 5;
                if (op == 0 && len > 0) {
                    input[next() % len] ^= (uint8_t)(1u << (next() % 8));
                } else if (op == 1 && len > 0) {
                    len = next() % len;
                } else if (op == 2 && len > 0) {
                    input[next() % len] = (uint8_t)next();
                } else if (op == 3 && len + 8 < MAXLEN) {
                    size_t at = len ? next() % len : 0;
                    memmove(input + at + 8, input + at, len - at);
                    for (int k = 0; k < 8; k++)
                        input[at + k] = (uint8_t)next();
                    len += 8;
                } else if (op == 4 && npool > 1) {
                    size_t other = next() % npool;
                    size_t cut = len ? next() % len : 0;
                    size_t take =
                        pool_len[other] - (pool_len[other] ? next() % pool_len[other] : 0);
                    if (cut + take > MAXLEN)
                        take = MAXLEN - cut;
                    memcpy(input + cut, pool[other] + (pool_len[other] - take), take);
                    len = cut + take;
                }
            }
        }
        /* Exact-size heap copy so ASan catches any read past the end. */
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, input, len);
        LLVMFuzzerTestOneInput(copy, len);
        free(copy);
        if (npool < POOL && (next() % 16) == 0) {
            memcpy(pool[npool], input, len);
            pool_len[npool++] = len;
        }
    }
    free(input);
    fprintf(stderr, "%s: %ld runs done\n", argv[0], runs);
    return 0;
}
