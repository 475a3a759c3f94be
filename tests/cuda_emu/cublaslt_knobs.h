/* tests/cuda_emu/cublaslt_knobs.h - what the emulated cuBLASLt (tests/cuda_emu/cublasLt.h) offers,
 * set by a test.
 *
 * Real cuBLASLt's heuristic may return several algorithms, or none for an unusual shape, and
 * cublasLtMatmul may refuse one of them at run time (CUBLAS_STATUS_NOT_SUPPORTED). These knobs make
 * the emulation do the same, so that a test can check what cuda/matmul/matmul.cu does then: the
 * heuristic returns tri_emu_lt_found algorithms (default 2), and cublasLtMatmul refuses the first
 * tri_emu_lt_refused of them in the heuristic's order (default 0). A plan is made once per shape, so
 * a test sets the knobs before the first product of a shape. */
#ifndef TRIDENT_TESTS_CUDA_EMU_CUBLASLT_KNOBS_H
#define TRIDENT_TESTS_CUDA_EMU_CUBLASLT_KNOBS_H

#ifdef __cplusplus
extern "C" {
#endif

extern int tri_emu_lt_found;
extern int tri_emu_lt_refused;
/* cublasLtMatmul calls that ran an algorithm (refusals not counted). */
extern long tri_emu_lt_runs;

#ifdef __cplusplus
}
#endif

#endif
