/* tests/opsutil.c - helpers shared by the device-op suites (see opsutil.h). */
#include "tests/opsutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/core/status.h"
#include "tests/testutil.h"

#define MAX_TRACKED 8192

/* One tracked allocation: host memory (dev NULL), device memory, or a device (ptr NULL). */
typedef struct tracked {
    tri_device *dev;
    void *ptr;
} tracked;

static tracked held[MAX_TRACKED];
static int n_held;

/* Helpers have no assertion library: a broken precondition ends the test process, which
 * Criterion reports as a crashed (failed) test. */
static void die(const char *what)
{
    fprintf(stderr, "opsutil: %s: %s\n", what, tri_error_message());
    abort();
}

static void track(tri_device *dev, void *ptr)
{
    if (n_held == MAX_TRACKED)
        die("too many tracked allocations");
    held[n_held++] = (tracked){dev, ptr};
}

tri_device *ot_device(int threads)
{
    tri_device *d;
    if (tri_device_cpu_create(&d, threads) != TRI_OK)
        die("tri_device_cpu_create");
    track(d, NULL);
    return d;
}

tri_tensor ot_tensor(tri_device *d, tri_tensor shape, const void *host)
{
    tri_tensor t = shape;
    if (tri_device_alloc(d, &t.data, tri_tensor_bytes(shape)) != TRI_OK)
        die("tri_device_alloc");
    track(d, t.data);
    if (host && tri_device_copy_from_host(d, t, host) != TRI_OK)
        die("tri_device_copy_from_host");
    return t;
}

void ot_download(tri_device *d, void *host, tri_tensor t)
{
    if (tri_device_copy_to_host(d, host, t) != TRI_OK || tri_device_sync(d) != TRI_OK)
        die("tri_device_copy_to_host");
}

static void *host_alloc(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p)
        die("calloc");
    track(NULL, p);
    return p;
}

float *ot_floats(size_t n)
{
    return host_alloc(n * sizeof(float));
}

double *ot_doubles(size_t n)
{
    return host_alloc(n * sizeof(double));
}

int32_t *ot_ints(size_t n)
{
    return host_alloc(n * sizeof(int32_t));
}

uint16_t *ot_read_bits(tri_device *d, tri_tensor t)
{
    uint16_t *h = host_alloc((size_t)tri_tensor_numel(t) * sizeof(uint16_t));
    ot_download(d, h, t);
    return h;
}

float *ot_read(tri_device *d, tri_tensor t)
{
    size_t n = (size_t)tri_tensor_numel(t);
    float *h = ot_floats(n);
    if (t.dtype != TRI_BF16) {
        ot_download(d, h, t);
        return h;
    }
    uint16_t *bits = ot_read_bits(d, t);
    for (size_t i = 0; i < n; i++)
        h[i] = tri_bf16_to_float(bits[i]);
    return h;
}

tri_tensor ot_tensor_as(tri_device *d, tri_dtype dtype, tri_tensor shape, const float *host)
{
    size_t n = (size_t)tri_tensor_numel(shape);
    float *x = ot_floats(n);
    for (size_t i = 0; i < n; i++)
        x[i] = host ? host[i] : NAN;
    shape.dtype = dtype;
    if (dtype != TRI_BF16)
        return ot_tensor(d, shape, x);
    uint16_t *bits = host_alloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        bits[i] = tri_float_to_bf16(x[i]);
    return ot_tensor(d, shape, bits);
}

float *ot_bf16_uniform(size_t n, float lo, float hi, uint64_t seed)
{
    float *x = ot_uniform(n, lo, hi, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = tri_round_bf16(x[i]);
    return x;
}

float *ot_uniform(size_t n, float lo, float hi, uint64_t seed)
{
    float *x = ot_floats(n);
    tu_fill_uniform(x, n, lo, hi, seed);
    return x;
}

double *ot_widen(const float *x, size_t n)
{
    double *y = ot_doubles(n);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}

bool ot_close(const char *what, const float *got, const double *want, size_t n, double floor_frac,
              double tol)
{
    double floor = floor_frac * sqrt(ot_dot(want, want, n) / (double)(n ? n : 1));
    if (floor < 1e-30)
        floor = 1e-30;
    double err = tu_max_rel_err_d(got, want, n, floor);
    bool ok = err <= tol;
    if (!ok || getenv("TRIDENT_TEST_VERBOSE")) {
        size_t worst = 0;
        double worst_e = -1.0;
        for (size_t i = 0; i < n; i++) {
            double den = fabs(want[i]) > floor ? fabs(want[i]) : floor;
            double e = fabs((double)got[i] - want[i]) / den;
            if (isnan(e) || e > worst_e) {
                worst = i;
                worst_e = isnan(e) ? INFINITY : e;
            }
        }
        fprintf(stderr,
                "%s %-44s max err %.3e (tol %.0e, floor %.1e) worst [%zu] got %.9g want %.9g\n",
                ok ? "ok  " : "FAIL", what, err, tol, floor, worst, n ? (double)got[worst] : 0.0,
                n ? want[worst] : 0.0);
    }
    return ok;
}

bool ot_same_bits(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            fprintf(stderr, "FAIL %s: element %zu differs: %.9g vs %.9g\n", what, i, (double)got[i],
                    (double)want[i]);
            return false;
        }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "ok   %-44s %zu elements bit-identical\n", what, n);
    return true;
}

double ot_dot(const double *a, const double *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void ot_fd_grad(double *grad, double *x, size_t n, ot_loss_fn loss, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + OT_FD_H;
        double up = loss(ctx);
        x[i] = x0 - OT_FD_H;
        double down = loss(ctx);
        x[i] = x0;
        grad[i] = (up - down) / (2.0 * OT_FD_H);
    }
}

void ot_teardown(void)
{
    /* memory first (newest first), devices last */
    for (int i = n_held - 1; i >= 0; i--) {
        if (held[i].dev && held[i].ptr)
            tri_device_free(held[i].dev, held[i].ptr);
        else if (!held[i].dev)
            free(held[i].ptr);
    }
    for (int i = n_held - 1; i >= 0; i--)
        if (held[i].dev && !held[i].ptr)
            tri_device_destroy(held[i].dev);
    n_held = 0;
}

int ot_flash_empty_cases(tri_device *d, void *mem)
{
    int rc = TRI_OK;
    for (int bf16 = 0; bf16 < 2 && !rc; bf16++)
        for (int empty_seq = 0; empty_seq < 2 && !rc; empty_seq++) {
            int64_t B = empty_seq ? 2 : 0, T = empty_seq ? 0 : 16, NH = 2, HS = 64;
            tri_dtype dt = bf16 ? TRI_BF16 : TRI_F32;
            tri_tensor qkv = tri_tensor_3d(mem, dt, B, T, 3 * NH * HS), out = tri_tensor_3d(mem, dt, B, T, NH * HS);
            tri_tensor lse = tri_tensor_3d(mem, TRI_F32, B, NH, T);
            rc = tri_op_flash_attention_forward(d, out, lse, qkv);
            if (!rc) rc = tri_op_flash_attention_backward(d, qkv, lse, out, qkv, out, lse);
            if (!rc) rc = tri_device_sync(d);
            if (rc) {
                char why[512];
                snprintf(why, sizeof why, "%s", tri_error_message());
                rc = TRI_ERR(rc, "%s B %lld T %lld: %s", bf16 ? "bf16" : "fp32", (long long)B, (long long)T, why);
            }
        }
    return rc;
}
