/* test_sample.c — the sampler against transformers' logits processors (tests/data/sampling,
 * tools/gen_sampling_refs.py), plus seeded determinism, greedy, and the empirical distribution
 * of draws against softmax probabilities. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "engine/forward.h"
#include "engine/sample.h"
#include "test.h"

TEST(matches_transformers_processors) {
    json_error_t err;
    json_t *root = json_load_file(FT_TEST_DATA "/sampling/refs.json", 0, &err);
    EXPECT(root && json_array_size(root) >= 8);
    size_t i;
    json_t *c;
    json_array_foreach(root, i, c) {
        json_t *p = json_object_get(c, "params"), *hist = json_object_get(c, "history");
        json_t *in = json_object_get(c, "logits"), *exp = json_object_get(c, "expected");
        int V = (int)json_array_size(in);
        struct ft_sampling sp = ft_sampling_default();
        sp.temperature = (float)json_real_value(json_object_get(p, "temperature"));
        sp.top_k = (int)json_integer_value(json_object_get(p, "top_k"));
        sp.top_p = (float)json_real_value(json_object_get(p, "top_p"));
        sp.min_p = (float)json_real_value(json_object_get(p, "min_p"));
        sp.repetition_penalty = (float)json_real_value(json_object_get(p, "repetition_penalty"));
        struct ft_sampler *s = NULL;
        EXPECT_OK(ft_sampler_init(&s, &sp, V));
        if (!s) continue;
        for (size_t h = 0; h < json_array_size(hist); h++)
            ft_sampler_add_prompt(s, (int32_t)json_integer_value(json_array_get(hist, h)));
        float *x = malloc((size_t)V * sizeof *x);
        for (int v = 0; v < V; v++) x[v] = (float)json_real_value(json_array_get(in, (size_t)v));
        ft_sampler_process(s, x);
        int bad = 0;
        for (int v = 0; v < V; v++) {
            json_t *e = json_array_get(exp, (size_t)v);
            if (json_is_null(e)) bad += !isinf(x[v]);
            else bad += isinf(x[v]) || fabs(x[v] - json_real_value(e)) > 1e-5;
        }
        CHECK_(bad == 0, "case %zu: %d of %d logits differ from transformers", i, bad, V);
        free(x);
        ft_sampler_free(s);
    }
    json_decref(root);
}

static int draw_sequence(uint64_t seed, int32_t *out, int n) {
    float base[16];
    for (int v = 0; v < 16; v++) base[v] = (float)((v * 7) % 5) * 0.3f;
    struct ft_sampling sp = ft_sampling_default();
    sp.seed = seed;
    sp.top_p = 0.95f;
    sp.presence_penalty = 0.2f;
    struct ft_sampler *s;
    if (ft_sampler_init(&s, &sp, 16) != FT_OK) return -1;
    for (int i = 0; i < n; i++) {
        float x[16];
        memcpy(x, base, sizeof x);
        out[i] = ft_sampler_sample(s, x);
        ft_sampler_accept(s, out[i]);
    }
    ft_sampler_free(s);
    return 0;
}

TEST(same_seed_same_output) {
    int32_t a[64], b[64], c[64];
    EXPECT(draw_sequence(42, a, 64) == 0);
    EXPECT(draw_sequence(42, b, 64) == 0);
    EXPECT(draw_sequence(43, c, 64) == 0);
    EXPECT(memcmp(a, b, sizeof a) == 0);
    EXPECT(memcmp(a, c, sizeof a) != 0);
}

TEST(greedy_is_argmax_after_penalties) {
    struct ft_sampling sp = ft_sampling_default();
    sp.temperature = 0;
    sp.frequency_penalty = 1.5f;
    struct ft_sampler *s;
    EXPECT_OK(ft_sampler_init(&s, &sp, 4));
    float x[4] = {0.1f, 2.0f, 1.0f, -1.0f};
    EXPECT_EQ(ft_sampler_sample(s, x), 1);
    ft_sampler_accept(s, 1); /* 2.0 - 1.5 = 0.5 < 1.0 */
    float y[4] = {0.1f, 2.0f, 1.0f, -1.0f};
    EXPECT_EQ(ft_sampler_sample(s, y), 2);
    ft_sampler_free(s);
}

/* The filters as first written (sort the whole vocabulary, then cut), kept as the reference
 * the candidate search must agree with: same survivors, same values. */
struct rcand {
    float logit;
    int32_t id;
};
static int ref_desc(const void *a, const void *b) {
    const struct rcand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}
static void ref_filters(const struct ft_sampling *p, float *logits, int V) {
    int k_on = p->top_k > 0 && p->top_k < V, p_on = p->top_p < 1.0f, m_on = p->min_p > 0;
    if (!k_on && !p_on && !m_on) return;
    struct rcand *c = malloc((size_t)V * sizeof *c);
    for (int i = 0; i < V; i++) c[i] = (struct rcand){logits[i], i};
    qsort(c, (size_t)V, sizeof *c, ref_desc);
    int keep = V;
    if (k_on) {
        float kth = c[p->top_k - 1].logit;
        keep = p->top_k;
        while (keep < V && c[keep].logit >= kth) keep++;
    }
    if (p_on || m_on) {
        float mx = c[0].logit;
        double z = 0;
        for (int i = 0; i < keep; i++) z += exp((double)c[i].logit - mx);
        if (p_on) {
            double cum = 0;
            int n = keep;
            for (int i = keep - 1; i >= 1; i--) {
                cum += exp((double)c[i].logit - mx) / z;
                if (cum <= 1.0 - p->top_p) n = i;
                else break;
            }
            keep = n;
            z = 0;
            for (int i = 0; i < keep; i++) z += exp((double)c[i].logit - mx);
        }
        if (m_on) {
            double top = 1.0 / z;
            int n = 1;
            while (n < keep && exp((double)c[n].logit - mx) / z >= p->min_p * top) n++;
            keep = n;
        }
    }
    for (int i = keep; i < V; i++) logits[c[i].id] = -INFINITY;
    free(c);
}

/* The candidate search (no sort of the vocabulary) keeps exactly what sorting all of it kept,
 * on a 151,936-token vocab: peaked (normal x 3), flat (uniform) and tied (6 values) logits,
 * under top-k, top-p, min-p and their mixes; on every CPU tier (the weights that find the
 * candidates come from ft_cpu_exp_shift). */
static void filters_match_full_sort_tier(void);
TEST(filters_match_full_sort) {
    enum ft_cpu_isa best = ft_cpu_isa();
    for (int tier = FT_ISA_SCALAR; tier <= (int)best; tier++)
        if ((int)ft_cpu_set_isa((enum ft_cpu_isa)tier) == tier) filters_match_full_sort_tier();
    ft_cpu_set_isa(best);
}

static void filters_match_full_sort_tier(void) {
    const int V = 151936;
    float *x = malloc((size_t)V * 4), *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    struct { int k; float p, m, t; } cf[] = {{20, 1, 0, 0.7f}, {0, 0.8f, 0, 1},  {20, 0.8f, 0, 0.7f},
                                             {0, 1, 0.05f, 1}, {0, 0.95f, 0.1f, 1.3f}, {1, 1, 0, 1},
                                             {40, 0.8f, 0.02f, 0.6f}, {0, 0.5f, 0, 0.5f}, {1000, 0.99f, 0, 1}};
    uint64_t r = 99;
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < V; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(r >> 11) / 9007199254740992.0;
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            double u2 = (double)(r >> 11) / 9007199254740992.0;
            x[i] = kind == 0 ? (float)(3.0 * sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307 * u2))
                 : kind == 1 ? (float)(u * 4.0) : (float)(int)(u * 6.0);
        }
        for (size_t c = 0; c < sizeof cf / sizeof cf[0]; c++) {
            struct ft_sampling sp = ft_sampling_default();
            sp.top_k = cf[c].k, sp.top_p = cf[c].p, sp.min_p = cf[c].m, sp.temperature = cf[c].t;
            struct ft_sampler *s;
            EXPECT_OK(ft_sampler_init(&s, &sp, V));
            memcpy(a, x, (size_t)V * 4);
            ft_sampler_process(s, a);
            memcpy(b, x, (size_t)V * 4);
            if (sp.temperature != 1.0f)
                for (int i = 0; i < V; i++) b[i] /= sp.temperature;
            ref_filters(&sp, b, V);
            int diff = 0, kept = 0;
            for (int i = 0; i < V; i++) diff += memcmp(&a[i], &b[i], 4) != 0, kept += !isinf(b[i]);
            CHECK_(diff == 0, "logits kind %d, filters %zu: %d of %d differ (%d kept)", kind, c, diff,
                   V, kept);
            ft_sampler_free(s);
        }
    }
    free(x), free(a), free(b);
}

/* ft_argmax against its definition (the first position of the largest value, NaN never the
 * largest) on lengths around its 8-lane blocks, with ties, -inf and NaN; plain greedy is what
 * lets the engine find the id on the device. */
TEST(argmax_first_of_largest) {
    uint64_t r = 7;
    for (int n = 1; n <= 41; n++)
        for (int rep = 0; rep < 20; rep++) {
            float x[41];
            for (int i = 0; i < n; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                int v = (int)(r >> 59); /* 0..31: many ties */
                x[i] = v == 0 ? NAN : v == 1 ? -INFINITY : (float)(v % 6);
            }
            int want = -1;
            for (int i = 0; i < n; i++)
                if (!isnan(x[i]) && (want < 0 || x[i] > x[want])) want = i;
            EXPECT_EQ(ft_argmax(x, n), want < 0 ? 0 : want);
        }
    struct ft_sampling sp = ft_sampling_default();
    struct ft_sampler *s;
    sp.temperature = 0;
    EXPECT_OK(ft_sampler_init(&s, &sp, 4));
    EXPECT(ft_sampler_plain_greedy(s));
    ft_sampler_free(s);
    sp.repetition_penalty = 1.1f;
    EXPECT_OK(ft_sampler_init(&s, &sp, 4));
    EXPECT(!ft_sampler_plain_greedy(s));
    ft_sampler_free(s);
    sp = ft_sampling_default(); /* temperature 1 */
    EXPECT_OK(ft_sampler_init(&s, &sp, 4));
    EXPECT(!ft_sampler_plain_greedy(s));
    ft_sampler_free(s);
}

/* ft_draw_softmax against its definition, computed here in double: the drawn position's
 * running sum passes u times the total and the one before it does not (within float rounding
 * of the total); T <= 0 gives the argmax; and a temperature-only sampler draws what the
 * engine's draw does with the uniform ft_sampler_engine_draw hands it (the same stream). */
TEST(draw_softmax_definition) {
    enum { V = 5000 };
    static float x[V], y[V], scratch[V];
    uint64_t r = 17;
    int bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < V; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 12.0 - 6.0);
        }
        x[rep % V] = -INFINITY;
        const float T = rep % 4 == 0 ? 0.0f : 0.3f + 0.1f * (float)(rep % 13);
        const double u = (double)((rep * 7919) % 1000) / 1000.0;
        memcpy(y, x, sizeof x);
        int32_t got = ft_draw_softmax(y, V, T, u, scratch);
        if (!(T > 0)) {
            bad += got != ft_argmax(x, V);
            continue;
        }
        double mx = -INFINITY, z = 0, before = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, (double)(x[i] / T));
        for (int i = 0; i < V; i++) z += exp((double)(x[i] / T) - mx);
        for (int i = 0; i < got; i++) before += exp((double)(x[i] / T) - mx);
        const double at = before + exp((double)(x[got] / T) - mx), tol = 1e-5 * z;
        bad += !(before <= u * z + tol && at > u * z - tol);
    }
    EXPECT_EQ(bad, 0);
    struct ft_sampling sp = ft_sampling_default();
    sp.temperature = 0.8f, sp.seed = 99;
    struct ft_sampler *a, *b;
    EXPECT_OK(ft_sampler_init(&a, &sp, V));
    EXPECT_OK(ft_sampler_init(&b, &sp, V));
    EXPECT(ft_sampler_engine_drawable(a));
    int same = 0;
    for (int t = 0; t < 50; t++) {
        memcpy(y, x, sizeof x);
        int32_t ia = ft_sampler_sample(a, y);
        struct ft_draw d;
        ft_sampler_engine_draw(b, &d);
        memcpy(y, x, sizeof x);
        same += ia == ft_draw_softmax(y, V, d.temperature, d.u, scratch);
    }
    EXPECT_EQ(same, 50); /* the same uniforms, the same steps */
    ft_sampler_free(a), ft_sampler_free(b);
}

/* A request's tokens are the same whether its sampler draws them (ft_sampler_sample) or the
 * engine does with the parameters and uniforms ft_sampler_engine_draw hands it
 * (ft_sampler_draw_row, what the CPU backend and the GPU's fallback run): top-k, top-p,
 * min-p and their mixes, on peaked and flat logits; the scratch sampler keeps its own
 * parameters; penalties are not the engine's. */
TEST(engine_draw_row_equals_sampler) {
    enum { V = 3000 };
    static float x[V], y[V];
    const struct ft_sampling def = ft_sampling_default();
    struct ft_sampler *scratch;
    EXPECT_OK(ft_sampler_init(&scratch, &def, V));
    const float cfg[6][4] = {/* temperature, top_k, top_p, min_p */
                             {0.7f, 20, 0.8f, 0}, {1.0f, 0, 0.9f, 0}, {1.1f, 0, 0.7f, 0.05f},
                             {0.8f, 50, 1.0f, 0}, {1.0f, 0, 1.0f, 0.1f}, {0.6f, 2900, 0.95f, 0.01f}};
    uint64_t r = 5;
    int bad = 0, n = 0;
    for (int c = 0; c < 6; c++) {
        struct ft_sampling sp = ft_sampling_default();
        sp.temperature = cfg[c][0], sp.top_k = (int)cfg[c][1], sp.top_p = cfg[c][2];
        sp.min_p = cfg[c][3], sp.seed = 40 + c;
        struct ft_sampler *a, *b;
        EXPECT_OK(ft_sampler_init(&a, &sp, V));
        EXPECT_OK(ft_sampler_init(&b, &sp, V));
        EXPECT(ft_sampler_engine_drawable(b));
        for (int t = 0; t < 40; t++, n++) {
            const float spread = t % 2 ? 1.0f : 8.0f; /* flat, peaked */
            for (int i = 0; i < V; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                x[i] = spread * (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
            }
            memcpy(y, x, sizeof x);
            const int32_t ia = ft_sampler_sample(a, y);
            struct ft_draw d;
            ft_sampler_engine_draw(b, &d);
            memcpy(y, x, sizeof x);
            bad += ia != ft_sampler_draw_row(scratch, &d, y);
        }
        ft_sampler_free(a), ft_sampler_free(b);
    }
    EXPECT_EQ(bad, 0);
    EXPECT(n == 240);
    /* the scratch's own parameters are untouched: it still samples with its defaults */
    memcpy(y, x, sizeof x);
    ft_sampler_process(scratch, y);
    EXPECT(memcmp(x, y, sizeof x) == 0);
    struct ft_sampling pen = ft_sampling_default();
    pen.presence_penalty = 0.5f;
    struct ft_sampler *c;
    EXPECT_OK(ft_sampler_init(&c, &pen, V));
    EXPECT(!ft_sampler_engine_drawable(c)); /* a penalty: the host samples */
    ft_sampler_free(c), ft_sampler_free(scratch);
}

/* A fixed allow bitmask as a sampler's mask (what server/constrain.c gives a grammar): apply
 * and bits agree by construction; accept counts the tokens it is told. */
struct fixed_mask {
    const uint32_t *words;
    int accepted, last;
};
static void fm_apply(void *ctx, float *logits, int V) {
    ft_mask_apply_bits(logits, V, ((struct fixed_mask *)ctx)->words);
}
static void fm_bits(void *ctx, uint32_t *words, int V) {
    memcpy(words, ((struct fixed_mask *)ctx)->words, (size_t)ft_mask_words(V) * 4);
}
static void fm_accept(void *ctx, int32_t id) {
    struct fixed_mask *m = ctx;
    m->accepted++, m->last = id;
}
static void fm_free(void *ctx) { (void)ctx; }

/* A masked sampler's host draw (ft_sampler_sample: the mask's apply first) equals the engine's
 * draw with its parameters (ft_sampler_engine_draw: masked) on logits masked by the bits
 * (ft_mask_apply_bits, then ft_sampler_draw_row): greedy, temperature, top-k with fewer
 * allowed tokens than k, top-p, min-p, on a vocab that is not a multiple of 32, with masks
 * keeping half, a handful and a single token. A mask with bits lets the engine draw (not a
 * plain greedy step), one without does not; accept still reaches the mask. */
TEST(masked_draws_equal_host_masking) {
    enum { V = 3001, NW = (V + 31) / 32 };
    static float x[V], y[V];
    static uint32_t words[NW], got[NW];
    const struct ft_sampling def = ft_sampling_default();
    struct ft_sampler *scratch;
    EXPECT_OK(ft_sampler_init(&scratch, &def, V));
    const float cfg[6][4] = {/* temperature, top_k, top_p, min_p */
                             {0, 0, 1, 0}, {0.9f, 0, 1, 0}, {0.7f, 20, 0.8f, 0},
                             {1.0f, 0, 0.9f, 0}, {1.1f, 0, 0.7f, 0.05f}, {1.0f, 50, 1, 0}};
    uint64_t r = 11;
    int bad = 0, n = 0, outside = 0;
    for (int c = 0; c < 6; c++) {
        for (int keep = 0; keep < 3; keep++) { /* half; 7 tokens; 1 token */
            struct ft_sampling sp = ft_sampling_default();
            sp.temperature = cfg[c][0], sp.top_k = (int)cfg[c][1], sp.top_p = cfg[c][2];
            sp.min_p = cfg[c][3], sp.seed = 70 + 3 * c + keep;
            struct fixed_mask ma = {words, 0, -1}, mb = {words, 0, -1};
            struct ft_sampler *a, *b;
            EXPECT_OK(ft_sampler_init(&a, &sp, V));
            EXPECT_OK(ft_sampler_init(&b, &sp, V));
            ft_sampler_set_mask(a, &(struct ft_logit_mask){fm_apply, fm_accept, fm_free, &ma, fm_bits});
            ft_sampler_set_mask(b, &(struct ft_logit_mask){fm_apply, fm_accept, fm_free, &mb, fm_bits});
            EXPECT(ft_sampler_engine_drawable(b) && !ft_sampler_plain_greedy(b));
            for (int t = 0; t < 20; t++, n++) {
                memset(words, 0, sizeof words);
                for (int i = 0; i < V; i++) {
                    r = r * 6364136223846793005ull + 1442695040888963407ull;
                    x[i] = (t % 2 ? 1.0f : 8.0f) * (float)((double)(r >> 11) / 9007199254740992.0 - 0.5);
                    if (keep == 0 && (r >> 7) % 2) words[i >> 5] |= 1u << (i & 31);
                }
                for (int k = 0; keep && k < (keep == 1 ? 7 : 1); k++) {
                    const int id = (t * 389 + k * 1013 + c * 97 + V - 7) % V; /* the last word too */
                    words[id >> 5] |= 1u << (id & 31);
                }
                memcpy(y, x, sizeof x);
                const int32_t ia = ft_sampler_sample(a, y);
                struct ft_draw d;
                ft_sampler_engine_draw(b, &d);
                EXPECT(d.masked == 1);
                ft_sampler_mask_bits(b, got);
                bad += memcmp(got, words, sizeof words) != 0;
                memcpy(y, x, sizeof x);
                ft_mask_apply_bits(y, V, got);
                const int32_t ib = ft_sampler_draw_row(scratch, &d, y);
                bad += ia != ib;
                outside += !(words[ia >> 5] >> (ia & 31) & 1);
                ft_sampler_accept(a, ia), ft_sampler_accept(b, ib);
            }
            EXPECT(ma.accepted == 20 && mb.accepted == 20 && ma.last == mb.last);
            ft_sampler_free(a), ft_sampler_free(b);
        }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(outside, 0);
    EXPECT(n == 360);
    /* no bits: the logits must come back; no mask: every token */
    struct ft_sampler *c;
    EXPECT_OK(ft_sampler_init(&c, &def, V));
    ft_sampler_mask_bits(c, got);
    EXPECT(got[0] == ~0u && got[NW - 1] == (1u << (V & 31)) - 1);
    struct fixed_mask mc = {words, 0, -1};
    ft_sampler_set_mask(c, &(struct ft_logit_mask){fm_apply, fm_accept, fm_free, &mc, NULL});
    EXPECT(!ft_sampler_engine_drawable(c));
    ft_sampler_free(c), ft_sampler_free(scratch);
}

/* 200k draws at temperature 1 from 5 logits: each frequency within 4 sigma of softmax. */
TEST(draws_follow_softmax) {
    const float logits[5] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f};
    double z = 0, p[5];
    for (int v = 0; v < 5; v++) z += exp(logits[v]);
    for (int v = 0; v < 5; v++) p[v] = exp(logits[v]) / z;
    struct ft_sampling sp = ft_sampling_default();
    sp.seed = 1234;
    struct ft_sampler *s;
    EXPECT_OK(ft_sampler_init(&s, &sp, 5));
    int n = 200000, count[5] = {0};
    for (int i = 0; i < n; i++) {
        float x[5];
        memcpy(x, logits, sizeof x);
        count[ft_sampler_sample(s, x)]++;
    }
    for (int v = 0; v < 5; v++) {
        double sigma = sqrt(n * p[v] * (1 - p[v]));
        CHECK_(fabs(count[v] - n * p[v]) < 4 * sigma, "token %d: %d draws, expected %.0f", v,
               count[v], n * p[v]);
    }
    ft_sampler_free(s);
}

TEST(rejects_bad_parameters) {
    struct ft_sampling sp = ft_sampling_default();
    sp.top_p = 1.5f;
    EXPECT_EQ(ft_sampling_validate(&sp), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "top_p");
    sp = ft_sampling_default();
    sp.temperature = -1;
    EXPECT_EQ(ft_sampling_validate(&sp), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "temperature");
    sp = ft_sampling_default();
    sp.presence_penalty = 3;
    EXPECT_EQ(ft_sampling_validate(&sp), FT_ERR_INVALID_ARG);
    EXPECT_CONTAINS(ft_error(), "presence_penalty");
}

TEST_MAIN("sample")
