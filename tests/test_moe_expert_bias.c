/* tests/test_moe_expert_bias.c - DeepSeek-V3's auxiliary-loss-free expert bias
 * (--moe-router-enable-expert-bias, --moe-router-bias-update-rate; models/llama_moe.c, the trainer's
 * after_update hook, the bias as a model buffer in the state shards):
 *  - the update against a hand computation over each step: bias_e += rate x sign(sum_i c_i - E c_e)
 *    from the step's kept counts summed over micro-batches and replicas (the trainer's reduced
 *    account), the same float additions, so bit for bit;
 *  - the bias changes the selection only: at step 1 (bias 0) the run is the bias-free run bit for
 *    bit (loss and gradients); afterwards the kept counts and the weights differ; at block level, a
 *    router of zeros (every score 1/E, ties to the lower index) picks experts 0, 1 without bias and
 *    2, 3 with the bias the update gives, and its output and every gradient equal the bias-free
 *    block's with experts 0, 1 and 2, 3 swapped (the weights use the unbiased scores);
 *  - pp 2, dp 2 (ZeRO 1), pp 2 x dp 2 (ZeRO 1, full recomputation) and dp 2 x ep 2 (expert
 *    parallelism, ZeRO 0) equal one rank bit for bit in deterministic mode, the bias included;
 *  - checkpoints: a resume (3 steps, save, 3 more) equals the uninterrupted run bit for bit (losses,
 *    the saved bias and weights), also resumed at pp 2 x dp 2; `ckpt reshard`'s path (load, save at
 *    once in another layout) carries the bias; a checkpoint saved without the bias resumes with it
 *    (from zero); a checkpoint with the bias is refused by a run without the flag. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "engine/core/status.h"
#include "models/llama.h"
#include "tests/ckpt_harness.h"
#include "tests/harness.h"
#include "tests/moe_harness.h"

#define TINY "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, " \
             "\"num_key_value_heads\": 2, \"num_hidden_layers\": %d, \"vocab_size\": 100, \"max_position_embeddings\": 16, " \
             "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"output_router_logits\": true, " \
             "\"router_aux_loss_coef\": 0.02, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": true}"

enum { LAYERS = 4, E = 4, B = 1, T = 8, GLOBAL = 8, STEPS = 4 };

static const float RATE = 0.01f;

static void make_tiny(tri_model *m, int layers)
{
    char json[768];
    snprintf(json, sizeof json, TINY, layers);
    cr_assert_eq(tri_model_parse(m, json, "tiny-mixtral"), TRI_OK, "%s", tri_error_message());
}

static void run_layout(const tri_model *m, const tu_layout *l, tu_result *r, const int32_t *w)
{
    tu_layout lay = *l;
    lay.n_micro = GLOBAL / (B * (l->dp > 0 ? l->dp : 1));
    cr_assert_eq(tu_run_model(m, B, T, &lay, w, STEPS, r), TRI_OK, "%s", tri_error_message());
}

TestSuite(expert_bias);

Test(expert_bias, update_by_hand_selection_and_layouts_bit_identical, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, LAYERS);
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, 100, 67);
    tri_moe_run on = {.expert_bias = true, .bias_update_rate = RATE};
    static tu_result ref, off, got;
    run_layout(&m, &(tu_layout){.deterministic = true, .moe = on}, &ref, w);
    cr_assert_eq(ref.moe_E, E);
    /* the update by hand, step after step, from each step's reduced kept counts */
    float want[TU_MAX_BIAS] = {0};
    int moved = 0, balanced = 0;
    for (int s = 0; s < STEPS; s++) {
        for (int l = 0; l < LAYERS; l++) {
            const int64_t *c = ref.moe_kept[s] + l * E;
            int64_t sum = 0;
            for (int e = 0; e < E; e++)
                sum += c[e];
            cr_expect_eq(sum, (int64_t)GLOBAL * T * 2, "step %d layer %d: dropless, N K selections kept", s + 1, l);
            for (int e = 0; e < E; e++) {
                int64_t off_e = sum - E * c[e];
                want[l * E + e] += off_e > 0 ? RATE : off_e < 0 ? -RATE : 0.0f;
                moved += off_e != 0;
                balanced += off_e == 0;
            }
        }
        cr_expect(memcmp(want, ref.moe_bias[s], LAYERS * E * sizeof *want) == 0,
                  "step %d: the bias is not the hand update (layer 0: %g %g %g %g, want %g %g %g %g)", s + 1,
                  ref.moe_bias[s][0], ref.moe_bias[s][1], ref.moe_bias[s][2], ref.moe_bias[s][3], want[0], want[1],
                  want[2], want[3]);
    }
    cr_expect_gt(moved, 0, "some expert was off its mean load");
    cr_log_info("bias update: %d moves, %d at the mean; layer 0 after %d steps: %g %g %g %g", moved, balanced, STEPS,
                want[0], want[1], want[2], want[3]);

    /* the bias changes the selection only: step 1 (bias 0) is the bias-free run's, later ones differ */
    run_layout(&m, &(tu_layout){.deterministic = true}, &off, w);
    cr_expect(off.grad_loss == ref.grad_loss && off.losses[0] == ref.losses[0] && off.norms[0] == ref.norms[0],
              "step 1 (bias 0) differs from the bias-free run");
    for (int i = 0; i < ref.n; i++)
        cr_expect(memcmp(off.grads[i], ref.grads[i], (size_t)ref.numel[i] * sizeof(float)) == 0,
                  "the gradient pass's %s differs with a zero bias", ref.names[i]);
    cr_expect(memcmp(off.moe_kept[0], ref.moe_kept[0], sizeof off.moe_kept[0]) == 0, "step 1's selections differ");
    bool selection = false, weights = false;
    for (int s = 1; s < STEPS; s++)
        selection |= memcmp(off.moe_kept[s], ref.moe_kept[s], sizeof off.moe_kept[s]) != 0;
    for (int i = 0; i < ref.n; i++)
        weights |= memcmp(off.weights[i], ref.weights[i], (size_t)ref.numel[i] * sizeof(float)) != 0;
    cr_expect(selection, "the bias changed no selection after step 1");
    cr_expect(weights, "the bias changed no weight");
    for (int e = 0; e < LAYERS * E; e++)
        cr_expect_eq(off.moe_bias[STEPS - 1][e], 0.0f, "a run without the flag has no bias");
    tu_result_free(&off);

    static const struct { const char *name; tu_layout l; } layouts[] = {
        {"pp2", {.pp = 2}},
        {"dp2 zero1", {.dp = 2, .zero = 1}},
        {"pp2 dp2 zero1 recompute full", {.pp = 2, .dp = 2, .zero = 1, .recompute = TRI_RECOMPUTE_FULL}},
        {"dp2 ep2", {.dp = 2, .ep = 2}},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        tu_layout l = layouts[k].l;
        l.deterministic = true;
        l.moe = on;
        run_layout(&m, &l, &got, w);
        const char *name = layouts[k].name;
        cr_expect(memcmp(ref.losses, got.losses, sizeof ref.losses) == 0, "%s: losses differ: %.17g vs %.17g", name,
                  ref.losses[STEPS - 1], got.losses[STEPS - 1]);
        cr_expect(memcmp(ref.moe_bias, got.moe_bias, sizeof ref.moe_bias) == 0, "%s: the expert bias differs", name);
        cr_expect(memcmp(ref.moe_kept, got.moe_kept, sizeof ref.moe_kept) == 0, "%s: the kept counts differ", name);
        for (int i = 0; i < ref.n; i++)
            cr_expect(memcmp(ref.weights[i], got.weights[i], (size_t)(strcmp(ref.names[i], "model.embed_tokens.weight")
                                                                       ? ref.numel[i] : 100 * ref.cols[i]) *
                                                                 sizeof(float)) == 0,
                      "%s: final %s differs", name, ref.names[i]);
        tu_result_free(&got);
    }
    tu_result_free(&ref);
    free(w);
    tri_model_free(&m);
}

/* ---- block level: a zero router, the bias moves every token to the other two experts ---- */

enum { ZN = 16 };

typedef struct block_run {
    bool bias;          /* the bias the update gives (from the zero router's counts) */
    bool swap;          /* experts 0, 1 exchanged with 2, 3 (their weights) before the pass */
    float *y;           /* the block's output, (N, C) */
    float *grads[8];    /* the gradients: router, then per expert gate|up and down */
    int32_t idx[ZN * 2];
    float wsel[ZN * 2];
    int rc;
} block_run;

/* One forward and backward of sparse layer 0 of a 1-layer tiny Mixtral chunk (router zeroed). */
static int block_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)rank;
    (void)size;
    block_run *br = arg;
    tri_model m;
    make_tiny(&m, 1);
    tu_layout l = {.moe = {.expert_bias = br->bias, .bias_update_rate = RATE}};
    tu_moe_chunk mc;
    int rc = tu_moe_chunk_open(&mc, &m, 2, 8, &l, world); /* 2 x 8 = ZN tokens, the router zeroed */
    tri_device *dev = mc.dev;
    tri_chunk *chunk = mc.chunk;
    tri_llama *ll = mc.ll;
    tri_llama_block_weights *bw = rc ? NULL : &ll->w.h[0];
    int64_t C = 64, I = 64;
    if (!rc && br->swap) { /* exchange experts e and e + 2: gate|up (2I, C) and down (C, I) blocks */
        for (int part = 0; part < 2 && !rc; part++) {
            tri_tensor x = part ? bw->moe.down_w : bw->moe.gate_up_w;
            int64_t per = part ? C * I : 2 * I * C;
            float *h = malloc((size_t)(E * per) * sizeof *h), *s = malloc((size_t)(E * per) * sizeof *s);
            rc = tri_device_copy_to_host(dev, h, x);
            for (int e = 0; e < E; e++)
                memcpy(s + e * per, h + ((e + 2) % E) * per, (size_t)per * sizeof *s);
            if (!rc) rc = tri_device_copy_from_host(dev, x, s);
            free(h);
            free(s);
        }
    }
    if (!rc && br->bias) { /* the update from the zero router's step: every token at experts 0 and 1 */
        tri_moe_stats acc;
        rc = tri_moe_stats_init(&acc, 1, E, NULL, 0);
        int32_t routed[E] = {ZN, ZN, 0, 0};
        if (!rc) rc = tri_moe_stats_add(&acc, 0, routed, routed, 0.0f, 0.0f);
        if (!rc) rc = chunk->model.after_update(chunk->model.self, &acc);
        tri_moe_stats_free(&acc);
    }
    if (!rc) rc = tri_chunk_zero_grads(chunk);
    if (!rc) rc = tri_chunk_forward(chunk, 0, true, 1.0f / ZN);
    if (!rc) rc = tri_chunk_backward(chunk, 0);
    tri_moe_acts *a = &ll->slots[0].blocks[0].moe;
    br->y = malloc((size_t)(ZN * C) * sizeof *br->y);
    if (!rc) rc = tri_device_copy_to_host(dev, br->y, ll->slots[0].blocks[0].res3);
    if (!rc) rc = tri_device_copy_to_host(dev, br->idx, a->expert_idx);
    if (!rc) rc = tri_device_copy_to_host(dev, br->wsel, a->expert_w);
    tri_llama_block_weights *g = &ll->g.h[0];
    tri_tensor gt[3] = {g->moe.router_w, g->moe.gate_up_w, g->moe.down_w};
    for (int k = 0; k < 3 && !rc; k++) {
        br->grads[k] = malloc((size_t)tri_tensor_numel(gt[k]) * sizeof(float));
        rc = tri_device_copy_to_host(dev, br->grads[k], gt[k]);
    }
    tu_moe_chunk_close(&mc);
    tri_model_free(&m);
    br->rc = rc;
    return rc;
}

Test(expert_bias, zero_router_bias_moves_the_selection_and_nothing_else, .timeout = 120)
{
    block_run plain = {.bias = false, .swap = true}, biased = {.bias = true};
    cr_assert_eq(tri_run_thread_ranks(1, block_rank, &plain), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_run_thread_ranks(1, block_rank, &biased), TRI_OK, "%s", tri_error_message());
    for (int n = 0; n < ZN; n++) {
        cr_expect(plain.idx[2 * n] == 0 && plain.idx[2 * n + 1] == 1, "token %d: without bias experts %d %d", n,
                  plain.idx[2 * n], plain.idx[2 * n + 1]);
        cr_expect(biased.idx[2 * n] == 2 && biased.idx[2 * n + 1] == 3, "token %d: with the bias experts %d %d", n,
                  biased.idx[2 * n], biased.idx[2 * n + 1]);
        cr_expect(plain.wsel[2 * n] == 0.5f && biased.wsel[2 * n] == 0.5f && biased.wsel[2 * n + 1] == 0.5f,
                  "token %d: the weights are the unbiased scores renormalised", n);
    }
    /* the biased block on experts 2, 3 is the plain block with those experts' weights in slots 0, 1 */
    cr_expect(memcmp(plain.y, biased.y, ZN * 64 * sizeof(float)) == 0, "the outputs differ");
    int64_t C = 64, I = 64, per[3] = {C, 2 * I * C, C * I};
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++) {
            int src = k == 0 ? (e + 2) % E : e; /* router rows follow the experts; the plain run's expert
                                                   slot e holds expert (e + 2) % E's weights */
            const float *a = plain.grads[k] + (k == 0 ? src : e) * per[k];
            const float *b = biased.grads[k] + (k == 0 ? e : (e + 2) % E) * per[k];
            int64_t diff = 0;
            for (int64_t i = 0; i < per[k]; i++)
                diff += a[i] != b[i];
            cr_expect_eq(diff, 0, "gradient %d of expert %d: %lld elements differ", k, e, (long long)diff);
        }
    for (int k = 0; k < 3; k++) {
        free(plain.grads[k]);
        free(biased.grads[k]);
    }
    free(plain.y);
    free(biased.y);
}

/* ---- checkpoints ---- */

static tu_ckpt_run bias_run(const tri_model *m, const int32_t *w, tu_layout l, bool bias, int64_t until,
                            const char *load, const char *save)
{
    l.deterministic = true;
    l.moe = (tri_moe_run){.expert_bias = bias, .bias_update_rate = RATE};
    return (tu_ckpt_run){.model = m, .B = B, .T = T, .layout = l, .global_batch = GLOBAL, .windows = w,
                         .until = until, .load = load, .save_dir = save};
}

static float *saved(const char *dir, const char *name)
{
    int64_t n = 0;
    float *x = tu_ckpt_tensor(dir, TRI_CKPT_MODEL, -1, NULL, name, &n);
    cr_assert(x, "%s: %s", name, tri_error_message());
    return x;
}

static void expect_same_tensors(const char *a, const char *b, const char *what)
{
    static const char *const names[] = {"model.layers.0.mlp.gate.e_score_correction_bias",
                                        "model.layers.1.mlp.gate.e_score_correction_bias",
                                        "model.layers.3.mlp.gate.e_score_correction_bias",
                                        "model.layers.2.block_sparse_moe.gate.weight",
                                        "model.layers.3.block_sparse_moe.experts.1.w2.weight",
                                        "model.layers.1.block_sparse_moe.experts.3.w1.weight"};
    static const int64_t numel[] = {E, E, E, E * 64, 64 * 64, 64 * 64};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        float *x = saved(a, names[k]), *y = saved(b, names[k]);
        cr_expect(memcmp(x, y, (size_t)numel[k] * sizeof *x) == 0, "%s: %s differs", what, names[k]);
        free(x);
        free(y);
    }
}

Test(expert_bias, resume_reshard_and_old_checkpoints, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, LAYERS);
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, 100, 73);
    char *root = tu_ckpt_tmpdir("expert-bias");
    char full[4200], part[4200], moved[4200], resh[4200], old[4200], old2[4200];
    snprintf(full, sizeof full, "%s/full", root);
    snprintf(part, sizeof part, "%s/part", root);
    snprintf(moved, sizeof moved, "%s/moved", root);
    snprintf(resh, sizeof resh, "%s/reshard", root);
    snprintf(old, sizeof old, "%s/old", root);
    snprintf(old2, sizeof old2, "%s/old2", root);
    tu_layout one = {0}, pp2dp2 = {.pp = 2, .dp = 2, .zero = 1};

    tu_ckpt_run a = bias_run(&m, w, one, true, 6, NULL, full);
    cr_assert_eq(tu_ckpt_train(&a), TRI_OK, "%s", tri_error_message());
    tu_ckpt_run b1 = bias_run(&m, w, one, true, 3, NULL, part);
    cr_assert_eq(tu_ckpt_train(&b1), TRI_OK, "%s", tri_error_message());
    float *bias3 = saved(part, "model.layers.0.mlp.gate.e_score_correction_bias");
    bool nonzero = false;
    for (int e = 0; e < E; e++)
        nonzero |= bias3[e] != 0.0f;
    cr_expect(nonzero, "the saved bias after 3 steps is zero");
    free(bias3);
    tu_ckpt_run b2 = bias_run(&m, w, one, true, 6, part, part);
    cr_assert_eq(tu_ckpt_train(&b2), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(b2.start, 3);
    cr_expect(memcmp(b2.losses, a.losses + 3, 3 * sizeof *a.losses) == 0, "resumed losses differ: %.17g vs %.17g",
              b2.losses[2], a.losses[5]);
    expect_same_tensors(full, part, "resume");

    /* resumed in another layout (deterministic: the same bits) */
    tu_ckpt_run c1 = bias_run(&m, w, one, true, 3, NULL, moved);
    cr_assert_eq(tu_ckpt_train(&c1), TRI_OK, "%s", tri_error_message());
    tu_ckpt_run c2 = bias_run(&m, w, pp2dp2, true, 6, moved, moved);
    cr_assert_eq(tu_ckpt_train(&c2), TRI_OK, "%s", tri_error_message());
    cr_expect(memcmp(c2.losses, a.losses + 3, 3 * sizeof *a.losses) == 0, "pp2 dp2 resume: losses differ");
    expect_same_tensors(full, moved, "resume at pp2 dp2");

    /* reshard: load and save at once at pp 2 (ckpt reshard's path) */
    tu_ckpt_run r = bias_run(&m, w, (tu_layout){.pp = 2}, true, 6, full, resh);
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s", tri_error_message());
    expect_same_tensors(full, resh, "reshard to pp2");

    /* a checkpoint without the bias resumes with the flag (the bias from zero: the first resumed step is
     * the bias-free run's) */
    tu_ckpt_run o1 = bias_run(&m, w, one, false, 3, NULL, old);
    cr_assert_eq(tu_ckpt_train(&o1), TRI_OK, "%s", tri_error_message());
    int64_t n = 0;
    cr_expect_null(tu_ckpt_tensor(old, TRI_CKPT_MODEL, -1, NULL, "model.layers.0.mlp.gate.e_score_correction_bias", &n),
                   "a run without the flag saved a bias");
    tri_error_clear();
    tu_ckpt_run o2 = bias_run(&m, w, one, false, 4, old, NULL), o3 = bias_run(&m, w, one, true, 4, old, old2);
    cr_assert_eq(tu_ckpt_train(&o2), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_ckpt_train(&o3), TRI_OK, "%s", tri_error_message());
    cr_expect(o2.losses[0] == o3.losses[0], "the first resumed step with a zero bias differs (%.17g vs %.17g)",
              o2.losses[0], o3.losses[0]);
    float *bias4 = saved(old2, "model.layers.0.mlp.gate.e_score_correction_bias");
    for (int e = 0; e < E; e++)
        cr_expect(bias4[e] == RATE || bias4[e] == -RATE || bias4[e] == 0.0f, "one update from zero: %g", bias4[e]);
    free(bias4);

    /* a checkpoint with the bias, resumed without the flag: refused, naming the flag */
    tu_ckpt_run no = bias_run(&m, w, one, false, 7, full, NULL);
    cr_expect_neq(tu_ckpt_train(&no), TRI_OK, "a checkpoint with the bias resumed without the flag");
    cr_expect(strstr(tri_error_message(), "--moe-router-enable-expert-bias") != NULL, "message: %s",
              tri_error_message());
    tri_error_clear();

    tri_fs_remove_tree(root);
    free(root);
    free(w);
    tri_model_free(&m);
}

/* The bias under expert parallelism (dp 2 x ep 2; each ep rank saves its experts in its own file, the
 * bias is replicated): the step's kept counts are the whole batch's (every rank routes its tokens over
 * all E experts and the trainer's account sums them over the stage's dp ranks, i.e. over ep and edp),
 * so after 3 steps the saved bias is one rank's bit for bit; an ep 2 checkpoint resumes at ep 2 and
 * on one rank to the uninterrupted run's losses, bias and weights; ckpt reshard's path (load, save at
 * once) carries the bias from one rank to ep 2 and from ep 2 to one rank. Deterministic mode: bits. */
Test(expert_bias, ep2_resume_and_reshard, .timeout = 300)
{
    tri_model m;
    make_tiny(&m, LAYERS);
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, 100, 79);
    char *root = tu_ckpt_tmpdir("expert-bias-ep");
    char full[4200], part[4200], ep_a[4200], ep_b[4200], to_ep[4200], from_ep[4200];
    snprintf(full, sizeof full, "%s/full", root);
    snprintf(part, sizeof part, "%s/part", root);
    snprintf(ep_a, sizeof ep_a, "%s/ep_a", root);
    snprintf(ep_b, sizeof ep_b, "%s/ep_b", root);
    snprintf(to_ep, sizeof to_ep, "%s/to_ep", root);
    snprintf(from_ep, sizeof from_ep, "%s/from_ep", root);
    tu_layout one = {0}, ep2 = {.dp = 2, .ep = 2};

    tu_ckpt_run a = bias_run(&m, w, one, true, 6, NULL, full);
    cr_assert_eq(tu_ckpt_train(&a), TRI_OK, "%s", tri_error_message());
    tu_ckpt_run p = bias_run(&m, w, one, true, 3, NULL, part);
    cr_assert_eq(tu_ckpt_train(&p), TRI_OK, "%s", tri_error_message());
    /* 3 steps at dp 2 ep 2 (twice: one copy resumes at ep 2, the other on one rank) */
    tu_ckpt_run e1 = bias_run(&m, w, ep2, true, 3, NULL, ep_a), e2 = bias_run(&m, w, ep2, true, 3, NULL, ep_b);
    cr_assert_eq(tu_ckpt_train(&e1), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_ckpt_train(&e2), TRI_OK, "%s", tri_error_message());
    cr_expect(memcmp(e1.losses, a.losses, 3 * sizeof *a.losses) == 0, "ep 2: losses differ from one rank's");
    float *b1 = saved(part, "model.layers.0.mlp.gate.e_score_correction_bias");
    float *b2 = saved(ep_a, "model.layers.0.mlp.gate.e_score_correction_bias");
    bool nonzero = false;
    for (int e = 0; e < E; e++)
        nonzero |= b1[e] != 0.0f;
    cr_expect(nonzero, "the bias after 3 steps is zero: the case does not test the update");
    cr_expect(memcmp(b1, b2, E * sizeof *b1) == 0, "ep 2 bias after 3 steps: %g %g %g %g, one rank's %g %g %g %g",
              b2[0], b2[1], b2[2], b2[3], b1[0], b1[1], b1[2], b1[3]);
    free(b1);
    free(b2);
    expect_same_tensors(part, ep_a, "3 steps at dp 2 ep 2");

    /* resumed at ep 2 and on one rank */
    tu_ckpt_run r1 = bias_run(&m, w, ep2, true, 6, ep_a, ep_a), r2 = bias_run(&m, w, one, true, 6, ep_b, ep_b);
    cr_assert_eq(tu_ckpt_train(&r1), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_ckpt_train(&r2), TRI_OK, "%s", tri_error_message());
    cr_expect(r1.start == 3 && r2.start == 3);
    cr_expect(memcmp(r1.losses, a.losses + 3, 3 * sizeof *a.losses) == 0, "ep 2 resume at ep 2: losses differ");
    cr_expect(memcmp(r2.losses, a.losses + 3, 3 * sizeof *a.losses) == 0, "ep 2 resume on one rank: losses differ");
    expect_same_tensors(full, ep_a, "ep 2 resumed at ep 2");
    expect_same_tensors(full, ep_b, "ep 2 resumed on one rank");

    /* reshard's path both ways */
    tu_ckpt_run s1 = bias_run(&m, w, ep2, true, 6, full, to_ep), s2 = bias_run(&m, w, one, true, 6, ep_a, from_ep);
    cr_assert_eq(tu_ckpt_train(&s1), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_ckpt_train(&s2), TRI_OK, "%s", tri_error_message());
    expect_same_tensors(full, to_ep, "reshard one rank -> ep 2");
    expect_same_tensors(full, from_ep, "reshard ep 2 -> one rank");

    tri_fs_remove_tree(root);
    free(root);
    free(w);
    tri_model_free(&m);
}
