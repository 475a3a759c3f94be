/* cuda/device_cuda.h - the CUDA backend of the device interface (engine/device/device.h).
 *
 * Only tools/ and tests/ name a concrete backend; they include this header when the build has
 * CUDA (TRIDENT_CUDA, defined by CMake for them when nvcc is found). Besides creation, it offers
 * what the GPU tests and the benchmark need beyond the interface: the switch to the simple kernel
 * forms, the bf16 conversion kernels, and the device's name and peak-relevant facts. */
#ifndef TRIDENT_CUDA_DEVICE_CUDA_H
#define TRIDENT_CUDA_DEVICE_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA device `ordinal` (made current on the calling thread, which must be the one
 * that uses it): one non-blocking compute stream, a cuBLASLt handle with a 32 MiB workspace and
 * the reductions' scratch. Without a usable GPU returns TRI_EDEVICE with a message that says why
 * (e.g. "no CUDA device: CUDA driver version is insufficient for CUDA runtime version"). */
int tri_device_cuda_create(tri_device **out, int ordinal);

/* True when at least one CUDA device can be used; *why (may be NULL) says why not. */
int tri_cuda_available(const char **why);

/* Number of usable CUDA devices (0 without a driver or GPU). */
int tri_cuda_device_count(void);

/* Whether d is a CUDA device. */
bool tri_device_is_cuda(const tri_device *d);

/* simple == true runs every op family in its simple kernel form (the form the CPU suite tests,
 * cuda/<family>/), false (the default) the faster forms (cuBLASLt attention, ...). For tests that
 * check each faster form against its simple twin. The environment variable TRIDENT_CUDA_KERNELS=simple
 * sets it for every device at creation. TRI_EINVAL if d is not a CUDA device. */
int tri_cuda_set_simple_kernels(tri_device *d, bool simple);

/* The attention's causal softmax rows on their own, in the form the simple switch selects: att
 * (rows, T) (fp32 or bf16, on d) holds scores and becomes probabilities in place, row r being query
 * r % T (engine/device/ops/attention_math.h tri_causal_softmax_row_mixed); the backward turns datt's d
 * probabilities into d scores in place given att (tri_causal_softmax_row_backward_mixed). For the GPU tests
 * that hold the fast and simple kernels to the CPU's row functions bit for bit. TRI_EINVAL on shapes. */
int tri_cuda_causal_softmax_rows(tri_device *d, tri_tensor att, int64_t T);
int tri_cuda_causal_softmax_rows_backward(tri_device *d, tri_tensor datt, tri_tensor att, int64_t T);

/* How many calls of the context-parallel attention ops (flash_attention_kv_forward, _kv_backward_dq,
 * _kv_backward_dkv) on d took the tiled kernels (cuda/attention/flash_mma.cu) rather than their
 * simple twins: the GPU tests assert which path ran. */
int64_t tri_cuda_flash_kv_tiled_calls(tri_device *d);

/* out(bf16, n) = in(f32, n) rounded to nearest even; out(f32) = in(bf16) widened. Queued on d's
 * stream like the ops. TRI_EINVAL on dtype or size mismatch. */
int tri_cuda_float_to_bf16(tri_device *d, tri_tensor out, tri_tensor in);
int tri_cuda_bf16_to_float(tri_device *d, tri_tensor out, tri_tensor in);
/* The convert op: whichever of the two dst and src dtypes ask for. */
int tri_cuda_convert(tri_device *d, tri_tensor dst, tri_tensor src);

/* Facts about device `ordinal` for reports (name, compute capability, SMs, memory, clock). */
typedef struct tri_cuda_info {
    char name[256];
    int major, minor;        /* compute capability */
    int sm_count;
    size_t memory_bytes;
    int clock_khz;           /* 0 when the runtime does not report it */
} tri_cuda_info;
int tri_cuda_device_info(int ordinal, tri_cuda_info *info);

/* *tflops = the dense peak of the card whose cudaDeviceProp name is gpu_name, in bf16 or fp32
 * (cuda/peaks.c: NVIDIA's datasheets for A100, H100 SXM/PCIe/NVL, H200); false and 0 for a card
 * not in the table. MFU's denominator in bench_cuda_train and engine_train. */
bool tri_cuda_peak_tflops(const char *gpu_name, bool bf16, double *tflops);

#ifdef __cplusplus
}
#endif

#endif
