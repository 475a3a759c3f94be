/* tests/test_two_phase.c - the two-phase compressed allreduce (--grad-compression-reduce
 * two-phase; 1-bit Adam's, Tang et al. 2021 §4; engine/train/dp_compress.h): on thread ranks,
 * D = 1..5 with uneven chunks (one empty at D 4), against a float64 reference of the algorithm
 * (worker error feedback, chunk j's payloads summed by rank j in rank order plus its server residual,
 * re-compressed with server error feedback, all-gathered), the same bits on every rank, ZeRO 1's
 * owned slice equal to ZeRO 0's (its phase 2 sends each chunk only to the ranks whose slice it
 * overlaps), the wire bytes the comm counted equal to tri_compression_sent_bytes (ZeRO 1: per rank),
 * the error-feedback identity over steps (what was delivered = the gradients' sum minus the worker
 * and server residuals) for every compressor, and the server residual shown to matter: dropping it
 * each step misses the bound that keeping it meets. Training in deterministic mode is bit-identical
 * at ZeRO 0 and 1 (the same argument as test_grad_compression.c's same_bits).
 *
 * D = 1: compression is off (tri_dp_compress_take sets on only for dp > 1; engine_train warns and
 * runs uncompressed), so the unit is returned untouched and nothing is sent.
 *
 * Tolerances: the engine sums the D decoded chunk payloads in fp32 in rank order and adds the server
 * residual (D roundings of partial sums bounded by the sum of magnitudes M: D 2^-24 M, Higham 2002
 * eq. 3.4), keeps e = g + r and the residuals in fp32 (one rounding each per step), and the block
 * scale (1bit's mean |x|) moves by at most the largest change of its inputs; over S steps these
 * add, so an element of the float64 reference is met within S (D + 4) 2^-24 M_max, M_max the largest
 * sum of magnitudes of a step's terms (the decoded payloads and the residual) in the unit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/device/ops/compress_math.h"
#include "engine/train/dp_compress.h"
#include "tests/harness.h"
#include "tests/testutil.h"
#include "tools/cli/compression_flags.h"

/* One unit of N = 240 elements (divisible by 1..5, so ZeRO 1 slices are whole): a ROWS x COLS
 * matrix at 0, a vector of VEC at 176; 160..176 and 216..240 are the layout's padding. Blocks of 28
 * make 9 blocks (the last of 16): chunks of 5, 3, 3, 2 blocks at D = 2..5, the last one shorter, and
 * at D 4 the last chunk empty. */
enum { MAXD = 5, N = 240, ROWS = 8, COLS = 20, VEC = 40, VEC_AT = 176, BLOCK = 28, STEPS = 3 };

typedef struct fake_layout {
    tri_param params[2];
    tri_param_unit unit;
    tri_param_layout L;
} fake_layout;

static void make_layout(fake_layout *f, int dp, int rank)
{
    memset(f, 0, sizeof *f);
    tri_param *m = &f->params[0], *v = &f->params[1];
    snprintf(m->spec.name, sizeof m->spec.name, "m");
    m->spec.ndim = 2;
    m->spec.shape[0] = m->local_shape[0] = ROWS;
    m->spec.shape[1] = m->local_shape[1] = COLS;
    m->numel = ROWS * COLS;
    snprintf(v->spec.name, sizeof v->spec.name, "v");
    v->spec.ndim = 1;
    v->spec.shape[0] = v->local_shape[0] = VEC;
    v->numel = VEC;
    v->offset = VEC_AT;
    v->spec.global_index = 1;
    f->unit = (tri_param_unit){.first = 0, .count = 2, .start = 0, .len = N};
    f->L = (tri_param_layout){.n = 2, .params = f->params, .n_units = 1, .units = &f->unit,
                              .numel = ROWS * COLS + VEC, .padded_numel = N, .dp = dp, .dp_rank = rank,
                              .shard_numel = N / dp};
}

static bool padding(int64_t i)
{
    return (i >= ROWS * COLS && i < VEC_AT) || i >= VEC_AT + VEC;
}

/* Rank k's gradient of step s: a persistent part plus noise, zero on the padding (as the engine's). */
static void rank_grads(float *g, int rank, int step)
{
    tu_fill_uniform(g, N, -1.0f, 1.0f, 100 + 10 * (uint64_t)step + (uint64_t)rank);
    for (int64_t i = 0; i < N; i++)
        g[i] = padding(i) ? 0.0f : g[i] + (float)(i % 9) * 0.25f;
}

typedef struct job {
    tri_compression c;
    int stage, steps;
    bool drop_server;                 /* zero the server residual after every step */
    float out[MAXD][STEPS][N];        /* each rank's reduced unit per step (ZeRO 1: its slice) */
    float resid[MAXD][N], server[MAXD][N]; /* after the last step, as the checkpoint reads them */
    uint64_t wire[MAXD][STEPS];
    double *delivered, *truth;        /* error_feedback_matters: running sums (rank 0), N each */
} job;

static int run_rank(int rank, int size, tri_comm *comm, void *arg)
{
    job *j = arg;
    tri_device *d = NULL;
    fake_layout f;
    make_layout(&f, size, rank);
    tri_dp_compress x;
    memset(&x, 0, sizeof x);
    tri_arena a;
    tri_arena_plan(&a);
    int rc = tri_device_cpu_create(&d, 1);
    if (!rc) rc = tri_dp_compress_take(&x, &a, &f.L, &j->c, j->stage, false);
    if (!rc) rc = tri_arena_commit(&a, d);
    if (!rc) rc = tri_dp_compress_take(&x, &a, &f.L, &j->c, j->stage, false);
    float buf[N], zeros[N] = {0};
    for (int s = 0; s < j->steps && !rc; s++) {
        rank_grads(buf, rank, s);
        if (j->truth && rank == 0)
            for (int k = 0; k < size; k++) {
                float gk[N];
                rank_grads(gk, k, s);
                for (int i = 0; i < N; i++)
                    j->truth[i] += gk[i];
            }
        uint64_t before = tri_comm_wire_bytes(comm, TRI_COMM_KINDS);
        rc = tri_dp_compress_unit(&x, d, comm, tri_tensor_1d(buf, TRI_F32, N), 0, s);
        uint64_t sent = tri_comm_wire_bytes(comm, TRI_COMM_KINDS) - before;
        if (s < STEPS) {
            j->wire[rank][s] = sent;
            memcpy(j->out[rank][s], buf, sizeof buf);
        }
        if (j->delivered && rank == 0)
            for (int i = 0; i < N; i++)
                j->delivered[i] += buf[i];
        if (!rc && j->drop_server)
            rc = tri_dp_compress_server_write(&x, d, 0, N, zeros);
    }
    if (!rc && x.on) rc = tri_dp_compress_residual_read(&x, d, 0, N, j->resid[rank]);
    if (!rc && x.on) rc = tri_dp_compress_server_read(&x, d, 0, N, j->server[rank]);
    tri_arena_release(&a);
    tri_dp_compress_free(&x);
    tri_device_destroy(d);
    return rc;
}

static tri_compression two_phase(tri_compression_kind kind)
{
    tri_compression c = tri_compression_defaults();
    c.kind = kind;
    c.reduce = TRI_COMPRESS_REDUCE_TWO_PHASE;
    c.block_size = BLOCK;
    c.topk_fraction = 0.2f;
    c.seed = 9;
    return c;
}

/* ---- the float64 reference of the algorithm (the compressor C applied through the CPU ops to
 * the fp32 rounding of its input: C itself is tested against float64 in test_grad_compression.c) */

static tri_device *ref_dev;

/* out (n) = D(C(x)) for x (n) in double. */
static void codec(const tri_compression *c, const double *x, int64_t n, double *out)
{
    float xf[N], dec[N] = {0};
    int32_t pay[2 * N + 16];
    for (int64_t i = 0; i < n; i++)
        xf[i] = (float)x[i];
    int64_t words = tri_compression_payload_bytes(c, 1, n) / 4;
    tri_tensor p = tri_tensor_1d(pay, TRI_I32, words), xt = tri_tensor_1d(xf, TRI_F32, n),
               dt = tri_tensor_1d(dec, TRI_F32, n);
    if (c->kind == TRI_COMPRESS_TOPK) {
        cr_assert_eq(tri_op_compress_topk_pack(ref_dev, p, xt), TRI_OK);
        cr_assert_eq(tri_op_compress_topk_unpack_add(ref_dev, dt, p, 0, 1.0f), TRI_OK);
    } else {
        cr_assert_eq(tri_op_compress_sign_pack(ref_dev, p, xt, c->block_size), TRI_OK);
        cr_assert_eq(tri_op_compress_unpack_add(ref_dev, dt, p, n, 0, c->block_size, 0, 1.0f), TRI_OK);
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = dec[i];
}

/* The reference's result of every step into want[s] (N), and per step the largest sum of term
 * magnitudes into mag[s]. */
static void reference(const tri_compression *c, int D, double want[STEPS][N], double mag[STEPS])
{
    static double r[MAXD][N], rs[N], dec[MAXD][N];
    memset(r, 0, sizeof r);
    memset(rs, 0, sizeof rs);
    int64_t chunk = tri_compression_chunk(c, N, D);
    for (int s = 0; s < STEPS; s++) {
        mag[s] = 0.0;
        for (int k = 0; k < D; k++) { /* workers: e = g + r, per chunk D(C(e_j)), r = e - D(C(e)) */
            float g[N];
            rank_grads(g, k, s);
            for (int64_t i = 0; i < N; i++)
                r[k][i] += g[i];
            for (int64_t lo = 0; lo < N; lo += chunk) {
                int64_t len = N - lo < chunk ? N - lo : chunk;
                codec(c, r[k] + lo, len, dec[k] + lo);
            }
            for (int64_t i = 0; i < N; i++)
                r[k][i] = padding(i) ? 0.0 : r[k][i] - dec[k][i];
        }
        for (int64_t lo = 0; lo < N; lo += chunk) { /* servers: chunk j's sum in rank order + r_s */
            int64_t len = N - lo < chunk ? N - lo : chunk;
            double sum[N], out[N];
            for (int64_t i = lo; i < lo + len; i++) {
                double m = fabs(rs[i]);
                sum[i - lo] = 0.0;
                for (int k = 0; k < D; k++) {
                    sum[i - lo] += dec[k][i];
                    m += fabs(dec[k][i]);
                }
                sum[i - lo] += rs[i];
                mag[s] = fmax(mag[s], m);
            }
            codec(c, sum, len, out);
            for (int64_t i = lo; i < lo + len; i++) {
                want[s][i] = out[i - lo];
                rs[i] = padding(i) ? 0.0 : sum[i - lo] - out[i - lo];
            }
        }
    }
}

/* The bytes rank r sends at ZeRO 1: phase 1's D - 1 chunk payloads, then its re-compressed chunk to
 * each rank whose owned slice it overlaps (tri_compression_chunk_read_by; checked by hand in
 * test_compression_bytes.c), every chunk at the longest chunk's payload size. */
static uint64_t zero1_bytes(const tri_compression *c, int D, int r)
{
    int64_t chunk_bytes = tri_compression_payload_bytes(c, 1, tri_compression_chunk(c, N, D));
    int readers = 0;
    for (int k = 0; k < D; k++)
        readers += tri_compression_chunk_read_by(c, N, D, 1, r, k);
    return (uint64_t)((D - 1 + readers) * chunk_bytes);
}

static void check_against_reference(tri_compression_kind kind)
{
    static job j0, j1;
    static double want[STEPS][N];
    double mag[STEPS];
    cr_assert_eq(tri_device_cpu_create(&ref_dev, 1), TRI_OK);
    for (int D = 1; D <= MAXD; D++) {
        memset(&j0, 0, sizeof j0);
        j0.c = two_phase(kind);
        j0.steps = STEPS;
        j1 = j0;
        j1.stage = 1;
        cr_assert_eq(tri_run_thread_ranks(D, run_rank, &j0), TRI_OK, "D %d: %s", D, tri_error_message());
        cr_assert_eq(tri_run_thread_ranks(D, run_rank, &j1), TRI_OK, "D %d ZeRO 1: %s", D, tri_error_message());
        if (D == 1) { /* compression off: the gradient untouched, nothing sent */
            float g[N];
            for (int s = 0; s < STEPS; s++) {
                rank_grads(g, 0, s);
                cr_expect_eq(memcmp(j0.out[0][s], g, sizeof g), 0, "D 1 step %d: the unit changed", s);
                cr_expect_eq(j0.wire[0][s], 0u);
            }
            continue;
        }
        reference(&j0.c, D, want, mag);
        uint64_t bytes = (uint64_t)tri_compression_sent_bytes(&j0.c, 1, N, D, 0, true), busiest = 0;
        for (int r = 0; r < D; r++)
            busiest = zero1_bytes(&j0.c, D, r) > busiest ? zero1_bytes(&j0.c, D, r) : busiest;
        cr_expect_eq(busiest, (uint64_t)tri_compression_sent_bytes(&j0.c, 1, N, D, 1, true),
                     "ZeRO 1's formula is the busiest rank's");
        for (int r = 0; r < D; r++)
            for (int s = 0; s < STEPS; s++) {
                cr_expect_eq(j0.wire[r][s], bytes, "%s D %d rank %d: %llu wire bytes, formula %llu",
                             tri_compression_name(kind), D, r, (unsigned long long)j0.wire[r][s],
                             (unsigned long long)bytes);
                cr_expect_eq(j1.wire[r][s], zero1_bytes(&j0.c, D, r),
                             "%s D %d rank %d: ZeRO 1 sent %llu bytes, formula %llu", tri_compression_name(kind), D, r,
                             (unsigned long long)j1.wire[r][s], (unsigned long long)zero1_bytes(&j0.c, D, r));
                double tol = (s + 1) * (D + 4) * ldexp(mag[s], -24);
                for (int64_t i = 0; i < N; i++) {
                    float got = j0.out[r][s][i];
                    cr_expect_leq(fabs((double)got - want[s][i]), tol, "%s D %d rank %d step %d element %lld: %.9g vs "
                                  "float64 %.9g", tri_compression_name(kind), D, r, s, (long long)i, (double)got,
                                  want[s][i]);
                    /* the same bits on every rank, and ZeRO 1's owned slice is ZeRO 0's */
                    cr_expect_eq(got, j0.out[0][s][i], "D %d rank %d step %d element %lld differs from rank 0", D, r,
                                 s, (long long)i);
                    if (i >= r * (N / D) && i < (r + 1) * (N / D))
                        cr_expect_eq(j1.out[r][s][i], got, "D %d rank %d step %d: ZeRO 1 element %lld", D, r, s,
                                     (long long)i);
                }
            }
    }
    tri_device_destroy(ref_dev);
}

Test(two_phase, one_bit_against_float64_reference_d1_to_5) { check_against_reference(TRI_COMPRESS_1BIT); }
Test(two_phase, topk_against_float64_reference_d1_to_5) { check_against_reference(TRI_COMPRESS_TOPK); }

/* Error feedback's identity (every compressor, qsgd included): per step the delivered unit is
 * sum_k (g_k + r_k - r_k') + r_s - r_s', so over the steps sum_t out_t = sum_t sum_k g_k,t -
 * sum_k r_k - r_s (the residuals after the last step; r_s read from every rank, each holding its
 * chunk: the checkpoint's view), over the parameters' elements (the padding carries no residual).
 * In fp32 each step's terms round a few times: within STEPS (D + 4) 2^-24 of the terms' magnitudes. */
static void identity(tri_compression_kind kind)
{
    static job j;
    for (int D = 2; D <= MAXD; D++) {
        memset(&j, 0, sizeof j);
        j.c = two_phase(kind);
        j.steps = STEPS;
        cr_assert_eq(tri_run_thread_ranks(D, run_rank, &j), TRI_OK, "D %d: %s", D, tri_error_message());
        for (int64_t i = 0; i < N; i++) {
            if (padding(i)) { /* no error feedback there: the residuals stay zero */
                for (int k = 0; k < D; k++)
                    cr_expect(j.resid[k][i] == 0.0f && j.server[k][i] == 0.0f, "D %d: residual on padding %lld", D,
                              (long long)i);
                continue;
            }
            double lhs = 0.0, rhs = 0.0, mag = 0.0;
            for (int s = 0; s < STEPS; s++) {
                lhs += j.out[0][s][i];
                mag += fabs(j.out[0][s][i]);
                for (int k = 0; k < D; k++) {
                    float g[N];
                    rank_grads(g, k, s);
                    rhs += g[i];
                    mag += fabs(g[i]);
                }
            }
            for (int k = 0; k < D; k++) {
                rhs -= (double)j.resid[k][i] + (double)j.server[k][i];
                mag += fabs(j.resid[k][i]) + fabs(j.server[k][i]);
            }
            cr_expect_leq(fabs(lhs - rhs), STEPS * (D + 4) * ldexp(mag, -24), "%s D %d element %lld: delivered %.9g, "
                          "gradients minus residuals %.9g", tri_compression_name(kind), D, (long long)i, lhs, rhs);
        }
        /* a rank's server residual is zero outside its own chunk */
        int64_t chunk = tri_compression_chunk(&j.c, N, D);
        for (int k = 0; k < D; k++)
            for (int64_t i = 0; i < N; i++)
                if (i < k * chunk || i >= (k + 1) * chunk)
                    cr_expect_eq(j.server[k][i], 0.0f, "D %d rank %d holds element %lld of another chunk", D, k,
                                 (long long)i);
    }
}

Test(two_phase, error_feedback_identity_1bit) { identity(TRI_COMPRESS_1BIT); }
Test(two_phase, error_feedback_identity_qsgd) { identity(TRI_COMPRESS_QSGD); }
Test(two_phase, error_feedback_identity_topk) { identity(TRI_COMPRESS_TOPK); }

/* ---- the server residual matters ----
 * With both residuals kept, sum_t out_t - sum_t sum_k g = -(sum_k r_k + r_s): bounded, since each
 * residual of a delta-contraction stays within 2 sqrt(1 - delta) / delta of the largest input it
 * compresses (Karimireddy et al. 2019, Lemma 3; 1bit with blocks of b: delta = 1 / b). The worker
 * inputs are the g_k (norm <= G), the server's the sum of D decoded payloads, each within
 * ||e_k|| (1 + sqrt(1 - delta)) of its input: the bound is D L G + L (D (1 + L) G) with
 * L = 2 sqrt(1 - delta) / delta, a constant in the steps. Dropping the server residual makes the
 * error grow with the steps (the server's compression error of a persistent gradient adds up),
 * which misses that bound. */
static double two_phase_error(bool keep_server, int steps, int D, double *g_max)
{
    static job j;
    memset(&j, 0, sizeof j);
    j.c = two_phase(TRI_COMPRESS_1BIT);
    j.steps = steps;
    j.drop_server = !keep_server;
    double *delivered = calloc(N, sizeof *delivered), *truth = calloc(N, sizeof *truth);
    j.delivered = delivered;
    j.truth = truth;
    cr_assert_eq(tri_run_thread_ranks(D, run_rank, &j), TRI_OK, "%s", tri_error_message());
    double err = 0.0; /* over the parameters (the padding's decoded values are no gradient) */
    for (int i = 0; i < N; i++)
        err += padding(i) ? 0.0 : (delivered[i] - truth[i]) * (delivered[i] - truth[i]);
    *g_max = 0.0;
    for (int s = 0; s < steps; s++) /* the largest gradient norm of any rank */
        for (int k = 0; k < D; k++) {
            float g[N];
            rank_grads(g, k, s);
            double n2 = 0.0;
            for (int i = 0; i < N; i++)
                n2 += (double)g[i] * g[i];
            *g_max = fmax(*g_max, sqrt(n2));
        }
    free(delivered);
    free(truth);
    return sqrt(err);
}

Test(two_phase, server_error_feedback_matters, .timeout = 120)
{
    enum { D = 4, LONG = 300 };
    double g_kept, g_dropped;
    double kept = two_phase_error(true, LONG, D, &g_kept), dropped = two_phase_error(false, LONG, D, &g_dropped);
    double delta = 1.0 / BLOCK, L = 2.0 * sqrt(1.0 - delta) / delta;
    double bound = D * L * g_kept + L * D * (1.0 + L) * g_kept;
    cr_expect_leq(kept, bound, "both residuals kept: error %g above the bound %g", kept, bound);
    /* the bound is loose; the separation is what shows the server residual matters: the dropped
     * run's error grows with the steps and ends far above the kept run's */
    cr_expect_gt(dropped, 10.0 * kept, "dropping the server residual: %g vs kept %g", dropped, kept);
    double short_err = two_phase_error(false, LONG / 3, D, &g_dropped);
    cr_expect_gt(dropped, 2.0 * short_err, "without the server residual the error grows with the steps: %g after %d, "
                 "%g after %d", dropped, LONG, short_err, LONG / 3);
}

/* ---- training: ZeRO 0 and 1 bit-identical in deterministic mode; composes with tp and pp ---- */

static void same_bits(tri_compression_kind kind)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, TRAIN = 3 };
    int32_t *w = tu_make_windows((int64_t)TRAIN * 8, T, cfg.vocab_size, 11);
    tri_compression c = two_phase(kind);
    c.block_size = 64;
    tu_layout a = {.tp = 1, .pp = 1, .dp = 4, .n_micro = 2, .deterministic = true, .compression = c};
    tu_layout z1 = a, gathered = a;
    z1.zero = 1;
    gathered.compression.reduce = TRI_COMPRESS_REDUCE_ALLGATHER;
    tu_result ra, rz, rg;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &a, w, TRAIN, &ra), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &z1, w, TRAIN, &rz), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &gathered, w, TRAIN, &rg), TRI_OK, "%s", tri_error_message());
    for (int s = 0; s < TRAIN; s++)
        cr_expect_eq(ra.losses[s], rz.losses[s], "%s step %d: ZeRO 0 %.9g vs ZeRO 1 %.9g", tri_compression_name(kind),
                     s, ra.losses[s], rz.losses[s]);
    for (int i = 0; i < ra.n; i++)
        cr_expect_eq(memcmp(ra.weights[i], rz.weights[i], (size_t)ra.numel[i] * 4), 0, "%s: weights of %s",
                     tri_compression_name(kind), ra.names[i]);
    /* two-phase compresses the sum a second time: not the all-gather's result */
    cr_expect_neq(rg.losses[TRAIN - 1], ra.losses[TRAIN - 1], "%s: two-phase equals allgather",
                  tri_compression_name(kind));
    tu_result_free(&ra);
    tu_result_free(&rz);
    tu_result_free(&rg);
    free(w);
}

Test(two_phase, zero0_zero1_bit_identical_1bit, .timeout = 120) { same_bits(TRI_COMPRESS_1BIT); }
Test(two_phase, zero0_zero1_bit_identical_qsgd, .timeout = 120) { same_bits(TRI_COMPRESS_QSGD); }

/* ---- refusals ---- */

Test(two_phase, bad_input)
{
    tri_compression c = two_phase(TRI_COMPRESS_POWERSGD);
    cr_expect_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "two-phase") && strstr(tri_error_message(), "powersgd"), "%s",
              tri_error_message());
    c = two_phase(TRI_COMPRESS_NONE);
    cr_expect_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression none"), "%s", tri_error_message());
    c = two_phase(TRI_COMPRESS_1BIT);
    cr_expect_eq(tri_compression_check(&c, 2), TRI_EINVAL, "ZeRO 2 refused as with allgather");
    cr_expect_eq(tri_compression_check(&c, 1), TRI_OK);
    tri_cli_compression f;
    tri_cli_compression_defaults(&f);
    tri_compression out;
    f.kind = "1bit";
    f.reduce = "ring";
    cr_expect_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression-reduce ring"), "%s", tri_error_message());
    f.reduce = "two-phase";
    cr_expect_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_OK);
    cr_expect_eq(out.reduce, TRI_COMPRESS_REDUCE_TWO_PHASE);
    /* dp 1: uncompressed, and the reduction back to allgather (none takes no two-phase) */
    cr_expect_eq(tri_cli_compression_resolve(&f, 1, 0, 1, &out), TRI_OK);
    cr_expect(out.kind == TRI_COMPRESS_NONE && out.reduce == TRI_COMPRESS_REDUCE_ALLGATHER);
    cr_expect_eq(tri_compression_check(&out, 0), TRI_OK);
    for (int r = 0; r < TRI_COMPRESS_REDUCES; r++)
        cr_expect_eq(tri_compression_reduce_parse(tri_compression_reduce_name((tri_compression_reduce)r)), r);
    tri_error_clear();
}
