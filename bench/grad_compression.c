/* bench/grad_compression.c - what each data-parallel gradient compressor costs against what it saves
 * on the wire (issue 32): the encode + decode time per million gradient elements on this device
 * (--device cpu, the default, or cuda: the same ops on the GPU's kernels), measured in this run,
 * beside the time of sending the bytes one rank sends
 * (tri_compression_sent_bytes, the ring volumes of engine/comm/comm.h) at 25 and 100 Gb/s, so the
 * break-even is visible: a compressor pays at a bandwidth when its compute plus its (smaller) send
 * time is below the plain fp32 reduction's send time.
 *
 * Per compressor, on a bucket of N fp32 elements at dp D (default 4), with error feedback:
 *   encode  e = g + r; the payload (1bit / qsgd pack, topk selection; powersgd: P^T = Q^T M^T,
 *           Gram-Schmidt, Q^T = P^T M on an N = rows x cols matrix);
 *   decode  r -= D(own payload) and the D payloads decoded and added (powersgd: P Q^T and the
 *           residual's axpy).
 * Two-phase rows (--grad-compression-reduce two-phase: 1bit, qsgd, topk): the worker encodes each of
 * the D chunks and subtracts their decoding, the server (one chunk of N / D) decodes the D payloads
 * of its chunk, adds its residual, encodes and keeps its residual, and every chunk is decoded once.
 * The baseline is the plain reduction (ZeRO 0: all-reduce of 4N bytes). The last column is the
 * break-even: the bandwidth below which the compressor's saved send time exceeds its compute
 * (8 (plain - sent) / (encode + decode)). Every buffer is the device's; the D gathered payloads are
 * device copies of this rank's. Usage:
 *   bench_grad_compression [--elements N] [--dp D] [--reps R] [--device cpu|cuda] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/device/ops/compress_math.h"
#include "engine/train/grad_compression.h"
#include "tools/cli/backend.h"

static double now(void)
{
    return tri_now_s();
}

typedef struct bench {
    tri_device *d;
    int64_t n, rows, cols;
    int dp;
    float *g, *r, *out;
    int32_t *pay, *all;
    float *p, *q, *approx;
} bench;

/* One encode + decode of compressor c (see the top comment); returns its status. */
static int once(bench *b, const tri_compression *c)
{
    tri_device *d = b->d;
    int64_t n = b->n;
    tri_tensor g = tri_tensor_1d(b->g, TRI_F32, n), r = tri_tensor_1d(b->r, TRI_F32, n);
    tri_tensor out = tri_tensor_1d(b->out, TRI_F32, n);
    int rc = tri_op_add(d, r, r, g);
    if (rc)
        return rc;
    if (c->kind == TRI_COMPRESS_POWERSGD) {
        int64_t k = c->powersgd_rank;
        tri_tensor m = tri_tensor_2d(b->r, TRI_F32, b->rows, b->cols);
        tri_tensor pt = tri_tensor_2d(b->p, TRI_F32, k, b->rows), qt = tri_tensor_2d(b->q, TRI_F32, k, b->cols);
        tri_tensor gm = tri_tensor_2d(b->approx, TRI_F32, b->rows, b->cols);
        rc = tri_op_matmul(d, pt, qt, m, tri_tensor_none(), false, true, 0.0f);
        if (!rc) rc = tri_op_orthonormalize_rows(d, pt);
        if (!rc) rc = tri_op_matmul(d, qt, pt, m, tri_tensor_none(), false, false, 0.0f);
        if (!rc) rc = tri_op_matmul(d, gm, pt, qt, tri_tensor_none(), true, false, 0.0f);
        if (!rc) rc = tri_op_axpy(d, r, -1.0f / (float)b->dp, tri_tensor_1d(b->approx, TRI_F32, n));
        return rc;
    }
    int64_t words = tri_compression_payload_bytes(c, 1, n) / 4;
    int levels = c->kind == TRI_COMPRESS_QSGD ? c->qsgd_levels : 0;
    tri_tensor pay = tri_tensor_1d(b->pay, TRI_I32, words);
    if (c->kind == TRI_COMPRESS_TOPK)
        rc = tri_op_compress_topk_pack(d, pay, r);
    else if (c->kind == TRI_COMPRESS_1BIT)
        rc = tri_op_compress_sign_pack(d, pay, r, c->block_size);
    else
        rc = tri_op_compress_qsgd_pack(d, pay, r, c->block_size, levels, 1, 2);
    for (int k = 0; k < b->dp && !rc; k++) /* the gathered payloads: copies of this one */
        rc = tri_op_copy(d, tri_tensor_1d(b->all + k * words, TRI_I32, words), pay);
    if (!rc) rc = c->kind == TRI_COMPRESS_TOPK ? tri_op_compress_topk_unpack_add(d, r, pay, 0, -1.0f)
                                               : tri_op_compress_unpack_add(d, r, pay, n, 0, c->block_size, levels, -1.0f);
    if (!rc) rc = tri_op_fill(d, out, 0.0f);
    for (int k = 0; k < b->dp && !rc; k++) {
        tri_tensor pk = tri_tensor_1d(b->all + k * words, TRI_I32, words);
        rc = c->kind == TRI_COMPRESS_TOPK ? tri_op_compress_topk_unpack_add(d, out, pk, 0, 1.0f)
                                          : tri_op_compress_unpack_add(d, out, pk, n, 0, c->block_size, levels, 1.0f);
    }
    return rc;
}

static int pack(bench *b, const tri_compression *c, tri_tensor pay, tri_tensor e)
{
    if (c->kind == TRI_COMPRESS_TOPK)
        return tri_op_compress_topk_pack(b->d, pay, e);
    if (c->kind == TRI_COMPRESS_1BIT)
        return tri_op_compress_sign_pack(b->d, pay, e, c->block_size);
    return tri_op_compress_qsgd_pack(b->d, pay, e, c->block_size, c->qsgd_levels, 1, 2);
}

static int unpack_add(bench *b, const tri_compression *c, tri_tensor out, tri_tensor pay, int64_t n, float alpha)
{
    if (c->kind == TRI_COMPRESS_TOPK)
        return tri_op_compress_topk_unpack_add(b->d, out, pay, 0, alpha);
    int levels = c->kind == TRI_COMPRESS_QSGD ? c->qsgd_levels : 0;
    return tri_op_compress_unpack_add(b->d, out, pay, n, 0, c->block_size, levels, alpha);
}

/* One two-phase encode + decode (see the top comment) of compressor c. */
static int once_two_phase(bench *b, const tri_compression *c)
{
    int64_t n = b->n, chunk = tri_compression_chunk(c, n, b->dp);
    int64_t words = tri_compression_payload_bytes(c, 1, chunk) / 4;
    tri_tensor r = tri_tensor_1d(b->r, TRI_F32, n);
    int rc = tri_op_add(b->d, r, r, tri_tensor_1d(b->g, TRI_F32, n));
    for (int64_t lo = 0, j = 0; lo < n && !rc; lo += chunk, j++) { /* worker */
        int64_t len = n - lo < chunk ? n - lo : chunk;
        tri_tensor pj = tri_tensor_1d(b->all + j * words, TRI_I32, tri_compression_payload_bytes(c, 1, len) / 4);
        rc = pack(b, c, pj, tri_tensor_range(r, lo, len));
        if (!rc) rc = unpack_add(b, c, tri_tensor_range(r, lo, len), pj, len, -1.0f);
    }
    tri_tensor s = tri_tensor_1d(b->approx, TRI_F32, chunk), rs = tri_tensor_1d(b->out, TRI_F32, chunk);
    tri_tensor cs = tri_tensor_1d(b->pay, TRI_I32, words);
    if (!rc) rc = tri_op_fill(b->d, s, 0.0f); /* server: chunk 0's D payloads (copies of this rank's) */
    for (int k = 0; k < b->dp && !rc; k++)
        rc = unpack_add(b, c, s, tri_tensor_1d(b->all, TRI_I32, words), chunk, 1.0f);
    if (!rc) rc = tri_op_add(b->d, s, s, rs);
    if (!rc) rc = pack(b, c, cs, s);
    if (!rc) rc = tri_op_copy(b->d, rs, s);
    if (!rc) rc = unpack_add(b, c, rs, cs, chunk, -1.0f);
    tri_tensor out = tri_tensor_1d(b->approx, TRI_F32, n);
    if (!rc) rc = tri_op_fill(b->d, out, 0.0f); /* every chunk decoded once */
    for (int64_t lo = 0; lo < n && !rc; lo += chunk) {
        int64_t len = n - lo < chunk ? n - lo : chunk;
        rc = unpack_add(b, c, tri_tensor_range(out, lo, len),
                        tri_tensor_1d(b->all, TRI_I32, tri_compression_payload_bytes(c, 1, len) / 4), len, 1.0f);
    }
    return rc;
}

/* A zeroed device buffer of n 4-byte words into *p; false (and a message) when it cannot be had. */
static bool take(bench *b, void **p, int64_t n)
{
    if (tri_device_alloc(b->d, p, (size_t)n * 4) != TRI_OK ||
        tri_op_zero(b->d, tri_tensor_1d(*p, TRI_I32, n)) != TRI_OK) {
        fprintf(stderr, "bench_grad_compression: %s\n", tri_error_message());
        return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    bench b = {.n = 1 << 22, .dp = 4};
    int reps = 5;
    const char *device = "cpu";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--elements") == 0)
            b.n = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--dp") == 0)
            b.dp = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--device") == 0)
            device = argv[i + 1];
        else {
            fprintf(stderr, "bench_grad_compression: unknown flag %s (--elements N, --dp D, --reps R, --device "
                    "cpu|cuda)\n", argv[i]);
            return 2;
        }
    }
    if (b.n < 1024 || b.dp < 2 || reps < 1) {
        fprintf(stderr, "bench_grad_compression: expected --elements >= 1024, --dp >= 2, --reps >= 1\n");
        return 2;
    }
    b.cols = 1024;
    b.rows = b.n / b.cols;
    b.n = b.rows * b.cols;
    if (tri_cli_device_create(device, 0, &b.d) != TRI_OK) {
        fprintf(stderr, "bench_grad_compression: %s\n", tri_error_message());
        return 1;
    }
    void *g, *r, *out, *approx, *pay, *all, *p, *q;
    if (!take(&b, &g, b.n) || !take(&b, &r, b.n) || !take(&b, &out, b.n) || !take(&b, &approx, b.n) ||
        !take(&b, &pay, 2 * b.n) || !take(&b, &all, (int64_t)b.dp * 2 * b.n) || !take(&b, &p, 64 * b.rows) ||
        !take(&b, &q, 64 * b.cols))
        return 1;
    b.g = g, b.r = r, b.out = out, b.approx = approx, b.pay = pay, b.all = all, b.p = p, b.q = q;
    float *host = malloc((size_t)b.n * sizeof(float));
    if (!host) {
        fprintf(stderr, "bench_grad_compression: out of memory for %lld elements\n", (long long)b.n);
        return 1;
    }
    uint64_t s = 12345;
    for (int64_t i = 0; i < b.n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        host[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5) * 1e-3f;
    }
    int rc = tri_device_copy_from_host(b.d, tri_tensor_1d(b.g, TRI_F32, b.n), host);
    for (int64_t i = 0; i < 64 * b.cols; i++)
        host[i] = (float)((i * 7919) % 101) / 101.0f - 0.5f;
    if (!rc) rc = tri_device_copy_from_host(b.d, tri_tensor_1d(b.q, TRI_F32, 64 * b.cols), host);
    free(host);
    if (rc) {
        fprintf(stderr, "bench_grad_compression: %s\n", tri_error_message());
        return 1;
    }
    printf("gradient compression on the %s backend: a bucket of %lld fp32 elements (powersgd: %lld x %lld), dp %d, "
           "%d reps (the fastest)\n", device, (long long)b.n, (long long)b.rows, (long long)b.cols, b.dp, reps);
    printf("%-10s %12s %8s %11s %12s %13s %9s %9s %14s\n", "compressor", "enc+dec ms/M", "ratio", "sent B/elem",
           "send@25 ms/M", "send@100 ms/M", "total@25", "total@100", "pays below Gb/s");
    const char *names[] = {"none", "1bit", "qsgd", "topk", "powersgd", "1bit 2ph", "qsgd 2ph", "topk 2ph"};
    double base25 = 0, base100 = 0;
    for (int k = 0; k < TRI_COMPRESS_KINDS + 3; k++) {
        tri_compression c = tri_compression_defaults();
        c.kind = (tri_compression_kind)(k < TRI_COMPRESS_KINDS ? k : k - TRI_COMPRESS_KINDS + TRI_COMPRESS_1BIT);
        c.reduce = k < TRI_COMPRESS_KINDS ? TRI_COMPRESS_REDUCE_ALLGATHER : TRI_COMPRESS_REDUCE_TWO_PHASE;
        int64_t sent = c.kind == TRI_COMPRESS_POWERSGD
                           ? tri_compression_sent_bytes(&c, b.rows, b.cols, b.dp, 0, true)
                           : tri_compression_sent_bytes(&c, 1, b.n, b.dp, 0, true);
        double best = 0.0;
        if (k != TRI_COMPRESS_NONE) {
            best = 1e30;
            for (int rep = 0; rep < reps; rep++) {
                double t0 = now();
                rc = c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE ? once_two_phase(&b, &c) : once(&b, &c);
                if (rc != TRI_OK || tri_device_sync(b.d) != TRI_OK) {
                    fprintf(stderr, "bench_grad_compression: %s: %s\n", names[k], tri_error_message());
                    return 1;
                }
                double t = now() - t0;
                best = t < best ? t : best;
            }
        }
        double per_m = 1e6 / (double)b.n;
        double enc = best * 1e3 * per_m, s25 = (double)sent * 8 / 25e9 * 1e3 * per_m,
               s100 = (double)sent * 8 / 100e9 * 1e3 * per_m;
        if (k == TRI_COMPRESS_NONE)
            base25 = s25, base100 = s100;
        double plain = (double)tri_compression_sent_bytes(&c, 1, b.n, b.dp, 0, false);
        /* the bandwidth below which it pays: plain * 8 / B = enc + sent * 8 / B */
        double even = best > 0 ? (plain - (double)sent) * 8.0 / best / 1e9 : 0.0;
        printf("%-10s %12.3f %7.1fx %11.4f %12.3f %13.3f %8.2fx %8.2fx %14.2f\n", names[k], enc, plain / (double)sent,
               (double)sent / (double)b.n, s25, s100, base25 / (enc + s25), base100 / (enc + s100), even);
    }
    printf("2ph: --grad-compression-reduce two-phase (1-bit Adam's compressed allreduce: bytes constant in dp)\n");
    printf("total@B: the plain reduction's send time over this compressor's encode + decode + send time at B Gb/s "
           "(above 1x the compressor pays; compute and network not overlapped)\n");
    void *bufs[] = {g, r, out, approx, pay, all, p, q};
    for (int i = 0; i < 8; i++)
        tri_device_free(b.d, bufs[i]);
    tri_device_destroy(b.d);
    return 0;
}
