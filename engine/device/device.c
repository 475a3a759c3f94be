/* engine/device/device.c - the device interface's own state: lifetime, memory records, profiling,
 * and what every op's wrapper shares (see device.h and ops_internal.h).
 *
 * The tri_op_* wrappers live by family in engine/device/ops/<family>.c: each verifies dtypes and
 * shapes with the checks here (a message naming the op, the argument and the shapes on mismatch),
 * hands a backend without native bf16 fp32 copies of its bf16 arguments (the widening here), then
 * dispatches to the backend, which may assume valid arguments, timed by the profile here. The
 * memory calls record every allocation, so the device knows its live bytes and their peak. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/ops_internal.h"

/* ---- argument checks ---- */

int tri_need(const char *op, const char *arg, tri_tensor t, tri_dtype dtype)
{
    char b[96];
    if (!tri_tensor_present(t))
        return TRI_ERR(TRI_EINVAL, "%s: tensor '%s' is missing", op, arg);
    if (t.dtype != dtype)
        return TRI_ERR(TRI_EINVAL, "%s: tensor '%s' is %s, expected dtype %s", op, arg, TRI_DESC(t, b),
                       tri_dtype_name(dtype));
    return TRI_OK;
}

/* t must be present and floating: fp32 or bf16 (device.h's precision rule). */
int tri_need_float(const char *op, const char *arg, tri_tensor t)
{
    char b[96];
    if (!tri_tensor_present(t))
        return TRI_ERR(TRI_EINVAL, "%s: tensor '%s' is missing", op, arg);
    if (t.dtype != TRI_F32 && t.dtype != TRI_BF16)
        return TRI_ERR(TRI_EINVAL, "%s: tensor '%s' is %s, expected dtype f32 or bf16", op, arg, TRI_DESC(t, b));
    return TRI_OK;
}

int tri_need_numel(const char *op, const char *arg, tri_tensor t, int64_t numel)
{
    char b[96];
    if (tri_tensor_numel(t) != numel)
        return TRI_ERR(TRI_EINVAL, "%s: tensor '%s' is %s, expected %lld elements", op, arg,
                       TRI_DESC(t, b), (long long)numel);
    return TRI_OK;
}

/* t must be a matrix view (rows, cols) of the given sizes (any dims, rows = all but the last). */
int tri_need_matrix(const char *op, const char *arg, tri_tensor t, int64_t rows, int64_t cols)
{
    char b[96];
    if (tri_tensor_rows(t) != rows || tri_tensor_cols(t) != cols)
        return TRI_ERR(TRI_EINVAL, "%s: tensor '%s' is %s, expected %lld rows of %lld", op, arg,
                       TRI_DESC(t, b), (long long)rows, (long long)cols);
    return TRI_OK;
}

int tri_check_seq_split(const char *op, int64_t T, int cp, int cp_rank)
{
    if (cp < 1 || cp_rank < 0 || cp_rank >= cp || (cp > 1 && T % (2 * (int64_t)cp) != 0))
        return TRI_ERR(TRI_EINVAL, "%s: context-parallel rank %d of cp %d over T %lld positions: expected cp >= 1, "
                       "0 <= cp_rank < cp and T divisible by 2 cp (the chunks)", op, cp_rank, cp, (long long)T);
    return TRI_OK;
}

/* Adds one timed call of op `name` (a string literal: slots compare by pointer, then by text). */
static void profile_add(tri_device *d, const char *name, double seconds)
{
    tri_op_profile *p = d->profile;
    for (int i = 0; i < TRI_PROFILE_SLOTS; i++) {
        if (p->name[i] && p->name[i] != name && strcmp(p->name[i], name) != 0)
            continue;
        p->name[i] = name;
        p->seconds[i] += seconds;
        p->calls[i]++;
        return;
    }
}

/* Start time of the op being dispatched on this thread (set before the call by the comma
 * operator in TRI_DISPATCH, which sequences it; function arguments alone would not). */
static _Thread_local double op_t0;

void tri_dispatch_start(tri_device *d)
{
    d->queued = true;
    op_t0 = d->profile ? tri_now_s() : 0.0;
}

int tri_dispatch_end(tri_device *d, const char *name, int rc)
{
    if (d->profile) {
        int s = d->ops->sync(d);
        profile_add(d, name, tri_now_s() - op_t0);
        rc = rc ? rc : s;
    }
    return rc;
}

/* ---- bf16 on a backend that computes in fp32 only ----
 * The wrappers give such a backend (device->native_bf16 false) an fp32 copy of every bf16
 * argument, run the op, and round the arguments the op writes back into their bf16 storage: the
 * precision rule of device.h, with the backend's own fp32 arithmetic. The copies live in the
 * device's TRI_WIDEN_MAX scratch buffers (d->widen), from the backend's allocator directly and outside
 * the planned and measured memory: the k-th argument widened by an op uses buffer k, which grows
 * when it is too small and is kept for the next op (a bf16 step reuses them rather than allocating
 * and faulting in fresh pages at every op), and tri_device_destroy frees them. Arguments with the
 * same data pointer share one copy, so the aliasing an op allows (ce_backward's dlogits = logits,
 * gelu_backward's dinp = dout, add's out = a) holds for the copies too. */

tri_widen tri_widen_start(tri_device *d, int rc)
{
    tri_widen w = {.d = d, .rc = rc};
    return w;
}

void tri_widen_arg(tri_widen *w, tri_tensor *t, bool writes)
{
    if (w->rc || w->d->native_bf16 || !tri_tensor_present(*t) || t->dtype != TRI_BF16)
        return;
    for (int i = 0; i < w->n; i++)
        if (w->arg[i].orig.data == t->data) {
            w->arg[i].written |= writes;
            t->data = w->arg[i].wide;
            t->dtype = TRI_F32;
            return;
        }
    if (w->n == TRI_WIDEN_MAX) {
        w->rc = TRI_ERR(TRI_EINTERNAL, "tri_widen: more than %d bf16 arguments", TRI_WIDEN_MAX);
        return;
    }
    int64_t n = tri_tensor_numel(*t);
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    tri_device *d = w->d;
    if (d->widen[w->n].bytes < bytes) {
        if (d->widen[w->n].data)
            d->ops->free(d, d->widen[w->n].data);
        d->widen[w->n].data = NULL;
        d->widen[w->n].bytes = 0;
        w->rc = d->ops->alloc(d, &d->widen[w->n].data, bytes);
        if (w->rc)
            return;
        d->widen[w->n].bytes = bytes;
    }
    tri_tensor f = *t;
    f.dtype = TRI_F32;
    f.data = d->widen[w->n].data;
    w->rc = d->ops->convert(d, f, *t);
    if (w->rc)
        return;
    w->arg[w->n].orig = *t;
    w->arg[w->n].wide = f.data;
    w->arg[w->n].written = writes;
    w->n++;
    *t = f;
}

int tri_widen_end(tri_widen *w, int rc)
{
    rc = w->rc ? w->rc : rc;
    for (int i = 0; i < w->n; i++) {
        tri_tensor f = w->arg[i].orig;
        f.data = w->arg[i].wide;
        f.dtype = TRI_F32;
        if (!rc && w->arg[i].written)
            rc = w->d->ops->convert(w->d, w->arg[i].orig, f);
    }
    return rc;
}

/* ---- lifetime and memory ---- */

void tri_device_destroy(tri_device *d)
{
    if (!d)
        return;
    free(d->profile);
    d->profile = NULL;
    free(d->records);
    d->records = NULL;
    for (int k = 0; k < TRI_WIDEN_MAX; k++)
        if (d->widen[k].data)
            d->ops->free(d, d->widen[k].data);
    if (d->ops->destroy)
        d->ops->destroy(d);
}

int tri_device_profile_enable(tri_device *d)
{
    if (!d->profile)
        d->profile = calloc(1, sizeof *d->profile);
    return d->profile ? TRI_OK : TRI_ERR(TRI_ENOMEM, "out of memory for the op profile");
}

void tri_device_profile_report(const tri_device *d, FILE *f)
{
    const tri_op_profile *p = d->profile;
    if (!p)
        return;
    int order[TRI_PROFILE_SLOTS], n = 0;
    double total = 0.0;
    for (int i = 0; i < TRI_PROFILE_SLOTS && p->name[i]; i++) {
        order[n++] = i;
        total += p->seconds[i];
    }
    for (int i = 1; i < n; i++) /* insertion sort by time, largest first */
        for (int j = i; j > 0 && p->seconds[order[j]] > p->seconds[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int w = 22; /* the name column: as wide as the longest name */
    for (int k = 0; k < n; k++)
        if ((int)strlen(p->name[order[k]]) > w)
            w = (int)strlen(p->name[order[k]]);
    fprintf(f, "%-*s %10s %10s %7s\n", w, "op", "calls", "seconds", "share");
    for (int k = 0; k < n; k++) {
        int i = order[k];
        fprintf(f, "%-*s %10lld %10.3f %6.1f%%\n", w, p->name[i], (long long)p->calls[i], p->seconds[i],
                total > 0 ? 100.0 * p->seconds[i] / total : 0.0);
    }
    fprintf(f, "%-*s %10s %10.3f\n", w, "total", "", total);
}

static int remember(tri_device *d, void *ptr, size_t bytes)
{
    if (d->n_records == d->cap_records) {
        int cap = d->cap_records ? 2 * d->cap_records : 32;
        tri_alloc_record *r = realloc(d->records, (size_t)cap * sizeof *r);
        if (!r)
            return TRI_ERR(TRI_ENOMEM, "device: out of memory for allocation records");
        d->records = r;
        d->cap_records = cap;
    }
    d->records[d->n_records++] = (tri_alloc_record){ptr, bytes};
    d->allocated_bytes += bytes;
    if (d->allocated_bytes > d->peak_bytes)
        d->peak_bytes = d->allocated_bytes;
    return TRI_OK;
}

static void forget(tri_device *d, void *ptr)
{
    for (int i = d->n_records - 1; i >= 0; i--)
        if (d->records[i].ptr == ptr) {
            d->allocated_bytes -= d->records[i].bytes;
            d->records[i] = d->records[--d->n_records];
            return;
        }
}

int tri_device_alloc(tri_device *d, void **ptr, size_t bytes)
{
    *ptr = NULL;
    if (bytes == 0)
        return TRI_OK;
    int rc = d->ops->alloc(d, ptr, bytes);
    if (!rc && (rc = remember(d, *ptr, bytes)) != TRI_OK) {
        d->ops->free(d, *ptr);
        *ptr = NULL;
    }
    return rc;
}

void tri_device_free(tri_device *d, void *ptr)
{
    if (!ptr)
        return;
    forget(d, ptr);
    d->ops->free(d, ptr);
}

int tri_device_host_alloc(tri_device *d, void **ptr, size_t bytes)
{
    *ptr = NULL;
    return bytes == 0 ? TRI_OK : d->ops->host_alloc(d, ptr, bytes);
}

void tri_device_host_free(tri_device *d, void *ptr)
{
    if (ptr)
        d->ops->host_free(d, ptr);
}

/* A host wait: counted when work was queued since the last (tri_device.waits). */
static void wait_counted(tri_device *d)
{
    d->waits += d->queued;
    d->queued = false;
}

int tri_device_copy_to_host(tri_device *d, void *host, tri_tensor src)
{
    if (tri_tensor_bytes(src) == 0)
        return TRI_OK;
    wait_counted(d);
    return d->ops->copy_to_host(d, host, src.data, tri_tensor_bytes(src));
}

int tri_device_copy_from_host(tri_device *d, tri_tensor dst, const void *host)
{
    if (tri_tensor_bytes(dst) == 0)
        return TRI_OK;
    return d->ops->copy_from_host(d, dst.data, host, tri_tensor_bytes(dst));
}

int tri_device_copy_to_host_async(tri_device *d, void *host, tri_tensor src)
{
    if (tri_tensor_bytes(src) == 0)
        return TRI_OK;
    if (!d->ops->copy_to_host_async)
        return d->ops->copy_to_host(d, host, src.data, tri_tensor_bytes(src));
    d->queued = true;
    return d->ops->copy_to_host_async(d, host, src.data, tri_tensor_bytes(src));
}

int tri_device_sync(tri_device *d)
{
    wait_counted(d);
    return d->ops->sync(d);
}

/* ---- graphs ---- */

bool tri_device_can_capture(const tri_device *d)
{
    return d->ops->capture_begin != NULL;
}

int tri_device_capture_begin(tri_device *d)
{
    if (!tri_device_can_capture(d))
        return TRI_ERR(TRI_ENOTSUP, "device %s cannot capture graphs (CUDA only)", d->ops->name);
    if (d->capturing)
        return TRI_ERR(TRI_EINVAL, "device %s: a capture is already in progress", d->ops->name);
    int rc = d->ops->capture_begin(d);
    d->capturing = rc == TRI_OK;
    return rc;
}

int tri_device_capture_end(tri_device *d, tri_device_graph **out, int64_t *nodes)
{
    *out = NULL;
    if (!d->capturing)
        return TRI_ERR(TRI_EINVAL, "device %s: no capture in progress", d->ops->name);
    d->capturing = false;
    int64_t n = 0;
    void *g = NULL;
    int rc = d->ops->capture_end(d, &g, &n);
    *out = (tri_device_graph *)g;
    if (nodes)
        *nodes = n;
    return rc;
}

int tri_device_graph_launch(tri_device *d, tri_device_graph *g)
{
    d->queued = true;
    return d->ops->graph_launch(d, g);
}

void tri_device_graph_free(tri_device *d, tri_device_graph *g)
{
    if (g)
        d->ops->graph_free(d, g);
}
