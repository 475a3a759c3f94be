/* tests/test_compression_resume.c - checkpoints of a compressed data-parallel gradient reduction
 * (--grad-compression, engine/train/dp_compress.h) hold all of its state (engine/train/state_shards.h):
 * each dp rank's error-feedback residual (error_feedback, in the per-dp-rank replica files), the own
 * residual of every copy that is not the stored one (error_feedback_copy: the tied embedding's copy
 * at pp > 1, sequence-parallel replicated parameters at tp > 1) and PowerSGD's warm-started Q
 * (powersgd_q, once per (tp, pp) shard), so a run saved and resumed in the same layout is
 * bit-identical to an uninterrupted one. Each piece is shown to matter: dropping the residuals on
 * resume (--reset-compression-state), or resuming from a checkpoint that looks older (its manifest
 * without the copies or without Q: the loader then falls back, with a warning, to the stored copy's
 * residual or a fresh Q) breaks that equality. Resuming with another compressor is refused naming
 * both unless reset. At another dp each rank's residual starts from the saved ranks' sum divided by
 * the new dp (what the average gradient still owes; Q, the same on every dp rank, is read from dp
 * rank 0's file by any dp rank, which the dp 2 resumes exercise). The
 * two-phase reduction (--grad-compression-reduce two-phase) adds each dp rank's server residual
 * (group server_error_feedback, and a copy's own, server_error_feedback_copy), resumed bit for bit
 * the same way; at another tp PowerSGD's Q is resharded (engine/train/powersgd_q.h), and copies
 * that sum their gradients share their saved residuals' sum at another tp or pp; resuming it with the all-gather
 * (or the reverse) is refused naming both unless reset. Under local SGD / DiLoCo the compressed outer
 * reduction's own residual (outer_error_feedback) and PowerSGD's Q of it (outer_powersgd_q) resume
 * the same way. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/fsutil.h"
#include "checkpoints/sha256.h"
#include "engine/core/status.h"
#include "models/gpt.h"
#include "tests/ckpt_harness.h"
#include "tests/harness.h"
#include "tests/testutil.h"

enum { B = 1, T = 8, GLOBAL = 4, HALF = 10 };

static tri_compression_reduce reduce_of_runs; /* the reduction comp_run gives (allgather unless set) */
static bool local_of_runs;                    /* the runs are DiLoCo's (the compressor reduces the outer step) */

static tu_ckpt_run comp_run(const tri_gpt_config *cfg, const int32_t *w, tu_layout l, tri_compression_kind kind)
{
    l.compression = tri_compression_defaults();
    l.compression.kind = kind;
    l.compression.reduce = kind != TRI_COMPRESS_NONE ? reduce_of_runs : TRI_COMPRESS_REDUCE_ALLGATHER;
    l.compression.block_size = 32;
    l.compression.powersgd_start_iter = 2; /* compressed (Q in use) well before the save at HALF */
    l.compression.seed = 1234;
    return (tu_ckpt_run){.cfg = cfg, .B = B, .T = T, .layout = l, .global_batch = GLOBAL, .windows = w,
                         .until = TU_CKPT_TOTAL};
}

/* A run in layout l trained to iteration 4 and saved there, under dir. */
static void save_at_4(const tri_gpt_config *cfg, const int32_t *w, tu_layout l, tri_compression_kind kind,
                      const char *dir)
{
    tu_ckpt_run s = comp_run(cfg, w, l, kind);
    s.until = 4;
    s.save_dir = dir;
    cr_assert_eq(tu_ckpt_train(&s), TRI_OK, "save: %s", tri_error_message());
}

/* A whole tensor of group (NULL: the weights) from a checkpoint's files of kind (dp rank dp, -1:
 * any), asserted read. */
static float *tensor(const char *dir, tri_ckpt_file_kind kind, int dp, const char *group, const char *name, int64_t *n)
{
    float *x = tu_ckpt_tensor(dir, kind, dp, group, name, n);
    cr_assert(x, "%s %s: %s", group ? group : "", name, tri_error_message());
    return x;
}

static const char *const names[] = {"wte", "h.0.attn.c_attn.w", "h.1.mlp.c_proj.w", "ln_f.w"};

/* The final weights and both dp ranks' residuals of a and b are equal to the bit. */
static void same_final(const char *a, const char *b, const char *what)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t n, m;
        float *x = tensor(a, TRI_CKPT_MODEL, -1, NULL, names[i], &n);
        float *y = tensor(b, TRI_CKPT_MODEL, -1, NULL, names[i], &m);
        cr_expect(n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0, "%s: final %s differs", what, names[i]);
        free(x);
        free(y);
        bool two_phase = reduce_of_runs == TRI_COMPRESS_REDUCE_TWO_PHASE;
        const char *groups[3] = {"error_feedback",
                                 local_of_runs ? "outer_error_feedback" : two_phase ? "server_error_feedback" : NULL,
                                 local_of_runs && two_phase ? "outer_server_error_feedback" : NULL};
        for (int dp = 0; dp < 2; dp++)
            for (int g = 0; g < 3 && groups[g]; g++) {
                const char *group = groups[g];
                x = tensor(a, TRI_CKPT_REPLICA, dp, group, names[i], &n);
                y = tensor(b, TRI_CKPT_REPLICA, dp, group, names[i], &m);
                cr_expect(n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0, "%s: final %s of %s on dp %d differs",
                          what, group, names[i], dp);
                free(x);
                free(y);
            }
    }
}

/* The residuals (of group) are stored per dp rank: non-zero, and different on the two replicas. */
static void residuals_per_rank(const char *dir, const char *group)
{
    int64_t n, m;
    float *x = tensor(dir, TRI_CKPT_REPLICA, 0, group, "h.0.attn.c_attn.w", &n);
    float *y = tensor(dir, TRI_CKPT_REPLICA, 1, group, "h.0.attn.c_attn.w", &m);
    double mx = 0.0;
    for (int64_t k = 0; k < n; k++)
        mx = fmax(mx, fabs(x[k]));
    cr_expect_gt(mx, 0.0, "the saved residual is zero");
    cr_expect(n == m && memcmp(x, y, (size_t)n * sizeof *x) != 0, "the two dp ranks' residuals are equal");
    free(x);
    free(y);
}

/* Runs r with stderr (where tri_log's warnings go) captured into buf (cap bytes, NUL-terminated). */
static int train_capturing(tu_ckpt_run *r, char *buf, size_t cap)
{
    tu_capture c;
    tu_stderr_capture(&c);
    int rc = tu_ckpt_train(r);
    tu_stderr_release(&c, buf, cap);
    return rc;
}

/* Makes step dir's manifest look like one written before a key of its grad_compression record
 * existed (absent: that state is not held), re-sealing manifest.sha256. */
static void drop_manifest_key(const char *dir, const char *key)
{
    char path[4400], *json = NULL;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    cr_assert_eq(tri_fs_read_small(path, 64u << 20, &json, NULL), TRI_OK, "%s", tri_error_message());
    cJSON *root = cJSON_Parse(json);
    cJSON *gc = cJSON_GetObjectItemCaseSensitive(root, "grad_compression");
    cr_assert(gc && cJSON_GetObjectItemCaseSensitive(gc, key), "manifest of %s has no grad_compression.%s", dir, key);
    cJSON_DeleteItemFromObjectCaseSensitive(gc, key);
    char *text = cJSON_Print(root), hex[TRI_SHA256_HEX], sum[TRI_SHA256_HEX + 64];
    tri_sha256_buffer(text, strlen(text), hex);
    snprintf(sum, sizeof sum, "%s  manifest.json\n", hex);
    cr_assert_eq(tri_fs_write_atomic(dir, "manifest.json", text, strlen(text)), TRI_OK);
    cr_assert_eq(tri_fs_write_atomic(dir, "manifest.sha256", sum, strlen(sum)), TRI_OK);
    cJSON_free(text);
    cJSON_Delete(root);
    free(json);
}

/* How many of r's losses differ from the uninterrupted run's from HALF on. */
static int losses_differ(const tu_ckpt_run *r, const tu_ckpt_run *ref)
{
    int differ = 0;
    for (int k = 0; k < TU_CKPT_TOTAL - HALF; k++)
        differ += r->losses[k] != ref->losses[HALF + k];
    return differ;
}

/* A run in layout l (dp 2) saved at HALF and resumed is bit-identical to the uninterrupted one (the
 * losses, the final weights and residuals); resumed without the residuals it is not. `older` names
 * a manifest key (or NULL): resumed from the mid checkpoint without it, the loader falls back to
 * what older checkpoints gave (the stored copy's residual, or a fresh Q), warns with `warning`, and
 * the run is no longer the uninterrupted one: what shows that state is what carries the equality. */
static void resumes_bit_for_bit_in(tri_compression_kind kind, tu_layout l, const char *older, const char *warning)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 31);
    char tag[64];
    snprintf(tag, sizeof tag, "%s%s-tp%d-pp%d%s", tri_compression_name(kind),
             reduce_of_runs == TRI_COMPRESS_REDUCE_TWO_PHASE ? "-two-phase" : "", l.tp, l.pp, l.sp ? "-sp" : "");
    char *dir = tu_ckpt_tmpdir(tag);
    char ref_dir[4200], mid[4300], ref_final[4300], out[4300], fin[4400];
    snprintf(ref_dir, sizeof ref_dir, "%s/uninterrupted", dir);
    snprintf(mid, sizeof mid, "%s/iter_%07d", ref_dir, HALF);
    snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);
    tu_ckpt_run ref = comp_run(&cfg, w, l, kind);
    ref.save_dir = ref_dir;
    ref.save_interval = HALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted: %s", tri_error_message());
    residuals_per_rank(mid, local_of_runs ? "outer_error_feedback" : "error_feedback");
    if (reduce_of_runs == TRI_COMPRESS_REDUCE_TWO_PHASE)
        residuals_per_rank(mid, local_of_runs ? "outer_server_error_feedback" : "server_error_feedback");

    snprintf(out, sizeof out, "%s/resumed", dir);
    tu_ckpt_run r = comp_run(&cfg, w, l, kind);
    r.load = mid;
    r.save_dir = out;
    char log[16384];
    cr_assert_eq(train_capturing(&r, log, sizeof log), TRI_OK, "resume: %s", tri_error_message());
    cr_expect(!strstr(log, "warning"), "%s: an exact resume warned: %s", tag, log);
    cr_assert_eq(r.start, HALF);
    for (int k = 0; k < TU_CKPT_TOTAL - HALF; k++)
        cr_expect(r.losses[k] == ref.losses[HALF + k], "%s: iteration %d loss %.17g, uninterrupted %.17g", tag,
                  HALF + k + 1, r.losses[k], ref.losses[HALF + k]);
    snprintf(fin, sizeof fin, "%s/iter_%07d", out, TU_CKPT_TOTAL);
    same_final(fin, ref_final, tag);

    /* the residual dropped on load (--reset-compression-state): the run is no longer the same */
    tu_ckpt_run z = comp_run(&cfg, w, l, kind);
    z.load = mid;
    z.reset_compression_state = true;
    cr_assert_eq(tu_ckpt_train(&z), TRI_OK, "reset: %s", tri_error_message());
    cr_expect_gt(losses_differ(&z, &ref), 0, "%s: resuming without the residual gave the uninterrupted losses", tag);

    if (older) { /* an older checkpoint still loads, with the warning, and is no longer exact */
        drop_manifest_key(mid, older);
        tu_ckpt_run o = comp_run(&cfg, w, l, kind);
        o.load = mid;
        cr_assert_eq(train_capturing(&o, log, sizeof log), TRI_OK, "older checkpoint: %s", tri_error_message());
        cr_expect(strstr(log, warning) && strstr(log, "predates"), "%s without %s: no warning \"%s\" in: %s", tag,
                  older, warning, log);
        cr_expect_gt(losses_differ(&o, &ref), 0, "%s: resuming without %s gave the uninterrupted losses", tag, older);
    }
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

static void resumes_bit_for_bit(tri_compression_kind kind)
{
    resumes_bit_for_bit_in(kind, (tu_layout){.tp = 1, .pp = 1, .dp = 2}, NULL, NULL);
}

Test(compression_resume, onebit_resumes_bit_for_bit, .timeout = 300) { resumes_bit_for_bit(TRI_COMPRESS_1BIT); }
Test(compression_resume, topk_resumes_bit_for_bit, .timeout = 300) { resumes_bit_for_bit(TRI_COMPRESS_TOPK); }
Test(compression_resume, onebit_two_phase_resumes_bit_for_bit, .timeout = 300)
{
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    resumes_bit_for_bit(TRI_COMPRESS_1BIT);
}

Test(compression_resume, another_reduction_refused, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 41);
    char *dir = tu_ckpt_tmpdir("two-phase-refused");
    char mid[4300];
    snprintf(mid, sizeof mid, "%s/iter_%07d", dir, 4);
    tu_layout dp2 = {.tp = 1, .pp = 1, .dp = 2};
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    save_at_4(&cfg, w, dp2, TRI_COMPRESS_1BIT, dir);
    reduce_of_runs = TRI_COMPRESS_REDUCE_ALLGATHER;
    tu_ckpt_run r = comp_run(&cfg, w, dp2, TRI_COMPRESS_1BIT);
    r.load = mid;
    r.until = 6;
    cr_expect_eq(tu_ckpt_train(&r), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression-reduce two-phase") &&
                  strstr(tri_error_message(), "--grad-compression-reduce allgather") &&
                  strstr(tri_error_message(), "--reset-compression-state"), "%s", tri_error_message());
    r.reset_compression_state = true;
    cr_expect_eq(tu_ckpt_train(&r), TRI_OK, "--reset-compression-state: %s", tri_error_message());
    tri_error_clear();
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* PowerSGD's Q is the warm start of the next step's power iteration (Vogels et al. 2019): a fresh
 * one gives another P, so another decoded gradient, and the losses part from the uninterrupted run's
 * at the first step after the resume. */
Test(compression_resume, powersgd_q_resumes_bit_for_bit, .timeout = 300)
{
    resumes_bit_for_bit_in(TRI_COMPRESS_POWERSGD, (tu_layout){.tp = 1, .pp = 1, .dp = 2}, "powersgd_q",
                           "PowerSGD's Q");
}

/* DiLoCo (H 4, Nesterov) at dp 2 whose outer synchronisation reduces the replicas' change through
 * PowerSGD, in deterministic mode, at pp. */
static tu_layout diloco(int pp)
{
    tu_layout l = {.tp = 1, .pp = pp, .dp = 2, .deterministic = true};
    l.local = (tri_local_sgd_config){.steps = 4, .outer = TRI_OUTER_NESTEROV, .outer_lr = 0.7f, .outer_momentum = 0.9f,
                                     .final_iter = TU_CKPT_TOTAL};
    return l;
}

/* The outer reduction's Q is warm-started from one outer step to the next (engine/train/local_sgd.h),
 * so it is saved (outer_powersgd_q) and read back; the save at HALF falls inside the third window,
 * after two compressed outer steps. */
Test(compression_resume, outer_powersgd_q_resumes_bit_for_bit, .timeout = 300)
{
    local_of_runs = true;
    resumes_bit_for_bit_in(TRI_COMPRESS_POWERSGD, diloco(1), "outer_powersgd_q", "the outer reduction's PowerSGD Q");
}

/* DiLoCo whose outer reduction is two-phase (1bit): the outer server residual
 * (outer_server_error_feedback) resumes bit for bit with the rest. */
Test(compression_resume, outer_two_phase_resumes_bit_for_bit, .timeout = 300)
{
    local_of_runs = true;
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    resumes_bit_for_bit_in(TRI_COMPRESS_1BIT, diloco(1), NULL, NULL);
}

/* The same (top-k) at tp 2 with sequence parallelism, where local SGD aligns every copy's server
 * residual to the holder's (tri_outer_step) so that the holder's, the one stored, is every copy's:
 * top-k selects over the whole chunk, the TP rank's own shards with the copies, so without the
 * alignment the copies' server residuals part and the resumed run with them (1bit's blocks do not
 * straddle parameters, which start aligned, so its copies stay equal anyway). A case of its own, so
 * that the sanitizer stage's selection (tools/sanitizer_coverage.sh) weighs each layout alone. */
Test(compression_resume, outer_two_phase_topk_tp2_sp_resumes_bit_for_bit, .timeout = 300)
{
    local_of_runs = true;
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    tu_layout sp = diloco(1);
    sp.tp = 2;
    sp.sp = true;
    resumes_bit_for_bit_in(TRI_COMPRESS_TOPK, sp, NULL, NULL);
}

/* A matrix's Q is the same at any pp (its TP shard is), so a resume at another pp reads it from the
 * file of the pipeline rank that saved the matrix: DiLoCo with a PowerSGD outer reduction saved at
 * pp 1 and resumed at pp 2 is the uninterrupted pp 1 run to the bit (pp changes no bit of it in
 * deterministic mode: local_sgd/outer_powersgd_pp_inside_same_bits), no Q drawn afresh. (The last
 * stage's tied copy of the embedding, which pp 1 does not have, starts from its holder's residual
 * and Q, with warnings; under local SGD it takes its holder's decoded change, so they do not show.) */
Test(compression_resume, outer_powersgd_q_resumes_at_another_pp, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 43);
    char *dir = tu_ckpt_tmpdir("outer-q-pp");
    char mid[4300], log[16384];
    snprintf(mid, sizeof mid, "%s/iter_%07d", dir, HALF);
    tu_ckpt_run ref = comp_run(&cfg, w, diloco(1), TRI_COMPRESS_POWERSGD);
    ref.save_dir = dir;
    ref.save_interval = HALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted: %s", tri_error_message());
    tu_ckpt_run r = comp_run(&cfg, w, diloco(2), TRI_COMPRESS_POWERSGD);
    r.load = mid;
    cr_assert_eq(train_capturing(&r, log, sizeof log), TRI_OK, "pp 2: %s", tri_error_message());
    cr_expect(!strstr(log, "drawn afresh") && strstr(log, "2 PowerSGD Q(s) of the tied embedding's copy"),
              "the resume at pp 2: %s", log);
    cr_expect_eq(losses_differ(&r, &ref), 0, "resumed at pp 2, the losses part from the uninterrupted pp 1 run's");
    /* without it (an older checkpoint) the same resume warns and parts from it */
    drop_manifest_key(mid, "outer_powersgd_q");
    tu_ckpt_run o = comp_run(&cfg, w, diloco(2), TRI_COMPRESS_POWERSGD);
    o.load = mid;
    cr_assert_eq(train_capturing(&o, log, sizeof log), TRI_OK, "older checkpoint: %s", tri_error_message());
    cr_expect(strstr(log, "the outer reduction's PowerSGD Q") && strstr(log, "drawn afresh"), "%s", log);
    cr_expect_gt(losses_differ(&o, &ref), 0, "a fresh outer Q gave the uninterrupted losses");
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* pp 2: the last stage's tied embedding is a copy whose gradient (the LM head's) is its own until the
 * embedding group sums it after the dp reduction, so its residual differs from the first stage's;
 * its Q too (PowerSGD at pp 2). */
Test(compression_resume, onebit_pp2_tied_copy_resumes_bit_for_bit, .timeout = 300)
{
    resumes_bit_for_bit_in(TRI_COMPRESS_1BIT, (tu_layout){.tp = 1, .pp = 2, .dp = 2}, "residual_copies",
                           "error-feedback residual");
}
/* Two-phase at pp 2: the tied copy's gradient is reduced over dp on its own, so its server residual
 * is its own too (server_error_feedback_copy, in the last stage's replica files): it differs from
 * the holder's, and with it the run resumes bit for bit; from a checkpoint without the copies (an
 * older one) the copy falls back to the holder's with the warning, and the losses part. */
Test(compression_resume, two_phase_pp2_tied_copy_resumes_bit_for_bit, .timeout = 300)
{
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 59);
    char *dir = tu_ckpt_tmpdir("two-phase-copy");
    char mid[4300];
    snprintf(mid, sizeof mid, "%s/iter_%07d", dir, 4);
    save_at_4(&cfg, w, (tu_layout){.tp = 1, .pp = 2, .dp = 2}, TRI_COMPRESS_1BIT, dir);
    tri_ckpt_reader r;
    cr_assert_eq(tri_ckpt_reader_open(&r, mid), TRI_OK, "%s", tri_error_message());
    int differ = 0;
    for (int dp = 0; dp < 2; dp++) {
        int64_t n = 0, m = 0;
        float *holder = tensor(mid, TRI_CKPT_REPLICA, dp, "server_error_feedback", "wte", &n), *copy = NULL;
        tri_box b;
        bool found = false;
        cr_assert_eq(tri_ckpt_read_own_shard(&r, TRI_CKPT_REPLICA, 0, 1, dp, "server_error_feedback_copy", "wte", 2, &b,
                                             &copy, &m, &found), TRI_OK, "%s", tri_error_message());
        cr_assert(found && m >= n, "dp %d: no server_error_feedback_copy/wte of %lld floats on the last stage", dp,
                  (long long)n); /* the shard has the vocabulary padding rows after the tensor's */
        differ += memcmp(holder, copy, (size_t)n * sizeof *copy) != 0;
        free(holder);
        free(copy);
    }
    tri_ckpt_reader_close(&r);
    cr_expect_eq(differ, 2, "the tied copy's server residual equals the holder's on %d dp rank(s)", 2 - differ);
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
    resumes_bit_for_bit_in(TRI_COMPRESS_1BIT, (tu_layout){.tp = 1, .pp = 2, .dp = 2}, "residual_copies",
                           "error-feedback residual");
}
/* The same at tp 2 with sequence parallelism: the LayerNorm copies' server residuals are their own. */
Test(compression_resume, two_phase_tp2_sp_resumes_bit_for_bit, .timeout = 300)
{
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    resumes_bit_for_bit_in(TRI_COMPRESS_1BIT, (tu_layout){.tp = 2, .pp = 1, .dp = 2, .sp = true}, "residual_copies",
                           "error-feedback residual");
}
Test(compression_resume, powersgd_pp2_resumes_bit_for_bit, .timeout = 300)
{
    resumes_bit_for_bit_in(TRI_COMPRESS_POWERSGD, (tu_layout){.tp = 1, .pp = 2, .dp = 2}, "powersgd_q",
                           "PowerSGD's Q");
}

/* tp 2 with sequence parallelism: each TP rank's LayerNorm gradients are partial sums over its
 * sequence shard, reduced over dp (compressed) before the TP all-reduce, so every TP rank's
 * residual of them is its own. */
Test(compression_resume, onebit_tp2_sp_resumes_bit_for_bit, .timeout = 300)
{
    resumes_bit_for_bit_in(TRI_COMPRESS_1BIT, (tu_layout){.tp = 2, .pp = 1, .dp = 2, .sp = true}, "residual_copies",
                           "error-feedback residual");
}

/* Another tp (and pp): the residuals are resharded (the holder's for every copy, with a warning
 * naming the saving layout) and every matrix's Q is resharded from the saved shards' (one line, no
 * warning: powersgd_q_resharded_across_tp checks the values); under another --powersgd-rank Q is
 * drawn afresh with a warning naming both ranks. Another pp alone keeps every matrix's Q (read from
 * the saving stage's file). */
Test(compression_resume, powersgd_other_tp_warns, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 41);
    char *dir = tu_ckpt_tmpdir("powersgd-other-tp");
    char mid[4300], log[16384];
    snprintf(mid, sizeof mid, "%s/iter_%07d", dir, 4);
    save_at_4(&cfg, w, (tu_layout){.tp = 1, .pp = 2, .dp = 2}, TRI_COMPRESS_POWERSGD, dir);
    tu_ckpt_run r = comp_run(&cfg, w, (tu_layout){.tp = 2, .pp = 1, .dp = 2, .sp = true}, TRI_COMPRESS_POWERSGD);
    r.load = mid;
    r.until = 6;
    cr_assert_eq(train_capturing(&r, log, sizeof log), TRI_OK, "tp 2: %s", tri_error_message());
    cr_expect(strstr(log, "tp 1 x pp 2") && strstr(log, "saved at tp 1: PowerSGD's Q of 18 matrix(es)") &&
                  !strstr(log, "drawn afresh"), "%s", log);
    /* the same layout with another --powersgd-rank: Q's shape changed, so drawn afresh too */
    tu_ckpt_run k = comp_run(&cfg, w, (tu_layout){.tp = 1, .pp = 2, .dp = 2}, TRI_COMPRESS_POWERSGD);
    k.layout.compression.powersgd_rank = 2;
    k.load = mid;
    k.until = 6;
    cr_assert_eq(train_capturing(&k, log, sizeof log), TRI_OK, "rank 2: %s", tri_error_message());
    cr_expect(strstr(log, "drawn afresh") && strstr(log, "--powersgd-rank 4 (this run has 2)"), "%s", log);
    /* pp 1: the tied copy is gone, and every Q is found at the stage that saved it */
    tu_ckpt_run p1 = comp_run(&cfg, w, (tu_layout){.tp = 1, .pp = 1, .dp = 2}, TRI_COMPRESS_POWERSGD);
    p1.load = mid;
    p1.until = 6;
    cr_assert_eq(train_capturing(&p1, log, sizeof log), TRI_OK, "pp 1: %s", tri_error_message());
    cr_expect(!strstr(log, "PowerSGD's Q"), "pp 1 did not take every Q: %s", log);
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

Test(compression_resume, another_compressor_refused, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 37);
    char *dir = tu_ckpt_tmpdir("compression-refused");
    char mid[4300];
    snprintf(mid, sizeof mid, "%s/iter_%07d", dir, 4);
    tu_layout dp2 = {.tp = 1, .pp = 1, .dp = 2};
    save_at_4(&cfg, w, dp2, TRI_COMPRESS_1BIT, dir);
    /* another compressor: refused naming both; accepted with --reset-compression-state */
    tu_ckpt_run r = comp_run(&cfg, w, dp2, TRI_COMPRESS_TOPK);
    r.load = mid;
    r.until = 6;
    cr_expect_eq(tu_ckpt_train(&r), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression 1bit") &&
                  strstr(tri_error_message(), "--grad-compression topk") &&
                  strstr(tri_error_message(), "--reset-compression-state"), "%s", tri_error_message());
    r.reset_compression_state = true;
    cr_expect_eq(tu_ckpt_train(&r), TRI_OK, "--reset-compression-state: %s", tri_error_message());
    /* none on this side: refused too */
    r = comp_run(&cfg, w, dp2, TRI_COMPRESS_NONE);
    r.load = mid;
    r.until = 6;
    cr_expect_eq(tu_ckpt_train(&r), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression 1bit") &&
                  strstr(tri_error_message(), "--grad-compression none"), "%s", tri_error_message());
    tri_error_clear();
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* Two-phase's server residual is one tensor cut by chunks across the dp ranks; with another tp the
 * units (and so the chunks) move, and load merges every dp rank's file so each rank finds its new
 * chunk (without the merge elements are lost: tested by removing it). Saved again at once, the dp
 * ranks' entries still add up to the same tensor, element for element (each element lies in exactly
 * one rank's chunk, the others hold zero). */
Test(compression_resume, two_phase_server_residual_moves_with_the_chunks, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 43);
    char *dir = tu_ckpt_tmpdir("two-phase-chunks");
    char first[4200], again[4200], mid[4300], mid2[4300];
    snprintf(first, sizeof first, "%s/first", dir);
    snprintf(again, sizeof again, "%s/again", dir);
    snprintf(mid, sizeof mid, "%s/iter_%07d", first, 4);
    snprintf(mid2, sizeof mid2, "%s/iter_%07d", again, 4);
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    save_at_4(&cfg, w, (tu_layout){.tp = 1, .pp = 1, .dp = 2}, TRI_COMPRESS_1BIT, first);
    tu_ckpt_run r = comp_run(&cfg, w, (tu_layout){.tp = 2, .pp = 1, .dp = 2}, TRI_COMPRESS_1BIT);
    r.load = mid;
    r.until = 4;
    r.save_dir = again;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "tp 2: %s", tri_error_message());
    /* the block unit's dp chunks meet inside c_fc.w, a little further on at tp 2 (the replicated
     * parameters do not halve): elements there change dp rank */
    static const char *const moving[] = {"wte", "h.0.attn.c_attn.w", "h.0.mlp.c_fc.w", "h.1.mlp.c_fc.w", "ln_f.w"};
    int64_t moved = 0;
    for (size_t i = 0; i < sizeof moving / sizeof moving[0]; i++) {
        int64_t n = 0, m = 0, nonzero = 0;
        float *a[2], *b[2];
        for (int dp = 0; dp < 2; dp++) {
            a[dp] = tensor(mid, TRI_CKPT_REPLICA, dp, "server_error_feedback", moving[i], &n);
            b[dp] = tensor(mid2, TRI_CKPT_REPLICA, dp, "server_error_feedback", moving[i], &m);
        }
        cr_assert_eq(n, m);
        for (int64_t k = 0; k < n; k++) {
            nonzero += a[0][k] != 0.0f || a[1][k] != 0.0f;
            cr_expect(!(a[0][k] != 0.0f && a[1][k] != 0.0f), "%s element %lld held by both dp ranks", moving[i],
                      (long long)k);
            cr_expect_eq(a[0][k] + a[1][k], b[0][k] + b[1][k], "%s element %lld: %g saved, %g after tp 2", moving[i],
                         (long long)k, (double)(a[0][k] + a[1][k]), (double)(b[0][k] + b[1][k]));
        }
        cr_expect_gt(nonzero, 0, "%s: no server residual saved", moving[i]);
        for (int64_t k = 0; k < n; k++)
            moved += (a[0][k] != 0.0f) != (b[0][k] != 0.0f);
        for (int dp = 0; dp < 2; dp++) {
            free(a[dp]);
            free(b[dp]);
        }
    }
    cr_expect_gt(moved, 0, "no element changed dp rank: the test shows nothing");
    tri_error_clear();
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* Another dp (checkpoints/load.c mean_of_workers): every rank's gradient enters the reduction divided
 * by dp, so the average still owes the sum of the ranks' residuals; resumed at dp `to` each rank
 * starts from that sum divided by `to`, summed in double in rank order and rounded once, which
 * keeps it. Two-phase's server residual is of the mean gradient, one tensor cut by chunks: at
 * another dp it is the same tensor cut by the new chunks. Saved at dp 2 and saved again at once at
 * dp 4 (no step between), the files hold those values to the bit; the run then goes on at dp 4, and
 * its losses differ from the same resume with the residuals reset: they carry something. A copy's
 * own residual (the tied embedding's at pp 2) is read from each saving rank's file, not replaced by
 * the holder's: no warning. With `local`, DiLoCo's outer reduction is the compressed one (its own
 * residual, outer_error_feedback). */
static void another_dp(tri_compression_reduce reduce, int pp, bool local)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 47);
    char *dir = tu_ckpt_tmpdir("another-dp");
    char first[4200], again[4200], mid[4300], mid2[4300], log[16384];
    snprintf(first, sizeof first, "%s/first", dir);
    snprintf(again, sizeof again, "%s/again", dir);
    snprintf(mid, sizeof mid, "%s/iter_%07d", first, 4);
    snprintf(mid2, sizeof mid2, "%s/iter_%07d", again, 4);
    reduce_of_runs = reduce;
    local_of_runs = local;
    bool two_phase = reduce == TRI_COMPRESS_REDUCE_TWO_PHASE;
    const char *group = local ? "outer_error_feedback" : "error_feedback";
    tu_layout dp2 = local ? diloco(pp) : (tu_layout){.tp = 1, .pp = pp, .dp = 2}, dp4 = dp2;
    dp4.dp = 4;
    save_at_4(&cfg, w, dp2, TRI_COMPRESS_1BIT, first);
    tu_ckpt_run r = comp_run(&cfg, w, dp4, TRI_COMPRESS_1BIT);
    r.load = mid;
    r.until = 4;
    r.save_dir = again;
    cr_assert_eq(train_capturing(&r, log, sizeof log), TRI_OK, "dp 4: %s", tri_error_message());
    cr_expect(strstr(log, "saved at dp 2") && strstr(log, "divided by 4") && !strstr(log, "warning"), "%s", log);
    int64_t moved = 0; /* server elements on another rank at dp 4 */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t n = 0, m = 0, nonzero = 0;
        float *a[2], *b[4];
        for (int dp = 0; dp < 2; dp++)
            a[dp] = tensor(mid, TRI_CKPT_REPLICA, dp, group, names[i], &n);
        for (int dp = 0; dp < 4; dp++) {
            b[dp] = tensor(mid2, TRI_CKPT_REPLICA, dp, group, names[i], &m);
            cr_assert_eq(n, m);
            for (int64_t k = 0; k < n; k++) {
                float want = (float)(((double)a[0][k] + (double)a[1][k]) / 4.0);
                nonzero += want != 0.0f;
                cr_expect(b[dp][k] == want, "%s element %lld on dp %d: %.9g, the saved ranks' sum / 4 %.9g",
                          names[i], (long long)k, dp, (double)b[dp][k], (double)want);
            }
        }
        cr_expect_gt(nonzero, 0, "%s: no residual saved", names[i]);
        for (int dp = 0; dp < 4; dp++)
            free(b[dp]);
        for (int dp = 0; dp < 2; dp++)
            free(a[dp]);
        if (!two_phase)
            continue;
        /* the server residual: the same tensor, each element on one rank */
        for (int dp = 0; dp < 2; dp++)
            a[dp] = tensor(mid, TRI_CKPT_REPLICA, dp, "server_error_feedback", names[i], &n);
        for (int dp = 0; dp < 4; dp++)
            b[dp] = tensor(mid2, TRI_CKPT_REPLICA, dp, "server_error_feedback", names[i], &m);
        for (int64_t k = 0; k < n; k++) {
            int held = 0, old = a[0][k] != 0.0f ? 0 : a[1][k] != 0.0f ? 1 : -1, now = -1;
            float was = old >= 0 ? a[old][k] : 0.0f, is = 0.0f;
            for (int dp = 0; dp < 4; dp++)
                if (b[dp][k] != 0.0f) {
                    held++;
                    is = b[dp][k];
                    now = dp;
                }
            cr_expect(held <= 1 && is == was, "%s server element %lld: %.9g saved, %.9g on %d dp 4 ranks", names[i],
                      (long long)k, (double)was, (double)is, held);
            moved += old >= 0 && now != old;
        }
        for (int dp = 0; dp < 4; dp++)
            free(b[dp]);
        for (int dp = 0; dp < 2; dp++)
            free(a[dp]);
    }
    cr_expect(!two_phase || moved > 0, "no server element changed rank: the test shows nothing");
    /* on past the next reduction: the next step's (local SGD: the next synchronisation, at 8) */
    int steps = local ? 5 : 2;
    tu_ckpt_run on = comp_run(&cfg, w, dp4, TRI_COMPRESS_1BIT), z = on;
    on.load = z.load = mid;
    on.until = z.until = 4 + steps;
    z.reset_compression_state = true;
    cr_assert_eq(tu_ckpt_train(&on), TRI_OK, "dp 4 on: %s", tri_error_message());
    cr_assert_eq(tu_ckpt_train(&z), TRI_OK, "dp 4 reset: %s", tri_error_message());
    for (int k = 0; k < steps; k++)
        cr_expect(isfinite(on.losses[k]), "dp 4, iteration %d: loss %g", 5 + k, on.losses[k]);
    cr_expect(on.losses[steps - 1] != z.losses[steps - 1],
              "the carried residuals changed nothing: iteration %d loss %.17g both", 4 + steps, on.losses[steps - 1]);
    tri_error_clear();
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

Test(compression_resume, another_dp_keeps_the_residuals_sum, .timeout = 300)
{
    another_dp(TRI_COMPRESS_REDUCE_ALLGATHER, 2, false);
}
Test(compression_resume, another_dp_two_phase_server_residual_rechunked, .timeout = 300)
{
    another_dp(TRI_COMPRESS_REDUCE_TWO_PHASE, 1, false);
}
/* DiLoCo's compressed outer reduction (saved at iteration 4, its first synchronisation with H 4:
 * replicas equal, so dp may change) keeps its own residual's sum the same way. */
Test(compression_resume, another_dp_outer_residual, .timeout = 300)
{
    another_dp(TRI_COMPRESS_REDUCE_ALLGATHER, 1, true);
}

/* A rank's own entry group/name (no box: a copy's residual, a Q) as the (tp, pp, dp) rank saved it,
 * its shard box in *b and its floats in *n; asserted found. */
static float *saved_own(const char *dir, const char *group, const char *name, int tp, int pp, int dp, tri_box *b,
                        int64_t *n)
{
    tri_ckpt_reader r;
    cr_assert_eq(tri_ckpt_reader_open(&r, dir), TRI_OK, "%s", tri_error_message());
    int t = tri_manifest_tensor(&r.m, name);
    cr_assert_geq(t, 0, "%s holds no %s", dir, name);
    float *x = NULL;
    bool found = false;
    int rc = tri_ckpt_read_own_shard(&r, TRI_CKPT_REPLICA, tp, pp, dp, group, name, r.m.tensors[t].ndim, b, &x, n,
                                     &found);
    tri_ckpt_reader_close(&r);
    cr_assert(rc == TRI_OK && found, "%s: no %s/%s of rank (tp %d, pp %d, dp %d): %s", dir, group, name, tp, pp, dp,
              tri_error_message());
    return x;
}

/* Matrix name's PowerSGD Q^T as tp rank tp saved it (pipeline and dp rank 0's replica file). */
static float *saved_q(const char *dir, int tp, const char *name, tri_box *b, int64_t *n)
{
    return saved_own(dir, "powersgd_q", name, tp, 0, 0, b, n);
}

/* PowerSGD saved at tp 1, resumed at tp 2 and saved at once (no step between), then resumed at tp 1
 * and saved at once: each Q follows engine/train/powersgd_q.h's rule, with no Q drawn afresh. The
 * row-parallel h.0.attn.c_proj.w (TP cuts Q's rows, its columns): each tp 2 rank holds its slice of
 * the saved Q^T's columns, and back at tp 1 the saved Q^T to the bit. The column-parallel
 * h.0.mlp.c_fc.w (TP cuts the matrix's rows): each tp 2 rank holds the saved Q whole (its rows' P is
 * M_shard Q), and back at tp 1 the two summed (Q = M^T P with the shards' P's stacked): twice the
 * saved Q, to the bit. */
Test(compression_resume, powersgd_q_resharded_across_tp, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 53);
    char *dir = tu_ckpt_tmpdir("powersgd-q-tp");
    char one[4200], two[4200], back[4200], at[3][4300], log[16384];
    snprintf(one, sizeof one, "%s/tp1", dir);
    snprintf(two, sizeof two, "%s/tp2", dir);
    snprintf(back, sizeof back, "%s/back", dir);
    const char *dirs[3] = {one, two, back};
    for (int k = 0; k < 3; k++)
        snprintf(at[k], sizeof at[k], "%s/iter_%07d", dirs[k], 4);
    tu_layout tp1 = {.tp = 1, .pp = 1, .dp = 2}, tp2 = {.tp = 2, .pp = 1, .dp = 2};
    save_at_4(&cfg, w, tp1, TRI_COMPRESS_POWERSGD, one);
    for (int k = 1; k < 3; k++) {
        tu_ckpt_run r = comp_run(&cfg, w, k == 1 ? tp2 : tp1, TRI_COMPRESS_POWERSGD);
        r.load = at[k - 1];
        r.until = 4;
        r.save_dir = dirs[k];
        cr_assert_eq(train_capturing(&r, log, sizeof log), TRI_OK, "%s: %s", dirs[k], tri_error_message());
        cr_expect(strstr(log, k == 1 ? "resharded to tp 2" : "resharded to tp 1") && !strstr(log, "drawn afresh"),
                  "%s", log);
    }
    static const char *const mats[2] = {"h.0.attn.c_proj.w", "h.0.mlp.c_fc.w"};
    for (int m = 0; m < 2; m++) {
        bool cols_split = m == 0;
        tri_box b0, b, bb;
        int64_t n0, n, nb;
        float *q0 = saved_q(at[0], 0, mats[m], &b0, &n0), *qb = saved_q(at[2], 0, mats[m], &bb, &nb);
        int64_t C = b0.shape[b0.ndim - 1], rank = n0 / C;
        for (int k = 0; k < 2; k++) { /* tp 2 */
            float *q = saved_q(at[1], k, mats[m], &b, &n);
            int64_t c_l = b.shape[b.ndim - 1], c0 = b.off[b.ndim - 1];
            cr_assert_eq(n, rank * c_l);
            cr_expect_eq(c_l, cols_split ? C / 2 : C, "%s: tp 2 shard of %lld columns", mats[m], (long long)c_l);
            for (int64_t j = 0; j < rank; j++)
                for (int64_t c = 0; c < c_l; c++)
                    cr_expect_eq(q[j * c_l + c], q0[j * C + c0 + c], "%s tp rank %d Q^T[%lld][%lld]", mats[m], k,
                                 (long long)j, (long long)c);
            free(q);
        }
        cr_assert_eq(nb, n0);
        for (int64_t i = 0; i < n0; i++)
            cr_expect_eq(qb[i], cols_split ? q0[i] : q0[i] + q0[i], "%s back at tp 1, element %lld: %.9g, saved %.9g",
                         mats[m], (long long)i, (double)qb[i], (double)q0[i]);
        free(q0);
        free(qb);
    }
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* Copies that sum their parts of a gradient after the dp reduction owe the sum of their residuals
 * (checkpoints/load_compression.c copies_sum). The tied embedding at pp 2 (1bit two-phase, dp 2):
 * resumed at pp 1 and saved at once, each dp rank's wte residual is fl(holder's + copy's) and the
 * server residual (each saving rank's chunks summed) fl(holders' + copies'), to the bit; resumed
 * from that at pp 2 again, the holder and the copy each hold half of it. Sequence parallelism's
 * LayerNorm copies (tp 2, allgather) resumed at tp 1: fl(tp rank 0's + tp rank 1's). No warning. */
Test(compression_resume, copies_share_their_sum_at_another_layout, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 61);
    char *dir = tu_ckpt_tmpdir("copies-sum");
    static const char *const step[4] = {"pp2", "pp1", "pp2-again", "sp"};
    char run[4][4200], at[4][4300], log[16384];
    for (int k = 0; k < 4; k++) {
        snprintf(run[k], sizeof run[k], "%s/%s", dir, step[k]);
        snprintf(at[k], sizeof at[k], "%.4100s/iter_%07d", run[k], 4);
    }
    reduce_of_runs = TRI_COMPRESS_REDUCE_TWO_PHASE;
    tu_layout pp2 = {.tp = 1, .pp = 2, .dp = 2}, pp1 = {.tp = 1, .pp = 1, .dp = 2};
    save_at_4(&cfg, w, pp2, TRI_COMPRESS_1BIT, run[0]);
    for (int k = 1; k < 3; k++) { /* pp 1, then pp 2 again, each saved at once */
        tu_ckpt_run r = comp_run(&cfg, w, k == 1 ? pp1 : pp2, TRI_COMPRESS_1BIT);
        r.load = at[k - 1];
        r.until = 4;
        r.save_dir = run[k];
        cr_assert_eq(train_capturing(&r, log, sizeof log), TRI_OK, "%s: %s", step[k], tri_error_message());
        cr_expect(strstr(log, "sum their gradients") && !strstr(log, "warning"), "%s: %s", step[k], log);
    }
    int64_t n = 0, m = 0;
    tri_box b;
    float *server_saved = calloc(4800, sizeof *server_saved), *server_pp1 = calloc(4800, sizeof *server_pp1);
    double *server_sum = calloc(4800, sizeof *server_sum);
    for (int dp = 0; dp < 2; dp++) {
        float *h = tensor(at[0], TRI_CKPT_REPLICA, dp, "error_feedback", "wte", &n);
        float *c = saved_own(at[0], "error_feedback_copy", "wte", 0, 1, dp, &b, &m);
        float *one = tensor(at[1], TRI_CKPT_REPLICA, dp, "error_feedback", "wte", &m);
        float *h2 = tensor(at[2], TRI_CKPT_REPLICA, dp, "error_feedback", "wte", &m);
        float *c2 = saved_own(at[2], "error_feedback_copy", "wte", 0, 1, dp, &b, &m);
        cr_assert_eq(n, 4800); /* 100 x 48: the copies' entries hold the padding rows after it */
        int differ = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = (float)((double)h[i] + (double)c[i]);
            differ += want != h[i];
            cr_expect_eq(one[i], want, "dp %d wte[%lld] at pp 1: %.9g, holder + copy %.9g", dp, (long long)i,
                         (double)one[i], (double)want);
            cr_expect(h2[i] == one[i] / 2 && c2[i] == one[i] / 2, "dp %d wte[%lld] at pp 2 again: %.9g and %.9g, not "
                      "half of %.9g", dp, (long long)i, (double)h2[i], (double)c2[i], (double)one[i]);
        }
        cr_expect_gt(differ, 0, "dp %d: the copy's residual added nothing: the test shows nothing", dp);
        free(h);
        free(c);
        free(one);
        free(h2);
        free(c2);
        float *hs = tensor(at[0], TRI_CKPT_REPLICA, dp, "server_error_feedback", "wte", &n);
        float *cs = saved_own(at[0], "server_error_feedback_copy", "wte", 0, 1, dp, &b, &m);
        float *s1 = tensor(at[1], TRI_CKPT_REPLICA, dp, "server_error_feedback", "wte", &m);
        for (int64_t i = 0; i < n; i++) {
            server_sum[i] += (double)hs[i] + (double)cs[i];
            server_pp1[i] += s1[i]; /* at most one dp rank's chunk holds it */
            server_saved[i] += hs[i] != 0.0f || cs[i] != 0.0f;
        }
        free(hs);
        free(cs);
        free(s1);
    }
    int64_t held = 0;
    for (int64_t i = 0; i < 4800; i++) {
        held += server_saved[i] > 0.0f;
        cr_expect_eq(server_pp1[i], (float)server_sum[i], "server wte[%lld] at pp 1: %.9g, the copies' sum %.9g",
                     (long long)i, (double)server_pp1[i], server_sum[i]);
    }
    cr_expect_gt(held, 0, "no server residual saved");
    free(server_saved);
    free(server_pp1);
    free(server_sum);
    /* sequence parallelism at tp 2, resumed at tp 1 */
    reduce_of_runs = TRI_COMPRESS_REDUCE_ALLGATHER;
    save_at_4(&cfg, w, (tu_layout){.tp = 2, .pp = 1, .dp = 2, .sp = true}, TRI_COMPRESS_1BIT, run[3]);
    tu_ckpt_run r = comp_run(&cfg, w, pp1, TRI_COMPRESS_1BIT);
    char tp1[4300], tp1_at[4400];
    snprintf(tp1, sizeof tp1, "%s/tp1", dir);
    snprintf(tp1_at, sizeof tp1_at, "%s/iter_%07d", tp1, 4);
    r.load = at[3];
    r.until = 4;
    r.save_dir = tp1;
    cr_assert_eq(train_capturing(&r, log, sizeof log), TRI_OK, "tp 1: %s", tri_error_message());
    cr_expect(strstr(log, "sum their gradients") && !strstr(log, "warning"), "tp 1: %s", log);
    for (int dp = 0; dp < 2; dp++) {
        float *h = tensor(at[3], TRI_CKPT_REPLICA, dp, "error_feedback", "ln_f.w", &n);
        float *c = saved_own(at[3], "error_feedback_copy", "ln_f.w", 1, 0, dp, &b, &m);
        float *one = tensor(tp1_at, TRI_CKPT_REPLICA, dp, "error_feedback", "ln_f.w", &m);
        cr_assert(n == m && b.shape[0] == n);
        int differ = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = (float)((double)h[i] + (double)c[i]);
            differ += h[i] != c[i];
            cr_expect_eq(one[i], want, "dp %d ln_f.w[%lld] at tp 1: %.9g, tp ranks' sum %.9g", dp, (long long)i,
                         (double)one[i], (double)want);
        }
        cr_expect_gt(differ, 0, "dp %d: the two TP ranks' residuals are equal: the test shows nothing", dp);
        free(h);
        free(c);
        free(one);
    }
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}
