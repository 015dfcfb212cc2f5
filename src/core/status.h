/* status.h — raising and forwarding errors (docs/ARCHITECTURE.md section 7).
 * ft_fail() records a thread-local message and returns the status, so a raise site reads
 *   return ft_fail(FT_ERR_FORMAT, "%s: tensor %s: shape [%d] != [%d]", path, name, a, b);
 * FT_TRY forwards a failure to the function's `fail:` label with `st` set. */
#ifndef FT_CORE_STATUS_H
#define FT_CORE_STATUS_H

#include <stdio.h>
#include <stdlib.h>

#include "ft.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FT_PRINTF(a, b)
#endif

enum ft_status ft_fail(enum ft_status st, const char *fmt, ...) FT_PRINTF(2, 3);
void ft_error_clear(void);

#ifdef __cplusplus
}
#endif

/* Requires `enum ft_status st` and a `fail:` label in the calling function. */
#define FT_TRY(expr)                   \
    do {                               \
        st = (expr);                   \
        if (st != FT_OK) goto fail;    \
    } while (0)

/* For bugs only: never for bad input. */
#define FT_ASSERT(cond)                                                              \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "ft: assertion failed: %s (%s:%d)\n", #cond, __FILE__,   \
                    __LINE__);                                                       \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#define FT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FT_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
