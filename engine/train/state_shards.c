/* engine/train/state_shards.c - the training state as named shards (see state_shards.h). */
#include "engine/train/state_shards.h"

#include <stdlib.h>

#include "engine/core/status.h"

/* Whether this TP rank's shard of p is the one kept (see holder). */
static bool holds(const tri_trainer *t, const tri_param *p)
{
    /* an expert (ep > 1, or tp > 1 at any ep) is whole on its ep rank, which may be any TP rank (folding
     * over tp x dp): every TP rank holds its own experts, and edp rank 0 stores them (add_chunk); at
     * ZeRO 1-3 each edp rank stores its slice of their moments */
    if (p->spec.expert)
        return !p->spec.tied_copy;
    return !p->spec.tied_copy && (!p->tp_replicated || t->grid->tp_rank == 0) &&
           (p->replicas <= 1 || t->grid->tp_rank % p->replicas == 0);
}

/* Appends (or, with list NULL, counts) chunk c's entries. */
static int add_chunk(const tri_trainer *t, int c, tri_state_shard *list, int n)
{
    const tri_param_layout *L = &t->chunks[c]->layout;
    const tri_zero *z = &t->chunks[c]->zero;
    /* the first of the dp x cp replicas (the layout's rank: cp_rank + cp dp_rank; dp_rank at cp 1) */
    bool dp0 = L->dp_rank == 0, owns_moments = z->stage > 0 || dp0;
    for (int i = 0; i < L->n; i++) {
        const tri_param *p = &L->params[i];
        bool h = holds(t, p);
        /* an expert parameter (ep > 1 or tp > 1) is stored by its ep rank's first replica, as a stage's layers */
        bool first = p->spec.expert ? t->grid->edp_rank == 0 : dp0;
        if (list)
            list[n] = (tri_state_shard){.param = p, .group = TRI_STATE_WEIGHTS, .lo = 0, .hi = p->numel,
                                        .holder = h, .stored = h && first, .collective = true, .chunk = c};
        n++;
    }
    /* the model's buffers (DeepSeek-V3's expert bias): replicated weights without optimizer state */
    const tri_param *bd = NULL;
    const tri_tensor *bv = NULL;
    int nb = 0;
    if (t->chunks[c]->model.buffers)
        t->chunks[c]->model.buffers(t->chunks[c]->model.self, &bd, &bv, &nb);
    for (int k = 0; k < nb; k++) {
        bool h = t->grid->tp_rank == 0;
        if (list)
            list[n] = (tri_state_shard){.param = &bd[k], .group = TRI_STATE_WEIGHTS, .lo = 0, .hi = bd[k].numel,
                                        .holder = h, .stored = h && dp0, .collective = true, .buffer = true,
                                        .chunk = c, .at = k};
        n++;
    }
    for (int i = 0; i < L->n; i++) {
        const tri_param *p = &L->params[i];
        bool h = holds(t, p), owns = p->spec.expert && z->stage == 0 ? t->grid->edp_rank == 0 : owns_moments;
        for (int k = 0; k < tri_zero_n_owned(z); k++) {
            int64_t s, len, at;
            if (!tri_zero_owned_piece(z, k, p, &s, &len, &at))
                continue;
            bool adam = tri_optimizer_has_moments(t->opt[c].cfg.kind);
            int g0 = adam ? TRI_STATE_EXP_AVG : TRI_STATE_MOMENTUM, g1 = adam ? TRI_STATE_EXP_AVG_SQ : TRI_STATE_MOMENTUM;
            for (int g = g0; g <= g1; g++) {
                if (list)
                    list[n] = (tri_state_shard){.param = p, .group = (tri_state_group)g, .lo = s - p->offset,
                                                .hi = s - p->offset + len, .holder = h, .stored = h && owns,
                                                .chunk = c, .at = at};
                n++;
            }
        }
    }
    return n;
}

const char *tri_state_group_name(tri_state_group g)
{
    static const char *const names[TRI_STATE_GROUPS] = {
        NULL, "exp_avg", "exp_avg_sq", "momentum_buffer", "outer_anchor", "outer_momentum", "replica_weights",
        "replica_exp_avg", "replica_exp_avg_sq", "replica_momentum_buffer", "error_feedback",
        "server_error_feedback", "outer_error_feedback", "error_feedback_copy", "server_error_feedback_copy",
        "powersgd_q", "outer_powersgd_q", "outer_server_error_feedback"};
    return g >= 0 && g < TRI_STATE_GROUPS ? names[g] : NULL;
}

bool tri_state_group_is_q(tri_state_group g)
{
    return g == TRI_STATE_POWERSGD_Q || g == TRI_STATE_OUTER_POWERSGD_Q;
}

bool tri_state_group_is_outer_compression(tri_state_group g)
{
    return g == TRI_STATE_OUTER_EF_RESIDUAL || g == TRI_STATE_OUTER_POWERSGD_Q ||
           g == TRI_STATE_OUTER_EF_SERVER_RESIDUAL;
}

bool tri_state_group_is_server(tri_state_group g)
{
    return g == TRI_STATE_EF_SERVER_RESIDUAL || g == TRI_STATE_EF_SERVER_COPY || g == TRI_STATE_OUTER_EF_SERVER_RESIDUAL;
}

/* Local SGD: this dp rank's slice of unit u ([*start, + *n) flat, at *at in the outer state). */
static void outer_slice(const tri_param_layout *L, int u, int64_t *start, int64_t *n, int64_t *at)
{
    *n = L->units[u].len / L->dp;
    *start = tri_unit_slice(&L->units[u], L->dp, L->dp_rank);
    *at = L->units[u].start / L->dp;
}

/* Appends (or counts) chunk c's local SGD entries: the outer state's pieces, then the replica's
 * own weights and moments (ZeRO 0: the moments of p are at its flat offset). */
static int add_local(const tri_trainer *t, int c, tri_state_shard *list, int n)
{
    const tri_param_layout *L = &t->chunks[c]->layout;
    int groups = t->cfg.local.outer == TRI_OUTER_NESTEROV ? 2 : 1;
    for (int i = 0; i < L->n; i++) {
        const tri_param *p = &L->params[i];
        bool h = holds(t, p);
        for (int u = 0; u < L->n_units; u++) {
            int64_t start, len, at;
            outer_slice(L, u, &start, &len, &at);
            int64_t lo = p->offset > start ? p->offset : start;
            int64_t hi = p->offset + p->numel < start + len ? p->offset + p->numel : start + len;
            for (int g = 0; g < groups && hi > lo; g++) {
                if (list)
                    list[n] = (tri_state_shard){.param = p, .group = (tri_state_group)(TRI_STATE_OUTER_ANCHOR + g),
                                                .lo = lo - p->offset, .hi = hi - p->offset, .holder = h,
                                                .stored = h, .chunk = c, .at = at + (lo - start)};
                n++;
            }
        }
    }
    /* the replica's optimizer state: Adam's two moments (AdamW, LAMB) or the momentum buffer */
    bool adam = tri_optimizer_has_moments(t->opt[c].cfg.kind);
    tri_state_group g1 = adam ? TRI_STATE_REPLICA_EXP_AVG : TRI_STATE_REPLICA_MOMENTUM,
                    g2 = adam ? TRI_STATE_REPLICA_EXP_AVG_SQ : TRI_STATE_REPLICA_MOMENTUM;
    const tri_state_group replica[3] = {TRI_STATE_REPLICA_WEIGHTS, g1, g2};
    for (int i = 0; i < L->n; i++) {
        const tri_param *p = &L->params[i];
        bool h = holds(t, p);
        for (int k = 0; k < (adam ? 3 : 2); k++) {
            tri_state_group g = replica[k];
            if (list)
                list[n] = (tri_state_shard){.param = p, .group = (tri_state_group)g, .lo = 0, .hi = p->numel,
                                            .holder = h, .stored = h, .chunk = c, .at = p->offset};
            n++;
        }
    }
    return n;
}

/* Appends (or counts) chunk c's compression entries: each parameter's error-feedback residual, its
 * whole TP shard at its flat offset in the residual (laid out like the gradients), the holder's as
 * error_feedback and every other copy's as error_feedback_copy, each stored by every dp rank; with
 * two-phase the server residual's, adjacent (the same flat offset: tri_dp_compress_server_read maps
 * it to the chunk; another copy's as server_error_feedback_copy, stored so too); under local SGD
 * the outer reduction's residual of the parameter next (the same layout), and with two-phase its
 * server residual (both stored by the holder); then, under PowerSGD, each matrix parameter's Q, every copy's,
 * stored by dp rank 0, and under local SGD the outer reduction's Q after them (outer_powersgd_q). */
static int add_residual(const tri_trainer *t, int c, tri_state_shard *list, int n)
{
    const tri_param_layout *L = &t->chunks[c]->layout;
    const tri_dp_compress *x = &t->chunks[c]->zero.comp;
    if (!x->on)
        return n;
    tri_state_group group[4] = {TRI_STATE_EF_RESIDUAL};
    int groups = 1;
    if (x->c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE && x->c.kind != TRI_COMPRESS_POWERSGD)
        group[groups++] = TRI_STATE_EF_SERVER_RESIDUAL;
    if (t->cfg.local.steps > 0 && t->outer[c].comp.on)
        group[groups++] = TRI_STATE_OUTER_EF_RESIDUAL;
    if (t->cfg.local.steps > 0 && t->outer[c].comp.on && t->outer[c].comp.c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE)
        group[groups++] = TRI_STATE_OUTER_EF_SERVER_RESIDUAL;
    for (int i = 0; i < L->n; i++) {
        const tri_param *p = &L->params[i];
        bool h = holds(t, p);
        for (int g = 0; g < groups; g++) {
            tri_state_group grp = h                                        ? group[g]
                                  : group[g] == TRI_STATE_EF_RESIDUAL        ? TRI_STATE_EF_COPY
                                  : group[g] == TRI_STATE_EF_SERVER_RESIDUAL ? TRI_STATE_EF_SERVER_COPY
                                                                             : group[g];
            bool own = grp == TRI_STATE_EF_COPY || grp == TRI_STATE_EF_SERVER_COPY;
            if (list)
                list[n] = (tri_state_shard){.param = p, .group = grp, .lo = 0, .hi = p->numel, .holder = h,
                                            .stored = h || own, .chunk = c, .at = p->offset};
            n++;
        }
    }
    const tri_dp_compress *q_of[2] = {x, t->cfg.local.steps > 0 ? &t->outer[c].comp : NULL};
    for (int k = 0; k < 2 && q_of[k]; k++) {
        for (int i = 0; i < L->n; i++) {
            int64_t at, len;
            if (!tri_dp_compress_q_range(q_of[k], i, &at, &len))
                continue;
            if (list)
                list[n] = (tri_state_shard){.param = &L->params[i],
                                            .group = k ? TRI_STATE_OUTER_POWERSGD_Q : TRI_STATE_POWERSGD_Q, .lo = 0,
                                            .hi = len, .holder = holds(t, &L->params[i]),
                                            .stored = t->grid->dp_rank == 0, .chunk = c, .at = at};
            n++;
        }
    }
    return n;
}

/* The compressed reduction an error-feedback or Q entry belongs to: the gradients' or the outer one. */
static tri_dp_compress *residual_owner(tri_trainer *t, const tri_state_shard *s)
{
    return tri_state_group_is_outer_compression(s->group) ? &t->outer[s->chunk].comp : &t->chunks[s->chunk]->zero.comp;
}

int tri_trainer_state_shards(const tri_trainer *t, tri_state_shard **shards, int *n)
{
    int count = 0;
    for (int c = 0; c < t->v; c++)
        count = add_chunk(t, c, NULL, count);
    for (int c = 0; c < t->v && t->cfg.local.steps > 0; c++)
        count = add_local(t, c, NULL, count);
    for (int c = 0; c < t->v; c++)
        count = add_residual(t, c, NULL, count);
    *shards = calloc((size_t)(count > 0 ? count : 1), sizeof **shards);
    *n = 0;
    if (!*shards)
        return TRI_ERR(TRI_ENOMEM, "out of memory for %d state shards", count);
    for (int c = 0; c < t->v; c++)
        *n = add_chunk(t, c, *shards, *n);
    for (int c = 0; c < t->v && t->cfg.local.steps > 0; c++)
        *n = add_local(t, c, *shards, *n);
    for (int c = 0; c < t->v; c++)
        *n = add_residual(t, c, *shards, *n);
    return TRI_OK;
}

/* The state tensor of a moment, momentum or outer entry, over its piece. */
static tri_tensor moment(const tri_trainer *t, const tri_state_shard *s)
{
    const tri_optimizer *o = &t->opt[s->chunk];
    const tri_outer_state *os = &t->outer[s->chunk];
    tri_tensor x = s->group == TRI_STATE_EXP_AVG_SQ || s->group == TRI_STATE_REPLICA_EXP_AVG_SQ ? o->v
                   : s->group == TRI_STATE_OUTER_ANCHOR                                         ? os->anchor
                   : s->group == TRI_STATE_OUTER_MOMENTUM                                       ? os->momentum
                                                                                                : o->m;
    return tri_tensor_range(x, s->at, s->hi - s->lo);
}

/* Model buffer entry s's values on the device. */
static tri_tensor buffer_values(const tri_trainer *t, const tri_state_shard *s)
{
    const tri_param *bd = NULL;
    const tri_tensor *bv = NULL;
    int nb = 0;
    t->chunks[s->chunk]->model.buffers(t->chunks[s->chunk]->model.self, &bd, &bv, &nb);
    return tri_tensor_range(bv[s->at], s->lo, s->hi - s->lo);
}

/* Weights, or a replica's own weights (ZeRO 0: whole on every rank; reading them is local). */
static bool weights(const tri_state_shard *s)
{
    return s->group == TRI_STATE_WEIGHTS || s->group == TRI_STATE_REPLICA_WEIGHTS;
}

int tri_trainer_state_read(tri_trainer *t, const tri_state_shard *s, float *host)
{
    if (s->buffer)
        return tri_device_copy_to_host(t->dev, host, buffer_values(t, s));
    if (weights(s))
        return tri_zero_read_param(&t->chunks[s->chunk]->zero, s->param, false, host);
    if (tri_state_group_is_q(s->group))
        return tri_dp_compress_q_read(residual_owner(t, s), t->dev, s->at, s->hi - s->lo, host);
    if (tri_state_group_is_server(s->group))
        return tri_dp_compress_server_read(residual_owner(t, s), t->dev, s->at, s->hi - s->lo, host);
    if (s->group >= TRI_STATE_EF_RESIDUAL)
        return tri_dp_compress_residual_read(residual_owner(t, s), t->dev, s->at, s->hi - s->lo, host);
    return tri_device_copy_to_host(t->dev, host, moment(t, s));
}

int tri_trainer_state_write(tri_trainer *t, const tri_state_shard *s, const float *host)
{
    if (s->buffer)
        return tri_device_copy_from_host(t->dev, buffer_values(t, s), host);
    if (weights(s))
        return tri_zero_write_param(&t->chunks[s->chunk]->zero, s->param, host);
    if (tri_state_group_is_q(s->group))
        return tri_dp_compress_q_write(residual_owner(t, s), t->dev, s->at, s->hi - s->lo, host);
    if (tri_state_group_is_server(s->group))
        return tri_dp_compress_server_write(residual_owner(t, s), t->dev, s->at, s->hi - s->lo, host);
    if (s->group >= TRI_STATE_EF_RESIDUAL)
        return tri_dp_compress_residual_write(residual_owner(t, s), t->dev, s->at, s->hi - s->lo, host);
    return tri_device_copy_from_host(t->dev, moment(t, s), host);
}
