/* engine/device/device.h - the device interface: where math runs.
 *
 * A backend (CPU here, CUDA in cuda/) fills a table of function pointers, after ggml's backend
 * vtable: memory slots written here, and one slot per op of engine/device/ops_list.h, the one list
 * of the ops (with their contracts) that the slots, the wrappers' declarations and both backends'
 * tables are generated from. Callers use the tri_op_* wrappers, which check shapes and dtypes once
 * and then dispatch; backends may assume checked arguments. Ops on one device run in program order (the CPU
 * backend synchronously, CUDA on one stream). Tensor data is device memory: the host reads it only
 * through tri_device_copy_to_host. Parallel code (TP, PP, ZeRO, checkpoints) calls only these ops
 * and the comm ops, so it is written once for every backend.
 *
 * Shapes use llm.c's letters: N rows (= B*T tokens, or a sequence shard of them), C channels,
 * OC output channels, NH heads, HS = C/NH head size, V_l a vocab shard. "+=" marks ops that
 * accumulate into their output (gradients accumulate over micro-batches). Every op returns
 * TRI_OK or a negative status with a message (engine/core/status.h).
 *
 * Precision (bf16 mixed precision, Micikevicius et al. 2018; Megatron-LM's --bf16): every floating
 * argument may be fp32 or bf16, each independently, unless its comment says f32 - layernorm's
 * mean/rstd, cross-entropy's maxes/stats/losses, the outputs of sum_squares and count_nonfinite,
 * every AdamW argument (master weights, gradients and moments stay fp32) and the fixed-point ops.
 * matmul's a and b share a dtype and its bias has c's. An op computes in fp32 whatever the storage:
 * it widens each element it reads (exactly) and rounds each element it writes to nearest even
 * (engine/core/math.h tri_load / tri_store); an accumulating op (+=) reads its output the same way.
 * A backend without native bf16 (device->native_bf16 false: the CPU backend) gets these semantics
 * from the wrappers, which hand it fp32 copies of the bf16 arguments and round the written ones
 * back, so the CPU backend is the reference the CUDA kernels are compared with. */
#ifndef TRIDENT_ENGINE_DEVICE_DEVICE_H
#define TRIDENT_ENGINE_DEVICE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/core/math.h"
#include "engine/core/tensor.h"
#include "engine/device/ops/attention_math.h" /* tri_flash_dims, for tri_flash_dims_of */
#include "engine/device/ops/moe_router_math.h" /* TRI_MOE_* score functions and drop policies, tri_moe_capacity */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_device tri_device;

/* Hyper-parameters of one AdamW update (Loshchilov & Hutter 2019, decoupled weight decay). */
typedef struct tri_adamw_hparams {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;   /* 0 for parameters excluded from decay */
    float grad_scale;     /* multiplies every gradient first (global-norm clipping) */
    int64_t step;         /* 1-based, for bias correction */
    int64_t freeze_step;  /* 0: v always updates; N > 0: from step N + 1 on, v is held and its bias
                             correction is 1 - beta2^N (1-bit Adam's compression stage, Tang et al.
                             2021 §3); adamw and adamw_multi only */
} tri_adamw_hparams;

/* One tensor of a multi-tensor AdamW (tri_op_adamw_multi): fp32 param, grad, m and v of equal
 * size, and the weight decay of its parameter. */
typedef struct tri_adamw_piece {
    tri_tensor param, grad, m, v;
    float weight_decay;
} tri_adamw_piece;

/* Hyper-parameters of a momentum update (tri_op_sgd_multi): SGD with momentum as torch.optim.SGD
 * (dampening 0), or LARS (You et al. 2017, Algorithm 1) when lars is set, whose learning rate is
 * multiplied per tensor by its trust ratio. */
typedef struct tri_sgd_hparams {
    float lr;
    float momentum;       /* mu */
    float grad_scale;     /* multiplies every gradient first (global-norm clipping) */
    bool nesterov;
    bool lars;
} tri_sgd_hparams;

/* One tensor of a multi-tensor momentum update: fp32 param, grad and momentum buffer of equal size,
 * its weight decay, and the index of its trust ratio in the ratios tensor (-1: ratio 1, the
 * parameters excluded from the trust ratio: biases and norm weights). */
typedef struct tri_sgd_piece {
    tri_tensor param, grad, buf;
    float weight_decay;
    int64_t ratio;
} tri_sgd_piece;

/* Which layer-wise trust ratio tri_op_trust_ratio computes (engine/device/ops/optimizer_math.h). */
typedef enum { TRI_TRUST_LARS = 0, TRI_TRUST_LAMB = 1 } tri_trust_kind;

typedef struct tri_trust_hparams {
    tri_trust_kind kind;
    float eta;            /* LARS trust coefficient (LAMB: unused) */
    float weight_decay;   /* LARS: the decay in the ratio's denominator (LAMB: unused) */
    float u_scale;        /* the second norm is multiplied by this (LARS: the clipping scale) */
} tri_trust_hparams;

typedef struct tri_device_ops {
    const char *name;
    /* memory */
    int (*alloc)(tri_device *d, void **ptr, size_t bytes);
    void (*free)(tri_device *d, void *ptr);
    int (*copy_to_host)(tri_device *d, void *host, const void *src, size_t bytes);
    int (*copy_from_host)(tri_device *d, void *dst, const void *host, size_t bytes);
    int (*copy)(tri_device *d, void *dst, const void *src, size_t bytes);
    int (*sync)(tri_device *d);
    void (*destroy)(tri_device *d);
    /* the ops, one slot per row of engine/device/ops_list.h (optional rows may be NULL) */
#define TRI_OP(name, params) int(*name) params;
#include "engine/device/ops_list.h"
    /* host staging memory (CUDA: page-locked, so copies to it run at full bandwidth) */
    int (*host_alloc)(tri_device *d, void **ptr, size_t bytes);
    void (*host_free)(tri_device *d, void *ptr);
    /* optional (NULL: the wrapper copies at once with copy_to_host) */
    int (*copy_to_host_async)(tri_device *d, void *host, const void *src, size_t bytes);
    /* optional (NULL: the device cannot capture; the CPU): graphs of queued work (CUDA graphs) */
    int (*capture_begin)(tri_device *d);
    int (*capture_end)(tri_device *d, void **graph, int64_t *nodes);
    int (*graph_launch)(tri_device *d, void *graph);
    void (*graph_free)(tri_device *d, void *graph);
} tri_device_ops;

/* Per-op time and call counts, kept when profiling is on (tri_device_profile_enable). */
#define TRI_PROFILE_SLOTS 64
typedef struct tri_op_profile {
    const char *name[TRI_PROFILE_SLOTS];
    double seconds[TRI_PROFILE_SLOTS];
    int64_t calls[TRI_PROFILE_SLOTS];
} tri_op_profile;

/* What tri_device_alloc has handed out, for the measured memory peak. */
typedef struct tri_alloc_record {
    void *ptr;
    size_t bytes;
} tri_alloc_record;

/* The most bf16 arguments of one op that a backend without native bf16 is given fp32 copies of. */
#define TRI_WIDEN_MAX 8

struct tri_device {
    const tri_device_ops *ops;
    tri_op_profile *profile;  /* NULL unless profiling */
    size_t allocated_bytes;   /* live device memory from tri_device_alloc */
    size_t peak_bytes;        /* the most that was live at once */
    tri_alloc_record *records;
    int n_records, cap_records;
    void *impl;              /* backend state */
    int threads;             /* CPU: threads of the OpenMP loops (0: OpenMP's default). BLAS threads
                                are process-wide: tools set them (tools/cli/backend.h). CUDA: unused */
    int ordinal;             /* CUDA device index; CPU: 0 */
    bool native_bf16;        /* the backend's ops read and write bf16 themselves; otherwise the
                                wrappers widen bf16 arguments to fp32 copies around each op */
    struct {                 /* those fp32 copies' buffers, kept from op to op (device.c, widen) */
        void *data;
        size_t bytes;
    } widen[TRI_WIDEN_MAX];
    /* Host waits: tri_device_copy_to_host and tri_device_sync after ops or asynchronous copies were
     * queued (a wait with nothing queued since the last one is not counted: it stalls nothing). A
     * trainer step waits once (engine/train/train.h). */
    bool queued;
    uint64_t waits;
    bool capturing;          /* between tri_device_capture_begin and _end */
    /* Exact weight gradients (deterministic mode, engine/device/ops/exact_grads.c): a gradient
     * argument of dtype i64 receives fixed-point sums through this scratch; set by the trainer around
     * each pass (tri_device_set_exact_grads). */
    struct {
        tri_tensor scratch;  /* f32 (>= the largest gradient one op writes) the chunk's fp32 gradient */
        tri_tensor bad;      /* f32 (1): contributions outside the fixed-point range, counted */
        int bits;            /* fraction bits of the fixed point (engine/train/zero.h TRI_FIXED_BITS) */
    } exact;
};

/* The CPU backend: OpenBLAS sgemm for every matmul, OpenMP loops elsewhere, `threads` threads
 * (0 = OpenMP's default). Returns TRI_ENOMEM on failure. */
int tri_device_cpu_create(tri_device **out, int threads);

/* Deterministic mode: where ops that are given an int64 gradient (exact fixed-point sums, 2^-bits
 * units) compute each 64-row chunk's fp32 gradient (scratch, f32, at least as long as the largest such
 * gradient) before adding it exactly, and where they count contributions that do not fit (bad, f32
 * (1)). See engine/device/ops/exact_grads.c. An absent scratch turns it off (int64 gradients are then
 * refused). TRI_EINVAL for a wrong dtype or bits outside [0, 60]. */
int tri_device_set_exact_grads(tri_device *d, tri_tensor scratch, tri_tensor bad, int bits);

/* Destroys any backend's device (NULL is ignored). */
void tri_device_destroy(tri_device *d);

/* Starts timing every op (synchronising the device after each, so times are exact but the device
 * runs without overlap). TRI_ENOMEM on failure. */
int tri_device_profile_enable(tri_device *d);
/* Prints the ops by total time, with calls and share, to f. */
void tri_device_profile_report(const tri_device *d, FILE *f);

/* ---- memory: sizes in bytes; pointers are device memory unless named host ----
 * The device counts live bytes and their peak (allocated_bytes, peak_bytes): every device buffer
 * comes from tri_device_alloc, so the peak is the measured figure the memory plan predicts. */
int tri_device_alloc(tri_device *d, void **ptr, size_t bytes);
void tri_device_free(tri_device *d, void *ptr);
int tri_device_copy_to_host(tri_device *d, void *host, tri_tensor src);
int tri_device_copy_from_host(tri_device *d, tri_tensor dst, const void *host);
int tri_device_sync(tri_device *d);
/* Starts copying src to host in the order of the device's work, without waiting: host (from
 * tri_device_host_alloc, page-locked on CUDA) holds the values only after the next tri_device_sync,
 * and src must not be changed by the host meanwhile (later device ops may: they run after the copy).
 * A backend without asynchronous copies (the CPU) copies at once. So a step reads values it needs
 * only at its end (the micro-batches' losses) without a host sync per micro-batch. */
int tri_device_copy_to_host_async(tri_device *d, void *host, tri_tensor src);
/* Host memory for staging device data (asynchronous checkpoints): plain on the CPU, page-locked
 * (pinned) on CUDA. Not device memory: outside the planned and measured peak. TRI_ENOMEM on
 * failure; bytes 0 gives NULL. Free with tri_device_host_free (NULL is ignored). */
int tri_device_host_alloc(tri_device *d, void **ptr, size_t bytes);
void tri_device_host_free(tri_device *d, void *ptr);

/* ---- graphs: work captured once and replayed (CUDA graphs; Megatron-LM's --enable-cuda-graph) ----
 * Between tri_device_capture_begin and tri_device_capture_end the device's ops and copies are
 * recorded, not run: the graph replays them, with the same arguments (the same buffers, the same
 * scalars), on each tri_device_graph_launch, in the device's order. Nothing inside may wait for the
 * device, allocate or read values on the host: the backend fails such a call (CUDA:
 * cudaErrorStreamCaptureUnsupported) and capture_end then reports the capture invalid. */
typedef struct tri_device_graph tri_device_graph;
/* Whether d can capture graphs (false for the CPU backend). */
bool tri_device_can_capture(const tri_device *d);
/* Starts recording d's work. TRI_ENOTSUP when the device cannot capture. */
int tri_device_capture_begin(tri_device *d);
/* Ends the recording: *out is the graph, ready to launch (*nodes its node count when nodes is not
 * NULL), or NULL with the backend's error when the capture was invalidated. Always ends it. */
int tri_device_capture_end(tri_device *d, tri_device_graph **out, int64_t *nodes);
/* Queues g's work on d, in order with the ops around it (no wait). */
int tri_device_graph_launch(tri_device *d, tri_device_graph *g);
/* Frees g (NULL is ignored). */
void tri_device_graph_free(tri_device *d, tri_device_graph *g);

/* ---- the ops: one wrapper per row of engine/device/ops_list.h, whose comments are the contracts ----
 * tri_op_<name> takes the row's params: it checks them (TRI_EINVAL naming the op and argument) and
 * runs the backend's slot, or, for an optional row the backend lacks, the ops that define it. */
#define TRI_OP(name, params) int tri_op_##name params;
#include "engine/device/ops_list.h"

/* ---- wrappers that are no backend slot ---- */
/* Every byte of x set to zero, any dtype (0.0f and integer 0 are both all-zero bits): the fill op
 * on x's bytes as fp32 (bf16 where they are not whole aligned floats). */
int tri_op_zero(tri_device *d, tri_tensor x);
/* dst = src (same numel and dtype): the backend's memmove-like copy. */
int tri_op_copy(tri_device *d, tri_tensor dst, tri_tensor src);
/* Whether d runs tri_op_adamw_fused_multi as one pass (its slot is filled: CPU, CUDA), rather than
 * as the wrapper's adamw_multi, convert and fill: the trainer fuses AdamW's passes only then. */
bool tri_device_has_adamw_fused(const tri_device *d);

/* ---- helpers of the ops' backends and callers ---- */
/* The dims of a checked fused attention problem (for backends): qkv (B, T, W), out (.., C), lse (B, NH, T). */
static inline tri_flash_dims tri_flash_dims_of(tri_tensor qkv, tri_tensor out, tri_tensor lse)
{
    tri_flash_dims f;
    int64_t C = out.shape[out.ndim - 1];
    f.B = qkv.shape[0], f.T = qkv.shape[1], f.NH = lse.shape[1], f.HS = C / f.NH;
    f.NH_kv = (qkv.shape[2] - C) / (2 * f.HS);
    return f;
}
/* The value of 6 limbs (each a non-negative sum of 32-bit pieces) as a double, scaled by 2^-scale:
 * carries are propagated exactly first, so equal integers give equal doubles however split. */
double tri_fixed_limbs_value(const int64_t limbs[6], int scale);

#ifdef __cplusplus
}
#endif

#endif
