/* tests/mpi/cp_attention.c - attention across a context-parallel group (layers/cp_attention.c) on
 * real Open MPI ranks: the world is the cp group (cp = size), B 2, Tc 64, grouped-query attention (4
 * query heads over 2 key/value heads, HS 16).
 *
 * Every rank builds the same global qkv and dout (a hash of the index), runs the one-rank fused
 * attention (tri_op_flash_attention_forward / _backward) over the whole sequence on its own CPU
 * device, takes its chunks (cp rank i: chunks i and 2cp-1-i of Tc rows) and runs the cp forward and
 * backward through the MPI comm:
 * - deterministic (f32 and bf16): atty, lse and dqkv bit for bit the one-rank results' rows;
 * - all_gather (f32): atty, lse and dq bit for bit, dk and dv within 2 N u A per element (as
 *   tests/test_cp_attention.c derives it: the same f32 terms added in another order; MPI's
 *   reduce-scatter chooses its own order of the cp partials);
 * - p2p, the ring (f32 and bf16): atty and lse within twice the fused attention's derived
 *   normalised tolerance of one rank's (each is within it of the exact result), and, fed the one-rank
 *   forward's out and lse (the same P and dS terms), dq and dk, dv within 2 N u A per element (the
 *   ring's order of blocks; bf16: plus the roundings of dq's cp accumulations and one more);
 * - the wire bytes counted under all_gather, reduce_scatter and p2p are cp_attention.h's formula.
 *
 * Usage: mpiexec -n N cp_attention (CTest runs N = 2 and 4). Exit status 0 only if every case passed
 * on every rank; a call failing unexpectedly aborts the job. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/math.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "layers/cp_attention.h"

enum { B = 2, NH = 4, NH_KV = 2, HS = 16, TC = 64 };
#define C (NH * HS)
#define KV (2 * NH_KV * HS)
#define W (C + KV)

static float value(uint32_t i, uint32_t salt)
{
    uint32_t h = i * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    return (float)(h % 2001) / 1000.0f - 1.0f;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "cp_attention: %s: %s: %s; aborting the job\n", what, tri_status_name(rc), tri_error_message());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static tri_tensor dev(tri_device *d, tri_dtype dt, int64_t n0, int64_t n1, int64_t n2, const float *host)
{
    tri_tensor t = tri_tensor_3d(NULL, dt, n0, n1, n2);
    int rc = tri_device_alloc(d, &t.data, tri_tensor_bytes(t));
    if (rc)
        die("alloc", rc);
    if (!host)
        return t;
    size_t n = (size_t)tri_tensor_numel(t);
    uint16_t *bits = dt == TRI_BF16 ? malloc(n * sizeof *bits) : NULL;
    for (size_t i = 0; bits && i < n; i++)
        bits[i] = tri_float_to_bf16(host[i]);
    rc = tri_device_copy_from_host(d, t, bits ? (const void *)bits : (const void *)host);
    free(bits);
    if (rc)
        die("copy_from_host", rc);
    return t;
}

/* t as floats (bf16 widened). */
static float *host(tri_device *d, tri_tensor t)
{
    size_t n = (size_t)tri_tensor_numel(t);
    float *f = malloc(n * sizeof *f);
    uint16_t *bits = t.dtype == TRI_BF16 ? malloc(n * sizeof *bits) : NULL;
    int rc = tri_device_copy_to_host(d, bits ? (void *)bits : (void *)f, t);
    if (rc)
        die("copy_to_host", rc);
    for (size_t i = 0; bits && i < n; i++)
        f[i] = tri_bf16_to_float(bits[i]);
    free(bits);
    return f;
}

/* Rank q's rows of a (B, T, X) array: chunks q and 2cp-1-q; of a (B, NH, T) one with `stats`. */
static float *mine(const float *x, int64_t T, int64_t X, int cp, int q, int stats)
{
    int64_t Tl = 2 * TC, outer = stats ? B * NH : B, step = stats ? 1 : X;
    float *out = malloc((size_t)(outer * Tl * step) * sizeof *out);
    for (int64_t o = 0; o < outer; o++)
        for (int c = 0; c < 2; c++) {
            int64_t chunk = c == 0 ? q : 2 * cp - 1 - q;
            memcpy(out + (o * Tl + c * TC) * step, x + (o * T + chunk * TC) * step, (size_t)(TC * step) * sizeof *x);
        }
    return out;
}

/* fp64 sums of the magnitudes of dk's and dv's terms (B, T, KV), as tests/test_cp_attention.c; adq
 * (B, T, C) if not NULL: those of dq's terms. */
static double *magnitudes(const float *qkv, const float *dout, int64_t T, double *adq)
{
    double *a = calloc((size_t)(B * T * KV), sizeof *a), *p = malloc((size_t)T * sizeof *p),
           *dp = malloc((size_t)T * sizeof *dp), scale = 1.0 / sqrt((double)HS);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = h / (NH / NH_KV), ko = C + g * HS, vo = C + (NH_KV + g) * HS;
                const float *q = qkv + (b * T + t) * W + h * HS, *go = dout + (b * T + t) * C + h * HS;
                double mx = -INFINITY, sum = 0.0, dot = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    double s = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        s += (double)q[i] * qkv[(b * T + j) * W + ko + i];
                    p[j] = s * scale;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int64_t j = 0; j <= t; j++)
                    sum += (p[j] = exp(p[j] - mx));
                for (int64_t j = 0; j <= t; j++) {
                    p[j] /= sum;
                    double s = 0.0;
                    for (int64_t i = 0; i < HS; i++)
                        s += (double)go[i] * qkv[(b * T + j) * W + vo + i];
                    dp[j] = s;
                    dot += p[j] * s;
                }
                for (int64_t j = 0; j <= t; j++) {
                    double ds = p[j] * (dp[j] - dot) * scale, *aj = a + (b * T + j) * KV;
                    for (int64_t i = 0; i < HS; i++) {
                        aj[g * HS + i] += fabs(ds * q[i]);
                        aj[(NH_KV + g) * HS + i] += fabs(p[j] * go[i]);
                        if (adq)
                            adq[(b * T + t) * C + h * HS + i] += fabs(ds * qkv[(b * T + j) * W + ko + i]);
                    }
                }
            }
    free(p);
    free(dp);
    return a;
}

/* max |got - want| <= tol max |want| (normalised, as tests/test_flash_attention.c measures). */
static int near(const char *what, const float *got, const float *want, size_t n, double tol, int rank)
{
    double top = 0.0, diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        top = fabs(want[i]) > top ? fabs(want[i]) : top;
        diff = e > diff || e != e ? e : diff;
    }
    if (diff <= tol * top)
        return 0;
    fprintf(stderr, "cp_attention: rank %d: %s normalised difference %.3g > %.3g\n", rank, what, diff / top, tol);
    return 1;
}

static int differ(const char *what, const float *got, const float *want, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            fprintf(stderr, "cp_attention: rank %d: %s[%zu] = %.9g, one rank %.9g\n", rank, what, i, got[i], want[i]);
            return 1;
        }
    return 0;
}

/* One case on the world as the cp group; the number of failed checks on this rank. */
static int run_case(tri_comm *world, tri_cp_comm_type type, bool det, tri_dtype dt)
{
    int cp = world->size, q = world->rank, fails = 0;
    int64_t T = 2 * cp * TC, Tl = 2 * TC;
    float *hq = malloc((size_t)(B * T * W) * sizeof *hq), *hg = malloc((size_t)(B * T * C) * sizeof *hg);
    for (int64_t i = 0; i < B * T * W; i++)
        hq[i] = value((uint32_t)i, 11);
    for (int64_t i = 0; i < B * T * C; i++)
        hg[i] = value((uint32_t)i, 12);
    tri_device *d = NULL;
    int rc = tri_device_cpu_create(&d, 1);
    if (rc)
        die("device", rc);
    /* one rank over the whole sequence */
    tri_tensor qkv = dev(d, dt, B, T, W, hq), dout = dev(d, dt, B, T, C, hg), out = dev(d, dt, B, T, C, NULL);
    tri_tensor lse = dev(d, TRI_F32, B, NH, T, NULL), delta = dev(d, TRI_F32, B, NH, T, NULL);
    tri_tensor dqkv = dev(d, dt, B, T, W, NULL);
    rc = tri_op_flash_attention_forward(d, out, lse, qkv);
    if (!rc) rc = tri_op_flash_attention_backward(d, dqkv, delta, dout, qkv, out, lse);
    if (rc)
        die("one-rank attention", rc);
    float *ro = host(d, out), *rl = host(d, lse), *rdq = host(d, dqkv), *sq = host(d, qkv), *sg = host(d, dout);
    /* this rank's chunks through the cp group */
    float *lq = mine(sq, T, W, cp, q, 0), *lg = mine(sg, T, C, cp, q, 0);
    tri_tensor cq = dev(d, dt, B, Tl, W, lq), cg = dev(d, dt, B, Tl, C, lg), co = dev(d, dt, B, Tl, C, NULL);
    tri_tensor cl = dev(d, TRI_F32, B, NH, Tl, NULL), cd = dev(d, TRI_F32, B, NH, Tl, NULL);
    tri_tensor cdq = dev(d, dt, B, Tl, W, NULL);
    tri_cp ctx = {world, cp, q, type, det};
    tri_cp_shape s = {{B, Tl, NH, NH_KV, HS}, dt};
    int64_t an, fn;
    rc = tri_cp_scratch_numel(&ctx, &s, &an, &fn);
    if (rc)
        die("tri_cp_scratch_numel", rc);
    tri_cp_scratch sc = {dev(d, dt, 1, 1, an, NULL), dev(d, TRI_F32, 1, 1, fn, NULL)};
    sc.act = tri_tensor_flat(sc.act), sc.f32 = tri_tensor_flat(sc.f32);
    bool ring = type == TRI_CP_COMM_P2P && !det;
    float *wo = mine(ro, T, C, cp, q, 0), *wl = mine(rl, T, 1, cp, q, 1), *wdq = mine(rdq, T, W, cp, q, 0);
    /* the ring's backward runs from the one-rank forward's rows (its own forward is checked apart) */
    tri_tensor fo = ring ? dev(d, dt, B, Tl, C, wo) : co, fl = ring ? dev(d, TRI_F32, B, NH, Tl, wl) : cl;
    uint64_t before = tri_comm_wire_bytes(world, TRI_COMM_KINDS);
    rc = tri_cp_attention_forward(d, &ctx, co, cl, cq, &sc);
    if (!rc) rc = tri_cp_attention_backward(d, &ctx, cdq, cd, cg, cq, fo, fl, &sc);
    if (rc)
        die("cp attention", rc);
    uint64_t sent = tri_comm_wire_bytes(world, TRI_COMM_KINDS) - before;
    float *go = host(d, co), *gl = host(d, cl), *gdq = host(d, cdq);
    if (ring) { /* each within 1e-5 (test_flash_attention's fp32 derivation) of the exact result, plus in
                   bf16 the 2 cp - 1 roundings of the partials and the one rank's own */
        double tol = 2e-5 + (dt == TRI_BF16 ? 2.0 * cp * 0x1p-9 : 0.0);
        fails += near("atty (ring)", go, wo, (size_t)(B * Tl * C), tol, q);
        fails += near("lse (ring)", gl, wl, (size_t)(B * NH * Tl), 2e-5, q);
    } else {
        fails += differ("atty", go, wo, (size_t)(B * Tl * C), q);
        fails += differ("lse", gl, wl, (size_t)(B * NH * Tl), q);
    }
    if (det) {
        fails += differ("dqkv", gdq, wdq, (size_t)(B * Tl * W), q);
    } else {
        double *adq = ring ? calloc((size_t)(B * T * C), sizeof *adq) : NULL;
        double *a = magnitudes(sq, sg, T, adq), N = (double)(NH / NH_KV * T + 4);
        for (int64_t r = 0; r < B * Tl; r++) {
            int64_t b = r / Tl, t = r % Tl, gt = t < TC ? q * TC + t : (2 * cp - 1 - q) * TC + t - TC;
            if (!ring)
                fails += differ("dq", gdq + r * W, wdq + r * W, C, q) ? 1 : 0;
            for (int64_t i = 0; i < C && ring; i++) {
                double aq = adq[(b * T + gt) * C + i], e = fabs((double)gdq[r * W + i] - wdq[r * W + i]);
                double tol = 2.0 * N * 0x1p-24 * aq + (dt == TRI_BF16 ? (cp + 1) * 0x1p-8 * aq : 0.0);
                if (e > tol && fails++ == 0)
                    fprintf(stderr, "cp_attention: rank %d: dq[%lld, %lld] differs by %.3g > %.3g (ring)\n", q,
                            (long long)r, (long long)i, e, tol);
            }
            for (int64_t i = 0; i < KV; i++) {
                double e = fabs((double)gdq[r * W + C + i] - wdq[r * W + C + i]);
                double tol = 2.0 * N * 0x1p-24 * a[(b * T + gt) * KV + i];
                if (dt == TRI_BF16) /* rounded once to bf16 on both sides */
                    tol += 2.0 * 0x1p-8 * fabs((double)wdq[r * W + C + i]);
                if (e > tol && fails++ == 0)
                    fprintf(stderr, "cp_attention: rank %d: dk|dv[%lld, %lld] differs by %.3g > %.3g\n", q,
                            (long long)r, (long long)i, e, tol);
            }
        }
        free(a);
        free(adq);
    }
    uint64_t es = tri_dtype_size(dt), k = (uint64_t)(cp - 1);
    uint64_t want = (uint64_t)(B * Tl * KV) * es * k +
                    (det ? ((uint64_t)(B * Tl * (W + C)) * es + 2 * (uint64_t)(B * NH * Tl) * 4) * k
                         : (uint64_t)(B * Tl * KV) * (es + 4) * k);
    if (ring) /* the k|v block cp - 1 times each pass, the f32 dk|dv accumulator cp times */
        want = (uint64_t)(B * Tl * KV) * (2 * es * k + 4 * (k + 1));
    if (sent != want) {
        fprintf(stderr, "cp_attention: rank %d: sent %llu wire bytes, expected %llu\n", q, (unsigned long long)sent,
                (unsigned long long)want);
        fails++;
    }
    free(hq), free(hg), free(ro), free(rl), free(rdq), free(sq), free(sg), free(lq), free(lg);
    free(go), free(gl), free(gdq), free(wo), free(wl), free(wdq);
    tri_tensor all[] = {qkv, dout, out, lse, delta, dqkv, cq, cg, co, cl, cd, cdq, sc.act, sc.f32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tri_device_free(d, all[i].data);
    if (ring) {
        tri_device_free(d, fo.data);
        tri_device_free(d, fl.data);
    }
    tri_device_destroy(d);
    return fails;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm handle = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    int rc = tri_comm_mpi_create(&world, &handle);
    if (rc)
        die("tri_comm_mpi_create", rc);
    struct {
        const char *name;
        tri_cp_comm_type type;
        bool det;
        tri_dtype dt;
    } cases[] = {{"deterministic p2p f32", TRI_CP_COMM_P2P, true, TRI_F32},
                 {"deterministic all_gather bf16", TRI_CP_COMM_ALL_GATHER, true, TRI_BF16},
                 {"all_gather f32", TRI_CP_COMM_ALL_GATHER, false, TRI_F32},
                 {"p2p ring f32", TRI_CP_COMM_P2P, false, TRI_F32},
                 {"p2p ring bf16", TRI_CP_COMM_P2P, false, TRI_BF16}};
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int mine_fails = run_case(world, cases[i].type, cases[i].det, cases[i].dt) > 0, any = 0;
        MPI_Allreduce(&mine_fails, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        failed += any;
        if (world->rank == 0)
            printf("cp_attention: %-30s %s at cp %d\n", cases[i].name, any ? "FAIL" : "ok", world->size);
    }
    tri_comm_destroy(world);
    MPI_Finalize();
    return failed ? 1 : 0;
}
