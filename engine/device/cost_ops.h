/* engine/device/cost_ops.h - what the cost device's files share (engine/device/device_cost.h says what
 * the device is): its op functions and the two calls they record with.
 *
 * tri_cost_<op> for every row of engine/device/ops_list.h, optional rows included (the fused table
 * names them all, the unfused one leaves the optional slots NULL), defined in
 * engine/device/ops_cost.c. Not a public header. */
#ifndef TRIDENT_ENGINE_DEVICE_COST_OPS_H
#define TRIDENT_ENGINE_DEVICE_COST_OPS_H

#include <stdbool.h>

#include "engine/device/device.h"

#define TRI_OP(name, params) int tri_cost_##name params;
#include "engine/device/ops_list.h"

/* Starts one call of op `name` (a string literal): the kernels that follow belong to it. */
void tri_cost_call(tri_device *d, const char *name);
/* Appends one kernel launch of the current call. TRI_ENOMEM when the record cannot grow. */
int tri_cost_kernel(tri_device *d, double bytes, double flops_tc, double flops);
/* Whether d costs the HEAD op set (device_cost.h: fused) or the 2026-11-27 one. */
bool tri_cost_fused(const tri_device *d);

#endif
