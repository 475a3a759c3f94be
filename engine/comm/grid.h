/* engine/comm/grid.h - the process grid: tensor-, pipeline- and data-parallel groups.
 *
 * Megatron-LM's rank order, tensor-parallel fastest so TP peers share a node
 * (megatron/core/parallel_state.py): world_rank = tp_rank + tp * (dp_rank + dp * pp_rank).
 * The grid is built once from (tp, pp) and the world size, and passed explicitly: no globals. */
#ifndef TRIDENT_ENGINE_COMM_GRID_H
#define TRIDENT_ENGINE_COMM_GRID_H

#include "engine/comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_grid {
    int tp, pp, dp;                  /* group sizes; tp * pp * dp = world size */
    int world_rank, world_size;
    int tp_rank, pp_rank, dp_rank;
    tri_comm *world;                 /* not owned */
    tri_comm *tp_comm;               /* same (pp, dp): tensor-parallel peers */
    tri_comm *pp_comm;               /* same (tp, dp): the stages of one pipeline, ranked by stage */
    tri_comm *dp_comm;               /* same (tp, pp): data-parallel replicas */
    tri_comm *mp_comm;               /* same dp: one model replica (tp * pp ranks) */
    tri_comm *embd_comm;             /* first and last stage of one pipeline (tied embedding);
                                        NULL on middle stages; one rank when pp == 1 */
    /* expert parallelism (tri_grid_add_experts; until then ep 1, edp dp, both comms NULL) */
    int ep, edp;                     /* ep x edp = dp */
    int ep_rank, edp_rank;           /* dp_rank = ep_rank + ep * edp_rank */
    tri_comm *ep_comm;               /* same (tp, pp, edp_rank): ep adjacent dp ranks, one per expert shard */
    tri_comm *edp_comm;              /* same (tp, pp, ep_rank): the replicas of one expert shard */
} tri_grid;

/* Checks that world_size splits into tp x pp x dp, with no communication, so every rank reaches the
 * same verdict before any collective. Sets *dp. TRI_EINVAL with a message naming the sizes. */
int tri_grid_check(int world_size, int tp, int pp, int *dp);

/* Collective over world: derives this rank's coordinates and splits the groups. */
int tri_grid_create(tri_grid *g, tri_comm *world, int tp, int pp);

/* Coordinates of a world rank (pure). */
void tri_grid_coords(int world_rank, int tp, int dp, int *tp_rank, int *dp_rank, int *pp_rank);
int tri_grid_world_rank(int tp, int dp, int tp_rank, int dp_rank, int pp_rank);

/* Collective over g->dp_comm: Megatron-Core's parallel folding with tp 1 - a stage's dp ranks regroup
 * as ep x edp (edp = dp / ep), ep ranks adjacent (Megatron's default order, so they share a node):
 * ep_rank = dp_rank % ep, edp_rank = dp_rank / ep; rank e of an ep group holds experts
 * [e E/ep, (e+1) E/ep) and the edp group reduces (and ZeRO shards) those experts' gradients. ep 1
 * splits nothing. TRI_EINVAL, nothing split, naming the flags and values, when ep < 1, ep does not
 * divide dp, or tp > 1 (expert parallelism with tensor parallelism is not built). */
int tri_grid_add_experts(tri_grid *g, int ep);

void tri_grid_destroy(tri_grid *g);

#ifdef __cplusplus
}
#endif

#endif
