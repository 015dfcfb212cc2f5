/* model_impl.h — the checkpoint loader's helpers (model.c) for arch files that load their own
 * layers (deepseek_v4.c): tensor lookup under every spelling the arch accepts, presence / dtype /
 * shape checks with one-line errors naming the tensor, weights and vectors as model.c reads
 * them, routed experts into banks. Loader thread only. */
#ifndef FT_MODEL_MODEL_IMPL_H
#define FT_MODEL_MODEL_IMPL_H

#include "model/model.h"

const struct ft_st_tensor *ft_model_find(const struct ft_model *m, const char *name);
enum ft_status ft_model_get_tensor(const struct ft_model *m, const char *name, int n_dims, int64_t rows,
                                   int64_t cols, const struct ft_st_tensor **out);
enum ft_status ft_model_load_weight(struct ft_model *m, const char *name, int rows, int cols,
                                    struct ft_weight *w);
enum ft_status ft_model_load_vec(struct ft_model *m, const char *name, int n, float **out);
enum ft_status ft_model_load_experts(struct ft_model *m, int l, struct ft_layer *L);

#endif
