/* tok_bytes.c — token id -> decoded bytes from the table ft_tok_load precomputes (detok.c). */
#include "text/tok_bytes.h"

#include "text/tok_impl.h"

const char *ft_tok_bytes(const struct ft_tok *t, int32_t id, size_t *len, int *special) {
    *len = 0;
    if (special) *special = 0;
    if (id < 0 || id >= t->n_vocab || t->piece_len[id] == UINT32_MAX) return NULL;
    if (special) *special = t->is_special[id] != 0;
    *len = t->dec_len[id];
    return t->dec_arena + t->dec_off[id];
}
