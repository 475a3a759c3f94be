/* engine/device/ops/compress.c - the gradient compressors' checked wrappers: 1bit and qsgd packing,
 * their decode-add (also the error-feedback update), top-k packing and scatter-add, and PowerSGD's
 * row orthonormalisation.
 *
 * Contracts in engine/device/ops_list.h, wire formats in compress_math.h. The CPU loops are
 * compress_cpu.c; the CUDA kernels cuda/compress/. */
#include "engine/device/ops/compress_math.h"
#include "engine/device/ops_internal.h"

static int need_block(const char *op, int block)
{
    return block >= 1 ? TRI_OK : TRI_ERR(TRI_EINVAL, "%s: block %d elements (expected at least 1)", op, block);
}

int tri_op_compress_sign_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block)
{
    const char *op = "compress_sign_pack";
    int rc = tri_need(op, "e", e, TRI_F32);
    if (!rc) rc = need_block(op, block);
    if (!rc) rc = tri_need(op, "payload", payload, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "payload", payload, tri_compress_words(tri_tensor_numel(e), block, 0));
    return rc ? rc : TRI_DISPATCH(d, compress_sign_pack, payload, e, block);
}

int tri_op_compress_qsgd_pack(tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels, uint64_t seed,
                              uint64_t stream)
{
    const char *op = "compress_qsgd_pack";
    int rc = tri_need(op, "e", e, TRI_F32);
    if (!rc) rc = need_block(op, block);
    if (!rc && (levels < 1 || levels > 1 << 20))
        rc = TRI_ERR(TRI_EINVAL, "%s: %d levels (expected 1 to 2^20)", op, levels);
    if (!rc) rc = tri_need(op, "payload", payload, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "payload", payload, tri_compress_words(tri_tensor_numel(e), block, levels));
    return rc ? rc : TRI_DISPATCH(d, compress_qsgd_pack, payload, e, block, levels, seed, stream);
}

int tri_op_compress_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t n, int64_t first, int block,
                               int levels, float alpha)
{
    const char *op = "compress_unpack_add";
    int rc = tri_need(op, "out", out, TRI_F32);
    if (!rc) rc = need_block(op, block);
    if (!rc && (levels < 0 || levels > 1 << 20))
        rc = TRI_ERR(TRI_EINVAL, "%s: %d levels (expected 0 for 1bit, or 1 to 2^20)", op, levels);
    if (!rc && (first < 0 || first + tri_tensor_numel(out) > n))
        rc = TRI_ERR(TRI_EINVAL, "%s: elements [%lld, %lld) outside the payload's %lld", op, (long long)first,
                     (long long)(first + tri_tensor_numel(out)), (long long)n);
    if (!rc) rc = tri_need(op, "payload", payload, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "payload", payload, tri_compress_words(n, block, levels));
    return rc ? rc : TRI_DISPATCH(d, compress_unpack_add, out, payload, n, first, block, levels, alpha);
}

int tri_op_compress_topk_pack(tri_device *d, tri_tensor payload, tri_tensor e)
{
    const char *op = "compress_topk_pack";
    int rc = tri_need(op, "e", e, TRI_F32);
    if (!rc) rc = tri_need(op, "payload", payload, TRI_I32);
    int64_t k = tri_tensor_numel(payload) / 2;
    if (!rc && (tri_tensor_numel(payload) % 2 != 0 || k < 1 || k > tri_tensor_numel(e)))
        rc = TRI_ERR(TRI_EINVAL, "%s: payload of %lld words for %lld elements (expected 2k words, 1 <= k <= n)", op,
                     (long long)tri_tensor_numel(payload), (long long)tri_tensor_numel(e));
    return rc ? rc : TRI_DISPATCH(d, compress_topk_pack, payload, e);
}

int tri_op_compress_topk_unpack_add(tri_device *d, tri_tensor out, tri_tensor payload, int64_t first, float alpha)
{
    const char *op = "compress_topk_unpack_add";
    int rc = tri_need(op, "out", out, TRI_F32);
    if (!rc) rc = tri_need(op, "payload", payload, TRI_I32);
    if (!rc && tri_tensor_numel(payload) % 2 != 0)
        rc = TRI_ERR(TRI_EINVAL, "%s: payload of %lld words (expected (index, value) pairs)", op,
                     (long long)tri_tensor_numel(payload));
    if (!rc && first < 0)
        rc = TRI_ERR(TRI_EINVAL, "%s: first %lld (expected >= 0)", op, (long long)first);
    return rc ? rc : TRI_DISPATCH(d, compress_topk_unpack_add, out, payload, first, alpha);
}

int tri_op_orthonormalize_rows(tri_device *d, tri_tensor x)
{
    int rc = tri_need("orthonormalize_rows", "x", x, TRI_F32);
    if (!rc && x.ndim < 1)
        rc = TRI_ERR(TRI_EINVAL, "orthonormalize_rows: x needs a shape (r, n)");
    return rc ? rc : TRI_DISPATCH(d, orthonormalize_rows, x);
}
