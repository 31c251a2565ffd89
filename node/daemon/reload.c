/*
 * reload: the config file's policies read again and swapped in, on the
 * loop or off it (see reload.h).
 */
#include "reload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "file.h"
#include "log.h"
#include "sluice/error.h"

/* A client blocked in SL.RELOAD until a parse answers it. */
struct reload_waiter {
    struct reload_waiter *next;
    struct server_client *c;
};

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

void reload_attach(struct reload *r, struct limiter *lim, uv_loop_t *loop)
{
    r->lim = lim;
    r->loop = loop;
}

/* Reads the file if it changed: 0 with *out a new set (one reference, the
 * caller's), 0 with *out NULL when the file is unchanged since the last
 * successful load, or a negative enum sluice_err with the reason in err
 * (config_load_file's, policy_set_build's; the same again, without
 * reading, while a broken file is unchanged).  Touches only the loader's
 * fields of r: safe in the threadpool while the loop runs. */
static int reload__load(struct reload *r, struct policy_set **out, char *err, size_t errlen)
{
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

/* Applies a load's outcome for n requests (counted each): swaps a new set
 * in, or keeps the running one and logs why. */
static void reload__apply(struct reload *r, int rc, struct policy_set *set, const char *err,
                          uint64_t n)
{
    if (rc < 0) {
        r->failures += n;
        log_error("reload failed, keeping the running policies: %s", err);
        return;
    }
    r->reloads += n;
    if (set == NULL) {
        /* The file is unchanged since the policies in use were read: a
         * successful reload with nothing to swap. */
        r->unchanged += n;
        return;
    }
    limiter_set_policies(r->lim, set);
    log_info("reloaded %s: %zu policies", r->path, policy_set_count(set));
    policy_set_release(set);
}

int reload_now(struct reload *r, char *err, size_t errlen)
{
    struct policy_set *set = NULL;
    if (r->path == NULL) {
        snprintf(err, errlen, "no config file (start sluiced with --config FILE)");
        r->failures++;
        return -SLUICE_EINVAL;
    }
    int rc = reload__load(r, &set, err, errlen);
    reload__apply(r, rc, rc < 0 ? NULL : set, err, 1);
    return rc < 0 ? rc : 0;
}

static void reload__run(struct reload *r);

/* In the threadpool: the loader alone touches its state, one at a time. */
static void reload__work(uv_work_t *w)
{
    struct reload *r = w->data;
    r->wset = NULL;
    r->werr[0] = '\0';
    r->wrc = reload__load(r, &r->wset, r->werr, sizeof(r->werr));
}

/* On the loop: applies the parse and answers the requests it was for. */
static void reload__done(uv_work_t *w, int status)
{
    struct reload *r = w->data;
    (void)status; /* never cancelled */
    uint64_t n = 0;
    for (struct reload_waiter *x = r->cur; x != NULL; x = x->next)
        n++;
    reload__apply(r, r->wrc, r->wrc < 0 ? NULL : r->wset, r->werr, n ? n : 1);
    /* Still busy while answering: an unblocked client's next SL.RELOAD
     * joins the next parse, which starts once all are answered. */
    r->ans = r->cur;
    r->cur = NULL;
    struct reload_waiter *x;
    while ((x = r->ans) != NULL) {
        r->ans = x->next;
        struct resp_buf *out = server_client_out(x->c);
        if (r->wrc < 0)
            resp_add_errorf(out, "ERR reload failed: %s", r->werr);
        else
            resp_add_simple(out, "OK");
        struct server_client *c = x->c;
        free(x);
        server_client_unblock(c);
    }
    r->busy = 0;
    r->cur = r->next;
    r->next = NULL;
    if (r->cur != NULL || r->again) {
        r->again = 0;
        reload__run(r);
    }
}

static void reload__run(struct reload *r)
{
    r->busy = 1;
    r->work.data = r;
    if (uv_queue_work(r->loop, &r->work, reload__work, reload__done) < 0) {
        /* Cannot happen with valid arguments; never leave a waiter hanging. */
        reload__work(&r->work);
        reload__done(&r->work, 0);
    }
}

/* A blocked SL.RELOAD's client went away: it is answered by no one. */
static void reload__cancel(struct server_client *c, void *arg)
{
    struct reload *r = arg;
    struct reload_waiter **lists[3] = {&r->cur, &r->next, &r->ans};
    for (int i = 0; i < 3; i++) {
        for (struct reload_waiter **pp = lists[i]; *pp != NULL; pp = &(*pp)->next) {
            if ((*pp)->c == c) {
                struct reload_waiter *x = *pp;
                *pp = x->next;
                free(x);
                return;
            }
        }
    }
}

int reload_start(struct reload *r, struct server_client *c)
{
    if (r->path == NULL || r->loop == NULL)
        return -SLUICE_EINVAL;
    if (c != NULL) {
        struct reload_waiter *x = calloc(1, sizeof(*x));
        if (x == NULL)
            return -SLUICE_ENOMEM;
        x->c = c;
        /* One that comes while a parse runs may have seen a newer file
         * than that parse read: the next parse answers it. */
        struct reload_waiter **list = r->busy ? &r->next : &r->cur;
        x->next = *list;
        *list = x;
        server_client_block(c, reload__cancel, r);
    } else if (r->busy) {
        r->again = 1;
    }
    if (!r->busy)
        reload__run(r);
    return 0;
}

int reload_request(void *ud, struct server_client *c, char *err, size_t errlen)
{
    struct reload *r = ud;
    /* Off the loop when there is one: a parse of a large file, or one per
     * change of a file rewritten in a loop, must not stall other clients.
     * The client waits (MULTI refuses SL.RELOAD, as it does waits). */
    if (c != NULL && r->loop != NULL && r->path != NULL) {
        int rc = reload_start(r, c);
        if (rc == 0)
            return 1;
        snprintf(err, errlen, "%s", sluice_strerror(rc));
        return rc;
    }
    return reload_now(r, err, errlen);
}

void reload_stats(void *ud, struct commands_sl_stats *out)
{
    const struct reload *r = ud;
    out->reloads = r->reloads;
    out->reload_failures = r->failures;
    out->reloads_unchanged = r->unchanged;
}
