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

#endif
