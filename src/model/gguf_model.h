/* gguf_model.h — the GGUF half of the model loader (model.c calls these when --model names a
 * .gguf file): metadata into struct ft_config, tensors under their Hugging Face names, stacked
 * experts into banks. Engine thread, once. */
#ifndef FT_MODEL_GGUF_MODEL_H
#define FT_MODEL_GGUF_MODEL_H

#include "format/gguf.h"
#include "model/model.h"

/* The hyper-parameters of a GGUF model (general.architecture and its keys, the tokenizer's
 * bos/eos/eot ids) and the arch that reads it. Errors name the file and the key. */
enum ft_status ft_gguf_config(const struct ft_gguf_file *f, struct ft_config *c,
                              const struct ft_arch **arch);
/* m->st from m->gguf (after ft_model_shapes): every tensor but the stacked experts, renamed,
 * converted where needed. A tensor the arch has no place for is an error; those of the
 * multi-token-prediction layers (nextn_predict_layers, after the trunk) are skipped. */
enum ft_status ft_gguf_model_tensors(struct ft_model *m);
/* Applies rope_freqs.weight (llama 3 rope scaling as llama.cpp stores it) to m->inv_freq. */
enum ft_status ft_gguf_rope_freqs(struct ft_model *m);
/* Layer l's ffn_{gate,up,down}_exps copied into banks in their block formats (gate and up
 * of different formats: both dequantised to bf16). */
enum ft_status ft_gguf_load_experts(struct ft_model *m, int l, struct ft_layer *L);

#endif
