/* fp_formats.h — CPU reference codecs of the quantised expert formats: the scalar minifloats
 * (FP8 E4M3 / E5M2, FP4 E2M1, the E8M0 and UE4M3 scales), row dequantisation of MXFP4 (gpt-oss
 * layout), NVFP4 (NVIDIA ModelOpt layout) and FP8 (128x128 block scales, or one per tensor), and
 * fp32-accumulating dot products of a packed row with an f32 vector.
 * The rules are those of the published specs (OCP 8-bit Floating Point; OCP Microscaling Formats
 * v1.0; NVIDIA's NVFP4 description), written out independently in tools/fp_reference.py, which
 * also writes the test vectors in tests/data/fp/ (tests/test_fp_formats.c).
 * Callers: the bank loader and the CPU expert executor (dequantisation, dot products), the CUDA
 * tests (reference values). Pure functions of their arguments: any thread, no state.
 *
 * Element order: a packed byte holds two e2m1 codes, element 2j in the low nibble and 2j+1 in
 * the high nibble. Rows may have any length n (a last partial block uses its block's scale).
 * Rounding of the scaled formats: every dequantised value is the exact product of the element
 * and its scale(s), rounded once to f32 (the element times the fp8 block scale is exact in f32,
 * so (e2m1 * ue4m3) * scale_2 is evaluated in that order). */
#ifndef FT_FORMAT_FP_FORMATS_H
#define FT_FORMAT_FP_FORMATS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define FT_FP_HD __host__ __device__ /* the GPU kernels decode e4m3 the same way */
#else
#define FT_FP_HD
#endif

/* ---- scalar codes ----
 * E4M3 ("fn": bias 7, no infinities, S.1111.111 is NaN, max 448, min subnormal 2^-9).
 * E5M2 (IEEE-like: bias 15, S.11111.00 is inf, S.11111.xx (xx != 0) NaN, max 57344).
 * E2M1 (bias 1, no inf/NaN: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; code 8 is -0).
 * E8M0 (unsigned power of two 2^(e-127); 0xFF is NaN; e = 0 gives the f32 subnormal 2^-127).
 * UE4M3 (NVFP4 block scale: E4M3 without a sign; the sign bit is ignored: 0x7F/0xFF are NaN). */
static inline FT_FP_HD float ft_e4m3_to_f32(uint8_t c) {
    uint32_t mag = c & 0x7fu, sign = (uint32_t)(c & 0x80u) << 24, u;
    float f;
    if (mag == 0x7fu) { /* NaN (the quiet one, whatever the sign) */
        u = 0x7fc00000u;
    } else if (mag < 8) { /* subnormal: m * 2^-9, exact */
        f = (float)mag * (1.0f / 512);
        return sign ? -f : f;
    } else { /* normal: exponent field e -> e - 7 + 127, mantissa bits to the top of f32's */
        u = sign | ((mag << 20) + (120u << 23));
    }
    memcpy(&f, &u, 4);
    return f;
}
float ft_e5m2_to_f32(uint8_t c);
float ft_e2m1_to_f32(uint8_t c); /* low 4 bits */
float ft_e8m0_to_f32(uint8_t c);
float ft_ue4m3_to_f32(uint8_t c);

/* Encoders, round to nearest, ties to even, from the f32 value (no double rounding).
 * E4M3: saturating: a finite value whose rounded magnitude exceeds 448, and +-inf, give +-448
 *   (0x7E/0xFE); NaN gives S.1111.111 with the input's sign. This is what torch 2.x's
 *   .to(torch.float8_e4m3fn) does (checked by tools/fp_reference.py) and what quantisers want.
 * E5M2: IEEE overflow: a rounded magnitude above 57344 (ties at 61440 round to even = inf) and
 *   +-inf give +-inf (0x7C/0xFC); NaN gives S.11111.11. Same as torch's float8_e5m2.
 * E2M1: saturating to +-6 (the MX spec's conversion to FP4); NaN, having no code, gives +0;
 *   -0 and negative values that round to zero give code 8 (-0). */
uint8_t ft_f32_to_e4m3(float f);
uint8_t ft_f32_to_e5m2(float f);
uint8_t ft_f32_to_e2m1(float f);

/* ---- rows ----
 * MXFP4 as gpt-oss stores it: blocks u8 [n_blocks, 16] (32 e2m1 per block), scales u8
 * [n_blocks] e8m0; value i = e2m1(i) * 2^(scales[i/32]-127). n_blocks = ceil(n/32). */
void ft_mxfp4_dequant_row(const uint8_t *blocks, const uint8_t *scales, size_t n, float *dst);
/* MXFP4 rows into GGML MXFP4 blocks (the expert banks' format: per 32 elements the E8M0 byte,
 * then 16 bytes, byte j holding element j low and j + 16 high). codes u8 [rows, K/2] (element 2j
 * in the low nibble of byte j: gpt-oss's *_blocks, DeepSeek-V4's I8 expert weights), scales u8
 * [rows, K/32] E8M0; K a multiple of 32; dst rows K/32 * 17 bytes apart. GGML reads a block as
 * twice the e2m1 value times half the scale, the same numbers, except that it has no NaN: the
 * return value counts the 0xFF (NaN) scale bytes, which the caller must reject. */
size_t ft_mxfp4_pack_ggml(uint8_t *dst, const uint8_t *codes, const uint8_t *scales, size_t rows,
                          size_t K);
/* NVFP4 as NVIDIA ModelOpt stores it: w u8 [ceil(n/2)] packed e2m1, scales u8 [ceil(n/16)]
 * fp8 e4m3 (`weight_scale`, decoded with its sign like torch's float8_e4m3fn), scale_2 the f32
 * `weight_scale_2`; value i = (e2m1(i) * e4m3(scales[i/16])) * scale_2. */
void ft_nvfp4_dequant_row(const uint8_t *w, const uint8_t *scales, float scale_2, size_t n,
                          float *dst);

/* FP8 E4M3 with 2-D block scales (Qwen3 FP8, DeepSeek V3: `weight_scale_inv`):
 * w u8 [N, K] e4m3, scale_inv f32 [ceil(N/bn), ceil(K/bk)], value = e4m3(w[r,c]) *
 * scale_inv[r/bn, c/bk]; dst f32 [N, K]. The plain names use the 128x128 blocks of
 * quantization_config.weight_block_size = [128, 128]. */
#define FT_FP8_BLOCK 128
void ft_fp8_block_dequant(const uint8_t *w, const float *scale_inv, size_t N, size_t K,
                          float *dst);
void ft_fp8_block_dequant_bs(const uint8_t *w, const float *scale_inv, size_t N, size_t K,
                             size_t bn, size_t bk, float *dst);
/* One row: w_row [K], scale_inv_row = scale_inv + (r/bn) * ceil(K/bk) (its block row). */
void ft_fp8_block_dequant_row(const uint8_t *w_row, const float *scale_inv_row, size_t K,
                              float *dst);
void ft_fp8_block_dequant_row_bs(const uint8_t *w_row, const float *scale_inv_row, size_t K,
                                 size_t bk, float *dst);
/* FP8_B128 rows (format/quant.h): [ceil(K/128) f32 scale_inv][K e4m3][pad to 4 bytes], the
 * 128x128-block layout repacked so a row carries its own scales. */
size_t ft_fp8_b128_row_bytes(size_t K);
/* N rows of a [N, K] e4m3 matrix w with scale_inv [ceil(N/128), ceil(K/128)] into dst (rows
 * ft_fp8_b128_row_bytes(K) apart). */
void ft_fp8_b128_pack(uint8_t *dst, const uint8_t *w, const float *scale_inv, size_t N, size_t K);
void ft_fp8_b128_dequant_row(const void *row, size_t K, float *dst);
float ft_fp8_b128_dot(const void *row, const float *x, size_t K, int tier);
/* NVFP4 rows (format/quant.h): [f32 scale_2][ceil(K/16) e4m3 scales][ceil(K/2) e2m1 pairs][pad
 * to 4]: ModelOpt's weight [N, K/2], weight_scale [N, K/16] and weight_scale_2, row by row. */
size_t ft_nvfp4_r_row_bytes(size_t K);
void ft_nvfp4_r_pack(uint8_t *dst, const uint8_t *w, const uint8_t *scales, float scale_2, size_t N,
                     size_t K);
void ft_nvfp4_r_dequant_row(const void *row, size_t K, float *dst);
float ft_nvfp4_r_dot(const void *row, const float *x, size_t K, int tier);
/* y[t * ldy] = the row's dot with x + t * ldx for t < T: each block decoded once for all tokens
 * (prefill); the FP8_B128 twin likewise. */
void ft_nvfp4_r_dot_tokens(const void *row, const float *x, size_t ldx, int T, size_t K, float *y,
                           size_t ldy, int tier);
void ft_fp8_b128_dot_tokens(const void *row, const float *x, size_t ldx, int T, size_t K, float *y,
                            size_t ldy, int tier);
/* Per-tensor FP8: value = e4m3(w[i]) * scale. */
void ft_fp8_dequant_row(const uint8_t *w, float scale, size_t n, float *dst);

/* ---- dot products: sum_i value_i * x[i], accumulated in f32 ----
 * `tier` picks the code path; its values line up with enum ft_cpu_isa (backend/cpu/ops.h:
 * 0 scalar, 1 AVX2, 2 AVX-512, 3 AVX-512-BF16 = AVX-512 here), so the executor passes
 * ft_cpu_isa(). A tier the build or the machine lacks falls back to the best one below it
 * that the caller vouched for: the caller must only pass a tier the CPU supports. The paths
 * sum in different orders; each is within 1e-6 (relative to sum |value_i * x[i]|) of the exact
 * dot product of the dequantised row. */
enum ft_fp_tier { FT_FP_SCALAR = 0, FT_FP_AVX2 = 1, FT_FP_AVX512 = 2 };
float ft_mxfp4_dot(const uint8_t *blocks, const uint8_t *scales, const float *x, size_t n,
                   int tier);
float ft_nvfp4_dot(const uint8_t *w, const uint8_t *scales, float scale_2, const float *x,
                   size_t n, int tier);
float ft_fp8_block_dot_row(const uint8_t *w_row, const float *scale_inv_row, const float *x,
                           size_t K, size_t bk, int tier);
float ft_fp8_dot(const uint8_t *w, float scale, const float *x, size_t n, int tier);

#ifdef __cplusplus
}
#endif

#endif
