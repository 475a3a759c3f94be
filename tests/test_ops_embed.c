/* tests/test_ops_embed.c - token and position embeddings on the CPU backend.
 *
 * The token embedding is vocab-parallel: a rank holds rows [vocab_start, vocab_start + V_l) of wte,
 * writes zero rows for tokens outside its shard (the TP all-reduce then sums the shards) and must
 * give those tokens no gradient. The position embedding serves sequence shards and micro-batches
 * that start mid-sequence, so row n of the output takes wpe row (row0 + n) % T, wrapping past T,
 * with wpe rows >= T (longer contexts than this run's T) untouched. Forwards are compared with the
 * definition (the embedding exactly: it is a copy); backwards with central finite differences of
 * fp64 loops of L = sum(out * R), and both backwards accumulate into existing gradients.
 * Tolerances as in test_ops_layers.c: 1e-5 forward (position measures 6e-8: one rounded add), 1e-4
 * backward against fp64 differences (measured at most 6.5e-7: float sums of a few O(1) rows). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_embed, .fini = ot_teardown);

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define FLOOR 0.1

/* ---- token embedding ---- */

typedef struct emb_problem {
    int64_t N, C, V_l, vocab_start;
    const int32_t *tokens;
    double *wte;
    const double *R;
    double *out;
} emb_problem;

/* out[n] = wte[tokens[n] - vocab_start] if that row lies in the shard, else 0. */
static void emb_ref(emb_problem *p)
{
    for (int64_t n = 0; n < p->N; n++) {
        int64_t r = (int64_t)p->tokens[n] - p->vocab_start;
        for (int64_t j = 0; j < p->C; j++)
            p->out[n * p->C + j] = (r >= 0 && r < p->V_l) ? p->wte[r * p->C + j] : 0.0;
    }
}

static double emb_loss(void *ctx)
{
    emb_problem *p = ctx;
    emb_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->N * p->C));
}

/* B = 2, T = 7: tokens inside the shard [5, 12) with repeats (7 three times, 5 and 11 twice), and
 * outside it on both sides, including the ids just past each edge (4 and 12). */
static const int32_t shard_tokens[14] = {5, 11, 4, 12, 7, 7, 0, 11, 30, 5, 8, 6, 9, 7};

Test(ops_embed, embedding_vocab_shard_forward_backward)
{
    tri_device *d = ot_device(1);
    const int64_t B = 2, T = 7, N = B * T, C = 67, V_l = 7, vocab_start = 5;
    size_t nw = (size_t)(V_l * C), no = (size_t)(N * C);
    float *wte = ot_uniform(nw, -1.0f, 1.0f, 800), *R = ot_uniform(no, -1.0f, 1.0f, 801);
    float *dwte0 = ot_uniform(nw, -1.0f, 1.0f, 802), *garbage = ot_uniform(no, 7.0f, 9.0f, 803);
    emb_problem p = {N, C, V_l, vocab_start, shard_tokens, ot_widen(wte, nw), ot_widen(R, no),
                     ot_doubles(no)};

    tri_tensor ttok = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, B, T), shard_tokens);
    tri_tensor twte = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, V_l, C), wte);
    tri_tensor tout = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, C), garbage);
    cr_assert_eq(tri_op_embedding_forward(d, tout, ttok, twte, vocab_start), TRI_OK);
    emb_ref(&p);
    /* a copy: exact, and the rows of tokens outside the shard are zeros, not the old values */
    float *out = ot_read(d, tout);
    for (size_t i = 0; i < no; i++)
        cr_assert_eq(out[i], (float)p.out[i], "embedding fwd element %zu", i);

    tri_tensor tdout = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B, T, C), R);
    tri_tensor tdwte = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, V_l, C), dwte0);
    cr_assert_eq(tri_op_embedding_backward(d, tdwte, tdout, ttok, vocab_start), TRI_OK);
    double *g = ot_doubles(nw);
    ot_fd_grad(g, p.wte, nw, emb_loss, &p);
    for (size_t i = 0; i < nw; i++)
        g[i] += dwte0[i];
    cr_assert(ot_close("embedding bwd dwte (+=, shard)", ot_read(d, tdwte), g, nw, FLOOR, BWD_TOL));
}

/* A shard that none of the tokens falls into: zero output, gradient untouched (bit for bit). */
Test(ops_embed, embedding_tokens_outside_the_shard)
{
    tri_device *d = ot_device(1);
    const int64_t N = 14, C = 9, V_l = 4, vocab_start = 13; /* [13, 17): between 12 and 30 */
    size_t nw = (size_t)(V_l * C), no = (size_t)(N * C);
    float *wte = ot_uniform(nw, -1.0f, 1.0f, 810), *dwte0 = ot_uniform(nw, -1.0f, 1.0f, 811);
    tri_tensor ttok = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), shard_tokens);
    tri_tensor twte = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, V_l, C), wte);
    tri_tensor tout =
        ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), ot_uniform(no, 1.0f, 2.0f, 812));
    tri_tensor tdout =
        ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), ot_uniform(no, -1.0f, 1.0f, 813));
    tri_tensor tdwte = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, V_l, C), dwte0);
    cr_assert_eq(tri_op_embedding_forward(d, tout, ttok, twte, vocab_start), TRI_OK);
    cr_assert_eq(tri_op_embedding_backward(d, tdwte, tdout, ttok, vocab_start), TRI_OK);
    float *out = ot_read(d, tout);
    for (size_t i = 0; i < no; i++)
        cr_assert_eq(out[i], 0.0f);
    cr_assert(ot_same_bits("embedding bwd, no token in shard", ot_read(d, tdwte), dwte0, nw));
}

/* ---- position embedding ---- */

typedef struct pos_problem {
    int64_t N, C, T, row0;
    double *wpe;
    const double *out0, *R;
    double *out;
} pos_problem;

/* out[n] = out0[n] + wpe[(row0 + n) % T] */
static void pos_ref(pos_problem *p)
{
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t j = 0; j < p->C; j++)
            p->out[n * p->C + j] =
                p->out0[n * p->C + j] + p->wpe[((p->row0 + n) % p->T) * p->C + j];
}

static double pos_loss(void *ctx)
{
    pos_problem *p = ctx;
    pos_ref(p);
    return ot_dot(p->out, p->R, (size_t)(p->N * p->C));
}

/* wpe has 8 rows (the model's context) but the run uses T = 5; N = 12 rows starting at row0 wrap
 * around T twice. row0 = 3 starts mid-sequence; row0 = 9 is past T itself (a later micro-batch). */
Test(ops_embed, position_wraps_and_accumulates)
{
    const int64_t n_pos = 8, T = 5, N = 12, C = 67;
    const int64_t row0s[2] = {3, 9};
    for (int k = 0; k < 2; k++) {
        tri_device *d = ot_device(1);
        int64_t row0 = row0s[k];
        size_t nw = (size_t)(n_pos * C), no = (size_t)(N * C);
        uint64_t seed = 900 + 10 * (uint64_t)k;
        float *wpe = ot_uniform(nw, -1.0f, 1.0f, seed),
              *out0 = ot_uniform(no, -1.0f, 1.0f, seed + 1);
        float *R = ot_uniform(no, -1.0f, 1.0f, seed + 2),
              *dwpe0 = ot_uniform(nw, -1.0f, 1.0f, seed + 3);
        pos_problem p = {N, C, T, row0, ot_widen(wpe, nw), ot_widen(out0, no), ot_widen(R, no),
                         ot_doubles(no)};

        tri_tensor twpe = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, n_pos, C), wpe);
        tri_tensor tout = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), out0);
        cr_assert_eq(tri_op_position_forward(d, tout, twpe, T, row0, 1, 0), TRI_OK);
        pos_ref(&p);
        cr_assert(ot_close(k ? "position fwd (+=) row0 9" : "position fwd (+=) row0 3",
                           ot_read(d, tout), p.out, no, FLOOR, FWD_TOL));

        tri_tensor tdout = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, N, C), R);
        tri_tensor tdwpe = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, n_pos, C), dwpe0);
        cr_assert_eq(tri_op_position_backward(d, tdwpe, tdout, T, row0, 1, 0), TRI_OK);
        double *g = ot_doubles(nw);
        ot_fd_grad(g, p.wpe, nw, pos_loss, &p);
        for (size_t i = 0; i < nw; i++)
            g[i] += dwpe0[i];
        float *dwpe = ot_read(d, tdwpe);
        cr_assert(ot_close(k ? "position bwd dwpe (+=) row0 9" : "position bwd dwpe (+=) row0 3",
                           dwpe, g, nw, FLOOR, BWD_TOL));
        /* rows T.. are beyond this run's context: not a bit changes */
        cr_assert(ot_same_bits("position bwd rows >= T", dwpe + T * C, dwpe0 + T * C,
                               (size_t)((n_pos - T) * C)));
    }
}
