/* commands: command table and handlers (see commands.h). */
#include "commands.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "args.h"
#include "cluster.h"
#include "commands_cluster.h"
#include "decide.h"
#include "gcra.h"
#include "limiter.h"
#include "info.h"
#include "metrics.h"
#include "commands_lease.h"
#include "commands_sl.h"
#include "sluice/error.h"
#include "version.h"

struct commands {
    struct limiter *lim;
    struct cluster *cluster; /* NULL when not clustered */
    struct commands_sl *sl;  /* NULL: no SL.* commands */
    struct readiness *ready; /* NULL: no readiness tracking */
    size_t max_key;
    int admin_off;
    const char *requirepass;
    void (*listeners_info)(void *ud, struct resp_buf *t);
    void *listeners_ud;
    uint64_t started_ns;
    unsigned lat_tick;                /* which decision to time next */
    struct metrics_histogram latency; /* of the timed ones */
};

typedef int (*handler_fn)(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out);

int commands_create(struct limiter *lim, const struct commands_config *cfg, struct commands **out)
{
    struct commands *cmds = calloc(1, sizeof(*cmds));
    if (cmds == NULL)
        return -SLUICE_ENOMEM;
    cmds->lim = lim;
    cmds->cluster = cfg ? cfg->cluster : NULL;
    cmds->sl = cfg ? cfg->sl : NULL;
    cmds->ready = cfg ? cfg->ready : NULL;
    cmds->admin_off = cfg ? cfg->admin_off : 0;
    cmds->requirepass = cfg && cfg->requirepass && cfg->requirepass[0] ? cfg->requirepass : NULL;
    cmds->listeners_info = cfg ? cfg->listeners_info : NULL;
    cmds->listeners_ud = cfg ? cfg->listeners_ud : NULL;
    /* SL.* decide global keys through the same cluster as CL.THROTTLE. */
    commands_sl_set_cluster(cmds->sl, cmds->cluster);
    cmds->max_key = (cfg && cfg->max_key_bytes) ? cfg->max_key_bytes : COMMANDS_DEFAULT_MAX_KEY;
    cmds->started_ns = uv_hrtime();
    *out = cmds;
    return 0;
}

void commands_destroy(struct commands *cmds)
{
    free(cmds);
}

/* The protocol is the connection's (server_client_proto): it goes away
 * with the connection, so nothing here has to be pruned. */
static int commands__client_resp3(const struct server_client *c)
{
    return server_client_proto(c) == 3;
}

static int commands__reply_arity(struct resp_buf *out, const char *name)
{
    resp_add_errorf(out, "ERR wrong number of arguments for '%s' command", name);
    return SERVER_CONTINUE;
}

/* ---- CL.THROTTLE ---- */

#define CELL_ERR "Cell error: Store error: "

void commands_hint(void *ud, size_t argc, const char **argv, const size_t *argvlen, int stage,
                   uint32_t *state)
{
    struct commands *cmds = ud;
    if ((argc != 5 && argc != 6) || argvlen[0] != 11 ||
        strncasecmp(argv[0], "cl.throttle", 11) != 0 || argvlen[1] == 0 ||
        argvlen[1] > cmds->max_key)
        return;
    struct decide d = {cmds->lim, cmds->cluster};
    struct decide_req q = {.key = argv[1],
                           .klen = argvlen[1],
                           .pol =
                               policy_set_match(limiter_policies(cmds->lim), argv[1], argvlen[1]),
                           .scope = -1};
    decide_prefetch(&d, &q, stage, state);
}

static int commands__throttle(struct commands *cmds, struct server_client *c, size_t argc,
                              const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    if (argc != 5 && argc != 6) {
        resp_add_error(out, CELL_ERR "Usage: cl.throttle <key> <max_burst> <count per period> "
                                     "<period> [<quantity>]");
        return SERVER_CONTINUE;
    }
    if (argvlen[1] > cmds->max_key) {
        resp_add_errorf(out, "ERR key too long (%zu bytes, the limit is %zu)", argvlen[1],
                        cmds->max_key);
        return SERVER_CONTINUE;
    }
    int64_t v[4] = {0, 0, 0, 1};
    for (size_t i = 2; i < argc; i++) {
        if (args_parse_int64(argv[i], argvlen[i], &v[i - 2]) < 0) {
            int shown = argvlen[i] > 128 ? 128 : (int)argvlen[i];
            resp_add_errorf(out, CELL_ERR "Couldn't parse as integer: %.*s", shown, argv[i]);
            return SERVER_CONTINUE;
        }
    }
    static const char *const names[4] = {"max_burst", "count per period", "period", "quantity"};
    for (int i = 0; i < 4; i++) {
        if (v[i] < 0) {
            resp_add_errorf(out, CELL_ERR "%s must not be negative", names[i]);
            return SERVER_CONTINUE;
        }
    }
    if (v[1] == 0 || v[2] == 0) {
        resp_add_error(out, CELL_ERR "Zero rates are not supported");
        return SERVER_CONTINUE;
    }
    /* The key is matched against the policies once: a policy's key is
     * decided under the policy, the rest under the inline limit; the
     * decision entry says whether the cluster or the limiter decides. */
    const struct policy *pol = policy_set_match(limiter_policies(cmds->lim), argv[1], argvlen[1]);
    struct decide d = {cmds->lim, cmds->cluster};
    struct decide_req q = {.key = argv[1],
                           .klen = argvlen[1],
                           .pol = pol,
                           .cl_burst = v[0],
                           .cl_count = v[1],
                           .cl_period_s = v[2],
                           .scope = -1,
                           .qty = v[3]};
    struct algo_result a;
    int rc = decide_run(&d, &q, server_client_now_ns(c), &a);
    if (rc == -SLUICE_ENOMEM) {
        resp_add_error(out, "ERR out of memory");
        return SERVER_CONTINUE;
    }
    if (rc < 0) {
        resp_add_error(out, rc == -SLUICE_ERANGE ? CELL_ERR
                                "arguments out of range (burst, period or quantity "
                                "too large for nanosecond arithmetic)"
                                                 : CELL_ERR "invalid arguments");
        return SERVER_CONTINUE;
    }
    /* redis-cell's units: seconds, as it rounds them (ALGO_NEVER is -1,
     * which stays -1). */
    _Static_assert(ALGO_NEVER == GCRA_NO_RETRY, "one value for 'no retry helps'");
    const int64_t five[5] = {a.limited ? 1 : 0, a.limit, a.remaining > 0 ? a.remaining : 0,
                             a.limited ? gcra_cell_seconds(a.retry_after_ns) : -1,
                             gcra_cell_seconds(a.reset_after_ns)};
    args_reply_cell(out, five);
    return SERVER_CONTINUE;
}

/* ---- connection commands ---- */

/* ECHO's and PING's message, and a client's name, are bounded: a health
 * check or a name needs little, and neither should let a connection hold
 * more than its share of --max-client-memory.  Redis bounds neither; a
 * longer one is refused with an error, the connection stays. */
#define ECHO_MAX_BYTES        (16u * 1024)
#define CLIENT_NAME_MAX_BYTES 256u

static int commands__reply_echo(struct resp_buf *out, const char *cmd, const char *msg, size_t len)
{
    if (len > ECHO_MAX_BYTES)
        resp_add_errorf(out, "ERR %s message too long (%zu bytes, at most %u)", cmd, len,
                        ECHO_MAX_BYTES);
    else
        resp_add_bulk(out, msg, len);
    return SERVER_CONTINUE;
}

static int commands__ping(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    if (argc > 2)
        return commands__reply_arity(out, "ping");
    if (argc == 2)
        commands__reply_echo(out, "PING", argv[1], argvlen[1]);
    else
        resp_add_raw(out, "+PONG\r\n", 7);
    return SERVER_CONTINUE;
}

static int commands__echo(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    return commands__reply_echo(out, "ECHO", argv[1], argvlen[1]);
}

static int commands__quit(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    resp_add_simple(out, "OK");
    return SERVER_CLOSE_AFTER_REPLY;
}

static int commands__select(struct commands *cmds, struct server_client *c, size_t argc,
                            const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    int64_t db;
    if (args_parse_int64(argv[1], argvlen[1], &db) < 0)
        resp_add_error(out, "ERR value is not an integer or out of range");
    else if (db != 0)
        resp_add_error(out, "ERR DB index is out of range");
    else
        resp_add_simple(out, "OK");
    return SERVER_CONTINUE;
}

/* Redis refuses names with spaces, newlines or other special characters;
 * sluice also refuses names longer than CLIENT_NAME_MAX_BYTES.  Returns 0, or
 * -1 with the error reply added to out. */
static int commands__check_name(struct resp_buf *out, const char *name, size_t len)
{
    if (len > CLIENT_NAME_MAX_BYTES) {
        resp_add_errorf(out, "ERR Client name is too long (%zu bytes, at most %u)", len,
                        CLIENT_NAME_MAX_BYTES);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (name[i] < '!' || name[i] > '~') {
            resp_add_error(out, "ERR Client names cannot contain spaces, newlines or special "
                                "characters.");
            return -1;
        }
    }
    return 0;
}

/* 1 when pass (len bytes) is the configured password; the time taken does
 * not depend on where they differ. */
static int commands__auth_matches(const struct commands *cmds, const char *pass, size_t len)
{
    size_t want = strlen(cmds->requirepass);
    unsigned char diff = (unsigned char)(len != want);
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned char)(pass[i] ^ cmds->requirepass[i < want ? i : 0]);
    return diff == 0;
}

/* AUTH [default] password against requirepass: +OK and the connection is
 * authenticated, or WRONGPASS.  1 when it passed. */
static int commands__auth_check(struct commands *cmds, struct server_client *c, const char *user,
                                size_t ulen, const char *pass, size_t plen, struct resp_buf *out)
{
    if ((user == NULL || args_is(user, ulen, "default")) &&
        commands__auth_matches(cmds, pass, plen)) {
        server_client_set_authed(c);
        return 1;
    }
    resp_add_error(out, "WRONGPASS invalid username-password pair or user is disabled.");
    return 0;
}

static int commands__hello(struct commands *cmds, struct server_client *c, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    size_t i = 1;
    int64_t ver = commands__client_resp3(c) ? 3 : 2;
    if (argc >= 2) {
        if (args_parse_int64(argv[1], argvlen[1], &ver) < 0) {
            resp_add_error(out, "ERR Protocol version is not an integer or out of range");
            return SERVER_CONTINUE;
        }
        /* RESP3 is a property of a connection: without one (unit tests)
         * only RESP2 is spoken. */
        if (ver != 2 && (ver != 3 || c == NULL)) {
            resp_add_error(out, "NOPROTO unsupported protocol version");
            return SERVER_CONTINUE;
        }
        i = 2;
    }
    const char *setname = NULL;
    size_t setname_len = 0;
    for (; i < argc; i++) {
        if (args_is(argv[i], argvlen[i], "AUTH") && i + 2 < argc) {
            /* Without requirepass the socket's permissions are the gate. */
            if (cmds->requirepass != NULL &&
                !commands__auth_check(cmds, c, argv[i + 1], argvlen[i + 1], argv[i + 2],
                                      argvlen[i + 2], out))
                return SERVER_CONTINUE;
            i += 2;
        } else if (args_is(argv[i], argvlen[i], "SETNAME") && i + 1 < argc) {
            setname = argv[i + 1];
            setname_len = argvlen[i + 1];
            i++;
        } else {
            int shown = argvlen[i] > 128 ? 128 : (int)argvlen[i];
            resp_add_errorf(out, "ERR Syntax error in HELLO option '%.*s'", shown, argv[i]);
            return SERVER_CONTINUE;
        }
    }
    /* Before AUTH, HELLO answers nothing about the server and takes no
     * name: only its AUTH option logs in (Redis's wording). */
    if (cmds->requirepass != NULL && server_client_is_tcp(c) && !server_client_authed(c)) {
        resp_add_error(out, "NOAUTH HELLO must be called with the client already authenticated, "
                            "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                            "authenticate the client and select the RESP protocol version at the "
                            "same time");
        return SERVER_CONTINUE;
    }
    if (setname != NULL) {
        if (commands__check_name(out, setname, setname_len) < 0)
            return SERVER_CONTINUE;
        if (c != NULL && server_client_set_name(c, setname, setname_len) < 0) {
            resp_add_error(out, "ERR out of memory");
            return SERVER_CONTINUE;
        }
    }
    server_client_set_proto(c, (int)ver);
    /* The reply is in the protocol just chosen: a map under RESP3. */
    if (ver == 3)
        resp_add_map(out, 7);
    else
        resp_add_array(out, 14);
    resp_add_pair_str(out, "server", "sluice");
    resp_add_pair_str(out, "version", SLUICE_REDIS_COMPAT_VERSION);
    resp_add_bulk_str(out, "proto");
    resp_add_int(out, ver);
    resp_add_bulk_str(out, "id");
    resp_add_int(out, c ? (int64_t)server_client_id(c) : 0);
    resp_add_pair_str(out, "mode", "standalone");
    resp_add_pair_str(out, "role", "master");
    resp_add_bulk_str(out, "modules");
    resp_add_array(out, 0);
    return SERVER_CONTINUE;
}

static int commands__client(struct commands *cmds, struct server_client *c, size_t argc,
                            const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    const char *sub = argv[1];
    size_t sublen = argvlen[1];
    if (c == NULL) {
        resp_add_error(out, "ERR CLIENT needs a connection");
        return SERVER_CONTINUE;
    }
    if (args_is(sub, sublen, "ID")) {
        if (argc != 2)
            return commands__reply_arity(out, "client|id");
        resp_add_int(out, (int64_t)server_client_id(c));
    } else if (args_is(sub, sublen, "GETNAME")) {
        if (argc != 2)
            return commands__reply_arity(out, "client|getname");
        const char *name = server_client_name(c);
        if (name[0] == '\0')
            resp_add_null(out);
        else
            resp_add_bulk_str(out, name);
    } else if (args_is(sub, sublen, "SETNAME")) {
        if (argc != 3)
            return commands__reply_arity(out, "client|setname");
        if (commands__check_name(out, argv[2], argvlen[2]) < 0) {
            /* the error is in out */
        } else if (server_client_set_name(c, argv[2], argvlen[2]) < 0) {
            resp_add_error(out, "ERR out of memory");
        } else {
            resp_add_simple(out, "OK");
        }
    } else if (args_is(sub, sublen, "SETINFO")) {
        if (argc != 4)
            return commands__reply_arity(out, "client|setinfo");
        if (args_is(argv[2], argvlen[2], "LIB-NAME") || args_is(argv[2], argvlen[2], "LIB-VER")) {
            resp_add_simple(out, "OK");
        } else {
            int shown = argvlen[2] > 128 ? 128 : (int)argvlen[2];
            resp_add_errorf(out, "ERR Unrecognized option '%.*s'", shown, argv[2]);
        }
    } else if (args_is(sub, sublen, "HELP")) {
        static const char *const help[] = {
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "SETINFO <option> <value>",
            "    Set client meta attr. Options are: LIB-NAME, LIB-VER (accepted, not kept).",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "HELP",
            "    Print this help.",
        };
        resp_add_array(out, sizeof(help) / sizeof(help[0]));
        for (size_t i = 0; i < sizeof(help) / sizeof(help[0]); i++)
            resp_add_simple(out, help[i]);
    } else {
        int shown = sublen > 128 ? 128 : (int)sublen;
        resp_add_errorf(out, "ERR unknown subcommand '%.*s'. Try CLIENT HELP.", shown, sub);
    }
    return SERVER_CONTINUE;
}

static int commands__auth(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    if (argc != 2 && argc != 3)
        return commands__reply_arity(out, "auth");
    if (cmds->requirepass != NULL) {
        if (commands__auth_check(cmds, c, argc == 3 ? argv[1] : NULL, argc == 3 ? argvlen[1] : 0,
                                 argv[argc - 1], argvlen[argc - 1], out))
            resp_add_simple(out, "OK");
        return SERVER_CONTINUE;
    }
    /* No password (the socket's permissions are the gate): any password
     * is accepted, so a client configured with one (redis-py's password=)
     * connects; a user other than default is refused as Redis refuses it. */
    if (argc == 2 || args_is(argv[1], argvlen[1], "default")) {
        resp_add_simple(out, "OK");
    } else {
        resp_add_error(out, "WRONGPASS invalid username-password pair or user is disabled.");
    }
    return SERVER_CONTINUE;
}

/* ---- SCAN: the keys the limiter holds ---- */

#define SCAN_MAX_COUNT 10000

struct scan_ctx {
    struct resp_buf *keys; /* the keys' bulk replies, counted in n */
    size_t n;
    const char *pattern; /* NUL-terminated, or NULL for all */
    char *tmp;           /* NUL-terminated copy of a key for fnmatch */
    size_t tmpcap;
    int oom;
};

static void commands__scan_one(void *ud, const char *key, size_t klen, int64_t tat_ns)
{
    struct scan_ctx *x = ud;
    if (x->oom)
        return;
    if (x->pattern != NULL) {
        if (memchr(key, '\0', klen) != NULL)
            return; /* a key with a NUL cannot be matched by a C pattern */
        if (x->tmpcap < klen + 1) {
            char *t = realloc(x->tmp, klen + 1);
            if (t == NULL) {
                x->oom = 1;
                return;
            }
            x->tmp = t;
            x->tmpcap = klen + 1;
        }
        memcpy(x->tmp, key, klen);
        x->tmp[klen] = '\0';
        if (fnmatch(x->pattern, x->tmp, 0) != 0)
            return;
    }
    if (resp_add_bulk(x->keys, key, klen) < 0)
        x->oom = 1;
    else
        x->n++;
}

/* Strict decimal uint64 (SCAN cursors use the full range). */
static int commands__parse_uint64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20)
        return -SLUICE_EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -SLUICE_EINVAL;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -SLUICE_ERANGE;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* SCAN cursor [MATCH pattern] [COUNT n]: Redis's SCAN over the limiter's keys,
 * so `redis-cli --scan` lists them. */
static int commands__scan(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    uint64_t cursor;
    if (commands__parse_uint64(argv[1], argvlen[1], &cursor) < 0) {
        resp_add_error(out, "ERR invalid cursor");
        return SERVER_CONTINUE;
    }
    int64_t count = 10;
    char *pattern = NULL;
    for (size_t i = 2; i < argc; i += 2) {
        if (i + 1 >= argc) {
            resp_add_error(out, "ERR syntax error");
            free(pattern);
            return SERVER_CONTINUE;
        }
        if (args_is(argv[i], argvlen[i], "COUNT")) {
            if (args_parse_int64(argv[i + 1], argvlen[i + 1], &count) < 0) {
                resp_add_error(out, "ERR value is not an integer or out of range");
                free(pattern);
                return SERVER_CONTINUE;
            }
            if (count < 1) {
                resp_add_error(out, "ERR syntax error");
                free(pattern);
                return SERVER_CONTINUE;
            }
        } else if (args_is(argv[i], argvlen[i], "MATCH")) {
            free(pattern);
            pattern = malloc(argvlen[i + 1] + 1);
            if (pattern == NULL) {
                resp_add_error(out, "ERR out of memory");
                return SERVER_CONTINUE;
            }
            memcpy(pattern, argv[i + 1], argvlen[i + 1]);
            pattern[argvlen[i + 1]] = '\0';
            if (strcmp(pattern, "*") == 0) {
                free(pattern);
                pattern = NULL;
            }
        } else {
            resp_add_error(out, "ERR syntax error");
            free(pattern);
            return SERVER_CONTINUE;
        }
    }
    if (count > SCAN_MAX_COUNT)
        count = SCAN_MAX_COUNT;
    struct resp_buf keys;
    resp_buf_init(&keys);
    struct scan_ctx x = {.keys = &keys, .pattern = pattern};
    uint64_t next = limiter_scan(cmds->lim, cursor, (size_t)count, commands__scan_one, &x);
    if (x.oom) {
        resp_add_error(out, "ERR out of memory");
    } else {
        resp_add_array(out, 2);
        /* The cursor is unsigned 64-bit: format it by hand. */
        char ubuf[24];
        size_t ulen = 0;
        uint64_t u = next;
        do {
            ubuf[sizeof(ubuf) - 1 - ulen++] = (char)('0' + u % 10);
            u /= 10;
        } while (u != 0);
        resp_add_bulk(out, ubuf + sizeof(ubuf) - ulen, ulen);
        resp_add_array(out, x.n);
        resp_add_raw(out, keys.data ? keys.data : "", keys.len);
    }
    resp_buf_free(&keys);
    free(x.tmp);
    free(pattern);
    return SERVER_CONTINUE;
}

/* ---- introspection ---- */

static int commands__section_wanted(size_t argc, const char **argv, const size_t *argvlen,
                                    const char *name)
{
    if (argc < 2)
        return 1;
    for (size_t i = 1; i < argc; i++) {
        if (args_is(argv[i], argvlen[i], name) || args_is(argv[i], argvlen[i], "all") ||
            args_is(argv[i], argvlen[i], "everything") || args_is(argv[i], argvlen[i], "default"))
            return 1;
    }
    return 0;
}

static int commands__info(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    struct resp_buf t;
    resp_buf_init(&t);
    struct server_stats ss;
    memset(&ss, 0, sizeof(ss));
    if (c != NULL)
        server_get_stats(server_client_server(c), &ss);
    if (commands__section_wanted(argc, argv, argvlen, "server")) {
        resp_add_raw(&t, "# Server\r\n", 10);
        resp_add_raw(&t, "redis_version:" SLUICE_REDIS_COMPAT_VERSION "\r\n",
                     strlen("redis_version:" SLUICE_REDIS_COMPAT_VERSION "\r\n"));
        resp_add_raw(&t, "sluice_version:" SLUICE_VERSION "\r\n",
                     strlen("sluice_version:" SLUICE_VERSION "\r\n"));
        resp_add_raw(&t, "redis_mode:standalone\r\n", 23);
        info_u64(&t, "process_id", (uint64_t)getpid());
        uint64_t up = (uv_hrtime() - cmds->started_ns) / 1000000000u;
        info_u64(&t, "uptime_in_seconds", up);
        resp_add_raw(&t, "\r\n", 2);
    }
    if (commands__section_wanted(argc, argv, argvlen, "clients")) {
        resp_add_raw(&t, "# Clients\r\n", 11);
        info_counters(&t, &server_client_counters, &ss);
        resp_add_raw(&t, "\r\n", 2);
    }
    if (commands__section_wanted(argc, argv, argvlen, "stats")) {
        resp_add_raw(&t, "# Stats\r\n", 9);
        info_counters(&t, &server_command_counters, &ss);
        resp_add_raw(&t, "\r\n", 2);
    }
    if (cmds->listeners_info != NULL &&
        commands__section_wanted(argc, argv, argvlen, "listeners")) {
        resp_add_raw(&t, "# Listeners\r\n", 13);
        cmds->listeners_info(cmds->listeners_ud, &t);
        resp_add_raw(&t, "\r\n", 2);
    }
    if (commands__section_wanted(argc, argv, argvlen, "limiter")) {
        struct limiter_stats ls;
        limiter_get_stats(cmds->lim, &ls);
        resp_add_raw(&t, "# Limiter\r\n", 11);
        info_counters(&t, &limiter_counters, &ls);
        resp_add_raw(&t, "\r\n", 2);
    }
    if (commands__section_wanted(argc, argv, argvlen, "cluster"))
        commands_cluster_info(cmds->cluster, cmds->ready, &t);
    if (cmds->sl != NULL && commands__section_wanted(argc, argv, argvlen, "policies")) {
        struct commands_sl_stats sls;
        commands_sl_get_stats(cmds->sl, &sls);
        resp_add_raw(&t, "# Policies\r\n", 12);
        info_counters(&t, &commands_sl_counters, &sls);
        resp_add_raw(&t, "\r\n", 2);
    }
    if (commands_sl_leases(cmds->sl) != NULL &&
        commands__section_wanted(argc, argv, argvlen, "leases"))
        commands_lease_info(commands_sl_leases(cmds->sl), &t);
    /* Redis ends the text without the last blank line. */
    if (t.len >= 2)
        t.len -= 2;
    resp_add_bulk(out, t.data ? t.data : "", t.len);
    resp_buf_free(&t);
    return SERVER_CONTINUE;
}

static size_t commands__command_count(void);

static int commands__sl_members(struct commands *cmds, struct server_client *c, size_t argc,
                                const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    return commands_cluster_members(cmds->cluster, argc, argv, argvlen, out);
}

static int commands__sl_key(struct commands *cmds, struct server_client *c, size_t argc,
                            const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    return commands_cluster_key(cmds->cluster, argc, argv, argvlen, out);
}

static int commands__command(struct commands *cmds, struct server_client *c, size_t argc,
                             const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    /* Clients call COMMAND / COMMAND DOCS for hints and metadata only; an
     * empty answer makes them fall back to sending commands as typed. */
    if (argc >= 2 && args_is(argv[1], argvlen[1], "COUNT"))
        resp_add_int(out, (int64_t)commands__command_count());
    else
        resp_add_array(out, 0);
    return SERVER_CONTINUE;
}

static int commands__config(struct commands *cmds, struct server_client *c, size_t argc,
                            const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    /* redis-benchmark asks for `save` and `appendonly`; sluice keeps no data
     * on disk, which is what these answers say. */
    if (argc == 3 && args_is(argv[1], argvlen[1], "GET")) {
        if (args_is(argv[2], argvlen[2], "save")) {
            resp_add_array(out, 2);
            resp_add_pair_str(out, "save", "");
        } else if (args_is(argv[2], argvlen[2], "appendonly")) {
            resp_add_array(out, 2);
            resp_add_pair_str(out, "appendonly", "no");
        } else {
            resp_add_array(out, 0);
        }
        return SERVER_CONTINUE;
    }
    /* Redis's RESETSTAT zeroes its statistics; sluice's counters are
     * totals a scrape takes differences of, so it forgets only the maxima
     * INFO shows: the longest loop turn and replication slice. */
    if (argc == 2 && args_is(argv[1], argvlen[1], "RESETSTAT")) {
        if (c != NULL)
            server_reset_loop_max(server_client_server(c));
        cluster_reset_max(cmds->cluster);
        resp_add_simple(out, "OK");
        return SERVER_CONTINUE;
    }
    resp_add_error(out, "ERR CONFIG supports only GET and RESETSTAT in sluice");
    return SERVER_CONTINUE;
}

/* ---- dispatch ---- */

static int commands__multi(struct commands *cmds, struct server_client *c, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out);
static int commands__exec(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out);
static int commands__discard(struct commands *cmds, struct server_client *c, size_t argc,
                             const char **argv, const size_t *argvlen, struct resp_buf *out);
static int commands__watch(struct commands *cmds, struct server_client *c, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out);

/*
 * The command table: one row per command, and the only place a command's
 * name is written.  arity counts the name, as Redis's does: N exactly N
 * arguments, -N at least N, 0 the handler checks (it has its own wording,
 * as CL.THROTTLE has redis-cell's).  A row has a handler of the command
 * layer (fn) or of the SL.* layer (sl), which gets the connection's
 * protocol and answers "not enabled" when the daemon runs without it.
 */
#define CMD_F_BLOCKS 1u /* may wait for its answer: refused inside MULTI */
#define CMD_F_CONN   2u /* about the connection itself: needs one (commands_execute) */
#define CMD_F_DECIDE 4u /* a decision: sampled into the latency histogram */
#define CMD_F_ADMIN  8u /* administrative: refused when admin_commands = off */
/* One decision in LAT_EVERY is timed: two clock reads on every decision
 * would cost about a third of a local decision. */
#define LAT_EVERY 16u

struct commands_row {
    const char *name; /* lower case */
    int arity;
    unsigned flags; /* CMD_F_* */
    handler_fn fn;
    commands_sl_fn sl;
};

static const struct commands_row command_table[] = {
    {"cl.throttle", 0, CMD_F_DECIDE, commands__throttle, NULL},
    {"ping", -1, 0, commands__ping, NULL},
    {"echo", 2, 0, commands__echo, NULL},
    {"quit", 0, CMD_F_CONN, commands__quit, NULL},
    {"hello", 0, CMD_F_CONN, commands__hello, NULL},
    {"client", -2, CMD_F_CONN, commands__client, NULL},
    {"info", 0, 0, commands__info, NULL},
    {"command", 0, 0, commands__command, NULL},
    {"select", 2, CMD_F_CONN, commands__select, NULL},
    {"config", 0, 0, commands__config, NULL},
    {"auth", 0, CMD_F_CONN, commands__auth, NULL},
    {"scan", -2, 0, commands__scan, NULL},
    {"multi", 1, CMD_F_CONN, commands__multi, NULL},
    {"exec", 0, CMD_F_CONN, commands__exec, NULL},
    {"discard", 0, CMD_F_CONN, commands__discard, NULL},
    {"watch", -2, CMD_F_CONN, commands__watch, NULL},
    {"unwatch", 0, CMD_F_CONN, commands__watch, NULL},
    {"sl.members", 0, 0, commands__sl_members, NULL},
    {"sl.key", 0, 0, commands__sl_key, NULL},
    {"sl.throttle", 0, CMD_F_DECIDE, NULL, commands_sl_throttle},
    {"sl.peek", 0, CMD_F_DECIDE, NULL, commands_sl_peek},
    {"sl.refund", 0, 0, NULL, commands_sl_refund},
    {"sl.charge", 0, CMD_F_DECIDE, NULL, commands_sl_charge},
    {"sl.reset", 0, 0, NULL, commands_sl_reset},
    {"sl.acquire", 0, CMD_F_BLOCKS | CMD_F_DECIDE, NULL, commands_sl_acquire},
    {"sl.multi", 0, CMD_F_DECIDE, NULL, commands_sl_multi},
    {"sl.policies", 0, 0, NULL, commands_sl_policies},
    {"sl.reload", 0, CMD_F_ADMIN | CMD_F_BLOCKS, NULL, commands_sl_reload_cmd},
    {"sl.lease", 0, CMD_F_BLOCKS | CMD_F_DECIDE, NULL, commands_lease_lease},
    {"sl.release", 0, 0, NULL, commands_lease_release},
    {"sl.renew", 0, 0, NULL, commands_lease_renew},
};

static size_t commands__command_count(void)
{
    return sizeof(command_table) / sizeof(command_table[0]);
}

static void commands__reply_unknown(size_t argc, const char **argv, const size_t *argvlen,
                                    struct resp_buf *out)
{
    /* Redis's text: the name cut at 128 bytes, then arguments while the
     * list is shorter than 128 bytes. */
    char msg[512];
    int shown = argvlen[0] > 128 ? 128 : (int)argvlen[0];
    int n = snprintf(msg, sizeof(msg),
                     "ERR unknown command '%.*s', with args beginning with: ", shown, argv[0]);
    size_t args = 0;
    for (size_t j = 1; j < argc && args < 128 && n > 0 && (size_t)n < sizeof(msg); j++) {
        int room = 128 - (int)args;
        int take = argvlen[j] > (size_t)room ? room : (int)argvlen[j];
        int m = snprintf(msg + n, sizeof(msg) - (size_t)n, "'%.*s' ", take, argv[j]);
        if (m < 0)
            break;
        n += m;
        args += (size_t)m;
    }
    resp_add_error(out, msg);
}

const struct commands_row *commands_find(const char *name, size_t len)
{
    for (size_t i = 0; i < commands__command_count(); i++)
        if (args_is(name, len, command_table[i].name))
            return &command_table[i];
    return NULL;
}

commands_sl_fn commands_row_sl(const struct commands_row *row)
{
    return row != NULL ? row->sl : NULL;
}

/* A row's handler. */
static int commands_call(struct commands *cmds, const struct commands_row *row,
                         struct server_client *c, size_t argc, const char **argv,
                         const size_t *argvlen, struct resp_buf *out)
{
    if (row->fn != NULL)
        return row->fn(cmds, c, argc, argv, argvlen, out);
    if (cmds->sl == NULL) {
        resp_add_error(out, "ERR SL commands are not enabled");
        return SERVER_CONTINUE;
    }
    return row->sl(cmds->sl, c, commands__client_resp3(c), argc, argv, argvlen, out);
}

/* Runs one command of a known row: the arity check, then its handler,
 * timed one decision in LAT_EVERY. */
static int commands_run(struct commands *cmds, const struct commands_row *row,
                        struct server_client *c, size_t argc, const char **argv,
                        const size_t *argvlen, struct resp_buf *out)
{
    if ((row->arity > 0 && argc != (size_t)row->arity) ||
        (row->arity < 0 && argc < (size_t)-row->arity)) {
        resp_add_errorf(out, "ERR wrong number of arguments for '%s' command", row->name);
        return SERVER_CONTINUE;
    }
    if ((row->flags & CMD_F_ADMIN) && cmds->admin_off) {
        resp_add_errorf(out,
                        "ERR '%s' is disabled on this daemon (admin_commands = off); "
                        "send sluiced SIGHUP instead",
                        row->name);
        return SERVER_CONTINUE;
    }
    if (!(row->flags & CMD_F_DECIDE) || (++cmds->lat_tick % LAT_EVERY) != 0)
        return commands_call(cmds, row, c, argc, argv, argvlen, out);
    uint64_t t0 = uv_hrtime();
    int rc = commands_call(cmds, row, c, argc, argv, argvlen, out);
    uint64_t dt = uv_hrtime() - t0;
    int b = 0;
    while (b < METRICS_LATENCY_BUCKETS && (int64_t)dt > metrics_latency_bounds_ns[b])
        b++;
    cmds->latency.buckets[b]++;
    cmds->latency.count++;
    cmds->latency.sum_ns += dt;
    return rc;
}

/* ---- transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH ----
 *
 * Between MULTI and EXEC a connection's commands are checked (known name,
 * not a waiting SL.ACQUIRE), queued and answered +QUEUED; EXEC runs them
 * one after the other and answers an array of their replies.  Every command
 * already runs alone on the event loop, so the queued ones run as one.  A
 * command refused while queuing (unknown, too many) makes EXEC answer
 * -EXECABORT, as Redis does.  WATCH and UNWATCH answer +OK and watch
 * nothing: a limiter's keys change with every request, so a transaction
 * always runs (EXEC never answers a null array).  The queue is bounded
 * (TX_MAX_COMMANDS, TX_MAX_BYTES) and freed with the connection. */
#define TX_MAX_COMMANDS 10000
#define TX_MAX_BYTES    (4u << 20)
/* Worst-case reply of a queued command other than SCAN: the introspection
 * ones (INFO, SL.POLICIES, SL.MEMBERS, COMMAND) answer a few KiB, the others
 * a few integers per argument. */
#define TX_REPLY_INTROSPECT (64u << 10)
#define TX_REPLY_BASE       512u
#define TX_REPLY_PER_ARG    64u

struct tx {
    int failed;
    size_t worst; /* the queued commands' worst-case reply, summed */
    size_t n;     /* commands queued */
    char *buf;    /* per command: u32 argc, then per argument u32 len + bytes */
    size_t len, cap;
};

static void commands__tx_free(void *p)
{
    struct tx *t = p;
    if (t != NULL)
        free(t->buf);
    free(t);
}

static int commands__tx_put(struct tx *t, const void *p, size_t n)
{
    if (t->len + n > TX_MAX_BYTES)
        return -SLUICE_ETOOBIG;
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n)
            cap *= 2;
        char *b = realloc(t->buf, cap);
        if (b == NULL)
            return -SLUICE_ENOMEM;
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
    return 0;
}

static int commands__tx_queue(struct tx *t, size_t argc, const char **argv, const size_t *argvlen)
{
    if (t->n >= TX_MAX_COMMANDS)
        return -SLUICE_ETOOBIG;
    size_t mark = t->len;
    uint32_t v = (uint32_t)argc;
    int rc = commands__tx_put(t, &v, sizeof(v));
    for (size_t i = 0; rc == 0 && i < argc; i++) {
        v = (uint32_t)argvlen[i];
        rc = commands__tx_put(t, &v, sizeof(v));
        if (rc == 0)
            rc = commands__tx_put(t, argv[i], argvlen[i]);
    }
    if (rc != 0) {
        t->len = mark;
        return rc;
    }
    t->n++;
    return 0;
}

/*
 * The largest reply a queued command could answer: what lets MULTI refuse a
 * transaction whose EXEC could not fit the client's output bound, before
 * anything runs.  SCAN's grows with COUNT and the longest key; the others'
 * are small and bounded by their arguments.
 */
static size_t commands__tx_reply_worst(const struct commands *cmds, const struct commands_row *row,
                                       size_t argc, const char **argv, const size_t *argvlen)
{
    if (strcmp(row->name, "scan") == 0) {
        int64_t count = 10;
        for (size_t i = 2; i + 1 < argc; i += 2)
            if (args_is(argv[i], argvlen[i], "COUNT") &&
                args_parse_int64(argv[i + 1], argvlen[i + 1], &count) < 0)
                count = SCAN_MAX_COUNT;
        if (count < 1 || count > SCAN_MAX_COUNT)
            count = SCAN_MAX_COUNT;
        /* "$<len>\r\n<key>\r\n" per key, the cursor and the arrays */
        return (size_t)count * (cmds->max_key + 16) + 64;
    }
    if (strcmp(row->name, "info") == 0 || strcmp(row->name, "sl.policies") == 0 ||
        strcmp(row->name, "sl.members") == 0 || strcmp(row->name, "command") == 0)
        return TX_REPLY_INTROSPECT;
    return TX_REPLY_BASE + TX_REPLY_PER_ARG * argc;
}

static int commands__tx_exec(struct commands *cmds, struct server_client *c, struct tx *t,
                             struct resp_buf *out)
{
    /* The reply is checked against the client's output bound and the
     * clients' memory budget after every command, as it grows: a reply
     * that no longer fits is dropped and the client closed, before it can
     * grow the daemon (MULTI bounds the worst case too, but the bound
     * assumes the budget is free). */
    size_t mark = out->len;
    resp_add_array(out, t->n);
    size_t off = 0;
    for (size_t k = 0; k < t->n; k++) {
        uint32_t argc;
        memcpy(&argc, t->buf + off, sizeof(argc));
        off += sizeof(argc);
        const char **argv = malloc(argc * sizeof(*argv));
        size_t *argvlen = malloc(argc * sizeof(*argvlen));
        for (uint32_t i = 0; i < argc; i++) {
            uint32_t l;
            memcpy(&l, t->buf + off, sizeof(l));
            off += sizeof(l);
            if (argv != NULL && argvlen != NULL) {
                argv[i] = t->buf + off;
                argvlen[i] = l;
            }
            off += l;
        }
        const struct commands_row *row =
            argv != NULL && argvlen != NULL ? commands_find(argv[0], argvlen[0]) : NULL;
        if (row != NULL)
            (void)commands_run(cmds, row, c, argc, argv, argvlen, out);
        else
            resp_add_error(out, "ERR out of memory");
        free(argv);
        free(argvlen);
        if (server_client_reply_fits(c) < 0) {
            server_client_drop_reply(c, mark);
            resp_add_error(out, "ERR EXEC reply passed the client output limit; closing");
            return SERVER_CLOSE_AFTER_REPLY;
        }
    }
    return SERVER_CONTINUE;
}

static int commands__multi(struct commands *cmds, struct server_client *c, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    struct tx *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        resp_add_error(out, "ERR out of memory");
        return SERVER_CONTINUE;
    }
    server_client_set_ctx(c, t, commands__tx_free);
    resp_add_simple(out, "OK");
    return SERVER_CONTINUE;
}

static int commands__exec(struct commands *cmds, struct server_client *c, size_t argc,
                          const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    resp_add_error(out, "ERR EXEC without MULTI");
    return SERVER_CONTINUE;
}

static int commands__discard(struct commands *cmds, struct server_client *c, size_t argc,
                             const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    resp_add_error(out, "ERR DISCARD without MULTI");
    return SERVER_CONTINUE;
}

static int commands__watch(struct commands *cmds, struct server_client *c, size_t argc,
                           const char **argv, const size_t *argvlen, struct resp_buf *out)
{
    resp_add_simple(out, "OK"); /* nothing is watched: see "transactions" above */
    return SERVER_CONTINUE;
}

/* A command arriving while the connection is inside MULTI. */
static int commands__tx_command(struct commands *cmds, struct server_client *c, struct tx *t,
                                size_t argc, const char **argv, const size_t *argvlen,
                                struct resp_buf *out)
{
    if (args_is(argv[0], argvlen[0], "EXEC")) {
        int rc = t->failed ? (resp_add_error(out, "EXECABORT Transaction discarded because of "
                                                  "previous errors."),
                              SERVER_CONTINUE)
                           : commands__tx_exec(cmds, c, t, out);
        server_client_set_ctx(c, NULL, NULL); /* frees t */
        return rc;
    }
    if (args_is(argv[0], argvlen[0], "DISCARD")) {
        server_client_set_ctx(c, NULL, NULL);
        resp_add_simple(out, "OK");
        return SERVER_CONTINUE;
    }
    if (args_is(argv[0], argvlen[0], "MULTI")) {
        resp_add_error(out, "ERR MULTI calls can not be nested");
        return SERVER_CONTINUE;
    }
    if (args_is(argv[0], argvlen[0], "WATCH")) {
        resp_add_error(out, "ERR WATCH inside MULTI is not allowed");
        return SERVER_CONTINUE;
    }
    if (args_is(argv[0], argvlen[0], "QUIT"))
        return commands__quit(cmds, c, argc, argv, argvlen, out);
    const struct commands_row *row = commands_find(argv[0], argvlen[0]);
    if (row == NULL) {
        commands__reply_unknown(argc, argv, argvlen, out);
        t->failed = 1;
        return SERVER_CONTINUE;
    }
    if (row->flags & CMD_F_BLOCKS) {
        char up[32];
        size_t n = 0;
        for (; row->name[n] != '\0' && n + 1 < sizeof(up); n++)
            up[n] = (char)toupper((unsigned char)row->name[n]);
        up[n] = '\0';
        resp_add_errorf(out, "ERR %s cannot wait inside MULTI", up);
        t->failed = 1;
        return SERVER_CONTINUE;
    }
    size_t worst = commands__tx_reply_worst(cmds, row, argc, argv, argvlen);
    if (t->worst + worst > server_client_out_limit(c)) {
        resp_add_errorf(out,
                        "ERR the transaction's reply could pass the client output limit "
                        "(%zu bytes)",
                        server_client_out_limit(c));
        t->failed = 1;
        return SERVER_CONTINUE;
    }
    t->worst += worst;
    if (commands__tx_queue(t, argc, argv, argvlen) != 0) {
        resp_add_error(out, "ERR the transaction is too large");
        t->failed = 1;
        return SERVER_CONTINUE;
    }
    /* The queue counts in the client's memory (--max-client-memory). */
    server_client_set_ctx_bytes(c, sizeof(*t) + t->cap);
    resp_add_simple(out, "QUEUED");
    return SERVER_CONTINUE;
}

void commands_get_latency(const struct commands *cmds, struct metrics_histogram *out)
{
    *out = cmds->latency;
}

int commands_execute(struct commands *cmds, size_t argc, const char **argv, const size_t *argvlen,
                     struct resp_buf *out)
{
    if (cmds == NULL || argc == 0 || argv == NULL || argvlen == NULL || out == NULL)
        return -SLUICE_EINVAL;
    const struct commands_row *row = commands_find(argv[0], argvlen[0]);
    if (row == NULL) {
        commands__reply_unknown(argc, argv, argvlen, out);
        return 0;
    }
    if (row->flags & CMD_F_CONN) {
        resp_add_errorf(out, "ERR '%s' needs a connection", row->name);
        return 0;
    }
    (void)commands_run(cmds, row, NULL, argc, argv, argvlen, out);
    return 0;
}

int commands_dispatch(void *ud, struct server_client *c, size_t argc, const char **argv,
                      const size_t *argvlen, struct resp_buf *out)
{
    struct commands *cmds = ud;
    if (argc == 0)
        return SERVER_CONTINUE;
    /* A TCP client must authenticate first (Redis's requirepass); AUTH,
     * HELLO (with AUTH) and QUIT are all it may send before. */
    if (cmds->requirepass != NULL && server_client_is_tcp(c) && !server_client_authed(c) &&
        !args_is(argv[0], argvlen[0], "AUTH") && !args_is(argv[0], argvlen[0], "HELLO") &&
        !args_is(argv[0], argvlen[0], "QUIT")) {
        resp_add_error(out, "NOAUTH Authentication required.");
        return SERVER_CONTINUE;
    }
    struct tx *t = server_client_ctx(c);
    if (t != NULL)
        return commands__tx_command(cmds, c, t, argc, argv, argvlen, out);
    const struct commands_row *row = commands_find(argv[0], argvlen[0]);
    if (row != NULL)
        return commands_run(cmds, row, c, argc, argv, argvlen, out);
    commands__reply_unknown(argc, argv, argvlen, out);
    return SERVER_CONTINUE;
}
