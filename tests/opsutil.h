/* tests/opsutil.h - helpers shared by the device-op suites (tests/test_ops_*.c).
 *
 * The op suites call every op through the public tri_op_* wrappers on device memory, filled and
 * read back with tri_device_copy_*, so the same suites can run on another backend later. Each suite
 * writes its own naive fp64 loops from the ops' definitions; what they share lives here: device and
 * host allocations tracked until ot_teardown (the suites' .fini, so a failed assertion leaks
 * nothing), widening to fp64, the comparison that prints the measured error, and the central
 * finite-difference driver used against every backward.
 *
 * Set TRIDENT_TEST_VERBOSE=1 to print every comparison's maximum error (the numbers in the
 * suites' tolerance comments were measured that way). */
#ifndef TRIDENT_TESTS_OPSUTIL_H
#define TRIDENT_TESTS_OPSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"
#include "engine/device/device.h"

/* Central-difference step of ot_fd_grad. Inputs are O(1), so in fp64 the truncation error
 * (~h^2 |L'''|, 1e-12) and the rounding error (~1e-16 |L| / h, 1e-9) are both far below fp32's
 * resolution: the finite differences are exact for our purposes. */
#define OT_FD_H 1e-6

/* A CPU device with `threads` OpenMP threads, destroyed by ot_teardown. */
tri_device *ot_device(int threads);

/* Device memory for `shape` (a view built with data NULL, e.g. tri_tensor_2d(NULL, TRI_F32, N, C)),
 * optionally filled from host memory (host NULL: left uninitialised). */
tri_tensor ot_tensor(tri_device *d, tri_tensor shape, const void *host);
/* host <- t (all of it). */
void ot_download(tri_device *d, void *host, tri_tensor t);
/* A device copy of t's contents read back as floats into a tracked host array (bf16 widened). */
float *ot_read(tri_device *d, tri_tensor t);

/* ---- bf16 storage (engine/device/device.h "Precision") ---- */
/* Device memory for `shape` stored as `dtype` (f32 or bf16) holding the floats `host`, rounded to
 * nearest even when bf16; host NULL fills NaN (so an output the op must overwrite fails if not). */
tri_tensor ot_tensor_as(tri_device *d, tri_dtype dtype, tri_tensor shape, const float *host);
/* ot_tensor_as in bf16 and in f32. */
static inline tri_tensor ot_put_bf16(tri_device *d, tri_tensor shape, const float *host)
{
    return ot_tensor_as(d, TRI_BF16, shape, host);
}

static inline tri_tensor ot_put_f32(tri_device *d, tri_tensor shape, const float *host)
{
    return ot_tensor_as(d, TRI_F32, shape, host);
}

/* Shapes for ot_tensor_as (its dtype argument decides the storage): a vector, a matrix. */
static inline tri_tensor ot_v1(int64_t n)
{
    return tri_tensor_1d(NULL, TRI_F32, n);
}

static inline tri_tensor ot_m2(int64_t r, int64_t c)
{
    return tri_tensor_2d(NULL, TRI_F32, r, c);
}

/* The raw bits of a bf16 tensor, in a tracked host array. */
uint16_t *ot_read_bits(tri_device *d, tri_tensor t);
/* Tracked n uniform values in [lo, hi) rounded to bf16: inputs every floating dtype holds exactly. */
float *ot_bf16_uniform(size_t n, float lo, float hi, uint64_t seed);

/* Tracked zeroed host arrays. */
float *ot_floats(size_t n);
double *ot_doubles(size_t n);
int32_t *ot_ints(size_t n);
/* Tracked host array of n uniform values in [lo, hi), from `seed`. */
float *ot_uniform(size_t n, float lo, float hi, uint64_t seed);
/* Tracked fp64 copy of x. */
double *ot_widen(const float *x, size_t n);

/* Whether max_i |got_i - want_i| / max(|want_i|, floor) <= tol with floor = floor_frac * RMS(want):
 * relative error, except that elements much smaller than the tensor's typical size (which fp32
 * rounding of sums that cancel leaves with a large relative but tiny absolute error) are measured
 * against floor_frac of that size. Prints the error (always on failure, on success with
 * TRIDENT_TEST_VERBOSE); `what` names the op and the output. */
bool ot_close(const char *what, const float *got, const double *want, size_t n, double floor_frac,
              double tol);
/* Whether got and want hold the same bits (n floats); prints the first difference otherwise. */
bool ot_same_bits(const char *what, const float *got, const float *want, size_t n);

/* sum_i a_i b_i: the scalar loss L = sum(out * R) of the backward checks. */
double ot_dot(const double *a, const double *b, size_t n);

/* grad_i = (L(x + h e_i) - L(x - h e_i)) / 2h for i < n: x is one of the inputs that loss(ctx)
 * reads; it is perturbed in place and restored. */
typedef double (*ot_loss_fn)(void *ctx);
void ot_fd_grad(double *grad, double *x, size_t n, ot_loss_fn loss, void *ctx);

/* The fused attention ops on an empty batch (B 0, T 16) and an empty sequence (B 2, T 0), fp32 and
 * bf16, NH 2, HS 64, their views pointing into mem (any allocation of d's), then tri_device_sync:
 * TRI_OK, or the first failure's status (its message in tri_error_message, naming the case). Shared by
 * test_flash_attention (CPU) and test_gpu_ops, where B or T 0 must launch nothing. */
int ot_flash_empty_cases(tri_device *d, void *mem);

/* Frees every tracked allocation and device. */
void ot_teardown(void);

#endif
