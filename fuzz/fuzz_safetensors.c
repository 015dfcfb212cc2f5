/* fuzz_safetensors.c — libFuzzer target for ft_st_parse: any byte string must either be
 * rejected with a status or yield tensors that lie wholly inside the input and are found by
 * name. ASan/UBSan turn any out-of-bounds read or overflow into a crash. Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct ft_st_file *f = NULL;
    if (ft_st_parse(data, size, "fuzz", &f) != FT_OK) {
        if (f) abort(); /* a failed parse must not return a file */
        return 0;
    }
    const uint8_t *end = data + size;
    volatile uint8_t sink = 0;
    for (int i = 0; i < ft_st_count(f); i++) {
        const struct ft_st_tensor *t = ft_st_at(f, i);
        const uint8_t *p = t->data;
        if (!t->name || p < data || p > end || t->n_bytes > (size_t)(end - p)) abort();
        if (t->n_bytes) sink ^= p[0] ^ p[t->n_bytes - 1]; /* touch both ends */
        if (ft_st_find(f, t->name) != t) abort();
        if (t->n_dims < 0 || t->n_dims > FT_MAX_DIMS) abort();
        size_t n = ft_dtype_size(t->dtype);
        for (int d = 0; d < t->n_dims; d++) n *= (size_t)t->shape[d];
        if (n != t->n_bytes) abort();
    }
    (void)sink;
    ft_st_close(f);
    return 0;
}
