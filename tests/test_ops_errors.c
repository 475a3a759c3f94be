/* tests/test_ops_errors.c - argument checking of every tri_op_* wrapper.
 *
 * Backends may assume checked arguments (engine/device/device.h), so a wrapper that lets a wrong dtype, a
 * missing tensor or a wrong shape through becomes an out-of-bounds access in a kernel. And the
 * message is what a user sees when a layer is wired wrongly, so it must start with the op's name
 * and name the offending argument. For each wrapper: a wrong dtype, a missing tensor
 * (tri_tensor_none(), or a view of a NULL pointer) and mismatched shapes must give TRI_EINVAL with
 * "<op>: ..." naming the argument (tensor names are quoted: 'w'). Assertions are non-fatal
 * (cr_expect) so one run lists every wrong wrapper. fill and scale accept any shape, so they have
 * no shape case. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_errors, .init = tri_error_clear, .fini = ot_teardown);

/* Expects rc == TRI_EINVAL and a message "<op>: ...<arg>..."; clears the message for the next call
 * (so a wrapper that fails without a message cannot pass on a stale one). */
static void expect_einval(int rc, const char *op, const char *arg)
{
    const char *msg = tri_error_message();
    size_t len = strlen(op);
    cr_expect_eq(rc, TRI_EINVAL, "%s (%s): status %d (%s), expected EINVAL; message \"%s\"", op,
                 arg, rc, tri_status_name(rc), msg);
    cr_expect(strncmp(msg, op, len) == 0 && msg[len] == ':',
              "%s (%s): message does not start with \"%s:\": \"%s\"", op, arg, op, msg);
    cr_expect(strstr(msg, arg) != NULL, "%s: message does not name %s: \"%s\"", op, arg, msg);
    tri_error_clear();
}

/* The valid call that each case changes one argument of must pass: so each rejection is due to
 * the changed argument. */
static void expect_ok(int rc, const char *op)
{
    cr_expect_eq(rc, TRI_OK, "%s: valid arguments rejected: %s", op, tri_error_message());
    tri_error_clear();
}

/* Zero-filled device tensors of a given shape. */
static tri_tensor f32(tri_device *d, tri_tensor shape)
{
    shape.dtype = TRI_F32;
    return ot_tensor(d, shape, ot_floats((size_t)tri_tensor_numel(shape)));
}

static tri_tensor v1(tri_device *d, int64_t n)
{
    return f32(d, tri_tensor_1d(NULL, TRI_F32, n));
}

static tri_tensor m2(tri_device *d, int64_t r, int64_t c)
{
    return f32(d, tri_tensor_2d(NULL, TRI_F32, r, c));
}

static tri_tensor i32(tri_device *d, int64_t n)
{
    return ot_tensor(d, tri_tensor_1d(NULL, TRI_I32, n), ot_ints((size_t)n));
}

/* The same memory seen as i32: a wrong dtype with the right size. */
static tri_tensor as_i32(tri_tensor t)
{
    t.dtype = TRI_I32;
    return t;
}

static tri_tensor as_f32(tri_tensor t)
{
    t.dtype = TRI_F32;
    return t;
}

/* A view of the right shape with no memory behind it: also "missing". */
static tri_tensor no_data(tri_tensor t)
{
    t.data = NULL;
    return t;
}

static const int64_t N = 6, C = 4, OC = 5, V_l = 5;

Test(ops_errors, elementwise_and_reductions)
{
    tri_device *d = ot_device(1);
    tri_tensor x = m2(d, N, C), y = m2(d, N, C), other = v1(d, N * C + 1), one = v1(d, 1);
    tri_tensor none = tri_tensor_none();

    expect_ok(tri_op_fill(d, x, 1.0f), "fill");
    expect_einval(tri_op_fill(d, as_i32(x), 1.0f), "fill", "'x'");
    expect_einval(tri_op_fill(d, none, 1.0f), "fill", "'x'");

    expect_ok(tri_op_copy(d, x, y), "copy");
    expect_einval(tri_op_copy(d, as_i32(x), y), "copy", "dst");
    expect_einval(tri_op_copy(d, none, y), "copy", "dst");
    expect_einval(tri_op_copy(d, no_data(x), y), "copy", "dst");
    expect_einval(tri_op_copy(d, x, no_data(y)), "copy", "src");
    expect_einval(tri_op_copy(d, x, other), "copy", "src");

    expect_ok(tri_op_add(d, x, x, y), "add");
    expect_einval(tri_op_add(d, x, x, as_i32(y)), "add", "'b'");
    expect_einval(tri_op_add(d, x, none, y), "add", "'a'");
    expect_einval(tri_op_add(d, no_data(x), x, y), "add", "'out'");
    expect_einval(tri_op_add(d, x, x, other), "add", "'b'");

    expect_ok(tri_op_axpy(d, y, 2.0f, x), "axpy");
    expect_einval(tri_op_axpy(d, y, 2.0f, as_i32(x)), "axpy", "'x'");
    expect_einval(tri_op_axpy(d, none, 2.0f, x), "axpy", "'y'");
    expect_einval(tri_op_axpy(d, y, 2.0f, other), "axpy", "'x'");

    expect_ok(tri_op_scale(d, x, 2.0f), "scale");
    expect_einval(tri_op_scale(d, as_i32(x), 2.0f), "scale", "'x'");
    expect_einval(tri_op_scale(d, none, 2.0f), "scale", "'x'");

    expect_ok(tri_op_sum_squares(d, one, x), "sum_squares");
    expect_einval(tri_op_sum_squares(d, one, as_i32(x)), "sum_squares", "'x'");
    expect_einval(tri_op_sum_squares(d, none, x), "sum_squares", "'out'");
    expect_einval(tri_op_sum_squares(d, v1(d, 2), x), "sum_squares", "'out'");

    {
        tri_tensor xs[3] = {x, y, x}, slots2 = v1(d, 2);
        expect_ok(tri_op_sum_squares_multi(d, slots2, xs, (int64_t[]){1, 1, 0}, 3), "sum_squares_multi");
        expect_ok(tri_op_sum_squares_multi(d, slots2, xs, NULL, 0), "sum_squares_multi");
        expect_einval(tri_op_sum_squares_multi(d, slots2, xs, (int64_t[]){0, 2, 0}, 3), "sum_squares_multi",
                      "piece 1: slot 2");
        expect_einval(tri_op_sum_squares_multi(d, slots2, xs, (int64_t[]){0, -1, 0}, 3), "sum_squares_multi",
                      "piece 1: slot -1");
        expect_einval(tri_op_sum_squares_multi(d, slots2, xs, (int64_t[]){0, 1, 0}, 3), "sum_squares_multi",
                      "piece 2: slot 0 comes back");
        expect_einval(tri_op_sum_squares_multi(d, slots2, (tri_tensor[]){x, as_i32(y)}, (int64_t[]){0, 1}, 2),
                      "sum_squares_multi", "'xs[1]'");
        expect_einval(tri_op_sum_squares_multi(d, as_i32(slots2), xs, (int64_t[]){0, 1, 1}, 3), "sum_squares_multi",
                      "'out'");
    }

    expect_ok(tri_op_count_nonfinite(d, one, x), "count_nonfinite");
    expect_einval(tri_op_count_nonfinite(d, as_i32(one), x), "count_nonfinite", "'out'");
    expect_einval(tri_op_count_nonfinite(d, one, none), "count_nonfinite", "'x'");
    expect_einval(tri_op_count_nonfinite(d, x, x), "count_nonfinite", "'out'");
}

Test(ops_errors, matmul_and_bias_backward)
{
    tri_device *d = ot_device(1);
    tri_tensor inp = m2(d, N, C), w = m2(d, OC, C), out = m2(d, N, OC), bias = v1(d, OC);
    tri_tensor none = tri_tensor_none();
    const char *op = "matmul";

    expect_ok(tri_op_matmul(d, out, inp, w, bias, false, true, 0.0f), op);
    expect_einval(tri_op_matmul(d, out, inp, as_i32(w), bias, false, true, 0.0f), op, "'b'");
    expect_einval(tri_op_matmul(d, out, inp, w, as_i32(bias), false, true, 0.0f), op, "'bias'");
    expect_einval(tri_op_matmul(d, none, inp, w, bias, false, true, 0.0f), op, "'c'");
    expect_einval(tri_op_matmul(d, out, no_data(inp), w, bias, false, true, 0.0f), op, "'a'");
    expect_einval(tri_op_matmul(d, out, inp, w, bias, false, false, 0.0f), op, "inner dimensions");
    expect_einval(tri_op_matmul(d, m2(d, N, C), inp, w, bias, false, true, 0.0f), op, "'c'");
    expect_einval(tri_op_matmul(d, out, inp, w, v1(d, C), false, true, 0.0f), op, "'bias'");
    expect_einval(tri_op_matmul(d, out, inp, w, bias, false, true, 1.0f), op, "bias");

    op = "bias_backward";
    expect_ok(tri_op_bias_backward(d, bias, out), op);
    expect_einval(tri_op_bias_backward(d, bias, as_i32(out)), op, "'dout'");
    expect_einval(tri_op_bias_backward(d, none, out), op, "'dbias'");
    expect_einval(tri_op_bias_backward(d, v1(d, C), out), op, "'dbias'");
}

/* layernorm_backward with one argument replaced (the others valid). */
typedef struct ln_args {
    tri_tensor dinp, dw, db, dout, inp, w, mean, rstd;
} ln_args;

static int ln_backward(tri_device *d, ln_args a)
{
    return tri_op_layernorm_backward(d, a.dinp, a.dw, a.db, a.dout, a.inp, a.w, a.mean, a.rstd);
}

Test(ops_errors, layernorm)
{
    tri_device *d = ot_device(1);
    tri_tensor inp = m2(d, N, C), out = m2(d, N, C), w = v1(d, C), b = v1(d, C), mean = v1(d, N);
    tri_tensor rstd = v1(d, N), wide = m2(d, N, C + 1), tall = m2(d, N + 1, C);
    tri_tensor none = tri_tensor_none();
    const char *op = "layernorm_forward";

    expect_ok(tri_op_layernorm_forward(d, out, mean, rstd, inp, w, b), op);
    expect_einval(tri_op_layernorm_forward(d, out, mean, rstd, inp, as_i32(w), b), op, "'w'");
    expect_einval(tri_op_layernorm_forward(d, as_i32(out), mean, rstd, inp, w, b), op, "'out'");
    expect_einval(tri_op_layernorm_forward(d, out, mean, none, inp, w, b), op, "'rstd'");
    expect_einval(tri_op_layernorm_forward(d, out, mean, rstd, no_data(inp), w, b), op, "'inp'");
    expect_einval(tri_op_layernorm_forward(d, wide, mean, rstd, inp, w, b), op, "'out'");
    expect_einval(tri_op_layernorm_forward(d, out, v1(d, N + 1), rstd, inp, w, b), op, "'mean'");
    expect_einval(tri_op_layernorm_forward(d, out, mean, rstd, inp, w, v1(d, C + 1)), op, "'b'");

    op = "layernorm_backward";
    const ln_args ok = {m2(d, N, C), v1(d, C), v1(d, C), m2(d, N, C), inp, w, mean, rstd};
    ln_args a = ok;
    a.dout = as_i32(ok.dout);
    expect_einval(ln_backward(d, a), op, "'dout'");
    a = ok;
    a.dw = as_i32(ok.dw);
    expect_einval(ln_backward(d, a), op, "'dw'");
    a = ok;
    a.dw = none;
    expect_einval(ln_backward(d, a), op, "'dw'");
    a = ok;
    a.db = none;
    expect_einval(ln_backward(d, a), op, "'db'");
    a = ok;
    a.dinp = none;
    expect_einval(ln_backward(d, a), op, "'dinp'");
    a = ok;
    a.dw = v1(d, C + 1);
    expect_einval(ln_backward(d, a), op, "'dw'");
    a = ok;
    a.db = v1(d, 1);
    expect_einval(ln_backward(d, a), op, "'db'");
    a = ok;
    a.dinp = tall;
    expect_einval(ln_backward(d, a), op, "'dinp'");
    a = ok;
    a.dout = wide;
    expect_einval(ln_backward(d, a), op, "'dout'");
    expect_ok(ln_backward(d, ok), op);
}

/* The residual add fused into the norm after it: the add's arguments, an out that overlaps an input,
 * and the norm's arguments, in both forms. */
Test(ops_errors, residual_norms)
{
    tri_device *d = ot_device(1);
    tri_tensor res = m2(d, N, C), out = m2(d, N, C), a = m2(d, N, C), b = m2(d, N, C), w = v1(d, C);
    tri_tensor bias = v1(d, C), mean = v1(d, N), rstd = v1(d, N), wide = m2(d, N, C + 1);
    tri_tensor none = tri_tensor_none();
    const char *op = "add_layernorm_forward";
    expect_ok(tri_op_add_layernorm_forward(d, res, out, mean, rstd, a, b, w, bias), op);
    expect_ok(tri_op_add_layernorm_forward(d, a, out, mean, rstd, a, b, w, bias), op); /* res = a */
    expect_einval(tri_op_add_layernorm_forward(d, none, out, mean, rstd, a, b, w, bias), op, "'res'");
    expect_einval(tri_op_add_layernorm_forward(d, res, out, mean, rstd, as_i32(a), b, w, bias), op, "'a'");
    expect_einval(tri_op_add_layernorm_forward(d, res, out, mean, rstd, a, wide, w, bias), op, "'b'");
    expect_einval(tri_op_add_layernorm_forward(d, res, wide, mean, rstd, a, b, w, bias), op, "'out'");
    expect_einval(tri_op_add_layernorm_forward(d, res, res, mean, rstd, a, b, w, bias), op, "'out' overlaps 'res'");
    expect_einval(tri_op_add_layernorm_forward(d, res, b, mean, rstd, a, b, w, bias), op, "'out' overlaps 'b'");
    expect_einval(tri_op_add_layernorm_forward(d, res, out, mean, rstd, a, b, v1(d, C + 1), bias), op, "'w'");
    expect_einval(tri_op_add_layernorm_forward(d, res, out, mean, rstd, a, b, w, none), op, "'bias'");
    expect_einval(tri_op_add_layernorm_forward(d, res, out, v1(d, N + 1), rstd, a, b, w, bias), op, "'mean'");
    op = "add_rmsnorm_forward";
    expect_ok(tri_op_add_rmsnorm_forward(d, res, out, rstd, a, b, w, 1e-6f), op);
    expect_einval(tri_op_add_rmsnorm_forward(d, res, out, rstd, a, none, w, 1e-6f), op, "'b'");
    expect_einval(tri_op_add_rmsnorm_forward(d, res, a, rstd, a, b, w, 1e-6f), op, "'out' overlaps 'a'");
    expect_einval(tri_op_add_rmsnorm_forward(d, res, out, v1(d, N + 1), a, b, w, 1e-6f), op, "'rstd'");
    expect_einval(tri_op_add_rmsnorm_forward(d, res, out, rstd, a, b, w, 0.0f), op, "eps");
}

/* The per-head RMSNorm (Qwen3's q_norm / k_norm): the weights, the heads against the row width, rstd,
 * the head counts, eps, and backward's own arguments. */
Test(ops_errors, rmsnorm_heads)
{
    tri_device *d = ot_device(1);
    tri_tensor x = m2(d, 2, 40), out = m2(d, 2, 40), r = m2(d, 2, 3), w = v1(d, 8), dq = v1(d, 8), dk = v1(d, 8);
    const char *op = "rmsnorm_heads_forward";
    expect_ok(tri_op_rmsnorm_heads_forward(d, out, r, x, w, w, 2, 1, 1e-6f), op);
    expect_ok(tri_op_rmsnorm_heads_forward(d, x, r, x, w, w, 2, 1, 1e-6f), op); /* in place */
    expect_einval(tri_op_rmsnorm_heads_forward(d, out, r, x, w, v1(d, 7), 2, 1, 1e-6f), op, "'k_w'");
    expect_einval(tri_op_rmsnorm_heads_forward(d, out, r, x, w, as_i32(w), 2, 1, 1e-6f), op, "'k_w'");
    expect_einval(tri_op_rmsnorm_heads_forward(d, out, m2(d, 2, 6), x, w, w, 4, 2, 1e-6f), op,
                  "rows of 40 columns cannot hold NH 4 + NH_kv 2 heads of HS 8");
    expect_einval(tri_op_rmsnorm_heads_forward(d, out, r, x, w, w, 1, 1, 1e-6f), op, "'rstd'");
    expect_einval(tri_op_rmsnorm_heads_forward(d, out, r, x, w, w, 3, 0, 1e-6f), op, "NH_kv 0");
    expect_einval(tri_op_rmsnorm_heads_forward(d, m2(d, 2, 41), r, x, w, w, 2, 1, 1e-6f), op, "'out'");
    expect_einval(tri_op_rmsnorm_heads_forward(d, out, r, x, w, w, 2, 1, 0.0f), op, "eps");
    op = "rmsnorm_heads_backward";
    expect_ok(tri_op_rmsnorm_heads_backward(d, out, dq, dk, x, x, w, w, r, 2, 1), op);
    expect_einval(tri_op_rmsnorm_heads_backward(d, out, v1(d, 9), dk, x, x, w, w, r, 2, 1), op, "'dq_w'");
    expect_einval(tri_op_rmsnorm_heads_backward(d, out, dq, dk, m2(d, 2, 41), x, w, w, r, 2, 1), op, "'dout'");
    expect_einval(tri_op_rmsnorm_heads_backward(d, m2(d, 3, 40), dq, dk, x, x, w, w, r, 2, 1), op, "'dinp'");
}

Test(ops_errors, attention)
{
    tri_device *d = ot_device(1);
    const int64_t B = 2, T = 3, NH = 2, CH = 4; /* CH: C_l, HS = 2 */
    tri_tensor qkv = f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, 3 * CH));
    tri_tensor att = f32(d, tri_tensor_4d(NULL, TRI_F32, B, NH, T, T));
    tri_tensor out = f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, CH));
    tri_tensor dqkv = f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, 3 * CH));
    tri_tensor datt = f32(d, tri_tensor_4d(NULL, TRI_F32, B, NH, T, T));
    tri_tensor dout = f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, CH));
    /* att with a wrong T; att with NH_l = 3, which does not divide C_l = 4 */
    tri_tensor att_long = f32(d, tri_tensor_4d(NULL, TRI_F32, B, NH, T, T + 1));
    tri_tensor att_nh3 = f32(d, tri_tensor_4d(NULL, TRI_F32, B, 3, T, T));
    tri_tensor wide = m2(d, B * T, CH + 1);
    tri_tensor none = tri_tensor_none();
    const char *op = "attention_forward";

    expect_ok(tri_op_attention_forward(d, out, att, qkv), op);
    expect_einval(tri_op_attention_forward(d, out, att, as_i32(qkv)), op, "'qkv'");
    expect_einval(tri_op_attention_forward(d, out, none, qkv), op, "'att'");
    expect_einval(tri_op_attention_forward(d, no_data(out), att, qkv), op, "'out'");
    expect_einval(tri_op_attention_forward(d, out, att, m2(d, B * T, 3 * CH)), op, "qkv");
    expect_einval(tri_op_attention_forward(d, out, att_long, qkv), op, "att");
    expect_einval(tri_op_attention_forward(d, out, att_nh3, qkv), op, "att");
    expect_einval(tri_op_attention_forward(d, wide, att, qkv), op, "'out'");

    op = "attention_backward";
    expect_ok(tri_op_attention_backward(d, dqkv, datt, dout, qkv, att), op);
    expect_einval(tri_op_attention_backward(d, as_i32(dqkv), datt, dout, qkv, att), op, "'dqkv'");
    expect_einval(tri_op_attention_backward(d, dqkv, datt, as_i32(dout), qkv, att), op, "'dout'");
    expect_einval(tri_op_attention_backward(d, dqkv, none, dout, qkv, att), op, "'datt'");
    expect_einval(tri_op_attention_backward(d, dqkv, datt, none, qkv, att), op, "'dout'");
    expect_einval(tri_op_attention_backward(d, dqkv, datt, dout, qkv, none), op, "'att'");
    expect_einval(tri_op_attention_backward(d, v1(d, 5), datt, dout, qkv, att), op, "'dqkv'");
    expect_einval(tri_op_attention_backward(d, dqkv, v1(d, 5), dout, qkv, att), op, "'datt'");
    expect_einval(tri_op_attention_backward(d, dqkv, datt, wide, qkv, att), op, "'dout'");
}

Test(ops_errors, gelu)
{
    tri_device *d = ot_device(1);
    tri_tensor x = m2(d, N, C), y = m2(d, N, C), g = m2(d, N, C), short3 = v1(d, 3);
    tri_tensor none = tri_tensor_none();
    const char *op = "gelu_forward";

    expect_ok(tri_op_gelu_forward(d, y, x), op);
    expect_einval(tri_op_gelu_forward(d, y, as_i32(x)), op, "'inp'");
    expect_einval(tri_op_gelu_forward(d, none, x), op, "'out'");
    expect_einval(tri_op_gelu_forward(d, short3, x), op, "'out'");

    op = "gelu_backward";
    expect_ok(tri_op_gelu_backward(d, y, x, g), op);
    expect_einval(tri_op_gelu_backward(d, y, x, as_i32(g)), op, "'dout'");
    expect_einval(tri_op_gelu_backward(d, none, x, g), op, "'dinp'");
    expect_einval(tri_op_gelu_backward(d, y, x, short3), op, "'dout'");
    expect_einval(tri_op_gelu_backward(d, short3, x, g), op, "'dinp'");
}

Test(ops_errors, moe_dispatch_and_grouped_matmul)
{
    tri_device *d = ot_device(1);
    enum { K = 2, E = 3 };
    const int64_t P = N * K; /* N is a const object, not a constant expression (C11 6.6) */
    tri_tensor idx = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), ot_ints(P));
    tri_tensor rows = ot_tensor(d, tri_tensor_2d(NULL, TRI_I32, N, K), ot_ints(P)), sorted = i32(d, P), tpe = i32(d, E);
    tri_tensor x = m2(d, N, C), xp = m2(d, P, C), w = m2(d, N, K), dw = m2(d, N, K), short3 = v1(d, 3);
    tri_tensor none = tri_tensor_none();
    const char *op = "moe_permute_map";
    expect_ok(tri_op_moe_permute_map(d, rows, sorted, tpe, idx), op);
    expect_einval(tri_op_moe_permute_map(d, rows, sorted, tpe, as_f32(idx)), op, "'expert_idx'");
    expect_einval(tri_op_moe_permute_map(d, rows, short3, tpe, idx), op, "'sorted_indices'");
    expect_einval(tri_op_moe_permute_map(d, as_i32(short3), sorted, tpe, idx), op, "'row_id_map'");
    expect_einval(tri_op_moe_permute_map(d, rows, sorted, none, idx), op, "'tokens_per_expert'");
    op = "moe_permute";
    expect_ok(tri_op_moe_permute(d, xp, x, sorted), op);
    expect_einval(tri_op_moe_permute(d, xp, as_i32(x), sorted), op, "'x'");
    expect_einval(tri_op_moe_permute(d, m2(d, P, C + 1), x, sorted), op, "'x_perm'");
    expect_einval(tri_op_moe_permute(d, xp, x, as_f32(sorted)), op, "'sorted_indices'");
    op = "moe_permute_backward";
    expect_ok(tri_op_moe_permute_backward(d, x, xp, rows), op);
    expect_einval(tri_op_moe_permute_backward(d, x, m2(d, P - 1, C), rows), op, "'dx_perm'");
    expect_einval(tri_op_moe_permute_backward(d, x, xp, as_f32(rows)), op, "'row_id_map'");
    expect_einval(tri_op_moe_permute_backward(d, none, xp, rows), op, "'dx'");
    op = "moe_unpermute";
    expect_ok(tri_op_moe_unpermute(d, x, xp, rows, w), op);
    expect_einval(tri_op_moe_unpermute(d, x, xp, rows, short3), op, "'w'");
    expect_einval(tri_op_moe_unpermute(d, x, m2(d, P, C - 1), rows, w), op, "'y_perm'");
    expect_einval(tri_op_moe_unpermute(d, m2(d, N - 1, C), xp, rows, w), op, "'row_id_map'");
    op = "moe_unpermute_backward";
    expect_ok(tri_op_moe_unpermute_backward(d, xp, dw, x, xp, sorted, rows, w), op);
    expect_einval(tri_op_moe_unpermute_backward(d, xp, short3, x, xp, sorted, rows, w), op, "'dw'");
    expect_einval(tri_op_moe_unpermute_backward(d, short3, dw, x, xp, sorted, rows, w), op, "'dy_perm'");
    expect_einval(tri_op_moe_unpermute_backward(d, xp, dw, x, xp, short3, rows, w), op, "'sorted_indices'");
    expect_einval(tri_op_moe_unpermute_backward(d, xp, dw, x, xp, sorted, rows, as_i32(w)), op, "'w'");

    tri_tensor ew = f32(d, tri_tensor_3d(NULL, TRI_F32, E, OC, C)), out = m2(d, P, OC), dout = m2(d, P, OC);
    int32_t counts[E] = {4, 0, 5}, over[E] = {4, 0, 9}, neg[E] = {4, -1, 5};
    op = "grouped_matmul_forward";
    expect_ok(tri_op_grouped_matmul_forward(d, out, xp, ew, counts), op);
    expect_einval(tri_op_grouped_matmul_forward(d, out, xp, ew, over), op, "counts");
    expect_einval(tri_op_grouped_matmul_forward(d, out, xp, ew, neg), op, "counts[1]");
    expect_einval(tri_op_grouped_matmul_forward(d, out, xp, ew, NULL), op, "counts");
    expect_einval(tri_op_grouped_matmul_forward(d, out, xp, m2(d, OC, C), counts), op, "w");
    expect_einval(tri_op_grouped_matmul_forward(d, m2(d, P, OC + 1), xp, ew, counts), op, "'out'");
    expect_einval(tri_op_grouped_matmul_forward(d, out, m2(d, P, C + 1), ew, counts), op, "'x'");
    op = "grouped_matmul_backward_input";
    expect_ok(tri_op_grouped_matmul_backward_input(d, xp, dout, ew, counts, 0.0f), op);
    expect_einval(tri_op_grouped_matmul_backward_input(d, m2(d, P, C + 1), dout, ew, counts, 0.0f), op, "'dx'");
    expect_einval(tri_op_grouped_matmul_backward_input(d, xp, m2(d, P, OC - 1), ew, counts, 0.0f), op, "'dout'");
    expect_einval(tri_op_grouped_matmul_backward_input(d, xp, dout, ew, over, 0.0f), op, "counts");
    op = "grouped_matmul_backward_weight";
    expect_ok(tri_op_grouped_matmul_backward_weight(d, ew, dout, xp, counts, 1.0f), op);
    expect_einval(tri_op_grouped_matmul_backward_weight(d, m2(d, OC, C), dout, xp, counts, 1.0f), op, "dw");
    expect_einval(tri_op_grouped_matmul_backward_weight(d, ew, dout, m2(d, P, C + 2), counts, 1.0f), op, "'x'");
    expect_einval(tri_op_grouped_matmul_backward_weight(d, ew, as_i32(dout), xp, counts, 1.0f), op, "'dout'");
}

Test(ops_errors, bias_gelu)
{
    tri_device *d = ot_device(1);
    /* inp (N, C) with bias (C), a bias of N * C / 2 = 12 elements (divides too), 5 (does not) and 0 */
    tri_tensor x = m2(d, N, C), y = m2(d, N, C), b = v1(d, C), b12 = v1(d, N * C / 2), b5 = v1(d, 5);
    tri_tensor empty = tri_tensor_1d(b.data, TRI_F32, 0), short3 = v1(d, 3), none = tri_tensor_none();
    const char *op = "bias_gelu_forward";

    expect_ok(tri_op_bias_gelu_forward(d, y, x, b), op);
    expect_ok(tri_op_bias_gelu_forward(d, x, x, b12), op); /* in place, any OC that divides */
    expect_einval(tri_op_bias_gelu_forward(d, y, as_i32(x), b), op, "'inp'");
    expect_einval(tri_op_bias_gelu_forward(d, y, none, b), op, "'inp'");
    expect_einval(tri_op_bias_gelu_forward(d, y, x, as_i32(b)), op, "'bias'");
    expect_einval(tri_op_bias_gelu_forward(d, y, x, none), op, "'bias'");
    expect_einval(tri_op_bias_gelu_forward(d, y, x, no_data(b)), op, "'bias'");
    expect_einval(tri_op_bias_gelu_forward(d, as_i32(y), x, b), op, "'out'");
    expect_einval(tri_op_bias_gelu_forward(d, none, x, b), op, "'out'");
    expect_einval(tri_op_bias_gelu_forward(d, short3, x, b), op, "'out'");
    expect_einval(tri_op_bias_gelu_forward(d, y, x, b5), op, "'bias'");
    expect_einval(tri_op_bias_gelu_forward(d, y, x, empty), op, "'bias'");
}

Test(ops_errors, embeddings)
{
    tri_device *d = ot_device(1);
    const int64_t n_pos = 8, T = 3;
    tri_tensor tokens = i32(d, N), wte = m2(d, V_l, C), out = m2(d, N, C), dout = m2(d, N, C);
    tri_tensor wpe = m2(d, n_pos, C), wide = m2(d, N, C + 1), none = tri_tensor_none();
    const char *op = "embedding_forward";

    expect_ok(tri_op_embedding_forward(d, out, tokens, wte, 0), op);
    expect_einval(tri_op_embedding_forward(d, out, as_f32(tokens), wte, 0), op, "'tokens'");
    expect_einval(tri_op_embedding_forward(d, out, tokens, none, 0), op, "'wte'");
    expect_einval(tri_op_embedding_forward(d, wide, tokens, wte, 0), op, "'out'");
    expect_einval(tri_op_embedding_forward(d, out, i32(d, N + 1), wte, 0), op, "'out'");

    op = "embedding_backward";
    expect_ok(tri_op_embedding_backward(d, wte, dout, tokens, 0), op);
    expect_einval(tri_op_embedding_backward(d, wte, dout, as_f32(tokens), 0), op, "'tokens'");
    expect_einval(tri_op_embedding_backward(d, none, dout, tokens, 0), op, "'dwte'");
    expect_einval(tri_op_embedding_backward(d, wte, m2(d, N - 1, C), tokens, 0), op, "'dout'");

    op = "position_forward";
    expect_ok(tri_op_position_forward(d, out, wpe, T, 0, 1, 0), op);
    expect_einval(tri_op_position_forward(d, as_i32(out), wpe, T, 0, 1, 0), op, "'out'");
    expect_einval(tri_op_position_forward(d, out, none, T, 0, 1, 0), op, "'wpe'");
    expect_einval(tri_op_position_forward(d, out, m2(d, n_pos, C + 1), T, 0, 1, 0), op, "wpe");
    expect_einval(tri_op_position_forward(d, out, wpe, n_pos + 1, 0, 1, 0), op, "T 9");
    expect_einval(tri_op_position_forward(d, out, wpe, T, -1, 1, 0), op, "row0 -1");

    op = "position_backward";
    expect_ok(tri_op_position_backward(d, wpe, dout, T, 0, 1, 0), op);
    expect_einval(tri_op_position_backward(d, as_i32(wpe), dout, T, 0, 1, 0), op, "'dwpe'");
    expect_einval(tri_op_position_backward(d, wpe, none, T, 0, 1, 0), op, "'dout'");
    expect_einval(tri_op_position_backward(d, wpe, wide, T, 0, 1, 0), op, "dout");
}

Test(ops_errors, cross_entropy)
{
    tri_device *d = ot_device(1);
    tri_tensor logits = m2(d, N, V_l), dlogits = m2(d, N, V_l), maxes = v1(d, N);
    tri_tensor stats = m2(d, N, 2), targets = i32(d, N), losses = v1(d, N);
    tri_tensor short_maxes = v1(d, N - 1), tall_stats = m2(d, N + 1, 2), none = tri_tensor_none();
    const char *op = "ce_row_max";

    expect_ok(tri_op_ce_row_max(d, maxes, logits, V_l), op);
    expect_einval(tri_op_ce_row_max(d, maxes, as_i32(logits), V_l), op, "'logits'");
    expect_einval(tri_op_ce_row_max(d, none, logits, V_l), op, "'maxes'");
    expect_einval(tri_op_ce_row_max(d, short_maxes, logits, V_l), op, "'maxes'");
    expect_einval(tri_op_ce_row_max(d, maxes, logits, V_l + 1), op, "V_valid");

    op = "ce_sumexp_target";
    expect_ok(tri_op_ce_sumexp_target(d, stats, logits, maxes, targets, 0, V_l), op);
    expect_einval(tri_op_ce_sumexp_target(d, stats, logits, maxes, as_f32(targets), 0, V_l), op,
                  "'targets'");
    expect_einval(tri_op_ce_sumexp_target(d, none, logits, maxes, targets, 0, V_l), op, "'stats'");
    expect_einval(tri_op_ce_sumexp_target(d, tall_stats, logits, maxes, targets, 0, V_l), op,
                  "'stats'");
    expect_einval(tri_op_ce_sumexp_target(d, stats, logits, maxes, i32(d, N - 1), 0, V_l), op,
                  "'targets'");
    expect_einval(tri_op_ce_sumexp_target(d, stats, logits, maxes, targets, 0, -1), op, "V_valid");

    op = "ce_loss";
    expect_ok(tri_op_ce_loss(d, losses, maxes, stats), op);
    expect_einval(tri_op_ce_loss(d, as_i32(losses), maxes, stats), op, "'losses'");
    expect_einval(tri_op_ce_loss(d, losses, maxes, none), op, "'stats'");
    expect_einval(tri_op_ce_loss(d, losses, short_maxes, stats), op, "'maxes'");
    expect_einval(tri_op_ce_loss(d, losses, maxes, v1(d, N)), op, "'stats'");

    op = "ce_backward";
    tri_tensor t = targets, wide = m2(d, N, V_l + 1);
    expect_ok(tri_op_ce_backward(d, dlogits, logits, maxes, stats, t, 0, V_l, 1.0f), op);
    expect_einval(tri_op_ce_backward(d, dlogits, logits, maxes, stats, as_f32(t), 0, V_l, 1.0f), op,
                  "'targets'");
    expect_einval(tri_op_ce_backward(d, none, logits, maxes, stats, t, 0, V_l, 1.0f), op,
                  "'dlogits'");
    expect_einval(tri_op_ce_backward(d, wide, logits, maxes, stats, t, 0, V_l, 1.0f), op,
                  "'dlogits'");
    expect_einval(tri_op_ce_backward(d, dlogits, logits, maxes, tall_stats, t, 0, V_l, 1.0f), op,
                  "'stats'");
    expect_einval(tri_op_ce_backward(d, dlogits, logits, maxes, stats, t, 0, V_l + 1, 1.0f), op,
                  "V_valid");

    op = "ce_fused";
    expect_ok(tri_op_ce_fused(d, losses, dlogits, logits, t, V_l, 1.0f), op);
    expect_ok(tri_op_ce_fused(d, losses, logits, logits, t, V_l, 1.0f), op);
    expect_ok(tri_op_ce_fused(d, losses, none, logits, t, V_l, 1.0f), op);
    expect_einval(tri_op_ce_fused(d, losses, dlogits, as_i32(logits), t, V_l, 1.0f), op, "'logits'");
    expect_einval(tri_op_ce_fused(d, none, dlogits, logits, t, V_l, 1.0f), op, "'losses'");
    expect_einval(tri_op_ce_fused(d, short_maxes, dlogits, logits, t, V_l, 1.0f), op, "'losses'");
    expect_einval(tri_op_ce_fused(d, losses, dlogits, logits, as_f32(t), V_l, 1.0f), op, "'targets'");
    expect_einval(tri_op_ce_fused(d, losses, dlogits, logits, i32(d, N - 1), V_l, 1.0f), op, "'targets'");
    expect_einval(tri_op_ce_fused(d, losses, wide, logits, t, V_l, 1.0f), op, "'dlogits'");
    expect_einval(tri_op_ce_fused(d, losses, as_i32(dlogits), logits, t, V_l, 1.0f), op, "'dlogits'");
    expect_einval(tri_op_ce_fused(d, losses, dlogits, logits, t, -1, 1.0f), op, "V_valid");
    /* in place is the same data and dtype; rows 1.. of one buffer overlap rows 0.. without being them */
    tri_tensor rows = m2(d, N + 1, V_l), as_bf16 = logits;
    as_bf16.dtype = TRI_BF16;
    expect_einval(tri_op_ce_fused(d, losses, tri_tensor_slice0(rows, 1, N), tri_tensor_slice0(rows, 0, N), t, V_l,
                                  1.0f), op, "'dlogits' overlaps");
    expect_einval(tri_op_ce_fused(d, losses, as_bf16, logits, t, V_l, 1.0f), op, "'dlogits' is the logits' memory");
}

/* The momentum, LAMB and trust-ratio wrappers name the piece and the tensor. */
Test(ops_errors, sgd_lamb_trust_ratio)
{
    tri_device *d = ot_device(1);
    const int64_t n = 7;
    tri_tensor p = v1(d, n), g = v1(d, n), b = v1(d, n), v = v1(d, n), r = v1(d, 2), none = tri_tensor_none();
    tri_sgd_hparams sh = {.lr = 0.1f, .momentum = 0.9f, .grad_scale = 1.0f};
    tri_sgd_piece sp[2] = {{p, g, b, 0.1f, -1}, {p, g, b, 0.0f, 1}};
    expect_ok(tri_op_sgd_multi(d, sp, 2, r, &sh), "sgd_multi");
    sp[1].buf = as_i32(b);
    expect_einval(tri_op_sgd_multi(d, sp, 2, r, &sh), "sgd_multi piece 1", "'buf'");
    sp[1].buf = b;
    sp[0].grad = v1(d, n + 1);
    expect_einval(tri_op_sgd_multi(d, sp, 2, r, &sh), "sgd_multi piece 0", "'grad'");
    sp[0].grad = g;
    expect_einval(tri_op_sgd_multi(d, sp, 2, none, &sh), "sgd_multi piece 1", "ratio index 1");
    expect_einval(tri_op_lamb_update_multi(d, sp, 2, as_i32(r), 0.1f), "lamb_update_multi", "'ratios'");
    tri_adamw_piece ap = {p, g, b, none, 0.1f};
    tri_adamw_hparams hp = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .grad_scale = 1.0f, .step = 1};
    expect_einval(tri_op_lamb_direction_multi(d, &ap, 1, &hp), "lamb_direction_multi piece 0", "'v'");
    ap.v = v;
    expect_ok(tri_op_lamb_direction_multi(d, &ap, 1, &hp), "lamb_direction_multi");
    tri_trust_hparams th = {.kind = TRI_TRUST_LAMB, .u_scale = 1.0f};
    expect_ok(tri_op_trust_ratio(d, r, v1(d, 4), 1, &th), "trust_ratio");
    expect_einval(tri_op_trust_ratio(d, r, v1(d, 5), 1, &th), "trust_ratio", "'sums'");
    expect_einval(tri_op_trust_ratio(d, r, v1(d, 4), 0, &th), "trust_ratio", "span 0");
    th.kind = (tri_trust_kind)7;
    expect_einval(tri_op_trust_ratio(d, r, v1(d, 4), 1, &th), "trust_ratio", "kind 7");
}

Test(ops_errors, adamw)
{
    tri_device *d = ot_device(1);
    const int64_t n = 7;
    tri_tensor p = v1(d, n), g = v1(d, n), m = v1(d, n), v = v1(d, n), none = tri_tensor_none();
    tri_adamw_hparams hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                            .weight_decay = 0.1f, .grad_scale = 1.0f, .step = 1};

    expect_ok(tri_op_adamw(d, p, g, m, v, &hp), "adamw");
    expect_einval(tri_op_adamw(d, p, g, as_i32(m), v, &hp), "adamw", "'m'");
    expect_einval(tri_op_adamw(d, p, g, m, none, &hp), "adamw", "'v'");
    expect_einval(tri_op_adamw(d, p, v1(d, n + 1), m, v, &hp), "adamw", "'grad'");
    expect_einval(tri_op_adamw(d, no_data(p), g, m, v, &hp), "adamw", "'param'");
    tri_adamw_piece pieces[2] = {{p, g, m, v, 0.1f}, {p, g, m, v, 0.0f}};
    expect_ok(tri_op_adamw_multi(d, pieces, 2, &hp), "adamw_multi piece");
    expect_ok(tri_op_adamw_multi(d, pieces, 0, &hp), "adamw_multi piece");
    pieces[1].m = as_i32(m);
    expect_einval(tri_op_adamw_multi(d, pieces, 2, &hp), "adamw_multi piece 1", "'m'");
    pieces[1].m = m;
    pieces[0].grad = v1(d, n + 1);
    expect_einval(tri_op_adamw_multi(d, pieces, 2, &hp), "adamw_multi piece 0", "'grad'");
    pieces[0].grad = g;
    hp.step = 0;
    expect_einval(tri_op_adamw(d, p, g, m, v, &hp), "adamw", "step");
    expect_einval(tri_op_adamw_multi(d, pieces, 2, &hp), "adamw_multi piece 0", "step");
}

/* The split-sequence attention ops (context parallelism): each refusal names its argument. */
Test(ops_errors, flash_attention_kv)
{
    tri_device *d = ot_device(1);
    const int64_t B = 2, T = 128, NH = 2, CH = 8; /* HS 4, one key/value head: W = 8 + 8 */
    tri_tensor qkv = f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, CH + 8));
    tri_tensor kv = f32(d, tri_tensor_3d(NULL, TRI_F32, B, 2 * T, 8));
    tri_tensor out = f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, CH));
    tri_tensor lse = f32(d, tri_tensor_3d(NULL, TRI_F32, B, NH, T)), delta = f32(d, tri_tensor_3d(NULL, TRI_F32, B, NH, T));
    tri_tensor dqkv = f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, CH + 8));
    tri_tensor dkv = f32(d, tri_tensor_3d(NULL, TRI_F32, B, 2 * T, 8));
    tri_flash_rows qr = {64, 0, 192}, kr = tri_flash_rows_whole(2 * T), q_odd = {40, 0, 192}, k_off = {256, 8, 264};
    const char *op = "flash_attention_kv_forward";
    expect_ok(tri_op_flash_attention_kv_forward(d, out, lse, qkv, kv, qr, kr), op);
    expect_einval(tri_op_flash_attention_kv_forward(d, out, lse, qkv, as_i32(kv), qr, kr), op, "'kv'");
    expect_einval(tri_op_flash_attention_kv_forward(d, out, lse, qkv, f32(d, tri_tensor_3d(NULL, TRI_F32, B, T, 6)),
                                                    qr, kr), op, "kv");
    expect_einval(tri_op_flash_attention_kv_forward(d, out, lse, qkv, kv, q_odd, kr), op, "qrows");
    expect_einval(tri_op_flash_attention_kv_forward(d, out, lse, qkv, kv, qr, k_off), op, "krows");
    expect_einval(tri_op_flash_attention_kv_forward(d, out, as_i32(lse), qkv, kv, qr, kr), op, "'lse'");
    op = "flash_attention_delta";
    expect_ok(tri_op_flash_attention_delta(d, delta, out, out), op);
    expect_einval(tri_op_flash_attention_delta(d, as_i32(delta), out, out), op, "'delta'");
    expect_einval(tri_op_flash_attention_delta(d, delta, out, v1(d, 5)), op, "out");
    op = "flash_attention_kv_backward_dq";
    expect_ok(tri_op_flash_attention_kv_backward_dq(d, dqkv, out, qkv, kv, lse, delta, qr, kr, false), op);
    expect_einval(tri_op_flash_attention_kv_backward_dq(d, v1(d, 5), out, qkv, kv, lse, delta, qr, kr, false), op,
                  "'dqkv'");
    expect_einval(tri_op_flash_attention_kv_backward_dq(d, dqkv, out, qkv, kv, lse, v1(d, 5), qr, kr, false), op,
                  "'delta'");
    op = "flash_attention_kv_backward_dkv";
    expect_ok(tri_op_flash_attention_kv_backward_dkv(d, dkv, out, qkv, kv, lse, delta, qr, kr, false), op);
    expect_einval(tri_op_flash_attention_kv_backward_dkv(d, v1(d, 5), out, qkv, kv, lse, delta, qr, kr, false), op,
                  "'dkv'");
    op = "flash_attention_kv_backward";
    expect_ok(tri_op_flash_attention_kv_backward(d, dqkv, dkv, out, qkv, kv, lse, delta, qr, kr, false), op);
    expect_einval(tri_op_flash_attention_kv_backward(d, v1(d, 5), dkv, out, qkv, kv, lse, delta, qr, kr, false), op,
                  "'dqkv'");
    expect_einval(tri_op_flash_attention_kv_backward(d, dqkv, v1(d, 5), out, qkv, kv, lse, delta, qr, kr, false), op,
                  "'dkv'");
    op = "flash_attention_merge";
    expect_ok(tri_op_flash_attention_merge(d, out, lse, out, delta), op);
    expect_einval(tri_op_flash_attention_merge(d, out, lse, v1(d, 5), delta), op, "'out2'");
    expect_einval(tri_op_flash_attention_merge(d, out, lse, out, as_i32(delta)), op, "'lse2'");
    op = "copy_columns";
    expect_ok(tri_op_copy_columns(d, dkv, 0, kv, 0, 8), op);
    expect_einval(tri_op_copy_columns(d, dkv, 1, kv, 0, 8), op, "dst");
    expect_einval(tri_op_copy_columns(d, dkv, 0, qkv, 0, 8), op, "rows");
}

/* int64 zeros of a shape: exact gradients (deterministic mode). */
static tri_tensor i64s(tri_device *d, tri_tensor shape)
{
    shape.dtype = TRI_I64;
    return ot_tensor(d, shape, ot_doubles((size_t)tri_tensor_numel(shape)));
}

/* Exact weight gradients (deterministic mode, engine/device/ops/exact_grads.c): an int64 gradient
 * needs the device's exact scratch (the message names the setter), one long enough for the op's
 * gradients; an op's gradients are all int64 or all floating; matmul's int64 c is only c += a^T b;
 * the setter takes an f32 scratch, an f32 bad (1) and bits in [0, 60]; and the arguments the exact
 * path cuts into 64-row views are checked whole first (a view cannot tell a short tensor). */
Test(ops_errors, exact_grads)
{
    tri_device *d = ot_device(1);
    tri_tensor x = m2(d, N, C), dout = m2(d, N, C), dinp = m2(d, N, C), w = v1(d, C), mean = v1(d, N), rstd = v1(d, N);
    tri_tensor dw = i64s(d, tri_tensor_1d(NULL, TRI_I64, C)), db = i64s(d, tri_tensor_1d(NULL, TRI_I64, C));
    tri_tensor cw = i64s(d, tri_tensor_2d(NULL, TRI_I64, C, C)), out = m2(d, N, OC), dbias = i64s(d, ot_v1(OC));
    tri_tensor tokens = i32(d, N), dwte = i64s(d, ot_m2(V_l, C)), dwpe = i64s(d, ot_m2(8, C)), none = tri_tensor_none();
    tri_tensor hx = m2(d, 2, 40), hr = m2(d, 2, 3), hw = v1(d, 8), dq = i64s(d, ot_v1(8)), dk = i64s(d, ot_v1(8));
    tri_tensor xp = m2(d, 2 * N, C), dp = m2(d, 2 * N, OC), gw = i64s(d, tri_tensor_3d(NULL, TRI_I64, 3, OC, C));
    const int32_t counts[3] = {4, 0, 5};
    const char *set = "tri_device_set_exact_grads";

    /* no scratch set */
    expect_einval(tri_op_matmul(d, cw, x, x, none, true, false, 1.0f), "matmul", set);
    expect_einval(tri_op_bias_backward(d, dbias, out), "bias_backward", set);
    expect_einval(tri_op_layernorm_backward(d, dinp, dw, db, dout, x, w, mean, rstd), "layernorm_backward", set);
    expect_einval(tri_op_rmsnorm_backward(d, dinp, dw, dout, x, w, rstd), "rmsnorm_backward", set);
    expect_einval(tri_op_rmsnorm_heads_backward(d, m2(d, 2, 40), dq, dk, hx, hx, hw, hw, hr, 2, 1),
                  "rmsnorm_heads_backward", set);
    expect_einval(tri_op_embedding_backward(d, dwte, dout, tokens, 0), "embedding_backward", set);
    expect_einval(tri_op_position_backward(d, dwpe, dout, 3, 0, 1, 0), "position_backward", set);
    expect_einval(tri_op_grouped_matmul_backward_weight(d, gw, dp, xp, counts, 1.0f), "grouped_matmul_backward_weight",
                  set);

    /* the setter's arguments */
    tri_tensor scratch = v1(d, 3 * OC * C), bad = v1(d, 1);
    expect_einval(tri_device_set_exact_grads(d, as_i32(scratch), bad, 44), "set_exact_grads", "'scratch'");
    expect_einval(tri_device_set_exact_grads(d, scratch, v1(d, 2), 44), "set_exact_grads", "'bad'");
    expect_einval(tri_device_set_exact_grads(d, scratch, none, 44), "set_exact_grads", "'bad'");
    expect_einval(tri_device_set_exact_grads(d, scratch, bad, 61), "set_exact_grads", "61 fraction bits");
    expect_einval(tri_device_set_exact_grads(d, scratch, bad, -1), "set_exact_grads", "-1 fraction bits");

    /* a scratch shorter than the op's gradients (2 C = 8 for layernorm's dw and db) */
    expect_ok(tri_device_set_exact_grads(d, v1(d, C + 1), bad, 44), "set_exact_grads");
    expect_einval(tri_op_layernorm_backward(d, dinp, dw, db, dout, x, w, mean, rstd), "layernorm_backward",
                  "exact scratch");
    expect_einval(tri_op_matmul(d, cw, x, x, none, true, false, 1.0f), "matmul", "exact scratch");

    /* with a scratch: each op's valid call, then one argument changed */
    expect_ok(tri_device_set_exact_grads(d, scratch, bad, 44), "set_exact_grads");
    expect_ok(tri_op_layernorm_backward(d, dinp, dw, db, dout, x, w, mean, rstd), "layernorm_backward");
    expect_einval(tri_op_layernorm_backward(d, dinp, dw, v1(d, C), dout, x, w, mean, rstd), "layernorm_backward",
                  "all be int64");
    expect_einval(tri_op_layernorm_backward(d, dinp, dw, db, m2(d, N - 1, C), x, w, mean, rstd),
                  "layernorm_backward", "'dout'");
    expect_einval(tri_op_layernorm_backward(d, m2(d, N - 1, C), dw, db, dout, x, w, mean, rstd),
                  "layernorm_backward", "'dinp'");
    expect_einval(tri_op_layernorm_backward(d, dinp, dw, db, dout, x, w, v1(d, N - 1), rstd), "layernorm_backward",
                  "'mean'");
    expect_einval(tri_op_layernorm_backward(d, dinp, i64s(d, ot_v1(C + 1)), db, dout, x, w, mean, rstd),
                  "layernorm_backward", "'dw'");

    expect_ok(tri_op_rmsnorm_backward(d, dinp, dw, dout, x, w, rstd), "rmsnorm_backward");
    expect_einval(tri_op_rmsnorm_backward(d, dinp, dw, m2(d, N - 1, C), x, w, rstd), "rmsnorm_backward", "'dout'");
    expect_einval(tri_op_rmsnorm_backward(d, dinp, dw, dout, x, w, v1(d, N - 1)), "rmsnorm_backward", "'rstd'");

    {
        const char *op = "rmsnorm_heads_backward";
        expect_ok(tri_op_rmsnorm_heads_backward(d, m2(d, 2, 40), dq, dk, hx, hx, hw, hw, hr, 2, 1), op);
        expect_einval(tri_op_rmsnorm_heads_backward(d, m2(d, 2, 40), dq, v1(d, 8), hx, hx, hw, hw, hr, 2, 1), op,
                      "all be int64");
        expect_einval(tri_op_rmsnorm_heads_backward(d, m2(d, 2, 40), dq, dk, m2(d, 1, 40), hx, hw, hw, hr, 2, 1), op,
                      "'dout'");
    }

    expect_ok(tri_op_matmul(d, cw, x, x, none, true, false, 1.0f), "matmul");
    expect_einval(tri_op_matmul(d, cw, x, x, none, true, true, 1.0f), "matmul", "trans_b 1");
    expect_einval(tri_op_matmul(d, cw, x, x, none, true, false, 0.0f), "matmul", "beta 0");
    expect_einval(tri_op_matmul(d, cw, x, x, none, false, false, 1.0f), "matmul", "trans_a 0");
    expect_einval(tri_op_matmul(d, cw, x, m2(d, N - 1, C), none, true, false, 1.0f), "matmul", "inner dimensions");
    expect_einval(tri_op_matmul(d, i64s(d, ot_m2(C, C + 1)), x, x, none, true, false, 1.0f), "matmul", "'c'");

    expect_ok(tri_op_bias_backward(d, dbias, out), "bias_backward");
    expect_einval(tri_op_bias_backward(d, i64s(d, ot_v1(OC + 1)), out), "bias_backward", "'dbias'");

    expect_ok(tri_op_embedding_backward(d, dwte, dout, tokens, 0), "embedding_backward");
    expect_einval(tri_op_embedding_backward(d, dwte, m2(d, N - 1, C), tokens, 0), "embedding_backward", "'dout'");
    expect_einval(tri_op_embedding_backward(d, dwte, dout, as_f32(tokens), 0), "embedding_backward", "'tokens'");

    expect_ok(tri_op_position_backward(d, dwpe, dout, 3, 0, 1, 0), "position_backward");
    expect_einval(tri_op_position_backward(d, dwpe, dout, 9, 0, 1, 0), "position_backward", "T 9");

    expect_ok(tri_op_grouped_matmul_backward_weight(d, gw, dp, xp, counts, 1.0f), "grouped_matmul_backward_weight");
    expect_einval(tri_op_grouped_matmul_backward_weight(d, gw, dp, xp, counts, 0.0f), "grouped_matmul_backward_weight",
                  "beta 0");
}
