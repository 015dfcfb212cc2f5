/* main.c — the `ft` command: dispatches to one subcommand per file (cli/cmd_*.c).
 * Exit codes: 0 ok, 1 runtime failure, 2 bad input (flags, files, checkpoints). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/env.h"

static const struct ft_cmd k_cmds[] = {
    {"run", "generate from a prompt (text or ids), streamed, with tok/s", ft_cmd_run},
    {"chat", "interactive chat in the terminal", ft_cmd_chat},
    {"serve", "OpenAI-compatible HTTP server (continuous batching)", ft_cmd_serve},
    {"ctl", "query a running server: health, stats, models, generate", ft_cmd_ctl},
    {"logits", "teacher-forced logits of a prompt into a safetensors file", ft_cmd_logits},
    {"inspect", "show a checkpoint's architecture, sizes and plan", ft_cmd_inspect},
    {"bench", "prefill/decode throughput, llama-bench style", ft_cmd_bench},
    {"tokenize", "print the token ids and pieces of a text", ft_cmd_tokenize},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
    fprintf(f, "usage: ft <command> [options]   (ft <command> --help for its options)\n\n"
               "FreeToken-C: serve Mixture-of-Experts models larger than your GPU.\n\n"
               "commands:\n");
    for (size_t i = 0; k_cmds[i].name; i++)
        fprintf(f, "  %-9s %s\n", k_cmds[i].name, k_cmds[i].help);
    fprintf(f, "\nft --help-env lists the environment variables ft reads.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--help-env")) {
        ft_env_print(stdout);
        return 0;
    }
    for (size_t i = 0; k_cmds[i].name; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ft: unknown command '%s' (try: ft --help)\n", argv[1]);
    return 2;
}
