/* tests/testutil.c - helpers shared by the Criterion suites (see testutil.h). */
#include "tests/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/core/rng.h"

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
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0)
        return NULL;
    return buf;
}

/* ---- stderr ---- */

#include <unistd.h>

void tu_stderr_capture(tu_capture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/trident-stderr-XXXXXX");
    c->fd = mkstemp(c->path);
    c->saved = dup(2);
    fflush(stderr);
    if (c->fd >= 0 && c->saved >= 0)
        dup2(c->fd, 2);
}

void tu_stderr_release(tu_capture *c, char *buf, size_t cap)
{
    fflush(stderr);
    ssize_t n = -1;
    if (c->saved >= 0) {
        dup2(c->saved, 2);
        close(c->saved);
    }
    if (c->fd >= 0) {
        lseek(c->fd, 0, SEEK_SET);
        n = read(c->fd, buf, cap - 1);
        close(c->fd);
        unlink(c->path);
    }
    buf[n > 0 ? n : 0] = '\0';
}

/* ---- record files ---- */

#include <string.h>

int tu_rec_write(FILE *f, const char *name, int ndim, const int64_t *shape, const double *data)
{
    uint32_t nlen = (uint32_t)strlen(name), nd = (uint32_t)ndim;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    if (fwrite(&nlen, 4, 1, f) != 1 || fwrite(name, 1, nlen, f) != nlen || fwrite(&nd, 4, 1, f) != 1 ||
        fwrite(shape, 8, (size_t)ndim, f) != (size_t)ndim ||
        fwrite(data, 8, (size_t)numel, f) != (size_t)numel)
        return -1;
    return 0;
}

int tu_rec_write_f32(FILE *f, const char *name, int ndim, const int64_t *shape, const float *data)
{
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    double *d = malloc((size_t)numel * sizeof *d);
    if (!d)
        return -1;
    for (int64_t i = 0; i < numel; i++)
        d[i] = data[i];
    int rc = tu_rec_write(f, name, ndim, shape, d);
    free(d);
    return rc;
}

int tu_rec_read(const char *path, tu_records *out)
{
    out->n = 0;
    out->r = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int cap = 0, rc = 0;
    uint32_t nlen;
    while (fread(&nlen, 4, 1, f) == 1) {
        if (out->n == cap) {
            cap = cap ? 2 * cap : 64;
            out->r = realloc(out->r, (size_t)cap * sizeof *out->r);
        }
        tu_record *r = &out->r[out->n];
        memset(r, 0, sizeof *r);
        uint32_t nd = 0;
        if (nlen >= sizeof r->name || fread(r->name, 1, nlen, f) != nlen || fread(&nd, 4, 1, f) != 1 ||
            nd > 8 || fread(r->shape, 8, nd, f) != nd) {
            rc = -1;
            break;
        }
        r->ndim = (int)nd;
        r->numel = 1;
        for (uint32_t i = 0; i < nd; i++)
            r->numel *= r->shape[i];
        r->data = malloc((size_t)r->numel * sizeof *r->data);
        if (!r->data || fread(r->data, 8, (size_t)r->numel, f) != (size_t)r->numel) {
            free(r->data);
            rc = -1;
            break;
        }
        out->n++;
    }
    fclose(f);
    return rc;
}

const tu_record *tu_rec_find(const tu_records *recs, const char *name)
{
    for (int i = 0; i < recs->n; i++)
        if (strcmp(recs->r[i].name, name) == 0)
            return &recs->r[i];
    return NULL;
}

void tu_rec_free(tu_records *recs)
{
    for (int i = 0; i < recs->n; i++)
        free(recs->r[i].data);
    free(recs->r);
    recs->r = NULL;
    recs->n = 0;
}

int tu_run(const char *cmd)
{
    int st = system(cmd);
    if (st == -1)
        return -1;
    return (st >> 8) & 0xff;
}
