/* gguf_build.h — hand-built GGUF images for the tests that feed the reader bad or minimal
 * files (test_gguf.c, test_tok_gguf.c): a fixed buffer and little-endian writers. Include after
 * test.h. */
#ifndef FT_TESTS_GGUF_BUILD_H
#define FT_TESTS_GGUF_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct bld {
    uint8_t b[4096];
    size_t n;
};
static void put(struct bld *w, const void *p, size_t k) {
    if (w->n + k > sizeof w->b) abort(); /* a test writing more than the buffer: a bug */
    memcpy(w->b + w->n, p, k);
    w->n += k;
}
static void u32(struct bld *w, uint32_t v) { put(w, &v, 4); } /* little-endian host */
static void u64(struct bld *w, uint64_t v) { put(w, &v, 8); }
static void str(struct bld *w, const char *s) {
    u64(w, strlen(s));
    put(w, s, strlen(s));
}
static void header(struct bld *w, uint64_t n_tensors, uint64_t n_kv) {
    w->n = 0;
    put(w, "GGUF", 4);
    u32(w, 3);
    u64(w, n_tensors);
    u64(w, n_kv);
}
/* zeros up to the alignment, then data_bytes zeros (the data section) */
static void pad(struct bld *w, size_t align, size_t data_bytes) {
    if (w->n + align + data_bytes > sizeof w->b) abort();
    while (w->n % align) w->b[w->n++] = 0;
    memset(w->b + w->n, 0, data_bytes);
    w->n += data_bytes;
}

#endif
