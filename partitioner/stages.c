/* partitioner/stages.c - the pipeline stage split (see stages.h). */
#include "partitioner/stages.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

/* Relative tolerance when comparing costs computed along different paths. */
#define COST_TOL 1e-12

/* Costs of the model's pieces, per TP rank and micro-batch (stages.h). */
typedef struct model_costs {
    double blk_flops, blk_bytes;      /* one transformer block */
    double emb_flops, emb_bytes;      /* what the first chunk adds */
    double head_flops, head_bytes;    /* what the last chunk adds */
    double tot_flops, tot_bytes;      /* the whole model */
} model_costs;

static void model_costs_init(model_costs *mc, const tri_transformer *m, const tri_layout_shape *l,
                             int n_chunks)
{
    double tp = l->tp, B = (double)l->B, T = (double)l->T, C = (double)m->n_embd;
    double N = B * T, N_l = l->sequence_parallel ? N / tp : N;
    double V_l = (double)tri_padded_vocab(m->vocab_size, l->tp) / tp;
    /* the block as its family states it, at fp32 with the unfused core's (B, NH_l, T, T) softmax kept:
     * a weight of the split's cost only (the fused attention stores none; the engine plans the memory
     * itself exactly) */
    tri_train_layout fp32 = tri_shape_layout(l);
    tri_block_cost blk = tri_transformer_block(m, &fp32);
    mc->blk_flops = 3.0 * blk.fwd_flops / tp;
    mc->blk_bytes = 16.0 * blk.params + blk.kept;
    mc->emb_flops = 3.0 * N * C;
    mc->emb_bytes = 16.0 * (V_l * C + tri_position_params(m)) + 4.0 * 2.0 * N;
    mc->head_flops = 6.0 * N * C * V_l;
    /* ln_f, and the LM head: its own matrix, or the tied wte's copy on a last chunk of its own */
    double head_params = tri_final_norm_params(m) + (m->untied_head || n_chunks > 1 ? V_l * C : 0.0);
    double head_acts = 2.0 * N_l * C + 2.0 * N_l + N + N * V_l;      /* ln_f out and grad, stats,
                                                                        losses, logits */
    mc->head_bytes = 16.0 * head_params + 4.0 * head_acts;
    mc->tot_flops = (double)m->n_layer * mc->blk_flops + mc->emb_flops + mc->head_flops;
    mc->tot_bytes = (double)m->n_layer * mc->blk_bytes + mc->emb_bytes + mc->head_bytes;
}

static tri_stage_cost chunk_cost(const model_costs *mc, int layers, bool first, bool last)
{
    tri_stage_cost c;
    c.flops = layers * mc->blk_flops + (first ? mc->emb_flops : 0.0) + (last ? mc->head_flops : 0.0);
    c.bytes = layers * mc->blk_bytes + (first ? mc->emb_bytes : 0.0) + (last ? mc->head_bytes : 0.0);
    c.flop_share = c.flops / mc->tot_flops;
    c.mem_share = c.bytes / mc->tot_bytes;
    c.cost = c.flop_share > c.mem_share ? c.flop_share : c.mem_share;
    return c;
}

tri_stage_cost tri_stage_chunk_cost(const tri_transformer *m, const tri_layout_shape *l, int n_chunks,
                                    int layers, bool first, bool last)
{
    model_costs mc;
    model_costs_init(&mc, m, l, n_chunks);
    return chunk_cost(&mc, layers, first, last);
}

static double stage_cost(const model_costs *mc, int pp, int s, int layers)
{
    return chunk_cost(mc, layers, s == 0, s == pp - 1).cost;
}

/* The best split of layers [0, L) over stages 0..pp-1 into starts[0..pp] (starts[pp] = L).
 * Pass 1 finds the smallest largest stage cost; pass 2, among the splits whose every stage stays
 * within it, the smallest sum of squared costs. Both are exact programs over (stage s, end b of its
 * blocks): val[s][b] = best over a of combine(val[s-1][a], cost of stage s holding [a, b)). */
static int balance(const model_costs *mc, int L, int pp, int *starts)
{
    size_t W = (size_t)L + 1;
    double *val = malloc((size_t)pp * W * sizeof *val);
    int *from = malloc((size_t)pp * W * sizeof *from);
    if (!val || !from) {
        free(val);
        free(from);
        return TRI_ERR(TRI_ENOMEM, "stage split: out of memory");
    }
    double limit = 0.0;
    for (int pass = 0; pass < 2; pass++) {
        for (int b = 1; b <= L; b++) {
            double c = stage_cost(mc, pp, 0, b);
            bool ok = pass == 0 || c <= limit * (1 + COST_TOL);
            val[b] = !ok ? -1.0 : pass == 0 ? c : c * c;
        }
        for (int s = 1; s < pp; s++)
            for (int b = s + 1; b <= L; b++) {
                double *best = &val[(size_t)s * W + b];
                *best = -1.0;                               /* -1: no feasible split */
                for (int a = s; a < b; a++) {               /* ascending: ties keep the smallest a */
                    double prev = val[(size_t)(s - 1) * W + a], c = stage_cost(mc, pp, s, b - a);
                    if (prev < 0 || (pass == 1 && c > limit * (1 + COST_TOL)))
                        continue;
                    double x = pass == 0 ? (prev > c ? prev : c) : prev + c * c;
                    if (*best < 0 || x < *best * (1 - COST_TOL)) {
                        *best = x;
                        from[(size_t)s * W + b] = a;
                    }
                }
            }
        limit = val[(size_t)(pp - 1) * W + L];
    }
    starts[pp] = L;
    for (int s = pp - 1; s > 0; s--)
        starts[s] = from[(size_t)s * W + starts[s + 1]];
    starts[0] = 0;
    free(val);
    free(from);
    return TRI_OK;
}

/* First / last stage from the overrides, the others sharing the rest evenly (later ones take the
 * remainder). */
static int split_overrides(int L, int pp, int first, int last, int *starts)
{
    int fixed = (first >= 0) + (last >= 0), rest = L - (first > 0 ? first : 0) - (last > 0 ? last : 0);
    int middle = pp - fixed;
    if (rest < 0 || (middle == 0 && rest != 0) || rest < middle) {
        char what[128] = "";
        if (first >= 0)
            snprintf(what, sizeof what, "--decoder-first-pipeline-num-layers %d", first);
        if (last >= 0)
            snprintf(what + strlen(what), sizeof what - strlen(what),
                     "%s--decoder-last-pipeline-num-layers %d", first >= 0 ? " and " : "", last);
        if (rest < 0)
            return TRI_ERR(TRI_EINVAL, "%s exceed%s n_layer (--num-layers) %d", what,
                           fixed == 2 ? "" : "s", L);
        return TRI_ERR(TRI_EINVAL, "%s leave%s %d of n_layer (--num-layers) %d for the other %d stage%s "
                       "of --pipeline-model-parallel-size %d; every stage needs at least one layer%s", what,
                       fixed == 2 ? "" : "s", rest, L, middle, middle == 1 ? "" : "s", pp,
                       middle == 0 ? " and every layer a stage" : "");
    }
    int s = 0, at = 0;
    starts[s++] = at;
    if (first >= 0)
        starts[s++] = at += first;
    for (int k = 0; k < middle; k++)
        starts[s++] = at += rest / middle + (k >= middle - rest % middle ? 1 : 0);
    if (last >= 0)
        starts[s] = at += last;
    return TRI_OK;
}

static int check_inputs(const tri_transformer *m, const tri_layout_shape *l, const tri_stage_options *o)
{
    if (l->pp < 1 || l->tp < 1 || l->dp < 1 || l->B < 1 || l->T < 1)
        return TRI_ERR(TRI_EINVAL, "stage split: --pipeline-model-parallel-size %d, "
                       "--tensor-model-parallel-size %d, data-parallel size %d, micro-batch size %lld and "
                       "sequence length %lld must all be >= 1", l->pp, l->tp, l->dp, (long long)l->B,
                       (long long)l->T);
    if (m->n_layer < 1 || m->n_embd < 1 || m->n_head < 1 || m->vocab_size < 1 || m->n_positions < 1)
        return TRI_ERR(TRI_EINVAL, "stage split: model sizes must be >= 1 (n_layer %lld, n_embd %lld, "
                       "n_head %lld, vocab_size %lld, n_positions %lld)", (long long)m->n_layer,
                       (long long)m->n_embd, (long long)m->n_head, (long long)m->vocab_size,
                       (long long)m->n_positions);
    if (m->n_layer > 100000)
        return TRI_ERR(TRI_EINVAL, "stage split: n_layer %lld is too large", (long long)m->n_layer);
    int L = (int)m->n_layer, pp = l->pp, v = o->v;
    if (v < 1)
        return TRI_ERR(TRI_EINVAL, "stage split: %d model chunks per rank; must be >= 1", v);
    if (v > 1 && pp == 1)
        return TRI_ERR(TRI_EINVAL, "--num-layers-per-virtual-pipeline-stage (%d model chunks per rank) "
                       "needs --pipeline-model-parallel-size > 1", v);
    if (L < pp)
        return TRI_ERR(TRI_EINVAL, "n_layer (--num-layers) %d is less than --pipeline-model-parallel-size "
                       "%d: every stage needs at least one layer", L, pp);
    if (v > 1 && L % (pp * v) != 0)
        return TRI_ERR(TRI_EINVAL, "n_layer (--num-layers) %d is not divisible by "
                       "--pipeline-model-parallel-size %d x %d model chunks per rank "
                       "(--num-layers-per-virtual-pipeline-stage)", L, pp, v);
    const char *flag[2] = {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"};
    int val[2] = {o->first_layers, o->last_layers};
    for (int i = 0; i < 2; i++) {
        if (val[i] < 0 && val[i] != -1)
            return TRI_ERR(TRI_EINVAL, "%s %d: must be >= 1 (or -1 for none)", flag[i], val[i]);
        if (val[i] < 0)
            continue;
        if (val[i] == 0)
            return TRI_ERR(TRI_EINVAL, "%s 0: every stage needs at least one layer", flag[i]);
        if (pp == 1)
            return TRI_ERR(TRI_EINVAL, "%s %d needs --pipeline-model-parallel-size > 1", flag[i], val[i]);
        if (v > 1)
            return TRI_ERR(TRI_EINVAL, "%s %d cannot be combined with "
                           "--num-layers-per-virtual-pipeline-stage (%d model chunks per rank)", flag[i],
                           val[i], v);
        if (val[i] > L)
            return TRI_ERR(TRI_EINVAL, "%s %d exceeds n_layer (--num-layers) %d", flag[i], val[i], L);
    }
    return TRI_OK;
}

int tri_stage_split(tri_stage_plan *out, const tri_transformer *m, const tri_layout_shape *l,
                    const tri_stage_options *o)
{
    memset(out, 0, sizeof *out);
    int rc = check_inputs(m, l, o);
    if (rc)
        return rc;
    int L = (int)m->n_layer, pp = l->pp, v = o->v, n = pp * v;
    out->n_layer = L;
    out->pp = pp;
    out->v = v;
    out->tp = l->tp;
    out->dp = l->dp;
    out->n_chunks = n;
    out->chunks = calloc((size_t)n, sizeof *out->chunks);
    out->costs = calloc((size_t)n, sizeof *out->costs);
    int *starts = malloc(((size_t)n + 1) * sizeof *starts);
    if (!out->chunks || !out->costs || !starts) {
        free(starts);
        tri_stage_plan_free(out);
        return TRI_ERR(TRI_ENOMEM, "stage split: out of memory");
    }
    model_costs mc;
    model_costs_init(&mc, m, l, n);
    if (n == 1) {
        out->method = "single stage";
        starts[0] = 0;
        starts[1] = L;
    } else if (v > 1) {
        out->method = "interleaved";
        for (int c = 0; c <= n; c++)
            starts[c] = c * (L / n);
    } else if (o->first_layers >= 0 || o->last_layers >= 0) {
        out->method = "overrides";
        rc = split_overrides(L, pp, o->first_layers, o->last_layers, starts);
    } else {
        out->method = "balanced";
        rc = balance(&mc, L, pp, starts);
    }
    for (int c = 0; c < n && !rc; c++) {
        tri_stage_place *p = &out->chunks[c];
        *p = (tri_stage_place){.layer_start = starts[c], .layer_end = starts[c + 1], .first = c == 0,
                               .last = c == n - 1};
        out->costs[c] = chunk_cost(&mc, p->layer_end - p->layer_start, p->first, p->last);
        out->max_cost = out->costs[c].cost > out->max_cost ? out->costs[c].cost : out->max_cost;
    }
    free(starts);
    if (rc)
        tri_stage_plan_free(out);
    return rc;
}

void tri_stage_plan_free(tri_stage_plan *p)
{
    free(p->chunks);
    free(p->costs);
    memset(p, 0, sizeof *p);
}

int tri_stage_virtual_size(int n_layer, int pp, int per_chunk, int *v)
{
    if (per_chunk < 1)
        return TRI_ERR(TRI_EINVAL, "--num-layers-per-virtual-pipeline-stage %d: must be >= 1", per_chunk);
    if (pp < 1 || n_layer % (pp * per_chunk) != 0 || n_layer == 0)
        return TRI_ERR(TRI_EINVAL, "n_layer (--num-layers) %d is not divisible by "
                       "--pipeline-model-parallel-size %d x --num-layers-per-virtual-pipeline-stage %d",
                       n_layer, pp, per_chunk);
    *v = n_layer / (pp * per_chunk);
    return TRI_OK;
}

void tri_stage_world_ranks(int pp_rank, int tp, int dp, int *lo, int *hi)
{
    *lo = tp * dp * pp_rank;
    *hi = tp * dp * (pp_rank + 1) - 1;
}

void tri_stage_plan_print(FILE *f, const tri_stage_plan *p)
{
    fprintf(f, "pipeline split (%s): %d layers over %d stage%s, %d chunk%s per rank; stage cost = "
            "max(FLOP share, memory share), largest %.4f (ideal %.4f)\n", p->method, p->n_layer, p->pp,
            p->pp == 1 ? "" : "s", p->v, p->v == 1 ? "" : "s", p->max_cost, 1.0 / p->n_chunks);
    for (int c = 0; c < p->n_chunks; c++) {
        const tri_stage_place *s = &p->chunks[c];
        const tri_stage_cost *k = &p->costs[c];
        int r = c % p->pp, lo, hi;
        char name[64], extra[48];
        tri_stage_world_ranks(r, p->tp, p->dp, &lo, &hi);
        if (p->v > 1)
            snprintf(name, sizeof name, "chunk %d (stage %d, local %d)", c, r, c / p->pp);
        else
            snprintf(name, sizeof name, "stage %d", c);
        snprintf(extra, sizeof extra, "%s%s%s", s->first ? " + embedding" : "",
                 s->first && s->last ? "," : "", s->last ? " + LM head and loss" : "");
        fprintf(f, "  %s: layers %d-%d (%d)%s -> ranks %d-%d; %.2f GFLOP (%.1f%%), %.1f MiB (%.1f%%), "
                "cost %.4f\n", name, s->layer_start, s->layer_end - 1, s->layer_end - s->layer_start,
                extra, lo, hi, k->flops / 1e9, 100.0 * k->flop_share, k->bytes / 1048576.0,
                100.0 * k->mem_share, k->cost);
    }
}
