/* cpu_exec.c — CPU expert executor: groups the step's tokens by expert, then runs two pool
 * passes (gate_up tiles, down tiles) whose tasks are (expert, row range) pairs claimed through
 * an atomic counter so uneven experts balance across workers. Engine thread only. */
#include "moe/cpu_exec.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "core/status.h"
#include "format/quant.h"

/* Rows per task: about TILE_BYTES of weights, so each task streams one contiguous stretch for
 * the hardware prefetcher, halved while a step would have fewer than 8 tasks per worker (the
 * pass ends at a barrier: with 6 tasks per worker, one extra task is a 15% longer pass).
 * FT_EXEC_TILE_KB overrides TILE_BYTES (for measuring; 0 = default). On the H200 host (a
 * gVisor VM) `ft bench bw` runs of 16, 64 and 256 KB differed less than run-to-run noise:
 * some runs show a 0.2 ms stall per step whatever the tile (2026-11-30). */
enum { TILE_BYTES = 32 << 10, TILE_MIN = 8, TILE_MAX = 512 };

static int tile_rows(size_t row_bytes, int rows, int n_active, int workers) {
    static int kb = -1;
    if (kb < 0) {
        const char *v = getenv("FT_EXEC_TILE_KB");
        kb = v ? atoi(v) : 0;
    }
    size_t target = kb > 0 ? (size_t)kb << 10 : TILE_BYTES;
    int t = (int)(target / (row_bytes ? row_bytes : 1));
    t = t < TILE_MIN ? TILE_MIN : t > TILE_MAX ? TILE_MAX : t;
    while (t > TILE_MIN && (long)n_active * ((rows + t - 1) / t) < 8L * workers) t /= 2;
    return t;
}

struct ft_moe_exec {
    int max_rows, n_experts, H, I;
    int *count;      /* [E] tokens per expert this step */
    int *offset;     /* [E+1] first row of each expert in the gathered buffers */
    int *active;     /* [E] ids of active experts, in order */
    int *row_token;  /* [max_rows] source token of each gathered row */
    float *row_w;    /* [max_rows] router weight of each gathered row */
    float *xg;       /* [max_rows, H] gathered inputs */
    float *gu;       /* [max_rows, 2I] gate/up outputs */
    float *act;      /* [max_rows, I] silu(gate) * up */
    float *y;        /* [max_rows, H] expert outputs */
    int fast;        /* round the pass inputs (ft_cpu_xq_quant) where the format has a path */
    void *xq;        /* [max_rows, 2 max(H, I)] those rounded inputs */
};

struct pass {
    struct ft_moe_exec *x;
    const struct ft_bank *bank;
    const float *in;  /* [rows, K] */
    const uint8_t *xq; /* in quantised (xq_bytes per row), or NULL */
    size_t xq_bytes;
    float *out;       /* [rows, N] */
    int K, N, n_active, tiles_per_expert, tile;
    atomic_int next;
};

static void pass_task(void *ctx, int i, int n) {
    struct pass *p = ctx;
    struct ft_moe_exec *x = p->x;
    int total = p->n_active * p->tiles_per_expert;
    for (int t; (t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < total;) {
        int a = t / p->tiles_per_expert, tile = t % p->tiles_per_expert;
        int e = x->active[a], r0 = x->offset[e], nr = x->count[e];
        int n0 = tile * p->tile, n1 = FT_MIN(n0 + p->tile, p->N);
        if (p->xq)
            ft_cpu_matmul_rows_xq(p->out + (size_t)r0 * p->N, p->N, p->xq + r0 * p->xq_bytes,
                                  ft_bank_expert(p->bank, e), p->bank->schema->dtype, nr, n0, n1,
                                  p->K);
        else
            ft_cpu_matmul_rows(p->out + (size_t)r0 * p->N, p->N, p->in + (size_t)r0 * p->K, p->K,
                               ft_bank_expert(p->bank, e), p->bank->schema->dtype, nr, n0, n1,
                               p->K);
    }
}

static void run_pass(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *bank,
                     const float *in, int R, float *out, int n_active) {
    struct pass p = {.x = x, .bank = bank, .in = in, .out = out, .K = bank->cols,
                     .N = bank->rows, .n_active = n_active};
    enum ft_dtype wt = bank->schema->dtype;
    if (x->fast && (p.xq_bytes = ft_cpu_xq_bytes(wt, p.K)) > 0) {
        ft_cpu_xq_quant_pool(pool, wt, in, p.K, p.K, R, x->xq);
        p.xq = x->xq;
    }
    p.tile = tile_rows(ft_dtype_row_bytes(wt, p.K), p.N, n_active, ft_pool_size(pool));
    p.tiles_per_expert = (p.N + p.tile - 1) / p.tile;
    atomic_init(&p.next, 0);
    ft_pool_run(pool, pass_task, &p);
}

enum ft_status ft_moe_exec_init(struct ft_moe_exec **out, int max_tokens, int top_k,
                                int n_experts, int H, int I) {
    struct ft_moe_exec *x = calloc(1, sizeof *x);
    *out = NULL;
    if (!x) return ft_fail(FT_ERR_OOM, "moe executor: out of memory");
    x->max_rows = max_tokens * top_k;
    x->n_experts = n_experts;
    x->H = H;
    x->I = I;
    size_t R = (size_t)x->max_rows;
    x->count = calloc((size_t)n_experts, sizeof *x->count);
    x->offset = calloc((size_t)n_experts + 1, sizeof *x->offset);
    x->active = calloc((size_t)n_experts, sizeof *x->active);
    x->row_token = calloc(R, sizeof *x->row_token);
    x->row_w = calloc(R, sizeof *x->row_w);
    x->xg = malloc(R * H * sizeof(float));
    x->gu = malloc(R * 2 * I * sizeof(float));
    x->act = malloc(R * I * sizeof(float));
    x->y = malloc(R * H * sizeof(float));
    x->xq = malloc(R * 2 * (size_t)FT_MAX(H, I)); /* ft_cpu_xq_bytes <= 2 K */
    if (!x->xq ||!x->count || !x->offset || !x->active || !x->row_token || !x->row_w || !x->xg ||
        !x->gu || !x->act || !x->y) {
        ft_moe_exec_free(x);
        return ft_fail(FT_ERR_OOM, "moe executor: out of memory for %d tokens", max_tokens);
    }
    *out = x;
    return FT_OK;
}

void ft_moe_exec_free(struct ft_moe_exec *x) {
    if (!x) return;
    free(x->count);
    free(x->offset);
    free(x->active);
    free(x->row_token);
    free(x->row_w);
    free(x->xg);
    free(x->gu);
    free(x->act);
    free(x->y);
    free(x->xq);
    free(x);
}

void ft_moe_exec_set_fast_act(struct ft_moe_exec *x, int on) { x->fast = on; }

/* Adds each gathered row's expert bias (n wide) to rows (ld apart); NULL bias: nothing. */
static void add_expert_bias(const struct ft_moe_exec *x, float *rows, int ld, const float *bias,
                            int n, int n_active) {
    if (!bias) return;
    for (int a = 0; a < n_active; a++) {
        int e = x->active[a];
        for (int r = x->offset[e]; r < x->offset[e + 1]; r++)
            for (int i = 0; i < n; i++) rows[(size_t)r * ld + i] += bias[(size_t)e * n + i];
    }
}

int ft_moe_exec_run_pairs(struct ft_moe_exec *x, struct ft_pool *pool,
                          const struct ft_bank *gate_up, const struct ft_bank *down,
                          const struct ft_expert_act *act, const float *in, const int *tok,
                          const int *ids, const float *w, int n_pairs, float *out) {
    int E = x->n_experts, H = x->H, I = x->I, R = n_pairs;
    FT_ASSERT(R <= x->max_rows && gate_up->rows == 2 * I && down->cols == I);
    memset(x->count, 0, (size_t)E * sizeof *x->count);
    for (int i = 0; i < R; i++) x->count[ids[i]]++;
    int n_active = 0;
    x->offset[0] = 0;
    for (int e = 0; e < E; e++) {
        x->offset[e + 1] = x->offset[e] + x->count[e];
        if (x->count[e]) x->active[n_active++] = e;
    }
    /* gather rows expert by expert (count reused as a fill cursor) */
    for (int e = 0; e < E; e++) x->count[e] = 0;
    for (int p = 0; p < R; p++) {
        int e = ids[p], r = x->offset[e] + x->count[e]++;
        x->row_token[r] = tok[p];
        x->row_w[r] = w[p];
        memcpy(x->xg + (size_t)r * H, in + (size_t)tok[p] * H, (size_t)H * sizeof(float));
    }
    run_pass(x, pool, gate_up, x->xg, R, x->gu, n_active);
    add_expert_bias(x, x->gu, 2 * I, act ? act->gu_bias : NULL, 2 * I, n_active);
    if (act && act->limit > 0) ft_cpu_swiglu_clamped(x->act, x->gu, R, I, act->limit, act->alpha);
    else ft_cpu_silu_mul(x->act, x->gu, R, I);
    run_pass(x, pool, down, x->act, R, x->y, n_active);
    add_expert_bias(x, x->y, H, act ? act->down_bias : NULL, H, n_active);
    for (int r = 0; r < R; r++) {
        float *o = out + (size_t)x->row_token[r] * H;
        const float *y = x->y + (size_t)r * H;
        float wr = x->row_w[r];
        for (int h = 0; h < H; h++) o[h] += wr * y[h];
    }
    return n_active;
}

int ft_moe_exec_run(struct ft_moe_exec *x, struct ft_pool *pool, const struct ft_bank *gate_up,
                    const struct ft_bank *down, const struct ft_expert_act *act, const float *in,
                    const int *ids, const float *w, int T, int k, float *out) {
    int tok[T * k > 0 ? T * k : 1];
    for (int p = 0; p < T * k; p++) tok[p] = p / k;
    return ft_moe_exec_run_pairs(x, pool, gate_up, down, act, in, tok, ids, w, T * k, out);
}
