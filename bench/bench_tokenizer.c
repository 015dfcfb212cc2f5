/* bench_tokenizer.c — encode throughput of the tokenizer on one core, in MB/s.
 *   bench_tokenizer TOKENIZER_DIR [TEXT_FILE] [SECONDS]
 * TEXT_FILE defaults to /usr/share/common-licenses/GPL-3 (English prose, ~35 KB); each pass is one
 * ft_tok_encode call on the whole file (so the per-call word cache starts cold every pass), and
 * the file is also encoded line by line (short prompts: no cache). Single-threaded. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/file.h"
#include "text/tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER_DIR [TEXT_FILE] [SECONDS]\n");
        return 2;
    }
    const char *file = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    double secs = argc > 3 ? atof(argv[3]) : 2.0;
    struct ft_tok *t = NULL;
    char *text = NULL;
    size_t len = 0;
    double t0 = now_s();
    if (ft_tok_load(argv[1], &t) != FT_OK || ft_file_read(file, &text, &len) != FT_OK) {
        fprintf(stderr, "ft: %s\n", ft_error());
        return 2;
    }
    double t_load = now_s() - t0;
    /* whole file per call */
    size_t bytes = 0, toks = 0;
    t0 = now_s();
    double el = 0;
    while (el < secs) {
        int32_t *ids;
        int n;
        if (ft_tok_encode(t, text, len, 0, &ids, &n) != FT_OK) {
            fprintf(stderr, "ft: %s\n", ft_error());
            return 1;
        }
        free(ids);
        bytes += len;
        toks += (size_t)n;
        el = now_s() - t0;
    }
    printf("%s: load %.2f s; %s (%zu bytes) whole-file calls: %.2f MB/s, %.0f tokens/s, %.2f bytes/token\n",
           argv[1], t_load, file, len, bytes / el / 1e6, toks / el, (double)bytes / toks);
    /* line by line */
    bytes = toks = 0;
    t0 = now_s();
    el = 0;
    while (el < secs) {
        for (char *p = text, *e; p < text + len; p = e + 1) {
            e = memchr(p, '\n', (size_t)(text + len - p));
            if (!e) e = text + len;
            int32_t *ids;
            int n;
            if (ft_tok_encode(t, p, (size_t)(e - p + (e < text + len)), 0, &ids, &n) != FT_OK) {
                fprintf(stderr, "ft: %s\n", ft_error());
                return 1;
            }
            free(ids);
            bytes += (size_t)(e - p + (e < text + len));
            toks += (size_t)n;
        }
        el = now_s() - t0;
    }
    printf("%s: line-by-line calls: %.2f MB/s, %.0f tokens/s\n", argv[1], bytes / el / 1e6, toks / el);
    free(text);
    ft_tok_free(t);
    return 0;
}
