/* opts.h — small helpers shared by the subcommands: flag values, id lists, exit codes. */
#ifndef FT_CLI_OPTS_H
#define FT_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/generate.h"
#include "ft.h"

/* Exit code for a failed status: 2 for bad input (flags, files, checkpoints), 1 otherwise. */
int ft_cli_exit_code(enum ft_status st);
/* Prints "ft: <message>" for the last error and returns ft_cli_exit_code(st). */
int ft_cli_fail(enum ft_status st);
/* Prints "ft <cmd>: <msg> (try: ft <cmd> --help)" and returns 2. */
int ft_cli_usage_error(const char *cmd, const char *fmt, ...);

/* argv[*i] is a flag needing a value: returns argv[++*i] or NULL (and prints) if missing. */
const char *ft_cli_value(int argc, char **argv, int *i);
/* Parses an integer in [lo, hi] / a whole number like strtod; returns 0 on success. */
int ft_cli_int(const char *s, long lo, long hi, long *out);
int ft_cli_double(const char *s, double *out);
/* argv[*i] is a flag taking an integer in [lo, hi]: consumes the value into *out; on a missing
 * or bad value prints "ft <cmd>: <flag>: '<v>' is not a number in [lo, hi]" and returns -1. */
int ft_cli_num(const char *cmd, int argc, char **argv, int *i, long lo, long hi, long *out);
/* Parses "1,2,3" into a malloc'd array. */
enum ft_status ft_cli_ids(const char *s, int32_t **ids, int *n);


struct ft_config;
/* Sampling defaults from generation_config.json (temperature, top_p, top_k, repetition
 * penalty); greedy when the model gives none and do_sample is not set. */
void ft_cli_sampling_defaults(const struct ft_config *c, struct ft_gen_params *p);
/* Sampling/stop flags as given on the command line: parsed and checked with the other flags
 * (ft_cli_engine_flag), laid over the model's defaults once it is loaded. */
struct ft_cli_sampling {
    struct ft_gen_params p;
    unsigned given; /* which sampling fields a flag set */
};
/* Overrides p's sampling fields with those the flags gave; adds their stop strings and
 * --ignore-eos. */
void ft_cli_apply_sampling(const struct ft_cli_sampling *s, struct ft_gen_params *p);
/* The usage lines of those flags. */
extern const char ft_cli_sampling_usage[];

/* --cpu-act's value: 1 fast, 0 f32; -1 with "ft <cmd>: --cpu-act: ..." printed otherwise. */
int ft_cli_cpu_act(const char *cmd, const char *v);

struct ft_engine_opts;
/* --backend cpu|cuda|auto, --device N, --vram-limit SIZE, --no-graphs: like the sampling flags
 * (1 consumed, 0 not one, -1 bad value). Call ft_cli_backend_resolve after parsing. */
int ft_cli_backend_flag(const char *cmd, int argc, char **argv, int *i, struct ft_engine_opts *eo,
                        int *backend_auto);
/* auto -> cuda when this build has CUDA and a device is present, else cpu. */
void ft_cli_backend_resolve(struct ft_engine_opts *eo, int backend_auto);
/* The flags run and chat share, for their parse loop: backend flags into be, sampling/stop
 * flags into sampling (applied with ft_cli_apply_sampling once the model is loaded).
 * Returns 1 consumed, 0 not one of them, -1 bad value (printed). */
int ft_cli_engine_flag(const char *cmd, int argc, char **argv, int *i, struct ft_engine_opts *be,
                       int *backend_auto, struct ft_cli_sampling *sampling);
/* Initial state for ft_cli_backend_flag (auto backend, default copy verification). */
void ft_cli_backend_init(struct ft_engine_opts *be, int *backend_auto);
/* Copies the backend fields parsed into `be` to `eo` and resolves auto. */
void ft_cli_backend_apply(struct ft_engine_opts *eo, const struct ft_engine_opts *be,
                          int backend_auto);
/* Parses "24G", "512M", "0.5T", "2048K" or a plain number of GiB into bytes; 0 on success. */
int ft_cli_size(const char *s, size_t *out);

/* gpt-oss in the terminal: wraps an emit callback so harmony's analysis channel goes to stderr
 * and the final answer to the wrapped callback, the channel markers dropped
 * (ft_cli_harmony_begin sets p->keep_special when the template is harmony; otherwise the
 * wrapper passes text straight through). */
struct ft_cli_harmony {
    int on;
    void *th;  /* struct ft_think */
    ft_gen_emit_fn inner;
    void *inner_ctx;
};
void ft_cli_harmony_begin(struct ft_cli_harmony *h, const char *template_name,
                          struct ft_gen_params *p, ft_gen_emit_fn inner, void *inner_ctx);
int ft_cli_harmony_emit(void *h, const char *text, size_t len);
/* Releases what is held (to the same places) and frees the splitter. */
void ft_cli_harmony_end(struct ft_cli_harmony *h);
extern const char ft_cli_backend_usage[];

#endif
