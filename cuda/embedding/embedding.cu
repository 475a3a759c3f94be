/* cuda/embedding/embedding.cu - token and position embeddings (vocab-parallel) on the GPU.
 *
 * The simple kernels of cuda/embedding/embedding.kern.h, tested on the CPU against the CPU backend:
 * forward ops one thread per element (coalesced rows); backward ops one thread per column walking
 * the rows in order, which makes the parameter gradients deterministic and equal to the CPU
 * backend's without atomics (tokens repeat, so rows cannot be given to threads). The token
 * embedding's backward takes the linked form when it fits (a thread per first occurrence and
 * column), its links found by a sort (token_links_fast.cuh; the O(N^2) token_links_kernel stays as
 * the twin the tests hold it to). Every floating tensor is fp32 or bf16 as its dtype says. */
#include "cuda/embedding/embedding.kern.h"
#include "cuda/embedding/token_links_fast.cuh"
#include "cuda/launch.cuh"

/* The token links of tokens(N) into next(N) and first(N) (cuda/embedding/token_links_fast.cuh):
 * 1 + tri_links_merges(N) launches; keys holds 2N uint64 of scratch. */
static int token_links(tri_cuda *cu, int32_t *next, int32_t *first, uint64_t *keys, const int32_t *tokens, int64_t N)
{
    uint64_t *src = keys, *dst = keys + N;
    int rc = TRI_CUDA_LAUNCH_STRIDED(token_links_tile_kernel, (N + TRI_LINKS_TILE - 1) / TRI_LINKS_TILE,
                                     TRI_LINKS_THREADS, cu->stream, src, next, first, tokens, N);
    for (int64_t w = TRI_LINKS_TILE; !rc && w < N; w *= 2) {
        int last = 2 * w >= N;
        rc = TRI_CUDA_LAUNCH_N(token_links_merge_kernel, N, cu->stream, dst, next, first, src, N, w, last);
        uint64_t *s = src;
        src = dst;
        dst = s;
    }
    return rc;
}

extern "C" int tri_cuda_embedding_forward(tri_device *d, tri_tensor out, tri_tensor tokens,
                                          tri_tensor wte, int64_t vocab_start)
{
    int64_t N = tri_tensor_numel(tokens), C = tri_tensor_cols(wte), V_l = tri_tensor_rows(wte);
    return TRI_CUDA_LAUNCH_N(embedding_forward_kernel, N * C, tri_cuda_of(d)->stream, tri_data(out),
                             tri_is_bf16(out), tri_ip(tokens), tri_data(wte), tri_is_bf16(wte), N, C, V_l, vocab_start);
}

extern "C" int tri_cuda_embedding_backward(tri_device *d, tri_tensor dwte, tri_tensor dout,
                                           tri_tensor tokens, int64_t vocab_start)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_numel(tokens), C = tri_tensor_cols(dwte), V_l = tri_tensor_rows(dwte);
    /* the linked form up to TRI_EMBEDDING_LINKS_MAX tokens (engine/device/launch_shapes.h), its 24 N
     * bytes of scratch in the workspace (no allocation in the step): next(N), first(N) int32, then
     * the sort's 2N uint64 keys, 8-byte aligned */
    if (cu->simple || N > TRI_EMBEDDING_LINKS_MAX || (size_t)N * 24 > cu->workspace_bytes)
        return TRI_CUDA_LAUNCH_N(embedding_backward_kernel, C, cu->stream, tri_data(dwte), tri_is_bf16(dwte),
                                 tri_data(dout), tri_is_bf16(dout), tri_ip(tokens), N, C, V_l, vocab_start);
    int32_t *next = (int32_t *)cu->workspace, *first = next + N;
    int rc = token_links(cu, next, first, (uint64_t *)(first + N), tri_ip(tokens), N);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(embedding_backward_links_kernel, N * C, cu->stream, tri_data(dwte),
                                    tri_is_bf16(dwte), tri_data(dout), tri_is_bf16(dout), tri_ip(tokens), next, first,
                                    N, C, V_l, vocab_start);
    return rc;
}

extern "C" int tri_cuda_position_forward(tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T,
                                         int64_t row0, int cp, int cp_rank)
{
    int64_t N = tri_tensor_rows(out), C = tri_tensor_cols(out);
    return TRI_CUDA_LAUNCH_N(position_forward_kernel, N * C, tri_cuda_of(d)->stream, tri_data(out),
                             tri_is_bf16(out), tri_data(wpe), tri_is_bf16(wpe), N, C, T, row0, cp, cp_rank);
}

extern "C" int tri_cuda_position_backward(tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T,
                                          int64_t row0, int cp, int cp_rank)
{
    int64_t N = tri_tensor_rows(dout), C = tri_tensor_cols(dout);
    return TRI_CUDA_LAUNCH_N(position_backward_kernel, T * C, tri_cuda_of(d)->stream, tri_data(dwpe),
                             tri_is_bf16(dwpe), tri_data(dout), tri_is_bf16(dout), N, C, T, row0, cp, cp_rank);
}
