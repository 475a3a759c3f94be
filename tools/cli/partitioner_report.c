/* tools/cli/partitioner_report.c - the partitioner CLI's text and JSON output (see
 * partitioner_report.h). */
#include "tools/cli/partitioner_report.h"

#include <cJSON.h>
#include <math.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/memory_model.h"
#include "partitioner/memory_table.h"

static const char *kind_keys[TRI_MEM_KINDS] = {"parameters", "gradients", "optimizer", "activations",
                                               "communication", "workspace"};

static const char *link_name(bool inter)
{
    return inter ? "InfiniBand" : "NVLink";
}

static const char *link_name_of(const tri_cluster *c, bool inter)
{
    return c->hw->cpu ? (inter ? "network" : "shared memory") : link_name(inter);
}

/* "0-1 (2) + embedding" for each chunk of rank r, joined by ", ". */
static void stage_layers(const tri_preview *p, int r, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (int c = 0; c < p->plan.v; c++) {
        const tri_stage_place *s = &p->plan.chunks[c * p->plan.pp + r];
        size_t used = strlen(buf);
        snprintf(buf + used, cap - used, "%s%d-%d%s%s", c ? ", " : "", s->layer_start, s->layer_end - 1,
                 s->first ? " +emb" : "", s->last ? " +head" : "");
    }
}

static int rank_layers(const tri_preview *p, int r)
{
    int n = 0;
    for (int c = 0; c < p->plan.v; c++)
        n += p->plan.chunks[c * p->plan.pp + r].layer_end - p->plan.chunks[c * p->plan.pp + r].layer_start;
    return n;
}

static const char *memory_source(const tri_preview *p)
{
    if (p->from_engine_plan)
        return "the engine's plan, tri_model_rank_plan: the bytes engine_train allocates; TP rank 0, DP rank 0";
    if (p->layout.precision == TRI_PRECISION_BF16)
        return "formulas: partitioner/memory_model.h, bf16";
    return "formulas: partitioner/memory_model.h, fp32";
}

static void print_header(FILE *f, const tri_preview *p, const tri_report_info *in)
{
    const tri_train_layout *l = &p->layout;
    const tri_cluster *c = &p->cluster;
    int nodes = (c->num_gpus + c->gpus_per_node - 1) / c->gpus_per_node;
    char params[64];
    if (in->n_params >= 1e9)
        snprintf(params, sizeof params, "%.4gB", in->n_params / 1e9);
    else
        snprintf(params, sizeof params, "%.4gM", in->n_params / 1e6);
    if (p->model.n_experts > 0) {   /* a mixture of experts: total and active (model FLOPs use these) */
        double total, active;
        tri_transformer_params(&p->model, &total, &active);
        size_t used = strlen(params);
        snprintf(params + used, sizeof params - used, " total (%lld experts, top-%lld), %.4g%s active", (long long)p->model.n_experts,
                 (long long)p->model.experts_per_tok, active >= 1e9 ? active / 1e9 : active / 1e6, active >= 1e9 ? "B" : "M");
    }
    fprintf(f, "model: %s: %lld layers, %lld heads%s, n_embd %lld, vocab %lld (%lld padded at tp %d), %s "
            "parameters\n", in->model_name, (long long)p->model.n_layer, (long long)p->model.n_head, p->model.block_text,
            (long long)p->model.n_embd, (long long)p->model.vocab_size,
            (long long)tri_padded_vocab(p->model.vocab_size, l->tp), l->tp, params);
    fprintf(f, "cluster: %d x %s (%s), %d per node = %d node%s; %.4g TFLOP/s %s peak per %s\n", c->num_gpus,
            c->hw->name, c->hw->description, c->gpus_per_node, nodes, nodes == 1 ? "" : "s",
            tri_cluster_peak(c, l->precision) / 1e12, tri_precision_name(l->precision), c->hw->cpu ? "rank" : "GPU");
    char sched[96];
    if (l->v > 1)
        snprintf(sched, sizeof sched, "interleaved 1F1B, %d model chunks per rank", l->v);
    else
        snprintf(sched, sizeof sched, "%s", l->schedule);
    char experts[96] = "";
    if (l->ep > 1 || l->etp > 1)
        snprintf(experts, sizeof experts, "; experts: etp %d x ep %d x edp %d", l->etp, l->ep, tri_expert_dp(l));
    char cp[96] = ""; /* context parallelism: tp x cp x pp x dp ranks */
    if (tri_layout_cp(l) > 1)
        snprintf(cp, sizeof cp, " x cp %d (%s, %lld rows a rank)", l->cp, tri_cp_comm_type_name(l->cp_comm_type),
                 (long long)(l->T / l->cp));
    fprintf(f, "layout: tp %d%s x pp %d x dp %d%s%s; %s; micro-batch %lld x seq %lld, %d micro-batches per replica, "
            "global batch %lld (%lld tokens); ZeRO %d; recompute %s; %s attention; %s\n", l->tp, cp, l->pp, l->dp,
            l->sequence_parallel ? " (sequence parallel)" : "", experts, sched, (long long)l->B, (long long)l->T, l->n_micro,
            (long long)l->global_batch, (long long)(l->global_batch * l->T), l->zero_stage,
            tri_recompute_name(l->recompute), tri_attention_backend_name(l->attention),
            l->precision == TRI_PRECISION_BF16 ? "bf16 mixed precision" : "fp32");
}

static void print_stages(FILE *f, const tri_preview *p)
{
    fprintf(f, "\nstage placement (%s split; cost = max(FLOP share, memory share), largest %.4f, ideal %.4f):\n",
            p->plan.method, p->plan.max_cost, 1.0 / p->plan.n_chunks);
    fprintf(f, "  %-5s %-34s %6s  %-14s %s\n", "stage", "layers", "count", "ranks", "nodes");
    for (int r = 0; r < p->pp; r++) {
        char layers[256], ranks[40], nodes[40];
        int lo, hi, nlo, nhi;
        stage_layers(p, r, layers, sizeof layers);
        tri_preview_stage_ranks(p, r, &lo, &hi, &nlo, &nhi);
        snprintf(ranks, sizeof ranks, "%d-%d", lo, hi);
        if (nlo == nhi)
            snprintf(nodes, sizeof nodes, "%d", nlo);
        else
            snprintf(nodes, sizeof nodes, "%d-%d", nlo, nhi);
        fprintf(f, "  %-5d %-34s %6d  %-14s %s\n", r, layers, rank_layers(p, r), ranks, nodes);
    }
}

static void print_memory(FILE *f, const tri_preview *p)
{
    fprintf(f, "\n");
    tri_memory_table_print(f, p->pp, (const double (*)[TRI_MEM_KINDS])p->mem, p->in_flight, p->usable_bytes,
                           memory_source(p));
    int worst = 0;
    for (int r = 1; r < p->pp; r++)
        if (p->total[r] > p->total[worst])
            worst = r;
    char a[32], b[32];
    fprintf(f, "  -> %s (fullest: stage %d, %s of %s usable)\n",
            p->all_fit ? "every stage fits" : "DOES NOT FIT", worst, tri_format_bytes(p->total[worst], a, sizeof a),
            tri_format_bytes(p->usable_bytes, b, sizeof b));
    if (p->from_engine_plan) {
        double worst_off = 0.0;
        for (int r = 0; r < p->pp; r++) {
            double off = (p->model_total[r] - p->total[r]) / p->total[r];
            worst_off = fabs(off) > worst_off ? fabs(off) : worst_off;
        }
        bool extra = p->layout.deterministic || p->layout.overlap_grad_reduce || p->layout.overlap_param_gather;
        fprintf(f, "  (the formulas of partitioner/memory_model.h give totals within %.2f%% of the engine's plan%s)\n",
                100.0 * worst_off, extra ? "; they leave out the deterministic / overlap buffers" : "");
    }
}

/* Whether the report adds the data-parallel method's figures (see partitioner_report.h). */
static bool dp_extra(const tri_preview *p)
{
    const tri_cluster *c = &p->cluster;
    return c->dp.compression.kind != TRI_COMPRESS_NONE || c->dp.local_sgd_steps > 1 || c->inter_bw > 0 ||
           p->layout.overlap_grad_reduce || p->layout.overlap_param_gather;
}

/* "1bit (block 256)", "local SGD H 16 + qsgd (7 levels, block 256)", ... */
static void method_name(const tri_dp_method *d, char *buf, size_t cap)
{
    const tri_compression *z = &d->compression;
    char comp[96];
    switch (z->kind) {
    case TRI_COMPRESS_1BIT: snprintf(comp, sizeof comp, "1bit (block %d)", z->block_size); break;
    case TRI_COMPRESS_QSGD: snprintf(comp, sizeof comp, "qsgd (%d levels, block %d)", z->qsgd_levels, z->block_size); break;
    case TRI_COMPRESS_TOPK: snprintf(comp, sizeof comp, "topk (fraction %g)", (double)z->topk_fraction); break;
    case TRI_COMPRESS_POWERSGD: snprintf(comp, sizeof comp, "powersgd (rank %d)", z->powersgd_rank); break;
    default: snprintf(comp, sizeof comp, "fp32"); break;
    }
    if (z->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE && z->kind != TRI_COMPRESS_NONE) {
        size_t len = strlen(comp);
        snprintf(comp + len, sizeof comp - len, " two-phase");
    }
    if (d->local_sgd_steps > 1)
        snprintf(buf, cap, "local SGD H %d, %s synchronisation", d->local_sgd_steps, comp);
    else
        snprintf(buf, cap, "%s reduction every step", comp);
}

static double ratio(const tri_time_result *t)
{
    return t->dp_sent_bytes > 0 ? t->dp_sent_uncompressed / t->dp_sent_bytes : 1.0;
}

static void print_dp_method(FILE *f, const tri_preview *p)
{
    const tri_time_result *t = &p->time;
    char name[160];
    method_name(&p->cluster.dp, name, sizeof name);
    char vs[96] = "";
    if (t->dp_sent_bytes != t->dp_sent_uncompressed)
        snprintf(vs, sizeof vs, " (%.2fx less than fp32 reductions, %.4g MB)", ratio(t), t->dp_sent_uncompressed / 1e6);
    fprintf(f, "  %-10s %s: sends %.4g MB per step per rank%s, %#.4g s of DP communication at %.4g Gb/s%s; "
            "encode + decode %#.3g s (memory-bound estimate), stalls %#.3g s\n", "DP method", name,
            t->dp_sent_bytes / 1e6, vs, t->dp_comm_s,
            (t->dp_inter_node ? tri_cluster_inter_bw(&p->cluster) : p->cluster.hw->intra_bw) * 8 / 1e9,
            t->dp_inter_node ? " between nodes" : " inside a node", t->dp_codec_s, t->dp_stall_s);
}

/* Whether row k reduces two-phase (1bit, qsgd, topk with --grad-compression-reduce two-phase). */
static bool two_phase_row(const tri_dp_sweep *sw, int k)
{
    return sw->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE &&
           (k == TRI_COMPRESS_1BIT || k == TRI_COMPRESS_QSGD || k == TRI_COMPRESS_TOPK);
}

static void print_sweep(FILE *f, const tri_preview *p, const tri_dp_sweep *sw)
{
    fprintf(f, "\ndata-parallel methods by inter-node bandwidth (predicted s per iteration; MB sent per step per rank)%s:\n",
            p->time.dp_inter_node ? "" : " - data parallelism stays inside a node here, so the bandwidth changes nothing");
    fprintf(f, "  %-22s %10s", "method", "MB/step");
    for (int b = 0; b < TRI_SWEEP_BANDWIDTHS; b++)
        fprintf(f, "  %6.0f Gb/s", sw->gbps[b]);
    fprintf(f, "\n");
    for (int k = 0; k < sw->rows; k++) {
        char name[48];
        if (k < TRI_COMPRESS_KINDS)
            snprintf(name, sizeof name, "%s%s", tri_compression_name((tri_compression_kind)k),
                     two_phase_row(sw, k) ? " two-phase" : "");
        else
            snprintf(name, sizeof name, "local SGD H %d", sw->local_sgd_steps);
        const tri_dp_sweep_cell *c0 = &sw->cell[0][k];
        if (c0->refused) {
            fprintf(f, "  %-22s refused at ZeRO %d (compression needs ZeRO 0-1, local SGD ZeRO 0)\n", name,
                    p->layout.zero_stage);
            continue;
        }
        fprintf(f, "  %-22s %10.4g", name, c0->time.dp_sent_bytes / 1e6);
        for (int b = 0; b < TRI_SWEEP_BANDWIDTHS; b++)
            fprintf(f, "  %11.4g", sw->cell[b][k].time.iteration_s);
        fprintf(f, "\n");
    }
}

static void print_time(FILE *f, const tri_preview *p, const tri_report_info *in)
{
    const tri_time_result *t = &p->time;
    const tri_cluster *c = &p->cluster;
    const tri_train_layout *l = &p->layout;
    double T = t->iteration_s;
    double closed = (p->pp - 1.0) / (l->v * (double)l->n_micro + p->pp - 1.0);
    fprintf(f, "\ntime per iteration (predicted; stage %d is the busiest): %#.4g s\n", t->busiest_rank, T);
    fprintf(f, "  %-10s %#10.4g s %5.1f%%  matmuls at %.1f%% of %.4g TFLOP/s, elementwise at %.0f%% of %.4g GB/s\n",
            "compute", t->compute_s, 100 * t->compute_s / T, 100 * c->eff.gemm,
            tri_cluster_peak(c, l->precision) / 1e12, 100 * c->eff.memory, tri_cluster_mem_bw(c) / 1e9);
    fprintf(f, "  %-10s %#10.4g s %5.1f%%  %.4g GB per rank over %s, %.0f%% exposed\n", "TP comm", t->tp_s,
            100 * t->tp_s / T, t->tp_bytes / 1e9, link_name_of(c, t->tp_inter_node), 100 * c->eff.tp_exposed);
    if (l->ep > 1 || l->etp > 1)
        fprintf(f, "  %-10s %#10.4g s %5.1f%%  %.4g GB per rank over %s (all-to-all dispatch and combine, uniform "
                "routing)\n", "EP comm", t->ep_s, 100 * t->ep_s / T, t->ep_bytes / 1e9, link_name_of(c, t->ep_inter_node));
    if (tri_layout_cp(l) > 1)
        fprintf(f, "  %-10s %#10.4g s %5.1f%%  %.4g GB per rank over %s (key/value %s, %s)\n", "CP comm", t->cp_s,
                100 * t->cp_s / T, t->cp_bytes / 1e9, link_name_of(c, t->cp_inter_node),
                tri_cp_comm_type_name(l->cp_comm_type),
                l->cp_comm_type == TRI_CP_COMM_P2P ? "exposed: max(0, transfer - block attention) a ring step"
                                                    : "all exposed");
    fprintf(f, "  %-10s %#10.4g s %5.1f%%  simulated bubble %.1f%% of the pipeline (closed form (p-1)/(v m+p-1) "
            "%.1f%%)\n", "bubble", t->bubble_s, 100 * t->bubble_s / T, 100 * t->bubble_fraction, 100 * closed);
    fprintf(f, "  %-10s %#10.4g s %5.1f%%  %.4g GB per rank over %s, %.3g ms a message\n", "PP comm", t->pp_s,
            100 * t->pp_s / T, t->pp_bytes / 1e9, link_name_of(c, t->pp_inter_node), 1e3 * t->p2p_message_s);
    bool plain = c->dp.compression.kind == TRI_COMPRESS_NONE && c->dp.local_sgd_steps <= 1;
    char exposure[160] = "";
    if (t->dp_overlap_simulated)
        snprintf(exposure, sizeof exposure, "overlap simulated: %#.4g of %#.4g s exposed", t->dp_s - t->dp_codec_s,
                 t->dp_comm_s);
    else
        snprintf(exposure, sizeof exposure, "%.0f%% exposed", 100 * c->eff.dp_exposed);
    if (t->dp_codec_s > 0) {
        size_t used = strlen(exposure);
        snprintf(exposure + used, sizeof exposure - used, ", + encode/decode %#.3g s", t->dp_codec_s);
    }
    fprintf(f, "  %-10s %#10.4g s %5.1f%%  ZeRO %d, %.4g GB %sper rank over %s, %s\n", "DP comm", t->dp_s,
            100 * t->dp_s / T, l->zero_stage, (plain ? t->dp_bytes : t->dp_sent_bytes) / 1e9, plain ? "" : "sent ",
            link_name_of(c, t->dp_inter_node), exposure);
    if (dp_extra(p))
        print_dp_method(f, p);
    fprintf(f, "  %-10s %#10.4g s %5.1f%%  AdamW over the rank's shard\n", "optimizer", t->optimizer_s,
            100 * t->optimizer_s / T);
    if ((l->overlap_grad_reduce || l->overlap_param_gather) && c->dp_exposed_given)
        fprintf(f, "  note: --dp-comm-exposed %.2f replaces the simulated DP overlap\n", c->eff.dp_exposed);
    else if (t->dp_overlap_simulated)
        fprintf(f, "  note: DP overlap simulated: each rank's reductions and all-gathers on one comm stream against its "
                "simulated compute, as the engine issues them (partitioner/dp_overlap.h)\n");
    fprintf(f, "throughput: %.0f tokens/s; %.4g model TFLOP/s per %s; MFU %.1f%% (HFU %.1f%%)\n", t->tokens_per_s,
            t->model_tflops_per_gpu, c->hw->cpu ? "rank" : "GPU", 100 * t->mfu, 100 * t->hfu);
    fprintf(f, "FLOPs per iteration: %.4g model (Narayanan et al. 2021 eq. 3), %.4g executed with recompute %s\n",
            t->model_flops, t->hw_flops, tri_recompute_name(l->recompute));
    fprintf(f, "fractions: gemm %.3f (%s), memory %.2f, %s %.2f, %s %.2f, TP exposed %.2f, DP exposed %.2f\n",
            c->eff.gemm, in->gemm_source, c->eff.memory, link_name_of(c, false), c->eff.intra, link_name_of(c, true),
            c->eff.inter, c->eff.tp_exposed, c->eff.dp_exposed);
    fprintf(f, "sources: memory from %s; time from formulas (partitioner/time_model.h) and the simulated %s "
            "schedule\n", p->from_engine_plan ? "the engine's plan" : "formulas", p->sched.name);
}

void tri_report_text(FILE *f, const tri_preview *p, const tri_report_info *info, const tri_dp_sweep *sweep)
{
    print_header(f, p, info);
    print_stages(f, p);
    print_memory(f, p);
    print_time(f, p, info);
    if (sweep)
        print_sweep(f, p, sweep);
}

/* ---- JSON ---- */

static cJSON *layout_json(const tri_train_layout *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "tensor_model_parallel_size", l->tp);
    cJSON_AddNumberToObject(o, "context_parallel_size", tri_layout_cp(l));
    cJSON_AddStringToObject(o, "cp_comm_type", tri_cp_comm_type_name(l->cp_comm_type));
    cJSON_AddNumberToObject(o, "pipeline_model_parallel_size", l->pp);
    cJSON_AddNumberToObject(o, "data_parallel_size", l->dp);
    cJSON_AddNumberToObject(o, "expert_model_parallel_size", l->ep > 1 ? l->ep : 1);
    cJSON_AddNumberToObject(o, "expert_tensor_parallel_size", l->etp > 1 ? l->etp : 1);
    cJSON_AddNumberToObject(o, "expert_data_parallel_size", tri_expert_dp(l));
    cJSON_AddNumberToObject(o, "virtual_pipeline_chunks", l->v);
    cJSON_AddStringToObject(o, "schedule", l->schedule);
    cJSON_AddBoolToObject(o, "sequence_parallel", l->sequence_parallel);
    cJSON_AddNumberToObject(o, "micro_batch_size", (double)l->B);
    cJSON_AddNumberToObject(o, "global_batch_size", (double)l->global_batch);
    cJSON_AddNumberToObject(o, "seq_length", (double)l->T);
    cJSON_AddNumberToObject(o, "micro_batches_per_replica", l->n_micro);
    cJSON_AddNumberToObject(o, "zero_stage", l->zero_stage);
    cJSON_AddStringToObject(o, "recompute_granularity", tri_recompute_name(l->recompute));
    cJSON_AddStringToObject(o, "attention_backend", tri_attention_backend_name(l->attention));
    cJSON_AddStringToObject(o, "precision", tri_precision_name(l->precision));
    return o;
}

static cJSON *bytes_json(const double *bytes)
{
    cJSON *o = cJSON_CreateObject();
    double total = 0.0;
    for (int k = 0; k < TRI_MEM_KINDS; k++) {
        cJSON_AddNumberToObject(o, kind_keys[k], bytes[k]);
        total += bytes[k];
    }
    cJSON_AddNumberToObject(o, "total", total);
    return o;
}

static cJSON *efficiency_json(const tri_efficiency *e, const char *gemm_source)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "gemm", e->gemm);
    cJSON_AddStringToObject(o, "gemm_source", gemm_source);
    cJSON_AddNumberToObject(o, "memory", e->memory);
    cJSON_AddNumberToObject(o, "intra_node", e->intra);
    cJSON_AddNumberToObject(o, "inter_node", e->inter);
    cJSON_AddNumberToObject(o, "tp_exposed", e->tp_exposed);
    cJSON_AddNumberToObject(o, "dp_exposed", e->dp_exposed);
    return o;
}

static cJSON *cluster_json(const tri_cluster *c, tri_precision prec)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "hardware", c->hw->name);
    cJSON_AddNumberToObject(o, "num_gpus", c->num_gpus);
    cJSON_AddNumberToObject(o, "gpus_per_node", c->gpus_per_node);
    cJSON_AddNumberToObject(o, "peak_flops_per_gpu", tri_cluster_peak(c, prec));
    cJSON_AddNumberToObject(o, "usable_bytes_per_gpu", tri_cluster_usable_bytes(c));
    return o;
}

static void add_time(cJSON *o, const tri_time_result *t)
{
    cJSON_AddNumberToObject(o, "iteration_time_s", t->iteration_s);
    cJSON_AddNumberToObject(o, "compute_s", t->compute_s);
    cJSON_AddNumberToObject(o, "tp_comm_s", t->tp_s);
    cJSON_AddNumberToObject(o, "ep_comm_s", t->ep_s);
    cJSON_AddNumberToObject(o, "cp_comm_s", t->cp_s);
    cJSON_AddNumberToObject(o, "bubble_s", t->bubble_s);
    cJSON_AddNumberToObject(o, "pp_comm_s", t->pp_s);
    cJSON_AddNumberToObject(o, "dp_comm_s", t->dp_s);
    cJSON_AddNumberToObject(o, "optimizer_s", t->optimizer_s);
    cJSON_AddNumberToObject(o, "bubble_fraction", t->bubble_fraction);
    cJSON_AddNumberToObject(o, "tokens_per_s", t->tokens_per_s);
    cJSON_AddNumberToObject(o, "model_tflops_per_gpu", t->model_tflops_per_gpu);
    cJSON_AddNumberToObject(o, "mfu", t->mfu);
    cJSON_AddNumberToObject(o, "hfu", t->hfu);
    cJSON_AddNumberToObject(o, "model_flops_per_iteration", t->model_flops);
    cJSON_AddNumberToObject(o, "hardware_flops_per_iteration", t->hw_flops);
}

static int emit(FILE *f, cJSON *o)
{
    char *s = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!s)
        return TRI_ERR(TRI_ENOMEM, "out of memory printing JSON");
    fprintf(f, "%s\n", s);
    cJSON_free(s);
    return TRI_OK;
}

static cJSON *dp_json(const tri_preview *p)
{
    const tri_time_result *t = &p->time;
    const tri_compression *z = &p->cluster.dp.compression;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "grad_compression", tri_compression_name(z->kind));
    cJSON_AddStringToObject(o, "grad_compression_reduce", tri_compression_reduce_name(z->reduce));
    cJSON_AddNumberToObject(o, "compression_block_size", z->block_size);
    cJSON_AddNumberToObject(o, "qsgd_levels", z->qsgd_levels);
    cJSON_AddNumberToObject(o, "topk_fraction", z->topk_fraction);
    cJSON_AddNumberToObject(o, "powersgd_rank", z->powersgd_rank);
    cJSON_AddNumberToObject(o, "local_sgd_steps", p->cluster.dp.local_sgd_steps > 1 ? p->cluster.dp.local_sgd_steps : 1);
    cJSON_AddBoolToObject(o, "inter_node", t->dp_inter_node);
    cJSON_AddNumberToObject(o, "bandwidth_bytes_per_s", t->dp_inter_node ? tri_cluster_inter_bw(&p->cluster) : p->cluster.hw->intra_bw);
    cJSON_AddNumberToObject(o, "sent_bytes_per_step", t->dp_sent_bytes);
    cJSON_AddNumberToObject(o, "grad_sent_bytes_per_step", t->dp_grad_sent_bytes);
    cJSON_AddNumberToObject(o, "sent_bytes_uncompressed_per_step", t->dp_sent_uncompressed);
    cJSON_AddNumberToObject(o, "compression_ratio", ratio(t));
    cJSON_AddNumberToObject(o, "comm_s", t->dp_comm_s);
    cJSON_AddNumberToObject(o, "exposed_s", t->dp_s);
    cJSON_AddNumberToObject(o, "codec_s", t->dp_codec_s);
    cJSON_AddNumberToObject(o, "stall_s", t->dp_stall_s);
    cJSON_AddStringToObject(o, "exposure", t->dp_overlap_simulated ? "simulated" : "share");
    return o;
}

static cJSON *sweep_json(const tri_dp_sweep *sw)
{
    cJSON *arr = cJSON_CreateArray();
    for (int k = 0; k < sw->rows; k++) {
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "method", k < TRI_COMPRESS_KINDS ? tri_compression_name((tri_compression_kind)k)
                                                                      : "local_sgd");
        cJSON_AddStringToObject(row, "reduce", tri_compression_reduce_name(two_phase_row(sw, k)
                                                                               ? TRI_COMPRESS_REDUCE_TWO_PHASE
                                                                               : TRI_COMPRESS_REDUCE_ALLGATHER));
        cJSON_AddNumberToObject(row, "local_sgd_steps", k < TRI_COMPRESS_KINDS ? 1 : sw->local_sgd_steps);
        cJSON_AddBoolToObject(row, "refused", sw->cell[0][k].refused);
        cJSON *pts = cJSON_AddArrayToObject(row, "points");
        for (int b = 0; b < TRI_SWEEP_BANDWIDTHS && !sw->cell[0][k].refused; b++) {
            const tri_time_result *t = &sw->cell[b][k].time;
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "inter_node_gbps", sw->gbps[b]);
            cJSON_AddNumberToObject(x, "iteration_time_s", t->iteration_s);
            cJSON_AddNumberToObject(x, "dp_comm_s", t->dp_s);
            cJSON_AddNumberToObject(x, "dp_sent_bytes_per_step", t->dp_sent_bytes);
            cJSON_AddItemToArray(pts, x);
        }
        cJSON_AddItemToArray(arr, row);
    }
    return arr;
}

int tri_report_json(FILE *f, const tri_preview *p, const tri_report_info *in, const tri_dp_sweep *sweep)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *model = cJSON_AddObjectToObject(o, "model");
    cJSON_AddStringToObject(model, "name", in->model_name);
    cJSON_AddNumberToObject(model, "n_layer", (double)p->model.n_layer);
    cJSON_AddNumberToObject(model, "n_head", (double)p->model.n_head);
    cJSON_AddNumberToObject(model, "n_embd", (double)p->model.n_embd);
    cJSON_AddNumberToObject(model, "vocab_size", (double)p->model.vocab_size);
    cJSON_AddNumberToObject(model, "parameters", in->n_params);
    double total, active;
    tri_transformer_params(&p->model, &total, &active);
    cJSON_AddNumberToObject(model, "total_parameters", total);
    cJSON_AddNumberToObject(model, "active_parameters", active);
    cJSON_AddItemToObject(o, "cluster", cluster_json(&p->cluster, p->layout.precision));
    cJSON_AddItemToObject(o, "layout", layout_json(&p->layout));
    cJSON_AddStringToObject(o, "memory_source", p->from_engine_plan ? "engine_plan" : "formulas");
    cJSON_AddBoolToObject(o, "fits", p->all_fit);
    cJSON *stages = cJSON_AddArrayToObject(o, "stages");
    for (int r = 0; r < p->pp; r++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "stage", r);
        cJSON *chunks = cJSON_AddArrayToObject(s, "chunks");
        for (int c = 0; c < p->plan.v; c++) {
            const tri_stage_place *pl = &p->plan.chunks[c * p->plan.pp + r];
            cJSON *ch = cJSON_CreateObject();
            cJSON_AddNumberToObject(ch, "layer_start", pl->layer_start);
            cJSON_AddNumberToObject(ch, "layer_end", pl->layer_end);
            cJSON_AddBoolToObject(ch, "embedding", pl->first);
            cJSON_AddBoolToObject(ch, "head", pl->last);
            cJSON_AddItemToArray(chunks, ch);
        }
        cJSON_AddNumberToObject(s, "layers", rank_layers(p, r));
        int lo, hi, nlo, nhi;
        tri_preview_stage_ranks(p, r, &lo, &hi, &nlo, &nhi);
        cJSON_AddItemToObject(s, "ranks", cJSON_CreateIntArray((const int[]){lo, hi}, 2));
        cJSON_AddItemToObject(s, "nodes", cJSON_CreateIntArray((const int[]){nlo, nhi}, 2));
        cJSON_AddItemToObject(s, "memory_bytes", bytes_json(p->mem[r]));
        cJSON_AddItemToObject(s, "memory_formula_bytes", bytes_json(p->model_mem[r]));
        cJSON_AddNumberToObject(s, "micro_batches_in_flight", p->in_flight[r]);
        cJSON_AddBoolToObject(s, "fits", p->fits[r]);
        cJSON_AddItemToArray(stages, s);
    }
    add_time(o, &p->time);
    cJSON_AddNumberToObject(o, "busiest_stage", p->time.busiest_rank);
    cJSON_AddNumberToObject(o, "p2p_message_s", p->time.p2p_message_s);
    cJSON_AddNumberToObject(o, "tp_bytes_per_step", p->time.tp_bytes);
    cJSON_AddNumberToObject(o, "pp_bytes_per_step", p->time.pp_bytes);
    cJSON_AddNumberToObject(o, "ep_bytes_per_step", p->time.ep_bytes);
    cJSON_AddNumberToObject(o, "cp_bytes_per_step", p->time.cp_bytes);
    cJSON_AddNumberToObject(o, "dp_bytes_per_step", p->time.dp_bytes);
    if (dp_extra(p))
        cJSON_AddItemToObject(o, "data_parallel", dp_json(p));
    if (sweep)
        cJSON_AddItemToObject(o, "dp_bandwidth_sweep", sweep_json(sweep));
    cJSON_AddItemToObject(o, "efficiency", efficiency_json(&p->cluster.eff, in->gemm_source));
    return emit(f, o);
}

void tri_report_search_text(FILE *f, const tri_search_entry *e, int n, const tri_search_stats *st,
                            const tri_cluster *c, const tri_report_info *in)
{
    fprintf(f, "search: %s on %d x %s: %ld layouts considered, %ld valid, %ld fit by the formulas, %ld previewed "
            "exactly, %ld fit\n", in->model_name, c->num_gpus, c->hw->name, st->considered, st->valid, st->screened,
            st->previewed, st->fit);
    if (n == 0) {
        fprintf(f, "no layout fits: try more GPUs, a smaller global batch or --bf16\n");
        return;
    }
    fprintf(f, "%-4s %3s %3s %3s %3s %3s %3s %2s %3s %3s %4s %-10s %3s %9s %11s %8s %6s %10s %s\n", "rank", "tp", "cp",
            "pp", "dp", "ep", "etp", "v", "mb", "sp", "zero", "recompute", "", "time(s)", "tokens/s", "TFLOP/s", "MFU",
            "max mem", "memory from");
    for (int i = 0; i < n; i++) {
        const tri_train_layout *l = &e[i].layout;
        char mem[32];
        fprintf(f, "%-4d %3d %3d %3d %3d %3d %3d %2d %3lld %3s %4d %-10s %3s %9.4g %11.0f %8.4g %5.1f%% %10s %s\n", i + 1,
                l->tp, tri_layout_cp(l), l->pp, l->dp, l->ep > 1 ? l->ep : 1, l->etp > 1 ? l->etp : 1, l->v,
                (long long)l->B, l->sequence_parallel ? "on" : "off", l->zero_stage,
                tri_recompute_name(l->recompute), "", e[i].time.iteration_s, e[i].time.tokens_per_s,
                e[i].time.model_tflops_per_gpu, 100 * e[i].time.mfu, tri_format_bytes(e[i].max_bytes, mem, sizeof mem),
                e[i].from_engine_plan ? "engine plan" : "formulas");
    }
}

int tri_report_search_json(FILE *f, const tri_search_entry *e, int n, const tri_search_stats *st,
                           const tri_cluster *c, const tri_report_info *in)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", in->model_name);
    cJSON_AddItemToObject(o, "cluster", cluster_json(c, n > 0 ? e[0].layout.precision : TRI_PRECISION_FP32));
    cJSON *s = cJSON_AddObjectToObject(o, "stats");
    cJSON_AddNumberToObject(s, "considered", (double)st->considered);
    cJSON_AddNumberToObject(s, "valid", (double)st->valid);
    cJSON_AddNumberToObject(s, "screened", (double)st->screened);
    cJSON_AddNumberToObject(s, "previewed", (double)st->previewed);
    cJSON_AddNumberToObject(s, "fit", (double)st->fit);
    cJSON *arr = cJSON_AddArrayToObject(o, "layouts");
    for (int i = 0; i < n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToObject(x, "layout", layout_json(&e[i].layout));
        add_time(x, &e[i].time);
        cJSON_AddNumberToObject(x, "max_memory_bytes", e[i].max_bytes);
        cJSON_AddStringToObject(x, "memory_source", e[i].from_engine_plan ? "engine_plan" : "formulas");
        cJSON_AddItemToArray(arr, x);
    }
    cJSON_AddItemToObject(o, "efficiency", efficiency_json(&c->eff, in->gemm_source));
    return emit(f, o);
}
