/* fuzz_http_check.c — libFuzzer target for server/http_check: the input's first byte picks the
 * Transfer-Encoding flag and an output size; the rest, split at newlines, is both the bytes to
 * escape for the log and the Content-Length values. Checks: the escaped text is printable ASCII
 * without a newline, fits, and decodes back to the input when not cut; an OK length is the
 * value of every header; a BAD one comes with a printable reason. Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int printable(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e) return 0;
    return 1;
}

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static void check_escape(const char *s, size_t n, size_t cap) {
    char *out = malloc(cap);
    size_t len = ft_http_log_escape(out, cap, s, n);
    if (len >= cap || out[len] || strlen(out) != len || !printable(out)) abort();
    /* a cut output ends in "..." (below 4 bytes there is no room for it: not checked) */
    int cut = cap < 4 || (len >= 3 && !memcmp(out + len - 3, "...", 3));
    if (!cut) { /* decodes back to the input */
        size_t j = 0;
        for (size_t i = 0; i < len; j++) {
            char c = out[i];
            if (c == '\\') {
                if (i + 3 >= len) abort();
                if (out[i + 1] != 'x') abort();
                c = (char)(hexval(out[i + 2]) * 16 + hexval(out[i + 3]));
                i += 4;
            } else {
                i++;
            }
            if (j >= n || s[j] != c) abort();
        }
        if (j != n) abort();
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int has_te = data[0] & 1;
    size_t cap = 1 + (data[0] >> 1); /* 1..128 */
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    check_escape(s, n, cap);
    check_escape(s, n, 4 * n + 1); /* always fits */

    char *copy = malloc(n + 1);
    memcpy(copy, s, n);
    copy[n] = 0;
    const char *vals[8];
    int k = 0;
    for (char *p = copy; k < 8;) {
        vals[k++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    uint64_t len = 1;
    char why[200];
    enum ft_http_cl r = ft_http_content_length(vals, k, has_te, &len, why, sizeof why);
    if (r == FT_HTTP_CL_OK) {
        if (has_te) abort();
        for (int i = 0; i < k; i++) {
            const char *v = vals[i];
            while (*v == ' ' || *v == '\t') v++;
            if (strtoull(v, NULL, 10) != len) abort();
        }
    } else if (r == FT_HTTP_CL_BAD) {
        if (!why[0] || !printable(why)) abort();
    } else {
        abort(); /* k >= 1 */
    }
    free(copy);
    return 0;
}
