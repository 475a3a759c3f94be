/* cuda/attention/softmax_fast.cuh - the fast causal softmax rows of the materialised attention (CUDA,
 * and C++ on the CPU through cuda/kernels/cuda_emu.h): a warp per row of the scores, forward and
 * backward in place, engine/core/math.h's row order across the lanes (cuda/warp.cuh): the bits of the
 * simple kernels of cuda/attention/attention.kern.h and of the CPU backend. */
#ifndef TRIDENT_CUDA_ATTENTION_SOFTMAX_FAST_CUH
#define TRIDENT_CUDA_ATTENTION_SOFTMAX_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/attention_math.h"

/* att rows r < rows (of T, query t = r % T): scores -> causal probabilities in place, a warp per row.
 * math.h's tri_causal_softmax_row_mixed: the max, the sum of the exponentials in the row order, then
 * p = e * (1 / sum) where e is read back as stored (rounded to bf16 for a bf16 att); the
 * exponentials are computed again rather than stored and reloaded (same function, same bits). */
__global__ void causal_softmax_fast_kernel(void *att, int att_bf16, int64_t rows, int64_t T)
{
    int64_t r = tri_warp_row();
    if (r >= rows)
        return;
    int lane = tri_lane();
    int64_t n = r % T + 1; /* valid columns 0 .. t */
    void *row = tri_at(att, att_bf16, r * T);
    bool vec = tri_aligned16(row);
    float v[8] = {0}, acc[8] = {0};
    float mx = -INFINITY;
    for (int64_t i = tri_row_first(lane); i < n; i += TRI_ROW_SLOTS) {
        tri_row_load8(v, row, att_bf16, i, n, vec);
        for (int k = 0; k < 8 && i + tri_row_at(k) < n; k++)
            mx = v[k] > mx ? v[k] : mx;
    }
    mx = tri_warp_max(mx);
    for (int64_t i = tri_row_first(lane); i < n; i += TRI_ROW_SLOTS) {
        tri_row_load8(v, row, att_bf16, i, n, vec);
        for (int k = 0; k < 8 && i + tri_row_at(k) < n; k++)
            acc[k] += tri_expf(v[k] - mx);
    }
    float inv = 1.0f / tri_warp_row_sum(acc);
    for (int64_t i = tri_row_first(lane); i < T; i += TRI_ROW_SLOTS) {
        tri_row_load8(v, row, att_bf16, i, n, vec);
        for (int k = 0; k < 8; k++) {
            float e = tri_expf(v[k] - mx);
            e = att_bf16 ? tri_round_bf16(e) : e;
            v[k] = i + tri_row_at(k) < n ? e * inv : 0.0f;
        }
        tri_row_store8(row, att_bf16, i, T, v, vec);
    }
}

/* datt rows: d probabilities -> d scores in place, a warp per row (math.h's
 * tri_causal_softmax_row_backward_mixed: the dot product in the row order) */
__global__ void causal_softmax_backward_fast_kernel(void *datt, int datt_bf16, const void *att, int att_bf16,
                                                    int64_t rows, int64_t T)
{
    int64_t r = tri_warp_row();
    if (r >= rows)
        return;
    int lane = tri_lane();
    int64_t n = r % T + 1;
    void *drow = tri_at(datt, datt_bf16, r * T);
    const void *prow = tri_at(att, att_bf16, r * T);
    bool vd = tri_aligned16(drow), vp = tri_aligned16(prow);
    float p[8] = {0}, g[8] = {0}, acc[8] = {0};
    for (int64_t i = tri_row_first(lane); i < n; i += TRI_ROW_SLOTS) {
        tri_row_load8(p, prow, att_bf16, i, n, vp);
        tri_row_load8(g, drow, datt_bf16, i, n, vd);
        for (int k = 0; k < 8 && i + tri_row_at(k) < n; k++)
            acc[k] += p[k] * g[k];
    }
    float dot = tri_warp_row_sum(acc);
    for (int64_t i = tri_row_first(lane); i < T; i += TRI_ROW_SLOTS) {
        tri_row_load8(p, prow, att_bf16, i, n, vp);
        tri_row_load8(g, drow, datt_bf16, i, n, vd);
        for (int k = 0; k < 8; k++)
            g[k] = i + tri_row_at(k) < n ? p[k] * (g[k] - dot) : 0.0f;
        tri_row_store8(drow, datt_bf16, i, T, g, vd);
    }
}

#endif
