/* tools/cli/flags.h - table-driven command-line flags for the tools, over getopt_long.
 *
 * A tool lists its flags once (name, kind, destination holding the default, help); the same table
 * drives parsing, strict value checks (the whole text must be a number in range, a choice must be
 * listed) and the -h listing with every default. Errors name the flag, the value and what was
 * expected. */
#ifndef TRIDENT_TOOLS_CLI_FLAGS_H
#define TRIDENT_TOOLS_CLI_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    TRI_FLAG_INT,      /* int; range [min, max] */
    TRI_FLAG_INT64,    /* int64_t; range [min, max] */
    TRI_FLAG_FLOAT,    /* float; range [min, max] */
    TRI_FLAG_STRING,   /* const char * (points into argv) */
    TRI_FLAG_BOOL,     /* bool; present = true */
    TRI_FLAG_CHOICE,   /* const char *, one of `choices` ("a|b|c") */
} tri_flag_kind;

typedef struct tri_flag {
    const char *name;      /* without the leading dashes */
    tri_flag_kind kind;
    void *value;           /* holds the default on entry */
    const char *help;
    double min, max;       /* numeric range (ignored when min == max == 0) */
    const char *choices;
    bool seen;             /* set when given on the command line */
} tri_flag;

/* Parses argv. *help is set when -h/--help is given. TRI_EINVAL with a message on a bad flag or
 * value, or on a positional argument. A flag given twice takes its last value, with a warning
 * (tri_flags_warn_repeat). */
int tri_flags_parse(tri_flag *flags, int n, int argc, char **argv, bool *help);

/* The one rule of the four CLIs (engine_train, partitioner, ckpt, tokenize) for a flag given more
 * than once: the last value wins, as with getopt and Megatron-LM's argparse (tools/trident.sh
 * appends the user's flags after its defaults that way), and a warning on stderr names both values,
 * "warning: --lr given twice (2e-3, then 1e-3): using 1e-3". Nothing is printed when both values
 * are equal, nor on any but the first rank of an mpirun/srun job (one line per job). */
void tri_flags_warn_repeat(const char *name, const char *first, const char *last);

/* Prints "usage: prog [flags]", the summary, and every flag with its default and help. */
void tri_flags_usage(FILE *f, const tri_flag *flags, int n, const char *prog, const char *summary);

/* The flag called name (NULL when absent). */
const tri_flag *tri_flags_find(const tri_flag *flags, int n, const char *name);

#endif
