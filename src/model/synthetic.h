/* synthetic.h — what a synthetic preset's config.json would say, without its weights (ft
 * inspect --synthetic, tests); the models themselves: ft_model_synthetic (model.h). Any thread. */
#ifndef FT_MODEL_SYNTHETIC_H
#define FT_MODEL_SYNTHETIC_H

#include <stdint.h>

#include "format/hfconfig.h"
#include "model/arch.h"

/* The config of preset "NAME[:FORMAT][@N]" (ft_config_init'ed here; free with ft_config_free)
 * and its arch. Errors as ft_model_synthetic's. */
enum ft_status ft_synthetic_config(const char *preset, struct ft_config *c, const struct ft_arch **arch);

/* What a preset's weights would weigh, without making them: parameters and bytes (dense ones
 * bf16), the experts' share, and bank[l] the bytes of layer l's experts ([n_layers], malloc'ed:
 * the caller frees it; 0 for a dense layer). */
struct ft_synthetic_sizes {
    uint64_t params, bytes, expert_params, expert_bytes;
    uint64_t *bank;
};
enum ft_status ft_synthetic_sizes(const char *preset, struct ft_synthetic_sizes *z);

#endif
