/* tests/testutil.c - helpers shared by the Criterion suites (see testutil.h). */
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/rng.h"

void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)tri_rng_uniform(seed, 7, i);
}

double tu_max_rel_err(const float *a, const float *b, size_t n, double floor)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs((double)b[i]) > floor ? fabs((double)b[i]) : floor;
        double e = fabs((double)a[i] - (double)b[i]) / den;
        if (e > worst || isnan(e))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

double tu_max_rel_err_d(const float *a, const double *b, size_t n, double floor)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs(b[i]) > floor ? fabs(b[i]) : floor;
        double e = fabs((double)a[i] - b[i]) / den;
        if (e > worst || isnan(e))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static const char *env_path(const char *var, const char *fallback, const char *rel)
{
    static _Thread_local char buf[4096];
    const char *base = getenv(var);
    snprintf(buf, sizeof buf, "%s/%s", base ? base : fallback, rel);
    return buf;
}

const char *tu_source_path(const char *rel)
{
    return env_path("TRIDENT_SOURCE_DIR", "..", rel);
}

const char *tu_binary_path(const char *rel)
{
    return env_path("TRIDENT_BINARY_DIR", ".", rel);
}

const char *tu_scratch_dir(const char *name)
{
    static _Thread_local char buf[4096];
    const char *base = getenv("TRIDENT_BINARY_DIR");
    snprintf(buf, sizeof buf, "%s/test-scratch/%s", base ? base : ".", name);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0)
        return NULL;
    return buf;
}
