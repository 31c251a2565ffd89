/*
 * config: INI parsing (libinih) and validation of the daemon's config file.
 *
 * libinih splits "name = value" lines, strips comments and whitespace, and
 * calls a handler per pair; it does not tell the handler the line number
 * (INI_HANDLER_LINENO is off in the distribution build) nor report section
 * headers.  So the file is fed through our own line reader
 * (ini_parse_stream), which counts lines, refuses over-long lines and NUL
 * bytes, and recognises section headers itself: every error then names the
 * exact line, and an empty [policy x] is still seen (and refused for its
 * missing rate).
 *
 * Parsing stops at the first error.  Cross-field checks (required keys,
 * algorithm-specific keys, scope = global for an algorithm that cannot be
 * global, duplicate match prefixes) run after the whole file is read, and
 * name the line of the offending key or of the policy's header.
 */
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "file.h"
#include "concurrency.h"
#include "limiter.h"
#include "server.h"
#include "sluice/error.h"

enum config_section { SEC_NONE, SEC_SLUICED, SEC_CLUSTER, SEC_POLICY };

/* Per-policy parse bookkeeping: the line of each key (0 = not given). */
struct config_pol_lines {
    int algorithm, burst, rate, scope, partition, match, precision, dry_run;
    int concurrency, limit, ttl; /* algorithm = concurrency, and its keys */
    enum algo_kind kind;
    int64_t limit_v, ttl_v;
    int64_t burst_v, count, period_ns, precision_v;
    /* The algorithms' own keys, numbered as algo_option_at: line, value. */
    int opt_line[ALGO_OPTIONS_MAX];
    int64_t opt_v[ALGO_OPTIONS_MAX];
};

struct config_parser {
    const char *name;
    const char *buf;
    size_t len, pos;
    int line;
    int failed;
    int rc;
    char *err;
    size_t errlen;
    struct config *cfg;
    enum config_section sec;
    int seen_sluiced, seen_cluster;
    int default_scope_line;
    char seen_keys[32][24]; /* keys of the current section, for duplicates */
    int nseen;
    struct config_pol_lines *pl; /* one per policy */
    size_t pcap;                 /* policies room in cfg->policies and pl (grown by doubling) */
};

static void config__fail(struct config_parser *ps, int line, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void config__fail(struct config_parser *ps, int line, int rc, const char *fmt, ...)
{
    va_list ap;
    int n = 0;
    if (ps->failed)
        return;
    ps->failed = 1;
    ps->rc = rc;
    if (ps->errlen == 0)
        return;
    if (line > 0)
        n = snprintf(ps->err, ps->errlen, "%s:%d: ", ps->name, line);
    else
        n = snprintf(ps->err, ps->errlen, "%s: ", ps->name);
    if (n < 0 || (size_t)n >= ps->errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static char *config__strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Replaces *slot with a copy of value; 0 or -SLUICE_ENOMEM. */
static int config__set_str(char **slot, const char *value)
{
    char *d = config__strndup(value, strlen(value));
    if (d == NULL)
        return -SLUICE_ENOMEM;
    free(*slot);
    *slot = d;
    return 0;
}

/* ---- value parsers: 0 or -SLUICE_EINVAL / -SLUICE_ERANGE ---- */

static int config__uint(const char *s, int base, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return -SLUICE_EINVAL;
    for (; *s; s++) {
        int d;
        if (*s >= '0' && *s <= '9')
            d = *s - '0';
        else
            return -SLUICE_EINVAL;
        if (d >= base)
            return -SLUICE_EINVAL;
        if (v > (max - (uint64_t)d) / (uint64_t)base)
            return -SLUICE_ERANGE;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return 0;
}

static int config__bool(const char *s, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -SLUICE_EINVAL;
}

/* Parses the leading digits of s (possibly none); *end after them. */
static int config__digits(const char *s, const char **end, int64_t *out, int *any)
{
    int64_t v = 0;
    *any = 0;
    while (*s >= '0' && *s <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v))
            return -SLUICE_ERANGE;
        *any = 1;
        s++;
    }
    *end = s;
    *out = v;
    return 0;
}

/* DURATION with an optional number (1 when absent, for "per s"). */
static int config__duration(const char *s, int number_optional, int64_t *ns)
{
    const char *p;
    int64_t n, unit, r;
    int any, rc;
    while (*s == ' ' || *s == '\t')
        s++;
    rc = config__digits(s, &p, &n, &any);
    if (rc < 0)
        return rc;
    if (!any) {
        if (!number_optional)
            return -SLUICE_EINVAL;
        n = 1;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    if (strcmp(p, "ms") == 0)
        unit = 1000000LL;
    else if (strcmp(p, "s") == 0)
        unit = 1000000000LL;
    else if (strcmp(p, "m") == 0)
        unit = 60LL * 1000000000LL;
    else if (strcmp(p, "h") == 0)
        unit = 3600LL * 1000000000LL;
    else
        return -SLUICE_EINVAL;
    if (n <= 0)
        return -SLUICE_EINVAL;
    if (__builtin_mul_overflow(n, unit, &r))
        return -SLUICE_ERANGE;
    *ns = r;
    return 0;
}

int config_parse_duration(const char *s, int64_t *ns)
{
    if (s == NULL || ns == NULL)
        return -SLUICE_EINVAL;
    return config__duration(s, 0, ns);
}

int config_parse_rate(const char *s, int64_t *count, int64_t *period_ns)
{
    const char *p;
    int64_t n, per;
    int any, rc;
    if (s == NULL || count == NULL || period_ns == NULL)
        return -SLUICE_EINVAL;
    while (*s == ' ' || *s == '\t')
        s++;
    rc = config__digits(s, &p, &n, &any);
    if (rc < 0)
        return rc;
    if (!any || n <= 0)
        return -SLUICE_EINVAL;
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "per", 3) == 0 && (p[3] == ' ' || p[3] == '\t'))
        p += 3;
    else if (*p == '/')
        p++;
    else
        return -SLUICE_EINVAL;
    rc = config__duration(p, 1, &per);
    if (rc < 0)
        return rc;
    *count = n;
    *period_ns = per;
    return 0;
}

/* "host:port" or "[v6]:port", port 0..65535. */
static int config__hostport(const char *s)
{
    const char *colon = strrchr(s, ':');
    uint64_t port;
    if (colon == NULL || colon == s || strlen(colon + 1) > 5)
        return -SLUICE_EINVAL;
    if (config__uint(colon + 1, 10, 65535, &port) < 0)
        return -SLUICE_EINVAL;
    for (const char *c = s; c < colon; c++)
        if (*c == ' ' || *c == '\t' || *c == ',')
            return -SLUICE_EINVAL;
    return 0;
}

static int config__name_ok(const char *s, size_t n)
{
    if (n == 0 || n > CONFIG_MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.' || c == ':'))
            return 0;
    }
    return 1;
}

/* ---- section headers, seen by the reader ---- */

static void config__section(struct config_parser *ps, const char *s, size_t n)
{
    struct config *cfg = ps->cfg;
    ps->nseen = 0;
    while (n > 0 && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 7 && memcmp(s, "sluiced", 7) == 0) {
        if (ps->seen_sluiced)
            config__fail(ps, ps->line, -SLUICE_ECONFIG, "duplicate section [sluiced]");
        ps->seen_sluiced = 1;
        ps->sec = SEC_SLUICED;
    } else if (n == 7 && memcmp(s, "cluster", 7) == 0) {
        if (ps->seen_cluster)
            config__fail(ps, ps->line, -SLUICE_ECONFIG, "duplicate section [cluster]");
        ps->seen_cluster = 1;
        cfg->cluster = 1;
        ps->sec = SEC_CLUSTER;
    } else if (n > 7 && memcmp(s, "policy", 6) == 0 && (s[6] == ' ' || s[6] == '\t')) {
        const char *name = s + 7;
        size_t nl = n - 7;
        struct policy_spec *np;
        struct config_pol_lines *nl2;
        while (nl > 0 && (*name == ' ' || *name == '\t'))
            name++, nl--;
        if (!config__name_ok(name, nl)) {
            config__fail(ps, ps->line, -SLUICE_ECONFIG,
                         "bad policy name (1-%d characters of A-Z a-z 0-9 _ - . :)",
                         CONFIG_MAX_NAME);
            return;
        }
        for (size_t i = 0; i < cfg->npolicies; i++) {
            if (strlen(cfg->policies[i].name) == nl &&
                memcmp(cfg->policies[i].name, name, nl) == 0) {
                config__fail(ps, ps->line, -SLUICE_ECONFIG,
                             "duplicate policy '%s' (first defined on line %d)",
                             cfg->policies[i].name, cfg->policies[i].line);
                return;
            }
        }
        if (cfg->npolicies >= CONFIG_MAX_POLICIES) {
            config__fail(ps, ps->line, -SLUICE_ECONFIG, "too many policies (max %d)",
                         CONFIG_MAX_POLICIES);
            return;
        }
        /* Doubling, not one more each time: a 4,096-policy file would
         * copy the arrays 4,096 times (quadratic; seconds under ASan). */
        np = cfg->policies;
        nl2 = ps->pl;
        if (cfg->npolicies == ps->pcap) {
            size_t cap = ps->pcap ? 2 * ps->pcap : 16;
            np = realloc(cfg->policies, cap * sizeof(*np));
            if (np == NULL) {
                config__fail(ps, ps->line, -SLUICE_ENOMEM, "out of memory");
                return;
            }
            cfg->policies = np;
            nl2 = realloc(ps->pl, cap * sizeof(*nl2));
            if (nl2 == NULL) {
                config__fail(ps, ps->line, -SLUICE_ENOMEM, "out of memory");
                return;
            }
            ps->pl = nl2;
            ps->pcap = cap;
        }
        memset(&np[cfg->npolicies], 0, sizeof(*np));
        memset(&nl2[cfg->npolicies], 0, sizeof(*nl2));
        np[cfg->npolicies].name = config__strndup(name, nl);
        if (np[cfg->npolicies].name == NULL) {
            config__fail(ps, ps->line, -SLUICE_ENOMEM, "out of memory");
            return;
        }
        np[cfg->npolicies].line = ps->line;
        np[cfg->npolicies].partition = POLICY_PARTITION_SHARE;
        nl2[cfg->npolicies].kind = ALGO_GCRA;
        cfg->npolicies++;
        ps->sec = SEC_POLICY;
    } else {
        config__fail(ps, ps->line, -SLUICE_ECONFIG,
                     "unknown section [%.*s] (expected [sluiced], [cluster] or [policy NAME])",
                     (int)(n > 64 ? 64 : n), s);
    }
}

/* fgets-like reader over the buffer, counting lines. */
static char *config__reader(char *str, int num, void *stream)
{
    struct config_parser *ps = stream;
    size_t start = ps->pos;
    size_t end = start, n;
    const char *line;
    if (ps->failed || ps->pos >= ps->len || num < 2)
        return NULL;
    while (end < ps->len && ps->buf[end] != '\n')
        end++;
    n = end - start; /* without the newline */
    ps->pos = end < ps->len ? end + 1 : end;
    ps->line++;
    line = ps->buf + start;
    if (ps->line == 1 && n >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
        line += 3; /* UTF-8 byte order mark */
        n -= 3;
    }
    if (memchr(line, '\0', n) != NULL) {
        config__fail(ps, ps->line, -SLUICE_ECONFIG, "NUL byte in line");
        return NULL;
    }
    /* Leading whitespace is dropped so that libinih never sees a
     * continuation line: an indented line is an ordinary one here. */
    while (n > 0 && (*line == ' ' || *line == '\t'))
        line++, n--;
    if (n + 2 > (size_t)num) {
        config__fail(ps, ps->line, -SLUICE_ECONFIG, "line too long (max %d characters)", num - 2);
        return NULL;
    }
    memcpy(str, line, n);
    str[n] = '\n';
    str[n + 1] = '\0';
    /* Section header? (libinih parses it too, but tells nobody.) */
    if (n > 0 && line[0] == '[') {
        const char *close = memchr(line, ']', n);
        if (close == NULL) {
            config__fail(ps, ps->line, -SLUICE_ECONFIG, "missing ']' in section header");
            return NULL;
        }
        config__section(ps, line + 1, (size_t)(close - (line + 1)));
        if (ps->failed)
            return NULL;
    }
    return str;
}

/* Duplicate keys within one section (a continuation line repeats its key). */
static int config__dup_key(struct config_parser *ps, const char *key)
{
    for (int i = 0; i < ps->nseen; i++)
        if (strcmp(ps->seen_keys[i], key) == 0)
            return 1;
    if (ps->nseen < 32 && strlen(key) < sizeof(ps->seen_keys[0]))
        strcpy(ps->seen_keys[ps->nseen++], key);
    return 0;
}

#define BAD(...)                                                                                   \
    do {                                                                                           \
        config__fail(ps, ps->line, -SLUICE_ECONFIG, __VA_ARGS__);                                  \
        return 0;                                                                                  \
    } while (0)
#define NOMEM()                                                                                    \
    do {                                                                                           \
        config__fail(ps, ps->line, -SLUICE_ENOMEM, "out of memory");                               \
        return 0;                                                                                  \
    } while (0)

static int config__scope(const char *v, enum policy_scope *out)
{
    if (strcmp(v, "local") == 0)
        *out = POLICY_SCOPE_LOCAL;
    else if (strcmp(v, "global") == 0)
        *out = POLICY_SCOPE_GLOBAL;
    else
        return -1;
    return 0;
}

static int config__sluiced_key(struct config_parser *ps, const char *k, const char *v)
{
    struct config *cfg = ps->cfg;
    uint64_t u;
    int rc;
    if (strcmp(k, "socket") == 0) {
        if (*v == '\0' || strlen(v) >= 108)
            BAD("socket: path must be 1-107 characters");
        if (config__set_str(&cfg->socket, v) < 0)
            NOMEM();
    } else if (strcmp(k, "socket_mode") == 0) {
        if (config__uint(v, 8, 0777, &u) < 0)
            BAD("socket_mode: expected octal permission bits like 0660, got '%s'", v);
        cfg->socket_mode = (unsigned)u;
    } else if (strcmp(k, "max_keys") == 0) {
        rc = config__uint(v, 10, UINT64_C(1) << 32, &u);
        if (rc < 0 || u == 0)
            BAD("max_keys: expected a number from 1 to 4294967296, got '%s'", v);
        cfg->max_keys = u;
    } else if (strcmp(k, "max_clients") == 0) {
        rc = config__uint(v, 10, 65536, &u);
        if (rc < 0 || u == 0)
            BAD("max_clients: expected a number from 1 to 65536, got '%s'", v);
        cfg->max_clients = (uint32_t)u;
    } else if (strcmp(k, "max_tcp_clients") == 0 || strcmp(k, "http_max_connections") == 0 ||
               strcmp(k, "grpc_max_connections") == 0) {
        rc = config__uint(v, 10, 1000000, &u);
        if (rc < 0 || u == 0)
            BAD("%s: expected a number from 1 to 1000000, got '%s'", k, v);
        if (k[0] == 'm')
            cfg->max_tcp_clients = (uint32_t)u;
        else if (k[0] == 'h')
            cfg->http_max_connections = (uint32_t)u;
        else
            cfg->grpc_max_connections = (uint32_t)u;
    } else if (strcmp(k, "tcp_idle_timeout") == 0 || strcmp(k, "http_idle_timeout") == 0 ||
               strcmp(k, "grpc_idle_timeout") == 0) {
        /* seconds, or a duration (30s, 5m); 0 means never except for HTTP */
        int64_t ms;
        int http = k[0] == 'h';
        rc = config__uint(v, 10, 86400 * 365, &u);
        if (rc == 0) {
            ms = (int64_t)u * 1000;
        } else {
            int64_t ns;
            if (config_parse_duration(v, &ns) < 0 || ns > INT64_C(86400) * 365 * 1000000000)
                BAD("%s: expected seconds or a duration like 30s or 5m, got '%s'", k, v);
            ms = ns / 1000000;
        }
        if (http && (ms < 1000 || ms > 86400 * 1000))
            BAD("http_idle_timeout: expected 1 s to 1 day, got '%s'", v);
        if (k[0] == 't')
            cfg->tcp_idle_timeout_ms = (uint64_t)ms;
        else if (http)
            cfg->http_idle_timeout_ms = (uint64_t)ms;
        else
            cfg->grpc_idle_timeout_ms = (uint64_t)ms;
    } else if (strcmp(k, "shutdown_drain") == 0) {
        /* seconds, or a duration (5s, 500ms); at most an hour */
        int64_t ns;
        rc = config__uint(v, 10, 3600, &u);
        if (rc == 0)
            ns = (int64_t)u * 1000000000;
        else if (config_parse_duration(v, &ns) < 0 || ns > INT64_C(3600) * 1000000000)
            BAD("shutdown_drain: expected seconds or a duration up to 1h, like 5s or 500ms, got "
                "'%s'",
                v);
        cfg->shutdown_drain_ms = (uint64_t)(ns / 1000000);
    } else if (strcmp(k, "max_client_memory") == 0) {
        rc = config__uint(v, 10, UINT64_C(1) << 48, &u);
        if (rc < 0 || (u != 0 && u < 1024 * 1024))
            BAD("max_client_memory: expected bytes, at least 1048576, or 0 (no limit), got '%s'",
                v);
        cfg->max_client_memory = u;
    } else if (strcmp(k, "on_full") == 0) {
        if (strcmp(v, "evict") == 0)
            cfg->on_full = CONFIG_ON_FULL_EVICT;
        else if (strcmp(v, "deny") == 0)
            cfg->on_full = CONFIG_ON_FULL_DENY;
        else if (strcmp(v, "allow") == 0)
            cfg->on_full = CONFIG_ON_FULL_ALLOW;
        else
            BAD("on_full: expected evict, deny or allow, got '%s'", v);
    } else if (strcmp(k, "log_level") == 0) {
        if (strcmp(v, "debug") == 0)
            cfg->log_level = CONFIG_LOG_DEBUG;
        else if (strcmp(v, "info") == 0)
            cfg->log_level = CONFIG_LOG_INFO;
        else if (strcmp(v, "warn") == 0)
            cfg->log_level = CONFIG_LOG_WARN;
        else if (strcmp(v, "error") == 0)
            cfg->log_level = CONFIG_LOG_ERROR;
        else
            BAD("log_level: expected debug, info, warn or error, got '%s'", v);
    } else if (strcmp(k, "http") == 0 || strcmp(k, "metrics") == 0) {
        if (strcmp(v, "off") == 0) {
            free(cfg->metrics);
            cfg->metrics = NULL;
        } else if (config__hostport(v) < 0) {
            BAD("%s: expected host:port or off, got '%s'", k, v);
        } else if (config__set_str(&cfg->metrics, v) < 0) {
            NOMEM();
        }
    } else if (strcmp(k, "grpc") == 0) {
        if (strcmp(v, "off") == 0) {
            free(cfg->grpc);
            cfg->grpc = NULL;
        } else if (config__hostport(v) < 0) {
            BAD("grpc: expected host:port or off, got '%s'", v);
        } else if (config__set_str(&cfg->grpc, v) < 0) {
            NOMEM();
        }
    } else if (strcmp(k, "ratelimit_config") == 0) {
        if (*v == '\0')
            BAD("ratelimit_config: expected a directory");
        if (config__set_str(&cfg->ratelimit_config, v) < 0)
            NOMEM();
    } else if (strcmp(k, "ratelimit_algorithm") == 0) {
        enum algo_kind kind;
        if (strcmp(v, "calendar") != 0 && algo_from_name(v, &kind) < 0)
            BAD("ratelimit_algorithm: expected calendar or an algorithm name, got '%s'", v);
        if (config__set_str(&cfg->ratelimit_algorithm, v) < 0)
            NOMEM();
    } else if (strcmp(k, "listen") == 0) {
        if (strcmp(v, "off") == 0) {
            free(cfg->listen);
            cfg->listen = NULL;
        } else if (config__hostport(v) < 0) {
            BAD("listen: expected host:port or off, got '%s'", v);
        } else if (config__set_str(&cfg->listen, v) < 0) {
            NOMEM();
        }
    } else if (strcmp(k, "requirepass") == 0) {
        if (*v == '\0' || strlen(v) > 512)
            BAD("requirepass: 1 to 512 characters");
        if (config__set_str(&cfg->requirepass, v) < 0)
            NOMEM();
    } else if (strcmp(k, "admin_commands") == 0) {
        if (strcmp(v, "on") == 0)
            cfg->admin_off = 0;
        else if (strcmp(v, "off") == 0)
            cfg->admin_off = 1;
        else
            BAD("admin_commands: expected on or off, got '%s'", v);
    } else if (strcmp(k, "http_decisions") == 0) {
        if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0 && config__hostport(v) < 0)
            BAD("http_decisions: expected on, off or host:port, got '%s'", v);
        else if (config__set_str(&cfg->http_decisions, v) < 0)
            NOMEM();
    } else if (strcmp(k, "http_trust_headers") == 0) {
        if (strcmp(v, "on") == 0)
            cfg->http_trust_headers = 1;
        else if (strcmp(v, "off") == 0)
            cfg->http_trust_headers = 0;
        else
            BAD("http_trust_headers: expected on or off, got '%s'", v);
    } else if (strcmp(k, "http_deny_status") == 0) {
        if (strcmp(v, "429") == 0)
            cfg->http_deny_status = 429;
        else if (strcmp(v, "403") == 0)
            cfg->http_deny_status = 403;
        else
            BAD("http_deny_status: expected 429 or 403, got '%s'", v);
    } else if (strcmp(k, "ratelimit_headers") == 0) {
        if (strcmp(v, "on") == 0 || strcmp(v, "true") == 0)
            cfg->ratelimit_headers = 1;
        else if (strcmp(v, "off") == 0 || strcmp(v, "false") == 0)
            cfg->ratelimit_headers = 0;
        else
            BAD("ratelimit_headers: expected on or off, got '%s'", v);
    } else {
        BAD("unknown key '%s' in [sluiced]", k);
    }
    return 1;
}

static int config__join(struct config_parser *ps, const char *v)
{
    struct config *cfg = ps->cfg;
    const char *p = v;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *s = p;
        char *item, **nj;
        while (n > 0 && (*s == ' ' || *s == '\t'))
            s++, n--;
        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (n == 0)
            BAD("join: empty address in the list");
        if (cfg->njoin >= CONFIG_MAX_JOIN)
            BAD("join: too many addresses (max %d)", CONFIG_MAX_JOIN);
        item = config__strndup(s, n);
        if (item == NULL)
            NOMEM();
        if (config__hostport(item) < 0) {
            config__fail(ps, ps->line, -SLUICE_ECONFIG, "join: expected host:port, got '%s'", item);
            free(item);
            return 0;
        }
        nj = realloc(cfg->join, (cfg->njoin + 1) * sizeof(*nj));
        if (nj == NULL) {
            free(item);
            NOMEM();
        }
        cfg->join = nj;
        cfg->join[cfg->njoin++] = item;
        if (e == NULL)
            break;
        p = e + 1;
        if (*p == '\0')
            BAD("join: empty address in the list");
    }
    if (cfg->njoin == 0)
        BAD("join: empty list");
    return 1;
}

static int config__cluster_key(struct config_parser *ps, const char *k, const char *v)
{
    struct config *cfg = ps->cfg;
    uint64_t u;
    if (strcmp(k, "node_name") == 0) {
        if (!config__name_ok(v, strlen(v)))
            BAD("node_name: 1-%d characters of A-Z a-z 0-9 _ - . :", CONFIG_MAX_NAME);
        if (config__set_str(&cfg->node_name, v) < 0)
            NOMEM();
    } else if (strcmp(k, "gossip_bind") == 0) {
        if (config__hostport(v) < 0)
            BAD("gossip_bind: expected host:port, got '%s'", v);
        if (config__set_str(&cfg->gossip_bind, v) < 0)
            NOMEM();
    } else if (strcmp(k, "join") == 0) {
        return config__join(ps, v);
    } else if (strcmp(k, "cluster_key_file") == 0) {
        if (*v == '\0')
            BAD("cluster_key_file: empty path");
        if (config__set_str(&cfg->cluster_key_file, v) < 0)
            NOMEM();
    } else if (strcmp(k, "cluster_label") == 0) {
        if (strlen(v) > CONFIG_MAX_NAME)
            BAD("cluster_label: at most %d characters", CONFIG_MAX_NAME);
        if (config__set_str(&cfg->cluster_label, v) < 0)
            NOMEM();
    } else if (strcmp(k, "default_scope") == 0) {
        if (config__scope(v, &cfg->default_scope) < 0)
            BAD("default_scope: expected local or global, got '%s'", v);
        ps->default_scope_line = ps->line;
        cfg->default_scope_set = 1;
    } else if (strcmp(k, "advertise") == 0) {
        if (config__hostport(v) < 0)
            BAD("advertise: expected host:port, got '%s'", v);
        if (config__set_str(&cfg->advertise, v) < 0)
            NOMEM();
    } else if (strcmp(k, "partition_policy") == 0) {
        if (strcmp(v, "optimistic") == 0)
            cfg->partition_policy = POLICY_PARTITION_OPTIMISTIC;
        else if (strcmp(v, "share") == 0)
            cfg->partition_policy = POLICY_PARTITION_SHARE;
        else
            BAD("partition_policy: expected optimistic or share, got '%s'", v);
    } else if (strcmp(k, "gossip_interval_ms") == 0) {
        if (config__uint(v, 10, 60000, &u) < 0 || u < 10)
            BAD("gossip_interval_ms: expected a number from 10 to 60000, got '%s'", v);
        cfg->gossip_interval_ms = (int64_t)u;
    } else if (strcmp(k, "gossip_mtu") == 0) {
        if (config__uint(v, 10, CLUSTER_MTU_MAX, &u) < 0 || u < CLUSTER_MTU_MIN)
            BAD("gossip_mtu: expected a number from %d to %d, got '%s'", CLUSTER_MTU_MIN,
                CLUSTER_MTU_MAX, v);
        cfg->gossip_mtu = (int64_t)u;
    } else {
        BAD("unknown key '%s' in [cluster]", k);
    }
    return 1;
}

/* A policy key an algorithm owns (option i of algo_option_at), read as
 * its row says.  1, or 0 once failed. */
static int config__option(struct config_parser *ps, struct config_pol_lines *pl, size_t i,
                          const char *v)
{
    const struct algo_option *o = algo_option_at(i, NULL);
    if (o->type == ALGO_VALUE_NS) {
        int64_t ns;
        if (config_parse_duration(v, &ns) < 0 || ns < o->min || ns > o->max)
            BAD("%s: expected a duration such as 10s or 500ms, got '%s'", o->conf, v);
        pl->opt_v[i] = ns;
    } else {
        uint64_t u;
        if (config__uint(v, 10, (uint64_t)o->max, &u) < 0 || u < (uint64_t)o->min)
            BAD("%s: expected a whole number from %lld to %lld, got '%s'", o->conf,
                (long long)o->min, (long long)o->max, v);
        pl->opt_v[i] = (int64_t)u;
    }
    pl->opt_line[i] = ps->line;
    return 1;
}

/* The first of the algorithms' own keys given (in algo_option_at's order)
 * that kind does not own, or the first given when kind is ALGO_KIND_COUNT_:
 * its number, or -1 when there is none. */
static int config__first_option(const struct config_pol_lines *pl, enum algo_kind kind)
{
    enum algo_kind k;
    for (size_t i = 0; i < ALGO_OPTIONS_MAX && algo_option_at(i, &k) != NULL; i++)
        if (pl->opt_line[i] && (kind == ALGO_KIND_COUNT_ || k != kind))
            return (int)i;
    return -1;
}

static int config__policy_key(struct config_parser *ps, const char *k, const char *v)
{
    struct config *cfg = ps->cfg;
    struct policy_spec *pol = &cfg->policies[cfg->npolicies - 1];
    struct config_pol_lines *pl = &ps->pl[cfg->npolicies - 1];
    uint64_t u;
    int rc;
    int opt = algo_option_find(k, strlen(k), 0);
    if (strcmp(k, "algorithm") == 0) {
        if (strcmp(v, "concurrency") == 0)
            pl->concurrency = ps->line;
        else if (algo_from_name(v, &pl->kind) < 0)
            BAD("algorithm: expected gcra, token-bucket, fixed-window, sliding-window, "
                "sliding-log, warmup or concurrency, got '%s'",
                v);
        pl->algorithm = ps->line;
    } else if (strcmp(k, "limit") == 0) {
        rc = config__uint(v, 10, (uint64_t)INT64_MAX, &u);
        if (rc < 0 || u == 0)
            BAD("limit: expected a whole number >= 1 (units held at once), got '%s'", v);
        pl->limit_v = (int64_t)u;
        pl->limit = ps->line;
    } else if (strcmp(k, "ttl") == 0) {
        int64_t ns;
        if (config_parse_duration(v, &ns) < 0 || ns < 1000000 || ns > CONC_MAX_TTL_NS)
            BAD("ttl: expected a duration from 1ms to 24h such as 30s, got '%s'", v);
        pl->ttl_v = ns;
        pl->ttl = ps->line;
    } else if (strcmp(k, "burst") == 0) {
        rc = config__uint(v, 10, (uint64_t)INT64_MAX - 1, &u);
        if (rc < 0)
            BAD("burst: expected a whole number >= 0, got '%s'", v);
        pl->burst_v = (int64_t)u;
        pl->burst = ps->line;
    } else if (strcmp(k, "rate") == 0) {
        rc = config_parse_rate(v, &pl->count, &pl->period_ns);
        if (rc == -SLUICE_ERANGE)
            BAD("rate: number or duration too large in '%s'", v);
        if (rc < 0)
            BAD("rate: expected 'N per DURATION' (DURATION like 500ms, 60s, 5m, 1h), got '%s'", v);
        pl->rate = ps->line;
    } else if (strcmp(k, "scope") == 0) {
        if (config__scope(v, &pol->scope) < 0)
            BAD("scope: expected local or global, got '%s'", v);
        pl->scope = ps->line;
    } else if (strcmp(k, "partition") == 0) {
        if (strcmp(v, "optimistic") == 0)
            pol->partition = POLICY_PARTITION_OPTIMISTIC;
        else if (strcmp(v, "share") == 0)
            pol->partition = POLICY_PARTITION_SHARE;
        else
            BAD("partition: expected optimistic or share, got '%s'", v);
        pl->partition = ps->line;
    } else if (strcmp(k, "match") == 0) {
        if (*v == '\0' || strlen(v) > CONFIG_MAX_PREFIX)
            BAD("match: the key prefix must be 1-%d bytes", CONFIG_MAX_PREFIX);
        if (config__set_str(&pol->match, v) < 0)
            NOMEM();
        pl->match = ps->line;
    } else if (strcmp(k, "precision") == 0) {
        rc = config__uint(v, 10, (uint64_t)ALGO_PRECISION_MAX, &u);
        if (rc < 0 || u == 0)
            BAD("precision: expected a number from 1 to %lld, got '%s'",
                (long long)ALGO_PRECISION_MAX, v);
        pl->precision_v = (int64_t)u;
        pl->precision = ps->line;
    } else if (opt >= 0 && opt < ALGO_OPTIONS_MAX) {
        return config__option(ps, pl, (size_t)opt, v);
    } else if (strcmp(k, "dry_run") == 0) {
        if (config__bool(v, &pol->dry_run) < 0)
            BAD("dry_run: expected true or false, got '%s'", v);
        pl->dry_run = ps->line;
    } else {
        BAD("unknown key '%s' in [policy %s]", k, pol->name);
    }
    return 1;
}

static int config__handler(void *user, const char *section, const char *name, const char *value)
{
    struct config_parser *ps = user;
    if (ps->failed)
        return 0;
    if (name == NULL || value == NULL)
        return 1;
    if (config__dup_key(ps, name))
        BAD("duplicate key '%s' in this section", name);
    switch (ps->sec) {
    case SEC_SLUICED:
        return config__sluiced_key(ps, name, value);
    case SEC_CLUSTER:
        return config__cluster_key(ps, name, value);
    case SEC_POLICY:
        return config__policy_key(ps, name, value);
    default:
        BAD("key '%s' outside of any section", name);
    }
}

/* Refuses policy i's match prefix when an earlier policy of the same kind
 * (rate or concurrency) has it: a rate limit and a concurrency limit may
 * cover the same keys. */
static void config__match_unique(struct config_parser *ps, size_t i)
{
    struct config *cfg = ps->cfg;
    struct policy_spec *pol = &cfg->policies[i];
    int conc = ps->pl[i].concurrency != 0;
    for (size_t j = 0; j < i && pol->match != NULL; j++) {
        if (cfg->policies[j].match != NULL && (ps->pl[j].concurrency != 0) == conc &&
            strcmp(cfg->policies[j].match, pol->match) == 0) {
            config__fail(ps, ps->pl[i].match, -SLUICE_ECONFIG,
                         "policy '%s': match prefix '%s' already used by policy '%s'", pol->name,
                         pol->match, cfg->policies[j].name);
            return;
        }
    }
}

/* Cross-field checks once the whole file is read. */
static void config__finish(struct config_parser *ps)
{
    struct config *cfg = ps->cfg;
    for (size_t i = 0; i < cfg->npolicies && !ps->failed; i++) {
        struct policy_spec *pol = &cfg->policies[i];
        struct config_pol_lines *pl = &ps->pl[i];
        int windowed = !algo_has_burst(pl->kind);
        int rc;
        if (pl->concurrency) {
            int any = config__first_option(pl, ALGO_KIND_COUNT_);
            int stray = pl->rate        ? pl->rate
                        : pl->burst     ? pl->burst
                        : pl->precision ? pl->precision
                        : any >= 0      ? pl->opt_line[any]
                        : pl->dry_run   ? pl->dry_run
                                        : pl->partition;
            if (stray) {
                config__fail(ps, stray, -SLUICE_ECONFIG,
                             "policy '%s': a concurrency limit takes limit, ttl, scope and match "
                             "only",
                             pol->name);
                break;
            }
            if (!pl->limit) {
                config__fail(ps, pol->line, -SLUICE_ECONFIG,
                             "policy '%s': missing required key 'limit' (e.g. limit = 50)",
                             pol->name);
                break;
            }
            pol->concurrency = 1;
            pol->lease_limit = pl->limit_v;
            pol->lease_ttl_ns = pl->ttl ? pl->ttl_v : CONFIG_DEFAULT_LEASE_TTL_NS;
            if (!pl->scope)
                pol->scope = cfg->default_scope;
        } else if (pl->limit || pl->ttl) {
            config__fail(ps, pl->limit ? pl->limit : pl->ttl, -SLUICE_ECONFIG,
                         "policy '%s': %s applies to algorithm = concurrency only", pol->name,
                         pl->limit ? "limit" : "ttl");
            break;
        }
        if (pl->concurrency) {
            config__match_unique(ps, i);
            continue;
        }
        if (pl->rate == 0) {
            config__fail(ps, pol->line, -SLUICE_ECONFIG,
                         "policy '%s': missing required key 'rate' (e.g. rate = 30 per 60s)",
                         pol->name);
            break;
        }
        if (windowed && pl->burst) {
            config__fail(ps, pl->burst, -SLUICE_ECONFIG,
                         "policy '%s': burst is not used by %s (its limit is the rate's N)",
                         pol->name, algo_name(pl->kind));
            break;
        }
        if (pl->precision && pl->kind != ALGO_SLIDING_WINDOW) {
            config__fail(ps, pl->precision, -SLUICE_ECONFIG,
                         "policy '%s': precision applies to sliding-window only", pol->name);
            break;
        }
        int foreign = config__first_option(pl, pl->kind);
        if (foreign >= 0) {
            enum algo_kind owner;
            const struct algo_option *o = algo_option_at((size_t)foreign, &owner);
            config__fail(ps, pl->opt_line[foreign], -SLUICE_ECONFIG,
                         "policy '%s': %s applies to %s only", pol->name, o->conf,
                         algo_name(owner));
            break;
        }
        if (!pl->scope)
            pol->scope = cfg->default_scope;
        if (pol->scope == POLICY_SCOPE_GLOBAL && !algo_can_be_global(pl->kind)) {
            if (pl->scope)
                config__fail(ps, pl->scope, -SLUICE_ECONFIG,
                             "policy '%s': %s cannot be global (%s); use scope = local", pol->name,
                             algo_name(pl->kind), algo_why_local(pl->kind));
            else
                config__fail(ps, pol->line, -SLUICE_ECONFIG,
                             "policy '%s': %s cannot be global, and default_scope (line %d) "
                             "is global; set scope = local",
                             pol->name, algo_name(pl->kind), ps->default_scope_line);
            break;
        }
        rc = algo_params_init(&pol->algo, pl->kind, pl->burst_v, pl->count, pl->period_ns,
                              pl->precision_v);
        int given = config__first_option(pl, ALGO_KIND_COUNT_);
        if (rc == 0 && given >= 0) {
            rc = algo_params_set_options(&pol->algo, pl->opt_v, pl->opt_line);
            if (rc < 0) {
                char names[128];
                config__fail(ps, pl->opt_line[given], -SLUICE_ECONFIG,
                             "policy '%s': %s out of range for this rate (%s)", pol->name,
                             algo_option_list(pl->kind, 0, "", names, sizeof(names)),
                             sluice_strerror(rc));
                break;
            }
        }
        if (rc < 0) {
            config__fail(ps, pl->rate, -SLUICE_ECONFIG,
                         "policy '%s': rate out of range for %s (%s: a rate above one unit "
                         "per ns, a period too short for the precision, or a limit too large)",
                         pol->name, algo_name(pl->kind), sluice_strerror(rc));
            break;
        }
        config__match_unique(ps, i);
    }
}

/* Fills cfg with the defaults (what an empty file gives).  -SLUICE_ENOMEM. */
static int config__defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->socket_mode = 0660;
    /* The same defaults as the flags': a config file changes only what it
     * says. */
    cfg->max_keys = LIMITER_DEFAULT_MAX_KEYS;
    cfg->on_full = CONFIG_ON_FULL_EVICT;
    cfg->log_level = CONFIG_LOG_INFO;
    cfg->max_clients = SERVER_DEFAULT_MAX_CLIENTS;
    cfg->max_client_memory = SERVER_DEFAULT_MAX_CLIENT_MEMORY;
    cfg->default_scope = POLICY_SCOPE_LOCAL;
    cfg->gossip_interval_ms = 100;
    cfg->partition_policy = POLICY_PARTITION_SHARE;
    /* socket stays NULL unless the file sets it: the daemon's default path
     * then applies ($SLUICE_SOCKET first), as without a config file. */
    if (config__set_str(&cfg->gossip_bind, "0.0.0.0:7946") < 0) {
        config_free(cfg);
        return -SLUICE_ENOMEM;
    }
    return 0;
}

void config_free(struct config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->socket);
    free(cfg->metrics);
    free(cfg->http_decisions);
    free(cfg->listen);
    free(cfg->requirepass);
    free(cfg->grpc);
    free(cfg->ratelimit_config);
    free(cfg->ratelimit_algorithm);
    free(cfg->node_name);
    free(cfg->gossip_bind);
    for (size_t i = 0; i < cfg->njoin; i++)
        free(cfg->join[i]);
    free(cfg->join);
    free(cfg->cluster_key_file);
    free(cfg->advertise);
    free(cfg->cluster_label);
    for (size_t i = 0; i < cfg->npolicies; i++) {
        free(cfg->policies[i].name);
        free(cfg->policies[i].match);
    }
    free(cfg->policies);
    memset(cfg, 0, sizeof(*cfg));
}

int config_load_buffer(const char *name, const char *buf, size_t len, struct config *cfg, char *err,
                       size_t errlen)
{
    struct config_parser ps;
    int rc;
    if (errlen > 0)
        err[0] = '\0';
    if (cfg == NULL || (buf == NULL && len > 0))
        return -SLUICE_EINVAL;
    memset(&ps, 0, sizeof(ps));
    ps.name = name ? name : "config";
    ps.err = err;
    ps.errlen = errlen;
    if (len > CONFIG_MAX_BYTES) {
        memset(cfg, 0, sizeof(*cfg));
        config__fail(&ps, 0, -SLUICE_ETOOBIG, "file larger than %u bytes", CONFIG_MAX_BYTES);
        return ps.rc;
    }
    rc = config__defaults(cfg);
    if (rc < 0) {
        config__fail(&ps, 0, rc, "out of memory");
        return rc;
    }
    ps.buf = buf;
    ps.len = len;
    ps.cfg = cfg;
    rc = ini_parse_stream(config__reader, &ps, config__handler, &ps);
    if (!ps.failed && rc == -2)
        config__fail(&ps, 0, -SLUICE_ENOMEM, "out of memory");
    else if (!ps.failed && rc != 0)
        config__fail(&ps, rc, -SLUICE_ECONFIG,
                     "syntax error (expected 'name = value', '[section]' or a comment)");
    if (!ps.failed)
        config__finish(&ps);
    free(ps.pl);
    if (ps.failed) {
        config_free(cfg);
        return ps.rc;
    }
    return 0;
}

int config_load_file(const char *path, struct config *cfg, struct stat *st, char *err,
                     size_t errlen)
{
    char *buf;
    size_t n;
    if (errlen > 0)
        err[0] = '\0';
    if (path == NULL || cfg == NULL)
        return -SLUICE_EINVAL;
    memset(cfg, 0, sizeof(*cfg));
    int rc = file_read_regular(path, CONFIG_MAX_BYTES, &buf, &n, st, err, errlen);
    if (rc == -SLUICE_EINVAL)
        return -SLUICE_ECONFIG;
    if (rc < 0)
        return rc;
    rc = config_load_buffer(path, buf, n, cfg, err, errlen);
    free(buf);
    return rc;
}

int config_load(const char *path, struct config *cfg, char *err, size_t errlen)
{
    return config_load_file(path, cfg, NULL, err, errlen);
}
