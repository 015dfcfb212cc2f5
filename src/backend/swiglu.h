/* swiglu.h — which gated activation an MLP computes between its gate/up and down matmuls, on
 * [gate I | up I] rows: the mode that struct ft_expert_act (mem/bank.h) carries per layer and
 * that the CPU (ft_cpu_swiglu) and CUDA (ft_cuda_swiglu) activations take. Plain data. */
#ifndef FT_BACKEND_SWIGLU_H
#define FT_BACKEND_SWIGLU_H

enum ft_swiglu {
    FT_SWIGLU_PLAIN = 0, /* silu(gate) * up: every arch but the two below (limit, alpha unused) */
    FT_SWIGLU_OAI,       /* gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit),
                            (u + 1) * g * sigmoid(alpha * g) */
    FT_SWIGLU_CLAMP,     /* DeepSeek-V4 (swiglu_limit): the same clamps around a plain SwiGLU,
                            u * g * sigmoid(g) (alpha unused) */
};

#endif
