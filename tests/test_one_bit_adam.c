/* tests/test_one_bit_adam.c - 1-bit Adam's two stages (Tang et al. 2021, "1-bit Adam: Communication
 * Efficient Large-Scale Training with Adam's Convergence Speed", §3) for Trident's compressors:
 * --grad-compression-start-iter N (every compressor reduces uncompressed before iteration N) and
 * --adam-freeze-step N (AdamW's second moment held from step N + 1 on).
 *
 * Error feedback compensates a compressor only when the update is linear in the gradient; Adam's
 * v is not, so 1-bit Adam runs plain Adam with the full-precision reduction first, then freezes v
 * and compresses. What the tests show:
 *   - the warm-up stage is the uncompressed run: with start N = K, the losses before updates 0..K
 *     and the weights after K updates have the bits of a run without compression; the first
 *     compressed update changes them (so the start is not ignored). The reduction of one unit over
 *     thread ranks before N is the plain all-reduce's bits and leaves the error-feedback residual
 *     zero; at N the residual holds what 1bit dropped.
 *   - deterministic mode keeps ZeRO 0 and ZeRO 1 bit-identical with the start and the freeze, and
 *     the frozen AdamW equal to one rank at dp 2 and pp 2 (the optimizer stays element-wise; the
 *     freeze is a constant per step), while differing from plain AdamW.
 *   - the refusals: a negative start, --powersgd-start-iter and --grad-compression-start-iter
 *     disagreeing; PowerSGD's default (10) is kept when neither is given.
 * The frozen update against a float64 reference is tests/test_ops_adamw.c's frozen_v_one_bit_adam;
 * the CUDA kernels against the CPU tests/test_cuda_kernels_cpu.c and tests/gpu/test_gpu_ops.c
 * (adamw_multi_frozen_v, run by the emulated build); the CLI's refusals tests/one_bit_adam_cli.sh. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/dp_compress.h"
#include "tests/harness.h"
#include "tests/testutil.h"
#include "tools/cli/compression_flags.h"

/* ---- the warm-up stage is the uncompressed run, bit for bit, then compression starts ---- */

static void plain_then_compressed(tri_compression_kind kind, tri_compression_reduce reduce, int zero)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, K = 2, STEPS = 5 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 8, T, cfg.vocab_size, 21);
    tu_layout comp = {.tp = 1, .pp = 1, .dp = 2, .n_micro = 2, .zero = zero,
                      .compression = tu_small_compressor(kind, reduce, K)};
    tu_layout none = comp;
    none.compression = tri_compression_defaults();
    const char *name = tri_compression_name(kind);
    tu_result rc, rn, rck, rnk;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &comp, w, STEPS, &rc), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &none, w, STEPS, &rn), TRI_OK, "%s", tri_error_message());
    /* losses[s] is the loss before update s: updates 0..K-1 are plain, so losses 0..K are equal */
    for (int s = 0; s <= K; s++)
        cr_expect_eq(rc.losses[s], rn.losses[s], "%s zero %d: loss %d %.17g vs uncompressed %.17g", name, zero, s,
                     rc.losses[s], rn.losses[s]);
    for (int s = K + 1; s < STEPS; s++)
        cr_expect_neq(rc.losses[s], rn.losses[s], "%s zero %d: loss %d equals the uncompressed run's: compression "
                      "did not start at iteration %d", name, zero, s, K);
    /* the weights after K updates: the uncompressed run's bits */
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &comp, w, K, &rck), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &none, w, K, &rnk), TRI_OK, "%s", tri_error_message());
    cr_expect(tu_weights_same(&rck, &rnk), "%s zero %d: weights after %d plain iterations differ", name, zero, K);
    cr_expect(!tu_weights_same(&rc, &rn), "%s zero %d: weights after %d iterations equal the uncompressed run's", name,
              zero, STEPS);
    tu_result_free(&rc);
    tu_result_free(&rn);
    tu_result_free(&rck);
    tu_result_free(&rnk);
    free(w);
}

Test(one_bit_adam, start_iter_plain_then_compressed)
{
    for (int zero = 0; zero <= 1; zero++) {
        plain_then_compressed(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER, zero);
        plain_then_compressed(TRI_COMPRESS_QSGD, TRI_COMPRESS_REDUCE_ALLGATHER, zero);
        plain_then_compressed(TRI_COMPRESS_TOPK, TRI_COMPRESS_REDUCE_ALLGATHER, zero);
    }
    plain_then_compressed(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_TWO_PHASE, 0);
}

/* ---- one unit over 4 thread ranks: the plain all-reduce and no residual before N ---- */

enum { RANKS = 4, N = 256, START = 2 };

typedef struct unit_job {
    float plain[RANKS][N];     /* tri_comm_all_reduce of the rank's gradient */
    float got[RANKS][3][N];    /* the unit's reduction at iterations 0, 1, 2 */
    float resid[RANKS][3][N];  /* the residual after each */
    bool ready[RANKS][3];
} unit_job;

static void rank_grads(float *g, int rank, int iter)
{
    tu_fill_uniform(g, N, -1.0f, 1.0f, 300 + 10 * (uint64_t)rank + (uint64_t)iter);
}

static int unit_rank(int rank, int size, tri_comm *comm, void *arg)
{
    unit_job *j = arg;
    tri_param p;
    memset(&p, 0, sizeof p);
    snprintf(p.spec.name, sizeof p.spec.name, "w");
    p.spec.ndim = 1;
    p.spec.shape[0] = p.local_shape[0] = N;
    p.numel = N;
    tri_param_unit u = {.first = 0, .count = 1, .start = 0, .len = N};
    tri_param_layout L = {.n = 1, .params = &p, .n_units = 1, .units = &u, .numel = N, .padded_numel = N,
                          .dp = size, .dp_rank = rank, .shard_numel = N / size};
    tri_compression c = tu_small_compressor(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER, START);
    tri_device *d = NULL;
    tri_dp_compress x;
    memset(&x, 0, sizeof x);
    tri_arena a;
    tri_arena_plan(&a);
    int rc = tri_device_cpu_create(&d, 1);
    if (!rc) rc = tri_dp_compress_take(&x, &a, &L, &c, 0, false);
    if (!rc) rc = tri_arena_commit(&a, d);
    if (!rc) rc = tri_dp_compress_take(&x, &a, &L, &c, 0, false);
    float buf[N];
    rank_grads(j->plain[rank], rank, 0);
    if (!rc) rc = tri_comm_all_reduce(comm, tri_tensor_1d(j->plain[rank], TRI_F32, N), TRI_REDUCE_SUM);
    for (int it = 0; it < 3 && !rc; it++) {
        rank_grads(buf, rank, it == 2 ? 0 : it); /* iteration 2 reduces iteration 0's gradient again */
        rc = tri_dp_compress_unit(&x, d, comm, tri_tensor_1d(buf, TRI_F32, N), 0, it);
        memcpy(j->got[rank][it], buf, sizeof buf);
        j->ready[rank][it] = x.residual_ready;
        if (!rc) rc = tri_dp_compress_residual_read(&x, d, 0, N, j->resid[rank][it]);
    }
    tri_arena_release(&a);
    tri_dp_compress_free(&x);
    tri_device_destroy(d);
    return rc;
}

Test(one_bit_adam, unit_plain_and_no_residual_before_start)
{
    static unit_job j;
    memset(&j, 0, sizeof j);
    cr_assert_eq(tri_run_thread_ranks(RANKS, unit_rank, &j), TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < RANKS; r++) {
        /* iteration 0: the plain all-reduce's bits; the residual untouched (never zeroed: not ready) */
        cr_expect_eq(memcmp(j.got[r][0], j.plain[r], sizeof j.plain[r]), 0, "rank %d: iteration 0 not the plain sum",
                     r);
        for (int it = 0; it < START; it++) {
            cr_expect(!j.ready[r][it], "rank %d iteration %d: residual touched before the start", r, it);
            for (int i = 0; i < N; i++)
                cr_assert_eq(j.resid[r][it][i], 0.0f, "rank %d iteration %d: residual[%d] = %g", r, it, i,
                             (double)j.resid[r][it][i]);
        }
        /* iteration START: compressed (the same gradients as iteration 0 give another sum) and the
         * residual holds what the signs dropped */
        cr_expect(j.ready[r][START], "rank %d: no residual at the start", r);
        int nonzero = 0, differ = 0;
        for (int i = 0; i < N; i++) {
            nonzero += j.resid[r][START][i] != 0.0f;
            differ += j.got[r][START][i] != j.plain[r][i];
        }
        cr_expect_gt(nonzero, N / 2, "rank %d: residual nonzero in %d of %d", r, nonzero, N);
        cr_expect_gt(differ, N / 2, "rank %d: compressed sum equals the plain one in %d of %d", r, N - differ, N);
    }
}

/* ---- deterministic mode: ZeRO 0 = ZeRO 1 with the start and the freeze; frozen AdamW = one rank ---- */

Test(one_bit_adam, deterministic_zero0_equals_zero1)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, STEPS = 4 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 8, T, cfg.vocab_size, 22);
    tu_layout a = {.tp = 1, .pp = 1, .dp = 2, .n_micro = 4, .deterministic = true, .adam_freeze_step = 1,
                   .compression = tu_small_compressor(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER, 1)};
    tu_layout z1 = a, unfrozen = a;
    z1.zero = 1;
    unfrozen.adam_freeze_step = 0;
    tu_result ra, rz, ru;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &a, w, STEPS, &ra), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &z1, w, STEPS, &rz), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &unfrozen, w, STEPS, &ru), TRI_OK, "%s", tri_error_message());
    for (int s = 0; s < STEPS; s++)
        cr_expect_eq(ra.losses[s], rz.losses[s], "step %d: ZeRO 0 %.17g vs ZeRO 1 %.17g", s, ra.losses[s],
                     rz.losses[s]);
    cr_expect(tu_weights_same(&ra, &rz), "ZeRO 0 and ZeRO 1 weights differ");
    /* the freeze acts: from update 1 on the step differs from AdamW's */
    cr_expect_eq(ra.losses[1], ru.losses[1]);
    cr_expect_neq(ra.losses[STEPS - 1], ru.losses[STEPS - 1], "the frozen run equals plain AdamW");
    tu_result_free(&ra);
    tu_result_free(&rz);
    tu_result_free(&ru);
    free(w);
}

Test(one_bit_adam, frozen_adamw_layouts_equal_one_rank)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, STEPS = 4, FREEZE = 2 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 8, T, cfg.vocab_size, 23);
    tu_layout one = {.tp = 1, .pp = 1, .dp = 1, .n_micro = 4, .deterministic = true, .adam_freeze_step = FREEZE};
    tu_layout lays[2] = {{.tp = 1, .pp = 1, .dp = 2, .n_micro = 2, .zero = 1, .deterministic = true,
                          .adam_freeze_step = FREEZE},
                         {.tp = 1, .pp = 2, .dp = 1, .n_micro = 4, .deterministic = true, .adam_freeze_step = FREEZE}};
    tu_result r1;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &one, w, STEPS, &r1), TRI_OK, "%s", tri_error_message());
    for (int k = 0; k < 2; k++) {
        tu_result rk;
        cr_assert_eq(tu_run_gpt(&cfg, B, T, &lays[k], w, STEPS, &rk), TRI_OK, "%s", tri_error_message());
        for (int s = 0; s < STEPS; s++)
            cr_expect_eq(rk.losses[s], r1.losses[s], "layout %d step %d: %.17g vs one rank %.17g", k, s, rk.losses[s],
                         r1.losses[s]);
        cr_expect(tu_weights_same(&rk, &r1), "layout %d: weights differ from one rank's", k);
        tu_result_free(&rk);
    }
    tu_result_free(&r1);
    free(w);
}

/* ---- refusals and the two spellings of PowerSGD's start ---- */

Test(one_bit_adam, bad_input_and_powersgd_spelling)
{
    tri_compression c = tu_small_compressor(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER, -1);
    cr_expect_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression-start-iter -1"), "%s", tri_error_message());
    c.start_iter = 5;
    cr_expect_eq(tri_compression_check(&c, 1), TRI_OK);
    cr_expect_eq(tri_compression_start_iter(&c), 5);
    tri_cli_compression f;
    tri_cli_compression_defaults(&f);
    tri_compression out;
    /* neither given: 1bit starts at 0, powersgd at its default 10 (unchanged) */
    f.kind = "1bit";
    cr_assert_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_OK);
    cr_expect_eq(tri_compression_start_iter(&out), 0);
    f.kind = "powersgd";
    cr_assert_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_OK);
    cr_expect_eq(tri_compression_start_iter(&out), TRI_COMPRESS_DEFAULT_POWERSGD_START);
    cr_expect_eq(out.powersgd_start_iter, TRI_COMPRESS_DEFAULT_POWERSGD_START);
    /* the generic flag alone sets PowerSGD's start */
    f.start_iter = 7;
    f.start_iter_given = true;
    cr_assert_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_OK);
    cr_expect_eq(out.powersgd_start_iter, 7);
    cr_expect_eq(tri_compression_start_iter(&out), 7);
    /* both given: they must agree */
    f.powersgd_start_iter = 3;
    f.powersgd_start_iter_given = true;
    cr_expect_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression-start-iter 7") &&
              strstr(tri_error_message(), "--powersgd-start-iter 3"), "%s", tri_error_message());
    f.powersgd_start_iter = 7;
    cr_expect_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_OK);
    /* for another compressor --powersgd-start-iter does not apply */
    f.kind = "qsgd";
    f.powersgd_start_iter = 3;
    cr_assert_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_OK);
    cr_expect_eq(tri_compression_start_iter(&out), 7);
}
