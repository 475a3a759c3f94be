/* partitioner/memory_model.c - bytes per memory category from formulas (see memory_model.h). */
#include "partitioner/memory_model.h"

#include <string.h>

/* Sizes of one layout, as doubles. */
typedef struct dims {
    double s, b, h, a, t, N, N_l, V_l, t_sp;
    double W_l, Q_l, F_l;   /* a rank's q|k|v width, attention output width, MLP width */
    double mlp_kept, mlp_work, stats;  /* the MLP's kept and scratch tensors in F_l, the norms' fp32
                                          statistics per row (GPT-2: 2, 1, 4; Llama: 3, 3, 2) */
} dims;

static dims get_dims(const tri_transformer *m, const tri_train_layout *l)
{
    dims d;
    d.s = (double)l->T;
    d.b = (double)l->B;
    d.h = (double)m->n_embd;
    d.a = (double)m->n_head;
    d.t = l->tp;
    d.t_sp = l->sequence_parallel && l->tp > 1 ? l->tp : 1;
    d.N = d.s * d.b;
    d.N_l = d.N / d.t_sp;
    d.V_l = (double)tri_padded_vocab(m->vocab_size, l->tp) / d.t;
    d.Q_l = (double)tri_transformer_q_width(m) / d.t;
    d.W_l = d.Q_l + 2.0 * tri_transformer_kv_local(m, l->tp);
    d.F_l = (double)tri_transformer_ffn(m) / d.t;
    d.mlp_kept = m->gated_mlp ? 3.0 : 2.0;  /* [gate | up] and h; or fch and fch_gelu */
    d.mlp_work = m->gated_mlp ? 3.0 : 1.0;  /* dh and dgate_up; or dh */
    d.stats = m->llama_block ? 2.0 : 4.0;   /* rstd of two RMSNorms; mean and rstd of two layernorms */
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
    dims d = get_dims(m, l);
    double e = elem_bytes(l), scores = d.a * d.s * d.s * d.b / d.t;
    if (l->recompute == TRI_RECOMPUTE_FULL)
        return e * d.N_l * d.h;                            /* res3 */
    /* ln1, res2, ln2, res3; qkv, atty, fch, fch_gelu (12 N h / t; Llama: [gate | up] and h); the
     * fp32 statistics of the two norms */
    double kept = e * (4.0 * d.N_l * d.h + d.N * (d.W_l + d.Q_l + d.mlp_kept * d.F_l)) + 4.0 * d.stats * d.N_l;
    if (l->attention == TRI_ATTENTION_FLASH)
        kept += 4.0 * d.a / d.t * d.s * d.b;               /* the rows' fp32 logsumexp */
    else if (l->recompute == TRI_RECOMPUTE_NONE)
        kept += e * scores;                                /* the softmax probabilities */
    return kept;
}

double tri_mem_chunk_activations(const tri_transformer *m, const tri_train_layout *l,
                                 const tri_stage_place *place)
{
    dims d = get_dims(m, l);
    double e = elem_bytes(l);
    double bytes = (place->layer_end - place->layer_start) * tri_mem_block_activations(m, l);
    bytes += 4.0 * 2.0 * d.N + e * 2.0 * d.N_l * d.h;     /* int32 tokens and targets; x_in, dres */
    if (place->last)                                       /* lnf, dlnf; fp32 lnf statistics, losses */
        bytes += e * 2.0 * d.N_l * d.h + 4.0 * (d.stats / 2.0 * d.N_l + d.N);
    return bytes;
}

double tri_mem_chunk_params(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                            int n_chunks)
{
    dims d = get_dims(m, l);
    double n = (place->layer_end - place->layer_start) * tri_block_params_local(m, l->tp);
    if (place->first)
        n += d.V_l * d.h + tri_position_params(m);
    if (place->last)
        n += tri_final_norm_params(m) + (m->untied_head || n_chunks > 1 ? d.V_l * d.h : 0.0);
    return n;
}

/* Communication buffers and workspace of one chunk, holding `slots` micro-batches
 * (models/gpt.c take_slot and take_scratch). */
static void chunk_buffers(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                          int slots, double *comm, double *work)
{
    dims d = get_dims(m, l);
    double e = elem_bytes(l);
    bool sp = d.t_sp > 1;
    /* grad_out per slot but on the last chunk; full_a and full_b under sequence parallelism */
    *comm = (place->last ? 0.0 : e * slots * d.N_l * d.h) + (sp ? 2.0 * e * d.N * d.h : 0.0);
    /* tmp and dln (N_l x h), dqkv, datty and the MLP's dh (8 N h / t; Llama: dh and dgate_up), and
     * the scores' gradient (unfused) or the fused backward's fp32 row statistics delta; Llama's fp32
     * rotary tables (s, head_dim / 2) twice */
    *work = e * (2.0 * d.N_l * d.h + d.N * (d.W_l + d.Q_l + d.mlp_work * d.F_l));
    if (m->llama_block && place->layer_end > place->layer_start)
        *work += 4.0 * d.s * (double)tri_transformer_head_dim(m);
    *work += l->attention == TRI_ATTENTION_FLASH ? 4.0 * d.b * d.a / d.t * d.s : e * d.b * d.a / d.t * d.s * d.s;
    if (place->last)   /* logits (e bytes); fp32 row maxes and loss statistics */
        *work += e * d.N * d.V_l + 4.0 * 3.0 * d.N;
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
        len[n] = tri_block_params_local(m, l->tp);
        grouped[n++] = true;
    }
    if (place->last) {
        len[n] = tri_final_norm_params(m);
        grouped[n++] = !m->llama_block;
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

/* One block's recomputation buffer, kept once per chunk: full recomputation rebuilds a whole
 * block's activations, selective the unfused attention core's softmax (the engine's shared buffers;
 * Megatron-LM holds the same while a block's backward runs); the fused core has none to rebuild. */
static double recompute_buffer(const tri_transformer *m, const tri_train_layout *l)
{
    tri_train_layout all = *l;
    all.recompute = TRI_RECOMPUTE_NONE;
    dims d = get_dims(m, l);
    double scores = d.a * d.s * d.s * d.b / d.t;
    if (l->recompute == TRI_RECOMPUTE_FULL)
        return tri_mem_block_activations(m, &all);
    if (tri_layout_recomputes(l) == TRI_RECOMPUTE_SELECTIVE)
        return elem_bytes(l) * scores;
    return 0.0;
}

void tri_mem_model_rank(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan,
                        int pp_rank, const int *in_flight, double bytes[TRI_MEM_KINDS])
{
    memset(bytes, 0, TRI_MEM_KINDS * sizeof *bytes);
    dims d = get_dims(m, l);
    double e = elem_bytes(l), dp = l->dp > 1 ? l->dp : 1;
    int z = l->zero_stage;
    bool sharded = l->dp > 1;
    for (int c = 0; c < plan->v; c++) {
        const tri_stage_place *place = &plan->chunks[c * plan->pp + pp_rank];
        double psi = tri_mem_chunk_params(m, l, place, plan->n_chunks);
        double params, grads, opt, largest;
        tri_mem_model_states(psi, l->dp, z, l->precision, &params, &grads, &opt);
        double units = unit_buffers(m, l, place, plan->n_chunks, &largest);
        /* gathered parameters are the model's dtype, gradient buckets and their reduce-scatter
         * result fp32 (engine/train/zero.c take_unit_buffers, take_reduce_buffers) */
        bytes[TRI_MEM_PARAMS] += params + (z >= 3 && sharded ? e * units : 0.0);
        bytes[TRI_MEM_GRADS] += grads + (z >= 2 && sharded ? 4.0 * units : 0.0);
        bytes[TRI_MEM_OPTIMIZER] += opt;
        if (z >= 2 && sharded)
            bytes[TRI_MEM_COMM] += 4.0 * largest / dp;
        if (place->first && place->last && z < 2 && !l->deterministic && !m->untied_head)
            bytes[TRI_MEM_GRADS] += 4.0 * d.V_l * d.h; /* the LM head's own fp32 share of wte's gradient */
        bytes[TRI_MEM_ACTIVATIONS] += in_flight[c] * tri_mem_chunk_activations(m, l, place);
        if (place->layer_end > place->layer_start)
            bytes[TRI_MEM_ACTIVATIONS] += recompute_buffer(m, l);
        double comm, work;
        chunk_buffers(m, l, place, in_flight[c], &comm, &work);
        bytes[TRI_MEM_COMM] += comm;
        bytes[TRI_MEM_WORKSPACE] += work;
    }
    /* the trainer's fp32 gradient-norm slots: per global parameter tensor, TP rank (and DP rank when
       ZeRO shards) */
    double tensors = m->llama_block ? 9.0 * (double)m->n_layer + 2.0 + m->untied_head /* biases left out */
                                    : 12.0 * (double)m->n_layer + 4.0;
    bytes[TRI_MEM_COMM] += 4.0 * tensors * l->tp * (z > 0 ? dp : 1.0);
}
