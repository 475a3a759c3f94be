/* engine/device/ops/flash_cpu.c - fused causal attention on the CPU (see flash_cpu.h).
 *
 * Dao 2023 (FlashAttention-2) §3.1: for one (b, h) and one query tile of up to TRI_FLASH_BR rows,
 * the key/value tiles of TRI_FLASH_BC rows up to the diagonal stream through two sgemm calls (the
 * scores S = scale q k^T into a BR x BC buffer, then out += P v) with the online softmax of
 * engine/core/math.h between them. Backward (Algorithm 2) per (b, h): for each key tile, the query
 * tiles at or past it recompute P = exp(S - lse), then dv += P^T dout, dP = dout v^T,
 * dS = P (dP - delta), dk += scale dS^T q and dq += scale dS k. Only two BR x BC buffers a thread.
 * Grouped-query attention: the backward runs per (b, key/value head), its query heads in order, so
 * each dk and dv sums its group's heads in a fixed order without two threads sharing an element. */
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

/* Keys of tile j0 that query t sees: j0..min(t, j0 + nc - 1), none when t < j0. */
static int64_t visible(int64_t t, int64_t j0, int64_t nc)
{
    return t < j0 ? 0 : min64(t - j0 + 1, nc);
}

/* The running state of one query tile (rows t0..t0+nr at global positions): the output rows being
 * accumulated (in place in out, row stride ldo) and each row's running max and sum. */
typedef struct query_tile {
    float *o;
    int64_t ldo, t0, nr;
    float m[BR], l[BR];
} query_tile;

/* Folds keys and values at global positions j_pos..j_pos+nk (rows of k and v with stride ldkv)
 * into the tile, BC keys at a time, keys after a query's position masked. The local sequence is one
 * such block at j_pos 0; context parallelism (a ring of ranks over the sequence) folds the blocks
 * received from the other ranks the same way, each with its own j_pos. */
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

/* One (b, h, query tile) of the forward: rows i0..i0+nr of out and lse. q, k, v, o point at
 * token 0 of this (b, h) (k and v: of its key/value head); qkv rows are ld apart, out rows C; lse
 * at the head's row 0. */
static void forward_tile(float *o, float *lse, const float *q, const float *k, const float *v, int64_t ld,
                         int64_t i0, int64_t nr, int64_t C, int64_t HS)
{
    query_tile st = {.o = o + i0 * C, .ldo = C, .t0 = i0, .nr = nr};
    for (int64_t r = 0; r < nr; r++) {
        st.m[r] = -INFINITY;
        st.l[r] = 0.0f;
        memset(st.o + r * C, 0, (size_t)HS * sizeof *o);
    }
    fold_kv_block(&st, q + i0 * ld, ld, k, v, ld, 0, i0 + nr, HS);
    for (int64_t r = 0; r < nr; r++) {
        float inv = 1.0f / st.l[r], *orow = st.o + r * C;
        for (int64_t i = 0; i < HS; i++)
            orow[i] *= inv;
        lse[i0 + r] = tri_flash_lse(st.m[r], st.l[r]);
    }
}

static void forward_loop(float *out, float *lse, const float *qkv, tri_flash_dims d)
{
    int64_t T = d.T, NH = d.NH, HS = d.HS, C = NH * HS, W = tri_flash_width(d), tiles = (T + BR - 1) / BR;
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < d.B * NH * tiles; task++) {
        int64_t bh = task / tiles, i0 = task % tiles * BR, b = bh / NH, h = bh % NH, g = tri_flash_kv_head(d, h);
        forward_tile(out + b * T * C + h * HS, lse + bh * T, qkv + tri_flash_q_at(d, b, 0, h),
                     qkv + tri_flash_k_at(d, b, 0, g), qkv + tri_flash_v_at(d, b, 0, g), W, i0, min64(BR, T - i0), C,
                     HS);
    }
}

void tri_cpu_flash_forward(int threads, float *out, float *lse, const float *qkv, tri_flash_dims d)
{
    TRI_ON_THREADS(threads, forward_loop(out, lse, qkv, d));
}

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

/* Zeroes HS columns at x in each of T rows ld apart. */
static void zero_columns(float *x, int64_t T, int64_t ld, int64_t HS)
{
    for (int64_t t = 0; t < T; t++)
        memset(x + t * ld, 0, (size_t)HS * sizeof *x);
}

/* One query head's share of the backward: its dq (overwritten) and its terms of its key/value
 * head's dk and dv (accumulated). Pointers at token 0; qkv and dqkv rows ld apart, dout/out C. */
typedef struct head_grads {
    float *dq, *dk, *dv, *delta;
    const float *q, *k, *v, *g, *o, *lse;
} head_grads;

/* The probabilities p = exp(S - lse) and dS = p (dout v^T - delta) of query tile i0 (nr rows)
 * against key tile j0 (nc keys), BR x BC buffers with row stride BC. */
static void tile_grads(float *p, float *ds, const head_grads *x, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                       int64_t ld, int64_t C, int64_t HS, float scale)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)HS, scale, x->q + i0 * ld, (int)ld,
                x->k + j0 * ld, (int)ld, 0.0f, p, BC);
    for (int64_t r = 0; r < nr; r++) {
        int64_t n = visible(i0 + r, j0, nc);
        for (int64_t j = 0; j < nc; j++)
            p[r * BC + j] = j < n ? tri_expf(p[r * BC + j] - x->lse[i0 + r]) : 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nr, (int)nc, (int)HS, 1.0f, x->g + i0 * C, (int)C,
                x->v + j0 * ld, (int)ld, 0.0f, ds, BC);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < nc; j++)
            ds[r * BC + j] = p[r * BC + j] * (ds[r * BC + j] - x->delta[i0 + r]);
}

/* dv += P^T dout and dk += scale dS^T q for key tile j0 from query tile i0. */
static void tile_dkv(const head_grads *x, const float *p, const float *ds, int64_t i0, int64_t nr, int64_t j0,
                     int64_t nc, int64_t ld, int64_t C, int64_t HS, float scale)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)HS, (int)nr, 1.0f, p, BC, x->g + i0 * C, (int)C,
                1.0f, x->dv + j0 * ld, (int)ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)HS, (int)nr, scale, ds, BC, x->q + i0 * ld,
                (int)ld, 1.0f, x->dk + j0 * ld, (int)ld);
}

/* dq += scale dS k for query tile i0 from key tile j0. */
static void tile_dq(const head_grads *x, const float *ds, int64_t i0, int64_t nr, int64_t j0, int64_t nc, int64_t ld,
                    int64_t HS, float scale)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nr, (int)HS, (int)nc, scale, ds, BC, x->k + j0 * ld,
                (int)ld, 1.0f, x->dq + i0 * ld, (int)ld);
}

/* The whole head in one pass: key tiles outer, query tiles from the diagonal inner (its dq rows
 * zeroed first; its delta already computed). */
static void backward_head(const head_grads *x, int64_t T, int64_t ld, int64_t C, int64_t HS)
{
    float p[BR * BC], ds[BR * BC];
    float scale = 1.0f / sqrtf((float)HS);
    zero_columns(x->dq, T, ld, HS);
    for (int64_t j0 = 0; j0 < T; j0 += BC) {
        int64_t nc = min64(BC, T - j0);
        for (int64_t i0 = j0 / BR * BR; i0 < T; i0 += BR) {
            int64_t nr = min64(BR, T - i0);
            tile_grads(p, ds, x, i0, nr, j0, nc, ld, C, HS, scale);
            tile_dkv(x, p, ds, i0, nr, j0, nc, ld, C, HS, scale);
            tile_dq(x, ds, i0, nr, j0, nc, ld, HS, scale);
        }
    }
}

/* Query head h of sequence b, at token 0. */
static head_grads head_of(float *dqkv, float *delta, const float *dout, const float *qkv, const float *out,
                          const float *lse, tri_flash_dims d, int64_t b, int64_t h)
{
    int64_t g = tri_flash_kv_head(d, h), o0 = b * d.T * d.NH * d.HS + h * d.HS, bh = b * d.NH + h;
    head_grads x = {dqkv + tri_flash_q_at(d, b, 0, h), dqkv + tri_flash_k_at(d, b, 0, g),
                    dqkv + tri_flash_v_at(d, b, 0, g), delta + bh * d.T, qkv + tri_flash_q_at(d, b, 0, h),
                    qkv + tri_flash_k_at(d, b, 0, g), qkv + tri_flash_v_at(d, b, 0, g), dout + o0, out + o0,
                    lse + bh * d.T};
    return x;
}

/* With fewer (b, key/value head) tasks than threads the backward runs as two passes that each have
 * a task per tile: dq per (b, h, query tile), key tiles ascending; dk and dv per (b, key/value
 * head, key tile), the group's query heads in order and their query tiles ascending. Every output
 * element then receives the same sgemm calls with the same operands in the same order as in the
 * one pass (which computes each tile's P and dS once for both), so the bits do not change: the
 * two passes recompute P and dS, about 1.4x the one pass's work, to use the threads. */
static void backward_loops(int threads, float *dqkv, float *delta, const float *dout, const float *qkv,
                           const float *out, const float *lse, tri_flash_dims d)
{
    int64_t T = d.T, NH = d.NH, HS = d.HS, C = NH * HS, W = tri_flash_width(d), rep = NH / d.NH_kv;
    int64_t tiles = (T + BR - 1) / BR;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < d.B * NH; bh++) {
        head_grads x = head_of(dqkv, delta, dout, qkv, out, lse, d, bh / NH, bh % NH);
        backward_delta(x.delta, x.g, x.o, T, C, HS);
    }
    if (d.B * d.NH_kv >= threads) {
#pragma omp for schedule(dynamic)
        for (int64_t bg = 0; bg < d.B * d.NH_kv; bg++) {
            int64_t b = bg / d.NH_kv, g = bg % d.NH_kv;
            zero_columns(dqkv + tri_flash_k_at(d, b, 0, g), T, W, HS);
            zero_columns(dqkv + tri_flash_v_at(d, b, 0, g), T, W, HS);
            for (int64_t h = g * rep; h < (g + 1) * rep; h++) { /* the group's query heads, in order */
                head_grads x = head_of(dqkv, delta, dout, qkv, out, lse, d, b, h);
                backward_head(&x, T, W, C, HS);
            }
        }
        return;
    }
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < d.B * NH * tiles; task++) {
        int64_t bh = task / tiles, i0 = task % tiles * BR, nr = min64(BR, T - i0);
        head_grads x = head_of(dqkv, delta, dout, qkv, out, lse, d, bh / NH, bh % NH);
        float p[BR * BC], ds[BR * BC];
        zero_columns(x.dq + i0 * W, nr, W, HS);
        for (int64_t j0 = 0; j0 < i0 + nr; j0 += BC) {
            int64_t nc = min64(BC, T - j0);
            tile_grads(p, ds, &x, i0, nr, j0, nc, W, C, HS, scale);
            tile_dq(&x, ds, i0, nr, j0, nc, W, HS, scale);
        }
    }
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < d.B * d.NH_kv * tiles; task++) {
        int64_t bg = task / tiles, j0 = task % tiles * BC, nc = min64(BC, T - j0), b = bg / d.NH_kv, g = bg % d.NH_kv;
        float p[BR * BC], ds[BR * BC];
        zero_columns(dqkv + tri_flash_k_at(d, b, j0, g), nc, W, HS);
        zero_columns(dqkv + tri_flash_v_at(d, b, j0, g), nc, W, HS);
        for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
            head_grads x = head_of(dqkv, delta, dout, qkv, out, lse, d, b, h);
            for (int64_t i0 = j0 / BR * BR; i0 < T; i0 += BR) {
                int64_t nr = min64(BR, T - i0);
                tile_grads(p, ds, &x, i0, nr, j0, nc, W, C, HS, scale);
                tile_dkv(&x, p, ds, i0, nr, j0, nc, W, C, HS, scale);
            }
        }
    }
}

void tri_cpu_flash_backward(int threads, float *dqkv, float *delta, const float *dout, const float *qkv,
                            const float *out, const float *lse, tri_flash_dims d)
{
    TRI_ON_THREADS(threads, backward_loops(threads, dqkv, delta, dout, qkv, out, lse, d));
}
