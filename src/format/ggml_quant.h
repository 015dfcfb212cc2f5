/* ggml_quant.h — GGML tensor types as they appear in GGUF files: block geometry for every
 * type GGUF defines, and the reference dequantisation of the types the engine computes with
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4), in GGML's block
 * layouts (ggml-common.h). The dot products over these blocks (and the vector tiers of the
 * dequantisation) are CPU compute: backend/cpu/ggml_dot.h. Called by format/gguf.c (sizes),
 * the model loaders and the CPU backend. Pure functions: any thread. */
#ifndef FT_FORMAT_GGML_QUANT_H
#define FT_FORMAT_GGML_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ft.h"

/* The numbering is GGUF's (ggml.h enum ggml_type); gaps are types GGML removed. */
enum ft_ggml_type {
    FT_GGML_F32 = 0,
    FT_GGML_F16 = 1,
    FT_GGML_Q4_0 = 2,
    FT_GGML_Q4_1 = 3,
    FT_GGML_Q5_0 = 6,
    FT_GGML_Q5_1 = 7,
    FT_GGML_Q8_0 = 8,
    FT_GGML_Q8_1 = 9,
    FT_GGML_Q2_K = 10,
    FT_GGML_Q3_K = 11,
    FT_GGML_Q4_K = 12,
    FT_GGML_Q5_K = 13,
    FT_GGML_Q6_K = 14,
    FT_GGML_Q8_K = 15,
    FT_GGML_IQ2_XXS = 16,
    FT_GGML_IQ2_XS = 17,
    FT_GGML_IQ3_XXS = 18,
    FT_GGML_IQ1_S = 19,
    FT_GGML_IQ4_NL = 20,
    FT_GGML_IQ3_S = 21,
    FT_GGML_IQ2_S = 22,
    FT_GGML_IQ4_XS = 23,
    FT_GGML_I8 = 24,
    FT_GGML_I16 = 25,
    FT_GGML_I32 = 26,
    FT_GGML_I64 = 27,
    FT_GGML_F64 = 28,
    FT_GGML_IQ1_M = 29,
    FT_GGML_BF16 = 30,
    FT_GGML_TQ1_0 = 34,
    FT_GGML_TQ2_0 = 35,
    FT_GGML_MXFP4 = 39,
    FT_GGML_TYPE_COUNT = 40
};

#define FT_QK_K 256 /* super-block size of the K-quants */

/* Block sizes in bytes, GGML layout (all little-endian, packed, no padding):
 *   Q8_0  { f16 d; int8 qs[32]; }                                        34 B / 32
 *   Q4_0  { f16 d; u8 qs[16]; }  x[j] = (lo(qs[j]) - 8) d, x[j+16] = (hi - 8) d  18 B / 32
 *   Q4_1  { f16 d, m; u8 qs[16]; }  x[j] = lo(qs[j]) d + m, x[j+16] = hi d + m      20 B / 32
 *   Q5_0  { f16 d; u32 qh; u8 qs[16]; }  5-bit q = nibble | bit j of qh << 4; (q - 16) d  22 B / 32
 *   Q5_1  { f16 d, m; u32 qh; u8 qs[16]; }  the same 5-bit q; q d + m               24 B / 32
 *   Q4_K  { f16 d, dmin; u8 scales[12]; u8 qs[128]; }                   144 B / 256
 *   Q5_K  { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }        176 B / 256
 *   Q6_K  { u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d; }            210 B / 256
 *   MXFP4 { u8 e (E8M0); u8 qs[16] (E2M1 nibbles, lo = x[j], hi = x[j+16]); } 17 B / 32 */

/* Elements per block (1 for plain types); 0 for a number that is not a GGML type. */
int ft_ggml_block_size(int type);
/* Bytes per block; 0 for a number that is not a GGML type. */
size_t ft_ggml_type_size(int type);
/* "Q4_K"; "?" for a number that is not a GGML type. */
const char *ft_ggml_type_name(int type);
/* 1 when ft_ggml_dequant_row / ft_ggml_dot_row handle `type`. */
int ft_ggml_can_compute(int type);
/* Bytes of n elements (n a multiple of the block size; else 0). */
size_t ft_ggml_row_bytes(int type, int64_t n);

/* dst[0..n) = the values of the n elements at src (n a multiple of the block size).
 * Bit-identical to GGML's dequantize_row_* and to the gguf Python package's dequantize (the
 * scalar reference; ft_cpu_ggml_dequant_row is the vector tiers' twin, bit-identical too).
 * FT_ERR_UNSUPPORTED for a type ft_ggml_can_compute rejects, FT_ERR_INVALID_ARG for a bad n. */
enum ft_status ft_ggml_dequant_row(int type, const void *src, float *dst, int64_t n);

/* FT_OK when a row of n elements of `type` can be dequantised; else FT_ERR_UNSUPPORTED (a type
 * ft_ggml_can_compute rejects) or FT_ERR_INVALID_ARG (n not a multiple of the block size). */
enum ft_status ft_ggml_check_row(int type, int64_t n);

/* The scalar reference decoder of nb blocks (elements, for the plain types) of `type` at src
 * into dst; the CPU backend's ISA tiers fall back to it (backend/cpu/ggml_dot.c). */
void ft_ggml_dequant_blocks(int type, const void *src, int64_t nb, float *dst);

/* ---- layout helpers the scalar decoders and the CPU backend's vector tiers share ---- */

/* The little-endian 16 bits at p. */
static inline uint16_t ft_ggml_rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

/* E8M0 exponent byte -> 2^(e-127) / 2 (GGML's ggml_e8m0_to_fp32_half: the E2M1 table below
 * holds doubled values). */
static inline float ft_ggml_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* MXFP4's E2M1 code -> twice its value (kvalues_mxfp4); Q4_0's code -> code - 8. Both are
 * "a 16-entry table times the block scale", which is how the vector tiers decode them. */
extern const int8_t ft_ggml_lut_mxfp4[16];
extern const int8_t ft_ggml_lut_q4_0[16];

/* The packed 6-bit scales and mins of a Q4_K / Q5_K block (12 bytes at q) as 16 bytes:
 * out[j] = scale of sub-block j, out[8 + j] = its min (GGML's get_scale_min_k4 for j = 0..7,
 * unpacked four at a time as in ggml-cpu's quants.c). */
static inline void ft_ggml_k4_scales(const uint8_t *q, uint8_t out[16]) {
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4); /* mins 4..7 */
    const uint32_t mins = u[1] & m6;                       /* mins 0..3 */
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);        /* scales 4..7 */
    u[2] = mins;
    u[0] &= m6; /* scales 0..3 */
    memcpy(out, u, 16);
}

#endif
