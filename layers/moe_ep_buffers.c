/* layers/moe_ep_buffers.c - the buffers of the expert-parallel and expert-tensor-parallel MoE blocks
 * (layers/moe_ep.h, layers/moe_etp.h): how many rows a rank can receive (tri_moe_ep_max_rows,
 * tri_moe_etp_max_rows), the bytes of the kept and scratch buffers, and binding them to memory. Apart
 * from the blocks' communication, so the partitioner's formulas (models/block_cost.c) call the very
 * functions the engine sizes its buffers with (planned = allocated, docs/moe.md), without linking the
 * comm layer. */
#include "layers/moe_etp.h"

/* ---- expert parallelism ---- */

int tri_moe_ep_check(const tri_moe_shape *s, int ep)
{
    int rc = tri_moe_check_shape(s);
    if (rc)
        return rc;
    if (ep < 1 || s->E % ep != 0)
        return TRI_ERR(TRI_EINVAL, "moe: --expert-model-parallel-size %d must be >= 1 and divide num_experts %lld",
                       ep, (long long)s->E);
    return TRI_OK;
}

int64_t tri_moe_ep_max_rows(const tri_moe_shape *s, int ep)
{
    if (tri_moe_ep_check(s, ep))
        return 0;
    int64_t El = s->E / ep;
    int64_t per_source = s->N * (s->K < El ? s->K : El);    /* dropless: each token at most min(K, E_l) here */
    if (s->capacity > 0 && El * s->capacity < per_source)  /* each local expert at most capacity a source */
        per_source = El * s->capacity;
    return ep * per_source;
}

static void ep_layout_acts(const tri_moe_shape *s, int ep, tri_moe_ep_acts *ea, tri_moe_carver *cv)
{
    int64_t Pmax = tri_moe_ep_max_rows(s, ep);
    ea->x_recv = tri_moe_carve(cv, s->dtype, Pmax, s->C);
    ea->gate_up = tri_moe_carve(cv, s->dtype, Pmax, 2 * s->I);
    ea->h = tri_moe_carve(cv, s->dtype, Pmax, s->I);
}

static void ep_layout_scratch(const tri_moe_shape *s, int ep, tri_moe_ep_scratch *es, tri_moe_carver *cv)
{
    int64_t Pmax = tri_moe_ep_max_rows(s, ep);
    es->o_recv = tri_moe_carve(cv, s->dtype, Pmax, s->C);
    es->dh = tri_moe_carve(cv, s->dtype, Pmax, s->I);
    es->dgate_up = tri_moe_carve(cv, s->dtype, Pmax, 2 * s->I);
}

size_t tri_moe_ep_acts_bytes(const tri_moe_shape *s, int ep)
{
    if (tri_moe_ep_check(s, ep))
        return 0;
    tri_moe_ep_acts ea;
    tri_moe_carver cv = {NULL, 0};
    ep_layout_acts(s, ep, &ea, &cv);
    return cv.off;
}

size_t tri_moe_ep_scratch_bytes(const tri_moe_shape *s, int ep)
{
    if (tri_moe_ep_check(s, ep))
        return 0;
    tri_moe_ep_scratch es;
    tri_moe_carver cv = {NULL, 0};
    ep_layout_scratch(s, ep, &es, &cv);
    return cv.off;
}

int tri_moe_ep_bind(const tri_moe_shape *s, int ep, tri_moe_ep_acts *ea, void *ea_mem, tri_moe_ep_scratch *es,
                    void *es_mem)
{
    int rc = tri_moe_ep_check(s, ep);
    if (rc)
        return rc;
    if (!ea || !ea_mem)
        return TRI_ERR(TRI_EINVAL, "moe: tri_moe_ep_bind needs ea and ea_mem");
    tri_moe_carver cv = {ea_mem, 0};
    ep_layout_acts(s, ep, ea, &cv);
    ea->P = 0;
    if (es && es_mem) {
        tri_moe_carver cs = {es_mem, 0};
        ep_layout_scratch(s, ep, es, &cs);
    }
    return TRI_OK;
}

/* ---- expert tensor parallelism ---- */


int tri_moe_etp_check(const tri_moe_shape *s, int ep, int etp)
{
    int rc = tri_moe_ep_check(s, ep);
    if (!rc && (etp < 1 || etp > TRI_MOE_MAX_ETP))
        rc = TRI_ERR(TRI_EINVAL, "moe: --expert-tensor-parallel-size %d must be in [1, %d]", etp, TRI_MOE_MAX_ETP);
    return rc;
}

int64_t tri_moe_etp_max_rows(const tri_moe_shape *s, int ep, int etp)
{
    return tri_moe_etp_check(s, ep, etp) ? 0 : etp * tri_moe_ep_max_rows(s, ep);
}

static void etp_layout_acts(const tri_moe_shape *s, int ep, int etp, tri_moe_etp_acts *ea, tri_moe_carver *cv)
{
    int64_t P = tri_moe_etp_max_rows(s, ep, etp);
    ea->x_g = tri_moe_carve(cv, s->dtype, P, s->C);
    ea->gate_up = tri_moe_carve(cv, s->dtype, P, 2 * s->I);
    ea->h = tri_moe_carve(cv, s->dtype, P, s->I);
}

static void etp_layout_scratch(const tri_moe_shape *s, int ep, int etp, tri_moe_etp_scratch *es, tri_moe_carver *cv)
{
    int64_t P = tri_moe_etp_max_rows(s, ep, etp);
    es->o_g = tri_moe_carve(cv, s->dtype, P, s->C);
    es->dh = tri_moe_carve(cv, s->dtype, P, s->I);
    es->dgate_up = tri_moe_carve(cv, s->dtype, P, 2 * s->I);
    es->part = tri_moe_carve(cv, s->dtype, P, s->C);
}

size_t tri_moe_etp_acts_bytes(const tri_moe_shape *s, int ep, int etp)
{
    if (tri_moe_etp_check(s, ep, etp))
        return 0;
    tri_moe_etp_acts ea;
    tri_moe_carver cv = {NULL, 0};
    etp_layout_acts(s, ep, etp, &ea, &cv);
    return cv.off;
}

size_t tri_moe_etp_scratch_bytes(const tri_moe_shape *s, int ep, int etp)
{
    if (tri_moe_etp_check(s, ep, etp))
        return 0;
    tri_moe_etp_scratch es;
    tri_moe_carver cv = {NULL, 0};
    etp_layout_scratch(s, ep, etp, &es, &cv);
    return cv.off;
}

int tri_moe_etp_bind(const tri_moe_shape *s, int ep, int etp, tri_moe_etp_acts *ea, void *ea_mem,
                     tri_moe_etp_scratch *es, void *es_mem)
{
    int rc = tri_moe_etp_check(s, ep, etp);
    if (rc)
        return rc;
    if (!ea || !ea_mem)
        return TRI_ERR(TRI_EINVAL, "moe: tri_moe_etp_bind needs ea and ea_mem");
    tri_moe_carver cv = {ea_mem, 0};
    etp_layout_acts(s, ep, etp, ea, &cv);
    ea->P = ea->Pg = 0;
    if (es && es_mem) {
        tri_moe_carver cs = {es_mem, 0};
        etp_layout_scratch(s, ep, etp, es, &cs);
    }
    return TRI_OK;
}
