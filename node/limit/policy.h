/*
 * policy: the set of named limits built from the config file, looked up by
 * name (CL.THROTTLE's policy form) or by key (longest match prefix wins).
 *
 * A policy set is immutable once built and reference counted, so a reload
 * (SIGHUP) is: config_load() the file, policy_set_build() a new set, and
 * only if both succeed swap the daemon's pointer and policy_set_release()
 * the old set; a bad reload keeps the old one.  Anything that holds a policy
 * pointer across event-loop turns (a waiting acquire, a key's state) must
 * policy_set_retain() the set it came from and release it when done.
 * Single-threaded use only (the event loop); the count is not atomic.
 */
#ifndef SLUICE_POLICY_H
#define SLUICE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "algo.h"

enum policy_scope { POLICY_SCOPE_LOCAL = 0, POLICY_SCOPE_GLOBAL = 1 };

/* What a global limit does on each side of a partition. */
enum policy_partition {
    POLICY_PARTITION_OPTIMISTIC = 0, /* each side enforces the full limit */
    POLICY_PARTITION_SHARE = 1,      /* each side its last known share (default) */
};

/* One named limit as a source (the config file) describes it; the set
 * copies what it needs, so the caller keeps ownership of the strings. */
struct policy_spec {
    char *name;                      /* [policy NAME] */
    struct algo_params algo;         /* validated by algo_params_init */
    enum policy_scope scope;         /* explicit or the cluster's default_scope */
    enum policy_partition partition; /* meaningful when global */
    char *match;                     /* key prefix, or NULL */
    int dry_run;                     /* 1: decide and count, but always allow */
    int line;                        /* where the source defined it (messages); 0 if none */
    /* A concurrency limit (algorithm = concurrency) instead of a rate: at
     * most lease_limit units held at once, each lease for lease_ttl_ns
     * unless the request says otherwise; algo, partition and dry_run are
     * then unused.  It lives apart in the set (policy_set_lease_*): a
     * throttle never finds it, a lease finds nothing else. */
    int concurrency;
    int64_t lease_limit, lease_ttl_ns;
};

/* A named concurrency limit (SL.LEASE ... POLICY name, or by match). */
struct policy_lease {
    const char *name; /* NUL-terminated, owned by the set */
    int64_t limit;    /* units held at once */
    int64_t ttl_ns;   /* a lease's default TTL */
    enum policy_scope scope;
    const char *match; /* key prefix, or NULL */
    size_t match_len;
};

/* Decisions made under a policy, for the per-policy metrics.  Counted by
 * whoever decides (the limiter for local keys, the cluster for global
 * ones) through policy_count(); carried by name across a reload
 * (policy_set_carry). */
struct policy_counts {
    uint64_t decisions, limited;
};

struct policy {
    const char *name;                /* NUL-terminated, owned by the set */
    struct algo_params algo;         /* the limit */
    enum policy_scope scope;         /* local or global */
    enum policy_partition partition; /* global limits during a partition */
    const char *match;               /* key prefix, or NULL */
    size_t match_len;
    int dry_run;                  /* decide and count, but always answer allowed */
    uint32_t index;               /* position in the file, 0-based: a stable id within the set */
    struct policy_counts *counts; /* owned by the set; mutable through a const policy */
    /* The limit of another algorithm this policy had before a reload (set
     * by policy_set_carry): keys still holding that algorithm's state are
     * read under it, so a change of algorithm carries what they used. */
    struct algo_params prev;
    int has_prev;
};

/* Counts one decision under p (NULL: none); limited is the answer given. */
static inline void policy_count(const struct policy *p, int limited)
{
    if (p != NULL && p->counts != NULL) { /* a policy outside a set counts nothing */
        p->counts->decisions++;
        if (limited)
            p->counts->limited++;
    }
}

struct policy_set;

/*
 * Builds a set from n specs (which it copies; they may be freed
 * afterwards); concurrency specs become the set's concurrency limits.  Fails with -SLUICE_ENOMEM,
 * or -SLUICE_EEXIST for a duplicate name or match prefix (config_load already refuses those).  The
 * new set has one reference, owned by the caller.
 */
int policy_set_build(const struct policy_spec *specs, size_t n, struct policy_set **out);

/* One more reference; returns set.  NULL is fine. */
struct policy_set *policy_set_retain(struct policy_set *set);
/* Drops a reference; the last one frees the set and its policies. */
void policy_set_release(struct policy_set *set);

size_t policy_set_count(const struct policy_set *set);

/* For a reload from `from` to `to`: gives every policy of to that has a
 * namesake in from the namesake's counts (a reload does not reset the
 * per-policy counters of the policies it keeps) and, when the algorithm
 * changed, the namesake's limit as prev (kept across reloads that do not
 * change the algorithm).  NULL sets are fine. */
void policy_set_carry(struct policy_set *to, const struct policy_set *from);
/* The i-th policy in file order, NULL when i is out of range. */
const struct policy *policy_set_at(const struct policy_set *set, size_t i);

/* By exact name (len bytes, need not be NUL-terminated); NULL if none.
 * O(log n). */
const struct policy *policy_set_find(const struct policy_set *set, const char *name, size_t len);

/* The policy whose match prefix is the longest prefix of key; NULL if none.
 * O(d log n) comparisons of at most klen bytes, d = number of distinct
 * prefix lengths. */
const struct policy *policy_set_match(const struct policy_set *set, const char *key, size_t klen);

/* The concurrency limits of a set, apart from its rate limits: by exact
 * name, by longest match prefix (NULL when none), and in file order.
 * Lookups are linear in the set's concurrency limits. */
const struct policy_lease *policy_set_lease_find(const struct policy_set *set, const char *name,
                                                 size_t len);
const struct policy_lease *policy_set_lease_match(const struct policy_set *set, const char *key,
                                                  size_t klen);
size_t policy_set_lease_count(const struct policy_set *set);
const struct policy_lease *policy_set_lease_at(const struct policy_set *set, size_t i);

#endif
