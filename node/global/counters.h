/*
 * counters: the counter tables (base/counter.h) of the two modules of
 * this wing whose stats struct is declared elsewhere: libgossip's
 * struct gossip_stats and the replica's struct replica_stats.  INFO's
 * "# Cluster" and the cluster families of /metrics render them.
 */
#ifndef SLUICE_COUNTERS_H
#define SLUICE_COUNTERS_H

#include "counter.h"

/* struct gossip_stats (gossip/gossip.h); its drops[] are labelled series,
 * rendered apart. */
extern const struct counter_table counters_gossip;
/* struct replica_stats (replica.h). */
extern const struct counter_table counters_replica;

#endif
