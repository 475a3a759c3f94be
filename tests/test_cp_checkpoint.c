/* tests/test_cp_checkpoint.c - checkpoints under context parallelism (docs/context_parallel.md,
 * "Checkpoints and observability under cp"), on thread ranks (tests/ckpt_harness.h).
 *
 * Under cp the parameters and the optimizer state are replicated over the cp ranks exactly as over the
 * dp ranks, and ZeRO shards over dp x cp (the layout's rank cp_rank + cp dp_rank). So a checkpoint's
 * files are indexed by the rank in dp x cp: only its rank 0 writes a (tp, pp) model file, and each of the
 * dp x cp ZeRO shards its own optimizer file; the manifest records context_parallel_size. Loading reads
 * boxes whatever layout wrote them, so a run saved at one cp resumes at another.
 *
 * The small GPT (4 layers, n_embd 48, vocab 100) at T 512 (cp 4: chunks of 64 rows, the fused
 * attention's tile), global batch 2 sequences, AdamW, trains 4 steps at cp 2 x dp 2, ZeRO 1, saving at
 * iterations 2 and 4: the uninterrupted run. What must hold:
 *  - the files: the manifest's context_parallel_size 2, one model file, and the optimizer files
 *    optim_tp00_pp00_dp000..003 (four ZeRO shards over dp x cp = 4), none written twice;
 *  - resumed from iteration 2 at the same layout: the losses of iterations 3 and 4 and the final weights
 *    and moments bit for bit (resume is bit-identical everywhere);
 *  - resumed at cp 1 (one rank) and at cp 4 (four ranks, dp 1, ZeRO 3): the losses within 1e-4 relative
 *    and the final weights within AdamW's drift bound, the cp layouts' bounds (tests/test_cp_layouts.c
 *    derives them: under cp only the fp32 sum order of the weight gradients changes, a few ulps a layer);
 *  - deterministic mode: saved at cp 2 x dp 2 ZeRO 3, resumed at the same layout and at cp 2 x dp 1
 *    ZeRO 0 (the fixed-point sums do not depend on dp or ZeRO at a given tp x cp): bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/reader.h"
#include "engine/core/status.h"
#include "models/gpt.h"
#include "tests/ckpt_harness.h"

enum { B = 1, T = 512, GLOBAL = 2, HALF = 2, UNTIL = 4 };

typedef struct diff {
    double drift;    /* worst weight difference over what AdamW can explain (harness.h) */
    bool identical;  /* every weight and moment bit-identical */
} diff;

/* Every tensor (weights, exp_avg, exp_avg_sq) of two checkpoints. */
static diff compare(const char *a_dir, const char *b_dir)
{
    tri_ckpt_reader a, b;
    diff d = {.identical = true};
    cr_assert_eq(tri_ckpt_reader_open(&a, a_dir), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_ckpt_reader_open(&b, b_dir), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(a.m.n_tensors, b.m.n_tensors);
    const char *groups[3] = {NULL, TRI_CKPT_EXP_AVG, TRI_CKPT_EXP_AVG_SQ};
    for (int t = 0; t < a.m.n_tensors; t++)
        for (int g = 0; g < 3; g++) {
            float *x = NULL, *y = NULL;
            const char *name = a.m.tensors[t].name;
            cr_assert_eq(tri_ckpt_read_tensor(&a, groups[g], name, &x), TRI_OK, "%s", tri_error_message());
            cr_assert_eq(tri_ckpt_read_tensor(&b, groups[g], name, &y), TRI_OK, "%s", tri_error_message());
            int64_t n = 1;
            for (int k = 0; k < a.m.tensors[t].ndim; k++)
                n *= a.m.tensors[t].shape[k];
            if (g == 0) /* the runs share the state of iteration HALF; lr <= 1e-3 after it */
                d.drift = fmax(d.drift, tu_adamw_drift_ratio(x, y, n, 1e-3, 0.9, 0.95, HALF + 1, TU_CKPT_TOTAL));
            d.identical = d.identical && memcmp(x, y, (size_t)n * sizeof *x) == 0;
            free(x);
            free(y);
        }
    tri_ckpt_reader_close(&a);
    tri_ckpt_reader_close(&b);
    return d;
}

typedef struct fixture {
    tri_gpt_config cfg;
    int32_t *w;
    char *dir;
    char ref_dir[4200], step[4300], ref_final[4300];
    tu_ckpt_run ref;
} fixture;

static tu_ckpt_run base_run(fixture *f)
{
    return (tu_ckpt_run){.cfg = &f->cfg, .B = B, .T = T, .global_batch = GLOBAL, .windows = f->w, .until = UNTIL};
}

/* The uninterrupted run in layout l, saving at HALF and UNTIL. */
static void setup(fixture *f, const char *tag, tu_layout l, int seed)
{
    f->cfg = tu_tiny_config();
    f->cfg.n_positions = T;
    f->w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, f->cfg.vocab_size, seed);
    f->dir = tu_ckpt_tmpdir(tag);
    snprintf(f->ref_dir, sizeof f->ref_dir, "%s/uninterrupted", f->dir);
    snprintf(f->step, sizeof f->step, "%s/iter_%07d", f->ref_dir, HALF);
    snprintf(f->ref_final, sizeof f->ref_final, "%s/iter_%07d", f->ref_dir, UNTIL);
    f->ref = base_run(f);
    f->ref.layout = l;
    f->ref.save_dir = f->ref_dir;
    f->ref.save_interval = HALF;
    cr_assert_eq(tu_ckpt_train(&f->ref), TRI_OK, "uninterrupted run: %s", tri_error_message());
}

static void teardown(fixture *f)
{
    tri_fs_remove_tree(f->dir);
    free(f->dir);
    free(f->w);
}

/* Resumes from f->step in layout l; the worst relative loss difference, *same: losses and final state
 * bit-identical, *d: the final state's comparison. */
static double resume(fixture *f, const char *name, tu_layout l, bool *same, diff *d)
{
    char out[4400], final[4500];
    snprintf(out, sizeof out, "%s/%s", f->dir, name);
    tu_ckpt_run r = base_run(f);
    r.layout = l;
    r.load = f->step;
    r.save_dir = out;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s: %s", name, tri_error_message());
    cr_assert_eq(r.start, HALF, "%s resumed at iteration %lld", name, (long long)r.start);
    double worst = 0.0;
    *same = true;
    for (int k = 0; k < UNTIL - HALF; k++) {
        double want = f->ref.losses[HALF + k], got = r.losses[k];
        cr_assert(want > 0.0 && isfinite(got), "%s: iteration %d loss %g, uninterrupted %g", name, HALF + k + 1,
                  got, want);
        worst = fmax(worst, fabs(got - want) / want);
        *same = *same && got == want;
    }
    snprintf(final, sizeof final, "%s/iter_%07d", out, UNTIL);
    *d = compare(final, f->ref_final);
    *same = *same && d->identical;
    cr_log_info("resume %s: losses of iterations %d-%d max rel diff %.3g, final weights %.3g of AdamW's drift "
                "bound%s", name, HALF + 1, UNTIL, worst, d->drift, *same ? " (bit-identical)" : "");
    return worst;
}

Test(cp_checkpoint, files_and_resume_across_cp, .timeout = 300)
{
    fixture f;
    setup(&f, "cp-ckpt", (tu_layout){.cp = 2, .dp = 2, .zero = 1}, 7);

    /* the files: one model file, the four ZeRO shards over dp x cp, the manifest's cp */
    tri_ckpt_reader rd;
    cr_assert_eq(tri_ckpt_reader_open(&rd, f.step), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(rd.m.run.cp, 2, "manifest context_parallel_size %d", rd.m.run.cp);
    cr_expect_eq(rd.m.run.dp, 2, "manifest dp %d", rd.m.run.dp);
    int models = 0, optim_seen[4] = {0};
    for (int i = 0; i < rd.m.n_files; i++) {
        const tri_ckpt_file *x = &rd.m.files[i];
        for (int j = 0; j < i; j++)
            cr_expect_neq(strcmp(x->name, rd.m.files[j].name), 0, "%s listed twice", x->name);
        if (x->kind == TRI_CKPT_MODEL)
            models++;
        if (x->kind == TRI_CKPT_OPTIM) {
            cr_assert(x->dp_rank >= 0 && x->dp_rank < 4, "%s: dp index %d outside dp x cp = 4", x->name, x->dp_rank);
            char want[64];
            snprintf(want, sizeof want, "optim_tp00_pp00_dp%03d.h5", x->dp_rank);
            cr_expect_str_eq(x->name, want);
            optim_seen[x->dp_rank]++;
        }
    }
    cr_expect_eq(models, 1, "%d model files (one (tp, pp) coordinate, written by dp x cp rank 0)", models);
    for (int k = 0; k < 4; k++)
        cr_expect_eq(optim_seen[k], 1, "ZeRO shard %d of dp x cp: %d files", k, optim_seen[k]);
    tri_ckpt_reader_close(&rd);

    bool same;
    diff d;
    resume(&f, "cp2_dp2_zero1", (tu_layout){.cp = 2, .dp = 2, .zero = 1}, &same, &d);
    cr_expect(same, "same cp layout: the resumed losses or final state are not bit-identical");
    struct { tu_layout l; const char *name; } other[] = {
        {{.cp = 1, .dp = 1, .zero = 0}, "cp1"},
        {{.cp = 4, .dp = 1, .zero = 3}, "cp4_zero3"},
    };
    for (size_t c = 0; c < sizeof other / sizeof other[0]; c++) {
        double worst = resume(&f, other[c].name, other[c].l, &same, &d);
        cr_expect_leq(worst, 1e-4, "%s: losses %.3g relative from the uninterrupted run", other[c].name, worst);
        cr_expect_leq(d.drift, 1.0, "%s: final weights %.3g of AdamW's drift bound", other[c].name, d.drift);
    }
    teardown(&f);
}

Test(cp_checkpoint, deterministic_resume_bit_identical, .timeout = 300)
{
    fixture f;
    setup(&f, "cp-ckpt-det", (tu_layout){.cp = 2, .dp = 2, .zero = 3, .deterministic = true}, 8);
    bool same;
    diff d;
    resume(&f, "det_cp2_dp2_zero3", (tu_layout){.cp = 2, .dp = 2, .zero = 3, .deterministic = true}, &same, &d);
    cr_expect(same, "deterministic, same layout: not bit-identical");
    resume(&f, "det_cp2_dp1", (tu_layout){.cp = 2, .dp = 1, .zero = 0, .deterministic = true}, &same, &d);
    cr_expect(same, "deterministic, cp 2 x dp 1 ZeRO 0 from cp 2 x dp 2 ZeRO 3: not bit-identical");
    teardown(&f);
}
