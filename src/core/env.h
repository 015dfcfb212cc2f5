/* env.h — the one table of environment variables the engine reads (core/env.c): each entry's
 * name, default and meaning, listed by `ft --help-env`. Nothing else in src/ calls getenv.
 * Values are read once, at the first call, and kept; ft_env_reload reads them again (tests
 * that set a variable between engines). Any thread after the first call. */
#ifndef FT_CORE_ENV_H
#define FT_CORE_ENV_H

#include <stdio.h>

enum ft_env {
    FT_ENV_PIN_BUDGET_GB,  /* FREETOKEN_PIN_BUDGET_GB: pinned-memory budget (as --pin-budget) */
    FT_ENV_CACHE,          /* FREETOKEN_CACHE: where bandwidth profiles are kept */
    FT_ENV_XDG_CACHE_HOME, /* XDG_CACHE_HOME, HOME: the profile directory's fallbacks */
    FT_ENV_HOME,
    FT_ENV_PROFILE,        /* FT_PROFILE: GPU step timing printed at exit (1; 2: per-op, eager) */
    FT_ENV_TEST_COPY_FAULT,     /* FT_TESTING builds only: fault-injection hooks for the tests */
    FT_ENV_TEST_KERNEL_RELEASE,
    FT_ENV_TEST_SLOW_EMIT_MS,
    FT_ENV_TEST_UPLOAD_FAULT,
    FT_ENV_TEST_EXEC_STALL,
    FT_ENV_TEST_POOL_STALL,
    FT_ENV_TEST_SAMPLE_STALL,
    FT_ENV_TEST_ALLOC_FAULT,
    FT_ENV_TEST_COPY_STALL,
    FT_ENV_N
};

/* The variable's value, or NULL when it is unset or empty. */
const char *ft_env_str(enum ft_env id);
/* The value as an integer, or dflt when unset or not a number. */
int ft_env_int(enum ft_env id, int dflt);
/* Reads every variable again (tests: after setenv). Not while another thread reads. */
void ft_env_reload(void);
/* The directory of the engine's profiles (bandwidth, the pin wall): $FREETOKEN_CACHE, else
 * $XDG_CACHE_HOME/freetoken, else ~/.cache/freetoken (/tmp without a HOME). */
void ft_env_cache_dir(char *buf, size_t cap);
/* in as a file-name word: letters and digits, every other run of bytes one '-' */
void ft_env_file_word(const char *in, char *out, size_t cap);
/* Creates the directories leading to the file at path (an existing one is fine). */
void ft_env_mkdirs(const char *path);
/* The table for `ft --help-env`: name, default, meaning; the values set now marked. */
void ft_env_print(FILE *out);

#endif
