/* ggml_dq.cuh — device-side dequantisation of the block formats the experts come in (GGML
 * blocks, NVFP4 and FP8_B128 rows): 8 elements at a time (dq8) or one (dq1), each with exactly
 * the value format/ggml_quant.c and format/fp_formats.c give it. Shared by the decode GEMV and
 * dequantiser (ggml.cu) and the fused grouped GEMM (moe.cu); each including unit keeps its own
 * copy of the tables. */
#ifndef FT_BACKEND_CUDA_GGML_DQ_CUH
#define FT_BACKEND_CUDA_GGML_DQ_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "format/fp_formats.h"
#include "format/quant.h"

__device__ __forceinline__ float h2f(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
}

__device__ __forceinline__ uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 8 bytes at p, p aligned to AL bytes (1, 2, 4 or 8): one load, or two, four or eight; the
 * same bytes whichever. Block rows are only as aligned as their block size allows, and byte
 * loads, not HBM, bound the decode GEMV that reads them that way. */
template <int AL> __device__ __forceinline__ uint2 ld8(const uint8_t *p) {
    if constexpr (AL >= 8) {
        return *(const uint2 *)p;
    } else if constexpr (AL == 4) {
        const uint32_t *u = (const uint32_t *)p;
        return make_uint2(u[0], u[1]);
    } else if constexpr (AL == 2) {
        const unsigned short *h = (const unsigned short *)p;
        return make_uint2((uint32_t)h[0] | (uint32_t)h[1] << 16, (uint32_t)h[2] | (uint32_t)h[3] << 16);
    } else {
        return make_uint2(rd32(p), rd32(p + 4));
    }
}
__device__ __forceinline__ int byte_at(uint2 v, int j) { return (int)((j < 4 ? v.x : v.y) >> (8 * (j & 3)) & 0xffu); }
template <int AL> __device__ __forceinline__ float h2f_a(const uint8_t *p) {
    if constexpr (AL >= 2) return __half2float(__ushort_as_half(*(const unsigned short *)p));
    else return h2f(p);
}

/* get_scale_min_k4: the 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block */
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

__device__ __forceinline__ float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return __uint_as_float(bits);
}

static __constant__ int8_t c_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/* E2M1 values as ft_e2m1_to_f32 gives them: code 8 is -0 (GGML's MXFP4 table above has +0) */
static __constant__ float c_e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* Elements [i, i+8) of a row of K elements (i a multiple of 8) in format T into w. The rows
 * carrying their scales (format/quant.h) need K: NVFP4 [f32 scale_2][K/16 e4m3][K/2 e2m1
 * pairs, element 2j low]; FP8_B128 [ceil(K/128) f32 scale_inv][K e4m3]. AL: the alignment of
 * row (1, or dq_align<T>() when the caller knows row is that aligned): the same values, fewer
 * loads. */
template <int T> __device__ __host__ constexpr int dq_align() {
    return T == FT_DTYPE_Q4_K || T == FT_DTYPE_Q5_K ? 8 : T == FT_DTYPE_Q4_1 ? 4
           : T == FT_DTYPE_Q8_0 || T == FT_DTYPE_Q4_0 || T == FT_DTYPE_Q6_K ? 2 : 1;
}
template <int T, int AL = 1>
__device__ __forceinline__ void dq8(const uint8_t *row, int i, int K, float w[8]) {
    if (T == FT_DTYPE_NVFP4) {
        float s2 = __uint_as_float(rd32(row));
        /* (e2m1 * e4m3) is exact in fp32; then one rounding by scale_2, as the CPU does */
        float sc = ft_e4m3_to_f32(row[4 + i / 16]);
        const uint8_t *q = row + 4 + (K + 15) / 16 + i / 2;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float v = c_e2m1[j & 1 ? q[j / 2] >> 4 : q[j / 2] & 0x0f];
            w[j] = __fmul_rn(__fmul_rn(v, sc), s2);
        }
    } else if (T == FT_DTYPE_FP8_B128) {
        int nb = (K + 127) / 128;
        float sc = __uint_as_float(rd32(row + (size_t)(i / 128) * 4));
        const uint8_t *q = row + (size_t)nb * 4 + i;
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = __fmul_rn(ft_e4m3_to_f32(q[j]), sc);
    } else if (T == FT_DTYPE_Q8_0) {
        const uint8_t *b = row + (size_t)(i / 32) * 34;
        float d = h2f_a<AL>(b);
        const uint2 q = ld8<AL>(b + 2 + i % 32);
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = __fmul_rn((float)(int8_t)byte_at(q, j), d);
    } else if (T == FT_DTYPE_Q4_0 || T == FT_DTYPE_Q4_1 || T == FT_DTYPE_MXFP4) {
        const int bs = T == FT_DTYPE_Q4_0 ? 18 : T == FT_DTYPE_Q4_1 ? 20 : 17;
        const uint8_t *b = row + (size_t)(i / 32) * bs;
        int o = i % 32, hi = o >= 16;
        const uint2 qs = ld8<AL>(b + (T == FT_DTYPE_Q4_0 ? 2 : T == FT_DTYPE_Q4_1 ? 4 : 1) + (o & 15));
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int q = hi ? byte_at(qs, j) >> 4 : byte_at(qs, j) & 0x0f;
            if (T == FT_DTYPE_Q4_0) w[j] = __fmul_rn((float)(q - 8), h2f(b));
            else if (T == FT_DTYPE_Q4_1) w[j] = __fadd_rn(__fmul_rn((float)q, h2f(b)), h2f(b + 2));
            else w[j] = __fmul_rn((float)c_mxfp4[q], e8m0_half(b[0]));
        }
    } else if (T == FT_DTYPE_Q5_0 || T == FT_DTYPE_Q5_1) {
        const int bs = T == FT_DTYPE_Q5_0 ? 22 : 24;
        const uint8_t *b = row + (size_t)(i / 32) * bs;
        uint32_t qh = rd32(b + (T == FT_DTYPE_Q5_0 ? 2 : 4));
        const uint8_t *qs = b + (T == FT_DTYPE_Q5_0 ? 6 : 8);
        int o = i % 32;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int e = o + j, x;
            if (e < 16) x = (qs[e] & 0x0f) | (((qh >> e) << 4) & 0x10);
            else x = (qs[e - 16] >> 4) | ((qh >> (e - 16 + 12)) & 0x10);
            if (T == FT_DTYPE_Q5_0) w[j] = __fmul_rn((float)(x - 16), h2f(b));
            else w[j] = __fadd_rn(__fmul_rn((float)x, h2f(b)), h2f(b + 2));
        }
    } else if (T == FT_DTYPE_Q4_K || T == FT_DTYPE_Q5_K) {
        const int bs = T == FT_DTYPE_Q4_K ? 144 : 176;
        const uint8_t *b = row + (size_t)(i / 256) * bs;
        int n = i % 256, s = n / 32, l = n % 32; /* sub-block s: nibble s % 2 of q[32 * (s / 2) + l] */
        int sc, m;
        scale_min_k4(s, b + 4, &sc, &m);
        float d1 = __fmul_rn(h2f_a<AL>(b), (float)sc), m1 = __fmul_rn(h2f_a<AL>(b + 2), (float)m);
        const uint2 q = ld8<AL>(b + (T == FT_DTYPE_Q4_K ? 16 : 48) + 32 * (s / 2) + l);
        const uint2 qh = T == FT_DTYPE_Q5_K ? ld8<AL>(b + 16 + l) : make_uint2(0, 0);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int v = s & 1 ? byte_at(q, j) >> 4 : byte_at(q, j) & 0x0f;
            if (T == FT_DTYPE_Q5_K) v += (byte_at(qh, j) >> s) & 1 ? 16 : 0;
            w[j] = __fsub_rn(__fmul_rn(d1, (float)v), m1);
        }
    } else if (T == FT_DTYPE_Q6_K) {
        const uint8_t *b = row + (size_t)(i / 256) * 210;
        int n = i % 256, h = n / 128, jj = n % 128, g = jj / 32, l = jj % 32;
        const uint2 ql = ld8<AL>(b + h * 64 + l + (g & 1) * 32), qh = ld8<AL>(b + 128 + h * 32 + l);
        float d = h2f_a<AL>(b + 208);
        float s = __fmul_rn(d, (float)((const int8_t *)(b + 192))[h * 8 + l / 16 + 2 * g]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int lo = g >= 2 ? byte_at(ql, j) >> 4 : byte_at(ql, j) & 0x0f;
            int q = (lo | ((byte_at(qh, j) >> (2 * g)) & 3) << 4) - 32;
            w[j] = __fmul_rn(s, (float)q);
        }
    }
}

/* Element i of a row of K elements, for the formats whose rows may have any width (NVFP4 and
 * FP8_B128 take the checkpoint's; the GGML blocks are whole blocks of 32 or 256): the value dq8
 * gives it. Used when K % 8 != 0, where dq8's 8-element steps and 16-byte x loads do not fit. */
template <int T>
__device__ __forceinline__ float dq1(const uint8_t *row, int i, int K) {
    if (T == FT_DTYPE_NVFP4) {
        float s2 = __uint_as_float(rd32(row)), sc = ft_e4m3_to_f32(row[4 + i / 16]);
        uint8_t q = row[4 + (K + 15) / 16 + i / 2];
        return __fmul_rn(__fmul_rn(c_e2m1[i & 1 ? q >> 4 : q & 0x0f], sc), s2);
    }
    int nb = (K + 127) / 128; /* FP8_B128 */
    return __fmul_rn(ft_e4m3_to_f32(row[(size_t)nb * 4 + i]), __uint_as_float(rd32(row + (size_t)(i / 128) * 4)));
}

template <int T> __device__ __forceinline__ constexpr bool any_width() {
    return T == FT_DTYPE_NVFP4 || T == FT_DTYPE_FP8_B128;
}

#define FT_BLOCK_TYPES(X) X(FT_DTYPE_Q8_0) X(FT_DTYPE_Q4_0) X(FT_DTYPE_Q4_1) X(FT_DTYPE_Q5_0) \
    X(FT_DTYPE_Q5_1) X(FT_DTYPE_Q4_K) X(FT_DTYPE_Q5_K) X(FT_DTYPE_Q6_K) X(FT_DTYPE_MXFP4)     \
    X(FT_DTYPE_NVFP4) X(FT_DTYPE_FP8_B128)


#endif
