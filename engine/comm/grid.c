/* engine/comm/grid.c - the process grid (see grid.h). */
#include "engine/comm/grid.h"

#include <stdio.h>
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

int tri_grid_check_cp(int world_size, int tp, int cp, int pp, int *dp)
{
    if (cp == 1)
        return tri_grid_check(world_size, tp, pp, dp);
    if (tp < 1 || cp < 1 || pp < 1)
        return TRI_ERR(TRI_EINVAL, "tensor-model-parallel-size (%d), context-parallel-size (%d) and "
                       "pipeline-model-parallel-size (%d) must be >= 1", tp, cp, pp);
    int64_t mp = (int64_t)tp * cp * pp;
    if (world_size % mp != 0)
        return TRI_ERR(TRI_EINVAL, "world size %d is not divisible by tensor-model-parallel-size %d x "
                       "context-parallel-size %d x pipeline-model-parallel-size %d = %lld (expected mpirun -np a "
                       "multiple of %lld)", world_size, tp, cp, pp, (long long)mp, (long long)mp);
    *dp = (int)(world_size / mp);
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

void tri_grid_coords_cp(int world_rank, int tp, int cp, int dp, int *tp_rank, int *cp_rank, int *dp_rank,
                        int *pp_rank)
{
    *tp_rank = world_rank % tp;
    *cp_rank = (world_rank / tp) % cp;
    *dp_rank = (world_rank / (tp * cp)) % dp;
    *pp_rank = world_rank / (tp * cp * dp);
}

int tri_grid_world_rank_cp(int tp, int cp, int dp, int tp_rank, int cp_rank, int dp_rank, int pp_rank)
{
    return tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank));
}

int tri_grid_create(tri_grid *g, tri_comm *world, int tp, int pp)
{
    return tri_grid_create_cp(g, world, tp, 1, pp);
}

int tri_grid_create_cp(tri_grid *g, tri_comm *world, int tp, int cp, int pp)
{
    memset(g, 0, sizeof *g);
    int rc = tri_grid_check_cp(world->size, tp, cp, pp, &g->dp);
    if (rc)
        return rc;
    g->tp = tp;
    g->cp = cp;
    g->pp = pp;
    g->ep = 1;
    g->etp = 1;
    g->world = world;
    g->world_rank = world->rank;
    g->world_size = world->size;
    tri_grid_coords_cp(world->rank, tp, cp, g->dp, &g->tp_rank, &g->cp_rank, &g->dp_rank, &g->pp_rank);
    int tp_r = g->tp_rank, cp_r = g->cp_rank, dp_r = g->dp_rank, pp_r = g->pp_rank, dp = g->dp;
    g->edp = cp * dp;
    g->edp_rank = cp_r + cp * dp_r;
    bool embd = pp_r == 0 || pp_r == pp - 1;
    int pipe = tp_r + tp * (cp_r + cp * dp_r); /* the pipeline's: its rank within a stage */
    /* at cp 1 (cp_r 0) every color and key is the tp-dp-pp grid's */
    rc = tri_comm_split(world, cp_r + cp * (dp_r + dp * pp_r), tp_r, &g->tp_comm);
    if (!rc) rc = tri_comm_split(world, pipe, pp_r, &g->pp_comm);
    if (!rc) rc = tri_comm_split(world, tp_r + tp * (cp_r + cp * pp_r), dp_r, &g->dp_comm);
    if (!rc) rc = tri_comm_split(world, cp_r + cp * dp_r, tp_r + tp * pp_r, &g->mp_comm);
    if (!rc) rc = tri_comm_split(world, embd ? pipe : -1, pp_r, &g->embd_comm);
    if (!rc && cp > 1) rc = tri_comm_split(world, tp_r + tp * (dp_r + dp * pp_r), cp_r, &g->cp_comm);
    if (!rc && cp > 1) rc = tri_comm_split(world, tp_r + tp * pp_r, cp_r + cp * dp_r, &g->dp_cp_comm);
    if (!rc && cp == 1) g->dp_cp_comm = g->dp_comm;
    if (rc) {
        tri_grid_destroy(g);
        return tri_error_context(rc, "building the %dx%dx%dx%d (tp x cp x pp x dp) process grid", tp, cp, pp, g->dp);
    }
    return TRI_OK;
}

/* A stage's ranks: tp x cp x dp; the message's words for them ("tensor x data-parallel ranks 2 x 2 = 4",
 * with "context" and cp between at cp > 1). */
static int stage_ranks(const tri_grid *g, char *buf, size_t cap)
{
    int ranks = g->tp * g->cp * g->dp;
    if (g->cp > 1)
        snprintf(buf, cap, "tensor x context x data-parallel ranks %d x %d x %d = %d", g->tp, g->cp, g->dp, ranks);
    else
        snprintf(buf, cap, "tensor x data-parallel ranks %d x %d = %d", g->tp, g->dp, ranks);
    return ranks;
}

/* The experts' stage comm, ranked s: dp_cp_comm at tp 1, else the stage comm split from the world. */
static int expert_stage(tri_grid *g, tri_comm **stage)
{
    *stage = g->dp_cp_comm;
    if (g->tp == 1)
        return TRI_OK;
    int s = g->tp_rank + g->tp * (g->cp_rank + g->cp * g->dp_rank);
    int rc = tri_comm_split(g->world, g->pp_rank, s, &g->stage_comm);
    *stage = g->stage_comm;
    return rc;
}

int tri_grid_add_experts(tri_grid *g, int ep)
{
    char what[128];
    int ranks = stage_ranks(g, what, sizeof what);
    if (ep < 1 || ranks % ep != 0)
        return TRI_ERR(TRI_EINVAL, "--expert-model-parallel-size %d must be >= 1 and divide a pipeline stage's "
                       "%s (parallel folding: they regroup as ep x expert-data-parallel; world %d / pipeline %d)",
                       ep, what, g->world_size, g->pp);
    int s = g->tp_rank + g->tp * (g->cp_rank + g->cp * g->dp_rank); /* the rank within its stage, Megatron's order */
    g->ep = ep;
    g->edp = ranks / ep;
    g->ep_rank = s % ep;
    g->edp_rank = s / ep;
    if (g->tp == 1 && ep == 1) /* the experts reduce over dp_cp_comm, the stage */
        return TRI_OK;
    tri_comm *stage;
    int rc = expert_stage(g, &stage);
    if (!rc && ep > 1) rc = tri_comm_split(stage, g->edp_rank, g->ep_rank, &g->ep_comm);
    if (!rc) rc = tri_comm_split(stage, g->ep_rank, g->edp_rank, &g->edp_comm);
    return rc;
}

int tri_grid_add_experts_etp(tri_grid *g, int ep, int etp)
{
    char what[128];
    int ranks = stage_ranks(g, what, sizeof what);
    if (etp == 1)
        return tri_grid_add_experts(g, ep);
    if (etp < 1 || ep < 1 || ranks % ((int64_t)etp * ep) != 0)
        return TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d x --expert-model-parallel-size %d must be >= 1 "
                       "and divide a pipeline stage's %s (parallel folding: they regroup as etp x ep x "
                       "expert-data-parallel)", etp, ep, what);
    int s = g->tp_rank + g->tp * (g->cp_rank + g->cp * g->dp_rank); /* the rank within its stage, Megatron's order */
    g->etp = etp;
    g->ep = ep;
    g->edp = ranks / (etp * ep);
    g->etp_rank = s % etp;
    g->ep_rank = s / etp % ep;
    g->edp_rank = s / (etp * ep);
    tri_comm *stage;
    int rc = expert_stage(g, &stage);
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
    if (g->dp_cp_comm != g->dp_comm)
        tri_comm_destroy(g->dp_cp_comm);
    tri_comm_destroy(g->cp_comm);
    g->dp_cp_comm = g->cp_comm = NULL;
    tri_comm_destroy(g->tp_comm);
    tri_comm_destroy(g->pp_comm);
    tri_comm_destroy(g->dp_comm);
    tri_comm_destroy(g->mp_comm);
    tri_comm_destroy(g->embd_comm);
    g->tp_comm = g->pp_comm = g->dp_comm = g->mp_comm = g->embd_comm = NULL;
}
