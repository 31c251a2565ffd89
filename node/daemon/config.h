/*
 * config: the daemon's configuration file (INI, parsed with libinih).
 *
 * The format is documented, key by key, in deploy/sluice.conf.  Sections:
 * [sluiced] (the local daemon), [cluster] (gossip; its presence turns
 * clustering on) and any number of [policy NAME] (named limits).
 *
 * Loading is all or nothing: config_load() either fills a complete,
 * validated struct config or fails with a message "FILE:LINE: reason" in the
 * caller's buffer and leaves nothing allocated.  A loaded config owns every
 * string and array in it; config_free() releases them.
 */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "policy.h"

/* What happens when the key table is full (matches enum limiter_overflow). */
enum config_on_full { CONFIG_ON_FULL_EVICT = 0, CONFIG_ON_FULL_DENY = 1, CONFIG_ON_FULL_ALLOW = 2 };

enum config_log_level {
    CONFIG_LOG_DEBUG = 0,
    CONFIG_LOG_INFO = 1,
    CONFIG_LOG_WARN = 2,
    CONFIG_LOG_ERROR = 3,
};

/* Largest accepted file, policy count and join list (a bound, not a goal). */
#define CONFIG_MAX_BYTES    (1u << 20)
#define CONFIG_MAX_POLICIES 4096
#define CONFIG_MAX_JOIN     64
#define CONFIG_MAX_NAME     64  /* policy and node names */
#define CONFIG_MAX_PREFIX   512 /* match prefixes */
/* A concurrency policy's lease TTL when the file gives none. */
#define CONFIG_DEFAULT_LEASE_TTL_NS ((int64_t)30 * 1000000000)

struct config {
    /* [sluiced] */
    char *socket;         /* Unix socket path; NULL: not set (the default path) */
    unsigned socket_mode; /* permission bits, e.g. 0660 */
    uint64_t max_keys;    /* key table bound */
    enum config_on_full on_full;
    enum config_log_level log_level;
    char *metrics;          /* http = (or metrics =) "host:port" of the HTTP listener, or NULL */
    int http_deny_status;   /* 0 (429), 429 or 403: a refused /v1/throttle */
    int admin_off;          /* admin_commands = off: SL.RELOAD refused */
    int http_trust_headers; /* http_trust_headers = on: /v1/throttle reads X-Sluice-* */
    char *http_decisions;   /* http_decisions = on | off | host:port; NULL: not set (on) */
    char *listen;           /* "host:port" of the RESP TCP listener, or NULL (off) */
    char *requirepass;      /* the password TCP clients must AUTH with, or NULL */
    /* Envoy's rate limit service (see README "Envoy rate limit service") */
    char *grpc;                /* "host:port" of its gRPC listener, or NULL (off) */
    char *ratelimit_config;    /* directory of envoyproxy/ratelimit YAML files, or NULL */
    char *ratelimit_algorithm; /* "calendar" (NULL) or an algorithm name */
    int ratelimit_headers;     /* 1: RateLimit-* response headers */
    uint32_t max_clients;
    uint64_t max_client_memory; /* bytes of all clients' buffers, 0 = no limit */
    /* the network listeners' crowds (0: the flag's default) */
    uint32_t max_tcp_clients;      /* max_tcp_clients */
    uint64_t tcp_idle_timeout_ms;  /* tcp_idle_timeout (0: never) */
    uint32_t http_max_connections; /* http_max_connections */
    uint64_t http_idle_timeout_ms; /* http_idle_timeout */
    uint32_t grpc_max_connections; /* grpc_max_connections */
    uint64_t grpc_idle_timeout_ms; /* grpc_idle_timeout (0: never) */
    uint64_t shutdown_drain_ms;    /* shutdown_drain: SIGTERM's drain period (0: none) */
    /* [cluster] */
    int cluster;       /* 1 when a [cluster] section is present */
    char *node_name;   /* NULL: the host name */
    char *gossip_bind; /* "host:port" */
    char **join;       /* seed addresses, njoin of them */
    size_t njoin;
    char *cluster_key_file; /* NULL: no encryption key configured */
    char *cluster_label;    /* NULL: empty label */
    enum policy_scope default_scope;
    int default_scope_set; /* 1 when the file sets default_scope */
    char *advertise;       /* "host:port" peers send to, or NULL (the bind address) */
    enum policy_partition partition_policy; /* inline global limits' policy */
    int64_t gossip_interval_ms;
    int64_t gossip_mtu; /* 0: not set (1400) */
    /* [policy NAME], in file order */
    struct policy_spec *policies;
    size_t npolicies;
};

/*
 * Reads and validates the file at path into *cfg (which need not be
 * initialised).  On failure returns -SLUICE_ECONFIG (bad content),
 * -SLUICE_EIO (cannot read; errno's text in the message), -SLUICE_ETOOBIG
 * (over CONFIG_MAX_BYTES) or -SLUICE_ENOMEM, writes "PATH:LINE: reason"
 * (or "PATH: reason") into err (errlen bytes, always NUL-terminated when
 * errlen > 0) and leaves *cfg empty (config_free on it is harmless).
 */
int config_load(const char *path, struct config *cfg, char *err, size_t errlen);

/* config_load, also giving the file's fstat in *st (its identity and
 * mtime: a reload can tell an unchanged file).  A path that is not a
 * regular file (a FIFO would block) fails with -SLUICE_ECONFIG. */
struct stat;
int config_load_file(const char *path, struct config *cfg, struct stat *st, char *err,
                     size_t errlen);

/* The same for len bytes in memory (need not be NUL-terminated; a NUL byte
 * is an error); name is used in messages. */
int config_load_buffer(const char *name, const char *buf, size_t len, struct config *cfg, char *err,
                       size_t errlen);

/* Releases everything cfg owns and zeroes it.  NULL is fine. */
void config_free(struct config *cfg);

/* Parses "N per DURATION" (e.g. "30 per 60s", "5 per s", "100/1m") into
 * count and period_ns.  -SLUICE_EINVAL if malformed, -SLUICE_ERANGE if too
 * large.  Exposed for CL.THROTTLE-style callers and tests. */
int config_parse_rate(const char *s, int64_t *count, int64_t *period_ns);

/* Parses "DURATION" = NUMBER UNIT, UNIT one of ms, s, m, h (e.g. "250ms").
 * -SLUICE_EINVAL / -SLUICE_ERANGE. */
int config_parse_duration(const char *s, int64_t *ns);

#endif
