/* bench/cuda/bench_device.h - what the GPU op benches share: their device, and their operands (device
 * tensors of uniform [-1, 1) values).
 *
 * bench/cuda/attention_cuda.c and cp_attention_cuda.c time ops on random operands on device 0; this is
 * the one opening and allocate-and-fill both use (the values are engine/core/rng.h's counter-based
 * uniforms, so a bench's inputs are the same on every run and every device). */
#ifndef TRI_BENCH_CUDA_BENCH_DEVICE_H
#define TRI_BENCH_CUDA_BENCH_DEVICE_H

#include <stdint.h>

#include "engine/device/device.h"

/* Allocates shape's bytes on d into *mem and fills them with 2 u - 1, u = tri_rng_uniform(seed, 0, i)
 * for element i (rounded to bf16 when shape.dtype is TRI_BF16, else f32); *t = shape viewing *mem.
 * who names the bench in the error message. Returns TRI_OK, the device's error, or TRI_ENOMEM (host
 * staging); on an error after the allocation *mem is still set (the caller frees it). */
int tri_bench_device_uniform(tri_device *d, tri_tensor *t, tri_tensor shape, void **mem, uint64_t seed,
                             const char *who);

/* CUDA device 0 into *d: 0, or 1 (the bench's exit status) after printing why on stderr (who: the bench's
 * name) when no CUDA device can be used or it fails to start. */
int tri_bench_cuda_open(const char *who, tri_device **d);

#endif
