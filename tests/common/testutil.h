/*
 * Helpers shared by the C tests.
 *
 * test_seed(): the seed of a randomized test.  Taken from the environment
 * variable SLUICE_SEED when set (decimal), otherwise from the clock; it is
 * printed once to stderr either way so that any failing run can be replayed
 * with SLUICE_SEED=<printed value>.
 *
 * test_rand(): a small deterministic PRNG (splitmix64) so that sequences do
 * not depend on the C library's rand().
 */
#ifndef SLUICE_TESTUTIL_H
#define SLUICE_TESTUTIL_H

#include <stdint.h>

uint64_t test_seed(const char *test_name);
uint64_t test_rand(uint64_t *state);
/* Uniform in [lo, hi] (inclusive); hi >= lo. */
int64_t test_rand_range(uint64_t *state, int64_t lo, int64_t hi);

#endif
