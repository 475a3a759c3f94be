/* cuda/attention/flash_delta_fast.cuh - the fused attention backward's first step, the fast way:
 * delta_r = dout_r . out_r over a head's HS columns (engine/device/ops/attention.c), for every query
 * row r = (b, h, t).
 *
 * The simple kernel (cuda/attention/flash.kern.h flash_backward_delta_kernel) gives each row a thread.
 * Neighbouring threads then read rows C elements apart, so every warp-wide load touches 32 different
 * sectors. Here a block of TRI_DELTA_THREADS threads takes TRI_DELTA_ROWS rows at a time:
 *   - it loads both tensors coalesced (consecutive threads, consecutive columns of a row) and writes
 *     the products to shared memory;
 *   - a thread per row then adds its row's products left to right.
 * That is the simple kernel's order, so delta has the same bits as the simple kernel's and the CPU
 * backend's (engine/device/ops/flash_cpu.c). The shared rows are HS + 1 floats apart, so the 32
 * summing threads of a step read 32 different banks. Head sizes up to TRI_DELTA_MAX_HS. */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_DELTA_FAST_CUH
#define TRIDENT_CUDA_ATTENTION_FLASH_DELTA_FAST_CUH

#include "cuda/kernels/shim.h"
#include "engine/core/math.h"
#include "engine/device/ops/attention_math.h"

#define TRI_DELTA_ROWS 32
#define TRI_DELTA_THREADS 256
#define TRI_DELTA_MAX_HS 256

__global__ void __launch_bounds__(TRI_DELTA_THREADS)
    flash_backward_delta_fast_kernel(float *delta, const void *dout, int dout_bf16, const void *out, int out_bf16,
                                     tri_flash_dims d)
{
    __shared__ float prod[TRI_DELTA_ROWS * (TRI_DELTA_MAX_HS + 1)];
    int64_t T = d.T, HS = d.HS, C = d.NH * HS, rows = d.B * d.NH * T, ld = HS + 1;
    for (int64_t r0 = (int64_t)blockIdx.x * TRI_DELTA_ROWS; r0 < rows; r0 += (int64_t)gridDim.x * TRI_DELTA_ROWS) {
        int64_t n = rows - r0 < TRI_DELTA_ROWS ? rows - r0 : TRI_DELTA_ROWS;
        for (int64_t e = threadIdx.x; e < n * HS; e += blockDim.x) {
            int64_t j = e / HS, i = e % HS, r = r0 + j, t = r % T, bh = r / T;
            int64_t o = (bh / d.NH * T + t) * C + bh % d.NH * HS + i;
            prod[j * ld + i] = tri_load(dout, dout_bf16, o) * tri_load(out, out_bf16, o);
        }
        __syncthreads();
        if ((int64_t)threadIdx.x < n) {
            float acc = 0.0f;
            for (int64_t i = 0; i < HS; i++)
                acc += prod[threadIdx.x * ld + i];
            delta[r0 + threadIdx.x] = acc;
        }
        __syncthreads();
    }
}

#endif
