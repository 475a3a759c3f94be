/* partitioner/memory_model.c - bytes per memory category from formulas (see memory_model.h). */
#include "partitioner/memory_model.h"

#include <math.h>
#include <string.h>

#include "partitioner/context_parallel.h"
#include "partitioner/layout.h"

/* Sizes of one layout, as doubles: the model's ends' (the block's are its family's, tri_block_cost). */
typedef struct dims {
    double h, t_sp, N, N_l, V_l;
} dims;

static dims get_dims(const tri_transformer *m, const tri_train_layout *l)
{
    dims d;
    d.h = (double)m->n_embd;
    d.t_sp = l->sequence_parallel && l->tp > 1 ? l->tp : 1;
    d.N = (double)l->T * (double)l->B;
    d.N_l = d.N / d.t_sp;
    d.V_l = (double)tri_padded_vocab(m->vocab_size, l->tp) / l->tp;
    return d;
}

/* Bytes of one parameter value, activation or activation gradient: 2 under bf16 mixed precision
 * (models/gpt.c's ACT dtype, engine/train/zero.c's model parameters), else 4. */
static double elem_bytes(const tri_train_layout *l)
{
    return (double)tri_precision_bytes(l->precision);
}

double tri_mem_block_activations(const tri_transformer *m, const tri_train_layout *l)
{
    return tri_transformer_block(m, l).kept;
}

double tri_mem_chunk_activations(const tri_transformer *m, const tri_train_layout *l,
                                 const tri_stage_place *place)
{
    dims d = get_dims(m, l);
    double e = elem_bytes(l);
    double bytes = tri_transformer_blocks(m, l, place->layer_start, place->layer_end).kept;  /* per layer */
    bytes += 4.0 * 2.0 * d.N + e * 2.0 * d.N_l * d.h;     /* int32 tokens and targets; x_in, dres */
    if (place->last)                                       /* lnf, dlnf; fp32 lnf statistics, losses */
        bytes += e * 2.0 * d.N_l * d.h + 4.0 * (tri_final_norm_stats(m) * d.N_l + d.N);
    return bytes;
}

double tri_mem_chunk_params(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                            int n_chunks)
{
    dims d = get_dims(m, l);
    double n = tri_transformer_blocks(m, l, place->layer_start, place->layer_end).params;
    if (place->first)
        n += d.V_l * d.h + tri_position_params(m);
    if (place->last)
        n += tri_final_norm_params(m) + (m->untied_head || n_chunks > 1 ? d.V_l * d.h : 0.0);
    return n;
}

/* Communication buffers and workspace of one chunk, holding `slots` micro-batches
 * (models/gpt.c take_slot and take_scratch): every chunk holds blocks (partitioner/stages.h). */
static void chunk_buffers(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                          int slots, double *comm, double *work)
{
    dims d = get_dims(m, l);
    double e = elem_bytes(l);
    tri_block_cost b = tri_transformer_block(m, l);
    /* grad_out per slot but on the last chunk; the block's own (sequence parallelism's gathers) */
    *comm = (place->last ? 0.0 : e * slots * d.N_l * d.h) + b.comm;
    *work = b.work;                                        /* one block's backward */
    if (place->last)   /* logits (e bytes); fp32 row maxes and loss statistics */
        *work += e * d.N * d.V_l + 4.0 * 3.0 * d.N;
}

int tri_expert_dp(const tri_train_layout *l)
{
    int tp = l->tp > 1 ? l->tp : 1, dp = (l->dp > 1 ? l->dp : 1) * tri_layout_cp(l); /* cp folds into edp */
    int ep = l->ep > 1 ? l->ep : 1, etp = l->etp > 1 ? l->etp : 1;
    return tp * dp / (ep * etp) > 1 ? tp * dp / (ep * etp) : 1;
}

/* Model states: the parameters are e bytes (bf16 under mixed precision), the gradients fp32 in both
 * precisions and the optimizer 8 bytes of AdamW m and v, plus the 4-byte fp32 master weights under
 * mixed precision (engine/train/zero.h "Mixed precision", engine/train/zero.c tri_zero_take). That is Megatron-
 * LM's bf16 (its docs/api-guide/dist_optimizer.md table, "bf16 parameters, fp32 gradients": 18
 * bytes a parameter, 6 + 12/d with the distributed optimizer), not the ZeRO paper's 2 + 2 + 12, whose
 * gradients are fp16: Megatron-LM accumulates and all-reduces gradients in fp32 under --bf16
 * (accumulate_allreduce_grads_in_fp32), and so does the engine. */
void tri_mem_model_states(double psi, int dp, int zero, tri_precision p, double *params, double *grads,
                          double *optimizer)
{
    bool bf16 = p == TRI_PRECISION_BF16;
    double n = dp > 1 ? dp : 1;
    *params = (bf16 ? 2.0 : 4.0) * psi / (zero >= 3 ? n : 1.0);
    *grads = 4.0 * psi / (zero >= 2 ? n : 1.0);
    *optimizer = (bf16 ? 12.0 : 8.0) * psi / (zero >= 1 ? n : 1.0);
}

/* The chunk's kinds of units of parameters (engine/train/zero.h): wte and wpe on the first chunk, a block
 * (all its blocks are alike), ln_f and the tied wte's copy (or the untied head) on the last. Returns
 * how many (<= 5) into len[]; grouped[] marks the units holding several tensors (blocks, GPT-2's ln_f). */
static int chunk_units(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                       int n_chunks, double len[5], bool grouped[5])
{
    dims d = get_dims(m, l);
    int n = 0;
    if (place->first) {
        len[n] = d.V_l * d.h;
        grouped[n++] = false;
        len[n] = tri_position_params(m);
        grouped[n] = false;
        n += len[n] > 0;
    }
    if (place->layer_end > place->layer_start) {
        len[n] = tri_transformer_block(m, l).params;
        grouped[n++] = true;
    }
    if (place->last && tri_final_norm_params(m) > 0) {
        len[n] = tri_final_norm_params(m);
        grouped[n++] = m->final_norm == TRI_NORM_LAYERNORM;  /* a weight and a bias */
        if (n_chunks > 1 || m->untied_head) {
            len[n] = d.V_l * d.h;
            grouped[n++] = false;
        }
    }
    return n;
}

/* Elements of the whole-unit buffers ZeRO 2-3 keep (Rajbhandari et al. 2020 §6.2's constant-size
 * buffers, as engine/train/zero.h takes them): two of the largest block's size, one of each larger unit;
 * and the largest unit (*largest). */
static double unit_buffers(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                           int n_chunks, double *largest)
{
    double len[5];
    bool grouped[5];
    int n = chunk_units(m, l, place, n_chunks, len, grouped);
    double top = 0.0, pool = 0.0, big = 0.0;
    for (int u = 0; u < n; u++)
        top = len[u] > top ? len[u] : top;
    for (int u = 0; u < n; u++)
        if ((grouped[u] || len[u] < top) && len[u] > pool)
            pool = len[u];
    if (pool == 0.0)
        pool = top;
    for (int u = 0; u < n; u++)
        if (len[u] > pool)
            big += len[u];
    *largest = top;
    return 2.0 * pool + big;
}

/* Elements of a rank's owned slices of a unit of `len` elements, the largest (ZeRO 2-3's reduce-scatter
 * result, engine/train/zero.c take_reduce_buffers): len / dp, but for a sparse block, whose routed
 * experts are a part of their own sharded over the expert-data-parallel group (engine/train/param.h
 * tri_param_part). */
static double largest_slice(const tri_transformer *m, const tri_train_layout *l, double len)
{
    double dp = l->dp > 1 ? l->dp : 1;
    tri_block_cost b = tri_transformer_block(m, l);
    if (b.expert_params <= 0 || len != b.params)
        return len / dp;
    return (len - b.expert_params) / dp + b.expert_params / tri_expert_dp(l);
}

void tri_mem_model_rank(const tri_transformer *m, const tri_train_layout *l_cp, const tri_stage_plan *plan,
                        int pp_rank, const int *in_flight, double bytes[TRI_MEM_KINDS])
{
    memset(bytes, 0, TRI_MEM_KINDS * sizeof *bytes);
    /* context parallelism: the rank's T_l = T / cp rows, ZeRO over dp x cp, and the attention's cp
       scratch (the backward's buffer, which holds the forward's), once per rank */
    int64_t cp_fwd, cp_bwd;
    tri_cp_dims cpd = tri_cp_dims_of(m, l_cp);
    tri_cp_scratch_bytes(&cpd, &cp_fwd, &cp_bwd);
    bytes[TRI_MEM_COMM] += (double)cp_bwd;
    tri_train_layout local = tri_layout_cp_local(l_cp);
    const tri_train_layout *l = &local;
    dims d = get_dims(m, l);
    double e = elem_bytes(l), dp = l->dp > 1 ? l->dp : 1, recompute = tri_transformer_block(m, l).recompute;
    int z = l->zero_stage;
    bool sharded = l->dp > 1;
    for (int c = 0; c < plan->v; c++) {
        const tri_stage_place *place = &plan->chunks[c * plan->pp + pp_rank];
        double psi = tri_mem_chunk_params(m, l, place, plan->n_chunks);
        /* the routed experts' share: ZeRO shards it over the expert-data-parallel group */
        tri_block_cost blocks = tri_transformer_blocks(m, l, place->layer_start, place->layer_end);
        double psi_e = blocks.expert_params;
        double params, grads, opt, largest, ep_params, ep_grads, ep_opt;
        tri_mem_model_states(psi - psi_e, l->dp, z, l->precision, &params, &grads, &opt);
        tri_mem_model_states(psi_e, tri_expert_dp(l), z, l->precision, &ep_params, &ep_grads, &ep_opt);
        params += ep_params;
        grads += ep_grads;
        opt += ep_opt;
        double units = unit_buffers(m, l, place, plan->n_chunks, &largest);
        /* gathered parameters are the model's dtype, gradient buckets and their reduce-scatter
         * result fp32 (engine/train/zero.c take_unit_buffers, take_reduce_buffers); in deterministic
         * mode the buckets exist at every stage and hold int64 exact sums, as do the reduce-scatter's
         * result and the stage's sums beside the fp32 gradients (as long as them), and a unit-long
         * fp32 scratch takes a 64-row chunk's gradient before its exact add (engine/device/ops/
         * exact_grads.c) */
        bool det = l->deterministic;
        double bucket = det ? 8.0 : 4.0;
        bytes[TRI_MEM_PARAMS] += params + (z >= 3 && sharded ? e * units : 0.0);
        bytes[TRI_MEM_GRADS] += grads + (det || (z >= 2 && sharded) ? bucket * units : 0.0) + (det ? 2.0 * grads : 0.0);
        bytes[TRI_MEM_OPTIMIZER] += opt;
        if (det) { /* the unit padded as the layout pads it (partitioner/layout.h), and the non-finite count */
            double unit = dp * TRI_LAYOUT_ALIGN, padded = ceil(largest / unit) * unit;
            bytes[TRI_MEM_WORKSPACE] += ceil(4.0 * padded / TRI_ARENA_ALIGN) * TRI_ARENA_ALIGN + TRI_ARENA_ALIGN;
        }
        /* the expert bias: no gradient, no optimizer state; the chunk's layers in one arena take */
        bytes[TRI_MEM_PARAMS] += ceil(blocks.buffers / TRI_ARENA_ALIGN) * TRI_ARENA_ALIGN;
        if (z >= 2 && sharded) /* the largest unit's owned slices: a sparse block's experts over edp */
            bytes[TRI_MEM_COMM] += bucket * largest_slice(m, l, largest);
        if (place->first && place->last && z < 2 && !l->deterministic && !m->untied_head)
            bytes[TRI_MEM_GRADS] += 4.0 * d.V_l * d.h; /* the LM head's own fp32 share of wte's gradient */
        bytes[TRI_MEM_ACTIVATIONS] += in_flight[c] * tri_mem_chunk_activations(m, l, place);
        bytes[TRI_MEM_ACTIVATIONS] += recompute;   /* one block's recomputation, once per chunk */
        double comm, work;
        chunk_buffers(m, l, place, in_flight[c], &comm, &work);
        /* the rotary tables (fp32 cos and sin, (T, HS / 2) each, a chunk with layers) hold the whole
           sequence's positions, a cp rank's chunks being any of them (models/llama_buffers.c): the block's
           cost counts the rank's T_l rows, the other T - T_l rows here */
        if (!m->position_table && l_cp->cp > 1 && place->layer_end > place->layer_start)
            work += 4.0 * (double)(l_cp->T - l->T) * (double)(m->n_embd / m->n_head);
        bytes[TRI_MEM_COMM] += comm;
        bytes[TRI_MEM_WORKSPACE] += work;
    }
    /* the trainer's fp32 gradient-norm slots: per global parameter tensor, TP rank (and DP rank when
       ZeRO shards) */
    double tensors = (double)tri_transformer_tensors(m);
    bytes[TRI_MEM_COMM] += 4.0 * tensors * l->tp * (z > 0 ? dp : 1.0);
}
