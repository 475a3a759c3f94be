/* engine/device/ops/grouped_matmul.h - the grouped GEMM of the experts as a loop of a backend's own
 * matmul over the groups, so each group is exactly that backend's tri_op_matmul on the group's views.
 *
 * Megatron-Core's GroupedMLP (megatron/core/transformer/moe/experts.py) runs the E_l local experts
 * over their token counts in one grouped GEMM; here a group is one product of the backend (one
 * OpenBLAS sgemm on the CPU, one cuBLASLt call on CUDA) on contiguous rows, with no padding to a
 * capacity. Shared by engine/device/ops/matmul_cpu.c and cuda/matmul/grouped_matmul.cu (C and C++);
 * the wrappers (engine/device/ops/matmul.c) have checked the shapes and the counts. */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_GROUPED_MATMUL_H
#define TRIDENT_ENGINE_DEVICE_OPS_GROUPED_MATMUL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/core/tensor.h"
#include "engine/device/device.h"

/* A backend's matmul slot (engine/device/ops_list.h's matmul row). */
typedef int (*tri_matmul_fn)(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias, bool trans_a,
                             bool trans_b, float beta);

typedef enum { TRI_GROUPED_FORWARD, TRI_GROUPED_DINP, TRI_GROUPED_DWEIGHT } tri_grouped_kind;

/* Group g's matrix of the stacked (G, out, in) weights or their gradient, as a 2-d view. */
static inline tri_tensor tri_grouped_matrix(tri_tensor w, int64_t g)
{
    tri_tensor m = tri_tensor_slice0(w, g, 1);
    int64_t shape[2] = {w.shape[1], w.shape[2]};
    return tri_tensor_reshape(m, 2, shape);
}

/* The three products, group by group in group order:
 *   FORWARD  rows(P, N_out) = stacked(P, C) @ w_g^T                  (rows = out, stacked = x, w = w)
 *   DINP     rows(P, C)     = stacked(P, N_out) @ w_g + beta rows    (rows = dx, stacked = dout, w = w)
 *   DWEIGHT  w_g            = stacked(P, N_out)^T @ rows(P, C) + beta w_g   (w = dw, stacked = dout, rows = x)
 * Groups of no rows are skipped, but for DWEIGHT, where they give beta w_g as matmul does. */
static inline int tri_grouped_matmul_run(tri_device *d, tri_matmul_fn mm, tri_grouped_kind kind, tri_tensor rows,
                                         tri_tensor stacked, tri_tensor w, const int32_t *counts, float beta)
{
    tri_tensor none = tri_tensor_none();
    int64_t row0 = 0;
    int rc = TRI_OK;
    for (int64_t g = 0; g < w.shape[0] && !rc; g++) {
        int64_t m = counts[g];
        tri_tensor r = tri_tensor_slice0(rows, row0, m), s = tri_tensor_slice0(stacked, row0, m);
        tri_tensor wg = tri_grouped_matrix(w, g);
        row0 += m;
        if (kind == TRI_GROUPED_FORWARD && m > 0)
            rc = mm(d, r, s, wg, none, false, true, 0.0f);
        else if (kind == TRI_GROUPED_DINP && m > 0)
            rc = mm(d, r, s, wg, none, false, false, beta);
        else if (kind == TRI_GROUPED_DWEIGHT)
            rc = mm(d, wg, s, r, none, true, false, beta);
    }
    return rc;
}

#endif
