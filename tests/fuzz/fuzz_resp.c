/*
 * Fuzz target: the RESP parser, fed the input in chunks whose sizes derive
 * from the input itself, with every parsed command executed by the command
 * layer against a real limiter.  Checks that parsing never reads out of
 * bounds, that the same bytes give the same commands whatever the chunking,
 * and that no command handler crashes or leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "limiter.h"
#include "resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static const char *const seeds[] = {
    "*5\r\n$11\r\nCL.THROTTLE\r\n$3\r\nk:1\r\n$2\r\n15\r\n$2\r\n30\r\n$2\r\n60\r\n",
    "PING\r\nECHO hi\r\n*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n",
    "cl.throttle user 1 1 1 -1\r\nHELLO 3\r\nHELLO 2 SETNAME x\r\nINFO\r\n",
    "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$2\r\nab\r\nCOMMAND DOCS\r\nSELECT 1\r\n",
    "CL.THROTTLE k 9223372036854775807 9223372036854775807 1 9223372036854775807\r\n",
    "SCAN 0 MATCH k* COUNT 5\r\nSCAN 18446744073709551615\r\nAUTH default x\r\n",
    /* MULTI without a connection: its queue must not leak */
    "multi\r\nMULTI\r\nCL.THROTTLE k 1 1 1\r\nEXEC\r\nDISCARD\r\n",
    NULL,
};
const char *const *fuzz_seed_inputs(size_t **lens)
{
    (void)lens; /* text seeds: the driver takes their strlen */
    return seeds;
}

static struct limiter *lim;
static struct commands *cmds;

/* Parses data as one connection would receive it, in the given chunking;
 * returns a hash of all commands seen (and the error, if any). */
static uint64_t run(const uint8_t *data, size_t size, uint64_t chunk_seed, int execute)
{
    struct resp_parser p;
    resp_parser_init(&p, 4096, 64);
    struct resp_buf out;
    resp_buf_init(&out);
    char *buf = NULL;
    size_t len = 0, fed = 0;
    uint64_t h = 1469598103934665603ull;
    int failed = 0;
    while (fed < size && !failed) {
        chunk_seed = chunk_seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t take = 1 + (size_t)((chunk_seed >> 33) % 64);
        if (take > size - fed)
            take = size - fed;
        /* Fresh exact-size allocation per read: stale pointers would be caught. */
        char *nb = malloc(len + take);
        if (nb == NULL)
            break;
        if (len)
            memcpy(nb, buf, len);
        memcpy(nb + len, data + fed, take);
        free(buf);
        buf = nb;
        len += take;
        fed += take;
        size_t pos = 0;
        for (;;) {
            struct resp_cmd cmd;
            int rc = resp_parse(&p, buf + pos, len - pos, &cmd);
            if (rc == 0)
                break;
            if (rc < 0) {
                h = (h ^ (uint64_t)(-rc)) * 1099511628211ull;
                failed = 1;
                break;
            }
            if (cmd.consumed == 0 || cmd.consumed > len - pos)
                abort();
            for (size_t i = 0; i < cmd.argc; i++) {
                for (size_t j = 0; j < cmd.argvlen[i]; j++)
                    h = (h ^ (uint8_t)cmd.argv[i][j]) * 1099511628211ull;
                h = (h ^ 0x100) * 1099511628211ull;
            }
            if (execute && cmd.argc > 0) {
                out.len = 0;
                commands_dispatch(cmds, NULL, cmd.argc, cmd.argv, cmd.argvlen, &out);
                if (out.len == 0)
                    abort(); /* every command gets exactly one reply */
            }
            pos += cmd.consumed;
        }
        memmove(buf, buf + pos, len - pos);
        len -= pos;
    }
    free(buf);
    resp_buf_free(&out);
    resp_parser_free(&p);
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (lim == NULL) {
        struct limiter_config cfg = {.max_keys = 1024, .overflow = LIMITER_OVERFLOW_EVICT};
        if (limiter_create(&lim, &cfg) < 0 || commands_create(lim, NULL, &cmds) < 0)
            abort();
    }
    uint64_t s = 0;
    for (size_t i = 0; i < size && i < 8; i++)
        s = s << 8 | data[i];
    uint64_t a = run(data, size, s, 1);
    uint64_t b = run(data, size, ~s, 0);
    if (a != b)
        abort(); /* chunking changed what was parsed */
    return 0;
}
