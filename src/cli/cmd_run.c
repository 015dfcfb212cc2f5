/* cmd_run.c — `ft run`: greedy generation from a token prompt; prints the generated ids and
 * the prefill and decode throughput. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/session.h"
#include "core/status.h"
#include "core/timer.h"

static const char k_usage[] =
    "usage: ft run --model DIR --ids 1,2,3 [-n N] [options]\n"
    "  Greedy generation of N tokens (default 16) after the prompt ids; prints the ids,\n"
    "  then prefill and decode tok/s on stderr.\n"
    "options:\n"
    "  -n, --n-predict N   tokens to generate (default 16)\n"
    "  -t, --threads N     CPU threads (default: physical cores)\n"
    "  -c, --ctx-size N    KV cache positions (default: prompt + N)\n";

int ft_cmd_run(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *v;
    long threads = 0, n_gen = 16, ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (!(model = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ids")) {
            if (!(ids_s = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!(v = ft_cli_value(argc, argv, &i))) return 2;
            if (ft_cli_int(v, 0, 1 << 20, &n_gen))
                return ft_cli_usage_error("run", "%s: '%s' is not a token count", a, v);
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!(v = ft_cli_value(argc, argv, &i))) return 2;
            if (ft_cli_int(v, 1, 4096, &threads))
                return ft_cli_usage_error("run", "--threads: '%s' is not a count", v);
        } else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) {
            if (!(v = ft_cli_value(argc, argv, &i))) return 2;
            if (ft_cli_int(v, 1, 1 << 24, &ctx))
                return ft_cli_usage_error("run", "--ctx-size: '%s' is not a count", v);
        } else {
            return ft_cli_usage_error("run", "unknown option '%s'", a);
        }
    }
    if (!model || !ids_s) return ft_cli_usage_error("run", "--model and --ids are required");
    int32_t *ids = NULL;
    int n = 0;
    enum ft_status st = ft_cli_ids(ids_s, &ids, &n);
    if (st != FT_OK) return ft_cli_fail(st);
    if (ctx == 0) ctx = n + n_gen;
    if (n + n_gen > ctx) {
        free(ids);
        return ft_cli_usage_error("run", "prompt (%d) + -n (%ld) exceeds --ctx-size %ld", n,
                                  n_gen, ctx);
    }
    struct ft_engine_opts eo = {.max_ctx = (int)ctx};
    struct ft_session s;
    st = ft_session_open(&s, model, NULL, (int)threads, &eo);
    float *logits = NULL;
    int64_t t0 = 0, t1 = 0, t2 = 0;
    if (st == FT_OK) {
        logits = malloc((size_t)s.model->vocab * sizeof *logits);
        if (!logits) st = ft_fail(FT_ERR_OOM, "out of memory");
    }
    if (st == FT_OK) {
        t0 = ft_time_us();
        st = ft_engine_prefill(s.engine, ids, n, logits, 0);
        t1 = t2 = ft_time_us();
    }
    for (long g = 0; st == FT_OK && g < n_gen; g++) {
        int32_t next = ft_argmax(logits, s.model->vocab);
        printf("%s%d", g ? "," : "", next);
        fflush(stdout);
        if (g + 1 < n_gen) st = ft_engine_forward(s.engine, &next, 1, logits, 0);
        t2 = ft_time_us();
    }
    if (n_gen && st == FT_OK) printf("\n");
    int rc = 0;
    if (st != FT_OK) {
        rc = ft_cli_fail(st);
    } else {
        double pp = (t1 - t0) / 1e6, tg = (t2 - t1) / 1e6;
        fprintf(stderr, "ft: prefill %d tokens in %.3f s (%.1f tok/s); decode %ld tokens in "
                "%.3f s (%.2f tok/s)\n", n, pp, n / (pp > 0 ? pp : 1e-9), n_gen > 1 ? n_gen - 1 : 0,
                tg, n_gen > 1 ? (n_gen - 1) / (tg > 0 ? tg : 1e-9) : 0.0);
    }
    free(logits);
    free(ids);
    if (s.model) ft_session_close(&s);
    return rc;
}
