/* partitioner/layout.c - parameter layout and ZeRO shard ranges (see layout.h). */
#include "partitioner/layout.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

static int64_t round_up(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

static int place(tri_param *p, const tri_param_spec *s, int tp, int tp_rank)
{
    p->spec = *s;
    p->numel = 1;
    if (s->etp > 1) { /* an expert slice: split over the etp group, whatever tp is */
        tp = s->etp;
        tp_rank = s->etp_rank;
        if (s->split_dim < 0 || s->max_shards > 0)
            return TRI_ERR(TRI_EINVAL, "parameter %s: an expert-tensor-parallel slice needs a split dimension and "
                           "no max_shards", s->name);
    }
    p->tp_replicated = s->split_dim < 0 || tp == 1;
    /* shards along split_dim: tp, or max_shards each held by tp / max_shards consecutive ranks */
    int shards = s->max_shards > 0 && s->max_shards < tp ? s->max_shards : tp;
    if (!p->tp_replicated && tp % shards != 0)
        return TRI_ERR(TRI_EINVAL, "parameter %s: its %d shards cannot be shared evenly by "
                       "tensor-model-parallel-size %d (it must divide by %d)", s->name, shards, tp, shards);
    p->replicas = p->tp_replicated ? 1 : tp / shards;
    p->shard_rank = p->tp_replicated ? 0 : tp_rank / p->replicas;
    for (int d = 0; d < s->ndim; d++) {
        p->local_shape[d] = s->shape[d];
        p->global_offset[d] = 0;
        if (d == s->split_dim && !p->tp_replicated) {
            if (s->shape[d] % shards != 0)
                return TRI_ERR(TRI_EINVAL, "parameter %s: dimension %d of size %lld is not divisible "
                               "by tensor-model-parallel-size %d", s->name, d, (long long)s->shape[d], shards);
            p->local_shape[d] = s->shape[d] / shards;
            p->global_offset[d] = p->local_shape[d] * p->shard_rank;
        }
        p->numel *= p->local_shape[d];
    }
    /* Replicas count once in the global norm: TP replicas on tp rank 0 only, a shard on the first
     * of the ranks sharing it, tied copies never. */
    p->count_in_norm = !s->tied_copy && (!p->tp_replicated || tp_rank == 0 || tp == 1) &&
                       tp_rank % p->replicas == 0;
    return TRI_OK;
}

int tri_layout_unit_of(const tri_param_layout *L, int64_t at)
{
    for (int u = 0; u < L->n_units; u++)
        if (at >= L->units[u].start && at < L->units[u].start + L->units[u].len)
            return u;
    return -1;
}

/* Closes the open part (and with `unit` the open unit) at off, padding it to unit_align, an expert
 * part to expert_align (a multiple of unit_align that every expert-data-parallel size divides). */
static void close_part(tri_param_layout *L, int64_t *off, int64_t unit_align, int64_t expert_align, bool unit)
{
    tri_param_part *p = &L->parts[L->n_parts - 1];
    p->len = round_up(*off - p->start, p->expert ? expert_align : unit_align);
    *off = p->start + p->len;
    if (unit) {
        tri_param_unit *u = &L->units[L->n_units - 1];
        u->len = *off - u->start;
    }
}

int tri_layout_create(tri_param_layout *L, const tri_param_spec *specs, int n, int tp, int tp_rank,
                      int dp, int dp_rank)
{
    memset(L, 0, sizeof *L);
    L->params = calloc((size_t)(n > 0 ? n : 1), sizeof *L->params);
    L->units = calloc((size_t)(n > 0 ? n : 1), sizeof *L->units);
    L->parts = calloc((size_t)(n > 0 ? n : 1), sizeof *L->parts);
    if (!L->params || !L->units || !L->parts) {
        tri_layout_destroy(L);
        return TRI_ERR(TRI_ENOMEM, "layout: out of memory for %d parameters", n);
    }
    L->n = n;
    L->dp = L->edp = dp;
    L->dp_rank = L->edp_rank = dp_rank;
    int64_t off = 0, unit_align = (int64_t)dp * TRI_LAYOUT_ALIGN;
    /* edp = tp dp / ep divides tp dp for every ep (parallel folding), which exceeds dp at tp > 1 */
    int64_t expert_align = (int64_t)tp * unit_align;
    for (int i = 0; i < n; i++) {
        int rc = place(&L->params[i], &specs[i], tp, tp_rank);
        if (!rc && i > 0 && specs[i].unit < specs[i - 1].unit)
            rc = TRI_ERR(TRI_EINVAL, "layout: parameter %s is in unit %d after unit %d", specs[i].name,
                         specs[i].unit, specs[i - 1].unit);
        bool new_unit = i == 0 || specs[i].unit != specs[i - 1].unit;
        bool new_part = new_unit || specs[i].expert != specs[i - 1].expert;
        if (!rc && new_part && !new_unit && L->units[L->n_units - 1].n_parts == TRI_UNIT_MAX_PARTS)
            rc = TRI_ERR(TRI_EINVAL, "layout: unit %d alternates expert and other parameters more than %d times "
                         "(at %s)", specs[i].unit, TRI_UNIT_MAX_PARTS, specs[i].name);
        if (rc) {
            tri_layout_destroy(L);
            return rc;
        }
        if (new_part && L->n_parts > 0) /* close the previous part (and unit) */
            close_part(L, &off, unit_align, expert_align, new_unit);
        if (new_unit)
            L->units[L->n_units++] = (tri_param_unit){.first = i, .start = off, .first_part = L->n_parts};
        if (new_part) {
            L->parts[L->n_parts++] = (tri_param_part){.unit = L->n_units - 1, .start = off, .expert = specs[i].expert};
            L->units[L->n_units - 1].n_parts++;
        }
        L->units[L->n_units - 1].count++;
        L->params[i].offset = off;
        L->numel += L->params[i].numel;
        off = round_up(off + L->params[i].numel, TRI_LAYOUT_ALIGN);
    }
    if (L->n_parts > 0)
        close_part(L, &off, unit_align, expert_align, true);
    L->padded_numel = off;
    L->shard_numel = off / dp;
    return TRI_OK;
}

int tri_layout_set_experts(tri_param_layout *L, int ep, int tp, int tp_rank)
{
    return tri_layout_set_experts_etp(L, ep, 1, tp, tp_rank);
}

int tri_layout_set_experts_etp(tri_param_layout *L, int ep, int etp, int tp, int tp_rank)
{
    if (ep < 1 || etp < 1 || tp < 1 || (tp * L->dp) % (ep * etp) != 0)
        return TRI_ERR(TRI_EINVAL, "layout: --expert-tensor-parallel-size %d x --expert-model-parallel-size %d does "
                       "not divide a stage's tp x dp = %d x %d ranks", etp, ep, tp, L->dp);
    /* Megatron-Core's folding: a stage's ranks s = tp_rank + tp dp_rank, etp fastest, then ep:
     * edp_rank = s / (etp ep) */
    L->edp = tp * L->dp / (ep * etp);
    L->edp_rank = (tp_rank + tp * L->dp_rank) / (ep * etp);
    L->shard_numel = 0;
    for (int k = 0; k < L->n_parts; k++) {
        if (L->parts[k].len % tri_part_group(L, k) != 0)
            return TRI_ERR(TRI_EINVAL, "layout: an expert part of %lld elements does not divide over the %d ranks of "
                           "the expert-data-parallel group", (long long)L->parts[k].len, L->edp);
        L->shard_numel += tri_part_slice_len(L, k);
    }
    return TRI_OK;
}

bool tri_layout_has_experts(const tri_param_layout *L)
{
    for (int k = 0; k < L->n_parts; k++)
        if (L->parts[k].expert)
            return true;
    return false;
}

void tri_layout_destroy(tri_param_layout *L)
{
    free(L->params);
    free(L->units);
    free(L->parts);
    L->params = NULL;
    L->units = NULL;
    L->parts = NULL;
    L->n = L->n_units = L->n_parts = 0;
}

int tri_layout_find(const tri_param_layout *L, const char *name)
{
    for (int i = 0; i < L->n; i++)
        if (strcmp(L->params[i].spec.name, name) == 0)
            return i;
    return -1;
}

void tri_shard_place(const tri_param *p, int shard_rank, const float *shard, float *global)
{
    const tri_param_spec *s = &p->spec;
    int64_t off[TRI_MAX_DIMS] = {0}, idx[TRI_MAX_DIMS] = {0};
    if (s->split_dim >= 0 && !p->tp_replicated)
        off[s->split_dim] = p->local_shape[s->split_dim] * (shard_rank / p->replicas);
    /* copy row by row along the last dimension */
    int last = s->ndim - 1;
    int64_t row = p->local_shape[last], rows = p->numel / (row > 0 ? row : 1);
    for (int64_t r = 0; r < rows; r++) {
        int64_t g = 0;
        for (int d = 0; d < s->ndim; d++)
            g = g * s->shape[d] + off[d] + idx[d];
        memcpy(global + g, shard + r * row, (size_t)row * sizeof *global);
        for (int d = last - 1; d >= 0; d--) {
            if (++idx[d] < p->local_shape[d])
                break;
            idx[d] = 0;
        }
    }
}
