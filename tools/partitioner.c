/* tools/partitioner.c - preview a GPT's placement, memory and step time on any cluster before
 * booking it, and search for the layouts that fit, fastest first.
 *
 *   partitioner --config models/gpt3-175b.json --num-gpus 1024 --hardware h100-sxm \
 *       --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --micro-batch-size 1 \
 *       --global-batch-size 1536 --seq-length 2048 --bf16 --sequence-parallel [--json]
 *       [--timeline schedule.svg] [--search] [--calibrate runs/x/metrics.jsonl]
 *
 * Prints the stage table (stage, layers, ranks, nodes), the memory per GPU by category for every
 * stage and whether it fits, the predicted iteration split into compute, exposed TP / PP / DP
 * communication, bubble and optimizer, and tokens/s, model TFLOP/s per GPU and MFU
 * (tools/cli/partitioner_report.h). Memory is the engine's own plan (models/preview.h) for
 * every layout, fp32 or bf16 mixed precision; the formulas of partitioner/memory_model.h screen
 * the search and are printed beside it for comparison. The time model is partitioner/time_model.h.
 * Flags take Megatron-LM's names where Megatron-LM has one. Exit status 1 with one message naming
 * the flag and the nearest valid values on bad input (partitioner/constraints.h).
 *
 * Data parallelism over slow links (issue 32): --grad-compression and its fields, --local-sgd-steps
 * and --inter-node-bandwidth choose how the data-parallel group communicates (partitioner/hardware.h
 * tri_dp_method; the bytes are engine/train/grad_compression.h's), --dp-bandwidth-sweep predicts the
 * step of every method at 10-400 Gb/s between nodes, and with --overlap-grad-reduce /
 * --overlap-param-gather the exposed DP time is simulated (partitioner/dp_overlap.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/fsutil.h"
#include "engine/core/status.h"
#include "models/model.h"
#include "models/preview.h"
#include "partitioner/constraints.h"
#include "partitioner/flops.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/preview.h"
#include "partitioner/search.h"
#include "partitioner/timeline_svg.h"
#include "tools/cli/compression_flags.h"
#include "tools/cli/flags.h"
#include "tools/cli/layout_flags.h"
#include "tools/cli/local_sgd_flags.h"
#include "tools/cli/metrics.h"
#include "tools/cli/outputs.h"
#include "tools/cli/partitioner_report.h"

typedef struct args {
    const char *config, *hardware, *timeline, *calibrate;
    int num_gpus, gpus_per_node, cpu_cores;
    tri_cli_layout layout;     /* the layout flags engine_train shares (tools/cli/layout_flags.h) */
    int top, max_tp, max_micro_batch, max_cp;
    bool json, search, sweep;
    float gemm, memory, intra, inter, tp_exposed, dp_exposed;
    /* data parallelism over slow links: the compression flags that set the bytes and --local-sgd-steps,
     * engine_train's table and defaults (tools/cli/compression_flags.h, tools/cli/local_sgd_flags.h) */
    tri_cli_compression comp;
    tri_cli_local_sgd local_sgd;
    float inter_node_gbps;
} args;

#define FLAG(name, kind, dst, help, lo, hi) {name, kind, dst, help, lo, hi, NULL, false}
#define CHOICE(name, dst, choices, help) {name, TRI_FLAG_CHOICE, dst, help, 0, 0, choices, false}
#define N_FLAGS 72

static int make_flags(args *a, tri_flag *f)
{
    int n = 0;
    f[n++] = (tri_flag)FLAG("config", TRI_FLAG_STRING, &a->config, "model config (a Hugging Face config.json; its model_type picks the family), e.g. models/gpt3-175b.json", 0, 0);
    f[n++] = (tri_flag)FLAG("num-gpus", TRI_FLAG_INT, &a->num_gpus, "devices (ranks) in the cluster", 1, 1 << 24);
    f[n++] = (tri_flag)FLAG("gpus-per-node", TRI_FLAG_INT, &a->gpus_per_node, "devices per node (0: the preset's; cpu: all ranks on this machine)", 0, 4096);
    f[n++] = (tri_flag)CHOICE("hardware", &a->hardware, "h100-sxm|h200|a100-80gb|cpu", "device preset (partitioner/hardware.c lists the sources)");
    f[n++] = (tri_flag)FLAG("cpu-cores", TRI_FLAG_INT, &a->cpu_cores, "cpu: cores per node (0: this machine's)", 0, 1 << 16);
    n = tri_cli_layout_flags(&a->layout, f, n);
    f[n++] = (tri_flag)FLAG("json", TRI_FLAG_BOOL, &a->json, "print one JSON object instead of text", 0, 0);
    f[n++] = (tri_flag)FLAG("timeline", TRI_FLAG_STRING, &a->timeline, "write the simulated schedule as an SVG picture to this file", 0, 0);
    f[n++] = (tri_flag)FLAG("search", TRI_FLAG_BOOL, &a->search, "rank every layout that fits by predicted throughput", 0, 0);
    f[n++] = (tri_flag)FLAG("top", TRI_FLAG_INT, &a->top, "--search: layouts printed", 1, 1000);
    f[n++] = (tri_flag)FLAG("search-max-tp", TRI_FLAG_INT, &a->max_tp, "--search: largest tp (0: GPUs per node)", 0, 1 << 20);
    f[n++] = (tri_flag)FLAG("search-max-cp", TRI_FLAG_INT, &a->max_cp, "--search: largest context-parallel size (0: every divisor of the GPUs; 1: none)", 0, 1 << 20);
    f[n++] = (tri_flag)FLAG("search-max-micro-batch", TRI_FLAG_INT, &a->max_micro_batch, "--search: largest micro-batch size", 1, 1 << 20);
    f[n++] = (tri_flag)FLAG("calibrate", TRI_FLAG_STRING, &a->calibrate, "engine_train metrics.jsonl of a run of this layout: sets the gemm fraction", 0, 0);
    f[n++] = (tri_flag)FLAG("gemm-efficiency", TRI_FLAG_FLOAT, &a->gemm, "fraction of the dense peak the matmuls reach (default: the preset's)", 1e-6, 1);
    f[n++] = (tri_flag)FLAG("memory-efficiency", TRI_FLAG_FLOAT, &a->memory, "fraction of memory bandwidth elementwise work reaches", 1e-6, 1);
    f[n++] = (tri_flag)FLAG("intra-node-efficiency", TRI_FLAG_FLOAT, &a->intra, "fraction of NVLink bandwidth collectives reach", 1e-6, 1);
    f[n++] = (tri_flag)FLAG("inter-node-efficiency", TRI_FLAG_FLOAT, &a->inter, "fraction of InfiniBand bandwidth collectives reach", 1e-6, 1);
    f[n++] = (tri_flag)FLAG("tp-comm-exposed", TRI_FLAG_FLOAT, &a->tp_exposed, "share of TP communication not overlapped", 0, 1);
    f[n++] = (tri_flag)FLAG("dp-comm-exposed", TRI_FLAG_FLOAT, &a->dp_exposed, "share of data-parallel communication not overlapped (default: all without --overlap-grad-reduce / --overlap-param-gather, else simulated against each stage's timeline; given, it replaces the simulation)", 0, 1);
    n = tri_cli_compression_wire_flags(&a->comp, f, n); /* its bytes replace the reduction's; encode + decode
                                                        * charged as memory-bound passes */
    n = tri_cli_local_sgd_steps_flag(&a->local_sgd, f, n);
    f[n++] = (tri_flag)FLAG("inter-node-bandwidth", TRI_FLAG_FLOAT, &a->inter_node_gbps, "Gb/s per GPU between nodes, replacing the preset's (0: the preset's, e.g. 400 for h100-sxm; data parallelism crosses nodes when tp x dp > GPUs per node)", 0, 1e6);
    f[n++] = (tri_flag)FLAG("dp-bandwidth-sweep", TRI_FLAG_BOOL, &a->sweep, "also predict the step for every --grad-compression (and local SGD with --local-sgd-steps) at 10, 25, 100 and 400 Gb/s between nodes: when compression pays", 0, 0);
    return n;
}

/* engine_train's defaults (tools/cli/layout_flags.h: one set for the flags both take): the same
 * flags preview the layout they run; with none, gpt2-tiny-byte on one rank. */
static void defaults(args *a)
{
    memset(a, 0, sizeof *a);
    a->config = "models/gpt2-tiny-byte.json";
    a->hardware = "cpu";
    tri_cli_layout_defaults(&a->layout);
    a->num_gpus = 1;
    a->top = 10;
    a->max_micro_batch = 16;
    tri_cli_compression_defaults(&a->comp);
    tri_cli_local_sgd_defaults(&a->local_sgd);
}

static bool seen(const tri_flag *f, int n, const char *name)
{
    const tri_flag *x = tri_flags_find(f, n, name);
    return x && x->seen;
}

static tri_cluster make_cluster(const args *a, const tri_flag *f, int nf, const tri_hardware *hw)
{
    tri_cluster c = {.hw = hw, .num_gpus = a->num_gpus, .eff = hw->eff};
    c.gpus_per_node = a->gpus_per_node > 0 ? a->gpus_per_node : hw->cpu ? a->num_gpus : hw->gpus_per_node;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c.cpu_cores = a->cpu_cores > 0 ? a->cpu_cores : cores > 0 ? (int)cores : 1;
    if (seen(f, nf, "gemm-efficiency")) c.eff.gemm = a->gemm;
    if (seen(f, nf, "memory-efficiency")) c.eff.memory = a->memory;
    if (seen(f, nf, "intra-node-efficiency")) c.eff.intra = a->intra;
    if (seen(f, nf, "inter-node-efficiency")) c.eff.inter = a->inter;
    if (seen(f, nf, "tp-comm-exposed")) c.eff.tp_exposed = a->tp_exposed;
    if (seen(f, nf, "dp-comm-exposed")) c.eff.dp_exposed = a->dp_exposed;
    c.dp_exposed_given = seen(f, nf, "dp-comm-exposed");
    if (seen(f, nf, "inter-node-bandwidth")) c.inter_bw = a->inter_node_gbps * 1e9 / 8.0;
    c.dp.compression = tri_compression_defaults();
    (void)tri_cli_compression_fields(&a->comp, &c.dp.compression); /* the names: the flags' choices */
    c.dp.local_sgd_steps = a->local_sgd.steps;
    return c;
}

/* Sets c->eff.gemm from the last run in a->calibrate, which must be a run of this layout. */
static int calibrate(const args *a, const tri_transformer *m, const tri_train_layout *l, tri_cluster *c,
                     char *source, size_t cap)
{
    tri_run_metrics rm;
    int rc = tri_metrics_read(a->calibrate, &rm);
    if (rc)
        return rc;
    double tokens = (double)l->global_batch * (double)l->T;
    if (rm.tokens_per_iter < 0.99 * tokens || rm.tokens_per_iter > 1.01 * tokens)
        return TRI_ERR(TRI_EINVAL, "--calibrate %s: the run moved %.0f tokens per iteration, the flags give %.0f "
                       "(--global-batch-size %lld x --seq-length %lld): pass the measured run's layout flags",
                       a->calibrate, rm.tokens_per_iter, tokens, (long long)l->global_batch, (long long)l->T);
    double flops = tri_iteration_flops(m, l->global_batch, l->T, false);
    if (rm.flops_per_iter < 0.99 * flops || rm.flops_per_iter > 1.01 * flops)
        return TRI_ERR(TRI_EINVAL, "--calibrate %s: the run counted %.4g FLOPs per iteration, this model %.4g: pass "
                       "the measured run's --config", a->calibrate, rm.flops_per_iter, flops);
    tri_stage_plan plan;
    tri_schedule s = {0};
    tri_layout_shape shape = tri_train_layout_shape(l);
    tri_stage_options so = {.v = l->v, .first_layers = l->first_layers, .last_layers = l->last_layers};
    rc = tri_stage_split(&plan, m, &shape, &so);
    if (rc)
        return rc;
    rc = tri_schedule_make(&s, l->schedule, l->pp, l->v, l->n_micro);
    double gemm = c->eff.gemm;
    if (!rc) rc = tri_time_model_calibrate_gemm(m, l, c, &plan, &s, rm.median_s, &gemm);
    tri_schedule_free(&s);
    tri_stage_plan_free(&plan);
    if (rc)
        return tri_error_context(rc, "--calibrate %s", a->calibrate);
    c->eff.gemm = gemm;
    snprintf(source, cap, "calibrated from %s: median of %d iterations, %.4g s", a->calibrate, rm.iterations,
             rm.median_s);
    return TRI_OK;
}

/* The SVG timeline into path: the output rule (tools/cli/outputs.h) against the files read, written
 * beside it under a temporary name and moved into place when complete. */
static int write_timeline(const args *a, const tri_preview *p, const char *model_name)
{
    const char *path = a->timeline;
    tri_cli_input in[2] = {{"--config", a->config}, {"--calibrate", a->calibrate}};
    tri_cli_output out = {.name = "--timeline", .path = path};
    char tmp[4200];
    int rc = tri_cli_check_output(&out, in, a->calibrate ? 2 : 1);
    if (!rc) rc = tri_fs_temp_beside(path, tmp, sizeof tmp);
    if (rc)
        return rc;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return TRI_ERR(TRI_EIO, "--timeline %s: cannot create %s: %s", path, tmp, strerror(errno));
    char title[256];
    snprintf(title, sizeof title, "%s: %s, tp %d x pp %d x dp %d, %d micro-batches, predicted %#.4g s per iteration",
             model_name, p->sched.name, p->layout.tp, p->layout.pp, p->layout.dp, p->layout.n_micro,
             p->time.iteration_s);
    rc = tri_timeline_svg(f, &p->sched, &p->sim, title);
    if (fclose(f) != 0 && !rc)
        rc = TRI_ERR(TRI_EIO, "--timeline %s: writing %s failed: %s", path, tmp, strerror(errno));
    if (!rc)
        return tri_fs_publish(tmp, path);
    unlink(tmp);
    return rc;
}

/* The data-parallel flags against the layout: H < 1, a compressor's fields or ZeRO stage
 * (tri_time_dp_method_check); compression or local SGD with dp 1 warns and is ignored, as
 * engine_train does. */
static int dp_method(const args *a, const tri_train_layout *l, tri_cluster *c)
{
    int rc = tri_cli_local_sgd_steps_check(a->local_sgd.steps);
    if (!rc) rc = tri_time_dp_method_check(&c->dp, l);
    if (rc)
        return rc;
    if (l->dp == 1 && (c->dp.compression.kind != TRI_COMPRESS_NONE || c->dp.local_sgd_steps > 1)) {
        fprintf(stderr, "partitioner: warning: --grad-compression %s / --local-sgd-steps %d with data-parallel size 1: "
                "nothing to reduce, ignored\n", tri_compression_name(c->dp.compression.kind), c->dp.local_sgd_steps);
        c->dp.compression.kind = TRI_COMPRESS_NONE;
        c->dp.compression.reduce = TRI_COMPRESS_REDUCE_ALLGATHER;
        c->dp.local_sgd_steps = 0;
    }
    return TRI_OK;
}

/* The step of layout l under every compressor (and c's local SGD, when set) at each sweep bandwidth
 * between nodes; a compressor the layout's ZeRO stage refuses is marked so. */
static int dp_sweep(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c, const tri_model *model,
                    tri_dp_sweep *out)
{
    static const double gbps[TRI_SWEEP_BANDWIDTHS] = {10, 25, 100, 400};
    memset(out, 0, sizeof *out);
    out->local_sgd_steps = c->dp.local_sgd_steps > 1 ? c->dp.local_sgd_steps : 0;
    out->reduce = c->dp.compression.reduce;
    int rows = TRI_COMPRESS_KINDS + (out->local_sgd_steps ? 1 : 0);
    for (int b = 0; b < TRI_SWEEP_BANDWIDTHS; b++) {
        out->gbps[b] = gbps[b];
        for (int k = 0; k < rows; k++) {
            tri_cluster x = *c;
            x.inter_bw = gbps[b] * 1e9 / 8.0;
            x.dp.compression.kind = k < TRI_COMPRESS_KINDS ? (tri_compression_kind)k : TRI_COMPRESS_NONE;
            x.dp.local_sgd_steps = k < TRI_COMPRESS_KINDS ? 0 : out->local_sgd_steps;
            bool two_phase = k == TRI_COMPRESS_1BIT || k == TRI_COMPRESS_QSGD || k == TRI_COMPRESS_TOPK;
            x.dp.compression.reduce = two_phase ? out->reduce : TRI_COMPRESS_REDUCE_ALLGATHER;
            tri_dp_sweep_cell *cell = &out->cell[b][k];
            if (tri_time_dp_method_check(&x.dp, l) != TRI_OK) {
                cell->refused = true;
                continue;
            }
            tri_preview p;
            int rc = tri_preview_create(&p, m, l, &x, NULL, (void *)model);
            if (rc)
                return rc;
            cell->time = p.time;
            tri_preview_destroy(&p);
        }
    }
    out->rows = rows;
    return TRI_OK;
}

static int search(const args *a, const tri_model *model, const tri_transformer *m, const tri_cluster *c,
                  const tri_layout_request *req, const tri_moe_run *moe, const tri_report_info *info)
{
    tri_search_space space = {.base = *req, .max_tp = a->max_tp > 0 ? a->max_tp : c->gpus_per_node,
                              .max_micro_batch = a->max_micro_batch, .max_v = 8,
                              .max_cp = a->max_cp > 0 ? a->max_cp : c->num_gpus, .moe = *moe};
    tri_search_entry *best = calloc((size_t)a->top, sizeof *best);
    if (!best)
        return TRI_ERR(TRI_ENOMEM, "out of memory");
    int n = 0;
    tri_search_stats st;
    int rc = tri_search_layouts(m, c, &space, tri_model_preview_plan, (void *)model, best, a->top, &n, &st);
    if (!rc && a->json)
        rc = tri_report_search_json(stdout, best, n, &st, c, info);
    else if (!rc)
        tri_report_search_text(stdout, best, n, &st, c, info);
    free(best);
    return rc;
}

static int preview(args *a, tri_flag *flags, int nf, const tri_model *model)
{
    int rc;
    const tri_hardware *hw = tri_hardware_find(a->hardware);
    tri_transformer m = tri_model_dims(model);
    tri_cluster c = make_cluster(a, flags, nf, hw);
    char gemm_source[512];
    if (seen(flags, nf, "gemm-efficiency"))
        snprintf(gemm_source, sizeof gemm_source, "--gemm-efficiency");
    else if (hw->cpu)
        snprintf(gemm_source, sizeof gemm_source, "preset: calibrated on this machine's default engine_train run");
    else
        snprintf(gemm_source, sizeof gemm_source, "preset: MAMF %.3f x %.3f calibrated once on Korthikanti et al. "
                 "2022's GPT-3 175B run", hw->mamf, TRI_GEMM_TRANSFORMER_FACTOR);
    tri_report_info info = {.model_name = tri_model_name(model),
                            .n_params = (double)model->family->num_params(model->cfg),
                            .gemm_source = gemm_source};
    tri_train_layout l = {0};
    a->layout.req.cpu = hw->cpu;
    a->layout.gpu = !hw->cpu;
    rc = tri_cli_layout_resolve(&a->layout, flags, nf, a->num_gpus, &m, &l);
    if (a->search) /* the search tries its own layouts around the request; it needs none valid */
        return search(a, model, &m, &c, &a->layout.req, &l.moe, &info);
    if (!rc)
        rc = dp_method(a, &l, &c);
    if (!rc && a->calibrate)
        rc = calibrate(a, &m, &l, &c, gemm_source, sizeof gemm_source);
    if (rc)
        return rc;
    tri_preview p;
    rc = tri_preview_create(&p, &m, &l, &c, tri_model_preview_plan, (void *)model);
    if (rc)
        return rc;
    tri_dp_sweep sweep = {0};
    if (a->sweep)
        rc = dp_sweep(&m, &l, &c, model, &sweep);
    if (!rc && a->json)
        rc = tri_report_json(stdout, &p, &info, a->sweep ? &sweep : NULL);
    else if (!rc)
        tri_report_text(stdout, &p, &info, a->sweep ? &sweep : NULL);
    if (!rc && a->timeline) {
        rc = write_timeline(a, &p, tri_model_name(model));
        if (!rc && !a->json)
            printf("timeline: %s\n", a->timeline);
    }
    tri_preview_destroy(&p);
    return rc;
}

static int run(args *a, tri_flag *flags, int nf)
{
    tri_model model;
    int rc = tri_model_load(&model, a->config);
    if (!rc) rc = preview(a, flags, nf, &model);
    tri_model_free(&model);
    return rc;
}

int main(int argc, char **argv)
{
    args a;
    defaults(&a);
    tri_flag flags[N_FLAGS];
    int nf = make_flags(&a, flags);
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (!rc && help) {
        tri_flags_usage(stdout, flags, nf, "partitioner",
                        "Previews placement, memory per GPU and step time of a GPT layout on a cluster, or searches "
                        "the layouts that fit (--search). Defaults: the README's CPU run.");
        return 0;
    }
    if (!rc) rc = run(&a, flags, nf);
    if (rc) {
        fprintf(stderr, "partitioner: error: %s\n", tri_error_message());
        return 1;
    }
    return 0;
}
