/*
 * reload: the policies of the config file, read again only when it changed
 * (see reload.h).
 */
#include "reload.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "file.h"
#include "sluice/error.h"

void reload_init(struct reload *r, const char *path)
{
    memset(r, 0, sizeof(*r));
    r->path = path;
}

void reload_loaded(struct reload *r, const struct stat *st)
{
    r->st = *st;
    r->have = 1;
}

int reload_policies(void *ud, struct policy_set **out, char *err, size_t errlen)
{
    struct reload *r = ud;
    struct stat now;
    *out = NULL;
    /* stat follows links (a Kubernetes ConfigMap is a symlink swapped on
     * update), and costs nothing next to a parse. */
    int seen = stat(r->path, &now) == 0;
    if (seen && r->have && file_same(&now, &r->st))
        return 0;
    if (seen && r->fail_rc < 0 && file_same(&now, &r->fail_st)) {
        snprintf(err, errlen, "%s", r->fail_err);
        return r->fail_rc;
    }
    struct config cfg;
    int rc = config_load_file(r->path, &cfg, &now, err, errlen);
    if (rc == 0) {
        rc = policy_set_build(cfg.policies, cfg.npolicies, out);
        if (rc < 0) {
            snprintf(err, errlen, "%s: cannot build the policies: %s", r->path,
                     sluice_strerror(rc));
            *out = NULL;
        }
        config_free(&cfg);
    }
    if (rc == 0) {
        reload_loaded(r, &now);
        r->fail_rc = 0;
    } else if (seen && rc != -SLUICE_ENOMEM) {
        r->fail_st = now;
        r->fail_rc = rc;
        snprintf(r->fail_err, sizeof(r->fail_err), "%s", err);
    }
    return rc;
}
