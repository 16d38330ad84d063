/* CLOCK_MONOTONIC in nanoseconds: host-wide, so processes of one region can compare stamps. */
#ifndef GS_CLOCK_H
#define GS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gs_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
