/* draw.h — one row's sampling parameters for a draw on the device (backend/cuda/ops.cu's
 * sample-draw kernel), filled by the engine's sampler (engine/sample.c). Plain data. */
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
};

#endif
