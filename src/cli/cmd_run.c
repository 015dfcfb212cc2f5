/* cmd_run.c — `ft run`: generation from a text prompt (streamed to stdout, optionally wrapped
 * in the model's chat template) or from token ids (ids printed), then prefill and decode
 * throughput on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/session.h"
#include "core/status.h"
#include "core/timer.h"
#include "engine/generate.h"
#include "text/chat.h"
#include "text/tokenizer.h"

static const char k_usage[] =
    "usage: ft run --model DIR (-p TEXT [--chat] | --ids 1,2,3) [options]\n"
    "  -p, --prompt TEXT   text prompt; the completion streams to stdout\n"
    "  --chat              wrap the prompt as a user message in the model's chat template\n"
    "  --system TEXT       system message (with --chat)\n"
    "  --chat-template NAME  override the detected template family\n"
    "  --no-think          disable thinking (Qwen3 enable_thinking=false)\n"
    "  --ids 1,2,3         token ids instead of text; generated ids are printed\n"
    "  -n, --n-predict N   tokens to generate at most (default 128)\n"
    "  -t, --threads N     CPU threads (default: physical cores)\n"
    "  -c, --ctx-size N    KV cache positions (default: prompt + n, at most the model's)\n";

struct run_opts {
    const char *model, *prompt, *ids, *system, *tmpl;
    int chat, no_think;
    long threads, n_gen, ctx;
    struct ft_gen_params gen;
};


static int write_out(void *ctx, const char *text, size_t len) {
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* Tokens of the prompt: raw text, or rendered with the chat template (its family in *family). */
static enum ft_status prompt_ids(const struct run_opts *o, const struct ft_tok *tok,
                                 int32_t **ids, int *n, const char **family) {
    *family = NULL;
    if (!o->chat) return ft_tok_encode(tok, o->prompt, strlen(o->prompt), 1, ids, n);
    struct ft_chat_template *t = NULL;
    enum ft_status st = ft_chat_template_detect(ft_tok_chat_template(tok), o->tmpl, &t);
    if (st != FT_OK) return st;
    *family = ft_chat_template_name(t); /* a static string */
    struct ft_chat_msg msgs[2];
    int k = 0;
    if (o->system) msgs[k++] = (struct ft_chat_msg){.role = FT_ROLE_SYSTEM, .content = o->system};
    msgs[k++] = (struct ft_chat_msg){.role = FT_ROLE_USER, .content = o->prompt};
    struct ft_chat_opts co = {.add_generation_prompt = 1, .enable_thinking = o->no_think ? 0 : -1};
    char *text = NULL;
    st = ft_chat_render(t, msgs, k, &co, &text);
    if (st == FT_OK) st = ft_tok_encode(tok, text, strlen(text), 0, ids, n);
    free(text);
    ft_chat_template_free(t);
    return st;
}

static int run_text(struct run_opts *o, struct ft_session *s) {
    struct ft_tok *tok = NULL;
    int32_t *ids = NULL, *ctx_ids = NULL, eos[FT_MAX_EOS + 1];
    int n = 0;
    const char *family = NULL;
    enum ft_status st = ft_tok_load(o->model, &tok);
    if (st == FT_OK) st = prompt_ids(o, tok, &ids, &n, &family);
    if (st == FT_OK && !(ctx_ids = malloc((size_t)ft_engine_max_ctx(s->engine) * sizeof *ctx_ids)))
        st = ft_fail(FT_ERR_OOM, "out of memory");
    struct ft_gen_result r;
    if (st == FT_OK) {
        const struct ft_config *c = &s->model->cfg;
        o->gen.eos = eos;
        o->gen.n_eos = ft_eos_ids(c, tok, eos);
        o->gen.max_tokens = (int)o->n_gen;
        struct ft_cli_harmony h; /* gpt-oss: analysis to stderr, the answer to stdout */
        ft_cli_harmony_begin(&h, family, &o->gen, write_out, NULL);
        st = ft_generate(s->engine, tok, ids, n, &o->gen, ft_cli_harmony_emit, &h, ctx_ids, &r);
        ft_cli_harmony_end(&h);
    }
    int rc = 0;
    if (st != FT_OK) {
        rc = ft_cli_fail(st);
    } else {
        static const char *const fin[] = {"stop", "length", "cancelled"};
        fprintf(stderr, "\nft: prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens in "
                "%.3f s (%.2f tok/s); finish: %s\n", r.n_prompt, r.prefill_s,
                r.n_prompt / (r.prefill_s > 0 ? r.prefill_s : 1e-9), r.n_gen, r.decode_s,
                r.n_gen > 1 ? (r.n_gen - 1) / (r.decode_s > 0 ? r.decode_s : 1e-9) : 0.0,
                fin[r.finish]);
    }
    free(ctx_ids);
    free(ids);
    ft_tok_free(tok);
    return rc;
}

static int run_ids(struct run_opts *o, struct ft_session *s, const int32_t *ids, int n) {
    const struct ft_model *m = s->model;
    float *logits = malloc((size_t)m->vocab * sizeof *logits);
    struct ft_sampler *smp = NULL;
    enum ft_status st = logits ? FT_OK : ft_fail(FT_ERR_OOM, "out of memory");
    if (st == FT_OK) st = ft_sampler_init(&smp, &o->gen.sampling, m->vocab);
    int64_t t0 = ft_time_us(), t1 = t0, t2 = t0;
    if (st == FT_OK) st = ft_engine_prefill(s->engine, ids, n, logits, 0);
    t1 = t2 = ft_time_us();
    int32_t next = -1; /* the engine's token (greedy, or drawn on the GPU), else sample here */
    for (long g = 0; st == FT_OK && g < o->n_gen; g++) {
        int32_t id = next >= 0 ? next : ft_sampler_sample(smp, logits);
        ft_sampler_accept(smp, id);
        printf("%s%d", g ? "," : "", id);
        fflush(stdout);
        if (g + 1 < o->n_gen) st = ft_gen_step(s->engine, smp, id, logits, &next);
        t2 = ft_time_us();
    }
    int rc = 0;
    if (st != FT_OK) {
        rc = ft_cli_fail(st);
    } else {
        if (o->n_gen) printf("\n");
        double pp = (t1 - t0) / 1e6, tg = (t2 - t1) / 1e6;
        fprintf(stderr, "ft: prefill %d tokens in %.3f s (%.1f tok/s); decode %ld tokens in "
                "%.3f s (%.2f tok/s)\n", n, pp, n / (pp > 0 ? pp : 1e-9),
                o->n_gen > 1 ? o->n_gen - 1 : 0, tg,
                o->n_gen > 1 ? (o->n_gen - 1) / (tg > 0 ? tg : 1e-9) : 0.0);
    }
    ft_sampler_free(smp);
    free(logits);
    return rc;
}

int ft_cmd_run(int argc, char **argv) {
    struct ft_engine_opts be;
    int be_auto;
    ft_cli_backend_init(&be, &be_auto);
    struct ft_cli_sampling sampling = {0};
    struct run_opts o = {.n_gen = 128};
    o.gen.sampling = ft_sampling_default();
    for (int i = 1; i < argc; i++) {
        int r = ft_cli_engine_flag("run", argc, argv, &i, &be, &be_auto, &sampling);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        long *num = NULL, lo = 1, hi = 1 << 24;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("%s%s%s", k_usage, ft_cli_sampling_usage, ft_cli_backend_usage);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (!(o.model = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--prompt") || !strcmp(a, "-p")) {
            if (!(o.prompt = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ids")) {
            if (!(o.ids = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--system")) {
            if (!(o.system = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(o.tmpl = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chat")) {
            o.chat = 1;
        } else if (!strcmp(a, "--no-think")) {
            o.no_think = 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            num = &o.n_gen, lo = 0;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            num = &o.threads, hi = 4096;
        } else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) {
            num = &o.ctx;
        } else {
            return ft_cli_usage_error("run", "unknown option '%s'", a);
        }
        if (num && ft_cli_num("run", argc, argv, &i, lo, hi, num)) return 2;
    }
    if (!o.model) return ft_cli_usage_error("run", "--model is required");
    if (!!o.prompt == !!o.ids) return ft_cli_usage_error("run", "give exactly one of -p TEXT or --ids LIST");
    if (o.chat && !o.prompt) return ft_cli_usage_error("run", "--chat needs -p TEXT");
    int32_t *ids = NULL;
    int n = 0;
    enum ft_status st;
    if (o.ids && (st = ft_cli_ids(o.ids, &ids, &n)) != FT_OK) return ft_cli_fail(st);
    struct ft_engine_opts eo = {.max_ctx = (int)o.ctx};
    if (!o.ctx && o.ids) eo.max_ctx = n + (int)o.n_gen;
    struct ft_session s;
    ft_cli_backend_apply(&eo, &be, be_auto);
    st = ft_session_open(&s, o.model, NULL, (int)o.threads, &eo);
    if (st != FT_OK) {
        free(ids);
        return ft_cli_fail(st);
    }
    ft_cli_sampling_defaults(&s.model->cfg, &o.gen);
    if (o.ids) o.gen.sampling.temperature = 0; /* ids mode: greedy unless --temp says otherwise */
    ft_cli_apply_sampling(&sampling, &o.gen);
    int rc = o.ids ? run_ids(&o, &s, ids, n) : run_text(&o, &s);
    free(ids);
    ft_session_close(&s);
    return rc;
}
