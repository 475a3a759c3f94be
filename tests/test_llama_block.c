/* tests/test_llama_block.c - one Llama decoder layer from Trident's layers against PyTorch.
 *
 * The block is built here from the Llama family's layers and ops: RMSNorm (tri_op_rmsnorm_*), the
 * attention sub-block (layers/llama_attention.h: fused q|k|v projection, rotary embedding with
 * layers/rotary.h's tables, grouped-query fused attention, o_proj) and the SwiGLU MLP
 * (layers/swiglu_mlp.h), with the residual adds: h = x + attn(rmsnorm1(x)), out = h +
 * mlp(rmsnorm2(h)). tests/llama_torch_reference.py computes the same layer in float64 from
 * Hugging Face's documented math (separate q/k/v projections, rotate_half, repeat_kv, eager causal
 * softmax, silu(gate) * up), from the same weights in Hugging Face's shapes. The output, the input
 * gradient and every weight's gradient of L = sum(out * R) must agree within 1e-5 (per tensor:
 * max |a - b| / max |b|; Trident runs in fp32, measured at most 9.0e-7 over the six cases).
 *
 * Layouts: one rank, and tensor parallelism over 2 thread ranks: q heads, gate/up rows and the
 * o_proj / down_proj columns split; key/value heads split when NH_kv >= tp, else each rank holds a
 * replica of the key/value head its query heads read and the replicas' gradients are summed (what
 * the model will reduce over the ranks sharing it). NH_kv in {4, 2, 1} for NH 4: multi-head,
 * grouped-query and multi-query attention. T 70 crosses the fused attention's 64-key tile. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "layers/llama_attention.h"
#include "layers/rotary.h"
#include "layers/swiglu_mlp.h"
#include "tests/harness.h"
#include "tests/opsutil.h"
#include "tests/testutil.h"

TestSuite(llama_block, .fini = ot_teardown);

#define TOL 1e-5
#define MAX_TP 2

enum { B = 2, T = 70, C = 64, NH = 4, HS = 16, F = 96 };
static const float EPS = 1e-5f;

/* A weight in Hugging Face's layout: its host values, and each rank's gradient rows/columns after
 * the run, assembled into `grad` by the main thread. */
typedef struct llama_case {
    int tp;
    int64_t NH_kv;
    float *x, *R, *cos, *sin, *ln1, *ln2, *q, *k, *v, *o, *gate, *up, *down;
    /* per rank: the local gradients and rank 0's out and dx */
    float *g_qkv[MAX_TP], *g_o[MAX_TP], *g_gu[MAX_TP], *g_down[MAX_TP], *g_ln1[MAX_TP], *g_ln2[MAX_TP];
    float *out, *dx;
} llama_case;

/* This rank's heads: NH_l query heads from h0, NH_kv_l key/value heads from g0. */
typedef struct rank_heads {
    int64_t NH_l, h0, NH_kv_l, g0, F_l, W_l;
} rank_heads;

static rank_heads heads_of(const llama_case *c, int rank)
{
    rank_heads r;
    r.NH_l = NH / c->tp, r.h0 = rank * r.NH_l, r.F_l = F / c->tp;
    if (c->NH_kv >= c->tp)
        r.NH_kv_l = c->NH_kv / c->tp, r.g0 = rank * r.NH_kv_l;
    else
        r.NH_kv_l = 1, r.g0 = r.h0 / (NH / c->NH_kv); /* the replica its query heads read */
    r.W_l = (r.NH_l + 2 * r.NH_kv_l) * HS;
    return r;
}

/* rows [r0, r0 + n) of a (rows, cols) matrix into dst */
static void copy_rows(float *dst, const float *src, int64_t r0, int64_t n, int64_t cols)
{
    memcpy(dst, src + r0 * cols, (size_t)(n * cols) * sizeof *dst);
}

/* columns [c0, c0 + n) of a (rows, cols) matrix into dst (rows, n) */
static void copy_cols(float *dst, const float *src, int64_t rows, int64_t cols, int64_t c0, int64_t n)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * n, src + r * cols + c0, (size_t)n * sizeof *dst);
}

typedef struct dev_mem {
    tri_device *d;
    void *p[64];
    int n;
} dev_mem;

static tri_tensor put(dev_mem *m, tri_tensor shape, const float *host)
{
    size_t bytes = (size_t)tri_tensor_numel(shape) * sizeof(float);
    if (tri_device_alloc(m->d, &m->p[m->n], bytes) != TRI_OK)
        return tri_tensor_none();
    shape.data = m->p[m->n++];
    if (host)
        tri_device_copy_from_host(m->d, shape, host);
    else
        tri_op_fill(m->d, shape, 0.0f);
    return shape;
}

static int rank_fn(int rank, int size, tri_comm *comm, void *arg)
{
    llama_case *c = arg;
    rank_heads r = heads_of(c, rank);
    int64_t N = B * T, C_l = r.NH_l * HS, F_l = r.F_l, W_l = r.W_l;
    dev_mem m = {.n = 0};
    int rc = tri_device_cpu_create(&m.d, 1);
    if (rc)
        return rc;
    tri_tp tp = {m.d, comm, false};
    /* this rank's weights */
    float *qkv = malloc((size_t)(W_l * C) * sizeof *qkv), *o = malloc((size_t)(C * C_l) * sizeof *o);
    float *gu = malloc((size_t)(2 * F_l * C) * sizeof *gu), *down = malloc((size_t)(C * F_l) * sizeof *down);
    copy_rows(qkv, c->q, r.h0 * HS, C_l, C);
    copy_rows(qkv + C_l * C, c->k, r.g0 * HS, r.NH_kv_l * HS, C);
    copy_rows(qkv + (C_l + r.NH_kv_l * HS) * C, c->v, r.g0 * HS, r.NH_kv_l * HS, C);
    copy_cols(o, c->o, C, NH * HS, r.h0 * HS, C_l);
    copy_rows(gu, c->gate, rank * F_l, F_l, C);
    copy_rows(gu + F_l * C, c->up, rank * F_l, F_l, C);
    copy_cols(down, c->down, C, F, rank * F_l, F_l);
    tri_llama_attention_weights aw = {put(&m, tri_tensor_2d(NULL, TRI_F32, W_l, C), qkv), tri_tensor_none(),
                                      put(&m, tri_tensor_2d(NULL, TRI_F32, C, C_l), o), tri_tensor_none(),
                                      tri_tensor_none(), tri_tensor_none()};
    tri_llama_attention_weights ag = {put(&m, tri_tensor_2d(NULL, TRI_F32, W_l, C), NULL), tri_tensor_none(),
                                      put(&m, tri_tensor_2d(NULL, TRI_F32, C, C_l), NULL), tri_tensor_none(),
                                      tri_tensor_none(), tri_tensor_none()};
    tri_swiglu_mlp_weights mw = {put(&m, tri_tensor_2d(NULL, TRI_F32, 2 * F_l, C), gu), tri_tensor_none(),
                                 put(&m, tri_tensor_2d(NULL, TRI_F32, C, F_l), down), tri_tensor_none()};
    tri_swiglu_mlp_weights mg = {put(&m, tri_tensor_2d(NULL, TRI_F32, 2 * F_l, C), NULL), tri_tensor_none(),
                                 put(&m, tri_tensor_2d(NULL, TRI_F32, C, F_l), NULL), tri_tensor_none()};
    free(qkv), free(o), free(gu), free(down);
    tri_tensor ln1w = put(&m, tri_tensor_1d(NULL, TRI_F32, C), c->ln1), ln2w = put(&m, tri_tensor_1d(NULL, TRI_F32, C), c->ln2);
    tri_tensor g1 = put(&m, tri_tensor_1d(NULL, TRI_F32, C), NULL), g2 = put(&m, tri_tensor_1d(NULL, TRI_F32, C), NULL);
    /* activations and scratch */
    tri_tensor x = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), c->x), R = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), c->R);
    tri_tensor ln1 = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), NULL), rs1 = put(&m, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    tri_tensor h = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), NULL), tmp = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), NULL);
    tri_tensor ln2 = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), NULL), rs2 = put(&m, tri_tensor_1d(NULL, TRI_F32, N), NULL);
    tri_tensor out = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), NULL), dln = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), NULL);
    tri_tensor dh = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), c->R), dx = put(&m, tri_tensor_2d(NULL, TRI_F32, N, C), NULL);
    tri_llama_attention_acts aa = {put(&m, tri_tensor_3d(NULL, TRI_F32, B, T, W_l), NULL),
                                   put(&m, tri_tensor_3d(NULL, TRI_F32, B, T, C_l), NULL),
                                   put(&m, tri_tensor_3d(NULL, TRI_F32, B, r.NH_l, T), NULL), tri_tensor_none(),
                                   tri_tensor_none()};
    tri_llama_attention_scratch as = {tri_tensor_none(), tri_tensor_none(),
                                      put(&m, tri_tensor_3d(NULL, TRI_F32, B, T, W_l), NULL),
                                      put(&m, tri_tensor_3d(NULL, TRI_F32, B, T, C_l), NULL),
                                      put(&m, tri_tensor_3d(NULL, TRI_F32, B, r.NH_l, T), NULL),
                                      put(&m, tri_tensor_2d(NULL, TRI_F32, T, HS / 2), c->cos),
                                      put(&m, tri_tensor_2d(NULL, TRI_F32, T, HS / 2), c->sin), r.NH_l, r.NH_kv_l, 0.0f,
                                      {.T = T, .cp = 1}, NULL, {tri_tensor_none(), tri_tensor_none()}};
    tri_swiglu_mlp_acts ma = {put(&m, tri_tensor_2d(NULL, TRI_F32, N, 2 * F_l), NULL),
                              put(&m, tri_tensor_2d(NULL, TRI_F32, N, F_l), NULL)};
    tri_swiglu_mlp_scratch ms = {tri_tensor_none(), tri_tensor_none(), put(&m, tri_tensor_2d(NULL, TRI_F32, N, F_l), NULL),
                                 put(&m, tri_tensor_2d(NULL, TRI_F32, N, 2 * F_l), NULL)};
    /* forward: h = x + attn(rmsnorm1(x)), out = h + mlp(rmsnorm2(h)) */
    tri_device *d = m.d;
    rc = tri_op_rmsnorm_forward(d, ln1, rs1, x, ln1w, EPS);
    if (!rc) rc = tri_llama_attention_forward(&tp, tmp, &aa, ln1, &aw, &as);
    if (!rc) rc = tri_op_add(d, h, x, tmp);
    if (!rc) rc = tri_op_rmsnorm_forward(d, ln2, rs2, h, ln2w, EPS);
    if (!rc) rc = tri_swiglu_mlp_forward(&tp, tmp, &ma, ln2, &mw, &ms);
    if (!rc) rc = tri_op_add(d, out, h, tmp);
    /* backward from dout = R: dh starts as R (the residual), dx as dh */
    if (!rc) rc = tri_swiglu_mlp_backward(&tp, dln, &mg, R, &ma, ln2, &mw, &ms);
    if (!rc) rc = tri_op_rmsnorm_backward(d, dh, g2, dln, h, ln2w, rs2);
    if (!rc) rc = tri_llama_attention_backward(&tp, dln, &ag, dh, &aa, ln1, &aw, &as);
    if (!rc) rc = tri_op_copy(d, dx, dh);
    if (!rc) rc = tri_op_rmsnorm_backward(d, dx, g1, dln, x, ln1w, rs1);
    /* results */
    if (!rc) rc = tri_device_copy_to_host(d, c->g_qkv[rank], ag.qkv_w);
    if (!rc) rc = tri_device_copy_to_host(d, c->g_o[rank], ag.o_w);
    if (!rc) rc = tri_device_copy_to_host(d, c->g_gu[rank], mg.gate_up_w);
    if (!rc) rc = tri_device_copy_to_host(d, c->g_down[rank], mg.down_w);
    if (!rc) rc = tri_device_copy_to_host(d, c->g_ln1[rank], g1);
    if (!rc) rc = tri_device_copy_to_host(d, c->g_ln2[rank], g2);
    if (!rc && rank == 0) rc = tri_device_copy_to_host(d, c->out, out);
    if (!rc && rank == 0) rc = tri_device_copy_to_host(d, c->dx, dx);
    for (int i = 0; i < m.n; i++)
        tri_device_free(d, m.p[i]);
    tri_device_destroy(d);
    (void)size;
    return rc;
}

static void expect_close(const char *what, const float *got, const tu_records *ref, const char *name, int64_t n,
                         double *worst)
{
    const tu_record *r = tu_rec_find(ref, name);
    cr_assert(r && r->numel == n, "%s: the reference has no %s of %lld elements", what, name, (long long)n);
    double e = tu_tensor_rel_f64(got, r->data, n);
    *worst = fmax(*worst, e);
    cr_expect(e <= TOL, "%s: %s differs from PyTorch by %.3g (tol %g)", what, name, e, TOL);
}

static void write_f32(FILE *f, const char *name, const float *x, int64_t n)
{
    cr_assert_eq(tu_rec_write_f32(f, name, 1, &n, x), 0);
}

static void run_case(int tp, int64_t NH_kv, uint64_t seed)
{
    llama_case c = {.tp = tp, .NH_kv = NH_kv};
    int64_t N = B * T, Ckv = NH_kv * HS;
    c.x = ot_uniform((size_t)(N * C), -1.0f, 1.0f, seed), c.R = ot_uniform((size_t)(N * C), -1.0f, 1.0f, seed + 1);
    c.ln1 = ot_uniform(C, 0.5f, 1.5f, seed + 2), c.ln2 = ot_uniform(C, 0.5f, 1.5f, seed + 3);
    c.q = ot_uniform((size_t)(NH * HS * C), -0.3f, 0.3f, seed + 4);
    c.k = ot_uniform((size_t)(Ckv * C), -0.3f, 0.3f, seed + 5), c.v = ot_uniform((size_t)(Ckv * C), -0.3f, 0.3f, seed + 6);
    c.o = ot_uniform((size_t)(C * NH * HS), -0.2f, 0.2f, seed + 7);
    c.gate = ot_uniform((size_t)(F * C), -0.2f, 0.2f, seed + 8), c.up = ot_uniform((size_t)(F * C), -0.2f, 0.2f, seed + 9);
    c.down = ot_uniform((size_t)(C * F), -0.2f, 0.2f, seed + 10);
    float inv[HS / 2];
    c.cos = ot_floats((size_t)(T * HS / 2)), c.sin = ot_floats((size_t)(T * HS / 2));
    tri_rope_inv_freq(inv, HS, 10000.0, NULL);
    tri_rope_tables(c.cos, c.sin, T, HS / 2, inv);
    for (int r = 0; r < tp; r++) {
        rank_heads h = heads_of(&c, r);
        c.g_qkv[r] = ot_floats((size_t)(h.W_l * C)), c.g_o[r] = ot_floats((size_t)(C * h.NH_l * HS));
        c.g_gu[r] = ot_floats((size_t)(2 * h.F_l * C)), c.g_down[r] = ot_floats((size_t)(C * h.F_l));
        c.g_ln1[r] = ot_floats(C), c.g_ln2[r] = ot_floats(C);
    }
    c.out = ot_floats((size_t)(N * C)), c.dx = ot_floats((size_t)(N * C));
    cr_assert_eq(tri_run_thread_ranks(tp, rank_fn, &c), TRI_OK, "%s", tri_error_message());

    /* assemble the gradients in Hugging Face's layout; replicated key/value heads summed in rank order */
    float *gq = ot_floats((size_t)(NH * HS * C)), *gk = ot_floats((size_t)(Ckv * C)), *gv = ot_floats((size_t)(Ckv * C));
    float *go = ot_floats((size_t)(C * NH * HS)), *gg = ot_floats((size_t)(F * C)), *gup = ot_floats((size_t)(F * C));
    float *gd = ot_floats((size_t)(C * F));
    for (int r = 0; r < tp; r++) {
        rank_heads h = heads_of(&c, r);
        int64_t C_l = h.NH_l * HS, kv = h.NH_kv_l * HS;
        memcpy(gq + h.h0 * HS * C, c.g_qkv[r], (size_t)(C_l * C) * sizeof *gq);
        for (int64_t i = 0; i < kv * C; i++) {
            gk[h.g0 * HS * C + i] += c.g_qkv[r][C_l * C + i];
            gv[h.g0 * HS * C + i] += c.g_qkv[r][(C_l + kv) * C + i];
        }
        for (int64_t row = 0; row < C; row++) {
            memcpy(go + row * NH * HS + h.h0 * HS, c.g_o[r] + row * C_l, (size_t)C_l * sizeof *go);
            memcpy(gd + row * F + r * h.F_l, c.g_down[r] + row * h.F_l, (size_t)h.F_l * sizeof *gd);
        }
        memcpy(gg + r * h.F_l * C, c.g_gu[r], (size_t)(h.F_l * C) * sizeof *gg);
        memcpy(gup + r * h.F_l * C, c.g_gu[r] + h.F_l * C, (size_t)(h.F_l * C) * sizeof *gup);
        if (r > 0) /* replicated over TP: every rank computed the whole gradient */
            cr_assert(ot_same_bits("rmsnorm weight gradients on every rank", c.g_ln1[r], c.g_ln1[0], C));
    }

    /* the PyTorch reference on the same inputs */
    char dir[] = "/tmp/trident-llama-XXXXXX", in[256], outp[256], cmd[1024];
    cr_assert(mkdtemp(dir), "mkdtemp");
    snprintf(in, sizeof in, "%s/in.bin", dir);
    snprintf(outp, sizeof outp, "%s/out.bin", dir);
    FILE *f = fopen(in, "wb");
    cr_assert(f);
    double meta[8] = {B, T, C, NH, (double)NH_kv, HS, F, EPS};
    int64_t nm = 8, ncs[2] = {T, HS / 2};
    cr_assert_eq(tu_rec_write(f, "meta", 1, &nm, meta), 0);
    cr_assert_eq(tu_rec_write_f32(f, "cos", 2, ncs, c.cos), 0);
    cr_assert_eq(tu_rec_write_f32(f, "sin", 2, ncs, c.sin), 0);
    int64_t sq[2] = {NH * HS, C}, skv[2] = {Ckv, C}, so[2] = {C, NH * HS}, sf[2] = {F, C}, sd[2] = {C, F};
    write_f32(f, "x", c.x, N * C);
    write_f32(f, "R", c.R, N * C);
    write_f32(f, "ln1_w", c.ln1, C);
    write_f32(f, "ln2_w", c.ln2, C);
    cr_assert_eq(tu_rec_write_f32(f, "q_w", 2, sq, c.q), 0);
    cr_assert_eq(tu_rec_write_f32(f, "k_w", 2, skv, c.k), 0);
    cr_assert_eq(tu_rec_write_f32(f, "v_w", 2, skv, c.v), 0);
    cr_assert_eq(tu_rec_write_f32(f, "o_w", 2, so, c.o), 0);
    cr_assert_eq(tu_rec_write_f32(f, "gate_w", 2, sf, c.gate), 0);
    cr_assert_eq(tu_rec_write_f32(f, "up_w", 2, sf, c.up), 0);
    cr_assert_eq(tu_rec_write_f32(f, "down_w", 2, sd, c.down), 0);
    fclose(f);
    const char *args[] = {in, outp};
    cr_assert_eq(tu_torch_run("tests/llama_torch_reference.py", args, 2, cmd, sizeof cmd), 0,
                 "the PyTorch reference failed: %s", cmd);
    tu_records ref;
    cr_assert_eq(tu_rec_read(outp, &ref), 0, "cannot read %s", outp);
    char what[64];
    snprintf(what, sizeof what, "tp %d, NH %d, NH_kv %lld", tp, NH, (long long)NH_kv);
    double worst = 0.0;
    expect_close(what, c.out, &ref, "out", N * C, &worst);
    expect_close(what, c.dx, &ref, "d_x", N * C, &worst);
    expect_close(what, c.g_ln1[0], &ref, "d_ln1_w", C, &worst);
    expect_close(what, c.g_ln2[0], &ref, "d_ln2_w", C, &worst);
    expect_close(what, gq, &ref, "d_q_w", NH * HS * C, &worst);
    expect_close(what, gk, &ref, "d_k_w", Ckv * C, &worst);
    expect_close(what, gv, &ref, "d_v_w", Ckv * C, &worst);
    expect_close(what, go, &ref, "d_o_w", C * NH * HS, &worst);
    expect_close(what, gg, &ref, "d_gate_w", F * C, &worst);
    expect_close(what, gup, &ref, "d_up_w", F * C, &worst);
    expect_close(what, gd, &ref, "d_down_w", C * F, &worst);
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "llama block %s: worst relative difference from PyTorch %.3g\n", what, worst);
    tu_rec_free(&ref);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    tu_run(cmd);
}

Test(llama_block, one_rank_multi_head) { run_case(1, 4, 10); }
Test(llama_block, one_rank_grouped_query) { run_case(1, 2, 20); }
Test(llama_block, one_rank_multi_query) { run_case(1, 1, 30); }
Test(llama_block, tp2_multi_head) { run_case(2, 4, 40); }
Test(llama_block, tp2_grouped_query_split_kv) { run_case(2, 2, 50); }
Test(llama_block, tp2_multi_query_replicated_kv) { run_case(2, 1, 60); }
