/* quant.h — element types and scalar conversions (bf16, f16 <-> f32).
 * The per-format block codecs (fp8, e2m1, e8m0, GGUF blocks) join this file as they arrive. */
#ifndef FT_FORMAT_QUANT_H
#define FT_FORMAT_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ft_dtype {
    FT_DTYPE_F32,
    FT_DTYPE_F16,
    FT_DTYPE_BF16,
    FT_DTYPE_F64,
    FT_DTYPE_F8_E4M3,
    FT_DTYPE_F8_E5M2,
    FT_DTYPE_I64,
    FT_DTYPE_I32,
    FT_DTYPE_I16,
    FT_DTYPE_I8,
    FT_DTYPE_U8,
    FT_DTYPE_U16,
    FT_DTYPE_U32,
    FT_DTYPE_U64,
    FT_DTYPE_BOOL,
    /* GGML block formats (GGUF files): a row of n elements is ft_dtype_row_bytes(t, n) bytes,
     * n a multiple of the block; they exist in host banks and weights, never in safetensors */
    FT_DTYPE_Q8_0,
    FT_DTYPE_Q4_0,
    FT_DTYPE_Q4_1,
    FT_DTYPE_Q5_0,
    FT_DTYPE_Q5_1,
    FT_DTYPE_Q4_K,
    FT_DTYPE_Q5_K,
    FT_DTYPE_Q6_K,
    FT_DTYPE_MXFP4,
    /* FP8 E4M3 with 128x128 block scales (Qwen3 / DeepSeek FP8 checkpoints), repacked per row:
     * ceil(n/128) f32 scale_inv of the row's block row, then the n e4m3 codes, padded to 4 */
    FT_DTYPE_FP8_B128,
    /* NVFP4 (NVIDIA ModelOpt) rows: the tensor's f32 weight_scale_2, ceil(n/16) e4m3 block
     * scales, ceil(n/2) bytes of e2m1 pairs (element 2j low nibble), padded to 4 */
    FT_DTYPE_NVFP4,
    /* OCP MX E8M0 scale bytes (safetensors "F8_E8M0", torch float8_e8m0fnu): 2^(e-127), 0xFF
     * NaN. DeepSeek-V4's checkpoints store their FP4 experts' per-32 scales and their FP8
     * weights' 128x128 block scales this way; ft_to_f32 decodes them. */
    FT_DTYPE_F8_E8M0,
    FT_DTYPE_COUNT
};

size_t ft_dtype_size(enum ft_dtype t);        /* bytes per element; 0 for a block format */
/* Bytes of a row of n elements (block formats: 0 when n is not a multiple of the block). */
size_t ft_dtype_row_bytes(enum ft_dtype t, int64_t n);
/* The GGML type number of t (F32, F16, BF16 and the block formats), -1 if it has none. */
int ft_dtype_ggml(enum ft_dtype t);
/* The dtype of a GGML type number; FT_DTYPE_COUNT when there is none. */
enum ft_dtype ft_dtype_from_ggml(int ggml_type);
/* 1 for the GGML block formats. */
static inline int ft_dtype_is_block(enum ft_dtype t) {
    return t >= FT_DTYPE_Q8_0 && t <= FT_DTYPE_MXFP4;
}
/* 1 for every format whose rows are not plain element arrays (GGML blocks, FP8_B128). */
static inline int ft_dtype_is_packed(enum ft_dtype t) {
    return ft_dtype_is_block(t) || t == FT_DTYPE_FP8_B128 || t == FT_DTYPE_NVFP4;
}
const char *ft_dtype_name(enum ft_dtype t);   /* safetensors spelling: "BF16" */
/* Parses a safetensors dtype string (block formats are not safetensors dtypes); 0 on success. */
int ft_dtype_parse(const char *s, enum ft_dtype *out);

static inline float ft_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; NaN stays NaN. */
static inline uint16_t ft_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float ft_f16_to_f32(uint16_t h);
uint16_t ft_f32_to_f16(float f);

/* Converts n elements of type t at src to f32: F32, F16, BF16, F8_E8M0, the GGML block formats
 * (n a whole number of blocks: their exact dequantised values), and FP8_B128 / NVFP4 (exactly one
 * row of n). */
void ft_to_f32(float *dst, const void *src, enum ft_dtype t, size_t n);

#ifdef __cplusplus
}
#endif

#endif
