/* cuda/compress/compress.cu - the gradient compressors on the GPU: launches of the simple kernels
 * of cuda/compress/compress.kern.h (1bit and qsgd packing, decode-add, which is also the
 * error-feedback update, the top-k scatter-add, Gram-Schmidt), tested against the CPU backend
 * through the emulated build. Top-k selection runs on the host for now (the tensor is copied to
 * the host, selected by compress_math.h's radix select, and the payload copied back): a device
 * radix select is future work. */
#include <stdlib.h>

#include "cuda/compress/compress.kern.h"
#include "cuda/launch.cuh"

static int pack(tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels, uint64_t seed,
                uint64_t stream)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t n = tri_tensor_numel(e), nb = tri_compress_blocks(n, block), nw = tri_compress_words(n, block, levels) - nb;
    int rc = TRI_CUDA_LAUNCH_N(compress_scale_kernel, nb, cu->stream, (int32_t *)payload.data, tri_fp(e), n, block,
                               levels);
    if (!rc) rc = TRI_CUDA_LAUNCH_N(compress_pack_kernel, nw, cu->stream, (int32_t *)payload.data, tri_fp(e), n,
                                    block, levels, seed, stream);
    return rc;
}

extern "C" int tri_cuda_compress_sign_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block)
{
    return pack(d, payload, e, block, 0, 0, 0);
}

extern "C" int tri_cuda_compress_qsgd_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels,
                                           uint64_t seed, uint64_t stream)
{
    return pack(d, payload, e, block, levels, seed, stream);
}

extern "C" int tri_cuda_compress_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t n,
                                            int64_t first, int block, int levels, float alpha)
{
    int64_t m = tri_tensor_numel(out);
    return TRI_CUDA_LAUNCH_N(compress_unpack_add_kernel, m, tri_cuda_of(d)->stream, tri_fp(out),
                             m, (const int32_t *)payload.data, n, first, block, levels, alpha);
}

extern "C" int tri_cuda_compress_topk_pack(tri_device *d, tri_tensor payload, tri_tensor e)
{
    int64_t n = tri_tensor_numel(e), k = tri_tensor_numel(payload) / 2;
    float *host = (float *)malloc((size_t)n * sizeof(float));
    int32_t *out = (int32_t *)malloc((size_t)(2 * k) * sizeof(int32_t));
    int rc = host && out ? TRI_OK : TRI_ERR(TRI_ENOMEM, "compress_topk_pack: host memory for %lld elements",
                                            (long long)n);
    if (!rc) rc = tri_device_copy_to_host(d, host, e);
    if (!rc) {
        tri_compress_topk_select(host, n, k, out);
        rc = tri_device_copy_from_host(d, payload, out);
    }
    free(host);
    free(out);
    return rc;
}

extern "C" int tri_cuda_compress_topk_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t first,
                                                 float alpha)
{
    int64_t k = tri_tensor_numel(payload) / 2;
    return TRI_CUDA_LAUNCH_N(compress_topk_unpack_add_kernel, k, tri_cuda_of(d)->stream, tri_fp(out),
                             tri_tensor_numel(out), (const int32_t *)payload.data, k, first, alpha);
}

extern "C" int tri_cuda_orthonormalize_rows(tri_device *d, tri_tensor x)
{
    int64_t n = x.shape[x.ndim - 1];
    return TRI_CUDA_LAUNCH(orthonormalize_rows_kernel, 1, 1, tri_cuda_of(d)->stream, tri_fp(x),
                           n > 0 ? tri_tensor_numel(x) / n : 0, n);
}
