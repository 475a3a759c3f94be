/* engine/train/comm_staged.h - a comm over device buffers that stages them through host memory and
 * an inner comm over host buffers (MPI, thread ranks).
 *
 * NCCL refuses two ranks on one GPU, so ranks that share a GPU (a one-GPU machine running a tp 2
 * layout, or more ranks than GPUs on a node) cannot use the NCCL comm. The staged comm gives them
 * the MPI comm's collectives on device tensors: each operation copies its device input to a host
 * buffer, runs the inner comm's operation on host buffers, and copies the result back
 * (Megatron-LM's gloo fallback does the same for CPU groups). Results are the inner comm's bit for
 * bit: the same host values go through the same operation (all-to-all with variable counts copies
 * back only the blocks it received, leaving the rest of its output as it was). Non-blocking collective starts run blocking (the
 * staging copies would serialise them anyway); a non-blocking p2p copies its sends down at the start,
 * leaves the inner comm's p2p in flight and copies the receives up at the wait (the ring's overlap). Slower than NCCL by the two copies and host-side
 * reductions; for correctness runs and small layouts, never chosen silently (engine_train says so).
 * The staging buffers grow to the largest operation and are kept (outside the planned memory). */
#ifndef TRIDENT_ENGINE_TRAIN_COMM_STAGED_H
#define TRIDENT_ENGINE_TRAIN_COMM_STAGED_H

#include "engine/comm/comm.h"
#include "engine/device/device.h"

/* *out = a comm over device d's buffers forwarding to `inner` (a host-buffer comm, owned by *out from
 * then on: destroying *out destroys it; on failure the caller keeps it). Splits of *out are staged
 * splits of inner's splits. TRI_EINVAL when inner's buffers are device memory; TRI_ENOMEM. */
int tri_comm_staged_create(tri_comm **out, tri_comm *inner, tri_device *d);

#endif
