/* cuda/kernels/embedding.kern.h - simple embedding kernels (CUDA and C).
 *
 * Forward ops write or add one element per thread. Backward ops (gradients of wte rows and wpe
 * rows) give one thread per column and walk the rows n in order, adding into the parameter
 * gradient: the CPU backend's order, so the sums are bit for bit the CPU's and deterministic
 * (tokens repeat, so a thread per row would race; atomics would make the order vary). */
#ifndef TRIDENT_CUDA_KERNELS_EMBEDDING_KERN_H
#define TRIDENT_CUDA_KERNELS_EMBEDDING_KERN_H

#include "cuda/kernels/shim.h"

/* out(N,C)[n] = wte(V_l,C)[tokens[n] - vocab_start] when that row is in the shard, else 0 */
TRI_KERNEL embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte, int64_t N,
                                    int64_t C, int64_t V_l, int64_t vocab_start)
{
    for (int64_t i = TRI_GLOBAL_ID; i < N * C; i += TRI_GLOBAL_STRIDE) {
        int64_t n = i / C, j = i % C;
        int64_t r = (int64_t)tokens[n] - vocab_start;
        out[i] = (r >= 0 && r < V_l) ? wte[r * C + j] : 0.0f;
    }
}

/* dwte(V_l,C)[tokens[n] - vocab_start] += dout(N,C)[n] for tokens in the shard */
TRI_KERNEL embedding_backward_kernel(float *dwte, const float *dout, const int32_t *tokens,
                                     int64_t N, int64_t C, int64_t V_l, int64_t vocab_start)
{
    for (int64_t j = TRI_GLOBAL_ID; j < C; j += TRI_GLOBAL_STRIDE)
        for (int64_t n = 0; n < N; n++) {
            int64_t r = (int64_t)tokens[n] - vocab_start;
            if (r >= 0 && r < V_l)
                dwte[r * C + j] += dout[n * C + j];
        }
}

/* out(N,C)[n] += wpe[(row0 + n) % T] */
TRI_KERNEL position_forward_kernel(float *out, const float *wpe, int64_t N, int64_t C, int64_t T,
                                   int64_t row0)
{
    for (int64_t i = TRI_GLOBAL_ID; i < N * C; i += TRI_GLOBAL_STRIDE) {
        int64_t n = i / C, j = i % C;
        out[i] += wpe[((row0 + n) % T) * C + j];
    }
}

/* dwpe[(row0 + n) % T] += dout(N,C)[n] */
TRI_KERNEL position_backward_kernel(float *dwpe, const float *dout, int64_t N, int64_t C, int64_t T,
                                    int64_t row0)
{
    for (int64_t j = TRI_GLOBAL_ID; j < C; j += TRI_GLOBAL_STRIDE)
        for (int64_t n = 0; n < N; n++)
            dwpe[((row0 + n) % T) * C + j] += dout[n * C + j];
}

#endif
