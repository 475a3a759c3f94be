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
    /* expert parallelism (tri_grid_add_experts; until then ep 1, edp dp, the comms below NULL) */
    int ep, edp;                     /* ep x edp = tp x dp (a stage's ranks) */
    int ep_rank, edp_rank;           /* tp_rank + tp * dp_rank = ep_rank + ep * edp_rank */
    tri_comm *ep_comm;               /* same (pp, edp_rank): ep adjacent ranks of a stage, one per expert
                                        shard; NULL at ep 1 */
    tri_comm *edp_comm;              /* same (pp, ep_rank): the replicas of one expert shard; NULL at ep 1
                                        with tp 1 (then dp) */
    tri_comm *stage_comm;            /* same pp: a stage's tp x dp ranks, ranked tp_rank + tp * dp_rank;
                                        built with tp > 1 only (at tp 1 dp_comm is the stage) */
    /* expert tensor parallelism (tri_grid_add_experts_etp; etp 1, etp_rank 0, etp_comm NULL without) */
    int etp, etp_rank;               /* etp x ep x edp = tp x dp */
    tri_comm *etp_comm;              /* same (pp, s / etp): etp adjacent ranks of a stage that split each of
                                        their experts' SwiGLU over I; NULL at etp 1 */
} tri_grid;

/* Checks that world_size splits into tp x pp x dp, with no communication, so every rank reaches the
 * same verdict before any collective. Sets *dp. TRI_EINVAL with a message naming the sizes. */
int tri_grid_check(int world_size, int tp, int pp, int *dp);

/* Collective over world: derives this rank's coordinates and splits the groups. */
int tri_grid_create(tri_grid *g, tri_comm *world, int tp, int pp);

/* Coordinates of a world rank (pure). */
void tri_grid_coords(int world_rank, int tp, int dp, int *tp_rank, int *dp_rank, int *pp_rank);
int tri_grid_world_rank(int tp, int dp, int tp_rank, int dp_rank, int pp_rank);

/* Collective over the stage (g->dp_comm at tp 1, else over the world for the stage comm):
 * Megatron-Core's parallel folding with expert tensor parallelism 1 (Liu et al. 2025, "MoE Parallel
 * Folding"; Megatron-Core's RankGenerator "tp-ep-dp" order for the experts) - a stage's tp x dp ranks,
 * numbered s = tp_rank + tp * dp_rank (Megatron's order, tp fastest), regroup as ep x edp
 * (edp = tp dp / ep), ep ranks adjacent: ep_rank = s % ep, edp_rank = s / ep; rank e of an ep group
 * holds experts [e E/ep, (e+1) E/ep) and the edp group reduces those experts' gradients. At tp 1 the
 * groups are the dp comm's (s = dp_rank), as before; ep 1 with tp 1 splits nothing; ep 1 with tp > 1
 * builds edp_comm = the stage (tp x dp). TRI_EINVAL, nothing split, naming the flags and values, when
 * ep < 1 or ep does not divide tp x dp. (MoE with tp > 1 also needs --sequence-parallel: the
 * model's rule, partitioner/constraints.c.) */
int tri_grid_add_experts(tri_grid *g, int ep);

/* tri_grid_add_experts with expert tensor parallelism etp (--expert-tensor-parallel-size; etp 1 is
 * tri_grid_add_experts(g, ep), the same groups): Megatron-Core's RankGenerator order "tp-ep-dp" for
 * the experts with etp in the tp slot, etp fastest, then ep - the stage rank s = tp_rank + tp dp_rank
 * gives etp_rank = s % etp, ep_rank = (s / etp) % ep, edp_rank = s / (etp ep); etp_comm holds the etp
 * ranks s / etp alike (adjacent), ep_comm the ep ranks of the same (etp_rank, edp_rank) (stride etp),
 * edp_comm the same (etp_rank, ep_rank) (stride etp ep): the replicas of one expert slice. Split from
 * the dp comm at tp 1, else from stage_comm. Collective over the stage; TRI_EINVAL, nothing split,
 * naming --expert-tensor-parallel-size, --expert-model-parallel-size and the stage's ranks when
 * etp < 1, ep < 1 or etp x ep does not divide tp x dp. */
int tri_grid_add_experts_etp(tri_grid *g, int ep, int etp);

void tri_grid_destroy(tri_grid *g);

#ifdef __cplusplus
}
#endif

#endif
