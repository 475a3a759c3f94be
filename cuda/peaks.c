/* cuda/peaks.c - the dense peak TFLOP/s of the NVIDIA cards Trident is measured on: the one table
 * behind MFU in bench_cuda_train and engine_train --device cuda.
 *
 * Dense (no sparsity) peaks from NVIDIA's datasheets: H100 SXM5 fp32 67 TFLOP/s, bf16 989.4 ("NVIDIA
 * H100 Tensor Core GPU" datasheet, 2023); H100 PCIe 51 / 756; H100 NVL 60 / 835; H200 SXM the same
 * compute as H100 SXM, 67 / 989.4 ("NVIDIA H200 Tensor Core GPU" datasheet, 2024); A100 SXM4/PCIe
 * fp32 19.5, bf16 312 ("NVIDIA A100 Tensor Core GPU Architecture" whitepaper, 2020). Trident's fp32
 * is true fp32 (cuBLASLt CUBLAS_COMPUTE_32F, no TF32), so its MFU is against the fp32 peak. */
#include <stdbool.h>
#include <string.h>

#include "cuda/device_cuda.h"

typedef struct peak {
    const char *match; /* substring of cudaDeviceProp.name */
    double fp32, bf16; /* dense TFLOP/s */
} peak;

/* First match wins: the specific names before the generic "H100". */
static const peak PEAKS[] = {
    {"H200", 67.0, 989.4},
    {"H100 PCIe", 51.0, 756.0},
    {"H100 NVL", 60.0, 835.0},
    {"H100", 67.0, 989.4},
    {"A100", 19.5, 312.0},
};

bool tri_cuda_peak_tflops(const char *gpu_name, bool bf16, double *tflops)
{
    for (size_t i = 0; i < sizeof PEAKS / sizeof *PEAKS; i++)
        if (strstr(gpu_name, PEAKS[i].match)) {
            *tflops = bf16 ? PEAKS[i].bf16 : PEAKS[i].fp32;
            return true;
        }
    *tflops = 0.0;
    return false;
}
