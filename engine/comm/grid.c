/* engine/comm/grid.c - the process grid (see grid.h). */
#include "engine/comm/grid.h"

#include <string.h>

#include "engine/core/status.h"

int tri_grid_check(int world_size, int tp, int pp, int *dp)
{
    if (tp < 1 || pp < 1)
        return TRI_ERR(TRI_EINVAL, "tensor-model-parallel-size (%d) and pipeline-model-parallel-size "
                       "(%d) must be >= 1", tp, pp);
    if (world_size % (tp * pp) != 0)
        return TRI_ERR(TRI_EINVAL, "world size %d is not divisible by tensor-model-parallel-size %d x "
                       "pipeline-model-parallel-size %d = %d (expected mpirun -np a multiple of %d)", world_size, tp, pp,
                       tp * pp, tp * pp);
    *dp = world_size / (tp * pp);
    return TRI_OK;
}

void tri_grid_coords(int world_rank, int tp, int dp, int *tp_rank, int *dp_rank, int *pp_rank)
{
    *tp_rank = world_rank % tp;
    *dp_rank = (world_rank / tp) % dp;
    *pp_rank = world_rank / (tp * dp);
}

int tri_grid_world_rank(int tp, int dp, int tp_rank, int dp_rank, int pp_rank)
{
    return tp_rank + tp * (dp_rank + dp * pp_rank);
}

int tri_grid_create(tri_grid *g, tri_comm *world, int tp, int pp)
{
    memset(g, 0, sizeof *g);
    int rc = tri_grid_check(world->size, tp, pp, &g->dp);
    if (rc)
        return rc;
    g->tp = tp;
    g->pp = pp;
    g->ep = 1;
    g->etp = 1;
    g->world = world;
    g->world_rank = world->rank;
    g->world_size = world->size;
    tri_grid_coords(world->rank, tp, g->dp, &g->tp_rank, &g->dp_rank, &g->pp_rank);
    g->edp = g->dp;
    g->edp_rank = g->dp_rank;
    int tp_r = g->tp_rank, dp_r = g->dp_rank, pp_r = g->pp_rank;
    bool embd = pp_r == 0 || pp_r == pp - 1;
    rc = tri_comm_split(world, dp_r + g->dp * pp_r, tp_r, &g->tp_comm);
    if (!rc) rc = tri_comm_split(world, tp_r + tp * dp_r, pp_r, &g->pp_comm);
    if (!rc) rc = tri_comm_split(world, tp_r + tp * pp_r, dp_r, &g->dp_comm);
    if (!rc) rc = tri_comm_split(world, dp_r, tp_r + tp * pp_r, &g->mp_comm);
    if (!rc) rc = tri_comm_split(world, embd ? tp_r + tp * dp_r : -1, pp_r, &g->embd_comm);
    if (rc) {
        tri_grid_destroy(g);
        return tri_error_context(rc, "building the %dx%dx%d process grid", tp, pp, g->dp);
    }
    return TRI_OK;
}

int tri_grid_add_experts(tri_grid *g, int ep)
{
    int ranks = g->tp * g->dp; /* a stage's */
    if (ep < 1 || ranks % ep != 0)
        return TRI_ERR(TRI_EINVAL, "--expert-model-parallel-size %d must be >= 1 and divide a pipeline stage's "
                       "tensor x data-parallel ranks %d x %d = %d (parallel folding: they regroup as ep x "
                       "expert-data-parallel; world %d / pipeline %d)", ep, g->tp, g->dp, ranks, g->world_size, g->pp);
    int s = g->tp_rank + g->tp * g->dp_rank; /* the rank within its stage, Megatron's order */
    g->ep = ep;
    g->edp = ranks / ep;
    g->ep_rank = s % ep;
    g->edp_rank = s / ep;
    if (g->tp == 1) { /* the stage is the dp comm: today's groups */
        if (ep == 1)
            return TRI_OK;
        int rc = tri_comm_split(g->dp_comm, g->edp_rank, g->ep_rank, &g->ep_comm);
        if (!rc) rc = tri_comm_split(g->dp_comm, g->ep_rank, g->edp_rank, &g->edp_comm);
        return rc;
    }
    int rc = tri_comm_split(g->world, g->pp_rank, s, &g->stage_comm);
    if (!rc && ep > 1) rc = tri_comm_split(g->stage_comm, g->edp_rank, g->ep_rank, &g->ep_comm);
    if (!rc) rc = tri_comm_split(g->stage_comm, g->ep_rank, g->edp_rank, &g->edp_comm);
    return rc;
}

int tri_grid_add_experts_etp(tri_grid *g, int ep, int etp)
{
    int ranks = g->tp * g->dp; /* a stage's */
    if (etp == 1)
        return tri_grid_add_experts(g, ep);
    if (etp < 1 || ep < 1 || ranks % ((int64_t)etp * ep) != 0)
        return TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d x --expert-model-parallel-size %d must be >= 1 "
                       "and divide a pipeline stage's tensor x data-parallel ranks %d x %d = %d (parallel folding: "
                       "they regroup as etp x ep x expert-data-parallel)", etp, ep, g->tp, g->dp, ranks);
    int s = g->tp_rank + g->tp * g->dp_rank; /* the rank within its stage, Megatron's order */
    g->etp = etp;
    g->ep = ep;
    g->edp = ranks / (etp * ep);
    g->etp_rank = s % etp;
    g->ep_rank = s / etp % ep;
    g->edp_rank = s / (etp * ep);
    int rc = TRI_OK;
    tri_comm *stage = g->dp_comm; /* at tp 1 the stage, ranked s */
    if (g->tp > 1) {
        rc = tri_comm_split(g->world, g->pp_rank, s, &g->stage_comm);
        stage = g->stage_comm;
    }
    if (!rc) rc = tri_comm_split(stage, s / etp, g->etp_rank, &g->etp_comm);
    if (!rc && ep > 1) rc = tri_comm_split(stage, g->etp_rank + etp * g->edp_rank, g->ep_rank, &g->ep_comm);
    if (!rc) rc = tri_comm_split(stage, g->etp_rank + etp * g->ep_rank, g->edp_rank, &g->edp_comm);
    return rc;
}

void tri_grid_destroy(tri_grid *g)
{
    tri_comm_destroy(g->etp_comm);
    g->etp_comm = NULL;
    tri_comm_destroy(g->ep_comm);
    tri_comm_destroy(g->edp_comm);
    tri_comm_destroy(g->stage_comm);
    g->ep_comm = g->edp_comm = g->stage_comm = NULL;
    tri_comm_destroy(g->tp_comm);
    tri_comm_destroy(g->pp_comm);
    tri_comm_destroy(g->dp_comm);
    tri_comm_destroy(g->mp_comm);
    tri_comm_destroy(g->embd_comm);
    g->tp_comm = g->pp_comm = g->dp_comm = g->mp_comm = g->embd_comm = NULL;
}
