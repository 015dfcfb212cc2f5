/* matmul.c — y = x · w^T with fp32 activations and F32/F16/BF16 weights read in place (GGML
 * block formats go to ggml_dot.c's row dots).
 * ft_cpu_matmul_rows is the kernel everything else (dense layers, the MoE CPU executor) runs:
 * rows are processed in tiles of 4; for each tile the token blocks are looped inside, so the
 * tile's weight rows stay in L1/L2 while x streams past, and each weight vector is loaded and
 * converted once per token block (4 rows x 4 tokens = 16 zmm accumulators on AVX-512,
 * 4 rows x 2 tokens on AVX2). Decode (T = 1) streams 8 rows at once with one accumulator each.
 * Accumulation is fp32 in lane-parallel order with one horizontal sum per output.
 * Tiers are runtime-dispatched target() functions (no per-file flags; the build is plain -O2).
 * Threading: ft_cpu_matmul_rows is single-threaded and reentrant; ft_cpu_matmul runs on the
 * pool, one caller at a time. */
#include "backend/cpu/ops.h"

#include "core/status.h"
#include "core/sys.h"
#include "format/fp_formats.h"
#include "backend/cpu/ggml_dot.h"
#include "format/ggml_quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FT_X86 1
#endif

#define INL static inline __attribute__((always_inline))

/* ---------------------------------------------------------------- scalar ---- */

static inline float wload(const void *w, size_t i, enum ft_dtype wt) {
    if (wt == FT_DTYPE_F32) return ((const float *)w)[i];
    if (wt == FT_DTYPE_F16) return ft_f16_to_f32(((const uint16_t *)w)[i]);
    return ft_bf16_to_f32(((const uint16_t *)w)[i]);
}

/* One output: 8 fp32 lanes (k mod 8), summed pairwise at the end like the vector tiers. */
static float dot_scalar(const float *x, const void *w, size_t row, enum ft_dtype wt, int K) {
    float lane[8] = {0};
    size_t base = row * (size_t)K;
    for (int k = 0; k < K; k++)
        lane[k & 7] += x[k] * wload(w, base + (size_t)k, wt);
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
           ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

static void rows_scalar(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                        int T, int n0, int n1, int K) {
    for (int n = n0; n < n1; n++)
        for (int t = 0; t < T; t++)
            y[(size_t)t * ldy + n] = dot_scalar(x + (size_t)t * ldx, w, (size_t)n, wt, K);
}

#ifdef FT_X86
/* ---------------------------------------------------------------- AVX-512 --- */

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL512 INL T512

/* 16 weights at element i of row w, converted to fp32; m masks the K tail. */
INL512 __m512 ld512(const void *w, int i, enum ft_dtype wt) {
    if (wt == FT_DTYPE_F32) return _mm512_loadu_ps((const float *)w + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (wt == FT_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INL512 __m512 ld512m(const void *w, int i, enum ft_dtype wt, __mmask16 m) {
    if (wt == FT_DTYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (wt == FT_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The accumulators of a tile are named variables, not an array: clang keeps an array of
 * vectors on the stack when the nested loops are not fully unrolled, which cost 3x in GEMM.
 * a<r><j>: row r, token j; 8 x 1 (decode) or 4 x 4 (prefill); unused ones are optimised out. */
#define TILE_RJ(M)                                                                                 \
    M(0, 0)                                                                                        \
    M(1, 0) M(2, 0) M(3, 0) M(4, 0) M(5, 0) M(6, 0) M(7, 0) M(0, 1) M(1, 1) M(2, 1) M(3, 1)        \
        M(0, 2) M(1, 2) M(2, 2) M(3, 2) M(0, 3) M(1, 3) M(2, 3) M(3, 3)
#define TILE_R(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define TILE_J(M) M(0) M(1) M(2) M(3)

/* y[t+j, n+r] for r < R, j < TT (R <= 8, TT <= 4, TT > 1 only with R <= 4; constants after
 * inlining). w: [N, K] of wt; x: [T, K] stride ldx. */
INL512 void tile512(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int K, int n, int t, const int R, const int TT, const int pf) {
    const size_t rb = (size_t)K * (wt == FT_DTYPE_F32 ? 4 : 2);
    const char *wbase = (const char *)w + (size_t)n * rb;
    const float *xbase = x + (size_t)t * ldx;
#define DECL_A(r, j) __m512 a##r##j = _mm512_setzero_ps();
    TILE_RJ(DECL_A)
#define FMA_A(r, j)                                                                                \
    if (R > r && TT > j) a##r##j = _mm512_fmadd_ps(w##r, x##j, a##r##j);
    int k = 0;
    for (; k + 16 <= K; k += 16) {
#define LD_W(r) __m512 w##r = R > r ? ld512(wbase + r * rb, k, wt) : _mm512_setzero_ps();
#define PF_W(r) /* as tilebf's pf: the next tile's rows, the line of this step's k */              \
    if (pf && R > r) __builtin_prefetch(wbase + (R + r) * rb + (size_t)k * (rb / K), 0, 2);
        TILE_R(PF_W)
#define LD_X(j)                                                                                    \
    __m512 x##j = TT > j ? _mm512_loadu_ps(xbase + (size_t)j * ldx + k) : _mm512_setzero_ps();
        TILE_R(LD_W)
        TILE_J(LD_X)
        TILE_RJ(FMA_A)
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
#define LD_WM(r) __m512 w##r = R > r ? ld512m(wbase + r * rb, k, wt, m) : _mm512_setzero_ps();
#define LD_XM(j)                                                                                   \
    __m512 x##j =                                                                                  \
        TT > j ? _mm512_maskz_loadu_ps(m, xbase + (size_t)j * ldx + k) : _mm512_setzero_ps();
        TILE_R(LD_WM)
        TILE_J(LD_XM)
        TILE_RJ(FMA_A)
    }
#define ST_A(r, j)                                                                                 \
    if (R > r && TT > j) y[(size_t)(t + j) * ldy + n + r] = _mm512_reduce_add_ps(a##r##j);
    TILE_RJ(ST_A)
}

/* Rows n0..n1 in tiles of 4 (then single rows); tokens in blocks of 4, 2, 1 inside.
 * Decode (T = 1) streams 8 rows at once: measured ~8% more of DRAM bandwidth than 4. */
INL512 void rows512(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int T, int n0, int n1, int K) {
    int n = n0;
    const int pf = 1; /* decode's 8-row tiles prefetch the next tile */
    if (T == 1) /* the next tile prefetched where it is this stretch's */
        for (; n + 8 <= n1; n += 8)
            tile512(y, ldy, x, ldx, w, wt, K, n, 0, 8, 1, pf && n + 16 <= n1);
    for (; n + 4 <= n1; n += 4) {
        int t = 0;
        for (; t + 4 <= T; t += 4)
            tile512(y, ldy, x, ldx, w, wt, K, n, t, 4, 4, 0);
        if (t + 2 <= T) tile512(y, ldy, x, ldx, w, wt, K, n, t, 4, 2, 0), t += 2;
        if (t < T) tile512(y, ldy, x, ldx, w, wt, K, n, t, 4, 1, 0);
    }
    for (; n < n1; n++) {
        int t = 0;
        for (; t + 4 <= T; t += 4)
            tile512(y, ldy, x, ldx, w, wt, K, n, t, 1, 4, 0);
        for (; t < T; t++)
            tile512(y, ldy, x, ldx, w, wt, K, n, t, 1, 1, 0);
    }
}

T512 static void rows512_f32(float *y, int ldy, const float *x, int ldx, const void *w, int T,
                             int n0, int n1, int K) {
    rows512(y, ldy, x, ldx, w, FT_DTYPE_F32, T, n0, n1, K);
}
T512 static void rows512_f16(float *y, int ldy, const float *x, int ldx, const void *w, int T,
                             int n0, int n1, int K) {
    rows512(y, ldy, x, ldx, w, FT_DTYPE_F16, T, n0, n1, K);
}
T512 static void rows512_bf16(float *y, int ldy, const float *x, int ldx, const void *w, int T,
                              int n0, int n1, int K) {
    rows512(y, ldy, x, ldx, w, FT_DTYPE_BF16, T, n0, n1, K);
}

/* ---------------------------------------------------------------- AVX-512-BF16 */
/* bf16 weights with bf16 activations (--cpu-act fast on CPUs with AVX512-BF16): vdpbf16ps
 * multiplies 32 pairs per instruction straight from the weight bytes (no widening), about 1.9x
 * the fp32 FMA tile per core when the tile is compute-bound (prefill). x is rounded to bf16
 * once per matmul (ft_cpu_xq_quant); accumulation stays fp32. Same tiling as tile512. */

#define TBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define INLBF INL TBF

INLBF __m512bh ldbf(const uint16_t *p, int k, __mmask32 m, int full) {
    return (__m512bh)(full ? _mm512_loadu_si512((const void *)(p + k))
                           : _mm512_maskz_loadu_epi16(m, p + k));
}

INLBF void tilebf(float *y, int ldy, const uint16_t *x, const uint16_t *w, int K, int n, int t,
                  const int R, const int TT, const int pf) {
    const uint16_t *wbase = w + (size_t)n * K, *xbase = x + (size_t)t * K;
    /* pf (decode's 8-row tiles): each step also prefetches the same line of the next tile's
     * rows, R rows further on. Short rows (768 bf16 = 24 lines: an expert's down rows) end
     * before the hardware prefetcher has ramped up on each row's stream. */
#define PF_V(r)                                                                                    \
    if (pf && R > r) __builtin_prefetch(wbase + (size_t)(R + r) * K + k, 0, 2);
    TILE_RJ(DECL_A)
#define DP_A(r, j)                                                                                 \
    if (R > r && TT > j) a##r##j = _mm512_dpbf16_ps(a##r##j, v##r, u##j);
#define LD_V(r) __m512bh v##r = R > r ? ldbf(wbase + (size_t)r * K, k, m, full) : (__m512bh)_mm512_setzero_si512();
#define LD_U(j) __m512bh u##j = TT > j ? ldbf(xbase + (size_t)j * K, k, m, full) : (__m512bh)_mm512_setzero_si512();
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        const int full = 1;
        const __mmask32 m = ~0u;
        TILE_R(PF_V)
        TILE_R(LD_V)
        TILE_J(LD_U)
        TILE_RJ(DP_A)
    }
    if (k < K) {
        const int full = 0;
        const __mmask32 m = (__mmask32)((1u << (K - k)) - 1);
        TILE_R(LD_V)
        TILE_J(LD_U)
        TILE_RJ(DP_A)
    }
    TILE_RJ(ST_A)
}

TBF static void rowsbf(float *y, int ldy, const uint16_t *x, const uint16_t *w, int T, int n0,
                      int n1, int K) {
    int n = n0;
    const int pf = 1; /* decode's 8-row tiles prefetch the next tile */
    if (T == 1) /* the next tile prefetched where it is this stretch's */
        for (; n + 8 <= n1; n += 8)
            tilebf(y, ldy, x, w, K, n, 0, 8, 1, pf && n + 16 <= n1);
    for (; n + 4 <= n1; n += 4) {
        int t = 0;
        for (; t + 4 <= T; t += 4)
            tilebf(y, ldy, x, w, K, n, t, 4, 4, 0);
        if (t + 2 <= T) tilebf(y, ldy, x, w, K, n, t, 4, 2, 0), t += 2;
        if (t < T) tilebf(y, ldy, x, w, K, n, t, 4, 1, 0);
    }
    for (; n < n1; n++)
        for (int t = 0; t < T; t++)
            tilebf(y, ldy, x, w, K, n, t, 1, 1, 0);
}

/* FP8_B128 rows ([ceil(K/128) f32 scale_inv][K e4m3 codes][pad]) with bf16 activations: every
 * e4m3 value is exactly a bf16 (3 mantissa bits, exponents 2^-9 .. 2^8), so 32 codes widen to
 * bf16 with integer operations and go straight into vdpbf16ps; each 128-block's sum is scaled
 * by its scale_inv at the block's end (fp32). Weights exact, x rounded as for bf16 weights. */
INLBF __m512i e4m3_to_bf16x32(__m256i c) {
    const __m512i w = _mm512_cvtepu8_epi16(c);
    const __m512i m = _mm512_and_si512(w, _mm512_set1_epi16(0x7f));
    /* normal (exponent field e >= 1): bf16 exponent e + 120, mantissa f << 4 */
    __m512i r = _mm512_add_epi16(_mm512_slli_epi16(m, 4), _mm512_set1_epi16(0x3c00));
    /* m < 8: zero and the subnormals f * 2^-9 (f = 1 .. 7) */
    const __m512i sub = _mm512_setr_epi64(0x3bc03b803b000000ll, 0x3c603c403c203c00ll, 0, 0, 0, 0, 0, 0);
    r = _mm512_mask_blend_epi16(_mm512_cmplt_epu16_mask(m, _mm512_set1_epi16(8)), r,
                                _mm512_permutexvar_epi16(m, sub));
    r = _mm512_mask_blend_epi16(_mm512_cmpeq_epi16_mask(m, _mm512_set1_epi16(0x7f)), r,
                                _mm512_set1_epi16(0x7fc0)); /* NaN */
    return _mm512_or_si512(r, _mm512_slli_epi16(_mm512_and_si512(w, _mm512_set1_epi16(0x80)), 8));
}

/* y[j * ldy] = row . x_j for TT <= 4 tokens (x [TT, K] bf16). */
INLBF void fp8_tile_bf(float *y, int ldy, const uint16_t *x, int K, const uint8_t *row, const int TT) {
    const int nb = (K + 127) / 128;
    const uint8_t *q = row + 4 * (size_t)nb;
    __m512 tot[4], acc[4];
    for (int j = 0; j < TT; j++) tot[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        for (int j = 0; j < TT; j++) acc[j] = _mm512_setzero_ps();
        const int k1 = K < 128 * b + 128 ? K : 128 * b + 128;
        for (int k = 128 * b; k < k1; k += 32) {
            const __mmask32 m = k1 - k >= 32 ? ~0u : (__mmask32)((1u << (k1 - k)) - 1);
            const __m512bh wv = (__m512bh)e4m3_to_bf16x32(_mm256_maskz_loadu_epi8(m, q + k));
            for (int j = 0; j < TT; j++)
                acc[j] = _mm512_dpbf16_ps(acc[j], wv, (__m512bh)_mm512_maskz_loadu_epi16(m, x + (size_t)j * K + k));
        }
        float sc;
        memcpy(&sc, row + 4 * (size_t)b, 4);
        for (int j = 0; j < TT; j++) tot[j] = _mm512_fmadd_ps(acc[j], _mm512_set1_ps(sc), tot[j]);
    }
    for (int j = 0; j < TT; j++) y[(size_t)j * ldy] = _mm512_reduce_add_ps(tot[j]);
}

TBF static void rowsfp8bf(float *y, int ldy, const uint16_t *x, const void *w, int T, int n0,
                          int n1, int K) {
    const size_t rb = ft_fp8_b128_row_bytes((size_t)K);
    for (int n = n0; n < n1; n++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)n * rb;
        int t = 0;
        for (; t + 4 <= T; t += 4) fp8_tile_bf(y + (size_t)t * ldy + n, ldy, x + (size_t)t * K, K, row, 4);
        if (t + 2 <= T) fp8_tile_bf(y + (size_t)t * ldy + n, ldy, x + (size_t)t * K, K, row, 2), t += 2;
        if (t < T) fp8_tile_bf(y + (size_t)t * ldy + n, ldy, x + (size_t)t * K, K, row, 1);
    }
}

/* x [T, K] (stride ldx) rounded to bf16 (nearest even) into xb [T, K]. */
TBF static void to_bf16_rne(const float *x, int ldx, int K, int T, uint16_t *xb) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * ldx;
        uint16_t *o = xb + (size_t)t * K;
        int k = 0;
        for (; k + 32 <= K; k += 32) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xt + k + 16), _mm512_loadu_ps(xt + k));
            _mm512_storeu_si512((void *)(o + k), (__m512i)v);
        }
        for (; k < K; k++) o[k] = ft_f32_to_bf16(xt[k]);
    }
}

/* ---------------------------------------------------------------- AVX2 ------ */

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL256 INL T256

INL256 __m256 ld256(const void *w, int i, enum ft_dtype wt) {
    if (wt == FT_DTYPE_F32) return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (wt == FT_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INL256 float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* As tile512 with 8-wide vectors and named accumulators, R <= 4 rows x TT <= 2 tokens
 * (8 of the 16 ymm registers); the K tail is scalar. */
#define TILE2_RJ(M) M(0, 0) M(1, 0) M(2, 0) M(3, 0) M(0, 1) M(1, 1) M(2, 1) M(3, 1)
#define TILE2_R(M) M(0) M(1) M(2) M(3)
#define TILE2_J(M) M(0) M(1)

INL256 void tile256(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int K, int n, int t, const int R, const int TT, const int pf) {
    const size_t rb = (size_t)K * (wt == FT_DTYPE_F32 ? 4 : 2);
    const char *wbase = (const char *)w + (size_t)n * rb;
    const float *xbase = x + (size_t)t * ldx;
#define DECL_B(r, j) __m256 b##r##j = _mm256_setzero_ps();
    TILE2_RJ(DECL_B)
    int k = 0;
    for (; k + 8 <= K; k += 8) {
#define LD_W8(r) __m256 w##r = R > r ? ld256(wbase + r * rb, k, wt) : _mm256_setzero_ps();
#define LD_X8(j)                                                                                   \
    __m256 x##j = TT > j ? _mm256_loadu_ps(xbase + (size_t)j * ldx + k) : _mm256_setzero_ps();
#define FMA_B(r, j)                                                                                \
    if (R > r && TT > j) b##r##j = _mm256_fmadd_ps(w##r, x##j, b##r##j);
#define PF_W8(r) /* as tile512's pf, once per line */                                             \
    if (pf && R > r && !((k * (rb / K)) & 63)) __builtin_prefetch(wbase + (R + r) * rb + (size_t)k * (rb / K), 0, 2);
        TILE2_R(PF_W8)
        TILE2_R(LD_W8)
        TILE2_J(LD_X8)
        TILE2_RJ(FMA_B)
    }
#define ST_B(r, j)                                                                                 \
    if (R > r && TT > j) {                                                                         \
        float s = hsum256(b##r##j);                                                                \
        for (int kk = k; kk < K; kk++)                                                             \
            s += xbase[(size_t)j * ldx + kk] * wload(wbase + r * rb, (size_t)kk, wt);              \
        y[(size_t)(t + j) * ldy + n + r] = s;                                                      \
    }
    TILE2_RJ(ST_B)
}

INL256 void rows256(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int T, int n0, int n1, int K) {
    int n = n0;
    const int pf = T == 1;
    for (; n + 4 <= n1; n += 4) {
        int t = 0;
        for (; t + 2 <= T; t += 2)
            tile256(y, ldy, x, ldx, w, wt, K, n, t, 4, 2, 0);
        if (t < T) tile256(y, ldy, x, ldx, w, wt, K, n, t, 4, 1, pf && n + 8 <= n1);
    }
    for (; n < n1; n++) {
        int t = 0;
        for (; t + 2 <= T; t += 2)
            tile256(y, ldy, x, ldx, w, wt, K, n, t, 1, 2, 0);
        if (t < T) tile256(y, ldy, x, ldx, w, wt, K, n, t, 1, 1, 0);
    }
}

T256 static void rows256_f32(float *y, int ldy, const float *x, int ldx, const void *w, int T,
                             int n0, int n1, int K) {
    rows256(y, ldy, x, ldx, w, FT_DTYPE_F32, T, n0, n1, K);
}
T256 static void rows256_f16(float *y, int ldy, const float *x, int ldx, const void *w, int T,
                             int n0, int n1, int K) {
    rows256(y, ldy, x, ldx, w, FT_DTYPE_F16, T, n0, n1, K);
}
T256 static void rows256_bf16(float *y, int ldy, const float *x, int ldx, const void *w, int T,
                              int n0, int n1, int K) {
    rows256(y, ldy, x, ldx, w, FT_DTYPE_BF16, T, n0, n1, K);
}
#endif /* FT_X86 */

/* ---------------------------------------------------------------- dispatch -- */

typedef void (*rows_fn)(float *, int, const float *, int, const void *, int, int, int, int);

/* GGML block formats: the rows dotted straight from their blocks (format/ggml_quant.c). */
static void rows_blocks(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                        int T, int n0, int n1, int K) {
    size_t rb = ft_dtype_row_bytes(wt, K);
    ft_ggml_dot_rows(ft_dtype_ggml(wt), (const uint8_t *)w + (size_t)n0 * rb, rb, n1 - n0, x, ldx,
                     T, y + n0, ldy);
}

void ft_cpu_matmul_rows(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                        int T, int n0, int n1, int K) {
    if (T <= 0 || n1 <= n0) return;
    if (ft_dtype_is_block(wt)) {
        rows_blocks(y, ldy, x, ldx, w, wt, T, n0, n1, K);
        return;
    }
    if (wt == FT_DTYPE_FP8_B128 || wt == FT_DTYPE_NVFP4) { /* rows carrying their scales */
        void (*dot)(const void *, const float *, size_t, int, size_t, float *, size_t, int) =
            wt == FT_DTYPE_NVFP4 ? ft_nvfp4_r_dot_tokens : ft_fp8_b128_dot_tokens;
        size_t rb = ft_dtype_row_bytes(wt, K);
        for (int n = n0; n < n1; n++)
            dot((const uint8_t *)w + (size_t)n * rb, x, (size_t)ldx, T, (size_t)K, y + n,
                (size_t)ldy, ft_cpu_isa());
        return;
    }
    FT_ASSERT(wt == FT_DTYPE_F32 || wt == FT_DTYPE_F16 || wt == FT_DTYPE_BF16);
    rows_fn fn = NULL;
#ifdef FT_X86
    int d = wt == FT_DTYPE_F32 ? 0 : wt == FT_DTYPE_F16 ? 1 : 2;
    static const rows_fn k512[3] = {rows512_f32, rows512_f16, rows512_bf16};
    static const rows_fn k256[3] = {rows256_f32, rows256_f16, rows256_bf16};
    enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512)
        fn = k512[d];
    else if (isa == FT_ISA_AVX2)
        fn = k256[d];
#endif
    if (fn)
        fn(y, ldy, x, ldx, w, T, n0, n1, K);
    else
        rows_scalar(y, ldy, x, ldx, w, wt, T, n0, n1, K);
}

/* ---------------------------------------------------------------- int8 x ---- */

/* bf16 and FP8_B128 weights take bf16 activations only where vdpbf16ps exists */
static int bf16_dp(enum ft_dtype wt) {
#ifdef FT_X86
    return (wt == FT_DTYPE_BF16 || wt == FT_DTYPE_FP8_B128) && ft_cpu_isa() >= FT_ISA_AVX512_BF16;
#else
    return (void)wt, 0;
#endif
}

/* Which activation form wt takes at K: bf16, x8 (K-quants: per 256), x32 (the other blocks
 * and NVFP4 rows: per 32), or none. */
enum xq_kind { XQ_NONE, XQ_BF16, XQ_X8, XQ_X32 };

static enum xq_kind xq_kind(enum ft_dtype wt, int K) {
    if (K <= 0) return XQ_NONE;
    if (bf16_dp(wt)) return XQ_BF16;
    if (wt == FT_DTYPE_NVFP4) return K % 32 ? XQ_NONE : XQ_X32;
    if (!ft_dtype_is_block(wt)) return XQ_NONE;
    int g = ft_dtype_ggml(wt);
    if (ft_ggml_x8_supported(g)) return ft_ggml_x8_bytes(K) ? XQ_X8 : XQ_NONE;
    if (ft_ggml_x32_supported(g)) return ft_ggml_x32_bytes(K) ? XQ_X32 : XQ_NONE;
    return XQ_NONE;
}

size_t ft_cpu_xq_bytes(enum ft_dtype wt, int K) {
    switch (xq_kind(wt, K)) {
    case XQ_BF16: return (size_t)K * 2;
    case XQ_X8: return ft_ggml_x8_bytes(K);
    case XQ_X32: return ft_ggml_x32_bytes(K);
    default: return 0;
    }
}

void ft_cpu_xq_quant(enum ft_dtype wt, const float *x, int ldx, int K, int T, void *xq) {
    enum xq_kind k = xq_kind(wt, K);
    FT_ASSERT(k != XQ_NONE);
#ifdef FT_X86
    if (k == XQ_BF16) {
        to_bf16_rne(x, ldx, K, T, xq);
        return;
    }
#endif
    if (k == XQ_X8) ft_ggml_quant_x8(ft_dtype_ggml(wt), x, ldx, K, T, xq);
    else if (wt == FT_DTYPE_NVFP4) ft_nvfp4_quant_x32(x, ldx, K, T, xq);
    else ft_ggml_quant_x32(x, ldx, K, T, xq);
}

void ft_cpu_matmul_rows_xq(float *y, int ldy, const void *xq, const void *w, enum ft_dtype wt,
                           int T, int n0, int n1, int K) {
    if (T <= 0 || n1 <= n0) return;
    enum xq_kind k = xq_kind(wt, K);
    FT_ASSERT(k != XQ_NONE);
#ifdef FT_X86
    if (k == XQ_BF16) {
        if (wt == FT_DTYPE_FP8_B128) rowsfp8bf(y, ldy, xq, w, T, n0, n1, K);
        else rowsbf(y, ldy, xq, w, T, n0, n1, K);
        return;
    }
#endif
    size_t rb = ft_dtype_row_bytes(wt, K);
    const uint8_t *w0 = (const uint8_t *)w + (size_t)n0 * rb;
    if (wt == FT_DTYPE_NVFP4)
        ft_nvfp4_r_dot_rows_x32(w0, rb, n1 - n0, xq, T, (size_t)K, y + n0, ldy);
    else if (k == XQ_X8)
        ft_ggml_dot_rows_x8(ft_dtype_ggml(wt), w0, rb, n1 - n0, xq, T, y + n0, ldy);
    else
        ft_ggml_dot_rows_x32(ft_dtype_ggml(wt), w0, rb, n1 - n0, xq, T, y + n0, ldy);
}

struct xq_ctx {
    enum ft_dtype wt;
    const float *x;
    int ldx, K, T;
    uint8_t *xq;
    size_t bytes;
};

static void xq_worker(void *arg, int i, int n) {
    const struct xq_ctx cc = *(const struct xq_ctx *)arg, *c = &cc; /* POOL_COPY (ops.h) */
    long lo, hi;
    ft_split(c->T, i, n, &lo, &hi);
    if (hi > lo)
        ft_cpu_xq_quant(c->wt, c->x + (size_t)lo * c->ldx, c->ldx, c->K, (int)(hi - lo),
                        c->xq + (size_t)lo * c->bytes);
}

void ft_cpu_xq_quant_pool(struct ft_pool *pool, enum ft_dtype wt, const float *x, int ldx, int K,
                          int T, void *xq) {
    struct xq_ctx c = {wt, x, ldx, K, T, xq, ft_cpu_xq_bytes(wt, K)};
    if (T <= 1 || (size_t)T * K <= 32768) { /* decode, or the CPU executor's few rows of one
                                              * token: not worth waking the pool */
        ft_cpu_xq_quant(wt, x, ldx, K, T, xq);
        return;
    }
    ft_pool_run(pool, xq_worker, &c);
}

/* ---------------------------------------------------------------- pool ------ */

#define ROW_CHUNK 8 /* rows per unit of the split: two 4-row tiles */

struct matmul_ctx {
    float *y;          /* [T, N] */
    const float *x;    /* [T, K] */
    const void *w;     /* [N, K] wt */
    const float *bias; /* [N] or NULL */
    enum ft_dtype wt;
    int T, N, K;
};

static void matmul_worker(void *arg, int i, int n) {
    const struct matmul_ctx cc = *(const struct matmul_ctx *)arg, *c = &cc; /* POOL_COPY (ops.h) */
    long lo, hi;
    ft_split((c->N + ROW_CHUNK - 1) / ROW_CHUNK, i, n, &lo, &hi);
    int n0 = (int)(lo * ROW_CHUNK), n1 = (int)FT_MIN(hi * ROW_CHUNK, (long)c->N);
    if (n1 <= n0) return;
    ft_cpu_matmul_rows(c->y, c->N, c->x, c->K, c->w, c->wt, c->T, n0, n1, c->K);
    if (!c->bias) return;
    for (int t = 0; t < c->T; t++) {
        float *yt = c->y + (size_t)t * c->N;
        for (int r = n0; r < n1; r++)
            yt[r] += c->bias[r];
    }
}

void ft_cpu_matmul(struct ft_pool *pool, float *y, const float *x, const void *w, enum ft_dtype wt,
                   const float *bias, int T, int N, int K) {
    struct matmul_ctx c = {y, x, w, bias, wt, T, N, K};
    (void)ft_cpu_isa(); /* detect (and log) before the workers race for it */
    ft_pool_run(pool, matmul_worker, &c);
}
