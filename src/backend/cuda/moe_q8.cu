/* moe_q8.cu — the int8 tensor-core grouped expert GEMM of MoE prefill (the llama.cpp MMQ idea,
 * written for this engine's sorted rows): activations quantised once per 32 elements (the
 * GEMV's codes, kernels.cuh q8_quant32), weights in a GGML block format whose values are small
 * integers times a per-32 scale (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K; Q6_K per 16),
 * multiplied as int8 by mma.sync m16n8k32 (Q6_K: two m16n8k16) with int32 sums that are exact,
 * then scaled in f32 per 32-element group (Q6_K: per 16):
 *   y[r, n] = sum_g dx[r, g] (ws[n, g] I[r, n, g] + wm[n, g] S[r, g])
 * where I is the integer dot of the codes, S the activation codes' sum, and w = ws q + wm the
 * format's value (wm: the min of Q4_1/Q5_1/Q4_K/Q5_K; zero for the others). The result is the
 * dot of the exactly dequantised weights with the dequantised int8 activations, to f32 rounding
 * of the per-group terms and their sum (the x32 statement of ggml_dot.h).
 *
 * One block: 8 warps, a tile of TM sorted rows (32 or 64, the sort's tile list) x 128 weight
 * rows of one expert. K advances 256 elements a stage (one super-block, 8 blocks of 32): the
 * stage's raw weight bytes (the rows' 256-element chunks: 16-byte aligned for every format but
 * Q6_K, whose 210-byte chunks are copied as the 4-byte-aligned span around them), the
 * activations' codes and their scales are copied into shared memory by cp.async, the
 * next stage in flight while the tensor cores work on this one; fragments are decoded from the
 * raw bytes in shared memory (the row pitch an odd multiple of 16 bytes, so a warp's fragment
 * loads hit 32 different banks). Deterministic; engine thread; the launcher only enqueues. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels.cuh"
#include "format/quant.h"

#define QG_THREADS 256
#define QG_TN 128 /* weight rows per tile */
#define QG_KS 256 /* K per stage */
#define QG_STAGES 2
#define QG_APITCH 272 /* activation code bytes per row in shared memory: 256 + 16 */
#define QG_DPITCH 72  /* activation scale bytes per row: 8 q8ds + 8 (bank spread) */

/* Bytes of 256 elements of a row in format T (0: not a format of this kernel). */
__host__ __device__ constexpr int qg_chunk(int T) {
    return T == FT_DTYPE_Q8_0   ? 272
           : T == FT_DTYPE_Q4_0 ? 144
           : T == FT_DTYPE_Q4_1 ? 160
           : T == FT_DTYPE_Q5_0 ? 176
           : T == FT_DTYPE_Q5_1 ? 192
           : T == FT_DTYPE_Q4_K ? 144
           : T == FT_DTYPE_Q5_K ? 176
           : T == FT_DTYPE_Q6_K ? 210
                                : 0;
}

/* Q6_K: chunks 2-byte aligned; each is copied as the 53 aligned words around it */
#define QG_SPAN_WORDS 53

/* Shared-memory pitch of a weight row's chunk: 16-byte multiple, odd in 16-byte units (Q6_K's
 * 212-byte span: 240, 60 words, also 4 mod 8 words). */
__host__ __device__ constexpr int qg_pitch(int T) {
    return T == FT_DTYPE_Q6_K ? 240 : (qg_chunk(T) / 16) % 2 ? qg_chunk(T) : qg_chunk(T) + 16;
}

__host__ __device__ constexpr bool qg_has_min(int T) {
    return T == FT_DTYPE_Q4_1 || T == FT_DTYPE_Q5_1 || T == FT_DTYPE_Q4_K || T == FT_DTYPE_Q5_K;
}

/* K-quants: their 6-bit scales and mins are decoded once a stage into a table (ws, wm) */
__host__ __device__ constexpr bool qg_kquant(int T) {
    return T == FT_DTYPE_Q4_K || T == FT_DTYPE_Q5_K;
}
#define QG_SPITCH 9 /* table entries per weight row: 8 groups + 1 (bank spread) */

__host__ __device__ constexpr size_t qg_smem(int T, int tm) {
    return (size_t)QG_STAGES *
               ((size_t)QG_TN * qg_pitch(T) + (size_t)tm * (QG_APITCH + QG_DPITCH)) +
           (qg_kquant(T) ? (size_t)QG_TN * QG_SPITCH * sizeof(float2) : 0);
}

/* --- shared memory reads --- */

/* 4 bytes at p (2-byte aligned at least; shared memory): one or two aligned words. */
__device__ __forceinline__ uint32_t lds32(const uint8_t *p) {
    const uintptr_t u = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(u & ~(uintptr_t)3);
    return u & 3 ? __funnelshift_r(w[0], w[1], (unsigned)(u & 3) * 8) : w[0];
}

__device__ __forceinline__ float ldh(const uint8_t *p) {
    return __half2float(*(const __half *)p);
}

/* bits 0..3 of b to bit 0 of bytes 0..3 */
__device__ __forceinline__ uint32_t spread4(uint32_t b) {
    return ((b & 15u) * 0x00204081u) & 0x01010101u;
}

/* The int8 codes of elements 32g + 4c .. +3 (b0) and 32g + 16 + 4c .. +3 (b1) of a row's stage
 * chunk ch (format T; offsets folded in where they are constant: Q4_0 q - 8, Q5_0 q - 16). */
template <int T>
__device__ __forceinline__ void qg_codes(const uint8_t *ch, int g, int c, uint32_t &b0,
                                         uint32_t &b1) {
    if (T == FT_DTYPE_Q8_0) {
        const uint8_t *q = ch + 34 * g + 2 + 4 * c;
        b0 = lds32(q), b1 = lds32(q + 16);
    } else if (T == FT_DTYPE_Q4_0 || T == FT_DTYPE_Q4_1) {
        const uint32_t v = lds32(ch + (T == FT_DTYPE_Q4_0 ? 18 * g + 2 : 20 * g + 4) + 4 * c);
        b0 = v & 0x0f0f0f0fu, b1 = (v >> 4) & 0x0f0f0f0fu;
        if (T == FT_DTYPE_Q4_0) b0 = __vsub4(b0, 0x08080808u), b1 = __vsub4(b1, 0x08080808u);
    } else if (T == FT_DTYPE_Q5_0 || T == FT_DTYPE_Q5_1) {
        const uint8_t *b = ch + (T == FT_DTYPE_Q5_0 ? 22 : 24) * g;
        const uint32_t qh = lds32(b + (T == FT_DTYPE_Q5_0 ? 2 : 4));
        const uint32_t v = lds32(b + (T == FT_DTYPE_Q5_0 ? 6 : 8) + 4 * c);
        b0 = (v & 0x0f0f0f0fu) | spread4(qh >> (4 * c)) << 4;
        b1 = ((v >> 4) & 0x0f0f0f0fu) | spread4(qh >> (16 + 4 * c)) << 4;
        if (T == FT_DTYPE_Q5_0) b0 = __vsub4(b0, 0x10101010u), b1 = __vsub4(b1, 0x10101010u);
    } else if (T == FT_DTYPE_Q6_K) { /* 128-element half g / 4, its quarter g % 4 */
        const int n = g / 4, qq = g % 4, sh = 4 * (qq >> 1);
        const uint8_t *ql = ch + 64 * n + 32 * (qq & 1) + 4 * c, *qh = ch + 128 + 32 * n + 4 * c;
        b0 = ((lds32(ql) >> sh) & 0x0f0f0f0fu) | ((lds32(qh) >> (2 * qq)) & 0x03030303u) << 4;
        b1 = ((lds32(ql + 16) >> sh) & 0x0f0f0f0fu) | ((lds32(qh + 16) >> (2 * qq)) & 0x03030303u)
                                                          << 4;
        b0 = __vsub4(b0, 0x20202020u), b1 = __vsub4(b1, 0x20202020u);
    } else { /* Q4_K, Q5_K: chunk g / 2 of qs, low nibbles for even g */
        const uint8_t *q = ch + (T == FT_DTYPE_Q4_K ? 16 : 48) + 32 * (g / 2) + 4 * c;
        const int sh = 4 * (g & 1);
        b0 = (lds32(q) >> sh) & 0x0f0f0f0fu, b1 = (lds32(q + 16) >> sh) & 0x0f0f0f0fu;
        if (T == FT_DTYPE_Q5_K) {
            b0 |= ((lds32(ch + 16 + 4 * c) >> g) & 0x01010101u) << 4;
            b1 |= ((lds32(ch + 32 + 4 * c) >> g) & 0x01010101u) << 4;
        }
    }
}

/* Group g's scale ws and min wm (value = ws * code + wm) of a row's stage chunk ch. */
template <int T>
__device__ __forceinline__ void qg_scale(const uint8_t *ch, int g, float &ws, float &wm) {
    wm = 0.0f;
    if (T == FT_DTYPE_Q8_0)
        ws = ldh(ch + 34 * g);
    else if (T == FT_DTYPE_Q4_0)
        ws = ldh(ch + 18 * g);
    else if (T == FT_DTYPE_Q5_0)
        ws = ldh(ch + 22 * g);
    else if (T == FT_DTYPE_Q4_1 || T == FT_DTYPE_Q5_1) {
        const uint8_t *b = ch + (T == FT_DTYPE_Q4_1 ? 20 : 24) * g;
        ws = ldh(b), wm = ldh(b + 2);
    } else { /* get_scale_min_k4 */
        const uint8_t *q = ch + 4;
        int sc, m;
        if (g < 4)
            sc = q[g] & 63, m = q[g + 4] & 63;
        else
            sc = (q[g + 4] & 0x0f) | ((q[g - 4] >> 6) << 4),
            m = (q[g + 4] >> 4) | ((q[g] >> 6) << 4);
        ws = __fmul_rn(ldh(ch), (float)sc), wm = -__fmul_rn(ldh(ch + 2), (float)m);
    }
}

__device__ __forceinline__ void cp16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src));
}
__device__ __forceinline__ void cp8(void *dst, const void *src) {
    asm volatile(
        "cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
        "l"(src));
}
__device__ __forceinline__ void cp4(void *dst, const void *src) {
    asm volatile(
        "cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
        "l"(src));
}
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%10,%11,%12,%13};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0),
                   "r"(0), "r"(0));
}

__device__ __forceinline__ void mma_s8_k16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%8,%9,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b), "r"(0), "r"(0), "r"(0), "r"(0));
}

/* Warps 2 (rows) x 4 (weight rows): each TM/2 x 32, MI = TM/32 fragments of 16 rows by four of
 * 8 weight rows. xq [R, K] codes, xd [R, K/32] their scales and sums (sorted rows). */
template <int TM, int T>
__global__ void __launch_bounds__(QG_THREADS)
    moe_gemm_q8_kernel(float *y, const int8_t *xq, const q8ds *xd, const uint8_t *w,
                       const int32_t *offsets, const int32_t *slot_of, size_t w_stride, size_t rb,
                       int E, int N, int K) {
    constexpr int MI = TM / 32, CH = qg_chunk(T), BP = qg_pitch(T), C16 = CH / 16;
    constexpr int SB = QG_TN * BP, SA = TM * QG_APITCH, STAGE = SB + SA + TM * QG_DPITCH;
    if ((int)blockIdx.x >= offsets[E + 1]) return;
    const int32_t *tile = offsets + E + 2 + 2 * blockIdx.x;
    const int e = tile[0], r0 = tile[1], r1 = offsets[e + 1], n0 = blockIdx.y * QG_TN;
    const int slot = slot_of ? slot_of[e] : e;
    if (slot < 0) return; /* not in this batch */
    const uint8_t *we = w + (size_t)slot * w_stride;
    extern __shared__ __align__(16) uint8_t qg_sm[];
    float2 *stab = (float2 *)(qg_sm + (size_t)QG_STAGES * STAGE); /* K-quants' scale table */
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wr = warp / 4, wn = warp % 4;
    const int gid = lane / 4, tig = lane % 4, nk = K / QG_KS, nb = K / 32;

    /* where weight row r's chunk of stage kt starts in global memory */
    auto wsrc = [&](int r, int kt) {
        return we + (size_t)min(n0 + r, N - 1) * rb + (size_t)kt * CH;
    };
    auto load = [&](int buf, int kt) {
        uint8_t *sb = qg_sm + (size_t)buf * STAGE, *sa = sb + SB, *sd = sa + SA;
        if (T == FT_DTYPE_Q6_K) { /* the aligned span: the chunk sits at wsrc & 3 in the row (the
                                   * span's last word may hold 2 bytes past it: same word) */
            for (int i = tid; i < QG_TN * QG_SPAN_WORDS; i += QG_THREADS) {
                const int r = i / QG_SPAN_WORDS, c = i % QG_SPAN_WORDS;
                const uint8_t *a = (const uint8_t *)((uintptr_t)wsrc(r, kt) & ~(uintptr_t)3);
                cp4(sb + r * BP + 4 * c, a + 4 * c);
            }
        } else {
            for (int i = tid; i < QG_TN * C16; i += QG_THREADS) {
                const int r = i / C16, c = i % C16;
                cp16(sb + r * BP + 16 * c, wsrc(r, kt) + 16 * c);
            }
        }
        for (int i = tid; i < TM * 16; i += QG_THREADS) {
            const int r = i / 16, c = i % 16, row = min(r0 + r, r1 - 1);
            cp16(sa + r * QG_APITCH + 16 * c, xq + (size_t)row * K + (size_t)kt * QG_KS + 16 * c);
        }
        for (int i = tid; i < TM * 8; i += QG_THREADS) {
            const int r = i / 8, g = i % 8, row = min(r0 + r, r1 - 1);
            cp8(sd + r * QG_DPITCH + 8 * g, xd + (size_t)row * nb + (size_t)kt * 8 + g);
        }
    };

    float acc[MI][4][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[i][j][q] = 0.0f;

#pragma unroll
    for (int s = 0; s < QG_STAGES - 1; s++) {
        if (s < nk) load(s, s);
        cp_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_wait<QG_STAGES - 2>();
        __syncthreads(); /* stage kt landed for every thread; stage kt - 1's buffer is free */
        if (kt + QG_STAGES - 1 < nk) load((kt + QG_STAGES - 1) % QG_STAGES, kt + QG_STAGES - 1);
        cp_commit();
        const uint8_t *sb = qg_sm + (size_t)(kt % QG_STAGES) * STAGE, *sa = sb + SB, *sd = sa + SA;
        /* weight row r's chunk in shared memory */
        auto wch = [&](int r) {
            return sb + r * BP + (T == FT_DTYPE_Q6_K ? (int)((uintptr_t)wsrc(r, kt) & 3) : 0);
        };
        if (qg_kquant(T)) {
            for (int i = tid; i < QG_TN * 8; i += QG_THREADS) {
                float ws, wm;
                qg_scale<T>(wch(i / 8), i % 8, ws, wm);
                stab[(i / 8) * QG_SPITCH + i % 8] = make_float2(ws, wm);
            }
            __syncthreads();
        }
#pragma unroll 2 /* fully unrolled, the hoisted loads need 128-250 registers */
        for (int g = 0; g < 8; g++) {
            uint32_t a[MI][4];
            float dx[MI][2], sx[MI][2];
#pragma unroll
            for (int i = 0; i < MI; i++) {
                const int r = wr * (TM / 2) + 16 * i + gid;
                const uint8_t *p = sa + r * QG_APITCH + 32 * g + 4 * tig;
                a[i][0] = *(const uint32_t *)p;
                a[i][1] = *(const uint32_t *)(p + 8 * QG_APITCH);
                a[i][2] = *(const uint32_t *)(p + 16);
                a[i][3] = *(const uint32_t *)(p + 8 * QG_APITCH + 16);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const q8ds ds = *(const q8ds *)(sd + (r + 8 * h) * QG_DPITCH + 8 * g);
                    dx[i][h] = ds.d, sx[i][h] = (float)(ds.s[0] + ds.s[1]);
                }
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int nr = wn * 32 + 8 * j;
                uint32_t b0, b1;
                qg_codes<T>(wch(nr + gid), g, tig, b0, b1);
                if constexpr (T ==
                              FT_DTYPE_Q6_K) { /* scales d * sc of elements 16 (2g + u) .. +15 */
                    float ws[2][2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint8_t *ch = wch(nr + 2 * tig + h);
                        const float d = ldh(ch + 208);
                        ws[h][0] = __fmul_rn(d, (float)(int8_t)ch[192 + 2 * g]);
                        ws[h][1] = __fmul_rn(d, (float)(int8_t)ch[193 + 2 * g]);
                    }
#pragma unroll
                    for (int i = 0; i < MI; i++) {
                        int d0[4], d1[4];
                        mma_s8_k16(d0, a[i][0], a[i][1], b0);
                        mma_s8_k16(d1, a[i][2], a[i][3], b1);
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            const float t = __fmaf_rn(ws[q & 1][1], (float)d1[q],
                                                      __fmul_rn(ws[q & 1][0], (float)d0[q]));
                            acc[i][j][q] = __fmaf_rn(dx[i][q >> 1], t, acc[i][j][q]);
                        }
                    }
                } else {
                    float ws[2], wm[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (qg_kquant(T)) {
                            const float2 v = stab[(nr + 2 * tig + h) * QG_SPITCH + g];
                            ws[h] = v.x, wm[h] = v.y;
                        } else {
                            qg_scale<T>(wch(nr + 2 * tig + h), g, ws[h], wm[h]);
                        }
                    }
#pragma unroll
                    for (int i = 0; i < MI; i++) {
                        int d[4];
                        mma_s8(d, a[i], b0, b1);
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            float t = __fmul_rn(ws[q & 1], (float)d[q]);
                            if (qg_has_min(T)) t = __fmaf_rn(wm[q & 1], sx[i][q >> 1], t);
                            acc[i][j][q] = __fmaf_rn(dx[i][q >> 1], t, acc[i][j][q]);
                        }
                    }
                }
            }
        }
    }
    cp_wait<0>();
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = r0 + wr * (TM / 2) + 16 * i + gid + 8 * h;
            if (row >= r1) continue;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int n = n0 + wn * 32 + 8 * j + 2 * tig;
                float *o = y + (size_t)row * N + n;
                if (n < N) o[0] = acc[i][j][2 * h];
                if (n + 1 < N) o[1] = acc[i][j][2 * h + 1];
            }
        }
}

extern "C" int ft_cuda_moe_gemm_q8_takes(int dtype, int K, const void *w, size_t expert_stride) {
    const size_t a = dtype == FT_DTYPE_Q6_K ? 2 : 16; /* Q6_K: the spans align themselves */
    return qg_chunk(dtype) && K % QG_KS == 0 && (uintptr_t)w % a == 0 && expert_stride % a == 0;
}

template <int TM, int T>
static void qg_go(float *y, const int8_t *xq, const void *xd, const void *w, size_t stride,
                  const int32_t *offsets, const int32_t *slot_of, int E, int N, int K, int R,
                  cudaStream_t s) {
    static int attr_set; /* engine thread: one launcher at a time */
    const size_t smem = qg_smem(T, TM);
    if (!attr_set) {
        cudaFuncSetAttribute(moe_gemm_q8_kernel<TM, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem);
        attr_set = 1;
    }
    dim3 grid((unsigned)(R / TM + E), (N + QG_TN - 1) / QG_TN); /* bounds the tile count */
    moe_gemm_q8_kernel<TM, T><<<grid, QG_THREADS, smem, s>>>(
        y, xq, (const q8ds *)xd, (const uint8_t *)w, offsets, slot_of, stride,
        ft_dtype_row_bytes((enum ft_dtype)T, K), E, N, K);
}

extern "C" void ft_cuda_moe_gemm_q8(float *y, const int8_t *xq, const void *xd, const void *w,
                                    int dtype, size_t expert_stride, const int32_t *offsets,
                                    const int32_t *slot_of, int E, int N, int K, int R,
                                    cudaStream_t s) {
    const int tm = ft_cuda_moe_tile_rows(E, R);
#define GO(t)                                                                                      \
    if (dtype == t) {                                                                              \
        if (tm == 64)                                                                              \
            qg_go<64, t>(y, xq, xd, w, expert_stride, offsets, slot_of, E, N, K, R, s);            \
        else                                                                                       \
            qg_go<32, t>(y, xq, xd, w, expert_stride, offsets, slot_of, E, N, K, R, s);            \
        return;                                                                                    \
    }
    GO(FT_DTYPE_Q8_0)
    GO(FT_DTYPE_Q4_0) GO(FT_DTYPE_Q4_1) GO(FT_DTYPE_Q5_0) GO(FT_DTYPE_Q5_1) GO(FT_DTYPE_Q4_K)
        GO(FT_DTYPE_Q5_K) GO(FT_DTYPE_Q6_K)
#undef GO
}

/* One warp per 32-element block of a row: xq[r] = the codes of x[rows ? rows[r] : r]. */
__global__ void moe_quant_kernel(int8_t *xq, q8ds *xd, const float *x, const int32_t *rows, int R,
                                 int K) {
    const int nb = K / 32;
    const long b = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (b >= (long)R * nb) return;
    const int r = (int)(b / nb), j = (int)(b % nb), lane = threadIdx.x % 32;
    const float v = x[(size_t)(rows ? rows[r] : r) * K + 32 * j + lane];
    q8_quant32(v, lane, xq + (size_t)r * K + 32 * j, xd + b);
}

extern "C" void ft_cuda_moe_quant(int8_t *xq, void *xd, const float *x, const int32_t *rows, int R,
                                  int K, cudaStream_t s) {
    const long warps = (long)R * (K / 32);
    if (warps)
        moe_quant_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, s>>>(xq, (q8ds *)xd, x, rows, R, K);
}
