/* cuda/matmul/grouped_matmul.cu - the experts' grouped GEMM on the GPU: one cuBLASLt call per group
 * (engine/device/ops/grouped_matmul.h's loop over tri_cuda_matmul), so each group is the matmul op
 * on the group's views bit for bit.
 *
 * The counts are a host array: the caller copies tokens_per_expert back once per layer and passes
 * it to the layer's five grouped products (gate|up and down forward, their input and weight
 * gradients). Plans: each group's product goes through cuda/matmul/matmul.cu's cache, keyed by the
 * exact shape (rows = the group's count), so a plan is made the first time a count is seen and a
 * count seen again reuses it; the heuristic's choice does not depend on timing, so a plan evicted
 * and made again gives the same algorithm and the same bits. Counts that vary per step therefore
 * cost a heuristic query per new shape, not a different result. A group of no rows launches nothing
 * (but for the weight gradient with beta != 1, which scales, as matmul with an inner dimension 0). */
#include "cuda/cuda_internal.h"
#include "engine/device/ops/grouped_matmul.h"

extern "C" int tri_cuda_grouped_matmul_forward(tri_device *d, tri_tensor out, tri_tensor x, tri_tensor w,
                                               const int32_t *counts)
{
    return tri_grouped_matmul_run(d, tri_cuda_matmul, TRI_GROUPED_FORWARD, out, x, w, counts, 0.0f);
}

extern "C" int tri_cuda_grouped_matmul_backward_input(tri_device *d, tri_tensor dx, tri_tensor dout, tri_tensor w,
                                                      const int32_t *counts, float beta)
{
    return tri_grouped_matmul_run(d, tri_cuda_matmul, TRI_GROUPED_DINP, dx, dout, w, counts, beta);
}

extern "C" int tri_cuda_grouped_matmul_backward_weight(tri_device *d, tri_tensor dw, tri_tensor dout, tri_tensor x,
                                                       const int32_t *counts, float beta)
{
    return tri_grouped_matmul_run(d, tri_cuda_matmul, TRI_GROUPED_DWEIGHT, x, dout, dw, counts, beta);
}
