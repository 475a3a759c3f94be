/* tests/test_ops_threads.c - results independent of the CPU backend's thread count.
 *
 * The CPU backend (the _cpu.c files of engine/device/ops/) promises that every sum feeding a parameter
 * gradient (bias, layernorm and embedding backward, which sum over rows) and every full reduction
 * (sum_squares) is the same for any thread count: column blocks with rows summed in order, and a
 * fixed chunk count. That is what makes a run reproducible across machines and lets the parallel
 * tests compare layouts bit for bit.
 * Each op runs here on a device with 1 thread and one with 2, on identical inputs, and the outputs
 * must be bit-identical. Shapes are wide enough (C = 200: three full column blocks of 64 and a
 * partial one; N = 37 rows; 100003 elements) that a thread-order-dependent sum would differ.
 * These ops call no BLAS, so only OpenMP's team size matters; the device passes it to every loop
 * (num_threads), which overrides the suite's OMP_NUM_THREADS=1.
 *
 * every_op runs every op of the backend on 1, 2 and 5 threads. A one-thread device runs each op's
 * loops straight on the calling thread and the others inside a parallel region
 * (engine/device/cpu_threads.h), so the two code paths must agree bit for bit; 5 threads also take
 * the fused attention backward's two-pass branch (fewer (b, key/value head) tasks than threads). */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/ops/compress_math.h"
#include "tests/opsutil.h"

TestSuite(ops_threads, .fini = ot_teardown);

static const int64_t N = 37, C = 200, V_l = 11, n_pos = 8, T = 5;

/* The team the 2-thread device asks for must really have 2 threads, or the test proves nothing. */
Test(ops_threads, two_threads_are_granted)
{
    int team = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        team = omp_get_num_threads();
    }
    cr_assert_eq(team, 2);
}

static tri_tensor rows_cols(tri_device *d, int64_t rows, int64_t cols, uint64_t seed)
{
    return ot_tensor(d, tri_tensor_2d(NULL, TRI_F32, rows, cols),
                     ot_uniform((size_t)(rows * cols), -1.0f, 1.0f, seed));
}

static tri_tensor vec(tri_device *d, int64_t n, uint64_t seed)
{
    return tri_tensor_flat(rows_cols(d, 1, n, seed));
}

static float *bias_backward(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor db = vec(d, C, 1), dout = rows_cols(d, N, C, 2);
    cr_assert_eq(tri_op_bias_backward(d, db, dout), TRI_OK);
    return ot_read(d, db);
}

/* dinp, dw and db one after another in one array. */
static float *layernorm_backward(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor inp = rows_cols(d, N, C, 3), w = vec(d, C, 4), b = vec(d, C, 5);
    tri_tensor out = rows_cols(d, N, C, 6), mean = vec(d, N, 7), rstd = vec(d, N, 8);
    tri_tensor dinp = rows_cols(d, N, C, 9), dw = vec(d, C, 10), db = vec(d, C, 11);
    tri_tensor dout = rows_cols(d, N, C, 12);
    cr_assert_eq(tri_op_layernorm_forward(d, out, mean, rstd, inp, w, b), TRI_OK);
    cr_assert_eq(tri_op_layernorm_backward(d, dinp, dw, db, dout, inp, w, mean, rstd), TRI_OK);
    float *all = ot_floats((size_t)(N * C + 2 * C));
    ot_download(d, all, dinp);
    ot_download(d, all + N * C, dw);
    ot_download(d, all + N * C + C, db);
    return all;
}

static float *embedding_backward(int threads)
{
    tri_device *d = ot_device(threads);
    int32_t *tokens = ot_ints((size_t)N);
    for (int64_t n = 0; n < N; n++)
        tokens[n] = (int32_t)((n * 7) % 15); /* repeats, and ids 11..14 outside [0, V_l) */
    tri_tensor tok = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N), tokens);
    tri_tensor dwte = rows_cols(d, V_l, C, 13), dout = rows_cols(d, N, C, 14);
    cr_assert_eq(tri_op_embedding_backward(d, dwte, dout, tok, 0), TRI_OK);
    return ot_read(d, dwte);
}

static float *position_backward(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor dwpe = rows_cols(d, n_pos, C, 15), dout = rows_cols(d, N, C, 16);
    cr_assert_eq(tri_op_position_backward(d, dwpe, dout, T, 3, 1, 0), TRI_OK);
    return ot_read(d, dwpe);
}

static float *sum_squares(int threads)
{
    tri_device *d = ot_device(threads);
    tri_tensor x = vec(d, 100003, 17), out = vec(d, 1, 18);
    cr_assert_eq(tri_op_sum_squares(d, out, x), TRI_OK);
    return ot_read(d, out);
}

Test(ops_threads, bias_backward)
{
    cr_assert(ot_same_bits("bias_backward 1 vs 2 threads", bias_backward(2), bias_backward(1),
                           (size_t)C));
}

Test(ops_threads, layernorm_backward)
{
    cr_assert(ot_same_bits("layernorm_backward 1 vs 2 threads", layernorm_backward(2),
                           layernorm_backward(1), (size_t)(N * C + 2 * C)));
}

Test(ops_threads, embedding_backward)
{
    cr_assert(ot_same_bits("embedding_backward 1 vs 2 threads", embedding_backward(2),
                           embedding_backward(1), (size_t)(V_l * C)));
}

Test(ops_threads, position_backward)
{
    cr_assert(ot_same_bits("position_backward 1 vs 2 threads", position_backward(2),
                           position_backward(1), (size_t)(n_pos * C)));
}

Test(ops_threads, sum_squares)
{
    cr_assert(ot_same_bits("sum_squares 1 vs 2 threads", sum_squares(2), sum_squares(1), 1));
}

/* ---- every op ---- */

typedef struct outputs {
    unsigned char *bytes;
    size_t n;
} outputs;

/* Appends t's bytes (any dtype) to o. */
static void keep(outputs *o, tri_device *d, tri_tensor t)
{
    size_t bytes = tri_tensor_bytes(t);
    unsigned char *grown = realloc(o->bytes, o->n + bytes);
    cr_assert_not_null(grown);
    o->bytes = grown;
    ot_download(d, o->bytes + o->n, t);
    o->n += bytes;
}

#define OK(call) cr_assert_eq((call), TRI_OK, "%s: %s", #call, tri_error_message())

/* Every op once, on inputs of shapes that split unevenly across threads; all outputs in order. */
static outputs every_op(int threads)
{
    enum { B2 = 2, T2 = 37, NH = 4, NH_KV = 2, HS = 16, C2 = NH * HS, F = 24, V = 29, V_VALID = 27, BIG = 70001 };
    const int64_t N2 = B2 * T2, W_GQA = C2 + 2 * NH_KV * HS;
    tri_device *d = ot_device(threads);
    outputs o = {0};
    uint64_t seed = 100;
    /* element-wise, reductions, conversion (BIG: past the size below which convert uses one thread) */
    tri_tensor x = vec(d, BIG, seed++), y = vec(d, BIG, seed++), z = vec(d, BIG, seed++);
    OK(tri_op_add(d, z, x, y));
    OK(tri_op_axpy(d, z, 0.5f, x));
    OK(tri_op_scale(d, y, -1.5f));
    tri_tensor sums = vec(d, 2, seed++);
    OK(tri_op_sum_squares(d, tri_tensor_range(sums, 0, 1), z));
    float *spiky = ot_uniform(BIG, -1.0f, 1.0f, seed++);
    spiky[5] = NAN, spiky[BIG / 2] = INFINITY, spiky[BIG - 1] = 1e30f; /* 1e30: no 2^20 fixed-point value */
    tri_tensor sx = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, BIG), spiky);
    OK(tri_op_count_nonfinite(d, tri_tensor_range(sums, 1, 1), sx));
    tri_tensor half = ot_tensor_as(d, TRI_BF16, ot_v1(BIG), ot_uniform(BIG, -1.0f, 1.0f, seed++));
    tri_tensor widened = vec(d, BIG, seed++);
    OK(tri_op_convert(d, widened, half));
    OK(tri_op_convert(d, half, z));
    keep(&o, d, z), keep(&o, d, y), keep(&o, d, sums), keep(&o, d, widened), keep(&o, d, half);
    /* fixed point */
    int64_t *zeros = calloc(BIG, sizeof *zeros);
    cr_assert_not_null(zeros);
    tri_tensor acc = ot_tensor(d, tri_tensor_1d(NULL, TRI_I64, BIG), zeros);
    tri_tensor acc2 = ot_tensor(d, tri_tensor_1d(NULL, TRI_I64, BIG), zeros);
    tri_tensor limbs = ot_tensor(d, tri_tensor_1d(NULL, TRI_I64, 6), zeros);
    free(zeros);
    tri_tensor bad = vec(d, 2, seed++), fixed_back = vec(d, BIG, seed++);
    OK(tri_op_fixed_accumulate(d, acc, sx, 20, tri_tensor_range(bad, 0, 1)));
    OK(tri_op_fixed_accumulate(d, acc2, x, 20, tri_tensor_range(bad, 0, 1)));
    OK(tri_op_add_i64(d, acc, acc2));
    OK(tri_op_fixed_to_float(d, fixed_back, acc, 20));
    OK(tri_op_fixed_sum_squares(d, limbs, sx, 20, tri_tensor_range(bad, 1, 1)));
    keep(&o, d, acc), keep(&o, d, limbs), keep(&o, d, bad), keep(&o, d, fixed_back);
    /* gradient compression: 1bit, qsgd and top-k payloads, decode-add */
    int64_t w1 = tri_compress_words(BIG, 256, 0), w7 = tri_compress_words(BIG, 100, 7);
    tri_tensor p1 = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, w1), NULL);
    tri_tensor p7 = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, w7), NULL);
    tri_tensor ptk = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, 2 * 777), NULL);
    tri_tensor dec = vec(d, BIG, seed++);
    OK(tri_op_compress_sign_pack(d, p1, x, 256));
    OK(tri_op_compress_qsgd_pack(d, p7, x, 100, 7, 5, 6));
    OK(tri_op_compress_topk_pack(d, ptk, x));
    OK(tri_op_compress_unpack_add(d, dec, p1, BIG, 0, 256, 0, 1.0f));
    OK(tri_op_compress_unpack_add(d, dec, p7, BIG, 0, 100, 7, -1.0f));
    OK(tri_op_compress_topk_unpack_add(d, dec, ptk, 0, 0.5f));
    keep(&o, d, dec);
    keep(&o, d, p1), keep(&o, d, p7);
    /* the MoE router: forward with an expert bias, capacity, backward, both losses, the bias update */
    enum { NR = 131, ER = 8, KR = 2 };
    tri_tensor lg = rows_cols(d, NR, ER, seed++), sc = rows_cols(d, NR, ER, seed++), dlg = rows_cols(d, NR, ER, seed++);
    tri_tensor ebias = vec(d, ER, seed++), ew = rows_cols(d, NR, KR, seed++), dew = rows_cols(d, NR, KR, seed++);
    tri_tensor eidx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, NR, KR), NULL);
    tri_tensor ekept = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, NR, KR), NULL);
    tri_tensor etok = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, ER), NULL);
    tri_tensor erouted = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, ER), NULL), elosses = vec(d, 2, seed++);
    OK(tri_op_moe_router_forward(d, eidx, ew, sc, lg, ebias, TRI_MOE_SIGMOID, true));
    OK(tri_op_moe_router_capacity(d, ekept, etok, erouted, eidx, ew, tri_moe_capacity(NR, KR, ER, 0.9),
                                  TRI_MOE_DROP_PROBS));
    OK(tri_op_moe_router_backward(d, dlg, dew, ekept, sc, TRI_MOE_SIGMOID, true));
    OK(tri_op_moe_aux_loss(d, tri_tensor_range(elosses, 0, 1), dlg, sc, erouted, KR, TRI_MOE_SIGMOID, 0.01f, 1.0f));
    OK(tri_op_moe_z_loss(d, tri_tensor_range(elosses, 1, 1), dlg, lg, 0.001f, 1.0f));
    OK(tri_op_moe_expert_bias_update(d, ebias, etok, 0.001f));
    keep(&o, d, sc), keep(&o, d, ew), keep(&o, d, eidx), keep(&o, d, ekept), keep(&o, d, etok);
    keep(&o, d, erouted), keep(&o, d, dlg), keep(&o, d, elosses), keep(&o, d, ebias);
    /* matmul with a bias (sgemm's own threads are process-wide: one here), bias gradient */
    tri_tensor a = rows_cols(d, N2, C2, seed++), w = rows_cols(d, F, C2, seed++), bias = vec(d, F, seed++);
    tri_tensor c = rows_cols(d, N2, F, seed++), dbias = vec(d, F, seed++);
    OK(tri_op_matmul(d, c, a, w, bias, false, true, 0.0f));
    OK(tri_op_bias_backward(d, dbias, c));
    keep(&o, d, c), keep(&o, d, dbias);
    /* layernorm, RMSNorm, GELU, SwiGLU, bias + GELU */
    tri_tensor g = vec(d, C2, seed++), b = vec(d, C2, seed++), ln = rows_cols(d, N2, C2, seed++);
    tri_tensor mean = vec(d, N2, seed++), rstd = vec(d, N2, seed++), dout = rows_cols(d, N2, C2, seed++);
    tri_tensor dinp = rows_cols(d, N2, C2, seed++), dg = vec(d, C2, seed++), db = vec(d, C2, seed++);
    OK(tri_op_layernorm_forward(d, ln, mean, rstd, a, g, b));
    OK(tri_op_layernorm_backward(d, dinp, dg, db, dout, a, g, mean, rstd));
    keep(&o, d, ln), keep(&o, d, mean), keep(&o, d, rstd), keep(&o, d, dinp), keep(&o, d, dg), keep(&o, d, db);
    OK(tri_op_rmsnorm_forward(d, ln, rstd, a, g, 1e-5f));
    OK(tri_op_rmsnorm_backward(d, dinp, dg, dout, a, g, rstd));
    /* the per-head RMSNorm of grouped-query q|k|v rows (Qwen3's q_norm / k_norm), in place */
    tri_tensor hq = rows_cols(d, N2, W_GQA, seed++), hg = rows_cols(d, N2, W_GQA, seed++);
    tri_tensor hrs = rows_cols(d, N2, NH + NH_KV, seed++), hqw = vec(d, HS, seed++), hkw = vec(d, HS, seed++);
    tri_tensor hdq = vec(d, HS, seed++), hdk = vec(d, HS, seed++);
    OK(tri_op_rmsnorm_heads_forward(d, hq, hrs, hq, hqw, hkw, NH, NH_KV, 1e-6f));
    OK(tri_op_rmsnorm_heads_backward(d, hg, hdq, hdk, hg, hq, hqw, hkw, hrs, NH, NH_KV));
    keep(&o, d, hq), keep(&o, d, hg), keep(&o, d, hrs), keep(&o, d, hdq), keep(&o, d, hdk);
    OK(tri_op_gelu_forward(d, z, x));
    OK(tri_op_gelu_backward(d, y, x, z));
    tri_tensor gate_up = rows_cols(d, N2, 2 * F, seed++), dgate_up = rows_cols(d, N2, 2 * F, seed++);
    tri_tensor sw = rows_cols(d, N2, F, seed++), dsw = rows_cols(d, N2, F, seed++);
    OK(tri_op_swiglu_forward(d, sw, gate_up));
    OK(tri_op_swiglu_backward(d, dgate_up, gate_up, dsw));
    keep(&o, d, ln), keep(&o, d, rstd), keep(&o, d, dinp), keep(&o, d, dg), keep(&o, d, z), keep(&o, d, y);
    keep(&o, d, sw), keep(&o, d, dgate_up);
    tri_tensor bg = rows_cols(d, N2, F, seed++);
    OK(tri_op_bias_gelu_forward(d, bg, c, bias));
    keep(&o, d, bg);
    /* the MoE dispatch (N2 tokens, top-2 of 5 experts, some dropped) and the grouped GEMM over it */
    {
        enum { KE = 2, E5 = 5 };
        int32_t *sel = ot_ints((size_t)(N2 * KE)), counts[E5];
        for (int64_t i = 0; i < N2 * KE; i++)
            sel[i] = i % 11 == 3 ? -1 : (int32_t)((i * 3 + i / KE) % E5);
        tri_tensor idx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N2, KE), sel);
        tri_tensor rmap = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N2, KE), NULL);
        tri_tensor sorted = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N2 * KE), NULL);
        tri_tensor tpe = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, E5), NULL);
        OK(tri_op_moe_permute_map(d, rmap, sorted, tpe, idx));
        ot_download(d, counts, tpe);
        tri_tensor xp = rows_cols(d, N2 * KE, C2, seed++), hp_ = rows_cols(d, N2 * KE, F, seed++);
        tri_tensor rw = rows_cols(d, N2, KE, seed++), drw = rows_cols(d, N2, KE, seed++);
        tri_tensor dxp = rows_cols(d, N2 * KE, C2, seed++), gw = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, E5, F, C2),
                                                                         ot_uniform((size_t)(E5 * F * C2), -1, 1, seed++));
        tri_tensor dgw = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, E5, F, C2),
                                   ot_uniform((size_t)(E5 * F * C2), -1, 1, seed++));
        OK(tri_op_moe_permute(d, xp, a, sorted));
        OK(tri_op_grouped_matmul_forward(d, hp_, xp, gw, counts));
        OK(tri_op_grouped_matmul_backward_input(d, dxp, hp_, gw, counts, 0.0f));
        OK(tri_op_grouped_matmul_backward_weight(d, dgw, hp_, xp, counts, 1.0f));
        OK(tri_op_moe_unpermute(d, ln, dxp, rmap, rw));
        OK(tri_op_moe_permute_backward(d, dinp, dxp, rmap));
        OK(tri_op_moe_unpermute_backward(d, xp, drw, dout, dxp, sorted, rmap, rw));
        keep(&o, d, rmap), keep(&o, d, sorted), keep(&o, d, tpe), keep(&o, d, dgw), keep(&o, d, ln);
        keep(&o, d, dinp), keep(&o, d, xp), keep(&o, d, drw);
    }
    /* rotary embedding on the first NH - 1 heads, starting at position 3 */
    tri_tensor cs = rows_cols(d, T2, HS / 2, seed++), sn = rows_cols(d, T2, HS / 2, seed++);
    tri_tensor rot = rows_cols(d, N2, C2, seed++), drot = rows_cols(d, N2, C2, seed++);
    OK(tri_op_rope_forward(d, rot, cs, sn, NH - 1, T2, 3, 1, 0));
    OK(tri_op_rope_backward(d, drot, cs, sn, NH - 1, T2, 3, 1, 0));
    keep(&o, d, rot), keep(&o, d, drot);
    /* attention: unfused (B, NH, T, T) and fused, the fused one grouped-query too */
    tri_tensor qkv = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, T2, 3 * C2),
                               ot_uniform((size_t)(N2 * 3 * C2), -1.0f, 1.0f, seed++));
    tri_tensor dqkv = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, T2, 3 * C2),
                                ot_uniform((size_t)(N2 * 3 * C2), -1.0f, 1.0f, seed++));
    tri_tensor att = ot_tensor(d, tri_tensor_4d(NULL, TRI_F32, B2, NH, T2, T2),
                               ot_uniform((size_t)(B2 * NH * T2 * T2), -1.0f, 1.0f, seed++));
    tri_tensor datt = ot_tensor(d, tri_tensor_4d(NULL, TRI_F32, B2, NH, T2, T2),
                                ot_uniform((size_t)(B2 * NH * T2 * T2), -1.0f, 1.0f, seed++));
    tri_tensor ao = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, T2, C2),
                              ot_uniform((size_t)(N2 * C2), -1.0f, 1.0f, seed++));
    tri_tensor dao = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, T2, C2),
                               ot_uniform((size_t)(N2 * C2), -1.0f, 1.0f, seed++));
    OK(tri_op_attention_forward(d, ao, att, qkv));
    OK(tri_op_attention_backward(d, dqkv, datt, dao, qkv, att));
    keep(&o, d, ao), keep(&o, d, att), keep(&o, d, dqkv), keep(&o, d, datt);
    tri_tensor lse = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, NH, T2),
                               ot_uniform((size_t)(B2 * NH * T2), -1.0f, 1.0f, seed++));
    tri_tensor delta = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, NH, T2),
                                 ot_uniform((size_t)(B2 * NH * T2), -1.0f, 1.0f, seed++));
    for (int gqa = 0; gqa < 2; gqa++) {
        int64_t Wq = gqa ? W_GQA : 3 * C2;
        tri_tensor fq = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, T2, Wq),
                                  ot_uniform((size_t)(N2 * Wq), -1.0f, 1.0f, seed++));
        tri_tensor dfq = ot_tensor(d, tri_tensor_3d(NULL, TRI_F32, B2, T2, Wq),
                                   ot_uniform((size_t)(N2 * Wq), -1.0f, 1.0f, seed++));
        OK(tri_op_flash_attention_forward(d, ao, lse, fq));
        OK(tri_op_flash_attention_backward(d, dfq, delta, dao, fq, ao, lse));
        keep(&o, d, ao), keep(&o, d, lse), keep(&o, d, dfq), keep(&o, d, delta);
        /* the split-sequence ops: the queries one chunk at 64, the keys (fq's own) at 0 */
        tri_flash_rows qr = {T2, 64, 64 + T2}, kr = tri_flash_rows_whole(T2);
        OK(tri_op_flash_attention_kv_forward(d, ao, lse, fq, fq, qr, kr));
        OK(tri_op_flash_attention_delta(d, delta, dao, ao));
        OK(tri_op_flash_attention_kv_backward_dq(d, dfq, dao, fq, fq, lse, delta, qr, kr, true));
        OK(tri_op_flash_attention_kv_backward_dkv(d, dfq, dao, fq, fq, lse, delta, qr, kr, false));
        OK(tri_op_flash_attention_kv_backward(d, dfq, dfq, dao, fq, fq, lse, delta, qr, kr, true));
        OK(tri_op_flash_attention_merge(d, ao, lse, dao, delta));
        OK(tri_op_copy_columns(d, dfq, 0, fq, Wq - 8, 8));
        keep(&o, d, ao), keep(&o, d, lse), keep(&o, d, dfq), keep(&o, d, delta);
    }
    /* embeddings (token ids past the shard), cross-entropy (padded vocabulary), AdamW */
    int32_t *ids = ot_ints((size_t)N2), *targets = ot_ints((size_t)N2);
    for (int64_t n = 0; n < N2; n++)
        ids[n] = (int32_t)((n * 7) % (V + 3)), targets[n] = (int32_t)((n * 5) % V_VALID);
    tri_tensor tok = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N2), ids);
    tri_tensor tgt = ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, N2), targets);
    tri_tensor wte = rows_cols(d, V, C2, seed++), dwte = rows_cols(d, V, C2, seed++);
    tri_tensor wpe = rows_cols(d, T2, C2, seed++), dwpe = rows_cols(d, T2, C2, seed++);
    OK(tri_op_embedding_forward(d, ln, tok, wte, 0));
    OK(tri_op_position_forward(d, ln, wpe, T2, 0, 1, 0));
    OK(tri_op_embedding_backward(d, dwte, dout, tok, 0));
    OK(tri_op_position_backward(d, dwpe, dout, T2, 0, 1, 0));
    keep(&o, d, ln), keep(&o, d, dwte), keep(&o, d, dwpe);
    tri_tensor logits = rows_cols(d, N2, V, seed++), dlogits = rows_cols(d, N2, V, seed++);
    tri_tensor maxes = vec(d, N2, seed++), stats = rows_cols(d, N2, 2, seed++), losses = vec(d, N2, seed++);
    OK(tri_op_ce_row_max(d, maxes, logits, V_VALID));
    OK(tri_op_ce_sumexp_target(d, stats, logits, maxes, tgt, 0, V_VALID));
    OK(tri_op_ce_loss(d, losses, maxes, stats));
    OK(tri_op_ce_backward(d, dlogits, logits, maxes, stats, tgt, 0, V_VALID, 0.25f));
    keep(&o, d, maxes), keep(&o, d, stats), keep(&o, d, losses), keep(&o, d, dlogits);
    tri_tensor flogits = rows_cols(d, N2, V, seed++), flosses = vec(d, N2, seed++);
    OK(tri_op_ce_fused(d, flosses, flogits, flogits, tgt, V_VALID, 0.25f));
    keep(&o, d, flosses), keep(&o, d, flogits);
    tri_tensor m = vec(d, BIG, seed++), v = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, BIG),
                                                      ot_uniform(BIG, 0.0f, 1.0f, seed++));
    tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .grad_scale = 0.5f, .step = 3};
    OK(tri_op_adamw(d, x, y, m, v, &hp));
    keep(&o, d, x), keep(&o, d, m), keep(&o, d, v);
    /* SGD / LARS, LAMB's two phases and the trust ratio on the same buffers */
    tri_tensor tsums = ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, 8), ot_uniform(8, 0.1f, 1.0f, seed++));
    tri_tensor ratios = vec(d, 2, seed++);
    tri_trust_hparams th = {.kind = TRI_TRUST_LARS, .eta = 0.02f, .weight_decay = 0.1f, .u_scale = 0.5f};
    OK(tri_op_trust_ratio(d, ratios, tsums, 2, &th));
    keep(&o, d, ratios);
    tri_sgd_piece sp = {x, y, m, 0.1f, 1};
    tri_sgd_hparams sh = {.lr = 0.1f, .momentum = 0.9f, .grad_scale = 0.5f, .nesterov = true, .lars = true};
    OK(tri_op_sgd_multi(d, &sp, 1, ratios, &sh));
    tri_adamw_piece ap = {x, y, m, v, 0.1f};
    OK(tri_op_lamb_direction_multi(d, &ap, 1, &hp));
    OK(tri_op_lamb_update_multi(d, &sp, 1, ratios, 1e-3f));
    keep(&o, d, x), keep(&o, d, y), keep(&o, d, m), keep(&o, d, v);
    /* AdamW fused with the bf16 publish and the gradient zeroing (y zeroed, bf16 weights kept) */
    tri_tensor w16 = ot_tensor(d, tri_tensor_1d(NULL, TRI_BF16, BIG), NULL);
    OK(tri_op_adamw_fused_multi(d, &ap, &w16, 1, &hp));
    keep(&o, d, x), keep(&o, d, y), keep(&o, d, m), keep(&o, d, v), keep(&o, d, w16);
    OK(tri_op_zero(d, v));
    keep(&o, d, v);
    return o;
}

Test(ops_threads, every_op)
{
    outputs one = every_op(1);
    int counts[] = {2, 5};
    for (int k = 0; k < 2; k++) {
        outputs many = every_op(counts[k]);
        cr_assert_eq(many.n, one.n);
        size_t first = 0;
        while (first < one.n && one.bytes[first] == many.bytes[first])
            first++;
        cr_expect_eq(first, one.n, "every op: 1 and %d threads differ first at output byte %zu of %zu", counts[k],
                     first, one.n);
        free(many.bytes);
    }
    free(one.bytes);
}
