/* tests/test_partitioner.c - the partitioner's pieces: traffic, hardware, layout rules, the time
 * model, the timeline picture and the layout search (the headers in partitioner/).
 *
 * Traffic per micro-batch adds up to the per-step counts the TP test checks against measured byte
 * counters, and the ZeRO traffic follows Rajbhandari et al. 2020 stage by stage; ring collectives
 * take 2 (n-1)/n and (n-1)/n of the bytes over the bandwidth; every refused layout names the rule
 * and the nearest valid values; the time model's parts add up to the iteration, its simulated
 * bubble matches the closed forms on uniform stages, calibration inverts it; the SVG has one box per
 * compute op; the search returns fitting layouts fastest first and beats the README's layout. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "partitioner/constraints.h"
#include "partitioner/hardware.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/preview.h"
#include "partitioner/search.h"
#include "partitioner/timeline_svg.h"
#include "partitioner/traffic.h"
#include "tests/gpt_outline.h"

TU_GPT_MODEL(GPT2, 12, 12, 768, 50257, 1024);
/* 24 wide blocks, tiny vocabulary: every stage costs about the same */
TU_GPT_MODEL(WIDE, 24, 16, 1024, 256, 512);
TU_GPT_MODEL(TINY, 4, 4, 256, 257, 256);

/* ---- traffic ---- */

Test(partitioner, tp_traffic_per_microbatch_adds_up_to_the_step)
{
    tri_layout_shape l = {.tp = 2, .pp = 2, .dp = 1, .B = 2, .T = 8, .n_micro = 3};
    tri_stage_place first = {.layer_start = 0, .layer_end = 2, .first = true}, last = {2, 12, false, true};
    const uint64_t act = 16 * 768 * 4;
    uint64_t step[TRI_COMM_KINDS], fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
    tri_tp_step_traffic(&GPT2, &l, &first, step);
    cr_expect_eq(step[TRI_COMM_ALL_REDUCE], 3 * (2 * 4 + 1) * act);  /* 4 a block, the embedding */
    tri_tp_microbatch_traffic(&GPT2, &l, &first, 4, fwd, bwd);
    cr_expect_eq(fwd[TRI_COMM_ALL_REDUCE], (2 * 2 + 1) * act);
    cr_expect_eq(bwd[TRI_COMM_ALL_REDUCE], 2 * 2 * act);
    l.sequence_parallel = true;
    for (int s = 0; s < 2; s++) {
        const tri_stage_place *pl = s ? &last : &first;
        tri_tp_step_traffic(&GPT2, &l, pl, step);
        tri_tp_microbatch_traffic(&GPT2, &l, pl, 4, fwd, bwd);
        for (int k = 0; k < TRI_COMM_KINDS; k++) {
            uint64_t fixed = k == TRI_COMM_ALL_REDUCE ? tri_tp_step_fixed_traffic(&GPT2, &l, pl, 4) : 0;
            cr_expect_eq(step[k], 3 * (fwd[k] + bwd[k]) + fixed, "stage %d kind %d", s, k);
        }
    }
    tri_tp_step_traffic(&GPT2, &l, &first, step);
    cr_expect_eq(step[TRI_COMM_ALL_GATHER], 3 * (2 * 6 + 1) * act);
    cr_expect_eq(step[TRI_COMM_REDUCE_SCATTER], 3 * (2 * 4 + 1) * act);
    cr_expect_eq(step[TRI_COMM_ALL_REDUCE], (2 * 6 * 768 + 1024 * 768) * 4);  /* replicated grads, once */
    /* bf16 halves the activations; the loss statistics stay fp32 */
    tri_tp_microbatch_traffic(&GPT2, &l, &last, 2, fwd, bwd);
    cr_expect_eq(fwd[TRI_COMM_ALL_REDUCE], 3 * 16 * 4);
    cr_expect_eq(fwd[TRI_COMM_ALL_GATHER], (10 * 2 + 1) * act / 2);
    cr_expect_eq(tri_pp_message_bytes(&GPT2, &l, 2), 16 / 2 * 768 * 2);
}

static void preview(tri_preview *p, const tri_transformer *m, tri_cluster c, int tp, int pp, int per_chunk,
                    int64_t mb, int64_t gb, int64_t T, int zero, tri_recompute rec, const char *sched);
static tri_cluster h100(int gpus);

/* A middle pipeline stage holds only blocks (P parameters): ZeRO 0 all-reduces the gradients
 * (plus the step's loss, a few bytes), ZeRO 1 reduce-scatters them and all-gathers the parameters
 * once, ZeRO 2 reduce-scatters every micro-batch's gradients, ZeRO 3 also all-gathers the
 * parameters before each forward and backward (Rajbhandari et al. 2020 §7: 1.5x ZeRO 0-2 in one
 * precision). Under bf16 mixed precision the gradients are fp32 (g = 4 bytes) and the parameters
 * bf16 (e = 2; engine/train/zero.h), as Megatron-LM reduces fp32 main gradients and gathers bf16
 * parameters. */
Test(partitioner, dp_traffic_follows_the_zero_stages)
{
    const double m = 4, g = 4, e = 2;  /* micro-batches per step; fp32 gradient, bf16 parameter bytes */
    for (int z = 0; z <= 3; z++) {
        tri_preview p;
        preview(&p, &WIDE, h100(6), 1, 3, 0, 1, 8, 512, z, TRI_RECOMPUTE_NONE, NULL);
        cr_assert_eq(p.layout.dp, 2);
        cr_assert_eq(p.layout.precision, TRI_PRECISION_BF16);
        const tri_stage_place *mid = &p.plan.chunks[1];
        double P = (mid->layer_end - mid->layer_start) * (12.0 * 1024 * 1024 + 13.0 * 1024);
        const double want[4] = {g * P, (g + e) * P, (m * g + e) * P, m * g * P + 2 * m * e * P};
        double b[TRI_COMM_KINDS], total = 0.0;
        cr_assert_eq(tri_time_dp_traffic(&p.model, &p.layout, &p.plan, 1, b), TRI_OK);
        for (int k = 0; k < TRI_COMM_KINDS; k++)
            total += b[k];
        cr_expect(total >= want[z] && total <= want[z] + 16, "ZeRO %d: %.0f bytes, expected %.0f + the loss", z, total,
                  want[z]);
        if (z == 0)
            cr_expect(b[TRI_COMM_ALL_REDUCE] >= g * P && b[TRI_COMM_ALL_REDUCE] <= g * P + 16);
        if (z >= 1)
            cr_expect_float_eq(b[TRI_COMM_REDUCE_SCATTER], (z == 1 ? 1 : m) * g * P, 1e-12 * P);
        if (z == 3)
            cr_expect_float_eq(b[TRI_COMM_ALL_GATHER], 2 * m * e * P, 1e-12 * P);
        tri_preview_destroy(&p);
    }
}

/* ---- hardware ---- */

Test(partitioner, presets_and_ring_times)
{
    const tri_hardware *h = tri_hardware_find("h100-sxm"), *a = tri_hardware_find("a100-80gb");
    const tri_hardware *h2 = tri_hardware_find("h200"), *c = tri_hardware_find("cpu");
    cr_assert(h && a && h2 && c);
    cr_expect_null(tri_hardware_find("v100"));
    cr_expect_eq(h->peak_bf16, 989e12);
    cr_expect_eq(h->peak_fp32, 67e12);
    cr_expect_eq(h->memory_bytes, 80e9);
    cr_expect_eq(h->intra_bw, 450e9);
    cr_expect_eq(h->inter_bw, 50e9);
    cr_expect_eq(h2->memory_bytes, 141e9);
    cr_expect_eq(h2->peak_bf16, 989e12);
    cr_expect_eq(a->peak_bf16, 312e12);
    cr_expect_eq(a->peak_fp32, 19.5e12);
    cr_expect_eq(a->intra_bw, 300e9);
    cr_expect_eq(a->inter_bw, 25e9);
    tri_cluster cl = {.hw = c, .num_gpus = 4, .gpus_per_node = 4, .cpu_cores = 2, .eff = c->eff};
    cr_expect_float_eq(tri_cluster_peak(&cl, TRI_PRECISION_FP32), 115e9 * 2 / 4, 1);
    /* the CPU backend computes bf16 in fp32: the same peak */
    cr_expect_float_eq(tri_cluster_peak(&cl, TRI_PRECISION_BF16), tri_cluster_peak(&cl, TRI_PRECISION_FP32), 1);
    cr_expect_float_eq(tri_cluster_usable_bytes(&cl), (24.0 - 1.0) * 1073741824.0 / 4, 1);
    cr_expect_float_eq(tri_collective_seconds(TRI_COMM_ALL_REDUCE, 1e9, 8, 1e9), 1.75, 1e-12);
    cr_expect_float_eq(tri_collective_seconds(TRI_COMM_REDUCE_SCATTER, 1e9, 8, 1e9), 0.875, 1e-12);
    cr_expect_float_eq(tri_collective_seconds(TRI_COMM_P2P, 1e9, 2, 1e9), 1.0, 1e-12);
    cr_expect_eq(tri_collective_seconds(TRI_COMM_ALL_REDUCE, 1e9, 1, 1e9), 0.0);
}

/* ---- layout rules ---- */

static tri_layout_request request(int gpus, int tp, int pp, int64_t mb, int64_t gb)
{
    return (tri_layout_request){.num_gpus = gpus, .tp = tp, .pp = pp, .micro_batch = mb, .global_batch = gb,
                                .seq_length = 1024, .first_layers = -1, .last_layers = -1};
}

static void refused(const tri_transformer *m, tri_layout_request r, const char *a, const char *b)
{
    tri_train_layout l;
    int rc = tri_layout_resolve(m, &r, &l);
    cr_assert_eq(rc, TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), a), "message '%s' lacks '%s'", tri_error_message(), a);
    cr_expect(strstr(tri_error_message(), b), "message '%s' lacks '%s'", tri_error_message(), b);
}

Test(partitioner, bad_layouts_name_the_rule_and_the_nearest_valid_values)
{
    refused(&GPT2, request(24, 5, 1, 1, 24), "--tensor-model-parallel-size 5 does not divide n_head 12",
            "nearest valid: 4, 6");
    refused(&GPT2, request(16, 2, 3, 1, 16), "does not divide the 16 ranks", "nearest valid pipeline sizes: 2, 4");
    refused(&GPT2, request(26, 2, 13, 1, 26), "exceeds n_layer 12", "nearest valid: 1");
    refused(&GPT2, request(2, 1, 1, 4, 30), "is not a multiple of --micro-batch-size 4 x data-parallel size 2 = 8",
            "nearest valid global batch sizes: 24, 32; or micro-batch sizes: 3, 5");
    tri_layout_request r = request(2, 1, 2, 1, 8);
    r.layers_per_virtual_stage = 5;
    refused(&GPT2, r, "--num-layers-per-virtual-pipeline-stage 5", "nearest valid: 3");
    r = request(4, 1, 4, 1, 6);
    r.layers_per_virtual_stage = 1;
    refused(&GPT2, r, "a multiple of --pipeline-model-parallel-size 4", "nearest valid global batch sizes: 4, 8");
    r = request(1, 1, 1, 1, 1);
    r.seq_length = 2048;
    refused(&GPT2, r, "--seq-length 2048", "nearest valid: 1024");
    r = request(1, 1, 1, 1, 1);
    r.sequence_parallel = true;
    refused(&GPT2, r, "--sequence-parallel needs --tensor-model-parallel-size > 1", "(got 1)");
    /* valid ones: bf16 on the cpu preset (the CPU backend computes bf16 in fp32) */
    tri_train_layout l;
    r = request(1, 1, 1, 1, 1);
    r.cpu = true;
    r.precision = TRI_PRECISION_BF16;
    cr_assert_eq(tri_layout_resolve(&GPT2, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(l.precision, TRI_PRECISION_BF16);
    r = request(64, 4, 2, 2, 64);
    r.layers_per_virtual_stage = 3;
    cr_assert_eq(tri_layout_resolve(&GPT2, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(l.dp, 8);
    cr_expect_eq(l.v, 2);
    cr_expect_eq(l.n_micro, 4);
    cr_expect_str_eq(l.schedule, "interleaved");
}

/* ---- time model ---- */

static tri_cluster h100(int gpus)
{
    const tri_hardware *hw = tri_hardware_find("h100-sxm");
    return (tri_cluster){.hw = hw, .num_gpus = gpus, .gpus_per_node = 8, .eff = hw->eff};
}

static void preview_with(tri_preview *p, const tri_transformer *m, tri_cluster c, int tp, int pp, int per_chunk,
                         int64_t mb, int64_t gb, int64_t T, int zero, tri_recompute rec, const char *sched,
                         tri_attention_backend attention)
{
    tri_layout_request r = {.num_gpus = c.num_gpus, .tp = tp, .pp = pp, .layers_per_virtual_stage = per_chunk,
                            .micro_batch = mb, .global_batch = gb, .seq_length = T, .zero_stage = zero,
                            .schedule = sched, .recompute = rec, .cpu = c.hw->cpu,
                            .precision = c.hw->cpu ? TRI_PRECISION_FP32 : TRI_PRECISION_BF16,
                            .attention = attention, .first_layers = -1, .last_layers = -1};
    tri_train_layout l;
    cr_assert_eq(tri_layout_resolve(m, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_preview_create(p, m, &l, &c, NULL, NULL), TRI_OK, "%s", tri_error_message());
}

static void preview(tri_preview *p, const tri_transformer *m, tri_cluster c, int tp, int pp, int per_chunk,
                    int64_t mb, int64_t gb, int64_t T, int zero, tri_recompute rec, const char *sched)
{
    preview_with(p, m, c, tp, pp, per_chunk, mb, gb, T, zero, rec, sched, TRI_ATTENTION_FLASH);
}

/* The closed forms assume stages of equal cost. The first and last stages also carry the embedding
 * and the LM head; with the unfused attention (its T^2 traffic in every block, as here) the blocks
 * dominate and the simulated bubble stays within 0.02 of the closed form. (With the fused attention
 * the blocks are cheaper, the head weighs more, and pp 8 m 32 simulates 0.200 against 0.180: the
 * simulator is right, the closed form's equal stages are not.) */
Test(partitioner, time_parts_add_up_and_bubbles_match_the_closed_forms)
{
    tri_preview p;
    struct { int pp, m, per_chunk; const char *sched; double closed; } cases[] = {
        {4, 8, 0, "1f1b", 3.0 / 11}, {4, 8, 0, "gpipe", 3.0 / 11}, {4, 16, 0, "1f1b", 3.0 / 19},
        {4, 8, 3, "interleaved", 3.0 / 19}, {8, 32, 0, "1f1b", 7.0 / 39},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        preview_with(&p, &WIDE, h100(cases[i].pp), 1, cases[i].pp, cases[i].per_chunk, 1, cases[i].m, 512, 0,
                     TRI_RECOMPUTE_NONE, cases[i].sched, TRI_ATTENTION_UNFUSED);
        const tri_time_result *t = &p.time;
        cr_expect_float_eq(t->compute_s + t->tp_s + t->bubble_s + t->pp_s + t->dp_s + t->optimizer_s, t->iteration_s,
                           1e-12 * t->iteration_s);
        cr_expect(fabs(t->bubble_fraction - cases[i].closed) < 0.02, "%s pp %d m %d: simulated bubble %.4f, closed "
                  "form %.4f", cases[i].sched, cases[i].pp, cases[i].m, t->bubble_fraction, cases[i].closed);
        cr_expect_float_eq(t->mfu, t->model_flops / t->iteration_s / cases[i].pp / 989e12, 1e-12);
        cr_expect_float_eq(t->tokens_per_s, cases[i].m * 512.0 / t->iteration_s, 1e-9 * t->tokens_per_s);
        tri_preview_destroy(&p);
    }
}

Test(partitioner, recomputation_data_parallelism_and_links)
{
    tri_preview none, full, z0, z3;
    preview(&none, &GPT2, h100(8), 1, 1, 0, 4, 32, 1024, 0, TRI_RECOMPUTE_NONE, NULL);
    preview(&full, &GPT2, h100(8), 1, 1, 0, 4, 32, 1024, 0, TRI_RECOMPUTE_FULL, NULL);
    double ratio = full.time.compute_s / none.time.compute_s;
    /* the blocks' forward again: 1/3 more matmuls (not the head's), half again the elementwise traffic */
    cr_expect(ratio > 1.2 && ratio < 1.5, "full recomputation adds a forward of the blocks: x%.3f", ratio);
    cr_expect(full.total[0] < none.total[0], "and keeps fewer activations");
    /* 16 GPUs on 2 nodes: tp 4 inside a node, dp 4 across (ranks tp apart: 4 x 4 > 8 per node) */
    preview(&z0, &GPT2, h100(16), 4, 1, 0, 1, 64, 1024, 0, TRI_RECOMPUTE_NONE, NULL);
    preview(&z3, &GPT2, h100(16), 4, 1, 0, 1, 64, 1024, 3, TRI_RECOMPUTE_NONE, NULL);
    cr_expect(!z0.time.tp_inter_node && z0.time.dp_inter_node && !z0.time.pp_inter_node);
    cr_expect(z3.time.dp_s > z0.time.dp_s, "ZeRO 3 gathers the parameters every micro-batch");
    cr_expect(z3.total[0] < z0.total[0], "and shards them");
    tri_preview_destroy(&none);
    tri_preview_destroy(&full);
    /* tp 4 x dp 2 fill a node: each stage on its own node, the pipeline across */
    preview(&none, &GPT2, h100(16), 4, 2, 0, 1, 64, 1024, 0, TRI_RECOMPUTE_NONE, NULL);
    cr_expect(!none.time.tp_inter_node && !none.time.dp_inter_node && none.time.pp_inter_node);
    tri_preview_destroy(&none);
    tri_preview_destroy(&z0);
    tri_preview_destroy(&z3);
}

/* bf16 mixed precision as the engine runs it, on the cpu preset (computed in fp32: the fp32 peak):
 * the pipeline messages are bf16 (half), the TP activations too (the loss statistics stay fp32), the
 * optimizer streams 34 bytes a parameter instead of 28 (the fp32 master weight read again and
 * rounded into the bf16 parameter). */
Test(partitioner, bf16_time_model_follows_the_engine)
{
    const tri_hardware *hw = tri_hardware_find("cpu");
    tri_cluster c = {.hw = hw, .num_gpus = 4, .gpus_per_node = 4, .cpu_cores = 2, .eff = hw->eff};
    tri_preview p[2];
    for (int prec = 0; prec < 2; prec++) {
        tri_layout_request r = {.num_gpus = 4, .tp = 2, .pp = 2, .micro_batch = 4, .global_batch = 16,
                                .seq_length = 128, .cpu = true, .precision = (tri_precision)prec,
                                .first_layers = -1, .last_layers = -1};
        tri_train_layout l;
        cr_assert_eq(tri_layout_resolve(&TINY, &r, &l), TRI_OK, "%s", tri_error_message());
        cr_assert_eq(tri_preview_create(&p[prec], &TINY, &l, &c, NULL, NULL), TRI_OK, "%s", tri_error_message());
    }
    const tri_time_result *f = &p[TRI_PRECISION_FP32].time, *b = &p[TRI_PRECISION_BF16].time;
    cr_expect_float_eq(b->optimizer_s / f->optimizer_s, 34.0 / 28.0, 1e-9);
    cr_expect_float_eq(b->p2p_message_s / f->p2p_message_s, 0.5, 1e-9);
    cr_expect(b->tp_bytes < 0.51 * f->tp_bytes && b->tp_bytes > 0.5 * f->tp_bytes, "TP bytes %g vs %g", b->tp_bytes,
              f->tp_bytes);
    cr_expect(b->iteration_s < f->iteration_s);
    tri_preview_destroy(&p[0]);
    tri_preview_destroy(&p[1]);
}

Test(partitioner, calibration_inverts_the_time_model)
{
    tri_preview p;
    tri_cluster c = h100(8);
    c.eff.gemm = 0.5;
    preview(&p, &GPT2, c, 2, 2, 0, 2, 16, 1024, 0, TRI_RECOMPUTE_NONE, NULL);
    double gemm = 0.0;
    c.eff.gemm = 0.9;
    int rc = tri_time_model_calibrate_gemm(&p.model, &p.layout, &c, &p.plan, &p.sched, p.time.iteration_s, &gemm);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_expect(fabs(gemm - 0.5) < 1e-6, "calibrated %.8f, expected 0.5", gemm);
    rc = tri_time_model_calibrate_gemm(&p.model, &p.layout, &c, &p.plan, &p.sched, 1e-6, &gemm);
    cr_expect_eq(rc, TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "faster than the model allows"), "%s", tri_error_message());
    tri_preview_destroy(&p);
}

/* ---- timeline ---- */

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

Test(partitioner, timeline_has_a_box_per_compute_op)
{
    tri_preview p;
    preview(&p, &WIDE, h100(4), 1, 4, 0, 1, 8, 512, 0, TRI_RECOMPUTE_NONE, NULL);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    int rc = tri_timeline_svg(f, &p.sched, &p.sim, "a <test> & title");
    fclose(f);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_expect_eq(strncmp(buf, "<?xml", 5), 0);
    cr_expect(strstr(buf, "</svg>\n") == buf + len - 7);
    cr_expect(strstr(buf, "a &lt;test&gt; &amp; title"));
    /* background + 3 legend boxes + 4 rows + 4 ranks x 8 micro-batches x (forward, backward) */
    cr_expect_eq(count(buf, "<rect"), 1 + 3 + 4 + 4 * 8 * 2);
    cr_expect_eq(count(buf, "fill=\"rgb(90,150,230)\""), 1 + 4 * 8, "forward boxes (and the legend's)");
    free(buf);
    tri_preview_destroy(&p);
}

/* ---- search ---- */

Test(partitioner, search_finds_fitting_layouts_fastest_first)
{
    const tri_hardware *hw = tri_hardware_find("cpu");
    tri_cluster c = {.hw = hw, .num_gpus = 4, .gpus_per_node = 4, .cpu_cores = 2, .eff = hw->eff};
    tri_search_space sp = {.base = {.num_gpus = 4, .global_batch = 16, .seq_length = 128, .cpu = true},
                           .max_tp = 4, .max_micro_batch = 16, .max_v = 4};
    tri_search_entry best[10];
    int n = 0;
    tri_search_stats st;
    int rc = tri_search_layouts(&TINY, &c, &sp, NULL, NULL, best, 10, &n, &st);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_assert_eq(n, 10, "found %d layouts (%ld valid, %ld fit)", n, st.valid, st.fit);
    for (int i = 0; i < n; i++) {
        cr_expect(best[i].max_bytes <= tri_cluster_usable_bytes(&c));
        cr_expect_eq(best[i].layout.tp * best[i].layout.pp * best[i].layout.dp, 4);
        if (i)
            cr_expect(best[i].time.iteration_s >= best[i - 1].time.iteration_s);
    }
    tri_preview readme;
    preview(&readme, &TINY, c, 2, 2, 0, 4, 16, 128, 0, TRI_RECOMPUTE_NONE, NULL);
    cr_expect(best[0].time.iteration_s <= readme.time.iteration_s * (1 + 1e-9),
              "the best layout (%.4f s) is no slower than the README's tp 2 x pp 2 (%.4f s)", best[0].time.iteration_s,
              readme.time.iteration_s);
    tri_preview_destroy(&readme);
}

Test(partitioner, search_gpt3_on_1024_h100s)
{
    tri_gpt_config gpt3_config;
    tri_transformer gpt3 = tu_gpt(&gpt3_config, 96, 96, 12288, 50257, 2048);
    tri_cluster c = h100(1024);
    tri_search_space sp = {.base = {.num_gpus = 1024, .global_batch = 1536, .seq_length = 2048,
                                    .precision = TRI_PRECISION_BF16},
                           .max_tp = 8, .max_micro_batch = 4, .max_v = 4};
    tri_search_entry best[10];
    int n = 0;
    tri_search_stats st;
    int rc = tri_search_layouts(&gpt3, &c, &sp, NULL, NULL, best, 10, &n, &st);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_assert_eq(n, 10);
    cr_expect(best[0].time.mfu > 0.3 && best[0].time.mfu < 0.7, "best MFU %.3f", best[0].time.mfu);
    cr_expect(best[0].max_bytes <= tri_cluster_usable_bytes(&c));
    cr_log_info("GPT-3 175B on 1024 H100s: %ld layouts considered, %ld fit by formulas; best tp %d pp %d v %d dp %d "
                "mb %lld zero %d recompute %s sp %d: %.3f s, MFU %.1f%%", st.considered, st.screened,
                best[0].layout.tp, best[0].layout.pp, best[0].layout.v, best[0].layout.dp, (long long)best[0].layout.B,
                best[0].layout.zero_stage, tri_recompute_name(best[0].layout.recompute),
                best[0].layout.sequence_parallel, best[0].time.iteration_s, 100 * best[0].time.mfu);
}
