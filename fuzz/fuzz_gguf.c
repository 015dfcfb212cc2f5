/* fuzz_gguf.c — libFuzzer target for ft_gguf_parse: any byte string must either be rejected
 * with a status (and no file) or yield metadata and tensors that lie wholly inside the input,
 * are found by key/name, and whose supported types dequantise and dot without reading past
 * their bytes. A file with tokenizer metadata also goes through ft_tok_load_gguf, and a loaded
 * tokenizer must encode a fixed text to ids inside its vocabulary and decode them. The model
 * metadata reader (ft_gguf_config) must accept with sane sizes or refuse.
 * ASan/UBSan turn any out-of-bounds read or overflow into a crash. Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ggml_dot.h"
#include "format/gguf.h"
#include "model/gguf_model.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile double g_sink;

/* Touches every element of a value (nested arrays included). */
static void walk(const struct ft_gguf_value *v) {
    if (v->type == FT_GGUF_STRING) {
        if (strlen(v->v.str.s) > v->v.str.len) abort();
        return;
    }
    if (v->type != FT_GGUF_ARRAY) return;
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        if (v->v.arr.items) walk(&v->v.arr.items[i]);
        else g_sink += ft_gguf_arr_f64(v, i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct ft_gguf_file *f = NULL;
    if (ft_gguf_parse(data, size, "fuzz", &f) != FT_OK) {
        if (f) abort(); /* a failed parse must not return a file */
        return 0;
    }
    const uint8_t *end = data + size;
    for (int64_t i = 0; i < ft_gguf_kv_count(f); i++) {
        const struct ft_gguf_kv *kv = ft_gguf_kv_at(f, i);
        if (ft_gguf_get(f, kv->key) != &kv->val) abort();
        walk(&kv->val);
    }
    struct ft_tok *tok = NULL;
    if (ft_tok_load_gguf(f, &tok) == FT_OK) {
        static const char text[] = "Hello, world! 123 <|im_end|> \xE4\xB8\xAD \xF0\x9F\xAB\xA0";
        int32_t *ids = NULL;
        int n = 0;
        if (ft_tok_encode(tok, text, sizeof text - 1, 1, &ids, &n) == FT_OK) {
            for (int i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= ft_tok_n_vocab(tok)) abort();
            char *back = NULL;
            if (ft_tok_decode(tok, ids, n, 0, &back, NULL) != FT_OK) abort();
            free(back);
        }
        free(ids);
    } else if (tok) {
        abort(); /* a failed load must not return a tokenizer */
    }
    ft_tok_free(tok);
    struct ft_config cfg;
    const struct ft_arch *arch = NULL;
    if (ft_gguf_config(f, &cfg, &arch) == FT_OK) {
        if (!arch || cfg.n_layers <= 0 || cfg.hidden_size <= 0 || cfg.n_heads <= 0 ||
            cfg.vocab_size <= 0 || cfg.head_dim <= 0)
            abort();
        for (int l = 0; cfg.mlp_only && l < cfg.n_layers; l++) g_sink += cfg.mlp_only[l];
    }
    ft_config_free(&cfg);
    float buf[1024], x[1024];
    for (int i = 0; i < 1024; i++) x[i] = (float)(i % 7) - 3.0f;
    for (int64_t i = 0; i < ft_gguf_tensor_count(f); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor_at(f, i);
        const uint8_t *p = t->data;
        if (!t->name || p < data || p > end || t->n_bytes > (size_t)(end - p)) abort();
        if (ft_gguf_find(f, t->name) != t) abort();
        if (t->n_dims < 1 || t->n_dims > FT_GGUF_MAX_DIMS) abort();
        if (ft_ggml_row_bytes(t->type, t->n_elems) != t->n_bytes) abort();
        /* dequantise and dot the first row when it is small enough for the stack buffers */
        if (ft_ggml_can_compute(t->type) && t->n_elems && t->ne[0] <= 1024) {
            if (ft_ggml_dequant_row(t->type, p, buf, t->ne[0]) != FT_OK) abort();
            g_sink += buf[0] + ft_ggml_dot_row(t->type, p, x, t->ne[0]);
        }
    }
    ft_gguf_close(f);
    return 0;
}
