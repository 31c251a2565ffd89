/*
 * reload: where SL.RELOAD and SIGHUP get their policies from (the daemon's
 * commands_sl_load_fn), so that a crowd of reload requests costs one
 * parse per change of the file, not one per request.
 *
 * The config file is read only if it is a regular file (file.h: a FIFO
 * would block the loop).  A request that finds the file unchanged since
 * the last successful load (same inode, size, mtime and ctime) answers at
 * once with no new set (the policies in use are the file's), so that 2,000
 * pipelined SL.RELOADs of a 4,096-policy file stall nobody.
 */
#ifndef SLUICE_RELOAD_H
#define SLUICE_RELOAD_H

#include <sys/stat.h>

#include "policy.h"

struct reload {
    const char *path; /* borrowed: the --config path */
    struct stat st;   /* of the last successful load */
    int have;         /* st is set */
    /* The last failed load, answered again while the file stays as it was
     * (a broken file is parsed once, not once per request). */
    struct stat fail_st;
    int fail_rc; /* 0: none */
    char fail_err[512];
};

/* Starts with nothing loaded (the first request reads the file). */
void reload_init(struct reload *r, const char *path);
/* Records the load the daemon did at start (st from config_load_file). */
void reload_loaded(struct reload *r, const struct stat *st);

/*
 * A commands_sl_load_fn (ud: struct reload *).  Returns 0 with *out a new
 * set (one reference, the caller's), 0 with *out NULL when the file is
 * unchanged since the last successful load, or a negative enum sluice_err
 * with the reason in err (config_load_file's, policy_set_build's; the same
 * again, without reading, while a broken file is unchanged).
 */
int reload_policies(void *ud, struct policy_set **out, char *err, size_t errlen);

#endif
