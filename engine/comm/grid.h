/* engine/comm/grid.h - the process grid: tensor-, context-, pipeline- and data-parallel groups.
 *
 * Megatron-Core's rank order "tp-cp-ep-dp-pp", tensor-parallel fastest so TP peers share a node
 * (megatron/core/parallel_state.py, RankGenerator):
 *   world_rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)).
 * Context parallelism (cp, docs/context_parallel.md) splits each sequence over cp ranks; cp = 1 is
 * the tp-dp-pp grid exactly (every comm and rank number). The grid is built once from (tp, cp, pp)
 * and the world size, and passed explicitly: no globals. */
#ifndef TRIDENT_ENGINE_COMM_GRID_H
#define TRIDENT_ENGINE_COMM_GRID_H

#include "engine/comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_grid {
    int tp, pp, dp;                  /* group sizes; tp * cp * pp * dp = world size */
    int cp;                          /* context-parallel size (1: none) */
    int world_rank, world_size;
    int tp_rank, pp_rank, dp_rank;
    int cp_rank;
    tri_comm *world;                 /* not owned */
    tri_comm *tp_comm;               /* same (cp, dp, pp): tensor-parallel peers */
    tri_comm *pp_comm;               /* same (tp, cp, dp): the stages of one pipeline, ranked by stage */
    tri_comm *dp_comm;               /* same (tp, cp, pp): data-parallel replicas */
    tri_comm *mp_comm;               /* same (cp, dp): one model replica (tp * pp ranks) */
    tri_comm *embd_comm;             /* first and last stage of one pipeline (tied embedding);
                                        NULL on middle stages; one rank when pp == 1 */
    tri_comm *cp_comm;               /* same (tp, dp, pp): the cp ranks sharing one sequence, ranked by
                                        cp_rank; NULL at cp 1 */
    tri_comm *dp_cp_comm;            /* same (tp, pp): dp x cp ranks, ranked cp_rank + cp * dp_rank - the
                                        replicated parameters' gradient reduction and ZeRO's shards
                                        (Megatron-Core's data-parallel group with context parallel);
                                        at cp 1 it is dp_comm itself (not a second comm) */
    /* expert parallelism (tri_grid_add_experts; until then ep 1, edp dp cp, the comms below NULL) */
    int ep, edp;                     /* ep x edp = tp x cp x dp (a stage's ranks) */
    int ep_rank, edp_rank;           /* s = tp_rank + tp * (cp_rank + cp * dp_rank) = ep_rank + ep * edp_rank */
    tri_comm *ep_comm;               /* same (pp, edp_rank): ep adjacent ranks of a stage, one per expert
                                        shard; NULL at ep 1 */
    tri_comm *edp_comm;              /* same (pp, ep_rank): the replicas of one expert shard; NULL at ep 1
                                        with tp 1 (then dp_cp_comm) */
    tri_comm *stage_comm;            /* same pp: a stage's tp x cp x dp ranks, ranked s; built with tp > 1
                                        only (at tp 1 dp_cp_comm is the stage) */
    /* expert tensor parallelism (tri_grid_add_experts_etp; etp 1, etp_rank 0, etp_comm NULL without) */
    int etp, etp_rank;               /* etp x ep x edp = tp x cp x dp */
    tri_comm *etp_comm;              /* same (pp, s / etp): etp adjacent ranks of a stage that split each of
                                        their experts' SwiGLU over I; NULL at etp 1 */
} tri_grid;

/* Checks that world_size splits into tp x pp x dp, with no communication, so every rank reaches the
 * same verdict before any collective. Sets *dp. TRI_EINVAL with a message naming the sizes. */
int tri_grid_check(int world_size, int tp, int pp, int *dp);
/* The same for tp x cp x pp x dp (cp = --context-parallel-size >= 1). */
int tri_grid_check_cp(int world_size, int tp, int cp, int pp, int *dp);

/* Collective over world: derives this rank's coordinates and splits the groups; cp 1. */
int tri_grid_create(tri_grid *g, tri_comm *world, int tp, int pp);
/* The same with context-parallel size cp (cp 1: tri_grid_create, the same comms); cp > 1 also splits
 * cp_comm and dp_cp_comm. TRI_EINVAL, nothing split, when tp x cp x pp does not divide the world. */
int tri_grid_create_cp(tri_grid *g, tri_comm *world, int tp, int cp, int pp);

/* Coordinates of a world rank (pure), cp 1. */
void tri_grid_coords(int world_rank, int tp, int dp, int *tp_rank, int *dp_rank, int *pp_rank);
int tri_grid_world_rank(int tp, int dp, int tp_rank, int dp_rank, int pp_rank);
/* The same in the order tp-cp-dp-pp: world_rank = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank)). */
void tri_grid_coords_cp(int world_rank, int tp, int cp, int dp, int *tp_rank, int *cp_rank, int *dp_rank,
                        int *pp_rank);
int tri_grid_world_rank_cp(int tp, int cp, int dp, int tp_rank, int cp_rank, int dp_rank, int pp_rank);

/* Collective over the stage (g->dp_cp_comm at tp 1, else over the world for the stage comm):
 * Megatron-Core's parallel folding with expert tensor parallelism 1 (Liu et al. 2025, "MoE Parallel
 * Folding"; Megatron-Core's RankGenerator "tp-ep-dp" order for the experts) - a stage's tp x cp x dp
 * ranks, numbered s = tp_rank + tp * (cp_rank + cp * dp_rank) (Megatron's order, tp fastest; cp folds
 * into the experts' data-parallel group), regroup as ep x edp (edp = tp cp dp / ep), ep ranks adjacent: ep_rank = s % ep, edp_rank = s / ep; rank e of an ep group
 * holds experts [e E/ep, (e+1) E/ep) and the edp group reduces those experts' gradients. At tp 1 the
 * groups are the dp x cp comm's (s = cp_rank + cp dp_rank), as before at cp 1; ep 1 with tp 1 and cp 1
 * splits nothing (edp_comm NULL: the experts reduce where the dense parameters do, dp_cp_comm); ep 1
 * with tp > 1 builds edp_comm = the stage (tp x cp x dp). TRI_EINVAL, nothing split, naming the flags and values, when
 * ep < 1 or ep does not divide tp x cp x dp. (MoE with tp > 1 also needs --sequence-parallel: the
 * model's rule, partitioner/constraints.c.) */
int tri_grid_add_experts(tri_grid *g, int ep);

/* tri_grid_add_experts with expert tensor parallelism etp (--expert-tensor-parallel-size; etp 1 is
 * tri_grid_add_experts(g, ep), the same groups): Megatron-Core's RankGenerator order "tp-ep-dp" for
 * the experts with etp in the tp slot, etp fastest, then ep - the stage rank s = tp_rank + tp (cp_rank +
 * cp dp_rank) gives etp_rank = s % etp, ep_rank = (s / etp) % ep, edp_rank = s / (etp ep); etp_comm holds the etp
 * ranks s / etp alike (adjacent), ep_comm the ep ranks of the same (etp_rank, edp_rank) (stride etp),
 * edp_comm the same (etp_rank, ep_rank) (stride etp ep): the replicas of one expert slice. Split from
 * the dp x cp comm at tp 1, else from stage_comm. Collective over the stage; TRI_EINVAL, nothing split,
 * naming --expert-tensor-parallel-size, --expert-model-parallel-size and the stage's ranks when
 * etp < 1, ep < 1 or etp x ep does not divide tp x cp x dp. */
int tri_grid_add_experts_etp(tri_grid *g, int ep, int etp);

void tri_grid_destroy(tri_grid *g);

#ifdef __cplusplus
}
#endif

#endif
