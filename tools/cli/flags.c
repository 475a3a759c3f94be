/* tools/cli/flags.c - table-driven flags over getopt_long (see flags.h). */
#include "tools/cli/flags.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

static bool has_range(const tri_flag *f)
{
    return !(f->min == 0 && f->max == 0);
}

static int out_of_range(const tri_flag *f, const char *text)
{
    if (f->kind == TRI_FLAG_INT || f->kind == TRI_FLAG_INT64)
        return TRI_ERR(TRI_EINVAL, "--%s %s: expected an integer in [%.0f, %.0f]", f->name, text, f->min, f->max);
    return TRI_ERR(TRI_EINVAL, "--%s %s: expected a value in [%g, %g]", f->name, text, f->min, f->max);
}

static int parse_integer(const tri_flag *f, const char *text, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno == ERANGE)
        return TRI_ERR(TRI_EINVAL, "--%s %s: does not fit in 64 bits; expected an integer in [%.0f, %.0f]",
                       f->name, text, f->min, f->max);
    if (errno || end == text || *end != '\0')
        return TRI_ERR(TRI_EINVAL, "--%s %s: expected an integer", f->name, text);
    if (has_range(f) && (v < f->min || v > f->max))
        return out_of_range(f, text);
    *out = v;
    return TRI_OK;
}

static bool choice_ok(const char *choices, const char *text)
{
    size_t n = strlen(text);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, text, n) == 0)
            return true;
        p += len + (bar ? 1 : 0);
    }
    return false;
}

static int set_value(tri_flag *f, const char *text)
{
    long long i = 0;
    int rc = TRI_OK;
    switch (f->kind) {
    case TRI_FLAG_INT:
        rc = parse_integer(f, text, &i);
        if (!rc && (i < -2147483647LL || i > 2147483647LL))
            rc = TRI_ERR(TRI_EINVAL, "--%s %s: does not fit in 32 bits", f->name, text);
        if (!rc)
            *(int *)f->value = (int)i;
        break;
    case TRI_FLAG_INT64:
        rc = parse_integer(f, text, &i);
        if (!rc)
            *(int64_t *)f->value = i;
        break;
    case TRI_FLAG_FLOAT: {
        char *end = NULL;
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end != '\0' || !isfinite(v))
            return TRI_ERR(TRI_EINVAL, "--%s %s: expected a finite number", f->name, text);
        if (has_range(f) && (v < f->min || v > f->max))
            return out_of_range(f, text);
        *(float *)f->value = (float)v;
        break;
    }
    case TRI_FLAG_STRING:
        if (*text == '\0')
            return TRI_ERR(TRI_EINVAL, "--%s: expected a non-empty value", f->name);
        *(const char **)f->value = text;
        break;
    case TRI_FLAG_CHOICE:
        if (!choice_ok(f->choices, text))
            return TRI_ERR(TRI_EINVAL, "--%s %s: expected one of %s", f->name, text, f->choices);
        *(const char **)f->value = text;
        break;
    case TRI_FLAG_BOOL:
        *(bool *)f->value = true;
        break;
    }
    f->seen = true;
    return rc;
}

/* getopt_long accepts unambiguous prefixes ("--zero" for "--zero-stage"); a typo must not pick a
 * flag silently, so the name given must be the flag's whole name. */
static int check_full_name(const tri_flag *f, char **argv, int next)
{
    for (int i = next - 1; i >= 1 && i >= next - 2; i--) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-')
            continue;
        size_t len = strcspn(a + 2, "=");
        if (len == strlen(f->name) && strncmp(a + 2, f->name, len) == 0)
            return TRI_OK;
        return TRI_ERR(TRI_EINVAL, "unknown flag %.*s (did you mean --%s? see -h)", (int)len + 2, a, f->name);
    }
    return TRI_OK;
}

/* The argv element holding the unknown one-letter flag c: getopt leaves optind on it while letters
 * remain after c, and moves past it after its last letter. */
static const char *short_flag_arg(int argc, char **argv, int c)
{
    if (optind < argc && argv[optind][0] == '-' && argv[optind][1] != '-' && strchr(argv[optind], c))
        return argv[optind];
    return argv[optind - 1];
}

/* Whether this process is the first rank of a launcher's job, or runs alone. */
static bool first_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return strcmp(v, "0") == 0;
    }
    return true;
}

void tri_flags_warn_repeat(const char *name, const char *first, const char *last)
{
    if (strcmp(first, last) != 0 && first_rank())
        fprintf(stderr, "warning: --%s given twice (%s, then %s): using %s\n", name, first, last, last);
}

int tri_flags_parse(tri_flag *flags, int n, int argc, char **argv, bool *help)
{
    struct option *longs = calloc((size_t)n + 2, sizeof *longs);
    const char **given = calloc((size_t)n + 1, sizeof *given); /* each flag's text on the command line */
    if (!longs || !given) {
        free(longs);
        free(given);
        return TRI_ERR(TRI_ENOMEM, "out of memory parsing flags");
    }
    for (int i = 0; i < n; i++)
        longs[i] = (struct option){flags[i].name, flags[i].kind == TRI_FLAG_BOOL ? no_argument : required_argument,
                                   NULL, 1000 + i};
    longs[n] = (struct option){"help", no_argument, NULL, 'h'};
    *help = false;
    optind = 1;
    opterr = 0;
    int rc = TRI_OK, c;
    while (!rc && (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        if (c == 'h')
            *help = true;
        else if (c == ':')
            rc = TRI_ERR(TRI_EINVAL, "%s needs a value", argv[optind - 1]);
        else if (c == '?' && optopt > 0 && optopt < 1000)  /* an unknown one-letter flag */
            rc = TRI_ERR(TRI_EINVAL, "unknown flag -%c in '%s' (flags take the form --name value; see -h)",
                         optopt, short_flag_arg(argc, argv, optopt));
        else if (c == '?')
            rc = TRI_ERR(TRI_EINVAL, "unknown flag %s (see -h)", argv[optind - 1]);
        else if (!(rc = check_full_name(&flags[c - 1000], argv, optind))) {
            const char *text = optarg ? optarg : "";
            if (given[c - 1000])
                tri_flags_warn_repeat(flags[c - 1000].name, given[c - 1000], text);
            given[c - 1000] = text;
            rc = set_value(&flags[c - 1000], text);
        }
    }
    if (!rc && optind < argc)
        rc = TRI_ERR(TRI_EINVAL, "unexpected argument '%s' (flags take the form --name value; see -h)",
                     argv[optind]);
    free(longs);
    free(given);
    return rc;
}

static void print_default(FILE *out, const tri_flag *f)
{
    switch (f->kind) {
    case TRI_FLAG_INT: fprintf(out, "%d", *(const int *)f->value); break;
    case TRI_FLAG_INT64: fprintf(out, "%lld", (long long)*(const int64_t *)f->value); break;
    case TRI_FLAG_FLOAT: fprintf(out, "%g", (double)*(const float *)f->value); break;
    case TRI_FLAG_BOOL: fprintf(out, "%s", *(const bool *)f->value ? "on" : "off"); break;
    case TRI_FLAG_STRING:
    case TRI_FLAG_CHOICE: {
        const char *s = *(const char *const *)f->value;
        fprintf(out, "%s", s ? s : "(none)");
        break;
    }
    }
}

void tri_flags_usage(FILE *out, const tri_flag *flags, int n, const char *prog, const char *summary)
{
    fprintf(out, "usage: %s [flags]\n%s\n\nflags (default in brackets):\n", prog, summary);
    for (int i = 0; i < n; i++) {
        const tri_flag *f = &flags[i];
        char head[128];
        const char *arg = f->kind == TRI_FLAG_BOOL ? "" : f->kind == TRI_FLAG_CHOICE ? f->choices
                          : f->kind == TRI_FLAG_STRING ? "S" : f->kind == TRI_FLAG_FLOAT ? "X" : "N";
        snprintf(head, sizeof head, "  --%s %s", f->name, arg);
        fprintf(out, "%-44s %s [", head, f->help);
        print_default(out, f);
        fprintf(out, "]\n");
    }
    fprintf(out, "  %-42s %s\n", "-h, --help", "print this list and exit");
}

const tri_flag *tri_flags_find(const tri_flag *flags, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].name, name) == 0)
            return &flags[i];
    return NULL;
}
