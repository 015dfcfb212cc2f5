/* http_check.h — the checks http.c makes on what a client sends before any handler sees it:
 * the request's Content-Length headers (one value, digits only, not beside Transfer-Encoding),
 * and the escaping of client bytes (method, path) before they reach a log line, so a "%0a" in a
 * URL cannot forge one. Pure functions with no libmicrohttpd types, so fuzz/fuzz_http_check.c
 * can drive them. Threading: none (no state). */
#ifndef FT_SERVER_HTTP_CHECK_H
#define FT_SERVER_HTTP_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* Writes src (n bytes, may hold NULs) into dst as printable ASCII: bytes outside 0x20..0x7e
 * and the backslash become "\xNN"; always NUL-terminates (cap >= 1). A src that does not fit
 * ends in "...". Returns the length written. */
size_t ft_http_log_escape(char *dst, size_t cap, const char *src, size_t n);

enum ft_http_cl { FT_HTTP_CL_NONE, FT_HTTP_CL_OK, FT_HTTP_CL_BAD };

/* The body length a request declares through its n Content-Length header values (vals[i] as
 * received): NONE when n == 0; OK with *len when every value is the same decimal number
 * (surrounding blanks allowed, at most 2^62); BAD with a one-line reason in why (for the 400)
 * when a value is not a plain number, two values differ, or a Transfer-Encoding header is also
 * present (has_te; RFC 9112 section 6.3: a request smuggling sign). */
enum ft_http_cl ft_http_content_length(const char *const *vals, int n, int has_te, uint64_t *len,
                                       char *why, size_t why_cap);

#endif
