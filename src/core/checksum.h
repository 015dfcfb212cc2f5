/* checksum.h — the expert-copy integrity checksum (docs/ARCHITECTURE.md section 5), computed identically
 * on the host (when a bank is filled) and on the device (on the copied slot): the wrapping sum
 * over 64-bit words of mix64(word ^ index * C). Order-independent, so the device can reduce in
 * parallel; a zeroed or skipped copy changes it with near certainty. Pure functions. */
#ifndef FT_CORE_CHECKSUM_H
#define FT_CORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FT_HD __host__ __device__
#else
#define FT_HD
#endif

#define FT_CHECKSUM_K 0x9e3779b97f4a7c15ull

static inline FT_HD uint64_t ft_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Host side. bytes need not be a multiple of 8 (the tail word is zero-padded). */
static inline uint64_t ft_checksum(const void *p, size_t bytes) {
    const uint8_t *b = (const uint8_t *)p;
    uint64_t s = 0;
    size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++) {
        uint64_t w;
        memcpy(&w, b + 8 * i, 8);
        s += ft_mix64(w ^ (uint64_t)i * FT_CHECKSUM_K);
    }
    if (bytes % 8) {
        uint64_t w = 0;
        memcpy(&w, b + 8 * n, bytes % 8);
        s += ft_mix64(w ^ (uint64_t)n * FT_CHECKSUM_K);
    }
    return s;
}

#endif
