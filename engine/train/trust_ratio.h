/* engine/train/trust_ratio.h - the layer-wise trust ratios of LARS and LAMB from whole-tensor norms,
 * whatever ZeRO and tensor parallelism cut.
 *
 * LARS (You et al. 2017) scales each tensor's learning rate by eta ||w|| / (||g|| + wd ||w||), LAMB
 * (You et al. 2020, Algorithm 2) each tensor's update by ||w|| / ||r||. The norms are the whole
 * tensor's, although ZeRO shards cut the flat buffers across tensor boundaries and TP splits tensors
 * over ranks: each rank sums the squares of the pieces it owns per (global parameter, TP rank, DP rank)
 * slot in one tri_op_sum_squares_multi call (the gradient norm's slot scheme, tri_trainer_norm_slot),
 * then ONE all-reduce carries every tensor's partial sums of both quantities (over the world under
 * ZeRO, over the model-parallel group without it, as the gradient norm), and tri_op_trust_ratio adds
 * each tensor's slots in index order and computes its ratio on the device: no host wait. Replicated
 * copies (TP-replicated norm weights, shared shards, the last stage's tied embedding) add nothing
 * (count_in_norm) and read the ratio of the counted copy. In deterministic mode the sums are exact
 * fixed-point limbs per tensor (tri_op_fixed_sum_squares), independent of how the layout cut the
 * tensor, so LARS and LAMB are bit-identical across layouts; the ratios are then computed on the host
 * (one more wait a step, as deterministic mode's gradient norm does) and copied to the device. */
#ifndef TRIDENT_ENGINE_TRAIN_TRUST_RATIO_H
#define TRIDENT_ENGINE_TRAIN_TRUST_RATIO_H

#include "engine/train/train.h"

/* t->trust_ratios[global index] = the trust ratio of every parameter with weight decay, for the
 * optimizer of t (LARS: of the weights and the gradients times grad_scale; LAMB: of the weights and
 * the update directions that tri_optimizer_lamb_direction left in the owned gradients). Collective
 * over the comm the gradient norm uses. Device and comm errors. */
int tri_trainer_trust_ratios(tri_trainer *t, float grad_scale);

#endif
