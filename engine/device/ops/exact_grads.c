/* engine/device/ops/exact_grads.c - weight gradients as exact fixed-point sums, one contribution per
 * 64-row chunk (deterministic mode, engine/train/zero.h).
 *
 * Why: deterministic mode makes a run's gradients the same bits in every layout by summing them as
 * int64 fixed point (order-independent). That only helps if the *terms* are the same in every layout.
 * A weight gradient is a sum over rows (tokens); if each pass rounded its whole sum once, the terms
 * would be per pass, and context parallelism (a pass holding T / cp of a sequence's rows) would change
 * them. So every op that writes a parameter's gradient, when that gradient is given as int64, computes
 * it per chunk of TRI_COL_CHUNK = 64 rows of its inputs - the chunk's fp32 gradient into the device's
 * exact scratch (zeroed first, unless the chunk's GEMM overwrites it with beta 0), with the op's own
 * fp32 arithmetic on the chunk's row views - and adds each chunk's result exactly
 * (tri_op_fixed_accumulate). A chunk of 64 rows is 64 consecutive positions of one sequence whenever the rows a rank holds come in whole 64-row pieces of global positions (the
 * cp validator's rule: chunks of T / (2 cp) rows, multiples of 64), so the set of terms, and hence the
 * bits, do not depend on cp, dp, pp, ZeRO or the micro-batch count.
 *
 * The grouped matmul of the experts (rows permuted by expert) is the exception: its gradient is rounded
 * once per call (one GEMM), as expert parallelism's per-source sums were before.
 *
 * No kernels of its own: the chunks run the ops' existing fp32 paths on views, so both backends share
 * the arithmetic. The cost is one fixed-point add of the whole gradient per chunk (N / 64 passes over
 * the gradient, against the GEMM's 2 x 64 flops per element and chunk). */
#include <string.h>

#include "engine/device/ops_internal.h"

int tri_device_set_exact_grads(tri_device *d, tri_tensor scratch, tri_tensor bad, int bits)
{
    if (!tri_tensor_present(scratch)) {
        memset(&d->exact, 0, sizeof d->exact);
        return TRI_OK;
    }
    int rc = tri_need("set_exact_grads", "scratch", scratch, TRI_F32);
    if (!rc) rc = tri_need("set_exact_grads", "bad", bad, TRI_F32);
    if (!rc) rc = tri_need_numel("set_exact_grads", "bad", bad, 1);
    if (!rc && (bits < 0 || bits > 60))
        rc = TRI_ERR(TRI_EINVAL, "set_exact_grads: %d fraction bits outside [0, 60]", bits);
    if (rc)
        return rc;
    d->exact.scratch = tri_tensor_flat(scratch);
    d->exact.bad = bad;
    d->exact.bits = bits;
    return TRI_OK;
}

tri_tensor tri_rows_view(tri_tensor t, int64_t r0, int64_t n)
{
    int64_t cols = tri_tensor_cols(t);
    return tri_tensor_2d((char *)t.data + (size_t)(r0 * cols) * tri_dtype_size(t.dtype), t.dtype, n, cols);
}

int tri_exact_grads_check(const char *op, const tri_tensor *grads, int n, bool *exact)
{
    int fixed = 0, present = 0;
    for (int i = 0; i < n; i++) {
        present += tri_tensor_present(grads[i]);
        fixed += tri_tensor_present(grads[i]) && grads[i].dtype == TRI_I64;
    }
    *exact = fixed > 0;
    if (fixed > 0 && fixed != present)
        return TRI_ERR(TRI_EINVAL, "%s: the gradients must all be int64 (exact sums) or all floating, not mixed", op);
    return TRI_OK;
}

int tri_exact_grads_rows(tri_device *d, const char *op, int64_t N, int64_t chunk, bool overwrites, tri_tensor *grads,
                         int n, tri_exact_chunk_fn fn, void *ctx)
{
    char x[96];
    int64_t need = 0;
    for (int i = 0; i < n; i++)
        need += tri_tensor_present(grads[i]) ? tri_tensor_numel(grads[i]) : 0;
    if (!tri_tensor_present(d->exact.scratch))
        return TRI_ERR(TRI_EINVAL, "%s: an int64 gradient (exact sums, deterministic mode) needs the device's exact "
                       "scratch (tri_device_set_exact_grads), which is not set", op);
    if (tri_tensor_numel(d->exact.scratch) < need)
        return TRI_ERR(TRI_EINVAL, "%s: the gradients' %lld elements exceed the exact scratch %s", op, (long long)need,
                       TRI_DESC(d->exact.scratch, x));
    tri_tensor tmp[TRI_EXACT_MAX_GRADS];
    if (n > TRI_EXACT_MAX_GRADS)
        return TRI_ERR(TRI_EINTERNAL, "%s: %d exact gradients (at most %d)", op, n, TRI_EXACT_MAX_GRADS);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        tmp[i] = tri_tensor_none();
        if (!tri_tensor_present(grads[i]))
            continue;
        tmp[i] = tri_tensor_reshape(tri_tensor_range(d->exact.scratch, at, tri_tensor_numel(grads[i])), grads[i].ndim,
                                    grads[i].shape);
        at += tri_tensor_numel(grads[i]);
    }
    int64_t step = chunk > 0 ? chunk : (N > 0 ? N : 1);
    int rc = TRI_OK;
    for (int64_t r0 = 0; r0 < N && !rc; r0 += step) {
        int64_t rows = N - r0 < step ? N - r0 : step;
        if (!overwrites)
            rc = tri_op_fill(d, tri_tensor_range(d->exact.scratch, 0, need), 0.0f);
        if (!rc) rc = fn(d, ctx, r0, rows, tmp);
        for (int i = 0; i < n && !rc; i++)
            if (tri_tensor_present(grads[i]))
                rc = tri_op_fixed_accumulate(d, tri_tensor_flat(grads[i]), tri_tensor_flat(tmp[i]), d->exact.bits,
                                             d->exact.bad);
    }
    return rc;
}
