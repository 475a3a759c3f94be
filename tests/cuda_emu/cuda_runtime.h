/* tests/cuda_emu/cuda_runtime.h - the part of the CUDA runtime API that cuda/ calls, on the CPU.
 *
 * The emulated CUDA build (tests/cuda_emu/CMakeLists.txt) compiles the CUDA backend's own sources,
 * host code and kernels, as C++ with this directory first on the include path, so that
 * `#include <cuda_runtime.h>` finds this file instead of the toolkit's, and with
 * cuda/kernels/cuda_emu.h, which runs every kernel launch as blocks of emulated lanes. Device memory
 * is host memory (cudaMalloc fills it with 0xff bytes, NaN as floats, so a kernel that reads what
 * nobody wrote fails its test as it may on a GPU); a stream runs its work at once, in order, so a
 * copy or launch has ended when the call returns and every query or wait finds the stream idle. An
 * event records only that it was recorded. So the emulation checks what the host code asks of the
 * device (launch shapes, arguments, copies, the simple/fast choice, workspace use, the ops table),
 * not the hardware: no concurrency between streams, no asynchrony. The names are the toolkit's, as
 * the code needs them; values of enumerations are the toolkit's where the code could depend on
 * them (it does not).
 *
 * Stream capture (CUDA graphs, the CUDA Programming Guide's "Stream capture"): between
 * cudaStreamBeginCapture and cudaStreamEndCapture, the work queued on the capturing stream (kernel
 * launches through cuda/launch.cuh and mma_shim.h, cudaMemcpyAsync, cudaMemsetAsync, cublasLtMatmul,
 * cudaGraphLaunch) is recorded as closures, not run; cudaGraphInstantiate copies the list and
 * cudaGraphLaunch runs it in order. As in cudaStreamCaptureModeThreadLocal, the calls CUDA
 * refuses while this thread captures fail with cudaErrorStreamCaptureUnsupported and invalidate the
 * capture (cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated and no graph):
 * cudaMalloc, cudaMallocHost, cudaFree, cudaFreeHost, cudaStreamSynchronize, cudaStreamQuery,
 * cudaEventSynchronize and cudaEventQuery. So a host sync or an allocation inside a captured region,
 * which a GPU refuses, fails here too. (Not modelled: copies between device and pageable host
 * memory, which CUDA also refuses to capture; the emulation cannot tell pageable from pinned.) */
#ifndef TRIDENT_TESTS_CUDA_EMU_CUDA_RUNTIME_H
#define TRIDENT_TESTS_CUDA_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <functional>
#include <vector>

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorIllegalState = 401,
} cudaError_t;

typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;

typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
} cudaMemcpyKind;

typedef enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
} cudaDeviceAttr;

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02

/* A graph: the captured work, in stream order. */
typedef struct tri_emu_graph {
    std::vector<std::function<void()>> nodes;
} *cudaGraph_t;
typedef struct tri_emu_graph_exec {
    std::vector<std::function<void()>> nodes;
} *cudaGraphExec_t;
typedef struct tri_emu_graph_node {
    int unused;
} *cudaGraphNode_t;

typedef struct tri_emu_stream {
    cudaGraph_t capture;   /* the graph being captured, or NULL */
    bool invalidated;      /* a refused call ended the capture's validity */
} *cudaStream_t;
typedef struct tri_emu_event {
    int recorded;
} *cudaEvent_t;

/* The stream this thread is capturing (cudaStreamCaptureModeThreadLocal), NULL when none: one
 * variable for the whole program (a C++17 inline variable), whichever source reads it. */
inline thread_local cudaStream_t tri_emu_capturing = nullptr;

/* The last error of this thread's runtime calls (cudaGetLastError): as CUDA's runtime, every call
 * that fails records its error there, not only a launch, until cudaGetLastError returns and resets
 * it. So a failed call whose error the code reported without resetting it shows again as the next
 * launch's error (cuda/launch.cuh checks each launch with cudaGetLastError), here as on a GPU. */
inline thread_local cudaError_t tri_emu_last_error = cudaSuccess;

static inline cudaError_t tri_emu_error(cudaError_t e)
{
    if (e != cudaSuccess)
        tri_emu_last_error = e;
    return e;
}

/* A call CUDA refuses while this thread captures: the capture is invalidated and the call fails with
 * cudaErrorStreamCaptureUnsupported, kept as the thread's last error; cudaSuccess when none captures. */
static inline cudaError_t tri_emu_capture_refusal(void)
{
    if (!tri_emu_capturing)
        return cudaSuccess;
    tri_emu_capturing->invalidated = true;
    return tri_emu_error(cudaErrorStreamCaptureUnsupported);
}

/* Runs work now, or records it into the graph that stream is capturing. */
static inline void tri_emu_enqueue(cudaStream_t stream, std::function<void()> work)
{
    if (stream && stream->capture)
        stream->capture->nodes.push_back(std::move(work));
    else
        work();
}

struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem;
};

/* The emulated device: one, named so that no peak table matches it. */
#define TRI_EMU_DEVICE_NAME "Trident CUDA emulation (CPU)"
#define TRI_EMU_DEVICE_BYTES ((size_t)16 << 30)

static inline const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    }
    return "cudaErrorUnknown";
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return "emulated error";
    }
}

static inline cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tri_emu_last_error;
    tri_emu_last_error = cudaSuccess;
    return e;
}

static inline cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}

static inline cudaError_t cudaSetDevice(int ordinal)
{
    return tri_emu_error(ordinal == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

static inline cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int ordinal)
{
    if (ordinal != 0)
        return tri_emu_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", TRI_EMU_DEVICE_NAME);
    p->major = 9, p->minor = 0, p->multiProcessorCount = 1;
    p->totalGlobalMem = TRI_EMU_DEVICE_BYTES;
    return cudaSuccess;
}

/* An H100's 227 KiB of shared memory a block may opt in to, so cuda/attention/flash.cu chooses the tiled
 * attention kernels where it would on one (their launches run mma_shim.h's emulation). */
static inline cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int ordinal)
{
    if (ordinal != 0)
        return tri_emu_error(cudaErrorInvalidDevice);
    *value = attr == cudaDevAttrClockRate ? 1000000 : 232448;
    return cudaSuccess;
}

/* 256-byte aligned as cudaMalloc's, filled with 0xff bytes (NaN floats, bf16 NaN, -1 integers). A
 * block of 2 MiB or more starts on a 2 MiB boundary and asks for transparent huge pages, as the CPU
 * backend's blocks do (engine/device/device_cpu.c): the fill then faults it in 2 MiB at a time, where
 * 4 KiB pages cost every emulated device ~10,000 first touches for its cuBLASLt workspace and upload
 * staging alone (docs/test-suite.md). The size is not rounded beyond 256 bytes, so AddressSanitizer
 * still sees a kernel that reads or writes past the block. */
static inline cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (cudaError_t e = tri_emu_capture_refusal())
        return e;
    size_t n = (bytes + 255) / 256 * 256, huge = (size_t)2 << 20;
    if (posix_memalign(p, n >= huge ? huge : 256, n ? n : 256) != 0) {
        *p = NULL;
        return tri_emu_error(cudaErrorMemoryAllocation);
    }
    if (n >= huge)
        (void)madvise(*p, n, MADV_HUGEPAGE);
    memset(*p, 0xff, n);
    return cudaSuccess;
}

static inline cudaError_t cudaFree(void *p)
{
    if (cudaError_t e = tri_emu_capture_refusal())
        return e;
    free(p);
    return cudaSuccess;
}

static inline cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return cudaMalloc(p, bytes);
}

static inline cudaError_t cudaFreeHost(void *p)
{
    if (cudaError_t e = tri_emu_capture_refusal())
        return e;
    free(p);
    return cudaSuccess;
}

/* At once, with memcpy (or recorded, while stream captures): overlapping ranges are undefined for
 * cudaMemcpyAsync too (the sanitizers report them here). */
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                          cudaStream_t stream)
{
    (void)kind;
    if (bytes)
        tri_emu_enqueue(stream, [=] { memcpy(dst, src, bytes); });
    return cudaSuccess;
}

static inline cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream)
{
    if (bytes)
        tri_emu_enqueue(stream, [=] { memset(dst, value, bytes); });
    return cudaSuccess;
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = (cudaStream_t)calloc(1, sizeof **s);
    return tri_emu_error(*s ? cudaSuccess : cudaErrorMemoryAllocation);
}

static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    delete s->capture;
    free(s);
    return cudaSuccess;
}

static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return tri_emu_capture_refusal();
}

static inline cudaError_t cudaStreamQuery(cudaStream_t s)
{
    (void)s;
    return tri_emu_capture_refusal();
}

static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = (cudaEvent_t)calloc(1, sizeof **e);
    return tri_emu_error(*e ? cudaSuccess : cudaErrorMemoryAllocation);
}

static inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)s;
    e->recorded = 1;
    return cudaSuccess;
}

/* The work before an event has always run: complete (a query of an event never recorded is too). */
static inline cudaError_t cudaEventQuery(cudaEvent_t e)
{
    (void)e;
    return tri_emu_capture_refusal();
}

static inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return tri_emu_capture_refusal();
}

/* ---- stream capture and graphs (the top comment says what is emulated) ---- */

/* Starts recording s's work into a new graph; one capture per thread at a time. */
static inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    (void)mode; /* every mode is emulated as thread-local: the mode cuda/ asks for */
    if (s->capture || tri_emu_capturing)
        return tri_emu_error(cudaErrorIllegalState);
    s->capture = new tri_emu_graph;
    s->invalidated = false;
    tri_emu_capturing = s;
    return cudaSuccess;
}

/* Ends s's capture: *graph is the recorded work, or NULL (cudaErrorStreamCaptureInvalidated) when a
 * refused call invalidated the capture. */
static inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    *graph = NULL;
    if (!s->capture || tri_emu_capturing != s)
        return tri_emu_error(cudaErrorIllegalState);
    tri_emu_capturing = nullptr;
    if (s->invalidated) {
        delete s->capture;
        s->capture = NULL;
        return tri_emu_error(cudaErrorStreamCaptureInvalidated);
    }
    *graph = s->capture;
    s->capture = NULL;
    return cudaSuccess;
}

static inline cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status)
{
    *status = !s->capture ? cudaStreamCaptureStatusNone
              : s->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

/* The number of nodes (nodes NULL: only the count, as the code asks). */
static inline cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *count)
{
    if (nodes)
        return tri_emu_error(cudaErrorInvalidValue);
    *count = g->nodes.size();
    return cudaSuccess;
}

static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    if (cudaError_t e = tri_emu_capture_refusal())
        return e;
    *exec = new tri_emu_graph_exec{g->nodes};
    return cudaSuccess;
}

/* The graph's work in capture order, on s (recorded as one node while s captures). */
static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    tri_emu_enqueue(s, [exec] {
        for (const std::function<void()> &node : exec->nodes)
            node();
    });
    return cudaSuccess;
}

static inline cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}

static inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return cudaSuccess;
}

#endif
