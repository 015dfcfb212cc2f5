/* cmd_logits.c — `ft logits`: teacher-forced logits of a token prompt, one row per position,
 * written as a safetensors file with one F32 tensor "logits" [T, vocab]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/session.h"
#include "core/status.h"
#include "format/safetensors.h"

static const char k_usage[] =
    "usage: ft logits --model DIR --ids 1,2,3 --out FILE [--threads N]\n"
    "  Teacher-forced logits for every input position into FILE (safetensors, F32 tensor\n"
    "  'logits' of shape [T, vocab]).\n";

int ft_cmd_logits(int argc, char **argv) {
    struct ft_engine_opts be;
    int be_auto;
    ft_cli_backend_init(&be, &be_auto);
    const char *model = NULL, *ids_s = NULL, *out = NULL;
    long threads = 0;
    for (int i = 1; i < argc; i++) {
        int rb = ft_cli_backend_flag("logits", argc, argv, &i, &be, &be_auto);
        if (rb < 0) return 2;
        if (rb > 0) continue;
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_usage, stdout);
            fputs(ft_cli_backend_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (!(model = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ids")) {
            if (!(ids_s = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--out") || !strcmp(a, "-o")) {
            if (!(out = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!(v = ft_cli_value(argc, argv, &i))) return 2;
            if (ft_cli_int(v, 1, 4096, &threads))
                return ft_cli_usage_error("logits", "--threads: '%s' is not a count", v);
        } else {
            return ft_cli_usage_error("logits", "unknown option '%s'", a);
        }
    }
    if (!model || !ids_s || !out)
        return ft_cli_usage_error("logits", "--model, --ids and --out are required");
    int32_t *ids = NULL;
    int n = 0;
    enum ft_status st = ft_cli_ids(ids_s, &ids, &n);
    if (st != FT_OK) return ft_cli_fail(st);
    struct ft_engine_opts eo = {.max_ctx = n, .max_chunk = n};
    struct ft_session s;
    ft_cli_backend_apply(&eo, &be, be_auto);
    st = ft_session_open(&s, model, NULL, (int)threads, &eo);
    float *logits = NULL;
    if (st == FT_OK) {
        logits = malloc((size_t)n * s.model->vocab * sizeof *logits);
        st = logits ? ft_engine_prefill(s.engine, ids, n, logits, 1)
                    : ft_fail(FT_ERR_OOM, "out of memory for %d x %d logits", n, s.model->vocab);
    }
    if (st == FT_OK) {
        struct ft_st_out t = {.name = "logits", .dtype = FT_DTYPE_F32, .n_dims = 2,
                              .shape = {n, s.model->vocab}, .data = logits};
        st = ft_st_write(out, &t, 1);
    }
    int rc = st == FT_OK ? 0 : ft_cli_fail(st);
    if (st == FT_OK) fprintf(stderr, "ft: wrote logits [%d, %d] to %s\n", n, s.model->vocab, out);
    free(logits);
    free(ids);
    if (s.model) ft_session_close(&s);
    return rc;
}
