/* cuda/attention/flash_twin_limits.h - the simple attention twins' head-size limit, on its own so
 * that cuda/attention/flash_kv.kern.h need not include flash.kern.h: a header that defines
 * __global__ kernels may be compiled into one object only (flash.cu), or the CUDA link finds each
 * kernel twice (flash.cu.o and flash_kv.cu.o). */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_TWIN_LIMITS_H
#define TRIDENT_CUDA_ATTENTION_FLASH_TWIN_LIMITS_H

/* The largest head size of the twins (a thread holds a head in a local array of this many floats). */
#define TRI_FLASH_MAX_HS 256

#endif
