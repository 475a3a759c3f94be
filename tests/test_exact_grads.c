/* tests/test_exact_grads.c - the ops' exact weight gradients (deterministic mode) on the CPU backend.
 *
 * Deterministic mode gives every op that writes a parameter gradient an int64 gradient; the op adds
 * it as exact fixed-point sums (2^-44 units, engine/train/zero.h), one fp32 contribution per 64-row
 * chunk of its inputs (engine/device/ops/exact_grads.c), so that the terms - and hence the bits - do
 * not depend on how a layout cuts the rows (context parallelism: a pass holds T / cp of a sequence's
 * rows, in 64-row pieces). Checked here for matmul (c i64 += a^T b), bias_backward,
 * layernorm_backward, rmsnorm_backward, rmsnorm_heads_backward, embedding_backward,
 * position_backward (cp 1 with a row0 offset, cp 2) and grouped_matmul_backward_weight, fp32 and bf16
 * inputs, N a multiple of 64 and with a partial last chunk:
 *   1. split invariance: rows [0, N) in one call give the same int64 bits as [0, N1) then [N1, N)
 *      (N1 a multiple of 64), and as the chunks one call each in reverse order;
 *   2. the value: the decoded sum (fixed_to_float) is within a derived bound (value_bound) of a
 *      float64 reference of the op's formula;
 *   3. the definition: the int64 sum equals a host loop that runs the op's own fp32 path on each
 *      64-row chunk into a zeroed fp32 buffer and adds tri_fixed_from_float of it - bit for bit, so a
 *      change of the chunk size or of the rounding fails (the grouped matmul: one chunk, the call);
 *   4. matmul's output rows in 64-row GEMMs while the exact scratch is set;
 *   5. non-finite contributions are counted into bad and left out.
 * The refusals (no scratch, short scratch, mixed dtypes, matmul's forms, the setter's arguments) are
 * in tests/test_ops_errors.c. Inputs are bf16-exact (ot_bf16_uniform), so the fp32 and bf16 cases
 * have the same exact values and one reference. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/device.h"
#include "engine/device/ops/positions_math.h"
#include "tests/opsutil.h"

TestSuite(exact_grads, .fini = ot_teardown);

#define BITS 44 /* TRI_FIXED_BITS (engine/train/zero.h) */
#define CHUNK 64 /* TRI_COL_CHUNK: the rows of one exact contribution */
#define MAXG 2
#define MAXIN 8

/* One op on rows of its inputs. call runs it on rows [r0, r0 + n) into the gradients g[0 .. ng)
 * (int64, or f32 for the definition's fp32 reference); ref writes the float64 gradient and, per
 * element, the sum of the terms' magnitudes (for the bound). */
typedef struct xcase xcase;
typedef int (*xcall_fn)(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n);
typedef void (*xref_fn)(const xcase *c, double *ref, double *absum);

struct xcase {
    const char *name;
    int64_t N;            /* rows (the chunked dimension) */
    int ng;               /* gradients */
    int64_t gshape[MAXG][3];
    int gndim[MAXG];
    bool chunked;         /* false: the grouped matmul, rounded once per call */
    int64_t terms;        /* most fp32 terms one chunk adds into one element */
    int rounds;           /* fp32 roundings forming one term */
    tri_tensor in[MAXIN]; /* device inputs (row-major, rows first) */
    float *h[MAXIN];      /* their exact values */
    int64_t p[8];         /* op parameters (sizes, vocab_start, T, row0, cp, cp_rank) */
    int32_t *tokens;      /* host tokens (embedding) */
    int32_t counts[4];    /* grouped matmul */
    xcall_fn call;
    xref_fn ref;
};

/* Rows [r0, r0 + n) of t seen as a matrix; a 1-d t: elements [r0 * per, (r0 + n) * per). */
static tri_tensor rows(tri_tensor t, int64_t r0, int64_t n)
{
    int64_t cols = tri_tensor_cols(t);
    return tri_tensor_2d((char *)t.data + (size_t)(r0 * cols) * tri_dtype_size(t.dtype), t.dtype, n, cols);
}

static tri_tensor range(tri_tensor t, int64_t r0, int64_t n)
{
    return tri_tensor_1d((char *)t.data + (size_t)r0 * tri_dtype_size(t.dtype), t.dtype, n);
}

static tri_tensor grad_shape(const xcase *c, int i, tri_dtype dt)
{
    tri_tensor s = c->gndim[i] == 1   ? tri_tensor_1d(NULL, dt, c->gshape[i][0])
                   : c->gndim[i] == 2 ? tri_tensor_2d(NULL, dt, c->gshape[i][0], c->gshape[i][1])
                                      : tri_tensor_3d(NULL, dt, c->gshape[i][0], c->gshape[i][1], c->gshape[i][2]);
    return s;
}

static int64_t gnumel(const xcase *c, int i)
{
    int64_t n = 1;
    for (int k = 0; k < c->gndim[i]; k++)
        n *= c->gshape[i][k];
    return n;
}

/* ---- the ops on rows ---- */

/* matmul: c(M, P) i64 += a(N, M)^T b(N, P). */
static int call_matmul(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    return tri_op_matmul(d, g[0], rows(c->in[0], r0, n), rows(c->in[1], r0, n), tri_tensor_none(), true, false,
                         1.0f);
}

static void ref_matmul(const xcase *c, double *ref, double *abs)
{
    int64_t M = c->p[0], P = c->p[1];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < P; j++) {
            double s = 0, a = 0;
            for (int64_t r = 0; r < c->N; r++) {
                double t = (double)c->h[0][r * M + i] * c->h[1][r * P + j];
                s += t, a += fabs(t);
            }
            ref[i * P + j] = s, abs[i * P + j] = a;
        }
}

/* bias_backward: dbias(P) += column sums of dout(N, P). */
static int call_bias(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    return tri_op_bias_backward(d, g[0], rows(c->in[0], r0, n));
}

static void ref_bias(const xcase *c, double *ref, double *abs)
{
    int64_t P = c->p[0];
    for (int64_t j = 0; j < P; j++) {
        ref[j] = abs[j] = 0;
        for (int64_t r = 0; r < c->N; r++)
            ref[j] += c->h[0][r * P + j], abs[j] += fabs(c->h[0][r * P + j]);
    }
}

/* layernorm_backward: dw(C) += sum_r dout (x - mean) rstd, db(C) += sum_r dout; in: dinp dout inp w mean rstd. */
static int call_layernorm(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    return tri_op_layernorm_backward(d, rows(c->in[0], r0, n), g[0], g[1], rows(c->in[1], r0, n),
                                     rows(c->in[2], r0, n), c->in[3], range(c->in[4], r0, n),
                                     range(c->in[5], r0, n));
}

static void ref_layernorm(const xcase *c, double *ref, double *abs)
{
    int64_t C = c->p[0];
    const float *dout = c->h[1], *x = c->h[2], *mean = c->h[4], *rstd = c->h[5];
    for (int64_t j = 0; j < C; j++) {
        double s = 0, a = 0, sb = 0, ab = 0;
        for (int64_t r = 0; r < c->N; r++) {
            double t = (double)dout[r * C + j] * ((double)x[r * C + j] - mean[r]) * rstd[r];
            s += t, a += fabs(t), sb += dout[r * C + j], ab += fabs(dout[r * C + j]);
        }
        ref[j] = s, abs[j] = a, ref[C + j] = sb, abs[C + j] = ab;
    }
}

/* rmsnorm_backward: dw(C) += sum_r dout x rstd; in: dinp dout inp w rstd. */
static int call_rmsnorm(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    return tri_op_rmsnorm_backward(d, rows(c->in[0], r0, n), g[0], rows(c->in[1], r0, n), rows(c->in[2], r0, n),
                                   c->in[3], range(c->in[4], r0, n));
}

static void ref_rmsnorm(const xcase *c, double *ref, double *abs)
{
    int64_t C = c->p[0];
    const float *dout = c->h[1], *x = c->h[2], *rstd = c->h[4];
    for (int64_t j = 0; j < C; j++) {
        ref[j] = abs[j] = 0;
        for (int64_t r = 0; r < c->N; r++) {
            double t = (double)dout[r * C + j] * x[r * C + j] * rstd[r];
            ref[j] += t, abs[j] += fabs(t);
        }
    }
}

/* rmsnorm_heads_backward: dq_w(HS) += sum over rows and q heads of dout x rstd, dk_w over the k heads;
 * in: dinp dout inp q_w k_w rstd(N, H); p: HS NH NH_kv W. */
static int call_heads(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    int64_t H = c->p[1] + c->p[2];
    return tri_op_rmsnorm_heads_backward(d, rows(c->in[0], r0, n), g[0], g[1], rows(c->in[1], r0, n),
                                         rows(c->in[2], r0, n), c->in[3], c->in[4], range(c->in[5], r0 * H, n * H),
                                         c->p[1], c->p[2]);
}

static void ref_heads(const xcase *c, double *ref, double *abs)
{
    int64_t HS = c->p[0], NH = c->p[1], H = NH + c->p[2], W = c->p[3];
    const float *dout = c->h[1], *x = c->h[2], *rstd = c->h[5];
    for (int64_t k = 0; k < 2 * HS; k++)
        ref[k] = abs[k] = 0;
    for (int64_t r = 0; r < c->N; r++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t k = 0; k < HS; k++) {
                int64_t e = r * W + h * HS + k, o = (h < NH ? 0 : HS) + k;
                double t = (double)dout[e] * x[e] * rstd[r * H + h];
                ref[o] += t, abs[o] += fabs(t);
            }
}

/* embedding_backward: dwte(V_l, C) row tokens[r] - vocab_start += dout row r (tokens in the shard);
 * in: dout tokens; p: C V_l vocab_start. */
static int call_embedding(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    return tri_op_embedding_backward(d, g[0], rows(c->in[0], r0, n), range(c->in[1], r0, n), c->p[2]);
}

static void ref_embedding(const xcase *c, double *ref, double *abs)
{
    int64_t C = c->p[0], V = c->p[1];
    memset(ref, 0, sizeof(double) * (size_t)(V * C));
    memset(abs, 0, sizeof(double) * (size_t)(V * C));
    for (int64_t r = 0; r < c->N; r++) {
        int64_t v = (int64_t)c->tokens[r] - c->p[2];
        for (int64_t j = 0; v >= 0 && v < V && j < C; j++)
            ref[v * C + j] += c->h[0][r * C + j], abs[v * C + j] += fabs(c->h[0][r * C + j]);
    }
}

/* position_backward: dwpe(T, C) row pos(row0 + r) += dout row r; in: dout; p: C T row0 cp cp_rank. */
static int call_position(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    return tri_op_position_backward(d, g[0], rows(c->in[0], r0, n), c->p[1], c->p[2] + r0, (int)c->p[3],
                                    (int)c->p[4]);
}

static void ref_position(const xcase *c, double *ref, double *abs)
{
    int64_t C = c->p[0], T = c->p[1];
    memset(ref, 0, sizeof(double) * (size_t)(T * C));
    memset(abs, 0, sizeof(double) * (size_t)(T * C));
    for (int64_t r = 0; r < c->N; r++) {
        int64_t pos = tri_seq_position(T, c->p[2] + r, (int)c->p[3], (int)c->p[4]);
        for (int64_t j = 0; j < C; j++)
            ref[pos * C + j] += c->h[0][r * C + j], abs[pos * C + j] += fabs(c->h[0][r * C + j]);
    }
}

/* grouped_matmul_backward_weight: dw(G, O, K) group g += dout_g^T x_g over its rows (counts, in
 * order; rows past their sum unused); in: dout(N, O) x(N, K); p: G O K. The call's rows at once. */
static int call_grouped(tri_device *d, const xcase *c, const tri_tensor *g, int64_t r0, int64_t n)
{
    (void)r0, (void)n;
    return tri_op_grouped_matmul_backward_weight(d, g[0], c->in[0], c->in[1], c->counts, 1.0f);
}

static void ref_grouped(const xcase *c, double *ref, double *abs)
{
    int64_t G = c->p[0], O = c->p[1], K = c->p[2], r0 = 0;
    for (int64_t gi = 0; gi < G; gi++) {
        for (int64_t o = 0; o < O; o++)
            for (int64_t k = 0; k < K; k++) {
                double s = 0, a = 0;
                for (int64_t r = r0; r < r0 + c->counts[gi]; r++) {
                    double t = (double)c->h[0][r * O + o] * c->h[1][r * K + k];
                    s += t, a += fabs(t);
                }
                ref[(gi * O + o) * K + k] = s, abs[(gi * O + o) * K + k] = a;
            }
        r0 += c->counts[gi];
    }
}

/* ---- building the cases ---- */

static uint64_t seed_of(const char *name, int64_t N)
{
    uint64_t s = 1469598103934665603ull;
    for (const char *p = name; *p; p++)
        s = (s ^ (uint64_t)(unsigned char)*p) * 1099511628211ull;
    return s ^ (uint64_t)N;
}

/* Input k: values uniform in [lo, hi), bf16-exact, stored as dt. */
static void input(tri_device *d, xcase *c, int k, tri_dtype dt, tri_tensor shape, float lo, float hi)
{
    size_t n = (size_t)tri_tensor_numel(shape);
    c->h[k] = ot_bf16_uniform(n, lo, hi, seed_of(c->name, c->N) + (uint64_t)k * 7919u);
    c->in[k] = ot_tensor_as(d, dt, shape, c->h[k]);
}

/* The case `op` at N rows with floating inputs of dtype dt. */
static xcase make_case(tri_device *d, const char *op, int64_t N, tri_dtype dt)
{
    xcase c = {.name = op, .N = N, .ng = 1, .chunked = true, .terms = CHUNK, .rounds = 0};
    if (!strcmp(op, "matmul")) {
        int64_t M = 24, P = 40;
        c.p[0] = M, c.p[1] = P;
        input(d, &c, 0, dt, ot_m2(N, M), -1, 1);
        input(d, &c, 1, dt, ot_m2(N, P), -1, 1);
        c.gndim[0] = 2, c.gshape[0][0] = M, c.gshape[0][1] = P, c.rounds = 1;
        c.call = call_matmul, c.ref = ref_matmul;
    } else if (!strcmp(op, "bias_backward")) {
        c.p[0] = 40;
        input(d, &c, 0, dt, ot_m2(N, 40), -1, 1);
        c.gndim[0] = 1, c.gshape[0][0] = 40;
        c.call = call_bias, c.ref = ref_bias;
    } else if (!strcmp(op, "layernorm_backward")) {
        int64_t C = 48;
        c.p[0] = C, c.ng = 2, c.rounds = 3;
        input(d, &c, 0, dt, ot_m2(N, C), 0, 0);
        input(d, &c, 1, dt, ot_m2(N, C), -1, 1);
        input(d, &c, 2, dt, ot_m2(N, C), -2, 2);
        input(d, &c, 3, dt, ot_v1(C), 0.5f, 1.5f);
        input(d, &c, 4, TRI_F32, ot_v1(N), -0.5f, 0.5f);
        input(d, &c, 5, TRI_F32, ot_v1(N), 0.5f, 2.0f);
        c.gndim[0] = c.gndim[1] = 1, c.gshape[0][0] = c.gshape[1][0] = C;
        c.call = call_layernorm, c.ref = ref_layernorm;
    } else if (!strcmp(op, "rmsnorm_backward")) {
        int64_t C = 48;
        c.p[0] = C, c.rounds = 2;
        input(d, &c, 0, dt, ot_m2(N, C), 0, 0);
        input(d, &c, 1, dt, ot_m2(N, C), -1, 1);
        input(d, &c, 2, dt, ot_m2(N, C), -2, 2);
        input(d, &c, 3, dt, ot_v1(C), 0.5f, 1.5f);
        input(d, &c, 4, TRI_F32, ot_v1(N), 0.5f, 2.0f);
        c.gndim[0] = 1, c.gshape[0][0] = C;
        c.call = call_rmsnorm, c.ref = ref_rmsnorm;
    } else if (!strcmp(op, "rmsnorm_heads_backward")) {
        int64_t HS = 16, NH = 3, NH_kv = 1, W = (NH + NH_kv) * HS + 16; /* 16 other (v) columns */
        c.p[0] = HS, c.p[1] = NH, c.p[2] = NH_kv, c.p[3] = W, c.ng = 2, c.rounds = 2;
        c.terms = CHUNK * NH; /* a chunk's head rows: 64 rows x NH q heads */
        input(d, &c, 0, dt, ot_m2(N, W), 0, 0);
        input(d, &c, 1, dt, ot_m2(N, W), -1, 1);
        input(d, &c, 2, dt, ot_m2(N, W), -2, 2);
        input(d, &c, 3, dt, ot_v1(HS), 0.5f, 1.5f);
        input(d, &c, 4, dt, ot_v1(HS), 0.5f, 1.5f);
        input(d, &c, 5, TRI_F32, ot_v1(N * (NH + NH_kv)), 0.5f, 2.0f);
        c.gndim[0] = c.gndim[1] = 1, c.gshape[0][0] = c.gshape[1][0] = HS;
        c.call = call_heads, c.ref = ref_heads;
    } else if (!strcmp(op, "embedding_backward")) {
        int64_t C = 32, V = 20, vs = 10;
        c.p[0] = C, c.p[1] = V, c.p[2] = vs;
        input(d, &c, 0, dt, ot_m2(N, C), -1, 1);
        c.tokens = ot_ints((size_t)N);
        for (int64_t r = 0; r < N; r++) /* in [vs - 3, vs + V + 3): some outside the shard, repeats */
            c.tokens[r] = (int32_t)(vs - 3 + (r * 7 + r / 5) % (V + 6));
        c.in[1] = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), c.tokens);
        c.gndim[0] = 2, c.gshape[0][0] = V, c.gshape[0][1] = C;
        c.call = call_embedding, c.ref = ref_embedding;
    } else if (!strcmp(op, "position_backward") || !strcmp(op, "position_backward_cp2")) {
        bool cp2 = op[17] != 0;
        int64_t C = 32, T = cp2 ? 256 : 96;
        c.p[0] = C, c.p[1] = T;
        c.p[2] = cp2 ? 128 : 37; /* row0: a later micro-batch (cp 2: the second local sequence) */
        c.p[3] = cp2 ? 2 : 1, c.p[4] = cp2 ? 1 : 0;
        input(d, &c, 0, dt, ot_m2(N, C), -1, 1);
        c.gndim[0] = 2, c.gshape[0][0] = T, c.gshape[0][1] = C;
        c.call = call_position, c.ref = ref_position;
    } else if (!strcmp(op, "grouped_matmul_backward_weight")) {
        int64_t G = 3, O = 24, K = 16;
        c.p[0] = G, c.p[1] = O, c.p[2] = K, c.chunked = false, c.rounds = 1;
        c.counts[0] = (int32_t)(N / 2 - 30), c.counts[1] = 0, c.counts[2] = (int32_t)(N / 2 + 10);
        c.terms = N; /* one GEMM over a group's rows */
        input(d, &c, 0, dt, ot_m2(N, O), -1, 1);
        input(d, &c, 1, dt, ot_m2(N, K), -1, 1);
        c.gndim[0] = 3, c.gshape[0][0] = G, c.gshape[0][1] = O, c.gshape[0][2] = K;
        c.call = call_grouped, c.ref = ref_grouped;
    }
    cr_assert(c.call != NULL, "unknown op %s", op);
    return c;
}

/* ---- the checks ---- */

typedef struct exact_env {
    tri_device *d;
    tri_tensor scratch, bad;
} exact_env;

static exact_env env_set(int64_t scratch_n)
{
    exact_env e = {.d = ot_device(1)};
    e.scratch = ot_tensor(e.d, ot_v1(scratch_n), NULL);
    e.bad = ot_tensor(e.d, ot_v1(1), ot_floats(1));
    cr_assert_eq(tri_device_set_exact_grads(e.d, e.scratch, e.bad, BITS), TRI_OK, "%s", tri_error_message());
    return e;
}

static float bad_count(exact_env *e)
{
    float b;
    ot_download(e->d, &b, e->bad);
    return b;
}

/* Sets the gradients g[0 .. c->ng) of dtype dt to zero, allocating them first when g[i].data is NULL. */
static void zero_grads(tri_device *d, const xcase *c, tri_tensor *g, tri_dtype dt)
{
    for (int i = 0; i < c->ng; i++) {
        size_t n = (size_t)gnumel(c, i);
        if (!g[i].data)
            g[i] = ot_tensor(d, grad_shape(c, i, dt), ot_doubles(n));
        else
            cr_assert_eq(tri_device_copy_from_host(d, g[i], ot_doubles(n)), TRI_OK);
    }
}

/* The int64 gradients, concatenated, after running c on the row pieces [cuts[k], cuts[k + 1]) in
 * the order given by order[0 .. pieces) (order NULL: in order). */
static int64_t *run_pieces(exact_env *e, const xcase *c, const int64_t *cuts, int pieces, const int *order)
{
    tri_tensor g[MAXG] = {{0}};
    zero_grads(e->d, c, g, TRI_I64);
    for (int k = 0; k < pieces; k++) {
        int p = order ? order[k] : k;
        int rc = c->call(e->d, c, g, cuts[p], cuts[p + 1] - cuts[p]);
        cr_assert_eq(rc, TRI_OK, "%s: %s", c->name, tri_error_message());
    }
    int64_t total = 0;
    for (int i = 0; i < c->ng; i++)
        total += gnumel(c, i);
    int64_t *out = (int64_t *)ot_doubles((size_t)total), at = 0;
    for (int i = 0; i < c->ng; i++) {
        ot_download(e->d, out + at, g[i]);
        at += gnumel(c, i);
    }
    return out;
}

static int64_t grads_numel(const xcase *c)
{
    int64_t total = 0;
    for (int i = 0; i < c->ng; i++)
        total += gnumel(c, i);
    return total;
}

/* Whether a and b hold the same n int64s; prints the first difference. */
static bool same_i64(const char *what, const int64_t *a, const int64_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "%s: element %lld: %lld != %lld\n", what, (long long)i, (long long)a[i], (long long)b[i]);
            return false;
        }
    return true;
}

/* 3. The definition, on the host: per 64-row chunk (the grouped matmul: the call), the op's own fp32
 * path into zeroed fp32 gradients, each element rounded by tri_fixed_from_float and added with
 * tri_fixed_add; *skipped counts the elements that are not representable (left out). */
static int64_t *definition(exact_env *e, const xcase *c, int64_t *skipped)
{
    int64_t total = grads_numel(c), step = c->chunked ? CHUNK : c->N;
    int64_t *acc = (int64_t *)ot_doubles((size_t)total);
    float *host = ot_floats((size_t)total);
    tri_tensor g[MAXG] = {{0}};
    *skipped = 0;
    for (int64_t r0 = 0; r0 < c->N; r0 += step) {
        zero_grads(e->d, c, g, TRI_F32);
        int64_t n = c->N - r0 < step ? c->N - r0 : step;
        cr_assert_eq(c->call(e->d, c, g, r0, n), TRI_OK, "%s (fp32): %s", c->name, tri_error_message());
        for (int i = 0, at = 0; i < c->ng; at += gnumel(c, i), i++)
            ot_download(e->d, host + at, g[i]);
        for (int64_t k = 0; k < total; k++) {
            int64_t v;
            if (!tri_fixed_from_float(host[k], BITS, &v))
                ++*skipped;
            acc[k] = tri_fixed_add(acc[k], v);
        }
    }
    return acc;
}

/* 2. The value. Per element, the exact gradient S = sum_r t_r (t_r: a product of the op's inputs,
 * exact in float64 for bf16-exact inputs; the reference computes it in float64 with a relative
 * error ~1e-16, negligible here). The op forms each chunk's sum s_c in fp32: each term with
 * `rounds` fp32 roundings, then at most `terms` additions in any order (pairwise, blocked, FMA all
 * do no worse), so |s_c - S_c| <= gamma(terms + rounds) sum_{r in c} |t_r| with gamma(k) =
 * k u / (1 - k u), u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
 * eqs. 3.4 and 4.4). Each s_c is rounded once to 2^-BITS (|error| <= 2^-(BITS+1)); the int64 sum of
 * those is exact; fixed_to_float rounds it once to fp32 (relative u). So
 *   |decoded - S| <= e1 + u (|S| + e1),  e1 = gamma(terms + rounds) sum_r |t_r| + chunks 2^-(BITS+1). */
static void check_value(exact_env *e, const xcase *c, const int64_t *sum)
{
    int64_t total = grads_numel(c), chunks = c->chunked ? (c->N + CHUNK - 1) / CHUNK : 1;
    tri_tensor acc = ot_tensor(e->d, tri_tensor_1d(NULL, TRI_I64, total), sum);
    tri_tensor out = ot_tensor(e->d, ot_v1(total), NULL);
    cr_assert_eq(tri_op_fixed_to_float(e->d, out, acc, BITS), TRI_OK, "%s", tri_error_message());
    float *got = ot_read(e->d, out);
    double *ref = ot_doubles((size_t)total), *abs = ot_doubles((size_t)total);
    c->ref(c, ref, abs);
    double u = ldexp(1.0, -24), k = (double)(c->terms + c->rounds), gamma = k * u / (1 - k * u);
    double worst = 0, nonzero = 0;
    for (int64_t i = 0; i < total; i++) {
        double e1 = gamma * abs[i] + (double)chunks * ldexp(1.0, -(BITS + 1));
        double bound = e1 + u * (fabs(ref[i]) + e1), err = fabs((double)got[i] - ref[i]);
        nonzero += ref[i] != 0;
        if (err / bound > worst)
            worst = err / bound;
        cr_expect(err <= bound, "%s N %lld element %lld: decoded %.9g, float64 reference %.9g, error %.3g > bound %.3g",
                  c->name, (long long)c->N, (long long)i, (double)got[i], ref[i], err, bound);
    }
    cr_expect(3 * nonzero > total, "%s: the reference is mostly zero (%g of %lld): a vacuous check", c->name,
              nonzero, (long long)total);
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s N %lld %s: worst error / bound %.3f\n", c->name, (long long)c->N,
                tri_dtype_name(c->in[0].dtype), worst);
}

/* Properties 1-3 for the op at N rows, inputs of dtype dt. */
static void check_op(const char *op, int64_t N, tri_dtype dt)
{
    exact_env e = env_set(8192); /* position_backward_cp2: dwpe (256, 32) */
    xcase c = make_case(e.d, op, N, dt);
    int64_t total = grads_numel(&c);
    int64_t whole[2] = {0, N};
    int64_t *full = run_pieces(&e, &c, whole, 1, NULL);
    char what[160];
    if (c.chunked) {
        for (int64_t N1 = CHUNK; N1 < N; N1 += CHUNK) { /* 1. two passes, cut at a multiple of 64 */
            int64_t cuts[3] = {0, N1, N};
            snprintf(what, sizeof what, "%s N %lld %s: rows [0, %lld) + [%lld, N) vs one call", op, (long long)N,
                     tri_dtype_name(dt), (long long)N1, (long long)N1);
            cr_expect(same_i64(what, run_pieces(&e, &c, cuts, 2, NULL), full, total), "%s", what);
        }
        int64_t cuts[16];
        int order[16], pieces = 0;
        for (int64_t r0 = 0; r0 < N; r0 += CHUNK)
            cuts[pieces++] = r0;
        cuts[pieces] = N;
        for (int k = 0; k < pieces; k++)
            order[k] = pieces - 1 - k;
        snprintf(what, sizeof what, "%s N %lld %s: the chunks in reverse order vs one call", op, (long long)N,
                 tri_dtype_name(dt));
        cr_expect(same_i64(what, run_pieces(&e, &c, cuts, pieces, order), full, total), "%s", what);
    }
    int64_t skipped;
    int64_t *def = definition(&e, &c, &skipped);
    snprintf(what, sizeof what, "%s N %lld %s: int64 sum vs the per-chunk fp32 definition", op, (long long)N,
             tri_dtype_name(dt));
    cr_expect(same_i64(what, full, def, total), "%s", what);
    cr_expect_eq(skipped, 0);
    cr_expect_eq(bad_count(&e), 0.0f, "%s: bad %g", op, (double)bad_count(&e));
    check_value(&e, &c, full);
}

static const char *const chunked_ops[] = {"matmul", "bias_backward", "layernorm_backward", "rmsnorm_backward",
                                          "rmsnorm_heads_backward", "embedding_backward", "position_backward",
                                          "position_backward_cp2"};
#define N_CHUNKED (int)(sizeof chunked_ops / sizeof chunked_ops[0])

Test(exact_grads, chunked_ops_fp32_whole_chunks)
{
    for (int i = 0; i < N_CHUNKED; i++)
        check_op(chunked_ops[i], 192, TRI_F32);
}

Test(exact_grads, chunked_ops_fp32_partial_chunk)
{
    for (int i = 0; i < N_CHUNKED; i++)
        check_op(chunked_ops[i], 200, TRI_F32);
}

Test(exact_grads, chunked_ops_bf16)
{
    for (int i = 0; i < N_CHUNKED; i++) {
        check_op(chunked_ops[i], 256, TRI_BF16);
        check_op(chunked_ops[i], 200, TRI_BF16);
    }
}

Test(exact_grads, grouped_matmul_rounded_per_call)
{
    check_op("grouped_matmul_backward_weight", 200, TRI_F32);
    check_op("grouped_matmul_backward_weight", 256, TRI_BF16);
}

/* 4. While the exact scratch is set, a matmul with a non-transposed a computes its output rows in
 * GEMMs of 64 rows (engine/device/ops/matmul.c), so a row's bits do not depend on how many rows the
 * call has: rows [64, 128) of an M-row call equal a call on those 64 rows alone. Without it they need
 * not: OpenBLAS picks edge kernels by the call's row count (M % its unroll), and those may round a
 * row differently (another FMA/accumulation order) - which is why tests/test_cp_layouts.c's cases,
 * whose passes hold T / cp rows, pass under OPENBLAS_CORETYPE=Haswell only with the chunking. This
 * runs under whatever kernel the environment's OpenBLAS chose. */
static void check_matmul_rows(int64_t M, tri_dtype dt)
{
    exact_env e = env_set(64);
    int64_t K = 72, P = 40;
    tri_tensor a = ot_tensor_as(e.d, dt, ot_m2(M, K), ot_bf16_uniform((size_t)(M * K), -1, 1, 11));
    tri_tensor w = ot_tensor_as(e.d, dt, ot_m2(P, K), ot_bf16_uniform((size_t)(P * K), -1, 1, 12));
    tri_tensor bias = ot_tensor_as(e.d, dt, ot_v1(P), ot_bf16_uniform((size_t)P, -1, 1, 13));
    tri_tensor c = ot_tensor_as(e.d, dt, ot_m2(M, P), NULL), c1 = ot_tensor_as(e.d, dt, ot_m2(64, P), NULL);
    cr_assert_eq(tri_op_matmul(e.d, c, a, w, bias, false, true, 0.0f), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_op_matmul(e.d, c1, rows(a, 64, 64), w, bias, false, true, 0.0f), TRI_OK, "%s",
                 tri_error_message());
    char what[96];
    snprintf(what, sizeof what, "matmul M %lld %s: rows [64, 128) vs those rows alone", (long long)M,
             tri_dtype_name(dt));
    cr_expect(ot_same_bits(what, ot_read(e.d, rows(c, 64, 64)), ot_read(e.d, c1), (size_t)(64 * P)), "%s", what);
}

Test(exact_grads, matmul_rows_in_chunks_of_64)
{
    check_matmul_rows(192, TRI_F32);
    check_matmul_rows(200, TRI_F32);
    check_matmul_rows(200, TRI_BF16);
}

/* 5. A non-finite contribution: a NaN in row 70 of dout (chunk 1), column 5, makes chunk 1's column 5
 * NaN; fixed_accumulate counts it into bad (1) and leaves it out, so the column holds chunks 0 and 2
 * exactly, and every other column the whole sum. */
Test(exact_grads, nan_counted_into_bad_and_left_out)
{
    exact_env e = env_set(64);
    xcase c = make_case(e.d, "bias_backward", 192, TRI_F32);
    int64_t P = c.p[0];
    c.h[0][70 * P + 5] = NAN;
    cr_assert_eq(tri_device_copy_from_host(e.d, c.in[0], c.h[0]), TRI_OK);
    int64_t whole[2] = {0, c.N};
    int64_t *got = run_pieces(&e, &c, whole, 1, NULL);
    cr_expect_eq(bad_count(&e), 1.0f, "bad %g, expected 1 (one element of one chunk)", (double)bad_count(&e));
    int64_t skipped, *def = definition(&e, &c, &skipped);
    cr_expect_eq(skipped, 1);
    cr_expect(same_i64("bias_backward with a NaN vs the definition", got, def, P));
    /* column 5 independently: our own fp32 sums of chunks 0 and 2 (not the op's order, so not bit for bit),
       each rounded to 2^-44: what is left without chunk 1 */
    int64_t want = 0;
    for (int64_t r0 = 0; r0 < c.N; r0 += 128) {
        float s = 0;
        for (int64_t r = r0; r < r0 + 64; r++)
            s += c.h[0][r * P + 5];
        int64_t v;
        cr_assert(tri_fixed_from_float(s, BITS, &v));
        want += v;
    }
    cr_expect(fabs(ldexp((double)(got[5] - want), -BITS)) < 1e-5, "column 5: %.9g, chunks 0 and 2 sum to %.9g",
              ldexp((double)got[5], -BITS), ldexp((double)want, -BITS));
}
