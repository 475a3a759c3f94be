/* tests/gpu/gpuutil.h - what the GPU suites share: the skip rule and CUDA-vs-CPU comparisons.
 *
 * GPU tests (CTest label gpu) never pass silently without a GPU: each probes for a usable device
 * first and, when there is none, prints why ("SKIP: ... CUDA driver version is insufficient ...")
 * and exits with GPU_SKIP, which CTest's SKIP_RETURN_CODE reports as skipped. The Criterion suites
 * probe in a child process, because Criterion forks every test and the CUDA runtime must not be
 * initialised in the parent of a fork (NVIDIA, CUDA C++ Programming Guide: a child process cannot
 * use the CUDA context of its parent). */
#ifndef TRIDENT_TESTS_GPU_GPUUTIL_H
#define TRIDENT_TESTS_GPU_GPUUTIL_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "engine/device/device.h"
#include "tests/criterion_main.h"

#define GPU_SKIP 77

/* Whether a CUDA device is usable, asked in a child process (leaves CUDA uninitialised here);
 * why (cap bytes) receives the reason when not. */
bool gpu_probe(char *why, size_t cap);

/* A suite's main (`int main(int argc, char **argv) { return gpu_criterion_main(argc, argv); }`):
 * skips (GPU_SKIP) without a usable GPU, else runs the suites as every Criterion executable's main
 * does (tests/criterion_main.h: the cases TRIDENT_SKIP_CASES names skipped). Inlined into main on
 * purpose: Criterion's sandbox (BoxFort's bxfi_exe_patch_main) starts each test's worker process by
 * copying its 16-byte trampoline over the first bytes of main, whatever main's length. A main of one
 * call is 11 bytes at -O1 (16 at -O2 only through the alignment padding after it), so the copy
 * overwrote the start of the function after it: AddressSanitizer's destructor of the suite's
 * globals, which then crashed every worker at exit (docs/test-suite.md). With the body inlined, main
 * is far longer than 16 bytes at every level. */
static inline __attribute__((always_inline)) int gpu_criterion_main(int argc, char **argv)
{
    char why[512];
    if (!gpu_probe(why, sizeof why)) {
        printf("SKIP: no usable CUDA device: %s\n", why);
        return GPU_SKIP;
    }
    return tu_criterion_run(argc, argv);
}

/* Normalised error of got against want (n floats): max |got - want| / max |want| (max |want| floored
 * at 1e-30). Prints it with TRIDENT_TEST_VERBOSE=1 or when above tol; returns whether <= tol. */
bool gpu_close(const char *what, const float *got, const float *want, size_t n, double tol);

/* Downloads a tensor of d to a tracked host array (tests/opsutil.h's ot_read); a bf16 tensor is
 * widened to floats (exact), so fp32 and bf16 results compare alike. */
float *gpu_read(tri_device *d, tri_tensor t);

#endif
