/* engine/device/ops/elementwise.c - the element-wise and reduction ops' checked wrappers: fill,
 * zero, copy, convert, add, axpy, scale, sum_squares (single and multi-tensor), count_nonfinite.
 *
 * Contracts in engine/device/ops_list.h; each wrapper checks dtypes and sizes, widens bf16 for a
 * backend without it (engine/device/ops_internal.h) and dispatches. zero and copy are no backend
 * slot: zero fills the bytes as fp32 (bf16 where they are not whole floats), copy is the backend's
 * memmove. The CPU loops are elementwise_cpu.c; the CUDA ones cuda/elementwise/ (elementwise.cu,
 * reduce.cu, convert.cu). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/device/ops_internal.h"

/* ---- element-wise ---- */

int tri_op_fill(tri_device *d, tri_tensor x, float value)
{
    tri_widen w = tri_widen_start(d, tri_need_float("fill", "x", x));
    tri_widen_arg(&w, &x, true);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, fill, x, value));
}

int tri_op_zero(tri_device *d, tri_tensor x)
{
    size_t bytes = tri_tensor_bytes(x);
    if (!x.data || bytes == 0)
        return TRI_OK;
    /* a bf16 view that is not a whole number of aligned floats (an odd length, or an odd offset
     * into a bf16 buffer): a float store there is misaligned (UB, and a fault on CUDA) */
    if (bytes % sizeof(float) != 0 || (uintptr_t)x.data % sizeof(float) != 0)
        return tri_op_fill(d, tri_tensor_1d(x.data, TRI_BF16, (int64_t)(bytes / 2)), 0.0f);
    return TRI_DISPATCH(d, fill, tri_tensor_1d(x.data, TRI_F32, (int64_t)(bytes / sizeof(float))), 0.0f);
}

int tri_op_copy(tri_device *d, tri_tensor dst, tri_tensor src)
{
    char a[96], b[96];
    if (tri_tensor_bytes(dst) != tri_tensor_bytes(src) || dst.dtype != src.dtype)
        return TRI_ERR(TRI_EINVAL, "copy: dst %s and src %s differ", TRI_DESC(dst, a), TRI_DESC(src, b));
    if (tri_tensor_bytes(src) == 0)
        return TRI_OK;
    if (!dst.data || !src.data)
        return TRI_ERR(TRI_EINVAL, "copy: tensor '%s' is missing", dst.data ? "src" : "dst");
    if (dst.data == src.data)
        return TRI_OK;
    return d->ops->copy(d, dst.data, src.data, tri_tensor_bytes(src));
}

int tri_op_convert(tri_device *d, tri_tensor dst, tri_tensor src)
{
    int rc = tri_need_float("convert", "dst", dst);
    if (!rc) rc = tri_need_float("convert", "src", src);
    if (!rc) rc = tri_need_numel("convert", "src", src, tri_tensor_numel(dst));
    if (rc || tri_tensor_numel(src) == 0)
        return rc;
    if (dst.dtype == src.dtype)
        return tri_op_copy(d, dst, src);
    return TRI_DISPATCH(d, convert, dst, src);
}

int tri_op_add(tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b)
{
    int rc = tri_need_float("add", "out", out);
    if (!rc) rc = tri_need_float("add", "a", a);
    if (!rc) rc = tri_need_float("add", "b", b);
    if (!rc) rc = tri_need_numel("add", "a", a, tri_tensor_numel(out));
    if (!rc) rc = tri_need_numel("add", "b", b, tri_tensor_numel(out));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &a, false);
    tri_widen_arg(&w, &b, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, add, out, a, b));
}

int tri_op_axpy(tri_device *d, tri_tensor y, float alpha, tri_tensor x)
{
    int rc = tri_need_float("axpy", "y", y);
    if (!rc) rc = tri_need_float("axpy", "x", x);
    if (!rc) rc = tri_need_numel("axpy", "x", x, tri_tensor_numel(y));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &y, true);
    tri_widen_arg(&w, &x, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, axpy, y, alpha, x));
}

int tri_op_scale(tri_device *d, tri_tensor x, float s)
{
    tri_widen w = tri_widen_start(d, tri_need_float("scale", "x", x));
    tri_widen_arg(&w, &x, true);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, scale, x, s));
}

int tri_op_sum_squares(tri_device *d, tri_tensor out, tri_tensor x)
{
    int rc = tri_need("sum_squares", "out", out, TRI_F32);
    if (!rc) rc = tri_need_numel("sum_squares", "out", out, 1);
    if (!rc) rc = tri_need_float("sum_squares", "x", x);
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &x, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, sum_squares, out, x));
}

int tri_op_sum_squares_multi(tri_device *d, tri_tensor out, const tri_tensor *xs, const int64_t *slots, int n)
{
    int rc = tri_need("sum_squares_multi", "out", out, TRI_F32);
    int64_t S = tri_tensor_numel(out);
    bool any_bf16 = false;
    unsigned char *seen = rc ? NULL : calloc((size_t)(S > 0 ? S : 1), 1); /* slots whose run has begun */
    if (!rc && !seen)
        rc = TRI_ERR(TRI_ENOMEM, "sum_squares_multi: out of memory for %lld slots", (long long)S);
    for (int k = 0; k < n && !rc; k++) {
        if (slots[k] < 0 || slots[k] >= S) {
            rc = TRI_ERR(TRI_EINVAL, "sum_squares_multi: piece %d: slot %lld, expected 0 .. %lld (out's elements)", k,
                         (long long)slots[k], (long long)(S - 1));
            break;
        }
        if (k == 0 || slots[k - 1] != slots[k]) {
            if (seen[slots[k]]) {
                rc = TRI_ERR(TRI_EINVAL, "sum_squares_multi: piece %d: slot %lld comes back after piece %d's %lld; "
                             "expected the pieces of a slot next to each other", k, (long long)slots[k], k - 1,
                             (long long)slots[k - 1]);
                break;
            }
            seen[slots[k]] = 1;
        }
        char arg[32];
        snprintf(arg, sizeof arg, "xs[%d]", k);
        rc = tri_need_float("sum_squares_multi", arg, xs[k]);
        any_bf16 = any_bf16 || xs[k].dtype == TRI_BF16;
    }
    free(seen);
    if (rc || n <= 0)
        return rc;
    if (!d->ops->sum_squares_multi || (any_bf16 && !d->native_bf16)) {
        for (int k = 0; k < n && !rc; k++)
            rc = tri_op_sum_squares(d, tri_tensor_range(out, slots[k], 1), xs[k]);
        return rc;
    }
    return TRI_DISPATCH(d, sum_squares_multi, out, xs, slots, n);
}

int tri_op_count_nonfinite(tri_device *d, tri_tensor out, tri_tensor x)
{
    int rc = tri_need("count_nonfinite", "out", out, TRI_F32);
    if (!rc) rc = tri_need_numel("count_nonfinite", "out", out, 1);
    if (!rc) rc = tri_need_float("count_nonfinite", "x", x);
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &x, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, count_nonfinite, out, x));
}
