/*
 * Fuzz target: the SL.* commands' argument parsing and execution.  Each
 * input line is split on spaces into arguments and run by commands_sl,
 * alternately in RESP2 and RESP3, against a limiter with a few policies
 * and the waiting acquire on a real loop (without a connection a waiting
 * acquire is withdrawn at once, which exercises submit and cancel).
 * Checks that no argument list crashes, trips a sanitizer or leaks, and
 * that every command appends exactly one reply starting with a RESP type.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "commands.h"
#include "commands_sl.h"
#include "config.h"
#include "limiter.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static const char *const seeds[] = {
    "SL.THROTTLE login:a\nSL.THROTTLE k ALGO gcra BURST 3 RATE 5 1000 QTY 2\n"
    "SL.PEEK k ALGO gcra BURST 3 RATE 5 1000\n",
    "SL.MULTI QTY 2 KEY a ALGO fixed-window RATE 3 100 KEY login:b KEY c POLICY api\n",
    "SL.ACQUIRE k ALGO sliding-log RATE 1 100000 TIMEOUT 50\nSL.ACQUIRE k ALGO sliding-log "
    "RATE 1 100000 TIMEOUT 500000\n",
    "SL.REFUND api:x QTY 9223372036854775807\nSL.RESET api:x\nSL.POLICIES\nSL.RELOAD\n",
    "SL.THROTTLE k ALGO sliding-window RATE 9223372036854775807 1 PRECISION 1000\n",
    "SL.THROTTLE k ALGO token-bucket BURST 9223372036854775806 RATE 1 9223372036854775807\n",
    NULL,
};
const char *const *fuzz_seed_inputs(size_t **lens)
{
    (void)lens; /* text seeds: the driver takes their strlen */
    return seeds;
}

static const char conf[] = "[policy login]\nalgorithm = sliding-log\nrate = 3 per 1m\n"
                           "match = login:\n"
                           "[policy api]\nalgorithm = sliding-window\nrate = 10 per 1s\n"
                           "precision = 4\nmatch = api:\ndry_run = true\n";

static uv_loop_t loop;
static struct limiter *lim;
static struct commands_sl *sl;

static void init_once(void)
{
    struct config cfg;
    struct policy_set *set;
    char err[256];
    struct commands_sl_config scfg = {.loop = &loop, .max_key_bytes = 64};
    if (sl != NULL)
        return;
    if (uv_loop_init(&loop) != 0 || limiter_create(&lim, NULL) < 0 ||
        config_load_buffer("fuzz.conf", conf, sizeof(conf) - 1, &cfg, err, sizeof(err)) < 0)
        abort();
    if (policy_set_build(cfg.policies, cfg.npolicies, &set) < 0)
        abort();
    config_free(&cfg);
    limiter_set_policies(lim, set);
    policy_set_release(set);
    if (commands_sl_create(lim, &scfg, &sl) < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct resp_buf out;
    const char *argv[40];
    size_t argvlen[40];
    size_t start = 0, line = 0;
    init_once();
    resp_buf_init(&out);
    while (start < size) {
        size_t end = start;
        while (end < size && data[end] != '\n')
            end++;
        size_t argc = 0, i = start;
        while (i < end && argc < 40) {
            while (i < end && data[i] == ' ')
                i++;
            if (i == end)
                break;
            size_t j = i;
            while (j < end && data[j] != ' ')
                j++;
            argv[argc] = (const char *)data + i;
            argvlen[argc] = j - i;
            argc++;
            i = j;
        }
        commands_sl_fn fn = argc > 0 ? commands_row_sl(commands_find(argv[0], argvlen[0])) : NULL;
        if (fn != NULL) {
            size_t before = out.len;
            fn(sl, NULL, (int)(line & 1), argc, argv, argvlen, &out);
            if (out.len == before || strchr("*%:-+$_", out.data[before]) == NULL)
                abort();
        }
        line++;
        start = end + 1;
    }
    resp_buf_free(&out);
    /* Let retired acquire queues' timers close. */
    uv_run(&loop, UV_RUN_NOWAIT);
    return 0;
}
