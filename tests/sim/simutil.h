/*
 * Helpers shared by the libgossip simulator scenarios: a cluster of n nodes
 * built from default configs, views of membership from one node, and a
 * switch that shortens the long scenarios (SLUICE_SIM_QUICK=1).
 */
#ifndef SLUICE_SIMUTIL_H
#define SLUICE_SIMUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip.h"
#include "gossip/sim.h"
#include "io.h"

#define SEC  (1000000000LL)
#define MSEC (1000000LL)

/* 1 when long scenarios should run at full length (the default: the whole
 * suite takes seconds even under the sanitizers); SLUICE_SIM_QUICK=1 shortens
 * them for quick iterations. */
static inline int sim_full(void)
{
    const char *e = getenv("SLUICE_SIM_QUICK");
    return !(e != NULL && *e == '1');
}

static inline void sim_cfg(struct gossip_config *cfg, char *namebuf, int i)
{
    gossip_config_default(cfg);
    sprintf(namebuf, "node-%03d", i);
    cfg->name = namebuf;
}

/* Adds n nodes (config tweaked by `tweak` if given); all join node 0. */
static inline void sim_cluster(struct gossip_sim *s, int n, struct gossip_keyring **keyrings,
                               void (*tweak)(struct gossip_config *, int))
{
    for (int i = 0; i < n; i++) {
        struct gossip_config cfg;
        char name[32];
        sim_cfg(&cfg, name, i);
        if (keyrings != NULL)
            cfg.keyring = keyrings[i];
        if (tweak != NULL)
            tweak(&cfg, i);
        int idx = gossip_sim_add(s, &cfg);
        if (idx != i)
            abort();
        if (i > 0)
            gossip_sim_join(s, i, 0);
    }
}

struct sim_count {
    const char *skip; /* member name not to count, or NULL */
    size_t alive, suspect, dead, left;
};

static inline int sim_count_cb(void *ud, const struct gossip_member_info *m)
{
    struct sim_count *c = ud;
    if (c->skip != NULL && strcmp(c->skip, m->name) == 0)
        return 0;
    switch (m->state) {
    case GOSSIP_MEMBER_ALIVE:
        c->alive++;
        break;
    case GOSSIP_MEMBER_SUSPECT:
        c->suspect++;
        break;
    case GOSSIP_MEMBER_DEAD:
        c->dead++;
        break;
    case GOSSIP_MEMBER_LEFT:
        c->left++;
        break;
    }
    return 0;
}

static inline struct sim_count sim_view(struct gossip_sim *s, int i)
{
    struct sim_count c = {0};
    struct gossip_node *n = gossip_sim_node(s, i);
    if (n != NULL)
        gossip_node_members(n, sim_count_cb, &c);
    return c;
}

/* State of `name` in node i's view, or -1 if unknown. */
static inline int sim_state_of(struct gossip_sim *s, int i, const char *name)
{
    struct gossip_member_info info;
    struct gossip_node *n = gossip_sim_node(s, i);
    if (n == NULL || gossip_node_member(n, name, &info) != 0)
        return -1;
    return (int)info.state;
}

/* Runs until every live node sees `want` alive members (itself included), in
 * steps of `step`; returns the simulated time it took, or -1 after `limit`. */
static inline int64_t sim_converge(struct gossip_sim *s, size_t want, int64_t step, int64_t limit)
{
    int64_t start = gossip_sim_now(s);
    while (gossip_sim_now(s) - start <= limit) {
        int ok = 1;
        for (size_t i = 0; i < gossip_sim_count(s) && ok; i++) {
            if (gossip_sim_node(s, (int)i) == NULL)
                continue;
            ok = sim_view(s, (int)i).alive == want;
        }
        if (ok)
            return gossip_sim_now(s) - start;
        gossip_sim_run(s, step);
    }
    return -1;
}

#endif
