/* timer.h — monotonic wall clock in microseconds (and nanoseconds). */
#ifndef FT_CORE_TIMER_H
#define FT_CORE_TIMER_H

#include <stdint.h>
#include <time.h>

static inline int64_t ft_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t ft_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CLOCK_REALTIME in nanoseconds: only for comparing with another clock of the same epoch
 * (the GPU's %globaltimer); intervals use ft_time_ns */
static inline int64_t ft_time_real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
