/* engine_draws.h — the check that an engine's own draws (ft_engine_forward_batch_draw: on the
 * GPU backends, on the device) equal ft_sampler_draw_row on the logits the same step returns:
 * four sequences (greedy; temperature 0.9; t 0.7 with top-k 20 and top-p 0.8, Qwen's default;
 * t 1.1 with top-p 0.7 and min-p 0.05), over `steps` decode steps (at most 16), each step run
 * twice at the same positions (logits, then draws). Returns the steps at which all four agree.
 * Header-only: test_model_sched (CPU) and test_gpu_model (CUDA) share it. */
#ifndef FT_TEST_ENGINE_DRAWS_H
#define FT_TEST_ENGINE_DRAWS_H

#include <math.h>
#include <stdlib.h>

#include "engine/forward.h"
#include "engine/sample.h"
#include "test.h"

enum { ENGINE_DRAW_SEQS = 4 };

static int engine_draws_agree(struct ft_engine *e, int V, int steps) {
    int32_t blocks[ENGINE_DRAW_SEQS][1], toks[ENGINE_DRAW_SEQS] = {5, 9, 13, 17};
    for (int q = 0; q < ENGINE_DRAW_SEQS; q++) EXPECT_OK(ft_engine_kv_alloc(e, 1, blocks[q]));
    const struct ft_sampling def = ft_sampling_default();
    struct ft_sampler *scratch = NULL;
    EXPECT_OK(ft_sampler_init(&scratch, &def, V));
    float *lg = malloc((size_t)ENGINE_DRAW_SEQS * V * 4);
    int same = 0;
    for (int t = 0; lg && scratch && t < steps && t < 16; t++) {
        struct ft_seg segs[ENGINE_DRAW_SEQS];
        for (int q = 0; q < ENGINE_DRAW_SEQS; q++)
            segs[q] = (struct ft_seg){&toks[q], 1, t, blocks[q], FT_LOGITS_LAST};
        const float u = (float)fmod(0.13 + 0.37 * t, 1.0);
        const struct ft_draw draws[ENGINE_DRAW_SEQS] = {
            {0.0f, 0.0f, 1.0f, 0.0f, 0},
            {0.9f, u, 1.0f, 0.0f, 0},
            {0.7f, 1.0f - u, 0.8f, 0.0f, 20},
            {1.1f, u, 0.7f, 0.05f, 0},
        };
        int32_t ids[ENGINE_DRAW_SEQS], want[ENGINE_DRAW_SEQS];
        EXPECT_OK(ft_engine_forward_batch_ex(e, segs, ENGINE_DRAW_SEQS, lg, NULL));
        for (int r = 0; r < ENGINE_DRAW_SEQS; r++)
            want[r] = ft_sampler_draw_row(scratch, &draws[r], lg + (size_t)r * V);
        EXPECT_OK(ft_engine_forward_batch_draw(e, segs, ENGINE_DRAW_SEQS, draws, ids)); /* again */
        int all = 1;
        for (int r = 0; r < ENGINE_DRAW_SEQS; r++) {
            all &= ids[r] == want[r];
            toks[r] = want[r];
        }
        same += all;
    }
    for (int q = 0; q < ENGINE_DRAW_SEQS; q++) ft_engine_kv_free(e, blocks[q], 1);
    free(lg);
    ft_sampler_free(scratch);
    return same;
}

#endif
