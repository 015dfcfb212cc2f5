/* cmd_chat.c — `ft chat`: an interactive terminal chat with history. /reset clears the history,
 * /exit (or Ctrl-D) leaves, Ctrl-C stops the current answer and returns to the prompt. The KV
 * cache keeps the conversation so far; each turn prefills only what changed. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/session.h"
#include "core/env.h"
#include "core/status.h"
#include "engine/generate.h"
#include "text/chat.h"
#include "text/tokenizer.h"

static const char k_usage[] =
    "usage: ft chat --model DIR [options]\n"
    "  Interactive chat. Commands: /reset (clear history), /exit (or Ctrl-D); Ctrl-C stops\n"
    "  the current answer.\n"
    "  --system TEXT       system message\n"
    "  --chat-template NAME  override the detected template family\n"
    "  --no-think          disable thinking (Qwen3 enable_thinking=false)\n"
    "  -n, --n-predict N   tokens per answer at most (default 1024)\n"
    "  -t, --threads N     CPU threads (default: physical cores)\n"
    "  -c, --ctx-size N    KV cache positions (default: min(model's, 4096))\n";

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

struct turn {
    char *text; /* the answer so far */
    size_t len, cap;
    int slow_ms; /* FT_TESTING: delay per emitted piece, so a test can interrupt */
};

static int emit(void *ctx, const char *s, size_t n) {
    struct turn *t = ctx;
    if (g_interrupted) return 1;
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->text, cap);
        if (!p) return 1;
        t->text = p;
        t->cap = cap;
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = 0;
    if (t->slow_ms) usleep((useconds_t)t->slow_ms * 1000);
    return g_interrupted != 0;
}

struct history {
    struct ft_chat_msg *msgs;
    int n, cap;
};

static int push_msg(struct history *h, enum ft_chat_role role, const char *text) {
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 16;
        struct ft_chat_msg *m = realloc(h->msgs, (size_t)cap * sizeof *m);
        if (!m) return -1;
        h->msgs = m;
        h->cap = cap;
    }
    char *copy = strdup(text);
    if (!copy) return -1;
    h->msgs[h->n++] = (struct ft_chat_msg){.role = role, .content = copy};
    return 0;
}

static void clear_history(struct history *h, int keep) {
    while (h->n > keep) free((char *)h->msgs[--h->n].content);
}

int ft_cmd_chat(int argc, char **argv) {
    struct ft_engine_opts be;
    int be_auto;
    ft_cli_backend_init(&be, &be_auto);
    struct ft_cli_sampling sampling = {0};
    const char *model = NULL, *system = NULL, *tmpl_name = NULL;
    long threads = 0, n_gen = 1024, ctx = 0;
    int no_think = 0;
    for (int i = 1; i < argc; i++) {
        int r = ft_cli_engine_flag("chat", argc, argv, &i, &be, &be_auto, &sampling);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        long *num = NULL, lo = 1, hi = 1 << 24;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("%s%s%s", k_usage, ft_cli_sampling_usage, ft_cli_backend_usage);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (!(model = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--system")) {
            if (!(system = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(tmpl_name = ft_cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-think")) {
            no_think = 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            num = &n_gen;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            num = &threads, hi = 4096;
        } else if (!strcmp(a, "--ctx-size") || !strcmp(a, "-c")) {
            num = &ctx;
        } else {
            return ft_cli_usage_error("chat", "unknown option '%s'", a);
        }
        if (num && ft_cli_num("chat", argc, argv, &i, lo, hi, num)) return 2;
    }
    if (!model) return ft_cli_usage_error("chat", "--model is required");
    struct ft_tok *tok = NULL;
    struct ft_chat_template *tmpl = NULL;
    enum ft_status st = ft_tok_load(model, &tok);
    if (st == FT_OK) st = ft_chat_template_detect(ft_tok_chat_template(tok), tmpl_name, &tmpl);
    if (st != FT_OK) {
        ft_tok_free(tok);
        return ft_cli_fail(st);
    }
    struct ft_engine_opts eo = {.max_ctx = (int)ctx};
    struct ft_session s;
    ft_cli_backend_apply(&eo, &be, be_auto);
    if ((st = ft_session_open(&s, model, NULL, (int)threads, &eo)) != FT_OK) {
        ft_chat_template_free(tmpl);
        ft_tok_free(tok);
        return ft_cli_fail(st);
    }
    struct ft_gen_params gen = {0};
    ft_cli_sampling_defaults(&s.model->cfg, &gen);
    ft_cli_apply_sampling(&sampling, &gen);
    int32_t eos[FT_MAX_EOS + 1];
    gen.eos = eos;
    gen.n_eos = ft_eos_ids(&s.model->cfg, tok, eos);
    gen.max_tokens = (int)n_gen;
    int32_t *ctx_ids = malloc((size_t)ft_engine_max_ctx(s.engine) * sizeof *ctx_ids);
    if (!ctx_ids) {
        ft_session_close(&s);
        ft_chat_template_free(tmpl);
        ft_tok_free(tok);
        return ft_cli_fail(ft_fail(FT_ERR_OOM, "chat: out of memory for the context"));
    }
    struct history h = {0};
    int n_fixed = 0;
    if (system) {
        push_msg(&h, FT_ROLE_SYSTEM, system);
        n_fixed = 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    sigaction(SIGINT, &sa, NULL);
    struct turn t = {0};
#ifdef FT_TESTING
    t.slow_ms = ft_env_int(FT_ENV_TEST_SLOW_EMIT_MS, 0);
#endif
    fprintf(stderr, "ft chat: %s (template %s). /reset clears, /exit leaves, Ctrl-C stops an answer.\n",
            model, ft_chat_template_name(tmpl));
    char *line = NULL;
    size_t line_cap = 0;
    for (;;) {
        printf("> ");
        fflush(stdout);
        g_interrupted = 0;
        errno = 0;
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) {
            if (errno == EINTR) { /* Ctrl-C at the prompt: a fresh prompt */
                clearerr(stdin);
                printf("\n");
                continue;
            }
            printf("\n");
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            clear_history(&h, n_fixed);
            ft_engine_reset(s.engine);
            printf("(history cleared)\n");
            continue;
        }
        if (push_msg(&h, FT_ROLE_USER, line)) break;
        struct ft_chat_opts co = {.add_generation_prompt = 1, .enable_thinking = no_think ? 0 : -1};
        char *text = NULL;
        int32_t *ids = NULL;
        int n_ids = 0;
        st = ft_chat_render(tmpl, h.msgs, h.n, &co, &text);
        if (st == FT_OK) st = ft_tok_encode(tok, text, strlen(text), 0, &ids, &n_ids);
        free(text);
        struct ft_gen_result r;
        t.len = 0;
        struct ft_cli_harmony hm; /* gpt-oss: analysis to stderr, the answer to the chat */
        ft_cli_harmony_begin(&hm, ft_chat_template_name(tmpl), &gen, emit, &t);
        if (st == FT_OK) st = ft_generate(s.engine, tok, ids, n_ids, &gen, ft_cli_harmony_emit, &hm, ctx_ids, &r);
        ft_cli_harmony_end(&hm);
        free(ids);
        if (st != FT_OK) { /* e.g. context full: say so, drop the turn, keep chatting */
            fprintf(stderr, "ft: %s (/reset starts over)\n", ft_error());
            clear_history(&h, h.n - 1);
            continue;
        }
        if (r.finish == FT_FINISH_CANCELLED) printf(" [stopped]");
        printf("\n");
        push_msg(&h, FT_ROLE_ASSISTANT, t.text ? t.text : "");
    }
    free(line);
    free(t.text);
    clear_history(&h, 0);
    free(h.msgs);
    free(ctx_ids);
    ft_session_close(&s);
    ft_chat_template_free(tmpl);
    ft_tok_free(tok);
    return 0;
}
