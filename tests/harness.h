/* tests/harness.h - runs a small model (GPT-2, or any family: tu_run_model) in any layout and collects what the parallel equivalence
 * tests compare: the losses of a few AdamW steps, the first step's gradients and the final weights
 * gathered into global tensors, each stage's peak of in-flight micro-batches, and the comm traffic
 * of the first step. Runs on thread ranks (tu_run_gpt) or as one rank of any world comm, e.g. MPI
 * (tu_run_gpt_rank). */
#ifndef TRIDENT_TESTS_HARNESS_H
#define TRIDENT_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/train/local_sgd.h"
#include "engine/train/moe_stats.h"
#include "engine/train/train_layout.h"
#include "models/config.h"
#include "models/model.h"

#define TU_MAX_PARAMS 128
#define TU_MAX_STEPS 64
#define TU_MAX_MOE_SUMS 512
#define TU_BIAS_STEPS 4   /* steps whose expert bias and kept counts a result records */
#define TU_MAX_BIAS 64    /* layers x experts of the recorded expert bias */
#define TU_MAX_PP 16

typedef struct tu_layout {
    int tp, pp;                /* dp = world / (tp * cp * pp) */
    int cp;                    /* --context-parallel-size (0 or 1: none) */
    const char *cp_comm_type;  /* --cp-comm-type (NULL: all_gather here, the one built without
                                  deterministic mode) */
    int dp;                    /* 0 or 1: no data parallelism */
    bool sp;
    int n_micro;               /* micro-batches per step and replica (>= 1) */
    const char *schedule;      /* NULL: 1f1b */
    int layers_per_virtual_stage;
    int first_layers;          /* 0: the balanced split; else the first stage's layers
                                  (--decoder-first-pipeline-num-layers) */
    int zero;                  /* ZeRO stage */
    int recompute;             /* tri_recompute */
    int attention;             /* tri_attention_backend: 0 flash (the default), 1 unfused */
    bool deterministic;
    bool overlap;              /* --overlap-grad-reduce and --overlap-param-gather */
    bool bf16;                 /* --bf16 mixed precision */
    tri_local_sgd_config local; /* local SGD / DiLoCo (engine/train/local_sgd.h); steps 0: off */
    int optimizer;             /* tri_optimizer_kind (0: AdamW); SGD and LARS with momentum 0.9,
                                  LARS with eta 0.02 */
    tri_compression compression; /* --grad-compression and its options (zeroed: none) */
    int64_t adam_freeze_step;  /* --adam-freeze-step (0: off; AdamW only) */
    bool onebit_adam;          /* --onebit-adam (1-bit Adam's compression stage after the freeze) */
    bool unfused_update;       /* AdamW's update, bf16 publish and gradient zeroing as separate passes
                                  (tri_adamw_config.unfused_update) */
    tri_moe_run moe;           /* the --moe-* flags (zeroed: the config's, dropless) */
    int ep;                    /* --expert-model-parallel-size (0 or 1: none) */
    int etp;                   /* --expert-tensor-parallel-size (0 or 1: none) */
    bool staged;               /* the world comm is a staged comm (engine/train/comm_staged.h) over the
                                  thread comm and the rank's CPU device, as for ranks sharing a GPU:
                                  every collective and p2p through host staging buffers */
} tu_layout;

typedef struct tu_result {
    double grad_loss;                       /* loss of the gradient-only pass on batch 0 */
    double grad_norm;                       /* its global gradient norm */
    int steps;
    double losses[TU_MAX_STEPS];            /* loss before each update */
    double norms[TU_MAX_STEPS];             /* gradient norm of each update */
    int n;                                  /* parameters, in the model's global order */
    char names[TU_MAX_PARAMS][64];
    int64_t numel[TU_MAX_PARAMS];           /* global elements (padded vocab for wte) */
    int64_t rows[TU_MAX_PARAMS], cols[TU_MAX_PARAMS];  /* global shape as (dim 0, the rest) */
    float *grads[TU_MAX_PARAMS];            /* batch 0's gradients, global tensors */
    float *weights[TU_MAX_PARAMS];          /* the weights after the last step, global tensors */
    int peak_in_flight[TU_MAX_PP];          /* per pipeline rank, activation slots the executor held at
                                               peak, summed over the rank's chunks */
    int planned_in_flight[TU_MAX_PP];       /* per pipeline rank, the slots planned (sum over chunks) */
    uint64_t tp_bytes[TRI_COMM_KINDS];      /* TP traffic of world rank 0 during the gradient pass */
    uint64_t dp_bytes[TRI_COMM_KINDS];      /* DP traffic of world rank 0 during the first step */
    uint64_t dp_expected[TRI_COMM_KINDS];   /* partitioner/traffic.h's figure for it */
    size_t optimizer_bytes;                 /* world rank 0's optimizer state */
    size_t activation_bytes;                /* world rank 0's planned activations */
    int64_t owned_elements;                 /* world rank 0's owned elements, summed over its chunks */
    uint64_t overlap_started;               /* world rank 0's reductions and gathers started non-blocking */
    uint64_t prefetches_used;               /* world rank 0's stage 3 all-gathers started ahead and used */
    bool grads_zeroed;                      /* world rank 0's first chunk: the last update zeroed the
                                               gradients in its own pass (tri_op_adamw_fused_multi) */
    bool staged;                            /* world rank 0's cp comm (its world at cp 1) took device
                                               buffers: the run's comms were staged comms */
    int64_t bf16_checked;                   /* bf16: owned parameter elements compared, all ranks */
    int64_t bf16_stale;                     /* of them, bf16 parameters not equal to their rounded
                                               fp32 master weight after the last step */
    int moe_E, moe_layers;                  /* world rank 0's MoE account's shape (E 0: dense) */
    int64_t moe_micro;                      /* the gradient pass's micro-batches x replicas */
    int64_t moe_sums[TU_MAX_MOE_SUMS];      /* the gradient pass's account, reduced (moe_stats.h) */
    tri_moe_summary moe[TU_MAX_STEPS];      /* each update's MoE figures (world rank 0) */
    float moe_bias[TU_BIAS_STEPS][TU_MAX_BIAS];   /* --moe-router-enable-expert-bias: after each of the first
                                                     steps, (layers, E) (a dense layer's row zero) */
    int64_t moe_kept[TU_BIAS_STEPS][TU_MAX_BIAS]; /* each of those steps' reduced kept counts (layers, E) */
} tu_result;

/* Trains `steps` AdamW steps of cfg (micro-batch B, sequence T) in `layout` on thread ranks (tp cp pp dp of
 * them) from
 * the same initial weights (seed 1234), after one gradient-only pass on batch 0. windows holds the
 * token windows of every global batch, (steps * global batch, T + 1); global batch k is rows
 * [k * B * n_micro * dp, ...). Returns a status (the failing rank's message via tri_error_message).
 * The final weights must be one tensor per parameter: a run whose TP copies of a replicated
 * parameter, or whose tied copy (the last stage's wte) and parameter, differ in any bit fails, as
 * does one with a nonzero vocabulary padding row. */
int tu_run_gpt(const tri_gpt_config *cfg, int64_t B, int64_t T, const tu_layout *layout,
               const int32_t *windows, int steps, tu_result *out);
/* The same for a model of any family (models/model.h). */
int tu_run_model(const tri_model *model, int64_t B, int64_t T, const tu_layout *layout, const int32_t *windows,
                 int steps, tu_result *out);
/* The same as one rank of an existing world comm (every rank calls it; results on world rank 0). */
int tu_run_gpt_rank(tri_comm *world, const tri_gpt_config *cfg, int64_t B, int64_t T,
                    const tu_layout *layout, const int32_t *windows, int steps, tu_result *out);
void tu_result_free(tu_result *r);
const float *tu_result_grad(const tu_result *r, const char *name, int *index);

/* The run's layout for a tu_layout on `world` ranks (micro-batch B, sequence T, layout->n_micro
 * micro-batches per replica), through the tools' validator (tools/cli/layout_flags.h). */
int tu_layout_resolve(const tri_gpt_config *cfg, int64_t B, int64_t T, const tu_layout *layout, int world,
                      tri_train_layout *out);
int tu_model_layout_resolve(const tri_model *m, int64_t B, int64_t T, const tu_layout *layout, int world,
                            tri_train_layout *out);

/* A small config for parallel tests: 4 layers, 12 heads, n_embd 48, vocab 100, 16 positions. */
tri_gpt_config tu_tiny_config(void);
/* Deterministic learnable token windows (n, T + 1) for vocab V. Caller frees. */
int32_t *tu_make_windows(int64_t n, int64_t T, int V, uint64_t seed);

/* Elements of r's parameter i that layouts must agree on: the real vocabulary's vocab rows (vocab x cols) of
 * the embedding and head (wte, model.embed_tokens.weight, lm_head.weight: their padding depends on tp),
 * every element (r->numel[i]) of the others. */
int64_t tu_result_compared(const tu_result *r, int i, int64_t vocab);
/* Whether a and b trained the same bits: every step's loss and gradient norm and every final weight over
 * tu_result_compared(a, i, vocab) elements. If not, writes the first difference into why (why_size bytes):
 * what differs and, for a weight, its relative difference (tu_tensor_rel). */
bool tu_results_same(const tu_result *a, const tu_result *b, int64_t vocab, char *why, size_t why_size);
/* The compression tests' compressor: kind, reduce and start iteration over tri_compression_defaults,
 * with the small model's settings (blocks of 64 elements, top-k 25%, seed 3). */
tri_compression tu_small_compressor(tri_compression_kind kind, tri_compression_reduce reduce, int64_t start);
/* Whether a and b hold the same final weights, every element of every tensor bit for bit (padding rows
 * included), and at least one tensor. */
bool tu_weights_same(const tu_result *a, const tu_result *b);

/* How far run got is from run ref (the same model, steps and batches in another layout). */
typedef struct tu_result_gap {
    double loss;          /* the gradient pass's loss, relative to ref's */
    double grad;          /* the worst gradient's tu_tensor_rel over tu_result_compared elements */
    int grad_at;          /* its parameter */
    double step;          /* the worst step loss, relative to ref's */
    int step_at;          /* its step (0-based) */
    double drift;         /* the worst final weight's tu_adamw_drift_ratio (0 when not asked) */
    int drift_at;         /* its parameter */
} tu_result_gap;
/* The gaps of got from ref into *g, the real vocabulary being vocab rows; the weights' drift ratio against
 * AdamW (betas 0.9, 0.95) at learning rate lr over updates 1..ref->steps when lr > 0. TRI_EINVAL if the
 * runs' parameters (count, names) differ. */
int tu_result_gap_of(const tu_result *ref, const tu_result *got, int64_t vocab, double lr, tu_result_gap *g);

/* max |a - b| / max |b| over n elements (b: a float64 reference, e.g. PyTorch's) */
double tu_tensor_rel(const float *a, const float *b, int64_t n);
double tu_tensor_rel_f64(const float *a, const double *b, int64_t n);

/* The most two runs' weights can drift apart, per element, over updates first..last (1-based
 * AdamW step numbers) at learning rate lr, from the same state, whatever their gradients: the
 * bound for weights after steps in non-deterministic layouts, where a sum's order (and so a
 * near-zero gradient's sign) differs. AdamW's step |m_hat / (sqrt(v_hat) + eps)| is at most
 *   K_t = (1 - b1) sqrt(1 - b2^t) / ((1 - b1^t) sqrt(1 - b2)) * sqrt(sum_{k<t} (b1^2 / b2)^k)
 * (Cauchy-Schwarz between m_t = (1 - b1) sum_i b1^(t-i) g_i and v_t = (1 - b2) sum_i b2^(t-i) g_i^2,
 * for b1^2 < b2; K_1 = 1), and decoupled weight decay only shrinks a difference, so two runs end
 * within 2 lr sum_t K_t of each other, plus fp32 rounding: 2^-20 of that, and per step 4 roundings
 * of 2^-24 |w| (decay and update, in each run) with |w| <= max_abs. */
double tu_adamw_drift_bound(double lr, double beta1, double beta2, int64_t first, int64_t last, double max_abs);

/* max over elements of |a - b| / tu_adamw_drift_bound(...) for n elements: <= 1 when a and b are
 * within what AdamW can explain. */
double tu_adamw_drift_ratio(const float *a, const float *b, int64_t n, double lr, double beta1, double beta2,
                            int64_t first, int64_t last);

#endif
