/* cmd_tokenize.c — `ft tokenize`: text to token ids with a model's tokenizer.
 *   ft tokenize --model DIR [--special] "text"   ids as a JSON array, then one "id<TAB>piece" line
 *                                                 per token (piece as a JSON string)
 *   ft tokenize --model DIR --jsonl FILE|-        one JSON string per input line -> one JSON array
 *                                                 of ids per output line (no BOS/EOS), bulk checks
 * DIR needs only tokenizer.json (+ tokenizer_config.json); a path ending in .gguf is read as a GGUF
 * file and its tokenizer metadata is used. Exit codes: 0 ok, 1 runtime failure, 2 bad input
 * (flags, files, invalid UTF-8). Single-threaded. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "core/status.h"
#include "text/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ft tokenize --model DIR|FILE.gguf [--special] \"text\"\n"
            "       ft tokenize --model DIR|FILE.gguf --jsonl FILE\n\n"
            "Prints the token ids of a text with the tokenizer of a model directory (tokenizer.json\n"
            "and, if present, tokenizer_config.json are enough) or of a GGUF file.\n\n"
            "options:\n"
            "  --model DIR    directory holding tokenizer.json, or a .gguf file (its tokenizer\n"
            "                 metadata; a vocab-only GGUF is enough)\n"
            "  --special      add BOS/EOS as the tokenizer does for a prompt (text mode only)\n"
            "  --jsonl FILE   read one JSON string per line (FILE or - for stdin) and print one JSON\n"
            "                 array of ids per line, without BOS/EOS\n"
            "  --help         this text\n");
}

static void print_ids(FILE *f, const int32_t *ids, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", ids[i]);
    fputs("]\n", f);
}

static int run_jsonl(const struct ft_tok *t, const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "ft: %s: cannot open\n", path);
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    for (long no = 1; (len = getline(&line, &cap, f)) > 0; no++) {
        json_error_t jerr;
        json_t *v = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!json_is_string(v)) {
            fprintf(stderr, "ft: %s:%ld: expected one JSON string per line%s%s\n", path, no,
                    v ? "" : ": ", v ? "" : jerr.text);
            json_decref(v);
            rc = 2;
            break;
        }
        int32_t *ids = NULL;
        int n = 0;
        enum ft_status st = ft_tok_encode(t, json_string_value(v), json_string_length(v), 0, &ids, &n);
        json_decref(v);
        if (st != FT_OK) {
            fprintf(stderr, "ft: %s:%ld: %s\n", path, no, ft_error());
            rc = ft_cli_exit_code(st);
            break;
        }
        print_ids(stdout, ids, n);
        free(ids);
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

static int run_text(const struct ft_tok *t, const char *text, int special) {
    int32_t *ids = NULL;
    int n = 0;
    enum ft_status st = ft_tok_encode(t, text, strlen(text), special, &ids, &n);
    if (st != FT_OK) {
        return ft_cli_fail(st);
    }
    print_ids(stdout, ids, n);
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const char *p = ft_tok_piece(t, ids[i], &len);
        json_t *s = json_stringn(p ? p : "", len);
        char *js = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        printf("%d\t%s%s\n", ids[i], js ? js : "\"\"", ft_tok_is_special(t, ids[i]) ? "\tspecial" : "");
        free(js);
        json_decref(s);
    }
    free(ids);
    return 0;
}

int ft_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *jsonl = NULL, *text = NULL;
    int special = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--jsonl")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ft: %s needs a value (see ft tokenize --help)\n", a);
                return 2;
            }
            *(a[2] == 'm' ? &model : &jsonl) = argv[++i];
        } else if (!strcmp(a, "--special")) {
            special = 1;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "ft: tokenize: unknown option %s (see ft tokenize --help)\n", a);
            return 2;
        } else if (text) {
            fprintf(stderr, "ft: tokenize: more than one text argument (quote the text)\n");
            return 2;
        } else {
            text = a;
        }
    }
    if (!model) {
        fprintf(stderr, "ft: tokenize: --model DIR is required (see ft tokenize --help)\n");
        return 2;
    }
    if (!jsonl == !text) {
        fprintf(stderr, "ft: tokenize: give either a text argument or --jsonl FILE\n");
        return 2;
    }
    struct ft_tok *t = NULL;
    enum ft_status st = ft_tok_load(model, &t);
    if (st != FT_OK) {
        return ft_cli_fail(st);
    }
    int rc = jsonl ? run_jsonl(t, jsonl) : run_text(t, text, special);
    ft_tok_free(t);
    return rc;
}
