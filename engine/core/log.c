/* engine/core/log.c - per-thread rank coordinates and the two log functions (see log.h). */
#include "engine/core/log.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local int coord_world = 0, coord_tp = 0, coord_pp = 0, coord_dp = 0;
static _Thread_local bool quiet = false;

void tri_log_set_rank(int world_rank, int tp_rank, int pp_rank, int dp_rank)
{
    coord_world = world_rank;
    coord_tp = tp_rank;
    coord_pp = pp_rank;
    coord_dp = dp_rank;
}

void tri_log_set_quiet(bool q)
{
    quiet = q;
}

bool tri_log_is_rank0(void)
{
    return coord_world == 0;
}

void tri_log(const char *fmt, ...)
{
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%d,%d,%d] %s\n", coord_tp, coord_pp, coord_dp, line);
    fflush(stderr);
}

void tri_log_rank0(const char *fmt, ...)
{
    if (coord_world != 0 || quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}
