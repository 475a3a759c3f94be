/* layers/cp_attention.h - causal self-attention over a sequence split across the ranks of a
 * context-parallel group (Megatron-Core's --context-parallel-size; Llama 3's all-gather attention,
 * Dubey et al. 2024 §3.3.2; Liu et al. 2023 Ring Attention for the p2p ring).
 *
 * Layout: the T tokens of each sequence are cut into 2 cp chunks of Tc = T / (2 cp) rows; cp rank i
 * holds chunks i and 2cp-1-i, in that order, as its local sequence of T_l = 2 Tc rows (causal work
 * balanced). A local (B, T_l, X) buffer holds, for each sequence b, chunk i's Tc rows then chunk
 * (2cp-1-i)'s. Tc must be a multiple of 64 (TRI_FLASH_BC): every chunk boundary is then a tile
 * boundary of the fused attention, which is what makes the deterministic mode bit-identical to the
 * fused attention on one rank over the whole sequence (engine/device/ops_list.h "fused attention
 * across a split sequence").
 *
 * Algorithms (written once over device and comm ops: CPU and CUDA):
 *   forward, every mode: the local k|v columns packed (B, T_l, 2 C_kv), all-gathered over the cp
 *     group, put in global order (B, T, 2 C_kv); the local queries against them
 *     (flash_attention_kv_forward): each query row meets the key tiles 0.. its diagonal ascending,
 *     exactly as on one rank, so out and lse have the one-rank bits.
 *   backward, all_gather (not deterministic): k|v gathered again; dq of the local queries against
 *     the gathered keys (the one-rank bits); dk, dv partials of the whole sequence from the local
 *     queries (f32), reduce-scattered to the keys' owners and unpacked into dqkv: the owner's sum
 *     of cp partials rounds differently from one rank (within a bound, tests/test_cp_attention.c).
 *   backward, deterministic (both comm types under --deterministic-mode), "owner computes": qkv,
 *     dout, lse and delta of every rank all-gathered into global order; dq of the local queries
 *     against all keys (key tiles ascending), dk, dv of the local keys against all queries (the
 *     group's heads in order, query tiles ascending): the one-rank bits.
 *   p2p (the ring, Megatron's default) without deterministic mode (Liu et al. 2023, Megatron-Core's
 *     form): cp - 1 steps passing the k|v block in hand (B, T_l, 2 C_kv) to rank i + 1 with
 *     tri_comm_p2p_start while computing the local queries against it (flash_attention_kv_forward,
 *     partials merged by flash_attention_merge, own block first, then ranks i-1, i-2, ...); fully
 *     masked tiles are skipped by the blocks' global rows. Backward: the block and its f32 dk|dv
 *     accumulator travel together (dq accumulated per block, the accumulator's share added and
 *     passed on, overlapping the next block's dq); a last hop returns each accumulator to its owner.
 *     out, lse, dq and dk, dv differ from one rank by the order of the merges and sums (a bound,
 *     tests/test_cp_attention.c). Deterministic mode keeps the all-gather forward and the
 *     owner-computes backward for p2p too.
 * Bytes each rank sends per layer, wire (elements x dtype size; all-gather counts (cp-1)/cp of the
 * gathered buffer as sent by each rank's ring share, as comm.c counts): forward (all_gather and
 * deterministic) B T_l 2 C_kv; backward all_gather B T_l 2 C_kv + the f32 reduce-scatter of B T 2 C_kv;
 * deterministic B T_l (W + C_l) + 2 B NH_l T_l f32; the ring forward (cp - 1) B T_l 2 C_kv, backward
 * (cp - 1) B T_l 2 C_kv + cp B T_l 2 C_kv f32. The payload (tri_comm_bytes) is
 * partitioner/context_parallel.h's tri_cp_layer_traffic exactly. */
#ifndef TRIDENT_LAYERS_CP_ATTENTION_H
#define TRIDENT_LAYERS_CP_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/device/device.h"
#include "engine/train/train_layout.h"

/* --cp-comm-type: the layout's tri_cp_comm_type (engine/train/train_layout.h: TRI_CP_COMM_P2P,
 * TRI_CP_COMM_ALL_GATHER), one type for the layout and the layer. */

/* One rank's view of its context-parallel group: comm is the cp group (cp ranks, this one cp_rank);
 * deterministic: --deterministic-mode (the owner-computes backward, bit-identical to one rank). */
typedef struct tri_cp {
    tri_comm *comm;
    int cp, cp_rank;
    tri_cp_comm_type type;
    bool deterministic;
} tri_cp;

/* The local problem: B sequences of T_l = T / cp rows, NH_l query and NH_kv key/value heads of HS
 * (engine/device/ops/attention_math.h tri_flash_dims with T = T_l); dtype the activations' (f32 or
 * bf16). */
typedef struct tri_cp_shape {
    tri_flash_dims local;
    tri_dtype dtype;
} tri_cp_shape;

/* Scratch: `act` (the activations' dtype) and `f32`, flat, at least tri_cp_scratch_numel elements
 * each; carved per pass (forward and backward use the same memory, one after the other):
 *   act, forward and all_gather backward: kv_l (B, T_l, 2 C_kv), kv_r (cp, B, T_l, 2 C_kv) (the
 *     gathered buffer, rank-major), kv_g (B, T, 2 C_kv) (global order);
 *   act, deterministic backward: qkv_r (cp, B, T_l, W), qkv_g (B, T, W), dout_r (cp, B, T_l, C_l),
 *     dout_g (B, T, C_l);
 *   f32, all_gather backward: dkv_g (B, T, 2 C_kv), dkv_r (cp, B, T_l, 2 C_kv), dkv_l (B, T_l, 2 C_kv);
 *   f32, deterministic backward: stat_r (cp, B, NH_l, T_l), lse_g and delta_g (B, NH_l, T);
 *   ring (p2p, not deterministic; tri_cp_ring_scratch_counts): act kv_a, kv_b (B, T_l, 2 C_kv) (the
 *     block in hand and the one arriving), o2 (B, T_l, C_l) (a block's partial out); f32 forward l2
 *     (B, NH_l, T_l) (its lse), backward dkv_a, dkv_b, dkv_loc (B, T_l, 2 C_kv) (the accumulator in
 *     hand, the one arriving, this rank's share of the block in hand). */
typedef struct tri_cp_scratch {
    tri_tensor act, f32;
} tri_cp_scratch;

/* TRI_EINVAL naming the rule and values: cp < 1, cp_rank outside [0, cp), the comm's size not cp,
 * T_l odd or Tc = T_l / 2 not a multiple of 64, an unknown comm type. */
int tri_cp_check(const tri_cp *cp, const tri_cp_shape *s);

/* The scratch's element counts (the maxima over the passes above). Needs no comm (cp->comm may be
 * NULL: the partitioner plans these numbers through models/); refusals as tri_cp_check's but the
 * group's size. */
int tri_cp_scratch_numel(const tri_cp *cp, const tri_cp_shape *s, int64_t *act_n, int64_t *f32_n);

/* atty(B, T_l, C_l) and lse(B, NH_l, T_l) f32 of the local queries of qkv(B, T_l, W = C_l + 2 C_kv)
 * against the whole sequence's keys (causal by global position). Collective over cp->comm. */
int tri_cp_attention_forward(tri_device *d, const tri_cp *cp, tri_tensor atty, tri_tensor lse, tri_tensor qkv,
                             const tri_cp_scratch *scratch);

/* dqkv (qkv's shape, overwritten) = the gradient given datty(B, T_l, C_l), from the forward's qkv,
 * atty and lse; delta(B, NH_l, T_l) f32 receives the local rows' dout . out. Collective. */
int tri_cp_attention_backward(tri_device *d, const tri_cp *cp, tri_tensor dqkv, tri_tensor delta, tri_tensor datty,
                              tri_tensor qkv, tri_tensor atty, tri_tensor lse, const tri_cp_scratch *scratch);

/* Whether cp asks for the cross-rank attention (present and cp > 1); NULL or cp 1: the local fused core. */
static inline bool tri_cp_active(const tri_cp *cp)
{
    return cp && cp->cp > 1;
}

/* The rows of cp rank r's local sequence (its two chunks' global positions), for the kv ops. */
tri_flash_rows tri_cp_local_rows(int cp, int cp_rank, int64_t T_l);

#endif
