/* engine/device/launch_shapes.h - the CUDA backend's launch shapes that decide how many kernels an op
 * launches and what they move: stated once, for the kernels (cuda/) and for the cost device that
 * models them (engine/device/ops_cost.c), so the kernel-time model cannot drift from the backend. */
#ifndef TRIDENT_ENGINE_DEVICE_LAUNCH_SHAPES_H
#define TRIDENT_ENGINE_DEVICE_LAUNCH_SHAPES_H

/* Chunk sums of one reduction the device's partials buffer holds (doubles): sum_squares,
 * count_nonfinite, the fixed-point reductions (cuda/elementwise/reduce.cu, cuda/fixed/fixed.cu). */
#define TRI_CUDA_MAX_PARTIALS 65536

/* The smallest chunk of a floating-point reduction. Every chunk is one thread's serial walk (8 loads
 * in flight), so the chunk length is the latency of the whole op: 64 elements keeps a 768-element
 * bias at 12 threads (the first GPU profile, with 4096, spent ~200 us per call walking small
 * parameters in one thread). */
#define TRI_REDUCE_MIN_CHUNK 64

/* Pieces of one launch of the multi-tensor ops, passed by value in the kernels' parameters (CUDA 12.1
 * and later take 32 KiB of parameters on sm_70 and newer): sum_squares_multi (8.8 KiB a group, two
 * launches: cuda/elementwise/reduce.kern.h), adamw_multi (6.9 KiB, one launch) and adamw_fused_multi
 * (8.1 KiB with the bf16 outputs, one launch: cuda/optimizer/adamw.kern.h). */
#define TRI_SQ_GROUP 160
#define TRI_ADAMW_GROUP 160

/* Bytes of alignment the bias epilogue's vector gets: there is no heuristic preference for the bias
 * pointer (only A, B, C and D have CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), and kernels load the vector
 * in 16-byte pieces, so a less aligned bias (a view into a flat parameter buffer at an odd offset)
 * takes the unfused path: bias_broadcast_kernel, then the product with beta 1 (cuda/matmul/matmul.cu). */
#define TRI_BIAS_EPILOGUE_ALIGN 16

/* The embedding backward's linked form (a thread per first occurrence and column) needs 2N ints of
 * links in the workspace and O(N^2) comparisons to find them: up to this many tokens a micro-batch
 * (cuda/embedding/embedding.cu; more take the simple kernel). */
#define TRI_EMBEDDING_LINKS_MAX ((int64_t)1 << 17)

#endif
