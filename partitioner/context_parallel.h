/* partitioner/context_parallel.h - what context parallelism costs a rank: its scratch buffers and the
 * key/value traffic of each --cp-comm-type, per layer and micro-batch (docs/context_parallel.md, "The
 * grid, the flags and the plan").
 *
 * Context parallelism (Megatron-Core's --context-parallel-size; Liu et al. 2023 "Ring Attention"; Llama 3,
 * Dubey et al. 2024 §3.3.2, for the all-gather form) cuts each sequence of T rows in 2 cp chunks of
 * Tc = T / (2 cp); cp rank i holds chunks i and 2cp-1-i, T_l = T / cp local rows. Everything but the
 * attention core is row-local, so a rank's activations, matmul FLOPs and tp/pp/ep messages are those of
 * a micro-batch of T_l rows (tri_layout_cp_local); the causal attention's FLOPs split evenly over the cp
 * ranks by the 2cp-chunk balance (each rank: 1 / cp of the whole), so total FLOPs and MFU do not change.
 * Notation per rank: e bytes an activation value, C_l = NH_l HS query width, C_kv_l the key/value width
 * on the TP rank (KV / tp, at least one head), NH_l query heads.
 *
 * Scratch (tri_cp_scratch_bytes; shared by the stage's layers, once per rank): exactly the two flat
 * buffers layers/cp_attention.c carves (tri_cp_scratch_numel x e and x 4; tests/test_cp_attention.c
 * checks bytes == formula), KV = 2 C_kv_l, W = C_l + KV, kv_l = B T_l KV:
 *   all_gather  forward: the local, rank-major and global-order k|v, e (1 + 2 cp) kv_l; backward: the
 *               same and the f32 dk|dv partials in the same three forms, 4 (1 + 2 cp) kv_l;
 *   deterministic (both comm types: the owner-computes backward): the act buffer is the larger of the
 *               forward's and the gathered qkv and dout, rank-major and global, e B T (2 W + 2 C_l);
 *               f32 the gathered stats, lse and delta, 4 x 3 B NH_l T;
 *   p2p (ring)  forward: two k|v blocks in flight and a block's partial out, e (2 kv_l + B T_l C_l), and
 *               its partial lse 4 B NH_l T_l; backward: the two blocks, two f32 dk|dv accumulators (the
 *               one in hand, the one arriving) and the rank's share of a block, 4 x 3 kv_l (f32 the
 *               larger of the two passes').
 *   The backward buffer holds the forward's (they are never live together): one buffer of the
 *   backward's size is planned (TRI_MEM_COMM).
 * Traffic per layer and micro-batch on one rank (tri_cp_layer_traffic, engine/comm/comm.h's payload
 * convention: all-gather and reduce-scatter the full buffer, p2p the bytes sent):
 *   all_gather  forward: all-gather of e B T 2 C_kv_l (each rank receives (cp-1) B T_l 2 C_kv_l elements);
 *               backward: the same all-gather and a reduce-scatter of the f32 partials 4 B T 2 C_kv_l;
 *               all of it exposed;
 *   deterministic (both comm types): forward as all_gather; backward all-gathers of qkv and dout,
 *               e B T (W + C_l), and of lse and delta, 2 x 4 B NH_l T; all exposed;
 *   p2p         forward: cp - 1 ring steps, each sending one k|v block e kv_l to the next rank (and
 *               receiving one); backward: the k|v block cp - 1 times and the f32 dk|dv accumulator
 *               after each of the cp steps (the last hop returns it to its owner), (cp-1) e kv_l +
 *               cp 4 kv_l; each step's transfer overlaps the block's attention, exposed =
 *               max(0, transfer - block compute) per step (tri_cp_exposed_seconds). */
#ifndef TRIDENT_PARTITIONER_CONTEXT_PARALLEL_H
#define TRIDENT_PARTITIONER_CONTEXT_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/train/train_layout.h"
#include "partitioner/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The attention's shape on one rank, what the scratch and the traffic depend on. */
typedef struct tri_cp_dims {
    int64_t B, T;        /* micro-batch, the whole sequence (T_l = T / cp local rows) */
    int cp;              /* context-parallel size (>= 1) */
    int64_t C_l, C_kv_l; /* query and key/value widths on the TP rank */
    int64_t NH_l;        /* query heads on the TP rank */
    int e;               /* bytes of an activation value (4 fp32, 2 bf16) */
    tri_cp_comm_type type;
    bool deterministic;  /* --deterministic-mode */
} tri_cp_dims;

/* The dims of model m's attention under layout l (C_kv_l: KV / tp, at least one head). */
tri_cp_dims tri_cp_dims_of(const tri_transformer *m, const tri_train_layout *l);

/* Bytes of the context-parallel scratch of one rank (see the top comment): *fwd the forward's, *bwd the
 * backward's (which holds the forward's); both 0 at cp 1. */
void tri_cp_scratch_bytes(const tri_cp_dims *d, int64_t *fwd, int64_t *bwd);

/* Context-parallel traffic of one layer and micro-batch on one rank, bytes per kind (payload convention),
 * forward and backward apart; 0 at cp 1. *steps: ring steps a pass (p2p: cp - 1; all_gather: 0). */
void tri_cp_layer_traffic(const tri_cp_dims *d, uint64_t fwd[TRI_COMM_KINDS], uint64_t bwd[TRI_COMM_KINDS],
                          int *steps);

/* Exposed seconds of one layer's context-parallel communication in one pass: all_gather all of its
 * collectives' ring time over cp ranks at bandwidth bw; p2p steps x max(0, step transfer - step compute),
 * where a step moves bytes / steps at bw and computes attn_s / cp (attn_s: the rank's attention core of the
 * layer in that pass). */
double tri_cp_exposed_seconds(const tri_cp_dims *d, const uint64_t bytes[TRI_COMM_KINDS], double bw, double attn_s);

/* The rank's view of layout l: micro-batches of T_l = T / cp rows, the data-parallel group dp x cp (the
 * gradients reduce and ZeRO shards over it, as in Megatron-Core), the global batch counted in T_l-row
 * sequences (the same tokens), cp 1 (idempotent; l itself at cp 1). Row-local costs (activations,
 * matmuls, tp/pp/ep messages) and the data-parallel ones of the rank are those of this layout; the
 * attention's FLOPs and key/value exchange are not (tri_cp_*, and 1 / cp of the whole layout's FLOPs). */
static inline tri_train_layout tri_layout_cp_local(const tri_train_layout *l)
{
    tri_train_layout x = *l;
    if (l->cp > 1) {
        x.T = l->T / l->cp;
        x.dp = l->dp * l->cp;
        x.global_batch = l->global_batch * l->cp;
        x.cp = 1;
    }
    return x;
}

#ifdef __cplusplus
}
#endif

#endif
