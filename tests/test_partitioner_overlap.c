/* tests/test_partitioner_overlap.c - the data-parallel overlap simulation (partitioner/dp_overlap.h)
 * and the data-parallel methods of the time model (compression, local SGD, inter-node bandwidth).
 *
 *  - By hand: one stage, known compute and comm times; the exposed part is what ends after the
 *    stage's last compute, max(0, comm_end - compute_end), plus the stalls of forwards waiting for
 *    their parameters.
 *  - Monotone: overlap never exposes more than the blocking reduction; more bandwidth never costs.
 *  - Traffic: the bytes a rank sends are tri_compression_sent_bytes (engine/train/grad_compression.h,
 *    the engine's count) summed over its units, per compressor.
 *  - Bad input: the compressors' fields and ZeRO stages (tri_compression_check), local SGD's H and
 *    its ZeRO stage (tri_local_sgd_check).
 *  - Published: Megatron-Core r0.8.0's H100 weak-scaling runs (README, images/model_table.png:
 *    distributed optimizer, --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap, GPT
 *    with vocabulary 131072, sequence 4096, 48-way data parallelism, 48 to 6144 GPUs), predicted
 *    with and without the overlap simulation. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/train/grad_compression.h"
#include "partitioner/constraints.h"
#include "partitioner/dp_overlap.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/preview.h"
#include "tests/gpt_outline.h"

/* ---- the stream by hand ---- */

typedef struct timeline {
    tri_schedule s;
    tri_sim_result sim;
} timeline;

/* One stage, m micro-batches of 1F1B with forward 1 s and backward 2 s: FWD(0) [0, 1], BWD(0) [1, 3],
 * FWD(1) [3, 4], BWD(1) [4, 6], ... */
static void one_stage(timeline *t, int m)
{
    cr_assert_eq(tri_schedule_make(&t->s, "1f1b", 1, 1, m), TRI_OK, "%s", tri_error_message());
    tri_sim_costs c = {.fwd = 1.0, .bwd = 2.0, .bwd_input = 1.0, .bwd_weight = 1.0};
    cr_assert_eq(tri_schedule_simulate(&t->s, &c, &t->sim), TRI_OK, "%s", tri_error_message());
    cr_assert_float_eq(t->sim.makespan, 3.0 * m, 1e-12);
}

static void timeline_free(timeline *t)
{
    tri_sim_result_free(&t->sim);
    tri_schedule_free(&t->s);
}

/* A unit read at `use` of the forward and written at `done` of the backward (mirrored: a block). */
static tri_dp_unit unit(double use, double done, double reduce_s, double gather_s)
{
    return (tri_dp_unit){.chunk = 0, .reduce_s = reduce_s, .gather_s = gather_s, .fwd_reads = 1, .bwd_reads = 1,
                         .bwd_writes = 1, .fwd_use = use, .bwd_use = 1.0 - done, .fwd_done = done, .bwd_done = done};
}

static tri_dp_overlap run(const timeline *t, const tri_dp_unit *u, int n, tri_dp_stream st)
{
    tri_dp_overlap o;
    cr_assert_eq(tri_dp_overlap_rank(&t->s, &t->sim, 0, u, n, &st, &o), TRI_OK, "%s", tri_error_message());
    return o;
}

/* ZeRO 0, one micro-batch. Unit a's gradient is complete half-way through the backward (t = 2), b's
 * at its end (t = 3); their all-reduces run one after the other on the stream. */
Test(dp_overlap, reductions_after_the_backward_that_completes_them)
{
    timeline t;
    one_stage(&t, 1);
    tri_dp_unit u[2] = {unit(0.5, 0.5, 0.5, 0.0), unit(0.0, 1.0, 1.0, 0.0)};
    tri_dp_stream st = {.zero_stage = 0, .n_micro = 1, .overlap_grad_reduce = true};
    tri_dp_overlap o = run(&t, u, 2, st);
    /* a: [2, 2.5]; b: [3, 4]; compute ends at 3: exposed 1 */
    cr_expect_float_eq(o.compute_end_s, 3.0, 1e-12);
    cr_expect_float_eq(o.finish_s, 4.0, 1e-12);
    cr_expect_float_eq(o.comm_s, 1.5, 1e-12);
    /* a longer: [2, 4], then b [4, 5]: the stream is serial */
    u[0].reduce_s = 2.0;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 2.0, 1e-12);
    /* a short enough to hide, b ends the backward: exposed is b alone */
    u[0].reduce_s = 0.25;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 1.0, 1e-12);
    /* without the flag everything blocks after the compute: 0.25 + 1, plus the tail */
    st.overlap_grad_reduce = false;
    st.tail_s = 0.125;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 1.375, 1e-12);
    cr_expect_float_eq(o.blocking_s, 1.375, 1e-12);
    timeline_free(&t);
}

/* A compressed reduction in two exchanges (two-phase, PowerSGD: reduce2_s), as the engine runs them
 * (engine/train/zero.c start_compressed): the first when the unit is complete, the second when the
 * next unit is, after the compute has waited for the first to end; the last unit's second after the
 * backward. a complete at 2, b at 3 (the backward's end). */
Test(dp_overlap, compressed_second_exchange_at_the_next_unit)
{
    timeline t;
    one_stage(&t, 1);
    tri_dp_unit u[2] = {unit(0.5, 0.5, 0.5, 0.0), unit(0.0, 1.0, 0.5, 0.0)};
    u[0].reduce2_s = u[1].reduce2_s = 0.25;
    tri_dp_stream st = {.zero_stage = 0, .n_micro = 1, .overlap_grad_reduce = true};
    /* a first [2, 2.5]; at 3: a second [3, 3.25], b first [3.25, 3.75]; b second [3.75, 4] */
    tri_dp_overlap o = run(&t, u, 2, st);
    cr_expect_float_eq(o.comm_s, 1.5, 1e-12);
    cr_expect_float_eq(o.stall_s, 0.0, 1e-12);
    cr_expect_float_eq(o.finish_s, 4.0, 1e-12);
    /* a's first exchange longer than the rest of the backward, [2, 3.5]: the compute waits 0.5 at 3,
     * then a second [3.5, 3.75], b first [3.75, 4.25], b second [4.25, 4.5] */
    u[0].reduce_s = 1.5;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.stall_s, 0.5, 1e-12);
    cr_expect_float_eq(o.finish_s, 4.5, 1e-12);
    /* without the flag both exchanges of both units block after the compute: 1.75 + 0.75 */
    st.overlap_grad_reduce = false;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 2.5, 1e-12);
    timeline_free(&t);
}

/* ZeRO 0-1 reduce a unit once, after its LAST micro-batch's backward; ZeRO 2 every pass's bucket as
 * it is written. Two micro-batches: BWD(0) [1, 3], BWD(1) [4, 6]. */
Test(dp_overlap, zero_stages_issue_at_their_passes)
{
    timeline t;
    one_stage(&t, 2);
    tri_dp_unit u[1] = {unit(0.0, 0.5, 1.5, 0.0)};
    tri_dp_stream st = {.zero_stage = 1, .n_micro = 2, .overlap_grad_reduce = true};
    /* ZeRO 1: one reduce-scatter, ready at 4 + 0.5 x 2 = 5, ends 6.5: exposed 0.5 */
    tri_dp_overlap o = run(&t, u, 1, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 0.5, 1e-12);
    /* ZeRO 2: [2, 3.5] after the first pass (hidden), [5, 6.5] after the second */
    st.zero_stage = 2;
    o = run(&t, u, 1, st);
    cr_expect_float_eq(o.comm_s, 3.0, 1e-12);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 0.5, 1e-12);
    /* a reduction longer than the gap queues: 2.5 each, [2, 4.5], [5, 7.5] */
    u[0].reduce_s = 2.5;
    o = run(&t, u, 1, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 1.5, 1e-12);
    u[0].reduce_s = 3.5;  /* [2, 5.5], [5.5, 9] */
    o = run(&t, u, 1, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 3.0, 1e-12);
    timeline_free(&t);
}

/* ZeRO 1 with overlap_param_gather: the all-gathers all start at the step's start in the units'
 * order (the engine's), and a forward waits for a unit at its first use. One micro-batch, FWD [0, 1].
 * a (unit 0, gather 0.25) is ready at 0.25, b (unit 1, gather 0.5) at 0.75; b is used at 0: stall
 * 0.75; a at 0.5 of the forward, reached at 0.75 + 0.5 = 1.25, long ready. Compute ends at 3.75. */
Test(dp_overlap, parameter_gathers_stall_the_first_forward)
{
    timeline t;
    one_stage(&t, 1);
    tri_dp_unit u[2] = {unit(0.5, 0.5, 0.0, 0.25), unit(0.0, 1.0, 0.0, 0.5)};
    tri_dp_stream st = {.zero_stage = 1, .n_micro = 1, .overlap_param_gather = true};
    tri_dp_overlap o = run(&t, u, 2, st);
    cr_expect_float_eq(o.stall_s, 0.75, 1e-12);
    cr_expect_float_eq(o.finish_s, 3.75, 1e-12);
    /* a's gather longer: a ready 1.0, b 1.5: b stalls 1.5, a (reached at 2.0) is ready */
    u[0].gather_s = 1.0;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.stall_s, 1.5, 1e-12);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 1.5, 1e-12);
    /* b first in the units' order: ready 0.5 (stall 0.5), a ready 1.5, reached at 0.5 + 0.5: 0.5 more */
    tri_dp_unit swapped[2] = {u[1], u[0]};
    o = run(&t, swapped, 2, st);
    cr_expect_float_eq(o.stall_s, 1.0, 1e-12);
    /* ZeRO 3 all-gathers before every use, each started when the use before it starts: b's at 0
       ([0, 0.5]: b stalls 0.5), a's at b's use (0.5: [0.5, 0.75]; a is reached at 1.0), b's for the
       backward at 1.0 ([1, 1.5]; the backward starts at 1.5), a's at 1.5 ([1.5, 1.75]; reached at
       2.5): one stall of 0.5, and the stream carries m x reads all-gathers */
    st.zero_stage = 3;
    u[0].gather_s = 0.25;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.comm_s, 2 * 0.25 + 2 * 0.5, 1e-12);
    cr_expect_float_eq(o.stall_s, 0.5, 1e-12);
    cr_expect_float_eq(o.finish_s, 3.5, 1e-12);
    /* without the flag every all-gather blocks: all 1.5 s exposed */
    st.overlap_param_gather = false;
    o = run(&t, u, 2, st);
    cr_expect_float_eq(o.finish_s - o.compute_end_s, 1.5, 1e-12);
    timeline_free(&t);
}

/* ---- the time model ---- */

TU_GPT_MODEL(GPT2, 12, 12, 768, 50257, 1024);

static tri_cluster h100(int gpus)
{
    const tri_hardware *hw = tri_hardware_find("h100-sxm");
    cr_assert_not_null(hw);
    return (tri_cluster){.hw = hw, .num_gpus = gpus, .gpus_per_node = 8, .eff = hw->eff};
}

static tri_train_layout layout(const tri_transformer *m, int gpus, int tp, int pp, int64_t gb, int zero, bool overlap)
{
    tri_layout_request r = {.num_gpus = gpus, .tp = tp, .pp = pp, .micro_batch = 1, .global_batch = gb,
                            .seq_length = 1024, .zero_stage = zero, .precision = TRI_PRECISION_BF16,
                            .attention = TRI_ATTENTION_FLASH, .sequence_parallel = tp > 1,
                            .overlap_grad_reduce = overlap, .overlap_param_gather = overlap,
                            .first_layers = -1, .last_layers = -1};
    tri_train_layout l;
    cr_assert_eq(tri_layout_resolve(m, &r, &l), TRI_OK, "%s", tri_error_message());
    return l;
}

static tri_time_result predict(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c)
{
    tri_preview p;
    cr_assert_eq(tri_preview_create(&p, m, l, c, NULL, NULL), TRI_OK, "%s", tri_error_message());
    tri_time_result t = p.time;
    tri_preview_destroy(&p);
    return t;
}

/* GPT-2 124M, dp 32 over 4 nodes (and tp 2 x pp 2 x dp 8): at every ZeRO stage and inter-node bandwidth
 * the simulated exposure lies between 0 and the blocking reduction, and falls as bandwidth grows. */
Test(dp_overlap, exposed_is_bounded_and_falls_with_bandwidth)
{
    const double gbps[] = {10, 25, 100, 400};
    struct { int tp, pp; } shapes[] = {{1, 1}, {2, 2}};
    for (int s = 0; s < 2; s++)
        for (int z = 0; z <= 3; z++) {
            double last = INFINITY;
            for (int b = 0; b < 4; b++) {
                tri_cluster c = h100(32);
                c.inter_bw = gbps[b] * 1e9 / 8;
                tri_train_layout off = layout(&GPT2, 32, shapes[s].tp, shapes[s].pp, 256, z, false);
                tri_train_layout on = layout(&GPT2, 32, shapes[s].tp, shapes[s].pp, 256, z, true);
                tri_time_result a = predict(&GPT2, &off, &c), o = predict(&GPT2, &on, &c);
                cr_expect(!a.dp_overlap_simulated && o.dp_overlap_simulated);
                cr_expect(a.dp_inter_node);
                cr_expect(o.dp_s >= 0 && o.dp_s <= o.dp_blocking_s * (1 + 1e-9), "tp %d pp %d ZeRO %d %g Gb/s: "
                          "overlap %g > blocking %g", shapes[s].tp, shapes[s].pp, z, gbps[b], o.dp_s, o.dp_blocking_s);
                cr_expect_float_eq(a.dp_s, a.dp_comm_s, 1e-9 * a.dp_comm_s);  /* blocking: all of it */
                cr_expect(o.dp_s <= last * (1 + 1e-9), "ZeRO %d: %g Gb/s exposes %g, slower links %g", z, gbps[b],
                          o.dp_s, last);
                if (shapes[s].pp == 1) { /* one stage: the share model's rank is the one that ends last */
                    cr_expect_float_eq(o.dp_blocking_s, a.dp_s, 1e-9 * a.dp_s);
                    cr_expect(o.iteration_s <= a.iteration_s * (1 + 1e-9));
                }
                last = o.dp_s;
            }
        }
}

/* --dp-comm-exposed wins over the simulation; without the overlap flags the old share is kept. */
Test(dp_overlap, exposed_share_overrides)
{
    tri_cluster c = h100(32);
    tri_train_layout on = layout(&GPT2, 32, 1, 1, 256, 1, true), off = layout(&GPT2, 32, 1, 1, 256, 1, false);
    tri_time_result blocking = predict(&GPT2, &off, &c);
    c.eff.dp_exposed = 0.25;
    c.dp_exposed_given = true;
    tri_time_result given = predict(&GPT2, &on, &c);
    cr_expect(!given.dp_overlap_simulated);
    cr_expect_float_eq(given.dp_s, 0.25 * blocking.dp_s, 1e-12 * blocking.dp_s);
}

/* The bytes a rank sends for data parallelism are the engine's count, tri_compression_sent_bytes,
 * over its units: for GPT-2 on one stage (tied wte V x C, wpe 1024 x C, 12 blocks, ln_f) at dp 4,
 * ZeRO 0 and 1, every compressor; PowerSGD takes each matrix apart (the block's four weights from its
 * family, the tables) and sends the rest (biases, norms) uncompressed. */
Test(dp_overlap, traffic_is_the_engine_count)
{
    tri_cluster c = h100(4);
    for (int z = 0; z <= 1; z++)
        for (int k = 0; k < TRI_COMPRESS_KINDS; k++) {
            tri_train_layout l = layout(&GPT2, 4, 1, 1, 8, z, false);
            c.dp.compression = tri_compression_defaults();
            c.dp.compression.kind = (tri_compression_kind)k;
            tri_time_result t = predict(&GPT2, &l, &c);
            const tri_compression *cz = &c.dp.compression;
            bool on = k != TRI_COMPRESS_NONE;
            int64_t C = 768, V = tri_padded_vocab(50257, 1);
            tri_block_cost b = tri_transformer_block(&GPT2, &l);
            double block = 0.0;
            int64_t rest = (int64_t)b.params;
            if (k == TRI_COMPRESS_POWERSGD) {
                for (int i = 0; i < b.n_linear; i++) {
                    block += (double)tri_compression_sent_bytes(cz, b.linear[i][1], b.linear[i][0], 4, z, true);
                    rest -= b.linear[i][0] * b.linear[i][1];
                }
                block += (double)tri_compression_sent_bytes(cz, 1, rest, 4, z, true);
            } else {
                block = (double)tri_compression_sent_bytes(cz, 1, (int64_t)b.params, 4, z, on);
            }
            double want = 12 * block + (double)tri_compression_sent_bytes(cz, 1, 2 * C, 4, z, on);  /* ln_f */
            if (k == TRI_COMPRESS_POWERSGD)
                want += (double)tri_compression_sent_bytes(cz, V, C, 4, z, true) +
                        (double)tri_compression_sent_bytes(cz, 1024, C, 4, z, true);
            else
                want += (double)tri_compression_sent_bytes(cz, 1, V * C, 4, z, on) +
                        (double)tri_compression_sent_bytes(cz, 1, 1024 * C, 4, z, on);
            cr_expect_float_eq(t.dp_grad_sent_bytes, want, 1e-9 * want, "ZeRO %d %s: %.0f, want %.0f", z,
                               tri_compression_name(cz->kind), t.dp_grad_sent_bytes, want);
            cr_expect(t.dp_sent_bytes <= t.dp_sent_uncompressed * (1 + 1e-12));
            if (on)
                cr_expect(t.dp_codec_s > 0);
            else
                cr_expect_float_eq(t.dp_sent_bytes, t.dp_sent_uncompressed, 1e-12 * t.dp_sent_bytes);
        }
}

/* dp 4, one GPU a node (so dp crosses nodes), ZeRO 0: 1-bit all-gathers 3 payloads of 1/32 of fp32
 * plus a scale a block, against fp32's 2 x 3/4 ring all-reduce, 14x less; PowerSGD rank 4 far less:
 * both cut the bytes more than 8x. With 10 Gb/s between nodes 1-bit's step is faster than fp32's, and
 * at 400 Gb/s its advantage shrinks. (The all-gathered payloads grow with dp: at dp 32 1-bit sends
 * 31 x 0.14 n bytes against fp32's 7.75 n, only 1.8x less.) */
Test(dp_overlap, compression_pays_on_slow_links)
{
    tri_train_layout l = layout(&GPT2, 4, 1, 1, 32, 0, true);
    double gain[2];
    for (int b = 0; b < 2; b++) {
        tri_cluster c = h100(4);
        c.gpus_per_node = 1;
        c.inter_bw = (b ? 400 : 10) * 1e9 / 8;
        tri_time_result plain = predict(&GPT2, &l, &c);
        c.dp.compression = tri_compression_defaults();
        c.dp.compression.kind = TRI_COMPRESS_1BIT;
        tri_time_result one = predict(&GPT2, &l, &c);
        cr_expect(plain.dp_sent_bytes / one.dp_sent_bytes > 8, "1bit: %.2fx", plain.dp_sent_bytes / one.dp_sent_bytes);
        c.dp.compression.kind = TRI_COMPRESS_POWERSGD;
        tri_time_result psgd = predict(&GPT2, &l, &c);
        cr_expect(plain.dp_sent_bytes / psgd.dp_sent_bytes > 8, "powersgd: %.2fx", plain.dp_sent_bytes / psgd.dp_sent_bytes);
        gain[b] = plain.iteration_s - one.iteration_s;
    }
    cr_expect(gain[0] > 0, "1bit at 10 Gb/s: %g s faster", gain[0]);
    cr_expect(gain[1] < gain[0]);
}

/* Local SGD, H 16: no dp traffic in inner steps; a synchronisation (anchor and parameter fp32
 * all-gathers, the deltas' reduction) every 16 iterations, charged 1/16 a step. */
Test(dp_overlap, local_sgd_amortises_its_synchronisation)
{
    tri_train_layout l = layout(&GPT2, 32, 1, 1, 256, 0, false);
    tri_cluster c = h100(32);
    tri_time_result every = predict(&GPT2, &l, &c);
    c.dp.local_sgd_steps = 16;
    tri_time_result local = predict(&GPT2, &l, &c);
    double P = (double)every.dp_grad_sent_bytes / (2.0 * 31 / 32 * 4);  /* parameters, from the all-reduce */
    double sync = 2 * (31.0 / 32) * 4 * P + (31.0 / 32) * 4 * P;         /* two all-gathers, one reduce-scatter */
    cr_expect_float_eq(local.dp_sent_bytes, sync / 16 + 2 * (31.0 / 32) * 8, 1e-6 * local.dp_sent_bytes);
    cr_expect(local.dp_s < every.dp_s / 5);
}

/* Bad input names the flag and the value. */
Test(dp_overlap, bad_methods_are_refused)
{
    tri_train_layout l = layout(&GPT2, 4, 1, 1, 8, 0, false);
    struct { tri_compression_kind k; int block, levels, rank, zero, H; float fraction; const char *want; } cases[] = {
        {TRI_COMPRESS_TOPK, 256, 7, 4, 0, 0, 0.0f, "--topk-fraction 0"},
        {TRI_COMPRESS_TOPK, 256, 7, 4, 0, 0, 1.5f, "--topk-fraction 1.5"},
        {TRI_COMPRESS_POWERSGD, 256, 7, 0, 0, 0, 0.01f, "--powersgd-rank 0"},
        {TRI_COMPRESS_1BIT, 0, 7, 4, 0, 0, 0.01f, "--compression-block-size 0"},
        {TRI_COMPRESS_QSGD, 256, 0, 4, 0, 0, 0.01f, "--qsgd-levels 0"},
        {TRI_COMPRESS_POWERSGD, 256, 7, 4, 2, 0, 0.01f, "--zero-stage 2"},
        {TRI_COMPRESS_1BIT, 256, 7, 4, 3, 0, 0.01f, "--zero-stage 3"},
        {TRI_COMPRESS_NONE, 256, 7, 4, 0, -1, 0.01f, "--local-sgd-steps -1"},
        {TRI_COMPRESS_NONE, 256, 7, 4, 1, 16, 0.01f, "with ZeRO stage 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tri_dp_method d = {.compression = tri_compression_defaults(), .local_sgd_steps = cases[i].H};
        d.compression.kind = cases[i].k;
        d.compression.block_size = cases[i].block;
        d.compression.qsgd_levels = cases[i].levels;
        d.compression.powersgd_rank = cases[i].rank;
        d.compression.topk_fraction = cases[i].fraction;
        l.zero_stage = cases[i].zero;
        cr_expect_eq(tri_time_dp_method_check(&d, &l), TRI_EINVAL, "case %zu", i);
        cr_expect(strstr(tri_error_message(), cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i,
                  tri_error_message(), cases[i].want);
    }
    /* the time model refuses them too */
    tri_cluster c = h100(4);
    c.dp.compression = tri_compression_defaults();
    c.dp.compression.kind = TRI_COMPRESS_1BIT;
    tri_train_layout z2 = layout(&GPT2, 4, 1, 1, 8, 2, false);
    tri_preview p;
    cr_expect_eq(tri_preview_create(&p, &GPT2, &z2, &c, NULL, NULL), TRI_EINVAL);
    tri_preview_destroy(&p);
}

/* ---- Megatron-Core's published weak scaling ---- */

typedef struct mc_run {
    const char *name;
    int heads, hidden, layers, tp, pp, gpus, batch;
    double tflops;   /* per GPU, published */
} mc_run;

/* Megatron-LM README (2024-07, images/model_table.png): Megatron-Core r0.8.0 on H100 80GB, dp 48. */
static const mc_run MC[] = {
    {"1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8},     {"7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9},
    {"16B", 48, 6144, 32, 4, 1, 192, 192, 489.1},     {"32B", 56, 7168, 48, 8, 1, 384, 192, 459.6},
    {"70B", 64, 8192, 84, 8, 2, 768, 384, 419.7},     {"119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5},
    {"177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8}, {"314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4},
    {"462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9},
};

/* Assumed where the README does not say: micro-batch 1, the plain 1F1B schedule, sequence parallelism
 * with tp > 1, no recomputation, the fused attention (Transformer Engine's); TP communication hidden
 * (--tp-comm-overlap: --tp-comm-exposed 0), the H100 preset otherwise unchanged. The error is
 * predicted / measured iteration time - 1 = published / predicted TFLOP/s - 1. Measured on the
 * model as it stands (docs/partitioner-validation.md): with the overlap simulated every run is within
 * 25% (the pp 1 runs, 4 micro-batches a replica, are the worst: +3% to +24%), the mean |error| 9.0%;
 * charging data parallelism as fully exposed, as before, gave up to +42.5% and a mean of 16.1%. */
Test(dp_overlap, megatron_core_weak_scaling)
{
    double err_old = 0.0, err_new = 0.0;
    for (size_t i = 0; i < sizeof MC / sizeof *MC; i++) {
        const mc_run *r = &MC[i];
        tri_gpt_config cfg;
        tri_transformer m = tu_gpt(&cfg, r->layers, r->heads, r->hidden, 131072, 4096);
        tri_layout_request q = {.num_gpus = r->gpus, .tp = r->tp, .pp = r->pp, .micro_batch = 1,
                                .global_batch = r->batch, .seq_length = 4096, .zero_stage = 1,
                                .sequence_parallel = r->tp > 1, .precision = TRI_PRECISION_BF16,
                                .attention = TRI_ATTENTION_FLASH, .first_layers = -1, .last_layers = -1};
        tri_train_layout blocking, overlap;
        cr_assert_eq(tri_layout_resolve(&m, &q, &blocking), TRI_OK, "%s: %s", r->name, tri_error_message());
        q.overlap_grad_reduce = q.overlap_param_gather = true;
        cr_assert_eq(tri_layout_resolve(&m, &q, &overlap), TRI_OK, "%s: %s", r->name, tri_error_message());
        tri_cluster c = h100(r->gpus);
        c.eff.tp_exposed = 0.0;
        tri_time_result a = predict(&m, &blocking, &c), o = predict(&m, &overlap, &c);
        double ea = r->tflops / (a.model_tflops_per_gpu) - 1, eo = r->tflops / (o.model_tflops_per_gpu) - 1;
        cr_log_info("Megatron-Core %s on %d H100s: published %.1f TFLOP/s; blocking DP %.1f (%+.1f%%), overlap "
                    "simulated %.1f (%+.1f%%), DP exposed %.3f of %.3f s", r->name, r->gpus, r->tflops,
                    a.model_tflops_per_gpu, 100 * ea, o.model_tflops_per_gpu, 100 * eo, o.dp_s, o.dp_comm_s);
        cr_expect(o.iteration_s < a.iteration_s, "%s: overlap must not be slower", r->name);
        cr_expect(fabs(eo) < 0.25, "%s: %+.1f%% from the published time", r->name, 100 * eo);
        err_old += fabs(ea) / (sizeof MC / sizeof *MC);
        err_new += fabs(eo) / (sizeof MC / sizeof *MC);
    }
    cr_log_info("mean |error|: blocking %.1f%%, overlap simulated %.1f%%", 100 * err_old, 100 * err_new);
    cr_expect(err_new < 0.10 && err_new < 0.6 * err_old, "mean |error| %.3f (blocking %.3f)", err_new, err_old);
}
