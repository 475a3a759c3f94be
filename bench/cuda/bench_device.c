/* bench/cuda/bench_device.c - what the GPU op benches share: their device and their random operands
 * (bench_device.h). */
#include "bench/cuda/bench_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "cuda/device_cuda.h"

#include "engine/core/math.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"

int tri_bench_device_uniform(tri_device *d, tri_tensor *t, tri_tensor shape, void **mem, uint64_t seed,
                             const char *who)
{
    size_t n = (size_t)tri_tensor_numel(shape), bytes = n * tri_dtype_size(shape.dtype);
    int rc = tri_device_alloc(d, mem, bytes);
    if (rc)
        return rc;
    *t = shape;
    t->data = *mem;
    uint16_t *h = malloc(n * sizeof *h); /* (n) bf16 staging */
    float *f = malloc(n * sizeof *f);    /* (n) f32 staging */
    if (!h || !f) {
        free(h);
        free(f);
        return TRI_ERR(TRI_ENOMEM, "%s: out of host memory", who);
    }
    for (size_t i = 0; i < n; i++) {
        f[i] = 2.0f * (float)tri_rng_uniform(seed, 0, i) - 1.0f;
        h[i] = tri_float_to_bf16(f[i]);
    }
    rc = tri_device_copy_from_host(d, *t, shape.dtype == TRI_BF16 ? (void *)h : (void *)f);
    free(h);
    free(f);
    return rc;
}

int tri_bench_cuda_open(const char *who, tri_device **d)
{
    const char *why = "";
    *d = NULL;
    if (!tri_cuda_available(&why)) {
        fprintf(stderr, "%s: no usable CUDA device: %s\n", who, why);
        return 1;
    }
    if (tri_device_cuda_create(d, 0) != TRI_OK) {
        fprintf(stderr, "%s: %s\n", who, tri_error_message());
        return 1;
    }
    return 0;
}
