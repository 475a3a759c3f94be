/* cuda/device_cuda.h - the CUDA backend of the device interface (engine/device.h).
 *
 * Only tools/ and tests/ name a concrete backend; they include this header when the build has
 * CUDA (TRIDENT_CUDA, set in engine/build_config.h). */
#ifndef TRIDENT_CUDA_DEVICE_CUDA_H
#define TRIDENT_CUDA_DEVICE_CUDA_H

#include "engine/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA device `ordinal`. Without a usable GPU returns TRI_EDEVICE with a message that
 * says why (e.g. "no CUDA device: CUDA driver version is insufficient for CUDA runtime version"). */
int tri_device_cuda_create(tri_device **out, int ordinal);

/* True when at least one CUDA device can be used; *why (may be NULL) says why not. */
int tri_cuda_available(const char **why);

#ifdef __cplusplus
}
#endif

#endif
