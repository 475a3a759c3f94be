/* engine/device/ops/crossentropy_cpu.c - softmax cross-entropy on the CPU backend: a row of
 * logits at a time through engine/device/ops/crossentropy_math.h's cross-entropy pieces (the CUDA kernels'
 * order), parallel over rows; the fused classifier runs the pieces' functions on one row in turn, so it
 * has their bits. */
#include <stdbool.h>

#include "engine/core/math.h"
#include "engine/device/ops/crossentropy_math.h"
#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"

/* ---- cross-entropy ---- */

static void ce_row_max_loop(tri_tensor maxes, tri_tensor logits, int64_t V_valid)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++)
        fp(maxes)[n] = tri_ce_row_max(fp(logits) + n * V_l, V_valid);
}

int tri_cpu_ce_row_max(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid)
{
    TRI_ON_THREADS(nthreads(d), ce_row_max_loop(maxes, logits, V_valid));
    return TRI_OK;
}

static void ce_sumexp_target_loop(tri_tensor stats, tri_tensor logits, tri_tensor maxes,
                                tri_tensor targets, int64_t vocab_start, int64_t V_valid)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *row = fp(logits) + n * V_l;
        int64_t r = (int64_t)ids(targets)[n] - vocab_start;
        fp(stats)[2 * n] = tri_ce_row_sumexp(row, fp(maxes)[n], V_valid);
        fp(stats)[2 * n + 1] = (r >= 0 && r < V_valid) ? row[r] : 0.0f;
    }
}

int tri_cpu_ce_sumexp_target(tri_device *d, tri_tensor stats, tri_tensor logits, tri_tensor maxes,
                             tri_tensor targets, int64_t vocab_start, int64_t V_valid)
{
    TRI_ON_THREADS(nthreads(d), ce_sumexp_target_loop(stats, logits, maxes, targets, vocab_start, V_valid));
    return TRI_OK;
}

int tri_cpu_ce_loss(tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats)
{
    int64_t N = tri_tensor_numel(losses);
    for (int64_t n = 0; n < N; n++)
        fp(losses)[n] = tri_ce_loss(fp(maxes)[n], fp(stats)[2 * n], fp(stats)[2 * n + 1]);
    return TRI_OK;
}

static void ce_backward_loop(tri_tensor dlogits, tri_tensor logits, tri_tensor maxes,
                           tri_tensor stats, tri_tensor targets, int64_t vocab_start, int64_t V_valid,
                           float dloss)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *row = fp(logits) + n * V_l;
        float *drow = fp(dlogits) + n * V_l;
        float mx = fp(maxes)[n], sum = fp(stats)[2 * n];
        int64_t r = (int64_t)ids(targets)[n] - vocab_start;
        for (int64_t j = 0; j < V_valid; j++)
            drow[j] = tri_ce_dlogit(row[j], mx, sum, j == r, dloss);
        for (int64_t j = V_valid; j < V_l; j++)
            drow[j] = 0.0f;
    }
}

int tri_cpu_ce_backward(tri_device *d, tri_tensor dlogits, tri_tensor logits, tri_tensor maxes,
                        tri_tensor stats, tri_tensor targets, int64_t vocab_start, int64_t V_valid,
                        float dloss)
{
    TRI_ON_THREADS(nthreads(d), ce_backward_loop(dlogits, logits, maxes, stats, targets, vocab_start, V_valid, dloss));
    return TRI_OK;
}

/* The fused classifier a row at a time, so the row stays in the core's cache between its passes:
 * the pieces' arithmetic (the functions above call the same math.h functions), so their bits. */
static void ce_fused_loop(tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                          int64_t V_valid, float dloss)
{
    int64_t N = tri_tensor_rows(logits), V_l = tri_tensor_cols(logits);
    bool backward = tri_tensor_present(dlogits);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *row = fp(logits) + n * V_l;
        int64_t r = ids(targets)[n];
        float mx = tri_ce_row_max(row, V_valid);
        float sum = tri_ce_row_sumexp(row, mx, V_valid);
        fp(losses)[n] = tri_ce_loss(mx, sum, (r >= 0 && r < V_valid) ? row[r] : 0.0f);
        if (!backward)
            continue;
        float *drow = fp(dlogits) + n * V_l;
        for (int64_t j = 0; j < V_valid; j++)
            drow[j] = tri_ce_dlogit(row[j], mx, sum, j == r, dloss);
        for (int64_t j = V_valid; j < V_l; j++)
            drow[j] = 0.0f;
    }
}

int tri_cpu_ce_fused(tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                     int64_t V_valid, float dloss)
{
    TRI_ON_THREADS(nthreads(d), ce_fused_loop(losses, dlogits, logits, targets, V_valid, dloss));
    return TRI_OK;
}
