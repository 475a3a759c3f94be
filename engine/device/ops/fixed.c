/* engine/device/ops/fixed.c - the fixed-point ops' checked wrappers (deterministic mode: sums that
 * are exact, so the same in any order and over any split), and the reading of a 192-bit sum of
 * squares kept in limbs.
 *
 * Contracts in engine/device/ops_list.h. The CPU loops are fixed_cpu.c; the CUDA kernels
 * cuda/fixed/fixed.cu. */
#include <math.h>
#include <string.h>

#include "engine/device/ops_internal.h"

/* ---- fixed point ---- */

int tri_op_fixed_accumulate(tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad)
{
    const char *op = "fixed_accumulate";
    int rc = tri_need(op, "acc", acc, TRI_I64);
    if (!rc) rc = tri_need(op, "x", x, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "x", x, tri_tensor_numel(acc));
    if (!rc) rc = tri_need(op, "bad", bad, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "bad", bad, 1);
    if (!rc && (bits < 0 || bits > 60))
        rc = TRI_ERR(TRI_EINVAL, "%s: %d fraction bits outside [0, 60]", op, bits);
    return rc ? rc : TRI_DISPATCH(d, fixed_accumulate, acc, x, bits, bad);
}

int tri_op_fixed_to_float(tri_device *d, tri_tensor out, tri_tensor acc, int bits)
{
    int rc = tri_need("fixed_to_float", "out", out, TRI_F32);
    if (!rc) rc = tri_need("fixed_to_float", "acc", acc, TRI_I64);
    if (!rc) rc = tri_need_numel("fixed_to_float", "acc", acc, tri_tensor_numel(out));
    return rc ? rc : TRI_DISPATCH(d, fixed_to_float, out, acc, bits);
}

int tri_op_add_i64(tri_device *d, tri_tensor y, tri_tensor x)
{
    int rc = tri_need("add_i64", "y", y, TRI_I64);
    if (!rc) rc = tri_need("add_i64", "x", x, TRI_I64);
    if (!rc) rc = tri_need_numel("add_i64", "x", x, tri_tensor_numel(y));
    return rc ? rc : TRI_DISPATCH(d, add_i64, y, x);
}

int tri_op_fixed_sum_squares(tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad)
{
    const char *op = "fixed_sum_squares";
    int rc = tri_need(op, "limbs", limbs, TRI_I64);
    if (!rc) rc = tri_need_numel(op, "limbs", limbs, 6);
    if (!rc) rc = tri_need(op, "x", x, TRI_F32);
    if (!rc) rc = tri_need(op, "bad", bad, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "bad", bad, 1);
    if (!rc && (bits < 0 || bits > 60))
        rc = TRI_ERR(TRI_EINVAL, "%s: %d fraction bits outside [0, 60]", op, bits);
    return rc ? rc : TRI_DISPATCH(d, fixed_sum_squares, limbs, x, bits, bad);
}

double tri_fixed_limbs_value(const int64_t limbs[6], int scale)
{
    /* carry exactly first: the same integer split differently over the limbs (by how ranks and
     * calls divided the work) must give the same double */
    int64_t l[6];
    memcpy(l, limbs, sizeof l);
    for (int k = 0; k < 5; k++) {
        l[k + 1] += l[k] >> 32;
        l[k] &= 0xffffffff;
    }
    double v = 0.0;
    for (int k = 5; k >= 0; k--)
        v = v * 4294967296.0 + (double)l[k];
    return ldexp(v, -scale);
}
