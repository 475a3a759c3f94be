/* engine/train/param.h - the parameter description, and a parameter as one rank holds it.
 *
 * One description per parameter (DESIGN.md §4) drives everything: its name is the checkpoint key
 * (e.g. "h.3.attn.c_attn.w"), its global shape and split dimension give the local shape and the
 * global offset of a tensor-parallel shard, and its place in the stage's flat buffer gives the
 * ZeRO ranges. The layout itself is computed by partitioner/layout.h; the optimizer only walks
 * the segments it produces. */
#ifndef TRIDENT_ENGINE_TRAIN_PARAM_H
#define TRIDENT_ENGINE_TRAIN_PARAM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRI_PARAM_NAME_MAX 64

typedef enum { TRI_INIT_ZEROS = 0, TRI_INIT_ONES, TRI_INIT_NORMAL } tri_init_kind;

/* A parameter as the model describes it, independent of the layout. */
typedef struct tri_param_spec {
    char name[TRI_PARAM_NAME_MAX];  /* checkpoint key */
    int ndim;
    int64_t shape[TRI_MAX_DIMS];    /* global shape */
    int split_dim;                  /* -1: replicated over TP; else the dim TP splits evenly */
    int max_shards;                 /* 0: split over every TP rank; else at most this many distinct
                                       shards along split_dim: above it, tp / max_shards consecutive
                                       TP ranks hold the same shard, each computing a part of its
                                       gradient, which they sum (Llama's key/value heads when tp >
                                       num_key_value_heads, as Megatron-LM's query groups) */
    bool weight_decay;              /* AdamW decay (matrices yes; biases, layernorm no) */
    bool tp_partial_grad;           /* replicated (split_dim -1) but each TP rank computes a part of
                                       its gradient, which the TP group sums (Qwen3's per-head q_norm
                                       and k_norm: a rank's gradient covers its own heads) */
    tri_init_kind init;
    float init_std;                 /* for TRI_INIT_NORMAL */
    int64_t init_rows;              /* dim-0 rows below this are initialised by `init`; rows at or
                                       beyond are zero (vocab padding). Equals shape[0] otherwise. */
    bool tied;                      /* shared with another pipeline stage (wte on the first and last
                                       stage): gradients are summed over the embedding group */
    bool tied_copy;                 /* the copy a non-owning stage holds (the LM head's wte on the
                                       last stage): left out of the gradient norm */
    int global_index;               /* position in the whole model's parameter list (every stage
                                       agrees), for layout-independent reductions */
    int unit;                       /* the unit it belongs to (non-decreasing in a stage's list) */
    bool expert;                    /* a routed expert under expert parallelism or tensor parallelism
                                       (ep > 1 or tp > 1; docs/moe.md): its gradient reduces over the
                                       expert-data-parallel group (which at tp > 1 spans TP ranks), not
                                       over dp nor over tp */
    int etp, etp_rank;              /* etp > 1: an expert tensor split along split_dim over the
                                       expert-tensor-parallel group (etp ranks, this one etp_rank)
                                       instead of tp (layers/moe_etp.h); 0 or 1: as split_dim says */
} tri_param_spec;

/* A parameter as this rank holds it. */
typedef struct tri_param {
    tri_param_spec spec;
    int64_t local_shape[TRI_MAX_DIMS];
    int64_t global_offset[TRI_MAX_DIMS];  /* index in the global tensor of local element 0 */
    int64_t numel;                        /* local elements */
    int64_t offset;                       /* elements from the start of the flat buffers */
    bool tp_replicated;                   /* every TP rank holds all of it */
    int replicas;                         /* > 1: this many consecutive TP ranks hold the same shard
                                             and sum their gradients (spec.max_shards < tp) */
    int shard_rank;                       /* which shard along split_dim (tp_rank / replicas) */
    bool count_in_norm;                   /* this rank adds it to the global gradient norm (one
                                             holder of each replica) */
} tri_param;

/* A unit: consecutive parameters that are reduced, gathered and sharded together (the embedding,
 * one block, the final layernorm and LM head): the bucket of ZeRO-2's gradient reduce-scatter and
 * the granularity of ZeRO-3's parameter gather (Rajbhandari et al. 2020; FSDP's flat units). */
typedef struct tri_param_unit {
    int first, count;          /* parameters [first, first + count) */
    int64_t start, len;        /* flat range; len is a multiple of dp * TRI_LAYOUT_ALIGN */
    int first_part, n_parts;   /* its parts [first_part, first_part + n_parts) (see tri_param_part) */
} tri_param_unit;

/* A part of a unit: a run of its parameters sharded over one group. Expert parallelism (docs/moe.md)
 * shards an ep rank's own experts (spec.expert) over the expert-data-parallel group (edp ranks, this
 * rank edp_rank) and everything else over dp, as Megatron-Core's distributed optimizer does; so a
 * sparse block's unit is cut where spec.expert changes (the dense part before the experts, the
 * experts, the dense part after), each part padded to a multiple of dp * TRI_LAYOUT_ALIGN, an expert
 * part to tp * dp * TRI_LAYOUT_ALIGN (edp = tp dp / ep divides it, and exceeds dp at tp > 1 and ep <
 * tp). Without expert parameters every unit is one part, the unit itself. */
typedef struct tri_param_part {
    int unit;
    int64_t start, len;        /* flat range inside the unit; len a multiple of dp * TRI_LAYOUT_ALIGN
                                  (tp * dp * TRI_LAYOUT_ALIGN for an expert part) */
    bool expert;               /* sharded over edp; else over dp */
} tri_param_part;

#define TRI_UNIT_MAX_PARTS 8   /* parts per unit (a sparse block has 3) */

/* How one micro-batch uses a unit: how often its parameters are read and its gradients written in
 * the forward and in the backward (the chunk's passes say: tri_chunk_unit_uses; the traffic model,
 * partitioner/traffic.h, turns them into bytes). */
typedef struct tri_unit_uses {
    int64_t len;                 /* the unit's elements in the flat buffers (padded) */
    int fwd_reads, fwd_writes;   /* e.g. a block: 1, 0; wte on a one-stage model: 2, 1 (embedding, LM head) */
    int bwd_reads, bwd_writes;   /* e.g. a block: 1, 1 */
} tri_unit_uses;

#define TRI_LAYOUT_ALIGN 64 /* elements: every parameter's flat offset is a multiple of this */

/* The parameters of one stage as one rank holds them, filled by partitioner/layout.h: offsets in
 * one flat parameter buffer and one flat gradient buffer, cut into units, each padded to a
 * multiple of dp * TRI_LAYOUT_ALIGN so that every data-parallel rank owns an equal, aligned slice
 * of every unit (its ZeRO shard). Shards ignore tensor boundaries, as in Megatron-LM's distributed
 * optimizer, so no tensor must divide by dp. */
typedef struct tri_param_layout {
    int n;
    tri_param *params;
    int n_units;
    tri_param_unit *units;
    int n_parts;
    tri_param_part *parts;  /* the units' parts, unit after unit */
    int64_t numel;          /* local parameter elements (without padding) */
    int64_t padded_numel;   /* length of the flat buffers: the sum of the units' lengths */
    int dp, dp_rank;
    int edp, edp_rank;      /* the expert-data-parallel group that shards expert parts (dp, dp_rank
                               without expert parallelism; tri_layout_set_experts) */
    int64_t shard_numel;    /* elements each rank owns: the sum of its parts' slices (padded_numel / dp
                               without expert parts) */
} tri_param_layout;

/* Data-parallel rank r's slice of unit u: [tri_unit_slice(u, dp, r), + u->len / dp). */
static inline int64_t tri_unit_slice(const tri_param_unit *u, int dp, int r)
{
    return u->start + (int64_t)r * (u->len / dp);
}

/* The size of the group that shards part k (edp for an expert part, else dp), and this rank's slice
 * of it: [tri_part_slice(L, k), + tri_part_slice_len(L, k)). */
static inline int tri_part_group(const tri_param_layout *L, int k)
{
    return L->parts[k].expert ? L->edp : L->dp;
}
static inline int64_t tri_part_slice_len(const tri_param_layout *L, int k)
{
    return L->parts[k].len / tri_part_group(L, k);
}
static inline int64_t tri_part_slice(const tri_param_layout *L, int k)
{
    return L->parts[k].start + (int64_t)(L->parts[k].expert ? L->edp_rank : L->dp_rank) * tri_part_slice_len(L, k);
}

/* Fills `host` (the local shard, param->numel floats) with the parameter's initial values. Element
 * values depend only on (seed, name, global index), so every layout starts from the same global
 * weights. */
void tri_param_init_host(const tri_param *param, uint64_t seed, float *host);

/* The local shard as a tensor view of the flat buffer `flat` (1-d, f32). */
tri_tensor tri_param_view(const tri_param *param, tri_tensor flat);

/* How many of this rank's elements of param, from its first, are the model's: the rest are vocabulary
 * padding (dim-0 rows at or beyond spec.init_rows, which stay zero and are not in checkpoints);
 * param->numel when there is none (or when init_rows is 0: a hand-made spec that does not say). */
int64_t tri_param_real_numel(const tri_param *param);

#ifdef __cplusplus
}
#endif

#endif
