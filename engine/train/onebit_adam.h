/* engine/train/onebit_adam.h - 1-bit Adam's compression stage (Tang et al. 2021, "1-bit Adam:
 * Communication Efficient Large-Scale Training with Adam's Convergence Speed", §3-4, Algorithm 1;
 * DeepSpeed's OnebitAdam), --onebit-adam.
 *
 * Stage 1 (warm-up, updates 1..N, N = --adam-freeze-step): plain AdamW on the full-precision dp
 * reduction (the compressor's start is N, so the gradients take the plain path: the bits of an
 * uncompressed run). Stage 2 (updates N+1..): v is frozen (with its bias correction 1 - beta2^N),
 * the gradients are not reduced over dp at all; each worker i updates the momentum with its own
 * gradient and the momentum, not the gradient, is what is all-reduced compressed, with error
 * feedback (the worker residual, and with --grad-compression-reduce two-phase the server residual
 * too: dp_compress.h). The update is then linear in the momentum, which is what error feedback
 * needs:
 *   u_i   = beta1 m / D + (1 - beta1) s g_i      (g_i the worker's gradient already divided by D,
 *                                                 s its clipping scale: this replica's own norm)
 *   m     = sum over i, in rank order, of D(C(u_i + r_i))     (r_i = u_i + r_i - D(C(...)))
 *   x    -= lr (m / (sqrt(v_N) / sqrt(1 - beta2^N) + eps) + wd x)   (decoupled decay, as AdamW)
 * so m is the compressed average of the workers' momenta beta1 m + (1 - beta1) s D g_i, the same
 * bits on every rank (decoded in rank order). No first-moment bias correction in stage 2 (none in
 * Algorithm 1; at beta1 0.9 1 - beta1^t is 1 in fp32 from t = 166 on).
 *
 * The exchange (here) writes u_i into the gradient buffer and reduces each unit with
 * tri_dp_compress_unit (the residuals are the compressor's own, so checkpoints hold them as for a
 * compressed gradient: state_shards.h error_feedback, server_error_feedback); the trainer then
 * copies TP rank 0's m to the other copies of a parameter (TP-replicated parameters, shared shards,
 * the tied embedding's two stages), and tri_optimizer_step takes the buffer as m
 * (tri_optimizer_onebit_stage). ZeRO 0 only: every worker needs the whole momentum.
 *
 * The compressor is any of --grad-compression's: Tang et al.'s analysis needs only a compressor with
 * bounded error and error feedback, and the paper's is 1bit. With powersgd (Vogels et al. 2019) the
 * momentum's matrices are reduced as rank-r factors P Q^T, warm-started Q, the vectors whole; the
 * residual is the worker's share of what the factors missed (dp_compress.h), and the decoded m is
 * the same on every rank (P and Q all-reduced). The compressed momentum is smoother than one step's
 * gradient, which is what lets a low rank keep the loss (docs/grad-compression.md). */
#ifndef TRIDENT_ENGINE_TRAIN_ONEBIT_ADAM_H
#define TRIDENT_ENGINE_TRAIN_ONEBIT_ADAM_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/device/device.h"
#include "engine/train/grad_compression.h"
#include "engine/train/optimizer.h"
#include "engine/train/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What --onebit-adam composes with. TRI_EINVAL naming the flag and value for: another optimizer
 * than adam, --adam-freeze-step 0, no compressor, a compressor start (--grad-compression-start-iter,
 * powersgd's --powersgd-start-iter) other than the freeze step (the warm-up is the freeze), ZeRO
 * stage > 0, local SGD, deterministic mode, context parallelism. a->onebit_adam false: TRI_OK. */
int tri_onebit_adam_check(const tri_adamw_config *a, const tri_compression *c, int zero_stage,
                          int64_t local_sgd_steps, bool deterministic, int cp);

/* Stage 2's exchange on one chunk (collective over z->dp): the owned gradients g (this worker's,
 * divided by dp) become u = beta1 / D * m + ((1 - beta1) grad_scale) g (tri_op_scale then
 * tri_op_axpy), and each unit is reduced compressed (tri_dp_compress_unit at z->iteration): the
 * gradient buffer then holds the averaged momentum. TRI_EINVAL outside the compression stage
 * (tri_optimizer_onebit_stage false). */
int tri_onebit_adam_exchange(tri_device *d, const tri_optimizer *o, tri_zero *z, float grad_scale);

#ifdef __cplusplus
}
#endif

#endif
