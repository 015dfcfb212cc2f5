/* quant.c — element type table and scalar conversions. Pure functions, any thread. */
#include "format/quant.h"

#include "core/status.h"
#include "format/fp_formats.h"
#include "format/ggml_quant.h"

static const struct {
    const char *name;
    size_t size;
} k_dtypes[FT_DTYPE_COUNT] = {
    [FT_DTYPE_F32] = {"F32", 4},      [FT_DTYPE_F16] = {"F16", 2},
    [FT_DTYPE_BF16] = {"BF16", 2},    [FT_DTYPE_F64] = {"F64", 8},
    [FT_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [FT_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [FT_DTYPE_I64] = {"I64", 8},      [FT_DTYPE_I32] = {"I32", 4},
    [FT_DTYPE_I16] = {"I16", 2},      [FT_DTYPE_I8] = {"I8", 1},
    [FT_DTYPE_U8] = {"U8", 1},        [FT_DTYPE_U16] = {"U16", 2},
    [FT_DTYPE_U32] = {"U32", 4},      [FT_DTYPE_U64] = {"U64", 8},
    [FT_DTYPE_BOOL] = {"BOOL", 1},
    [FT_DTYPE_Q8_0] = {"Q8_0", 0},    [FT_DTYPE_Q4_0] = {"Q4_0", 0},
    [FT_DTYPE_Q4_1] = {"Q4_1", 0},    [FT_DTYPE_Q5_0] = {"Q5_0", 0},
    [FT_DTYPE_Q5_1] = {"Q5_1", 0},
    [FT_DTYPE_Q4_K] = {"Q4_K", 0},    [FT_DTYPE_Q5_K] = {"Q5_K", 0},
    [FT_DTYPE_Q6_K] = {"Q6_K", 0},    [FT_DTYPE_MXFP4] = {"MXFP4", 0},
    [FT_DTYPE_FP8_B128] = {"FP8_B128", 0}, [FT_DTYPE_NVFP4] = {"NVFP4", 0},
    [FT_DTYPE_F8_E8M0] = {"F8_E8M0", 1},
};

static const struct {
    enum ft_dtype dt;
    int ggml;
} k_ggml[] = {
    {FT_DTYPE_F32, FT_GGML_F32},   {FT_DTYPE_F16, FT_GGML_F16},   {FT_DTYPE_BF16, FT_GGML_BF16},
    {FT_DTYPE_Q8_0, FT_GGML_Q8_0}, {FT_DTYPE_Q4_0, FT_GGML_Q4_0}, {FT_DTYPE_Q4_1, FT_GGML_Q4_1},
    {FT_DTYPE_Q5_0, FT_GGML_Q5_0}, {FT_DTYPE_Q5_1, FT_GGML_Q5_1}, {FT_DTYPE_Q4_K, FT_GGML_Q4_K},
    {FT_DTYPE_Q5_K, FT_GGML_Q5_K}, {FT_DTYPE_Q6_K, FT_GGML_Q6_K}, {FT_DTYPE_MXFP4, FT_GGML_MXFP4},
};

int ft_dtype_ggml(enum ft_dtype t) {
    for (size_t i = 0; i < sizeof k_ggml / sizeof k_ggml[0]; i++)
        if (k_ggml[i].dt == t) return k_ggml[i].ggml;
    return -1;
}

enum ft_dtype ft_dtype_from_ggml(int ggml_type) {
    for (size_t i = 0; i < sizeof k_ggml / sizeof k_ggml[0]; i++)
        if (k_ggml[i].ggml == ggml_type) return k_ggml[i].dt;
    return FT_DTYPE_COUNT;
}

size_t ft_dtype_row_bytes(enum ft_dtype t, int64_t n) {
    if (ft_dtype_is_block(t)) return ft_ggml_row_bytes(ft_dtype_ggml(t), n);
    if (t == FT_DTYPE_FP8_B128) return ft_fp8_b128_row_bytes((size_t)n);
    if (t == FT_DTYPE_NVFP4) return ft_nvfp4_r_row_bytes((size_t)n);
    return (size_t)n * ft_dtype_size(t);
}

size_t ft_dtype_size(enum ft_dtype t) { return (unsigned)t < FT_DTYPE_COUNT ? k_dtypes[t].size : 0; }

const char *ft_dtype_name(enum ft_dtype t) {
    return (unsigned)t < FT_DTYPE_COUNT ? k_dtypes[t].name : "?";
}

int ft_dtype_parse(const char *s, enum ft_dtype *out) {
    for (int i = 0; i < FT_DTYPE_COUNT; i++) {
        if (k_dtypes[i].size && strcmp(s, k_dtypes[i].name) == 0) {
            *out = (enum ft_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* IEEE binary16 -> binary32, exact (subnormals, inf, NaN included). */
float ft_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | man << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* binary32 -> binary16, round to nearest even, overflow to inf. */
uint16_t ft_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff);
    uint32_t man = u & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = 1u << (shift - 1);
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++; /* may carry into exp: still correct */
    return (uint16_t)(sign | r);
}

void ft_to_f32(float *dst, const void *src, enum ft_dtype t, size_t n) {
    if (t == FT_DTYPE_F32) {
        memcpy(dst, src, n * 4);
    } else if (t == FT_DTYPE_BF16) {
        const uint8_t *s = src;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = ft_bf16_to_f32(h);
        }
    } else if (t == FT_DTYPE_F16) {
        const uint8_t *s = src;
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = ft_f16_to_f32(h);
        }
    } else if (t == FT_DTYPE_F8_E8M0) {
        const uint8_t *s = src;
        for (size_t i = 0; i < n; i++) dst[i] = ft_e8m0_to_f32(s[i]);
    } else if (ft_dtype_is_block(t)) { /* n a whole number of blocks: a bug otherwise */
        FT_ASSERT(ft_ggml_dequant_row(ft_dtype_ggml(t), src, dst, (int64_t)n) == FT_OK);
    } else if (t == FT_DTYPE_FP8_B128) {
        ft_fp8_b128_dequant_row(src, n, dst);
    } else if (t == FT_DTYPE_NVFP4) {
        ft_nvfp4_r_dequant_row(src, n, dst);
    } else {
        FT_ASSERT(!"ft_to_f32: a dtype it does not convert"); /* callers check dtypes first */
    }
}
