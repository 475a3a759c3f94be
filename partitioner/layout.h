/* partitioner/layout.h - where each parameter of a stage lives on one rank.
 *
 * From the parameter descriptions of a stage (each naming its unit) and the rank's (tp, dp)
 * coordinates: local shapes, global offsets of TP shards, offsets in one flat parameter buffer and
 * one flat gradient buffer (each parameter aligned to TRI_LAYOUT_ALIGN elements), grouped into
 * units padded to a multiple of dp * TRI_LAYOUT_ALIGN, each data-parallel rank owning an equal
 * slice of every unit. Pure planning: no device, no comm. */
#ifndef TRIDENT_PARTITIONER_LAYOUT_H
#define TRIDENT_PARTITIONER_LAYOUT_H

#include "engine/train/param.h"

/* tri_param_layout is declared in engine/train/param.h (the optimizer walks it); this module fills it. */

/* Lays out n specs for rank (tp_rank of tp, dp_rank of dp). TRI_EINVAL when a split dimension does
 * not divide by tp (the message names the parameter and sizes) or the specs' units decrease,
 * TRI_ENOMEM on allocation failure. */
int tri_layout_create(tri_param_layout *L, const tri_param_spec *specs, int n, int tp, int tp_rank,
                      int dp, int dp_rank);
void tri_layout_destroy(tri_param_layout *L);
/* Expert parallelism (ep > 1, or any ep at tp > 1): the expert parts (tri_param_part) are sharded
 * over the expert-data-parallel group of tp dp / ep ranks, the grid's folding (engine/comm/grid.h):
 * the stage's rank s = tp_rank + tp dp_rank is edp rank s / ep (at ep 1 and tp > 1 the whole stage).
 * tri_layout_create pads expert parts to tp dp TRI_LAYOUT_ALIGN elements, which every edp divides.
 * Sets L->edp, L->edp_rank and this rank's shard_numel. TRI_EINVAL when ep does not divide tp x dp
 * or an expert part does not divide by edp. */
int tri_layout_set_experts(tri_param_layout *L, int ep, int tp, int tp_rank);
/* Whether any part of L is an expert part (spec.expert): then tri_layout_set_experts applies. */
bool tri_layout_has_experts(const tri_param_layout *L);
/* The same with expert tensor parallelism etp (tri_layout_set_experts is etp 1): edp = tp dp / (etp ep),
 * edp_rank = s / (etp ep) (engine/comm/grid.h tri_grid_add_experts_etp). */
int tri_layout_set_experts_etp(tri_param_layout *L, int ep, int etp, int tp, int tp_rank);

/* Index of the parameter called `name`, or -1. */
int tri_layout_find(const tri_param_layout *L, const char *name);

/* The unit holding flat offset `at` (-1 when outside the buffers). */
int tri_layout_unit_of(const tri_param_layout *L, int64_t at);

/* Copies the local shard of parameter p held by TP rank `shard_rank` (same local shape as p's) from
 * `shard` into its place in the global tensor `global` (p->spec.shape, row-major). Host memory. */
void tri_shard_place(const tri_param *p, int shard_rank, const float *shard, float *global);

#endif
