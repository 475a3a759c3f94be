/* tests/test_moe_stats.c - the step's Mixture-of-Experts figures for the logs (engine/train/moe_stats.h,
 * models/llama_moe.c tri_llama_moe_count): the aux and z losses apart from the LM loss, each sparse
 * layer's expert load (busiest expert / mean per expert) and the dropped fraction.
 *  - the account by hand: two micro-batches on each of two thread ranks, reduced, against the sums,
 *    loads and fractions written out (integers: exact; the losses in 2^-32 fixed point: within
 *    2^-33 per value added);
 *  - through a chunk's real backward with zero routers, where the counts are known in closed form:
 *    every score is 1/E, ties go to the lower index, so each of the N tokens picks experts 0 and 1
 *    (load E / K = 2); with capacity factor 1 each of them keeps ceil(N K / E) = N / 2 (drop 1/2);
 *    each layer's aux loss is its coefficient and its z-loss coeff_z (ln E)^2 (docs/moe.md);
 *  - a trained model's account: every sparse layer routes exactly N K x micro-batches x replicas
 *    selections (dense layers none), pp 2 x dp 2 gives one rank's account bit for bit in
 *    deterministic mode (the counts and fixed-point losses are order-free sums), each step's
 *    figures too; a dense model has no account (nothing new in its logs). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/train/moe_stats.h"
#include "models/llama.h"
#include "tests/harness.h"
#include "tests/moe_harness.h"

TestSuite(moe_stats);

/* ---- the account by hand ---- */

typedef struct hand_case {
    tri_moe_stats s[2];
    int rc[2];
} hand_case;

static int hand_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)size;
    hand_case *h = arg;
    tri_moe_stats *s = &h->s[rank];
    int rc = tri_moe_stats_init(s, 3, 4, NULL, 0); /* layers 0 and 2 sparse, 4 experts */
    tri_moe_stats_reset(s, 4);            /* 2 micro-batches x 2 replicas */
    for (int mb = 0; mb < 2 && !rc; mb++) {
        int32_t routed0[4] = {3 + rank, 1, 0, 4 - rank}, kept0[4] = {3, 1, 0, 3 - rank};
        int32_t routed2[4] = {2, 2, 2, 2}, kept2[4] = {2, 2, 2, 2};
        rc = tri_moe_stats_add(s, 0, routed0, kept0, 0.25f * (float)(rank + 1), 0.125f);
        if (!rc) rc = tri_moe_stats_add(s, 2, routed2, kept2, 0.5f, 0.0f);
    }
    if (!rc) rc = tri_moe_stats_reduce(s, world);
    h->rc[rank] = rc;
    return rc;
}

Test(moe_stats, account_by_hand_reduced_over_ranks)
{
    hand_case h;
    memset(&h, 0, sizeof h);
    cr_assert_eq(tri_run_thread_ranks(2, hand_rank, &h), TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < 2; r++) {
        const tri_moe_stats *s = &h.s[r];
        /* layer 0: routed per expert over 2 mb x ranks 0, 1: (3+4) x 2, 1 x 4, 0, (4+3) x 2 */
        static const int64_t want0[8] = {14, 4, 0, 14, 12, 4, 0, 10};
        cr_expect(memcmp(s->sums, want0, sizeof want0) == 0, "rank %d: layer 0's counts", r);
        int64_t routed, kept;
        tri_moe_stats_totals(s, 1, &routed, &kept);
        cr_expect_eq(routed, 0, "layer 1 is dense");
        tri_moe_stats_totals(s, 2, &routed, &kept);
        cr_expect(routed == 32 && kept == 32, "layer 2: %lld routed, %lld kept", (long long)routed, (long long)kept);
        cr_expect_eq(tri_moe_stats_load(s, 0), 14.0 * 4 / 32, "layer 0's load %g", tri_moe_stats_load(s, 0));
        cr_expect_eq(tri_moe_stats_load(s, 2), 1.0);
        tri_moe_summary m = tri_moe_stats_summary(s);
        cr_expect_eq(m.n_sparse, 2);
        cr_expect_eq(m.max_load, 14.0 * 4 / 32);
        cr_expect_eq(m.drop_frac, (32.0 - 26.0) / 64.0, "drop %g", m.drop_frac);
        /* aux: (0.25 + 0.5 + 0.5 + 0.5) x 2 mb = 3.5 over 4 micro-batches; z: 0.125 x 4 / 4 */
        cr_expect(fabs(m.aux - 3.5 / 4) <= 8 * 0x1p-33, "aux %.17g", m.aux);
        cr_expect(fabs(m.z - 0.125) <= 8 * 0x1p-33, "z %.17g", m.z);
        tri_moe_stats_free(&h.s[r]);
    }
    tri_moe_stats s;
    cr_expect_eq(tri_moe_stats_init(&s, 0, 4, NULL, 0), TRI_EINVAL);
    cr_expect_eq(tri_moe_stats_init(&s, 2, 0, NULL, 0), TRI_OK, "an empty account (dense)");
    cr_expect_eq(tri_moe_stats_summary(&s).n_sparse, 0);
    cr_expect_eq(tri_moe_stats_add(&s, 0, NULL, NULL, 0, 0), TRI_EINVAL, "an empty account takes nothing");
    tri_error_clear();
}

/* ---- through a chunk's backward, zero routers ---- */

#define TINY "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, " \
             "\"num_key_value_heads\": 2, \"num_hidden_layers\": %d, \"vocab_size\": 100, \"max_position_embeddings\": 16, " \
             "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"output_router_logits\": true, " \
             "\"router_aux_loss_coef\": 0.02, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": true}"

static void make_tiny(tri_model *m, int layers)
{
    char json[768];
    snprintf(json, sizeof json, TINY, layers);
    cr_assert_eq(tri_model_parse(m, json, "tiny-mixtral"), TRI_OK, "%s", tri_error_message());
}

typedef struct zero_case {
    double capacity_factor;
    int staged_left;
    tri_moe_stats s, out;
    int rc;
} zero_case;

enum { ZB = 2, ZT = 8, ZN = ZB * ZT };

static int zero_router_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)rank;
    (void)size;
    zero_case *zc = arg;
    tri_model m;
    make_tiny(&m, 2);
    tu_layout l = {.moe = {.aux_loss_coeff_set = true, .aux_loss_coeff = 0.3f, .z_loss_coeff = 0.1f,
                           .capacity_factor = zc->capacity_factor}};
    tu_moe_chunk mc;
    int rc = tu_moe_chunk_open(&mc, &m, ZB, ZT, &l, world);
    tri_chunk *chunk = mc.chunk;
    int layers = 0, E = 0;
    if (!rc) chunk->model.moe_shape(chunk->model.self, &layers, &E);
    if (!rc) rc = tri_moe_stats_init(&zc->s, layers, E, mc.dev, 2); /* one micro-batch of 2 sparse layers */
    tri_moe_stats_reset(&zc->s, 1);
    if (!rc) rc = tri_chunk_forward(chunk, 0, true, 1.0f / ZN);
    if (!rc) rc = tri_chunk_backward(chunk, 0); /* no account given: nothing counted */
    if (!rc) chunk->moe_stats = &zc->s;
    if (!rc) rc = tri_chunk_forward(chunk, 0, true, 1.0f / ZN);
    if (!rc) rc = tri_chunk_backward(chunk, 0);
    if (!rc) rc = tri_device_sync(mc.dev);
    if (!rc) rc = tri_moe_stats_collect(&zc->s);
    zc->staged_left = zc->s.n_staged;
    /* the result into a plain account (the staging is the device's memory) */
    if (!rc) rc = tri_moe_stats_init(&zc->out, layers, E, NULL, 0);
    if (!rc) {
        memcpy(zc->out.sums, zc->s.sums, (size_t)(layers * 2 * E + 2) * sizeof *zc->s.sums);
        zc->out.micro = zc->s.micro;
    }
    tri_moe_stats_free(&zc->s);
    tu_moe_chunk_close(&mc);
    tri_model_free(&m);
    zc->rc = rc;
    return rc;
}

Test(moe_stats, uniform_router_counts_in_closed_form)
{
    for (int c = 0; c < 2; c++) {
        zero_case zc = {.capacity_factor = c ? 1.0 : 0.0};
        cr_assert_eq(tri_run_thread_ranks(1, zero_router_rank, &zc), TRI_OK, "%s", tri_error_message());
        const tri_moe_stats *s = &zc.out;
        cr_assert_eq(s->E, 4);
        cr_assert_eq(s->n_layers, 2);
        cr_expect_eq(zc.staged_left, 0, "collected");
        int64_t keep = c ? (ZN * 2 + 3) / 4 : ZN; /* Megatron's ceil(N K / E x 1) */
        for (int l = 0; l < 2; l++) {
            const int64_t *row = s->sums + l * 8;
            int64_t want[8] = {ZN, ZN, 0, 0, keep, keep, 0, 0};
            cr_expect(memcmp(row, want, sizeof want) == 0, "capacity %d, layer %d: routed %lld %lld %lld %lld kept "
                      "%lld %lld", c, l, (long long)row[0], (long long)row[1], (long long)row[2], (long long)row[3],
                      (long long)row[4], (long long)row[5]);
            cr_expect_eq(tri_moe_stats_load(s, l), 2.0, "load E / K");
        }
        tri_moe_summary m = tri_moe_stats_summary(s);
        double want_aux = 2 * (double)0.3f, want_z = 2 * (double)0.1f * log(4.0) * log(4.0);
        cr_expect(fabs(m.aux - want_aux) <= 1e-6 * want_aux, "aux %.9g, want %.9g", m.aux, want_aux);
        cr_expect(fabs(m.z - want_z) <= 1e-6 * want_z, "z %.9g, want %.9g", m.z, want_z);
        cr_expect_eq(m.drop_frac, c ? 1.0 - (double)keep / ZN : 0.0, "drop %g", m.drop_frac);
        tri_moe_stats_free(&zc.out);
    }
}

/* ---- a trained model's account, in layouts ---- */

enum { B = 1, T = 8, GLOBAL = 8, STEPS = 3 };

static void run_layout(const tri_model *m, const tu_layout *l, tu_result *r, const int32_t *w)
{
    tu_layout lay = *l;
    lay.n_micro = GLOBAL / (B * (l->dp > 0 ? l->dp : 1));
    cr_assert_eq(tu_run_model(m, B, T, &lay, w, STEPS, r), TRI_OK, "%s", tri_error_message());
}

Test(moe_stats, layouts_log_one_ranks_figures, .timeout = 300)
{
    tri_model m;
    /* qwen3_moe: layer 1 dense by mlp_only_layers, layers 0, 2 sparse; top-2 of 4, a capacity so
     * some selections drop */
    const char *json = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"intermediate_size\": 64, "
                       "\"moe_intermediate_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                       "\"head_dim\": 16, \"num_hidden_layers\": 3, \"vocab_size\": 100, "
                       "\"max_position_embeddings\": 16, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
                       "\"mlp_only_layers\": [1], \"output_router_logits\": true, \"router_aux_loss_coef\": 0.01, "
                       "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true}";
    cr_assert_eq(tri_model_parse(&m, json, "tiny-qwen3-moe"), TRI_OK, "%s", tri_error_message());
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 71);
    tri_moe_run moe = {.capacity_factor = 1.0f};
    tu_result ref, got;
    run_layout(&m, &(tu_layout){.deterministic = true, .moe = moe}, &ref, w);
    cr_assert_eq(ref.moe_E, 4);
    cr_assert_eq(ref.moe_layers, 3);
    cr_expect_eq(ref.moe_micro, GLOBAL / B);
    for (int l = 0; l < 3; l++) {
        int64_t routed = 0, kept = 0;
        for (int e = 0; e < 4; e++) {
            routed += ref.moe_sums[l * 8 + e];
            kept += ref.moe_sums[l * 8 + 4 + e];
            cr_expect_leq(ref.moe_sums[l * 8 + 4 + e], (int64_t)GLOBAL / B * ((B * T * 2 + 3) / 4),
                          "layer %d expert %d keeps at most its capacity per micro-batch", l, e);
        }
        cr_expect_eq(routed, l == 1 ? 0 : (int64_t)GLOBAL * T * 2, "layer %d routed %lld", l, (long long)routed);
        cr_expect_leq(kept, routed);
    }
    for (int s = 0; s < STEPS; s++) {
        cr_expect_eq(ref.moe[s].n_sparse, 2);
        cr_expect(ref.moe[s].aux > 0 && ref.moe[s].max_load >= 1.0 && ref.moe[s].max_load <= 2.0,
                  "step %d: aux %g load %g", s + 1, ref.moe[s].aux, ref.moe[s].max_load);
        cr_log_info("step %d: aux %.6f load %.3f drop %.3f", s + 1, ref.moe[s].aux, ref.moe[s].max_load,
                    ref.moe[s].drop_frac);
    }
    static const struct { const char *name; tu_layout l; } layouts[] = {
        {"pp2", {.pp = 2}},
        {"dp2 zero1", {.dp = 2, .zero = 1}},
        {"pp2 dp2 recompute full", {.pp = 2, .dp = 2, .recompute = TRI_RECOMPUTE_FULL}},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        tu_layout l = layouts[k].l;
        l.deterministic = true;
        l.moe = moe;
        run_layout(&m, &l, &got, w);
        cr_expect_eq(got.moe_micro, ref.moe_micro, "%s", layouts[k].name);
        cr_expect(memcmp(got.moe_sums, ref.moe_sums, (3 * 8 + 2) * sizeof *ref.moe_sums) == 0,
                  "%s: the gradient pass's account differs from one rank's", layouts[k].name);
        cr_expect(memcmp(got.moe, ref.moe, STEPS * sizeof *ref.moe) == 0, "%s: a step's figures differ (last aux "
                  "%.17g vs %.17g)", layouts[k].name, got.moe[STEPS - 1].aux, ref.moe[STEPS - 1].aux);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

Test(moe_stats, dense_model_has_no_account, .timeout = 120)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows(2 * 4, 8, 100, 3);
    tu_result r;
    cr_assert_eq(tu_run_gpt(&cfg, 1, 8, &(tu_layout){.n_micro = 4}, w, 1, &r), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(r.moe_E, 0);
    cr_expect_eq(r.moe[0].n_sparse, 0);
    tu_result_free(&r);
    free(w);
}
