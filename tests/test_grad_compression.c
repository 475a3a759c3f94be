/* tests/test_grad_compression.c - the compressed data-parallel gradient reduction (issue 32):
 * engine/device/ops/compress_math.h's compressors on the CPU backend against float64 references
 * of the papers' algorithms, error feedback shown to matter, the reduction over thread ranks
 * against the float64 sum of the decoded payloads with its wire bytes against
 * tri_compression_sent_bytes, PowerSGD against a float64 power-iteration step, compressed training
 * equal across layouts where the math promises it, and the refusals.
 *
 * Tolerances: a payload's scales are double sums rounded once to fp32, so the reference (the same
 * double sum, in the same order) matches exactly; a decoded sum over D ranks in fp32, in rank order,
 * is within (D - 1) * 2^-24 * sum_k |t_k| of the float64 sum of the same decoded terms (Higham 2002,
 * eq. 3.4; plus one rounding per term for the decode's multiply). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/device/ops/compress_math.h"
#include "engine/train/dp_compress.h"
#include "engine/train/powersgd_q.h"
#include "tests/harness.h"
#include "tests/testutil.h"
#include "tools/cli/compression_flags.h"

static tri_device *cpu(void)
{
    tri_device *d = NULL;
    cr_assert_eq(tri_device_cpu_create(&d, 2), TRI_OK);
    return d;
}

static tri_tensor host_f32(float *x, int64_t n)
{
    return tri_tensor_1d(x, TRI_F32, n);
}

/* ---- 1bit: Seide et al. 2014 ---- */

Test(grad_compression, one_bit_against_float64)
{
    tri_device *d = cpu();
    enum { N = 1000, BLOCK = 64 }; /* the last block is partial, the last word too */
    float e[N], out[N];
    tu_fill_uniform(e, N, -1.0f, 1.0f, 7);
    e[5] = 0.0f; /* zero decodes as +scale */
    int64_t words = tri_compress_words(N, BLOCK, 0), nb = (N + BLOCK - 1) / BLOCK;
    cr_assert_eq(words, nb + (N + 31) / 32);
    int32_t *pay = calloc((size_t)words, sizeof *pay);
    cr_assert_eq(tri_op_compress_sign_pack(d, tri_tensor_1d(pay, TRI_I32, words), host_f32(e, N), BLOCK), TRI_OK);
    memset(out, 0, sizeof out);
    cr_assert_eq(tri_op_compress_unpack_add(d, host_f32(out, N), tri_tensor_1d(pay, TRI_I32, words), N, 0, BLOCK, 0,
                                            1.0f), TRI_OK);
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * BLOCK, hi = lo + BLOCK < N ? lo + BLOCK : N;
        double s = 0.0;
        for (int64_t i = lo; i < hi; i++)
            s += fabs((double)e[i]);
        float scale = (float)(s / (double)(hi - lo)); /* the block's mean |e|, rounded once */
        cr_assert_eq(tri_compress_word_float(pay[b]), scale, "block %lld scale", (long long)b);
        for (int64_t i = lo; i < hi; i++) {
            uint32_t bit = ((uint32_t)pay[nb + i / 32] >> (i % 32)) & 1u;
            cr_assert_eq(bit, (uint32_t)(e[i] < 0.0f), "sign bit of element %lld", (long long)i);
            cr_assert_eq(out[i], e[i] < 0.0f ? -scale : scale, "decoded element %lld", (long long)i);
        }
    }
    /* the unused bits of the last word are zero */
    cr_assert_eq((uint32_t)pay[words - 1] >> (N % 32), 0u);
    /* decoding a slice gives the same values */
    float part[100] = {0};
    cr_assert_eq(tri_op_compress_unpack_add(d, host_f32(part, 100), tri_tensor_1d(pay, TRI_I32, words), N, 333, BLOCK,
                                            0, 1.0f), TRI_OK);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(part[i], out[333 + i]);
    free(pay);
    tri_device_destroy(d);
}

/* ---- qsgd: Alistarh et al. 2017 ---- */

Test(grad_compression, qsgd_levels_and_unbiased)
{
    tri_device *d = cpu();
    enum { N = 64, BLOCK = 64, S = 3, K = 4000 };
    float e[N], out[N];
    tu_fill_uniform(e, N, -1.0f, 1.0f, 3);
    double norm = 0.0;
    for (int i = 0; i < N; i++)
        norm += (double)e[i] * e[i];
    norm = sqrt(norm);
    int64_t words = tri_compress_words(N, BLOCK, S);
    cr_assert_eq(tri_compress_code_bits(S), 3);
    cr_assert_eq(words, 1 + (N * 3 + 31) / 32);
    int32_t *pay = calloc((size_t)words, sizeof *pay), *again = calloc((size_t)words, sizeof *again);
    double mean[N] = {0};
    float shrink = tri_qsgd_shrink(BLOCK, S);
    for (int k = 0; k < K; k++) {
        cr_assert_eq(tri_op_compress_qsgd_pack(d, tri_tensor_1d(pay, TRI_I32, words), host_f32(e, N), BLOCK, S, 99,
                                               (uint64_t)k), TRI_OK);
        cr_assert_eq(tri_compress_word_float(pay[0]), (float)norm);
        memset(out, 0, sizeof out);
        tri_op_compress_unpack_add(d, host_f32(out, N), tri_tensor_1d(pay, TRI_I32, words), N, 0, BLOCK, S, 1.0f);
        for (int i = 0; i < N; i++) {
            /* the level is floor(p) or floor(p) + 1, p = |e| / norm * s */
            double p = fabs((double)e[i]) / norm * S, l = fabs((double)out[i]) / shrink / norm * S;
            cr_assert(fabs(l - floor(p)) < 1e-4 || fabs(l - floor(p) - 1) < 1e-4, "element %d: level %g for p %g", i,
                      l, p);
            mean[i] += (double)out[i] / shrink / K;
        }
        if (k == 0) { /* the same seed and stream give the same bits */
            tri_op_compress_qsgd_pack(d, tri_tensor_1d(again, TRI_I32, words), host_f32(e, N), BLOCK, S, 99, 0);
            cr_assert_eq(memcmp(pay, again, (size_t)words * 4), 0);
        }
    }
    /* unbiased: each decoded value is norm / s times a Bernoulli step, variance <= norm^2 / (4 s^2);
     * the mean of K draws is within 5 standard deviations, norm / (2 s sqrt(K)) each (a miss per
     * element has probability < 6e-7), plus fp32 rounding */
    double bound = 5.0 * norm / (2.0 * S * sqrt((double)K)) + 1e-5 * norm;
    for (int i = 0; i < N; i++)
        cr_expect_leq(fabs(mean[i] - e[i]), bound, "element %d: mean %g vs %g (bound %g)", i, mean[i], (double)e[i],
                      bound);
    free(pay);
    free(again);
    tri_device_destroy(d);
}

/* ---- top-k: Aji & Heafield 2017 ---- */

static const float *sort_e;
static int cmp_idx(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    double x = fabs((double)sort_e[i]), y = fabs((double)sort_e[j]);
    if (x != y)
        return x > y ? -1 : 1;
    return i < j ? -1 : 1; /* ties: the lower index first */
}
static int cmp_plain(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    return i < j ? -1 : i > j;
}

static void check_topk(const float *e, int64_t n, int64_t k)
{
    tri_device *d = cpu();
    int32_t *pay = calloc((size_t)(2 * k), sizeof *pay);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    cr_assert_eq(tri_op_compress_topk_pack(d, tri_tensor_1d(pay, TRI_I32, 2 * k), host_f32((float *)e, n)), TRI_OK);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    sort_e = e;
    qsort(idx, (size_t)n, sizeof *idx, cmp_idx);
    qsort(idx, (size_t)k, sizeof *idx, cmp_plain);
    for (int64_t j = 0; j < k; j++) {
        cr_assert_eq((int64_t)(uint32_t)pay[2 * j], idx[j], "pair %lld: index %d, expected %lld", (long long)j,
                     pay[2 * j], (long long)idx[j]);
        cr_assert_eq(tri_compress_word_float(pay[2 * j + 1]), e[idx[j]]);
    }
    free(pay);
    free(idx);
    tri_device_destroy(d);
}

Test(grad_compression, topk_exact_selection_and_ties)
{
    enum { N = 5000 };
    float *e = malloc(N * sizeof *e);
    tu_fill_uniform(e, N, -1.0f, 1.0f, 5);
    check_topk(e, N, 50);
    check_topk(e, N, 1);
    check_topk(e, N, N);
    /* ties: magnitudes from a few values, signs mixed; the lower indices win */
    for (int i = 0; i < N; i++)
        e[i] = (float)((i * 7) % 5) * (i % 2 ? -0.25f : 0.25f);
    check_topk(e, N, 1500);
    check_topk(e, N, 1001);
    free(e);
}

/* ---- error feedback: Seide et al. 2014, Karimireddy et al. 2019 ----
 * The transmitted sum after T steps is sum_t D(C(e_t)) = sum_t g_t - r_T, so with error feedback it
 * tracks the true sum within ||r_T||, which stays bounded: ||r_t|| <= 2 sqrt(1 - d) / d max ||g||
 * for a d-contraction (Karimireddy et al. 2019, Lemma 3; 1bit with blocks of b is one with
 * d = 1 / b). Without the residual the error grows with T: for a constant g it is
 * T ||D(C(g)) - g||. */
static double transmitted_error(bool feedback, int steps, double *g_norm)
{
    tri_device *d = cpu();
    enum { N = 512, BLOCK = 64 };
    int64_t words = tri_compress_words(N, BLOCK, 0);
    int32_t *pay = calloc((size_t)words, sizeof *pay);
    float g[N], r[N] = {0}, sent[N] = {0};
    double truth[N] = {0};
    *g_norm = 0.0;
    for (int t = 0; t < steps; t++) {
        tu_fill_uniform(g, N, -0.1f, 0.1f, 1000 + (uint64_t)t);
        for (int i = 0; i < N; i++) {
            g[i] += (float)(i % 9) * 0.05f; /* a persistent gradient plus noise */
            truth[i] += g[i];
            r[i] = feedback ? r[i] + g[i] : g[i];
            *g_norm = fmax(*g_norm, 0.0);
        }
        double gn = 0.0;
        for (int i = 0; i < N; i++)
            gn += (double)g[i] * g[i];
        *g_norm = fmax(*g_norm, sqrt(gn));
        tri_op_compress_sign_pack(d, tri_tensor_1d(pay, TRI_I32, words), host_f32(r, N), BLOCK);
        tri_op_compress_unpack_add(d, host_f32(sent, N), tri_tensor_1d(pay, TRI_I32, words), N, 0, BLOCK, 0, 1.0f);
        tri_op_compress_unpack_add(d, host_f32(r, N), tri_tensor_1d(pay, TRI_I32, words), N, 0, BLOCK, 0, -1.0f);
    }
    double err = 0.0;
    for (int i = 0; i < N; i++)
        err += ((double)sent[i] - truth[i]) * ((double)sent[i] - truth[i]);
    free(pay);
    tri_device_destroy(d);
    return sqrt(err);
}

Test(grad_compression, error_feedback_matters)
{
    enum { STEPS = 400, BLOCK = 64 };
    double gmax, gmax2;
    double with = transmitted_error(true, STEPS, &gmax), without = transmitted_error(false, STEPS, &gmax2);
    double delta = 1.0 / BLOCK, lemma = 2.0 * sqrt(1.0 - delta) / delta * gmax;
    /* with feedback: bounded by the lemma (plus fp32 rounding of the running sums) */
    cr_expect_leq(with, lemma + 1e-3 * STEPS * gmax, "with feedback: error %g above the bound %g", with, lemma);
    /* and far below the error without it, which grows with the steps */
    cr_expect_gt(without, 10.0 * with, "without feedback %g vs with %g", without, with);
    cr_expect_gt(without, 0.05 * STEPS * gmax, "without feedback the error grows with T: %g", without);
    /* the same bound fails when the residual is dropped */
    cr_expect_gt(without, lemma, "a run that drops the residual must miss the bound");
}

/* ---- the reduction over thread ranks ---- */

enum { RANKS = 4, ROWS = 8, COLS = 24, VEC = 40 };

/* One unit: a ROWS x COLS matrix at offset 0 and a vector at 192 (aligned to 64), len 256. */
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
    v->offset = 192;
    v->spec.global_index = 1;
    f->unit = (tri_param_unit){.first = 0, .count = 2, .start = 0, .len = 256};
    f->L = (tri_param_layout){.n = 2, .params = f->params, .n_units = 1, .units = &f->unit, .numel = 232,
                              .padded_numel = 256, .dp = dp, .dp_rank = rank, .shard_numel = 256 / dp};
}

typedef struct red_job {
    tri_compression c;
    int stage;
    float result[RANKS][256];
    float grads[RANKS][256];
    int32_t payloads[RANKS][256];
    int64_t words;
    uint64_t wire[RANKS];
    float q0[RANKS][4 * COLS];
} red_job;

static void rank_grads(float *g, int rank)
{
    tu_fill_uniform(g, 256, -1.0f, 1.0f, 100 + (uint64_t)rank);
    for (int i = 232; i < 256; i++)
        g[i] = 0.0f;
    for (int i = 192 + VEC; i < 256; i++)
        g[i] = 0.0f;
}

static int reduce_rank(int rank, int size, tri_comm *comm, void *arg)
{
    red_job *j = arg;
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
    float *g = j->grads[rank];
    rank_grads(g, rank);
    float buf[256];
    memcpy(buf, g, sizeof buf);
    tri_tensor t = tri_tensor_1d(buf, TRI_F32, 256);
    uint64_t before = tri_comm_wire_bytes(comm, TRI_COMM_KINDS);
    /* powersgd: Q starts from its seeded initial value (the reference recomputes it) */
    if (!rc) rc = tri_dp_compress_unit(&x, d, comm, t, 0, j->c.kind == TRI_COMPRESS_POWERSGD ? 100 : 3);
    j->wire[rank] = tri_comm_wire_bytes(comm, TRI_COMM_KINDS) - before;
    if (!rc) {
        memcpy(j->result[rank], buf, sizeof buf);
        if (j->c.kind != TRI_COMPRESS_POWERSGD) {
            j->words = tri_compression_payload_bytes(&j->c, 1, 256) / 4;
            for (int k = 0; k < size && rank == 0; k++)
                memcpy(j->payloads[k], (const int32_t *)x.gathered.data + k * j->words, (size_t)j->words * 4);
        }
    }
    tri_arena_release(&a);
    tri_dp_compress_free(&x);
    tri_device_destroy(d);
    return rc;
}

static void check_reduction(tri_compression_kind kind, int stage)
{
    static red_job j;
    memset(&j, 0, sizeof j);
    j.c = tri_compression_defaults();
    j.c.kind = kind;
    j.c.block_size = 32;
    j.c.topk_fraction = 0.1f;
    j.c.seed = 5;
    j.stage = stage;
    cr_assert_eq(tri_run_thread_ranks(RANKS, reduce_rank, &j), TRI_OK, "%s", tri_error_message());
    int levels = kind == TRI_COMPRESS_QSGD ? j.c.qsgd_levels : 0;
    int64_t lo = stage == 0 ? 0 : 0, hi = stage == 0 ? 256 : 256 / RANKS;
    for (int r = 0; r < RANKS; r++) {
        /* the wire bytes the comm counted are the ones the design states */
        cr_expect_eq(j.wire[r], (uint64_t)tri_compression_sent_bytes(&j.c, 1, 256, RANKS, stage, true),
                     "%s rank %d: %llu wire bytes", tri_compression_name(kind), r, (unsigned long long)j.wire[r]);
        int64_t first = stage == 0 ? 0 : (int64_t)r * (256 / RANKS);
        for (int64_t i = lo; i < hi; i++) {
            double sum = 0.0, mag = 0.0;
            for (int k = 0; k < RANKS; k++) {
                const int32_t *p = j.payloads[k];
                double t = 0.0;
                if (kind == TRI_COMPRESS_TOPK) {
                    for (int64_t q = 0; q < j.words / 2; q++)
                        if ((int64_t)(uint32_t)p[2 * q] == first + i)
                            t = tri_compress_word_float(p[2 * q + 1]);
                } else {
                    t = tri_compress_decode(p, 256, first + i, j.c.block_size, levels);
                }
                sum += t;
                mag += fabs(t);
            }
            float got = j.result[r][first + i];
            cr_expect_leq(fabs((double)got - sum), (RANKS + 1) * ldexp(mag, -24), "%s rank %d element %lld: %g vs %g",
                          tri_compression_name(kind), r, (long long)(first + i), (double)got, sum);
            /* every rank holds the same bits of what it decodes */
            if (stage == 0)
                cr_expect_eq(got, j.result[0][first + i]);
        }
    }
}

Test(grad_compression, reduction_over_ranks_1bit) { check_reduction(TRI_COMPRESS_1BIT, 0); check_reduction(TRI_COMPRESS_1BIT, 1); }
Test(grad_compression, reduction_over_ranks_qsgd) { check_reduction(TRI_COMPRESS_QSGD, 0); check_reduction(TRI_COMPRESS_QSGD, 1); }
Test(grad_compression, reduction_over_ranks_topk) { check_reduction(TRI_COMPRESS_TOPK, 0); check_reduction(TRI_COMPRESS_TOPK, 1); }

/* PowerSGD (Vogels et al. 2019, Algorithm 1) against float64: P = sum_r M_r Q, orthonormalised, Q' =
 * sum_r M_r^T P, approximation P Q'^T; the vector is summed whole. The first step's Q is the seeded
 * initial one (recomputed here by a one-rank instance). */
Test(grad_compression, powersgd_against_float64_power_step)
{
    static red_job j;
    memset(&j, 0, sizeof j);
    j.c = tri_compression_defaults();
    j.c.kind = TRI_COMPRESS_POWERSGD;
    j.c.powersgd_rank = 2;
    j.c.powersgd_start_iter = 0;
    j.c.seed = 5;
    cr_assert_eq(tri_run_thread_ranks(RANKS, reduce_rank, &j), TRI_OK, "%s", tri_error_message());
    /* the initial Q^T (r x COLS), from a one-unit instance at dp 2 on one rank of a fake comm: take it
     * from the op sequence directly: normal draws, then Gram-Schmidt */
    int R = j.c.powersgd_rank;
    double q[2][COLS], p[2][ROWS], qn[2][COLS];
    float qf[2 * COLS];
    for (int k = 0; k < R * COLS; k++)
        qf[k] = (float)tri_rng_normal(j.c.seed ^ 0x9057u, tri_rng_hash_str("m") ^ 0u, (uint64_t)k);
    tri_orthonormalize_rows(qf, R, COLS);
    for (int a = 0; a < R; a++)
        for (int c = 0; c < COLS; c++)
            q[a][c] = qf[a * COLS + c];
    /* P^T = Q^T M^T summed over ranks */
    for (int a = 0; a < R; a++)
        for (int i = 0; i < ROWS; i++) {
            double s = 0.0;
            for (int r = 0; r < RANKS; r++)
                for (int c = 0; c < COLS; c++)
                    s += q[a][c] * j.grads[r][i * COLS + c];
            p[a][i] = s;
        }
    for (int a = 0; a < R; a++) { /* Gram-Schmidt in float64 */
        for (int b = 0; b < a; b++) {
            double dot = 0.0;
            for (int i = 0; i < ROWS; i++)
                dot += p[a][i] * p[b][i];
            for (int i = 0; i < ROWS; i++)
                p[a][i] -= dot * p[b][i];
        }
        double nn = 0.0;
        for (int i = 0; i < ROWS; i++)
            nn += p[a][i] * p[a][i];
        for (int i = 0; i < ROWS; i++)
            p[a][i] /= sqrt(nn);
    }
    for (int a = 0; a < R; a++)
        for (int c = 0; c < COLS; c++) {
            double s = 0.0;
            for (int r = 0; r < RANKS; r++)
                for (int i = 0; i < ROWS; i++)
                    s += p[a][i] * j.grads[r][i * COLS + c];
            qn[a][c] = s;
        }
    /* fp32 matmuls over at most RANKS * COLS terms of |M| <= 1 and orthonormal factors: each product
     * within ~ K 2^-24 of its float64 value, K = 4 * 24 terms, twice over (P, then Q'); Gram-Schmidt of
     * a well-conditioned 2-row P loses at most a few more digits: 1e-4 of the largest entry */
    double worst = 0.0, big = 0.0;
    for (int i = 0; i < ROWS; i++)
        for (int c = 0; c < COLS; c++) {
            double ref = 0.0;
            for (int a = 0; a < R; a++)
                ref += p[a][i] * qn[a][c];
            big = fmax(big, fabs(ref));
            for (int r = 0; r < RANKS; r++)
                worst = fmax(worst, fabs((double)j.result[r][i * COLS + c] - ref));
        }
    cr_expect_leq(worst, 1e-4 * big, "PowerSGD approximation differs by %g (largest entry %g)", worst, big);
    for (int i = 0; i < VEC; i++) {
        double s = 0.0;
        for (int r = 0; r < RANKS; r++)
            s += j.grads[r][192 + i];
        cr_expect_leq(fabs((double)j.result[0][192 + i] - s), 4 * ldexp(4.0, -24), "vector element %d", i);
    }
    /* P and Q, all-reduced: 2 (D-1)/D of r (rows + cols) fp32 plus the vector */
    tri_compression c = j.c;
    uint64_t want = (uint64_t)tri_compression_sent_bytes(&c, ROWS, COLS, RANKS, 0, true) +
                    (uint64_t)tri_compression_sent_bytes(&c, 1, VEC, RANKS, 0, true);
    for (int r = 0; r < RANKS; r++)
        cr_expect_eq(j.wire[r], want, "rank %d: %llu wire bytes, expected %llu", r, (unsigned long long)j.wire[r],
                     (unsigned long long)want);
}

/* A matrix whose rank-r factors would not be under half its size (rank 8 of 8 x 24: 2 x 8 x 32 >= 192)
 * is all-reduced whole like a vector (tri_powersgd_compresses): the exact sum up to fp32 rounding of
 * four terms, and the plain all-reduce's bytes. (Rank 8 of 8 rows would otherwise orthonormalise a
 * full basis, and any rank above 8 a row of rounding noise scaled up to norm 1.) */
Test(grad_compression, powersgd_small_matrix_reduced_whole)
{
    static red_job j;
    memset(&j, 0, sizeof j);
    j.c = tri_compression_defaults();
    j.c.kind = TRI_COMPRESS_POWERSGD;
    j.c.powersgd_rank = ROWS;
    j.c.powersgd_start_iter = 0;
    cr_assert_eq(tri_run_thread_ranks(RANKS, reduce_rank, &j), TRI_OK, "%s", tri_error_message());
    for (int i = 0; i < ROWS * COLS; i++) {
        double s = 0.0;
        for (int r = 0; r < RANKS; r++)
            s += j.grads[r][i];
        for (int r = 0; r < RANKS; r++)
            cr_expect_leq(fabs((double)j.result[r][i] - s), 4 * ldexp(4.0, -24), "rank %d element %d", r, i);
    }
    uint64_t want = (uint64_t)tri_compression_sent_bytes(&j.c, 1, ROWS * COLS + VEC, RANKS, 0, false);
    for (int r = 0; r < RANKS; r++)
        cr_expect_eq(j.wire[r], want, "rank %d: %llu wire bytes, plain %llu", r, (unsigned long long)j.wire[r],
                     (unsigned long long)want);
}

/* ---- PowerSGD's Q at another TP split (engine/train/powersgd_q.h) ---- */

enum { QR = 2 }; /* the rank */

/* A shard box of ndim dims: the offsets and shapes given, Q^T qt (QR x shape[ndim - 1]). */
static tri_q_shard qbox(int ndim, const int64_t *off, const int64_t *shape, const float *qt)
{
    tri_q_shard s = {.qt = qt};
    for (int d = 0; d < ndim; d++) {
        s.off[d] = off[d];
        s.shape[d] = shape[d];
    }
    return s;
}

/* Rows split (a column-parallel 6 x 5 matrix): Q_k^T = P_k^T M_k per saved shard of 3 rows; at tp 1
 * Q^T = P^T M with P the shards' P's stacked (the power iteration's next Q from the saved P's): the
 * sum of the saved Q's, the float sum of two floats, so within 2^-24 |q_1 + q_2| of it plus each
 * Q_k's own rounding (2^-24 |q_k|). At tp 2 again, each shard takes its parent's whole Q: bitwise. */
Test(grad_compression, powersgd_q_rows_split_sums_and_copies)
{
    enum { R = 6, C = 5 };
    double M[R][C], P[R][QR], q[2][QR][C];
    float qf[2][QR * C], full[QR * C], half[QR * C];
    for (int i = 0; i < R; i++) {
        for (int c = 0; c < C; c++)
            M[i][c] = tri_rng_normal(11, 1, (uint64_t)(i * C + c));
        for (int j = 0; j < QR; j++)
            P[i][j] = tri_rng_normal(11, 2, (uint64_t)(i * QR + j));
    }
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < QR; j++)
            for (int c = 0; c < C; c++) {
                q[k][j][c] = 0.0;
                for (int i = 3 * k; i < 3 * k + 3; i++)
                    q[k][j][c] += P[i][j] * M[i][c];
                qf[k][j * C + c] = (float)q[k][j][c];
            }
    tri_q_shard saved[2] = {qbox(2, (int64_t[]){0, 0}, (int64_t[]){3, C}, qf[0]),
                            qbox(2, (int64_t[]){3, 0}, (int64_t[]){3, C}, qf[1])};
    tri_q_shard all = qbox(2, (int64_t[]){0, 0}, (int64_t[]){R, C}, NULL);
    cr_assert_eq(tri_powersgd_q_reshard(2, QR, saved, 2, &all, full), 0);
    for (int j = 0; j < QR; j++)
        for (int c = 0; c < C; c++) {
            double exact = 0.0; /* (P^T M)[j][c] over all rows */
            for (int i = 0; i < R; i++)
                exact += P[i][j] * M[i][c];
            double bound = ldexp(fabs(q[0][j][c]) + fabs(q[1][j][c]), -24) * 2.0 + 1e-300;
            cr_expect_leq(fabs(full[j * C + c] - exact), bound, "Q^T[%d][%d] %.9g, P^T M %.17g", j, c,
                          (double)full[j * C + c], exact);
        }
    for (int k = 0; k < 2; k++) {
        tri_q_shard finer = qbox(2, (int64_t[]){3 * k, 0}, (int64_t[]){3, C}, NULL);
        tri_q_shard one = qbox(2, (int64_t[]){0, 0}, (int64_t[]){R, C}, full);
        cr_assert_eq(tri_powersgd_q_reshard(2, QR, &one, 1, &finer, half), 0);
        cr_expect_eq(memcmp(half, full, sizeof half), 0, "tp 2 shard %d does not hold its parent's Q", k);
    }
}

/* Columns split (a row-parallel 4 x 6 matrix, Q's rows are its columns): at tp 1 the saved pieces
 * side by side (P = M Q = the sum of M_k Q_k), at tp 3 each shard its slice: bitwise, and back. */
Test(grad_compression, powersgd_q_cols_split_concatenates_and_slices)
{
    enum { R = 4, C = 6 };
    float qf[2][QR * 3], full[QR * C], third[3][QR * 2], again[QR * C];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < QR * 3; i++)
            qf[k][i] = (float)(10 * k + i) + 0.25f;
    tri_q_shard saved[2] = {qbox(2, (int64_t[]){0, 0}, (int64_t[]){R, 3}, qf[0]),
                            qbox(2, (int64_t[]){0, 3}, (int64_t[]){R, 3}, qf[1])};
    tri_q_shard all = qbox(2, (int64_t[]){0, 0}, (int64_t[]){R, C}, NULL);
    cr_assert_eq(tri_powersgd_q_reshard(2, QR, saved, 2, &all, full), 0);
    all.qt = full;
    for (int j = 0; j < QR; j++)
        for (int c = 0; c < C; c++)
            cr_expect_eq(full[j * C + c], qf[c / 3][j * 3 + c % 3], "Q^T[%d][%d]", j, c);
    tri_q_shard thirds[3];
    for (int k = 0; k < 3; k++) {
        tri_q_shard want = qbox(2, (int64_t[]){0, 2 * k}, (int64_t[]){R, 2}, NULL);
        cr_assert_eq(tri_powersgd_q_reshard(2, QR, &all, 1, &want, third[k]), 0);
        want.qt = third[k];
        for (int j = 0; j < QR; j++)
            for (int c = 0; c < 2; c++)
                cr_expect_eq(third[k][j * 2 + c], full[j * C + 2 * k + c], "tp 3 shard %d Q^T[%d][%d]", k, j, c);
        thirds[k] = want;
    }
    cr_assert_eq(tri_powersgd_q_reshard(2, QR, thirds, 3, &all, again), 0);
    cr_expect_eq(memcmp(again, full, sizeof again), 0, "tp 3 -> tp 1 is not the tp 1 Q");
    /* a saved piece missing: its columns uncovered, counted, left zero */
    cr_expect_eq(tri_powersgd_q_reshard(2, QR, saved, 1, &all, again), 3);
    for (int j = 0; j < QR; j++)
        cr_expect(again[j * C + 4] == 0.0f && again[j * C + 1] == qf[0][j * 3 + 1], "row %d", j);
}

/* A stacked 3-D matrix (q, k, v: 3 x 8 x 5, TP splits dimension 1, rows are dimensions 0-1): at tp 4
 * each shard meets one tp 2 shard in dimension 1 and takes its Q; at tp 1 the two summed. */
Test(grad_compression, powersgd_q_stacked_3d_split)
{
    enum { C = 5 };
    float qf[2][QR * C], got[QR * C];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < QR * C; i++)
            qf[k][i] = (float)(k + 1) * (float)(i + 1);
    tri_q_shard saved[2] = {qbox(3, (int64_t[]){0, 0, 0}, (int64_t[]){3, 4, C}, qf[0]),
                            qbox(3, (int64_t[]){0, 4, 0}, (int64_t[]){3, 4, C}, qf[1])};
    for (int k = 0; k < 4; k++) {
        tri_q_shard want = qbox(3, (int64_t[]){0, 2 * k, 0}, (int64_t[]){3, 2, C}, NULL);
        cr_assert_eq(tri_powersgd_q_reshard(3, QR, saved, 2, &want, got), 0);
        cr_expect_eq(memcmp(got, qf[k / 2], sizeof got), 0, "tp 4 shard %d is not tp 2 shard %d's Q", k, k / 2);
    }
    tri_q_shard all = qbox(3, (int64_t[]){0, 0, 0}, (int64_t[]){3, 8, C}, NULL);
    cr_assert_eq(tri_powersgd_q_reshard(3, QR, saved, 2, &all, got), 0);
    for (int i = 0; i < QR * C; i++)
        cr_expect_eq(got[i], qf[0][i] + qf[1][i], "element %d", i);
}

/* ---- compressed training: equal across layouts where the math promises it ----
 * Deterministic mode makes each rank's local gradient exact (the same bits at either ZeRO stage);
 * compression then acts on the same bits per unit and decodes in rank order (stage 1 its owned slice
 * of the same sum), so the losses and weights are bit-identical at ZeRO 0 and 1 at the same dp. The
 * math promises no more: another pp compresses the tied embedding's two halves (embedding and LM
 * head) separately before the embedding group sums them, and another micro-batch size changes the
 * forward's fp32 sums. */
static void same_bits(tri_compression_kind kind)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, STEPS = 3 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 8, T, cfg.vocab_size, 11);
    tri_compression c = tri_compression_defaults();
    c.kind = kind;
    c.powersgd_start_iter = 1;
    c.block_size = 64;
    c.seed = 3;
    tu_layout a = {.tp = 1, .pp = 1, .dp = 2, .n_micro = 4, .deterministic = true, .compression = c};
    tu_layout z1 = a;
    z1.zero = 1;
    tu_result ra, rz;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &a, w, STEPS, &ra), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &z1, w, STEPS, &rz), TRI_OK, "%s", tri_error_message());
    for (int s = 0; s < STEPS; s++)
        cr_expect_eq(ra.losses[s], rz.losses[s], "%s step %d: ZeRO 0 %.9g vs ZeRO 1 %.9g", tri_compression_name(kind),
                     s, ra.losses[s], rz.losses[s]);
    for (int i = 0; i < ra.n; i++)
        cr_expect_eq(memcmp(ra.weights[i], rz.weights[i], (size_t)ra.numel[i] * 4), 0, "%s: weights of %s",
                     tri_compression_name(kind), ra.names[i]);
    /* and training moved: the compressed run differs from the uncompressed one */
    tu_layout none = a;
    none.compression.kind = TRI_COMPRESS_NONE;
    tu_result rn;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &none, w, STEPS, &rn), TRI_OK);
    cr_expect_neq(rn.losses[STEPS - 1], ra.losses[STEPS - 1]);
    tu_result_free(&ra);
    tu_result_free(&rz);
    tu_result_free(&rn);
    free(w);
}

/* ---- --overlap-grad-reduce with a compressor: each unit's reduction started as the backward completes
 * it (engine/train/zero.c start_compressed) is the same ops in the same order per unit as the
 * reduction at the end of the backward, so the same bits (thread ranks sum in rank order, as the
 * all-gathers' decoding does). Checked at ZeRO 0 and 1, with pp 2 (units complete between pipeline
 * messages), in deterministic mode (the exact sums made fp32 at the start, written back at the
 * finish) and at tp 2 with sequence parallelism, bf16 and full recomputation, for every kind and
 * two-phase; the reductions really were started non-blocking. */
static void expect_overlap_same(const tri_gpt_config *cfg, const int32_t *w, int steps, tu_layout lay, const char *what)
{
    enum { B = 1, T = 8 };
    tu_layout ovl = lay;
    lay.overlap = false;
    ovl.overlap = true;
    tu_result rp, ro;
    cr_assert_eq(tu_run_gpt(cfg, B, T, &lay, w, steps, &rp), TRI_OK, "%s: %s", what, tri_error_message());
    cr_assert_eq(tu_run_gpt(cfg, B, T, &ovl, w, steps, &ro), TRI_OK, "%s: %s", what, tri_error_message());
    for (int s = 0; s < steps; s++)
        cr_expect_eq(rp.losses[s], ro.losses[s], "%s step %d: %.9g without overlap, %.9g with", what, s, rp.losses[s],
                     ro.losses[s]);
    for (int i = 0; i < rp.n; i++)
        cr_expect_eq(memcmp(rp.weights[i], ro.weights[i], (size_t)rp.numel[i] * 4), 0, "%s: weights of %s", what,
                     rp.names[i]);
    cr_expect_eq(rp.overlap_started, 0, "%s", what);
    cr_expect_gt(ro.overlap_started, 0, "%s: nothing started non-blocking", what);
    tu_result_free(&rp);
    tu_result_free(&ro);
}

static void overlap_same_bits(tri_compression_kind kind, tri_compression_reduce reduce)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { STEPS = 3 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 8, 8, cfg.vocab_size, 12);
    tri_compression c = tri_compression_defaults();
    c.kind = kind;
    c.reduce = reduce;
    c.powersgd_start_iter = 1; /* the first step plain, overlapped as without a compressor */
    c.block_size = 64;
    c.seed = 5;
    const tu_layout layouts[] = {
        {.tp = 1, .pp = 1, .dp = 2, .n_micro = 2, .compression = c},
        {.tp = 1, .pp = 1, .dp = 2, .n_micro = 2, .zero = 1, .compression = c},
        {.tp = 1, .pp = 2, .dp = 2, .n_micro = 4, .zero = 1, .compression = c},
        {.tp = 1, .pp = 1, .dp = 2, .n_micro = 2, .deterministic = true, .compression = c},
        {.tp = 1, .pp = 2, .dp = 2, .n_micro = 4, .zero = 1, .deterministic = true, .compression = c},
        {.tp = 2, .pp = 1, .dp = 2, .n_micro = 2, .zero = 1, .sp = true, .bf16 = true,
         .recompute = TRI_RECOMPUTE_FULL, .compression = c},
    };
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s, layout %zu", tri_compression_name(kind), k);
        expect_overlap_same(&cfg, w, STEPS, layouts[k], what);
    }
    free(w);
}

/* The same with the methods that bind the dp group to the rank alone for some steps (nothing is
 * started then): local SGD after a synchronous compressed warm-up step (the outer reduction itself
 * compressed, blocking), and 1-bit Adam (its warm-up step plain and overlapped, then the momentum
 * exchange). */
Test(grad_compression, overlap_with_local_sgd_and_onebit_adam, .timeout = 120)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { STEPS = 4 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 8, 8, cfg.vocab_size, 13);
    tri_compression c = tri_compression_defaults();
    c.kind = TRI_COMPRESS_1BIT;
    c.block_size = 64;
    tu_layout local = {.tp = 1, .pp = 1, .dp = 2, .n_micro = 2, .compression = c,
                       .local = {.steps = 2, .outer = TRI_OUTER_NESTEROV, .outer_lr = 0.7f, .outer_momentum = 0.9f,
                                 .warmup_iters = 1}};
    expect_overlap_same(&cfg, w, STEPS, local, "local SGD");
    c.start_iter = 1;
    tu_layout onebit = {.tp = 1, .pp = 1, .dp = 2, .n_micro = 2, .compression = c, .adam_freeze_step = 1,
                        .onebit_adam = true};
    expect_overlap_same(&cfg, w, STEPS, onebit, "1-bit Adam");
    free(w);
}

Test(grad_compression, overlap_bit_identical_1bit, .timeout = 120)
{
    overlap_same_bits(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER);
}
Test(grad_compression, overlap_bit_identical_qsgd_two_phase, .timeout = 120)
{
    overlap_same_bits(TRI_COMPRESS_QSGD, TRI_COMPRESS_REDUCE_TWO_PHASE);
}
Test(grad_compression, overlap_bit_identical_topk, .timeout = 120)
{
    overlap_same_bits(TRI_COMPRESS_TOPK, TRI_COMPRESS_REDUCE_ALLGATHER);
}
Test(grad_compression, overlap_bit_identical_powersgd, .timeout = 120)
{
    overlap_same_bits(TRI_COMPRESS_POWERSGD, TRI_COMPRESS_REDUCE_ALLGATHER);
}

Test(grad_compression, layouts_bit_identical_1bit) { same_bits(TRI_COMPRESS_1BIT); }
Test(grad_compression, layouts_bit_identical_qsgd) { same_bits(TRI_COMPRESS_QSGD); }
Test(grad_compression, layouts_bit_identical_topk) { same_bits(TRI_COMPRESS_TOPK); }
Test(grad_compression, layouts_bit_identical_powersgd) { same_bits(TRI_COMPRESS_POWERSGD); }

/* ---- refusals ---- */

Test(grad_compression, bad_input)
{
    tri_compression c = tri_compression_defaults();
    cr_expect_eq(tri_compression_parse("2bit"), -1);
    c.kind = TRI_COMPRESS_POWERSGD;
    c.powersgd_rank = 0;
    cr_expect_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--powersgd-rank 0"), "%s", tri_error_message());
    c = tri_compression_defaults();
    c.kind = TRI_COMPRESS_1BIT;
    c.block_size = 0;
    cr_expect_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--compression-block-size 0"), "%s", tri_error_message());
    c = tri_compression_defaults();
    c.kind = TRI_COMPRESS_TOPK;
    c.topk_fraction = 0.0f;
    cr_expect_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--topk-fraction 0"), "%s", tri_error_message());
    c.topk_fraction = 1.5f;
    cr_expect_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    c.topk_fraction = 1.0f;
    cr_expect_eq(tri_compression_check(&c, 1), TRI_OK);
    for (int stage = 2; stage <= 3; stage++) {
        cr_expect_eq(tri_compression_check(&c, stage), TRI_EINVAL);
        cr_expect(strstr(tri_error_message(), "--zero-stage") && strstr(tri_error_message(), "topk"), "%s",
                  tri_error_message());
    }
    /* the flags: an unknown name, and dp 1 runs uncompressed */
    tri_cli_compression f;
    tri_cli_compression_defaults(&f);
    tri_compression out;
    f.kind = "2bit";
    cr_expect_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--grad-compression 2bit"), "%s", tri_error_message());
    f.kind = "1bit";
    cr_expect_eq(tri_cli_compression_resolve(&f, 1, 0, 1, &out), TRI_OK);
    cr_expect_eq(out.kind, TRI_COMPRESS_NONE);
    cr_expect_eq(tri_cli_compression_resolve(&f, 2, 0, 1, &out), TRI_OK);
    cr_expect_eq(out.kind, TRI_COMPRESS_1BIT);
    /* the ops' own checks */
    tri_device *d = cpu();
    float e[8] = {0};
    int32_t pay[8];
    cr_expect_eq(tri_op_compress_sign_pack(d, tri_tensor_1d(pay, TRI_I32, 8), host_f32(e, 8), 0), TRI_EINVAL);
    cr_expect_eq(tri_op_compress_topk_pack(d, tri_tensor_1d(pay, TRI_I32, 3), host_f32(e, 8)), TRI_EINVAL);
    tri_device_destroy(d);
}

/* ---- the wire-byte counters (engine/comm/comm.h "Wire bytes") on 4 thread ranks ---- */

static int wire_rank(int rank, int size, tri_comm *c, void *arg)
{
    uint64_t *got = arg;
    float buf[1000] = {0}, part[250];
    int rc = tri_comm_all_reduce(c, tri_tensor_1d(buf, TRI_F32, 1000), TRI_REDUCE_SUM);
    got[rank * 5 + 0] = tri_comm_wire_bytes(c, TRI_COMM_ALL_REDUCE);
    if (!rc) rc = tri_comm_reduce_scatter(c, tri_tensor_1d(part, TRI_F32, 250), tri_tensor_1d(buf, TRI_F32, 1000));
    got[rank * 5 + 1] = tri_comm_wire_bytes(c, TRI_COMM_REDUCE_SCATTER);
    if (!rc) rc = tri_comm_all_gather(c, tri_tensor_1d(buf, TRI_F32, 1000), tri_tensor_1d(part, TRI_F32, 250));
    got[rank * 5 + 2] = tri_comm_wire_bytes(c, TRI_COMM_ALL_GATHER);
    if (!rc) rc = tri_comm_broadcast(c, tri_tensor_1d(buf, TRI_BF16, 400), 1);
    got[rank * 5 + 3] = tri_comm_wire_bytes(c, TRI_COMM_BROADCAST);
    tri_p2p ops[2] = {{.send = true, .peer = (rank + 1) % size, .t = tri_tensor_1d(buf, TRI_F32, 10)},
                      {.send = false, .peer = (rank + size - 1) % size, .t = tri_tensor_1d(part, TRI_F32, 10)}};
    if (!rc) rc = tri_comm_p2p(c, ops, 2);
    got[rank * 5 + 4] = tri_comm_wire_bytes(c, TRI_COMM_P2P);
    return rc;
}

Test(grad_compression, wire_bytes_counted)
{
    uint64_t got[RANKS * 5];
    cr_assert_eq(tri_run_thread_ranks(RANKS, wire_rank, got), TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < RANKS; r++) {
        cr_expect_eq(got[r * 5 + 0], 2u * 3 * 4000 / 4, "rank %d all-reduce", r);   /* 2 (D-1)/D S */
        cr_expect_eq(got[r * 5 + 1], 3u * 4000 / 4, "rank %d reduce-scatter", r);  /* (D-1)/D S_full */
        cr_expect_eq(got[r * 5 + 2], 3u * 4000 / 4, "rank %d all-gather", r);
        cr_expect_eq(got[r * 5 + 3], r == 1 ? 800u : 0u, "rank %d broadcast (bf16, root 1)", r);
        cr_expect_eq(got[r * 5 + 4], 40u, "rank %d p2p", r);
    }
}

/* ---- composition: tp x dp with sequence parallelism, pp x dp with bf16 and recomputation (either
 * reduction of the payloads) ---- */

static void composes(tri_compression_kind kind, tri_compression_reduce reduce)
{
    tri_gpt_config cfg = tu_tiny_config();
    enum { B = 1, T = 8, STEPS = 4 };
    int32_t *w = tu_make_windows((int64_t)STEPS * 8, T, cfg.vocab_size, 12);
    tri_compression c = tri_compression_defaults();
    c.kind = kind;
    c.powersgd_start_iter = 1;
    c.block_size = 64;
    c.topk_fraction = 0.25f;
    c.reduce = reduce;
    /* (tp 2 without SP: each TP rank decodes the replicated parameters in its own blocks, so rank 0's
     * decoding must reach the others; the harness refuses TP copies that differ and padding rows that
     * moved, which 1bit's decoding of a zero as +scale would do) */
    tu_layout lays[3] = {{.tp = 2, .pp = 1, .dp = 2, .sp = true, .n_micro = 4, .zero = 1, .compression = c},
                         {.tp = 1, .pp = 2, .dp = 2, .n_micro = 4, .bf16 = true, .recompute = 2, .compression = c},
                         {.tp = 2, .pp = 1, .dp = 2, .n_micro = 2, .compression = c}};
    for (int k = 0; k < 3; k++) {
        tu_layout plain = lays[k];
        plain.compression.kind = TRI_COMPRESS_NONE;
        plain.compression.reduce = TRI_COMPRESS_REDUCE_ALLGATHER;
        tu_result res, ref;
        cr_assert_eq(tu_run_gpt(&cfg, B, T, &lays[k], w, STEPS, &res), TRI_OK, "%s layout %d: %s",
                     tri_compression_name(kind), k, tri_error_message());
        cr_assert_eq(tu_run_gpt(&cfg, B, T, &plain, w, STEPS, &ref), TRI_OK, "%s", tri_error_message());
        /* the forward before any update is untouched; afterwards the compressed steps differ but
         * stay within the loss's range (compression changed only the dp reduction) */
        cr_expect_eq(res.losses[0], ref.losses[0], "%s layout %d: first loss", tri_compression_name(kind), k);
        for (int s = 1; s < STEPS; s++) {
            /* (powersgd's first powersgd_start_iter updates are the plain reduction's: the same loss) */
            bool plain_yet = kind == TRI_COMPRESS_POWERSGD && s <= c.powersgd_start_iter;
            cr_expect(isfinite(res.losses[s]) && (res.losses[s] == ref.losses[s]) == plain_yet,
                      "%s layout %d step %d: %g vs %g", tri_compression_name(kind), k, s, res.losses[s], ref.losses[s]);
            cr_expect_lt(fabs(res.losses[s] - ref.losses[s]), 0.5 * ref.losses[s], "%s layout %d step %d: %g vs %g",
                         tri_compression_name(kind), k, s, res.losses[s], ref.losses[s]);
        }
        tu_result_free(&res);
        tu_result_free(&ref);
    }
    free(w);
}

Test(grad_compression, composes_with_tp_sp_pp_bf16_recompute)
{
    composes(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_ALLGATHER);
    composes(TRI_COMPRESS_QSGD, TRI_COMPRESS_REDUCE_ALLGATHER);
    composes(TRI_COMPRESS_TOPK, TRI_COMPRESS_REDUCE_ALLGATHER);
    composes(TRI_COMPRESS_POWERSGD, TRI_COMPRESS_REDUCE_ALLGATHER);
}

/* the two-phase reduction (--grad-compression-reduce two-phase) in the same layouts, a case per
 * compressor (so that the sanitizer stage's selection, tools/sanitizer_coverage.sh, weighs each
 * alone) */
Test(grad_compression, two_phase_composes_1bit)
{
    composes(TRI_COMPRESS_1BIT, TRI_COMPRESS_REDUCE_TWO_PHASE);
}

Test(grad_compression, two_phase_composes_qsgd)
{
    composes(TRI_COMPRESS_QSGD, TRI_COMPRESS_REDUCE_TWO_PHASE);
}

Test(grad_compression, two_phase_composes_topk)
{
    composes(TRI_COMPRESS_TOPK, TRI_COMPRESS_REDUCE_TWO_PHASE);
}
