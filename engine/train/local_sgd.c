/* engine/train/local_sgd.c - local SGD and DiLoCo's outer step (see local_sgd.h). */
#include "engine/train/local_sgd.h"

#include <math.h>
#include <string.h>

#include "engine/core/status.h"

int tri_outer_take(tri_outer_state *o, tri_arena *a, const tri_param_layout *L, const tri_local_sgd_config *c,
                   const tri_compression *compression)
{
    int64_t n = L->padded_numel / L->dp, nm = c->outer == TRI_OUTER_NESTEROV ? n : 1;
    tri_compression none = tri_compression_defaults();
    int rc = tri_arena_take(a, TRI_MEM_OPTIMIZER, &o->anchor, TRI_F32, 1, (int64_t[]){n > 0 ? n : 1});
    if (!rc) rc = tri_arena_take(a, TRI_MEM_OPTIMIZER, &o->momentum, TRI_F32, 1, (int64_t[]){nm > 0 ? nm : 1});
    /* the compressed reduction at its ZeRO-1 form: each rank decodes its owned slice of the mean */
    if (!rc) rc = tri_dp_compress_take(&o->comp, a, L, compression ? compression : &none, 1, false);
    return rc;
}

void tri_outer_free(tri_outer_state *o)
{
    tri_dp_compress_free(&o->comp);
}

int64_t tri_outer_scratch_numel(const tri_param_layout *L)
{
    int64_t largest = 1;
    for (int u = 0; u < L->n_units; u++)
        if (L->units[u].len > largest)
            largest = L->units[u].len;
    return largest + largest / L->dp + 1;
}

/* Unit u's slice on this data-parallel rank: flat offset *start in the stage's buffers, *at in the
 * outer state, *n elements. */
static void unit_slice(const tri_param_layout *L, int u, int64_t *start, int64_t *at, int64_t *n)
{
    const tri_param_unit *unit = &L->units[u];
    *n = unit->len / L->dp;
    *start = tri_unit_slice(unit, L->dp, L->dp_rank);
    *at = unit->start / L->dp;
}

int tri_outer_reset(tri_device *d, tri_outer_state *o, const tri_zero *z)
{
    const tri_param_layout *L = z->L;
    int rc = tri_op_fill(d, o->momentum, 0.0f);
    tri_dp_compress_reset(&o->comp); /* the outer residual from zero, Q afresh */
    for (int u = 0; u < L->n_units && !rc; u++) {
        int64_t start, at, n;
        unit_slice(L, u, &start, &at, &n);
        rc = tri_op_convert(d, tri_tensor_range(o->anchor, at, n), tri_zero_owned_params(z, start, n));
    }
    return rc;
}

int tri_outer_reduce(tri_device *d, tri_comm *dp, tri_tensor mine, tri_tensor whole)
{
    int rc = tri_comm_reduce_scatter(dp, mine, whole);
    if (!rc && dp->size > 1) rc = tri_op_scale(d, mine, 1.0f / (float)dp->size);
    return rc;
}

/* The outer optimizer on one owned slice: delta is the mean outer gradient (overwritten), anchor
 * and momentum the state. PyTorch's SGD order for nesterov: b = mu * b + delta; g = delta + mu * b;
 * anchor -= lr * g. */
static int outer_update(tri_device *d, tri_tensor anchor, tri_tensor momentum, tri_tensor delta,
                        const tri_local_sgd_config *c)
{
    int rc = TRI_OK;
    if (c->outer == TRI_OUTER_NESTEROV) {
        rc = tri_op_scale(d, momentum, c->outer_momentum);
        if (!rc) rc = tri_op_axpy(d, momentum, 1.0f, delta);
        if (!rc) rc = tri_op_axpy(d, delta, c->outer_momentum, momentum);
    }
    if (!rc) rc = tri_op_axpy(d, anchor, -c->outer_lr, delta);
    return rc;
}

/* Compressed: the holder's decoded mean (in whole's owned slice [own, own + n)) and outer residual
 * (with two-phase its server residual too, the part in this rank's chunk, at the same offsets on
 * every TP rank: their units are alike) of unit u's parameters that several TP ranks hold,
 * broadcast over their group (see tri_outer_copies). */
static int align_copies(const tri_param_layout *L, tri_outer_state *o, tri_tensor whole, int64_t own, int64_t n,
                        int u, const tri_outer_copies *copies)
{
    const tri_param_unit *un = &L->units[u];
    int rc = TRI_OK;
    for (int i = un->first; i < un->first + un->count && !rc && copies; i++) {
        const tri_param *p = &L->params[i];
        tri_comm *g = p->tp_replicated ? copies->tp : p->replicas > 1 ? copies->shared : NULL;
        if (!g || g->size < 2)
            continue;
        int64_t lo = p->offset - un->start, hi = lo + p->numel; /* in the unit */
        int64_t a = lo > own ? lo : own, b = hi < own + n ? hi : own + n;
        rc = tri_comm_broadcast(g, tri_tensor_range(o->comp.residual, p->offset, p->numel), 0);
        if (!rc && b > a) rc = tri_comm_broadcast(g, tri_tensor_range(whole, a, b - a), 0);
        bool two_phase = o->comp.c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE && o->comp.residual_ready;
        tri_tensor server = tri_tensor_none();
        if (!rc && two_phase)
            rc = tri_dp_compress_server_view(&o->comp, p->offset, p->numel, &server);
        if (!rc && two_phase && tri_tensor_numel(server) > 0)
            rc = tri_comm_broadcast(g, server, 0);
    }
    return rc;
}

/* The mean over dp of unit u's deltas (whole: this rank's, len; overwritten) into *mean (the owned
 * slice, n): the plain reduce-scatter into the scratch's mean, or the compressed reduction of
 * whole / dp (engine/train/dp_compress.h, its ZeRO-1 form), whose decoded sum lands in whole's own
 * slice. */
static int reduce_deltas(tri_device *d, tri_comm *dp, tri_outer_state *o, tri_tensor whole, tri_tensor *mean,
                         int u, int64_t iter, const tri_outer_copies *copies)
{
    int64_t len = tri_tensor_numel(whole), n = len / dp->size;
    if (!o->comp.on)
        return tri_outer_reduce(d, dp, *mean, whole);
    *mean = tri_tensor_range(whole, (int64_t)dp->rank * n, n);
    int rc = tri_op_scale(d, whole, 1.0f / (float)dp->size);
    if (!rc) rc = tri_dp_compress_reduce(&o->comp, d, dp, whole, u, iter);
    /* what is not a parameter element (the layout's padding, vocabulary padding rows) keeps no
     * decoded mean (the reduction already keeps no residual there), so it stays zero as it does
     * uncompressed (1bit decodes a zero as +scale) and the checkpointed state is all of it */
    int64_t start = o->comp.L->units[u].start, own = start + (int64_t)dp->rank * n;
    if (!rc) rc = tri_dp_compress_zero_padding(&o->comp, d, u, whole, start, own, own + n);
    return rc ? rc : align_copies(o->comp.L, o, whole, (int64_t)dp->rank * n, n, u, copies);
}

int tri_outer_step(tri_device *d, tri_comm *dp, tri_zero *z, tri_outer_state *o, tri_tensor scratch,
                   const tri_local_sgd_config *c, int64_t iter, const tri_outer_copies *copies)
{
    const tri_param_layout *L = z->L;
    if (z->stage != 0)
        return TRI_ERR(TRI_EINVAL, "local SGD's outer step at ZeRO stage %d: stage 0 only", z->stage);
    if (dp->size != L->dp)
        return TRI_ERR(TRI_EINTERNAL, "local SGD: a data-parallel group of %d ranks for a layout cut for dp %d",
                       dp->size, L->dp);
    int rc = tri_zero_sync(z);
    o->comp.last_sent = o->comp.last_plain = 0;
    for (int u = 0; u < L->n_units && !rc; u++) {
        int64_t start, at, n, len = L->units[u].len;
        unit_slice(L, u, &start, &at, &n);
        tri_tensor whole = tri_tensor_range(scratch, 0, len);               /* (len) f32 */
        tri_tensor mean = tri_tensor_range(scratch, len, n);                /* (len / dp) f32 */
        tri_tensor params = tri_zero_owned_params(z, L->units[u].start, len); /* fp32 (master) */
        tri_tensor anchor = tri_tensor_range(o->anchor, at, n);
        tri_tensor mom = c->outer == TRI_OUTER_NESTEROV ? tri_tensor_range(o->momentum, at, n) : o->momentum;
        /* delta_r = anchor - theta_r over the whole unit, then its mean over dp into the owned slice */
        rc = tri_comm_all_gather(dp, whole, anchor);
        if (!rc) rc = tri_op_axpy(d, whole, -1.0f, params);
        if (!rc) rc = reduce_deltas(d, dp, o, whole, &mean, u, iter, copies);
        if (!rc) rc = outer_update(d, anchor, mom, mean, c);
        /* the new anchor is every replica's parameters */
        tri_tensor mine = tri_tensor_range(params, start - L->units[u].start, n);
        if (!rc) rc = tri_op_convert(d, mine, anchor);
        if (!rc) rc = tri_comm_all_gather(dp, params, mine);
    }
    return rc ? rc : tri_zero_publish_owned(z);
}
