/* bench_sample.c — the host sampler's time per token on a real vocab size, for the settings
 * clients send, on peaked logits (normal x 3, like a model's) and flat ones (uniform over 4:
 * many candidates survive top-p). Each token's time includes copying the logits into place
 * (as a server step copies them out of the engine). The floor printed beside it is one pass
 * over the vocab (ft_max_f32), measured in the same run: every setting reads them once.
 *   bench_sample [VOCAB] [TOKENS]     (defaults 151936, 200; one thread) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/timer.h"
#include "engine/forward.h"
#include "engine/sample.h"

static double now_s(void) { return (double)ft_time_ns() / 1e9; }

int main(int argc, char **argv) {
    int V = argc > 1 ? atoi(argv[1]) : 151936, n = argc > 2 ? atoi(argv[2]) : 200;
    if (V < 64 || n < 1) {
        fprintf(stderr, "usage: bench_sample [VOCAB >= 64] [TOKENS >= 1]\n");
        return 2;
    }
    float *x = malloc((size_t)V * 4), *y = malloc((size_t)V * 4);
    if (!x || !y) return 2;
    static const struct { const char *name; float t, p, m, rep; int k; } cfg[] = {
        {"greedy (host argmax)", 0, 1, 0, 1, 0},
        {"temperature 1", 1, 1, 0, 1, 0},
        {"qwen default: t 0.7, top-k 20, top-p 0.8", 0.7f, 0.8f, 0, 1, 20},
        {"t 1, top-p 0.95", 1, 0.95f, 0, 1, 0},
        {"t 0.6, top-k 40, min-p 0.05, repeat 1.1", 0.6f, 1, 0.05f, 1.1f, 40},
    };
    uint64_t r = 7;
    printf("| logits | sampling | us per token | floor: one pass over %d |\n|---|---|---:|---:|\n", V);
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < V; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            double u = ((double)(r >> 11) + 0.5) / 9007199254740992.0;
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            double u2 = (double)(r >> 11) / 9007199254740992.0;
            x[i] = kind ? (float)(4.0 * u) : (float)(3.0 * sqrt(-2.0 * log(u)) * cos(6.283185307 * u2));
        }
        double t0 = now_s();
        volatile float sink = 0;
        for (int t = 0; t < n; t++) sink += ft_max_f32(x, V);
        double floor_us = (now_s() - t0) / n * 1e6;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            struct ft_sampling sp = ft_sampling_default();
            sp.temperature = cfg[c].t, sp.top_p = cfg[c].p, sp.min_p = cfg[c].m, sp.top_k = cfg[c].k;
            sp.repetition_penalty = cfg[c].rep, sp.seed = 1;
            struct ft_sampler *s;
            if (ft_sampler_init(&s, &sp, V) != FT_OK) {
                fprintf(stderr, "bench_sample: %s\n", ft_error());
                return 1;
            }
            for (int i = 0; i < 64; i++) ft_sampler_add_prompt(s, (int32_t)(i * 997 % V));
            t0 = now_s();
            for (int t = 0; t < n; t++) {
                memcpy(y, x, (size_t)V * 4);
                ft_sampler_accept(s, ft_sampler_sample(s, y));
            }
            double us = (now_s() - t0) / n * 1e6;
            printf("| %s | %s | %.1f | %.1f |\n", kind ? "flat" : "peaked", cfg[c].name, us, floor_us);
            ft_sampler_free(s);
        }
    }
    free(x), free(y);
    return 0;
}
