/*
 * hrw: rendezvous (highest random weight) hashing, the owner choice of
 * global keys.
 *
 * Every node ranks the live members for a key by score(key, member) and the
 * key's owner is the member with the highest score.  Two nodes with the same
 * member view pick the same owner without talking, and when a member joins
 * or leaves only the keys it wins or held move: about 1/N of them, none
 * between two members that stay.  The score is a 64-bit mix of the two
 * hashes (splitmix64's finalizer), so members are chosen uniformly.
 *
 * Nothing here allocates or fails.
 */
#ifndef SLUICE_HRW_H
#define SLUICE_HRW_H

#include <stddef.h>
#include <stdint.h>

/* 64-bit hash of n bytes (FNV-1a, then mixed); stable across hosts and runs,
 * because every node must compute the same owner. */
uint64_t hrw_hash(const void *p, size_t n);

/* The score of member hash mh for key hash kh. */
uint64_t hrw_score(uint64_t kh, uint64_t mh);

/* Index of the member (hashes mh[0..n-1]) with the highest score for kh;
 * ties (equal member hashes) go to the lower index.  n must be >= 1. */
size_t hrw_pick(uint64_t kh, const uint64_t *mh, size_t n);

#endif
