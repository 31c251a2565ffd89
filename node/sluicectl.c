/*
 * sluicectl: command-line client for sluiced.
 *
 *   sluicectl [-s PATH] throttle KEY BURST COUNT PERIOD [QTY]
 *   sluicectl [-s PATH] ping | info [SECTION] | keys [PATTERN] | raw ARG...
 *
 * Exit status: throttle exits 0 when allowed, 1 when limited; every command
 * exits 2 on an error (connection, protocol, or an error reply).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/client.h"
#include "sluice/error.h"

#define EXIT_LIMITED 1
#define EXIT_ERR     2

static void usage(FILE *f)
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
               "\n"
               "Options:\n"
               "  -s PATH        socket path (default: $SLUICE_SOCKET, else\n"
               "                 /run/sluice/sluice.sock if /run/sluice exists, else\n"
               "                 /tmp/sluice.sock)\n"
               "  -h, --help     this help\n"
               "\n"
               "Exit status: 0 success (or allowed), 1 limited, 2 error.\n");
}

/* Prints a reply the way redis-cli does for a terminal: the cursor is
 * already past any "N) " prefix; nested elements align under their parent. */
static void print_reply(const struct sluice_reply *r, int indent)
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
            print_reply(r->elements[i], indent + (w > 0 ? w : 0));
        }
        break;
    }
}

static int run(struct sluice_client *c, int argc, const char *const *argv,
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

static int cmd_throttle(struct sluice_client *c, int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "sluicectl: usage: throttle KEY BURST COUNT PERIOD [QTY]\n");
        return EXIT_ERR;
    }
    const char *args[6] = {"CL.THROTTLE"};
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    struct sluice_reply *r;
    if (run(c, argc, args, &r) < 0)
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

static int cmd_simple(struct sluice_client *c, int argc, const char *const *argv)
{
    struct sluice_reply *r;
    if (run(c, argc, argv, &r) < 0)
        return EXIT_ERR;
    if (r->type == SLUICE_REPLY_STRING && argc >= 1 && strcasecmp(argv[0], "INFO") == 0)
        printf("%.*s\n", (int)r->len, r->str); /* INFO text as is */
    else
        print_reply(r, 0);
    sluice_reply_free(r);
    return 0;
}

/* Walks SCAN until the cursor comes back to 0, printing every key. */
static int cmd_keys(struct sluice_client *c, int argc, char **argv)
{
    char cursor[24] = "0";
    do {
        const char *a[6] = {"SCAN", cursor, "COUNT", "1000", "MATCH", argc > 1 ? argv[1] : "*"};
        struct sluice_reply *r;
        if (run(c, 6, a, &r) < 0)
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
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_ERR;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_ERR;
    }
    if (path == NULL)
        path = sluice_client_default_path();
    const char *cmd = argv[optind];
    int nargs = argc - optind;
    char **args = argv + optind;
    if (strcmp(cmd, "raw") == 0 && nargs < 2) {
        fprintf(stderr, "sluicectl: usage: raw ARG...\n");
        return EXIT_ERR;
    }
    if (strcmp(cmd, "throttle") != 0 && strcmp(cmd, "ping") != 0 && strcmp(cmd, "info") != 0 &&
        strcmp(cmd, "keys") != 0 && strcmp(cmd, "raw") != 0) {
        fprintf(stderr, "sluicectl: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_ERR;
    }

    struct sluice_client *c;
    int rc = sluice_client_connect(path, &c);
    if (rc < 0) {
        fprintf(stderr, "sluicectl: cannot connect to %s: %s\n", path,
                rc == -SLUICE_EIO ? strerror(errno) : sluice_strerror(rc));
        return EXIT_ERR;
    }
    int status;
    if (strcmp(cmd, "throttle") == 0) {
        status = cmd_throttle(c, nargs, args);
    } else if (strcmp(cmd, "keys") == 0) {
        status = cmd_keys(c, nargs, args);
    } else if (strcmp(cmd, "ping") == 0) {
        const char *a[1] = {"PING"};
        status = cmd_simple(c, 1, a);
    } else if (strcmp(cmd, "info") == 0) {
        const char *a[2] = {"INFO", nargs > 1 ? args[1] : NULL};
        status = cmd_simple(c, nargs > 1 ? 2 : 1, a);
    } else {
        status = cmd_simple(c, nargs - 1, (const char *const *)(args + 1));
    }
    sluice_client_close(c);
    return status;
}
