/* tests/test_moe_ep.c - the MoE block under expert parallelism (layers/moe_ep.h) on thread ranks
 * against the one-rank block (layers/moe.h), bit for bit.
 *
 * The one-rank reference runs each ep rank's N tokens as its own micro-batch, in rank order, through
 * tri_moe_forward / tri_moe_backward with all E experts: the expert gradients accumulate over the
 * micro-batches (the trainer's gradient accumulation), the router's and the shared expert's are kept
 * per micro-batch (with ep each rank holds its own; the data-parallel reduction sums them later).
 * Under ep every rank routes its own tokens, its experts [r E_l, (r+1) E_l) run one grouped GEMM per
 * source rank over exactly the rows that source's micro-batch gives them, and the weight gradients add
 * the sources in rank order, so every output is promised identical: y, dx, the losses, the router and
 * shared gradients per rank, and each rank's slice of the accumulated expert gradients (all gradients
 * start at 0.25, so the += is checked). The all-to-all bytes each rank sends are checked against a
 * direct count from the reference's per-expert counts: the forward's dispatch sends the rows it routes
 * to other ranks' experts, its combine the rows other ranks routed to its experts, and the backward
 * the same again: 2 x (out + in) x C x 4 bytes (2 bytes a value under bf16: the rows travel in the block's dtype).
 * Cases: ep 2 with a shared expert and both losses; ep 4 with capacity dropping by weight and an
 * expert the bias keeps empty (segments of no rows); both again in bf16 (inputs and weights rounded
 * to bf16 on both sides, the reference one rank's bf16 block); the bf16 buffers' bytes; the refusals. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device/ops/moe_router_math.h"
#include "layers/moe_ep.h"
#include "tests/moe_block_harness.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

#define OK(call) cr_assert_eq((call), TRI_OK, "%s", tri_error_message())
#define MAXR 4

TestSuite(moe_ep, .fini = ot_teardown);

typedef tu_moe_side side; /* tests/moe_block_harness.h */

typedef struct ep_case {
    tri_moe_config cfg;
    int ep;
    tri_comm *comm[MAXR]; /* filled by the ranks, for their byte counters */
    side rank[MAXR];
    uint64_t a2a_bytes[MAXR];
} ep_case;

/* The host weights every side shares, and the inputs of micro-batch / rank q. */
typedef struct host_data {
    float *wr, *wgu, *wd, *sgu, *sd, *bias;
    float *x[MAXR], *dy[MAXR];
} host_data;

/* Buffers of one side on device d holding experts [e0, e0 + El) of the host weights. */
static void make_side(side *sd, tri_device *d, const tri_moe_config *cfg, const host_data *h, int q, int64_t e0,
                      int64_t El, int ep)
{
    const tri_moe_shape *s = &cfg->shape;
    int64_t C = s->C, E = s->E, I = s->I, Is = s->I_shared;
    tri_dtype dt = s->dtype; /* activations and weights; gradients and the expert bias f32 */
    tu_moe_side_io(sd, d, s, h->x[q], h->dy[q]);
    sd->w.router_w = ot_tensor_as(d, dt, tri_tensor_2d(NULL, TRI_F32, E, C), h->wr);
    sd->w.expert_bias = h->bias ? ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, E), h->bias) : tri_tensor_none();
    sd->w.gate_up_w = ot_tensor_as(d, dt, tri_tensor_3d(NULL, TRI_F32, El, 2 * I, C), h->wgu + e0 * 2 * I * C);
    sd->w.down_w = ot_tensor_as(d, dt, tri_tensor_3d(NULL, TRI_F32, El, C, I), h->wd + e0 * C * I);
    sd->w.shared_gate_up_w = Is ? ot_tensor_as(d, dt, tri_tensor_2d(NULL, TRI_F32, 2 * Is, C), h->sgu)
                                : tri_tensor_none();
    sd->w.shared_down_w = Is ? ot_tensor_as(d, dt, tri_tensor_2d(NULL, TRI_F32, C, Is), h->sd) : tri_tensor_none();
    tu_moe_side_grads(sd, s, El, 0.25f);
    OK(tu_moe_side_bind(sd, s, ep, 0));
}

static int rank_fn(int rank, int size, tri_comm *comm, void *arg)
{
    ep_case *c = arg;
    side *sd = &c->rank[rank];
    (void)size;
    uint64_t before = comm->bytes[TRI_COMM_ALL_TO_ALL];
    int rc = tri_moe_ep_forward(sd->dev, comm, sd->y, &sd->acts, &sd->ea, &sd->es, sd->x, &sd->w, &c->cfg);
    if (!rc)
        rc = tri_moe_ep_backward(sd->dev, comm, sd->dx, &sd->g, sd->dy, &sd->acts, &sd->ea, sd->x, &sd->w, &sd->sc,
                                 &sd->es, &c->cfg, 0.5f);
    c->a2a_bytes[rank] = comm->bytes[TRI_COMM_ALL_TO_ALL] - before;
    return rc;
}

static void same(tri_device *da, tri_tensor a, tri_device *db, tri_tensor b, int64_t off, const char *what, int q)
{
    int64_t n = tri_tensor_numel(a);
    float *ha = ot_read(da, a), *hb = ot_read(db, b);
    for (int64_t i = 0; i < n; i++)
        cr_assert(memcmp(&ha[i], &hb[off + i], sizeof(float)) == 0,
                  "rank %d: %s[%lld] = %.9g under ep, %.9g on one rank", q, what, (long long)i, ha[i], hb[off + i]);
}

static void run_case(tri_moe_config cfg, int ep, bool bias)
{
    const tri_moe_shape *s = &cfg.shape;
    int64_t N = s->N, C = s->C, E = s->E, I = s->I, Is = s->I_shared, El = E / ep;
    host_data h = {0};
    h.wr = tu_moe_uniform(E * C, -0.5f, 0.5f, 11);
    h.wgu = tu_moe_uniform(E * 2 * I * C, -0.3f, 0.3f, 12);
    h.wd = tu_moe_uniform(E * C * I, -0.3f, 0.3f, 13);
    h.sgu = Is ? tu_moe_uniform(2 * Is * C, -0.3f, 0.3f, 14) : NULL;
    h.sd = Is ? tu_moe_uniform(C * Is, -0.3f, 0.3f, 15) : NULL;
    if (bias) {
        h.bias = calloc((size_t)E, sizeof(float));
        h.bias[E - 2] = -10.0f; /* expert E-2 gets no token: empty groups and segments */
    }
    for (int q = 0; q < ep; q++) {
        h.x[q] = tu_moe_uniform(N * C, -1.0f, 1.0f, 100 + (uint64_t)q);
        h.dy[q] = tu_moe_uniform(N * C, -1.0f, 1.0f, 200 + (uint64_t)q);
    }
    /* the reference: one device, all experts, the ranks' batches as micro-batches in order */
    tri_device *rd = ot_device(1);
    side ref[MAXR];
    for (int q = 0; q < ep; q++) {
        make_side(&ref[q], rd, &cfg, &h, q, 0, E, 0);
        if (q > 0) { /* the experts' gradients accumulate over the micro-batches */
            ref[q].g.gate_up_w = ref[0].g.gate_up_w;
            ref[q].g.down_w = ref[0].g.down_w;
        }
    }
    for (int q = 0; q < ep; q++) {
        OK(tri_moe_forward(rd, ref[q].y, &ref[q].acts, ref[q].x, &ref[q].w, &cfg));
        OK(tri_moe_backward(rd, ref[q].dx, &ref[q].g, ref[q].dy, &ref[q].acts, ref[q].x, &ref[q].w, &ref[q].sc, &cfg,
                            0.5f));
    }
    /* expert parallelism on ep thread ranks */
    ep_case *c = calloc(1, sizeof *c);
    c->cfg = cfg;
    c->ep = ep;
    for (int q = 0; q < ep; q++)
        make_side(&c->rank[q], ot_device(1), &cfg, &h, q, q * El, El, ep);
    OK(tri_run_thread_ranks(ep, rank_fn, c));
    for (int q = 0; q < ep; q++) {
        side *r = &c->rank[q];
        same(r->dev, r->y, rd, ref[q].y, 0, "y", q);
        same(r->dev, r->dx, rd, ref[q].dx, 0, "dx", q);
        same(r->dev, r->acts.losses, rd, ref[q].acts.losses, 0, "losses", q);
        same(r->dev, r->g.router_w, rd, ref[q].g.router_w, 0, "router gradient", q);
        same(r->dev, r->g.gate_up_w, rd, ref[0].g.gate_up_w, q * El * 2 * I * C, "gate_up gradient", q);
        same(r->dev, r->g.down_w, rd, ref[0].g.down_w, q * El * C * I, "down gradient", q);
        if (Is) {
            same(r->dev, r->g.shared_gate_up_w, rd, ref[q].g.shared_gate_up_w, 0, "shared gate_up gradient", q);
            same(r->dev, r->g.shared_down_w, rd, ref[q].g.shared_down_w, 0, "shared down gradient", q);
        }
        /* bytes: a direct count from the reference's per-expert counts */
        int64_t out = 0, in = 0;
        for (int64_t e = 0; e < E; e++)
            if (e / El != q)
                out += ref[q].acts.counts[e];
        for (int p = 0; p < ep; p++)
            for (int64_t e = q * El; e < (q + 1) * El && p != q; e++)
                in += ref[p].acts.counts[e];
        int64_t esz = s->dtype == TRI_BF16 ? 2 : 4; /* the rows travel in the block's dtype */
        cr_assert_eq(c->a2a_bytes[q], (uint64_t)(2 * (out + in) * C * esz),
                     "rank %d: %llu all-to-all bytes, expected 2 x (%lld out + %lld in) x C x %lld", q,
                     (unsigned long long)c->a2a_bytes[q], (long long)out, (long long)in, (long long)esz);
        if (s->dtype == TRI_BF16) /* every row of every exchange is bf16 (the buffers' dtype) */
            cr_assert(r->ea.x_recv.dtype == TRI_BF16 && r->es.o_recv.dtype == TRI_BF16 && r->ea.h.dtype == TRI_BF16,
                      "rank %d: the received rows are not bf16", q);
        cr_assert_gt(out + in, 0, "rank %d exchanged no rows: the case does not test the exchange", q);
    }
    for (int q = 0; q < ep; q++)
        free(h.x[q]), free(h.dy[q]);
    free(h.wr), free(h.wgu), free(h.wd), free(h.sgu), free(h.sd), free(h.bias), free(c);
}

Test(moe_ep, ep2_shared_expert_and_losses)
{
    tri_moe_config cfg = {.shape = {.N = 24, .C = 16, .E = 8, .K = 2, .I = 12, .I_shared = 8},
                          .score_func = TRI_MOE_SOFTMAX, .norm_topk = true, .aux_loss_coeff = 0.02f,
                          .z_loss_coeff = 0.001f};
    run_case(cfg, 2, false);
}

Test(moe_ep, ep4_capacity_and_an_empty_expert)
{
    tri_moe_config cfg = {.shape = {.N = 16, .C = 16, .E = 8, .K = 2, .I = 12, .I_shared = 0},
                          .score_func = TRI_MOE_SOFTMAX, .norm_topk = true, .drop_policy = TRI_MOE_DROP_PROBS,
                          .aux_loss_coeff = 0.01f};
    cfg.capacity = tri_moe_capacity(16, 2, 8, 1.0);
    run_case(cfg, 4, true);
}

Test(moe_ep, ep4_sigmoid_top3)
{
    tri_moe_config cfg = {.shape = {.N = 8, .C = 16, .E = 4, .K = 3, .I = 8, .I_shared = 0},
                          .score_func = TRI_MOE_SIGMOID, .norm_topk = false};
    run_case(cfg, 4, false);
}

/* bf16 mixed precision (the rows on the wire in bf16, the router fp32): the same promise, bit for
 * bit against one rank's bf16 block, and half the bytes per row. */
Test(moe_ep, bf16_ep2_shared_expert_and_losses)
{
    tri_moe_config cfg = {.shape = {.N = 24, .C = 16, .E = 8, .K = 2, .I = 12, .I_shared = 8, .dtype = TRI_BF16},
                          .score_func = TRI_MOE_SOFTMAX, .norm_topk = true, .aux_loss_coeff = 0.02f,
                          .z_loss_coeff = 0.001f};
    run_case(cfg, 2, false);
}

Test(moe_ep, bf16_ep4_capacity_and_an_empty_expert)
{
    tri_moe_config cfg = {.shape = {.N = 16, .C = 16, .E = 8, .K = 2, .I = 12, .I_shared = 0, .dtype = TRI_BF16},
                          .score_func = TRI_MOE_SOFTMAX, .norm_topk = true, .drop_policy = TRI_MOE_DROP_PROBS,
                          .aux_loss_coeff = 0.01f};
    cfg.capacity = tri_moe_capacity(16, 2, 8, 1.0);
    run_case(cfg, 4, true);
}

Test(moe_ep, bf16_buffers_half_of_fp32)
{
    tri_moe_shape s = {.N = 16, .C = 64, .E = 8, .K = 2, .I = 64}, b = s;
    b.dtype = TRI_BF16;
    /* three (ep N K, *) buffers each: C + 2I + I columns, 4 or 2 bytes, 256-byte aligned (exact here) */
    cr_assert_eq(tri_moe_ep_acts_bytes(&s, 4), (size_t)(4 * 16 * 2) * (64 + 3 * 64) * 4);
    cr_assert_eq(tri_moe_ep_acts_bytes(&b, 4), tri_moe_ep_acts_bytes(&s, 4) / 2);
    cr_assert_eq(tri_moe_ep_scratch_bytes(&b, 4), tri_moe_ep_scratch_bytes(&s, 4) / 2);
}

Test(moe_ep, refusals)
{
    tri_moe_shape s = {.N = 4, .C = 8, .E = 6, .K = 2, .I = 4};
    cr_assert_eq(tri_moe_ep_check(&s, 4), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--expert-model-parallel-size 4") != NULL, "%s", tri_error_message());
    cr_assert_eq(tri_moe_ep_acts_bytes(&s, 4), 0);
    cr_assert_eq(tri_moe_ep_check(&s, 3), TRI_OK);
    cr_assert_gt(tri_moe_ep_acts_bytes(&s, 3), tri_moe_ep_acts_bytes(&s, 1));
    /* the weights must hold E_l experts */
    tri_device *d = ot_device(1);
    tri_moe_config cfg = {.shape = s, .score_func = TRI_MOE_SOFTMAX};
    host_data h = {0};
    h.wr = tu_moe_uniform(6 * 8, -1, 1, 1), h.wgu = tu_moe_uniform(6 * 8 * 8, -1, 1, 2);
    h.wd = tu_moe_uniform(6 * 8 * 4, -1, 1, 3);
    h.x[0] = tu_moe_uniform(4 * 8, -1, 1, 4), h.dy[0] = tu_moe_uniform(4 * 8, -1, 1, 5);
    side sd;
    make_side(&sd, d, &cfg, &h, 0, 0, 6, 1); /* all 6 experts, on a group of 3 (E_l 2) */
    tri_thread_group *grp;
    tri_comm *solo;
    OK(tri_thread_group_create(&grp, 1, 10.0));
    OK(tri_comm_thread_create(&solo, grp, 0));
    /* a group of 1 takes all experts: the one-rank block through the exchange */
    OK(tri_moe_ep_forward(d, solo, sd.y, &sd.acts, &sd.ea, &sd.es, sd.x, &sd.w, &cfg));
    sd.w.gate_up_w.shape[0] = 3;
    cr_assert_eq(tri_moe_ep_forward(d, solo, sd.y, &sd.acts, &sd.ea, &sd.es, sd.x, &sd.w, &cfg), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "E_l = 6") != NULL, "%s", tri_error_message());
    /* moe.c's checks: fp32 tensors under a bf16 shape are refused, naming the tensor and the dtype */
    sd.w.gate_up_w.shape[0] = 6;
    tri_moe_config bf = cfg;
    bf.shape.dtype = TRI_BF16;
    cr_assert_eq(tri_moe_ep_forward(d, solo, sd.y, &sd.acts, &sd.ea, &sd.es, sd.x, &sd.w, &bf), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "x is f32, expected the block's dtype bf16") != NULL, "%s",
              tri_error_message());
    tri_comm_destroy(solo);
    tri_thread_group_destroy(grp);
    free(h.wr), free(h.wgu), free(h.wd), free(h.x[0]), free(h.dy[0]);
}
