/* tests/moe_block_harness.c - one rank's tensors of the MoE block on thread ranks (see
 * moe_block_harness.h). */
#include "tests/moe_block_harness.h"

#include <stdlib.h>

#include "tests/opsutil.h"
#include "tests/testutil.h"

float *tu_moe_uniform(int64_t n, float lo, float hi, uint64_t seed)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    tu_fill_uniform(h, (size_t)n, lo, hi, seed);
    return h;
}

tri_tensor tu_moe_filled(tri_device *d, tri_dtype dtype, tri_tensor shape, float v)
{
    int64_t n = tri_tensor_numel(shape);
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = v;
    tri_tensor t = ot_tensor_as(d, dtype, shape, h);
    free(h);
    return t;
}

void tu_moe_side_io(tu_moe_side *sd, tri_device *d, const tri_moe_shape *s, const float *x, const float *dy)
{
    tri_tensor nc = tri_tensor_2d(NULL, TRI_F32, s->N, s->C); /* (N, C); the dtype is s->dtype's */
    sd->dev = d;
    sd->x = ot_tensor_as(d, s->dtype, nc, x);
    sd->dy = ot_tensor_as(d, s->dtype, nc, dy);
    sd->y = tu_moe_filled(d, s->dtype, nc, 0.0f);
    sd->dx = tu_moe_filled(d, s->dtype, nc, 0.0f);
}

void tu_moe_side_grads(tu_moe_side *sd, const tri_moe_shape *s, int64_t El, float v)
{
    tri_device *d = sd->dev;
    int64_t C = s->C, E = s->E, I = s->I, Is = s->I_shared;
    sd->g.router_w = tu_moe_filled(d, TRI_F32, tri_tensor_2d(NULL, TRI_F32, E, C), v);
    sd->g.expert_bias = tri_tensor_none();
    sd->g.gate_up_w = tu_moe_filled(d, TRI_F32, tri_tensor_3d(NULL, TRI_F32, El, 2 * I, C), v);
    sd->g.down_w = tu_moe_filled(d, TRI_F32, tri_tensor_3d(NULL, TRI_F32, El, C, I), v);
    sd->g.shared_gate_up_w = Is ? tu_moe_filled(d, TRI_F32, tri_tensor_2d(NULL, TRI_F32, 2 * Is, C), v)
                                : tri_tensor_none();
    sd->g.shared_down_w = Is ? tu_moe_filled(d, TRI_F32, tri_tensor_2d(NULL, TRI_F32, C, Is), v) : tri_tensor_none();
}

/* Device memory of `bytes` (a multiple of 4) for a bind to carve. */
static void *arena(tri_device *d, size_t bytes)
{
    return ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, (int64_t)(bytes / 4)), NULL).data;
}

int tu_moe_side_bind(tu_moe_side *sd, const tri_moe_shape *s, int ep, int etp)
{
    tri_device *d = sd->dev;
    int rc = tri_moe_bind(s, &sd->acts, arena(d, tri_moe_acts_bytes(s)), &sd->sc, arena(d, tri_moe_scratch_bytes(s)));
    if (!rc && etp > 0)
        rc = tri_moe_etp_bind(s, ep, etp, &sd->ta, arena(d, tri_moe_etp_acts_bytes(s, ep, etp)), &sd->ts,
                              arena(d, tri_moe_etp_scratch_bytes(s, ep, etp)));
    else if (!rc && ep > 0)
        rc = tri_moe_ep_bind(s, ep, &sd->ea, arena(d, tri_moe_ep_acts_bytes(s, ep)), &sd->es,
                             arena(d, tri_moe_ep_scratch_bytes(s, ep)));
    return rc;
}
