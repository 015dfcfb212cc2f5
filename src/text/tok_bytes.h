/* tok_bytes.h — the raw bytes one token decodes to (no UTF-8 repair, no special-token
 * skipping), for grammar-constrained decoding (text/json_grammar.h), which matches tokens byte by
 * byte. Thread-safe: reads the immutable tokenizer. */
#ifndef FT_TEXT_TOK_BYTES_H
#define FT_TEXT_TOK_BYTES_H

#include <stddef.h>
#include <stdint.h>

struct ft_tok;

/* The bytes of id (not NUL-terminated) and their count; NULL for an id out of range or unassigned.
 * *special: an added token marked special. */
const char *ft_tok_bytes(const struct ft_tok *t, int32_t id, size_t *len, int *special);

#endif
