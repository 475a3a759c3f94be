/* cuda/device_cuda.cu - the CUDA device: creation, memory, the stream, the ops table.
 *
 * One compute stream per device (cudaStreamNonBlocking, so it never synchronises with the legacy
 * default stream); every op is queued on it in program order, which is the interface's ordering
 * rule, and the host waits only in copy_to_host, sync and uploads over 1 MiB. Memory comes from
 * cudaMalloc in one call per arena (engine/device/arena.h plans the sizes; the backend never allocates
 * behind an op's back: its own buffers, the cuBLASLt workspace and the reduction scratch, are made
 * here once). Waiting polls the stream so that the NCCL comm can watch for asynchronous errors and
 * time-outs meanwhile (tri_cuda_watch_add); without watches it is cudaStreamSynchronize.
 *
 * Every CUDA and cuBLASLt call goes through TRI_CUDA / TRI_CUBLAS, which record the failing call
 * with the library's error name and message (engine/core/status.h); nothing here exits or aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_internal.h"
#include "cuda/device_cuda.h"
#include "engine/core/log.h"

extern "C" int tri_cuda_check(cudaError_t err, const char *call, const char *file, int line)
{
    if (err == cudaSuccess)
        return TRI_OK;
    /* The runtime also keeps a failed call's error as this thread's last error until cudaGetLastError
     * reads it, and every launch is checked through cudaGetLastError (cuda/launch.cuh): left there,
     * this error would come back as the next launch's (on an H200: a capture that ended invalid made
     * the next capture's first launch fail). Reported here, it is reset here; an error that sticks
     * to the context (a kernel's fault) is not reset by this and comes back from every call, as it
     * must. */
    (void)cudaGetLastError();
    int code = err == cudaErrorMemoryAllocation ? TRI_ENOMEM : TRI_EDEVICE;
    return tri_error_set(code, file, line, "%s failed: %s: %s", call, cudaGetErrorName(err),
                         cudaGetErrorString(err));
}

extern "C" int tri_cublas_check(cublasStatus_t st, const char *call, const char *file, int line)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return TRI_OK;
    int code = st == CUBLAS_STATUS_ALLOC_FAILED ? TRI_ENOMEM : TRI_EDEVICE;
    return tri_error_set(code, file, line, "%s failed: %s", call, cublasLtGetStatusString(st));
}

/* ---- waiting, with watches ---- */

/* Polls the event ev (or, when it is NULL, the stream) until its work is complete, running the
 * watches between polls: spins briefly, then sleeps 50 us between polls. */
static int poll_until_done(tri_cuda *c, cudaStream_t stream, cudaEvent_t ev)
{
    for (long polls = 0;; polls++) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(stream);
        if (e == cudaSuccess)
            return TRI_OK;
        if (e != cudaErrorNotReady)
            return tri_cuda_check(e, ev ? "cudaEventQuery (an earlier op failed)"
                                        : "cudaStreamQuery (an earlier op failed)",
                                  __FILE__, __LINE__);
        for (int i = 0; i < c->n_watch; i++) {
            int rc = c->watch[i].fn(c->watch[i].ctx);
            if (rc)
                return rc;
        }
        if (polls > 1000) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

extern "C" int tri_cuda_wait(tri_cuda *c)
{
    if (c->n_watch == 0)
        return TRI_CUDA(cudaStreamSynchronize(c->stream));
    return poll_until_done(c, c->stream, NULL);
}

extern "C" int tri_cuda_wait_event(tri_cuda *c, cudaEvent_t ev)
{
    if (c->n_watch == 0)
        return TRI_CUDA(cudaEventSynchronize(ev));
    return poll_until_done(c, NULL, ev);
}

extern "C" int tri_cuda_watch_add(tri_device *d, int (*fn)(void *ctx), void *ctx)
{
    tri_cuda *c = tri_cuda_of(d);
    if (c->n_watch == TRI_CUDA_MAX_WATCHES)
        return TRI_ERR(TRI_EINVAL, "cuda: more than %d watches on one device", TRI_CUDA_MAX_WATCHES);
    c->watch[c->n_watch++] = (tri_cuda_watch){fn, ctx};
    return TRI_OK;
}

extern "C" void tri_cuda_watch_remove(tri_device *d, void *ctx)
{
    tri_cuda *c = tri_cuda_of(d);
    for (int i = 0; i < c->n_watch; i++)
        if (c->watch[i].ctx == ctx) {
            c->watch[i] = c->watch[--c->n_watch];
            i--;
        }
}

/* ---- memory ---- */

static int cuda_alloc(tri_device *d, void **ptr, size_t bytes)
{
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e != cudaSuccess) {
        *ptr = NULL;
        return TRI_ERR(e == cudaErrorMemoryAllocation ? TRI_ENOMEM : TRI_EDEVICE,
                       "cudaMalloc of %zu bytes on device %d failed: %s", bytes, d->ordinal, cudaGetErrorString(e));
    }
    return TRI_OK;
}

static void cuda_free(tri_device *d, void *ptr)
{
    cudaFree(ptr); /* synchronises the device; nothing to report to a void caller */
}

/* Page-locked host memory: device-to-host copies into it run at full bandwidth. */
static int cuda_host_alloc(tri_device *d, void **ptr, size_t bytes)
{
    cudaError_t e = cudaMallocHost(ptr, bytes);
    if (e != cudaSuccess) {
        *ptr = NULL;
        return TRI_ERR(TRI_ENOMEM, "cudaMallocHost of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    }
    return TRI_OK;
}

static void cuda_host_free(tri_device *d, void *ptr)
{
    cudaFreeHost(ptr);
}

static int cuda_copy_to_host(tri_device *d, void *host, const void *src, size_t bytes)
{
    tri_cuda *c = tri_cuda_of(d);
    int rc = TRI_CUDA(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    return rc ? rc : tri_cuda_wait(c);
}

/* No wait: the copy runs in stream order, and the caller reads host after a sync (device.h). */
static int cuda_copy_to_host_async(tri_device *d, void *host, const void *src, size_t bytes)
{
    return TRI_CUDA(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, tri_cuda_of(d)->stream));
}

/* The host buffer may be reused on return, pageable or pinned, and no upload makes the host wait for
 * the device's queued work: an upload of at most TRI_CUDA_UPLOAD_SLOT_BYTES (a micro-batch's tokens,
 * a flag) is copied into the next page-locked staging slot and sent with cudaMemcpyAsync, and an
 * event recorded after it tells when the slot may be written again. The host waits only for that
 * slot's previous copy, TRI_CUDA_UPLOAD_SLOTS uploads ago: done long before, unless the host is
 * that many uploads ahead of the device, where the wait only paces it. A larger upload (weights
 * from a checkpoint, outside the step) is sent from the caller's buffer and waited for. */
static int cuda_copy_from_host(tri_device *d, void *dst, const void *host, size_t bytes)
{
    tri_cuda *c = tri_cuda_of(d);
    /* a captured upload would replay from the staging slot it took once, whatever the host wrote
     * since, and its wait for the slot is forbidden in a capture */
    if (d->capturing)
        return TRI_ERR(TRI_EINVAL, "cuda: an upload of %zu bytes inside a graph capture (upload before "
                       "capturing, into a buffer the graph reads)", bytes);
    if (bytes > TRI_CUDA_UPLOAD_SLOT_BYTES) {
        int rc = TRI_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->stream));
        return rc ? rc : tri_cuda_wait(c);
    }
    int slot = c->upload_next;
    c->upload_next = (slot + 1) % TRI_CUDA_UPLOAD_SLOTS;
    int rc = tri_cuda_wait_event(c, c->upload_done[slot]); /* at once for a slot not used yet */
    if (rc)
        return rc;
    char *stage = c->upload + (size_t)slot * TRI_CUDA_UPLOAD_SLOT_BYTES;
    memcpy(stage, host, bytes);
    rc = TRI_CUDA(cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, c->stream));
    return rc ? rc : TRI_CUDA(cudaEventRecord(c->upload_done[slot], c->stream));
}

/* memmove semantics: overlapping ranges go through the workspace in chunks, in the safe order. */
static int cuda_copy(tri_device *d, void *dst, const void *src, size_t bytes)
{
    tri_cuda *c = tri_cuda_of(d);
    char *to = (char *)dst;
    const char *from = (const char *)src;
    if (to + bytes <= from || from + bytes <= to)
        return TRI_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    size_t chunk = c->workspace_bytes;
    int rc = TRI_OK;
    for (size_t done = 0; done < bytes && !rc; done += chunk) {
        size_t n = bytes - done < chunk ? bytes - done : chunk;
        size_t off = to < from ? done : bytes - done - n; /* forward when moving down, else backward */
        rc = TRI_CUDA(cudaMemcpyAsync(c->workspace, from + off, n, cudaMemcpyDeviceToDevice, c->stream));
        if (!rc) rc = TRI_CUDA(cudaMemcpyAsync(to + off, c->workspace, n, cudaMemcpyDeviceToDevice, c->stream));
    }
    return rc;
}

static int cuda_sync(tri_device *d)
{
    return tri_cuda_wait(tri_cuda_of(d));
}

static void release(tri_cuda *c)
{
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    tri_cuda_gemm_cache_destroy(c->gemm);
    cudaFree(c->workspace);
    cudaFree(c->partials);
    cudaFreeHost(c->upload);
    for (int i = 0; i < TRI_CUDA_UPLOAD_SLOTS; i++)
        if (c->upload_done[i])
            cudaEventDestroy(c->upload_done[i]);
    if (c->lt)
        cublasLtDestroy(c->lt);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

static void cuda_destroy(tri_device *d)
{
    release(tri_cuda_of(d));
    free(d);
}

/* The table, filled by name (C++17 has no designated initializers, so by assignment): the memory
 * slots by hand, then every row of engine/device/ops_list.h, optional ones included, to its
 * tri_cuda_<op> (cuda_internal.h): an op without a CUDA implementation does not link. */
static tri_device_ops cuda_ops_table(void)
{
    tri_device_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.alloc = cuda_alloc;
    o.free = cuda_free;
    o.copy_to_host = cuda_copy_to_host;
    o.copy_from_host = cuda_copy_from_host;
    o.copy = cuda_copy;
    o.sync = cuda_sync;
    o.destroy = cuda_destroy;
    o.host_alloc = cuda_host_alloc;
    o.host_free = cuda_host_free;
    o.copy_to_host_async = cuda_copy_to_host_async;
    o.capture_begin = tri_cuda_capture_begin;
    o.capture_end = tri_cuda_capture_end;
    o.graph_launch = tri_cuda_graph_launch;
    o.graph_free = tri_cuda_graph_free;
#define TRI_OP(name, params) o.name = tri_cuda_##name;
#include "engine/device/ops_list.h"
    return o;
}

static const tri_device_ops cuda_ops = cuda_ops_table();

/* ---- discovery and creation ---- */

extern "C" int tri_cuda_available(const char **why)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        if (why)
            *why = cudaGetErrorString(err);
        return 0;
    }
    if (count == 0) {
        if (why)
            *why = "the CUDA runtime reports 0 devices";
        return 0;
    }
    return 1;
}

extern "C" int tri_cuda_device_count(void)
{
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

extern "C" bool tri_device_is_cuda(const tri_device *d)
{
    return d && d->ops == &cuda_ops;
}

extern "C" int tri_cuda_set_simple_kernels(tri_device *d, bool simple)
{
    if (!tri_device_is_cuda(d))
        return TRI_ERR(TRI_EINVAL, "tri_cuda_set_simple_kernels: not a CUDA device");
    tri_cuda_of(d)->simple = simple;
    return TRI_OK;
}

extern "C" int tri_cuda_device_info(int ordinal, tri_cuda_info *info)
{
    memset(info, 0, sizeof *info);
    cudaDeviceProp p;
    int rc = TRI_CUDA(cudaGetDeviceProperties(&p, ordinal));
    if (rc)
        return rc;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->major = p.major, info->minor = p.minor, info->sm_count = p.multiProcessorCount;
    info->memory_bytes = p.totalGlobalMem;
    int clock = 0;
    if (cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, ordinal) == cudaSuccess)
        info->clock_khz = clock;
    return TRI_OK;
}

extern "C" int tri_device_cuda_create(tri_device **out, int ordinal)
{
    const char *why = "";
    *out = NULL;
    if (!tri_cuda_available(&why))
        return TRI_ERR(TRI_EDEVICE, "no CUDA device: %s", why);
    int count = tri_cuda_device_count();
    if (ordinal < 0 || ordinal >= count)
        return TRI_ERR(TRI_EDEVICE, "CUDA device %d does not exist (this machine has %d)", ordinal, count);
    tri_device *d = (tri_device *)calloc(1, sizeof *d);
    tri_cuda *c = (tri_cuda *)calloc(1, sizeof *c);
    if (!d || !c) {
        free(d);
        free(c);
        return TRI_ERR(TRI_ENOMEM, "cuda: cannot allocate the device");
    }
    c->ordinal = ordinal;
    c->workspace_bytes = TRI_CUDA_WORKSPACE_BYTES;
    /* TRIDENT_CUDA_KERNELS=simple: every op in its simple twin (DESIGN.md §11: selectable at run time,
     * e.g. to tell a fast kernel's fault from another's under compute-sanitizer) */
    const char *kernels = getenv("TRIDENT_CUDA_KERNELS");
    c->simple = kernels && strcmp(kernels, "simple") == 0;
    int rc = TRI_CUDA(cudaSetDevice(ordinal));
    if (!rc) rc = TRI_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    if (!rc) rc = tri_cublaslt_load();
    if (!rc) rc = TRI_CUBLAS(cublasLtCreate(&c->lt));
    if (!rc) rc = TRI_CUDA(cudaMalloc(&c->workspace, c->workspace_bytes));
    if (!rc) rc = TRI_CUDA(cudaMalloc((void **)&c->partials, TRI_CUDA_MAX_PARTIALS * sizeof(double)));
    if (!rc) rc = tri_cuda_gemm_cache_create(&c->gemm);
    if (!rc) rc = TRI_CUDA(cudaMallocHost((void **)&c->upload, TRI_CUDA_UPLOAD_SLOTS * TRI_CUDA_UPLOAD_SLOT_BYTES));
    for (int i = 0; i < TRI_CUDA_UPLOAD_SLOTS && !rc; i++)
        rc = TRI_CUDA(cudaEventCreateWithFlags(&c->upload_done[i], cudaEventDisableTiming));
    int optin = 0;
    if (!rc) rc = TRI_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal));
    c->smem_optin = optin > 0 ? (size_t)optin : 0;
    if (rc) {
        release(c);
        free(d);
        return tri_error_context(rc, "creating CUDA device %d", ordinal);
    }
#if defined(TRI_CUDA_UNOPTIMIZED)
    /* a compile-check build (TRIDENT_CUDA_UNOPTIMIZED, CMakeLists.txt) met a GPU: right, but slow */
    tri_log("warning: this build's CUDA kernels were compiled without optimization (nvcc -G: "
            "TRIDENT_CUDA_UNOPTIMIZED=ON, tools/trident.sh's compile check on a machine without a GPU); "
            "they compute the same results slowly: for speed, build with -DTRIDENT_CUDA_UNOPTIMIZED=OFF");
#endif
    d->ops = &cuda_ops;
    d->impl = c;
    d->ordinal = ordinal;
    /* every op reads and writes bf16 arguments itself (kernels through tri_load / tri_store, cuBLASLt
     * with CUDA_R_16BF), so the wrappers pass bf16 tensors through instead of widening them */
    d->native_bf16 = true;
    *out = d;
    return TRI_OK;
}
