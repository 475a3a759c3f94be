/* tests/test_stages.c - the pipeline stage split (partitioner/stages.h).
 *
 * Uniform models split evenly; GPT-2 124M's large LM head leaves its stage fewer blocks; the
 * balancing program finds the same optimum as trying every split; Megatron-LM's first/last-stage
 * overrides and the interleaved placement give exactly the asked counts; every refused input names
 * the flags and values. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/stages.h"
#include "tests/gpt_outline.h"

/* GPT-2 124M (models/gpt2.json), micro-batch 4 x 1024 tokens as llm.c trains it. */
TU_GPT_MODEL(GPT2, 12, 12, 768, 50257, 1024);

/* 24 wide blocks with a tiny vocabulary: the embedding and head cost under a tenth of a block. */
TU_GPT_MODEL(WIDE, 24, 16, 1024, 256, 128);

/* 13 narrow blocks with a Llama-sized vocabulary: the ends weigh as much as blocks. */
TU_GPT_MODEL(NARROW, 13, 4, 256, 32000, 512);

static tri_layout_shape shape(int pp, int64_t B, int64_t T)
{
    return (tri_layout_shape){.tp = 1, .pp = pp, .dp = 1, .B = B, .T = T, .n_micro = 8};
}

static const tri_stage_options PLAIN = {.v = 1, .first_layers = -1, .last_layers = -1};

/* Splits and checks the chunks are consecutive, non-empty, in model order, flagged first/last. */
static void split_ok(tri_stage_plan *p, const tri_transformer *m, const tri_layout_shape *l,
                     const tri_stage_options *o)
{
    int rc = tri_stage_split(p, m, l, o);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    cr_assert_eq(p->n_chunks, l->pp * o->v);
    int at = 0;
    for (int c = 0; c < p->n_chunks; c++) {
        const tri_stage_place *s = &p->chunks[c];
        cr_assert_eq(s->layer_start, at, "chunk %d starts at %d", c, s->layer_start);
        cr_assert_gt(s->layer_end, s->layer_start, "chunk %d is empty", c);
        cr_assert_eq(s->first, c == 0);
        cr_assert_eq(s->last, c == p->n_chunks - 1);
        at = s->layer_end;
    }
    cr_assert_eq(at, (int)m->n_layer);
}

static void expect_layers(const tri_stage_plan *p, const int *want)
{
    for (int c = 0; c < p->n_chunks; c++) {
        int got = p->chunks[c].layer_end - p->chunks[c].layer_start;
        cr_expect_eq(got, want[c], "chunk %d holds %d layers, expected %d", c, got, want[c]);
    }
}

Test(stages, uniform_blocks_split_evenly)
{
    int pps[] = {1, 2, 3, 4, 6, 8, 12, 24};
    for (size_t i = 0; i < sizeof pps / sizeof *pps; i++) {
        tri_layout_shape l = shape(pps[i], 1, 128);
        tri_stage_plan p;
        split_ok(&p, &WIDE, &l, &PLAIN);
        for (int c = 0; c < p.n_chunks; c++)
            cr_expect_eq(p.chunks[c].layer_end - p.chunks[c].layer_start, 24 / pps[i], "pp %d stage %d: %d-%d",
                         pps[i], c, p.chunks[c].layer_start, p.chunks[c].layer_end);
        tri_stage_plan_free(&p);
    }
}

/* GPT-2 124M's head (6 N C V, V = 50304) costs as many FLOPs as 4.5 blocks, so the last stage gets
 * fewer blocks; the first stage's memory carries wte (38.6 M parameters). */
Test(stages, gpt2_124m_large_head_gets_fewer_blocks)
{
    tri_layout_shape l = shape(2, 4, 1024);
    tri_stage_plan p;
    split_ok(&p, &GPT2, &l, &PLAIN);
    expect_layers(&p, (int[]){8, 4});
    cr_expect_str_eq(p.method, "balanced");
    /* per block: 3 (24 B T C^2 + 4 B T^2 C) = 212 600 881 152; head 6 B T C Vp = 949 187 772 416 */
    cr_expect_float_eq(p.costs[0].flops, 8 * 212600881152.0 + 3.0 * 4096 * 768, 1.0);
    cr_expect_float_eq(p.costs[1].flops, 4 * 212600881152.0 + 949456207872.0, 1.0);
    /* per block: 16 x 7 087 872 parameters + 4 x 100 679 680 activations */
    tri_stage_cost one = tri_stage_chunk_cost(&GPT2, &l, 2, 1, false, false);
    cr_expect_float_eq(one.bytes, 16.0 * 7087872 + 4.0 * 100679680, 1.0);
    cr_expect_float_eq(p.max_cost, p.costs[0].mem_share, 1e-15);   /* stage 0's memory binds */
    cr_expect(p.costs[0].mem_share > 0.57 && p.costs[0].mem_share < 0.58, "%f", p.costs[0].mem_share);
    tri_stage_plan_free(&p);

    l.pp = 4;
    split_ok(&p, &GPT2, &l, &PLAIN);
    expect_layers(&p, (int[]){3, 4, 4, 1});
    cr_expect_float_eq(p.max_cost, p.costs[3].flop_share, 1e-15);  /* one block + head binds: */
    cr_expect(p.max_cost > 0.331 && p.max_cost < 0.333, "%f", p.max_cost);  /* 5.46 of 16.46 blocks */
    tri_stage_plan_free(&p);
}

static double sq(double x)
{
    return x * x;
}

/* Tries every split of L blocks over pp stages (compositions, each part >= 1): the smallest
 * largest cost and, among those, the smallest sum of squares. */
static void brute_force(const tri_transformer *m, const tri_layout_shape *l, double *best_max, double *best_sq)
{
    int L = (int)m->n_layer, pp = l->pp, cut[16];
    *best_max = 1e300;
    *best_sq = 1e300;
    for (int k = 0; k < pp - 1; k++)
        cut[k] = k + 1;     /* stage s holds [cut[s-1], cut[s]) */
    for (;;) {
        double mx = 0, s2 = 0;
        for (int s = 0; s < pp; s++) {
            int a = s == 0 ? 0 : cut[s - 1], b = s == pp - 1 ? L : cut[s];
            double c = tri_stage_chunk_cost(m, l, pp, b - a, s == 0, s == pp - 1).cost;
            mx = c > mx ? c : mx;
            s2 += sq(c);
        }
        if (mx < *best_max * (1 - 1e-12)) {
            *best_max = mx;
            *best_sq = s2;
        } else if (mx <= *best_max * (1 + 1e-12) && s2 < *best_sq) {
            *best_sq = s2;
        }
        int k = pp - 2;     /* next combination of pp - 1 cuts from 1..L-1 */
        while (k >= 0 && cut[k] == L - 1 - (pp - 2 - k))
            k--;
        if (k < 0)
            break;
        cut[k]++;
        for (int j = k + 1; j < pp - 1; j++)
            cut[j] = cut[j - 1] + 1;
    }
}

Test(stages, balanced_split_matches_exhaustive_search)
{
    tri_transformer models[] = {GPT2, WIDE, NARROW};
    int64_t Ts[] = {64, 1024};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 2; t++)
            for (int pp = 2; pp <= 6; pp++) {
                tri_transformer m = models[i];
                m.n_layer = m.n_layer > 13 ? 13 : m.n_layer;
                tri_layout_shape l = shape(pp, 2, Ts[t]);
                l.tp = 1 + (pp % 2);
                l.sequence_parallel = pp == 3;
                tri_stage_plan p;
                split_ok(&p, &m, &l, &PLAIN);
                double best_max, best_sq, s2 = 0;
                brute_force(&m, &l, &best_max, &best_sq);
                for (int c = 0; c < pp; c++)
                    s2 += sq(p.costs[c].cost);
                cr_expect_float_eq(p.max_cost, best_max, 1e-12 * best_max,
                                   "model %d T %lld pp %d: %.15f vs %.15f", i, (long long)Ts[t], pp,
                                   p.max_cost, best_max);
                cr_expect_float_eq(s2, best_sq, 1e-9 * best_sq, "model %d pp %d: sum of squares %.15f vs %.15f",
                                   i, pp, s2, best_sq);
                tri_stage_plan_free(&p);
            }
}

/* 13 blocks over 4 stages: the stage with 4 blocks must be a middle one (the embedding and the head
 * make the ends dearer), and of the two equal choices the later stage takes it. */
Test(stages, remainder_goes_to_later_stages)
{
    tri_transformer m = WIDE;
    m.n_layer = 13;
    tri_layout_shape l = shape(4, 1, 128);
    tri_stage_plan p;
    split_ok(&p, &m, &l, &PLAIN);
    expect_layers(&p, (int[]){3, 3, 4, 3});
    tri_stage_plan_free(&p);
}

Test(stages, large_pipelines_are_quick)
{
    tri_transformer m = WIDE;
    m.n_layer = 200;
    tri_layout_shape l = shape(64, 1, 128);
    tri_stage_plan p;
    split_ok(&p, &m, &l, &PLAIN);
    for (int c = 0; c < 64; c++) {
        int n = p.chunks[c].layer_end - p.chunks[c].layer_start;
        cr_expect(n == 3 || n == 4, "stage %d: %d layers", c, n);
    }
    tri_stage_plan_free(&p);
    m.n_layer = 64;
    split_ok(&p, &m, &l, &PLAIN);
    for (int c = 0; c < 64; c++)
        cr_expect_eq(p.chunks[c].layer_end - p.chunks[c].layer_start, 1);
    tri_stage_plan_free(&p);
}

Test(stages, first_and_last_overrides)
{
    struct { int pp, first, last, want[4]; } t[] = {
        {4, 3, -1, {3, 7, 7, 7}}, {4, -1, 2, {7, 7, 8, 2}}, {4, 4, 4, {4, 8, 8, 4}},
        {2, 10, -1, {10, 14}}, {2, 5, 19, {5, 19}}, {3, 1, 1, {1, 22, 1}}, {4, 5, 6, {5, 6, 7, 6}},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        tri_layout_shape l = shape(t[i].pp, 1, 128);
        tri_stage_options o = {.v = 1, .first_layers = t[i].first, .last_layers = t[i].last};
        tri_stage_plan p;
        split_ok(&p, &WIDE, &l, &o);
        cr_expect_str_eq(p.method, "overrides");
        expect_layers(&p, t[i].want);
        tri_stage_plan_free(&p);
    }
}

Test(stages, interleaved_placement)
{
    tri_layout_shape l = shape(4, 1, 128);
    tri_stage_options o = {.v = 2, .first_layers = -1, .last_layers = -1};
    tri_stage_plan p;
    split_ok(&p, &WIDE, &l, &o);
    cr_expect_str_eq(p.method, "interleaved");
    for (int c = 0; c < 8; c++) {
        cr_expect_eq(p.chunks[c].layer_start, 3 * c);
        cr_expect_eq(p.chunks[c].layer_end, 3 * c + 3);
    }
    tri_stage_plan_free(&p);
    o.v = 6;
    split_ok(&p, &WIDE, &l, &o);
    for (int c = 0; c < 24; c++)
        cr_expect_eq(p.chunks[c].layer_end - p.chunks[c].layer_start, 1);
    tri_stage_plan_free(&p);
    int v = 0;
    cr_expect_eq(tri_stage_virtual_size(24, 4, 3, &v), TRI_OK);
    cr_expect_eq(v, 2);
    cr_expect_eq(tri_stage_virtual_size(24, 4, 6, &v), TRI_OK);
    cr_expect_eq(v, 1);
}

static void expect_refused(const tri_transformer *m, int pp, int v, int first, int last, const char *n1,
                           const char *n2)
{
    tri_layout_shape l = shape(pp, 1, 128);
    tri_stage_options o = {.v = v, .first_layers = first, .last_layers = last};
    tri_stage_plan p;
    int rc = tri_stage_split(&p, m, &l, &o);
    const char *msg = tri_error_message();
    cr_expect_eq(rc, TRI_EINVAL, "pp %d v %d first %d last %d: status %d (%s)", pp, v, first, last, rc, msg);
    cr_expect(p.chunks == NULL && p.n_chunks == 0);
    cr_expect(strstr(msg, n1) != NULL, "message names '%s': %s", n1, msg);
    if (n2)
        cr_expect(strstr(msg, n2) != NULL, "message names '%s': %s", n2, msg);
    tri_stage_plan_free(&p);
}

Test(stages, refused_inputs_name_flags_and_values)
{
    tri_transformer small = WIDE;
    small.n_layer = 3;
    expect_refused(&small, 4, 1, -1, -1, "n_layer (--num-layers) 3 is less than "
                   "--pipeline-model-parallel-size 4", NULL);
    expect_refused(&WIDE, 4, 4, -1, -1, "n_layer (--num-layers) 24 is not divisible by "
                   "--pipeline-model-parallel-size 4 x 4 model chunks",
                   "--num-layers-per-virtual-pipeline-stage");
    expect_refused(&WIDE, 16, 2, -1, -1, "24 is not divisible by --pipeline-model-parallel-size 16 x 2", NULL);
    expect_refused(&WIDE, 1, 2, -1, -1, "--num-layers-per-virtual-pipeline-stage",
                   "--pipeline-model-parallel-size > 1");
    expect_refused(&WIDE, 4, 1, 0, -1, "--decoder-first-pipeline-num-layers 0", "at least one layer");
    expect_refused(&WIDE, 4, 1, -1, -3, "--decoder-last-pipeline-num-layers -3", NULL);
    expect_refused(&WIDE, 4, 1, 25, -1, "--decoder-first-pipeline-num-layers 25 exceeds n_layer "
                   "(--num-layers) 24", NULL);
    expect_refused(&WIDE, 4, 1, 20, 10, "--decoder-first-pipeline-num-layers 20 and "
                   "--decoder-last-pipeline-num-layers 10 exceed n_layer (--num-layers) 24", NULL);
    expect_refused(&WIDE, 4, 1, 20, 3, "leave 1 of n_layer (--num-layers) 24 for the other 2 stages", NULL);
    expect_refused(&WIDE, 4, 1, 22, -1, "--decoder-first-pipeline-num-layers 22 leaves 2 of n_layer "
                   "(--num-layers) 24 for the other 3 stages", NULL);
    expect_refused(&WIDE, 2, 1, 10, 10, "leave 4 of n_layer (--num-layers) 24 for the other 0 stages", NULL);
    expect_refused(&WIDE, 1, 1, 24, -1, "--decoder-first-pipeline-num-layers 24 needs "
                   "--pipeline-model-parallel-size > 1", NULL);
    expect_refused(&WIDE, 4, 2, 3, -1, "--decoder-first-pipeline-num-layers 3 cannot be combined with "
                   "--num-layers-per-virtual-pipeline-stage", NULL);
    expect_refused(&WIDE, 0, 1, -1, -1, "--pipeline-model-parallel-size 0", NULL);
    int v = 0;
    cr_expect_eq(tri_stage_virtual_size(24, 4, 5, &v), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--num-layers-per-virtual-pipeline-stage 5") != NULL, "%s",
              tri_error_message());
    cr_expect_eq(tri_stage_virtual_size(24, 4, 0, &v), TRI_EINVAL);
}

/* world_rank = tp_rank + tp * (dp_rank + dp * pp_rank): pipeline rank 2 of tp 2 x dp 3 is 12..17. */
Test(stages, report_names_layers_and_ranks)
{
    int lo, hi;
    tri_stage_world_ranks(2, 2, 3, &lo, &hi);
    cr_expect(lo == 12 && hi == 17, "%d-%d", lo, hi);
    tri_layout_shape l = {.tp = 2, .pp = 4, .dp = 2, .B = 4, .T = 1024, .sequence_parallel = true};
    tri_stage_options o = {.v = 2, .first_layers = -1, .last_layers = -1};
    tri_transformer m = GPT2;
    m.n_layer = 24;
    tri_stage_plan p;
    split_ok(&p, &m, &l, &o);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f);
    tri_stage_plan_print(f, &p);
    fclose(f);
    const char *want[] = {
        "pipeline split (interleaved): 24 layers over 4 stages, 2 chunks per rank",
        "chunk 0 (stage 0, local 0): layers 0-2 (3) + embedding -> ranks 0-3;",
        "chunk 5 (stage 1, local 1): layers 15-17 (3) -> ranks 4-7;",
        "chunk 7 (stage 3, local 1): layers 21-23 (3) + LM head and loss -> ranks 12-15;",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(buf, want[i]) != NULL, "report lacks '%s':\n%s", want[i], buf);
    free(buf);
    tri_stage_plan_free(&p);
}
