/* engine/core/clock.h - the monotonic clock every timing in Trident reads. */
#ifndef TRIDENT_ENGINE_CORE_CLOCK_H
#define TRIDENT_ENGINE_CORE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (for intervals only). */
static inline double tri_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
