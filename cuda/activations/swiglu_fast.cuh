/* cuda/activations/swiglu_fast.cuh - the fast SwiGLU kernels (CUDA, and C++ on the CPU through
 * cuda/kernels/cuda_emu.h): a block per row of gate_up(N, 2F) (grid-stride over rows), 8 consecutive
 * elements of the row's gate and up halves a thread, 16-byte loads and stores when the row's halves
 * and the output row start 16-byte aligned (F a multiple of 8 and aligned tensors), one by one
 * otherwise. No division per element (the simple kernels of cuda/activations/swiglu.kern.h take the row
 * and column of every element from its flat index); each element is engine/device/ops/activations_math.h's
 * tri_swiglu or tri_swiglu_backward, so their bits. */
#ifndef TRIDENT_CUDA_ACTIVATIONS_SWIGLU_FAST_CUH
#define TRIDENT_CUDA_ACTIVATIONS_SWIGLU_FAST_CUH

#include "cuda/warp.cuh"
#include "engine/device/ops/activations_math.h"

/* out(N,F) = silu(gate) * up */
__global__ void swiglu_forward_fast_kernel(void *out, int out_bf16, const void *gate_up, int gu_bf16, int64_t N,
                                           int64_t F)
{
    float g[8] = {0}, u[8] = {0};
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const void *gate = tri_at(gate_up, gu_bf16, n * 2 * F), *up = tri_at(gate_up, gu_bf16, n * 2 * F + F);
        void *o = tri_at(out, out_bf16, n * F);
        bool vec = tri_aligned16(gate) && tri_aligned16(up) && tri_aligned16(o);
        for (int64_t i = 8 * (int64_t)threadIdx.x; i < F; i += 8 * (int64_t)blockDim.x) {
            tri_load8(g, gate, gu_bf16, i, F, vec);
            tri_load8(u, up, gu_bf16, i, F, vec);
            for (int k = 0; k < 8; k++)
                g[k] = tri_swiglu(g[k], u[k]);
            tri_store8(o, out_bf16, i, F, g, vec);
        }
    }
}

/* dgate_up(N,2F): the gate and up halves' gradients from dout(N,F) */
__global__ void swiglu_backward_fast_kernel(void *dgate_up, int dgu_bf16, const void *gate_up, int gu_bf16,
                                            const void *dout, int dout_bf16, int64_t N, int64_t F)
{
    float g[8] = {0}, u[8] = {0}, d[8] = {0}, dg[8], du[8];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const void *gate = tri_at(gate_up, gu_bf16, n * 2 * F), *up = tri_at(gate_up, gu_bf16, n * 2 * F + F);
        const void *dr = tri_at(dout, dout_bf16, n * F);
        void *dgate = tri_at(dgate_up, dgu_bf16, n * 2 * F), *dup = tri_at(dgate_up, dgu_bf16, n * 2 * F + F);
        bool vec = tri_aligned16(gate) && tri_aligned16(up) && tri_aligned16(dr) && tri_aligned16(dgate) &&
                   tri_aligned16(dup);
        for (int64_t i = 8 * (int64_t)threadIdx.x; i < F; i += 8 * (int64_t)blockDim.x) {
            tri_load8(g, gate, gu_bf16, i, F, vec);
            tri_load8(u, up, gu_bf16, i, F, vec);
            tri_load8(d, dr, dout_bf16, i, F, vec);
            for (int k = 0; k < 8; k++)
                tri_swiglu_backward(g[k], u[k], d[k], &dg[k], &du[k]);
            tri_store8(dgate, dgu_bf16, i, F, dg, vec);
            tri_store8(dup, dgu_bf16, i, F, du, vec);
        }
    }
}

#endif
