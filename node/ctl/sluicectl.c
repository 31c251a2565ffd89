/*
 * sluicectl: command-line client for sluiced.
 *
 *   sluicectl [-s PATH] throttle KEY BURST COUNT PERIOD [QTY]
 *   sluicectl [-s PATH] ping | info [SECTION] | keys [PATTERN] | raw ARG...
 *   sluicectl [-s PATH] members | key KEY
 *   sluicectl keygen [-o FILE] [ID]
 *   sluicectl [-s PATH] sl|throttle-ex|peek|refund|acquire KEY [SPEC...]
 *   sluicectl [-s PATH] multi [QTY q] KEY k1 [SPEC] KEY k2 ... | reset KEY
 *   sluicectl [-s PATH] policies | reload
 *
 * Exit status: throttle exits 0 when allowed, 1 when limited; every command
 * exits 2 on an error (connection, protocol, or an error reply).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gossip/keyring.h"
#include "sluice/client.h"
#include "sluice/error.h"

#define EXIT_LIMITED 1
#define EXIT_ERR     2

static void sluicectl__usage(FILE *f)
{
    fprintf(f, "Usage: sluicectl [-s PATH] COMMAND [ARGS...]\n"
               "\n"
               "Commands:\n"
               "  throttle KEY BURST COUNT PERIOD [QTY]\n"
               "                 CL.THROTTLE; prints the decision, exits 0 allowed, 1 limited\n"
               "  ping           checks that the daemon answers\n"
               "  info [SECTION] prints the daemon's INFO text\n"
               "  keys [PATTERN] lists the keys held (glob PATTERN), one per line\n"
               "  raw ARG...     sends any command and prints the reply like redis-cli\n"
               "  members        the cluster's members: name, address, state, last heard\n"
               "  key KEY        this node's lease of a global key; on its owner, every reporter\n"
               "  keygen [-o FILE] [ID]\n"
               "                 a fresh cluster key file line (key id ID, default 1), printed,\n"
               "                 or written to a new FILE of mode 0600\n"
               "  sl KEY [SPEC] [QTY q] [PEEK]   (also throttle-ex)\n"
               "                 SL.THROTTLE, SPEC = POLICY name | ALGO algorithm [BURST b]\n"
               "                 RATE count period_ms [PRECISION p] [WARMUP ms]\n"
               "                 [COLD f] (none: the key's policy);\n"
               "                 exits 0 allowed, 1 limited\n"
               "  acquire KEY [SPEC] [QTY q] TIMEOUT ms\n"
               "                 waits up to ms for the units; exits 0 allowed, 1 limited\n"
               "  multi [QTY q] KEY k1 [SPEC] KEY k2 [SPEC] ...\n"
               "                 all or nothing over several keys; exits 0 allowed, 1 limited\n"
               "  peek KEY [SPEC]          the key's state, nothing taken\n"
               "  refund KEY [SPEC] QTY q  gives back up to q units\n"
               "  charge KEY [SPEC] QTY q  counts q units after the work (may go into debt)\n"
               "  reset KEY      forgets the key\n"
               "  lease KEY [CONCURRENCY n | POLICY name] [QTY q] [TTL ms] [TIMEOUT ms]\n"
               "                 takes a concurrency lease (always DETACH: it outlives\n"
               "                 sluicectl; its TTL or release ends it); prints its id,\n"
               "                 exits 0 granted, 1 limited\n"
               "  release KEY ID ends lease ID; exits 0 released, 1 no such lease\n"
               "  renew KEY ID [TTL ms]\n"
               "                 extends lease ID; exits 0 renewed, 1 no such lease\n"
               "  policies       the loaded policies\n"
               "  reload         reloads the daemon's config file (as SIGHUP)\n"
               "  path           prints the socket path sluicectl would use\n"
               "\n"
               "Options:\n"
               "  -s PATH        socket path (default: $SLUICE_SOCKET, else\n"
               "                 /run/sluice/sluice.sock if /run/sluice exists, else\n"
               "                 $XDG_RUNTIME_DIR/sluice/sluice.sock, else\n"
               "                 /tmp/sluice-UID/sluice.sock; `sluicectl path` prints it)\n"
               "  -h, --help     this help\n"
               "\n"
               "Exit status: 0 success (or allowed), 1 limited, 2 error.\n");
}

/* Prints a reply the way redis-cli does for a terminal: the cursor is
 * already past any "N) " prefix; nested elements align under their parent. */
static void sluicectl__print_reply(const struct sluice_reply *r, int indent)
{
    switch (r->type) {
    case SLUICE_REPLY_STRING:
        printf("\"%.*s\"\n", (int)r->len, r->str);
        break;
    case SLUICE_REPLY_STATUS:
        printf("%.*s\n", (int)r->len, r->str);
        break;
    case SLUICE_REPLY_ERROR:
        printf("(error) %.*s\n", (int)r->len, r->str);
        break;
    case SLUICE_REPLY_INTEGER:
        printf("(integer) %lld\n", (long long)r->integer);
        break;
    case SLUICE_REPLY_NIL:
        printf("(nil)\n");
        break;
    case SLUICE_REPLY_ARRAY:
        if (r->nelem == 0)
            printf("(empty array)\n");
        for (size_t i = 0; i < r->nelem; i++) {
            if (i > 0)
                printf("%*s", indent, "");
            int w = printf("%zu) ", i + 1);
            sluicectl__print_reply(r->elements[i], indent + (w > 0 ? w : 0));
        }
        break;
    }
}

static int sluicectl__run(struct sluice_client *c, int argc, const char *const *argv,
                          struct sluice_reply **reply)
{
    int rc = sluice_client_command(c, argc, argv, NULL, reply);
    if (rc < 0) {
        fprintf(stderr, "sluicectl: %s\n", sluice_strerror(rc));
        return -1;
    }
    if ((*reply)->type == SLUICE_REPLY_ERROR) {
        fprintf(stderr, "sluicectl: (error) %s\n", (*reply)->str);
        sluice_reply_free(*reply);
        *reply = NULL;
        return -1;
    }
    return 0;
}

static int sluicectl__cmd_throttle(struct sluice_client *c, int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "sluicectl: usage: throttle KEY BURST COUNT PERIOD [QTY]\n");
        return EXIT_ERR;
    }
    const char *args[6] = {"CL.THROTTLE"};
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    struct sluice_reply *r;
    if (sluicectl__run(c, argc, args, &r) < 0)
        return EXIT_ERR;
    int status = EXIT_ERR;
    if (r->type == SLUICE_REPLY_ARRAY && r->nelem == 5) {
        int64_t v[5];
        int ok = 1;
        for (int i = 0; i < 5; i++) {
            ok &= r->elements[i]->type == SLUICE_REPLY_INTEGER;
            v[i] = r->elements[i]->integer;
        }
        if (ok) {
            printf("%s  limit=%lld remaining=%lld retry_after=%llds reset_after=%llds\n",
                   v[0] ? "limited" : "allowed", (long long)v[1], (long long)v[2], (long long)v[3],
                   (long long)v[4]);
            status = v[0] ? EXIT_LIMITED : 0;
        }
    }
    if (status == EXIT_ERR)
        fprintf(stderr, "sluicectl: unexpected reply to CL.THROTTLE\n");
    sluice_reply_free(r);
    return status;
}

static int sluicectl__cmd_simple(struct sluice_client *c, int argc, const char *const *argv)
{
    struct sluice_reply *r;
    if (sluicectl__run(c, argc, argv, &r) < 0)
        return EXIT_ERR;
    if (r->type == SLUICE_REPLY_STRING && argc >= 1 && strcasecmp(argv[0], "INFO") == 0)
        printf("%.*s\n", (int)r->len, r->str); /* INFO text as is */
    else
        sluicectl__print_reply(r, 0);
    sluice_reply_free(r);
    return 0;
}

/* Walks SCAN until the cursor comes back to 0, printing every key. */
static int sluicectl__cmd_keys(struct sluice_client *c, int argc, char **argv)
{
    char cursor[24] = "0";
    do {
        const char *a[6] = {"SCAN", cursor, "COUNT", "1000", "MATCH", argc > 1 ? argv[1] : "*"};
        struct sluice_reply *r;
        if (sluicectl__run(c, 6, a, &r) < 0)
            return EXIT_ERR;
        if (r->type != SLUICE_REPLY_ARRAY || r->nelem != 2 ||
            r->elements[0]->type != SLUICE_REPLY_STRING || r->elements[0]->len >= sizeof(cursor) ||
            r->elements[1]->type != SLUICE_REPLY_ARRAY) {
            fprintf(stderr, "sluicectl: unexpected reply to SCAN\n");
            sluice_reply_free(r);
            return EXIT_ERR;
        }
        memcpy(cursor, r->elements[0]->str, r->elements[0]->len + 1);
        const struct sluice_reply *keys = r->elements[1];
        for (size_t i = 0; i < keys->nelem; i++) {
            if (keys->elements[i]->type == SLUICE_REPLY_STRING) {
                fwrite(keys->elements[i]->str, 1, keys->elements[i]->len, stdout);
                fputc('\n', stdout);
            }
        }
        sluice_reply_free(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* Text of a scalar reply element (integers and strings), for tables. */
static const char *sluicectl__cell_text(const struct sluice_reply *e, char *buf, size_t cap)
{
    if (e->type == SLUICE_REPLY_INTEGER)
        snprintf(buf, cap, "%lld", (long long)e->integer);
    else if (e->type == SLUICE_REPLY_STRING || e->type == SLUICE_REPLY_STATUS)
        snprintf(buf, cap, "%.*s", (int)e->len, e->str);
    else
        snprintf(buf, cap, "-");
    return buf;
}

/* SL.MEMBERS as a table. */
static int sluicectl__cmd_members(struct sluice_client *c)
{
    const char *a[1] = {"SL.MEMBERS"};
    struct sluice_reply *r;
    if (sluicectl__run(c, 1, a, &r) < 0)
        return EXIT_ERR;
    if (r->type != SLUICE_REPLY_ARRAY) {
        fprintf(stderr, "sluicectl: unexpected reply to SL.MEMBERS\n");
        sluice_reply_free(r);
        return EXIT_ERR;
    }
    printf("%-24s %-24s %-8s %s\n", "NAME", "ADDRESS", "STATE", "LAST HEARD");
    for (size_t i = 0; i < r->nelem; i++) {
        const struct sluice_reply *m = r->elements[i];
        if (m->type != SLUICE_REPLY_ARRAY || m->nelem < 6)
            continue;
        char f[4][80];
        for (int k = 0; k < 4; k++)
            sluicectl__cell_text(m->elements[k], f[k], sizeof(f[k]));
        int self = m->elements[5]->type == SLUICE_REPLY_INTEGER && m->elements[5]->integer;
        int64_t ago = m->elements[3]->type == SLUICE_REPLY_INTEGER ? m->elements[3]->integer : -1;
        if (self)
            printf("%-24s %-24s %-8s (this node)\n", f[0], f[1], f[2]);
        else if (ago < 0)
            printf("%-24s %-24s %-8s never\n", f[0], f[1], f[2]);
        else
            printf("%-24s %-24s %-8s %lld.%03llds ago\n", f[0], f[1], f[2], (long long)(ago / 1000),
                   (long long)(ago % 1000));
    }
    sluice_reply_free(r);
    return 0;
}

/* SL.KEY: "field: value" lines, then one line per slot. */
static int sluicectl__cmd_key(struct sluice_client *c, int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "sluicectl: usage: key KEY\n");
        return EXIT_ERR;
    }
    const char *a[2] = {"SL.KEY", argv[1]};
    struct sluice_reply *r;
    if (sluicectl__run(c, 2, a, &r) < 0)
        return EXIT_ERR;
    if (r->type == SLUICE_REPLY_NIL) {
        printf("no global state for '%s' on this node\n", argv[1]);
        sluice_reply_free(r);
        return EXIT_LIMITED;
    }
    if (r->type != SLUICE_REPLY_ARRAY || r->nelem % 2 != 0) {
        fprintf(stderr, "sluicectl: unexpected reply to SL.KEY\n");
        sluice_reply_free(r);
        return EXIT_ERR;
    }
    char k[80], v[80];
    for (size_t i = 0; i + 1 < r->nelem; i += 2) {
        const struct sluice_reply *val = r->elements[i + 1];
        sluicectl__cell_text(r->elements[i], k, sizeof(k));
        if (val->type != SLUICE_REPLY_ARRAY) {
            printf("%s: %s\n", k, sluicectl__cell_text(val, v, sizeof(v)));
            continue;
        }
        printf("%s: %zu\n", k, val->nelem);
        printf("  %-24s %-16s %10s %10s %7s %9s %7s %8s\n", "NODE", "LIFE", "ADMITTED", "DEMAND/s",
               "SHARE", "REPORTING", "FROZEN", "AGE(ms)");
        for (size_t j = 0; j < val->nelem; j++) {
            const struct sluice_reply *s = val->elements[j];
            if (s->type != SLUICE_REPLY_ARRAY || s->nelem < 8)
                continue;
            char f[8][80];
            for (int x = 0; x < 8; x++)
                sluicectl__cell_text(s->elements[x], f[x], sizeof(f[x]));
            printf("  %-24s %-16s %10s %10s %7s %9s %7s %8s\n", f[0], f[1], f[2], f[3], f[4], f[5],
                   f[6], f[7]);
        }
    }
    sluice_reply_free(r);
    return 0;
}

/* A key file line: "ID HEX use" (see gossip/keyring.h for the format),
 * on stdout or, with -o FILE, into a new file only its owner can read
 * (created with O_EXCL and mode 0600 whatever the umask says). */
static int sluicectl__cmd_keygen(int argc, char **argv)
{
    long id = 1;
    const char *out = NULL;
    int i = 1;
    if (argc >= 3 && strcmp(argv[1], "-o") == 0) {
        out = argv[2];
        i = 3;
    }
    if (argc - i > 1) {
        fprintf(stderr, "sluicectl: usage: keygen [-o FILE] [ID]\n");
        return EXIT_ERR;
    }
    if (argc - i == 1) {
        char *end;
        errno = 0;
        id = strtol(argv[i], &end, 10);
        if (errno != 0 || *end != '\0' || argv[i][0] == '\0' || id < 0 || id > 255) {
            fprintf(stderr, "sluicectl: keygen: ID must be 0..255, got '%s'\n", argv[i]);
            return EXIT_ERR;
        }
    }
    uint8_t key[GOSSIP_KEY_BYTES];
    char hex[GOSSIP_KEY_HEX_BYTES];
    char line[GOSSIP_KEY_HEX_BYTES + 16];
    gossip_keyring_generate_key(key);
    gossip_keyring_key_to_hex(key, hex);
    int n = snprintf(line, sizeof(line), "%ld %s use\n", id, hex);
    int rc = 0;
    if (out == NULL) {
        fputs(line, stdout);
    } else {
        int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || fchmod(fd, 0600) != 0 || write(fd, line, (size_t)n) != (ssize_t)n) {
            fprintf(stderr, "sluicectl: keygen: cannot write %s: %s%s\n", out, strerror(errno),
                    errno == EEXIST ? " (it exists: keygen never overwrites a key file)" : "");
            rc = EXIT_ERR;
        }
        if (fd >= 0 && close(fd) != 0)
            rc = EXIT_ERR;
    }
    memset(key, 0, sizeof(key));
    memset(hex, 0, sizeof(hex));
    memset(line, 0, sizeof(line));
    return rc;
}

/* sluicectl words for the SL.* commands. */
static const char *sluicectl__sl_command(const char *word)
{
    static const char *const map[][2] = {
        {"sl", "SL.THROTTLE"},   {"throttle-ex", "SL.THROTTLE"}, {"acquire", "SL.ACQUIRE"},
        {"multi", "SL.MULTI"},   {"refund", "SL.REFUND"},        {"reset", "SL.RESET"},
        {"peek", "SL.PEEK"},     {"policies", "SL.POLICIES"},    {"reload", "SL.RELOAD"},
        {"charge", "SL.CHARGE"}, {"lease", "SL.LEASE"},          {"release", "SL.RELEASE"},
        {"renew", "SL.RENEW"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strcmp(word, map[i][0]) == 0)
            return map[i][1];
    }
    return NULL;
}

/* Prints one SL decision ([limited, limit, remaining, retry_ms, reset_ms
 * (, waited_ms)]); returns its limited flag, or -1 if r is not one. */
static int sluicectl__print_decision(const struct sluice_reply *r, const char *indent)
{
    int64_t v[6];
    if (r->type != SLUICE_REPLY_ARRAY || (r->nelem != 5 && r->nelem != 6))
        return -1;
    for (size_t i = 0; i < r->nelem; i++) {
        if (r->elements[i]->type != SLUICE_REPLY_INTEGER)
            return -1;
        v[i] = r->elements[i]->integer;
    }
    printf("%s%s  limit=%lld remaining=%lld retry_after=%lldms reset_after=%lldms", indent,
           v[0] ? "limited" : "allowed", (long long)v[1], (long long)v[2], (long long)v[3],
           (long long)v[4]);
    if (r->nelem == 6)
        printf(" waited=%lldms", (long long)v[5]);
    printf("\n");
    return v[0] != 0;
}

/* The SL.* subcommands: sends the command with the user's arguments and
 * prints decisions in words.  Exit status: 0 allowed (or done), 1 limited,
 * 2 error. */
/* SL.LEASE's reply [limited, limit, remaining, retry_ms, id, ttl_ms,
 * waited_ms] in words; returns its limited flag, or -1 if r is not one. */
static int sluicectl__print_lease(const struct sluice_reply *r)
{
    int64_t v[7];
    if (r->type != SLUICE_REPLY_ARRAY || r->nelem != 7)
        return -1;
    for (size_t i = 0; i < 7; i++) {
        if (r->elements[i]->type != SLUICE_REPLY_INTEGER)
            return -1;
        v[i] = r->elements[i]->integer;
    }
    if (v[0] == 0)
        printf("granted  id=%lld ttl=%lldms limit=%lld remaining=%lld waited=%lldms\n",
               (long long)v[4], (long long)v[5], (long long)v[1], (long long)v[2], (long long)v[6]);
    else
        printf("limited  limit=%lld remaining=%lld retry_after=%lldms waited=%lldms\n",
               (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[6]);
    return v[0] != 0;
}

static int sluicectl__cmd_sl(struct sluice_client *c, const char *slcmd, int argc, char **argv)
{
    /* A lease taken here would end with sluicectl's connection: DETACH. */
    int detach = strcmp(slcmd, "SL.LEASE") == 0;
    const char **a = calloc((size_t)argc + 1, sizeof(*a));
    if (a == NULL)
        return EXIT_ERR;
    a[0] = slcmd;
    for (int i = 1; i < argc; i++) {
        a[i] = argv[i];
        if (strcasecmp(argv[i], "DETACH") == 0)
            detach = 0;
    }
    if (detach)
        a[argc] = "DETACH";
    struct sluice_reply *r;
    int rc = sluicectl__run(c, argc + detach, a, &r);
    free(a);
    if (rc < 0)
        return EXIT_ERR;
    int status = 0;
    if (strcmp(slcmd, "SL.LEASE") == 0) {
        int limited = sluicectl__print_lease(r);
        if (limited < 0) {
            fprintf(stderr, "sluicectl: unexpected reply to %s\n", slcmd);
            status = EXIT_ERR;
        } else {
            status = limited ? EXIT_LIMITED : 0;
        }
    } else if ((strcmp(slcmd, "SL.RELEASE") == 0 || strcmp(slcmd, "SL.RENEW") == 0) &&
               r->type == SLUICE_REPLY_INTEGER) {
        int ok = strcmp(slcmd, "SL.RELEASE") == 0 ? r->integer == 1 : r->integer >= 0;
        if (!ok)
            printf("no such lease\n");
        else if (strcmp(slcmd, "SL.RELEASE") == 0)
            printf("released\n");
        else
            printf("renewed  ttl=%lldms\n", (long long)r->integer);
        status = ok ? 0 : EXIT_LIMITED;
    } else if (strcmp(slcmd, "SL.MULTI") == 0 && r->type == SLUICE_REPLY_ARRAY && r->nelem >= 1 &&
               r->elements[0]->type == SLUICE_REPLY_INTEGER) {
        status = r->elements[0]->integer ? EXIT_LIMITED : 0;
        printf("%s\n", status ? "limited (nothing taken)" : "allowed");
        for (size_t i = 1; i < r->nelem; i++)
            sluicectl__print_decision(r->elements[i], "  ");
    } else if (strcmp(slcmd, "SL.POLICIES") == 0 || strcmp(slcmd, "SL.RELOAD") == 0 ||
               strcmp(slcmd, "SL.RESET") == 0) {
        sluicectl__print_reply(r, 0);
    } else {
        int limited = sluicectl__print_decision(r, "");
        if (limited < 0) {
            fprintf(stderr, "sluicectl: unexpected reply to %s\n", slcmd);
            status = EXIT_ERR;
        } else if (strcmp(slcmd, "SL.PEEK") != 0 && strcmp(slcmd, "SL.REFUND") != 0) {
            status = limited ? EXIT_LIMITED : 0;
        }
    }
    sluice_reply_free(r);
    return status;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"socket", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *path = NULL;
    int opt;
    /* '+': stop at the first non-option so `raw` arguments may start with '-'. */
    while ((opt = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
        switch (opt) {
        case 's':
            path = optarg;
            break;
        case 'h':
            sluicectl__usage(stdout);
            return 0;
        default:
            sluicectl__usage(stderr);
            return EXIT_ERR;
        }
    }
    if (optind >= argc) {
        sluicectl__usage(stderr);
        return EXIT_ERR;
    }
    /* Named (-s) or found by default: a default path is checked before it
     * is trusted (sluice_client_connect with NULL). */
    const char *named = path;
    if (path == NULL)
        path = sluice_client_default_path();
    const char *cmd = argv[optind];
    if (strcmp(cmd, "path") == 0) {
        printf("%s\n", path);
        return 0;
    }
    int nargs = argc - optind;
    char **args = argv + optind;
    if (strcmp(cmd, "raw") == 0 && nargs < 2) {
        fprintf(stderr, "sluicectl: usage: raw ARG...\n");
        return EXIT_ERR;
    }
    if (strcmp(cmd, "keygen") == 0)
        return sluicectl__cmd_keygen(nargs, args);
    if (strcmp(cmd, "throttle") != 0 && strcmp(cmd, "ping") != 0 && strcmp(cmd, "info") != 0 &&
        strcmp(cmd, "keys") != 0 && strcmp(cmd, "raw") != 0 && strcmp(cmd, "members") != 0 &&
        strcmp(cmd, "key") != 0 && sluicectl__sl_command(cmd) == NULL) {
        fprintf(stderr, "sluicectl: unknown command '%s'\n", cmd);
        sluicectl__usage(stderr);
        return EXIT_ERR;
    }

    struct sluice_client *c;
    int rc = sluice_client_connect(named, &c);
    if (rc < 0 && rc == -SLUICE_EIO && errno == EPERM && named == NULL) {
        fprintf(stderr,
                "sluicectl: refusing %s: its directory is not this user's (or root's) with "
                "mode 0700, or the daemon answering runs as another user (name the socket "
                "with -s if you trust it)\n",
                path);
        return EXIT_ERR;
    }
    if (rc < 0) {
        fprintf(stderr, "sluicectl: cannot connect to %s: %s\n", path,
                rc == -SLUICE_EIO ? strerror(errno) : sluice_strerror(rc));
        return EXIT_ERR;
    }
    int status;
    if (strcmp(cmd, "throttle") == 0) {
        status = sluicectl__cmd_throttle(c, nargs, args);
    } else if (sluicectl__sl_command(cmd) != NULL) {
        status = sluicectl__cmd_sl(c, sluicectl__sl_command(cmd), nargs, args);
    } else if (strcmp(cmd, "keys") == 0) {
        status = sluicectl__cmd_keys(c, nargs, args);
    } else if (strcmp(cmd, "members") == 0) {
        status = sluicectl__cmd_members(c);
    } else if (strcmp(cmd, "key") == 0) {
        status = sluicectl__cmd_key(c, nargs, args);
    } else if (strcmp(cmd, "ping") == 0) {
        const char *a[1] = {"PING"};
        status = sluicectl__cmd_simple(c, 1, a);
    } else if (strcmp(cmd, "info") == 0) {
        const char *a[2] = {"INFO", nargs > 1 ? args[1] : NULL};
        status = sluicectl__cmd_simple(c, nargs > 1 ? 2 : 1, a);
    } else {
        status = sluicectl__cmd_simple(c, nargs - 1, (const char *const *)(args + 1));
    }
    sluice_client_close(c);
    return status;
}
