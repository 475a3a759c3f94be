/* engine/device/cpu_ops.h - the CPU backend's op functions, declared from the one op list.
 *
 * tri_cpu_<op> for every row of engine/device/ops_list.h (the params of the row), which the CPU
 * table (engine/device/device_cpu.c) points to by name. The optional rows have none: the CPU
 * backend leaves their slots NULL. Not a public header: callers use the checked
 * tri_op_* wrappers of engine/device/device.h. */
#ifndef TRIDENT_ENGINE_DEVICE_CPU_OPS_H
#define TRIDENT_ENGINE_DEVICE_CPU_OPS_H

#include "engine/device/device.h"

#define TRI_OP(name, params) int tri_cpu_##name params;
#define TRI_OP_OPTIONAL(name, params)
#include "engine/device/ops_list.h"

#endif
