/* model.c — loads a Hugging Face checkpoint into struct ft_model: validates every tensor's
 * presence, dtype and shape against config.json (errors name the tensor and the file), and
 * repacks routed experts into host banks. Engine thread, once. */
#include "model/model.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/status.h"
#include "format/fp_formats.h"
#include "format/gguf.h"
#include "mem/residency.h"
#include "model/gguf_model.h"
#include "model/model_impl.h"

void *ft_model_alloc(struct ft_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) return NULL;
        m->owned = o;
        m->cap_owned = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

/* A checkpoint tensor by its text-model name ("model.layers.0..."): a multimodal wrapper keeps
 * them under its arch's prefix ("model.language_model.layers.0..."). */
static const char *file_name(const struct ft_model *m, const char *name, char *buf, size_t cap) {
    const char *pre = m->arch ? m->arch->prefix : NULL;
    if (!pre || m->gguf || strncmp(name, "model.", 6)) return name;
    snprintf(buf, cap, "%s%s", pre, name + 6);
    return buf;
}

static const struct ft_st_tensor *find(const struct ft_model *m, const char *name) {
    char full[320];
    const struct ft_st_tensor *t = ft_st_set_find(m->st, file_name(m, name, full, sizeof full));
    if (t || m->gguf || !m->arch || !(m->arch->flags & FT_ARCH_V4)) return t;
    /* DeepSeek-V4: the spellings of save_pretrained and of DeepSeek's own checkpoints */
    for (int alt = 0; !t && ft_v4_alias(name, alt, full, sizeof full); alt++) t = ft_st_set_find(m->st, full);
    return t;
}

/* GGML block formats only reach here from GGUF files (ft_st_set_wrap), never from safetensors */
static int readable_dtype(enum ft_dtype t) {
    return t == FT_DTYPE_BF16 || t == FT_DTYPE_F16 || t == FT_DTYPE_F32 || ft_dtype_is_block(t) ||
           t == FT_DTYPE_F8_E4M3; /* with its <name>_scale_inv: repacked to FP8_B128 */
}

/* The 128x128 block scales of FP8 weight `name` ([rows, cols] e4m3): <name>_scale_inv
 * [ceil(rows/128), ceil(cols/128)] in F32 (DeepSeek), BF16/F16 (Qwen's FP8 releases) or F8_E8M0
 * (DeepSeek-V4's `.scale`), as f32 (owned by the model when converted). */
static enum ft_status fp8_scales(struct ft_model *m, const char *name, int rows, int cols,
                                 const float **out) {
    char sn[300];
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    const struct ft_st_tensor *s = find(m, sn), *w = find(m, name);
    int br = (rows + 127) / 128, bc = (cols + 127) / 128;
    if (!s || (s->dtype != FT_DTYPE_F32 && s->dtype != FT_DTYPE_BF16 && s->dtype != FT_DTYPE_F16 &&
               s->dtype != FT_DTYPE_F8_E8M0) ||
        s->n_dims != 2 || s->shape[0] != br || s->shape[1] != bc)
        return ft_fail(FT_ERR_FORMAT, "%s: FP8 tensor '%s' needs '%s' F32/BF16/F16/F8_E8M0 [%d, %d] (128x128 "
                       "block scales, as Qwen3/DeepSeek FP8 checkpoints store them)", m->label,
                       w ? w->name : name, s ? s->name : sn, br, bc); /* as the file spells them */
    if (s->dtype == FT_DTYPE_F32 && (uintptr_t)s->data % 4 == 0) {
        *out = s->data;
        return FT_OK;
    }
    float *f = ft_model_alloc(m, (size_t)br * bc * sizeof *f);
    if (!f) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    ft_to_f32(f, s->data, s->dtype, (size_t)br * bc);
    *out = f;
    return FT_OK;
}

/* Checks presence, dtype and shape; `n_dims` 1 or 2, cols ignored when n_dims == 1. */
static enum ft_status get_tensor(const struct ft_model *m, const char *name, int n_dims,
                                 int64_t rows, int64_t cols, const struct ft_st_tensor **out) {
    const struct ft_st_tensor *t = find(m, name);
    char full[320];
    *out = t;
    name = file_name(m, name, full, sizeof full); /* as the file spells it, in messages */
    if (t && m->arch && (m->arch->flags & FT_ARCH_V4)) name = t->name; /* found under an alias */
    char alt[320];
    if (!t && m->arch && (m->arch->flags & FT_ARCH_V4) && !m->gguf && ft_v4_alias(name, 0, alt, sizeof alt))
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' (or '%s', as save_pretrained writes it) is "
                       "missing (incomplete download, or config.json does not match the weights?)",
                       m->label, name, alt);
    if (!t)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' is missing (incomplete download, or "
                       "config.json does not match the weights?)", m->label, name);
    if (!readable_dtype(t->dtype))
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; this engine reads "
                       "BF16, F16 and F32 weights", t->file, name, ft_dtype_name(t->dtype));
    int ok = t->n_dims == n_dims && t->shape[0] == rows && (n_dims == 1 || t->shape[1] == cols);
    if (!ok) {
        char got[96] = "";
        for (int i = 0; i < t->n_dims && i < 4; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)t->shape[i]);
        if (n_dims == 1)
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%lld] "
                           "from config.json", t->file, name, got, (long long)rows);
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has shape [%s], expected [%lld, %lld] "
                       "from config.json", t->file, name, got, (long long)rows, (long long)cols);
    }
    return FT_OK;
}

/* The bank format that holds expert tensors of dtype t (FP8 and NVFP4 ones are repacked with
 * their scales). */
static enum ft_dtype bank_dtype(enum ft_dtype t) {
    return t == FT_DTYPE_F8_E4M3 ? FT_DTYPE_FP8_B128 : t == FT_DTYPE_U8 ? FT_DTYPE_NVFP4 : t;
}

/* An NVFP4 matrix [rows, cols] as ModelOpt stores it: <name> U8 [rows, cols/2] (two e2m1 per
 * byte), <name>_scale F8_E4M3 [rows, cols/16], <name>_scale_2 F32 (one value); packed into
 * NVFP4 rows at dst (NULL: only checked). */
static enum ft_status nvfp4_matrix(const struct ft_model *m, const char *name, int rows, int cols,
                                   uint8_t *dst) {
    char s1[300], s2[300];
    snprintf(s1, sizeof s1, "%s_scale", name);
    snprintf(s2, sizeof s2, "%s_scale_2", name);
    const struct ft_st_tensor *w = find(m, name), *sc = find(m, s1), *g = find(m, s2);
    int ok = w && sc && g && cols % 16 == 0 && w->dtype == FT_DTYPE_U8 && w->n_dims == 2 &&
             w->shape[0] == rows && w->shape[1] == cols / 2 && sc->dtype == FT_DTYPE_F8_E4M3 &&
             sc->n_dims == 2 && sc->shape[0] == rows && sc->shape[1] == cols / 16 &&
             g->dtype == FT_DTYPE_F32 && g->n_bytes == 4;
    if (!ok)
        return ft_fail(FT_ERR_FORMAT, "%s: NVFP4 tensor '%s' needs U8 [%d, %d], '%s' F8_E4M3 [%d, %d] "
                       "and '%s' F32 (ModelOpt layout; the width must be a multiple of 16)",
                       m->label, name, rows, cols / 2, s1, rows, cols / 16, s2);
    if (dst) {
        float s;
        memcpy(&s, g->data, 4);
        ft_nvfp4_r_pack(dst, w->data, sc->data, s, (size_t)rows, (size_t)cols);
    }
    return FT_OK;
}

static enum ft_status load_weight(struct ft_model *m, const char *name, int rows, int cols,
                                  struct ft_weight *w) {
    const struct ft_st_tensor *t = find(m, name);
    enum ft_status st;
    if (t && t->dtype == FT_DTYPE_U8) { /* NVFP4 (ModelOpt): repacked with its scales */
        uint8_t *p = NULL;
        if ((st = nvfp4_matrix(m, name, rows, cols, NULL)) != FT_OK) return st;
        if (!(p = ft_model_alloc(m, (size_t)rows * ft_nvfp4_r_row_bytes((size_t)cols))))
            return ft_fail(FT_ERR_OOM, "%s: out of memory repacking '%s'", m->label, name);
        nvfp4_matrix(m, name, rows, cols, p);
        *w = (struct ft_weight){p, FT_DTYPE_NVFP4, rows, cols};
        m->n_params += (uint64_t)rows * (uint64_t)cols;
        m->dense_bytes += (uint64_t)rows * ft_dtype_row_bytes(w->dtype, cols);
        return FT_OK;
    }
    st = get_tensor(m, name, 2, rows, cols, &t);
    if (st != FT_OK) return st;
    w->dtype = t->dtype;
    w->rows = rows;
    w->cols = cols;
    w->data = t->data;
    if (t->dtype == FT_DTYPE_F8_E4M3) { /* repacked with its block scales */
        const float *sc;
        if ((st = fp8_scales(m, name, rows, cols, &sc)) != FT_OK) return st;
        uint8_t *p = ft_model_alloc(m, (size_t)rows * ft_fp8_b128_row_bytes((size_t)cols));
        if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory repacking '%s'", m->label, name);
        ft_fp8_b128_pack(p, t->data, sc, (size_t)rows, (size_t)cols);
        w->dtype = FT_DTYPE_FP8_B128;
        w->data = p;
        m->n_params += (uint64_t)rows * (uint64_t)cols;
        m->dense_bytes += (uint64_t)rows * ft_dtype_row_bytes(w->dtype, cols);
        return FT_OK;
    }
    size_t esz = ft_dtype_size(t->dtype); /* 0 for blocks: byte-aligned by nature */
    if (esz && (uintptr_t)t->data % esz) { /* unaligned in the file: copy */
        void *p = ft_model_alloc(m, t->n_bytes);
        if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory copying '%s'", m->label, name);
        memcpy(p, t->data, t->n_bytes);
        w->data = p;
    }
    m->n_params += (uint64_t)rows * (uint64_t)cols;
    m->dense_bytes += (uint64_t)rows * ft_dtype_row_bytes(t->dtype, cols);
    return FT_OK;
}

static enum ft_status load_vec(struct ft_model *m, const char *name, int n, float **out) {
    const struct ft_st_tensor *t;
    enum ft_status st = get_tensor(m, name, 1, n, 0, &t);
    if (st != FT_OK) return st;
    if (t->dtype == FT_DTYPE_F8_E4M3)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: vector '%s' is F8_E4M3; only matrices may be FP8",
                       t->file, name);
    float *p = ft_model_alloc(m, (size_t)n * sizeof *p);
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    ft_to_f32(p, t->data, t->dtype, (size_t)n);
    /* Gemma and Qwen3.5 norms compute x * (1 + w): folded here (llama.cpp's GGUF files already
     * hold 1 + w); the Gated DeltaNet's gated norm uses its weight as is */
    if ((m->arch->flags & (FT_ARCH_GEMMA | FT_ARCH_HYBRID)) && !m->gguf && strstr(name, "norm.weight") &&
        !strstr(name, "linear_attn.norm.weight"))
        for (int i = 0; i < n; i++) p[i] = 1.0f + p[i];
    *out = p;
    m->n_params += (uint64_t)n;
    m->dense_bytes += ft_dtype_row_bytes(t->dtype, n);
    return FT_OK;
}

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

/* Copies one expert matrix into its bank row, converting nothing (the schema is the file's;
 * FP8 e4m3 with its block scales is repacked into FP8_B128 rows). */
static enum ft_status fill_expert(struct ft_model *m, struct ft_bank *b, int e, size_t offset,
                                  const char *name, int rows, int cols) {
    const struct ft_st_tensor *t;
    if (b->schema->dtype == FT_DTYPE_NVFP4)
        return nvfp4_matrix(m, name, rows, cols, ft_bank_expert(b, e) + offset);
    enum ft_status st = get_tensor(m, name, 2, rows, cols, &t);
    if (st != FT_OK) return st;
    if (bank_dtype(t->dtype) == FT_DTYPE_FP8_B128 && b->schema->dtype == FT_DTYPE_FP8_B128) {
        const float *sc;
        if ((st = fp8_scales(m, name, rows, cols, &sc)) != FT_OK) return st;
        ft_fp8_b128_pack(ft_bank_expert(b, e) + offset, t->data, sc, (size_t)rows, (size_t)cols);
        return FT_OK;
    }
    if (t->dtype != b->schema->dtype)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' is %s but other experts of the layer "
                       "are %s; mixed expert dtypes are not supported", t->file, name,
                       ft_dtype_name(t->dtype), ft_dtype_name(b->schema->dtype));
    memcpy(ft_bank_expert(b, e) + offset, t->data, t->n_bytes);
    return FT_OK;
}

/* A 2-D per-expert bias [E, n] as f32 (owned); interleaved (gpt-oss gate_up: even columns gate,
 * odd up) is split into [gate n/2 | up n/2] per expert, the bank rows' order. */
static enum ft_status load_expert_bias(struct ft_model *m, const char *name, int E, int n,
                                       int interleaved, const float **out) {
    const struct ft_st_tensor *t;
    enum ft_status st = get_tensor(m, name, 2, E, n, &t);
    if (st != FT_OK) return st;
    if (t->dtype != FT_DTYPE_F32 && t->dtype != FT_DTYPE_F16 && t->dtype != FT_DTYPE_BF16)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: expert bias '%s' is %s (F32/F16/BF16 only)", t->file,
                       name, ft_dtype_name(t->dtype));
    float *f = ft_model_alloc(m, (size_t)E * n * sizeof *f), *tmp = malloc((size_t)n * sizeof *tmp);
    if (!f || !tmp) {
        free(tmp);
        return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    }
    size_t es = ft_dtype_size(t->dtype);
    for (int e = 0; e < E; e++) {
        ft_to_f32(tmp, (const uint8_t *)t->data + (size_t)e * n * es, t->dtype, (size_t)n);
        for (int i = 0; i < n; i++)
            f[(size_t)e * n + (interleaved ? (i % 2) * (n / 2) + i / 2 : i)] = tmp[i];
    }
    free(tmp);
    *out = f;
    return FT_OK;
}

/* One [rows, K/32] MXFP4 matrix of gpt-oss (16 code bytes per block, element 2j in the low
 * nibble of byte j, and a separate E8M0 scale byte per block) as GGML MXFP4 rows; row r goes
 * to dst row map(r). */
static void mxfp4_rows(uint8_t *dst, const uint8_t *blocks, const uint8_t *scales, int rows, int K,
                       int interleaved) {
    int nb = K / 32;
    for (int r = 0; r < rows; r++) {
        int dr = interleaved ? (r % 2) * (rows / 2) + r / 2 : r;
        ft_mxfp4_pack_ggml(dst + (size_t)dr * nb * 17, blocks + (size_t)r * nb * 16, scales + (size_t)r * nb, 1,
                           (size_t)K);
    }
}

/* gpt-oss experts into banks: MXFP4 (the released checkpoints: *_blocks + *_scales) kept as
 * GGML MXFP4 blocks, or plain (transformers' saved layout: gate_up_proj [E, H, 2I] with
 * interleaved gate/up columns, down_proj [E, I, H]) transposed; gate/up de-interleaved. */
static enum ft_status load_oai_experts(struct ft_model *m, int l, struct ft_layer *L) {
    int E = m->n_experts, I = m->expert_inter, H = m->hidden;
    char n0[256], n1[256];
    enum ft_status st;
    L->act.mode = FT_SWIGLU_OAI;
    L->act.limit = m->cfg.swiglu_limit > 0 ? (float)m->cfg.swiglu_limit : 7.0f; /* transformers' default */
    L->act.alpha = (float)m->cfg.swiglu_alpha;
    NAME(n0, "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
    FT_TRY(load_expert_bias(m, n0, E, 2 * I, 1, &L->act.gu_bias));
    NAME(n0, "model.layers.%d.mlp.experts.down_proj_bias", l);
    FT_TRY(load_expert_bias(m, n0, E, H, 0, &L->act.down_bias));
    const struct ft_st_tensor *gb = find(m, NAME(n0, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l));
    if (gb) {
        if (H % 32 || I % 32)
            return ft_fail(FT_ERR_FORMAT, "%s: MXFP4 experts need hidden_size and intermediate_size "
                           "multiples of 32 (%d, %d)", m->label, H, I);
        const struct ft_row_schema *mx = ft_row_schema_for(FT_DTYPE_MXFP4);
        FT_TRY(ft_bank_init(&L->bank[FT_BANK_GATE_UP], mx, FT_BANK_GATE_UP, E, 2 * I, H));
        FT_TRY(ft_bank_init(&L->bank[FT_BANK_DOWN], mx, FT_BANK_DOWN, E, H, I));
        static const char *const fam[2] = {"gate_up_proj", "down_proj"};
        for (int f = 0; f < 2; f++) {
            int rows = f ? H : 2 * I, K = f ? I : H;
            const struct ft_st_tensor *b = find(m, NAME(n0, "model.layers.%d.mlp.experts.%s_blocks", l, fam[f]));
            const struct ft_st_tensor *s = find(m, NAME(n1, "model.layers.%d.mlp.experts.%s_scales", l, fam[f]));
            if (!b || !s || b->dtype != FT_DTYPE_U8 || s->dtype != FT_DTYPE_U8 || b->n_dims != 4 ||
                s->n_dims != 3 || b->shape[0] != E || b->shape[1] != rows || b->shape[2] != K / 32 ||
                b->shape[3] != 16 || s->shape[0] != E || s->shape[1] != rows || s->shape[2] != K / 32)
                return ft_fail(FT_ERR_FORMAT, "%s: '%s' / '%s' must be U8 [%d, %d, %d, 16] / [%d, %d, "
                               "%d] (MXFP4 experts)", m->label, n0, n1, E, rows, K / 32, E, rows, K / 32);
            for (int e = 0; e < E; e++)
                mxfp4_rows(ft_bank_expert(&L->bank[f], e), (const uint8_t *)b->data + (size_t)e * rows * (K / 32) * 16,
                           (const uint8_t *)s->data + (size_t)e * rows * (K / 32), rows, K, !f);
        }
        return FT_OK;
    }
    const struct ft_st_tensor *gu, *dn;
    FT_TRY(get_tensor(m, NAME(n0, "model.layers.%d.mlp.experts.gate_up_proj", l), 3, E, H, &gu));
    FT_TRY(get_tensor(m, NAME(n1, "model.layers.%d.mlp.experts.down_proj", l), 3, E, I, &dn));
    if (gu->shape[2] != 2 * I || dn->shape[2] != H || dn->dtype != gu->dtype)
        return ft_fail(FT_ERR_FORMAT, "%s: '%s' / '%s' must be [%d, %d, %d] / [%d, %d, %d] of one "
                       "dtype", m->label, n0, n1, E, H, 2 * I, E, I, H);
    const struct ft_row_schema *sc = ft_row_schema_for(gu->dtype);
    if (!sc || ft_dtype_size(gu->dtype) != 2)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: '%s' is %s; gpt-oss experts must be MXFP4 blocks or "
                       "BF16/F16", m->label, n0, ft_dtype_name(gu->dtype));
    FT_TRY(ft_bank_init(&L->bank[FT_BANK_GATE_UP], sc, FT_BANK_GATE_UP, E, 2 * I, H));
    FT_TRY(ft_bank_init(&L->bank[FT_BANK_DOWN], sc, FT_BANK_DOWN, E, H, I));
    for (int e = 0; e < E; e++) { /* element (row, col) of the bank from (col, row) of the file
                                    (2-byte elements; the file's may be unaligned) */
        const uint8_t *g = (const uint8_t *)gu->data + (size_t)e * H * 2 * I * 2;
        const uint8_t *d = (const uint8_t *)dn->data + (size_t)e * I * H * 2;
        uint16_t *bg = (uint16_t *)ft_bank_expert(&L->bank[0], e), *bd = (uint16_t *)ft_bank_expert(&L->bank[1], e);
        for (int h = 0; h < H; h++) /* column c: gate c/2 (even) or up c/2 (odd) */
            for (int c = 0; c < 2 * I; c++)
                memcpy(&bg[(size_t)((c % 2) * I + c / 2) * H + h], g + ((size_t)h * 2 * I + c) * 2, 2);
        for (int i = 0; i < I; i++)
            for (int h = 0; h < H; h++) memcpy(&bd[(size_t)h * I + i], d + ((size_t)i * H + h) * 2, 2);
    }
    return FT_OK;
fail:
    return st;
}

static enum ft_status load_experts(struct ft_model *m, int l, struct ft_layer *L) {
    if (m->gguf) return ft_gguf_load_experts(m, l, L);
    if (m->arch->flags & FT_ARCH_OAI_MOE) return load_oai_experts(m, l, L);
    const struct ft_arch *a = m->arch;
    int E = m->n_experts, I = m->expert_inter, H = m->hidden;
    char n0[256], n1[256];
    /* Fused layout (transformers 5.x in-memory names): experts.gate_up_proj [E, 2I, H] and
     * experts.down_proj [E, H, I]; otherwise one tensor per expert and projection. */
    const struct ft_st_tensor *fgu = find(m, NAME(n0, "model.layers.%d.%s.experts.gate_up_proj", l, a->moe_block));
    const struct ft_st_tensor *first = fgu ? fgu : find(m, NAME(n1, "model.layers.%d.%s.experts.0.%s.weight", l, a->moe_block, a->expert_w[0]));
    if (!first)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' is missing (incomplete download, or "
                       "config.json does not match the weights?)", m->label, n1);
    const struct ft_row_schema *schema = ft_row_schema_for(bank_dtype(first->dtype));
    if (!schema)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: expert tensor '%s' has dtype %s; supported "
                       "expert dtypes: BF16, F16, F32", first->file, first->name,
                       ft_dtype_name(first->dtype));
    enum ft_status st = ft_bank_init(&L->bank[FT_BANK_GATE_UP], schema, FT_BANK_GATE_UP, E, 2 * I, H);
    if (st == FT_OK) st = ft_bank_init(&L->bank[FT_BANK_DOWN], schema, FT_BANK_DOWN, E, H, I);
    if (st != FT_OK) return st;
    size_t half = (size_t)I * ft_dtype_row_bytes(schema->dtype, H); /* the gate rows' bytes */
    if (fgu) {
        if (ft_dtype_is_packed(schema->dtype))
            return ft_fail(FT_ERR_UNSUPPORTED, "%s: fused %s experts are not supported (per-expert "
                           "tensors are)", m->label, ft_dtype_name(fgu->dtype));
        const struct ft_st_tensor *fd;
        if ((st = get_tensor(m, n0, 3, E, 2 * I, &first)) != FT_OK) return st;
        if (fgu->shape[2] != H)
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' has last dimension %lld, expected "
                           "hidden_size %d", fgu->file, n0, (long long)fgu->shape[2], H);
        NAME(n1, "model.layers.%d.%s.experts.down_proj", l, a->moe_block);
        if ((st = get_tensor(m, n1, 3, E, H, &fd)) != FT_OK) return st;
        if (fd->shape[2] != I || fd->dtype != fgu->dtype)
            return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' must be [%d, %d, %d] %s", fd->file,
                           n1, E, H, I, ft_dtype_name(fgu->dtype));
        for (int e = 0; e < E; e++) {
            memcpy(ft_bank_expert(&L->bank[0], e), (const uint8_t *)fgu->data + 2 * half * e, 2 * half);
            memcpy(ft_bank_expert(&L->bank[1], e), (const uint8_t *)fd->data + half * e, half);
        }
    } else {
        for (int e = 0; e < E; e++) {
            const char *pre = a->moe_block;
            NAME(n0, "model.layers.%d.%s.experts.%d.%s.weight", l, pre, e, a->expert_w[0]);
            if ((st = fill_expert(m, &L->bank[0], e, 0, n0, I, H)) != FT_OK) return st;
            NAME(n0, "model.layers.%d.%s.experts.%d.%s.weight", l, pre, e, a->expert_w[1]);
            if ((st = fill_expert(m, &L->bank[0], e, half, n0, I, H)) != FT_OK) return st;
            NAME(n0, "model.layers.%d.%s.experts.%d.%s.weight", l, pre, e, a->expert_w[2]);
            if ((st = fill_expert(m, &L->bank[1], e, 0, n0, H, I)) != FT_OK) return st;
        }
    }
    return FT_OK;
}

static int layer_window(const struct ft_model *m, int l) {
    const struct ft_config *c = &m->cfg;
    if (c->sliding_window <= 0) return 0;
    if (c->sliding) return c->sliding[l] ? c->sliding_window : 0; /* layer_types */
    if (m->arch->flags & FT_ARCH_SLIDING_ALL) return c->sliding_window;
    if ((m->arch->flags & FT_ARCH_SLIDING_QWEN) && c->use_sliding_window == 1 &&
        l >= c->max_window_layers)
        return c->sliding_window;
    return 0;
}

int ft_config_layer_is_moe(const struct ft_config *c, const struct ft_arch *a, int l) {
    if (!(a->flags & FT_ARCH_MOE) || c->n_experts <= 0) return 0;
    if (c->mlp_only && c->mlp_only[l]) return 0;
    if (l < c->first_k_dense_replace) return 0; /* DeepSeek / GLM: the first layers are dense */
    int step = c->decoder_sparse_step > 0 ? c->decoder_sparse_step : 1;
    return (l + 1) % step == 0;
}

int ft_config_expert_width(const struct ft_config *c, const struct ft_arch *a) {
    return a->expert_width_is_intermediate ? c->intermediate_size : c->moe_intermediate_size;
}

int ft_model_layer_is_moe(const struct ft_model *m, int l) {
    return ft_config_layer_is_moe(&m->cfg, m->arch, l);
}

/* Rows [r0, r0 + n) of w into rows [d0, d0 + n) of dst (same dtype and width). */
static void copy_rows(void *dst, int d0, const struct ft_weight *w, int r0, int n) {
    size_t rb = ft_dtype_row_bytes(w->dtype, w->cols);
    memcpy((uint8_t *)dst + (size_t)d0 * rb, (const uint8_t *)w->data + (size_t)r0 * rb, (size_t)n * rb);
}

/* A new weight of rows x w's width and dtype, its rows filled by the caller. */
static enum ft_status new_weight(struct ft_model *m, const struct ft_weight *w, int rows,
                                 struct ft_weight *out) {
    void *p = ft_model_alloc(m, (size_t)rows * ft_dtype_row_bytes(w->dtype, w->cols));
    if (!p) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    *out = (struct ft_weight){p, w->dtype, rows, w->cols};
    return FT_OK;
}

/* A Gated DeltaNet layer's tensors (linear_attn.*). Qwen3-Next groups its input projections per
 * key head ([q | k | v of its r value heads | z of them] and [b of them | a of them]): they are
 * regrouped into Qwen3.5's flat q, k, v / z / b / a rows here, so one forward reads both. */
static enum ft_status load_gdn(struct ft_model *m, int l, struct ft_layer *L) {
    const int H = m->hidden, Hk = m->gdn_hk, Hv = m->gdn_hv, dk = m->gdn_dk, dv = m->gdn_dv;
    const int K = m->gdn_kernel, r = Hv / Hk, Dk = Hk * dk, Dv = Hv * dv, Cc = 2 * Dk + Dv;
    char n[256];
    enum ft_status st;
#define P(...) NAME(n, "model.layers.%d.linear_attn." __VA_ARGS__)
    if ((m->arch->flags & FT_ARCH_GDN_GROUPED) && !m->gguf) { /* GGUF: flat, as Qwen3.5's */
        struct ft_weight qkvz, ba;
        FT_TRY(load_weight(m, P("in_proj_qkvz.weight", l), 2 * Dk + 2 * Dv, H, &qkvz));
        FT_TRY(load_weight(m, P("in_proj_ba.weight", l), 2 * Hv, H, &ba));
        FT_TRY(new_weight(m, &qkvz, Cc, &L->gdn_qkv));
        FT_TRY(new_weight(m, &qkvz, Dv, &L->gdn_z));
        FT_TRY(new_weight(m, &ba, Hv, &L->gdn_b));
        FT_TRY(new_weight(m, &ba, Hv, &L->gdn_a));
        const int gs = 2 * dk + 2 * r * dv; /* one key head's group of rows */
        for (int g = 0; g < Hk; g++) {
            copy_rows((void *)L->gdn_qkv.data, g * dk, &qkvz, g * gs, dk);
            copy_rows((void *)L->gdn_qkv.data, Dk + g * dk, &qkvz, g * gs + dk, dk);
            copy_rows((void *)L->gdn_qkv.data, 2 * Dk + g * r * dv, &qkvz, g * gs + 2 * dk, r * dv);
            copy_rows((void *)L->gdn_z.data, g * r * dv, &qkvz, g * gs + 2 * dk + r * dv, r * dv);
            copy_rows((void *)L->gdn_b.data, g * r, &ba, g * 2 * r, r);
            copy_rows((void *)L->gdn_a.data, g * r, &ba, g * 2 * r + r, r);
        }
    } else {
        FT_TRY(load_weight(m, P("in_proj_qkv.weight", l), Cc, H, &L->gdn_qkv));
        FT_TRY(load_weight(m, P("in_proj_z.weight", l), Dv, H, &L->gdn_z));
        FT_TRY(load_weight(m, P("in_proj_b.weight", l), Hv, H, &L->gdn_b));
        FT_TRY(load_weight(m, P("in_proj_a.weight", l), Hv, H, &L->gdn_a));
    }
    const struct ft_st_tensor *cw;
    FT_TRY(get_tensor(m, P("conv1d.weight", l), 3, Cc, 1, &cw));
    if (cw->shape[2] != K)
        return ft_fail(FT_ERR_FORMAT, "%s: tensor '%s' must be [%d, 1, %d] (linear_conv_kernel_dim)",
                       cw->file, n, Cc, K);
    if (!(L->gdn_conv = ft_model_alloc(m, (size_t)Cc * K * sizeof(float))))
        return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    ft_to_f32(L->gdn_conv, cw->data, cw->dtype, (size_t)Cc * K);
    m->n_params += (uint64_t)Cc * K;
    m->dense_bytes += ft_dtype_row_bytes(cw->dtype, (int64_t)Cc * K);
    FT_TRY(load_vec(m, P("A_log", l), Hv, &L->gdn_A));
    for (int h = 0; h < Hv; h++) L->gdn_A[h] = -expf(L->gdn_A[h]);
    FT_TRY(load_vec(m, P("dt_bias", l), Hv, &L->gdn_dt));
    FT_TRY(load_vec(m, P("norm.weight", l), dv, &L->gdn_norm));
    FT_TRY(load_weight(m, P("out_proj.weight", l), H, Dv, &L->gdn_out));
#undef P
    return FT_OK;
fail:
    return st;
}

/* An MLA layer's attention tensors (self_attn.*), and kv_b's k_nope rows transposed per head
 * into uk_t for the absorbed form. */
static enum ft_status load_mla(struct ft_model *m, int l, struct ft_layer *L) {
    const int H = m->hidden, nh = m->n_heads, dn = m->mla_nope, dr = m->mla_rope, dv = m->mla_v;
    const int Lr = m->mla_kv_lora, ql = m->mla_q_lora;
    char n[256];
    enum ft_status st;
    L->mla = 1;
#define P(...) NAME(n, "model.layers.%d.self_attn." __VA_ARGS__)
    if (ql > 0) {
        FT_TRY(load_weight(m, P("q_a_proj.weight", l), ql, H, &L->q_a));
        FT_TRY(load_vec(m, P("q_a_layernorm.weight", l), ql, &L->q_a_norm));
        FT_TRY(load_weight(m, P("q_b_proj.weight", l), nh * (dn + dr), ql, &L->q_b));
        if (m->cfg.attention_bias == 1) FT_TRY(load_vec(m, P("q_a_proj.bias", l), ql, &L->bq_a));
    } else {
        FT_TRY(load_weight(m, P("q_proj.weight", l), nh * (dn + dr), H, &L->wq));
    }
    FT_TRY(load_weight(m, P("kv_a_proj_with_mqa.weight", l), Lr + dr, H, &L->kv_a));
    if (m->cfg.attention_bias == 1) FT_TRY(load_vec(m, P("kv_a_proj_with_mqa.bias", l), Lr + dr, &L->bkv_a));
    FT_TRY(load_vec(m, P("kv_a_layernorm.weight", l), Lr, &L->kv_a_norm));
    FT_TRY(load_weight(m, P("kv_b_proj.weight", l), nh * (dn + dv), Lr, &L->kv_b));
    FT_TRY(load_weight(m, P("o_proj.weight", l), H, nh * dv, &L->wo));
    if (m->cfg.attention_bias == 1 && find(m, P("o_proj.bias", l))) FT_TRY(load_vec(m, n, H, &L->bo));
#undef P
    /* bf16 when kv_b is (exact); f32 for every other dtype (a quantised or f32 kv_b would lose
     * up to 4e-3 of logit to a bf16 rounding here) */
    const int bf = L->kv_b.dtype == FT_DTYPE_BF16;
    const size_t es = bf ? 2 : 4;
    uint8_t *t = ft_model_alloc(m, (size_t)nh * Lr * (dn > 0 ? dn : 1) * es);
    float *row = malloc((size_t)Lr * sizeof *row);
    if (!t || !row) {
        free(row);
        return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    }
    size_t rb = ft_dtype_row_bytes(L->kv_b.dtype, Lr);
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < dn; i++) {
            ft_to_f32(row, (const uint8_t *)L->kv_b.data + (size_t)(h * (dn + dv) + i) * rb, L->kv_b.dtype, Lr);
            for (int c = 0; c < Lr; c++) {
                const size_t at = ((size_t)h * Lr + c) * dn + i;
                if (bf) ((uint16_t *)t)[at] = ft_f32_to_bf16(row[c]);
                else ((float *)t)[at] = row[c];
            }
        }
    free(row);
    L->uk_t = (struct ft_weight){t, bf ? FT_DTYPE_BF16 : FT_DTYPE_F32, nh * Lr, dn};
    return FT_OK;
fail:
    return st;
}

/* A DSA layer's lightning indexer (self_attn.indexer.*); a "shared" layer has none. */
static enum ft_status load_dsa(struct ft_model *m, int l, struct ft_layer *L) {
    const int H = m->hidden, nI = m->dsa_heads, dI = m->dsa_dim;
    char n[256];
    enum ft_status st;
    if (m->cfg.index_shared && m->cfg.index_shared[l]) {
        L->dsa = 2;
        return FT_OK;
    }
    L->dsa = 1;
#define P(...) NAME(n, "model.layers.%d.self_attn.indexer." __VA_ARGS__)
    FT_TRY(load_weight(m, P("wq_b.weight", l), nI * dI, m->mla_q_lora, &L->idx_wq));
    FT_TRY(load_weight(m, P("wk.weight", l), dI, H, &L->idx_wk));
    FT_TRY(load_vec(m, P("k_norm.weight", l), dI, &L->idx_k_norm));
    FT_TRY(load_vec(m, P("k_norm.bias", l), dI, &L->idx_k_bias));
    FT_TRY(load_weight(m, P("weights_proj.weight", l), nI, H, &L->idx_w));
#undef P
    return FT_OK;
fail:
    return st;
}

static enum ft_status load_layer(struct ft_model *m, int l) {
    if (m->v4) return ft_v4_load_layer(m, l);
    struct ft_layer *L = &m->layers[l];
    const struct ft_arch *a = m->arch;
    int H = m->hidden, q = m->n_heads * m->head_dim, kv = m->n_kv_heads * m->head_dim;
    char n[256];
    enum ft_status st;
#define P(...) NAME(n, "model.layers.%d." __VA_ARGS__)
    FT_TRY(load_vec(m, P("input_layernorm.weight", l), H, &L->attn_norm));
    if (a->flags & FT_ARCH_GEMMA) { /* post_attention_layernorm normalises the attention output */
        FT_TRY(load_vec(m, P("post_attention_layernorm.weight", l), H, &L->post_attn_norm));
        FT_TRY(load_vec(m, P("pre_feedforward_layernorm.weight", l), H, &L->ffn_norm));
        FT_TRY(load_vec(m, P("post_feedforward_layernorm.weight", l), H, &L->post_ffn_norm));
        L->rope_local = m->inv_freq_local && m->cfg.sliding && m->cfg.sliding[l];
    } else {
        FT_TRY(load_vec(m, P("post_attention_layernorm.weight", l), H, &L->ffn_norm));
    }
    L->gdn = m->cfg.linear && m->cfg.linear[l];
    if (L->gdn) {
        FT_TRY(load_gdn(m, l, L));
        goto ffn;
    }
    if (a->flags & FT_ARCH_MLA) {
        FT_TRY(load_mla(m, l, L));
        if (m->dsa_topk) FT_TRY(load_dsa(m, l, L));
        goto ffn;
    }
    L->attn_gate = (a->flags & FT_ARCH_HYBRID) != 0;
    FT_TRY(load_weight(m, P("self_attn.q_proj.weight", l), L->attn_gate ? 2 * q : q, H, &L->wq));
    FT_TRY(load_weight(m, P("self_attn.k_proj.weight", l), kv, H, &L->wk));
    FT_TRY(load_weight(m, P("self_attn.v_proj.weight", l), kv, H, &L->wv));
    FT_TRY(load_weight(m, P("self_attn.o_proj.weight", l), H, q, &L->wo));
    if ((a->flags & FT_ARCH_QKV_BIAS) || m->cfg.attention_bias == 1) {
        FT_TRY(load_vec(m, P("self_attn.q_proj.bias", l), L->attn_gate ? 2 * q : q, &L->bq));
        FT_TRY(load_vec(m, P("self_attn.k_proj.bias", l), kv, &L->bk));
        FT_TRY(load_vec(m, P("self_attn.v_proj.bias", l), kv, &L->bv));
        if (m->cfg.attention_bias == 1 && find(m, P("self_attn.o_proj.bias", l)))
            FT_TRY(load_vec(m, n, H, &L->bo));
    }
    if (a->flags & FT_ARCH_OAI_MOE)
        FT_TRY(load_vec(m, P("self_attn.sinks", l), m->n_heads, &L->sinks));
    if (a->flags & FT_ARCH_QK_NORM_ALL) { /* one norm over every head's dims */
        FT_TRY(load_vec(m, P("self_attn.q_norm.weight", l), q, &L->q_norm));
        FT_TRY(load_vec(m, P("self_attn.k_norm.weight", l), kv, &L->k_norm));
        L->qk_norm_all = 1;
    } else if ((a->flags & FT_ARCH_QK_NORM) || m->cfg.use_qk_norm == 1) {
        FT_TRY(load_vec(m, P("self_attn.q_norm.weight", l), m->head_dim, &L->q_norm));
        FT_TRY(load_vec(m, P("self_attn.k_norm.weight", l), m->head_dim, &L->k_norm));
    }
    L->window = layer_window(m, l);
ffn:
    L->is_moe = ft_model_layer_is_moe(m, l);
    if (!L->is_moe) {
        int I = m->cfg.intermediate_size;
        if (I <= 0)
            return ft_fail(FT_ERR_FORMAT, "%s/config.json: intermediate_size is missing but "
                           "layer %d is dense", m->label, l);
        FT_TRY(load_weight(m, P("mlp.gate_proj.weight", l), I, H, &L->w_gate));
        FT_TRY(load_weight(m, P("mlp.up_proj.weight", l), I, H, &L->w_up));
        FT_TRY(load_weight(m, P("mlp.down_proj.weight", l), H, I, &L->w_down));
        return FT_OK;
    }
    const char *router = a->flags & FT_ARCH_OAI_MOE ? "router" : "gate";
    FT_TRY(load_weight(m, NAME(n, "model.layers.%d.%s.%s.weight", l, a->moe_block, router),
                       m->n_experts, H, &L->router));
    if ((a->flags & FT_ARCH_SIGMOID_ROUTER) && /* the router's (DeepSeek, GLM) or the block's (MiniMax) */
        (find(m, NAME(n, "model.layers.%d.%s.gate.e_score_correction_bias", l, a->moe_block)) ||
         find(m, NAME(n, "model.layers.%d.%s.e_score_correction_bias", l, a->moe_block))))
        FT_TRY(load_vec(m, n, m->n_experts, &L->router_score_bias));
    if (a->flags & FT_ARCH_OAI_MOE)
        FT_TRY(load_vec(m, NAME(n, "model.layers.%d.%s.router.bias", l, a->moe_block), m->n_experts,
                        &L->router_bias));
    FT_TRY(load_experts(m, l, L));
    if ((a->flags & FT_ARCH_SHARED_PLAIN) && m->shared_inter > 0) { /* ungated: sh_score none */
        int Is = m->shared_inter;
        L->has_shared = 1;
        FT_TRY(load_weight(m, P("mlp.shared_experts.gate_proj.weight", l), Is, H, &L->sh_gate));
        FT_TRY(load_weight(m, P("mlp.shared_experts.up_proj.weight", l), Is, H, &L->sh_up));
        FT_TRY(load_weight(m, P("mlp.shared_experts.down_proj.weight", l), H, Is, &L->sh_down));
    }
    if ((a->flags & FT_ARCH_SHARED_EXPERT) && m->shared_inter > 0) {
        int Is = m->shared_inter;
        L->has_shared = 1;
        FT_TRY(load_weight(m, P("mlp.shared_expert.gate_proj.weight", l), Is, H, &L->sh_gate));
        FT_TRY(load_weight(m, P("mlp.shared_expert.up_proj.weight", l), Is, H, &L->sh_up));
        FT_TRY(load_weight(m, P("mlp.shared_expert.down_proj.weight", l), H, Is, &L->sh_down));
        FT_TRY(load_weight(m, P("mlp.shared_expert_gate.weight", l), 1, H, &L->sh_score));
    }
#undef P
    return FT_OK;
fail:
    return st;
}

enum ft_status ft_rope_init(const struct ft_config *cfg, int head_dim, float **inv_freq,
                            int *rot_dim, float *mscale) {
    const struct ft_rope *r = &cfg->rope;
    double prf = r->partial_rotary_factor > 0 ? r->partial_rotary_factor : 1.0;
    int dim = r->rot_dims > 0 ? r->rot_dims : (int)(head_dim * prf + 1e-9);
    dim &= ~1;
    if (dim <= 0) return ft_fail(FT_ERR_FORMAT, "config.json: rotary dimension is 0");
    float *f = malloc((size_t)(dim / 2) * sizeof *f);
    if (!f) return ft_fail(FT_ERR_OOM, "rope: out of memory");
    double base = r->theta > 0 ? r->theta : 10000.0, factor = r->factor > 0 ? r->factor : 1.0;
    *mscale = 1.0f;
    /* fp32 like transformers: base ** (2i/dim) then 1/x */
    for (int i = 0; i < dim / 2; i++) f[i] = 1.0f / powf((float)base, (float)(2 * i) / (float)dim);
    if (r->type == FT_ROPE_LINEAR) {
        for (int i = 0; i < dim / 2; i++) f[i] = (float)(f[i] / factor);
    } else if (r->type == FT_ROPE_LLAMA3) {
        double old = r->original_max_pos > 0 ? r->original_max_pos : 8192;
        double lo = r->low_freq_factor > 0 ? r->low_freq_factor : 1.0;
        double hi = r->high_freq_factor > 0 ? r->high_freq_factor : 4.0;
        double lo_wl = old / lo, hi_wl = old / hi;
        for (int i = 0; i < dim / 2; i++) {
            double wl = 2 * M_PI / f[i], v = f[i];
            if (wl > lo_wl) {
                v = f[i] / factor;
            } else if (wl >= hi_wl) {
                double s = (old / wl - lo) / (hi - lo);
                v = (1 - s) * f[i] / factor + s * f[i];
            }
            f[i] = (float)v;
        }
    } else if (r->type == FT_ROPE_YARN) {
        double omax = r->original_max_pos > 0 ? r->original_max_pos : cfg->max_position_embeddings;
        double bf = r->beta_fast > 0 ? r->beta_fast : 32, bs = r->beta_slow > 0 ? r->beta_slow : 1;
        double lo = dim * log(omax / (bf * 2 * M_PI)) / (2 * log(base));
        double hi = dim * log(omax / (bs * 2 * M_PI)) / (2 * log(base));
        if (r->truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        lo = lo < 0 ? 0 : lo;
        hi = hi > dim - 1 ? dim - 1 : hi;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < dim / 2; i++) {
            float ramp = (float)((i - lo) / (hi - lo));
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float extra = 1.0f - ramp; /* extrapolation weight */
            float pos_freq = 1.0f / f[i];
            float inv_ex = f[i], inv_in = (float)(1.0 / (factor * pos_freq));
            f[i] = inv_in * (1 - extra) + inv_ex * extra;
        }
        *mscale = r->attention_factor > 0 ? (float)r->attention_factor
                                          : (factor <= 1 ? 1.0f : (float)(0.1 * log(factor) + 1.0));
    }
    *inv_freq = f;
    *rot_dim = dim;
    return FT_OK;
}

/* Tensors the model never read. A GGUF tensor that has an HF name but no reader here (an
 * attn_q.bias in a Qwen3 file) is an error, like one with no name at all: computing without it
 * would be silently wrong. Safetensors checkpoints often carry extras on purpose (multi-token
 * prediction layers, vision towers, activation scales, a tied lm_head), so they only warn. */
static int benign_extra(const char *name) {
    if (!strncmp(name, "model.visual.", 13) || !strncmp(name, "mtp.", 4)) return 1; /* noted apart */
    static const char *const k_suffixes[] = {"rotary_emb.inv_freq", ".input_scale", ".k_scale",
                                             ".v_scale"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof k_suffixes / sizeof k_suffixes[0]; i++) {
        size_t k = strlen(k_suffixes[i]);
        if (n >= k && !strcmp(name + n - k, k_suffixes[i])) return 1;
    }
    return !strcmp(name, "lm_head.weight");
}

static enum ft_status check_unused(struct ft_model *m) {
    char list[512] = "";
    const char *first = NULL;
    int n = 0, relevant = 0;
    for (int i = 0; i < ft_st_set_count(m->st); i++) {
        const char *name = ft_st_set_at(m->st, i)->name;
        if (!ft_st_set_is_unused(m->st, i)) continue;
        if (n++ == 0) first = name;
        if (benign_extra(name)) continue;
        if (relevant++ < 3)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s'", relevant > 1 ? ", " : "",
                     name);
    }
    if (m->gguf && n)
        return ft_fail(FT_ERR_UNSUPPORTED, "%s: tensor '%s' (%d unread in all) has no reader in a "
                       "%s model with this metadata (a variant this engine does not know, or a "
                       "missing key; running without it would give wrong output)", m->label, first,
                       n, m->cfg.model_type[0] ? m->cfg.model_type : m->arch->name);
    int visual = 0, mtp = 0;
    for (int i = 0; !m->gguf && i < ft_st_set_count(m->st); i++) {
        const char *name = ft_st_set_at(m->st, i)->name;
        visual += !strncmp(name, "model.visual.", 13), mtp += !strncmp(name, "mtp.", 4);
    }
    if (visual)
        ft_log_info("%s: the vision tower (%d tensors) is not read: text only (image input is "
                    "refused)", m->label, visual);
    if (mtp)
        ft_log_info("%s: %d multi-token-prediction tensors are not read (speculative decoding with "
                    "them is not implemented yet)", m->label, mtp);
    if (relevant)
        ft_log_warn("%s: %d tensor%s not used (%s%s): extra layers or towers are fine, but a weight "
                    "this engine should read would make the output wrong", m->label, relevant,
                    relevant > 1 ? "s are" : " is", list, relevant > 3 ? ", ..." : "");
    return FT_OK;
}

/* The DeltaNet sizes a config gives, transformers' defaults where it is silent: key heads,
 * value heads, key width, value width, conv kernel. */
static void gdn_sizes(const struct ft_config *c, int z[5]) {
    z[0] = c->linear_num_key_heads > 0 ? c->linear_num_key_heads : 16;
    z[1] = c->linear_num_value_heads > 0 ? c->linear_num_value_heads : 32;
    z[2] = c->linear_key_head_dim > 0 ? c->linear_key_head_dim : 128;
    z[3] = c->linear_value_head_dim > 0 ? c->linear_value_head_dim : 128;
    z[4] = c->linear_conv_kernel_dim > 0 ? c->linear_conv_kernel_dim : 4;
}

uint64_t ft_config_state_bytes(const struct ft_config *c, const struct ft_arch *a, int *n_linear) {
    *n_linear = 0;
    if (!(a->flags & FT_ARCH_HYBRID)) return 0;
    int every = c->full_attention_interval > 0 ? c->full_attention_interval : 4, z[5];
    for (int l = 0; l < c->n_layers; l++) *n_linear += c->linear ? c->linear[l] : (l + 1) % every != 0;
    gdn_sizes(c, z);
    uint64_t cc = 2 * (uint64_t)z[0] * z[2] + (uint64_t)z[1] * z[3];
    return (uint64_t)*n_linear * ((uint64_t)(z[4] - 1) * cc + (uint64_t)z[1] * z[2] * z[3]) * 4;
}

/* Qwen3-Next / Qwen3.5: which layers are Gated DeltaNet (layer_types, or every layer but each
 * full_attention_interval-th, 4 by default), their sizes (transformers' defaults where the
 * config is silent) and partial RoPE's default 0.25. Other archs refuse linear_attention. */
static enum ft_status hybrid_shapes(struct ft_model *m) {
    struct ft_config *c = &m->cfg;
    if (!(m->arch->flags & FT_ARCH_HYBRID)) {
        for (int l = 0; c->linear && l < m->n_layers; l++)
            if (c->linear[l])
                return ft_fail(FT_ERR_UNSUPPORTED, "%s/config.json: 'layer_types[%d]' is "
                               "\"linear_attention\", which %s does not have", m->label, l, m->arch->name);
        return FT_OK;
    }
    if (!c->linear) {
        int every = c->full_attention_interval > 0 ? c->full_attention_interval : 4;
        if (!(c->linear = calloc((size_t)m->n_layers, 1))) return ft_fail(FT_ERR_OOM, "out of memory");
        for (int l = 0; l < m->n_layers; l++) c->linear[l] = (l + 1) % every != 0;
    }
    int z[5];
    gdn_sizes(c, z);
    m->gdn_hk = z[0], m->gdn_hv = z[1], m->gdn_dk = z[2], m->gdn_dv = z[3], m->gdn_kernel = z[4];
    if (m->gdn_hv % m->gdn_hk)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: linear_num_value_heads %d is not a multiple "
                       "of linear_num_key_heads %d", m->label, m->gdn_hv, m->gdn_hk);
    if ((int64_t)m->gdn_hv * m->gdn_dv > INT_MAX / 4 || (int64_t)m->gdn_hk * m->gdn_dk > INT_MAX / 4 ||
        m->gdn_kernel > 64)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: the linear attention sizes are too large "
                       "(%d x %d value, %d x %d key, kernel %d)", m->label, m->gdn_hv, m->gdn_dv,
                       m->gdn_hk, m->gdn_dk, m->gdn_kernel);
    m->n_gdn = 0;
    for (int l = 0; l < m->n_layers; l++) m->n_gdn += c->linear[l];
    return FT_OK;
}

/* DeepSeek sparse attention's sizes (GLM-5): the indexer needs q LoRA, rotates the first
 * qk_rope_head_dim dims of its heads in interleaved pairs (as the latent attention there), and
 * its first layer must run it (a "shared" layer reuses the previous one's choice). */
static enum ft_status dsa_shapes(struct ft_model *m) {
    const struct ft_config *c = &m->cfg;
    const char *miss = !c->index_topk ? "index_topk" : !c->index_n_heads ? "index_n_heads"
                     : !c->index_head_dim ? "index_head_dim" : NULL;
    if (miss)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: '%s' is missing (%s's sparse-attention "
                       "indexer needs index_topk, index_n_heads and index_head_dim)", m->label, miss,
                       m->arch->name);
    if (c->q_lora_rank <= 0 || c->index_head_dim < c->qk_rope_head_dim)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: the sparse-attention indexer needs q_lora_rank "
                       "> 0 and index_head_dim (%d) >= qk_rope_head_dim (%d)", m->label,
                       c->index_head_dim, c->qk_rope_head_dim);
    if (c->index_shared && c->index_shared[0])
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: layer 0's indexer is \"shared\" but no "
                       "layer before it chooses (indexer_types)", m->label);
    m->dsa_topk = c->index_topk, m->dsa_heads = c->index_n_heads, m->dsa_dim = c->index_head_dim;
    m->rope_pairs = 1; /* transformers' glm_moe_dsa interleaves whatever rope_interleave says */
    return FT_OK;
}

/* DeepSeek-style models: MLA's sizes (the per-head q/k width is dn + dr; RoPE over dr, in
 * adjacent pairs unless rope_interleave is false; the softmax scale (dn + dr)^-1/2, times
 * YaRN's mscale(factor, mscale_all_dim)^2), the sigmoid router's groups and scale, the plain
 * shared experts' width. */
static enum ft_status mla_router_shapes(struct ft_model *m) {
    const struct ft_config *c = &m->cfg;
    if (m->arch->flags & FT_ARCH_MLA) {
        if (c->kv_lora_rank <= 0 || c->qk_rope_head_dim <= 0 || c->qk_rope_head_dim % 2 ||
            c->qk_nope_head_dim < 0 || c->v_head_dim <= 0)
            return ft_fail(FT_ERR_FORMAT, "%s/config.json: MLA needs kv_lora_rank, qk_rope_head_dim "
                           "(even), qk_nope_head_dim and v_head_dim (got %d, %d, %d, %d)", m->label,
                           c->kv_lora_rank, c->qk_rope_head_dim, c->qk_nope_head_dim, c->v_head_dim);
        m->mla = 1;
        m->mla_q_lora = c->q_lora_rank, m->mla_kv_lora = c->kv_lora_rank;
        m->mla_nope = c->qk_nope_head_dim, m->mla_rope = c->qk_rope_head_dim, m->mla_v = c->v_head_dim;
        m->head_dim = m->mla_nope + m->mla_rope;
        m->n_kv_heads = m->n_heads;
        m->rope_pairs = c->rope_interleave != 0; /* DeepSeek-V3's default: interleaved */
        double scale = 1.0 / sqrt((double)m->head_dim), f = c->rope.factor;
        if (c->rope.type != FT_ROPE_DEFAULT && c->rope.mscale_all_dim != 0 && f > 1) {
            double ms = 0.1 * c->rope.mscale_all_dim * log(f) + 1.0;
            scale *= ms * ms;
        }
        m->attn_scale = (float)scale;
        enum ft_status st = m->arch->flags & FT_ARCH_DSA ? dsa_shapes(m) : FT_OK;
        if (st != FT_OK) return st;
    }
    struct ft_config *w = &m->cfg; /* the arch's defaults where the config is silent */
    if (w->first_k_dense_replace < 0) w->first_k_dense_replace = m->arch->dense_first;
    if (w->n_group < 0) w->n_group = m->arch->n_group;
    if (w->topk_group < 0) w->topk_group = m->arch->topk_group;
    if (w->routed_scaling_factor < 0) w->routed_scaling_factor = m->arch->routed_scale > 0 ? m->arch->routed_scale : 1;
    if (!w->rope.partial_rotary_set && m->arch->partial_rotary > 0)
        w->rope.partial_rotary_factor = m->arch->partial_rotary;
    if (m->arch->flags & FT_ARCH_SIGMOID_ROUTER) {
        m->router_sigmoid = 1;
        m->n_group = c->n_group > 1 ? c->n_group : 1;
        m->topk_group = c->n_group > 1 ? c->topk_group : 1;
        m->routed_scale = (float)c->routed_scaling_factor;
        if (c->norm_topk_prob == -1) m->norm_topk = 1; /* their default */
        if (m->n_experts % m->n_group || m->top_k > m->n_experts / m->n_group * m->topk_group)
            return ft_fail(FT_ERR_FORMAT, "%s/config.json: n_group %d / topk_group %d leave fewer than "
                           "num_experts_per_tok %d of the %d experts", m->label, m->n_group,
                           m->topk_group, m->top_k, m->n_experts);
    }
    if ((m->arch->flags & FT_ARCH_MLA) && !(m->arch->flags & FT_ARCH_SIGMOID_ROUTER)) {
        /* DeepSeek-V2: softmax scores times the routed scale, never renormalised; groups only
         * for group_limited_greedy (their best score ranks them) */
        m->router_group_max = c->topk_group_limited && c->n_group > 1;
        m->n_group = m->router_group_max ? c->n_group : 1;
        m->topk_group = m->router_group_max ? c->topk_group : 1;
        m->routed_scale = (float)c->routed_scaling_factor;
        m->norm_topk = 0;
        if (m->router_group_max && m->top_k > m->n_experts / m->n_group * m->topk_group)
            return ft_fail(FT_ERR_FORMAT, "%s/config.json: n_group %d / topk_group %d leave fewer than "
                           "num_experts_per_tok %d of the %d experts", m->label, m->n_group,
                           m->topk_group, m->top_k, m->n_experts);
    }
    if (m->arch->flags & FT_ARCH_SHARED_PLAIN)
        m->shared_inter = c->n_shared_experts > 0 ? c->n_shared_experts * c->moe_intermediate_size : 0;
    return FT_OK;
}

int ft_model_kv_dim(const struct ft_model *m) {
    return m->mla ? m->mla_kv_lora + m->mla_rope + m->dsa_dim : m->n_kv_heads * m->head_dim;
}

uint64_t ft_model_kv_token_bytes(const struct ft_model *m) {
    uint64_t n = 0;
    for (int l = 0; l < m->n_layers; l++) n += !m->layers[l].gdn && !m->layers[l].v4;
    /* f32 rows: MLA's one (latent, rope key, GLM-5's indexer key), else a key row and a value row */
    return 4 * n * (uint64_t)ft_model_kv_dim(m) * (m->mla ? 1 : 2);
}

uint64_t ft_model_state_bytes(const struct ft_model *m) {
    int n;
    return ft_config_state_bytes(&m->cfg, m->arch, &n); /* the sizes hybrid_shapes read */
}

/* Shapes and derived sizes shared by loaded and synthetic models. */
enum ft_status ft_model_shapes(struct ft_model *m) {
    const struct ft_config *c = &m->cfg;
    m->n_layers = c->n_layers;
    m->hidden = c->hidden_size;
    m->n_heads = c->n_heads;
    m->n_kv_heads = c->n_kv_heads > 0 ? c->n_kv_heads : c->n_heads;
    m->head_dim = c->head_dim > 0 ? c->head_dim : c->hidden_size / c->n_heads;
    m->vocab = c->vocab_size;
    m->rms_eps = (float)(c->rms_norm_eps > 0 ? c->rms_norm_eps : 1e-6);
    if (m->arch->flags & FT_ARCH_MOE) {
        m->n_experts = c->n_experts;
        m->top_k = c->n_experts_per_tok;
        m->expert_inter = ft_config_expert_width(c, m->arch);
        m->shared_inter = c->shared_expert_intermediate_size;
        m->norm_topk = (m->arch->flags & FT_ARCH_NORM_TOPK_ALWAYS) ? 1 : c->norm_topk_prob == 1;
        if (m->n_experts <= 0 || m->top_k <= 0 || m->top_k > m->n_experts || m->top_k > 64 ||
            m->expert_inter <= 0)
            return ft_fail(FT_ERR_FORMAT, "%s/config.json: MoE fields are inconsistent "
                           "(num_experts %d, num_experts_per_tok %d, expert width %d)",
                           m->label, m->n_experts, m->top_k, m->expert_inter);
    }
    /* each field is checked alone; their products size buffers and index tensors as int */
    int64_t q_dim = (int64_t)m->n_heads * m->head_dim, two_i = 2 * (int64_t)c->intermediate_size;
    int64_t two_e = 2 * (int64_t)FT_MAX(m->expert_inter, m->shared_inter);
    if (q_dim > INT_MAX || two_i > INT_MAX || two_e > INT_MAX)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: num_attention_heads x head_dim (%lld) and "
                       "2 x the intermediate sizes (%lld, %lld) must be below 2^31",
                       m->label, (long long)q_dim, (long long)two_i, (long long)two_e);
    if (m->n_heads % m->n_kv_heads)
        return ft_fail(FT_ERR_FORMAT, "%s/config.json: num_attention_heads %d is not a multiple "
                       "of num_key_value_heads %d", m->label, m->n_heads, m->n_kv_heads);
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    if (!m->layers) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    enum ft_status st = hybrid_shapes(m);
    if (st == FT_OK) st = mla_router_shapes(m);
    if (st == FT_OK) st = ft_v4_shapes(m); /* DeepSeek-V4's sizes; others refuse its layer types */
    if (st != FT_OK) return st;
    st = ft_rope_init(c, m->mla ? m->mla_rope : m->head_dim, &m->inv_freq, &m->rot_dim, &m->rope_mscale);
    if (st != FT_OK || !(m->arch->flags & FT_ARCH_GEMMA)) return st;
    m->embed_scale = sqrtf((float)m->hidden);
    if (c->query_pre_attn_scalar > 0) m->attn_scale = (float)(1.0 / sqrt(c->query_pre_attn_scalar));
    m->gelu_tanh = c->gelu_tanh;
    double local = c->rope_local_theta > 0 ? c->rope_local_theta : 10000.0; /* Gemma 3's default */
    if (c->sliding) { /* the sliding layers' own plain RoPE */
        struct ft_config lc = *c;
        int rd;
        float ms;
        lc.rope.type = FT_ROPE_DEFAULT;
        lc.rope.theta = local;
        st = ft_rope_init(&lc, m->head_dim, &m->inv_freq_local, &rd, &ms);
    }
    return st;
}

void ft_model_sizes(struct ft_model *m) {
    uint64_t per_expert = 0, moe_layers = 0, expert = (uint64_t)3 * m->expert_inter * m->hidden;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].is_moe) {
            per_expert = m->layers[l].bank[0].row_bytes + m->layers[l].bank[1].row_bytes;
            moe_layers++;
        }
    m->expert_bytes = per_expert;
    /* the builders counted every non-expert weight into n_params (the loader also their bytes,
     * in their formats); experts are counted here */
    if (!m->dense_bytes) m->dense_bytes = m->n_params * ft_dtype_size(m->embed.dtype);
    m->n_params_active = m->n_params + moe_layers * m->top_k * expert;
    m->n_params += moe_layers * m->n_experts * expert;
}

uint64_t ft_model_bytes_per_token(const struct ft_model *m) {
    /* embedding row is negligible; every other dense weight is read once per step */
    uint64_t emb = (uint64_t)m->vocab * ft_dtype_row_bytes(m->embed.dtype, m->hidden);
    uint64_t b = m->dense_bytes - emb;
    if (m->lm_head.data == m->embed.data) b += emb;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].is_moe) b += (uint64_t)m->top_k * m->expert_bytes;
    return b;
}

enum ft_status ft_model_load(const char *dir, struct ft_model **out) {
    return ft_model_load_opts(dir, NULL, out);
}

enum ft_status ft_model_load_ex(const char *dir, ft_progress_fn progress, void *ctx,
                                struct ft_model **out) {
    struct ft_load_opts o = {.progress = progress, .progress_ctx = ctx};
    return ft_model_load_opts(dir, &o, out);
}

int ft_gguf_expert_layer(const char *name) {
    int l = -1, end = 0;
    char fam[32];
    /* %n: sscanf counts the conversions even when the "_exps." after them does not match */
    if (sscanf(name, "blk.%d.ffn_%31[a-z]_exps.%n", &l, fam, &end) == 2 && end > 0) return l;
    return -1;
}

void ft_model_file_expert_bytes(const struct ft_st_set *st, const struct ft_gguf_file *gguf,
                                int n_layers, uint64_t *bank) {
    memset(bank, 0, (size_t)n_layers * sizeof *bank);
    int64_t n = gguf ? ft_gguf_tensor_count(gguf) : st ? ft_st_set_count(st) : 0;
    for (int64_t i = 0; i < n; i++) {
        int l = -1;
        if (gguf) {
            const struct ft_gguf_tensor *t = ft_gguf_tensor_at(gguf, i);
            if ((l = ft_gguf_expert_layer(t->name)) >= 0 && l < n_layers) bank[l] += t->n_bytes;
        } else {
            const struct ft_st_tensor *t = ft_st_set_at(st, (int)i);
            if (strstr(t->name, ".experts.") && sscanf(t->name, "model.layers.%d.", &l) == 1 &&
                l >= 0 && l < n_layers)
                bank[l] += t->n_bytes;
        }
    }
}

/* Plans the banks' residency from the checkpoint's expert sizes and starts the registration
 * thread, which takes each layer once ft_residency_layer_filled says so. */
static enum ft_status residency_start(struct ft_model *m, const struct ft_residency_opts *ro) {
    uint64_t *bank = calloc((size_t)m->n_layers, sizeof *bank);
    if (!bank) return ft_fail(FT_ERR_OOM, "%s: out of memory", m->label);
    ft_model_file_expert_bytes(m->gguf ? NULL : m->st, m->gguf, m->n_layers, bank);
    for (int l = 0; l < m->n_layers; l++)
        if (!ft_model_layer_is_moe(m, l)) bank[l] = 0;
    enum ft_status st = ft_residency_plan_sizes(m->n_layers, bank, ro, &m->residency);
    free(bank);
    if (st == FT_OK) st = ft_residency_apply_async(m->residency, m);
    return st;
}

enum ft_status ft_model_load_opts(const char *dir, const struct ft_load_opts *o,
                                  struct ft_model **out) {
    static const struct ft_load_opts none = {0};
    if (!o) o = &none;
    ft_progress_fn progress = o->progress;
    void *ctx = o->progress_ctx;
    *out = NULL;
    enum ft_status st;
    struct ft_model *m = calloc(1, sizeof *m);
    if (!m) return ft_fail(FT_ERR_OOM, "out of memory");
    snprintf(m->label, sizeof m->label, "%s", dir);
    char gpath[4096];
    int is_gguf = ft_gguf_model_path(dir, gpath, sizeof gpath);
    if (is_gguf < 0) {
        st = FT_ERR_INVALID_ARG;
        goto fail;
    }
    if (is_gguf) {
        snprintf(m->label, sizeof m->label, "%s", gpath);
        FT_TRY(ft_gguf_open(gpath, &m->gguf));
        FT_TRY(ft_gguf_config(m->gguf, &m->cfg, &m->arch));
        FT_TRY(ft_model_shapes(m));
        FT_TRY(ft_gguf_rope_freqs(m));
        FT_TRY(ft_gguf_model_tensors(m));
    } else {
        FT_TRY(ft_config_load(dir, &m->cfg));
        m->arch = ft_arch_find(m->cfg.arch);
        if (!m->arch) {
            st = ft_fail(FT_ERR_UNSUPPORTED, "%s/config.json: architecture '%s' is not supported "
                         "(supported: %s)", dir, m->cfg.arch, ft_arch_list());
            goto fail;
        }
        FT_TRY(ft_model_shapes(m));
        FT_TRY(ft_st_set_open(dir, &m->st));
    }
    char n[128];
    FT_TRY(load_weight(m, "model.embed_tokens.weight", m->vocab, m->hidden, &m->embed));
    FT_TRY(load_vec(m, "model.norm.weight", m->hidden, &m->final_norm));
    int tie = m->cfg.tie_word_embeddings;
    if (tie == 1 || (tie == -1 && !find(m, "lm_head.weight"))) {
        m->lm_head = m->embed;
    } else {
        FT_TRY(load_weight(m, NAME(n, "lm_head.weight"), m->vocab, m->hidden, &m->lm_head));
    }
    if (m->v4) FT_TRY(ft_v4_load_globals(m));
    uint64_t file_bytes = 0;
    for (int i = 0; !m->gguf && i < ft_st_set_count(m->st); i++) file_bytes += ft_st_set_at(m->st, i)->n_bytes;
    for (int64_t i = 0; m->gguf && i < ft_gguf_tensor_count(m->gguf); i++)
        file_bytes += ft_gguf_tensor_at(m->gguf, i)->n_bytes; /* st lacks the experts */
    int talk = file_bytes > ((uint64_t)4 << 30), last_tenth = 0;
    if (o->residency && (m->arch->flags & FT_ARCH_MOE)) FT_TRY(residency_start(m, o->residency));
    for (int l = 0; l < m->n_layers; l++) {
        FT_TRY(load_layer(m, l));
        ft_residency_layer_filled(m->residency, l); /* its banks: register while we read on */
        double frac = (double)(l + 1) / m->n_layers;
        if (progress) progress(ctx, frac);
        if (talk && (int)(frac * 10) > last_tenth) { /* long loads say where they are */
            last_tenth = (int)(frac * 10);
            ft_log_info("loading %s: %d%% (%d of %d layers, %.1f GiB of weights)", dir,
                        last_tenth * 10, l + 1, m->n_layers, file_bytes / 1073741824.0);
        }
    }
    FT_TRY(check_unused(m));
    if (m->residency) FT_TRY(ft_residency_wait(m->residency));
    ft_model_sizes(m);
    *out = m;
    return FT_OK;
fail:
    ft_model_free(m);
    return st;
}

void ft_model_free(struct ft_model *m) {
    if (!m) return;
    ft_residency_plan_free(m->residency); /* joins its thread, unpins: before the banks go */
    for (int l = 0; m->layers && l < m->n_layers; l++)
        for (int f = 0; f < FT_BANK_N_FAMILIES; f++) ft_bank_free(&m->layers[l].bank[f]);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->inv_freq);
    free(m->inv_freq_local);
    ft_st_set_close(m->st);
    ft_gguf_close(m->gguf);
    ft_config_free(&m->cfg);
    free(m);
}

struct ft_weight ft_weight_rows(const struct ft_weight *w, int r0, int n) {
    return (struct ft_weight){(const uint8_t *)w->data + (size_t)r0 * ft_dtype_row_bytes(w->dtype, w->cols),
                              w->dtype, n, w->cols};
}

/* model_impl.h: the loader's helpers for the arch files that load their own layers */
const struct ft_st_tensor *ft_model_find(const struct ft_model *m, const char *name) { return find(m, name); }
enum ft_status ft_model_get_tensor(const struct ft_model *m, const char *name, int n_dims, int64_t rows,
                                   int64_t cols, const struct ft_st_tensor **out) {
    return get_tensor(m, name, n_dims, rows, cols, out);
}
enum ft_status ft_model_load_weight(struct ft_model *m, const char *name, int rows, int cols,
                                    struct ft_weight *w) {
    return load_weight(m, name, rows, cols, w);
}
enum ft_status ft_model_load_vec(struct ft_model *m, const char *name, int n, float **out) {
    return load_vec(m, name, n, out);
}
enum ft_status ft_model_load_experts(struct ft_model *m, int l, struct ft_layer *L) {
    return load_experts(m, l, L);
}
