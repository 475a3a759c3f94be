/* engine/train/step_time.c - a step's time split from the comms' wall-time accounts (see step_time.h). */
#include "engine/train/step_time.h"

#include <stdbool.h>

/* Seconds in comm c unless it is the same group as one already counted (a one-rank grid may give
 * the same comm several roles). */
static double group_seconds(const tri_comm *c, const tri_comm *const *seen, int n_seen, bool p2p_only,
                            bool no_p2p)
{
    if (!c)
        return 0.0;
    for (int i = 0; i < n_seen; i++)
        if (seen[i] == c)
            return 0.0;
    if (p2p_only)
        return tri_comm_seconds(c, TRI_COMM_P2P);
    double s = tri_comm_seconds(c, TRI_COMM_KINDS);
    return no_p2p ? s - tri_comm_seconds(c, TRI_COMM_P2P) : s;
}

/* Wire bytes sent in comm c unless it is the same group as one already counted. */
static double group_bytes(const tri_comm *c, const tri_comm *const *seen, int n_seen)
{
    if (!c)
        return 0.0;
    for (int i = 0; i < n_seen; i++)
        if (seen[i] == c)
            return 0.0;
    return (double)tri_comm_wire_bytes(c, TRI_COMM_KINDS);
}

tri_step_time tri_step_time_snapshot(const tri_grid *g)
{
    tri_step_time t = {0};
    /* the gradients' group: dp x cp (dp_comm itself at cp 1) */
    const tri_comm *seen[6] = {g->tp_comm, g->pp_comm, g->dp_cp_comm, g->mp_comm, g->embd_comm, g->world};
    t.tp_s = group_seconds(g->tp_comm, seen, 0, false, false);
    t.bubble_s = group_seconds(g->pp_comm, seen, 1, true, false);
    t.pp_s = group_seconds(g->pp_comm, seen, 1, false, true);
    t.dp_s = group_seconds(g->dp_cp_comm, seen, 2, false, false);
    t.other_s = group_seconds(g->mp_comm, seen, 3, false, false) + group_seconds(g->embd_comm, seen, 4, false, false) +
                group_seconds(g->world, seen, 5, false, false);
    t.tp_bytes = group_bytes(g->tp_comm, seen, 0);
    t.pp_bytes = group_bytes(g->pp_comm, seen, 1);
    t.dp_bytes = group_bytes(g->dp_cp_comm, seen, 2);
    /* expert parallelism's groups (NULL at ep 1): edp with dp, ep on its own */
    t.dp_s += group_seconds(g->edp_comm, seen, 6, false, false);
    t.dp_bytes += group_bytes(g->edp_comm, seen, 6);
    t.ep_s = group_seconds(g->ep_comm, seen, 6, false, false);
    t.ep_bytes = group_bytes(g->ep_comm, seen, 6);
    /* expert tensor parallelism's group (NULL at etp 1): the experts' all-gather and reduce-scatter */
    t.ep_s += group_seconds(g->etp_comm, seen, 6, false, false);
    t.ep_bytes += group_bytes(g->etp_comm, seen, 6);
    /* context parallelism's group (NULL at cp 1): its payload bytes, the partitioner's cp traffic */
    t.cp_s = group_seconds(g->cp_comm, seen, 6, false, false);
    for (int k = 0; g->cp_comm && k < TRI_COMM_KINDS; k++)
        t.cp_bytes += (double)tri_comm_bytes(g->cp_comm, (tri_comm_kind)k);
    return t;
}

tri_step_time tri_step_time_split(const tri_step_time *b, const tri_step_time *a, double step_s)
{
    tri_step_time t = {.step_s = step_s, .tp_s = a->tp_s - b->tp_s, .pp_s = a->pp_s - b->pp_s,
                       .bubble_s = a->bubble_s - b->bubble_s, .dp_s = a->dp_s - b->dp_s,
                       .other_s = a->other_s - b->other_s, .tp_bytes = a->tp_bytes - b->tp_bytes,
                       .pp_bytes = a->pp_bytes - b->pp_bytes, .dp_bytes = a->dp_bytes - b->dp_bytes,
                       .ep_s = a->ep_s - b->ep_s, .ep_bytes = a->ep_bytes - b->ep_bytes,
                       .cp_s = a->cp_s - b->cp_s, .cp_bytes = a->cp_bytes - b->cp_bytes};
    t.compute_s = step_s - tri_step_time_wait(&t);
    if (t.compute_s < 0.0)
        t.compute_s = 0.0;
    return t;
}

double tri_step_time_wait(const tri_step_time *t)
{
    return t->tp_s + t->pp_s + t->bubble_s + t->dp_s + t->ep_s + t->cp_s + t->other_s;
}

void tri_step_time_add(tri_step_time *a, const tri_step_time *b)
{
    a->step_s += b->step_s;
    a->compute_s += b->compute_s;
    a->tp_s += b->tp_s;
    a->pp_s += b->pp_s;
    a->bubble_s += b->bubble_s;
    a->dp_s += b->dp_s;
    a->other_s += b->other_s;
    a->tp_bytes += b->tp_bytes;
    a->pp_bytes += b->pp_bytes;
    a->dp_bytes += b->dp_bytes;
    a->ep_s += b->ep_s;
    a->ep_bytes += b->ep_bytes;
    a->cp_s += b->cp_s;
    a->cp_bytes += b->cp_bytes;
}
