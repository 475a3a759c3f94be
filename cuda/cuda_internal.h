/* cuda/cuda_internal.h - what the files of the CUDA backend share (C and CUDA C++).
 *
 * The device state behind tri_device.impl, the checked-call macros that turn CUDA and cuBLASLt
 * return codes into Trident statuses (TRI_ERR with the failing call's text, its error name and
 * message; no macro hides a return), the stream wait that lets the NCCL comm watch for
 * asynchronous errors and time-outs, and the per-family op functions the ops table points to
 * (declared from engine/device/ops_list.h).
 * Not a public header: tools and tests use cuda/device_cuda.h and cuda/comm_nccl.h. */
#ifndef TRIDENT_CUDA_CUDA_INTERNAL_H
#define TRIDENT_CUDA_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdbool.h>

#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/launch_shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A check run while the host waits for the device's stream (tri_cuda_wait); returns TRI_OK or a
 * status that ends the wait (the NCCL comm's asynchronous error and time-out check). */
typedef struct tri_cuda_watch {
    int (*fn)(void *ctx);
    void *ctx;
} tri_cuda_watch;

#define TRI_CUDA_MAX_WATCHES 32
#define TRI_CUDA_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt workspace (32 MiB, Hopper's need) */
#define TRI_CUDA_UPLOAD_SLOTS 8                     /* page-locked staging slots of small uploads */
#define TRI_CUDA_UPLOAD_SLOT_BYTES ((size_t)1 << 20) /* the largest upload that does not wait (1 MiB) */

typedef struct tri_cuda_gemm_cache tri_cuda_gemm_cache;

typedef struct tri_cuda {
    int ordinal;
    cudaStream_t stream;          /* the one compute stream: every op runs on it, in order */
    cublasLtHandle_t lt;
    void *workspace;              /* cuBLASLt workspace, also the bounce buffer of overlapping copies */
    size_t workspace_bytes;
    double *partials;             /* TRI_CUDA_MAX_PARTIALS chunk sums of sum_squares / count_nonfinite */
    tri_cuda_gemm_cache *gemm;    /* cuBLASLt plans (descriptors + heuristic's algorithm) per shape */
    bool simple;                  /* run the simple kernel forms everywhere (tests compare variants) */
    size_t smem_optin;            /* bytes of shared memory a block may opt in to (this device's limit) */
    char *upload;                 /* page-locked, TRI_CUDA_UPLOAD_SLOTS x TRI_CUDA_UPLOAD_SLOT_BYTES: small
                                   * uploads are copied here and sent without a wait (cuda_copy_from_host) */
    cudaEvent_t upload_done[TRI_CUDA_UPLOAD_SLOTS]; /* recorded after each slot's last copy (one never
                                                     * recorded counts as complete) */
    int upload_next;              /* the slot the next small upload takes (round robin) */
    tri_cuda_watch watch[TRI_CUDA_MAX_WATCHES];
    int n_watch;
    int64_t flash_kv_tiled;       /* calls of the kv attention ops that took the tiled kernels (tests) */
} tri_cuda;

static inline tri_cuda *tri_cuda_of(tri_device *d)
{
    return (tri_cuda *)d->impl;
}

/* Records a failed CUDA runtime / cuBLASLt call ("call failed: name: message") as TRI_EDEVICE
 * (TRI_ENOMEM for allocation failures) and resets the thread's last CUDA error, so that the next
 * launch's check does not report it again; TRI_OK on success. */
int tri_cuda_check(cudaError_t err, const char *call, const char *file, int line);
int tri_cublas_check(cublasStatus_t st, const char *call, const char *file, int line);
#define TRI_CUDA(call) tri_cuda_check((call), #call, __FILE__, __LINE__)
#define TRI_CUBLAS(call) tri_cublas_check((call), #call, __FILE__, __LINE__)

/* Loads cuBLASLt (once per process; cuda/cublaslt_lazy.c): TRI_OK, or TRI_EDEVICE naming the library
 * and why it could not be loaded. Device creation calls it before any cuBLASLt call. */
int tri_cublaslt_load(void);

/* Waits until the stream has run everything queued, polling the watches meanwhile. */
int tri_cuda_wait(tri_cuda *c);
/* Waits until the work recorded by ev is complete (not the work queued after it), likewise. */
int tri_cuda_wait_event(tri_cuda *c, cudaEvent_t ev);
/* Adds / removes a watch (TRI_EINVAL when the table is full). */
int tri_cuda_watch_add(tri_device *d, int (*fn)(void *ctx), void *ctx);
void tri_cuda_watch_remove(tri_device *d, void *ctx);

/* cuBLASLt, row-major: c = alpha op(a) op(b) + beta c (+ bias(N) when bias != NULL, beta 0), batch
 * matrices at the given element strides; lda/ldb/ldc are row strides in elements (matmul.cu).
 * a and b are bf16 when ab_bf16 (else fp32), c and the bias bf16 when c_bf16; fp32 accumulation. */
typedef struct tri_cuda_gemm_args {
    int64_t M, N, K;
    bool trans_a, trans_b;
    bool ab_bf16, c_bf16;
    const void *a, *b;
    void *c;
    const void *bias;
    int64_t lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c; /* elements between batch matrices */
    int batch;
    float alpha, beta;
} tri_cuda_gemm_args;
int tri_cuda_gemm(tri_cuda *c, const tri_cuda_gemm_args *g);
int tri_cuda_gemm_cache_create(tri_cuda_gemm_cache **out);
void tri_cuda_gemm_cache_destroy(tri_cuda_gemm_cache *cache);

/* acc(C) (fp32 or bf16) += the chunk sums part(n_chunks, C) in chunk order, a thread per column: the
 * second pass of the chunked column sums (cuda/matmul/colsum.kern.h, launched from cuda/matmul/matmul.cu). */
int tri_cuda_col_chunks_finish(tri_cuda *cu, tri_tensor acc, const float *part, int64_t n_chunks, int64_t C);

/* CUDA graphs of the stream (cuda/device_graph.cu): the device's capture_begin, capture_end,
 * graph_launch and graph_free slots (engine/device/device.h). */
int tri_cuda_capture_begin(tri_device *d);
int tri_cuda_capture_end(tri_device *d, void **graph, int64_t *nodes);
int tri_cuda_graph_launch(tri_device *d, void *graph);
void tri_cuda_graph_free(tri_device *d, void *graph);

/* ---- the ops: tri_cuda_<op> for every row of engine/device/ops_list.h (its params and contract),
 * defined in the family's folder (cuda/<family>/, one .cu per op or two); the ops table
 * (device_cuda.cu) points to them by name ---- */
#define TRI_OP(name, params) int tri_cuda_##name params;
#include "engine/device/ops_list.h"

#ifdef __cplusplus
}
#endif

#endif
