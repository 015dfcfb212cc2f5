/* rng.h — the engine's small deterministic generator (xorshift64): synthetic routing and the
 * sampler draw from it, so the same seed gives the same ids and tokens. Not for anything
 * that needs statistical strength beyond that. State must be nonzero. Pure: any thread. */
#ifndef FT_CORE_RNG_H
#define FT_CORE_RNG_H

#include <stdint.h>

static inline uint64_t ft_rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* uniform in [0, 1) with 53 bits */
static inline double ft_rng_unit(uint64_t *s) { return (double)(ft_rng_next(s) >> 11) / 9007199254740992.0; }

#endif
