/* matmul.c — y = x · w^T with fp32 activations and F32/F16/BF16 weights read in place.
 * ft_cpu_matmul_rows is the kernel everything else (dense layers, the MoE CPU executor) runs:
 * rows are processed in tiles of 4; for each tile the token blocks are looped inside, so the
 * tile's weight rows stay in L1/L2 while x streams past, and each weight vector is loaded and
 * converted once per token block (4 rows x 4 tokens = 16 zmm accumulators on AVX-512,
 * 4 rows x 2 tokens on AVX2). Decode (T = 1) streams 4 rows at once with one accumulator each.
 * Accumulation is fp32 in lane-parallel order with one horizontal sum per output.
 * Tiers are runtime-dispatched target() functions (no per-file flags; the build is plain -O2).
 * Threading: ft_cpu_matmul_rows is single-threaded and reentrant; ft_cpu_matmul runs on the
 * pool, one caller at a time. */
#include "backend/cpu/ops.h"

#include "core/status.h"

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
    for (int k = 0; k < K; k++) lane[k & 7] += x[k] * wload(w, base + (size_t)k, wt);
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

static void rows_scalar(float *y, int ldy, const float *x, int ldx, const void *w,
                        enum ft_dtype wt, int T, int n0, int n1, int K) {
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

/* y[t+j, n+r] for r < R, j < TT (R <= 4, TT <= 4, both constant after inlining).
 * w: [N, K] of wt; x: [T, K] stride ldx. */
INL512 void tile512(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int K, int n, int t, const int R, const int TT) {
    const size_t esz = wt == FT_DTYPE_F32 ? 4 : 2;
    const char *wr[4];
    const float *xr[4];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) wr[r] = (const char *)w + (size_t)(n + r) * (size_t)K * esz;
#pragma GCC unroll 4
    for (int j = 0; j < TT; j++) xr[j] = x + (size_t)(t + j) * ldx;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int j = 0; j < TT; j++) acc[r][j] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) wv[r] = ld512(wr[r], k, wt);
#pragma GCC unroll 4
        for (int j = 0; j < TT; j++) {
            __m512 xv = _mm512_loadu_ps(xr[j] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) wv[r] = ld512m(wr[r], k, wt, m);
#pragma GCC unroll 4
        for (int j = 0; j < TT; j++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, xr[j] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < TT; j++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) y[(size_t)(t + j) * ldy + n + r] = _mm512_reduce_add_ps(acc[r][j]);
}

/* Rows n0..n1 in tiles of 4 (then single rows); tokens in blocks of 4, 2, 1 inside. */
INL512 void rows512(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int T, int n0, int n1, int K) {
    int n = n0;
    for (; n + 4 <= n1; n += 4) {
        int t = 0;
        for (; t + 4 <= T; t += 4) tile512(y, ldy, x, ldx, w, wt, K, n, t, 4, 4);
        if (t + 2 <= T) tile512(y, ldy, x, ldx, w, wt, K, n, t, 4, 2), t += 2;
        if (t < T) tile512(y, ldy, x, ldx, w, wt, K, n, t, 4, 1);
    }
    for (; n < n1; n++) {
        int t = 0;
        for (; t + 4 <= T; t += 4) tile512(y, ldy, x, ldx, w, wt, K, n, t, 1, 4);
        for (; t < T; t++) tile512(y, ldy, x, ldx, w, wt, K, n, t, 1, 1);
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

/* As tile512 with 8-wide vectors, R <= 4 rows x TT <= 2 tokens; the K tail is scalar. */
INL256 void tile256(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int K, int n, int t, const int R, const int TT) {
    const size_t esz = wt == FT_DTYPE_F32 ? 4 : 2;
    const char *wr[4];
    const float *xr[2];
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) wr[r] = (const char *)w + (size_t)(n + r) * (size_t)K * esz;
#pragma GCC unroll 2
    for (int j = 0; j < TT; j++) xr[j] = x + (size_t)(t + j) * ldx;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int j = 0; j < TT; j++) acc[r][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) wv[r] = ld256(wr[r], k, wt);
#pragma GCC unroll 2
        for (int j = 0; j < TT; j++) {
            __m256 xv = _mm256_loadu_ps(xr[j] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][j] = _mm256_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
#pragma GCC unroll 2
    for (int j = 0; j < TT; j++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            float s = hsum256(acc[r][j]);
            for (int kk = k; kk < K; kk++) s += xr[j][kk] * wload(wr[r], (size_t)kk, wt);
            y[(size_t)(t + j) * ldy + n + r] = s;
        }
}

INL256 void rows256(float *y, int ldy, const float *x, int ldx, const void *w, enum ft_dtype wt,
                    int T, int n0, int n1, int K) {
    int n = n0;
    for (; n + 4 <= n1; n += 4) {
        int t = 0;
        for (; t + 2 <= T; t += 2) tile256(y, ldy, x, ldx, w, wt, K, n, t, 4, 2);
        if (t < T) tile256(y, ldy, x, ldx, w, wt, K, n, t, 4, 1);
    }
    for (; n < n1; n++) {
        int t = 0;
        for (; t + 2 <= T; t += 2) tile256(y, ldy, x, ldx, w, wt, K, n, t, 1, 2);
        if (t < T) tile256(y, ldy, x, ldx, w, wt, K, n, t, 1, 1);
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

void ft_cpu_matmul_rows(float *y, int ldy, const float *x, int ldx, const void *w,
                        enum ft_dtype wt, int T, int n0, int n1, int K) {
    FT_ASSERT(wt == FT_DTYPE_F32 || wt == FT_DTYPE_F16 || wt == FT_DTYPE_BF16);
    if (T <= 0 || n1 <= n0) return;
    rows_fn fn = NULL;
#ifdef FT_X86
    int d = wt == FT_DTYPE_F32 ? 0 : wt == FT_DTYPE_F16 ? 1 : 2;
    static const rows_fn k512[3] = {rows512_f32, rows512_f16, rows512_bf16};
    static const rows_fn k256[3] = {rows256_f32, rows256_f16, rows256_bf16};
    enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512) fn = k512[d];
    else if (isa == FT_ISA_AVX2) fn = k256[d];
#endif
    if (fn) fn(y, ldy, x, ldx, w, T, n0, n1, K);
    else rows_scalar(y, ldy, x, ldx, w, wt, T, n0, n1, K);
}

/* ---------------------------------------------------------------- pool ------ */

#define ROW_CHUNK 8  /* rows per unit of the split: two 4-row tiles */

struct matmul_ctx {
    float *y;           /* [T, N] */
    const float *x;     /* [T, K] */
    const void *w;      /* [N, K] wt */
    const float *bias;  /* [N] or NULL */
    enum ft_dtype wt;
    int T, N, K;
};

static void matmul_worker(void *arg, int i, int n) {
    const struct matmul_ctx *c = arg;
    long lo, hi;
    ft_split((c->N + ROW_CHUNK - 1) / ROW_CHUNK, i, n, &lo, &hi);
    int n0 = (int)(lo * ROW_CHUNK), n1 = (int)FT_MIN(hi * ROW_CHUNK, (long)c->N);
    if (n1 <= n0) return;
    ft_cpu_matmul_rows(c->y, c->N, c->x, c->K, c->w, c->wt, c->T, n0, n1, c->K);
    if (!c->bias) return;
    for (int t = 0; t < c->T; t++) {
        float *yt = c->y + (size_t)t * c->N;
        for (int r = n0; r < n1; r++) yt[r] += c->bias[r];
    }
}

void ft_cpu_matmul(struct ft_pool *pool, float *y, const float *x, const void *w,
                   enum ft_dtype wt, const float *bias, int T, int N, int K) {
    struct matmul_ctx c = {y, x, w, bias, wt, T, N, K};
    (void)ft_cpu_isa(); /* detect (and log) before the workers race for it */
    ft_pool_run(pool, matmul_worker, &c);
}
