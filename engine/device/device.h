/* engine/device/device.h - the device interface: where math runs.
 *
 * A backend (CPU here, CUDA in cuda/) fills a table of function pointers, after ggml's backend
 * vtable. Callers use the tri_op_* wrappers below, which check shapes and dtypes once and then
 * dispatch; backends may assume checked arguments. Ops on one device run in program order (the CPU
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
} tri_adamw_hparams;

/* One tensor of a multi-tensor AdamW (tri_op_adamw_multi): fp32 param, grad, m and v of equal
 * size, and the weight decay of its parameter. */
typedef struct tri_adamw_piece {
    tri_tensor param, grad, m, v;
    float weight_decay;
} tri_adamw_piece;

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
    /* element-wise and reductions */
    int (*fill)(tri_device *d, tri_tensor x, float value);
    int (*add)(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b);
    int (*axpy)(tri_device *d, tri_tensor y, float alpha, tri_tensor x);
    int (*scale)(tri_device *d, tri_tensor x, float s);
    int (*sum_squares)(tri_device *d, tri_tensor out, tri_tensor x);
    int (*count_nonfinite)(tri_device *d, tri_tensor out, tri_tensor x);
    /* optional (NULL: the wrapper calls sum_squares piece by piece) */
    int (*sum_squares_multi)(tri_device *d, tri_tensor out, const tri_tensor *xs, const int64_t *slots, int n);
    /* matmul */
    int (*matmul)(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias,
                  bool trans_a, bool trans_b, float beta);
    int (*bias_backward)(tri_device *d, tri_tensor dbias, tri_tensor dout);
    /* layers */
    int (*layernorm_forward)(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                             tri_tensor inp, tri_tensor w, tri_tensor b);
    int (*layernorm_backward)(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db,
                              tri_tensor dout, tri_tensor inp, tri_tensor w, tri_tensor mean,
                              tri_tensor rstd);
    int (*attention_forward)(tri_device *d, tri_tensor out, tri_tensor att, tri_tensor qkv);
    int (*attention_backward)(tri_device *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout,
                              tri_tensor qkv, tri_tensor att);
    int (*flash_attention_forward)(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv);
    int (*flash_attention_backward)(tri_device *d, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                    tri_tensor qkv, tri_tensor out, tri_tensor lse);
    int (*rmsnorm_forward)(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps);
    int (*rmsnorm_backward)(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp,
                            tri_tensor w, tri_tensor rstd);
    int (*swiglu_forward)(tri_device *d, tri_tensor out, tri_tensor gate_up);
    int (*swiglu_backward)(tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout);
    int (*rope_forward)(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                        int64_t row0);
    int (*rope_backward)(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                         int64_t row0);
    int (*gelu_forward)(tri_device *d, tri_tensor out, tri_tensor inp);
    int (*gelu_backward)(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout);
    int (*embedding_forward)(tri_device *d, tri_tensor out, tri_tensor tokens, tri_tensor wte,
                             int64_t vocab_start);
    int (*embedding_backward)(tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                              int64_t vocab_start);
    int (*position_forward)(tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0);
    int (*position_backward)(tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T, int64_t row0);
    int (*ce_row_max)(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid);
    int (*ce_sumexp_target)(tri_device *d, tri_tensor stats, tri_tensor logits, tri_tensor maxes,
                            tri_tensor targets, int64_t vocab_start, int64_t V_valid);
    int (*ce_loss)(tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats);
    int (*ce_backward)(tri_device *d, tri_tensor dlogits, tri_tensor logits, tri_tensor maxes,
                       tri_tensor stats, tri_tensor targets, int64_t vocab_start, int64_t V_valid,
                       float dloss);
    int (*ce_fused)(tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                    int64_t V_valid, float dloss);
    int (*adamw)(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                 const tri_adamw_hparams *hp);
    /* optional (NULL: the wrapper calls adamw piece by piece) */
    int (*adamw_multi)(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp);
    /* fixed point (deterministic mode) */
    int (*fixed_accumulate)(tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad);
    int (*fixed_to_float)(tri_device *d, tri_tensor out, tri_tensor acc, int bits);
    int (*add_i64)(tri_device *d, tri_tensor y, tri_tensor x);
    int (*fixed_sum_squares)(tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad);
    /* precision */
    int (*convert)(tri_device *d, tri_tensor dst, tri_tensor src);
    /* host staging memory (CUDA: page-locked, so copies to it run at full bandwidth) */
    int (*host_alloc)(tri_device *d, void **ptr, size_t bytes);
    void (*host_free)(tri_device *d, void *ptr);
    /* optional (NULL: the wrapper copies at once with copy_to_host) */
    int (*copy_to_host_async)(tri_device *d, void *host, const void *src, size_t bytes);
    /* optional fusions (NULL: the wrapper runs the ops they fuse, in order, which defines their bits) */
    int (*add_layernorm_forward)(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                 tri_tensor a, tri_tensor b, tri_tensor w, tri_tensor bias);
    int (*add_rmsnorm_forward)(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor rstd, tri_tensor a,
                               tri_tensor b, tri_tensor w, float eps);
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
};

/* The CPU backend: OpenBLAS sgemm for every matmul, OpenMP loops elsewhere, `threads` threads
 * (0 = OpenMP's default). Returns TRI_ENOMEM on failure. */
int tri_device_cpu_create(tri_device **out, int threads);

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

/* ---- element-wise: any shape, same numel unless stated ---- */
/* x[i] = value. */
int tri_op_fill(tri_device *d, tri_tensor x, float value);
/* Every byte of x set to zero, any dtype (0.0f and integer 0 are both all-zero bits). */
int tri_op_zero(tri_device *d, tri_tensor x);
/* dst = src (same numel and dtype). */
int tri_op_copy(tri_device *d, tri_tensor dst, tri_tensor src);
/* dst = src converted to dst's dtype (same numel; fp32 or bf16 each): bf16 -> fp32 is exact,
 * fp32 -> bf16 rounds to nearest even (NaN stays NaN), equal dtypes copy. dst and src do not
 * overlap unless their dtypes are equal. */
int tri_op_convert(tri_device *d, tri_tensor dst, tri_tensor src);
/* out = a + b (out may alias a or b). */
int tri_op_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b);
/* y += alpha * x. */
int tri_op_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x);
/* x *= s. */
int tri_op_scale(tri_device *d, tri_tensor x, float s);
/* out(1) += sum_i x[i]^2, accumulated in double within the call, added to out in fp32
 * (gradient norms). */
int tri_op_sum_squares(tri_device *d, tri_tensor out, tri_tensor x);
/* out(1) += number of NaN or Inf elements of x. */
int tri_op_count_nonfinite(tri_device *d, tri_tensor out, tri_tensor x);
/* Many sums of squares in one call (the gradient norm's; Apex's multi_tensor_l2norm): for k = 0 ..
 * n-1 in order, out[slots[k]] += sum_i xs[k][i]^2, each addition exactly what
 * tri_op_sum_squares(d, out[slots[k]], xs[k]) makes (the same bits), so a backend may run all the
 * tensors in a few launches instead of two each. out fp32 (S); xs fp32 or bf16; the pieces of one
 * slot must be consecutive. TRI_EINVAL naming the piece for a slot outside out, a non-float
 * tensor, or a slot that comes back after another; n 0 does nothing. */
int tri_op_sum_squares_multi(tri_device *d, tri_tensor out, const tri_tensor *xs, const int64_t *slots, int n);

/* ---- matmul ----
 * c(M,N) = op(a) @ op(b) + bias + beta * c, with op(a) (M,K), op(b) (K,N); a and b are seen as
 * matrices (rows = all dims but the last). bias (N) is optional (absent: tri_tensor_none()) and
 * allowed only with beta == 0. With beta == 0, c is write-only (NaN in c does not propagate). Linear layers keep weights (OC, C) as Megatron and llm.c do:
 * forward out = inp @ w^T + b is tri_op_matmul(d, out, inp, w, b, false, true, 0). */
int tri_op_matmul(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias,
                  bool trans_a, bool trans_b, float beta);
/* dbias(OC) += column sums of dout(N, OC). */
int tri_op_bias_backward(tri_device *d, tri_tensor dbias, tri_tensor dout);

/* ---- layernorm (Ba et al. 2016), eps 1e-5 as GPT-2 ----
 * out(N,C) = (inp - mean) * rstd * w + b; mean(N), rstd(N) saved for backward. */
int tri_op_layernorm_forward(tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                             tri_tensor inp, tri_tensor w, tri_tensor b);
/* The residual add fused into the layernorm that follows it (as llm.c's fused residual forward):
 * res(N,C) = a + b, then out, mean, rstd = layernorm_forward(res, w, bias); the same bits as
 * tri_op_add followed by tri_op_layernorm_forward (each res element rounded once to res's dtype and
 * normalised as stored), which is what a backend without the fusion runs. res may alias a or b;
 * out, mean and rstd alias nothing. One pass over a and b instead of writing res and reading it
 * back in a second kernel. TRI_EINVAL naming the argument on a shape or dtype mismatch. */
int tri_op_add_layernorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor mean, tri_tensor rstd,
                                 tri_tensor a, tri_tensor b, tri_tensor w, tri_tensor bias);
/* dinp(N,C) +=, dw(C) +=, db(C) += the gradients given dout(N,C). */
int tri_op_layernorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db,
                              tri_tensor dout, tri_tensor inp, tri_tensor w, tri_tensor mean,
                              tri_tensor rstd);

/* ---- causal multi-head self-attention core (Vaswani et al. 2017, scale 1/sqrt(HS)) ----
 * qkv(B,T,3*C_l) holds [q | k | v], each C_l = NH_l*HS wide, head h at columns h*HS of each part.
 * att(B,NH_l,T,T) receives the softmax probabilities (saved for backward; entries above the
 * diagonal are 0), out(B,T,C_l) the heads' outputs side by side. */
int tri_op_attention_forward(tri_device *d, tri_tensor out, tri_tensor att, tri_tensor qkv);
/* dqkv(B,T,3*C_l) = gradient given dout(B,T,C_l) (overwritten); datt(B,NH_l,T,T) is scratch. */
int tri_op_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout,
                              tri_tensor qkv, tri_tensor att);

/* ---- fused causal attention (FlashAttention-2, Dao 2023; engine/core/math.h for the tiling) ----
 * The same math as attention_forward without the (T, T) matrix: out(B,T,C_l) from qkv(B,T,C_l + 2
 * C_kv) = [q | k | v] (C_kv = C_l: the layout above; C_kv < C_l: grouped-query attention, NH_kv =
 * C_kv / HS key/value heads each serving NH_l / NH_kv query heads: engine/core/math.h
 * tri_flash_dims), and lse(B,NH_l,T) f32, each query row's logsumexp of its scaled scores, saved for
 * the backward. NH_l is lse's dimension 1, HS = C_l / NH_l. B or T 0: nothing to do (TRI_OK). */
int tri_op_flash_attention_forward(tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv);

/* The dims of a checked fused attention problem (for backends): qkv (B, T, W), out (.., C), lse (B, NH, T). */
static inline tri_flash_dims tri_flash_dims_of(tri_tensor qkv, tri_tensor out, tri_tensor lse)
{
    tri_flash_dims f;
    int64_t C = out.shape[out.ndim - 1];
    f.B = qkv.shape[0], f.T = qkv.shape[1], f.NH = lse.shape[1], f.HS = C / f.NH;
    f.NH_kv = (qkv.shape[2] - C) / (2 * f.HS);
    return f;
}
/* dqkv (qkv's shape) = gradient given dout(B,T,C_l) (overwritten), recomputing the probabilities from
 * qkv and lse; out is the forward's output; delta(B,NH_l,T) f32 is scratch (rows' dout . out).
 * Deterministic: no atomics, a fixed order of every sum (engine/core/math.h). */
int tri_op_flash_attention_backward(tri_device *d, tri_tensor dqkv, tri_tensor delta, tri_tensor dout,
                                    tri_tensor qkv, tri_tensor out, tri_tensor lse);

/* ---- RMSNorm (Zhang & Sennrich 2019), as Hugging Face's LlamaRMSNorm ----
 * out(N,C) = (inp * rstd) * w with rstd(N) f32 = 1 / sqrt(mean(inp^2) + eps) (engine/core/math.h's row
 * order), saved for backward. */
int tri_op_rmsnorm_forward(tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps);
/* res(N,C) = a + b, then out, rstd = rmsnorm_forward(res, w, eps): the same bits as tri_op_add
 * followed by tri_op_rmsnorm_forward (see tri_op_add_layernorm_forward; same aliasing rules). */
int tri_op_add_rmsnorm_forward(tri_device *d, tri_tensor res, tri_tensor out, tri_tensor rstd, tri_tensor a,
                               tri_tensor b, tri_tensor w, float eps);
/* dinp(N,C) +=, dw(C) += the gradients given dout(N,C). */
int tri_op_rmsnorm_backward(tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp,
                            tri_tensor w, tri_tensor rstd);

/* ---- SwiGLU (Shazeer 2020), as Hugging Face's LlamaMLP ----
 * out(N,F) = silu(gate) * up where gate_up(N,2F) holds each row's gate (columns 0..F) then up. */
int tri_op_swiglu_forward(tri_device *d, tri_tensor out, tri_tensor gate_up);
/* dgate_up(N,2F) = gradient given dout(N,F) (overwritten). */
int tri_op_swiglu_backward(tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout);

/* ---- rotary position embedding (Su et al. 2021), Hugging Face's rotate_half convention ----
 * In place on x(N, W): the first n_heads heads of HS = 2 cos.cols columns of each row (q then k of
 * a qkv row) are rotated, pair (i, i + HS/2) by the angle of frequency i at the row's position
 * (row0 + n) % T, whose cosine and sine are cos, sin (positions >= T, HS/2) f32. */
int tri_op_rope_forward(tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                        int64_t row0);
/* dx in place: the gradient through the rotation (the rotation by minus the angle). */
int tri_op_rope_backward(tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                         int64_t row0);

/* ---- GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2 ---- */
int tri_op_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp);
/* dinp = gelu'(inp) * dout (overwritten; dinp may alias dout). */
int tri_op_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout);

/* ---- embeddings ----
 * out(N,C) = wte[tokens[n] - vocab_start] for tokens inside this vocab shard wte(V_l,C), else 0
 * (vocab-parallel embedding: the shards' outputs are summed over the TP group afterwards). */
int tri_op_embedding_forward(tri_device *d, tri_tensor out, tri_tensor tokens, tri_tensor wte,
                             int64_t vocab_start);
/* dwte(V_l,C) += dout rows of the tokens inside this shard. */
int tri_op_embedding_backward(tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                              int64_t vocab_start);
/* out(N,C) += wpe[(row0 + n) % T]: row n of out is token row0 + n of a (B*T)-row batch. */
int tri_op_position_forward(tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0);
/* dwpe(n_positions,C) row (row0 + n) % T += dout(N,C) row n. */
int tri_op_position_backward(tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T,
                             int64_t row0);

/* ---- softmax cross-entropy in vocab-parallel pieces (Megatron's VocabParallelCrossEntropy) ----
 * logits(N,V_l) is a vocab shard starting at global id vocab_start; only its first V_valid
 * columns are real tokens (the rest is vocab padding, kept out of the loss). Between the pieces
 * the caller reduces maxes with MAX and stats with SUM over the tensor-parallel group. */
/* maxes(N) = max over the valid columns (-FLT_MAX when V_valid == 0). */
int tri_op_ce_row_max(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid);
/* stats(N,2): [0] = sum exp(logit - max) over valid columns, [1] = the target's logit if the target
 * lies in this shard, else 0. targets(N) are global token ids (i32). */
int tri_op_ce_sumexp_target(tri_device *d, tri_tensor stats, tri_tensor logits, tri_tensor maxes,
                            tri_tensor targets, int64_t vocab_start, int64_t V_valid);
/* losses(N) = log(sumexp) + max - target logit (from the reduced stats). */
int tri_op_ce_loss(tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats);
/* dlogits(N,V_l) = dloss * (softmax - onehot(target)); padded columns 0. dlogits may alias logits
 * (llm.c's fused classifier overwrites the logits with their gradient). */
int tri_op_ce_backward(tri_device *d, tri_tensor dlogits, tri_tensor logits, tri_tensor maxes,
                       tri_tensor stats, tri_tensor targets, int64_t vocab_start, int64_t V_valid,
                       float dloss);
/* The whole classifier loss of rows that hold the whole vocabulary (no vocab-parallel split, so no
 * all-reduce between the pieces), in one op and one pass of a GPU block over each row (llm.c's fused
 * classifier): losses(N) and, when dlogits is present, dlogits(N,V_l) = dloss * (softmax - onehot)
 * with padded columns 0. Exactly the bits of ce_row_max, ce_sumexp_target (vocab_start 0), ce_loss
 * and ce_backward in turn. logits and dlogits are fp32 or bf16; dlogits may alias logits (then of
 * the same dtype), no other overlap. targets(N) i32 in [0, V_valid) for a finite loss (one outside
 * counts as a target logit of 0, as the pieces do). TRI_EINVAL names the argument that is wrong. */
int tri_op_ce_fused(tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                    int64_t V_valid, float dloss);

/* ---- optimizer ----
 * One AdamW step on equal-length 1-d views (fp32): g = grad * grad_scale;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p). */
int tri_op_adamw(tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
                 const tri_adamw_hparams *hp);
/* The same step over many tensors in one call (Apex's multi_tensor_adam): each piece gets exactly
 * what tri_op_adamw(d, param, grad, m, v, hp) with the piece's weight_decay gives it (hp's own
 * weight_decay is not used), so a backend may update them all in a few launches. The pieces must not
 * overlap. TRI_EINVAL naming the piece and tensor as tri_op_adamw would; n 0 does nothing. */
int tri_op_adamw_multi(tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp);

/* ---- fixed point: exact sums in any order (deterministic mode; engine/core/math.h) ----
 * acc(n) i64 += round(x(n) * 2^bits); elements not representable (NaN, Inf, |x| >= 2^(62 - bits))
 * are not added and counted into bad(1) f32. */
int tri_op_fixed_accumulate(tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad);
/* out(n) f32 = acc(n) * 2^-bits. */
int tri_op_fixed_to_float(tri_device *d, tri_tensor out, tri_tensor acc, int bits);
/* y(n) i64 += x(n) i64 (exact). */
int tri_op_add_i64(tri_device *d, tri_tensor y, tri_tensor x);
/* limbs(6) i64, limb k += bits [32k, 32k + 32) of the exact sum of round(x[i] * 2^bits)^2 (a
 * 192-bit integer): limbs add without carries, so sums over calls and ranks stay exact and
 * independent of how x is split; tri_fixed_limbs_value reads them. Elements not representable
 * are counted into bad(1) f32. */
int tri_op_fixed_sum_squares(tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad);
/* The value of 6 limbs (each a non-negative sum of 32-bit pieces) as a double, scaled by 2^-scale:
 * carries are propagated exactly first, so equal integers give equal doubles however split. */
double tri_fixed_limbs_value(const int64_t limbs[6], int scale);

#ifdef __cplusplus
}
#endif

#endif
