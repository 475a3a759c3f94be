/* bench/cuda/cp_attention_cuda.c - the cut-sequence attention ops on a GPU (context parallelism):
 * ms per forward + backward of one cp rank against the uncut op.
 *
 * For each requested sequence length T and cp, times what one cp rank's attention runs per layer in
 * layers/cp_attention.c's all_gather algorithm (Megatron-Core's split: rank r holds global chunks r
 * and 2 cp - 1 - r of Tc = T / (2 cp) rows): flash_attention_kv_forward of its 2 Tc queries against
 * the gathered (B, T, 2 C_kv) keys and values, flash_attention_delta, _kv_backward_dq and
 * _kv_backward_dkv (dkv in the operands' precision, or fp32 with --dkv-f32, as the all_gather
 * backward's partials are); and flash_attention_forward + _backward of the whole T on one device.
 * The communication is not timed (bench/ measures it on ranks). Prints ms, the rank's share of the
 * uncut time (ideal 1 / cp: the causal work is balanced), and how many kv calls took the tiled
 * kernels (cuda/attention/flash_mma.cu; the rest ran the simple twins, a thread per row).
 * bench/cuda/cp_attention.sh runs the check a GPU session should run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/cuda/bench_device.h"
#include "cuda/device_cuda.h"
#include "engine/core/clock.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "tools/cli/flags.h"

/* A device tensor of `shape` filled with uniform [-1, 1) values (bf16 or f32 as shape.dtype). */
static int put(tri_device *d, tri_tensor *t, tri_tensor shape, void **mem, uint64_t seed)
{
    return tri_bench_device_uniform(d, t, shape, mem, seed, "bench_cuda_cp_attention");
}

/* tensors of one timed problem: q|k|v (B, T_l, W), kv (B, Tk, 2 C_kv), out, dout (B, T_l, C),
 * dqkv (B, T_l, W), dkv (kv's shape), lse, delta (B, NH, T_l) */
enum { T_QKV, T_KV, T_OUT, T_DOUT, T_DQKV, T_DKV, T_LSE, T_DELTA, N_T };

/* Best ms of `iters` forward + backward after one warm-up: the uncut ops (cut false) or the kv ops
 * of rows qr against the gathered keys. */
static int time_pass(tri_device *d, const tri_tensor *t, bool cut, tri_flash_rows qr, tri_flash_rows kr, int iters,
                     double *ms)
{
    double best = 1e30;
    for (int it = 0; it <= iters; it++) {
        int rc = tri_device_sync(d);
        double t0 = tri_now_s();
        if (!cut) {
            if (!rc) rc = tri_op_flash_attention_forward(d, t[T_OUT], t[T_LSE], t[T_QKV]);
            if (!rc)
                rc = tri_op_flash_attention_backward(d, t[T_DQKV], t[T_DELTA], t[T_DOUT], t[T_QKV], t[T_OUT],
                                                     t[T_LSE]);
        } else {
            if (!rc) rc = tri_op_flash_attention_kv_forward(d, t[T_OUT], t[T_LSE], t[T_QKV], t[T_KV], qr, kr);
            if (!rc) rc = tri_op_flash_attention_delta(d, t[T_DELTA], t[T_DOUT], t[T_OUT]);
            if (!rc)
                rc = tri_op_flash_attention_kv_backward_dq(d, t[T_DQKV], t[T_DOUT], t[T_QKV], t[T_KV], t[T_LSE],
                                                           t[T_DELTA], qr, kr, false);
            if (!rc)
                rc = tri_op_flash_attention_kv_backward_dkv(d, t[T_DKV], t[T_DOUT], t[T_QKV], t[T_KV], t[T_LSE],
                                                            t[T_DELTA], qr, kr, false);
        }
        if (!rc) rc = tri_device_sync(d);
        if (rc)
            return rc;
        double dt = (tri_now_s() - t0) * 1e3;
        if (it > 0 && dt < best)
            best = dt;
    }
    *ms = best;
    return TRI_OK;
}

/* The problem of T_l query rows (T_l = T uncut) against Tk gathered keys; its ms. */
static int run(tri_device *d, tri_dtype dt, bool dkv_f32, int64_t B, int64_t NH, int64_t NH_kv, int64_t HS,
               int64_t T_l, int64_t Tk, bool cut, tri_flash_rows qr, tri_flash_rows kr, int iters, double *ms)
{
    int64_t C = NH * HS, KV = 2 * NH_kv * HS, W = C + KV;
    tri_tensor t[N_T];
    void *mem[N_T] = {0};
    int rc = put(d, &t[T_QKV], tri_tensor_3d(NULL, dt, B, T_l, W), &mem[T_QKV], 1);
    if (!rc && cut) rc = put(d, &t[T_KV], tri_tensor_3d(NULL, dt, B, Tk, KV), &mem[T_KV], 2);
    if (!rc) rc = put(d, &t[T_OUT], tri_tensor_3d(NULL, dt, B, T_l, C), &mem[T_OUT], 3);
    if (!rc) rc = put(d, &t[T_DOUT], tri_tensor_3d(NULL, dt, B, T_l, C), &mem[T_DOUT], 4);
    if (!rc) rc = put(d, &t[T_DQKV], tri_tensor_3d(NULL, dt, B, T_l, W), &mem[T_DQKV], 5);
    if (!rc && cut) rc = put(d, &t[T_DKV], tri_tensor_3d(NULL, dkv_f32 ? TRI_F32 : dt, B, Tk, KV), &mem[T_DKV], 6);
    if (!rc) rc = put(d, &t[T_LSE], tri_tensor_3d(NULL, TRI_F32, B, NH, T_l), &mem[T_LSE], 7);
    if (!rc) rc = put(d, &t[T_DELTA], tri_tensor_3d(NULL, TRI_F32, B, NH, T_l), &mem[T_DELTA], 8);
    if (!rc) rc = time_pass(d, t, cut, qr, kr, iters, ms);
    for (int i = 0; i < N_T; i++)
        if (mem[i])
            tri_device_free(d, mem[i]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *t_list = "32768,65536", *cp_list = "2,4";
    int iters = 5, B = 1, NH = 16, NH_kv = 4, HS = 128;
    bool fp32 = false, dkv_f32 = false, simple = false;
    tri_flag flags[] = {
        {"seq-lengths", TRI_FLAG_STRING, &t_list, "comma-separated sequence lengths T (each a multiple of 128 cp)", 0, 0, NULL, false},
        {"context-parallel-sizes", TRI_FLAG_STRING, &cp_list, "comma-separated cp values", 0, 0, NULL, false},
        {"micro-batch-size", TRI_FLAG_INT, &B, "B sequences", 1, 1 << 20, NULL, false},
        {"num-attention-heads", TRI_FLAG_INT, &NH, "query heads", 1, 1 << 16, NULL, false},
        {"num-query-groups", TRI_FLAG_INT, &NH_kv, "key/value heads (divides the query heads)", 1, 1 << 16, NULL, false},
        {"head-size", TRI_FLAG_INT, &HS, "head size (the tiled kernels: 32, 64, 80, 96, 128)", 1, 1024, NULL, false},
        {"iters", TRI_FLAG_INT, &iters, "timed repetitions (the best is printed)", 1, 1 << 20, NULL, false},
        {"fp32", TRI_FLAG_BOOL, &fp32, "fp32 tensors (the CUDA cores) instead of bf16 (the tensor cores)", 0, 0, NULL, false},
        {"dkv-f32", TRI_FLAG_BOOL, &dkv_f32, "dk, dv in fp32 (the all_gather backward's partials)", 0, 0, NULL, false},
        {"simple", TRI_FLAG_BOOL, &simple, "the simple kernel forms (the twins; slow at long T)", 0, 0, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (!rc && NH % NH_kv != 0)
        rc = TRI_ERR(TRI_EINVAL, "--num-query-groups %d must divide --num-attention-heads %d", NH_kv, NH);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_cuda_cp_attention: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_cuda_cp_attention",
                        "Context parallelism's attention ops on a GPU: ms of one cp rank's forward + backward "
                        "against the uncut fused attention.");
        return rc ? 2 : 0;
    }
    tri_device *d = NULL;
    if (tri_bench_cuda_open("bench_cuda_cp_attention", &d))
        return 1;
    rc = tri_cuda_set_simple_kernels(d, simple);
    tri_dtype dt = fp32 ? TRI_F32 : TRI_BF16;
    char *ts = rc ? NULL : strdup(t_list), *s1 = NULL;
    for (char *tt = ts ? strtok_r(ts, ",", &s1) : NULL; tt && !rc; tt = strtok_r(NULL, ",", &s1)) {
        int64_t T = atoll(tt);
        double uncut = 0.0;
        tri_flash_rows all = tri_flash_rows_whole(T);
        rc = run(d, dt, false, B, NH, NH_kv, HS, T, T, false, all, all, iters, &uncut);
        if (rc)
            break;
        printf("T %lld B %lld NH %d/%d HS %d %s | uncut forward + backward %.3f ms\n", (long long)T, (long long)B, NH,
               NH_kv, HS, fp32 ? "fp32" : "bf16", uncut);
        char *cs = strdup(cp_list), *s2 = NULL;
        for (char *c = cs ? strtok_r(cs, ",", &s2) : NULL; c && !rc; c = strtok_r(NULL, ",", &s2)) {
            int64_t cp = atoll(c), Tc = cp > 0 ? T / (2 * cp) : 0;
            if (cp < 1 || Tc * 2 * cp != T || Tc % 64 != 0) {
                rc = TRI_ERR(TRI_EINVAL, "--seq-lengths %lld does not cut into 2 x cp %lld chunks of a multiple of 64",
                             (long long)T, (long long)cp);
                break;
            }
            tri_flash_rows qr = {Tc, 0, (2 * cp - 1) * Tc}; /* rank 0: chunks 0 and 2 cp - 1 */
            int64_t calls0 = tri_cuda_flash_kv_tiled_calls(d);
            double ms = 0.0;
            rc = run(d, dt, dkv_f32, B, NH, NH_kv, HS, 2 * Tc, T, true, qr, all, iters, &ms);
            if (!rc)
                printf("  cp %lld rank 0 (2 x %lld rows vs %lld keys): %.3f ms, %.3f of uncut (ideal %.3f); tiled "
                       "kv calls %lld of %d\n", (long long)cp, (long long)Tc, (long long)T, ms, ms / uncut,
                       1.0 / (double)cp, (long long)(tri_cuda_flash_kv_tiled_calls(d) - calls0), 3 * (iters + 1));
        }
        free(cs);
    }
    free(ts);
    tri_device_destroy(d);
    if (rc) {
        fprintf(stderr, "bench_cuda_cp_attention: %s\n", tri_error_message());
        return 1;
    }
    return 0;
}
