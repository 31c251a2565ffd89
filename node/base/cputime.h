/*
 * cputime: the calling thread's CPU time, to tell a stretch of work's own
 * cost from the time its thread waited for a CPU a busy host gave to
 * others (loopstat's turns, the cluster's replication slices), and which
 * of those stretches to measure.
 */
#ifndef SLUICE_CPUTIME_H
#define SLUICE_CPUTIME_H

#include <stdint.h>
#include <time.h>

/* The calling thread's CPU time in ns; 0 if the clock cannot be read (a
 * maximum of differences then stays 0). */
static inline uint64_t cputime_thread_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Which stretches of work (loop turns, replication slices) have their CPU
 * read.  The thread's CPU clock is a system call (no vDSO for it, and it
 * takes the run queue's lock): read at every loop turn it cost a
 * standalone node 6% of its CPU under 50 unpipelined clients (4.49 to
 * 5.09 us a request against 4.19 to 4.79 without), where a turn answers
 * two requests.  A sample tells a long stretch's own work from a wait for
 * a CPU as well: one stretch in CPUTIME_SAMPLE_EVERY, and every one that
 * follows a stretch of CPUTIME_LONG_NS or more (long stretches come in
 * runs: a backlog, a crowd of clients), where a read costs under 0.5% of
 * the stretch. */
#define CPUTIME_SAMPLE_EVERY 16u
#define CPUTIME_LONG_NS      100000u

struct cputime_sample {
    unsigned skipped; /* stretches not measured since the last one measured */
};

/* Whether to read the CPU for the stretch starting now, the one before it
 * having lasted prev_ns (wall time). */
static inline int cputime_sample_take(struct cputime_sample *s, uint64_t prev_ns)
{
    if (prev_ns >= CPUTIME_LONG_NS || ++s->skipped >= CPUTIME_SAMPLE_EVERY) {
        s->skipped = 0;
        return 1;
    }
    return 0;
}

#endif
