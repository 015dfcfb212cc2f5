/* http_check.c — Content-Length validation and log escaping of client bytes (http_check.h).
 * Called by server/http.c on connection threads; no state. */
#include "server/http_check.h"

#include <stdio.h>
#include <string.h>

static int plain_byte(unsigned char b) { return b >= 0x20 && b <= 0x7e && b != '\\'; }

size_t ft_http_log_escape(char *dst, size_t cap, const char *src, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, full = 0;
    if (!cap) return 0;
    for (size_t i = 0; i < n; i++) full += plain_byte((unsigned char)src[i]) ? 1 : 4;
    /* cut: keep room for "..." (when there is room for it at all) */
    size_t limit = full < cap ? full : cap >= 4 ? cap - 4 : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)src[i];
        int plain = plain_byte(b);
        if (o + (plain ? 1 : 4) > limit) break;
        if (plain) {
            dst[o++] = (char)b;
        } else {
            dst[o++] = '\\', dst[o++] = 'x', dst[o++] = hex[b >> 4], dst[o++] = hex[b & 15];
        }
    }
    if (full >= cap && cap >= 4) memcpy(dst + o, "...", 3), o += 3;
    dst[o] = 0;
    return o;
}

/* One value: blanks, digits, blanks; 1 with *v, 0 when not a plain number or over 2^62. */
static int parse_len(const char *s, uint64_t *v) {
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return 0;
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (x > ((((uint64_t)1 << 62) - d) / 10)) return 0; /* before it could wrap */
        x = x * 10 + d;
    }
    while (*s == ' ' || *s == '\t') s++;
    if (*s) return 0;
    *v = x;
    return 1;
}

enum ft_http_cl ft_http_content_length(const char *const *vals, int n, int has_te, uint64_t *len,
                                       char *why, size_t why_cap) {
    char a[40], b[40];
    *len = 0;
    if (why_cap) why[0] = 0;
    if (n <= 0) return FT_HTTP_CL_NONE;
    if (has_te) {
        snprintf(why, why_cap, "the request has both Content-Length and Transfer-Encoding "
                 "headers: send one of them");
        return FT_HTTP_CL_BAD;
    }
    uint64_t first = 0;
    for (int i = 0; i < n; i++) {
        uint64_t v;
        if (!vals[i] || !parse_len(vals[i], &v)) {
            ft_http_log_escape(a, sizeof a, vals[i] ? vals[i] : "", vals[i] ? strlen(vals[i]) : 0);
            snprintf(why, why_cap, "Content-Length '%s' is not a number of bytes", a);
            return FT_HTTP_CL_BAD;
        }
        if (i == 0) {
            first = v;
        } else if (v != first) {
            ft_http_log_escape(a, sizeof a, vals[0], strlen(vals[0]));
            ft_http_log_escape(b, sizeof b, vals[i], strlen(vals[i]));
            snprintf(why, why_cap, "the request has %d Content-Length headers with different "
                     "values ('%s' and '%s'): send one", n, a, b);
            return FT_HTTP_CL_BAD;
        }
    }
    *len = first;
    return FT_HTTP_CL_OK;
}
