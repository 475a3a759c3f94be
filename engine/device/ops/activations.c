/* engine/device/ops/activations.c - the activation ops' checked wrappers: GELU (GPT-2's MLP; alone
 * and fused after a bias add) and SwiGLU (the Llama family's), forward and backward.
 *
 * Contracts in engine/device/ops_list.h. The CPU loops are activations_cpu.c; the CUDA ones
 * cuda/activations/ (gelu.cu, bias_gelu.cu, swiglu.cu; and the GELU epilogue of cuda/matmul/matmul.cu). */
#include "engine/device/ops_internal.h"

/* ---- GELU ---- */

int tri_op_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp)
{
    int rc = tri_need_float("gelu_forward", "inp", inp);
    if (!rc) rc = tri_need_float("gelu_forward", "out", out);
    if (!rc) rc = tri_need_numel("gelu_forward", "out", out, tri_tensor_numel(inp));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &inp, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, gelu_forward, out, inp));
}

int tri_op_gelu_backward(tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout)
{
    int rc = tri_need_float("gelu_backward", "inp", inp);
    if (!rc) rc = tri_need_float("gelu_backward", "dinp", dinp);
    if (!rc) rc = tri_need_float("gelu_backward", "dout", dout);
    if (!rc) rc = tri_need_numel("gelu_backward", "dinp", dinp, tri_tensor_numel(inp));
    if (!rc) rc = tri_need_numel("gelu_backward", "dout", dout, tri_tensor_numel(inp));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dinp, true);
    tri_widen_arg(&w, &inp, false);
    tri_widen_arg(&w, &dout, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, gelu_backward, dinp, inp, dout));
}

/* out (inp's numel) = gelu(inp + bias), bias (OC) broadcast over numel / OC rows. */
int tri_op_bias_gelu_forward(tri_device *d, tri_tensor out, tri_tensor inp, tri_tensor bias)
{
    const char *op = "bias_gelu_forward";
    char b[96], x[96];
    int rc = tri_need_float(op, "inp", inp);
    if (!rc) rc = tri_need_float(op, "bias", bias);
    if (!rc) rc = tri_need_float(op, "out", out);
    if (!rc) rc = tri_need_numel(op, "out", out, tri_tensor_numel(inp));
    int64_t OC = rc ? 0 : tri_tensor_numel(bias);
    if (!rc && (OC < 1 || tri_tensor_numel(inp) % OC != 0))
        rc = TRI_ERR(TRI_EINVAL, "%s: tensor 'bias' is %s: its numel (OC) must be at least 1 and divide inp's (%s)",
                     op, TRI_DESC(bias, b), TRI_DESC(inp, x));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &out, true);
    tri_widen_arg(&w, &inp, false);
    tri_widen_arg(&w, &bias, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, bias_gelu_forward, out, inp, bias));
}

/* ---- SwiGLU ---- */

/* gate_up (N, 2F) and an (N, F) tensor t named `name`. */
static int check_swiglu(const char *op, tri_tensor gate_up, tri_tensor t, const char *name)
{
    char x[96];
    int rc = tri_need_float(op, "gate_up", gate_up);
    if (!rc) rc = tri_need_float(op, name, t);
    if (!rc && tri_tensor_cols(gate_up) % 2 != 0)
        rc = TRI_ERR(TRI_EINVAL, "%s: gate_up %s must have an even last dimension ([gate | up])", op,
                     TRI_DESC(gate_up, x));
    if (!rc) rc = tri_need_matrix(op, name, t, tri_tensor_rows(gate_up), tri_tensor_cols(gate_up) / 2);
    return rc;
}

int tri_op_swiglu_forward(tri_device *d, tri_tensor out, tri_tensor gate_up)
{
    tri_widen wd = tri_widen_start(d, check_swiglu("swiglu_forward", gate_up, out, "out"));
    tri_widen_arg(&wd, &out, true);
    tri_widen_arg(&wd, &gate_up, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, swiglu_forward, out, gate_up));
}

int tri_op_swiglu_backward(tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout)
{
    const char *op = "swiglu_backward";
    int rc = check_swiglu(op, gate_up, dout, "dout");
    if (!rc) rc = tri_need_float(op, "dgate_up", dgate_up);
    if (!rc) rc = tri_need_matrix(op, "dgate_up", dgate_up, tri_tensor_rows(gate_up), tri_tensor_cols(gate_up));
    tri_widen wd = tri_widen_start(d, rc);
    tri_widen_arg(&wd, &dgate_up, true);
    tri_widen_arg(&wd, &gate_up, false);
    tri_widen_arg(&wd, &dout, false);
    return tri_widen_end(&wd, wd.rc ? 0 : TRI_DISPATCH(d, swiglu_backward, dgate_up, gate_up, dout));
}
