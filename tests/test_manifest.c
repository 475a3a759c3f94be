/* tests/test_manifest.c - a checkpoint manifest's optional keys survive render and parse.
 *
 * checkpoints/manifest.h writes some keys only when they differ from what every older checkpoint
 * implies (expert, expert-tensor and context parallel sizes above 1, LARS's eta, 1-bit Adam's
 * freeze step, local SGD, the compressed reduction with its start iteration, two-phase reduce and
 * the flags naming the state it holds). For each such manifest, built in memory with one tensor and
 * one file, the rendered JSON parses back to the same run and flags, and renders again to the same
 * text; a manifest without them renders none of those keys. In process and without training: the
 * checkpoint tests that train (test_checkpoint, test_compression_resume) save and resume these
 * manifests through real runs. */
#include <criterion/criterion.h>
#include <string.h>

#include "checkpoints/manifest.h"
#include "engine/core/status.h"

/* A manifest of the plain run: tp 2 x dp 2, ZeRO 1, AdamW, no compression, no local SGD. */
static tri_ckpt_manifest base(tri_ckpt_tensor *t, tri_ckpt_file *f, tri_ckpt_piece *pc)
{
    *t = (tri_ckpt_tensor){.name = "wte", .ndim = 2, .shape = {16, 8}};
    *pc = (tri_ckpt_piece){.tensor = 0, .box = {.ndim = 2, .off = {0, 0}, .shape = {8, 8}}, .lo = 0, .hi = 64};
    *f = (tri_ckpt_file){.name = "model_tp00_pp00.h5", .kind = TRI_CKPT_MODEL, .tp_rank = 0, .pp_rank = 0,
                         .dp_rank = -1, .bytes = 4096, .n_pieces = 1, .pieces = pc};
    memset(f->sha256, 'a', TRI_SHA256_HEX - 1);
    tri_ckpt_manifest m = {.format_version = TRI_CKPT_FORMAT_VERSION, .config_json = "{\"n_layer\": 1}",
                           .model_name = "gpt2", .iteration = 10, .consumed_samples = 40, .optimizer_step = 10,
                           .n_tensors = 1, .tensors = t, .n_files = 1, .files = f};
    tri_ckpt_run *r = &m.run;
    *r = (tri_ckpt_run){.tp = 2, .pp = 1, .dp = 2, .zero_stage = 1, .v = 1, .ep = 1, .etp = 1, .cp = 1,
                        .schedule = "1f1b", .micro_batch = 1, .global_batch = 4, .seq_length = 8, .seed = 1234,
                        .clip_grad = 1.0f};
    r->lr = (tri_lr_schedule){.lr = 1e-3f, .min_lr = 1e-4f, .warmup_iters = 2, .decay_iters = 20,
                              .style = TRI_LR_COSINE};
    r->adamw = (tri_adamw_config){.kind = TRI_OPT_ADAM, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                  .weight_decay = 0.1f};
    r->compression = tri_compression_defaults();
    r->compression.kind = TRI_COMPRESS_NONE;
    return m;
}

/* m rendered, parsed back and rendered again: the parsed manifest (freed by the caller) and the
 * first text (freed here) equal to the second. */
static tri_ckpt_manifest round_trip(const tri_ckpt_manifest *m, char **text)
{
    char *again = NULL;
    tri_ckpt_manifest back;
    cr_assert_eq(tri_manifest_render(m, text), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_manifest_parse(&back, *text, "round trip"), TRI_OK, "%s\n%s", tri_error_message(), *text);
    cr_assert_eq(tri_manifest_render(&back, &again), TRI_OK, "%s", tri_error_message());
    cr_expect_str_eq(again, *text, "rendered again, the manifest differs");
    free(again);
    return back;
}

static bool has(const char *text, const char *key)
{
    char quoted[96];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    return strstr(text, quoted) != NULL;
}

Test(manifest, plain_run_writes_no_optional_key)
{
    tri_ckpt_tensor t;
    tri_ckpt_file f;
    tri_ckpt_piece pc;
    tri_ckpt_manifest m = base(&t, &f, &pc);
    char *text = NULL;
    tri_ckpt_manifest back = round_trip(&m, &text);
    const char *absent[] = {"expert_model_parallel_size", "expert_tensor_parallel_size", "context_parallel_size",
                            "freeze_step", "onebit_adam", "momentum", "lars_eta", "local_sgd", "grad_compression"};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++)
        cr_expect(!has(text, absent[i]), "a plain run's manifest has %s", absent[i]);
    cr_expect(back.run.ep == 1 && back.run.etp == 1 && back.run.cp == 1, "absent sizes read as 1");
    cr_expect_eq(back.run.compression.kind, TRI_COMPRESS_NONE);
    cr_expect_eq(back.run.local.steps, 0);
    free(text);
    tri_manifest_free(&back);
}

Test(manifest, expert_and_context_parallel_sizes)
{
    tri_ckpt_tensor t;
    tri_ckpt_file f;
    tri_ckpt_piece pc;
    tri_ckpt_manifest m = base(&t, &f, &pc);
    m.run.ep = 4;
    m.run.etp = 2;
    m.run.cp = 2;
    char *text = NULL;
    tri_ckpt_manifest back = round_trip(&m, &text);
    cr_expect(back.run.ep == 4 && back.run.etp == 2 && back.run.cp == 2, "ep %d etp %d cp %d", back.run.ep,
              back.run.etp, back.run.cp);
    free(text);
    tri_manifest_free(&back);
}

/* SGD with Nesterov momentum, LARS with its eta, and AdamW frozen for 1-bit Adam */
Test(manifest, optimizers)
{
    tri_ckpt_tensor t;
    tri_ckpt_file f;
    tri_ckpt_piece pc;
    for (int k = 0; k < 3; k++) {
        tri_ckpt_manifest m = base(&t, &f, &pc);
        tri_adamw_config *a = &m.run.adamw;
        if (k < 2) {
            a->kind = k == 0 ? TRI_OPT_SGD : TRI_OPT_LARS;
            a->momentum = 0.875f;
            a->nesterov = k == 0;
            a->lars_eta = 0.001f;
        } else {
            a->freeze_step = 6;
            a->onebit_adam = true;
        }
        char *text = NULL;
        tri_ckpt_manifest back = round_trip(&m, &text);
        const tri_adamw_config *b = &back.run.adamw;
        cr_expect_eq(b->kind, a->kind);
        if (k < 2)
            cr_expect(b->momentum == a->momentum && b->nesterov == a->nesterov, "%s: momentum %g nesterov %d",
                      text, (double)b->momentum, b->nesterov);
        if (k == 1)
            cr_expect(b->lars_eta == a->lars_eta && has(text, "lars_eta"), "LARS's eta %g", (double)b->lars_eta);
        if (k == 2)
            cr_expect(b->freeze_step == 6 && b->onebit_adam, "freeze step %lld, onebit_adam %d",
                      (long long)b->freeze_step, b->onebit_adam);
        free(text);
        tri_manifest_free(&back);
    }
}

/* 1bit two-phase started at iteration 3 (1-bit Adam's compression start), and PowerSGD reducing
 * DiLoCo's outer step with both Q's held */
Test(manifest, compression_and_local_sgd)
{
    tri_ckpt_tensor t;
    tri_ckpt_file f;
    tri_ckpt_piece pc;
    tri_ckpt_manifest m = base(&t, &f, &pc);
    tri_compression *c = &m.run.compression;
    c->kind = TRI_COMPRESS_1BIT;
    c->block_size = 64;
    c->start_iter = 3;
    c->reduce = TRI_COMPRESS_REDUCE_TWO_PHASE;
    m.residual_copies = true;
    char *text = NULL;
    tri_ckpt_manifest back = round_trip(&m, &text);
    const tri_compression *b = &back.run.compression;
    cr_expect(b->kind == TRI_COMPRESS_1BIT && b->block_size == 64 && b->start_iter == 3 &&
              b->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE && back.residual_copies, "%s", text);
    cr_expect(!has(text, "powersgd_q"), "a 1bit manifest names PowerSGD's Q");
    free(text);
    tri_manifest_free(&back);

    m = base(&t, &f, &pc);
    c = &m.run.compression;
    c->kind = TRI_COMPRESS_POWERSGD;
    c->powersgd_rank = 4;
    c->powersgd_start_iter = 2;
    m.run.local = (tri_local_sgd_config){.steps = 4, .outer = TRI_OUTER_NESTEROV, .outer_lr = 0.7f,
                                         .outer_momentum = 0.9f, .warmup_iters = 1};
    m.outer_syncs = 2;
    m.replicas_equal = true;
    m.powersgd_q = m.outer_powersgd_q = true;
    back = round_trip(&m, &text);
    b = &back.run.compression;
    const tri_local_sgd_config *l = &back.run.local;
    cr_expect(b->kind == TRI_COMPRESS_POWERSGD && b->powersgd_rank == 4 && b->powersgd_start_iter == 2 &&
              b->reduce == TRI_COMPRESS_REDUCE_ALLGATHER && back.powersgd_q && back.outer_powersgd_q, "%s", text);
    cr_expect(l->steps == 4 && l->outer == TRI_OUTER_NESTEROV && l->outer_lr == 0.7f && l->outer_momentum == 0.9f &&
              l->warmup_iters == 1 && back.outer_syncs == 2 && back.replicas_equal, "%s", text);
    cr_expect(!has(text, "start_iter"), "PowerSGD's manifest has the other compressors' start_iter");
    free(text);
    tri_manifest_free(&back);
}
