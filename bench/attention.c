/* bench/attention.c - the fused causal attention against the materialised one on the CPU, in one run.
 *
 * Times tri_op_flash_attention_forward + _backward (FlashAttention-2's tiled algorithm, no (T, T)
 * matrix) and tri_op_attention_forward + _backward (the materialised softmax, its reference twin) on
 * the same q, k, v and dout, GPT-2 124M's attention shape by default (12 heads of 64, micro-batch
 * 4), at T 256 and 1024, and the fused one alone at T 4096 (the materialised one would need
 * B NH T^2 x 8 bytes of probabilities and their gradient). Prints ms per forward + backward, the
 * ratio materialised / fused (above 1: fused is faster) and the bytes each keeps for the backward.
 * Not a test: no threshold here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "tools/cli/flags.h"

typedef struct bench {
    int B, NH, HS, iters, threads;
    const char *seq;
} bench;

typedef struct buffers {
    tri_tensor qkv, out, dout, dqkv, lse, delta, att, datt;
    void *mem[8];
    int n;
} buffers;

static int take(tri_device *d, buffers *b, tri_tensor *t, tri_tensor shape, uint64_t seed)
{
    size_t bytes = (size_t)tri_tensor_numel(shape) * sizeof(float);
    int rc = tri_device_alloc(d, &b->mem[b->n], bytes);
    if (rc)
        return rc;
    *t = shape;
    t->data = b->mem[b->n++];
    float *host = malloc(bytes);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "bench_attention: out of memory");
    for (int64_t i = 0; i < tri_tensor_numel(shape); i++)
        host[i] = 2.0f * (float)tri_rng_uniform(seed, 0, (uint64_t)i) - 1.0f;
    rc = tri_device_copy_from_host(d, *t, host);
    free(host);
    return rc;
}

static void release(tri_device *d, buffers *b)
{
    for (int i = 0; i < b->n; i++)
        tri_device_free(d, b->mem[i]);
    b->n = 0;
}

/* ms per forward + backward of one form (the best of `iters`). */
static int time_form(tri_device *d, const bench *p, buffers *b, bool flash, double *ms)
{
    double best = 1e30;
    for (int it = 0; it < p->iters + 1; it++) {
        double t0 = tri_now_s();
        int rc = flash ? tri_op_flash_attention_forward(d, b->out, b->lse, b->qkv)
                       : tri_op_attention_forward(d, b->out, b->att, b->qkv);
        if (!rc)
            rc = flash ? tri_op_flash_attention_backward(d, b->dqkv, b->delta, b->dout, b->qkv, b->out, b->lse)
                       : tri_op_attention_backward(d, b->dqkv, b->datt, b->dout, b->qkv, b->att);
        if (rc)
            return rc;
        double t = (tri_now_s() - t0) * 1e3;
        if (it > 0 && t < best) /* the first is a warm-up */
            best = t;
    }
    *ms = best;
    return TRI_OK;
}

static int run_T(tri_device *d, const bench *p, int64_t T, bool with_materialised)
{
    int64_t B = p->B, NH = p->NH, C = (int64_t)p->NH * p->HS;
    buffers b = {0};
    int rc = take(d, &b, &b.qkv, tri_tensor_3d(NULL, TRI_F32, B, T, 3 * C), 1);
    if (!rc) rc = take(d, &b, &b.dout, tri_tensor_3d(NULL, TRI_F32, B, T, C), 2);
    if (!rc) rc = take(d, &b, &b.out, tri_tensor_3d(NULL, TRI_F32, B, T, C), 3);
    if (!rc) rc = take(d, &b, &b.dqkv, tri_tensor_3d(NULL, TRI_F32, B, T, 3 * C), 4);
    if (!rc) rc = take(d, &b, &b.lse, tri_tensor_3d(NULL, TRI_F32, B, NH, T), 5);
    if (!rc) rc = take(d, &b, &b.delta, tri_tensor_3d(NULL, TRI_F32, B, NH, T), 6);
    double flash_ms = 0.0, mat_ms = 0.0;
    if (!rc) rc = time_form(d, p, &b, true, &flash_ms);
    if (!rc && with_materialised) {
        rc = take(d, &b, &b.att, tri_tensor_4d(NULL, TRI_F32, B, NH, T, T), 7);
        if (!rc) rc = take(d, &b, &b.datt, tri_tensor_4d(NULL, TRI_F32, B, NH, T, T), 8);
        if (!rc) rc = time_form(d, p, &b, false, &mat_ms);
    }
    release(d, &b);
    if (rc)
        return rc;
    double kept_flash = 4.0 * (double)(B * NH * T) / 1048576.0, kept_mat = 4.0 * (double)(B * NH * T * T) / 1048576.0;
    if (with_materialised)
        printf("attention B %d NH %d HS %d T %5lld: fused %9.2f ms  materialised %9.2f ms  ratio %.2fx  "
               "kept for backward: lse %.2f MiB vs probabilities %.1f MiB\n", p->B, p->NH, p->HS, (long long)T,
               flash_ms, mat_ms, mat_ms / flash_ms, kept_flash, kept_mat);
    else
        printf("attention B %d NH %d HS %d T %5lld: fused %9.2f ms  (materialised not run: it would keep %.1f MiB "
               "of probabilities and as much scratch; fused keeps lse %.2f MiB)\n", p->B, p->NH, p->HS, (long long)T,
               flash_ms, kept_mat, kept_flash);
    return TRI_OK;
}

int main(int argc, char **argv)
{
    bench p = {.B = 4, .NH = 12, .HS = 64, .iters = 3, .threads = 0, .seq = "256,1024"};
    int long_T = 4096;
    tri_flag flags[] = {
        {"micro-batch-size", TRI_FLAG_INT, &p.B, "sequences (B)", 1, 1 << 16, NULL, false},
        {"num-heads", TRI_FLAG_INT, &p.NH, "heads (NH)", 1, 1 << 12, NULL, false},
        {"head-size", TRI_FLAG_INT, &p.HS, "head size (HS)", 1, 1 << 12, NULL, false},
        {"seq-lengths", TRI_FLAG_STRING, &p.seq, "comma-separated T timed with both forms", 0, 0, NULL, false},
        {"long-seq-length", TRI_FLAG_INT, &long_T, "T timed with the fused form alone (0: none)", 0, 1 << 20, NULL, false},
        {"iters", TRI_FLAG_INT, &p.iters, "timed repetitions (the best is printed)", 1, 1 << 20, NULL, false},
        {"threads", TRI_FLAG_INT, &p.threads, "OpenMP threads (0: OpenMP's default)", 0, 1 << 12, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_attention: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_attention",
                        "Fused (FlashAttention-2) against materialised causal attention on the CPU: ms and ratio.");
        return rc ? 2 : 0;
    }
    tri_device *d = NULL;
    rc = tri_device_cpu_create(&d, p.threads);
    char *list = rc ? NULL : strdup(p.seq), *save = NULL;
    for (char *tok = list ? strtok_r(list, ",", &save) : NULL; tok && !rc; tok = strtok_r(NULL, ",", &save))
        rc = run_T(d, &p, atoll(tok), true);
    free(list);
    if (!rc && long_T > 0)
        rc = run_T(d, &p, long_T, false);
    tri_device_destroy(d);
    if (rc) {
        fprintf(stderr, "bench_attention: %s\n", tri_error_message());
        return 1;
    }
    return 0;
}
