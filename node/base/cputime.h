/*
 * cputime: the calling thread's CPU time, to tell a stretch of work's own
 * cost from the time its thread waited for a CPU a busy host gave to
 * others (loopstat's turns, the cluster's replication slices).
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

#endif
