/* engine/train/moe_stats.c - a Mixture-of-Experts step's figures for the logs (engine/train/moe_stats.h):
 * the aux and z losses apart from the LM loss, each sparse layer's expert load and dropped fraction,
 * counted in integers so every layout sums them to the same bits. */
#include "engine/train/moe_stats.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

static int64_t n_sums(const tri_moe_stats *s)
{
    return (int64_t)s->n_layers * 2 * s->E + 2;
}

int tri_moe_stats_init(tri_moe_stats *s, int n_layers, int E, tri_device *dev, int records)
{
    memset(s, 0, sizeof *s);
    if (E < 0 || (E > 0 && n_layers < 1))
        return TRI_ERR(TRI_EINVAL, "moe stats: %d layers of %d experts (want E >= 0, layers >= 1)", n_layers, E);
    if (E == 0)
        return TRI_OK;
    s->n_layers = n_layers;
    s->E = E;
    s->sums = calloc((size_t)n_sums(s), sizeof *s->sums);
    if (!s->sums) {
        s->E = 0;
        return TRI_ERR(TRI_ENOMEM, "moe stats: out of memory for %d layers of %d experts", n_layers, E);
    }
    if (dev && records > 0) {
        void *host = NULL;
        int rc = tri_device_host_alloc(dev, &host, (size_t)records * (size_t)(2 * E + 3) * sizeof(int32_t));
        if (rc) {
            tri_moe_stats_free(s);
            return rc;
        }
        s->dev = dev;
        s->stage = host;
        s->cap = records;
    }
    return TRI_OK;
}

void tri_moe_stats_free(tri_moe_stats *s)
{
    if (s->dev)
        tri_device_host_free(s->dev, s->stage);
    free(s->sums);
    memset(s, 0, sizeof *s);
}

void tri_moe_stats_reset(tri_moe_stats *s, int64_t micro)
{
    s->micro = micro;
    s->n_staged = 0;
    if (s->sums)
        memset(s->sums, 0, (size_t)n_sums(s) * sizeof *s->sums);
}

/* v in 2^-TRI_MOE_STATS_BITS fixed point; false when v is not finite or not below 2^31. */
static bool fixed(float v, int64_t *out)
{
    if (!isfinite(v) || fabs(v) >= 0x1p31)
        return false;
    *out = llround(ldexp((double)v, TRI_MOE_STATS_BITS));
    return true;
}

int tri_moe_stats_add(tri_moe_stats *s, int layer, const int32_t *routed, const int32_t *kept, float aux, float z)
{
    if (layer < 0 || layer >= s->n_layers || s->E == 0)
        return TRI_ERR(TRI_EINVAL, "moe stats: layer %d outside the account's %d layers of %d experts", layer,
                       s->n_layers, s->E);
    int64_t fa = 0, fz = 0;
    if (!fixed(aux, &fa) || !fixed(z, &fz))
        return TRI_OK; /* non-finite: the step's loss says so; the figures leave the micro-batch out */
    int64_t *row = s->sums + (int64_t)layer * 2 * s->E;
    for (int e = 0; e < s->E; e++) {
        row[e] += routed[e];
        row[s->E + e] += kept[e];
    }
    s->sums[n_sums(s) - 2] += fa;
    s->sums[n_sums(s) - 1] += fz;
    return TRI_OK;
}

int tri_moe_stats_stage(tri_moe_stats *s, int layer, tri_tensor routed, const int32_t *kept, tri_tensor losses)
{
    if (s->n_staged >= s->cap || layer < 0 || layer >= s->n_layers || s->E == 0)
        return TRI_ERR(TRI_EINVAL, "moe stats: staging layer %d as record %d of %d (layers 0..%d)", layer,
                       s->n_staged + 1, s->cap, s->n_layers - 1);
    if (routed.dtype != TRI_I32 || tri_tensor_numel(routed) != s->E || losses.dtype != TRI_F32 ||
        tri_tensor_numel(losses) != 2)
        return TRI_ERR(TRI_EINVAL, "moe stats: routed counts must be (%d) i32 and the losses (2) f32", s->E);
    int32_t *rec = s->stage + (int64_t)s->n_staged * (2 * s->E + 3);
    rec[0] = layer;
    memcpy(rec + 1 + s->E, kept, (size_t)s->E * sizeof *kept);
    int rc = tri_device_copy_to_host_async(s->dev, rec + 1, routed);
    if (!rc) rc = tri_device_copy_to_host_async(s->dev, rec + 1 + 2 * s->E, losses);
    if (!rc)
        s->n_staged++;
    return rc;
}

int tri_moe_stats_collect(tri_moe_stats *s)
{
    int rc = TRI_OK;
    for (int k = 0; k < s->n_staged && !rc; k++) {
        const int32_t *rec = s->stage + (int64_t)k * (2 * s->E + 3);
        float l[2];
        memcpy(l, rec + 1 + 2 * s->E, sizeof l);
        rc = tri_moe_stats_add(s, rec[0], rec + 1, rec + 1 + s->E, l[0], l[1]);
    }
    s->n_staged = 0;
    return rc;
}

int tri_moe_stats_reduce(tri_moe_stats *s, tri_comm *comm)
{
    if (!comm || comm->size <= 1 || s->E == 0)
        return TRI_OK;
    return tri_comm_host_all_reduce(comm, s->sums, TRI_I64, n_sums(s), TRI_REDUCE_SUM);
}

void tri_moe_stats_totals(const tri_moe_stats *s, int layer, int64_t *routed, int64_t *kept)
{
    *routed = *kept = 0;
    if (layer < 0 || layer >= s->n_layers || s->E == 0)
        return;
    const int64_t *row = s->sums + (int64_t)layer * 2 * s->E;
    for (int e = 0; e < s->E; e++) {
        *routed += row[e];
        *kept += row[s->E + e];
    }
}

double tri_moe_stats_load(const tri_moe_stats *s, int layer)
{
    int64_t routed, kept, most = 0;
    tri_moe_stats_totals(s, layer, &routed, &kept);
    if (routed == 0)
        return 0.0;
    const int64_t *row = s->sums + (int64_t)layer * 2 * s->E;
    for (int e = 0; e < s->E; e++)
        most = row[e] > most ? row[e] : most;
    return (double)most * s->E / (double)routed;
}

tri_moe_summary tri_moe_stats_summary(const tri_moe_stats *s)
{
    tri_moe_summary r = {0};
    if (s->E == 0)
        return r;
    int64_t routed_all = 0, kept_all = 0;
    for (int l = 0; l < s->n_layers; l++) {
        int64_t routed, kept;
        tri_moe_stats_totals(s, l, &routed, &kept);
        if (routed == 0)
            continue;
        r.n_sparse++;
        routed_all += routed;
        kept_all += kept;
        double load = tri_moe_stats_load(s, l);
        r.max_load = load > r.max_load ? load : r.max_load;
    }
    double micro = s->micro > 0 ? (double)s->micro : 1.0;
    r.aux = ldexp((double)s->sums[n_sums(s) - 2], -TRI_MOE_STATS_BITS) / micro;
    r.z = ldexp((double)s->sums[n_sums(s) - 1], -TRI_MOE_STATS_BITS) / micro;
    r.drop_frac = routed_all > 0 ? (double)(routed_all - kept_all) / (double)routed_all : 0.0;
    return r;
}
