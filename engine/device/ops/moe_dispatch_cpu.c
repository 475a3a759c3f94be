/* engine/device/ops/moe_dispatch_cpu.c - the Mixture-of-Experts dispatch on the CPU backend.
 *
 * The counting sort runs as one chunk on one thread (E passes over the N*K selections, negligible
 * beside the experts' GEMMs), the same functions of moe_dispatch_math.h that the GPU runs per (expert,
 * chunk): the integers are the unique stable sort either way. The permutation and the combine are
 * OpenMP loops over the rows calling moe_dispatch_math.h's per-element functions, so every float is
 * the CUDA kernels' bit for bit and independent of the thread count. fp32 only: the wrappers widen
 * bf16. */
#include <stdlib.h>

#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"
#include "engine/device/ops/moe_dispatch_math.h"

static int32_t *i32(tri_tensor t)
{
    return (int32_t *)t.data;
}

int tri_cpu_moe_permute_map(tri_device *d, tri_tensor row_id_map, tri_tensor sorted_indices,
                            tri_tensor tokens_per_expert, tri_tensor expert_idx)
{
    (void)d;
    int64_t NK = tri_tensor_numel(expert_idx), E = tri_tensor_numel(tokens_per_expert);
    int32_t *rows = i32(row_id_map), *sorted = i32(sorted_indices), *tpe = i32(tokens_per_expert);
    const int32_t *idx = ids(expert_idx);
    int32_t *first = malloc((size_t)E * sizeof *first); /* (E, 1 chunk): counts, then first rows */
    if (!first)
        return TRI_ERR(TRI_ENOMEM, "moe_permute_map: cannot allocate %lld expert counts", (long long)E);
    for (int64_t i = 0; i < NK; i++)
        rows[i] = sorted[i] = -1;
    for (int32_t e = 0; e < E; e++)
        first[e] = tri_moe_chunk_count(idx, 0, NK, e);
    tri_moe_scan(first, tpe, E, 1);
    for (int32_t e = 0; e < E; e++)
        tri_moe_chunk_place(rows, sorted, idx, 0, NK, e, first[e]);
    free(first);
    return TRI_OK;
}

/* out(P, C)[r] = tri_moe_spread of src(N, C) (w NULL: the permutation) */
static void spread_loop(tri_tensor out, tri_tensor src, tri_tensor sorted_indices, const float *w)
{
    int64_t P = tri_tensor_rows(out), C = tri_tensor_cols(out), N = tri_tensor_rows(src);
    int64_t K = P / N;
    float *o = fp(out);
    const float *s = fp(src);
    const int32_t *sorted = ids(sorted_indices);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < P; r++)
        for (int64_t c = 0; c < C; c++)
            o[r * C + c] = tri_moe_spread(s, 0, sorted, w, r, c, K, C);
}

int tri_cpu_moe_permute(tri_device *d, tri_tensor x_perm, tri_tensor x, tri_tensor sorted_indices)
{
    TRI_ON_THREADS(nthreads(d), spread_loop(x_perm, x, sorted_indices, NULL));
    return TRI_OK;
}

/* out(N, C)[n] = tri_moe_combine of perm(N*K, C) (w NULL: the gather's backward) */
static void combine_loop(tri_tensor out, tri_tensor perm, tri_tensor row_id_map, const float *w)
{
    int64_t N = tri_tensor_rows(out), C = tri_tensor_cols(out), K = tri_tensor_cols(row_id_map);
    float *o = fp(out);
    const float *p = fp(perm);
    const int32_t *rows = ids(row_id_map);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            o[n * C + c] = tri_moe_combine(p, 0, rows, w, n, c, K, C);
}

int tri_cpu_moe_permute_backward(tri_device *d, tri_tensor dx, tri_tensor dx_perm, tri_tensor row_id_map)
{
    TRI_ON_THREADS(nthreads(d), combine_loop(dx, dx_perm, row_id_map, NULL));
    return TRI_OK;
}

int tri_cpu_moe_unpermute(tri_device *d, tri_tensor y, tri_tensor y_perm, tri_tensor row_id_map, tri_tensor w)
{
    TRI_ON_THREADS(nthreads(d), combine_loop(y, y_perm, row_id_map, fp(w)));
    return TRI_OK;
}

/* dw(N, K)[i] = tri_moe_weight_grad */
static void weight_grad_loop(tri_tensor dw, tri_tensor dy, tri_tensor y_perm, tri_tensor row_id_map)
{
    int64_t NK = tri_tensor_numel(row_id_map), K = tri_tensor_cols(row_id_map), C = tri_tensor_cols(dy);
    float *g = fp(dw);
    const float *a = fp(dy), *b = fp(y_perm);
    const int32_t *rows = ids(row_id_map);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < NK; i++)
        g[i] = tri_moe_weight_grad(a, 0, b, 0, rows, i, K, C);
}

int tri_cpu_moe_unpermute_backward(tri_device *d, tri_tensor dy_perm, tri_tensor dw, tri_tensor dy, tri_tensor y_perm,
                                   tri_tensor sorted_indices, tri_tensor row_id_map, tri_tensor w)
{
    TRI_ON_THREADS(nthreads(d), spread_loop(dy_perm, dy, sorted_indices, fp(w)));
    TRI_ON_THREADS(nthreads(d), weight_grad_loop(dw, dy, y_perm, row_id_map));
    return TRI_OK;
}
