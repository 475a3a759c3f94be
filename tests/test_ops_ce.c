/* tests/test_ops_ce.c - the vocab-parallel softmax cross-entropy pieces on the CPU backend.
 *
 * The loss is computed in four ops so tensor parallelism never gathers the logits (Megatron's
 * VocabParallelCrossEntropy): ce_row_max, [all-reduce MAX], ce_sumexp_target, [all-reduce SUM],
 * ce_loss, ce_backward. Checked here: each piece against an fp64 loop of log-softmax; the backward
 * against central finite differences of that loss; padded vocab columns (V_valid < V_l, filled with
 * +50 so that counting them would dominate every sum) out of the loss and with exactly zero
 * gradient; the in-place backward (dlogits aliasing logits); an empty shard; and the TP protocol
 * itself: the logits split into 2 or 3 shards, maxes combined with max and stats with sum by hand
 * as the all-reduces would, must give the single shard's losses and dlogits.
 *
 * The fused op (tri_op_ce_fused, used without TP) must give the pieces' bits: losses and dlogits,
 * fp32 and bf16 logits, in place and into a separate buffer, forward only, rows longer than a GPU
 * block's 4096 values (math.h's block order of the sum-exp, checked against fp64 there too).
 *
 * Tolerances: forward 1e-5 relative and backward 1e-4 against fp64 differences, as in the other op
 * suites (floor 1/10 of the RMS); measured 2.0e-7 and 2.1e-7. Sharded against single: 1e-6, since
 * the only difference is the order of the float sum-exp (measured at most 2.7e-7). Maxes and target
 * logits are selections, compared exactly. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_ce, .fini = ot_teardown);

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define SHARD_TOL 1e-6
#define FLOOR 0.1
#define PAD_LOGIT 50.0f

/* ---- reference ---- */

typedef struct ce_problem {
    int64_t N, V_l, V_valid;
    double *logits;          /* (N, V_l), a single shard starting at vocab id 0 */
    const int32_t *targets;  /* (N) */
    double dloss;
    double *losses;          /* (N) */
} ce_problem;

/* losses[n] = log(sum_j<V_valid exp(l[n][j])) - l[n][target] (stable form); returns dloss * sum. */
static double ce_ref(ce_problem *p)
{
    double total = 0.0;
    for (int64_t n = 0; n < p->N; n++) {
        const double *l = p->logits + n * p->V_l;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < p->V_valid; j++)
            mx = l[j] > mx ? l[j] : mx;
        for (int64_t j = 0; j < p->V_valid; j++)
            sum += exp(l[j] - mx);
        p->losses[n] = log(sum) + mx - l[p->targets[n]];
        total += p->losses[n];
    }
    return p->dloss * total;
}

static double ce_loss_fn(void *ctx)
{
    return ce_ref(ctx);
}

/* Logits (N, V_l) in [-4, 4] with padded columns V_valid.. at PAD_LOGIT. */
static float *make_logits(int64_t N, int64_t V_l, int64_t V_valid, uint64_t seed)
{
    float *l = ot_uniform((size_t)(N * V_l), -4.0f, 4.0f, seed);
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = V_valid; j < V_l; j++)
            l[n * V_l + j] = PAD_LOGIT;
    return l;
}

/* Targets spread over [0, V): (5 n + 3) mod V. */
static int32_t *make_targets(int64_t N, int64_t V)
{
    int32_t *t = ot_ints((size_t)N);
    for (int64_t n = 0; n < N; n++)
        t[n] = (int32_t)((5 * n + 3) % V);
    return t;
}

/* One shard's device tensors. */
typedef struct ce_shard {
    tri_tensor logits, dlogits, maxes, stats, targets, losses;
    int64_t vocab_start, V_valid;
} ce_shard;

static ce_shard shard_alloc(tri_device *d, int64_t N, int64_t V_l, const float *logits,
                            const int32_t *targets, int64_t vocab_start, int64_t V_valid)
{
    ce_shard s;
    s.logits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, V_l), logits);
    s.dlogits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, V_l), NULL);
    s.maxes = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    s.stats = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, 2), NULL);
    s.targets = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), targets);
    s.losses = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    s.vocab_start = vocab_start;
    s.V_valid = V_valid;
    return s;
}

/* The whole single-shard pipeline: maxes, stats, losses, dlogits. */
static void run_single(tri_device *d, ce_shard *s, float dloss)
{
    cr_assert_eq(tri_op_ce_row_max(d, s->maxes, s->logits, s->V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_sumexp_target(d, s->stats, s->logits, s->maxes, s->targets,
                                         s->vocab_start, s->V_valid),
                 TRI_OK);
    cr_assert_eq(tri_op_ce_loss(d, s->losses, s->maxes, s->stats), TRI_OK);
    cr_assert_eq(tri_op_ce_backward(d, s->dlogits, s->logits, s->maxes, s->stats, s->targets,
                                    s->vocab_start, s->V_valid, dloss), TRI_OK);
}

Test(ops_ce, pieces_and_backward_with_padding)
{
    tri_device *d = ot_device(1);
    const int64_t B = 2, T = 5, N = B * T, V_l = 13, V_valid = 11;
    const float dloss = 0.37f;
    size_t nl = (size_t)(N * V_l);
    float *logits = make_logits(N, V_l, V_valid, 1000);
    int32_t *targets = make_targets(N, V_valid);
    ce_problem p = {N, V_l, V_valid, ot_widen(logits, nl), targets, dloss, ot_doubles((size_t)N)};
    ce_shard s = shard_alloc(d, N, V_l, logits, targets, 0, V_valid);
    float *nan = ot_floats(nl);
    for (size_t i = 0; i < nl; i++)
        nan[i] = NAN;
    cr_assert_eq(tri_device_copy_from_host(d, s.dlogits, nan), TRI_OK);
    run_single(d, &s, dloss);
    ce_ref(&p);

    /* row max over the valid columns only, and the target's logit: exact selections */
    float *maxes = ot_read(d, s.maxes), *stats = ot_read(d, s.stats);
    double *want_sum = ot_doubles((size_t)N);
    for (int64_t n = 0; n < N; n++) {
        float mx = -FLT_MAX;
        for (int64_t j = 0; j < V_valid; j++)
            mx = fmaxf(mx, logits[n * V_l + j]);
        cr_assert_eq(maxes[n], mx, "row %lld max", (long long)n);
        cr_assert_eq(stats[2 * n + 1], logits[n * V_l + targets[n]], "row %lld target logit",
                     (long long)n);
        for (int64_t j = 0; j < V_valid; j++)
            want_sum[n] += exp((double)logits[n * V_l + j] - (double)maxes[n]);
    }
    float *sums = ot_floats((size_t)N);
    for (int64_t n = 0; n < N; n++)
        sums[n] = stats[2 * n];
    cr_assert(ot_close("ce sumexp", sums, want_sum, (size_t)N, FLOOR, FWD_TOL));
    cr_assert(ot_close("ce loss", ot_read(d, s.losses), p.losses, (size_t)N, FLOOR, FWD_TOL));

    double *g = ot_doubles(nl);
    ot_fd_grad(g, p.logits, nl, ce_loss_fn, &p);
    float *dlogits = ot_read(d, s.dlogits);
    cr_assert(ot_close("ce bwd dlogits", dlogits, g, nl, FLOOR, BWD_TOL));
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = V_valid; j < V_l; j++)
            cr_assert_eq(dlogits[n * V_l + j], 0.0f, "padded column %lld has a gradient",
                         (long long)j);

    /* in place, as the fused classifier does: dlogits aliasing logits gives the same bits */
    cr_assert_eq(tri_op_ce_backward(d, s.logits, s.logits, s.maxes, s.stats, s.targets, 0, V_valid,
                                    dloss), TRI_OK);
    cr_assert(ot_same_bits("ce bwd in place", ot_read(d, s.logits), dlogits, nl));
}

/* A shard that is all padding: max -FLT_MAX (so MAX-reducing it with other shards is harmless),
 * sum-exp 0, target logit 0, and zero gradient. */
Test(ops_ce, empty_shard)
{
    tri_device *d = ot_device(1);
    const int64_t N = 3, V_l = 4;
    float *logits = make_logits(N, V_l, 0, 1010);
    int32_t targets[3] = {0, 1, 2};
    ce_shard s = shard_alloc(d, N, V_l, logits, targets, 8, 0);
    cr_assert_eq(tri_op_ce_row_max(d, s.maxes, s.logits, 0), TRI_OK);
    float *maxes = ot_read(d, s.maxes);
    for (int64_t n = 0; n < N; n++)
        cr_assert_eq(maxes[n], -FLT_MAX);
    /* the reduced max of the real shards arrives: 1.5 */
    float reduced[3] = {1.5f, 1.5f, 1.5f};
    cr_assert_eq(tri_device_copy_from_host(d, s.maxes, reduced), TRI_OK);
    cr_assert_eq(tri_op_ce_sumexp_target(d, s.stats, s.logits, s.maxes, s.targets, 8, 0), TRI_OK);
    float *stats = ot_read(d, s.stats);
    for (int64_t i = 0; i < 2 * N; i++)
        cr_assert_eq(stats[i], 0.0f);
    float sums[6] = {2.0f, 0.5f, 2.0f, 0.5f, 2.0f, 0.5f};
    cr_assert_eq(tri_device_copy_from_host(d, s.stats, sums), TRI_OK);
    cr_assert_eq(
        tri_op_ce_backward(d, s.dlogits, s.logits, s.maxes, s.stats, s.targets, 8, 0, 1.0f),
        TRI_OK);
    float *dl = ot_read(d, s.dlogits);
    for (int64_t i = 0; i < N * V_l; i++)
        cr_assert_eq(dl[i], 0.0f);
}

/* The TP protocol on one device: V real tokens, vocab padded to n_shards * V_l, shard s holding
 * columns [s V_l, (s+1) V_l) with V_valid_s = clamp(V - s V_l, 0, V_l). */
static void check_vocab_parallel(int64_t V, int n_shards, int64_t V_l, uint64_t seed)
{
    tri_device *d = ot_device(1);
    const int64_t N = 10, V_pad = n_shards * V_l;
    const float dloss = 0.1f;
    float *logits = make_logits(N, V_pad, V, seed);
    int32_t *targets = make_targets(N, V);

    ce_shard whole = shard_alloc(d, N, V_pad, logits, targets, 0, V);
    run_single(d, &whole, dloss);
    float *want_losses = ot_read(d, whole.losses), *want_dl = ot_read(d, whole.dlogits);

    ce_shard sh[3];
    float *maxes = ot_floats((size_t)N), *stats = ot_floats((size_t)(2 * N));
    for (int64_t n = 0; n < N; n++)
        maxes[n] = -INFINITY;
    for (int s = 0; s < n_shards; s++) {
        int64_t start = s * V_l, valid = V - start < 0 ? 0 : V - start > V_l ? V_l : V - start;
        float *part = ot_floats((size_t)(N * V_l));
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < V_l; j++)
                part[n * V_l + j] = logits[n * V_pad + start + j];
        sh[s] = shard_alloc(d, N, V_l, part, targets, start, valid);
        cr_assert_eq(tri_op_ce_row_max(d, sh[s].maxes, sh[s].logits, valid), TRI_OK);
        float *m = ot_read(d, sh[s].maxes);
        for (int64_t n = 0; n < N; n++)
            maxes[n] = fmaxf(maxes[n], m[n]); /* all-reduce MAX */
    }
    for (int s = 0; s < n_shards; s++) {
        cr_assert_eq(tri_device_copy_from_host(d, sh[s].maxes, maxes), TRI_OK);
        cr_assert_eq(tri_op_ce_sumexp_target(d, sh[s].stats, sh[s].logits, sh[s].maxes,
                                             sh[s].targets, sh[s].vocab_start, sh[s].V_valid),
                     TRI_OK);
        float *st = ot_read(d, sh[s].stats);
        for (int64_t i = 0; i < 2 * N; i++)
            stats[i] += st[i]; /* all-reduce SUM */
    }
    float *dl = ot_floats((size_t)(N * V_pad));
    for (int s = 0; s < n_shards; s++) {
        cr_assert_eq(tri_device_copy_from_host(d, sh[s].stats, stats), TRI_OK);
        cr_assert_eq(tri_op_ce_loss(d, sh[s].losses, sh[s].maxes, sh[s].stats), TRI_OK);
        cr_assert_eq(tri_op_ce_backward(d, sh[s].dlogits, sh[s].logits, sh[s].maxes, sh[s].stats,
                                        sh[s].targets, sh[s].vocab_start, sh[s].V_valid, dloss),
                     TRI_OK);
        float *part = ot_read(d, sh[s].dlogits);
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < V_l; j++)
                dl[n * V_pad + s * V_l + j] = part[n * V_l + j];
        char what[64];
        snprintf(what, sizeof what, "ce V%lld in %d shards: losses of shard %d", (long long)V,
                 n_shards, s);
        cr_assert(ot_close(what, ot_read(d, sh[s].losses), ot_widen(want_losses, (size_t)N),
                           (size_t)N, FLOOR, SHARD_TOL));
    }
    char what[64];
    snprintf(what, sizeof what, "ce V%lld in %d shards: dlogits", (long long)V, n_shards);
    cr_assert(ot_close(what, dl, ot_widen(want_dl, (size_t)(N * V_pad)), (size_t)(N * V_pad), FLOOR,
                       SHARD_TOL));
}

Test(ops_ce, vocab_parallel_two_shards)
{
    check_vocab_parallel(23, 2, 12, 1100); /* the second shard ends in one padded column */
}

Test(ops_ce, vocab_parallel_three_shards)
{
    check_vocab_parallel(19, 3, 8, 1200); /* shard 2: 3 real columns, 5 padded */
    check_vocab_parallel(16, 3, 8, 1300); /* shard 2: all padding */
}

/* ---- the fused classifier ---- */

/* One fused case: logits (N, V_l) of dtype ld (real columns V_valid), dlogits of dtype dd in place
 * (when ld == dd and in_place) or apart, or none (forward only), against the pieces on the same
 * device, bit for bit. Targets include 0, V_valid - 1 and one outside the vocabulary. */
static void check_fused(tri_device *d, int64_t N, int64_t V_l, int64_t V_valid, tri_dtype ld, tri_dtype dd,
                        bool in_place, bool backward, uint64_t seed)
{
    const float dloss = 0.0625f;
    size_t nl = (size_t)(N * V_l);
    float *host = make_logits(N, V_l, V_valid, seed);
    int32_t *targets = make_targets(N, V_valid);
    targets[0] = 0;
    targets[N - 1] = (int32_t)(V_valid - 1);
    if (N > 2)
        targets[1] = (int32_t)V_valid; /* outside: a target logit of 0, as the pieces count it */
    char what[160];
    snprintf(what, sizeof what, "ce_fused N%lld V_l%lld V_valid%lld %s -> %s%s%s", (long long)N, (long long)V_l,
             (long long)V_valid, tri_dtype_name(ld), tri_dtype_name(dd), in_place ? " in place" : "",
             backward ? "" : " forward only");

    /* the pieces */
    tri_tensor shape = tri_tensor_2d(NULL, TRI_F32, N, V_l);
    tri_tensor lp = ot_tensor_as(d, ld, shape, host), dlp = ot_tensor_as(d, dd, shape, NULL);
    tri_tensor maxes = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    tri_tensor stats = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, 2), NULL);
    tri_tensor tt = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), targets);
    tri_tensor want_losses = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    cr_assert_eq(tri_op_ce_row_max(d, maxes, lp, V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_sumexp_target(d, stats, lp, maxes, tt, 0, V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_loss(d, want_losses, maxes, stats), TRI_OK);
    cr_assert_eq(tri_op_ce_backward(d, dlp, lp, maxes, stats, tt, 0, V_valid, dloss), TRI_OK);

    /* the fused op; dlogits starts as NaN so a value it does not write fails */
    tri_tensor lf = ot_tensor_as(d, ld, shape, host);
    tri_tensor dlf = !backward ? tri_tensor_none() : in_place ? lf : ot_tensor_as(d, dd, shape, NULL);
    tri_tensor losses = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    cr_assert_eq(tri_op_ce_fused(d, losses, dlf, lf, tt, V_valid, dloss), TRI_OK, "%s: %s", what,
                 tri_error_message());
    cr_assert(ot_same_bits(what, ot_read(d, losses), ot_read(d, want_losses), (size_t)N));
    if (backward)
        cr_assert(ot_same_bits(what, ot_read(d, dlf), ot_read(d, dlp), nl));
    else
        cr_assert(ot_same_bits(what, ot_read(d, lf), ot_read(d, lp), nl), "%s changed the logits", what);
}

Test(ops_ce, fused_same_bits_as_pieces)
{
    tri_device *d = ot_device(2);
    /* N, V_l, V_valid: a short row, padding, one span of a warp, past a block's 4096 values (GPT-2's
     * 50257 padded to 50304 in fp32 is cut short here to keep the suite quick) */
    const int64_t dims[][3] = {{3, 13, 11}, {5, 256, 256}, {4, 9000, 8999}, {2, 50304, 50257}};
    for (size_t z = 0; z < sizeof dims / sizeof *dims; z++) {
        int64_t N = dims[z][0], V_l = dims[z][1], V_valid = dims[z][2];
        uint64_t seed = 1400 + 10 * z;
        check_fused(d, N, V_l, V_valid, TRI_F32, TRI_F32, true, true, seed);
        check_fused(d, N, V_l, V_valid, TRI_F32, TRI_F32, false, true, seed + 1);
        check_fused(d, N, V_l, V_valid, TRI_BF16, TRI_BF16, true, true, seed + 2);
        check_fused(d, N, V_l, V_valid, TRI_BF16, TRI_F32, false, true, seed + 3);
        check_fused(d, N, V_l, V_valid, TRI_F32, TRI_F32, false, false, seed + 4);
        check_fused(d, N, V_l, V_valid, TRI_BF16, TRI_BF16, false, false, seed + 5);
    }
}

/* A row longer than a block's 4096 values sums its exponentials in math.h's block order: checked
 * against fp64 with the forward tolerance (the order changes only float rounding). */
Test(ops_ce, fused_long_row_against_fp64)
{
    tri_device *d = ot_device(1);
    const int64_t N = 3, V_l = 9000, V_valid = 8999;
    float *host = make_logits(N, V_l, V_valid, 1500);
    int32_t *targets = make_targets(N, V_valid);
    tri_tensor logits = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, V_l), host);
    tri_tensor tt = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), targets);
    tri_tensor losses = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    cr_assert_eq(tri_op_ce_fused(d, losses, tri_tensor_none(), logits, tt, V_valid, 1.0f), TRI_OK);
    ce_problem p = {N, V_l, V_valid, ot_widen(host, (size_t)(N * V_l)), targets, 1.0, ot_doubles((size_t)N)};
    ce_ref(&p);
    cr_assert(ot_close("ce_fused losses, rows of 8999", ot_read(d, losses), p.losses, (size_t)N, FLOOR, FWD_TOL));
}
