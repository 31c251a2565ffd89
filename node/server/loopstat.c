/* loopstat: the event loop's turn durations (see loopstat.h). */
#include "loopstat.h"

#include "sluice/error.h"

static void loopstat__on_prepare(uv_prepare_t *h)
{
    struct loopstat *ls = h->data;
    uint64_t now = uv_hrtime();
    uint64_t idle = uv_metrics_idle_time(h->loop);
    uint64_t work = 0;
    if (ls->last_ns != 0) {
        uint64_t span = now - ls->last_ns, waited = idle - ls->last_idle_ns;
        work = span > waited ? span - waited : 0;
        ls->turns++;
        if (work > ls->max_turn_ns)
            ls->max_turn_ns = work;
        int b = 0;
        while (b < METRICS_LATENCY_BUCKETS && (int64_t)work > metrics_latency_bounds_ns[b])
            b++;
        ls->hist.buckets[b]++;
        ls->hist.count++;
        ls->hist.sum_ns += work;
    }
    /* The CPU the thread used over a turn, at most its work: a turn whose
     * work is long but whose CPU is short was waiting for a CPU the host
     * gave to others.  Read for a sample of the turns (the first, one in
     * CPUTIME_SAMPLE_EVERY and every one after a long turn; one reading
     * ends a sampled turn and starts the next) and at the end of every
     * long one: a long turn not sampled is measured from the last reading,
     * an upper bound that counts the short turns since, fewer than
     * CPUTIME_SAMPLE_EVERY of them. */
    int take = cputime_sample_take(&ls->sample, work) || ls->last_ns == 0;
    if (ls->cpu_open || take) {
        uint64_t cpu = cputime_thread_ns();
        if (ls->last_cpu_ns != 0 && (ls->cpu_open || work >= CPUTIME_LONG_NS)) {
            uint64_t used = cpu > ls->last_cpu_ns ? cpu - ls->last_cpu_ns : 0;
            if (used > work)
                used = work; /* the poll's system call, or turns before */
            if (used > ls->max_turn_cpu_ns)
                ls->max_turn_cpu_ns = used;
        }
        ls->last_cpu_ns = cpu;
        ls->cpu_open = take;
    }
    ls->last_ns = now;
    ls->last_idle_ns = idle;
}

int loopstat_start(struct loopstat *ls, uv_loop_t *loop)
{
    if (uv_loop_configure(loop, UV_METRICS_IDLE_TIME) != 0 ||
        uv_prepare_init(loop, &ls->prepare) != 0)
        return -SLUICE_EIO;
    ls->prepare.data = ls;
    ls->started = 1;
    if (uv_prepare_start(&ls->prepare, loopstat__on_prepare) != 0) {
        loopstat_stop(ls);
        return -SLUICE_EIO;
    }
    /* The measure must not keep the loop alive on its own. */
    uv_unref((uv_handle_t *)&ls->prepare);
    return 0;
}

void loopstat_stop(struct loopstat *ls)
{
    if (!ls->started)
        return;
    ls->started = 0;
    uv_close((uv_handle_t *)&ls->prepare, NULL);
}

void loopstat_reset_max(struct loopstat *ls)
{
    ls->max_turn_ns = 0;
    ls->max_turn_cpu_ns = 0;
}
