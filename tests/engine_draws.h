/* engine_draws.h — the check that an engine's own draws (ft_engine_forward_batch_draw: on the
 * GPU backends, on the device) equal ft_draw_softmax on the logits the same step returns: two
 * sequences, one greedy (T 0) and one at T 0.9, over `steps` decode steps, each step run twice
 * at the same positions (logits, then draws). Returns the steps at which both ids agree.
 * Header-only: test_model_sched (CPU) and test_gpu_model (CUDA) share it. */
#ifndef FT_TEST_ENGINE_DRAWS_H
#define FT_TEST_ENGINE_DRAWS_H

#include <stdlib.h>

#include "engine/forward.h"
#include "engine/sample.h"
#include "test.h"

static int engine_draws_agree(struct ft_engine *e, int V, int steps) {
    int32_t blocks[2][4], toks[2] = {5, 9};
    for (int q = 0; q < 2; q++) EXPECT_OK(ft_engine_kv_alloc(e, 4, blocks[q]));
    float *lg = malloc((size_t)2 * V * 4), *scratch = malloc((size_t)V * 4);
    int same = 0;
    for (int t = 0; lg && scratch && t < steps; t++) {
        struct ft_seg segs[2] = {{&toks[0], 1, t, blocks[0], FT_LOGITS_LAST},
                                 {&toks[1], 1, t, blocks[1], FT_LOGITS_LAST}};
        const float draws[4] = {0.0f, 0.0f, 0.9f, (float)(0.13 + 0.11 * t)};
        int32_t ids[2], want[2];
        EXPECT_OK(ft_engine_forward_batch_ex(e, segs, 2, lg, NULL));
        for (int r = 0; r < 2; r++)
            want[r] = ft_draw_softmax(lg + (size_t)r * V, V, draws[2 * r], draws[2 * r + 1], scratch);
        EXPECT_OK(ft_engine_forward_batch_draw(e, segs, 2, draws, ids)); /* the same step again */
        same += ids[0] == want[0] && ids[1] == want[1];
        toks[0] = want[0], toks[1] = want[1];
    }
    free(lg), free(scratch);
    return same;
}

#endif
