/* bank.c — allocation of host expert banks and the row schema table. Engine thread at load. */
#include "mem/bank.h"

#include <string.h>

#include "core/status.h"
#include "core/sys.h"

static const struct ft_row_schema k_schemas[] = {
    {"bf16", FT_DTYPE_BF16},
    {"f16", FT_DTYPE_F16},
    {"f32", FT_DTYPE_F32},
    {"q8_0", FT_DTYPE_Q8_0},
    {"q4_0", FT_DTYPE_Q4_0},
    {"q4_1", FT_DTYPE_Q4_1},
    {"q5_0", FT_DTYPE_Q5_0},
    {"q5_1", FT_DTYPE_Q5_1},
    {"q4_k", FT_DTYPE_Q4_K},
    {"q5_k", FT_DTYPE_Q5_K},
    {"q6_k", FT_DTYPE_Q6_K},
    {"mxfp4", FT_DTYPE_MXFP4},
    {"fp8_b128", FT_DTYPE_FP8_B128},
    {"nvfp4", FT_DTYPE_NVFP4},
};

const struct ft_row_schema *ft_row_schema_for(enum ft_dtype t) {
    for (size_t i = 0; i < sizeof k_schemas / sizeof k_schemas[0]; i++)
        if (k_schemas[i].dtype == t) return &k_schemas[i];
    return NULL;
}

enum ft_status ft_bank_init(struct ft_bank *b, const struct ft_row_schema *schema,
                            enum ft_bank_family family, int n_experts, int rows, int cols) {
    memset(b, 0, sizeof *b);
    b->schema = schema;
    b->family = family;
    b->n_experts = n_experts;
    b->rows = rows;
    b->cols = cols;
    b->row_bytes = (size_t)rows * ft_dtype_row_bytes(schema->dtype, cols);
    b->stride = (b->row_bytes + 63) & ~(size_t)63;
    b->bytes = ((size_t)n_experts * b->stride + 4095) & ~(size_t)4095;
    b->base = ft_sys_alloc_pages(b->bytes);
    if (!b->base)
        return ft_fail(FT_ERR_OOM,
                       "expert bank: cannot allocate %.1f MiB of host memory (need RAM for all "
                       "experts; close other programs or use a smaller model)",
                       (double)b->bytes / (1 << 20));
    return FT_OK;
}

void ft_bank_free(struct ft_bank *b) {
    if (!b) return;
    ft_sys_free_pages(b->base, b->bytes);
    b->base = NULL;
}
