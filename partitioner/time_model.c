/* partitioner/time_model.c - predicted iteration time (see time_model.h). */
#include "partitioner/time_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/train/local_sgd.h"
#include "partitioner/context_parallel.h"
#include "partitioner/dp_overlap.h"
#include "partitioner/flops.h"
#include "partitioner/memory_model.h"
#include "partitioner/traffic.h"

/* Bandwidth, bytes/s, of a group whose ranks are `stride` apart in world rank, `size` of them. */
static double group_bw(const tri_cluster *c, int stride, int size, bool *inter)
{
    *inter = (double)stride * size > c->gpus_per_node && size > 1;
    return *inter ? tri_cluster_inter_bw(c) * c->eff.inter : c->hw->intra_bw * c->eff.intra;
}

static double comm_seconds(const uint64_t bytes[TRI_COMM_KINDS], int n, double bw)
{
    double t = 0.0;
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        t += tri_collective_seconds(k, (double)bytes[k], n, bw);
    return t;
}

static double sum_bytes(const uint64_t bytes[TRI_COMM_KINDS])
{
    double t = 0.0;
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        t += (double)bytes[k];
    return t;
}

/* Exposed context-parallel seconds of one micro-batch through `layers` layers, forward and backward
 * (context_parallel.h); *bytes: their traffic (payload). The attention core per layer and rank:
 * core_flops / (tp cp) at the gemm rate forward, twice that backward. */
static void cp_chunk_time(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c, double layers,
                          double *fwd_s, double *bwd_s, double *bytes)
{
    *fwd_s = *bwd_s = *bytes = 0.0;
    int cp = tri_layout_cp(l);
    if (cp == 1)
        return;
    tri_cp_dims d = tri_cp_dims_of(m, l);
    uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
    int steps;
    tri_cp_layer_traffic(&d, fwd, bwd, &steps);
    bool inter;
    double bw = group_bw(c, l->tp, cp, &inter);
    double attn = tri_transformer_block(m, l).core_flops / ((double)l->tp * cp) /
                  (tri_cluster_peak(c, l->precision) * c->eff.gemm);
    *fwd_s = layers * tri_cp_exposed_seconds(&d, fwd, bw, attn);
    *bwd_s = layers * tri_cp_exposed_seconds(&d, bwd, bw, 2.0 * attn);
    *bytes = layers * (sum_bytes(fwd) + sum_bytes(bwd));
    if (l->recompute == TRI_RECOMPUTE_FULL) { /* the recomputed forward exchanges key/value again */
        *bwd_s += *fwd_s;
        *bytes += layers * sum_bytes(fwd);
    }
}

tri_chunk_time tri_time_chunk(const tri_transformer *m, const tri_train_layout *l_in, const tri_cluster *c,
                              const tri_stage_plan *plan, int g)
{
    tri_chunk_time t;
    const tri_stage_place *place = &plan->chunks[g];
    double layers = place->layer_end - place->layer_start, cp = tri_layout_cp(l_in);
    double flop_rate = tri_cluster_peak(c, l_in->precision) * c->eff.gemm;
    double mem_rate = tri_cluster_mem_bw(c) * c->eff.memory;
    /* a cp rank computes 1 / cp of the micro-batch's FLOPs (the plan's, over T rows) */
    double F = plan->costs[g].flops / cp;
    double R = layers * tri_block_recompute_flops(m, l_in->B, l_in->T, l_in->tp, tri_layout_recomputes(l_in)) / cp;
    double cp_bytes;
    cp_chunk_time(m, l_in, c, layers, &t.fwd_cp, &t.bwd_cp, &cp_bytes);
    tri_train_layout local = tri_layout_cp_local(l_in); /* the rank's T_l rows */
    const tri_train_layout *l = &local;
    /* elementwise traffic: the activations kept without recomputation, moved 4x (6x with full) */
    tri_train_layout kept = *l;
    kept.recompute = TRI_RECOMPUTE_NONE;
    double A = tri_mem_chunk_activations(m, &kept, place);
    double bwd_moves = l->recompute == TRI_RECOMPUTE_FULL ? 4.0 : 2.0;
    t.fwd_compute = F / 3.0 / flop_rate + 2.0 * A / mem_rate;
    t.bwd_compute = (2.0 * F / 3.0 + R) / flop_rate + bwd_moves * A / mem_rate;
    uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
    tri_layout_shape shape = tri_train_layout_shape(l);
    tri_tp_microbatch_traffic(m, &shape, place, tri_precision_bytes(l->precision), fwd, bwd);
    bool inter;
    double bw = group_bw(c, 1, l->tp, &inter);
    t.fwd_tp = c->eff.tp_exposed * comm_seconds(fwd, l->tp, bw);
    t.bwd_tp = c->eff.tp_exposed * comm_seconds(bwd, l->tp, bw);
    if (l->recompute == TRI_RECOMPUTE_FULL)
        t.bwd_tp += t.fwd_tp;
    /* the ep group: ep ranks at stride etp within the stage's tp x dp (parallel folding); an
       all-to-all sends its bytes to the others at the group's bandwidth */
    int ep = l->ep > 1 ? l->ep : 1, etp = l->etp > 1 ? l->etp : 1;
    t.fwd_ep = t.bwd_ep = 0.0;
    if (ep > 1 || etp > 1) {
        tri_ep_microbatch_traffic(m, l, place, tri_precision_bytes(l->precision), fwd, bwd);
        double ep_bw = group_bw(c, etp, ep, &inter), etp_bw = group_bw(c, 1, etp, &inter);
        for (int k = 0; k < TRI_COMM_KINDS; k++) {
            bool a2a = k == TRI_COMM_ALL_TO_ALL;
            t.fwd_ep += a2a ? (double)fwd[k] / ep_bw : tri_collective_seconds(k, (double)fwd[k], etp, etp_bw);
            t.bwd_ep += a2a ? (double)bwd[k] / ep_bw : tri_collective_seconds(k, (double)bwd[k], etp, etp_bw);
        }
        if (l->recompute == TRI_RECOMPUTE_FULL)
            t.bwd_ep += t.fwd_ep;
    }
    return t;
}

double tri_time_rank_params(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan,
                            int r)
{
    double n = 0.0;
    for (int c = 0; c < plan->v; c++)
        n += tri_mem_chunk_params(m, l, &plan->chunks[c * plan->pp + r], plan->n_chunks);
    return n;
}

/* What a unit of parameters is, for PowerSGD's matrices (engine/train/grad_compression.h). */
enum { UNIT_BLOCK = 0, UNIT_TABLE, UNIT_POSITIONS, UNIT_VECTOR };

/* Where a unit sits in its chunk, beside its uses: its local chunk, its kind and where its forward and
 * backward reach it (partitioner/dp_overlap.h). */
typedef struct unit_place {
    int chunk, kind;
    bool expert;   /* a sparse block's routed experts (ep > 1): reduced and gathered over edp, not dp */
    double fwd_use, fwd_done, bwd_use, bwd_done;
} unit_place;

/* A unit spanning [a, b] of its chunk's forward matmul work (fractions): the backward runs it mirrored. */
static void place_span(unit_place *p, int chunk, int kind, double a, double b)
{
    *p = (unit_place){.chunk = chunk, .kind = kind, .expert = false, .fwd_use = a, .fwd_done = b,
                      .bwd_use = 1.0 - b, .bwd_done = 1.0 - a};
}

/* The units of parameters of rank r's chunks and how a pass uses them, as the engine's model
 * reports them (models/gpt.c, tri_gpt_unit_uses): a block, wpe and ln_f are read forward, read and
 * written backward; wte is read forward by the embedding and by the LM head, read and written
 * backward by the embedding, and written in the LM head's fused forward unless the head keeps its
 * own gradient (one chunk, ZeRO 0-1, not deterministic). An untied head (models/llama.c) is a unit of its
 * own, read and written in the loss's fused forward, and the embedding then a plain unit; rotary
 * positions have no table. *n units into a malloc'd array, or NULL; when place is not NULL it
 * receives a malloc'd array of where each unit sits (lookups at the forward's start, the blocks by
 * their elements, the final norm, the head's matmul at the end). Under expert parallelism (ep > 1) a
 * sparse block is two units over the same span, as engine/train/param.h cuts its parts where
 * spec.expert changes: the rest of the block (over dp) and its routed experts (unit_place.expert, over
 * the expert-data-parallel group, tri_expert_dp); the rest's parts on either side of the experts are
 * one unit here (the same bytes and uses). */
static tri_unit_uses *rank_units(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan,
                                 int r, int *n, unit_place **place)
{
    int cap = 0;
    for (int c = 0; c < plan->v; c++) {
        const tri_stage_place *pl = &plan->chunks[c * plan->pp + r];
        cap += 2 * (pl->layer_end - pl->layer_start) + 4;
    }
    tri_unit_uses *u = malloc((size_t)cap * sizeof *u);
    unit_place *at = place ? malloc((size_t)cap * sizeof *at) : NULL;
    *n = 0;
    if (!u || (place && !at)) {
        free(u);
        free(at);
        return NULL;
    }
    unit_place scratch;
    double h = (double)m->n_embd, t = l->tp, V_l = (double)tri_padded_vocab(m->vocab_size, l->tp) / t;
    int64_t block_len = (int64_t)tri_transformer_block(m, l).params;
    const tri_unit_uses plain = {.fwd_reads = 1, .bwd_reads = 1, .bwd_writes = 1};
#define AT(i) (at ? &at[i] : &scratch)
    for (int c = 0; c < plan->v; c++) {
        const tri_stage_place *pl = &plan->chunks[c * plan->pp + r];
        bool tied_here = !m->untied_head && (pl->first || (pl->last && plan->n_chunks > 1));
        int layers = pl->layer_end - pl->layer_start;
        double head = pl->last ? V_l * h : 0.0, W = (double)layers * (double)block_len + head;
        double blocks_end = W > 0 ? (double)layers * (double)block_len / W : 0.0;
        if (m->untied_head && pl->first) { /* the embedding alone */
            place_span(AT(*n), c, UNIT_TABLE, 0.0, 0.0);
            u[*n] = plain;
            u[(*n)++].len = (int64_t)(V_l * h);
        }
        if (tied_here) {
            tri_unit_uses wte = {.len = (int64_t)(V_l * h)};
            if (pl->first) {
                wte.fwd_reads++;
                wte.bwd_reads++;
                wte.bwd_writes++;
            }
            if (pl->last) {
                wte.fwd_reads++;
                wte.fwd_writes += !(pl->first && l->zero_stage < 2 && !l->deterministic);
            }
            if (pl->first && pl->last)  /* the lookup first and last, the head's matmul around the blocks */
                *AT(*n) = (unit_place){.chunk = c, .kind = UNIT_TABLE, .fwd_use = 0.0, .fwd_done = 1.0,
                                       .bwd_use = 0.0, .bwd_done = 1.0};
            else if (pl->first)
                place_span(AT(*n), c, UNIT_TABLE, 0.0, 0.0);
            else
                place_span(AT(*n), c, UNIT_TABLE, blocks_end, 1.0);
            u[(*n)++] = wte;
        }
        if (pl->first && tri_position_params(m) > 0) {
            place_span(AT(*n), c, UNIT_POSITIONS, 0.0, 0.0);
            u[*n] = plain;
            u[(*n)++].len = (int64_t)tri_position_params(m);
        }
        for (int b = pl->layer_start; b < pl->layer_end; b++) {
            double a0 = W > 0 ? (double)(b - pl->layer_start) * (double)block_len / W : 0.0;
            int64_t experts = l->ep > 1 ? (int64_t)tri_transformer_block_at(m, l, b).expert_params : 0;
            place_span(AT(*n), c, UNIT_BLOCK, a0, W > 0 ? a0 + (double)block_len / W : 0.0);
            u[*n] = plain;
            u[(*n)++].len = block_len - experts;
            if (experts > 0) {
                place_span(AT(*n), c, UNIT_BLOCK, a0, W > 0 ? a0 + (double)block_len / W : 0.0);
                AT(*n)->expert = true;
                u[*n] = plain;
                u[(*n)++].len = experts;
            }
        }
        if (pl->last && tri_final_norm_params(m) > 0) {
            place_span(AT(*n), c, UNIT_VECTOR, blocks_end, blocks_end);
            u[*n] = plain;
            u[(*n)++].len = (int64_t)tri_final_norm_params(m);
        }
        if (pl->last && m->untied_head) { /* the LM head: read by the loss, its gradient written there */
            place_span(AT(*n), c, UNIT_TABLE, blocks_end, 1.0);
            u[(*n)++] = (tri_unit_uses){.len = (int64_t)(V_l * h), .fwd_reads = 1, .fwd_writes = 1};
        }
    }
#undef AT
    if (place)
        *place = at;
    return u;
}

/* The step's data-parallel payload bytes of rank r's units of one group (time_model.h
 * tri_time_dp_traffic): expert false the units reduced over dp, true the routed experts' over edp
 * (without the loss's all-reduce, which goes over dp). */
static int group_traffic(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan, int r,
                         bool expert, double bytes[TRI_COMM_KINDS])
{
    int n_units = 0, n = 0;
    unit_place *at = NULL;
    tri_unit_uses *units = rank_units(m, l, plan, r, &n_units, &at);
    if (!units)
        return TRI_ERR(TRI_ENOMEM, "time model: out of memory");
    for (int k = 0; k < n_units; k++) /* this group's units, in order */
        if (at[k].expert == expert)
            units[n++] = units[k];
    uint64_t b[TRI_COMM_KINDS];
    int size = expert ? tri_expert_dp(l) : l->dp;
    /* gradients are reduced as fp32 in both precisions, parameters gathered in the model's dtype
       (bf16: 2 bytes; engine/train/zero.c, partitioner/traffic.h) */
    tri_dp_step_traffic_sized(units, n, l->zero_stage, l->n_micro, size, 4, tri_precision_bytes(l->precision), b);
    free(units);
    free(at);
    if (expert && size > 1)
        b[TRI_COMM_ALL_REDUCE] -= 8; /* the loss's, counted once with the dp group's */
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        bytes[k] = (double)b[k];
    return TRI_OK;
}

int tri_time_dp_traffic(const tri_transformer *m, const tri_train_layout *l_cp, const tri_stage_plan *plan, int r,
                        double bytes[TRI_COMM_KINDS])
{
    tri_train_layout dpl = tri_layout_cp_local(l_cp); /* the gradients' group: dp x cp */
    const tri_train_layout *l = &dpl;
    double e[TRI_COMM_KINDS];
    int rc = group_traffic(m, l, plan, r, false, bytes);
    if (!rc) rc = group_traffic(m, l, plan, r, true, e);
    for (int k = 0; k < TRI_COMM_KINDS && !rc; k++)
        bytes[k] += e[k];
    return rc;
}

/* Bytes the optimizer step streams per parameter of the shard (time_model.h). */
static double optimizer_bytes_per_param(tri_precision p)
{
    /* AdamW reads the weight, gradient, m and v and writes the weight, m and v (7 x 4 bytes); under
       bf16 mixed precision the weight is the fp32 master copy, which tri_zero_publish_owned then
       reads again (4) to write its bf16 rounding (2) into the model's parameters (engine/train/zero.c) */
    return p == TRI_PRECISION_BF16 ? 28.0 + 4.0 + 2.0 : 28.0;
}

/* Bytes one rank sends to reduce a unit's gradient once over dp (engine/train/grad_compression.h:
 * the ring volumes, or the compressor's payloads); PowerSGD takes each matrix of the unit apart (a
 * block's weights from its family, tri_block_cost.linear; the tables V_l x h and n_positions x h)
 * and the rest as vectors. */
static double unit_sent(const tri_transformer *m, const tri_train_layout *l, const tri_compression *cz, int kind,
                        int64_t len, int zero, bool compressed)
{
    if (!compressed || cz->kind != TRI_COMPRESS_POWERSGD || kind == UNIT_VECTOR)
        return (double)tri_compression_sent_bytes(cz, 1, len, l->dp, zero, compressed);
    if (kind == UNIT_TABLE || kind == UNIT_POSITIONS)
        return (double)tri_compression_sent_bytes(cz, len / m->n_embd, m->n_embd, l->dp, zero, true);
    tri_block_cost b = tri_transformer_block(m, l);
    double sent = 0.0;
    int64_t rest = len;
    for (int i = 0; i < b.n_linear; i++) {
        sent += (double)tri_compression_sent_bytes(cz, b.linear[i][1], b.linear[i][0], l->dp, zero, true);
        rest -= b.linear[i][0] * b.linear[i][1];
    }
    return rest > 0 ? sent + (double)tri_compression_sent_bytes(cz, 1, rest, l->dp, zero, true) : sent;
}

/* Of unit_sent's bytes, the second exchange's (tri_compression_second_bytes: two-phase's phase 2,
 * PowerSGD's Q), matrix by matrix as unit_sent takes them. */
static double unit_second(const tri_transformer *m, const tri_train_layout *l, const tri_compression *cz, int kind,
                          int64_t len, int zero, bool compressed)
{
    if (!compressed || cz->kind != TRI_COMPRESS_POWERSGD)
        return (double)tri_compression_second_bytes(cz, 1, len, l->dp, zero, compressed);
    if (kind == UNIT_VECTOR)
        return 0.0;
    if (kind == UNIT_TABLE || kind == UNIT_POSITIONS)
        return (double)tri_compression_second_bytes(cz, len / m->n_embd, m->n_embd, l->dp, zero, true);
    tri_block_cost b = tri_transformer_block(m, l);
    double second = 0.0;
    for (int i = 0; i < b.n_linear; i++)
        second += (double)tri_compression_second_bytes(cz, b.linear[i][1], b.linear[i][0], l->dp, zero, true);
    return second;
}

/* Memory traffic, in bytes, of compressing one bucket of len elements and decoding what the
 * reduction brings back: an estimate, each compressor taken as memory-bound passes over the
 * gradient (bench/ measures the real kernels). Encoding adds the residual to the gradient (read 2,
 * write 1: 12 bytes an element), then quantizes and writes the new residual (8): 20; top-k reads
 * the sum once more to select (24). Decoding (1bit, qsgd) adds each of the dp payloads into the
 * fp32 sum, read and written (8 bytes an element a payload), over the whole bucket at ZeRO 0 and
 * the owned 1/dp slice at ZeRO 1; top-k zeroes the sum (4) and scatter-adds dp x k pairs (16 each).
 * PowerSGD reads each matrix for P = M Q and Q = M^T P and writes P Q^T into the residual
 * (12), plus the error feedback (12); its vectors cost nothing. Two-phase (1bit, qsgd, topk): the
 * worker's encoding as above, the server decodes the dp payloads of its 1/dp chunk (together one
 * bucket's worth) and encodes the sum with its residual (1/dp of an encoding), and every rank
 * decodes the all-gathered chunks once over what it keeps. */
static double codec_bytes(const tri_transformer *m, const tri_train_layout *l, const tri_compression *cz, int kind,
                          int64_t len, int zero)
{
    double n = (double)len, D = l->dp, owned = zero == 0 ? n : n / D;
    switch (cz->kind) {
    case TRI_COMPRESS_1BIT:
    case TRI_COMPRESS_QSGD:
        if (cz->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE)
            return 20.0 * n + 8.0 * n + 20.0 * n / D + 8.0 * owned;
        return 20.0 * n + 8.0 * D * owned;
    case TRI_COMPRESS_TOPK:
        if (cz->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE) /* D chunks of k / D pairs: zero, scatter, select */
            return 24.0 * n + 2.0 * (4.0 * n / D + 16.0 * D * ceil((double)cz->topk_fraction * n / D)) +
                   24.0 * n / D + 4.0 * owned;
        return 24.0 * n + 4.0 * owned + 16.0 * D * ceil((double)cz->topk_fraction * n);
    case TRI_COMPRESS_POWERSGD: {
        if (kind == UNIT_VECTOR)
            return 0.0;
        double matrix = n;
        if (kind == UNIT_BLOCK) {
            tri_block_cost b = tri_transformer_block(m, l);
            matrix = 0.0;
            for (int i = 0; i < b.n_linear; i++)
                matrix += (double)b.linear[i][0] * (double)b.linear[i][1];
        }
        return 24.0 * matrix;
    }
    default:
        return 0.0;
    }
}

/* Rank r's units as the overlap simulation takes them (partitioner/dp_overlap.h), with their
 * reduction and all-gather times at bandwidth bw under c's data-parallel method (the routed experts'
 * units over the expert-data-parallel group at bandwidth bw_e, its ring factor), and the step's
 * bytes sent, codec time and stream total into out (local SGD: one synchronisation / H). *n_units
 * into a malloc'd array, or NULL. */
static tri_dp_unit *dp_units(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                             const tri_stage_plan *plan, int r, double bw_dp, double bw_e, int *n_units,
                             tri_time_result *out)
{
    unit_place *at = NULL;
    tri_unit_uses *uses = rank_units(m, l, plan, r, n_units, &at);
    tri_dp_unit *u = uses ? malloc((size_t)(*n_units > 0 ? *n_units : 1) * sizeof *u) : NULL;
    if (!u) {
        free(uses);
        free(at);
        return NULL;
    }
    const tri_compression *cz = &c->dp.compression;
    int H = c->dp.local_sgd_steps > 1 ? c->dp.local_sgd_steps : 1, z = l->zero_stage, pb = tri_precision_bytes(l->precision);
    double mem_rate = tri_cluster_mem_bw(c) * c->eff.memory;
    /* the two groups: dp, and the experts' edp (the same layout with dp = edp for the helpers) */
    tri_train_layout le = *l;
    le.dp = tri_expert_dp(l);
    out->dp_sent_bytes = out->dp_grad_sent_bytes = out->dp_sent_uncompressed = out->dp_codec_s = 0.0;
    out->dp_comm_s = 0.0;
    for (int k = 0; k < *n_units; k++) {
        const tri_unit_uses *x = &uses[k];
        const unit_place *p = &at[k];
        const tri_train_layout *g = p->expert ? &le : l; /* the unit's group */
        double len = (double)x->len, D = g->dp, bw = p->expert ? bw_e : bw_dp;
        bool compressed = cz->kind != TRI_COMPRESS_NONE && g->dp > 1;
        u[k] = (tri_dp_unit){.chunk = p->chunk, .fwd_reads = x->fwd_reads, .bwd_reads = x->bwd_reads,
                             .fwd_writes = x->fwd_writes, .bwd_writes = x->bwd_writes, .fwd_use = p->fwd_use,
                             .bwd_use = p->bwd_use, .fwd_done = p->fwd_done, .bwd_done = p->bwd_done};
        if (g->dp == 1)
            continue;
        if (H > 1) { /* local SGD's synchronisation: anchor all-gather, deltas' reduction, parameter all-gather (fp32) */
            double ag = tri_collective_seconds(TRI_COMM_ALL_GATHER, 4.0 * len, g->dp, bw);
            double delta = unit_sent(m, g, cz, p->kind, x->len, 1, compressed), plain = unit_sent(m, g, cz, p->kind, x->len, 1, false);
            double wire_ag = 2.0 * (D - 1.0) / D * 4.0 * len;
            out->dp_grad_sent_bytes += delta / H;
            out->dp_sent_bytes += (delta + wire_ag) / H;
            out->dp_sent_uncompressed += (plain + wire_ag) / H;
            out->dp_comm_s += (2.0 * ag + delta / bw) / H;
            if (compressed)
                out->dp_codec_s += codec_bytes(m, g, cz, p->kind, x->len, 1) / mem_rate / H;
            continue;
        }
        double grad = unit_sent(m, g, cz, p->kind, x->len, z, compressed), plain = unit_sent(m, g, cz, p->kind, x->len, z, false);
        double second = unit_second(m, g, cz, p->kind, x->len, z, compressed);
        u[k].reduce_s = compressed ? (grad - second) / bw
                                   : tri_collective_seconds(z == 0 ? TRI_COMM_ALL_REDUCE : TRI_COMM_REDUCE_SCATTER,
                                                            4.0 * len, g->dp, bw);
        u[k].reduce2_s = second / bw;
        u[k].gather_s = z >= 1 ? tri_collective_seconds(TRI_COMM_ALL_GATHER, len * pb, g->dp, bw) : 0.0;
        double reductions = z >= 2 ? (double)l->n_micro * (x->fwd_writes + x->bwd_writes) : 1.0;
        double gathers = z == 3 ? (double)l->n_micro * (x->fwd_reads + x->bwd_reads) : z >= 1 ? 1.0 : 0.0;
        double wire_ag = gathers * (D - 1.0) / D * len * pb;
        out->dp_grad_sent_bytes += reductions * grad;
        out->dp_sent_bytes += reductions * grad + wire_ag;
        out->dp_sent_uncompressed += reductions * plain + wire_ag;
        out->dp_comm_s += reductions * (u[k].reduce_s + u[k].reduce2_s) + gathers * u[k].gather_s;
        if (compressed)
            out->dp_codec_s += reductions * codec_bytes(m, g, cz, p->kind, x->len, z) / mem_rate;
    }
    if (l->dp > 1) { /* the loss's all-reduce, every step */
        double D = l->dp;
        out->dp_sent_bytes += 2.0 * (D - 1.0) / D * 8.0;
        out->dp_sent_uncompressed += 2.0 * (D - 1.0) / D * 8.0;
        out->dp_comm_s += tri_collective_seconds(TRI_COMM_ALL_REDUCE, 8.0, l->dp, bw_dp);
    }
    free(uses);
    free(at);
    return u;
}

/* Bandwidth of the expert-data-parallel group (tri_expert_dp ranks): within a stage numbered
 * s = tp_rank + tp dp_rank (tp fastest, as the dp group's stride tp says) its ranks are etp x ep apart
 * (Megatron-Core's parallel folding, engine/comm/grid.c tri_grid_add_experts), so it stays on a node
 * while etp ep edp = tp dp fits one. */
static double expert_bw(const tri_cluster *c, const tri_train_layout *l)
{
    int ep = l->ep > 1 ? l->ep : 1, etp = l->etp > 1 ? l->etp : 1;
    bool inter;
    return group_bw(c, ep * etp, tri_expert_dp(l), &inter);
}

/* The data-parallel options against the layout: TRI_EINVAL naming the flag and value. */
int tri_time_dp_method_check(const tri_dp_method *d, const tri_train_layout *l)
{
    int rc = tri_compression_check(&d->compression, l->zero_stage);
    if (rc)
        return rc;
    if (d->local_sgd_steps < 0)
        return TRI_ERR(TRI_EINVAL, "--local-sgd-steps %d: expected H >= 1 inner steps per outer synchronisation",
                       d->local_sgd_steps);
    /* the engine's own rule for local SGD with ZeRO (engine/train/local_sgd.h) */
    tri_local_sgd_config ls = {.steps = d->local_sgd_steps > 1 ? d->local_sgd_steps : 0, .outer = TRI_OUTER_AVERAGE,
                               .outer_lr = 1.0f};
    rc = tri_local_sgd_check(&ls, l->zero_stage);
    if (rc)
        return rc;
    return TRI_OK;
}

/* Whether rank timelines decide dp_s: an overlap flag, no --dp-comm-exposed, a reduction every step. */
static bool overlap_simulated(const tri_train_layout *l, const tri_cluster *c)
{
    return (l->overlap_grad_reduce || l->overlap_param_gather) && !c->dp_exposed_given && l->dp > 1 &&
           c->dp.local_sgd_steps <= 1;
}

/* Per-step work after the pipeline on rank r: data-parallel traffic, the replicated gradients' TP
 * all-reduce, the optimizer. dp_s is the exposed share of the whole dp stream here; under
 * overlap_simulated tri_time_model_run replaces it with the simulated exposure. */
static int per_step(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                    const tri_stage_plan *plan, int r, tri_time_result *out)
{
    int rc = tri_time_dp_method_check(&c->dp, l);
    if (rc)
        return rc;
    double psi = tri_time_rank_params(m, l, plan, r), dp_bytes[TRI_COMM_KINDS], e_bytes[TRI_COMM_KINDS];
    rc = group_traffic(m, l, plan, r, false, dp_bytes);
    if (!rc) rc = group_traffic(m, l, plan, r, true, e_bytes);
    if (rc)
        return rc;
    /* the dp group and the experts' edp group, each at its ring factor and link */
    double bw = group_bw(c, l->tp, l->dp, &out->dp_inter_node), bw_e = expert_bw(c, l), t = 0.0;
    int edp = tri_expert_dp(l);
    out->dp_bytes = out->dp_expert_bytes = out->dp_expert_s = 0.0;
    for (int k = 0; k < TRI_COMM_KINDS; k++) {
        double te = tri_collective_seconds(k, e_bytes[k], edp, bw_e);
        t += tri_collective_seconds(k, dp_bytes[k], l->dp, bw) + te;
        out->dp_expert_s += c->eff.dp_exposed * te;
        out->dp_bytes += dp_bytes[k] + e_bytes[k];
        out->dp_expert_bytes += e_bytes[k];
    }
    int n_units = 0;
    tri_dp_unit *units = dp_units(m, l, c, plan, r, bw, bw_e, &n_units, out);
    if (!units)
        return TRI_ERR(TRI_ENOMEM, "time model: out of memory");
    free(units);
    bool plain = c->dp.compression.kind == TRI_COMPRESS_NONE && c->dp.local_sgd_steps <= 1;
    if (c->dp.local_sgd_steps > 1) /* the payload convention of the synchronisation: 3 x 4 bytes an element, / H */
        out->dp_bytes = (3.0 * (out->dp_bytes > 0 ? 4.0 * psi : 0.0)) / c->dp.local_sgd_steps + (l->dp > 1 ? 8.0 : 0.0);
    out->dp_s = c->eff.dp_exposed * (plain ? t : out->dp_comm_s) + out->dp_codec_s;
    tri_layout_shape shape = tri_train_layout_shape(l);
    bool inter;
    double tp_bw = group_bw(c, 1, l->tp, &inter);
    for (int k = 0; k < plan->v; k++) {   /* the replicated gradients are fp32 in both precisions */
        uint64_t fixed = tri_tp_step_fixed_traffic(m, &shape, &plan->chunks[k * plan->pp + r], 4);
        out->tp_s += c->eff.tp_exposed * tri_collective_seconds(TRI_COMM_ALL_REDUCE, (double)fixed, l->tp, tp_bw);
        out->tp_bytes += (double)fixed;
    }
    double psi_e = 0.0;   /* the routed experts': ZeRO shards them over edp */
    for (int k = 0; k < plan->v; k++) {
        const tri_stage_place *pl = &plan->chunks[k * plan->pp + r];
        psi_e += tri_transformer_blocks(m, l, pl->layer_start, pl->layer_end).expert_params;
    }
    double shard = l->zero_stage >= 1 ? (psi - psi_e) / l->dp + psi_e / tri_expert_dp(l) : psi;
    out->optimizer_s = optimizer_bytes_per_param(l->precision) * shard / (tri_cluster_mem_bw(c) * c->eff.memory);
    return TRI_OK;
}

/* The step's exposed dp time from every pipeline rank's timeline (partitioner/dp_overlap.h): the
 * latest rank's end, dp included, past the pipeline's makespan. */
static int simulated_dp(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                        const tri_stage_plan *plan, const tri_schedule *s, const tri_sim_result *sim,
                        tri_time_result *out)
{
    bool inter;
    double bw = group_bw(c, l->tp, l->dp, &inter), finish = 0.0, blocking = 0.0;
    tri_dp_stream st = {.zero_stage = l->zero_stage, .n_micro = l->n_micro,
                        .overlap_grad_reduce = l->overlap_grad_reduce, .overlap_param_gather = l->overlap_param_gather,
                        .tail_s = tri_collective_seconds(TRI_COMM_ALL_REDUCE, 8.0, l->dp, bw)};
    for (int r = 0; r < plan->pp; r++) {
        tri_time_result scratch = *out;
        int n_units = 0;
        tri_dp_unit *units = dp_units(m, l, c, plan, r, bw, expert_bw(c, l), &n_units, &scratch);
        if (!units)
            return TRI_ERR(TRI_ENOMEM, "time model: out of memory");
        tri_dp_overlap ov, bl;
        tri_dp_stream none = st;
        none.overlap_grad_reduce = none.overlap_param_gather = false;
        int rc = tri_dp_overlap_rank(s, sim, r, units, n_units, &st, &ov);
        if (!rc)
            rc = tri_dp_overlap_rank(s, sim, r, units, n_units, &none, &bl);
        free(units);
        if (rc)
            return rc;
        if (ov.finish_s > finish)
            finish = ov.finish_s;
        if (bl.finish_s > blocking)
            blocking = bl.finish_s;
        if (r == out->busiest_rank)
            out->dp_stall_s = ov.stall_s;
    }
    out->dp_s = (finish > sim->makespan ? finish - sim->makespan : 0.0) + out->dp_codec_s;
    out->dp_blocking_s = (blocking > sim->makespan ? blocking - sim->makespan : 0.0) + out->dp_codec_s;
    out->dp_overlap_simulated = true;
    return TRI_OK;
}

static void throughput(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                       tri_time_result *out)
{
    out->iteration_s = out->compute_s + out->tp_s + out->ep_s + out->cp_s + out->bubble_s + out->pp_s + out->dp_s +
                       out->optimizer_s;
    out->model_flops = tri_iteration_flops(m, l->global_batch, l->T, false);
    out->hw_flops = tri_iteration_hw_flops(m, l->global_batch, l->T, tri_layout_recomputes(l));
    double peak = tri_cluster_peak(c, l->precision);
    out->tokens_per_s = (double)l->global_batch * (double)l->T / out->iteration_s;
    out->model_tflops_per_gpu = out->model_flops / out->iteration_s / c->num_gpus / 1e12;
    out->mfu = out->model_tflops_per_gpu * 1e12 / peak;
    out->hfu = out->hw_flops / out->iteration_s / c->num_gpus / peak;
}

/* Fills the per-chunk times, their means and the pipeline-message time. */
static int chunk_times(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                       const tri_stage_plan *plan, tri_chunk_time **times, tri_time_result *out)
{
    int n = plan->n_chunks;
    *times = malloc((size_t)n * sizeof **times);
    if (!*times)
        return TRI_ERR(TRI_ENOMEM, "time model: out of memory");
    out->fwd_s = out->bwd_s = 0.0;
    for (int g = 0; g < n; g++) {
        (*times)[g] = tri_time_chunk(m, l, c, plan, g);
        out->fwd_s += ((*times)[g].fwd_compute + (*times)[g].fwd_tp + (*times)[g].fwd_ep + (*times)[g].fwd_cp) / n;
        out->bwd_s += ((*times)[g].bwd_compute + (*times)[g].bwd_tp + (*times)[g].bwd_ep + (*times)[g].bwd_cp) / n;
    }
    tri_train_layout local = tri_layout_cp_local(l); /* the message is a rank's T_l rows */
    tri_layout_shape shape = tri_train_layout_shape(&local);
    double bytes = (double)tri_pp_message_bytes(m, &shape, tri_precision_bytes(l->precision));
    out->pp_inter_node = l->pp > 1 && (double)l->tp * tri_layout_cp(l) * l->dp * l->pp > c->gpus_per_node;
    double bw = out->pp_inter_node ? tri_cluster_inter_bw(c) * c->eff.inter : c->hw->intra_bw * c->eff.intra;
    out->p2p_message_s = l->pp > 1 ? bytes / bw : 0.0;
    out->pp_bytes = l->pp > 1 ? 2.0 * bytes * l->n_micro * plan->v : 0.0;
    bool inter;
    group_bw(c, 1, l->tp, &inter);
    out->tp_inter_node = inter;
    group_bw(c, l->etp > 1 ? l->etp : 1, l->ep > 1 ? l->ep : 1, &inter);
    out->ep_inter_node = inter;
    group_bw(c, l->tp, tri_layout_cp(l), &inter);
    out->cp_inter_node = inter;
    return TRI_OK;
}

/* Compute and TP time of pipeline rank r per iteration, from the exact chunk times. */
static void rank_split(const tri_stage_plan *plan, const tri_chunk_time *times, int m_micro, int r,
                       double *compute, double *tp, double *ep, double *cp)
{
    *compute = *tp = *ep = *cp = 0.0;
    for (int c = 0; c < plan->v; c++) {
        const tri_chunk_time *t = &times[c * plan->pp + r];
        *compute += m_micro * (t->fwd_compute + t->bwd_compute);
        *tp += m_micro * (t->fwd_tp + t->bwd_tp);
        *ep += m_micro * (t->fwd_ep + t->bwd_ep);
        *cp += m_micro * (t->fwd_cp + t->bwd_cp);
    }
}

static void tp_bytes_of_rank(const tri_transformer *m, const tri_train_layout *l_in, const tri_stage_plan *plan,
                             int r, const tri_cluster *cl, tri_time_result *out)
{
    tri_train_layout local = tri_layout_cp_local(l_in); /* a rank's T_l rows */
    const tri_train_layout *l = &local;
    tri_layout_shape shape = tri_train_layout_shape(l);
    for (int c = 0; c < plan->v; c++) {
        const tri_stage_place *pl = &plan->chunks[c * plan->pp + r];
        double cf, cb, cbytes;
        cp_chunk_time(m, l_in, cl, pl->layer_end - pl->layer_start, &cf, &cb, &cbytes);
        out->cp_bytes += l->n_micro * cbytes;
        uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
        tri_tp_microbatch_traffic(m, &shape, &plan->chunks[c * plan->pp + r], tri_precision_bytes(l->precision),
                                  fwd, bwd);
        double again = l->recompute == TRI_RECOMPUTE_FULL ? sum_bytes(fwd) : 0.0;  /* recomputed forward */
        out->tp_bytes += l->n_micro * (sum_bytes(fwd) + sum_bytes(bwd) + again);
        tri_ep_microbatch_traffic(m, l, &plan->chunks[c * plan->pp + r], tri_precision_bytes(l->precision), fwd, bwd);
        again = l->recompute == TRI_RECOMPUTE_FULL ? sum_bytes(fwd) : 0.0;
        out->ep_bytes += l->n_micro * (sum_bytes(fwd) + sum_bytes(bwd) + again);
    }
}

int tri_time_model_run(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                       const tri_stage_plan *plan, const tri_schedule *s, tri_time_result *out,
                       tri_sim_result *sim)
{
    memset(out, 0, sizeof *out);
    if (sim)
        memset(sim, 0, sizeof *sim);
    tri_chunk_time *times = NULL;
    int rc = chunk_times(m, l, c, plan, &times, out);
    if (rc)
        return rc;
    int n = plan->n_chunks;
    double *scale = malloc((size_t)n * sizeof *scale);
    if (!scale) {
        free(times);
        return TRI_ERR(TRI_ENOMEM, "time model: out of memory");
    }
    double mean = out->fwd_s + out->bwd_s;
    for (int g = 0; g < n; g++)
        scale[g] = mean > 0 ? (times[g].fwd_compute + times[g].fwd_tp + times[g].fwd_ep + times[g].fwd_cp +
                               times[g].bwd_compute + times[g].bwd_tp + times[g].bwd_ep + times[g].bwd_cp) / mean
                            : 1.0;
    tri_sim_costs costs = {.fwd = out->fwd_s, .bwd = out->bwd_s, .bwd_input = out->bwd_s / 2,
                           .bwd_weight = out->bwd_s / 2, .comm = 0.0, .chunk_scale = scale};
    tri_sim_result quiet = {0}, timed = {0};
    rc = tri_schedule_simulate(s, &costs, &quiet);
    if (!rc) {
        costs.comm = out->p2p_message_s;
        rc = tri_schedule_simulate(s, &costs, &timed);
    }
    if (!rc) {
        int r_max = 0;
        for (int r = 1; r < plan->pp; r++)
            if (timed.busy[r] > timed.busy[r_max])
                r_max = r;
        double compute, tp, ep, cpt;
        rank_split(plan, times, l->n_micro, r_max, &compute, &tp, &ep, &cpt);
        double busy = timed.busy[r_max], exact = compute + tp + ep + cpt;
        out->busiest_rank = r_max;
        out->compute_s = exact > 0 ? busy * compute / exact : 0.0;
        out->tp_s = exact > 0 ? busy * tp / exact : 0.0;
        out->ep_s = exact > 0 ? busy * ep / exact : 0.0;
        out->cp_s = exact > 0 ? busy * cpt / exact : 0.0;
        out->makespan_no_comm_s = quiet.makespan;
        out->makespan_s = timed.makespan;
        out->bubble_s = quiet.makespan > busy ? quiet.makespan - busy : 0.0;
        out->pp_s = timed.makespan > quiet.makespan ? timed.makespan - quiet.makespan : 0.0;
        out->bubble_fraction = timed.bubble;
        out->simulated = true;
        tp_bytes_of_rank(m, l, plan, r_max, c, out);
        tri_train_layout dpl = tri_layout_cp_local(l); /* the gradients' group: dp x cp */
        rc = per_step(m, &dpl, c, plan, r_max, out);
        if (!rc && overlap_simulated(&dpl, c))
            rc = simulated_dp(m, &dpl, c, plan, s, &timed, out);
        throughput(m, l, c, out);
    }
    if (!rc && sim)
        *sim = timed;     /* the caller frees it */
    else
        tri_sim_result_free(&timed);
    tri_sim_result_free(&quiet);
    free(scale);
    free(times);
    return rc;
}

void tri_time_model_quick(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                          const tri_stage_plan *plan, tri_time_result *out)
{
    memset(out, 0, sizeof *out);
    tri_chunk_time *times = NULL;
    if (chunk_times(m, l, c, plan, &times, out))
        return;
    int r_max = 0;
    double best = -1.0, compute = 0.0, tp = 0.0, ep = 0.0, cpt = 0.0;
    for (int r = 0; r < plan->pp; r++) {
        double cr, tr, er, pr;
        rank_split(plan, times, l->n_micro, r, &cr, &tr, &er, &pr);
        if (cr + tr + er + pr > best) {
            best = cr + tr + er + pr;
            r_max = r;
            compute = cr;
            tp = tr;
            ep = er;
            cpt = pr;
        }
    }
    double pair = out->fwd_s + out->bwd_s, p = plan->pp;
    out->busiest_rank = r_max;
    out->compute_s = compute;
    out->tp_s = tp;
    out->ep_s = ep;
    out->cp_s = cpt;
    if (l->schedule && strcmp(l->schedule, "zb-h1") == 0)
        out->bubble_s = (p - 1.0) * (out->fwd_s + out->bwd_s / 2);
    else
        out->bubble_s = (p - 1.0) / plan->v * pair;
    out->pp_s = 2.0 * (p - 1.0) * out->p2p_message_s;
    out->bubble_fraction = out->bubble_s / (out->bubble_s + compute + tp + ep + cpt);
    tp_bytes_of_rank(m, l, plan, r_max, c, out);
    tri_train_layout dpl = tri_layout_cp_local(l); /* the gradients' group: dp x cp */
    if (per_step(m, &dpl, c, plan, r_max, out) != TRI_OK)
        out->dp_s = 1e300;   /* out of memory: rank it last */
    throughput(m, l, c, out);
    free(times);
}

int tri_time_model_calibrate_gemm(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                                  const tri_stage_plan *plan, const tri_schedule *s, double measured_s,
                                  double *gemm)
{
    tri_cluster probe = *c;
    tri_time_result t;
    probe.eff.gemm = 1.0;
    int rc = tri_time_model_run(m, l, &probe, plan, s, &t, NULL);
    if (rc)
        return rc;
    if (t.iteration_s > measured_s)
        return TRI_ERR(TRI_EINVAL, "a measured iteration of %.4g s is faster than the model allows even at 100%% "
                       "of the peak (%.4g s): check --hardware, --num-gpus, --gpus-per-node and the layout flags",
                       measured_s, t.iteration_s);
    double lo = 1e-6, hi = 1.0;
    for (int i = 0; i < 60; i++) {
        double mid = 0.5 * (lo + hi);
        probe.eff.gemm = mid;
        rc = tri_time_model_run(m, l, &probe, plan, s, &t, NULL);
        if (rc)
            return rc;
        if (t.iteration_s > measured_s)
            lo = mid;
        else
            hi = mid;
    }
    *gemm = 0.5 * (lo + hi);
    return TRI_OK;
}
