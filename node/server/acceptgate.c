/* acceptgate: a per-turn budget of accepts for one listener (acceptgate.h). */
#include "acceptgate.h"

#include "sluice/error.h"

static void acceptgate__turn_end(uv_check_t *h)
{
    struct acceptgate *g = h->data;
    g->used = 0;
}

static void acceptgate__resume(uv_idle_t *h)
{
    struct acceptgate *g = h->data;
    uv_idle_stop(h);
    g->deferred = 0;
    /* The connection libuv holds for us: the callback's uv_accept takes it
     * and starts watching the listener again. */
    g->cb(g->listener, 0);
}

int acceptgate_init(struct acceptgate *g, uv_loop_t *loop, uv_stream_t *listener,
                    uv_connection_cb cb, unsigned max)
{
    g->listener = listener;
    g->cb = cb;
    g->max = max != 0 ? max : ACCEPTGATE_DEFAULT;
    g->used = 0;
    g->deferred = 0;
    g->deferrals = 0;
    if (uv_idle_init(loop, &g->idle) != 0)
        return -SLUICE_EIO;
    if (uv_check_init(loop, &g->check) != 0) {
        uv_close((uv_handle_t *)&g->idle, NULL);
        return -SLUICE_EIO;
    }
    g->idle.data = g;
    g->check.data = g;
    uv_check_start(&g->check, acceptgate__turn_end);
    uv_unref((uv_handle_t *)&g->check); /* does not keep the loop alive */
    g->inited = 1;
    return 0;
}

int acceptgate_admit(struct acceptgate *g)
{
    if (!g->inited)
        return 1;
    /* The accepts of a turn run back to back (libuv's accept loop, or the
     * resume and then the poll's), so the time since the first is theirs. */
    uint64_t now = uv_hrtime();
    if (g->used == 0)
        g->first_ns = now;
    if (g->used < g->max && now - g->first_ns < ACCEPTGATE_BUDGET_NS) {
        g->used++;
        return 1;
    }
    if (!g->deferred) {
        g->deferred = 1;
        g->deferrals++;
        uv_idle_start(&g->idle, acceptgate__resume);
    }
    return 0;
}

void acceptgate_close(struct acceptgate *g)
{
    if (!g->inited)
        return;
    g->inited = 0;
    g->deferred = 0;
    uv_close((uv_handle_t *)&g->idle, NULL);
    uv_close((uv_handle_t *)&g->check, NULL);
}
