/* tests/test_checkpoint.c - saving and resuming in the same and in other layouts, on thread ranks.
 *
 * A small GPT (4 layers, n_embd 48, vocab 100) trains 20 AdamW steps of a global batch of 8 at
 * tp 2 x pp 2 x dp 2, ZeRO 1, saving at iterations 10 and 20: the uninterrupted run. Resumed from
 * iteration 10 in the same layout, the next 10 losses and the final weights and Adam moments are
 * bit-identical to it. Resumed at (tp, pp, dp) = (1,1,1), (4,1,2), (1,4,1) and (2,1,4) with ZeRO 3,
 * the checkpoint is resharded on load (wte's vocabulary padding differs between tp 2 and 4, the
 * ZeRO slices between every dp) and the next 10 losses agree within 1e-5 relative; the final weights
 * within what AdamW can move two runs apart in 10 steps, whatever their gradients' rounding
 * (tu_adamw_drift_bound: a relative bound does not hold on every machine, see test_bf16.c). In deterministic mode (exact
 * fixed-point sums: bit-identical for every pp, dp and ZeRO stage at a given tp) the resumed runs at
 * (2,1,4) ZeRO 3, (2,4,1) and (2,1,1) are bit-identical to the uninterrupted one: losses, weights and
 * moments.
 *
 * With --bf16 the checkpoint holds the fp32 master weights (the model's bf16 weights are their
 * rounding) and the fp32 moments: resumed in the same layout, and in deterministic mode in another
 * pp/dp/ZeRO layout, the run is bit-identical; a bf16 checkpoint also resumes as an fp32 run.
 *
 * SGD, LARS and LAMB resume the same way: their state (the momentum buffer, LAMB's moments) is
 * saved, resharded and resumed bit-identically in the same layout and, in deterministic mode, in
 * another; the checkpoint records the optimizer, and resuming with another is refused naming both
 * unless --no-load-optim starts its state fresh.
 *
 * Asynchronous saves (checkpoints/async_save.h) write the same tensors as synchronous ones, bit for
 * bit, without changing the training, and resuming from one is bit-identical to resuming from the
 * other. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/reader.h"
#include "engine/core/status.h"
#include "tests/ckpt_harness.h"

enum { B = 1, T = 8, GLOBAL = 8, HALF = 10 };

typedef tu_ckpt_diff diff;

/* Every tensor of two checkpoints (tu_ckpt_compare); the runs compared share the state of iteration HALF. */
static diff compare(const char *a_dir, const char *b_dir)
{
    diff d;
    cr_assert_eq(tu_ckpt_compare(a_dir, b_dir, HALF + 1, TU_CKPT_TOTAL, &d), TRI_OK, "%s", tri_error_message());
    return d;
}

static tu_ckpt_run base_run(const tri_gpt_config *cfg, const int32_t *w)
{
    return (tu_ckpt_run){.cfg = cfg, .B = B, .T = T, .global_batch = GLOBAL, .windows = w};
}

Test(checkpoint, resume_in_five_layouts, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 5);
    char *dir = tu_ckpt_tmpdir("resume");
    char ref_dir[4200], step10[4300], ref_final[4300];
    snprintf(ref_dir, sizeof ref_dir, "%s/uninterrupted", dir);
    snprintf(step10, sizeof step10, "%s/iter_%07d", ref_dir, HALF);
    snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);

    tu_ckpt_run ref = base_run(&cfg, w);
    ref.layout = (tu_layout){.tp = 2, .pp = 2, .dp = 2, .zero = 1};
    ref.until = TU_CKPT_TOTAL;
    ref.save_dir = ref_dir;
    ref.save_interval = HALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted run: %s", tri_error_message());

    struct { tu_layout l; const char *name; } cases[] = {
        {{.tp = 2, .pp = 2, .dp = 2, .zero = 1}, "(2,2,2) ZeRO 1 (same layout)"},
        {{.tp = 1, .pp = 1, .dp = 1, .zero = 0}, "(1,1,1)"},
        {{.tp = 4, .pp = 1, .dp = 2, .zero = 1}, "(4,1,2) ZeRO 1"},
        {{.tp = 1, .pp = 4, .dp = 1, .zero = 0}, "(1,4,1)"},
        {{.tp = 2, .pp = 1, .dp = 4, .zero = 3}, "(2,1,4) ZeRO 3"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char out[4300];
        snprintf(out, sizeof out, "%s/resumed%zu", dir, c);
        tu_ckpt_run r = base_run(&cfg, w);
        r.layout = cases[c].l;
        r.load = step10;
        r.until = TU_CKPT_TOTAL;
        r.save_dir = out;
        cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s: %s", cases[c].name, tri_error_message());
        cr_assert_eq(r.start, HALF, "%s resumed at iteration %lld", cases[c].name, (long long)r.start);
        double worst = 0.0;
        bool same_losses = true;
        for (int k = 0; k < TU_CKPT_TOTAL - HALF; k++) {
            double want = ref.losses[HALF + k], got = r.losses[k];
            worst = fmax(worst, fabs(got - want));
            same_losses = same_losses && got == want;
            cr_expect_leq(fabs(got - want), 1e-5 * fabs(want), "%s: iteration %d loss %.9g, uninterrupted %.9g",
                          cases[c].name, HALF + k + 1, got, want);
        }
        char final[4400];
        snprintf(final, sizeof final, "%s/iter_%07d", out, TU_CKPT_TOTAL);
        diff d = compare(final, ref_final);
        if (c == 0) {
            cr_expect(same_losses, "same layout: the resumed losses are not bit-identical (max diff %.3g)", worst);
            cr_expect(d.identical, "same layout: the final weights or moments are not bit-identical (%.3g, %.3g)",
                      d.weights, d.moments);
        }
        cr_expect_leq(d.drift, 1.0, "%s: final weights differ by %.3g of what AdamW can move them in 10 steps",
                      cases[c].name, d.drift);
        cr_log_info("resume %s: losses of iterations 11-20 %s, max |diff| %.3g; final weights max rel diff %.3g "
                    "(%.3g of AdamW's drift bound), moments %.3g%s", cases[c].name,
                    same_losses ? "bit-identical" : "within 1e-5", worst, d.weights, d.drift, d.moments,
                    d.identical ? " (bit-identical)" : "");
    }
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* Trains from step10 in layout l up to TU_CKPT_TOTAL into dir/name; true when the losses and the
 * final weights and moments are bit-identical to the uninterrupted run's. */
static bool resume_identical(const tri_gpt_config *cfg, const int32_t *w, const char *dir, const char *name,
                             tu_layout l, const char *step10, const tu_ckpt_run *ref, const char *ref_final)
{
    char out[4300], final[4400];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    tu_ckpt_run r = base_run(cfg, w);
    r.layout = l;
    r.load = step10;
    r.until = TU_CKPT_TOTAL;
    r.save_dir = out;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s: %s", name, tri_error_message());
    bool same = true;
    for (int k = 0; k < TU_CKPT_TOTAL - HALF; k++)
        same = same && r.losses[k] == ref->losses[HALF + k];
    snprintf(final, sizeof final, "%s/iter_%07d", out, TU_CKPT_TOTAL);
    diff d = compare(final, ref_final);
    cr_log_info("resume %s: losses %s, final weights and moments %s (%.3g, %.3g)", name,
                same ? "bit-identical" : "DIFFER", d.identical ? "bit-identical" : "DIFFER", d.weights, d.moments);
    return same && d.identical;
}

Test(checkpoint, resume_deterministic_bit_identical, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 6);
    char *dir = tu_ckpt_tmpdir("resume-det");
    char ref_dir[4200], step10[4300], ref_final[4300];
    snprintf(ref_dir, sizeof ref_dir, "%s/uninterrupted", dir);
    snprintf(step10, sizeof step10, "%s/iter_%07d", ref_dir, HALF);
    snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);
    tu_ckpt_run ref = base_run(&cfg, w);
    ref.layout = (tu_layout){.tp = 2, .pp = 2, .dp = 2, .zero = 1, .deterministic = true};
    ref.until = TU_CKPT_TOTAL;
    ref.save_dir = ref_dir;
    ref.save_interval = HALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted run: %s", tri_error_message());
    struct { tu_layout l; const char *name; } cases[] = {
        {{.tp = 2, .pp = 1, .dp = 4, .zero = 3, .deterministic = true}, "(2,1,4) ZeRO 3"},
        {{.tp = 2, .pp = 4, .dp = 1, .zero = 0, .deterministic = true}, "(2,4,1)"},
        {{.tp = 2, .pp = 1, .dp = 1, .zero = 0, .deterministic = true}, "(2,1,1)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[64];
        snprintf(name, sizeof name, "deterministic %s from (2,2,2) ZeRO 1", cases[c].name);
        cr_expect(resume_identical(&cfg, w, dir, name, cases[c].l, step10, &ref, ref_final),
                  "%s: the resumed losses, weights or moments are not bit-identical", name);
    }
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

Test(checkpoint, resume_bf16, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 8);
    char *dir = tu_ckpt_tmpdir("resume-bf16");
    char ref_dir[4200], step10[4300], ref_final[4300];
    snprintf(ref_dir, sizeof ref_dir, "%s/uninterrupted", dir);
    snprintf(step10, sizeof step10, "%s/iter_%07d", ref_dir, HALF);
    snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);
    tu_layout base = {.tp = 2, .pp = 2, .dp = 2, .zero = 1, .deterministic = true, .bf16 = true};
    tu_ckpt_run ref = base_run(&cfg, w);
    ref.layout = base;
    ref.until = TU_CKPT_TOTAL;
    ref.save_dir = ref_dir;
    ref.save_interval = HALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted bf16 run: %s", tri_error_message());

    cr_expect(resume_identical(&cfg, w, dir, "bf16 same layout", base, step10, &ref, ref_final),
              "bf16 resumed in the same layout is not bit-identical");
    tu_layout other = {.tp = 2, .pp = 1, .dp = 4, .zero = 3, .deterministic = true, .bf16 = true};
    cr_expect(resume_identical(&cfg, w, dir, "bf16 deterministic (2,1,4) ZeRO 3", other, step10, &ref, ref_final),
              "deterministic bf16 resumed at (2,1,4) ZeRO 3 is not bit-identical");

    /* the same checkpoint as an fp32 run: its master weights load exactly, the run continues */
    tu_ckpt_run fp = base_run(&cfg, w);
    fp.layout = base;
    fp.layout.bf16 = false;
    fp.load = step10;
    fp.until = TU_CKPT_TOTAL;
    cr_assert_eq(tu_ckpt_train(&fp), TRI_OK, "fp32 from a bf16 checkpoint: %s", tri_error_message());
    double worst = 0.0;
    for (int k = 0; k < TU_CKPT_TOTAL - HALF; k++)
        worst = fmax(worst, fabs(fp.losses[k] - ref.losses[HALF + k]) / ref.losses[HALF + k]);
    cr_expect_lt(worst, 2e-3, "fp32 resumed from bf16: losses differ by %g from the bf16 run's", worst);
    cr_log_info("fp32 resumed from the bf16 checkpoint: losses within %.3g of the bf16 run", worst);
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* The uninterrupted run of layout l into dir/name, saving at HALF and TU_CKPT_TOTAL, in the
 * foreground or the background. */
static tu_ckpt_run save_run(const tri_gpt_config *cfg, const int32_t *w, const char *dir, const char *name,
                            tu_layout l, bool async, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, name);
    tu_ckpt_run r = base_run(cfg, w);
    r.layout = l;
    r.until = TU_CKPT_TOTAL;
    r.save_dir = out;
    r.save_interval = HALF;
    r.async_save = async;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s: %s", name, tri_error_message());
    return r;
}

Test(checkpoint, async_save_same_as_sync, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 9);
    char *dir = tu_ckpt_tmpdir("async");
    /* ZeRO 1 (each rank writes its own optimizer shard) and ZeRO 3 (parameters gathered over dp to
     * be written): synchronous and asynchronous saves of the same training */
    tu_layout layouts[2] = {{.tp = 2, .pp = 2, .dp = 2, .zero = 1}, {.tp = 2, .pp = 1, .dp = 4, .zero = 3}};
    const char *names[2] = {"(2,2,2) ZeRO 1", "(2,1,4) ZeRO 3"};
    for (int k = 0; k < 2; k++) {
        char sync_dir[4300], async_dir[4300], a[4400], b[4400], a10[4400];
        char tag[64];
        snprintf(tag, sizeof tag, "sync%d", k);
        tu_ckpt_run sync = save_run(&cfg, w, dir, tag, layouts[k], false, sync_dir, sizeof sync_dir);
        snprintf(tag, sizeof tag, "async%d", k);
        tu_ckpt_run async = save_run(&cfg, w, dir, tag, layouts[k], true, async_dir, sizeof async_dir);
        bool same_losses = memcmp(sync.losses, async.losses, sizeof sync.losses) == 0;
        cr_expect(same_losses, "%s: saving in the background changed the training's losses", names[k]);
        for (int step = HALF; step <= TU_CKPT_TOTAL; step += TU_CKPT_TOTAL - HALF) {
            snprintf(a, sizeof a, "%s/iter_%07d", async_dir, step);
            snprintf(b, sizeof b, "%s/iter_%07d", sync_dir, step);
            diff d = compare(a, b);
            cr_expect(d.identical, "%s: the asynchronous checkpoint of iteration %d differs from the synchronous one "
                      "(weights %.3g, moments %.3g)", names[k], step, d.weights, d.moments);
        }
        /* resuming from the asynchronous step 10 in the same layout is bit-identical to the sync run */
        snprintf(a10, sizeof a10, "%s/iter_%07d", async_dir, HALF);
        snprintf(b, sizeof b, "%s/iter_%07d", sync_dir, TU_CKPT_TOTAL);
        snprintf(tag, sizeof tag, "resumed-from-async%d", k);
        cr_expect(resume_identical(&cfg, w, dir, tag, layouts[k], a10, &sync, b),
                  "%s: resuming from the asynchronous checkpoint is not bit-identical", names[k]);
        cr_log_info("async %s: losses %s, checkpoints of iterations %d and %d bit-identical to the synchronous ones",
                    names[k], same_losses ? "bit-identical" : "DIFFER", HALF, TU_CKPT_TOTAL);
    }
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* SGD, LARS and LAMB (a case each, so that the sanitizer stage's selection, tools/
 * sanitizer_coverage.sh, weighs each alone): the uninterrupted (2,2,2) ZeRO 1 run against resumes in
 * the same layout (plain and deterministic mode) and, deterministic, at (2,1,4) ZeRO 3 (another
 * slicing of the momentum buffers and moments): losses, weights and optimizer state bit-identical.
 * Writes the plain run's step 10 to step10_out (4300 bytes; NULL: not) under dir. */
static void resume_optimizer(const tri_gpt_config *cfg, const int32_t *w, const char *dir, int opt, char *step10_out)
{
    const char *names[] = {"adam", "sgd", "lars", "lamb"};
    for (int det = 0; det < 2; det++) {
        char ref_dir[4200], step10[4300], ref_final[4300];
        snprintf(ref_dir, sizeof ref_dir, "%s/%s-%d", dir, names[opt], det);
        snprintf(step10, sizeof step10, "%s/iter_%07d", ref_dir, HALF);
        snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);
        tu_ckpt_run ref = base_run(cfg, w);
        ref.layout = (tu_layout){.tp = 2, .pp = 2, .dp = 2, .zero = 1, .deterministic = det, .optimizer = opt};
        ref.until = TU_CKPT_TOTAL;
        ref.save_dir = ref_dir;
        ref.save_interval = HALF;
        cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "%s uninterrupted: %s", names[opt], tri_error_message());
        char name[64];
        snprintf(name, sizeof name, "%s%s same layout", names[opt], det ? " deterministic" : "");
        cr_expect(resume_identical(cfg, w, dir, name, ref.layout, step10, &ref, ref_final),
                  "%s: the resumed losses, weights or optimizer state are not bit-identical", name);
        if (det) {
            tu_layout other = {.tp = 2, .pp = 1, .dp = 4, .zero = 3, .deterministic = true, .optimizer = opt};
            snprintf(name, sizeof name, "%s deterministic (2,1,4) ZeRO 3", names[opt]);
            cr_expect(resume_identical(cfg, w, dir, name, other, step10, &ref, ref_final),
                      "%s: the resumed losses, weights or optimizer state are not bit-identical", name);
        } else if (step10_out) {
            snprintf(step10_out, 4300, "%s", step10);
        }
    }
}

/* One optimizer's resumes (resume_optimizer) in a directory of its own. */
static void resume_case(int opt, const char *tag)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 8);
    char *dir = tu_ckpt_tmpdir(tag);
    resume_optimizer(&cfg, w, dir, opt, NULL);
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

Test(checkpoint, resume_sgd, .timeout = 600)
{
    resume_case(TRI_OPT_SGD, "resume-sgd");
}

Test(checkpoint, resume_lars, .timeout = 600)
{
    resume_case(TRI_OPT_LARS, "resume-lars");
}

/* LAMB's resumes, then the refusals: a LAMB checkpoint resumed as SGD names both optimizers and
 * --no-load-optim; with --no-load-optim it starts SGD's momentum fresh from the checkpoint's
 * weights. */
Test(checkpoint, resume_lamb, .timeout = 600)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 8);
    char *dir = tu_ckpt_tmpdir("resume-lamb");
    char lamb_step10[4300] = "";
    resume_optimizer(&cfg, w, dir, TRI_OPT_LAMB, lamb_step10);
    tu_ckpt_run r = base_run(&cfg, w);
    char out[4300];
    snprintf(out, sizeof out, "%s/lamb-as-sgd", dir);
    r.layout = (tu_layout){.tp = 2, .pp = 2, .dp = 2, .zero = 1, .optimizer = TRI_OPT_SGD};
    r.load = lamb_step10;
    r.until = HALF + 2;
    r.save_dir = out;
    cr_expect_eq(tu_ckpt_train(&r), TRI_EINVAL, "a LAMB checkpoint resumed as SGD");
    const char *msg = tri_error_message();
    cr_expect(strstr(msg, "--optimizer lamb") && strstr(msg, "--optimizer sgd") && strstr(msg, "--no-load-optim"),
              "the refusal names both optimizers and the flag: %s", msg);
    r.no_load_optim = true;
    cr_expect_eq(tu_ckpt_train(&r), TRI_OK, "--no-load-optim: %s", tri_error_message());
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}
