/*
 * Fuzz target: the config parser on arbitrary bytes.  Every input must be
 * either loaded (and then freed, and turned into a policy set whose lookups
 * work) or refused with a message; nothing may crash or leak (ASan).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *const *fuzz_seed_inputs(size_t **lens);

static const char *const seeds[] = {
    "[sluiced]\nsocket = /run/sluice/sluice.sock\nsocket_mode = 0660\nmax_keys = 1000\n"
    "on_full = deny\nlog_level = debug\nmetrics = 127.0.0.1:9464\n",
    "[cluster]\nnode_name = a\ngossip_bind = 0.0.0.0:7946\njoin = a:1, b:2\n"
    "cluster_label = x\ndefault_scope = global\ngossip_interval_ms = 100\n",
    "[policy reply]\nalgorithm = gcra\nburst = 15\nrate = 30 per 60s\nscope = global\n"
    "partition = share\nmatch = reply:\ndry_run = false\n",
    "[policy w]\nalgorithm = sliding-window\nrate = 100 per 1m\nprecision = 10\nmatch = w:\n"
    "[policy l]\nalgorithm = sliding-log\nrate = 5 per 500ms\nscope = local\n",
    NULL,
};
const char *const *fuzz_seed_inputs(size_t **lens)
{
    (void)lens; /* text seeds: the driver takes their strlen */
    return seeds;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config cfg;
    char err[256];
    if (config_load_buffer("fuzz", (const char *)data, size, &cfg, err, sizeof(err)) == 0) {
        struct policy_set *set;
        if (policy_set_build(cfg.policies, cfg.npolicies, &set) == 0) {
            for (size_t i = 0; i < policy_set_count(set); i++) {
                const struct policy *p = policy_set_at(set, i);
                if (policy_set_find(set, p->name, strlen(p->name)) != p)
                    __builtin_trap();
                if (p->match != NULL && policy_set_match(set, p->match, p->match_len) != p)
                    __builtin_trap();
            }
            (void)policy_set_match(set, (const char *)data, size);
            policy_set_release(set);
        }
        config_free(&cfg);
    } else if (err[0] == '\0') {
        __builtin_trap(); /* every refusal says why */
    }
    return 0;
}
