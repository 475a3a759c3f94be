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
 * them (it does not). */
#ifndef TRIDENT_TESTS_CUDA_EMU_CUDA_RUNTIME_H
#define TRIDENT_TESTS_CUDA_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600,
} cudaError_t;

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

typedef struct tri_emu_stream {
    int unused;
} *cudaStream_t;
typedef struct tri_emu_event {
    int recorded;
} *cudaEvent_t;

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
    }
    return "cudaErrorUnknown";
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "emulated error";
}

static inline cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

static inline cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}

static inline cudaError_t cudaSetDevice(int ordinal)
{
    return ordinal == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

static inline cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int ordinal)
{
    if (ordinal != 0)
        return cudaErrorInvalidDevice;
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
        return cudaErrorInvalidDevice;
    *value = attr == cudaDevAttrClockRate ? 1000000 : 232448;
    return cudaSuccess;
}

/* 256-byte aligned as cudaMalloc's, filled with 0xff bytes (NaN floats, bf16 NaN, -1 integers). */
static inline cudaError_t cudaMalloc(void **p, size_t bytes)
{
    size_t n = (bytes + 255) / 256 * 256;
    *p = aligned_alloc(256, n ? n : 256);
    if (!*p)
        return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n);
    return cudaSuccess;
}

static inline cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

static inline cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return cudaMalloc(p, bytes);
}

static inline cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

/* At once, with memcpy: overlapping ranges are undefined for cudaMemcpyAsync too (the sanitizers
 * report them here). */
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                          cudaStream_t stream)
{
    (void)kind, (void)stream;
    if (bytes)
        memcpy(dst, src, bytes);
    return cudaSuccess;
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = (cudaStream_t)calloc(1, sizeof **s);
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

static inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

static inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

static inline cudaError_t cudaStreamQuery(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = (cudaEvent_t)calloc(1, sizeof **e);
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
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
    return cudaSuccess;
}

static inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}

#endif
