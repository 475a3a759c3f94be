/* engine/device/ops/positions_math.h - a local row's position in its sequence, under context
 * parallelism (docs/context_parallel.md, "cp in the training engine").
 *
 * Megatron-Core's split (Liu et al. 2023, "Ring Attention", with the causal load balance of
 * Megatron-Core's get_batch_on_this_cp_rank): a sequence of T tokens is cut into 2 cp chunks of
 * Tc = T / (2 cp) rows; cp rank i holds chunks i and 2cp-1-i, in that order, as its local sequence of
 * T_l = T / cp rows. A micro-batch's local rows are (B, T_l) flattened, so local row r (sequence
 * parallelism's row0 + n) is row t = r % T_l of its sequence, and its global position is
 *   t < Tc:  cp_rank Tc + t,        t >= Tc:  (2cp-1-cp_rank) Tc + (t - Tc).
 * At cp 1 this is r % T: the mapping every layout without cp used, the same integers (so the same bits).
 * The learned position embedding (GPT-2's wpe) and the rotary tables (Llama) index with it, on the CPU
 * loops (embedding_cpu.c, attention_cpu.c) and in the CUDA kernels (cuda/embedding/embedding.kern.h,
 * cuda/attention/rope.kern.h and rope_fast.cuh): one function, both backends. */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_POSITIONS_MATH_H
#define TRIDENT_ENGINE_DEVICE_OPS_POSITIONS_MATH_H

#include <stdint.h>

#include "engine/core/math.h"

/* Global position in [0, T) of local row r (>= 0) of a (B, T / cp) batch on cp rank cp_rank. cp <= 1:
 * r % T. T must divide by 2 cp when cp > 1 (the validator's rule). */
TRI_HD int64_t tri_seq_position(int64_t T, int64_t r, int cp, int cp_rank)
{
    if (cp <= 1)
        return r % T;
    int64_t T_l = T / cp, Tc = T_l / 2, t = r % T_l;
    return t < Tc ? (int64_t)cp_rank * Tc + t : (int64_t)(2 * cp - 1 - cp_rank) * Tc + (t - Tc);
}

/* The inverse: the row t in [0, T / cp) of a local sequence at global position p, or -1 when p is in
 * another cp rank's chunks. cp <= 1: p (for p in [0, T)). */
TRI_HD int64_t tri_seq_local_row(int64_t T, int64_t p, int cp, int cp_rank)
{
    if (cp <= 1)
        return p;
    int64_t Tc = T / (2 * (int64_t)cp), chunk = p / Tc;
    if (chunk == cp_rank)
        return p % Tc;
    if (chunk == 2 * cp - 1 - cp_rank)
        return Tc + p % Tc;
    return -1;
}

#endif
