/* tools/cli/metrics.c - the last run's iterations from engine_train's metrics.jsonl (see metrics.h). */
#include "tools/cli/metrics.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/file.h"
#include "engine/core/status.h"

typedef struct sample {
    double s, tokens, flops;
} sample;

static int by_seconds(const void *a, const void *b)
{
    double x = ((const sample *)a)->s, y = ((const sample *)b)->s;
    return x < y ? -1 : x > y ? 1 : 0;
}

static int number(const cJSON *o, const char *key, double *v)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(n))
        return -1;
    *v = n->valuedouble;
    return 0;
}

/* Parses one line; appends a train sample to *s (restarting at iter 1). */
static int parse_line(const char *path, long lineno, const char *line, sample **s, int *n, int *cap)
{
    cJSON *o = cJSON_Parse(line);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return TRI_ERR(TRI_EINVAL, "%s:%ld: not a JSON object", path, lineno);
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    int rc = TRI_OK;
    if (cJSON_IsString(kind) && strcmp(kind->valuestring, "train") == 0) {
        double iter = 0, ms = 0, tps = 0, gflops = 0;
        if (number(o, "ms", &ms) || number(o, "tokens_per_s", &tps) || number(o, "gflops", &gflops) ||
            !(ms > 0))
            rc = TRI_ERR(TRI_EINVAL, "%s:%ld: a train line needs positive \"ms\" and numbers \"tokens_per_s\" "
                         "and \"gflops\"", path, lineno);
        if (!rc && number(o, "iter", &iter) == 0 && iter == 1)
            *n = 0;  /* a new run starts */
        if (!rc && *n == *cap) {
            int grown = *cap ? 2 * *cap : 64;
            sample *t = realloc(*s, (size_t)grown * sizeof *t);
            if (!t)
                rc = TRI_ERR(TRI_ENOMEM, "out of memory reading %s", path);
            else {
                *s = t;
                *cap = grown;
            }
        }
        if (!rc)
            (*s)[(*n)++] = (sample){.s = ms / 1e3, .tokens = tps * ms / 1e3, .flops = gflops * 1e9 * ms / 1e3};
    }
    cJSON_Delete(o);
    return rc;
}

int tri_metrics_read(const char *path, tri_run_metrics *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = NULL;
    int orc = tri_file_fopen_read(path, &f);
    if (orc)
        return tri_error_context(orc, "--calibrate");
    char *line = NULL;
    size_t len = 0;
    long lineno = 0;
    sample *s = NULL;
    int n = 0, cap = 0, rc = TRI_OK;
    while (!rc && getline(&line, &len, f) != -1) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue;
        rc = parse_line(path, lineno, line, &s, &n, &cap);
    }
    free(line);
    fclose(f);
    if (!rc && n == 0)
        rc = TRI_ERR(TRI_EINVAL, "--calibrate %s: no \"kind\":\"train\" line (is it engine_train's "
                     "SAVE_DIR/metrics.jsonl?)", path);
    if (!rc) {
        sample *use = n > 1 ? s + 1 : s;  /* the first iteration is a warm-up */
        int k = n > 1 ? n - 1 : n;
        qsort(use, (size_t)k, sizeof *use, by_seconds);
        const sample *mid = &use[k / 2];
        *out = (tri_run_metrics){.iterations = k, .median_s = mid->s, .tokens_per_iter = mid->tokens,
                                 .flops_per_iter = mid->flops};
    }
    free(s);
    return rc;
}
