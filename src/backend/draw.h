/* draw.h — one row's sampling parameters for a draw on the device (backend/cuda/ops.cu's
 * sample-draw kernel), filled by the engine's sampler (engine/sample.c): plain data; and the
 * callback that gives masked rows their allowed tokens. */
#ifndef FT_BACKEND_DRAW_H
#define FT_BACKEND_DRAW_H

#include <stdint.h>

/* One row's draw by the engine (ft_engine_forward_batch_draw), for a request without penalties. */
struct ft_draw {
    float temperature; /* <= 0: the argmax */
    float u;           /* the uniform in [0, 1) the draw uses */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    int32_t top_k;     /* <= 0: off */
    int32_t masked;    /* 1: only the tokens of this row's allow bitmask (struct ft_draw_masks)
                          may be drawn: the others count as -inf, before the temperature and the
                          filters (the host sampler's order); 0: every token */
};

/* Where a step's masked rows get their allow bitmasks: fill writes row r's (r: the row's index
 * in the step's draws) into words [(vocab + 31) / 32] (bit (id & 31) of words[id >> 5]: token
 * id allowed; bits past vocab 0). The engine calls it on its own thread, once per masked row
 * and step; the GPU backends while the device runs the step's layers. */
struct ft_draw_masks {
    void (*fill)(void *ctx, int row, uint32_t *words);
    void *ctx;
};

#endif
