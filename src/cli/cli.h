/* cli.h — subcommand entry points and shared flag parsing for the ft binary. */
#ifndef FT_CLI_CLI_H
#define FT_CLI_CLI_H

#include <stdio.h>

struct ft_cmd {
    const char *name;
    const char *help;
    int (*fn)(int argc, char **argv);
};

int ft_cmd_run(int argc, char **argv);
int ft_cmd_logits(int argc, char **argv);
int ft_cmd_inspect(int argc, char **argv);
int ft_cmd_bench(int argc, char **argv);
int ft_cmd_bench_bw(int argc, char **argv); /* `ft bench bw` */
int ft_cmd_tokenize(int argc, char **argv);
int ft_cmd_chat(int argc, char **argv);
int ft_cmd_serve(int argc, char **argv);
int ft_cmd_ctl(int argc, char **argv);

#endif
