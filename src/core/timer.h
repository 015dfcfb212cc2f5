/* timer.h — monotonic wall clock in microseconds. */
#ifndef FT_CORE_TIMER_H
#define FT_CORE_TIMER_H

#include <stdint.h>
#include <time.h>

static inline int64_t ft_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
