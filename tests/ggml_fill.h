/* ggml_fill.h — test helper: random matrices in any expert format (bf16/f16/f32 values, or
 * GGML blocks of random bytes with sane scale fields so the weights are O(0.05) and centred).
 * Block values are whatever format/ggml_quant.c's exact dequantiser says they are. */
#ifndef FT_TESTS_GGML_FILL_H
#define FT_TESTS_GGML_FILL_H

#include <stdint.h>
#include <string.h>

#include "core/rng.h"
#include "format/ggml_quant.h"
#include "format/quant.h"

static inline float fill_frand(uint64_t *rng) { /* uniform in [-1, 1) */
    return (float)((double)(ft_rng_next(rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline void fill_put_f16(uint8_t *p, float f) {
    uint16_t h = ft_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* rows x cols of format t at p (rows of ft_dtype_row_bytes(t, cols) bytes). */
static inline void fill_matrix(enum ft_dtype t, uint8_t *p, int rows, int cols, uint64_t *rng) {
    size_t rb = ft_dtype_row_bytes(t, cols);
    for (size_t i = 0; i < rb * (size_t)rows; i++) p[i] = (uint8_t)(ft_rng_next(rng) >> 24);
    if (t == FT_DTYPE_FP8_B128) { /* per row: block scales, then e4m3 codes (no NaN codes) */
        size_t nb = ((size_t)cols + 127) / 128;
        for (int r = 0; r < rows; r++) {
            uint8_t *row = p + (size_t)r * rb;
            for (size_t b = 0; b < nb; b++) {
                float s = 1e-4f * (1.5f + fill_frand(rng));
                memcpy(row + 4 * b, &s, 4);
            }
            for (int i = 0; i < cols; i++)
                if ((row[4 * nb + i] & 0x7f) == 0x7f) row[4 * nb + i] = 0;
        }
        return;
    }
    if (t == FT_DTYPE_NVFP4) { /* per row: scale_2, e4m3 block scales (no NaN), e2m1 pairs */
        size_t ns = ((size_t)cols + 15) / 16;
        for (int r = 0; r < rows; r++) {
            uint8_t *row = p + (size_t)r * rb;
            float s2 = 1e-3f * (1.5f + fill_frand(rng));
            memcpy(row, &s2, 4);
            for (size_t b = 0; b < ns; b++) row[4 + b] = (uint8_t)(0x28 + (row[4 + b] & 0x0f));
        }
        return;
    }
    if (!ft_dtype_is_block(t)) {
        for (size_t i = 0; i < (size_t)rows * cols; i++) {
            float f = 0.05f * fill_frand(rng);
            if (t == FT_DTYPE_F32) {
                memcpy(p + 4 * i, &f, 4);
            } else if (t == FT_DTYPE_F16) {
                fill_put_f16(p + 2 * i, f);
            } else {
                uint16_t h = ft_f32_to_bf16(f);
                memcpy(p + 2 * i, &h, 2);
            }
        }
        return;
    }
    int type = ft_dtype_ggml(t), bs = ft_ggml_block_size(type);
    size_t ts = ft_ggml_type_size(type), nb = (size_t)rows * cols / bs;
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * ts;
        float d = 1e-3f * (1.5f + fill_frand(rng));
        switch (t) {
        case FT_DTYPE_Q8_0: fill_put_f16(blk, d * 0.05f); break;
        case FT_DTYPE_Q4_0: fill_put_f16(blk, d * 8); break;
        case FT_DTYPE_Q5_0: fill_put_f16(blk, d * 4); break;
        case FT_DTYPE_Q4_1: fill_put_f16(blk, d * 8), fill_put_f16(blk + 2, -d * 8 * 7.5f); break;
        case FT_DTYPE_Q5_1: fill_put_f16(blk, d * 4), fill_put_f16(blk + 2, -d * 4 * 15.5f); break;
        case FT_DTYPE_Q4_K: fill_put_f16(blk, d * 0.2f), fill_put_f16(blk + 2, d * 0.2f * 7.5f); break;
        case FT_DTYPE_Q5_K: fill_put_f16(blk, d * 0.1f), fill_put_f16(blk + 2, d * 0.1f * 15.5f); break;
        case FT_DTYPE_Q6_K: fill_put_f16(blk + 208, d * 0.05f); break;
        case FT_DTYPE_MXFP4: blk[0] = (uint8_t)(118 + (b % 4)); break; /* 2^-9 .. 2^-6 */
        default: break;
        }
    }
}

#endif
