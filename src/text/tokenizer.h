/* tokenizer.h — text <-> token ids from a Hugging Face tokenizer.json (+ tokenizer_config.json),
 * a tiktoken.model (Kimi-K2) or a GGUF file's tokenizer metadata.
 * Byte-level BPE (GPT-2 byte mapping: Qwen, Llama-3, DeepSeek, ...) and SentencePiece-style BPE
 * (Llama-2: "▁" metaspace, <0xNN> byte fallback), with the normalizers, pre-tokenizers, added
 * tokens, post-processor (BOS/EOS) and decoders those files declare.
 * Used by the engine, the server and `ft tokenize`.
 * Threading: a loaded struct ft_tok is immutable; encode/decode may run on any number of threads at
 * once. A struct ft_detok belongs to one thread (one stream) at a time. */
#ifndef FT_TEXT_TOKENIZER_H
#define FT_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "ft.h"

struct ft_tok;

/* Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json; or, without a
 * tokenizer.json, dir/tiktoken.model + tokenizer_config.json as Kimi-K2 ships them
 * (tokenization_kimi.py's TikTokenTokenizer: its pre-split regex, rank-ordered byte merges,
 * added_tokens_decoder as special tokens); or, when dir names a GGUF model
 * (ft_gguf_model_path), that file's tokenizer metadata. Errors name the file (and line), the
 * field and what to do. */
enum ft_status ft_tok_load(const char *dir, struct ft_tok **out);
/* Same, from an explicit tokenizer.json path and an optional (NULL) tokenizer_config.json path. */
enum ft_status ft_tok_load_files(const char *json_path, const char *config_path,
                                 struct ft_tok **out);
/* From a GGUF file's tokenizer.ggml.* metadata (as llama.cpp's convert_hf_to_gguf.py writes
 * it): "gpt2" byte-level BPE or "llama" SentencePiece BPE, special ids, add_bos/add_eos, and
 * tokenizer.chat_template. The tokenizer copies what it needs: f may be closed afterwards.
 * Errors are one line naming the file (ft_gguf_label) and the key. */
struct ft_gguf_file;
enum ft_status ft_tok_load_gguf(const struct ft_gguf_file *f, struct ft_tok **out);
void ft_tok_free(struct ft_tok *t); /* accepts NULL */

/* Encodes len bytes of UTF-8 text into a malloc'd id array (*ids is NULL when *n_ids is 0; free()
 * it). add_special adds BOS/EOS as the post_processor (TemplateProcessing) or, failing that,
 * tokenizer_config.json's add_bos_token/add_eos_token say (GGUF: tokenizer.ggml.add_bos_token /
 * add_eos_token, else llama.cpp's defaults). Invalid UTF-8 -> FT_ERR_INVALID_ARG
 * "prompt: invalid UTF-8 at byte N". */
enum ft_status ft_tok_encode(const struct ft_tok *t, const char *text, size_t len, int add_special,
                             int32_t **ids, int *n_ids);

/* 1 + the largest id (model vocab + added tokens; GGUF: the length of tokenizer.ggml.tokens, which
 * includes the unused "[PAD<id>]" entries up to the model's vocab_size) */
int ft_tok_n_vocab(const struct ft_tok *t);
/* The NUL-terminated vocabulary string of id as stored in tokenizer.json (e.g. "Ġworld", "▁Hello", "<|im_end|>");
 * NULL for an id out of range or unassigned. */
const char *ft_tok_piece(const struct ft_tok *t, int32_t id, size_t *len);
/* The id of a vocabulary or added-token string (NUL-terminated), -1 if none. */
int32_t ft_tok_find(const struct ft_tok *t, const char *piece);
int32_t ft_tok_bos(const struct ft_tok *t); /* -1 when the tokenizer has none */
int32_t ft_tok_eos(const struct ft_tok *t); /* -1 when the tokenizer has none */
int ft_tok_is_special(const struct ft_tok *t, int32_t id); /* an added token marked special */
int ft_tok_add_bos(const struct ft_tok *t); /* 1 when add_special puts BOS first */
/* tokenizer_config.json's chat_template string (the "default" one when it is a list), or a GGUF
 * file's tokenizer.chat_template, or NULL. */
const char *ft_tok_chat_template(const struct ft_tok *t);
/* Largest number of bytes one token decodes to (sizes ft_detok_push buffers). */
size_t ft_tok_max_token_bytes(const struct ft_tok *t);

/* Incremental, UTF-8-safe decoding of a stream of ids: push returns only complete UTF-8
 * characters and holds back an incomplete multi-byte sequence until a later token completes it;
 * invalid bytes come out as U+FFFD. */
struct ft_detok {
    const struct ft_tok *t;
    int skip_special;   /* drop special tokens' text */
    int strip_left;     /* leading chars the decoder still strips (Strip/Metaspace) */
    int n_pend;         /* bytes held in pend */
    unsigned char pend[4];
};
void ft_detok_init(struct ft_detok *d, const struct ft_tok *t, int skip_special);
/* Writes the text completed by id into out and returns its length. Needs
 * cap >= ft_tok_max_token_bytes(t) + 8 (FT_DETOK_CAP is enough for every tokenizer that loads);
 * with less, the text is cut at a character boundary. */
size_t ft_detok_push(struct ft_detok *d, int32_t id, char *out, size_t cap);
/* Emits what is still held (an incomplete sequence becomes U+FFFD); cap >= 8. */
size_t ft_detok_flush(struct ft_detok *d, char *out, size_t cap);
#define FT_DETOK_CAP 1040 /* ft_tok_load refuses tokens that decode to more than 1024 bytes */

/* Decodes a whole sequence into a malloc'd NUL-terminated string (*len excludes the NUL). */
enum ft_status ft_tok_decode(const struct ft_tok *t, const int32_t *ids, int n_ids,
                             int skip_special, char **text, size_t *len);

#endif
