/*
 * loopstat: how long each turn of the event loop works, so a stall (a long
 * walk over keys, a slow reload) shows as a number instead of as a client's
 * timeout: INFO's loop_max_turn_us and /metrics' sluice_loop_turn_seconds.
 *
 * A turn's work is the time between two of its prepare phases less the time
 * it spent waiting in the poll (libuv's idle-time metric): the timers, the
 * I/O callbacks and everything else the loop ran in one iteration.  That is
 * wall time, so on a busy host it includes the time the thread waited for a
 * CPU; the thread's CPU time over the same span, read for a sample of the
 * turns (cputime_sample_take: one in 16, and every turn after one of
 * 100 us or more) and at the end of every long one, is kept apart
 * (loop_max_turn_cpu_us), which tells the daemon's own work from the host's
 * load.  Two clock reads per turn (the wall clock and libuv's idle time), a
 * third for a sampled or long one.
 */
#ifndef SLUICE_LOOPSTAT_H
#define SLUICE_LOOPSTAT_H

#include <stdint.h>
#include <uv.h>

#include "cputime.h"
#include "metrics.h"

struct loopstat {
    uv_prepare_t prepare;
    int started;
    uint64_t last_ns, last_idle_ns;
    uint64_t last_cpu_ns; /* the thread's CPU at the last reading (0: none yet) */
    int cpu_open;         /* the turn under way is sampled (last_cpu_ns is its start) */
    struct cputime_sample sample;
    uint64_t turns, max_turn_ns, max_turn_cpu_ns;
    struct metrics_histogram hist; /* metrics_latency_bounds_ns buckets */
};

/* Starts measuring loop's turns into ls (zeroed by the caller; owned by the
 * caller, who must call loopstat_stop and let the loop close the handle
 * before freeing it).  Turns on libuv's idle-time metric for the loop.
 * Returns 0 or -SLUICE_EIO. */
int loopstat_start(struct loopstat *ls, uv_loop_t *loop);

/* Stops measuring and closes the handle (closed at the loop's next turn). */
void loopstat_stop(struct loopstat *ls);

/* Forgets the longest turns (CONFIG RESETSTAT), so a benchmark can measure
 * its own window. */
void loopstat_reset_max(struct loopstat *ls);

#endif
