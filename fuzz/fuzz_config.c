/* fuzz_config.c — libFuzzer target for ft_config_parse and ft_config_parse_generation: any
 * text is either rejected with a status or yields a config whose invariants hold (positive
 * sizes, heads divisible, mlp_only sized by n_layers). Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/hfconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct ft_config cfg;
    const char *text = (const char *)data;
    if (ft_config_parse(text, size, "fuzz/config.json", &cfg) == FT_OK) {
        if (cfg.hidden_size <= 0 || cfg.n_layers <= 0 || cfg.n_heads <= 0 || cfg.n_kv_heads <= 0 ||
            cfg.head_dim <= 0 || cfg.vocab_size <= 0 || cfg.n_heads % cfg.n_kv_heads != 0 ||
            cfg.n_eos < 0 || cfg.n_eos > FT_MAX_EOS || cfg.decoder_sparse_step < 1 ||
            !(cfg.rope.theta > 0) || !(cfg.rope.partial_rotary_factor > 0) ||
            cfg.rope.partial_rotary_factor > 1 || memchr(cfg.arch, 0, sizeof cfg.arch) == NULL)
            abort();
        volatile int sink = 0;
        if (cfg.mlp_only)
            for (int i = 0; i < cfg.n_layers; i++) sink += cfg.mlp_only[i]; /* sized n_layers */
        (void)sink;
        /* the same text as a generation config on top of a parsed config */
        if (ft_config_parse_generation(text, size, "fuzz/generation_config.json", &cfg) == FT_OK &&
            (cfg.n_eos < 0 || cfg.n_eos > FT_MAX_EOS))
            abort();
        ft_config_free(&cfg);
    } else {
        if (cfg.mlp_only) abort(); /* a failed parse must leave nothing to free */
        memset(&cfg, 0, sizeof cfg);
        cfg.bos_token_id = -1;
        if (ft_config_parse_generation(text, size, "fuzz/generation_config.json", &cfg) == FT_OK &&
            (cfg.n_eos < 0 || cfg.n_eos > FT_MAX_EOS || cfg.gen.top_k < 0))
            abort();
        ft_config_free(&cfg);
    }
    return 0;
}
