/* layers/moe.h - the Mixture-of-Experts block of a decoder layer on one rank (all E experts here).
 *
 * The sparse MLP of Mixtral (Jiang et al. 2024) and Qwen3-MoE, after Hugging Face's
 * MixtralSparseMoeBlock and Megatron-Core's MoELayer (router, token dispatcher, GroupedMLP, shared
 * experts): a router linear (no bias) gives logits(N,E) = x @ Wr^T; the router picks each token's K
 * experts (softmax or sigmoid scores, top-k, optional renormalisation, optional DeepSeek-V3 expert
 * bias; Shazeer et al. 2017); an optional capacity drops the selections over it (Switch
 * Transformer, Fedus et al. 2021; the token then passes through the residual); the kept (token,
 * expert) rows are permuted into expert order and run through the experts' SwiGLU MLPs (Shazeer 2020)
 * as grouped GEMMs over the per-expert counts; the outputs are combined with the router weights, and
 * an optional always-on shared expert (a dense SwiGLU, DeepSeek-V2/V3's and Megatron-Core's
 * `moe_shared_expert_intermediate_size`, ungated: Qwen2-MoE's sigmoid shared_expert_gate is not
 * implemented) is added. The Switch/GShard auxiliary loss and the ST-MoE router z-loss come back as
 * scalars apart from y. Every step is a device op (docs/moe.md "The MoE block"), so the layer is
 * written once for the CPU and CUDA. Precision (shape.dtype): fp32, or bf16 mixed precision as the
 * dense layers run it (Micikevicius et al. 2018; Megatron-LM's --bf16): bf16 activations and weight
 * copies, fp32 parameter gradients, every product accumulated in fp32. The router stays fp32 whatever
 * the dtype, as Megatron-Core's (router_gating_linear casts input and weight to fp32): the logits are
 * the bf16 x and Wr's exact products summed in fp32 into an fp32 output; scores, top-k, weights, the
 * losses and dlogits are fp32; the router weight's gradient is dlogits^T times x widened to fp32, and
 * the input's dlogits times Wr widened, rounded once into dx. The permutation, the experts' grouped
 * GEMMs, SwiGLU and the combine run on bf16 rows (the combine's weights fp32, its K terms summed in
 * fp32, rounded once).
 *
 * Letters: N tokens (B*T), C hidden, E experts, K selections per token (num_experts_per_tok),
 * I the experts' width (moe_intermediate_size), I_s the shared expert's width (0: none), R the kept
 * selections (N*K less the dropped ones). Expert parallelism (E_l = E / ep, fp32 or bf16) is layers/moe_ep.h, on this block's stages. */
#ifndef TRIDENT_LAYERS_MOE_H
#define TRIDENT_LAYERS_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "engine/comm/comm.h"
#include "engine/device/device.h"

/* The host array of per-expert counts lives in the activations: at most this many experts. */
#define TRI_MOE_MAX_EXPERTS 1024

/* What sizes every buffer of the block: the worst case is dropless, N*K permuted rows. */
typedef struct tri_moe_shape {
    int64_t N, C, E, K, I, I_shared;
    tri_dtype dtype;        /* activations and weight copies: TRI_F32 (0, the default) or TRI_BF16 */
    int64_t sp;             /* sequence parallelism: N is this rank's shard of sp x N tokens (the tensor-
                               parallel group under --sequence-parallel); 0 or 1: none */
    int64_t capacity;       /* the most selections an expert keeps of these N tokens (tri_moe_capacity
                               of --moe-expert-capacity-factor, as tri_moe_config.capacity); <= 0
                               dropless. Sizes the rows an expert-parallel rank receives
                               (layers/moe_ep.h tri_moe_ep_max_rows); the one-rank buffers keep N K */
} tri_moe_shape;

typedef struct tri_moe_config {
    tri_moe_shape shape;
    int score_func;         /* TRI_MOE_SOFTMAX (Mixtral, Qwen3-MoE) or TRI_MOE_SIGMOID (DeepSeek-V3) */
    bool norm_topk;         /* renormalise the K weights (Mixtral always; Qwen3's norm_topk_prob) */
    int64_t capacity;       /* selections an expert keeps (tri_moe_capacity of the factor); <= 0 dropless */
    int drop_policy;        /* TRI_MOE_DROP_PROBS or TRI_MOE_DROP_POSITION (with a capacity) */
    float aux_loss_coeff;   /* Megatron's --moe-aux-loss-coeff (HF's router_aux_loss_coef times K); 0 off */
    float z_loss_coeff;     /* --moe-z-loss-coeff; 0 off */
    /* shape.sp > 1: the sequence-parallel group (not owned). The aux loss takes f from the routed counts
     * summed over it (acts->routed_global) and P from this rank's tokens, and both losses are weighed
     * as shares of the whole sequence's (coefficients / sp^2 and / sp), so the group's losses and
     * gradients sum to one rank's over all sp N tokens (Megatron-Core's sequence_partition_group) */
    tri_comm *sp_comm;
} tri_moe_config;

/* The block's parameters (and, with the same layout, their gradients; expert_bias has none). */
typedef struct tri_moe_weights {
    /* all in shape.dtype but expert_bias (f32); their gradients are f32 */
    tri_tensor router_w;          /* (E, C), the router linear (HF gate.weight) */
    tri_tensor expert_bias;       /* (E) f32 or absent: selection only (DeepSeek-V3), no gradient */
    tri_tensor gate_up_w;         /* (E, 2I, C): expert e's I gate rows (HF w1) then its I up rows (w3) */
    tri_tensor down_w;            /* (E, C, I): HF w2 */
    tri_tensor shared_gate_up_w;  /* (2 I_s, C): gate rows then up rows, as the dense SwiGLU; absent if I_s 0 */
    tri_tensor shared_down_w;     /* (C, I_s); absent if I_s 0 */
} tri_moe_weights;

/* Kept from the forward for the backward (one set per layer and micro-batch). */
typedef struct tri_moe_acts {
    tri_tensor logits;             /* (N, E) f32, x @ Wr^T (the z-loss's backward reads it) */
    tri_tensor scores;             /* (N, E) f32, softmax or sigmoid */
    tri_tensor expert_idx;         /* (N, K) i32, the top-k selections */
    tri_tensor expert_w;           /* (N, K) f32, their weights */
    tri_tensor kept_idx;           /* (N, K) i32, expert_idx with dropped selections -1 - e */
    tri_tensor tokens_per_expert;  /* (E) i32, kept selections per expert */
    tri_tensor routed_per_expert;  /* (E) i32, selections per expert before dropping */
    tri_tensor row_id_map;         /* (N, K) i32, permuted row of each selection, -1 dropped */
    tri_tensor sorted_indices;     /* (N*K) i32, selection n*K + k of each permuted row, -1 past R */
    tri_tensor x_perm;             /* (N*K, C) shape.dtype (so the five below), the first R rows used */
    tri_tensor gate_up;            /* (N*K, 2I) */
    tri_tensor h;                  /* (N*K, I), silu(gate) * up */
    tri_tensor o;                  /* (N*K, C), the experts' outputs */
    tri_tensor shared_gate_up;     /* (N, 2 I_s) or absent */
    tri_tensor shared_h;           /* (N, I_s) or absent */
    tri_tensor losses;             /* (2) f32: [aux loss, z-loss] of this pass (0 when off) */
    tri_tensor routed_global;      /* (E) i32, routed_per_expert summed over the sequence-parallel group
                                      (shape.sp > 1 only; else absent) */
    int64_t R;                     /* kept selections */
    int32_t counts[TRI_MOE_MAX_EXPERTS]; /* host copy of tokens_per_expert (read back once a pass) */
} tri_moe_acts;

/* Backward-only buffers, reusable across layers. */
typedef struct tri_moe_scratch {
    tri_tensor dlogits;            /* (N, E) f32 */
    tri_tensor d_expert_w;         /* (N, K) f32 */
    tri_tensor d_o;                /* (N*K, C) shape.dtype (so the four below), then the permuted input's gradient */
    tri_tensor dh;                 /* (N*K, I) */
    tri_tensor dgate_up;           /* (N*K, 2I) */
    tri_tensor shared_dh;          /* (N, I_s) or absent */
    tri_tensor shared_dgate_up;    /* (N, 2 I_s) or absent */
    tri_tensor losses;             /* (2) f32, the loss ops' scalar output in the backward */
    tri_tensor router_x;           /* bf16 only: (N, C) f32, x widened, then the router's share of dx */
    tri_tensor router_w32;         /* bf16 only: (E, C) f32, router_w widened */
} tri_moe_scratch;

/* One walk that sizes buffers and, given memory, places them (layers/moe_buffers.c, and the
 * expert-parallel block's in moe_ep.c): tri_moe_carve returns the next buffer of rows x cols (cols 0:
 * a vector of rows) of dtype at base + off (data NULL while base is NULL: only counting) and advances
 * off by its bytes rounded up to TRI_MOE_ALIGN; rows 0: an absent tensor, nothing taken. */
typedef struct tri_moe_carver {
    char *base; /* NULL: only count */
    size_t off;
} tri_moe_carver;
tri_tensor tri_moe_carve(tri_moe_carver *cv, tri_dtype dtype, int64_t rows, int64_t cols);

/* TRI_OK when s is a shape the block takes (N, C, E, I positive, K in [1, E], E at most
 * TRI_MOE_MAX_EXPERTS, I_shared >= 0, dtype fp32 or bf16); else TRI_EINVAL naming the field and value. */
int tri_moe_check_shape(const tri_moe_shape *s);

/* Bytes of device memory the activations (acts) and the scratch need for shape s, each buffer
 * aligned to TRI_MOE_ALIGN bytes: what tri_moe_bind carves, exactly (planned = allocated). 0 when s
 * is invalid (tri_moe_bind says why). */
#define TRI_MOE_ALIGN 256
size_t tri_moe_acts_bytes(const tri_moe_shape *s);
size_t tri_moe_scratch_bytes(const tri_moe_shape *s);

/* Points every tensor of acts (at acts_mem, tri_moe_acts_bytes long) and of scratch (at scratch_mem,
 * tri_moe_scratch_bytes long; NULL scratch or scratch_mem: skipped) at its place, dtypes and shapes
 * as the structs say. TRI_EINVAL naming the field on a shape that is not positive (I_shared >= 0), K
 * outside [1, E] or E above TRI_MOE_MAX_EXPERTS. */
int tri_moe_bind(const tri_moe_shape *s, tri_moe_acts *acts, void *acts_mem, tri_moe_scratch *scratch,
                 void *scratch_mem);

/* y(N, C) = the MoE block of x(N, C) (overwritten), both shape.dtype; fills acts, including acts->losses
 * [aux, z] (their scalars, not added to y) and acts->counts: tokens_per_expert copied to the host
 * once (tri_device_copy_to_host, after moe_permute_map: the only host wait of the pass; the backward
 * reuses it). TRI_EINVAL naming the argument on a dtype (x, y and the weights must be shape.dtype),
 * shape or config mismatch. */
int tri_moe_forward(tri_device *d, tri_tensor y, tri_moe_acts *acts, tri_tensor x, const tri_moe_weights *w,
                    const tri_moe_config *cfg);

/* dx(N, C) = the input gradient (overwritten) given dy(N, C) (both shape.dtype), with the aux and z losses weighted by
 * loss_scale in the objective (1 for L = sum(y * dy) + aux + z; 1/micro-batches under gradient
 * accumulation); every parameter gradient in g accumulates (+=). Uses scratch; acts, x, w and cfg
 * as in the forward. */
int tri_moe_backward(tri_device *d, tri_tensor dx, const tri_moe_weights *g, tri_tensor dy, const tri_moe_acts *acts,
                     tri_tensor x, const tri_moe_weights *w, const tri_moe_scratch *scratch,
                     const tri_moe_config *cfg, float loss_scale);

/* The checks the ops cannot make, shared by tri_moe_forward / _backward and the expert-parallel block
 * (layers/moe_ep.c): tri_moe_check_call: the shape (tri_moe_check_shape), the dtypes (x, y_or_dy -
 * named yname - and the weights in shape.dtype, the expert bias fp32), x and y_or_dy (N, C), the shared
 * expert's weights present iff I_shared > 0, the drop policy; tri_moe_check_backward: that with dy,
 * plus dx (N, C) in shape.dtype, the bf16 router scratch (router_x, router_w32) bound under bf16 and
 * the shared expert's gradients present iff I_shared > 0. TRI_OK, else TRI_EINVAL naming the field. */
int tri_moe_check_call(const tri_moe_config *cfg, tri_tensor x, tri_tensor y_or_dy, const char *yname,
                       const tri_moe_weights *w);
int tri_moe_check_backward(const tri_moe_config *cfg, tri_tensor dx, const tri_moe_weights *g, tri_tensor dy,
                           tri_tensor x, const tri_moe_weights *w, const tri_moe_scratch *sc);

/* The block's stages, which tri_moe_forward / tri_moe_backward run around the experts and the
 * expert-parallel block (layers/moe_ep.h) around its exchange, so both run one sequence of ops:
 *   tri_moe_route: the router linear, scores, top-k and capacity (at shape.sp > 1 with the aux loss on,
 *     the routed counts summed over cfg->sp_comm into acts->routed_global; TRI_EINVAL without the
 *     comm), the permutation map, the counts' one read-back (acts->counts, acts->R) and the
 *     permutation of x into expert order (acts->x_perm);
 *   tri_moe_combine: y = the weighted sum of acts->o at each token's kept rows (overwrites y), the
 *     losses' scalars (acts->losses), the shared expert added;
 *   tri_moe_route_backward: once dx_perm (N*K, C) holds the permuted input's gradient and
 *     scratch->d_expert_w the combine's weight gradient: dx (overwritten) by the gather's backward,
 *     the router's backward with the losses' gradients (weighted by loss_scale), the router linear's
 *     and the shared expert's gradients (accumulated into g, added to dx). */
int tri_moe_route(tri_device *d, tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w, const tri_moe_config *cfg);
int tri_moe_combine(tri_device *d, tri_tensor y, tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w,
                    const tri_moe_config *cfg);
int tri_moe_route_backward(tri_device *d, tri_tensor dx, tri_tensor dx_perm, const tri_moe_weights *g,
                           tri_tensor dy, const tri_moe_acts *a, tri_tensor x, const tri_moe_weights *w,
                           const tri_moe_scratch *sc, const tri_moe_config *cfg, float loss_scale);

#endif
