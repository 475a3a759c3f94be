/* bench/moe_ep.c - one MoE layer under expert parallelism (layers/moe_ep.h): its parallel efficiency
 * on ep ranks against one rank with as many threads, and its bytes on the wire against the
 * partitioner's all-to-all formula, in one run.
 *
 * The targets (issue 33, "Benchmarks"): ep 2 on 2 ranks against 1 rank with 2 threads, same
 * model and batch, >= 80% parallel efficiency; bytes on the wire per step equal to the partitioner's
 * all-to-all formula exactly.
 *
 * Both sides run one layer of top-K of E SwiGLU experts (Mixtral's routing, dropless) forward and
 * backward on the same ep x N tokens:
 *   - one rank: a CPU device with ep threads (OpenMP and OpenBLAS), tri_moe_forward / tri_moe_backward
 *     over all ep N tokens and all E experts;
 *   - ep thread ranks (tri_run_thread_ranks, as the other parallel benches run; one thread each), each
 *     routing its own N tokens with the whole router and holding E / ep experts, tri_moe_ep_forward /
 *     tri_moe_ep_backward (dispatch and combine by all-to-all over the thread comm).
 * Efficiency = t(one rank, ep threads) / t(ep ranks), the best of --iters rounds each, the sides
 * taking turns within a round (1: the ranks split the work as well as the threads do). One rank with one
 * thread runs too, so that both sides' speed-up over it shows how well ep cores serve each. Thread ranks share one process and one memory: the all-to-all is a copy,
 * as MPI's shared-memory transport would make it on one node; across nodes the wire adds its time.
 *
 * The routing is balanced by construction, so that the partitioner's formula (stated in expectation
 * under uniform routing) is exact: the router is the identity on the first E channels, and token t's
 * first E channels are 4 on experts t, t+1, ..., t+K-1 (mod E) and 0 elsewhere, so each expert gets
 * exactly N K / E rows from each source (N a multiple of E). Each rank's all-to-all bytes (the comm's
 * counter, tri_comm.bytes[TRI_COMM_ALL_TO_ALL]: dispatch, combine and their gradients) are printed
 * beside tri_ep_microbatch_traffic for the layer (partitioner/traffic.h), and the program fails when
 * they differ. tests/test_moe_ep_wire.c checks the same equality in CTest. Not a test otherwise: no
 * threshold on the times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "layers/moe_ep.h"
#include "models/block_cost.h"
#include "partitioner/traffic.h"
#include "tools/cli/flags.h"
#include "tools/cli/threads.h"

#define MAX_EP 8

typedef struct bench {
    int N, C, E, K, I, ep, iters;
} bench;

/* One side's device memory (every allocation, freed together). */
typedef struct pool {
    void *mem[40];
    int n;
} pool;

/* One rank's (or the one-rank baseline's) layer. */
typedef struct side {
    tri_device *dev;
    pool P;
    tri_moe_config cfg;
    tri_tensor x, dy, y, dx;
    tri_moe_weights w, g;
    tri_moe_acts a;
    tri_moe_scratch sc;
    tri_moe_ep_acts ea;
    tri_moe_ep_scratch es;
} side;

typedef struct run {
    const bench *p;
    side rank[MAX_EP];
    double round_ms;                    /* the last round's time, barrier to barrier */
    uint64_t a2a[MAX_EP];               /* each rank's all-to-all bytes of one forward + backward */
} run;

/* Device memory for shape from host values (NULL: uniform in [-scale, scale) from seed). */
static int take(side *s, tri_tensor *t, tri_tensor shape, const float *host, float scale, uint64_t seed)
{
    size_t n = (size_t)tri_tensor_numel(shape);
    if (s->P.n == (int)(sizeof s->P.mem / sizeof *s->P.mem))
        return TRI_ERR(TRI_EINTERNAL, "bench_moe_ep: more buffers than the pool holds");
    int rc = tri_device_alloc(s->dev, &s->P.mem[s->P.n], n * sizeof(float));
    if (rc)
        return rc;
    *t = shape;
    t->data = s->P.mem[s->P.n++];
    float *h = host ? NULL : malloc(n * sizeof(float));
    if (!host && !h)
        return TRI_ERR(TRI_ENOMEM, "bench_moe_ep: out of memory");
    for (size_t i = 0; h && i < n; i++)
        h[i] = scale * (2.0f * (float)tri_rng_uniform(seed, 0, (uint64_t)i) - 1.0f);
    rc = tri_device_copy_from_host(s->dev, *t, host ? host : h);
    free(h);
    return rc;
}

/* Balanced inputs (top comment): x (N, C) of source q, and the router (E, C). */
static float *balanced_x(int64_t N, int64_t C, int64_t E, int64_t K, uint64_t seed)
{
    float *x = malloc((size_t)(N * C) * sizeof(float));
    for (int64_t t = 0; x && t < N; t++)
        for (int64_t c = 0; c < C; c++) {
            bool picked = c < E && (c - t % E + E) % E < K;
            x[t * C + c] = c < E ? (picked ? 4.0f : 0.0f)
                                 : 2.0f * (float)tri_rng_uniform(seed, (uint64_t)t, (uint64_t)c) - 1.0f;
        }
    return x;
}

static float *identity_router(int64_t E, int64_t C)
{
    float *w = calloc((size_t)(E * C), sizeof(float));
    for (int64_t e = 0; w && e < E; e++)
        w[e * C + e] = 1.0f;
    return w;
}

/* A layer of N tokens with El of the E experts on s->dev; ep > 1: with the expert-parallel buffers. */
static int make_side(side *s, const bench *p, int64_t N, int64_t El, int ep, uint64_t seed)
{
    int64_t C = p->C, E = p->E, K = p->K, I = p->I;
    s->cfg = (tri_moe_config){.shape = {.N = N, .C = C, .E = E, .K = K, .I = I}, .score_func = TRI_MOE_SOFTMAX,
                              .norm_topk = true, .drop_policy = TRI_MOE_DROP_PROBS};
    const tri_moe_shape *sh = &s->cfg.shape;
    float *x = balanced_x(N, C, E, K, seed), *router = identity_router(E, C);
    int rc = x && router ? TRI_OK : TRI_ERR(TRI_ENOMEM, "bench_moe_ep: out of memory");
    tri_tensor am, sm, em, esm;
    if (!rc) rc = take(s, &s->x, tri_tensor_2d(NULL, TRI_F32, N, C), x, 0, 0);
    if (!rc) rc = take(s, &s->dy, tri_tensor_2d(NULL, TRI_F32, N, C), NULL, 1.0f, seed + 1);
    if (!rc) rc = take(s, &s->y, tri_tensor_2d(NULL, TRI_F32, N, C), NULL, 0, 0);
    if (!rc) rc = take(s, &s->dx, tri_tensor_2d(NULL, TRI_F32, N, C), NULL, 0, 0);
    if (!rc) rc = take(s, &s->w.router_w, tri_tensor_2d(NULL, TRI_F32, E, C), router, 0, 0);
    if (!rc) rc = take(s, &s->w.gate_up_w, tri_tensor_3d(NULL, TRI_F32, El, 2 * I, C), NULL, 0.05f, seed + 2);
    if (!rc) rc = take(s, &s->w.down_w, tri_tensor_3d(NULL, TRI_F32, El, C, I), NULL, 0.05f, seed + 3);
    if (!rc) rc = take(s, &s->g.router_w, tri_tensor_2d(NULL, TRI_F32, E, C), NULL, 0, 0);
    if (!rc) rc = take(s, &s->g.gate_up_w, tri_tensor_3d(NULL, TRI_F32, El, 2 * I, C), NULL, 0, 0);
    if (!rc) rc = take(s, &s->g.down_w, tri_tensor_3d(NULL, TRI_F32, El, C, I), NULL, 0, 0);
    if (!rc) rc = take(s, &am, tri_tensor_1d(NULL, TRI_F32, (int64_t)(tri_moe_acts_bytes(sh) / 4)), NULL, 0, 0);
    if (!rc) rc = take(s, &sm, tri_tensor_1d(NULL, TRI_F32, (int64_t)(tri_moe_scratch_bytes(sh) / 4)), NULL, 0, 0);
    if (!rc) rc = tri_moe_bind(sh, &s->a, am.data, &s->sc, sm.data);
    if (!rc && ep > 1) {
        rc = take(s, &em, tri_tensor_1d(NULL, TRI_F32, (int64_t)(tri_moe_ep_acts_bytes(sh, ep) / 4)), NULL, 0, 0);
        if (!rc) rc = take(s, &esm, tri_tensor_1d(NULL, TRI_F32, (int64_t)(tri_moe_ep_scratch_bytes(sh, ep) / 4)),
                           NULL, 0, 0);
        if (!rc) rc = tri_moe_ep_bind(sh, ep, &s->ea, em.data, &s->es, esm.data);
    }
    s->w.expert_bias = s->g.expert_bias = tri_tensor_none();
    s->w.shared_gate_up_w = s->w.shared_down_w = s->g.shared_gate_up_w = s->g.shared_down_w = tri_tensor_none();
    free(x);
    free(router);
    return rc;
}

static void free_side(side *s)
{
    for (int i = 0; i < s->P.n; i++)
        tri_device_free(s->dev, s->P.mem[i]);
    tri_device_destroy(s->dev);
}

/* ---- one round of each side ---- */

/* The one-rank baseline's forward + backward in ms. */
static int one_rank_round(side *s, int threads, double *ms)
{
    tri_cli_set_threads(threads);
    double t0 = tri_now_s();
    int rc = tri_moe_forward(s->dev, s->y, &s->a, s->x, &s->w, &s->cfg);
    if (!rc) rc = tri_moe_backward(s->dev, s->dx, &s->g, s->dy, &s->a, s->x, &s->w, &s->sc, &s->cfg, 1.0f);
    if (!rc) rc = tri_device_sync(s->dev);
    *ms = (tri_now_s() - t0) * 1e3;
    return rc;
}

/* One expert-parallel forward + backward on every thread rank, from a barrier to a barrier. */
static int rank_fn(int rank, int size, tri_comm *comm, void *arg)
{
    run *r = arg;
    side *s = &r->rank[rank];
    uint64_t before = comm->bytes[TRI_COMM_ALL_TO_ALL];
    int rc = tri_comm_barrier(comm);
    double t0 = tri_now_s();
    if (!rc) rc = tri_moe_ep_forward(s->dev, comm, s->y, &s->a, &s->ea, &s->es, s->x, &s->w, &s->cfg);
    if (!rc) rc = tri_moe_ep_backward(s->dev, comm, s->dx, &s->g, s->dy, &s->a, &s->ea, s->x, &s->w, &s->sc, &s->es,
                                      &s->cfg, 1.0f);
    if (!rc) rc = tri_device_sync(s->dev);
    if (!rc) rc = tri_comm_barrier(comm); /* the round ends with the slowest rank */
    if (rank == 0)
        r->round_ms = (tri_now_s() - t0) * 1e3;
    r->a2a[rank] = comm->bytes[TRI_COMM_ALL_TO_ALL] - before;
    (void)size;
    return rc;
}

/* The best of p->iters rounds of each side (a warm-up round first); the two sides take turns within a
 * round, so a machine whose load changes during the run slows both alike. */
static int time_all(run *r, double *one_ms, double *ep_ms, double *serial_ms)
{
    const bench *p = r->p;
    side base, serial;
    memset(&base, 0, sizeof base);
    memset(&serial, 0, sizeof serial);
    int rc = tri_device_cpu_create(&base.dev, p->ep);
    if (!rc) rc = make_side(&base, p, (int64_t)p->ep * p->N, p->E, 1, 100);
    if (!rc) rc = tri_device_cpu_create(&serial.dev, 1);
    if (!rc) rc = make_side(&serial, p, (int64_t)p->ep * p->N, p->E, 1, 100);
    for (int q = 0; q < p->ep && !rc; q++) {
        rc = tri_device_cpu_create(&r->rank[q].dev, 1);
        if (!rc) rc = make_side(&r->rank[q], p, p->N, p->E / p->ep, p->ep, 200 + 10 * (uint64_t)q);
    }
    *one_ms = *ep_ms = *serial_ms = 1e30;
    for (int it = 0; it <= p->iters && !rc; it++) {
        double ms = 0, ms1 = 0;
        rc = one_rank_round(&base, p->ep, &ms);
        if (it > 0 && ms < *one_ms)
            *one_ms = ms;
        if (!rc) rc = one_rank_round(&serial, 1, &ms1);
        if (it > 0 && ms1 < *serial_ms)
            *serial_ms = ms1;
        tri_cli_set_threads(1);
        if (!rc) rc = tri_run_thread_ranks(p->ep, rank_fn, r);
        if (it > 0 && r->round_ms < *ep_ms)
            *ep_ms = r->round_ms;
    }
    if (base.dev)
        free_side(&base);
    if (serial.dev)
        free_side(&serial);
    for (int q = 0; q < p->ep; q++)
        if (r->rank[q].dev)
            free_side(&r->rank[q]);
    return rc;
}

/* ---- the partitioner's formula for the layer ---- */

static void block_fn(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    tri_decoder_block_cost(cfg, l, out);
}

/* All-to-all bytes of one micro-batch (forward + backward) of the layer on a rank of dp = ep ranks. */
static uint64_t formula_bytes(const bench *p)
{
    tri_decoder_block b = {.C = p->C, .NH = 1, .NH_kv = 1, .HS = p->C, .gated_mlp = true, .norm = TRI_NORM_RMSNORM,
                           .rotary = true, .tensors = 10, .sparse = true, .E = p->E, .K = p->K, .I = p->I};
    tri_transformer m = {.n_layer = 1, .n_head = 1, .n_embd = p->C, .vocab_size = 256, .n_positions = p->N,
                         .n_kv_head = 1, .n_experts = p->E, .experts_per_tok = p->K, .final_norm = TRI_NORM_RMSNORM,
                         .block_cost = block_fn, .cfg = &b};
    tri_train_layout l = {.tp = 1, .pp = 1, .dp = p->ep, .ep = p->ep, .etp = 1, .v = 1, .B = 1, .T = p->N,
                          .n_micro = 1};
    tri_stage_place layer = {.layer_start = 0, .layer_end = 1, .first = true, .last = true};
    uint64_t fwd[TRI_COMM_KINDS], bwd[TRI_COMM_KINDS];
    tri_ep_microbatch_traffic(&m, &l, &layer, 4, fwd, bwd);
    return fwd[TRI_COMM_ALL_TO_ALL] + bwd[TRI_COMM_ALL_TO_ALL];
}

int main(int argc, char **argv)
{
    bench p = {.N = 2048, .C = 512, .E = 8, .K = 2, .I = 512, .ep = 2, .iters = 5};
    tri_flag flags[] = {
        {"tokens", TRI_FLAG_INT, &p.N, "tokens a rank routes (N; the one-rank side runs ep N)", 1, 1 << 24, NULL,
         false},
        {"hidden-size", TRI_FLAG_INT, &p.C, "hidden size (C, at least E)", 1, 1 << 16, NULL, false},
        {"num-experts", TRI_FLAG_INT, &p.E, "experts (E)", 1, TRI_MOE_MAX_EXPERTS, NULL, false},
        {"moe-router-topk", TRI_FLAG_INT, &p.K, "experts per token (K)", 1, 8, NULL, false},
        {"moe-ffn-hidden-size", TRI_FLAG_INT, &p.I, "an expert's width (I)", 1, 1 << 16, NULL, false},
        {"expert-model-parallel-size", TRI_FLAG_INT, &p.ep, "ep ranks (thread ranks, one thread each) against one "
         "rank with ep threads", 2, MAX_EP, NULL, false},
        {"iters", TRI_FLAG_INT, &p.iters, "timed rounds (the best is printed)", 1, 1 << 20, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (!rc && !help && (p.K > p.E || p.E % p.ep != 0 || p.N % p.E != 0 || p.C < p.E))
        rc = TRI_ERR(TRI_EINVAL, "--moe-router-topk %d, --num-experts %d, --expert-model-parallel-size %d, --tokens %d, "
                     "--hidden-size %d: need K <= E, ep dividing E, E dividing N (balanced routing) and C >= E",
                     p.K, p.E, p.ep, p.N, p.C);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_moe_ep: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_moe_ep",
                        "One MoE layer on ep thread ranks against one rank with ep threads: parallel efficiency, "
                        "and all-to-all bytes against the partitioner's formula.");
        return rc ? 2 : 0;
    }
    tri_cli_passive_openmp(argv);
    run *r = calloc(1, sizeof *r);
    double one = 0, ep = 0, serial = 0;
    rc = r ? TRI_OK : TRI_ERR(TRI_ENOMEM, "bench_moe_ep: out of memory");
    if (!rc) {
        r->p = &p;
        rc = time_all(r, &one, &ep, &serial);
    }
    if (rc) {
        fprintf(stderr, "bench_moe_ep: %s\n", tri_error_message());
        free(r);
        return 1;
    }
    double gflop = 3.0 * 2.0 * (double)p.ep * p.N * p.K * 3.0 * p.C * p.I / 1e9; /* experts, fwd + bwd */
    printf("moe layer: %d x %d tokens, C %d, top-%d of %d experts of width %d, fp32, balanced routing, "
           "forward + backward (%.2f GFLOP in the experts)\n", p.ep, p.N, p.C, p.K, p.E, p.I, gflop);
    printf("  one rank, 1 thread:            %8.2f ms (%.1f GFLOP/s in the experts)\n", serial, gflop / serial * 1e3);
    printf("  one rank, %d threads:           %8.2f ms (%.1f GFLOP/s; %.2fx one thread)\n", p.ep, one,
           gflop / one * 1e3, serial / one);
    printf("  ep %d, %d thread ranks of 1 thread: %8.2f ms (%.1f GFLOP/s; %.2fx one thread)\n", p.ep, p.ep, ep,
           gflop / ep * 1e3, serial / ep);
    printf("  parallel efficiency t(1 rank, %d threads) / t(ep %d) = %.3f (target >= 0.80)\n", p.ep, p.ep,
           one / ep);
    uint64_t want = formula_bytes(&p);
    int bad = 0;
    for (int q = 0; q < p.ep; q++) {
        printf("  rank %d all-to-all bytes: measured %llu, partitioner formula %llu%s\n", q,
               (unsigned long long)r->a2a[q], (unsigned long long)want, r->a2a[q] == want ? " (equal)" : " DIFFER");
        bad += r->a2a[q] != want;
    }
    free(r);
    return bad ? 1 : 0;
}
