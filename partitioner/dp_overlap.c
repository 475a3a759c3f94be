/* partitioner/dp_overlap.c - the data-parallel comm stream of one pipeline rank against its
 * simulated compute (see dp_overlap.h).
 *
 * Two passes: the first lists, in time order, the points where the rank's compute ops use a unit
 * (its parameters must be there) or finish writing its gradient; the second walks them with the
 * stream's clock: a reduction or a prefetch starts at max(its issue time, stream free), a use
 * waits for its all-gather. */
#include "partitioner/dp_overlap.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

enum { EV_USE = 0, EV_DONE = 1 };

typedef struct event {
    int op;          /* index in the rank's op list */
    double frac;     /* where in the op */
    int type;        /* EV_USE before EV_DONE at the same point */
    int unit;
    int count;       /* reads or writes at this point */
} event;

static int cmp_event(const void *a, const void *b)
{
    const event *x = a, *y = b;
    if (x->op != y->op)
        return x->op < y->op ? -1 : 1;
    if (x->frac != y->frac)
        return x->frac < y->frac ? -1 : 1;
    if (x->type != y->type)
        return x->type < y->type ? -1 : 1;
    return x->unit < y->unit ? -1 : x->unit > y->unit;
}

/* The events of rank r's compute ops, sorted; *n_ev of them in a malloc'd array (NULL: out of
 * memory). */
static event *list_events(const tri_schedule *s, int r, const tri_dp_unit *u, int n, int *n_ev)
{
    size_t cap = 0;
    for (int i = 0; i < s->n_ops[r]; i++)
        if (!tri_sched_is_comm(s->ops[r][i].kind))
            cap += 2 * (size_t)n;
    event *ev = malloc((cap ? cap : 1) * sizeof *ev);
    *n_ev = 0;
    if (!ev)
        return NULL;
    for (int i = 0; i < s->n_ops[r]; i++) {
        const tri_sched_op *op = &s->ops[r][i];
        if (tri_sched_is_comm(op->kind))
            continue;
        bool fwd = op->kind == TRI_SCHED_FWD;
        bool reads = fwd || op->kind == TRI_SCHED_BWD || op->kind == TRI_SCHED_BWD_INPUT;
        bool writes = fwd || op->kind == TRI_SCHED_BWD || op->kind == TRI_SCHED_BWD_WEIGHT;
        for (int k = 0; k < n; k++) {
            if (u[k].chunk != op->chunk)
                continue;
            int nr = fwd ? u[k].fwd_reads : u[k].bwd_reads, nw = fwd ? u[k].fwd_writes : u[k].bwd_writes;
            if (reads && nr > 0)
                ev[(*n_ev)++] = (event){i, fwd ? u[k].fwd_use : u[k].bwd_use, EV_USE, k, nr};
            if (writes && nw > 0)
                ev[(*n_ev)++] = (event){i, fwd ? u[k].fwd_done : u[k].bwd_done, EV_DONE, k, nw};
        }
    }
    qsort(ev, (size_t)*n_ev, sizeof *ev, cmp_event);
    return ev;
}

/* Starts an operation of d seconds issued at t on the stream; returns when it ends. */
static double stream_run(double *free_at, double t, double d)
{
    double start = t > *free_at ? t : *free_at;
    *free_at = start + d;
    return *free_at;
}

int tri_dp_overlap_rank(const tri_schedule *s, const tri_sim_result *sim, int r, const tri_dp_unit *u, int n,
                        const tri_dp_stream *st, tri_dp_overlap *out)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < n; k++)
        if (u[k].chunk < 0 || u[k].chunk >= s->v || u[k].reduce_s < 0 || u[k].gather_s < 0)
            return TRI_ERR(TRI_EINVAL, "dp overlap: unit %d has chunk %d (v %d) or a negative time (%g, %g)", k,
                           u[k].chunk, s->v, u[k].reduce_s, u[k].gather_s);
    int n_ev = 0;
    event *ev = list_events(s, r, u, n, &n_ev);
    double *ready = calloc((size_t)(n > 0 ? n : 1), sizeof *ready);  /* stage 1-2: a unit's gather ends */
    int *written = calloc((size_t)(n > 0 ? n : 1), sizeof *written);
    bool *gathered = calloc((size_t)(n > 0 ? n : 1), sizeof *gathered);
    if (!ev || !ready || !written || !gathered) {
        free(ev);
        free(ready);
        free(written);
        free(gathered);
        return TRI_ERR(TRI_ENOMEM, "dp overlap: out of memory");
    }
    const int z = st->zero_stage, m = st->n_micro;
    const bool ovl_grad = st->overlap_grad_reduce, ovl_param = st->overlap_param_gather;
    double free_at = 0.0, shift = 0.0;
    int pending = -1;       /* ZeRO 0-1: the unit whose second exchange waits for the next completion */
    double pending_end = 0.0; /* when its first exchange ends */
    /* what blocks whatever the timeline: reductions without overlap_grad_reduce, gathers without
       overlap_param_gather, the tail */
    out->blocking_s = st->tail_s;
    for (int k = 0; k < n; k++) {
        int writes = u[k].fwd_writes + u[k].bwd_writes, reads = u[k].fwd_reads + u[k].bwd_reads;
        double red = (z >= 2 ? (double)m * writes : 1.0) * (u[k].reduce_s + u[k].reduce2_s);
        double gat = z == 0 ? 0.0 : (z == 3 ? (double)m * reads : 1.0) * u[k].gather_s;
        out->comm_s += red + gat;
        out->blocking_s += (ovl_grad ? 0.0 : red) + (ovl_param ? 0.0 : gat);
    }
    out->comm_s += st->tail_s;
    /* ZeRO 1-2: the update's all-gathers, all started at the step's start in the units' order (the
       engine's tri_zero_gather_params) */
    for (int k = 0; ovl_param && (z == 1 || z == 2) && k < n; k++)
        if (u[k].fwd_reads + u[k].bwd_reads > 0) {
            gathered[k] = true;
            ready[k] = stream_run(&free_at, 0.0, u[k].gather_s);
        }
    /* ZeRO 3: the first use's all-gather starts at the step's start, each next one at the use before */
    int next_use = 0;
    double use_ready = 0.0;
    bool prefetch = ovl_param && z == 3;
    while (prefetch && next_use < n_ev && ev[next_use].type != EV_USE)
        next_use++;
    if (prefetch && next_use < n_ev)
        use_ready = stream_run(&free_at, 0.0, ev[next_use].count * u[ev[next_use].unit].gather_s);
    for (int e = 0; e < n_ev; e++) {
        const event *x = &ev[e];
        double s0 = sim->start[r][x->op], s1 = sim->end[r][x->op];
        double t = s0 + shift + x->frac * (s1 - s0);
        if (x->type == EV_USE) {
            double need = 0.0;
            if (prefetch && e == next_use) {
                need = use_ready;
                for (next_use = e + 1; next_use < n_ev && ev[next_use].type != EV_USE; next_use++) {}
            } else if (ovl_param && (z == 1 || z == 2) && gathered[x->unit]) {
                need = ready[x->unit];
            }
            if (need > t) {
                out->stall_s += need - t;
                shift += need - t;
                t = need;
            }
            if (prefetch && e < next_use && next_use < n_ev)  /* the next use's all-gather starts now */
                use_ready = stream_run(&free_at, t, ev[next_use].count * u[ev[next_use].unit].gather_s);
            continue;
        }
        if (!ovl_grad)
            continue;
        const tri_dp_unit *w = &u[x->unit];
        if (z >= 2) {
            stream_run(&free_at, t, x->count * w->reduce_s);
        } else {
            written[x->unit] += x->count;
            if (written[x->unit] != m * (w->fwd_writes + w->bwd_writes))
                continue;
            if (pending >= 0) { /* the compute waits for its first exchange, then starts its second */
                if (pending_end > t) {
                    out->stall_s += pending_end - t;
                    shift += pending_end - t;
                    t = pending_end;
                }
                stream_run(&free_at, t, u[pending].reduce2_s);
                pending = -1;
            }
            double end1 = stream_run(&free_at, t, w->reduce_s);
            if (w->reduce2_s > 0) {
                pending = x->unit;
                pending_end = end1;
            }
        }
    }
    double end = 0.0;
    for (int i = 0; i < s->n_ops[r]; i++)
        if (!tri_sched_is_comm(s->ops[r][i].kind) && sim->end[r][i] > end)
            end = sim->end[r][i];
    out->compute_end_s = end;
    double busy_end = end + shift;
    if (pending >= 0) /* the last unit's second exchange, after the backward */
        stream_run(&free_at, busy_end, u[pending].reduce2_s);
    out->finish_s = (busy_end > free_at ? busy_end : free_at) + out->blocking_s;
    free(ev);
    free(ready);
    free(written);
    free(gathered);
    return TRI_OK;
}
