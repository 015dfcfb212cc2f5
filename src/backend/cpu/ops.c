/* ops.c — the CPU backend's non-matmul ops on fp32 activations: embedding lookup, RMSNorm,
 * rotate-half RoPE, causal GQA attention over a KV cache, SiLU-gate, add, softmax, top-k.
 * Numerics follow Hugging Face's fp32 paths (RMSNorm sum of squares in fp32, RoPE angles as
 * (float)pos * inv_freq). Attention uses an online softmax over blocks of positions, with the
 * dot products and the V accumulation vectorised for the current ISA tier.
 * Threading: ft_cpu_attention runs on the pool (one caller at a time); the others are
 * single-threaded and reentrant. */
#include "backend/cpu/ops.h"

#include <math.h>

#include "core/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FT_X86 1
#endif

void ft_cpu_embed(float *out, const void *table, enum ft_dtype wt, const int32_t *ids, int T,
                  int H) {
    size_t row_bytes = ft_dtype_row_bytes(wt, H);
    for (int t = 0; t < T; t++)
        ft_to_f32(out + (size_t)t * H, (const char *)table + (size_t)ids[t] * row_bytes, wt,
                  (size_t)H);
}

void ft_cpu_rmsnorm(float *y, const float *x, const float *w, int T, int H, float eps) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * H;
        float *yt = y + (size_t)t * H;
        float lane[8] = {0};
        for (int i = 0; i < H; i++)
            lane[i & 7] += xt[i] * xt[i];
        float ss = ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
                   ((lane[2] + lane[6]) + (lane[3] + lane[7]));
        float r = 1.0f / sqrtf(ss / (float)H + eps);
        for (int i = 0; i < H; i++)
            yt[i] = w[i] * (xt[i] * r);
    }
}

void ft_cpu_rope(float *x, const int32_t *pos, const float *inv_freq, float mscale, int T,
                 int n_heads, int head_dim, int rot_dim) {
    int half = rot_dim / 2;
    for (int t = 0; t < T; t++) {
        float *xt = x + (size_t)t * n_heads * head_dim;
        for (int i = 0; i < half; i++) {
            float a = (float)pos[t] * inv_freq[i];
            float c = cosf(a) * mscale, s = sinf(a) * mscale;
            for (int h = 0; h < n_heads; h++) {
                float *xh = xt + (size_t)h * head_dim;
                float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * c - x1 * s;
                xh[i + half] = x1 * c + x0 * s;
            }
        }
    }
}

/* One gated activation (enum ft_swiglu): SiLU(g) * u; or, with g <= limit and |u| <= limit,
 * gpt-oss's (u + 1) g sigmoid(alpha g) or DeepSeek-V4's u g sigmoid(g). */
static inline float act_one(float g, float u, enum ft_swiglu mode, float limit, float alpha) {
    if (mode == FT_SWIGLU_PLAIN) return g / (1.0f + expf(-g)) * u;
    g = g < limit ? g : limit;
    u = u < -limit ? -limit : u > limit ? limit : u;
    if (mode == FT_SWIGLU_CLAMP) return u * (g * ft_sigmoid(g));
    return (u + 1.0f) * (g * ft_sigmoid(g * alpha));
}

/* e^(x - shift), 0 for -inf and NaN: ft_cpu_exp_shift's scalar tier and its vector tails. */
static inline float exp_or_zero(float x, float shift) { return x > -INFINITY ? expf(x - shift) : 0.0f; }

#ifdef FT_X86
#define TV512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define TV256 __attribute__((target("avx2,fma,f16c")))

/* e^x = 2^n e^r, x = n ln2 + r: log2(e), ln2 in two parts (the first exact in few bits, so
 * n * EXP_LN2_HI is exact), and the coefficients of p (highest first) in e^r = 1 + r + r^2 p(r),
 * the degree-5 minimax polynomial of the Cephes library's expf (within 2 ulp). */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
static const float k_exp_p[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

/* e^x, 16 lanes: e^r (|r| <= ln2 / 2) times 2^n by vscalefps, which also gives 0 below the
 * subnormals and inf above FLT_MAX. x is clamped to [-104, 89] first (e^x is 0 / inf beyond),
 * NaN passes. */
TV512 static inline __m512 exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(k_exp_p[0]);
#pragma GCC unroll 8
    for (int j = 1; j < 6; j++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k_exp_p[j]));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* The same for 8 lanes without vscalefps: x clamped to [-87, 88] so 2^n is a normal float
 * built from its exponent bits (e^-87 = 1.6e-38 and e^88 = 1.7e38 stand in for 0 and inf:
 * SiLU and the sigmoid come out the same to far below their rounding). */
TV256 static inline __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(k_exp_p[0]);
#pragma GCC unroll 8
    for (int j = 1; j < 6; j++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k_exp_p[j]));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* One row of act_one's activation; the last I % 16 lanes masked. The clamped modes share one
 * formula: (u + off) g sigmoid(a g), off 1 and a alpha for OAI, off 0 and a 1 for CLAMP. */
TV512 static void act_row512(float *o, const float *g, const float *u, int I, enum ft_swiglu mode,
                             float limit, float alpha) {
    const __m512 one = _mm512_set1_ps(1.0f), lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit);
    const int clamped = mode != FT_SWIGLU_PLAIN, v4 = mode == FT_SWIGLU_CLAMP;
    const float a = v4 ? 1.0f : alpha;
    const __m512 off = _mm512_set1_ps(v4 ? 0.0f : 1.0f);
    for (int i = 0; i < I; i += 16) {
        const __mmask16 k = I - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (I - i)) - 1);
        __m512 gv = _mm512_maskz_loadu_ps(k, g + i), uv = _mm512_maskz_loadu_ps(k, u + i), y;
        if (clamped) {
            gv = _mm512_min_ps(gv, lim);
            uv = _mm512_min_ps(lim, _mm512_max_ps(nlim, uv)); /* a NaN u stays NaN, as scalar */
            const __m512 sg = _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_mul_ps(gv, _mm512_set1_ps(-a)))));
            y = _mm512_mul_ps(_mm512_add_ps(uv, off), _mm512_mul_ps(gv, sg));
        } else {
            y = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv)))), uv);
        }
        _mm512_mask_storeu_ps(o + i, k, y);
    }
}

TV256 static void act_row256(float *o, const float *g, const float *u, int I, enum ft_swiglu mode,
                             float limit, float alpha) {
    const __m256 one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit);
    const int clamped = mode != FT_SWIGLU_PLAIN, v4 = mode == FT_SWIGLU_CLAMP;
    const float a = v4 ? 1.0f : alpha;
    const __m256 off = _mm256_set1_ps(v4 ? 0.0f : 1.0f);
    int i = 0;
    for (; i + 8 <= I; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i), y;
        if (clamped) {
            gv = _mm256_min_ps(gv, lim);
            uv = _mm256_min_ps(lim, _mm256_max_ps(nlim, uv)); /* a NaN u stays NaN, as scalar */
            const __m256 sg = _mm256_div_ps(one, _mm256_add_ps(one, exp256(_mm256_mul_ps(gv, _mm256_set1_ps(-a)))));
            y = _mm256_mul_ps(_mm256_add_ps(uv, off), _mm256_mul_ps(gv, sg));
        } else {
            y = _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv)))), uv);
        }
        _mm256_storeu_ps(o + i, y);
    }
    for (; i < I; i++) o[i] = act_one(g[i], u[i], mode, limit, alpha); /* as the scalar tier */
}

/* y = e^(x - shift) over 16 lanes, 0 where x is -inf or NaN; returns the sum of y, added in
 * double lanes (a fixed order: the same sum every call on this tier). */
TV512 static double exp_shift512(float *y, const float *x, int n, float shift) {
    const __m512 sh = _mm512_set1_ps(shift), ninf = _mm512_set1_ps(-INFINITY);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 xv = _mm512_maskz_loadu_ps(k, x + i);
        const __mmask16 live = k & _mm512_cmp_ps_mask(xv, ninf, _CMP_GT_OQ); /* not -inf, not NaN */
        const __m512 e = _mm512_maskz_mov_ps(live, exp512(_mm512_sub_ps(xv, sh)));
        _mm512_mask_storeu_ps(y + i, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

TV256 static double exp_shift256(float *y, const float *x, int n, float shift) {
    const __m256 sh = _mm256_set1_ps(shift), lo = _mm256_set1_ps(-87.0f);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), sh);
        /* 0 below -87, where exp256 stops (and for -inf and NaN): e^-87 is not 0 to a sampler */
        const __m256 e = _mm256_andnot_ps(_mm256_cmp_ps(d, lo, _CMP_NGE_UQ), exp256(d));
        _mm256_storeu_ps(y + i, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double d[4], sum = 0;
    _mm256_storeu_pd(d, _mm256_add_pd(s0, s1));
    sum = (d[0] + d[1]) + (d[2] + d[3]);
    for (; i < n; i++) sum += y[i] = exp_or_zero(x[i], shift);
    return sum;
}
#endif

double ft_cpu_exp_shift(float *y, const float *x, int n, float shift) {
#ifdef FT_X86
    const enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512) return exp_shift512(y, x, n, shift);
    if (isa >= FT_ISA_AVX2) return exp_shift256(y, x, n, shift);
#endif
    double sum = 0;
    for (int i = 0; i < n; i++) sum += y[i] = exp_or_zero(x[i], shift);
    return sum;
}


/* The gated activations row by row: the vector tiers' e^x is within 2 ulp of expf (libm's
 * on the scalar tier), so results differ from it in the last bits (test_cpu_ops bounds it). */
static void act_rows(float *out, const float *gate_up, int T, int I, enum ft_swiglu mode,
                     float limit, float alpha) {
#ifdef FT_X86
    const enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX2) {
        for (int t = 0; t < T; t++) {
            const float *g = gate_up + (size_t)t * 2 * I;
            if (isa >= FT_ISA_AVX512) act_row512(out + (size_t)t * I, g, g + I, I, mode, limit, alpha);
            else act_row256(out + (size_t)t * I, g, g + I, I, mode, limit, alpha);
        }
        return;
    }
#endif
    for (int t = 0; t < T; t++) {
        const float *g = gate_up + (size_t)t * 2 * I, *u = g + I;
        float *o = out + (size_t)t * I;
        for (int i = 0; i < I; i++) o[i] = act_one(g[i], u[i], mode, limit, alpha);
    }
}

void ft_cpu_silu_mul(float *out, const float *gate_up, int T, int I) {
    act_rows(out, gate_up, T, I, FT_SWIGLU_PLAIN, 0.0f, 0.0f);
}

void ft_cpu_swiglu(float *out, const float *gate_up, int T, int I, enum ft_swiglu mode, float limit,
                   float alpha) {
    act_rows(out, gate_up, T, I, mode, limit, alpha);
}

void ft_cpu_gelu_tanh_mul(float *out, const float *gate_up, int T, int I) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int t = 0; t < T; t++) {
        const float *g = gate_up + (size_t)t * 2 * I, *u = g + I;
        float *o = out + (size_t)t * I;
        for (int i = 0; i < I; i++) {
            float x = g[i];
            o[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * u[i];
        }
    }
}

void ft_cpu_add(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void ft_cpu_softmax(float *x, int n) {
    if (n <= 0) return;
    float m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

/* Insertion into a sorted list of the best so far; a later index enters only when strictly
 * greater, so ties keep the lower index first. NaN compares as the lowest value. */
void ft_cpu_topk(const float *x, int n, int k, int *idx, float *val) {
    if (k > n) k = n;
    int have = 0;
    for (int i = 0; i < n; i++) {
        float v = isnan(x[i]) ? -INFINITY : x[i];
        if (have == k && !(v > val[k - 1])) continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && v > val[j - 1]) {
            val[j] = val[j - 1];
            idx[j] = idx[j - 1];
            j--;
        }
        val[j] = v;
        idx[j] = i;
    }
}

/* ---------------------------------------------------------------- attention -- */

/* Vector helpers: dot(a, b, n), y += a * x, y *= a. One set per tier. */
struct vec_ops {
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n);
    void (*scale)(float *y, float a, int n);
};

static float dot_c(const float *a, const float *b, int n) {
    float lane[8] = {0};
    for (int i = 0; i < n; i++)
        lane[i & 7] += a[i] * b[i];
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
           ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}
static void axpy_c(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}
static void scale_c(float *y, float a, int n) {
    for (int i = 0; i < n; i++)
        y[i] *= a;
}

#ifdef FT_X86
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define T256 __attribute__((target("avx2,fma,f16c")))

T512 static float dot_512(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}
T512 static void axpy_512(float *y, float a, const float *x, int n) {
    __m512 av = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 r =
            _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
        _mm512_mask_storeu_ps(y + i, m, r);
    }
}
T512 static void scale_512(float *y, float a, int n) {
    __m512 av = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* the sum of v's 8 lanes, pairwise */
static inline __attribute__((always_inline)) T256 float hsum256(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

T256 static float dot_256(const float *a, const float *b, int n) {
    __m256 s = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
    float r = hsum256(s);
    for (; i < n; i++)
        r += a[i] * b[i];
    return r;
}
T256 static void axpy_256(float *y, float a, const float *x, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}
T256 static void scale_256(float *y, float a, int n) {
    __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] *= a;
}
#endif

static struct vec_ops pick_vec_ops(void) {
#ifdef FT_X86
    enum ft_cpu_isa isa = ft_cpu_isa();
    if (isa >= FT_ISA_AVX512) return (struct vec_ops){dot_512, axpy_512, scale_512};
    if (isa == FT_ISA_AVX2) return (struct vec_ops){dot_256, axpy_256, scale_256};
#endif
    return (struct vec_ops){dot_c, axpy_c, scale_c};
}

#define ATT_BLOCK 64 /* positions scored per online-softmax step */

struct attn_ctx {
    float *out;             /* [T, n_heads, head_dim] */
    const float *q, *k, *v; /* q: [T, n_heads, hd]; k, v: [S, n_kv_heads, hd] */
    const int32_t *pos;     /* [T] */
    int T, n_heads, n_kv_heads, head_dim, window;
    float scale;
    struct vec_ops ops;
    const int32_t *const *blocks; /* paged: [T] block table of each token's sequence, or NULL */
    int block_size;
    const float *sinks;     /* [n_heads] sink logits (an extra softmax column, no value) or NULL */
};

/* Cache row of position p for token t: contiguous, or through the token's block table. */
static inline size_t kv_row(const struct attn_ctx *c, int t, int p) {
    if (!c->blocks) return (size_t)p;
    return (size_t)c->blocks[t][p / c->block_size] * c->block_size + (size_t)(p % c->block_size);
}

/* One (token, head): online softmax over blocks of positions; acc is the output row. */
static void attn_one(const struct attn_ctx *c, int t, int h) {
    int hd = c->head_dim, kvh = h / (c->n_heads / c->n_kv_heads);
    size_t kv_stride = (size_t)c->n_kv_heads * hd;
    const float *qh = c->q + ((size_t)t * c->n_heads + h) * hd;
    const float *kb = c->k + (size_t)kvh * hd, *vb = c->v + (size_t)kvh * hd;
    float *acc = c->out + ((size_t)t * c->n_heads + h) * hd;
    int p1 = c->pos[t] + 1, p0 = c->window > 0 ? FT_MAX(0, p1 - c->window) : 0;
    float m = -INFINITY, l = 0.0f, s[ATT_BLOCK];
    for (int i = 0; i < hd; i++)
        acc[i] = 0.0f;
    for (int b = p0; b < p1; b += ATT_BLOCK) {
        int nb = FT_MIN(ATT_BLOCK, p1 - b);
        float bm = -INFINITY;
        for (int j = 0; j < nb; j++) {
            s[j] = c->ops.dot(qh, kb + kv_row(c, t, b + j) * kv_stride, hd) * c->scale;
            bm = s[j] > bm ? s[j] : bm;
        }
        if (bm > m) { /* rescale what was accumulated under the old max */
            float corr = expf(m - bm);
            l *= corr;
            c->ops.scale(acc, corr, hd);
            m = bm;
        }
        for (int j = 0; j < nb; j++) {
            float e = expf(s[j] - m);
            l += e;
            c->ops.axpy(acc, e, vb + kv_row(c, t, b + j) * kv_stride, hd);
        }
    }
    if (c->sinks) l += expf(c->sinks[h] - m); /* the sink takes its share of the softmax */
    if (l > 0.0f) c->ops.scale(acc, 1.0f / l, hd);
}

#ifdef FT_X86
/* attn_one for head_dim 16 * NV on AVX-512 (64 and 128: every supported model but odd test
 * shapes), for up to R = 4 query heads of one token that share a KV head (GQA) at once: each
 * cached K and V row is loaded once for all of them (a group of G heads is done in
 * ceil(G / R) passes), the outputs accumulate in registers (a little spilled at hd 128, still
 * 27% faster there than R = 2; R = 8 spills too much at either size), and there is no call or
 * mask per row. Long-context attention reads the cache from L2/L3 for every head, so sharing
 * each row across heads is most of the gain. Same online softmax and the same expf as
 * attn_one; q is scaled first and each q.k summed in another order. */
#define ATT_SPEC(NV, R)                                                                            \
    T512 static void attn_rows_512_##NV(const struct attn_ctx *c, int t, int h0, int nr) {        \
        const int hd = 16 * NV, kvh = h0 / (c->n_heads / c->n_kv_heads);                          \
        const size_t kv_stride = (size_t)c->n_kv_heads * hd;                                       \
        const float *kb = c->k + (size_t)kvh * hd, *vb = c->v + (size_t)kvh * hd;                  \
        const int p1 = c->pos[t] + 1, p0 = c->window > 0 ? FT_MAX(0, p1 - c->window) : 0;         \
        __m512 acc[R][NV];                                                                         \
        _Alignas(64) float qs[R][16 * NV]; /* the rows' q, scaled */                               \
        float m[R], l[R], s[R][ATT_BLOCK];                                                         \
        const __m512 sc = _mm512_set1_ps(c->scale);                                                \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                      \
            const float *qh = c->q + ((size_t)t * c->n_heads + h0 + (r < nr ? r : 0)) * hd;         \
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) {                                 \
                _mm512_store_ps(qs[r] + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(qh + 16 * v), sc)); \
                acc[r][v] = _mm512_setzero_ps();                                                   \
            }                                                                                      \
            m[r] = -INFINITY, l[r] = 0.0f;                                                         \
        }                                                                                          \
        for (int b = p0; b < p1; b += ATT_BLOCK) {                                                 \
            const int nb = FT_MIN(ATT_BLOCK, p1 - b);                                              \
            float bm[R];                                                                           \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) bm[r] = -INFINITY;                 \
            for (int j = 0; j < nb; j++) {                                                         \
                const float *kr = kb + kv_row(c, t, b + j) * kv_stride;                            \
                __m512 kv[NV];                                                                     \
                _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) kv[v] = _mm512_loadu_ps(kr + 16 * v); \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                              \
                    __m512 d = _mm512_mul_ps(_mm512_load_ps(qs[r]), kv[0]);                        \
                    _Pragma("GCC unroll 8") for (int v = 1; v < NV; v++)                           \
                        d = _mm512_fmadd_ps(_mm512_load_ps(qs[r] + 16 * v), kv[v], d);             \
                    s[r][j] = _mm512_reduce_add_ps(d);                                             \
                    bm[r] = s[r][j] > bm[r] ? s[r][j] : bm[r];                                     \
                }                                                                                  \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                  \
                if (bm[r] > m[r]) { /* rescale what was accumulated under the old max */           \
                    const float corr = expf(m[r] - bm[r]);                                         \
                    const __m512 cv = _mm512_set1_ps(corr);                                        \
                    l[r] *= corr;                                                                  \
                    _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)                           \
                        acc[r][v] = _mm512_mul_ps(acc[r][v], cv);                                  \
                    m[r] = bm[r];                                                                  \
                }                                                                                  \
                for (int j = 0; j < nb; j++) { /* the weights, in place of the scores */           \
                    s[r][j] = expf(s[r][j] - m[r]);                                                \
                    l[r] += s[r][j];                                                               \
                }                                                                                  \
            }                                                                                      \
            for (int j = 0; j < nb; j++) {                                                         \
                const float *vr = vb + kv_row(c, t, b + j) * kv_stride;                            \
                __m512 vv[NV];                                                                     \
                _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) vv[v] = _mm512_loadu_ps(vr + 16 * v); \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                              \
                    const __m512 ev = _mm512_set1_ps(s[r][j]);                                     \
                    _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)                           \
                        acc[r][v] = _mm512_fmadd_ps(ev, vv[v], acc[r][v]);                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < nr; r++) {                                                             \
            float lr = l[r];                                                                       \
            if (c->sinks) lr += expf(c->sinks[h0 + r] - m[r]);                                     \
            const __m512 il = _mm512_set1_ps(lr > 0.0f ? 1.0f / lr : 0.0f);                        \
            float *out = c->out + ((size_t)t * c->n_heads + h0 + r) * hd;                          \
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)                                   \
                _mm512_storeu_ps(out + 16 * v, _mm512_mul_ps(acc[r][v], il));                      \
        }                                                                                          \
    }
ATT_SPEC(4, 4)
ATT_SPEC(8, 4)

/* The AVX2 twin, block by block instead of row by row (16 ymm registers cannot hold several
 * heads' outputs): for each block of ATT_BLOCK positions, every head of the group (up to
 * ATT_GROUP) scores it and then accumulates its V rows into an output held in 8 registers
 * per 64 dims; the block's K and V rows come from memory once, for the first head, and from
 * L1/L2 for the others. Same online softmax and expf. */
#define ATT_GROUP 16

T256 static void attn_group_256(const struct attn_ctx *c, int t, int h0, int nr) {
    const int hd = c->head_dim, kvh = h0 / (c->n_heads / c->n_kv_heads);
    const size_t kv_stride = (size_t)c->n_kv_heads * hd;
    const float *kb = c->k + (size_t)kvh * hd, *vb = c->v + (size_t)kvh * hd;
    const int p1 = c->pos[t] + 1, p0 = c->window > 0 ? FT_MAX(0, p1 - c->window) : 0;
    _Alignas(32) float qs[ATT_GROUP][128], acc[ATT_GROUP][128];
    float m[ATT_GROUP], l[ATT_GROUP], s[ATT_BLOCK];
    const float *rows[ATT_BLOCK]; /* the block's K rows, then its V rows */
    const __m256 sc = _mm256_set1_ps(c->scale);
    for (int r = 0; r < nr; r++) {
        const float *qh = c->q + ((size_t)t * c->n_heads + h0 + r) * hd;
        for (int d = 0; d < hd; d += 8) {
            _mm256_store_ps(qs[r] + d, _mm256_mul_ps(_mm256_loadu_ps(qh + d), sc));
            _mm256_store_ps(acc[r] + d, _mm256_setzero_ps());
        }
        m[r] = -INFINITY, l[r] = 0.0f;
    }
    for (int b = p0; b < p1; b += ATT_BLOCK) {
        const int nb = FT_MIN(ATT_BLOCK, p1 - b);
        for (int r = 0; r < nr; r++) {
            for (int j = 0; j < nb; j++) rows[j] = kb + kv_row(c, t, b + j) * kv_stride;
            float bm = -INFINITY;
            for (int j = 0; j < nb; j++) { /* q.k: two accumulators over the 8-float pieces */
                __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps();
                for (int d = 0; d < hd; d += 16) {
                    d0 = _mm256_fmadd_ps(_mm256_load_ps(qs[r] + d), _mm256_loadu_ps(rows[j] + d), d0);
                    d1 = _mm256_fmadd_ps(_mm256_load_ps(qs[r] + d + 8),
                                         _mm256_loadu_ps(rows[j] + d + 8), d1);
                }
                s[j] = hsum256(_mm256_add_ps(d0, d1));
                bm = s[j] > bm ? s[j] : bm;
            }
            float corr = 1.0f;
            if (bm > m[r]) { /* rescale what was accumulated under the old max */
                corr = expf(m[r] - bm);
                l[r] *= corr;
                m[r] = bm;
            }
            for (int j = 0; j < nb; j++) {
                s[j] = expf(s[j] - m[r]);
                l[r] += s[j];
                rows[j] = vb + kv_row(c, t, b + j) * kv_stride;
            }
            for (int h = 0; h < hd; h += 64) { /* 64 dims of the output in 8 registers */
                const __m256 cv = _mm256_set1_ps(corr);
                __m256 a[8];
                for (int v = 0; v < 8; v++) a[v] = _mm256_mul_ps(_mm256_load_ps(acc[r] + h + 8 * v), cv);
                for (int j = 0; j < nb; j++) {
                    const __m256 ev = _mm256_set1_ps(s[j]);
                    for (int v = 0; v < 8; v++)
                        a[v] = _mm256_fmadd_ps(ev, _mm256_loadu_ps(rows[j] + h + 8 * v), a[v]);
                }
                for (int v = 0; v < 8; v++) _mm256_store_ps(acc[r] + h + 8 * v, a[v]);
            }
        }
    }
    for (int r = 0; r < nr; r++) {
        float lr = l[r];
        if (c->sinks) lr += expf(c->sinks[h0 + r] - m[r]);
        const __m256 il = _mm256_set1_ps(lr > 0.0f ? 1.0f / lr : 0.0f);
        float *out = c->out + ((size_t)t * c->n_heads + h0 + r) * hd;
        for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_load_ps(acc[r] + d), il));
    }
}
#endif

/* attn_one as a rows kernel of one head per call */
static void attn_one_rows(const struct attn_ctx *c, int t, int h0, int nr) {
    for (int r = 0; r < nr; r++) attn_one(c, t, h0 + r);
}

/* Units of (token, up to R heads of one KV group) dealt round-robin, so causal prefill (later
 * tokens cost more) stays balanced; the tier's kernel decides R (1 for the generic one). */
static void attn_worker(void *arg, int i, int n) {
    const struct attn_ctx cc = *(const struct attn_ctx *)arg, *c = &cc; /* POOL_COPY (ops.h) */
    void (*rows)(const struct attn_ctx *, int, int, int) = attn_one_rows;
    int R = 1;
#ifdef FT_X86
    if (c->head_dim == 64 || c->head_dim == 128) {
        if (ft_cpu_isa() >= FT_ISA_AVX512)
            rows = c->head_dim == 64 ? attn_rows_512_4 : attn_rows_512_8, R = 4;
        else if (ft_cpu_isa() == FT_ISA_AVX2)
            rows = attn_group_256, R = ATT_GROUP;
    }
#endif
    const int G = c->n_heads / c->n_kv_heads, per_group = (G + R - 1) / R;
    const int units_t = c->n_kv_heads * per_group;
    for (long u = i; u < (long)c->T * units_t; u += n) {
        const int t = (int)(u / units_t), w = (int)(u % units_t);
        const int g = w / per_group, h0 = g * G + (w % per_group) * R;
        rows(c, t, h0, FT_MIN(R, g * G + G - h0));
    }
}

void ft_cpu_attention(struct ft_pool *pool, float *out, const float *q, const float *k,
                      const float *v, const int32_t *pos, int T, int n_heads, int n_kv_heads,
                      int head_dim, float scale, int window) {
    FT_ASSERT(n_kv_heads > 0 && n_heads % n_kv_heads == 0);
    struct attn_ctx c = {out,     q,          k,        v,      pos,   T,
                         n_heads, n_kv_heads, head_dim, window, scale, pick_vec_ops(), NULL, 0,
                         NULL};
    ft_pool_run(pool, attn_worker, &c);
}

void ft_cpu_attention_paged(struct ft_pool *pool, float *out, const float *q, const float *k,
                            const float *v, const int32_t *pos, const int32_t *const *blocks,
                            int block_size, int T, int n_heads, int n_kv_heads, int head_dim,
                            float scale, int window, const float *sinks) {
    FT_ASSERT(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && block_size > 0);
    struct attn_ctx c = {out,     q,          k,        v,      pos,   T,
                         n_heads, n_kv_heads, head_dim, window, scale, pick_vec_ops(),
                         blocks,  block_size, sinks};
    ft_pool_run(pool, attn_worker, &c);
}

struct latent_ctx {
    float *out;
    const float *q, *cache;
    const int32_t *pos;
    const int32_t *const *blocks;
    int block_size, T, n_heads, d_qk, d_v, ld;
    float scale;
    const int32_t *sel, *n_sel; /* the kept positions of each token, or NULL (all p <= pos) */
    int k_sel;
};

static void latent_worker(void *ctx, int i, int n) {
    const struct latent_ctx cc = *(const struct latent_ctx *)ctx, *c = &cc; /* POOL_COPY (ops.h) */
    long lo, hi;
    ft_split((long)c->T * c->n_heads, i, n, &lo, &hi);
    int cap = 0;
    float *p = NULL;
    for (long w = lo; w < hi; w++) {
        const int t = (int)(w / c->n_heads), h = (int)(w % c->n_heads);
        const int S = c->sel ? c->n_sel[t] : c->pos[t] + 1;
        const int32_t *at = c->sel ? c->sel + (size_t)t * c->k_sel : NULL;
        if (S > cap) {
            float *np = realloc(p, (size_t)S * sizeof *p);
            if (!np) break; /* (rows left as they were: only on out of memory) */
            p = np, cap = S;
        }
        const float *qh = c->q + ((size_t)t * c->n_heads + h) * c->d_qk;
        float mx = -INFINITY;
        for (int j = 0; j < S; j++) {
            const int jp = at ? at[j] : j;
            const float *row = c->cache + ((size_t)c->blocks[t][jp / c->block_size] * c->block_size +
                                           jp % c->block_size) * c->ld;
            float d = 0;
            for (int x = 0; x < c->d_qk; x++) d += qh[x] * row[x];
            p[j] = d * c->scale;
            mx = p[j] > mx ? p[j] : mx;
        }
        float sum = 0;
        for (int j = 0; j < S; j++) sum += p[j] = expf(p[j] - mx);
        float *o = c->out + ((size_t)h * c->T + t) * c->d_v;
        memset(o, 0, (size_t)c->d_v * sizeof *o);
        for (int j = 0; j < S; j++) {
            const int jp = at ? at[j] : j;
            const float *row = c->cache + ((size_t)c->blocks[t][jp / c->block_size] * c->block_size +
                                           jp % c->block_size) * c->ld;
            const float wj = p[j] / sum;
            for (int x = 0; x < c->d_v; x++) o[x] += wj * row[x];
        }
    }
    free(p);
}

void ft_cpu_attention_latent(struct ft_pool *pool, float *out, const float *q, const float *cache,
                             const int32_t *pos, const int32_t *const *blocks, int block_size, int T,
                             int n_heads, int d_qk, int d_v, float scale) {
    ft_cpu_attention_latent_sel(pool, out, q, cache, d_qk, pos, blocks, block_size, T, n_heads, d_qk,
                                d_v, scale, NULL, NULL, 0);
}

void ft_cpu_attention_latent_sel(struct ft_pool *pool, float *out, const float *q, const float *cache,
                                 int ld, const int32_t *pos, const int32_t *const *blocks,
                                 int block_size, int T, int n_heads, int d_qk, int d_v, float scale,
                                 const int32_t *sel, const int32_t *n_sel, int k_sel) {
    FT_ASSERT(d_v <= d_qk && d_qk <= ld && block_size > 0);
    struct latent_ctx c = {out,     q,   cache, pos,   blocks, block_size, T, n_heads, d_qk,
                           d_v,     ld,  scale, sel,   n_sel,  k_sel};
    ft_pool_run(pool, latent_worker, &c);
}

/* --- the lightning indexer's top-k --- */

struct index_ctx {
    int32_t *sel, *n_sel;
    int k;
    const float *q, *w, *cache;
    int ld, off;
    const int32_t *pos;
    const int32_t *const *blocks;
    int block_size, T, n_heads, dim;
    float scale;
};

/* a beats b: a higher score, or the same score at a lower position (NaN never beats) */
static int index_beats(float sa, int pa, float sb, int pb) { return sa > sb || (sa == sb && pa < pb); }

/* Sifts heap slot i down: the root is the worst of the kept (score, position) pairs. */
static void index_sift(float *hs, int32_t *hp, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && index_beats(hs[m], hp[m], hs[l], hp[l])) m = l;
        if (r < n && index_beats(hs[m], hp[m], hs[r], hp[r])) m = r;
        if (m == i) return;
        float ts = hs[i];
        int32_t tp = hp[i];
        hs[i] = hs[m], hp[i] = hp[m], hs[m] = ts, hp[m] = tp;
        i = m;
    }
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void index_worker(void *ctx, int i, int n) {
    const struct index_ctx cc = *(const struct index_ctx *)ctx, *c = &cc; /* POOL_COPY (ops.h) */
    long lo, hi;
    ft_split(c->T, i, n, &lo, &hi);
    float *hs = lo < hi ? malloc((size_t)c->k * sizeof *hs) : NULL;
    for (long t = lo; hs && t < hi; t++) {
        const int S = c->pos[t] + 1;
        int32_t *out = c->sel + (size_t)t * c->k;
        if (S <= c->k) { /* fewer positions than kept: all of them */
            for (int p = 0; p < S; p++) out[p] = p;
            c->n_sel[t] = S;
            continue;
        }
        const float *qt = c->q + (size_t)t * c->n_heads * c->dim, *wt = c->w + (size_t)t * c->n_heads;
        int nh = 0; /* heap of the best so far in (hs, out), worst at the root */
        for (int p = 0; p < S; p++) {
            const float *key = c->cache + ((size_t)c->blocks[t][p / c->block_size] * c->block_size +
                                           p % c->block_size) * c->ld + c->off;
            float s = 0;
            for (int h = 0; h < c->n_heads; h++) {
                const float *qh = qt + (size_t)h * c->dim;
                float d = 0;
                for (int x = 0; x < c->dim; x++) d += qh[x] * key[x];
                d *= c->scale;
                s += wt[h] * (d > 0 ? d : 0);
            }
            if (nh < c->k) {
                hs[nh] = s, out[nh] = p, nh++;
                for (int j = nh - 1; j > 0;) { /* sift up */
                    int up = (j - 1) / 2;
                    if (!index_beats(hs[up], out[up], hs[j], out[j])) break;
                    float ts = hs[j];
                    int32_t tp = out[j];
                    hs[j] = hs[up], out[j] = out[up], hs[up] = ts, out[up] = tp;
                    j = up;
                }
            } else if (index_beats(s, p, hs[0], out[0])) {
                hs[0] = s, out[0] = p;
                index_sift(hs, out, nh, 0);
            }
        }
        qsort(out, (size_t)nh, sizeof *out, cmp_i32);
        c->n_sel[t] = nh;
    }
    free(hs);
}

void ft_cpu_index_topk(struct ft_pool *pool, int32_t *sel, int32_t *n_sel, int k, const float *q,
                       const float *w, const float *cache, int ld, int off, const int32_t *pos,
                       const int32_t *const *blocks, int block_size, int T, int n_heads, int dim,
                       float scale) {
    FT_ASSERT(k > 0 && off + dim <= ld && block_size > 0);
    struct index_ctx c = {sel, n_sel, k, q, w, cache, ld, off, pos, blocks, block_size, T, n_heads,
                          dim, scale};
    ft_pool_run(pool, index_worker, &c);
}
