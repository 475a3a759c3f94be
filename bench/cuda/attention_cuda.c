/* bench/cuda/attention_cuda.c - the fused causal attention on a GPU: ms per forward + backward.
 *
 * Times tri_op_flash_attention_forward + _backward (cuda/attention/flash_mma.cu's tiled kernels for head sizes
 * 32-128: bf16 on the tensor cores, or fp32 on the CUDA cores with --fp32; the simple twins
 * otherwise) and, where its (T, T) matrices fit, the unfused cuBLASLt path, on bf16 (or fp32) q|k|v
 * in the model's interleaved layout, for each requested (HS, T) at GPT-2 124M's width (NH = 768 / HS
 * heads) and --tokens B x T tokens (B = tokens / T, at least 1; default 8192: micro-batch 8 at T 1024).
 * Prints ms, TFLOP/s (causal FLOPs: forward 2 B NH T^2 HS, backward 2.5x, as FlashAttention-2's
 * paper counts) and the unfused/fused ratio. bench/cuda/attention.sh runs PyTorch's SDPA (flash
 * backend) on the same shapes in the same command and prints the ratio against it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/cuda/bench_device.h"
#include "cuda/device_cuda.h"
#include "engine/core/clock.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "tools/cli/flags.h"

typedef struct att_shape {
    int64_t B, NH, T, HS;
} att_shape;

/* A device tensor of `shape` filled with uniform [-1, 1) values (bf16 or f32 as shape.dtype). */
static int put(tri_device *d, tri_tensor *t, tri_tensor shape, void **mem, uint64_t seed)
{
    return tri_bench_device_uniform(d, t, shape, mem, seed, "bench_cuda_attention");
}

/* Best ms of `iters` forward + backward of one form after one warm-up. */
static int time_form(tri_device *d, bool flash, tri_tensor *t, int iters, double *ms)
{
    /* t: qkv, out, dout, dqkv, lse, delta, att, datt */
    double best = 1e30;
    for (int it = 0; it <= iters; it++) {
        int rc = tri_device_sync(d);
        double t0 = tri_now_s();
        if (!rc)
            rc = flash ? tri_op_flash_attention_forward(d, t[1], t[4], t[0])
                       : tri_op_attention_forward(d, t[1], t[6], t[0]);
        if (!rc)
            rc = flash ? tri_op_flash_attention_backward(d, t[3], t[5], t[2], t[0], t[1], t[4])
                       : tri_op_attention_backward(d, t[3], t[7], t[2], t[0], t[6]);
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

static int run_shape(tri_device *d, att_shape s, tri_dtype bf, int iters, double unfused_limit_gb)
{
    int64_t C = s.NH * s.HS;
    tri_tensor t[8];
    void *mem[8] = {0};
    int rc = put(d, &t[0], tri_tensor_3d(NULL, bf, s.B, s.T, 3 * C), &mem[0], 1);
    if (!rc) rc = put(d, &t[1], tri_tensor_3d(NULL, bf, s.B, s.T, C), &mem[1], 2);
    if (!rc) rc = put(d, &t[2], tri_tensor_3d(NULL, bf, s.B, s.T, C), &mem[2], 3);
    if (!rc) rc = put(d, &t[3], tri_tensor_3d(NULL, bf, s.B, s.T, 3 * C), &mem[3], 4);
    if (!rc) rc = put(d, &t[4], tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, s.T), &mem[4], 5);
    if (!rc) rc = put(d, &t[5], tri_tensor_3d(NULL, TRI_F32, s.B, s.NH, s.T), &mem[5], 6);
    double fused = 0.0, unfused = 0.0;
    if (!rc) rc = time_form(d, true, t, iters, &fused);
    double att_gb = 2.0 * (double)tri_dtype_size(bf) * (double)(s.B * s.NH * s.T * s.T) / 1e9;
    bool run_unfused = att_gb <= unfused_limit_gb;
    if (!rc && run_unfused) {
        rc = put(d, &t[6], tri_tensor_4d(NULL, bf, s.B, s.NH, s.T, s.T), &mem[6], 7);
        if (!rc) rc = put(d, &t[7], tri_tensor_4d(NULL, bf, s.B, s.NH, s.T, s.T), &mem[7], 8);
        if (!rc) rc = time_form(d, false, t, iters, &unfused);
    }
    for (int i = 0; i < 8; i++)
        if (mem[i])
            tri_device_free(d, mem[i]);
    if (rc)
        return rc;
    double flops = 3.5 * 2.0 * (double)(s.B * s.NH) * (double)s.T * (double)s.T * (double)s.HS;
    printf("trident B %lld NH %lld T %lld HS %lld | %s fused %.3f ms %.1f TFLOP/s", (long long)s.B, (long long)s.NH,
           (long long)s.T, (long long)s.HS, bf == TRI_BF16 ? "bf16" : "fp32", fused, flops / fused / 1e9);
    if (run_unfused)
        printf(" | unfused %.3f ms (%.2fx)\n", unfused, unfused / fused);
    else
        printf(" | unfused not run (its scores would take %.1f GB)\n", att_gb);
    return TRI_OK;
}

int main(int argc, char **argv)
{
    const char *hs_list = "64,128", *t_list = "1024,4096";
    int iters = 10, tokens = 8192;
    float limit = 20.0f;
    bool fp32 = false;
    tri_flag flags[] = {
        {"head-sizes", TRI_FLAG_STRING, &hs_list, "comma-separated head sizes", 0, 0, NULL, false},
        {"seq-lengths", TRI_FLAG_STRING, &t_list, "comma-separated sequence lengths", 0, 0, NULL, false},
        {"iters", TRI_FLAG_INT, &iters, "timed repetitions (the best is printed)", 1, 1 << 20, NULL, false},
        {"tokens", TRI_FLAG_INT, &tokens, "B x T tokens of each shape (B = tokens / T, at least 1)", 1, 1 << 30, NULL, false},
        {"fp32", TRI_FLAG_BOOL, &fp32, "fp32 tensors (the CUDA cores) instead of bf16 (the tensor cores)", 0, 0, NULL, false},
        {"unfused-limit-gb", TRI_FLAG_FLOAT, &limit, "run the unfused path only when its scores and their gradient take at most this", 0, 1e6, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_cuda_attention: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_cuda_attention",
                        "Fused causal attention on a GPU, bf16 (or fp32): ms per forward + backward, TFLOP/s, against the unfused path.");
        return rc ? 2 : 0;
    }
    tri_device *d = NULL;
    if (tri_bench_cuda_open("bench_cuda_attention", &d))
        return 1;
    char *hs = rc ? NULL : strdup(hs_list), *s1 = NULL;
    for (char *h = hs ? strtok_r(hs, ",", &s1) : NULL; h && !rc; h = strtok_r(NULL, ",", &s1)) {
        char *ts = strdup(t_list), *s2 = NULL;
        for (char *tt = ts ? strtok_r(ts, ",", &s2) : NULL; tt && !rc; tt = strtok_r(NULL, ",", &s2)) {
            att_shape s = {.HS = atoll(h), .T = atoll(tt)};
            s.NH = 768 / s.HS > 0 ? 768 / s.HS : 1;
            s.B = tokens / s.T > 0 ? tokens / s.T : 1;
            rc = run_shape(d, s, fp32 ? TRI_F32 : TRI_BF16, iters, limit);
        }
        free(ts);
    }
    free(hs);
    tri_device_destroy(d);
    if (rc) {
        fprintf(stderr, "bench_cuda_attention: %s\n", tri_error_message());
        return 1;
    }
    return 0;
}
