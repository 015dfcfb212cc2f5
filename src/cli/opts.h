/* opts.h — small helpers shared by the subcommands: flag values, id lists, exit codes. */
#ifndef FT_CLI_OPTS_H
#define FT_CLI_OPTS_H

#include <stdint.h>

#include "ft.h"

/* Exit code for a failed status: 2 for bad input (flags, files, checkpoints), 1 otherwise. */
int ft_cli_exit_code(enum ft_status st);
/* Prints "ft: <message>" for the last error and returns ft_cli_exit_code(st). */
int ft_cli_fail(enum ft_status st);
/* Prints "ft <cmd>: <msg> (try: ft <cmd> --help)" and returns 2. */
int ft_cli_usage_error(const char *cmd, const char *fmt, ...);

/* argv[*i] is a flag needing a value: returns argv[++*i] or NULL (and prints) if missing. */
const char *ft_cli_value(int argc, char **argv, int *i);
/* Parses a non-negative int / a double; returns 0 on success. */
int ft_cli_int(const char *s, long lo, long hi, long *out);
/* Parses "1,2,3" into a malloc'd array. */
enum ft_status ft_cli_ids(const char *s, int32_t **ids, int *n);

#endif
