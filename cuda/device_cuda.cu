/* cuda/device_cuda.cu - CUDA device creation and the no-GPU path.
 *
 * Skeleton of the CUDA backend: device discovery with a clear message when no GPU is usable.
 * The ops table is filled in by the CUDA backend issue. */
#include "cuda/device_cuda.h"

#include <cuda_runtime.h>

#include "engine/status.h"

int tri_cuda_available(const char **why)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        if (why)
            *why = cudaGetErrorString(err);
        return 0;
    }
    if (count == 0) {
        if (why)
            *why = "the CUDA runtime reports 0 devices";
        return 0;
    }
    return 1;
}

int tri_device_cuda_create(tri_device **out, int ordinal)
{
    const char *why = "";
    *out = NULL;
    if (!tri_cuda_available(&why))
        return TRI_ERR(TRI_EDEVICE, "no CUDA device: %s", why);
    return TRI_ERR(TRI_ENOTSUP, "the CUDA backend's ops are not built yet (device %d)", ordinal);
}
