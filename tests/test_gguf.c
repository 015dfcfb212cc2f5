/* test_gguf.c — the GGUF reader and the GGML block codecs against the `gguf` Python package
 * (tests/data/gguf/, written by tools/gen_gguf_refs.py): every metadata value type, every
 * tensor's dims and bit-exact dequantisation (F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K/
 * MXFP4),
 * the dot kernels against dequantise-then-dot, v2 files, custom alignment, and malformed
 * input (truncation at many offsets and hand-built corruptions), each error naming the file.
 * Single-threaded. */
#include <stdint.h>
#include <string.h>

#include "backend/cpu/ggml_dot.h"
#include "backend/cpu/ops.h"
#include "core/file.h"
#include "core/status.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "test.h"
#include "gguf_build.h"

#define BLOCKS FT_TEST_DATA "/gguf/blocks.gguf"
#define REF FT_TEST_DATA "/gguf/blocks_ref.safetensors"

static const struct ft_gguf_value *get(const struct ft_gguf_file *f, const char *k) {
    const struct ft_gguf_value *v = ft_gguf_get(f, k);
    CHECK_(v != NULL, "key %s present", k);
    return v;
}

TEST(metadata_every_type) {
    struct ft_gguf_file *f = NULL;
    EXPECT_OK(ft_gguf_open(BLOCKS, &f));
    if (!f) return;
    EXPECT_EQ(ft_gguf_version(f), 3);
    EXPECT_EQ(ft_gguf_alignment(f), 32);
    EXPECT_EQ(ft_gguf_data_offset(f) % 32, 0);
    EXPECT_EQ(ft_gguf_kv_count(f), 2 + 14 + 11 + 3); /* architecture, name + ours */
    const char *s = NULL;
    EXPECT_OK(ft_gguf_get_str(f, "general.architecture", &s));
    EXPECT_STREQ(s, "fttest");
    EXPECT_OK(ft_gguf_get_str(f, "general.name", &s));
    EXPECT_STREQ(s, "ft gguf test");
    uint64_t u = 0;
    int64_t i = 0;
    double d = 0;
    int b = -1;
    EXPECT_OK(ft_gguf_get_u64(f, "t.u8", &u));
    EXPECT_EQ(u, 200);
    EXPECT_EQ(get(f, "t.u8")->type, FT_GGUF_UINT8);
    EXPECT_OK(ft_gguf_get_i64(f, "t.i8", &i));
    EXPECT_EQ(i, -100);
    EXPECT_OK(ft_gguf_get_u64(f, "t.u16", &u));
    EXPECT_EQ(u, 60000);
    EXPECT_OK(ft_gguf_get_i64(f, "t.i16", &i));
    EXPECT_EQ(i, -30000);
    EXPECT_OK(ft_gguf_get_u64(f, "t.u32", &u));
    EXPECT_EQ(u, 4000000000u);
    EXPECT_OK(ft_gguf_get_i64(f, "t.i32", &i));
    EXPECT_EQ(i, -2000000000);
    EXPECT_OK(ft_gguf_get_u64(f, "t.u64", &u));
    EXPECT(u == 18000000000000000000ull);
    EXPECT_OK(ft_gguf_get_i64(f, "t.i64", &i));
    EXPECT(i == -9000000000000000000ll);
    EXPECT_OK(ft_gguf_get_f64(f, "t.f32", &d));
    EXPECT(d == 0.15625);
    EXPECT_OK(ft_gguf_get_f64(f, "t.f64", &d));
    EXPECT(d == -1.0e-300);
    EXPECT_OK(ft_gguf_get_bool(f, "t.bool_t", &b));
    EXPECT_EQ(b, 1);
    EXPECT_OK(ft_gguf_get_bool(f, "t.bool_f", &b));
    EXPECT_EQ(b, 0);
    EXPECT_OK(ft_gguf_get_str(f, "t.str", &s));
    EXPECT_STREQ(s, "h\xc3\xa9llo \xe2\x9c\x93 w\xc3\xb6rld");
    const struct ft_gguf_value *v = get(f, "t.str_nul");
    if (v) {
        EXPECT_EQ(v->v.str.len, 3);
        EXPECT(memcmp(v->v.str.s, "a\0b", 4) == 0);
    }
    /* wrong kind and missing key: errors name the file and the key */
    EXPECT_EQ(ft_gguf_get_str(f, "t.u8", &s), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "blocks.gguf");
    EXPECT_CONTAINS(ft_error(), "t.u8");
    EXPECT_EQ(ft_gguf_get_u64(f, "t.i8", &u), FT_ERR_FORMAT);
    EXPECT_EQ(ft_gguf_get_u64(f, "no.such.key", &u), FT_ERR_FORMAT);
    EXPECT_CONTAINS(ft_error(), "no.such.key");
    EXPECT(ft_gguf_get(f, "no.such.key") == NULL);

    struct { const char *k; enum ft_gguf_type t; int n; double v0, vlast; } arrs[] = {
        {"t.arr_u8", FT_GGUF_UINT8, 3, 0, 255},      {"t.arr_i8", FT_GGUF_INT8, 3, -128, 127},
        {"t.arr_u16", FT_GGUF_UINT16, 2, 0, 65535},  {"t.arr_i16", FT_GGUF_INT16, 2, -32768, 32767},
        {"t.arr_u32", FT_GGUF_UINT32, 2, 0, 4294967295.0},
        {"t.arr_i32", FT_GGUF_INT32, 2, -2147483648.0, 2147483647.0},
        {"t.arr_u64", FT_GGUF_UINT64, 2, 0, 18446744073709551615.0},
        {"t.arr_i64", FT_GGUF_INT64, 2, -9223372036854775808.0, 1},
        {"t.arr_f32", FT_GGUF_FLOAT32, 3, 1.5, 0.0},  {"t.arr_f64", FT_GGUF_FLOAT64, 2, 3.5, -1e100},
        {"t.arr_bool", FT_GGUF_BOOL, 3, 1, 1},
    };
    for (size_t k = 0; k < sizeof(arrs) / sizeof(arrs[0]); k++) {
        v = get(f, arrs[k].k);
        if (!v) continue;
        CHECK_(v->type == FT_GGUF_ARRAY && v->v.arr.elem_type == arrs[k].t &&
                   v->v.arr.n == (uint64_t)arrs[k].n,
               "%s: array of %d %s", arrs[k].k, arrs[k].n, ft_gguf_type_name(arrs[k].t));
        if (v->v.arr.n != (uint64_t)arrs[k].n) continue;
        EXPECT(ft_gguf_arr_f64(v, 0) == arrs[k].v0);
        EXPECT(ft_gguf_arr_f64(v, (uint64_t)arrs[k].n - 1) == arrs[k].vlast);
    }
    v = get(f, "t.arr_u64");
    if (v) EXPECT(ft_gguf_arr_u64(v, 1) == UINT64_MAX);
    v = get(f, "t.arr_i64");
    if (v) EXPECT(ft_gguf_arr_i64(v, 0) == INT64_MIN);
    v = get(f, "t.arr_f32");
    if (v) EXPECT(ft_gguf_arr_f64(v, 1) == -2.25);
    v = get(f, "t.arr_bool");
    if (v) EXPECT(ft_gguf_arr_u64(v, 1) == 0);

    v = get(f, "t.tokens");
    if (v && v->v.arr.n == 5000 && v->v.arr.elem_type == FT_GGUF_STRING) {
        int bad = 0;
        char buf[32];
        for (int k = 0; k < 5000; k++) {
            if (k % 7) snprintf(buf, sizeof buf, "tok%d", k);
            else snprintf(buf, sizeof buf, "\xc4\xa0\xc5\x81%d", k);
            bad += strcmp(v->v.arr.items[k].v.str.s, buf) != 0 ||
                   v->v.arr.items[k].v.str.len != strlen(buf);
        }
        EXPECT_EQ(bad, 0);
    } else {
        CHECK_(0, "t.tokens is a 5000-string array");
    }
    v = get(f, "t.arr_arr_str");
    if (v && v->v.arr.elem_type == FT_GGUF_ARRAY && v->v.arr.n == 2) {
        const struct ft_gguf_value *a0 = &v->v.arr.items[0], *a1 = &v->v.arr.items[1];
        EXPECT(a0->type == FT_GGUF_ARRAY && a0->v.arr.elem_type == FT_GGUF_STRING);
        EXPECT_EQ(a0->v.arr.n, 2);
        EXPECT_EQ(a1->v.arr.n, 3);
        if (a0->v.arr.n == 2 && a1->v.arr.n == 3) {
            EXPECT_STREQ(a0->v.arr.items[1].v.str.s, "bc");
            EXPECT_STREQ(a1->v.arr.items[0].v.str.s, "");
            EXPECT_STREQ(a1->v.arr.items[1].v.str.s, "d\xc3\xa9" "f");
        }
    } else {
        CHECK_(0, "t.arr_arr_str is an array of 2 arrays");
    }
    v = get(f, "t.arr_arr_i32");
    if (v && v->v.arr.n == 2 && v->v.arr.items[1].v.arr.n == 1) {
        EXPECT_EQ(v->v.arr.items[0].v.arr.elem_type, FT_GGUF_INT32);
        EXPECT_EQ(ft_gguf_arr_i64(&v->v.arr.items[0], 2), 3);
        EXPECT_EQ(ft_gguf_arr_i64(&v->v.arr.items[1], 0), -4);
    } else {
        CHECK_(0, "t.arr_arr_i32 is [[1,2,3],[-4]]");
    }
    ft_gguf_close(f);
    ft_gguf_close(NULL); /* accepts NULL */
}

static int is_edge(const char *name) { return strncmp(name, "edge.", 5) == 0; }

/* Every tensor: dims as the reference's numpy shape reversed, dequantisation bit-identical to
 * gguf.quants.dequantize (a NaN must be a NaN; its payload is the hardware's), in the ISA tier
 * set now. */
static void check_dequant(void) {
    struct ft_gguf_file *f = NULL;
    struct ft_st_file *ref = NULL;
    EXPECT_OK(ft_gguf_open(BLOCKS, &f));
    EXPECT_OK(ft_st_open(REF, &ref));
    if (!f || !ref) goto out;
    EXPECT_EQ(ft_gguf_tensor_count(f), 12 * 4 + 11);
    EXPECT_EQ(ft_st_count(ref), ft_gguf_tensor_count(f));
    int seen[FT_GGML_TYPE_COUNT] = {0};
    long long n_vals = 0;
    for (int64_t i = 0; i < ft_gguf_tensor_count(f); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor_at(f, i);
        EXPECT(ft_gguf_find(f, t->name) == t);
        const struct ft_st_tensor *r = ft_st_find(ref, t->name);
        CHECK_(r && r->dtype == FT_DTYPE_F32, "%s in the reference", t->name);
        if (!r) continue;
        EXPECT_EQ(t->n_dims, r->n_dims);
        int64_t n = 1;
        for (int d = 0; d < r->n_dims; d++) {
            CHECK_(t->ne[d] == r->shape[r->n_dims - 1 - d], "%s ne[%d]", t->name, d);
            n *= r->shape[d];
        }
        EXPECT_EQ(t->n_elems, n);
        EXPECT_EQ(t->n_bytes, ft_ggml_row_bytes(t->type, n));
        EXPECT_EQ((uintptr_t)t->data % 32, 0); /* mmap is page-aligned */
        float *out = malloc((size_t)n * sizeof(float));
        const float *want = r->data;
        EXPECT_OK(ft_gguf_tensor_at(f, i) ? ft_ggml_dequant_row(t->type, t->data, out, n) : 1);
        int64_t bad = 0, first = -1;
        for (int64_t k = 0; k < n; k++) {
            float w;
            memcpy(&w, want + k, 4);
            int ok = isnan(w) ? isnan(out[k]) : memcmp(&w, &out[k], 4) == 0;
            if (!ok && first < 0) first = k;
            bad += !ok;
        }
        if (bad)
            fprintf(stderr, "  %s (%s): %lld mismatches, first at %lld: %.9g vs %.9g\n", t->name,
                    ft_ggml_type_name(t->type), (long long)bad, (long long)first,
                    (double)out[first], (double)want[first]);
        EXPECT_EQ(bad, 0);
        seen[t->type]++;
        n_vals += n;
        free(out);
    }
    const int types[] = {FT_GGML_F32,  FT_GGML_F16,  FT_GGML_BF16, FT_GGML_Q8_0,
                         FT_GGML_Q4_0, FT_GGML_Q4_1, FT_GGML_Q5_0, FT_GGML_Q5_1,
                         FT_GGML_Q4_K, FT_GGML_Q5_K, FT_GGML_Q6_K, FT_GGML_MXFP4};
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
        CHECK_(seen[types[k]] >= 4, "%s tensors compared", ft_ggml_type_name(types[k]));
    fprintf(stderr, "  %s: %lld values bit-exact\n", ft_cpu_isa_name(ft_cpu_isa()), n_vals);
out:
    ft_st_close(ref);
    ft_gguf_close(f);
}

/* Runs check() in every ISA tier this CPU has (avx512-bf16 runs the avx512 kernels). */
static void every_tier(void (*check)(void)) {
    const enum ft_cpu_isa best = ft_cpu_isa();
    for (int t = FT_ISA_SCALAR; t <= FT_ISA_AVX512; t++)
        if ((int)ft_cpu_set_isa((enum ft_cpu_isa)t) == t) check();
    ft_cpu_set_isa(best);
}

TEST(dequant_bit_exact) {
    every_tier(check_dequant);
}

/* ft_ggml_dot_row against dequantise-then-dot (double sum of exact products), relative to
 * sum |a_i x_i| (the scale a rounding error can reach), per row (test_ggml_dot derives the
 * bound; here the rows are at most 256 long). */
static void check_dot(void) {
    struct ft_gguf_file *f = NULL;
    EXPECT_OK(ft_gguf_open(BLOCKS, &f));
    if (!f) return;
    double worst = 0;
    int rows = 0;
    uint32_t seed = 12345;
    for (int64_t i = 0; i < ft_gguf_tensor_count(f); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor_at(f, i);
        if (is_edge(t->name)) continue;
        const int64_t n = t->ne[0], nr = t->n_elems / n;
        const size_t rb = ft_ggml_row_bytes(t->type, n);
        float *a = malloc((size_t)n * 4), *x = malloc((size_t)n * 4);
        for (int64_t k = 0; k < n; k++) {
            seed = seed * 1664525u + 1013904223u;
            x[k] = (float)((int32_t)seed) / 2147483648.0f;
        }
        for (int64_t r = 0; r < nr; r++) {
            const uint8_t *src = (const uint8_t *)t->data + r * rb;
            EXPECT_OK(ft_ggml_dequant_row(t->type, src, a, n));
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < n; k++) {
                ref += (double)a[k] * x[k];
                mag += fabs((double)a[k] * x[k]);
            }
            const double got = ft_ggml_dot_row(t->type, src, x, n);
            const double rel = mag > 0 ? fabs(got - ref) / mag : fabs(got - ref);
            CHECK_(rel <= 1e-5, "%s row %lld: dot %.9g vs %.9g (rel %.3g)", t->name, (long long)r,
                   got, ref, rel);
            if (rel > worst) worst = rel;
            rows++;
        }
        free(a);
        free(x);
    }
    EXPECT(rows >= 36);
    fprintf(stderr, "  %s: %d rows, worst relative error %.3g\n", ft_cpu_isa_name(ft_cpu_isa()),
            rows, worst);
    ft_gguf_close(f);
}

TEST(dot_matches_dequant) {
    every_tier(check_dot);
}

TEST(block_geometry) {
    EXPECT_EQ(ft_ggml_type_size(FT_GGML_Q8_0), 34);
    EXPECT_EQ(ft_ggml_type_size(FT_GGML_Q4_0), 18);
    EXPECT_EQ(ft_ggml_type_size(FT_GGML_Q4_K), 144);
    EXPECT_EQ(ft_ggml_type_size(FT_GGML_Q5_K), 176);
    EXPECT_EQ(ft_ggml_type_size(FT_GGML_Q6_K), 210);
    EXPECT_EQ(ft_ggml_type_size(FT_GGML_MXFP4), 17);
    EXPECT_EQ(ft_ggml_type_size(FT_GGML_BF16), 2);
    EXPECT_EQ(ft_ggml_block_size(FT_GGML_Q6_K), 256);
    EXPECT_EQ(ft_ggml_block_size(FT_GGML_MXFP4), 32);
    EXPECT_EQ(ft_ggml_block_size(4), 0); /* removed Q4_2 */
    EXPECT_EQ(ft_ggml_block_size(-1), 0);
    EXPECT_EQ(ft_ggml_block_size(FT_GGML_TYPE_COUNT), 0);
    EXPECT_EQ(ft_ggml_row_bytes(FT_GGML_Q4_K, 4096), 16 * 144);
    EXPECT_EQ(ft_ggml_row_bytes(FT_GGML_Q4_K, 100), 0);
    EXPECT_STREQ(ft_ggml_type_name(FT_GGML_Q5_K), "Q5_K");
    float y[256];
    uint8_t z[256] = {0};
    EXPECT_EQ(ft_ggml_dequant_row(FT_GGML_Q2_K, z, y, 256), FT_ERR_UNSUPPORTED);
    EXPECT_CONTAINS(ft_error(), "Q2_K");
    EXPECT_EQ(ft_ggml_dequant_row(FT_GGML_Q4_K, z, y, 100), FT_ERR_INVALID_ARG);
    EXPECT(!ft_ggml_can_compute(FT_GGML_IQ2_XXS));
}

/* Reads a whole file into a malloc'd buffer. */
static uint8_t *slurp(const char *path, size_t *n) {
    char *b = NULL;
    if (ft_file_read(path, &b, n) != FT_OK) return NULL;
    return (uint8_t *)b;
}

TEST(version2_and_alignment) {
    size_t n = 0;
    uint8_t *buf = slurp(BLOCKS, &n);
    EXPECT(buf != NULL);
    if (!buf) return;
    buf[4] = 2; /* v2 and v3 share the layout (v3 added big-endian files) */
    struct ft_gguf_file *f = NULL;
    EXPECT_OK(ft_gguf_parse(buf, n, "v2.gguf", &f));
    if (f) {
        EXPECT_EQ(ft_gguf_version(f), 2);
        EXPECT_EQ(ft_gguf_tensor_count(f), 12 * 4 + 11);
        ft_gguf_close(f);
    }
    free(buf);

    EXPECT_OK(ft_gguf_open(FT_TEST_DATA "/gguf/align64.gguf", &f));
    if (!f) return;
    EXPECT_EQ(ft_gguf_alignment(f), 64);
    EXPECT_EQ(ft_gguf_data_offset(f) % 64, 0);
    const struct ft_gguf_tensor *a = ft_gguf_find(f, "a"), *b = ft_gguf_find(f, "b");
    EXPECT(a && b);
    if (a && b) {
        EXPECT_EQ(b->offset % 64, 0);
        EXPECT_EQ(b->offset, 64);
        EXPECT_EQ(a->type, FT_GGML_F32);
        EXPECT_EQ(b->type, FT_GGML_I32);
        EXPECT_EQ(b->ne[0], 3);
        EXPECT_EQ(b->ne[1], 2);
        float v[5];
        memcpy(v, a->data, sizeof v);
        EXPECT(v[4] == 4.0f);
        int32_t w[6];
        memcpy(w, b->data, sizeof w);
        EXPECT_EQ(w[5], 5);
    }
    EXPECT(ft_gguf_find(f, "c") == NULL);
    ft_gguf_close(f);
}

/* Cut the real file at many offsets: every cut before the end of the last tensor's data must
 * fail with one FT_ERR_FORMAT line naming the file; cuts into the final padding still parse. */
TEST(truncated_everywhere) {
    size_t n = 0;
    uint8_t *buf = slurp(BLOCKS, &n);
    EXPECT(buf != NULL);
    if (!buf) return;
    struct ft_gguf_file *f = NULL;
    EXPECT_OK(ft_gguf_parse(buf, n, "cut.gguf", &f));
    if (!f) {
        free(buf);
        return;
    }
    size_t end = 0;
    for (int64_t i = 0; i < ft_gguf_tensor_count(f); i++) {
        const struct ft_gguf_tensor *t = ft_gguf_tensor_at(f, i);
        end = FT_MAX(end, (size_t)(ft_gguf_data_offset(f) + t->offset + t->n_bytes));
    }
    ft_gguf_close(f);
    int cuts = 0, wrong = 0;
    for (size_t cut = 0; cut < n; cut += cut < 4096 ? 1 : 61) {
        /* a fresh copy of exactly `cut` bytes, so ASan sees any read past it */
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, buf, cut);
        f = NULL;
        enum ft_status st = ft_gguf_parse(c, cut, "cut.gguf", &f);
        int ok = cut >= end ? st == FT_OK
                            : st == FT_ERR_FORMAT && !f && strstr(ft_error(), "cut.gguf") &&
                                  !strchr(ft_error(), '\n');
        if (!ok && wrong++ < 3)
            fprintf(stderr, "  cut at %zu: status %d: %s\n", cut, st, ft_error());
        ft_gguf_close(f);
        free(c);
        cuts++;
    }
    EXPECT_EQ(wrong, 0);
    EXPECT(cuts > 5000);
    free(buf);
}

/* ------------------------------------------------------------------ hand-built files */

/* tensor info: 1-D F32 of ne elements at offset */
static void tinfo(struct bld *w, const char *name, uint32_t type, uint64_t ne, uint64_t off) {
    str(w, name);
    u32(w, 1);
    u64(w, ne);
    u32(w, type);
    u64(w, off);
}
/* Parses w and expects `st` with a one-line message naming bad.gguf and containing `sub`. */
static void expect_bad(const struct bld *w, enum ft_status want, const char *sub) {
    struct ft_gguf_file *f = NULL;
    uint8_t *c = malloc(w->n ? w->n : 1);
    memcpy(c, w->b, w->n);
    enum ft_status st = ft_gguf_parse(c, w->n, "bad.gguf", &f);
    CHECK_(st == want && !f, "status %d, expected %d (%s)", st, want, ft_error());
    EXPECT_CONTAINS(ft_error(), "bad.gguf");
    EXPECT_CONTAINS(ft_error(), sub);
    EXPECT(!strchr(ft_error(), '\n'));
    ft_gguf_close(f);
    free(c);
}

TEST(hand_built_good) {
    struct bld w;
    header(&w, 2, 3);
    str(&w, "empty.arr");
    u32(&w, FT_GGUF_ARRAY);
    u32(&w, FT_GGUF_STRING);
    u64(&w, 0);
    str(&w, "general.alignment");
    u32(&w, FT_GGUF_UINT32);
    u32(&w, 16);
    str(&w, "k");
    u32(&w, FT_GGUF_UINT8);
    w.b[w.n++] = 7;
    tinfo(&w, "x", FT_GGML_F32, 4, 48); /* stored out of order: allowed */
    tinfo(&w, "y", FT_GGML_Q8_0, 32, 0);
    pad(&w, 16, 48 + 16);
    struct ft_gguf_file *f = NULL;
    EXPECT_OK(ft_gguf_parse(w.b, w.n, "good.gguf", &f));
    if (!f) return;
    EXPECT_EQ(ft_gguf_alignment(f), 16);
    const struct ft_gguf_value *v = ft_gguf_get(f, "empty.arr");
    EXPECT(v && v->v.arr.n == 0);
    EXPECT_EQ(ft_gguf_kv_at(f, 2)->val.v.u, 7);
    EXPECT_STREQ(ft_gguf_tensor_at(f, 0)->name, "x");
    EXPECT_EQ(ft_gguf_find(f, "y")->n_bytes, 34);
    ft_gguf_close(f);
}

TEST(hand_built_bad) {
    struct bld w;
    w.n = 0;
    put(&w, "GGUX", 4);
    u32(&w, 3);
    u64(&w, 0);
    u64(&w, 0);
    expect_bad(&w, FT_ERR_FORMAT, "not a GGUF file");

    header(&w, 0, 0);
    w.b[4] = 1;
    expect_bad(&w, FT_ERR_UNSUPPORTED, "version 1");
    header(&w, 0, 0);
    memcpy(w.b + 4, "\0\0\0\3", 4);
    expect_bad(&w, FT_ERR_UNSUPPORTED, "big-endian");
    header(&w, 0, 0);
    w.b[4] = 4;
    expect_bad(&w, FT_ERR_FORMAT, "version 4");

    header(&w, 0, 1); /* a string value whose length runs past EOF */
    str(&w, "general.name");
    u32(&w, FT_GGUF_STRING);
    u64(&w, 1000);
    put(&w, "abc", 3);
    expect_bad(&w, FT_ERR_FORMAT, "general.name");

    header(&w, 0, 1); /* a key whose length runs past EOF */
    u64(&w, UINT64_MAX);
    put(&w, "abcdefgh", 8);
    expect_bad(&w, FT_ERR_FORMAT, "string length");

    header(&w, 0, 1); /* huge array counts: each element type */
    str(&w, "tokenizer.ggml.tokens");
    u32(&w, FT_GGUF_ARRAY);
    u32(&w, FT_GGUF_STRING);
    u64(&w, 1ull << 62);
    put(&w, "\0\0\0\0\0\0\0\0", 8);
    expect_bad(&w, FT_ERR_FORMAT, "tokenizer.ggml.tokens");
    w.b[w.n - 16 - 4] = FT_GGUF_UINT64; /* elem type */
    expect_bad(&w, FT_ERR_FORMAT, "array count");
    w.b[w.n - 16 - 4] = FT_GGUF_ARRAY;
    expect_bad(&w, FT_ERR_FORMAT, "array count");

    header(&w, UINT64_MAX / 2, 0);
    expect_bad(&w, FT_ERR_FORMAT, "header counts");

    header(&w, 0, 1);
    str(&w, "k.bad");
    u32(&w, 13);
    expect_bad(&w, FT_ERR_FORMAT, "k.bad");

    header(&w, 0, 1); /* nesting beyond the stack guard */
    str(&w, "deep");
    u32(&w, FT_GGUF_ARRAY);
    for (int i = 0; i < 20; i++) {
        u32(&w, FT_GGUF_ARRAY);
        u64(&w, 1);
    }
    u32(&w, FT_GGUF_UINT8);
    u64(&w, 0);
    expect_bad(&w, FT_ERR_FORMAT, "nested");

    header(&w, 0, 2);
    str(&w, "dup");
    u32(&w, FT_GGUF_UINT8);
    w.b[w.n++] = 1;
    str(&w, "dup");
    u32(&w, FT_GGUF_UINT8);
    w.b[w.n++] = 1;
    expect_bad(&w, FT_ERR_FORMAT, "'dup' appears twice");

    header(&w, 0, 1);
    str(&w, "general.alignment");
    u32(&w, FT_GGUF_UINT32);
    u32(&w, 24);
    expect_bad(&w, FT_ERR_FORMAT, "general.alignment");

    header(&w, 1, 0);
    tinfo(&w, "w.unknown", 4, 32, 0);
    pad(&w, 32, 64);
    expect_bad(&w, FT_ERR_FORMAT, "w.unknown");

    header(&w, 1, 0);
    tinfo(&w, "w.past", FT_GGML_F32, 64, 0);
    pad(&w, 32, 255);
    expect_bad(&w, FT_ERR_FORMAT, "w.past");

    header(&w, 1, 0);
    tinfo(&w, "w.misaligned", FT_GGML_F32, 4, 8);
    pad(&w, 32, 64);
    expect_bad(&w, FT_ERR_FORMAT, "w.misaligned");

    header(&w, 1, 0);
    tinfo(&w, "w.rowlen", FT_GGML_Q4_K, 128, 0);
    pad(&w, 32, 256);
    expect_bad(&w, FT_ERR_FORMAT, "w.rowlen");

    header(&w, 1, 0);
    str(&w, "w.huge");
    u32(&w, 2);
    u64(&w, 1ull << 40);
    u64(&w, 1ull << 40);
    u32(&w, FT_GGML_F32);
    u64(&w, 0);
    pad(&w, 32, 0);
    expect_bad(&w, FT_ERR_FORMAT, "w.huge");

    header(&w, 1, 0);
    tinfo(&w, "w.zero_dims", FT_GGML_F32, 4, 0);
    w.b[w.n - 8 - 4 - 8 - 4] = 0; /* n_dims */
    expect_bad(&w, FT_ERR_FORMAT, "w.zero_dims");

    header(&w, 2, 0);
    tinfo(&w, "w.a", FT_GGML_F32, 16, 0);
    tinfo(&w, "w.b", FT_GGML_F32, 16, 32);
    pad(&w, 32, 128);
    expect_bad(&w, FT_ERR_FORMAT, "overlap");

    header(&w, 2, 0);
    tinfo(&w, "w.same", FT_GGML_F32, 8, 0);
    tinfo(&w, "w.same", FT_GGML_F32, 8, 32);
    pad(&w, 32, 64);
    expect_bad(&w, FT_ERR_FORMAT, "w.same");

    header(&w, 1, 0); /* fuzz find: an empty tensor, the file ending before the data section */
    tinfo(&w, "w.empty", FT_GGML_F32, 0, 0);
    expect_bad(&w, FT_ERR_FORMAT, "data section");

    struct ft_gguf_file *f = (struct ft_gguf_file *)&w;
    EXPECT_EQ(ft_gguf_parse(NULL, 0, "null.gguf", &f), FT_ERR_FORMAT);
    EXPECT(f == NULL);
    EXPECT_EQ(ft_gguf_open(FT_TEST_DATA "/gguf/no_such.gguf", &f), FT_ERR_IO);
    EXPECT_CONTAINS(ft_error(), "no_such.gguf");
}

TEST_MAIN("gguf")
