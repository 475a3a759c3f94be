/* tests/test_moe_ep_wire.c - expert parallelism's bytes on the wire equal the partitioner's all-to-all
 * formula exactly, and the received rows fit the buffers the engine and the partitioner size
 * (layers/moe_ep.h tri_moe_ep_max_rows).
 *
 * The formula (models/block_cost.h, partitioner/traffic.h tri_ep_microbatch_traffic) is stated in
 * expectation under uniform routing: each rank sends the (ep - 1) / ep share of its N K dispatched rows
 * of C elements to the other ranks and receives as many back, forward and backward. With routing
 * balanced by construction it is exact: the router is the identity on the first E channels and token
 * t's first E channels are 4 on experts t, ..., t + K - 1 (mod E) and 0 elsewhere, so every expert gets
 * N K / E rows from every source (bench/moe_ep.c runs the same construction at a larger size and
 * prints both numbers). On ep thread ranks each rank's tri_comm all-to-all byte counter after one
 * forward and backward of tri_moe_ep_forward / _backward must equal the formula's bytes for one layer
 * and micro-batch. A shared expert moves no token (its bytes stay the formula's); a capacity factor of
 * 1 keeps every row (balanced loads are exactly the capacity) with buffers sized by the capacity; at a
 * capacity factor of 0.5 half the rows drop and the bytes halve.
 * Buffers: routing every source's tokens to one rank's experts reaches tri_moe_ep_max_rows exactly
 * (dropless ep N min(K, E_l); with a capacity ep E_l capacity), and the forward refuses a routing
 * capacity larger than the one the buffers were sized for, naming both. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/device/ops/moe_router_math.h"
#include "layers/moe_ep.h"
#include "models/block_cost.h"
#include "partitioner/traffic.h"
#include "tests/moe_block_harness.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

#define OK(call) cr_assert_eq((call), TRI_OK, "%s", tri_error_message())
#define MAXR 8

TestSuite(moe_ep_wire, .fini = ot_teardown);

typedef tu_moe_side side; /* tests/moe_block_harness.h */

typedef struct wire_case {
    tri_moe_config cfg;
    side rank[MAXR];
    uint64_t a2a[MAXR];
    int64_t received[MAXR];    /* rows each rank received in the forward */
    int rc[MAXR];
    char msg[MAXR][512];       /* each rank's error message (ranks are threads) */
} wire_case;

/* x (N, C): the first E channels pick experts (t + k) mod M, k < K, of token t (M = E: balanced; M =
 * E_l: every token to rank 0's experts, and when E_l < K the remaining picks to the lowest experts of
 * rank 1, ties going to the lower index); the rest uniform in [-1, 1). */
static float *routed_x(int64_t N, int64_t C, int64_t E, int64_t K, int64_t M, uint64_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)(N * C));
    tu_fill_uniform(x, (size_t)(N * C), -1.0f, 1.0f, seed);
    for (int64_t t = 0; t < N; t++)
        for (int64_t c = 0; c < E; c++)
            x[t * C + c] = c < M && (c - t % M + M) % M < K ? 4.0f : 0.0f;
    return x;
}

static void make_side(side *sd, const tri_moe_config *cfg, int ep, int q, int64_t M)
{
    const tri_moe_shape *s = &cfg->shape;
    int64_t N = s->N, C = s->C, E = s->E, K = s->K, I = s->I, Is = s->I_shared, El = E / ep;
    tri_device *d = ot_device(1);
    float *x = routed_x(N, C, E, K, M, 100 + (uint64_t)q), *router = calloc((size_t)(E * C), sizeof(float));
    float *dy = tu_moe_uniform(N * C, -1.0f, 1.0f, 200 + (uint64_t)q);
    float *wgu = tu_moe_uniform(El * 2 * I * C, -0.3f, 0.3f, 300 + (uint64_t)q);
    float *wd = tu_moe_uniform(El * C * I, -0.3f, 0.3f, 400 + (uint64_t)q);
    for (int64_t e = 0; e < E; e++)
        router[e * C + e] = 1.0f;
    tu_moe_side_io(sd, d, s, x, dy);
    sd->w.router_w = ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, E, C), router);
    sd->w.expert_bias = tri_tensor_none();
    sd->w.gate_up_w = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, El, 2 * I, C), wgu);
    sd->w.down_w = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, El, C, I), wd);
    sd->w.shared_gate_up_w = Is ? tu_moe_filled(d, TRI_F32, tri_tensor_2d(NULL, TRI_F32, 2 * Is, C), 0.01f)
                                : tri_tensor_none();
    sd->w.shared_down_w = Is ? tu_moe_filled(d, TRI_F32, tri_tensor_2d(NULL, TRI_F32, C, Is), 0.01f)
                             : tri_tensor_none();
    tu_moe_side_grads(sd, s, El, 0.0f);
    OK(tu_moe_side_bind(sd, s, ep, 0));
    free(x), free(router), free(dy), free(wgu), free(wd);
}

static int rank_fn(int rank, int size, tri_comm *comm, void *arg)
{
    wire_case *c = arg;
    side *sd = &c->rank[rank];
    (void)size;
    uint64_t before = comm->bytes[TRI_COMM_ALL_TO_ALL];
    int rc = tri_moe_ep_forward(sd->dev, comm, sd->y, &sd->acts, &sd->ea, &sd->es, sd->x, &sd->w, &c->cfg);
    c->received[rank] = sd->ea.P;
    if (!rc)
        rc = tri_moe_ep_backward(sd->dev, comm, sd->dx, &sd->g, sd->dy, &sd->acts, &sd->ea, sd->x, &sd->w, &sd->sc,
                                 &sd->es, &c->cfg, 1.0f);
    c->a2a[rank] = comm->bytes[TRI_COMM_ALL_TO_ALL] - before;
    c->rc[rank] = rc;
    if (rc)
        snprintf(c->msg[rank], sizeof c->msg[rank], "%s", tri_error_message());
    return rc;
}

static void block_fn(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    tri_decoder_block_cost(cfg, l, out);
}

/* The partitioner's all-to-all bytes of one layer and micro-batch (forward + backward), fp32, on a rank
 * of an ep group folded over dp = ep ranks. */
static uint64_t formula_bytes(const tri_moe_shape *s, int ep)
{
    tri_decoder_block b = {.C = s->C, .NH = 1, .NH_kv = 1, .HS = s->C, .gated_mlp = true, .norm = TRI_NORM_RMSNORM,
                           .rotary = true, .tensors = 10, .sparse = true, .E = s->E, .K = s->K, .I = s->I,
                           .I_shared = s->I_shared};
    tri_transformer m = {.n_layer = 1, .n_head = 1, .n_embd = s->C, .vocab_size = 256, .n_positions = s->N,
                         .n_kv_head = 1, .n_experts = s->E, .experts_per_tok = s->K, .final_norm = TRI_NORM_RMSNORM,
                         .block_cost = block_fn, .cfg = &b};
    tri_train_layout l = {.tp = 1, .pp = 1, .dp = ep, .ep = ep, .etp = 1, .v = 1, .B = 1, .T = s->N, .n_micro = 1};
    tri_stage_place layer = {.layer_start = 0, .layer_end = 1, .first = true, .last = true};
    uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
    tri_ep_microbatch_traffic(&m, &l, &layer, 4, fwd, bwd);
    return fwd[TRI_COMM_ALL_TO_ALL] + bwd[TRI_COMM_ALL_TO_ALL];
}

static wire_case *run_wire(tri_moe_config cfg, int ep, int64_t M)
{
    wire_case *c = calloc(1, sizeof *c);
    c->cfg = cfg;
    for (int q = 0; q < ep; q++)
        make_side(&c->rank[q], &c->cfg, ep, q, M);
    tri_run_thread_ranks(ep, rank_fn, c);
    return c;
}

static void bytes_case(tri_moe_config cfg, int ep, double kept_share)
{
    wire_case *c = run_wire(cfg, ep, cfg.shape.E);
    uint64_t want = formula_bytes(&cfg.shape, ep);
    cr_assert_gt(want, 0);
    for (int q = 0; q < ep; q++) {
        cr_assert_eq(c->rc[q], TRI_OK, "rank %d: %s", q, c->msg[q]);
        cr_expect_eq(c->a2a[q], (uint64_t)(kept_share * (double)want),
                     "ep %d rank %d: %llu all-to-all bytes, the partitioner's formula %llu x %g", ep, q,
                     (unsigned long long)c->a2a[q], (unsigned long long)want, kept_share);
        cr_expect_eq(c->received[q], (int64_t)(kept_share * (double)(cfg.shape.N * cfg.shape.K)),
                     "ep %d rank %d received %lld rows: balanced is N K", ep, q, (long long)c->received[q]);
    }
    free(c);
}

Test(moe_ep_wire, balanced_bytes_equal_the_formula)
{
    tri_moe_config cfg = {.shape = {.N = 32, .C = 16, .E = 8, .K = 2, .I = 12}, .score_func = TRI_MOE_SOFTMAX,
                          .norm_topk = true};
    bytes_case(cfg, 2, 1.0);
    bytes_case(cfg, 4, 1.0);
    cfg.shape.K = 3;   /* top-3 */
    cfg.shape.N = 40;
    bytes_case(cfg, 2, 1.0);
    cfg.shape.K = 2;
    cfg.shape.N = 32;
    cfg.shape.I_shared = 8;   /* the shared expert runs on the rank's own tokens */
    bytes_case(cfg, 2, 1.0);
}

Test(moe_ep_wire, capacity_sized_buffers)
{
    tri_moe_config cfg = {.shape = {.N = 32, .C = 16, .E = 8, .K = 2, .I = 12}, .score_func = TRI_MOE_SOFTMAX,
                          .norm_topk = true, .drop_policy = TRI_MOE_DROP_PROBS};
    cfg.capacity = cfg.shape.capacity = tri_moe_capacity(32, 2, 8, 1.0);   /* 8: the balanced load */
    cr_assert_lt(tri_moe_ep_acts_bytes(&cfg.shape, 2), tri_moe_ep_acts_bytes(&(tri_moe_shape){.N = 32, .C = 16,
                 .E = 8, .K = 2, .I = 12}, 2), "the capacity shrinks the buffers");
    bytes_case(cfg, 2, 1.0);
    cfg.capacity = cfg.shape.capacity = tri_moe_capacity(32, 2, 8, 0.5);   /* 4 of 8: half the rows drop */
    bytes_case(cfg, 4, 0.5);
}

/* Every source's tokens to rank 0's experts, spread over them: the received rows reach the bound
 * exactly. */
static void worst_case(tri_moe_config cfg, int ep)
{
    wire_case *c = run_wire(cfg, ep, cfg.shape.E / ep);
    int64_t most = tri_moe_ep_max_rows(&cfg.shape, ep);
    cr_assert_eq(c->rc[0], TRI_OK, "%s", c->msg[0]);
    cr_expect_eq(c->received[0], most, "ep %d capacity %lld: rank 0 received %lld rows, the bound %lld", ep,
                 (long long)cfg.shape.capacity, (long long)c->received[0], (long long)most);
    for (int q = 2; q < ep; q++)
        cr_expect_eq(c->received[q], 0, "rank %d", q);
    free(c);
}

Test(moe_ep_wire, the_worst_case_fills_the_buffers_exactly)
{
    tri_moe_config cfg = {.shape = {.N = 32, .C = 16, .E = 8, .K = 2, .I = 12}, .score_func = TRI_MOE_SOFTMAX,
                          .norm_topk = true, .drop_policy = TRI_MOE_DROP_PROBS};
    worst_case(cfg, 2);   /* E_l 4 >= K: ep N K */
    worst_case(cfg, 8);   /* E_l 1 < K: ep N, one copy of each token */
    cfg.capacity = cfg.shape.capacity = 5;   /* each of E_l 4 experts keeps 5 of a source's 16: ep E_l 5 */
    worst_case(cfg, 2);
}

Test(moe_ep_wire, a_capacity_the_buffers_do_not_hold_is_refused)
{
    tri_moe_config cfg = {.shape = {.N = 32, .C = 16, .E = 8, .K = 2, .I = 12, .capacity = 4},
                          .score_func = TRI_MOE_SOFTMAX, .norm_topk = true, .capacity = 8};
    wire_case *c = run_wire(cfg, 2, 8);
    for (int q = 0; q < 2; q++) {
        cr_expect_eq(c->rc[q], TRI_EINVAL);
        cr_expect_eq(c->a2a[q], 0, "refused before anything is sent");
        cr_expect(strstr(c->msg[q], "capacity 4") && strstr(c->msg[q], "keeps 8"), "%s", c->msg[q]);
    }
    free(c);
}
