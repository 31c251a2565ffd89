/* commands_cluster: cluster commands and CL.THROTTLE's global branch (see
 * commands_cluster.h). */
#include "commands_cluster.h"

#include <stdio.h>
#include <string.h>

#include "args.h"
#include "counters.h"
#include "info.h"
#include "readiness.h"
#include "gcra.h"
#include "gossip/gossip.h"
#include "replica.h"
#include "server.h"
#include "sluice/error.h"
#include "num.h"

/* ---- SL.MEMBERS ---- */

struct members_ctx {
    struct resp_buf *items;
    size_t n;
    int64_t now;
};

static int commands_cluster__members_one(void *ud, const struct gossip_member_info *m)
{
    struct members_ctx *x = ud;
    char addr[GOSSIP_ADDR_STRLEN];
    if (gossip_addr_format(&m->addr, addr, sizeof(addr)) != 0)
        strcpy(addr, "?");
    int64_t ago = -1;
    if (m->is_self)
        ago = 0;
    else if (m->last_heard_ns > 0)
        ago = x->now > m->last_heard_ns ? (x->now - m->last_heard_ns) / NUM_NS_PER_MS : 0;
    resp_add_array(x->items, 6);
    resp_add_bulk_str(x->items, m->name);
    resp_add_bulk_str(x->items, addr);
    resp_add_bulk_str(x->items, gossip_member_state_name(m->state));
    resp_add_int(x->items, ago);
    resp_add_int(x->items, (int64_t)m->incarnation);
    resp_add_int(x->items, m->is_self ? 1 : 0);
    x->n++;
    return 0;
}

int commands_cluster_members(struct cluster *cl, size_t argc, const char **argv,
                             const size_t *argvlen, struct resp_buf *out)
{
    if (argc != 1) {
        resp_add_error(out, "ERR wrong number of arguments for 'sl.members' command");
        return SERVER_CONTINUE;
    }
    struct gossip_node *g = cluster_gossip(cl);
    if (g == NULL) {
        resp_add_error(out, "ERR this node is not in a cluster (no --gossip-bind)");
        return SERVER_CONTINUE;
    }
    struct resp_buf items;
    resp_buf_init(&items);
    struct members_ctx x = {.items = &items, .now = (int64_t)uv_hrtime()};
    gossip_node_members(g, commands_cluster__members_one, &x);
    resp_add_array(out, x.n);
    resp_add_raw(out, items.data ? items.data : "", items.len);
    resp_buf_free(&items);
    return SERVER_CONTINUE;
}

/* ---- SL.KEY ---- */

struct slots_ctx {
    struct resp_buf *items;
    size_t n;
    int64_t now;
};

static void commands_cluster__add_double(struct resp_buf *b, double v)
{
    char s[64];
    int n = snprintf(s, sizeof(s), "%.4f", v);
    resp_add_bulk(b, s, n > 0 ? (size_t)n : 0);
}

static void commands_cluster__slot_one(void *ud, const struct replica_slot_info *s)
{
    struct slots_ctx *x = ud;
    char epoch[24];
    /* Lives use the full unsigned range: send them as text. */
    int n = snprintf(epoch, sizeof(epoch), "%016llx", (unsigned long long)s->epoch);
    resp_add_array(x->items, 8);
    resp_add_bulk_str(x->items, s->node);
    resp_add_bulk(x->items, epoch, n > 0 ? (size_t)n : 0);
    resp_add_int(x->items, s->count);
    commands_cluster__add_double(x->items, s->demand);
    commands_cluster__add_double(x->items, s->share);
    resp_add_int(x->items, s->reachable ? 1 : 0);
    commands_cluster__add_double(x->items, s->frozen);
    resp_add_int(x->items, s->age_ns / NUM_NS_PER_MS);
    x->n++;
}

int commands_cluster_key(struct cluster *cl, size_t argc, const char **argv, const size_t *argvlen,
                         struct resp_buf *out)
{
    if (argc != 2) {
        resp_add_error(out, "ERR wrong number of arguments for 'sl.key' command");
        return SERVER_CONTINUE;
    }
    struct replica *r = cluster_replica(cl);
    if (r == NULL) {
        resp_add_null(out);
        return SERVER_CONTINUE;
    }
    struct resp_buf slots;
    resp_buf_init(&slots);
    struct slots_ctx x = {.items = &slots, .now = cluster_now_ns(cl)};
    struct replica_key_info info;
    char buf[CLUSTER_KEY_ID_LEN];
    size_t idlen;
    const char *id = cluster_key_id(argv[1], argvlen[1], buf, &idlen);
    if (replica_key_info(r, id, idlen, x.now, &info, commands_cluster__slot_one, &x) < 0) {
        resp_buf_free(&slots);
        resp_add_null(out);
        return SERVER_CONTINUE;
    }
    resp_add_array(out, 34);
    resp_add_pair_str(out, "scope", "global");
    resp_add_pair_str(out, "algorithm", algo_name(info.params.kind));
    resp_add_pair_int(out, "burst", info.params.burst);
    resp_add_pair_int(out, "count", info.params.count);
    resp_add_pair_int(out, "period_ms", info.params.period_ns / NUM_NS_PER_MS);
    resp_add_pair_str(out, "policy",
                      info.policy == POLICY_PARTITION_SHARE ? "share" : "optimistic");
    resp_add_pair_int(out, "remaining", info.remaining);
    resp_add_pair_int(out, "debt_ms", info.debt_ns / NUM_NS_PER_MS);
    resp_add_pair_int(out, "reset_after_ms", info.reset_after_ns / NUM_NS_PER_MS);
    resp_add_bulk_str(out, "share");
    commands_cluster__add_double(out, info.share);
    resp_add_bulk_str(out, "demand");
    commands_cluster__add_double(out, info.demand);
    resp_add_pair_str(out, "owner", info.owner != NULL ? info.owner : "");
    resp_add_pair_str(out, "owned", info.owned ? "yes" : "no");
    resp_add_pair_str(out, "degraded", info.degraded ? "yes" : "no");
    resp_add_pair_int(out, "lease_age_ms",
                      info.lease_age_ns < 0 ? -1 : info.lease_age_ns / NUM_NS_PER_MS);
    resp_add_pair_str(out, "synced", replica_synced(r) ? "yes" : "no");
    resp_add_bulk_str(out, "slots");
    resp_add_array(out, x.n);
    resp_add_raw(out, slots.data ? slots.data : "", slots.len);
    resp_buf_free(&slots);
    return SERVER_CONTINUE;
}

/* ---- INFO cluster ---- */

struct count_ctx {
    uint64_t by_state[4];
};

static int commands_cluster__count_one(void *ud, const struct gossip_member_info *m)
{
    struct count_ctx *x = ud;
    if ((unsigned)m->state < 4)
        x->by_state[m->state]++;
    return 0;
}

void commands_cluster_info(struct cluster *cl, const struct readiness *ready, struct resp_buf *t)
{
    resp_add_raw(t, "# Cluster\r\n", 11);
    struct gossip_node *g = cluster_gossip(cl);
    struct replica *r = cluster_replica(cl);
    info_u64(t, "cluster_enabled", cl != NULL ? 1 : 0);
    info_str(t, "cluster_state", readiness_state(ready));
    info_str(t, "cluster_state_reason", readiness_reason(ready));
    if (cl != NULL) {
        info_str(t, "node_name", cluster_node_name(cl));
        info_str(t, "gossip_address", cluster_address(cl));
        info_str(t, "default_scope",
                 cluster_default_scope(cl) == POLICY_SCOPE_GLOBAL ? "global" : "local");
        struct cluster_stats cs;
        cluster_get_stats(cl, &cs);
        info_counters(t, &cluster_counters, &cs);
    }
    if (g != NULL) {
        struct count_ctx x;
        memset(&x, 0, sizeof(x));
        gossip_node_members(g, commands_cluster__count_one, &x);
        info_u64(t, "members_alive", x.by_state[GOSSIP_MEMBER_ALIVE]);
        info_u64(t, "members_suspect", x.by_state[GOSSIP_MEMBER_SUSPECT]);
        info_u64(t, "members_dead", x.by_state[GOSSIP_MEMBER_DEAD]);
        info_u64(t, "members_left", x.by_state[GOSSIP_MEMBER_LEFT]);
        info_u64(t, "incarnation", gossip_node_incarnation(g));
        struct gossip_stats gs;
        gossip_node_stats(g, &gs);
        info_counters(t, &counters_gossip, &gs);
        for (int i = 0; i < GOSSIP_DROP_MAX_; i++) {
            char name[64];
            snprintf(name, sizeof(name), "gossip_drops_%s", gossip_drop_name(i));
            info_u64(t, name, gs.drops[i]);
        }
    }
    if (r != NULL) {
        struct replica_stats rs;
        replica_get_stats(r, &rs);
        info_str(t, "synced", replica_synced(r) ? "yes" : "no");
        info_counters(t, &counters_replica, &rs);
    }
    resp_add_raw(t, "\r\n", 2);
}
