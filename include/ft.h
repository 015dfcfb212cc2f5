/* ft.h — public C API of FreeToken-C: status codes and the error message.
 * Everything that can fail returns enum ft_status; ft_error() gives the one-line
 * message of the last failure on the calling thread (file, tensor or field, and the fix). */
#ifndef FT_H
#define FT_H

#ifdef __cplusplus
extern "C" {
#endif

enum ft_status {
    FT_OK = 0,
    FT_ERR_INVALID_ARG,  /* a bad flag, argument or request field */
    FT_ERR_IO,           /* open/read/mmap of a file failed */
    FT_ERR_FORMAT,       /* a file is malformed: bad JSON, truncated, inconsistent */
    FT_ERR_UNSUPPORTED,  /* well-formed, but something the engine does not read */
    FT_ERR_OOM,          /* an allocation failed */
    FT_ERR_CUDA,         /* a CUDA call failed */
    FT_ERR_BUSY,         /* a queue is full or the engine is not ready: retry later */
    FT_ERR_INTERNAL,     /* a bug */
};

/* The message of the last error raised on this thread ("" if none). */
const char *ft_error(void);
/* A short name for a status ("format error", ...). */
const char *ft_status_str(enum ft_status s);

#ifdef __cplusplus
}
#endif
#endif
