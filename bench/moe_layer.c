/* bench/moe_layer.c - one Mixture-of-Experts layer (layers/moe.h) against a dense SwiGLU MLP of the
 * same active FLOPs on the CPU, in one run.
 *
 * The target (issue 33, "Benchmarks"): a top-2-of-8 MoE layer's time per token at least 0.8
 * of a dense SwiGLU's of the same active FLOPs, i.e. routing, permutation and grouped-GEMM overhead at
 * most 25%. The MoE layer: N tokens, hidden C, E experts of width I, top-K (Mixtral's routing, dropless);
 * its experts do 2 N K 3 C I FLOPs forward. The dense baseline: one SwiGLU of width F = K I (Shazeer
 * 2020; the same FLOPs, 2 N 3 C F), run as layers/swiglu_mlp.c runs it on one rank (matmul gate|up,
 * swiglu, matmul down; backward the transposes), from the same ops. Both forward + backward, the best
 * of --iters. The MoE forward is then split into its phases, each timed alone on the same buffers:
 * routing (the router's matmul, scores / top-k, capacity), dispatch (the counting sort, the counts'
 * read-back, the permutation and the combine), experts (the grouped GEMMs and SwiGLU). The router's
 * own matmul is 2 N C E FLOPs (E / (3 K I) of the experts': 0.4% at the defaults), so a ratio below 1
 * is overhead, not arithmetic. Prints ms, tokens per second and the ratio dense / MoE time per token
 * (1: as fast as dense; the target >= 0.8). Not a test: no threshold here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/ops/moe_router_math.h"
#include "layers/moe.h"
#include "tools/cli/flags.h"

typedef struct bench {
    int N, C, E, K, I, iters, threads;
    bool bf16;
} bench;

typedef struct pool {
    void *mem[32];
    int n;
} pool;

/* Device memory for shape filled with uniform values in [-scale, scale) (scale 0: zeros). */
static int take(tri_device *d, pool *p, tri_tensor *t, tri_tensor shape, float scale, uint64_t seed)
{
    size_t bytes = tri_tensor_bytes(shape), n = (size_t)tri_tensor_numel(shape);
    int rc = tri_device_alloc(d, &p->mem[p->n], bytes);
    if (rc)
        return rc;
    *t = shape;
    t->data = p->mem[p->n++];
    float *host = malloc(n * sizeof(float));
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "bench_moe_layer: out of memory");
    for (size_t i = 0; i < n; i++)
        host[i] = scale * (2.0f * (float)tri_rng_uniform(seed, 0, (uint64_t)i) - 1.0f);
    if (shape.dtype == TRI_F32) {
        rc = tri_device_copy_from_host(d, *t, host);
    } else { /* bf16: through an fp32 staging tensor and the convert op */
        void *stage = NULL;
        tri_tensor s = shape;
        s.dtype = TRI_F32;
        rc = tri_device_alloc(d, &stage, n * sizeof(float));
        s.data = stage;
        if (!rc) rc = tri_device_copy_from_host(d, s, host);
        if (!rc) rc = tri_op_convert(d, *t, s);
        tri_device_free(d, stage);
    }
    free(host);
    return rc;
}

static void release(tri_device *d, pool *p)
{
    for (int i = 0; i < p->n; i++)
        tri_device_free(d, p->mem[i]);
    p->n = 0;
}

typedef struct layer {
    tri_dtype dt;
    /* MoE */
    tri_moe_config cfg;
    tri_moe_weights w, g;
    tri_moe_acts a;
    tri_moe_scratch sc;
    /* dense SwiGLU of width F */
    tri_tensor dgu_w, dd_w, dgu_g, dd_g, dgu, dh, ddgu, ddh;
    /* shared input and output */
    tri_tensor x, y, dy, dx;
} layer;

typedef int (*pass_fn)(tri_device *d, layer *L);

static int moe_pass(tri_device *d, layer *L)
{
    int rc = tri_moe_forward(d, L->y, &L->a, L->x, &L->w, &L->cfg);
    return rc ? rc : tri_moe_backward(d, L->dx, &L->g, L->dy, &L->a, L->x, &L->w, &L->sc, &L->cfg, 1.0f);
}

static int dense_pass(tri_device *d, layer *L)
{
    tri_tensor none = tri_tensor_none();
    int rc = tri_op_matmul(d, L->dgu, L->x, L->dgu_w, none, false, true, 0.0f);
    if (!rc) rc = tri_op_swiglu_forward(d, L->dh, L->dgu);
    if (!rc) rc = tri_op_matmul(d, L->y, L->dh, L->dd_w, none, false, true, 0.0f);
    if (!rc) rc = tri_op_matmul(d, L->dd_g, L->dy, L->dh, none, true, false, 1.0f);
    if (!rc) rc = tri_op_matmul(d, L->ddh, L->dy, L->dd_w, none, false, false, 0.0f);
    if (!rc) rc = tri_op_swiglu_backward(d, L->ddgu, L->dgu, L->ddh);
    if (!rc) rc = tri_op_matmul(d, L->dgu_g, L->ddgu, L->x, none, true, false, 1.0f);
    if (!rc) rc = tri_op_matmul(d, L->dx, L->ddgu, L->dgu_w, none, false, false, 0.0f);
    return rc;
}

/* The MoE forward's phases, each run alone on the buffers a full forward left (same routing). */
static int routing_phase(tri_device *d, layer *L)
{
    tri_moe_acts *a = &L->a;
    int rc = tri_op_matmul(d, a->logits, L->x, L->w.router_w, tri_tensor_none(), false, true, 0.0f);
    if (!rc) rc = tri_op_moe_router_forward(d, a->expert_idx, a->expert_w, a->scores, a->logits, L->w.expert_bias,
                                            L->cfg.score_func, L->cfg.norm_topk);
    if (!rc) rc = tri_op_moe_router_capacity(d, a->kept_idx, a->tokens_per_expert, a->routed_per_expert,
                                             a->expert_idx, a->expert_w, L->cfg.capacity, L->cfg.drop_policy);
    return rc;
}

static int dispatch_phase(tri_device *d, layer *L)
{
    tri_moe_acts *a = &L->a;
    int rc = tri_op_moe_permute_map(d, a->row_id_map, a->sorted_indices, a->tokens_per_expert, a->kept_idx);
    if (!rc) rc = tri_device_copy_to_host(d, a->counts, a->tokens_per_expert);
    if (!rc) rc = tri_op_moe_permute(d, a->x_perm, L->x, a->sorted_indices);
    if (!rc) rc = tri_op_moe_unpermute(d, L->y, a->o, a->row_id_map, a->expert_w);
    return rc;
}

static int experts_phase(tri_device *d, layer *L)
{
    tri_moe_acts *a = &L->a;
    int rc = tri_op_grouped_matmul_forward(d, a->gate_up, a->x_perm, L->w.gate_up_w, a->counts);
    if (!rc && a->R > 0)
        rc = tri_op_swiglu_forward(d, tri_tensor_slice0(a->h, 0, a->R), tri_tensor_slice0(a->gate_up, 0, a->R));
    if (!rc) rc = tri_op_grouped_matmul_forward(d, a->o, a->h, L->w.down_w, a->counts);
    return rc;
}

static int moe_forward_only(tri_device *d, layer *L)
{
    return tri_moe_forward(d, L->y, &L->a, L->x, &L->w, &L->cfg);
}

static int dense_forward_only(tri_device *d, layer *L)
{
    tri_tensor none = tri_tensor_none();
    int rc = tri_op_matmul(d, L->dgu, L->x, L->dgu_w, none, false, true, 0.0f);
    if (!rc) rc = tri_op_swiglu_forward(d, L->dh, L->dgu);
    if (!rc) rc = tri_op_matmul(d, L->y, L->dh, L->dd_w, none, false, true, 0.0f);
    return rc;
}

/* The best of iters rounds of each of the n passes in ms (one warm-up round first). The passes run in
 * turn within a round, so a machine whose load changes during the run slows all of them alike. */
static int best_ms(tri_device *d, layer *L, const pass_fn *f, int n, int iters, double *ms)
{
    for (int i = 0; i < n; i++)
        ms[i] = 1e30;
    for (int it = 0; it <= iters; it++)
        for (int i = 0; i < n; i++) {
            double t0 = tri_now_s();
            int rc = f[i](d, L);
            if (!rc) rc = tri_device_sync(d);
            if (rc)
                return rc;
            double t = (tri_now_s() - t0) * 1e3;
            if (it > 0 && t < ms[i])
                ms[i] = t;
        }
    return TRI_OK;
}

static int run(tri_device *d, const bench *p)
{
    int64_t N = p->N, C = p->C, E = p->E, K = p->K, I = p->I, F = K * I;
    tri_dtype dt = p->bf16 ? TRI_BF16 : TRI_F32;
    layer L = {.dt = dt,
               .cfg = {.shape = {.N = N, .C = C, .E = E, .K = K, .I = I, .dtype = dt},
                       .score_func = TRI_MOE_SOFTMAX, .norm_topk = true, .drop_policy = TRI_MOE_DROP_PROBS}};
    pool P = {0};
    float ws = 0.05f;
    int rc = take(d, &P, &L.x, tri_tensor_2d(NULL, dt, N, C), 1.0f, 1);
    if (!rc) rc = take(d, &P, &L.dy, tri_tensor_2d(NULL, dt, N, C), 1.0f, 2);
    if (!rc) rc = take(d, &P, &L.y, tri_tensor_2d(NULL, dt, N, C), 0, 3);
    if (!rc) rc = take(d, &P, &L.dx, tri_tensor_2d(NULL, dt, N, C), 0, 4);
    if (!rc) rc = take(d, &P, &L.w.router_w, tri_tensor_2d(NULL, dt, E, C), ws, 5);
    if (!rc) rc = take(d, &P, &L.w.gate_up_w, tri_tensor_3d(NULL, dt, E, 2 * I, C), ws, 6);
    if (!rc) rc = take(d, &P, &L.w.down_w, tri_tensor_3d(NULL, dt, E, C, I), ws, 7);
    if (!rc) rc = take(d, &P, &L.g.router_w, tri_tensor_2d(NULL, TRI_F32, E, C), 0, 8);
    if (!rc) rc = take(d, &P, &L.g.gate_up_w, tri_tensor_3d(NULL, TRI_F32, E, 2 * I, C), 0, 9);
    if (!rc) rc = take(d, &P, &L.g.down_w, tri_tensor_3d(NULL, TRI_F32, E, C, I), 0, 10);
    tri_tensor am, sm;
    if (!rc) rc = take(d, &P, &am, tri_tensor_1d(NULL, TRI_F32, (int64_t)(tri_moe_acts_bytes(&L.cfg.shape) / 4)), 0, 11);
    if (!rc) rc = take(d, &P, &sm, tri_tensor_1d(NULL, TRI_F32, (int64_t)(tri_moe_scratch_bytes(&L.cfg.shape) / 4)), 0, 12);
    if (!rc) rc = tri_moe_bind(&L.cfg.shape, &L.a, am.data, &L.sc, sm.data);
    if (!rc) rc = take(d, &P, &L.dgu_w, tri_tensor_2d(NULL, dt, 2 * F, C), ws, 13);
    if (!rc) rc = take(d, &P, &L.dd_w, tri_tensor_2d(NULL, dt, C, F), ws, 14);
    if (!rc) rc = take(d, &P, &L.dgu_g, tri_tensor_2d(NULL, TRI_F32, 2 * F, C), 0, 15);
    if (!rc) rc = take(d, &P, &L.dd_g, tri_tensor_2d(NULL, TRI_F32, C, F), 0, 16);
    if (!rc) rc = take(d, &P, &L.dgu, tri_tensor_2d(NULL, dt, N, 2 * F), 0, 17);
    if (!rc) rc = take(d, &P, &L.dh, tri_tensor_2d(NULL, dt, N, F), 0, 18);
    if (!rc) rc = take(d, &P, &L.ddgu, tri_tensor_2d(NULL, dt, N, 2 * F), 0, 19);
    if (!rc) rc = take(d, &P, &L.ddh, tri_tensor_2d(NULL, dt, N, F), 0, 20);
    /* a forward first, so that the phases run on real routing */
    if (!rc) rc = moe_forward_only(d, &L);
    static const pass_fn passes[7] = {dense_pass, moe_pass, dense_forward_only, moe_forward_only,
                                      routing_phase, dispatch_phase, experts_phase};
    double t[7] = {0};
    if (!rc) rc = best_ms(d, &L, passes, 7, p->iters, t);
    double dense = t[0], moe = t[1], dense_f = t[2], moe_f = t[3], route = t[4], disp = t[5], expt = t[6];
    int64_t R = L.a.R, most = 0;
    for (int64_t e = 0; e < E; e++)
        most = L.a.counts[e] > most ? L.a.counts[e] : most;
    release(d, &P);
    if (rc)
        return rc;
    double gflop = 2.0 * (double)N * 3.0 * (double)C * (double)F * 3.0 / 1e9; /* forward + backward */
    printf("moe layer N %d C %d E %d top-%d I %d (%s), dense SwiGLU F %lld: same active FLOPs (%.2f GFLOP fwd+bwd)\n",
           p->N, p->C, p->E, p->K, p->I, p->bf16 ? "bf16" : "fp32", (long long)F, gflop);
    printf("  routing: %lld selections, largest expert %lld rows (mean %.0f)\n", (long long)R, (long long)most,
           (double)R / (double)E);
    printf("  fwd+bwd: dense %8.2f ms (%7.0f tok/s, %5.1f GFLOP/s)  moe %8.2f ms (%7.0f tok/s)  dense/moe %.2f\n",
           dense, N / dense * 1e3, gflop / dense * 1e3, moe, N / moe * 1e3, dense / moe);
    printf("  fwd:     dense %8.2f ms  moe %8.2f ms  dense/moe %.2f\n", dense_f, moe_f, dense_f / moe_f);
    printf("  moe fwd phases: routing %.2f ms (%.0f%%), dispatch %.2f ms (%.0f%%), experts %.2f ms (%.0f%%), "
           "other %.2f ms\n", route, 100 * route / moe_f, disp, 100 * disp / moe_f, expt, 100 * expt / moe_f,
           moe_f - route - disp - expt);
    return TRI_OK;
}

int main(int argc, char **argv)
{
    bench p = {.N = 2048, .C = 512, .E = 8, .K = 2, .I = 512, .iters = 5, .threads = 0};
    tri_flag flags[] = {
        {"tokens", TRI_FLAG_INT, &p.N, "tokens of the micro-batch (N = B T)", 1, 1 << 24, NULL, false},
        {"hidden-size", TRI_FLAG_INT, &p.C, "hidden size (C)", 1, 1 << 16, NULL, false},
        {"num-experts", TRI_FLAG_INT, &p.E, "experts (E)", 1, TRI_MOE_MAX_EXPERTS, NULL, false},
        {"moe-router-topk", TRI_FLAG_INT, &p.K, "experts per token (K)", 1, 8, NULL, false},
        {"moe-ffn-hidden-size", TRI_FLAG_INT, &p.I, "an expert's width (I); the dense MLP is K I wide", 1, 1 << 16,
         NULL, false},
        {"iters", TRI_FLAG_INT, &p.iters, "timed repetitions (the best is printed)", 1, 1 << 20, NULL, false},
        {"threads", TRI_FLAG_INT, &p.threads, "OpenMP threads (0: OpenMP's default)", 0, 1 << 12, NULL, false},
        {"bf16", TRI_FLAG_BOOL, &p.bf16, "bf16 activations and weights (fp32 router)", 0, 0, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (!rc && !help && p.K > p.E)
        rc = TRI_ERR(TRI_EINVAL, "--moe-router-topk %d: at most --num-experts %d", p.K, p.E);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_moe_layer: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_moe_layer",
                        "One MoE layer against a dense SwiGLU of the same active FLOPs on the CPU: ms and ratio.");
        return rc ? 2 : 0;
    }
    tri_device *d = NULL;
    rc = tri_device_cpu_create(&d, p.threads);
    if (!rc) rc = run(d, &p);
    tri_device_destroy(d);
    if (rc) {
        fprintf(stderr, "bench_moe_layer: %s\n", tri_error_message());
        return 1;
    }
    return 0;
}
