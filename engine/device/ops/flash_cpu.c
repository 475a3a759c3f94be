/* engine/device/ops/flash_cpu.c - fused causal attention on the CPU (see flash_cpu.h).
 *
 * Dao 2023 (FlashAttention-2) §3.1: for one (b, h) and one query tile of up to TRI_FLASH_BR rows,
 * the key/value tiles of TRI_FLASH_BC rows up to the diagonal stream through two sgemm calls (the
 * scores S = scale q k^T into a BR x BC buffer, then out += P v) with the online softmax of
 * engine/core/math.h between them. Backward (Algorithm 2) per (b, h): for each key tile, the query
 * tiles at or past it recompute P = exp(S - lse), then dv += P^T dout, dP = dout v^T,
 * dS = P (dP - delta), dk += scale dS^T q and dq += scale dS k. Only two BR x BC buffers a thread.
 * Grouped-query attention: the backward runs per (b, key/value head), its query heads in order, so
 * each dk and dv sums its group's heads in a fixed order without two threads sharing an element.
 *
 * Every loop is written once for a general problem (flash_prob): queries from the q columns of a
 * [q | k | v] buffer, keys and values from the last 2 C_kv columns of another buffer (or the same),
 * each buffer's rows at global positions (tri_flash_rows: one chunk, or a cp rank's two), causal by
 * global position. Today's op is the problem whose two buffers are qkv at positions 0..T-1; the
 * context-parallel ops (flash_attention_kv_*) are the others, and meet the same tiles in the same
 * order, so a cut sequence gives the one-rank bits. */
#include "engine/device/ops/flash_cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/ops/attention_math.h"
#include "engine/device/cpu_threads.h"

#define BR TRI_FLASH_BR
#define BC TRI_FLASH_BC

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Keys of the tile at global position j0 that the query at global position t sees:
 * j0..min(t, j0 + nc - 1), none when t < j0. */
static int64_t visible(int64_t t, int64_t j0, int64_t nc)
{
    return t < j0 ? 0 : min64(t - j0 + 1, nc);
}

/* The end (one past the last row) of the chunk that row t of a buffer of n rows belongs to. */
static int64_t chunk_end(tri_flash_rows r, int64_t t, int64_t n)
{
    return t < r.Tc ? min64(r.Tc, n) : n;
}

/* ---- the problem ---- */

/* Queries: the q columns (0 .. NH HS) of T rows W wide; keys and values: the last 2 NH_kv HS columns
 * (k heads, then v heads) of Tk rows Wk wide; out, dout (B, T, NH HS); lse, delta (B, NH, T). */
typedef struct flash_prob {
    tri_flash_dims d; /* d.T: the query rows */
    int64_t W, Tk, Wk;
    tri_flash_rows qr, kr;
} flash_prob;

static flash_prob prob_of(tri_flash_dims d, int64_t Tk, int64_t Wk, tri_flash_rows qr, tri_flash_rows kr)
{
    flash_prob p = {d, tri_flash_width(d), Tk, Wk, qr, kr};
    return p;
}

static int64_t q_at(const flash_prob *p, int64_t b, int64_t t, int64_t h)
{
    return (b * p->d.T + t) * p->W + h * p->d.HS;
}

static int64_t k_at(const flash_prob *p, int64_t b, int64_t j, int64_t g)
{
    return (b * p->Tk + j) * p->Wk + p->Wk - 2 * p->d.NH_kv * p->d.HS + g * p->d.HS;
}

static int64_t v_at(const flash_prob *p, int64_t b, int64_t j, int64_t g)
{
    return k_at(p, b, j, g) + p->d.NH_kv * p->d.HS;
}

/* The running state of one query tile (rows at global positions t0..t0+nr): the output rows being
 * accumulated (in place in out, row stride ldo) and each row's running max and sum. */
typedef struct query_tile {
    float *o;
    int64_t ldo, t0, nr;
    float m[BR], l[BR];
} query_tile;

/* Folds keys and values at global positions j_pos..j_pos+nk (rows of k and v with stride ldkv)
 * into the tile, BC keys at a time, keys after a query's position masked. The local sequence is one
 * such block at j_pos 0; context parallelism folds the blocks of the other ranks the same way, each
 * with its own j_pos. */
static void fold_kv_block(query_tile *st, const float *q, int64_t ldq, const float *k, const float *v, int64_t ldkv,
                          int64_t j_pos, int64_t nk, int64_t HS)
{
    float s[BR * BC];
    float scale = 1.0f / sqrtf((float)HS);
    for (int64_t j0 = 0; j0 < nk && j_pos + j0 <= st->t0 + st->nr - 1; j0 += BC) {
        int64_t nc = min64(BC, nk - j0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)st->nr, (int)nc, (int)HS, scale, q, (int)ldq,
                    k + j0 * ldkv, (int)ldkv, 0.0f, s, BC);
        for (int64_t r = 0; r < st->nr; r++) {
            float *row = s + r * BC, *orow = st->o + r * st->ldo;
            int64_t n = visible(st->t0 + r, j_pos + j0, nc);
            float alpha = tri_flash_row_update(row, n, &st->m[r], &st->l[r]);
            for (int64_t j = n; j < nc; j++)
                row[j] = 0.0f;
            if (alpha != 1.0f)
                for (int64_t i = 0; i < HS; i++)
                    orow[i] *= alpha;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)st->nr, (int)HS, (int)nc, 1.0f, s, BC,
                    v + j0 * ldkv, (int)ldkv, 1.0f, st->o, (int)st->ldo);
    }
}

/* One (b, h, query tile) of the forward: local rows i0..i0+nr of out and lse, the key chunks in
 * order. A row that sees no key gets out 0 and lse -inf (tri_flash_lse). */
static void forward_tile(float *out, float *lse, const float *qbuf, const float *kvbuf, const flash_prob *p,
                         int64_t b, int64_t h, int64_t i0, int64_t nr)
{
    int64_t HS = p->d.HS, C = p->d.NH * HS, g = tri_flash_kv_head(p->d, h);
    query_tile st = {.o = out + (b * p->d.T + i0) * C + h * HS, .ldo = C, .t0 = tri_flash_pos(p->qr, i0), .nr = nr};
    for (int64_t r = 0; r < nr; r++) {
        st.m[r] = -INFINITY;
        st.l[r] = 0.0f;
        memset(st.o + r * C, 0, (size_t)HS * sizeof *out);
    }
    for (int64_t j = 0; j < p->Tk; j = chunk_end(p->kr, j, p->Tk))
        fold_kv_block(&st, qbuf + q_at(p, b, i0, h), p->W, kvbuf + k_at(p, b, j, g), kvbuf + v_at(p, b, j, g), p->Wk,
                      tri_flash_pos(p->kr, j), chunk_end(p->kr, j, p->Tk) - j, HS);
    float *l = lse + (b * p->d.NH + h) * p->d.T;
    for (int64_t r = 0; r < nr; r++) {
        float inv = st.l[r] == 0.0f ? 0.0f : 1.0f / st.l[r], *orow = st.o + r * C;
        for (int64_t i = 0; i < HS; i++)
            orow[i] *= inv;
        l[i0 + r] = tri_flash_lse(st.m[r], st.l[r]);
    }
}

static void forward_loop(float *out, float *lse, const float *qbuf, const float *kvbuf, const flash_prob *p)
{
    int64_t T = p->d.T, NH = p->d.NH, tiles = (T + BR - 1) / BR;
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < p->d.B * NH * tiles; task++) {
        int64_t bh = task / tiles, i0 = task % tiles * BR;
        forward_tile(out, lse, qbuf, kvbuf, p, bh / NH, bh % NH, i0, min64(BR, T - i0));
    }
}

void tri_cpu_flash_forward(int threads, float *out, float *lse, const float *qkv, tri_flash_dims d)
{
    flash_prob p = prob_of(d, d.T, tri_flash_width(d), tri_flash_rows_whole(d.T), tri_flash_rows_whole(d.T));
    TRI_ON_THREADS(threads, forward_loop(out, lse, qkv, qkv, &p));
}

void tri_cpu_flash_kv_forward(int threads, float *out, float *lse, const float *qkv, const float *kv, int64_t Tk,
                              int64_t Wk, tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d)
{
    flash_prob p = prob_of(d, Tk, Wk, qr, kr);
    TRI_ON_THREADS(threads, forward_loop(out, lse, qkv, kv, &p));
}

/* ---- backward ---- */

/* delta[t] = dout_t . out_t over this head's HS columns (rows C apart), left to right. */
static void backward_delta(float *delta, const float *g, const float *o, int64_t T, int64_t C, int64_t HS)
{
    for (int64_t t = 0; t < T; t++) {
        float acc = 0.0f;
        for (int64_t i = 0; i < HS; i++)
            acc += g[t * C + i] * o[t * C + i];
        delta[t] = acc;
    }
}

static void delta_loop(float *delta, const float *dout, const float *out, tri_flash_dims d)
{
    int64_t NH = d.NH, C = NH * d.HS;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < d.B * NH; bh++) {
        int64_t o0 = bh / NH * d.T * C + bh % NH * d.HS;
        backward_delta(delta + bh * d.T, dout + o0, out + o0, d.T, C, d.HS);
    }
}

void tri_cpu_flash_delta(int threads, float *delta, const float *dout, const float *out, tri_flash_dims d)
{
    TRI_ON_THREADS(threads, delta_loop(delta, dout, out, d));
}

/* Zeroes HS columns at x in each of T rows ld apart. */
static void zero_columns(float *x, int64_t T, int64_t ld, int64_t HS)
{
    for (int64_t t = 0; t < T; t++)
        memset(x + t * ld, 0, (size_t)HS * sizeof *x);
}

/* One query head's share of the backward: its dq and its terms of its key/value head's dk and dv.
 * Pointers at local row 0 of this (b, h) (q, dq: rows ldq apart; k, v, dk, dv: ldk; g (dout), o:
 * C; lse, delta: the head's row of T). */
typedef struct head_grads {
    float *dq, *dk, *dv;
    const float *delta, *q, *k, *v, *g, *lse;
    int64_t ldq, ldk, C;
    tri_flash_rows qr, kr;
} head_grads;

/* The probabilities p = exp(S - lse) and dS = p (dout v^T - delta) of local query tile i0 (nr rows)
 * against local key tile j0 (nc keys), BR x BC buffers with row stride BC. */
static void tile_grads(float *p, float *ds, const head_grads *x, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                       int64_t HS, float scale)
{
    int64_t tq = tri_flash_pos(x->qr, i0), tk = tri_flash_pos(x->kr, j0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)HS, scale, x->q + i0 * x->ldq,
                (int)x->ldq, x->k + j0 * x->ldk, (int)x->ldk, 0.0f, p, BC);
    for (int64_t r = 0; r < nr; r++) {
        int64_t n = visible(tq + r, tk, nc);
        for (int64_t j = 0; j < nc; j++)
            p[r * BC + j] = j < n ? tri_expf(p[r * BC + j] - x->lse[i0 + r]) : 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)HS, 1.0f, x->g + i0 * x->C, (int)x->C,
                x->v + j0 * x->ldk, (int)x->ldk, 0.0f, ds, BC);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < nc; j++)
            ds[r * BC + j] = p[r * BC + j] * (ds[r * BC + j] - x->delta[i0 + r]);
}

/* dv += P^T dout and dk += scale dS^T q for key tile j0 from query tile i0. */
static void tile_dkv(const head_grads *x, const float *p, const float *ds, int64_t i0, int64_t nr, int64_t j0,
                     int64_t nc, int64_t HS, float scale)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)HS, (int)nr, 1.0f, p, BC, x->g + i0 * x->C,
                (int)x->C, 1.0f, x->dv + j0 * x->ldk, (int)x->ldk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)HS, (int)nr, scale, ds, BC, x->q + i0 * x->ldq,
                (int)x->ldq, 1.0f, x->dk + j0 * x->ldk, (int)x->ldk);
}

/* dq += scale dS k for query tile i0 from key tile j0. */
static void tile_dq(const head_grads *x, const float *ds, int64_t i0, int64_t nr, int64_t j0, int64_t nc, int64_t HS,
                    float scale)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)HS, (int)nc, scale, ds, BC,
                x->k + j0 * x->ldk, (int)x->ldk, 1.0f, x->dq + i0 * x->ldq, (int)x->ldq);
}

/* Whether local query tile i0 (nr rows) has a row at or past the key at local row j0. */
static bool tile_meets(const head_grads *x, int64_t i0, int64_t nr, int64_t j0)
{
    return tri_flash_pos(x->qr, i0) + nr - 1 >= tri_flash_pos(x->kr, j0);
}

/* Query head h of sequence b. dqkv: the buffer of dq (query layout), dkv: of dk and dv (key
 * layout); either may be NULL when its pass does not write it. */
static head_grads head_of(float *dq, float *dkv, const float *delta, const float *dout, const float *qbuf,
                          const float *kvbuf, const float *lse, const flash_prob *p, int64_t b, int64_t h)
{
    tri_flash_dims d = p->d;
    int64_t g = tri_flash_kv_head(d, h), o0 = b * d.T * d.NH * d.HS + h * d.HS, bh = b * d.NH + h;
    head_grads x = {dq ? dq + q_at(p, b, 0, h) : NULL,
                    dkv ? dkv + k_at(p, b, 0, g) : NULL,
                    dkv ? dkv + v_at(p, b, 0, g) : NULL,
                    delta + bh * d.T,
                    qbuf + q_at(p, b, 0, h),
                    kvbuf + k_at(p, b, 0, g),
                    kvbuf + v_at(p, b, 0, g),
                    dout + o0,
                    lse + bh * d.T,
                    p->W,
                    p->Wk,
                    d.NH * d.HS,
                    p->qr,
                    p->kr};
    return x;
}

/* The whole head in one pass (today's op only: one buffer, one chunk): key tiles outer, query tiles
 * from the diagonal inner (its dq rows zeroed first; its delta already computed). */
static void backward_head(const head_grads *x, int64_t T, int64_t HS)
{
    float p[BR * BC], ds[BR * BC];
    float scale = 1.0f / sqrtf((float)HS);
    zero_columns(x->dq, T, x->ldq, HS);
    for (int64_t j0 = 0; j0 < T; j0 += BC) {
        int64_t nc = min64(BC, T - j0);
        for (int64_t i0 = j0 / BR * BR; i0 < T; i0 += BR) {
            int64_t nr = min64(BR, T - i0);
            tile_grads(p, ds, x, i0, nr, j0, nc, HS, scale);
            tile_dkv(x, p, ds, i0, nr, j0, nc, HS, scale);
            tile_dq(x, ds, i0, nr, j0, nc, HS, scale);
        }
    }
}

/* The dq pass: a task per (b, h, query tile); the key chunks in order, in each the key tiles
 * ascending up to the tile's last position. dq rows zeroed first unless accumulating. */
static void dq_loop(float *dq, const float *delta, const float *dout, const float *qbuf, const float *kvbuf,
                    const float *lse, const flash_prob *p, bool accumulate)
{
    int64_t T = p->d.T, NH = p->d.NH, HS = p->d.HS, tiles = (T + BR - 1) / BR;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < p->d.B * NH * tiles; task++) {
        int64_t bh = task / tiles, i0 = task % tiles * BR, nr = min64(BR, T - i0);
        head_grads x = head_of(dq, NULL, delta, dout, qbuf, kvbuf, lse, p, bh / NH, bh % NH);
        float pb[BR * BC], ds[BR * BC];
        if (!accumulate)
            zero_columns(x.dq + i0 * x.ldq, nr, x.ldq, HS);
        for (int64_t c = 0; c < p->Tk; c = chunk_end(p->kr, c, p->Tk))
            for (int64_t j0 = c, end = chunk_end(p->kr, c, p->Tk); j0 < end && tile_meets(&x, i0, nr, j0); j0 += BC) {
                int64_t nc = min64(BC, end - j0);
                tile_grads(pb, ds, &x, i0, nr, j0, nc, HS, scale);
                tile_dq(&x, ds, i0, nr, j0, nc, HS, scale);
            }
    }
}

/* The dk, dv pass: a task per (b, key/value head, key tile); the group's query heads in order, for
 * each the query tiles ascending that reach the key tile. dk, dv rows zeroed first unless
 * accumulating. */
static void dkv_loop(float *dkv, const float *delta, const float *dout, const float *qbuf, const float *kvbuf,
                     const float *lse, const flash_prob *p, bool accumulate)
{
    int64_t T = p->d.T, Tk = p->Tk, HS = p->d.HS, NH_kv = p->d.NH_kv, rep = p->d.NH / NH_kv;
    int64_t tiles = (Tk + BC - 1) / BC + 1; /* a chunk may end in a partial tile: one more slot */
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < p->d.B * NH_kv * tiles; task++) {
        int64_t bg = task / tiles, slot = task % tiles, b = bg / NH_kv, g = bg % NH_kv;
        /* key tile `slot` counts the tiles of chunk 0, then those of chunk 1 */
        int64_t c0end = chunk_end(p->kr, 0, Tk), n0 = (c0end + BC - 1) / BC, j0, end;
        if (slot < n0)
            j0 = slot * BC, end = c0end;
        else if (c0end + (slot - n0) * BC < Tk)
            j0 = c0end + (slot - n0) * BC, end = Tk;
        else
            continue;
        int64_t nc = min64(BC, end - j0);
        float pb[BR * BC], ds[BR * BC];
        if (!accumulate) {
            zero_columns(dkv + k_at(p, b, j0, g), nc, p->Wk, HS);
            zero_columns(dkv + v_at(p, b, j0, g), nc, p->Wk, HS);
        }
        for (int64_t h = g * rep; h < (g + 1) * rep; h++) { /* the group's query heads, in order */
            head_grads x = head_of(NULL, dkv, delta, dout, qbuf, kvbuf, lse, p, b, h);
            for (int64_t i0 = 0; i0 < T; i0 += BR) {
                int64_t nr = min64(BR, T - i0);
                if (!tile_meets(&x, i0, nr, j0))
                    continue;
                tile_grads(pb, ds, &x, i0, nr, j0, nc, HS, scale);
                tile_dkv(&x, pb, ds, i0, nr, j0, nc, HS, scale);
            }
        }
    }
}

/* Today's op. With fewer (b, key/value head) tasks than threads the backward runs as the two passes
 * above, which each have a task per tile: dq per (b, h, query tile), key tiles ascending; dk and dv
 * per (b, key/value head, key tile), the group's query heads in order and their query tiles
 * ascending. Every output element then receives the same sgemm calls with the same operands in the
 * same order as in the one pass (which computes each tile's P and dS once for both), so the bits do
 * not change: the two passes recompute P and dS, about 1.4x the one pass's work, to use the
 * threads. The context-parallel ops are these two passes, run separately. */
static void backward_loops(int threads, float *dqkv, float *delta, const float *dout, const float *qkv,
                           const float *out, const float *lse, const flash_prob *p)
{
    tri_flash_dims d = p->d;
    int64_t T = d.T, HS = d.HS, W = p->W, rep = d.NH / d.NH_kv;
    delta_loop(delta, dout, out, d);
    if (d.B * d.NH_kv >= threads) {
#pragma omp for schedule(dynamic)
        for (int64_t bg = 0; bg < d.B * d.NH_kv; bg++) {
            int64_t b = bg / d.NH_kv, g = bg % d.NH_kv;
            zero_columns(dqkv + k_at(p, b, 0, g), T, W, HS);
            zero_columns(dqkv + v_at(p, b, 0, g), T, W, HS);
            for (int64_t h = g * rep; h < (g + 1) * rep; h++) { /* the group's query heads, in order */
                head_grads x = head_of(dqkv, dqkv, delta, dout, qkv, qkv, lse, p, b, h);
                backward_head(&x, T, HS);
            }
        }
        return;
    }
    dq_loop(dqkv, delta, dout, qkv, qkv, lse, p, false);
    dkv_loop(dqkv, delta, dout, qkv, qkv, lse, p, false);
}

void tri_cpu_flash_backward(int threads, float *dqkv, float *delta, const float *dout, const float *qkv,
                            const float *out, const float *lse, tri_flash_dims d)
{
    flash_prob p = prob_of(d, d.T, tri_flash_width(d), tri_flash_rows_whole(d.T), tri_flash_rows_whole(d.T));
    TRI_ON_THREADS(threads, backward_loops(threads, dqkv, delta, dout, qkv, out, lse, &p));
}

void tri_cpu_flash_kv_backward_dq(int threads, float *dqkv, const float *delta, const float *dout,
                                  const float *qkv, const float *kv, const float *lse, int64_t Tk, int64_t Wk,
                                  tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d, bool accumulate)
{
    flash_prob p = prob_of(d, Tk, Wk, qr, kr);
    TRI_ON_THREADS(threads, dq_loop(dqkv, delta, dout, qkv, kv, lse, &p, accumulate));
}

void tri_cpu_flash_kv_backward_dkv(int threads, float *dkv, const float *delta, const float *dout,
                                   const float *qkv, const float *kv, const float *lse, int64_t Tk, int64_t Wk,
                                   tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d, bool accumulate)
{
    flash_prob p = prob_of(d, Tk, Wk, qr, kr);
    TRI_ON_THREADS(threads, dkv_loop(dkv, delta, dout, qkv, kv, lse, &p, accumulate));
}

/* Both passes in one: a task per (b, key/value head); for each of the group's query heads in order,
 * the key chunks in order and in each the key tiles ascending, the query tiles ascending that reach
 * the tile: P and dS once per tile pair for dk, dv and dq. Each dq row receives its key tiles
 * ascending and each dk, dv row its heads in order, each's query tiles ascending: the sgemm calls
 * of the two passes in the same order, so the same bits. */
static void kv_backward_one_pass(float *dq, float *dkv, const float *delta, const float *dout, const float *qbuf,
                                 const float *kvbuf, const float *lse, const flash_prob *p, bool accumulate)
{
    int64_t T = p->d.T, Tk = p->Tk, HS = p->d.HS, NH_kv = p->d.NH_kv, rep = p->d.NH / NH_kv;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp for schedule(dynamic)
    for (int64_t bg = 0; bg < p->d.B * NH_kv; bg++) {
        int64_t b = bg / NH_kv, g = bg % NH_kv;
        float pb[BR * BC], ds[BR * BC];
        if (!accumulate) {
            zero_columns(dkv + k_at(p, b, 0, g), Tk, p->Wk, HS);
            zero_columns(dkv + v_at(p, b, 0, g), Tk, p->Wk, HS);
        }
        for (int64_t h = g * rep; h < (g + 1) * rep; h++) { /* the group's query heads, in order */
            head_grads x = head_of(dq, dkv, delta, dout, qbuf, kvbuf, lse, p, b, h);
            if (!accumulate)
                zero_columns(x.dq, T, x.ldq, HS);
            for (int64_t c = 0; c < Tk; c = chunk_end(p->kr, c, Tk))
                for (int64_t j0 = c, end = chunk_end(p->kr, c, Tk); j0 < end; j0 += BC) {
                    int64_t nc = min64(BC, end - j0);
                    for (int64_t i0 = 0; i0 < T; i0 += BR) {
                        int64_t nr = min64(BR, T - i0);
                        if (!tile_meets(&x, i0, nr, j0))
                            continue;
                        tile_grads(pb, ds, &x, i0, nr, j0, nc, HS, scale);
                        tile_dkv(&x, pb, ds, i0, nr, j0, nc, HS, scale);
                        tile_dq(&x, ds, i0, nr, j0, nc, HS, scale);
                    }
                }
        }
    }
}

static void kv_backward_loops(int threads, float *dq, float *dkv, const float *delta, const float *dout,
                              const float *qbuf, const float *kvbuf, const float *lse, const flash_prob *p,
                              bool accumulate)
{
    if (p->d.B * p->d.NH_kv >= threads) {
        kv_backward_one_pass(dq, dkv, delta, dout, qbuf, kvbuf, lse, p, accumulate);
        return;
    }
    dq_loop(dq, delta, dout, qbuf, kvbuf, lse, p, accumulate);
    dkv_loop(dkv, delta, dout, qbuf, kvbuf, lse, p, accumulate);
}

void tri_cpu_flash_kv_backward(int threads, float *dqkv, float *dkv, const float *delta, const float *dout,
                               const float *qkv, const float *kv, const float *lse, int64_t Tk, int64_t Wk,
                               tri_flash_rows qr, tri_flash_rows kr, tri_flash_dims d, bool accumulate)
{
    flash_prob p = prob_of(d, Tk, Wk, qr, kr);
    TRI_ON_THREADS(threads, kv_backward_loops(threads, dqkv, dkv, delta, dout, qkv, kv, lse, &p, accumulate));
}

/* ---- merge ---- */

static void merge_loop(float *out, float *lse, const float *out2, const float *lse2, tri_flash_dims d)
{
    int64_t NH = d.NH, HS = d.HS, C = NH * HS;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < d.B * d.T * NH; row++) { /* (b, t, h) */
        int64_t h = row % NH, bt = row / NH, b = bt / d.T, t = bt % d.T, s = (b * NH + h) * d.T + t;
        float w1, w2;
        lse[s] = tri_flash_merge_weights(lse[s], lse2[s], &w1, &w2);
        float *o = out + bt * C + h * HS;
        const float *o2 = out2 + bt * C + h * HS;
        for (int64_t i = 0; i < HS; i++)
            o[i] = o[i] * w1 + o2[i] * w2;
    }
}

void tri_cpu_flash_merge(int threads, float *out, float *lse, const float *out2, const float *lse2, tri_flash_dims d)
{
    TRI_ON_THREADS(threads, merge_loop(out, lse, out2, lse2, d));
}
