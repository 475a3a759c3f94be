/* engine/train/state_shards.c - the training state as named shards (see state_shards.h). */
#include "engine/train/state_shards.h"

#include <stdlib.h>

#include "engine/core/status.h"

/* Whether this TP rank's shard of p is the one kept (see holder). */
static bool holds(const tri_trainer *t, const tri_param *p)
{
    return !p->spec.tied_copy && (!p->tp_replicated || t->grid->tp_rank == 0) &&
           (p->replicas <= 1 || t->grid->tp_rank % p->replicas == 0);
}

/* Appends (or, with list NULL, counts) chunk c's entries. */
static int add_chunk(const tri_trainer *t, int c, tri_state_shard *list, int n)
{
    const tri_param_layout *L = &t->chunks[c]->layout;
    const tri_zero *z = &t->chunks[c]->zero;
    bool dp0 = t->grid->dp_rank == 0, owns_moments = z->stage > 0 || dp0;
    for (int i = 0; i < L->n; i++) {
        const tri_param *p = &L->params[i];
        bool h = holds(t, p);
        if (list)
            list[n] = (tri_state_shard){.param = p, .group = TRI_STATE_WEIGHTS, .lo = 0, .hi = p->numel,
                                        .holder = h, .stored = h && dp0, .collective = true, .chunk = c};
        n++;
    }
    for (int i = 0; i < L->n; i++) {
        const tri_param *p = &L->params[i];
        bool h = holds(t, p);
        for (int k = 0; k < tri_zero_n_owned(z); k++) {
            int64_t s, len, at;
            if (!tri_zero_owned_piece(z, k, p, &s, &len, &at))
                continue;
            bool adam = tri_optimizer_has_moments(t->opt[c].cfg.kind);
            int g0 = adam ? TRI_STATE_EXP_AVG : TRI_STATE_MOMENTUM, g1 = adam ? TRI_STATE_EXP_AVG_SQ : TRI_STATE_MOMENTUM;
            for (int g = g0; g <= g1; g++) {
                if (list)
                    list[n] = (tri_state_shard){.param = p, .group = (tri_state_group)g, .lo = s - p->offset,
                                                .hi = s - p->offset + len, .holder = h, .stored = h && owns_moments,
                                                .chunk = c, .at = at};
                n++;
            }
        }
    }
    return n;
}

int tri_trainer_state_shards(const tri_trainer *t, tri_state_shard **shards, int *n)
{
    int count = 0;
    for (int c = 0; c < t->v; c++)
        count = add_chunk(t, c, NULL, count);
    *shards = calloc((size_t)(count > 0 ? count : 1), sizeof **shards);
    *n = 0;
    if (!*shards)
        return TRI_ERR(TRI_ENOMEM, "out of memory for %d state shards", count);
    for (int c = 0; c < t->v; c++)
        *n = add_chunk(t, c, *shards, *n);
    return TRI_OK;
}

/* The optimizer state tensor of a moment or momentum entry, over its piece. */
static tri_tensor moment(const tri_trainer *t, const tri_state_shard *s)
{
    const tri_optimizer *o = &t->opt[s->chunk];
    return tri_tensor_range(s->group == TRI_STATE_EXP_AVG_SQ ? o->v : o->m, s->at, s->hi - s->lo);
}

int tri_trainer_state_read(tri_trainer *t, const tri_state_shard *s, float *host)
{
    if (s->group == TRI_STATE_WEIGHTS)
        return tri_zero_read_param(&t->chunks[s->chunk]->zero, s->param, false, host);
    return tri_device_copy_to_host(t->dev, host, moment(t, s));
}

int tri_trainer_state_write(tri_trainer *t, const tri_state_shard *s, const float *host)
{
    if (s->group == TRI_STATE_WEIGHTS)
        return tri_zero_write_param(&t->chunks[s->chunk]->zero, s->param, host);
    return tri_device_copy_from_host(t->dev, moment(t, s), host);
}
