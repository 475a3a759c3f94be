/* tests/test_deterministic.c - deterministic mode: the same bits in every layout.
 *
 * With --deterministic every pass's gradients are converted to fixed point and summed as integers
 * (engine/train/zero.h), the gradient norm is an exact integer sum of squares and the loss a sum of
 * fixed-point integers, so the order and grouping of sums no longer matter. A GPT trains 4 AdamW
 * steps on a global batch of 8 sequences (micro-batches of 1) in many layouts that differ in
 * pipeline size and schedule, data-parallel size, ZeRO stage and micro-batch count; the losses and
 * the final weights must be bit-identical to the one-rank run's, and a repeated run identical to
 * itself; the deterministic run stays within 1e-5 of the ordinary one. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "tests/harness.h"

enum { B = 1, T = 8, GLOBAL = 8, STEPS = 4 };

static tri_gpt_config config(void)
{
    tri_gpt_config c = tu_tiny_config();
    c.n_layer = 8;
    return c;
}

static void run(const tu_layout *l, tu_result *r, const int32_t *w)
{
    tri_gpt_config cfg = config();
    tu_layout lay = *l;
    lay.n_micro = GLOBAL / (B * (l->dp > 0 ? l->dp : 1));
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &lay, w, STEPS, r), TRI_OK, "%s", tri_error_message());
}

static void expect_same(const tu_result *a, const tu_result *b, const char *name)
{
    cr_expect(memcmp(a->losses, b->losses, sizeof a->losses) == 0, "%s: losses differ: %.17g vs %.17g", name,
              a->losses[STEPS - 1], b->losses[STEPS - 1]);
    cr_expect(memcmp(a->norms, b->norms, sizeof a->norms) == 0, "%s: gradient norms differ: %.17g vs %.17g", name,
              a->norms[0], b->norms[0]);
    for (int i = 0; i < a->n; i++)
        cr_expect(memcmp(a->weights[i], b->weights[i], (size_t)a->numel[i] * sizeof(float)) == 0,
                  "%s: final %s differs (relative %.2g)", name, a->names[i],
                  tu_tensor_rel(a->weights[i], b->weights[i], a->numel[i]));
}

Test(deterministic, every_layout_trains_the_same_bits, .timeout = 600)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, config().vocab_size, 31);
    tu_layout base = {.tp = 1, .pp = 1, .dp = 1, .deterministic = true};
    struct { const char *name; tu_layout l; } layouts[] = {
        {"pp2 1f1b", {.tp = 1, .pp = 2, .dp = 1, .deterministic = true}},
        {"pp2 gpipe", {.tp = 1, .pp = 2, .dp = 1, .schedule = "gpipe", .deterministic = true}},
        {"pp2 interleaved", {.tp = 1, .pp = 2, .dp = 1, .schedule = "interleaved", .layers_per_virtual_stage = 2,
                             .deterministic = true}},
        {"dp2 zero0", {.tp = 1, .pp = 1, .dp = 2, .zero = 0, .deterministic = true}},
        {"dp2 zero1", {.tp = 1, .pp = 1, .dp = 2, .zero = 1, .deterministic = true}},
        {"dp4 zero2", {.tp = 1, .pp = 1, .dp = 4, .zero = 2, .deterministic = true}},
        {"dp8 zero3", {.tp = 1, .pp = 1, .dp = 8, .zero = 3, .deterministic = true}},
        {"pp2 dp2 zero3", {.tp = 1, .pp = 2, .dp = 2, .zero = 3, .deterministic = true}},
        {"pp4 dp2 zero1", {.tp = 1, .pp = 4, .dp = 2, .zero = 1, .deterministic = true}},
        {"dp2 zero0 overlap", {.tp = 1, .pp = 1, .dp = 2, .zero = 0, .deterministic = true, .overlap = true}},
        {"pp2 dp2 zero2 overlap", {.tp = 1, .pp = 2, .dp = 2, .zero = 2, .deterministic = true, .overlap = true}},
        {"dp4 zero3 overlap", {.tp = 1, .pp = 1, .dp = 4, .zero = 3, .deterministic = true, .overlap = true}},
    };
    tu_result ref, again, got;
    run(&base, &ref, w);
    run(&base, &again, w);
    expect_same(&ref, &again, "the same layout run twice");
    tu_result_free(&again);
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
        run(&layouts[k].l, &got, w);
        expect_same(&ref, &got, layouts[k].name);
        tu_result_free(&got);
    }
    /* close to the ordinary (non-deterministic) run */
    tu_layout plain = base;
    plain.deterministic = false;
    run(&plain, &got, w);
    double worst = 0.0;
    for (int s = 0; s < STEPS; s++)
        worst = fmax(worst, fabs(got.losses[s] - ref.losses[s]) / got.losses[s]);
    cr_expect_lt(worst, 1e-5, "deterministic mode moves the loss by %g relative", worst);
    cr_log_info("%zu layouts (pp 1-4 with GPipe/1F1B/interleaved, dp 1-8, ZeRO 0-3, 1-8 micro-batches, with and without overlap) and a "
                "repeat: losses, gradient norms and weights bit-identical over %d steps; vs the ordinary mode the "
                "loss differs by at most %.2g relative", sizeof layouts / sizeof *layouts + 1, STEPS, worst);
    tu_result_free(&got);
    tu_result_free(&ref);
    free(w);
}

Test(deterministic, with_tensor_parallelism, .timeout = 300)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, config().vocab_size, 37);
    tu_layout base = {.tp = 2, .pp = 1, .dp = 1, .deterministic = true};
    tu_layout other = {.tp = 2, .pp = 2, .dp = 2, .zero = 2, .deterministic = true};
    tu_result a, b;
    run(&base, &a, w);
    run(&other, &b, w);
    expect_same(&a, &b, "tp2 vs tp2 pp2 dp2 zero2");
    tu_result_free(&a);
    tu_result_free(&b);
    free(w);
}

/* LARS and LAMB scale each tensor by a trust ratio of whole-tensor norms (engine/train/trust_ratio.h):
 * in deterministic mode those norms are exact fixed-point sums however ZeRO and the pipeline cut the
 * tensors, so the runs are bit-identical across layouts as AdamW's are; SGD with momentum too. A
 * test whose norms were per piece (or per rank) fails here: ZeRO cuts tensors differently at dp 2, 4
 * and 8. The optimizer must also move the weights away from AdamW's (a run that silently fell back
 * to AdamW would pass the equalities). */
Test(deterministic, sgd_lars_lamb_every_layout, .timeout = 600)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, config().vocab_size, 41);
    struct { const char *name; tu_layout l; } layouts[] = {
        {"pp2 1f1b", {.tp = 1, .pp = 2, .dp = 1, .deterministic = true}},
        {"dp2 zero0", {.tp = 1, .pp = 1, .dp = 2, .zero = 0, .deterministic = true}},
        {"dp4 zero1", {.tp = 1, .pp = 1, .dp = 4, .zero = 1, .deterministic = true}},
        {"dp8 zero3", {.tp = 1, .pp = 1, .dp = 8, .zero = 3, .deterministic = true}},
        {"pp2 dp2 zero2 overlap", {.tp = 1, .pp = 2, .dp = 2, .zero = 2, .deterministic = true, .overlap = true}},
        {"pp2 interleaved dp2 zero1", {.tp = 1, .pp = 2, .dp = 2, .zero = 1, .schedule = "interleaved",
                                       .layers_per_virtual_stage = 2, .deterministic = true}},
    };
    const char *names[] = {"adam", "sgd", "lars", "lamb"};
    tu_result adam;
    tu_layout base = {.tp = 1, .pp = 1, .dp = 1, .deterministic = true};
    run(&base, &adam, w);
    for (int opt = 1; opt <= 3; opt++) {
        tu_result ref, got;
        base.optimizer = opt;
        run(&base, &ref, w);
        bool moved = false;
        for (int i = 0; i < ref.n && !moved; i++)
            moved = memcmp(ref.weights[i], adam.weights[i], (size_t)ref.numel[i] * sizeof(float)) != 0;
        cr_expect(moved, "%s: the weights are AdamW's", names[opt]);
        for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
            tu_layout l = layouts[k].l;
            l.optimizer = opt;
            char what[96];
            snprintf(what, sizeof what, "%s %s", names[opt], layouts[k].name);
            run(&l, &got, w);
            expect_same(&ref, &got, what);
            tu_result_free(&got);
        }
        tu_result_free(&ref);
    }
    tu_result_free(&adam);
    cr_log_info("sgd, lars, lamb: %zu layouts (pp 2, dp 2-8, ZeRO 0-3, interleaved, overlap) bit-identical to one rank "
                "over %d steps", sizeof layouts / sizeof *layouts, STEPS);
    free(w);
}

Test(deterministic, lars_lamb_with_tensor_parallelism, .timeout = 300)
{
    int32_t *w = tu_make_windows((int64_t)STEPS * GLOBAL, T, config().vocab_size, 43);
    for (int opt = 2; opt <= 3; opt++) {
        tu_layout base = {.tp = 2, .pp = 1, .dp = 1, .deterministic = true, .optimizer = opt};
        tu_layout other = {.tp = 2, .pp = 2, .dp = 2, .zero = 2, .deterministic = true, .optimizer = opt};
        tu_result a, b;
        run(&base, &a, w);
        run(&other, &b, w);
        expect_same(&a, &b, opt == 2 ? "lars tp2 vs tp2 pp2 dp2 zero2" : "lamb tp2 vs tp2 pp2 dp2 zero2");
        tu_result_free(&a);
        tu_result_free(&b);
    }
    free(w);
}
