/* ggml_dot.h — CPU compute over GGML blocks (format/ggml_quant.h has the layouts): the vector
 * tiers' dequantisation, dequantise-and-dot kernels in exact fp32 and the faster dots on
 * activations rounded to 8 bits per 256 (x8) or 32 (x32) elements. Each runs the AVX2 /
 * AVX-512 tier ft_cpu_isa() picks (ggml_simd.c, ggml_x8.c, ggml_x32.c), the scalar code being
 * the reference. Called by the CPU backend's matmul and the expert executor. Pure functions
 * over caller memory: any thread. */
#ifndef FT_BACKEND_CPU_GGML_DOT_H
#define FT_BACKEND_CPU_GGML_DOT_H

#include "format/ggml_quant.h"

/* ft_ggml_dequant_row through the ISA tier ft_cpu_isa() picks: bit-identical to it. */
enum ft_status ft_cpu_ggml_dequant_row(int type, const void *src, float *dst, int64_t n);

/* sum_i dequant(src)[i] * x[i] with fp32 accumulation (the value each element takes is the
 * exact dequantised one; only the summation order differs from a sequential loop: 16 lanes
 * (8 on AVX2) of k mod 16, each summed in order, fused multiply-adds on the vector tiers,
 * then a pairwise sum of the lanes). The same as ft_ggml_dot_rows with one row and token.
 * The caller checks ft_ggml_can_compute and the block multiple once (at load): a bad type or
 * n here is a bug (FT_ASSERT). */
float ft_ggml_dot_row(int type, const void *src, const float *x, int64_t n);

/* y[t * ldy + r] = ft_ggml_dot_row(row r, x + t * ldx) for r < n_rows, t < T, where row r
 * starts at w + r * row_bytes and holds n = row_bytes / ft_ggml_type_size(type) *
 * ft_ggml_block_size(type) elements (rows are packed: row_bytes = ft_ggml_row_bytes(type, n)),
 * x is [T, ldx] f32 (ldx >= n). Decodes each block once per 64 tokens (into a 16 KiB stack
 * buffer, 4 rows x 1024 elements) and reuses it for every token, so T up to ~64 costs little
 * more memory traffic than T = 1. Same summation as ft_ggml_dot_row, so results do not
 * depend on T or n_rows. Single-threaded and reentrant: callers split rows over threads.
 * Asserts like ft_ggml_dot_row. */
void ft_ggml_dot_rows(int type, const void *w, size_t row_bytes, int n_rows, const float *x,
                      int ldx, int T, float *y, int ldy);

/* ---- 8-bit activations: faster, approximate (K-quants) ----
 * Like llama.cpp's Q8_K path: x is quantised per block of 256 elements to an f32 scale
 * d = max|x| / 127 and int8 codes c = round(x / d) (so |x - d c| <= d / 2), once per step and
 * shared by every matrix that reads the same x; each weight block is then multiplied with the
 * codes in integers (exact) and scaled in f32. The result is the dot product of the exact
 * dequantised weights with the quantised x, to f32 rounding of the per-block terms and their
 * sum (relative 1e-6 of sum |w_i d c_i|); against the fp32 x it is off by at most
 * sum_blocks (d_b / 2) sum_i |w_i| (typically ~0.3% of the dot's scale). */

/* 1 when ft_ggml_dot_rows_x8 handles `type`: Q4_K, Q5_K, Q6_K. */
int ft_ggml_x8_supported(int type);
/* Bytes of one token of n elements (n a multiple of 256; else 0) in ft_ggml_quant_x8's form. */
size_t ft_ggml_x8_bytes(int64_t n);
/* Quantises T tokens x [T, ldx] of n elements each (n a multiple of 256) into xq
 * [T, ft_ggml_x8_bytes(n)] for rows of `type` (Q4_K/Q5_K store the codes in their nibble
 * order, Q6_K in element order: quantise for the type the dot will read). */
void ft_ggml_quant_x8(int type, const float *x, int ldx, int64_t n, int T, void *xq);
/* y[t * ldy + r] = sum_i w_r[i] * xhat_t[i], xhat_t being token t of xq (ft_ggml_quant_x8 with
 * the rows' n), rows as in ft_ggml_dot_rows. AVX-512 (F+BW) tier, else the scalar reference.
 * Single-threaded and reentrant. Asserts ft_ggml_x8_supported(type). */
void ft_ggml_dot_rows_x8(int type, const void *w, size_t row_bytes, int n_rows, const void *xq,
                         int T, float *y, int ldy);

/* ---- 8-bit activations per 32 elements: faster, approximate (32-element blocks, NVFP4) ----
 * The same idea for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 and NVFP4 rows (ggml_x32.c): x is
 * quantised per block of 32 elements to an f32 scale d = max|x| / 127, int8 codes
 * c = round(x / d) (ties to even, clamped to +-127; so |x - d c| <= d / 2) and the codes' sum,
 * once per step; each weight block is its integer codes times a scale (MXFP4 and NVFP4: twice
 * the e2m1 value, the half folded into the scale; NVFP4 one scale per 16) plus a min (Q4_1,
 * Q5_1), multiplied with the codes in integers (exact) and scaled in f32. The result is the
 * dot product of the dequantised weights with the quantised x to f32 rounding of the
 * per-block terms and their sum (relative ~1e-6 of sum |w_i d c_i| for a few thousand
 * elements); against the fp32 x it is off by at most sum_blocks (d_b / 2) sum_i |w_i|.
 * Layout of one token of n elements (nb = n / 32; 40 bytes per block), three arrays:
 *   int8_t q[n]: the codes by chunks of 16 blocks (the last may hold cb < 16), transposed so
 *     one vector lane holds one block: chunk c at q + 512 c is 8 groups of 4 cb bytes, group k
 *     holding codes 4k .. 4k+3 of each of the chunk's blocks in turn (code j of block
 *     16 c + b at 512 c + 4 cb (j / 4) + 4 b + j % 4);
 *   float d[nb]: the scales;   int16_t h[2 nb]: sums of codes 0..15 and 16..31 of each block. */

/* 1 when ft_ggml_dot_rows_x32 handles `type`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4. */
int ft_ggml_x32_supported(int type);
/* Bytes of one token of n elements (n a multiple of 32; else 0) in ft_ggml_quant_x32's form. */
size_t ft_ggml_x32_bytes(int64_t n);
/* Quantises T tokens x [T, ldx] of n elements each (n % 32 == 0) into xq
 * [T, ft_ggml_x32_bytes(n)]; every tier (scalar, AVX2, AVX-512) writes the same bytes. */
void ft_ggml_quant_x32(const float *x, int ldx, int64_t n, int T, void *xq);
/* ft_ggml_quant_x32 with each block's codes in NVFP4 nibble order, for ft_nvfp4_r_dot_rows_x32:
 * group k < 4 holds elements 8k, 8k+2, 8k+4, 8k+6 and group 4 + k elements 8k+1, 8k+3, 8k+5,
 * 8k+7 (the low and high nibbles of an NVFP4 block's dword k), so the kernels split its nibbles
 * as they do MXFP4's, with no byte shuffles; d and h as ft_ggml_quant_x32's. */
void ft_nvfp4_quant_x32(const float *x, int ldx, int64_t n, int T, void *xq);
/* y[t * ldy + r] = sum_i w_r[i] * xhat_t[i] (xhat = the dequantised x32 activations), rows
 * packed row_bytes apart as in ft_ggml_dot_rows (n = the rows' element count, the xq tokens'
 * n). Scalar reference, AVX2, AVX-512 (vpdpbusd where the CPU has VNNI); a weight chunk is
 * decoded once per 16 tokens. Single-threaded, reentrant. Asserts ft_ggml_x32_supported. */
void ft_ggml_dot_rows_x32(int type, const void *w, size_t row_bytes, int n_rows, const void *xq,
                          int T, float *y, int ldy);
/* The same for NVFP4 rows of K elements, xq from ft_nvfp4_quant_x32 (K % 32 == 0; format/fp_formats.h: [f32 scale_2]
 * [K/16 e4m3 scales][K/2 e2m1 pairs, element 2j in the low nibble][pad]), row_bytes apart
 * (>= ft_nvfp4_r_row_bytes(K)). Each weight is (2 e2m1) * fl(e4m3 * scale_2 / 2): within one
 * f32 rounding of ft_nvfp4_r_dequant_row's value. */
void ft_nvfp4_r_dot_rows_x32(const void *w, size_t row_bytes, int n_rows, const void *xq, int T,
                             size_t K, float *y, int ldy);
/* Whether the AVX-512 tier of the x32 dots uses VNNI: the CPU's answer unless a test said
 * otherwise; use = 0 / 1 turns it off / back on (process-wide), -1 only asks. */
int ft_ggml_x32_vnni(int use);
/* Whether the AVX-512 tier reads MXFP4's block scales with VBMI's byte permutes (whole chunks):
 * the CPU's answer unless a test said otherwise; use as ft_ggml_x32_vnni's, and use = 2 also
 * transposes the codes by permutes (slower; off by default). Any use > 0 (with VNNI) also runs one token's MXFP4 and NVFP4
 * rows by groups of four blocks. Returns 0
 * (off, or no VBMI), 1 or 2 as in use. */
int ft_ggml_x32_vbmi(int use);

#endif
