/* bank.h — per-layer host expert banks (docs/ARCHITECTURE.md section 4).
 * A bank holds one layer's experts for one weight family (gate_up or down), one contiguous,
 * 64-byte aligned row per expert in a page-aligned allocation, so one expert is one copy per
 * bank for the GPU cache and one sequential stream for the CPU executor.
 * What a row holds for a given format is described by its row schema (the only place formats
 * enter the cache machinery). Filled once at load on the engine thread; read-only afterwards,
 * by any thread. */
#ifndef FT_MEM_BANK_H
#define FT_MEM_BANK_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"
#include "backend/swiglu.h"
#include "format/quant.h"

enum ft_bank_family { FT_BANK_GATE_UP, FT_BANK_DOWN, FT_BANK_N_FAMILIES };

/* What one expert row of each family holds, for one expert format. */
struct ft_row_schema {
    const char *name;     /* "bf16", "q4_k" */
    enum ft_dtype dtype;  /* element type or GGML block format of the weight matrix */
    /* gate_up row: [2I, H] (gate rows, then up rows); down row: [H, I]; each matrix row is
     * ft_dtype_row_bytes(dtype, cols) bytes (GGML blocks along the row) */
};

/* Schema for experts of element type or block format t; NULL if t has none. */
const struct ft_row_schema *ft_row_schema_for(enum ft_dtype t);

struct ft_bank {
    const struct ft_row_schema *schema;
    enum ft_bank_family family;
    int n_experts;
    int rows, cols;       /* matrix per expert: gate_up [2I, H], down [H, I] */
    size_t row_bytes;     /* bytes of one expert's matrix */
    size_t stride;        /* bytes between experts (row_bytes rounded up to 64) */
    size_t bytes;         /* whole allocation (page multiple) */
    uint8_t *base;        /* page-aligned */
};

/* What an expert computes between and after its matmuls: plain SwiGLU (no biases), gpt-oss's
 * clamped SwiGLU with per-expert biases, or DeepSeek-V4's clamped SwiGLU (mode says which; a
 * zeroed struct is plain). */
struct ft_expert_act {
    float limit, alpha;           /* the clamp (OAI, CLAMP) and the sigmoid's alpha (OAI) */
    const float *gu_bias;         /* [E][2I] (gate then up, like the bank rows) or NULL */
    const float *down_bias;       /* [E][H] or NULL */
    enum ft_swiglu mode;          /* last: positional initialisers of the fields above stay valid */
};

/* Allocates a bank for n_experts matrices of [rows, cols] in the schema's format. */
enum ft_status ft_bank_init(struct ft_bank *b, const struct ft_row_schema *schema,
                            enum ft_bank_family family, int n_experts, int rows, int cols);
void ft_bank_free(struct ft_bank *b);

static inline uint8_t *ft_bank_expert(const struct ft_bank *b, int e) {
    return b->base + (size_t)e * b->stride;
}

#endif
