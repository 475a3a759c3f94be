/* partitioner/memory_model.c - bytes per memory category from formulas (see memory_model.h). */
#include "partitioner/memory_model.h"

#include <string.h>

/* Sizes of one layout, as doubles. */
typedef struct dims {
    double s, b, h, a, t, N, N_l, V_l, t_sp;
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
    return d;
}

double tri_mem_block_activations(const tri_transformer *m, const tri_train_layout *l)
{
    dims d = get_dims(m, l);
    double sbh = d.s * d.b * d.h, scores = d.a * d.s * d.s * d.b / d.t;
    if (l->precision == TRI_PRECISION_BF16) {
        if (l->recompute == TRI_RECOMPUTE_FULL)
            return 2.0 * sbh / d.t_sp;
        double rest = d.t_sp > 1 ? sbh * 34.0 / d.t : sbh * (10.0 + 24.0 / d.t);
        return rest + (l->recompute == TRI_RECOMPUTE_SELECTIVE ? 0.0 : 5.0 * scores);
    }
    if (l->recompute == TRI_RECOMPUTE_FULL)
        return 4.0 * d.N_l * d.h;
    double kept = 4.0 * d.N_l * d.h + 4.0 * d.N_l + 12.0 * d.N * d.h / d.t;
    if (l->recompute == TRI_RECOMPUTE_NONE)
        kept += scores;
    return 4.0 * kept;
}

double tri_mem_chunk_activations(const tri_transformer *m, const tri_train_layout *l,
                                 const tri_stage_place *place)
{
    dims d = get_dims(m, l);
    double bytes = (place->layer_end - place->layer_start) * tri_mem_block_activations(m, l);
    if (l->precision == TRI_PRECISION_BF16) {
        double sbh_sp = d.s * d.b * d.h / d.t_sp;
        if (place->first)
            bytes += sbh_sp;                              /* embedding dropout mask */
        if (place->last)
            bytes += 4.0 * sbh_sp + 4.0 * d.N * d.V_l;    /* ln_f and head inputs, fp32 logits */
        return bytes;
    }
    bytes += 4.0 * (2.0 * d.N + 2.0 * d.N_l * d.h);       /* tokens, targets, x_in, dres */
    if (place->last)
        bytes += 4.0 * (2.0 * d.N_l * d.h + 2.0 * d.N_l + d.N);  /* lnf, dlnf, stats, losses */
    return bytes;
}

double tri_mem_chunk_params(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                            int n_chunks)
{
    dims d = get_dims(m, l);
    double n = (place->layer_end - place->layer_start) * ((12.0 * d.h * d.h + 7.0 * d.h) / d.t + 6.0 * d.h);
    if (place->first)
        n += d.V_l * d.h + (double)m->n_positions * d.h;
    if (place->last)
        n += 2.0 * d.h + (n_chunks > 1 ? d.V_l * d.h : 0.0);
    return n;
}

/* Communication buffers and workspace of one chunk, holding `slots` micro-batches. */
static void chunk_buffers(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                          int slots, double *comm, double *work)
{
    dims d = get_dims(m, l);
    double layers = place->layer_end - place->layer_start;
    bool sp = d.t_sp > 1;
    if (l->precision == TRI_PRECISION_BF16) {
        double sbh = d.s * d.b * d.h;
        *comm = 2.0 * 2.0 * sbh / d.t_sp + (sp ? 2.0 * sbh : 0.0);
        *work = layers > 0 ? 2.0 * d.a * d.s * d.s * d.b / d.t + 8.0 * sbh / d.t : 0.0;
        return;
    }
    *comm = (place->last ? 0.0 : 4.0 * slots * d.N_l * d.h) + (sp ? 2.0 * 4.0 * d.N * d.h : 0.0);
    /* tmp and dln (N_l x h), dqkv, datty and the MLP's dh (8 N h / t), the scores' gradient */
    *work = 4.0 * (2.0 * d.N_l * d.h + 8.0 * d.N * d.h / d.t + d.b * d.a / d.t * d.s * d.s);
    if (place->last)
        *work += 4.0 * (d.N * d.V_l + 3.0 * d.N);          /* logits, row maxes, loss statistics */
}

void tri_mem_model_states(double psi, int dp, int zero, tri_precision p, double *params, double *grads,
                          double *optimizer)
{
    bool bf16 = p == TRI_PRECISION_BF16;
    double n = dp > 1 ? dp : 1;
    *params = (bf16 ? 2.0 : 4.0) * psi / (zero >= 3 ? n : 1.0);
    *grads = (bf16 ? 2.0 : 4.0) * psi / (zero >= 2 ? n : 1.0);
    *optimizer = (bf16 ? 12.0 : 8.0) * psi / (zero >= 1 ? n : 1.0);
}

/* The chunk's kinds of units of parameters (engine/zero.h): wte and wpe on the first chunk, a block
 * (all its blocks are alike), ln_f and the tied wte's copy on the last. Returns how many (<= 5) into
 * len[]; grouped[] marks the units holding several tensors (blocks, ln_f). */
static int chunk_units(const tri_transformer *m, const tri_train_layout *l, const tri_stage_place *place,
                       int n_chunks, double len[5], bool grouped[5])
{
    dims d = get_dims(m, l);
    int n = 0;
    if (place->first) {
        len[n] = d.V_l * d.h;
        grouped[n++] = false;
        len[n] = (double)m->n_positions * d.h;
        grouped[n++] = false;
    }
    if (place->layer_end > place->layer_start) {
        len[n] = (12.0 * d.h * d.h + 7.0 * d.h) / d.t + 6.0 * d.h;
        grouped[n++] = true;
    }
    if (place->last) {
        len[n] = 2.0 * d.h;
        grouped[n++] = true;
        if (n_chunks > 1) {
            len[n] = d.V_l * d.h;
            grouped[n++] = false;
        }
    }
    return n;
}

/* Elements of the whole-unit buffers ZeRO 2-3 keep (Rajbhandari et al. 2020 §6.2's constant-size
 * buffers, as engine/zero.h takes them): two of the largest block's size, one of each larger unit;
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
 * block's activations, selective the attention core's (the engine's shared buffers; Megatron-LM
 * holds the same while a block's backward runs). */
static double recompute_buffer(const tri_transformer *m, const tri_train_layout *l)
{
    tri_train_layout all = *l;
    all.recompute = TRI_RECOMPUTE_NONE;
    dims d = get_dims(m, l);
    double scores = d.a * d.s * d.s * d.b / d.t;
    if (l->recompute == TRI_RECOMPUTE_FULL)
        return tri_mem_block_activations(m, &all);
    if (l->recompute == TRI_RECOMPUTE_SELECTIVE)
        return (l->precision == TRI_PRECISION_BF16 ? 5.0 : 4.0) * scores;
    return 0.0;
}

void tri_mem_model_rank(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan,
                        int pp_rank, const int *in_flight, double bytes[TRI_MEM_KINDS])
{
    memset(bytes, 0, TRI_MEM_KINDS * sizeof *bytes);
    dims d = get_dims(m, l);
    bool bf16 = l->precision == TRI_PRECISION_BF16;
    double e = bf16 ? 2.0 : 4.0, dp = l->dp > 1 ? l->dp : 1;
    int z = l->zero_stage;
    for (int c = 0; c < plan->v; c++) {
        const tri_stage_place *place = &plan->chunks[c * plan->pp + pp_rank];
        double psi = tri_mem_chunk_params(m, l, place, plan->n_chunks);
        double params, grads, opt, largest;
        tri_mem_model_states(psi, l->dp, z, l->precision, &params, &grads, &opt);
        double buffers = e * unit_buffers(m, l, place, plan->n_chunks, &largest);
        bytes[TRI_MEM_PARAMS] += params + (z >= 3 && l->dp > 1 ? buffers : 0.0);
        bytes[TRI_MEM_GRADS] += grads + (z >= 2 && l->dp > 1 ? buffers : 0.0);
        bytes[TRI_MEM_OPTIMIZER] += opt;
        if (z >= 2 && l->dp > 1)
            bytes[TRI_MEM_COMM] += e * largest / dp;   /* one reduce-scatter's result */
        if (!bf16 && place->first && place->last && z < 2 && !l->deterministic)
            bytes[TRI_MEM_GRADS] += 4.0 * d.V_l * d.h; /* the LM head's own share of wte's gradient */
        bytes[TRI_MEM_ACTIVATIONS] += in_flight[c] * tri_mem_chunk_activations(m, l, place);
        if (place->layer_end > place->layer_start)
            bytes[TRI_MEM_ACTIVATIONS] += recompute_buffer(m, l);
        double comm, work;
        chunk_buffers(m, l, place, in_flight[c], &comm, &work);
        bytes[TRI_MEM_COMM] += comm;
        bytes[TRI_MEM_WORKSPACE] += work;
    }
    if (!bf16) /* the trainer's gradient-norm slots: per global parameter tensor, TP rank (and DP rank
                  when ZeRO shards) */
        bytes[TRI_MEM_COMM] += 4.0 * (12.0 * (double)m->n_layer + 4.0) * l->tp * (z > 0 ? dp : 1.0);
}
