/*
 * cluster_flags: sluiced's cluster flags and the config file's [cluster]
 * section, turned into struct cluster_options (see cluster_flags.h).
 */
#include "cluster_flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gossip/gossip.h"
#include "sluice/error.h"

int cluster_flags_apply_config(struct cluster_options *o, const struct config *cfg)
{
    if (cfg == NULL || !cfg->cluster)
        return 0;
    if (o->node_name == NULL)
        o->node_name = cfg->node_name;
    if (o->gossip_bind == NULL)
        o->gossip_bind = cfg->gossip_bind;
    if (o->key_file == NULL)
        o->key_file = cfg->cluster_key_file;
    if (o->label == NULL)
        o->label = cfg->cluster_label;
    if (o->gossip_interval_ms == 0)
        o->gossip_interval_ms = cfg->gossip_interval_ms;
    if (o->gossip_mtu == 0)
        o->gossip_mtu = cfg->gossip_mtu;
    if (o->advertise == NULL)
        o->advertise = cfg->advertise;
    if (o->default_scope < 0 && cfg->default_scope_set)
        o->default_scope = (int)cfg->default_scope;
    if (o->partition < 0)
        o->partition = (int)cfg->partition_policy;
    if (o->join == NULL && cfg->njoin > 0) {
        size_t len = 1;
        for (size_t i = 0; i < cfg->njoin; i++)
            len += strlen(cfg->join[i]) + 1;
        char *buf = malloc(len);
        if (buf == NULL)
            return -SLUICE_ENOMEM;
        buf[0] = '\0';
        for (size_t i = 0; i < cfg->njoin; i++) {
            if (i > 0)
                strcat(buf, ",");
            strcat(buf, cfg->join[i]);
        }
        free(o->join_buf);
        o->join_buf = buf;
        o->join = buf;
    }
    return 0;
}

/* Decimal in [min, max]; -1 otherwise. */
static int cluster_flags__ms(const char *s, long long min, long long max, int64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = (int64_t)v;
    return 0;
}

int cluster_flags_parse(struct cluster_options *o, int opt, const char *arg)
{
    int64_t v;
    switch (opt - CLUSTER_FLAGS_BASE) {
    case 0:
        if (arg[0] == '\0' || strlen(arg) > GOSSIP_NAME_MAX) {
            fprintf(stderr, "sluiced: --node-name: 1 to %d bytes\n", GOSSIP_NAME_MAX);
            return -1;
        }
        o->node_name = arg;
        return 1;
    case 1:
        o->gossip_bind = arg;
        return 1;
    case 2:
        o->advertise = arg;
        return 1;
    case 3:
        o->join = arg;
        return 1;
    case 4:
        o->key_file = arg;
        return 1;
    case 5:
        o->label = arg;
        return 1;
    case 6:
        if (cluster_flags__ms(arg, 10, 60000, &v) < 0) {
            fprintf(stderr, "sluiced: --gossip-interval-ms: expected 10..60000, got '%s'\n", arg);
            return -1;
        }
        o->gossip_interval_ms = v;
        return 1;
    case 7:
        if (strcmp(arg, "local") == 0) {
            o->default_scope = POLICY_SCOPE_LOCAL;
        } else if (strcmp(arg, "global") == 0) {
            o->default_scope = POLICY_SCOPE_GLOBAL;
        } else {
            fprintf(stderr, "sluiced: --default-scope: expected local or global, got '%s'\n", arg);
            return -1;
        }
        return 1;
    case 8:
        if (strcmp(arg, "optimistic") == 0) {
            o->partition = POLICY_PARTITION_OPTIMISTIC;
        } else if (strcmp(arg, "share") == 0) {
            o->partition = POLICY_PARTITION_SHARE;
        } else {
            fprintf(stderr, "sluiced: --partition-policy: expected optimistic or share, got '%s'\n",
                    arg);
            return -1;
        }
        return 1;
    case 9:
        o->insecure = 1;
        return 1;
    case 13:
        o->allow_shared_key = 1;
        return 1;
    case 10:
        if (cluster_flags__ms(arg, 10, 60000, &v) < 0) {
            fprintf(stderr, "sluiced: --gossip-probe-interval-ms: expected 10..60000, got '%s'\n",
                    arg);
            return -1;
        }
        o->probe_interval_ms = v;
        return 1;
    case 11:
        if (cluster_flags__ms(arg, 0, 600000, &v) < 0) {
            fprintf(stderr, "sluiced: --sync-timeout-ms: expected 0..600000, got '%s'\n", arg);
            return -1;
        }
        o->sync_timeout_ms = v;
        return 1;
    case 12:
        if (cluster_flags__ms(arg, 100, 86400000, &v) < 0) {
            fprintf(stderr, "sluiced: --dns-interval-ms: expected 100..86400000, got '%s'\n", arg);
            return -1;
        }
        o->dns_interval_ms = v;
        return 1;
    case 14:
        if (cluster_flags__ms(arg, CLUSTER_MTU_MIN, CLUSTER_MTU_MAX, &v) < 0) {
            fprintf(stderr, "sluiced: --gossip-mtu: expected %d..%d, got '%s'\n", CLUSTER_MTU_MIN,
                    CLUSTER_MTU_MAX, arg);
            return -1;
        }
        o->gossip_mtu = v;
        return 1;
    default:
        return 0;
    }
}

void cluster_flags_usage(FILE *f)
{
    fprintf(f,
            "\n"
            "Cluster (global limits; without --gossip-bind the node runs alone and every\n"
            "key is local):\n"
            "  --gossip-bind IP:PORT    UDP address to gossip on (e.g. 10.0.0.5:7946)\n"
            "  --advertise IP:PORT      address peers send to (required when binding 0.0.0.0)\n"
            "  --join HOST:PORT[,...]   seeds; names are resolved by DNS now and every\n"
            "                           --dns-interval-ms (a Kubernetes headless Service)\n"
            "  --node-name NAME         this node's identity (default: the host name)\n"
            "  --cluster-key-file FILE  gossip keys (`sluicectl keygen` prints one); required\n"
            "  --insecure-no-encryption run a cluster without a key file (tests only)\n"
            "  --allow-shared-key-file  accept a cluster key file that group or others\n"
            "                           can read (refused by default: it admits to the cluster)\n"
            "  --cluster-label LABEL    clusters with other labels ignore each other\n"
            "  --gossip-interval-ms N   delta and gossip period (default 100)\n"
            "  --default-scope SCOPE    local or global: the scope of inline CL.THROTTLE\n"
            "                           limits (default: global when clustered)\n"
            "  --partition-policy P     optimistic (each side the full limit) or share (each\n"
            "                           side its last known share; default)\n"
            "  --gossip-probe-interval-ms N  failure-detector probe period (default 1000)\n"
            "  --sync-timeout-ms N      after a restart, take shares of global keys only\n"
            "                           from owners that know the cluster, at most this\n"
            "                           long (default 2000; 0 = none; a new member, whose\n"
            "                           name has no past life in the cluster, serves at once)\n"
            "  --dns-interval-ms N      re-resolution period of --join (default 30000)\n"
            "  --gossip-mtu N           largest datagram sent, 1400..9216 (default 1400);\n"
            "                           raise it on networks with jumbo frames, on every node\n");
}
