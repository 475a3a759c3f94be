/* cuda/cuda_internal.h - what the files of the CUDA backend share (C and CUDA C++).
 *
 * The device state behind tri_device.impl, the checked-call macros that turn CUDA and cuBLASLt
 * return codes into Trident statuses (TRI_ERR with the failing call's text, its error name and
 * message; no macro hides a return), the stream wait that lets the NCCL comm watch for
 * asynchronous errors and time-outs, and the per-family op functions the ops table points to.
 * Not a public header: tools and tests use cuda/device_cuda.h and cuda/comm_nccl.h. */
#ifndef TRIDENT_CUDA_CUDA_INTERNAL_H
#define TRIDENT_CUDA_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdbool.h>

#include "engine/core/status.h"
#include "engine/device/device.h"

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
#define TRI_CUDA_MAX_PARTIALS 65536                 /* chunk sums of one reduction (doubles) */
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
} tri_cuda;

static inline tri_cuda *tri_cuda_of(tri_device *d)
{
    return (tri_cuda *)d->impl;
}

/* Records a failed CUDA runtime / cuBLASLt call ("call failed: name: message") as TRI_EDEVICE
 * (TRI_ENOMEM for allocation failures); TRI_OK on success. */
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
 * second pass of the chunked column sums (cuda/kernels/colsum.kern.h, launched from cuda/matmul.cu). */
int tri_cuda_col_chunks_finish(tri_cuda *cu, tri_tensor acc, const float *part, int64_t n_chunks, int64_t C);

/* ---- the ops, one family per .cu (contracts in engine/device/device.h) ---- */
int tri_cuda_fill(tri_device *d, tri_tensor x, float value);
int tri_cuda_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b);
int tri_cuda_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x);
int tri_cuda_scale(tri_device *d, tri_tensor x, float s);
int tri_cuda_sum_squares(tri_device *d, tri_tensor out, tri_tensor x);
int tri_cuda_sum_squares_multi(tri_device *d, tri_tensor out, const tri_tensor *xs, const int64_t *slots, int n);
int tri_cuda_fixed_accumulate(tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad);
int tri_cuda_fixed_to_float(tri_device *d, tri_tensor out, tri_tensor acc, int bits);
int tri_cuda_add_i64(tri_device *d, tri_tensor y, tri_tensor x);
int tri_cuda_fixed_sum_squares(tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad);
int tri_cuda_count_nonfinite(tri_device *d, tri_tensor out, tri_tensor x);
int tri_cuda_matmul(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias,
                    bool trans_a, bool trans_b, float beta);
int tri_cuda_bias_backward(tri_device *d, tri_tensor dbias, tri_tensor dout);
int tri_cuda_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                               tri_tensor inp, tri_tensor w, tri_tensor b);
int tri_cuda_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db,
                                tri_tensor dout, tri_tensor inp, tri_tensor w, tri_tensor mean,
                                tri_tensor rstd);
int tri_cuda_add_layernorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                   tri_tensor a, tri_tensor b, tri_tensor w, tri_tensor bias);
int tri_cuda_add_rmsnorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor rstd, tri_tensor a,
                                 tri_tensor b, tri_tensor w, float eps);
int tri_cuda_attention_forward(tri_device *d, tri_tensor out, tri_tensor att, tri_tensor qkv);
int tri_cuda_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout,
                                tri_tensor qkv, tri_tensor att);
int tri_cuda_flash_attention_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv);
int tri_cuda_flash_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                      tri_tensor qkv, tri_tensor out, tri_tensor lse);
int tri_cuda_rmsnorm_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps);
int tri_cuda_rmsnorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp,
                              tri_tensor w, tri_tensor rstd);
int tri_cuda_swiglu_forward(tri_device *d, tri_tensor out, tri_tensor gate_up);
int tri_cuda_swiglu_backward(tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout);
int tri_cuda_rope_forward(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                          int64_t row0);
int tri_cuda_rope_backward(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                           int64_t row0);
int tri_cuda_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp);
int tri_cuda_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout);
int tri_cuda_embedding_forward(tri_device *d, tri_tensor out, tri_tensor tokens, tri_tensor wte,
                               int64_t vocab_start);
int tri_cuda_embedding_backward(tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                                int64_t vocab_start);
int tri_cuda_position_forward(tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0);
int tri_cuda_position_backward(tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T,
                               int64_t row0);
int tri_cuda_ce_row_max(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid);
int tri_cuda_ce_sumexp_target(tri_device *d, tri_tensor stats, tri_tensor logits, tri_tensor maxes,
                              tri_tensor targets, int64_t vocab_start, int64_t V_valid);
int tri_cuda_ce_loss(tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats);
int tri_cuda_ce_backward(tri_device *d, tri_tensor dlogits, tri_tensor logits, tri_tensor maxes,
                         tri_tensor stats, tri_tensor targets, int64_t vocab_start, int64_t V_valid,
                         float dloss);
int tri_cuda_ce_fused(tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                      int64_t V_valid, float dloss);
int tri_cuda_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                   const tri_adamw_hparams *hp);
int tri_cuda_adamw_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp);

#ifdef __cplusplus
}
#endif

#endif
