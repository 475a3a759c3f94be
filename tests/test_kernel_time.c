/* tests/test_kernel_time.c - the kernel-time model (engine/device/device_cost.h records what each op's
 * kernels move and compute, partitioner/kernel_time.h prices them on a GPU preset) against closed
 * forms written here:
 *   matmul c(M,N) = op(a) op(b): one launch reading a and b and writing c at their dtypes (c also
 *     read when beta != 0, the bias read when present), 2 M N K FLOPs, on the tensor cores for bf16
 *     operands and on the CUDA cores for fp32; a bias off a 16-byte boundary adds a broadcast kernel;
 *   the unfused attention: per sequence a T x T x HS product over NH heads into the scores, one
 *     softmax over them all, per sequence a T x HS x T product: 2 B + 1 launches;
 *   the fused attention: 2 products of 2 HS FLOPs per (query, key) pair of the causal 64 x 64 tiles;
 *   the embedding backward's token links: a bitonic tile sort (4096 keys: 2048 pairs x 78 steps a full
 *     tile) and a merge pass per doubling (16 N bytes, log2(width) + 1 compares a key), then the
 *     linked update: 2 + ceil(log2(ceil(N / 4096))) launches;
 *   the MoE capacity by the same sort of 8-byte keys (expert and weight read: 16 NK bytes with the
 *     keys), its merges, then a thread per key (12 NK bytes, log2 NK + 1 compares) and per expert:
 *     3 + ceil(log2(ceil(NK / 4096))) launches;
 *   the top-k selection's radix select (cuda/compress/topk_fast.cuh): four passes, each a histogram over
 *     e (4 n bytes, 1 KiB of counts a block written, one block per 4096 elements up to 512) and
 *     the choice reading them, then the chunks' counts, two scans and the emission: 12 launches;
 *   the roofline: max(FLOPs / (peak x gemm), bytes / (bandwidth x memory)) + 4 us, whichever bound;
 *   a GPT-2 step: the matmuls' FLOPs 6 B T (12 L C^2 + C V_padded) in 12 L + 3 calls; one AdamW and
 *     one sum of squares per parameter tensor in the 2026-11-27 op set, one multi-tensor launch each
 *     at HEAD; and the step's total the sum of its rows. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/device/device_cost.h"
#include "models/model.h"
#include "partitioner/kernel_time.h"
#include "partitioner/transformer.h"
#include "tools/cli/predict.h"
#include "tests/testutil.h"

static tri_device *cost_device(bool fused)
{
    tri_device *d = NULL;
    cr_assert_eq(tri_device_cost_create(&d, fused), TRI_OK, "%s", tri_error_message());
    cr_assert(tri_device_is_cost(d));
    return d;
}

static void *alloc(tri_device *d, size_t bytes)
{
    void *p = NULL;
    cr_assert_eq(tri_device_alloc(d, &p, bytes), TRI_OK, "%s", tri_error_message());
    return p;
}

static const tri_kernel_cost *kernels(tri_device *d, int64_t want)
{
    int64_t n = 0;
    const tri_kernel_cost *k = tri_device_cost_kernels(d, &n);
    cr_assert_eq(n, want, "%lld kernels recorded, expected %lld", (long long)n, (long long)want);
    return k;
}

Test(kernel_time, matmul_closed_form)
{
    tri_device *d = cost_device(true);
    const int64_t M = 64, N = 48, K = 32;
    void *pa = alloc(d, 4 * M * K), *pb = alloc(d, 4 * N * K), *pc = alloc(d, 4 * M * N), *pbias = alloc(d, 4 * N + 16);

    /* bf16, out = a b^T + bias (the linear forward), bias 256-byte aligned: the epilogue */
    tri_tensor a = tri_tensor_2d(pa, TRI_BF16, M, K), b = tri_tensor_2d(pb, TRI_BF16, N, K);
    tri_tensor c = tri_tensor_2d(pc, TRI_BF16, M, N), bias = tri_tensor_1d(pbias, TRI_BF16, N);
    cr_assert_eq(tri_op_matmul(d, c, a, b, bias, false, true, 0.0f), TRI_OK, "%s", tri_error_message());
    const tri_kernel_cost *k = kernels(d, 1);
    cr_assert_str_eq(k[0].op, "matmul");
    cr_assert_float_eq(k[0].bytes, 2.0 * (M * K + N * K + M * N + N), 0.0);
    cr_assert_float_eq(k[0].flops_tc, 2.0 * M * N * K, 0.0);
    cr_assert_float_eq(k[0].flops, 0.0, 0.0);

    /* fp32, c += a^T b (a weight gradient accumulating): c read and written, CUDA cores */
    tri_device_cost_clear(d);
    tri_tensor at = tri_tensor_2d(pa, TRI_F32, K, M), bn = tri_tensor_2d(pb, TRI_F32, K, N);
    tri_tensor cf = tri_tensor_2d(pc, TRI_F32, M, N);
    cr_assert_eq(tri_op_matmul(d, cf, at, bn, tri_tensor_none(), true, false, 1.0f), TRI_OK, "%s",
                 tri_error_message());
    k = kernels(d, 1);
    cr_assert_float_eq(k[0].bytes, 4.0 * (K * M + K * N + 2 * M * N), 0.0);
    cr_assert_float_eq(k[0].flops, 2.0 * M * N * K, 0.0);
    cr_assert_float_eq(k[0].flops_tc, 0.0, 0.0);

    /* a bias 2 bytes off the boundary: broadcast into c, then c = a b^T + 1 c */
    tri_device_cost_clear(d);
    tri_tensor odd = tri_tensor_1d((char *)pbias + 2, TRI_BF16, N);
    cr_assert_eq(tri_op_matmul(d, c, a, b, odd, false, true, 0.0f), TRI_OK, "%s", tri_error_message());
    k = kernels(d, 2);
    cr_assert_eq(k[0].call, k[1].call, "one call, two launches");
    cr_assert_float_eq(k[0].bytes, 2.0 * (M * N + N), 0.0);
    cr_assert_float_eq(k[1].bytes, 2.0 * (M * K + N * K + 2 * M * N), 0.0);
    cr_assert_float_eq(k[1].flops_tc, 2.0 * M * N * K, 0.0);
    tri_device_free(d, pa);
    tri_device_free(d, pb);
    tri_device_free(d, pc);
    tri_device_free(d, pbias);
    tri_device_destroy(d);
}

Test(kernel_time, moe_capacity_sort)
{
    tri_device *d = cost_device(true);
    const int64_t E = 64;
    /* N, K; launches; the tile sort's compare-exchanges; position bits */
    const struct {
        int64_t N, K, launches;
        double sort;
        int pb;
    } cases[] = {{50, 2, 3, 64.0 * 28, 7}, {2500, 8, 6, 5 * 2048.0 * 78, 15}};
    for (size_t z = 0; z < sizeof cases / sizeof *cases; z++) {
        int64_t N = cases[z].N, K = cases[z].K;
        double NK = (double)(N * K);
        size_t sel = (size_t)(4 * N * K);
        void *pi = alloc(d, sel), *pw = alloc(d, sel), *pk = alloc(d, sel);
        void *pt = alloc(d, (size_t)(4 * E)), *pr = alloc(d, (size_t)(4 * E));
        tri_device_cost_clear(d);
        cr_assert_eq(tri_op_moe_router_capacity(d, tri_tensor_2d(pk, TRI_I32, N, K), tri_tensor_1d(pt, TRI_I32, E),
                                                tri_tensor_1d(pr, TRI_I32, E), tri_tensor_2d(pi, TRI_I32, N, K),
                                                tri_tensor_2d(pw, TRI_F32, N, K), 10, 0),
                     TRI_OK, "%s", tri_error_message());
        int64_t L = cases[z].launches;
        const tri_kernel_cost *k = kernels(d, L);
        cr_assert_float_eq(k[0].flops, cases[z].sort, 0.0, "NK %g: the tile sort", NK);
        cr_assert_float_eq(k[0].bytes, 16.0 * NK, 0.0, "NK %g: expert and weight in, keys out", NK);
        for (int64_t m = 1, w = 4096; m + 2 < L; m++, w *= 2) {
            cr_assert_float_eq(k[m].bytes, 16.0 * NK, 0.0, "NK %g: merge pass %lld", NK, (long long)m);
            cr_assert_float_eq(k[m].flops, NK * (log2((double)w) + 1), 0.0, "NK %g: merge %lld", NK, (long long)m);
        }
        cr_assert_float_eq(k[L - 2].bytes, 12.0 * NK, 0.0, "NK %g: keys in, kept out", NK);
        cr_assert_float_eq(k[L - 2].flops, NK * (cases[z].pb + 1), 0.0, "NK %g: a search a key", NK);
        cr_assert_float_eq(k[L - 1].bytes, 8.0 * E, 0.0, "NK %g: the counts", NK);
        cr_assert_float_eq(k[L - 1].flops, 3.0 * E * (cases[z].pb + 1), 0.0, "NK %g: three searches an expert", NK);
        tri_device_free(d, pi);
        tri_device_free(d, pw);
        tri_device_free(d, pk);
        tri_device_free(d, pt);
        tri_device_free(d, pr);
    }
    tri_device_destroy(d);
}

Test(kernel_time, topk_radix_select)
{
    tri_device *d = cost_device(true);
    /* n, k; chunks of 4096; histogram blocks (at most 512) */
    const struct {
        int64_t n, k, chunks, blocks;
    } cases[] = {{3000, 30, 1, 1}, {600 * 4096 + 1, 24577, 601, 512}};
    for (size_t z = 0; z < sizeof cases / sizeof *cases; z++) {
        int64_t n = cases[z].n, k = cases[z].k;
        double N = (double)n, part = 1024.0 * (double)cases[z].blocks, counts = 16.0 * (double)cases[z].chunks;
        void *pe = alloc(d, (size_t)(4 * n)), *pp = alloc(d, (size_t)(8 * k));
        tri_device_cost_clear(d);
        cr_assert_eq(tri_op_compress_topk_pack(d, tri_tensor_1d(pp, TRI_I32, 2 * k), tri_tensor_1d(pe, TRI_F32, n)),
                     TRI_OK, "%s", tri_error_message());
        const tri_kernel_cost *kc = kernels(d, 12);
        for (int pass = 0; pass < 4; pass++) {
            cr_assert_str_eq(kc[2 * pass].op, "compress_topk_pack");
            cr_assert_float_eq(kc[2 * pass].bytes, 4.0 * N + part, 0.0, "n %g: histogram pass %d", N, pass);
            cr_assert_float_eq(kc[2 * pass + 1].bytes, part, 0.0, "n %g: choice %d", N, pass);
        }
        cr_assert_float_eq(kc[8].bytes, 4.0 * N + counts, 0.0, "n %g: the chunks' counts", N);
        cr_assert_float_eq(kc[9].bytes, counts, 0.0, "n %g: a scan", N);
        cr_assert_float_eq(kc[10].bytes, counts, 0.0, "n %g: a scan", N);
        cr_assert_float_eq(kc[11].bytes, 4.0 * N + counts + 8.0 * (double)k, 0.0, "n %g: the emission", N);
        tri_device_free(d, pe);
        tri_device_free(d, pp);
    }
    tri_device_destroy(d);
}

Test(kernel_time, embedding_backward_links)
{
    tri_device *d = cost_device(true);
    const int64_t C = 8, V_l = 64;
    /* N; launches; the tile sort's compare-exchanges (a partial tile: the power of two holding it) */
    const struct {
        int64_t N, launches;
        double sort;
    } cases[] = {{1, 2, 0.0}, {100, 2, 64.0 * 28}, {4096, 2, 2048.0 * 78}, {4196, 3, 2048.0 * 78 + 64.0 * 28},
                 {8192, 3, 2 * 2048.0 * 78}, {20000, 5, 5 * 2048.0 * 78} /* the last tile's 3616 padded to 4096 */};
    for (size_t z = 0; z < sizeof cases / sizeof *cases; z++) {
        int64_t N = cases[z].N;
        void *pt = alloc(d, (size_t)(4 * N)), *pg = alloc(d, (size_t)(2 * N * C)), *pw = alloc(d, (size_t)(4 * V_l * C));
        tri_device_cost_clear(d);
        cr_assert_eq(tri_op_embedding_backward(d, tri_tensor_2d(pw, TRI_F32, V_l, C), tri_tensor_2d(pg, TRI_BF16, N, C),
                                               tri_tensor_1d(pt, TRI_I32, N), 0),
                     TRI_OK, "%s", tri_error_message());
        const tri_kernel_cost *k = kernels(d, cases[z].launches);
        cr_assert_float_eq(k[0].flops, cases[z].sort, 0.0, "N %lld: the tile sort", (long long)N);
        cr_assert_float_eq(k[0].bytes, 12.0 * N, 0.0, "N %lld: tokens in, keys or links out", (long long)N);
        for (int64_t m = 1, w = 4096; m + 1 < cases[z].launches; m++, w *= 2) {
            cr_assert_float_eq(k[m].bytes, 16.0 * N, 0.0, "N %lld: merge pass %lld", (long long)N, (long long)m);
            cr_assert_float_eq(k[m].flops, (double)N * (log2((double)w) + 1), 0.0, "N %lld: merge %lld", (long long)N,
                               (long long)m);
        }
        double rows = (double)(N < V_l ? N : V_l);
        cr_assert_float_eq(k[cases[z].launches - 1].bytes, 2.0 * N * C + 2 * rows * C * 4 + 8.0 * N, 0.0,
                           "N %lld: the linked update", (long long)N);
        tri_device_free(d, pt);
        tri_device_free(d, pg);
        tri_device_free(d, pw);
    }
    tri_device_destroy(d);
}

Test(kernel_time, attention_closed_forms)
{
    tri_device *d = cost_device(true);
    const int64_t B = 2, T = 16, NH = 4, C = 32, HS = C / NH;
    void *pqkv = alloc(d, 2 * B * T * 3 * C), *patt = alloc(d, 2 * B * NH * T * T), *pout = alloc(d, 2 * B * T * C);
    tri_tensor qkv = tri_tensor_3d(pqkv, TRI_BF16, B, T, 3 * C), att = tri_tensor_4d(patt, TRI_BF16, B, NH, T, T);
    tri_tensor out = tri_tensor_3d(pout, TRI_BF16, B, T, C);
    cr_assert_eq(tri_op_attention_forward(d, out, att, qkv), TRI_OK, "%s", tri_error_message());
    const tri_kernel_cost *k = kernels(d, 2 * B + 1);
    double TC = 2.0 * T * C, TT = 2.0 * NH * T * T, product = 2.0 * NH * T * T * HS;
    for (int b = 0; b < B; b++) {
        cr_assert_float_eq(k[b].bytes, 2 * TC + TT, 0.0, "scores of sequence %d", b); /* q, k in; scores out */
        cr_assert_float_eq(k[b].flops_tc, product, 0.0);
        cr_assert_float_eq(k[B + 1 + b].bytes, TT + 2 * TC, 0.0); /* probabilities, v in; out */
        cr_assert_float_eq(k[B + 1 + b].flops_tc, product, 0.0);
    }
    cr_assert_float_eq(k[B].bytes, 2 * B * TT, 0.0, "the softmax reads and writes every score");
    cr_assert_float_eq(k[B].flops_tc, 0.0, 0.0);

    /* fused, T = 100: tiles of 64 -> 2 query tiles meeting 1 and 2 key tiles, 3 pairs */
    tri_device_cost_clear(d);
    const int64_t T2 = 100;
    void *pq2 = alloc(d, 2 * B * T2 * 3 * C), *po2 = alloc(d, 2 * B * T2 * C), *plse = alloc(d, 4 * B * NH * T2);
    tri_tensor qkv2 = tri_tensor_3d(pq2, TRI_BF16, B, T2, 3 * C), out2 = tri_tensor_3d(po2, TRI_BF16, B, T2, C);
    tri_tensor lse = tri_tensor_3d(plse, TRI_F32, B, NH, T2);
    cr_assert_eq(tri_op_flash_attention_forward(d, out2, lse, qkv2), TRI_OK, "%s", tri_error_message());
    k = kernels(d, 1);
    cr_assert_float_eq(k[0].flops_tc, 2 * (2.0 * B * NH * 3 * 64 * 64 * HS), 0.0);
    cr_assert_float_eq(k[0].bytes, 2.0 * B * T2 * 3 * C + 2.0 * B * T2 * C + 4.0 * B * NH * T2, 0.0);
    tri_device_free(d, pqkv);
    tri_device_free(d, patt);
    tri_device_free(d, pout);
    tri_device_free(d, pq2);
    tri_device_free(d, po2);
    tri_device_free(d, plse);
    tri_device_destroy(d);
}

Test(kernel_time, roofline_picks_the_bound)
{
    const tri_hardware *h200 = tri_hardware_find("h200");
    cr_assert_not_null(h200);
    tri_kernel_rates r = tri_kernel_rates_of(h200);
    double gemm = 0.803 * TRI_GEMM_TRANSFORMER_FACTOR, launch = 4e-6;
    cr_assert_float_eq(r.tc_flops, 989e12 * gemm, 1.0);
    cr_assert_float_eq(r.bytes, 4.8e12 * 0.8, 1.0);
    tri_bound bound;
    /* 1 TFLOP on the tensor cores over 1 MB: compute */
    tri_kernel_cost k = {.op = "matmul", .bytes = 1e6, .flops_tc = 1e12};
    double s = tri_kernel_seconds(&k, &r, &bound);
    cr_assert_eq(bound, TRI_BOUND_COMPUTE);
    cr_assert_float_eq(s, 1e12 / (989e12 * gemm) + launch, 1e-15);
    /* the same FLOPs in fp32 on the CUDA cores: 67 TFLOP/s */
    k = (tri_kernel_cost){.op = "matmul", .bytes = 1e6, .flops = 1e12};
    cr_assert_float_eq(tri_kernel_seconds(&k, &r, &bound), 1e12 / (67e12 * gemm) + launch, 1e-15);
    /* 1 GB, a few FLOPs an element: memory */
    k = (tri_kernel_cost){.op = "add", .bytes = 1e9, .flops = 1e9 / 6};
    s = tri_kernel_seconds(&k, &r, &bound);
    cr_assert_eq(bound, TRI_BOUND_MEMORY);
    cr_assert_float_eq(s, 1e9 / (4.8e12 * 0.8) + launch, 1e-15);
    /* 3 KB: the launch */
    k = (tri_kernel_cost){.op = "ce_loss", .bytes = 3e3, .flops = 3e3};
    s = tri_kernel_seconds(&k, &r, &bound);
    cr_assert_eq(bound, TRI_BOUND_LAUNCH);
    cr_assert_float_eq(s, 3e3 / (4.8e12 * 0.8) + launch, 1e-15);

    /* rows: two calls of one op (three launches) and one of another, in launch order */
    tri_kernel_cost ks[] = {{"matmul", 0, 1e6, 1e12, 0, false}, {"add", 1, 1e9, 0, 1e8, false},
                            {"matmul", 2, 1e6, 1e12, 0, false}, {"matmul", 2, 1e6, 0, 0, false}};
    tri_step_prediction p;
    cr_assert_eq(tri_kernel_time_predict(ks, 4, &r, &p), TRI_OK);
    cr_assert_eq(p.n, 2);
    const tri_op_time *mm = tri_step_prediction_find(&p, "matmul"), *add = tri_step_prediction_find(&p, "add");
    cr_assert(mm && add);
    cr_assert_eq(mm->calls, 2);
    cr_assert_eq(mm->launches, 3);
    cr_assert_eq(mm->bound, TRI_BOUND_COMPUTE);
    cr_assert_float_eq(mm->compute_s, 2e12 / r.tc_flops, 1e-15);
    cr_assert_float_eq(mm->memory_s, 1e6 / r.bytes, 1e-15);
    cr_assert_float_eq(mm->launch_s, 3 * launch, 1e-15);
    cr_assert_eq(add->bound, TRI_BOUND_MEMORY);
    cr_assert_str_eq(p.row[0].op, mm->seconds > add->seconds ? "matmul" : "add", "rows by time, largest first");
    cr_assert_float_eq(p.seconds, mm->seconds + add->seconds, 1e-15);
    /* the profiler's synchronisation: call_s per call */
    r.call_s = 1e-5;
    cr_assert_eq(tri_kernel_time_predict(ks, 4, &r, &p), TRI_OK);
    cr_assert_float_eq(tri_step_prediction_find(&p, "matmul")->launch_s, 3 * launch + 2 * 1e-5, 1e-15);
    /* graph nodes: graph_node_s instead of launch_s (the same work), counted in graph_nodes */
    r.call_s = 0;
    cr_assert_eq(tri_kernel_time_predict(ks, 4, &r, &p), TRI_OK);
    double eager = p.seconds;
    for (int i = 0; i < 4; i++)
        ks[i].graph_node = i != 1;
    cr_assert_eq(tri_kernel_time_predict(ks, 4, &r, &p), TRI_OK);
    cr_assert_eq(p.graph_nodes, 3);
    cr_assert_float_eq(r.graph_node_s, TRI_GRAPH_NODE_S, 0.0);
    cr_assert_float_eq(tri_step_prediction_find(&p, "matmul")->launch_s, 3 * TRI_GRAPH_NODE_S, 1e-15);
    cr_assert_float_eq(tri_step_prediction_find(&p, "add")->launch_s, launch, 1e-15);
    cr_assert_float_eq(p.seconds, eager - 3 * (launch - TRI_GRAPH_NODE_S), 1e-15);
    k = (tri_kernel_cost){.op = "ce_loss", .bytes = 3e3, .flops = 3e3, .graph_node = true};
    cr_assert_float_eq(tri_kernel_seconds(&k, &r, &bound), 3e3 / (4.8e12 * 0.8) + TRI_GRAPH_NODE_S, 1e-15);
}

/* ---- a whole GPT-2 step on the cost device ---- */

typedef struct step_case {
    tri_model *m;
    tri_layout_request req;
    bool fused;
    bool graph;                /* --enable-cuda-graph */
    tri_step_prediction p;
} step_case;

static int predict_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)rank, (void)size;
    step_case *c = arg;
    return tri_cli_predict_step(world, c->m, c->req, c->fused, c->graph, tri_hardware_find("h200"), 0.0, &c->p);
}

static int64_t calls_of(const tri_step_prediction *p, const char *op)
{
    const tri_op_time *t = tri_step_prediction_find(p, op);
    return t ? t->calls : 0;
}

static void predict(step_case *c)
{
    cr_assert_eq(tri_run_thread_ranks(1, predict_rank, c), TRI_OK, "%s", tri_error_message());
    double sum = 0;
    for (int i = 0; i < c->p.n; i++) {
        const tri_op_time *t = &c->p.row[i];
        sum += t->seconds;
        cr_assert_float_eq(t->seconds, t->compute_s + t->memory_s + t->launch_s, 1e-15, "%s", t->op);
        cr_assert_geq(t->launches, t->calls, "%s", t->op);
        if (i > 0)
            cr_assert_geq(c->p.row[i - 1].seconds, t->seconds, "rows by time");
    }
    cr_assert_float_eq(c->p.seconds, sum, 1e-12 * sum, "the step is the sum of its rows");
    cr_assert_gt(c->p.seconds, 0.0);
}

Test(kernel_time, gpt2_step_rows)
{
    tri_model m;
    cr_assert_eq(tri_model_load(&m, tu_source_path("models/gpt2-tiny-byte.json")), TRI_OK, "%s", tri_error_message());
    tri_transformer t = tri_model_dims(&m);
    const int64_t B = 2, T = 64, L = t.n_layer, C = t.n_embd, Vp = tri_padded_vocab(t.vocab_size, 1);
    const int64_t params = 12 * L + 4; /* per block: 2 norms, 4 linears, each weight and bias; wte, wpe, ln_f */
    tri_layout_request req = {.num_gpus = 1, .tp = 1, .pp = 1, .micro_batch = (int)B, .global_batch = (int)B,
                              .seq_length = (int)T, .precision = TRI_PRECISION_BF16,
                              .attention = TRI_ATTENTION_UNFUSED, .first_layers = -1, .last_layers = -1};

    /* the 2026-11-27 op set, unfused attention */
    step_case c = {.m = &m, .req = req, .fused = false};
    predict(&c);
    const tri_op_time *mm = tri_step_prediction_find(&c.p, "matmul");
    cr_assert_not_null(mm);
    cr_assert_eq(mm->calls, 12 * L + 3, "three products per linear and the LM head");
    cr_assert_float_eq(mm->flops, 6.0 * B * T * (12.0 * L * C * C + (double)C * Vp), 1.0);
    cr_assert_eq(mm->bound, TRI_BOUND_LAUNCH, "a tiny model's products are shorter than a launch");
    cr_assert_eq(calls_of(&c.p, "attention_forward"), L);
    cr_assert_eq(calls_of(&c.p, "attention_backward"), L);
    cr_assert_eq(calls_of(&c.p, "flash_attention_forward"), 0);
    cr_assert_eq(calls_of(&c.p, "adamw"), params, "one AdamW per parameter");
    cr_assert_eq(calls_of(&c.p, "sum_squares"), params, "one sum of squares per parameter");
    cr_assert_eq(calls_of(&c.p, "adamw_multi"), 0);
    cr_assert_eq(calls_of(&c.p, "adamw_fused_multi"), 0, "that op set updates, publishes and zeroes apart");
    cr_assert_eq(calls_of(&c.p, "ce_fused"), 0, "the classifier in pieces");
    cr_assert_eq(calls_of(&c.p, "ce_backward"), 1);
    double old = c.p.seconds;
    int64_t old_converts = calls_of(&c.p, "convert"), old_fills = calls_of(&c.p, "fill");

    /* HEAD's op set: the multi-tensor norm and AdamW, one launch each group; the fused classifier */
    c = (step_case){.m = &m, .req = req, .fused = true};
    predict(&c);
    cr_assert_eq(calls_of(&c.p, "adamw"), 0);
    cr_assert_eq(calls_of(&c.p, "adamw_multi"), 0);
    cr_assert_eq(calls_of(&c.p, "adamw_fused_multi"), 1, "AdamW, the bf16 publish and the gradient zeroing in one");
    cr_assert_eq(tri_step_prediction_find(&c.p, "adamw_fused_multi")->launches, 1, "%lld pieces in one group",
                 (long long)params);
    cr_assert_gt(old_converts, 0);
    cr_assert_eq(calls_of(&c.p, "convert"), 0, "the bf16 publish (%lld converts, one per unit) is in the update",
                 (long long)old_converts);
    cr_assert_eq(calls_of(&c.p, "fill"), old_fills - 1, "the gradients' fill is in the previous update");
    cr_assert_eq(tri_step_prediction_find(&c.p, "sum_squares_multi")->launches, 2);
    cr_assert_eq(calls_of(&c.p, "ce_fused"), 1);
    cr_assert_eq(calls_of(&c.p, "add_layernorm_forward"), L, "each block's second norm takes the residual add");
    cr_assert_lt(c.p.seconds, old, "fewer launches: %g s against %g s", c.p.seconds, old);

    /* the fused attention: no T x T scores */
    c.req.attention = TRI_ATTENTION_FLASH;
    predict(&c);
    cr_assert_eq(calls_of(&c.p, "attention_forward"), 0);
    cr_assert_eq(calls_of(&c.p, "flash_attention_forward"), L);
    cr_assert_eq(tri_step_prediction_find(&c.p, "flash_attention_backward")->launches, 3 * L);

    /* --enable-cuda-graph: the forward and backward kernels become graph nodes, launched in two graphs
     * (one micro-batch: its forward, its backward); the zeroing, the norm and AdamW stay launches */
    step_case g = c;
    g.graph = true;
    predict(&g);
    int64_t kernels = 0, graph_kernels = 0;
    for (int i = 0; i < c.p.n; i++)
        kernels += c.p.row[i].launches;
    for (int i = 0; i < g.p.n; i++)
        graph_kernels += g.p.row[i].launches;
    const tri_op_time *gl = tri_step_prediction_find(&g.p, "graph_launch");
    cr_assert_not_null(gl);
    cr_assert_eq(gl->launches, 2, "a forward and a backward graph");
    cr_assert_eq(graph_kernels, kernels + 2, "the same kernels, and the two graph launches");
    cr_assert_eq(tri_step_prediction_find(&g.p, "matmul")->launches,
                 tri_step_prediction_find(&c.p, "matmul")->launches);
    cr_assert_eq(calls_of(&g.p, "matmul"), calls_of(&c.p, "matmul"), "calls renumbered per launch");
    cr_assert_eq(calls_of(&g.p, "adamw_fused_multi"), 1, "the update stays a launch of its own");
    cr_assert_gt(g.p.graph_nodes, kernels / 2, "most kernels are the passes' (%lld of %lld)",
                 (long long)g.p.graph_nodes, (long long)kernels);
    cr_assert_lt(g.p.graph_nodes, kernels, "the optimizer and the norm are not captured");
    const tri_hardware *h200 = tri_hardware_find("h200");
    double saved = (double)g.p.graph_nodes * (h200->launch_s - TRI_GRAPH_NODE_S) - 2 * h200->launch_s;
    cr_assert_float_eq(g.p.seconds, c.p.seconds - saved, 1e-9 * c.p.seconds, "%g s against %g s", g.p.seconds,
                       c.p.seconds);
    tri_model_free(&m);
}
