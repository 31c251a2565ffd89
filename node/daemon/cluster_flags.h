/*
 * cluster_flags: the daemon's side of struct cluster_options (global/
 * cluster.h): its command-line flags and the config file's [cluster]
 * section.  Kept out of the cluster module so that the replication layer
 * knows nothing of getopt or of the config file's format.
 */
#ifndef SLUICE_CLUSTER_FLAGS_H
#define SLUICE_CLUSTER_FLAGS_H

#include <getopt.h>
#include <stdio.h>

#include "cluster.h"
#include "config.h"

/*
 * Fills, from a loaded config's [cluster] section, every field the flags
 * left unset (flags win).  Strings are borrowed from cfg, which must outlive
 * cluster_start(); the join list is copied into o->join_buf.  Does nothing
 * when cfg has no [cluster] section.  Fails with -SLUICE_ENOMEM.
 */
int cluster_flags_apply_config(struct cluster_options *o, const struct config *cfg);

/*
 * Flag parsing for sluiced: CLUSTER_FLAGS_LONG_OPTIONS goes into the daemon's
 * getopt_long table; for any option value it does not know the daemon calls
 * cluster_flags_parse(), which returns 1 (taken), 0 (not a cluster flag) or
 * -1 (bad value; the message is printed on stderr).
 */
#define CLUSTER_FLAGS_BASE 0x1000
/* clang-format off */
#define CLUSTER_FLAGS_LONG_OPTIONS \
    {"node-name", required_argument, NULL, CLUSTER_FLAGS_BASE + 0}, \
    {"gossip-bind", required_argument, NULL, CLUSTER_FLAGS_BASE + 1}, \
    {"advertise", required_argument, NULL, CLUSTER_FLAGS_BASE + 2}, \
    {"join", required_argument, NULL, CLUSTER_FLAGS_BASE + 3}, \
    {"cluster-key-file", required_argument, NULL, CLUSTER_FLAGS_BASE + 4}, \
    {"cluster-label", required_argument, NULL, CLUSTER_FLAGS_BASE + 5}, \
    {"gossip-interval-ms", required_argument, NULL, CLUSTER_FLAGS_BASE + 6}, \
    {"default-scope", required_argument, NULL, CLUSTER_FLAGS_BASE + 7}, \
    {"partition-policy", required_argument, NULL, CLUSTER_FLAGS_BASE + 8}, \
    {"insecure-no-encryption", no_argument, NULL, CLUSTER_FLAGS_BASE + 9}, \
    {"gossip-probe-interval-ms", required_argument, NULL, CLUSTER_FLAGS_BASE + 10}, \
    {"sync-timeout-ms", required_argument, NULL, CLUSTER_FLAGS_BASE + 11}, \
    {"dns-interval-ms", required_argument, NULL, CLUSTER_FLAGS_BASE + 12}, \
    {"allow-shared-key-file", no_argument, NULL, CLUSTER_FLAGS_BASE + 13}, \
    {"gossip-mtu", required_argument, NULL, CLUSTER_FLAGS_BASE + 14}
/* clang-format on */
int cluster_flags_parse(struct cluster_options *o, int opt, const char *arg);
/* The cluster part of `sluiced --help`. */
void cluster_flags_usage(FILE *f);

#endif
