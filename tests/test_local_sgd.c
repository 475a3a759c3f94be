/* tests/test_local_sgd.c - local SGD and DiLoCo (engine/train/local_sgd.h) on thread ranks.
 *
 * - The outer step against a float64 reference of DiLoCo's Algorithm 1 (Douillard et al. 2023;
 *   PyTorch's SGD with Nesterov momentum as the outer optimizer) and of parameter averaging, over
 *   five outer steps at dp 4: each replica's "inner steps" are a seeded perturbation of the anchor
 *   written into its weights, the outer step runs, and every rank's weights must match the
 *   reference within a bound derived from fp32 rounding (below); its outer state is a 1/dp slice.
 * - Replicas fed the same data stay identical: dp 2 with both replicas given the same samples equals
 *   one replica (dp 1) bit for bit, losses and weights, for average and Nesterov (the mean of two
 *   equal fp32 deltas is exact: a sum doubled and halved).
 * - Inner steps with tp and pp inside each replica: in deterministic mode pipeline parallelism
 *   changes no bit (the existing layouts' promise, tests/test_deterministic.c), so dp 2 with pp 2
 *   equals dp 2 with pp 1, at tp 1 and at tp 2 (with sequence parallelism), and bf16 runs.
 * - Inner steps send nothing over dp; an outer synchronisation sends 3 x 4 bytes x the padded
 *   parameters (anchor all-gather, delta reduce-scatter, parameter all-gather).
 * - Checkpoints: a save in the middle of an H window (replicas apart) resumes bit for bit in the
 *   same layout and at pp 2 (deterministic mode): losses, final weights, outer momentum; another dp
 *   mid-window, another H, or a synchronous run are refused, --reset-outer-state starts afresh.
 * - Bad configurations are refused, naming the flag and the value.
 * - A compressed outer reduction (--grad-compression): the 1bit outer step against a float64 model
 *   of the paper's algorithm with error feedback over five outer steps at dp 4 (bound derived from
 *   fp32 rounding), the model without the residual outside that bound (dropping it is caught), and
 *   the deltas' bytes; 1bit, PowerSGD and QSGD (tp 2) runs with pp 2 inside the replicas equal pp 1
 *   bit for bit; the outer residual checkpointed per dp rank resumes bit for bit mid-window and
 *   across the next outer steps (same layout, pp 2), and --reset-compression-state breaks that.
 *
 * What local SGD does not promise: H = 1 with average and outer lr 1 is parameter averaging after
 * each replica's own AdamW step, which is not AdamW on the averaged gradient (Adam is not linear in
 * the gradient), so it is not compared with synchronous data parallelism. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/fsutil.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "models/gpt.h"
#include "models/session.h"
#include "tests/ckpt_harness.h"
#include "tests/harness.h"

enum { B = 1, T = 8 };

/* ---- the outer step against a float64 reference ---- */

enum { DP = 4, OUTER_STEPS = 5 };

typedef struct outer_job {
    tri_local_sgd_config cfg;
    double worst[DP];           /* per rank: max over elements and steps of |error| / bound */
    int64_t anchor_numel[DP];   /* per rank: the outer anchor's elements */
    int64_t padded_numel;
} outer_job;

/* Replica r's perturbation of element i at outer step k: its "inner steps", in [-0.05, 0.05). */
static float perturbation(int k, int r, int64_t i)
{
    return (float)(tri_rng_uniform(77, (uint64_t)k * 131u + (uint64_t)r, (uint64_t)i) - 0.5) * 0.1f;
}

static int outer_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)size;
    outer_job *j = arg;
    tri_gpt_config cfg = tu_tiny_config();
    tri_model model = tri_gpt_model(&cfg);
    tu_layout lay = {.tp = 1, .pp = 1, .dp = DP, .n_micro = 1, .local = j->cfg};
    tri_session_options o = {.run = {.seed = 1234}, .clip_grad = 1.0f, .local_sgd = j->cfg,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f}};
    int rc = tu_model_layout_resolve(&model, B, T, &lay, DP, &o.run.layout);
    tri_device *dev = NULL;
    tri_session ss;
    if (!rc) rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&ss, world, dev, &model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_chunk *ch = ss.model.chunk[0];
    const tri_param_layout *L = &ch->layout;
    tri_zero *z = &ch->zero;
    j->anchor_numel[rank] = tri_tensor_numel(ss.trainer.outer[0].anchor);
    j->padded_numel = L->padded_numel;
    double lr = j->cfg.outer_lr, mu = j->cfg.outer_momentum;
    bool nesterov = j->cfg.outer == TRI_OUTER_NESTEROV;
    /* float64 state per parameter element: the anchor and the momentum */
    int64_t total = L->numel;
    double *anchor = calloc((size_t)total, sizeof *anchor), *mom = calloc((size_t)total, sizeof *mom);
    float *host = malloc((size_t)L->padded_numel * sizeof *host);
    float *mine = malloc((size_t)L->padded_numel * sizeof *mine);
    if (!anchor || !mom || !host || !mine)
        rc = TRI_ERR(TRI_ENOMEM, "test: out of memory");
    /* the initial weights, the same on every replica */
    int64_t at = 0;
    for (int i = 0; i < L->n && !rc; i++) {
        rc = tri_zero_read_param(z, &L->params[i], false, host);
        for (int64_t e = 0; e < L->params[i].numel; e++)
            anchor[at + e] = host[e];
        at += L->params[i].numel;
    }
    double worst = 0.0;
    for (int k = 0; k < OUTER_STEPS && !rc; k++) {
        /* inner steps: theta_r = fp32(current weights + perturbation); the reference sees the same floats */
        double max_abs = 0.0;
        at = 0;
        for (int i = 0; i < L->n && !rc; i++) {
            const tri_param *p = &L->params[i];
            rc = tri_zero_read_param(z, p, false, host);
            for (int64_t e = 0; e < p->numel && !rc; e++) {
                mine[e] = host[e] + perturbation(k, rank, at + e);
                double sum = 0.0;
                for (int r = 0; r < DP; r++)
                    sum += anchor[at + e] - (double)(float)(host[e] + perturbation(k, r, at + e));
                double delta = sum / DP;
                if (nesterov) {
                    mom[at + e] = mu * mom[at + e] + delta;
                    delta += mu * mom[at + e];
                }
                anchor[at + e] -= lr * delta;
                max_abs = fmax(max_abs, fmax(fabs(anchor[at + e]), fabs(host[e])));
                max_abs = fmax(max_abs, fabs(mom[at + e]));
            }
            if (!rc) rc = tri_zero_write_param(z, p, mine);
            at += p->numel;
        }
        if (!rc) rc = tri_trainer_outer_sync(&ss.trainer);
        /* The bound, per element of one step (fp32 unit roundoff u = 2^-24, values below max_abs M,
         * deltas below 2M): the delta's subtraction 1 rounding, the reduce-scatter's dp - 1 additions
         * and the 1/dp scale 1 (each <= u x dp x 2M before the scale); Nesterov's three operations
         * on b and the direction 4 more (|b| <= M); the update and the copy 2 (<= u x M). The fp32
         * state's earlier errors propagate: the anchor's unchanged, the momentum's by mu per step
         * into the direction with weight lr (1 + mu) / (1 - mu) summed over steps. So per step
         * e <= (2 dp + 8) u M (1 + lr (1 + mu) / (1 - mu)), and k + 1 steps add up. */
        double amp = 1.0 + lr * (nesterov ? (1.0 + mu) / (1.0 - mu) : 1.0);
        double bound = (double)(k + 1) * (2.0 * DP + 8.0) * 0x1p-24 * fmax(max_abs, 1e-30) * amp;
        at = 0;
        for (int i = 0; i < L->n && !rc; i++) {
            const tri_param *p = &L->params[i];
            rc = tri_zero_read_param(z, p, false, host);
            for (int64_t e = 0; e < p->numel && !rc; e++)
                worst = fmax(worst, fabs((double)host[e] - anchor[at + e]) / bound);
            at += p->numel;
        }
    }
    j->worst[rank] = worst;
    free(anchor);
    free(mom);
    free(host);
    free(mine);
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

static void check_outer(tri_outer_kind kind, float lr, float mu)
{
    outer_job j = {.cfg = {.steps = 4, .outer = kind, .outer_lr = lr, .outer_momentum = mu}};
    cr_assert_eq(tri_run_thread_ranks(DP, outer_rank, &j), TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < DP; r++) {
        cr_expect_leq(j.worst[r], 1.0, "%s lr %g mu %g: rank %d's weights are %.3g bounds from the float64 "
                      "reference", tri_outer_kind_name(kind), (double)lr, (double)mu, r, j.worst[r]);
        cr_expect_eq(j.anchor_numel[r], j.padded_numel / DP, "rank %d keeps %lld anchor elements, not 1/%d of %lld",
                     r, (long long)j.anchor_numel[r], DP, (long long)j.padded_numel);
    }
    cr_log_info("%s lr %g mu %g: worst error %.3g of the derived bound over %d outer steps", tri_outer_kind_name(kind),
                (double)lr, (double)mu, j.worst[0], OUTER_STEPS);
}

Test(local_sgd, outer_nesterov_matches_diloco_float64, .timeout = 120) { check_outer(TRI_OUTER_NESTEROV, 0.7f, 0.9f); }
Test(local_sgd, outer_average_matches_float64, .timeout = 120) { check_outer(TRI_OUTER_AVERAGE, 1.0f, 0.0f); }
Test(local_sgd, outer_average_lr_half_matches_float64, .timeout = 120) { check_outer(TRI_OUTER_AVERAGE, 0.5f, 0.0f); }

/* ---- the compressed outer step (--grad-compression 1bit) against a float64 reference ---- */

enum { CBLOCK = 32 };

typedef struct outer_1bit_job {
    tri_local_sgd_config cfg;
    double worst[DP];           /* per rank: max |error| / bound against the reference with error feedback */
    double noef[DP];            /* per rank: max |weights - the reference without error feedback| / bound */
    uint64_t sent[DP], plain[DP];
} outer_1bit_job;

/* One 1bit compression of e (float64, n elements from a unit's start) with error feedback, the
 * paper's algorithm in float64: per block of CBLOCK the scale is the mean |e|, each element sent as
 * -scale (e < 0) or +scale; the decoded values are added into sum and (with ef) res = e - decoded,
 * else res stays zero. pad[i]: not a model element (the layout's padding, vocabulary padding rows:
 * zero, in the blocks' means, but no residual and no mean, engine/train/local_sgd.h). */
static void ref_1bit(const double *e, int64_t n, const bool *pad, bool ef, double *res, double *sum)
{
    for (int64_t lo = 0; lo < n; lo += CBLOCK) {
        int64_t hi = lo + CBLOCK < n ? lo + CBLOCK : n;
        double scale = 0.0;
        for (int64_t i = lo; i < hi; i++)
            scale += fabs(e[i]);
        scale /= (double)(hi - lo);
        for (int64_t i = lo; i < hi; i++) {
            double dec = e[i] < 0.0 ? -scale : scale;
            sum[i] += dec;
            res[i] = ef && !pad[i] ? e[i] - dec : 0.0;
        }
    }
}

/* The float64 state of one reference (EF or not) over the flat padded layout. */
typedef struct ref_state {
    double *anchor, *mom, *res[DP], *sum, *e;
} ref_state;

static int ref_alloc(ref_state *s, int64_t n)
{
    memset(s, 0, sizeof *s);
    s->anchor = calloc((size_t)n, sizeof(double));
    s->mom = calloc((size_t)n, sizeof(double));
    s->sum = calloc((size_t)n, sizeof(double));
    s->e = calloc((size_t)n, sizeof(double));
    bool ok = s->anchor && s->mom && s->sum && s->e;
    for (int r = 0; r < DP; r++)
        ok = (s->res[r] = calloc((size_t)n, sizeof(double))) && ok;
    return ok ? TRI_OK : TRI_ERR(TRI_ENOMEM, "test: out of memory");
}

static void ref_free(ref_state *s)
{
    free(s->anchor);
    free(s->mom);
    free(s->sum);
    free(s->e);
    for (int r = 0; r < DP; r++)
        free(s->res[r]);
}

/* One outer step of the reference: theta[r] the replicas' fp32 weights (flat), the compressed mean
 * of delta / DP per unit, then the outer optimizer. Returns max |delta|, |e|, |res|, scale. */
static double ref_step(ref_state *s, const tri_param_layout *L, const float *const *theta, const bool *pad, bool ef,
                       const tri_local_sgd_config *c)
{
    int64_t N = L->padded_numel;
    double dmax = 0.0;
    memset(s->sum, 0, (size_t)N * sizeof *s->sum);
    for (int r = 0; r < DP; r++) {
        for (int64_t f = 0; f < N; f++) {
            double delta = pad[f] ? 0.0 : s->anchor[f] - (double)theta[r][f];
            s->e[f] = delta / DP + s->res[r][f];
            dmax = fmax(dmax, fmax(fabs(delta), fmax(fabs(s->e[f]), fabs(s->res[r][f]))));
        }
        for (int u = 0; u < L->n_units; u++) /* the blocks start at each unit's start */
            ref_1bit(s->e + L->units[u].start, L->units[u].len, pad + L->units[u].start, ef,
                     s->res[r] + L->units[u].start, s->sum + L->units[u].start);
    }
    for (int64_t f = 0; f < N; f++) {
        double d = pad[f] ? 0.0 : s->sum[f]; /* the decoded mean moves model elements only */
        if (c->outer == TRI_OUTER_NESTEROV) {
            s->mom[f] = c->outer_momentum * s->mom[f] + d;
            d += c->outer_momentum * s->mom[f];
        }
        s->anchor[f] -= c->outer_lr * d;
    }
    return dmax;
}

static int outer_1bit_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)size;
    outer_1bit_job *j = arg;
    tri_gpt_config cfg = tu_tiny_config();
    tri_model model = tri_gpt_model(&cfg);
    tri_compression comp = tri_compression_defaults();
    comp.kind = TRI_COMPRESS_1BIT;
    comp.block_size = CBLOCK;
    tu_layout lay = {.tp = 1, .pp = 1, .dp = DP, .n_micro = 1, .local = j->cfg, .compression = comp};
    tri_session_options o = {.run = {.seed = 1234}, .clip_grad = 1.0f, .local_sgd = j->cfg,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f}};
    int rc = tu_model_layout_resolve(&model, B, T, &lay, DP, &o.run.layout);
    tri_device *dev = NULL;
    tri_session ss;
    if (!rc) rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&ss, world, dev, &model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_chunk *ch = ss.model.chunk[0];
    const tri_param_layout *L = &ch->layout;
    tri_zero *z = &ch->zero;
    int64_t N = L->padded_numel;
    ref_state ef, no;
    float *theta[DP] = {0}, *host = malloc((size_t)N * sizeof *host), *mine = malloc((size_t)N * sizeof *mine);
    bool *pad = malloc((size_t)N * sizeof *pad);
    rc = ref_alloc(&ef, N);
    if (!rc) rc = ref_alloc(&no, N);
    for (int r = 0; r < DP && !rc; r++)
        if (!(theta[r] = calloc((size_t)N, sizeof(float))))
            rc = TRI_ERR(TRI_ENOMEM, "test: out of memory");
    if (!rc && (!host || !mine || !pad))
        rc = TRI_ERR(TRI_ENOMEM, "test: out of memory");
    if (!rc && !ss.trainer.outer[0].comp.on)
        rc = TRI_ERR(TRI_EINTERNAL, "test: the outer reduction is not compressed");
    for (int64_t f = 0; f < N && !rc; f++)
        pad[f] = true;
    for (int i = 0; i < L->n && !rc; i++) { /* the initial weights, the same on every replica */
        const tri_param *p = &L->params[i];
        int64_t row = p->spec.ndim >= 1 && p->local_shape[0] > 0 ? p->numel / p->local_shape[0] : p->numel;
        rc = tri_zero_read_param(z, p, false, host);
        for (int64_t e = 0; e < p->numel; e++) {
            /* vocabulary padding rows (at or beyond init_rows) are not model elements either */
            pad[p->offset + e] = p->spec.ndim >= 1 && p->global_offset[0] + e / row >= p->spec.init_rows;
            ef.anchor[p->offset + e] = no.anchor[p->offset + e] = host[e];
        }
    }
    const tri_local_sgd_config *c = &j->cfg;
    double lr = c->outer_lr, mu = c->outer_momentum, u = 0x1p-24, M = 0.0;
    bool nesterov = c->outer == TRI_OUTER_NESTEROV;
    /* the error bound's recursion (per element, fp32 against float64; see below) */
    double A = 0.0, R = 0.0, B_mom = 0.0, worst = 0.0, noef = INFINITY;
    for (int k = 0; k < OUTER_STEPS && !rc; k++) {
        int64_t at = 0;
        for (int i = 0; i < L->n && !rc; i++) {
            const tri_param *p = &L->params[i];
            rc = tri_zero_read_param(z, p, false, host);
            for (int64_t e = 0; e < p->numel; e++) {
                for (int r = 0; r < DP; r++) /* inner steps leave the vocabulary padding zero */
                    theta[r][p->offset + e] = pad[p->offset + e] ? host[e] : host[e] + perturbation(k, r, at + e);
                mine[e] = theta[rank][p->offset + e];
                M = fmax(M, fabs(host[e]));
            }
            if (!rc) rc = tri_zero_write_param(z, p, mine);
            at += p->numel;
        }
        double D = ref_step(&ef, L, (const float *const *)theta, pad, true, c);
        ref_step(&no, L, (const float *const *)theta, pad, false, c);
        for (int64_t f = 0; f < N; f++)
            M = fmax(M, fmax(fabs(ef.anchor[f]), fabs(ef.mom[f])));
        if (!rc) rc = tri_trainer_outer_sync(&ss.trainer);
        j->sent[rank] = ss.trainer.outer[0].comp.last_sent;
        j->plain[rank] = ss.trainer.outer[0].comp.last_plain;
        /* The bound, per element (u = 2^-24; D bounds |delta|, |e|, |r| and the scales, M the anchor,
         * the weights and the momentum), given that fp32 and float64 agree on every sign (an element
         * within the bound of zero could flip; the scale, a mean of |e|, does not depend on signs):
         *   e = delta / dp + r   inherits the anchor's error / dp and the residual's, plus 2 roundings
         *                        (the subtraction, exact relative to delta, and the addition): 2uD;
         *   scale = mean |e|     e's error plus 1 rounding (the double sum rounded once): uD;
         *   r' = e - (+-scale)   e's and the scale's errors plus 1 rounding: R' = 2 err_e + 2uD;
         *   mean = sum of dp decoded values in rank order: dp x the scale's error + (dp - 1) roundings;
         *   nesterov b' = mu b + mean (2 roundings), direction = mean + mu b' (2), anchor -= lr x
         *   direction (2 roundings of M). */
        double err_e = A / DP + R + 2.0 * u * D;
        double err_scale = err_e + u * D;
        R = 2.0 * err_e + 2.0 * u * D;
        double err_mean = DP * err_scale + (DP - 1) * u * DP * D;
        double err_dir = err_mean;
        if (nesterov) {
            B_mom = mu * B_mom + err_mean + 2.0 * u * M;
            err_dir = err_mean + mu * B_mom + 2.0 * u * M;
        }
        A = A + lr * err_dir + 2.0 * u * M;
        double worst_no = 0.0;
        for (int i = 0; i < L->n && !rc; i++) {
            const tri_param *p = &L->params[i];
            rc = tri_zero_read_param(z, p, false, host);
            for (int64_t e = 0; e < p->numel && !rc; e++) {
                worst = fmax(worst, fabs((double)host[e] - ef.anchor[p->offset + e]) / A);
                worst_no = fmax(worst_no, fabs((double)host[e] - no.anchor[p->offset + e]) / A);
            }
        }
        if (k > 0) /* the first step has no residual yet: both references agree */
            noef = fmin(noef, worst_no);
    }
    j->worst[rank] = worst;
    j->noef[rank] = noef;
    ref_free(&ef);
    ref_free(&no);
    for (int r = 0; r < DP; r++)
        free(theta[r]);
    free(host);
    free(mine);
    free(pad);
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

static void check_outer_1bit(tri_outer_kind kind, float lr, float mu)
{
    outer_1bit_job j = {.cfg = {.steps = 4, .outer = kind, .outer_lr = lr, .outer_momentum = mu}};
    cr_assert_eq(tri_run_thread_ranks(DP, outer_1bit_rank, &j), TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < DP; r++) {
        cr_expect_leq(j.worst[r], 1.0, "1bit %s: rank %d's weights are %.3g bounds from the float64 reference",
                      tri_outer_kind_name(kind), r, j.worst[r]);
        /* dropping the residual is caught: the reference without error feedback is outside the bound
         * at every step after the first */
        cr_expect_gt(j.noef[r], 10.0, "1bit %s: rank %d is within %.3g bounds of the reference without error "
                     "feedback", tri_outer_kind_name(kind), r, j.noef[r]);
        /* the deltas' reduction: 1 bit an element and a 4-byte scale per 32 (len / 4 bytes) all-gathered
         * from dp - 1 ranks, against fp32's reduce-scatter ((dp - 1) / dp x 4 len): 16 / dp = 4x, less
         * the payload's rounding to whole words */
        cr_expect_gt(j.plain[r], 3 * j.sent[r], "1bit %s: rank %d sent %llu bytes, the plain reduction %llu",
                     tri_outer_kind_name(kind), r, (unsigned long long)j.sent[r], (unsigned long long)j.plain[r]);
    }
    cr_log_info("1bit %s: worst error %.3g of the derived bound; without error feedback %.3g bounds away; "
                "%llu bytes against %llu", tri_outer_kind_name(kind), j.worst[0], j.noef[0],
                (unsigned long long)j.sent[0], (unsigned long long)j.plain[0]);
}

Test(local_sgd, outer_1bit_nesterov_matches_float64_with_error_feedback, .timeout = 120)
{
    check_outer_1bit(TRI_OUTER_NESTEROV, 0.7f, 0.9f);
}
Test(local_sgd, outer_1bit_average_matches_float64_with_error_feedback, .timeout = 120)
{
    check_outer_1bit(TRI_OUTER_AVERAGE, 1.0f, 0.0f);
}

/* ---- whole runs through the harness ---- */

enum { STEPS = 6, MICRO = 2 };

static void expect_same(const tu_result *a, const tu_result *b, const char *name)
{
    cr_expect(memcmp(a->losses, b->losses, sizeof a->losses) == 0, "%s: losses differ: %.17g vs %.17g", name,
              a->losses[STEPS - 1], b->losses[STEPS - 1]);
    for (int i = 0; i < a->n; i++)
        cr_expect(memcmp(a->weights[i], b->weights[i], (size_t)a->numel[i] * sizeof(float)) == 0,
                  "%s: final %s differs (relative %.2g)", name, a->names[i],
                  tu_tensor_rel(a->weights[i], b->weights[i], a->numel[i]));
}

static tri_local_sgd_config local(int H, tri_outer_kind kind)
{
    return (tri_local_sgd_config){.steps = H, .outer = kind, .outer_lr = kind == TRI_OUTER_NESTEROV ? 0.7f : 1.0f,
                                  .outer_momentum = 0.9f};
}

static void same_data(tri_outer_kind kind)
{
    tri_gpt_config cfg = tu_tiny_config();
    int64_t per = (int64_t)B * MICRO; /* samples per replica and step */
    int32_t *one = tu_make_windows(STEPS * per, T, cfg.vocab_size, 21);
    int32_t *two = malloc((size_t)(STEPS * 2 * per * (T + 1)) * sizeof *two);
    cr_assert(one && two);
    for (int s = 0; s < STEPS; s++) /* both replicas of step s get one's samples of step s */
        for (int r = 0; r < 2; r++)
            memcpy(two + ((s * 2 + r) * per) * (T + 1), one + (s * per) * (T + 1), (size_t)(per * (T + 1)) * sizeof *two);
    tu_layout a = {.tp = 1, .pp = 1, .dp = 1, .n_micro = MICRO, .local = local(3, kind)};
    tu_layout b = a;
    b.dp = 2;
    tu_result ra, rb;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &a, one, STEPS, &ra), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &b, two, STEPS, &rb), TRI_OK, "%s", tri_error_message());
    expect_same(&ra, &rb, kind == TRI_OUTER_NESTEROV ? "DiLoCo dp 2 on equal data vs dp 1" : "local SGD dp 2 on equal data vs dp 1");
    /* inner steps (3 of every 3) send nothing over dp: the first step's dp traffic is zero */
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        cr_expect_eq(rb.dp_bytes[k], 0, "an inner step sent %llu bytes over dp (%s)", (unsigned long long)rb.dp_bytes[k],
                     tri_comm_kind_name((tri_comm_kind)k));
    tu_result_free(&ra);
    tu_result_free(&rb);
    free(one);
    free(two);
}

Test(local_sgd, equal_replicas_stay_one_model_average, .timeout = 120) { same_data(TRI_OUTER_AVERAGE); }
Test(local_sgd, equal_replicas_stay_one_model_nesterov, .timeout = 120) { same_data(TRI_OUTER_NESTEROV); }

static void pipeline_inside(int tp, bool sp, bool bf16)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)STEPS * 2 * B * MICRO, T, cfg.vocab_size, 23);
    tu_layout a = {.tp = tp, .pp = 1, .dp = 2, .sp = sp, .bf16 = bf16, .n_micro = MICRO, .deterministic = true,
                   .local = local(3, TRI_OUTER_NESTEROV)};
    tu_layout b = a;
    b.pp = 2;
    tu_result ra, rb;
    char name[96];
    snprintf(name, sizeof name, "DiLoCo dp 2 tp %d%s%s: pp 2 vs pp 1", tp, sp ? " sp" : "", bf16 ? " bf16" : "");
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &a, w, STEPS, &ra), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &b, w, STEPS, &rb), TRI_OK, "%s", tri_error_message());
    expect_same(&ra, &rb, name);
    for (int s = 0; s < STEPS; s++)
        cr_expect(isfinite(ra.losses[s]) && ra.losses[s] > 0, "%s: loss %g at step %d", name, ra.losses[s], s + 1);
    cr_expect_lt(ra.losses[STEPS - 1], ra.losses[0], "%s: the loss did not fall (%g -> %g)", name, ra.losses[0],
                 ra.losses[STEPS - 1]);
    tu_result_free(&ra);
    tu_result_free(&rb);
    free(w);
}

/* --overlap-grad-reduce / --overlap-param-gather are accepted and change nothing: inner steps
 * reduce nothing over dp (their "overlapped" reductions run on a group of one rank). */
Test(local_sgd, overlap_flags_change_no_bit, .timeout = 200)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)STEPS * 2 * B * MICRO, T, cfg.vocab_size, 27);
    tu_layout a = {.tp = 1, .pp = 2, .dp = 2, .n_micro = MICRO, .local = local(3, TRI_OUTER_NESTEROV)};
    tu_layout b = a;
    b.overlap = true;
    tu_result ra, rb;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &a, w, STEPS, &ra), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &b, w, STEPS, &rb), TRI_OK, "%s", tri_error_message());
    expect_same(&ra, &rb, "DiLoCo with and without overlap flags");
    tu_result_free(&ra);
    tu_result_free(&rb);
    free(w);
}

Test(local_sgd, pp_inside_replicas_same_bits, .timeout = 200) { pipeline_inside(1, false, false); }
Test(local_sgd, tp_sp_pp_inside_replicas_same_bits, .timeout = 300) { pipeline_inside(2, true, false); }
Test(local_sgd, bf16_pp_inside_replicas_same_bits, .timeout = 200) { pipeline_inside(1, false, true); }

/* Post-local SGD: the --local-sgd-warmup-iters first updates are synchronous data parallelism, the
 * same bits as a synchronous run (deterministic mode); the steps after them are local. */
Test(local_sgd, warmup_steps_are_synchronous, .timeout = 200)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)STEPS * 2 * B * MICRO, T, cfg.vocab_size, 33);
    tu_layout sync = {.tp = 1, .pp = 1, .dp = 2, .n_micro = MICRO, .deterministic = true};
    tu_layout post = sync;
    post.local = local(2, TRI_OUTER_NESTEROV);
    post.local.warmup_iters = 3;
    tu_result a, b;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &sync, w, STEPS, &a), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &post, w, STEPS, &b), TRI_OK, "%s", tri_error_message());
    /* losses before updates 1..3 (the loss of step s is before its update) are the synchronous ones;
     * step 4 is the first local one: its loss is replica 0's own */
    for (int s = 0; s < 3; s++)
        cr_expect(a.losses[s] == b.losses[s], "warm-up step %d: loss %.17g, synchronous %.17g", s + 1, b.losses[s],
                  a.losses[s]);
    cr_expect(a.losses[3] != b.losses[3], "step 4 should be local (a replica's own loss)");
    cr_expect_eq(a.dp_bytes[TRI_COMM_ALL_REDUCE] > 0, true, "the synchronous run reduced nothing over dp");
    cr_expect_eq(b.dp_bytes[TRI_COMM_ALL_REDUCE], a.dp_bytes[TRI_COMM_ALL_REDUCE],
                 "a warm-up step moved %llu bytes over dp, a synchronous step %llu",
                 (unsigned long long)b.dp_bytes[TRI_COMM_ALL_REDUCE], (unsigned long long)a.dp_bytes[TRI_COMM_ALL_REDUCE]);
    tu_result_free(&a);
    tu_result_free(&b);
    free(w);
}

/* ---- bad configurations ---- */

static void refused(tri_local_sgd_config c, int zero, const char *text)
{
    cr_expect_eq(tri_local_sgd_check(&c, zero), TRI_EINVAL, "expected a refusal naming %s", text);
    cr_expect(strstr(tri_error_message(), text) != NULL, "message '%s' does not name '%s'", tri_error_message(), text);
    tri_error_clear();
}

Test(local_sgd, bad_configurations_refused)
{
    tri_local_sgd_config ok = local(16, TRI_OUTER_NESTEROV);
    cr_expect_eq(tri_local_sgd_check(&ok, 0), TRI_OK, "%s", tri_error_message());
    tri_local_sgd_config c = ok;
    c.steps = -1;
    refused(c, 0, "--local-sgd-steps -1");
    c = ok;
    c.outer_lr = 0.0f;
    refused(c, 0, "--outer-lr 0");
    c.outer_lr = -0.5f;
    refused(c, 0, "--outer-lr -0.5");
    c.outer_lr = NAN;
    refused(c, 0, "--outer-lr nan");
    c = ok;
    c.outer_momentum = 1.0f;
    refused(c, 0, "--outer-momentum 1");
    c.outer_momentum = -0.1f;
    refused(c, 0, "--outer-momentum -0.1");
    for (int zero = 1; zero <= 3; zero++)
        refused(ok, zero, "ZeRO stage");
    tri_outer_kind k;
    cr_expect_eq(tri_outer_kind_parse("adam", &k), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--outer-optimizer adam") != NULL, "%s", tri_error_message());
    tri_error_clear();
    cr_expect_eq(tri_outer_kind_parse("nesterov", &k), TRI_OK);
    cr_expect_eq(k, TRI_OUTER_NESTEROV);
    /* the windows: every H-th update and the final one */
    tri_local_sgd_config w = local(4, TRI_OUTER_AVERAGE);
    w.final_iter = 10;
    bool want[11] = {false, false, false, false, true, false, false, false, true, false, true};
    for (int64_t it = 1; it <= 10; it++)
        cr_expect_eq(tri_local_sgd_syncs_at(&w, it), want[it], "iteration %lld", (long long)it);
    w.warmup_iters = 3; /* then windows of 4 from update 3: 7, and the final 10 */
    bool after[11] = {false, false, false, false, false, false, false, true, false, false, true};
    for (int64_t it = 1; it <= 10; it++) {
        cr_expect_eq(tri_local_sgd_syncs_at(&w, it), after[it], "warm-up 3, iteration %lld", (long long)it);
        cr_expect_eq(tri_local_sgd_inner(&w, it), it > 3, "warm-up 3, iteration %lld", (long long)it);
    }
    w.warmup_iters = -1;
    refused(w, 0, "--local-sgd-warmup-iters -1");
    tri_local_sgd_config off = {0};
    cr_expect_not(tri_local_sgd_syncs_at(&off, 4));
}

/* ---- checkpoints: a save in the middle of a window resumes bit for bit ---- */

enum { CK_GLOBAL = 4, CK_HALF = 10 };

static tu_ckpt_run ck_run(const tri_gpt_config *cfg, const int32_t *w, tu_layout l)
{
    l.local = local(4, TRI_OUTER_NESTEROV);
    l.local.final_iter = TU_CKPT_TOTAL;
    l.deterministic = true;
    return (tu_ckpt_run){.cfg = cfg, .B = B, .T = T, .layout = l, .global_batch = CK_GLOBAL, .windows = w,
                         .until = TU_CKPT_TOTAL};
}

/* A whole tensor of group (NULL: the weights) from a checkpoint's files of `kind`, asserted read. */
static float *ck_tensor(const char *dir, tri_ckpt_file_kind kind, const char *group, const char *name, int64_t *n)
{
    float *x = tu_ckpt_tensor(dir, kind, -1, group, name, n);
    cr_assert(x, "%s %s: %s", group ? group : "", name, tri_error_message());
    return x;
}

static void ck_same(const char *a, const char *b, const char *what)
{
    static const char *const names[] = {"wte", "h.0.attn.c_attn.w", "h.3.mlp.c_proj.w", "ln_f.w"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t n, m;
        float *x = ck_tensor(a, TRI_CKPT_MODEL, NULL, names[i], &n), *y = ck_tensor(b, TRI_CKPT_MODEL, NULL, names[i], &m);
        cr_expect(n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0, "%s: final %s differs", what, names[i]);
        free(x);
        free(y);
        x = ck_tensor(a, TRI_CKPT_OUTER, "outer_momentum", names[i], &n);
        y = ck_tensor(b, TRI_CKPT_OUTER, "outer_momentum", names[i], &m);
        cr_expect(n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0, "%s: final outer momentum of %s differs", what,
                  names[i]);
        double mx = 0.0;
        for (int64_t k = 0; k < n; k++)
            mx = fmax(mx, fabs(x[k]));
        cr_expect_gt(mx, 0.0, "%s: the outer momentum of %s is zero", what, names[i]);
        free(x);
        free(y);
    }
}

Test(local_sgd, checkpoint_mid_window_resumes_bit_for_bit, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * CK_GLOBAL, T, cfg.vocab_size, 29);
    char *dir = tu_ckpt_tmpdir("local-sgd");
    char ref_dir[4200], mid[4300], ref_final[4300], out[4300], fin[4400];
    snprintf(ref_dir, sizeof ref_dir, "%s/uninterrupted", dir);
    snprintf(mid, sizeof mid, "%s/iter_%07d", ref_dir, CK_HALF); /* 10 = 2 x 4 + 2: inside a window */
    snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);
    tu_ckpt_run ref = ck_run(&cfg, w, (tu_layout){.tp = 1, .pp = 1, .dp = 2});
    ref.save_dir = ref_dir;
    ref.save_interval = CK_HALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted: %s", tri_error_message());
    /* the same layout, and pp 2 x tp 1 (deterministic mode: pp changes no bit) */
    tu_layout same[] = {{.tp = 1, .pp = 1, .dp = 2}, {.tp = 1, .pp = 2, .dp = 2}};
    for (int c = 0; c < 2; c++) {
        snprintf(out, sizeof out, "%s/resumed%d", dir, c);
        tu_ckpt_run r = ck_run(&cfg, w, same[c]);
        r.load = mid;
        r.save_dir = out;
        cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "resume %d: %s", c, tri_error_message());
        cr_assert_eq(r.start, CK_HALF);
        for (int k = 0; k < TU_CKPT_TOTAL - CK_HALF; k++)
            cr_expect(r.losses[k] == ref.losses[CK_HALF + k], "resume pp %d: iteration %d loss %.17g, uninterrupted %.17g",
                      same[c].pp, CK_HALF + k + 1, r.losses[k], ref.losses[CK_HALF + k]);
        snprintf(fin, sizeof fin, "%s/iter_%07d", out, TU_CKPT_TOTAL);
        ck_same(fin, ref_final, same[c].pp == 1 ? "resumed in the same layout" : "resumed at pp 2");
    }
    /* refusals: another dp in the middle of a window; another H; then --reset-outer-state */
    tu_ckpt_run r = ck_run(&cfg, w, (tu_layout){.tp = 1, .pp = 1, .dp = 1});
    r.load = mid;
    cr_expect_eq(tu_ckpt_train(&r), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "middle of a window") && strstr(tri_error_message(), "dp 2"), "%s",
              tri_error_message());
    r = ck_run(&cfg, w, (tu_layout){.tp = 1, .pp = 1, .dp = 2});
    r.layout.local.steps = 8;
    r.load = mid;
    cr_expect_eq(tu_ckpt_train(&r), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--local-sgd-steps 4 --outer-optimizer nesterov") &&
                  strstr(tri_error_message(), "--local-sgd-steps 8"), "%s", tri_error_message());
    r.reset_outer_state = true;
    cr_expect_eq(tu_ckpt_train(&r), TRI_OK, "--reset-outer-state: %s", tri_error_message());
    r = ck_run(&cfg, w, (tu_layout){.tp = 1, .pp = 1, .dp = 2});
    r.layout.local.steps = 0;
    r.load = mid;
    cr_expect_eq(tu_ckpt_train(&r), TRI_EINVAL, "a synchronous run must refuse local SGD's checkpoint");
    tri_error_clear();
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}

/* An outer synchronisation moves 3 x 4 bytes x the padded parameters over dp (payload, as the comm
 * counts: the anchor's and the parameters' all-gathers count the whole buffer, the deltas'
 * reduce-scatter too), and nothing else; H = 1 makes step 1 one. */
Test(local_sgd, outer_sync_bytes, .timeout = 120)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)2 * B * MICRO, T, cfg.vocab_size, 31);
    tu_layout l = {.tp = 1, .pp = 1, .dp = 2, .n_micro = MICRO, .local = local(1, TRI_OUTER_AVERAGE)};
    tu_result r;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &l, w, 1, &r), TRI_OK, "%s", tri_error_message());
    uint64_t n = (uint64_t)r.owned_elements * 4; /* ZeRO 0: the padded parameters, fp32 */
    cr_expect_eq(r.dp_bytes[TRI_COMM_ALL_GATHER], 2 * n, "all-gathers %llu bytes, expected 2 x %llu",
                 (unsigned long long)r.dp_bytes[TRI_COMM_ALL_GATHER], (unsigned long long)n);
    cr_expect_eq(r.dp_bytes[TRI_COMM_REDUCE_SCATTER], n);
    cr_expect_eq(r.dp_bytes[TRI_COMM_ALL_REDUCE], 0);
    tu_result_free(&r);
    free(w);
}

/* ---- the compressed outer synchronisation in whole runs ---- */

static tri_compression outer_comp(tri_compression_kind kind)
{
    tri_compression c = tri_compression_defaults();
    c.kind = kind;
    c.block_size = 32;
    c.powersgd_rank = 2;
    c.powersgd_start_iter = 0;
    c.seed = 1234;
    return c;
}

/* DiLoCo with a compressed outer reduction: pipeline parallelism inside the replicas changes no bit
 * (deterministic mode; the compressor's blocks, Q and rounding streams are per unit and parameter,
 * the same at every pp), and the outer reduction is really compressed (the run differs from the
 * uncompressed one from the first outer step on, not before). (Whether the loss falls over two
 * windows of this tiny run is not a property of the compressor; the 4-rank runs in docs/ are.) */
static void compressed_inside(tri_compression_kind kind, int tp)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)STEPS * 2 * B * MICRO, T, cfg.vocab_size, 37);
    tu_layout a = {.tp = tp, .pp = 1, .dp = 2, .n_micro = MICRO, .deterministic = true,
                   .local = local(3, TRI_OUTER_NESTEROV), .compression = outer_comp(kind)};
    tu_layout b = a, plain = a;
    b.pp = 2;
    plain.compression = tri_compression_defaults();
    tu_result ra, rb, rp;
    char name[96];
    snprintf(name, sizeof name, "DiLoCo, %s outer reduction, tp %d: pp 2 vs pp 1", tri_compression_name(kind), tp);
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &a, w, STEPS, &ra), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &b, w, STEPS, &rb), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &plain, w, STEPS, &rp), TRI_OK, "%s", tri_error_message());
    expect_same(&ra, &rb, name);
    /* the losses until the first outer step (after update 3) are the uncompressed run's; after it not */
    for (int s = 0; s < 3; s++)
        cr_expect(ra.losses[s] == rp.losses[s], "%s: step %d's loss %.17g, uncompressed %.17g", name, s + 1,
                  ra.losses[s], rp.losses[s]);
    cr_expect(ra.losses[3] != rp.losses[3], "%s: the compressed outer step gave the uncompressed one's loss", name);
    for (int s = 0; s < STEPS; s++)
        cr_expect(isfinite(ra.losses[s]) && ra.losses[s] > 0, "%s: loss %g at step %d", name, ra.losses[s], s + 1);
    tu_result_free(&ra);
    tu_result_free(&rb);
    tu_result_free(&rp);
    free(w);
}

Test(local_sgd, outer_1bit_pp_inside_same_bits, .timeout = 300) { compressed_inside(TRI_COMPRESS_1BIT, 1); }
Test(local_sgd, outer_powersgd_pp_inside_same_bits, .timeout = 300) { compressed_inside(TRI_COMPRESS_POWERSGD, 1); }
Test(local_sgd, outer_qsgd_tp_pp_inside_same_bits, .timeout = 300) { compressed_inside(TRI_COMPRESS_QSGD, 2); }

/* An outer synchronisation with 1bit sends the anchor's and the parameters' all-gathers (fp32) and
 * the deltas' payloads: dp all-gathered payloads per unit (as the comm counts an all-gather: the
 * whole output) instead of the fp32 reduce-scatter; H = 1 makes step 1 one. */
Test(local_sgd, outer_sync_bytes_1bit, .timeout = 120)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)2 * B * MICRO, T, cfg.vocab_size, 31);
    tu_layout l = {.tp = 1, .pp = 1, .dp = 2, .n_micro = MICRO, .local = local(1, TRI_OUTER_AVERAGE),
                   .compression = outer_comp(TRI_COMPRESS_1BIT)};
    tu_result r;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &l, w, 1, &r), TRI_OK, "%s", tri_error_message());
    uint64_t n = (uint64_t)r.owned_elements * 4; /* ZeRO 0: the padded parameters, fp32 */
    cr_expect_eq(r.dp_bytes[TRI_COMM_REDUCE_SCATTER], 0, "the deltas went through a reduce-scatter");
    cr_expect_eq(r.dp_bytes[TRI_COMM_ALL_REDUCE], 0);
    uint64_t payload = r.dp_bytes[TRI_COMM_ALL_GATHER] - 2 * n;
    cr_expect_gt(r.dp_bytes[TRI_COMM_ALL_GATHER], 2 * n, "no payload was all-gathered");
    /* per element 1 bit + a 4-byte scale per 32, all-gathered from 2 ranks: ~ 2 x n / 4 x (1/8 + 1/8) */
    cr_expect_lt(payload, n / 4, "the 1bit payloads took %llu bytes, the fp32 deltas %llu",
                 (unsigned long long)payload, (unsigned long long)n);
    tu_result_free(&r);
    free(w);
}

/* Checkpoints hold the outer reduction's residual per dp rank (outer_error_feedback): a save in the
 * middle of a window (after two compressed outer steps) resumes bit for bit across the next outer
 * steps, in the same layout and at pp 2; --reset-compression-state starts it from zero, which no
 * longer matches. */
Test(local_sgd, compressed_checkpoint_mid_window_resumes_bit_for_bit, .timeout = 300)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * CK_GLOBAL, T, cfg.vocab_size, 41);
    char *dir = tu_ckpt_tmpdir("local-sgd-comp");
    char ref_dir[4200], mid[4300], ref_final[4300], out[4300], fin[4400];
    snprintf(ref_dir, sizeof ref_dir, "%s/uninterrupted", dir);
    snprintf(mid, sizeof mid, "%s/iter_%07d", ref_dir, CK_HALF);
    snprintf(ref_final, sizeof ref_final, "%s/iter_%07d", ref_dir, TU_CKPT_TOTAL);
    tu_layout base = {.tp = 1, .pp = 1, .dp = 2, .compression = outer_comp(TRI_COMPRESS_1BIT)};
    tu_ckpt_run ref = ck_run(&cfg, w, base);
    ref.save_dir = ref_dir;
    ref.save_interval = CK_HALF;
    cr_assert_eq(tu_ckpt_train(&ref), TRI_OK, "uninterrupted: %s", tri_error_message());
    for (int dp = 0; dp < 2; dp++) { /* the residual was saved, and is not zero */
        int64_t n;
        float *x = tu_ckpt_tensor(mid, TRI_CKPT_REPLICA, dp, "outer_error_feedback", "h.0.attn.c_attn.w", &n);
        cr_assert(x, "dp %d: %s", dp, tri_error_message());
        double mx = 0.0;
        for (int64_t k = 0; k < n; k++)
            mx = fmax(mx, fabs(x[k]));
        cr_expect_gt(mx, 0.0, "dp %d's outer residual is zero", dp);
        free(x);
    }
    for (int c = 0; c < 3; c++) {
        tu_layout l = base;
        l.pp = c == 1 ? 2 : 1;
        snprintf(out, sizeof out, "%s/resumed%d", dir, c);
        tu_ckpt_run r = ck_run(&cfg, w, l);
        r.load = mid;
        r.save_dir = out;
        r.reset_compression_state = c == 2;
        cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "resume %d: %s", c, tri_error_message());
        bool same = true;
        for (int k = 0; k < TU_CKPT_TOTAL - CK_HALF; k++)
            same = same && r.losses[k] == ref.losses[CK_HALF + k];
        if (c == 2) {
            cr_expect_not(same, "--reset-compression-state resumed bit for bit: the residual carried nothing");
            continue;
        }
        cr_expect(same, "resume pp %d: the losses differ from the uninterrupted run's", l.pp);
        snprintf(fin, sizeof fin, "%s/iter_%07d", out, TU_CKPT_TOTAL);
        ck_same(fin, ref_final, c == 0 ? "compressed, resumed in the same layout" : "compressed, resumed at pp 2");
        for (int dp = 0; dp < 2; dp++) {
            int64_t n, m;
            float *x = tu_ckpt_tensor(fin, TRI_CKPT_REPLICA, dp, "outer_error_feedback", "h.3.mlp.c_proj.w", &n);
            float *y = tu_ckpt_tensor(ref_final, TRI_CKPT_REPLICA, dp, "outer_error_feedback", "h.3.mlp.c_proj.w", &m);
            cr_expect(x && y && n == m && memcmp(x, y, (size_t)n * sizeof *x) == 0,
                      "resume pp %d: dp %d's final outer residual differs", l.pp, dp);
            free(x);
            free(y);
        }
    }
    tri_fs_remove_tree(dir);
    free(dir);
    free(w);
}
