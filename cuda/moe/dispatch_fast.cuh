/* cuda/moe/dispatch_fast.cuh - the fast form of the combine weight's gradient (CUDA, and C++ on the CPU
 * through cuda/kernels/cuda_emu.h): a warp per selection, whole-sector loads of the two rows, the dot in
 * engine/core/math.h's row order across the lanes (cuda/warp.cuh: lane l holds slots 4l .. 4l+3 and 128+4l
 * .. 128+4l+3, tri_warp_row_sum's tree), so the bits of the simple twin moe_weight_grad_kernel
 * (cuda/moe/dispatch.kern.h, a thread per selection walking the row) and of the CPU backend. The twin's
 * thread reads a row of C elements alone, uncoalesced; here a warp reads it in contiguous accesses of 512
 * (fp32) or 256 bytes (bf16). */
#ifndef TRIDENT_CUDA_MOE_DISPATCH_FAST_CUH
#define TRIDENT_CUDA_MOE_DISPATCH_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/moe_dispatch_math.h"

/* dw[i] = dot(dy[i / K], y_perm[row_id_map[i]]) (0 for a dropped selection), a warp per selection i */
__global__ void moe_weight_grad_fast_kernel(float *dw, const void *dy, int dy_bf16, const void *y_perm, int y_bf16,
                                            const int32_t *row_id_map, int64_t NK, int64_t K, int64_t C)
{
    int64_t i = tri_warp_row();
    if (i >= NK)
        return;
    int32_t r = row_id_map[i]; /* the same for the whole warp: it returns or sums together */
    if (r < 0) {
        if (tri_lane() == 0)
            dw[i] = 0.0f;
        return;
    }
    const void *a = tri_at(dy, dy_bf16, (i / K) * C), *b = tri_at(y_perm, y_bf16, (int64_t)r * C);
    bool va = tri_aligned16(a), vb = tri_aligned16(b);
    float s[8] = {0}, av[8] = {0}, bv[8] = {0};
    for (int64_t j = tri_row_first(tri_lane()); j < C; j += TRI_ROW_SLOTS) {
        tri_row_load8(av, a, dy_bf16, j, C, va);
        tri_row_load8(bv, b, y_bf16, j, C, vb);
        for (int k = 0; k < 8 && j + tri_row_at(k) < C; k++)
            s[k] += av[k] * bv[k];
    }
    float v = tri_warp_row_sum(s);
    if (tri_lane() == 0)
        dw[i] = v;
}

#endif
