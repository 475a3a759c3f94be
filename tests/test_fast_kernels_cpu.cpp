/* tests/test_fast_kernels_cpu.cpp - the CUDA backend's fast kernels, run on the CPU.
 *
 * The fast kernels of the cuda/<family>/..._fast.cuh headers (the cross-entropy a warp or a block per
 * row with shared memory and warp shuffles; the element-wise ops and the conversion 8 elements a
 * thread with 16-byte accesses; the chunk totals of the reductions a block with a shared tree; the
 * layernorm, RMSNorm and causal softmax rows a warp per row, alone and after the residual add, GELU
 * (alone and after a bias add) 8 elements a thread; SwiGLU and the
 * rotary embedding a block per row; the embedding backward's token links, a bitonic tile sort in
 * shared memory and merge passes, against the O(N^2) scan they replace; the MoE capacity's sort
 * against its O((NK)^2) twin, the MoE counting sort a warp per chunk and its scan a block, the MoE
 * row copies a warp per row; the top-k selection's radix select over blocks against the CPU's loop; PowerSGD's Gram-Schmidt a
 * block a matrix; 1bit's and qsgd's block scales a warp a block, 1bit's sign words by ballots)
 * are compiled here as C++ against cuda/kernels/cuda_emu.h, which runs each block as lanes (fibers)
 * with barriers for __syncthreads and __syncwarp and a shuffle through a per-warp buffer. They must
 * give the CPU backend's bits (tolerance 0): the design makes every fast kernel compute the simple
 * kernel's expressions in engine/core/math.h's orders (docs/cuda-correctness.md). Shapes: rows
 * longer than a block's 4096-value pass (to GPT-2's 50257 padded to 50304), short rows, rows that start
 * off 16-byte alignment (the scalar path: odd V_l), padding columns, targets at both ends; in place
 * and into a separate buffer; fp32 and bf16; element counts with a tail and views one element into
 * their buffers, under two launch shapes (the backend's, and one block of 32 threads so the
 * grid-stride loops turn). Outputs start NaN, so an element a kernel does not write fails.
 * Mutations checked by hand: the block's warp sums added in sequence instead of halved, and a
 * thread's first value 8 (t + 1) instead of 8 t, both fail. (Warp w taking the spans of warp w ^ 1,
 * or of w + 1 mod 16, gives the same bits: the halving tree is symmetric under those permutations,
 * on a GPU as here.) Built with -fsanitize=thread (a stand-in for Criterion's macros, as for
 * test_flash_mma_cpu), the two tests report no race; without the barrier after the block max, the
 * block sum's write of the shared warp sums is reported. What only a GPU can show (the hardware's
 * shuffles and barriers, speed) is tests/gpu/test_gpu_ops.c's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels/cuda_emu.h"
#include "cuda/elementwise/convert_fast.cuh"
#include "cuda/crossentropy/crossentropy_fast.cuh"
#include "cuda/elementwise/elementwise_fast.cuh"
#include "cuda/activations/bias_gelu_fast.cuh"
#include "cuda/activations/gelu_fast.cuh"
#include "cuda/norms/layernorm_fast.cuh"
#include "cuda/elementwise/reduce_fast.cuh"
#include "cuda/norms/rmsnorm_fast.cuh"
#include "cuda/attention/rope_fast.cuh"
#include "cuda/attention/softmax_fast.cuh"
#include "cuda/activations/swiglu_fast.cuh"
#include "cuda/attention/attention.kern.h"
#include "cuda/activations/bias_gelu.kern.h"
#include "cuda/activations/gelu.kern.h"
#include "cuda/norms/layernorm.kern.h"
#include "cuda/norms/rmsnorm.kern.h"
#include "cuda/attention/rope.kern.h"
#include "cuda/activations/swiglu.kern.h"
#include "cuda/embedding/embedding.kern.h"
#include "cuda/embedding/token_links_fast.cuh"
#include "cuda/moe/capacity_fast.cuh"
#include "cuda/compress/compress.kern.h"
#include "cuda/compress/topk_fast.cuh"
#include "cuda/compress/compress_fast.cuh"
#include "cuda/compress/gram_schmidt_fast.cuh"
#include "cuda/moe/dispatch.kern.h"
#include "cuda/moe/dispatch_fast.cuh"
#include "cuda/moe/router.kern.h"
extern "C" {
#include "engine/device/device.h"
#include "tests/opsutil.h"
}

TestSuite(fast_kernels_cpu, .fini = ot_teardown);

/* A tracked, 64-byte aligned host buffer of n elements (fp32 or bf16 storage) holding x, or NaN. */
static void *typed(size_t n, int bf16, const float *x)
{
    size_t bytes = (n ? n : 1) * (bf16 ? 2 : 4);
    void *p = ot_floats((bytes + 63) / 4 + 16);
    p = (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < n; i++)
        tri_store(p, bf16, (int64_t)i, x ? x[i] : NAN);
    return p;
}

static void *copy_of(const void *p, size_t n, int bf16)
{
    void *q = typed(n, bf16, NULL);
    memcpy(q, p, n * (bf16 ? 2 : 4));
    return q;
}

static tri_dtype dt(int bf16)
{
    return bf16 ? TRI_BF16 : TRI_F32;
}

/* got and want (n elements of the same storage) are the same bits. */
static void same(const char *what, const void *got, const void *want, size_t n, int bf16)
{
    for (size_t i = 0; i < n; i++) {
        float g = tri_load(got, bf16, (int64_t)i), w = tri_load(want, bf16, (int64_t)i);
        bool eq = bf16 ? ((const uint16_t *)got)[i] == ((const uint16_t *)want)[i]
                       : memcmp((const float *)got + i, (const float *)want + i, 4) == 0;
        cr_assert(eq, "%s: element %zu is %.9g, the reference (CPU backend or twin) %.9g", what, i, g, w);
    }
}

/* ---- cross-entropy ---- */

static void ce_case(int64_t N, int64_t V_l, int64_t V_valid, int lb, int db, bool in_place, uint64_t seed)
{
    tri_device *d = ot_device(1);
    size_t nv = (size_t)(N * V_l);
    const float dloss = 0.125f;
    char what[160];
    snprintf(what, sizeof what, "N %lld V_l %lld V_valid %lld, %s -> %s%s", (long long)N, (long long)V_l,
             (long long)V_valid, lb ? "bf16" : "fp32", db ? "bf16" : "fp32", in_place ? " in place" : "");
    void *logits = typed(nv, lb, ot_uniform(nv, -8.0f, 8.0f, seed));
    int32_t *tgt = ot_ints((size_t)N);
    for (int64_t n = 0; n < N; n++)
        tgt[n] = (int32_t)((n * 97) % V_valid);
    tgt[0] = 0;
    tgt[N - 1] = (int32_t)(V_valid - 1);
    tri_tensor tt = tri_tensor_1d(tgt, TRI_I32, N);

    /* the CPU backend: the pieces (maxes, stats, losses, dlogits) and the fused op */
    float *maxes = ot_floats((size_t)N), *stats = ot_floats((size_t)(2 * N)), *losses = ot_floats((size_t)N);
    void *cl = copy_of(logits, nv, lb), *cdl = in_place ? cl : typed(nv, db, NULL);
    tri_tensor tl = tri_tensor_2d(cl, dt(lb), N, V_l), tm = tri_tensor_1d(maxes, TRI_F32, N);
    tri_tensor ts = tri_tensor_2d(stats, TRI_F32, N, 2);
    cr_assert_eq(tri_op_ce_row_max(d, tm, tl, V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_sumexp_target(d, ts, tl, tm, tt, 0, V_valid), TRI_OK);
    cr_assert_eq(tri_op_ce_loss(d, tri_tensor_1d(losses, TRI_F32, N), tm, ts), TRI_OK);
    cr_assert_eq(tri_op_ce_backward(d, tri_tensor_2d(cdl, dt(db), N, V_l), tl, tm, ts, tt, 0, V_valid, dloss), TRI_OK);

    /* the fast kernels, each on fresh inputs, outputs starting NaN; the block-per-row ones with a
     * block a row (sum, fused) or fewer blocks than rows (backward, fused forward only: the loop) */
    unsigned fewer = (unsigned)(N > 1 ? N - 1 : 1);
    float *km = (float *)typed((size_t)N, 0, NULL), *ks = (float *)typed((size_t)(2 * N), 0, NULL);
    tri_emu_launch((unsigned)tri_warp_grid(N), 32 * TRI_ROWS_PER_BLOCK,
                   [&] { ce_row_max_fast_kernel(km, logits, lb, N, V_l, V_valid); });
    same(what, km, maxes, (size_t)N, 0);
    tri_emu_launch((unsigned)N, TRI_CE_THREADS,
                   [&] { ce_sumexp_target_fast_kernel(ks, logits, lb, km, tgt, N, V_l, 0, V_valid); });
    same(what, ks, stats, (size_t)(2 * N), 0);
    void *kl = copy_of(logits, nv, lb), *kdl = in_place ? kl : typed(nv, db, NULL);
    tri_emu_launch(fewer, TRI_CE_THREADS, [&] {
        ce_backward_fast_kernel(kdl, db, kl, lb, km, ks, tgt, N, V_l, 0, V_valid, dloss);
    });
    same(what, kdl, cdl, nv, db);

    void *fl = copy_of(logits, nv, lb), *fdl = in_place ? fl : typed(nv, db, NULL);
    float *floss = (float *)typed((size_t)N, 0, NULL);
    tri_emu_launch((unsigned)N, TRI_CE_THREADS,
                   [&] { ce_fused_fast_kernel(floss, fdl, db, fl, lb, tgt, N, V_l, V_valid, dloss); });
    same(what, floss, losses, (size_t)N, 0);
    same(what, fdl, cdl, nv, db);
    void *fwd = copy_of(logits, nv, lb);
    float *fwd_loss = (float *)typed((size_t)N, 0, NULL);
    tri_emu_launch(fewer, TRI_CE_THREADS,
                   [&] { ce_fused_fast_kernel(fwd_loss, NULL, 0, fwd, lb, tgt, N, V_l, V_valid, dloss); });
    same(what, fwd_loss, losses, (size_t)N, 0);
    same(what, fwd, logits, nv, lb); /* forward only leaves the logits */
}

Test(fast_kernels_cpu, cross_entropy_same_bits_as_cpu)
{
    /* N, V_l, V_valid: short rows off alignment (13), one span (256), 257 valid of 300, past one
     * block pass (8999 of 9000), GPT-2's padded vocabulary */
    const int64_t dims[][3] = {{3, 13, 11}, {2, 256, 256}, {3, 300, 257}, {2, 9000, 8999}};
    for (size_t z = 0; z < sizeof dims / sizeof *dims; z++) {
        uint64_t seed = 1700 + 10 * z;
        ce_case(dims[z][0], dims[z][1], dims[z][2], 0, 0, true, seed);
        ce_case(dims[z][0], dims[z][1], dims[z][2], 1, 1, true, seed + 1);
        ce_case(dims[z][0], dims[z][1], dims[z][2], 1, 0, false, seed + 2);
    }
    ce_case(2, 50304, 50257, 1, 1, true, 1790); /* the bf16 GPT-2 step's form; the emulation is slow */
}

/* ---- element-wise ---- */

struct launch_shape {
    unsigned grid, block;
};

static void elementwise_case(int64_t n, int64_t off, int mix, launch_shape ls)
{
    tri_device *d = ot_device(1);
    char what[128];
    snprintf(what, sizeof what, "n %lld offset %lld %s, %u x %u", (long long)n, (long long)off,
             mix ? "fp32 with bf16 inputs" : "all bf16", ls.grid, ls.block);
    int ab = !mix; /* a, out: bf16 unless mixed; b always bf16 */
    size_t m = (size_t)(n + off);
    const float *ha = ot_uniform(m, -2.0f, 2.0f, 1800 + (uint64_t)n), *hb = ot_uniform(m, -2.0f, 2.0f, 1801 + (uint64_t)n);
    char *a = (char *)typed(m, ab, ha), *b = (char *)typed(m, 1, hb);
    char *ca = (char *)copy_of(a, m, ab), *cb = (char *)copy_of(b, m, 1);
    size_t ea = ab ? 2 : 4;
    void *va = a + off * ea, *vb = b + off * 2, *vca = ca + off * ea, *vcb = cb + off * 2;
    bool vec = tri_aligned16_host(va) && tri_aligned16_host(vb);
    tri_tensor ta = tri_tensor_1d(vca, dt(ab), n), tb = tri_tensor_1d(vcb, TRI_BF16, n);
    /* out = a + b into a separate buffer, then in place, axpy, scale, fill */
    char *out = (char *)typed(m, ab, NULL), *cout = (char *)typed(m, ab, NULL);
    void *vout = out + off * ea, *vcout = cout + off * ea;
    cr_assert_eq(tri_op_add(d, tri_tensor_1d(vcout, dt(ab), n), ta, tb), TRI_OK);
    tri_emu_launch(ls.grid, ls.block, [&] { add_fast_kernel(vout, ab, va, ab, vb, 1, n, vec && tri_aligned16_host(vout)); });
    same(what, vout, vcout, (size_t)n, ab);
    cr_assert_eq(tri_op_add(d, ta, ta, tb), TRI_OK);
    tri_emu_launch(ls.grid, ls.block, [&] { add_fast_kernel(va, ab, va, ab, vb, 1, n, vec); });
    same(what, va, vca, (size_t)n, ab);
    cr_assert_eq(tri_op_axpy(d, ta, -0.7f, tb), TRI_OK);
    tri_emu_launch(ls.grid, ls.block, [&] { axpy_fast_kernel(va, ab, -0.7f, vb, 1, n, vec); });
    same(what, va, vca, (size_t)n, ab);
    cr_assert_eq(tri_op_scale(d, ta, 1.3f), TRI_OK);
    tri_emu_launch(ls.grid, ls.block, [&] { scale_fast_kernel(va, ab, 1.3f, n, vec); });
    same(what, va, vca, (size_t)n, ab);
    cr_assert_eq(tri_op_fill(d, tb, -0.3f), TRI_OK);
    tri_emu_launch(ls.grid, ls.block, [&] { fill_fast_kernel(vb, 1, -0.3f, n, vec); });
    same(what, vb, vcb, (size_t)n, 1);
    /* the elements around the views are untouched */
    same(what, a, ca, (size_t)off, ab);
    same(what, b, cb, (size_t)off, 1);
    /* convert fp32 -> bf16 -> fp32 */
    float *f = (float *)typed(m, 0, ha);
    char *h = (char *)typed(m, 1, NULL), *ch = (char *)typed(m, 1, NULL);
    float *back = (float *)typed(m, 0, NULL), *cback = (float *)typed(m, 0, NULL);
    void *vf = f + off, *vh = h + 2 * off, *vch = ch + 2 * off, *vback = back + off, *vcback = cback + off;
    bool cvec = tri_aligned16_host(vf) && tri_aligned16_host(vh) && tri_aligned16_host(vback);
    cr_assert_eq(tri_op_convert(d, tri_tensor_1d(vch, TRI_BF16, n), tri_tensor_1d(vf, TRI_F32, n)), TRI_OK);
    tri_emu_launch(ls.grid, ls.block, [&] { convert_fast_kernel(vh, 1, vf, 0, n, cvec); });
    same(what, vh, vch, (size_t)n, 1);
    cr_assert_eq(tri_op_convert(d, tri_tensor_1d(vcback, TRI_F32, n), tri_tensor_1d(vch, TRI_BF16, n)), TRI_OK);
    tri_emu_launch(ls.grid, ls.block, [&] { convert_fast_kernel(vback, 0, vh, 1, n, cvec); });
    same(what, vback, vcback, (size_t)n, 0);
}

Test(fast_kernels_cpu, elementwise_same_bits_as_cpu)
{
    const int64_t counts[] = {1, 1003, 5000}; /* one element; a tail of 3; three blocks of 256 */
    for (size_t z = 0; z < sizeof counts / sizeof *counts; z++)
        for (int64_t off = 0; off < 2; off++)
            for (int mix = 0; mix < 2; mix++) {
                int64_t n = counts[z];
                elementwise_case(n, off, mix, launch_shape{(unsigned)tri_vec8_grid(n), TRI_BLOCK});
                elementwise_case(n, off, mix, launch_shape{1, 32});
            }
}

/* ---- chunk totals (sum_squares, count_nonfinite, the gradient norm's multi-tensor form) ----
 * The block totals against the one-thread twins (tests/test_cuda_kernels_cpu.c holds those to the
 * CPU backend): out += total, from a nonzero start; chunk counts below, at and past the 256 slots
 * and past 8 passes of them (the loop that keeps 8 loads in flight), and a multi-tensor group with
 * runs of one, several and an empty piece, a slot coming back after another. The chunk sums are
 * doubles, which float output rounding would forgive most reorderings of: so every slot's passes
 * alternate +2^60, a small value, -2^60, a small value, and which small values survive (those added
 * after a -2^60) depends on the order; reversing the 8 loads' additions then fails the test. */
static void order_sensitive(double *partial, int64_t n, uint64_t seed)
{
    const float *u = ot_uniform((size_t)n, 0.0f, 1.0f, seed);
    for (int64_t c = 0; c < n; c++) {
        int64_t pass = c / TRI_CHUNK_SLOTS;
        partial[c] = pass % 4 == 0 ? 0x1p60 : pass % 4 == 2 ? -0x1p60 : (double)u[c] * pow(2.0, (double)(c % 23) - 11.0);
    }
}

Test(fast_kernels_cpu, chunk_totals_same_bits_as_twins)
{
    const int64_t counts[] = {1, 7, 255, 256, 257, 2049, 5000};
    for (size_t z = 0; z < sizeof counts / sizeof *counts; z++) {
        int64_t n = counts[z];
        double *partial = (double *)ot_doubles((size_t)n);
        order_sensitive(partial, n, 1900 + z);
        float want = 0.5f, got = 0.5f;
        TRI_LAUNCH(reduce_finish_kernel, 1, 1, &want, partial, n);
        tri_emu_launch(1, TRI_CHUNK_SLOTS, [&] { reduce_finish_fast_kernel(&got, partial, n); });
        cr_assert(memcmp(&got, &want, sizeof got) == 0, "%lld chunks: block total %.9g, twin %.9g", (long long)n,
                  got, want);
    }
    /* pieces of 300, 0, 5000, 1, 257 and 40 chunks into slots 0, 0, 1, 2, 2, 0 */
    const int64_t lens[] = {300, 0, 5000, 1, 257, 40}, slots[] = {0, 0, 1, 2, 2, 0};
    tri_sq_group g;
    memset(&g, 0, sizeof g);
    for (int p = 0; p < 6; p++) {
        if (p == 0 || slots[p] != g.slot[p - 1])
            g.run[g.n_runs++] = p;
        g.slot[p] = slots[p];
        g.first[p + 1] = g.first[p] + lens[p];
        g.n++;
    }
    g.run[g.n_runs] = g.n;
    double *partial = (double *)ot_doubles((size_t)g.first[g.n]);
    for (int p = 0; p < g.n; p++)
        order_sensitive(partial + g.first[p], lens[p], 1950 + (uint64_t)p);
    float want[3] = {0.25f, -1.0f, 3.0f}, got[3] = {0.25f, -1.0f, 3.0f};
    TRI_LAUNCH(reduce_multi_finish_kernel, 1, 1, want, partial, g);
    tri_emu_launch((unsigned)g.n_runs, TRI_CHUNK_SLOTS, [&] { reduce_multi_finish_fast_kernel(got, partial, g); });
    for (int k = 0; k < 3; k++)
        cr_assert(memcmp(&got[k], &want[k], sizeof got[k]) == 0, "multi-tensor slot %d: %.9g, twin %.9g", k, got[k],
                  want[k]);
}

/* ---- the row kernels that have run on a GPU (layernorm, RMSNorm, the causal softmax) and GELU ----
 * Against their simple twins (tests/test_cuda_kernels_cpu.c holds those to the CPU backend), bit for
 * bit: row lengths 2, 67, 264, 300, 768 and 1600 (the scalar path for odd lengths, whose rows start
 * off alignment; the vector path; more than one 256-value pass), more rows than one block's 8 warps,
 * fp32 and bf16. The backward kernels add into a gradient that starts nonzero. */
static void *rand_typed(size_t n, int bf16, float lo, float hi, uint64_t seed)
{
    return typed(n, bf16, ot_uniform(n, lo, hi, seed));
}

static void norm_rows_case(int64_t N, int64_t C, int bf, uint64_t seed)
{
    char what[96];
    snprintf(what, sizeof what, "N %lld C %lld %s", (long long)N, (long long)C, bf ? "bf16" : "fp32");
    size_t nc = (size_t)(N * C);
    void *x = rand_typed(nc, bf, -2.0f, 2.0f, seed), *w = rand_typed((size_t)C, bf, 0.5f, 1.5f, seed + 1);
    void *b = rand_typed((size_t)C, bf, -0.5f, 0.5f, seed + 2), *g = rand_typed(nc, bf, -1.0f, 1.0f, seed + 3);
    void *d0 = rand_typed(nc, bf, -1.0f, 1.0f, seed + 4);
    unsigned grid = (unsigned)tri_warp_grid(N), block = 32 * TRI_ROWS_PER_BLOCK;
    /* layernorm forward, then its input gradient from the twin's statistics */
    void *o1 = typed(nc, bf, NULL), *o2 = typed(nc, bf, NULL);
    float *m1 = (float *)typed((size_t)N, 0, NULL), *m2 = (float *)typed((size_t)N, 0, NULL);
    float *r1 = (float *)typed((size_t)N, 0, NULL), *r2 = (float *)typed((size_t)N, 0, NULL);
    TRI_LAUNCH(layernorm_forward_kernel, 1, 1, o1, bf, m1, r1, x, bf, w, bf, b, bf, N, C);
    tri_emu_launch(grid, block, [&] { layernorm_forward_fast_kernel(o2, bf, m2, r2, x, bf, w, bf, b, bf, N, C); });
    same(what, o2, o1, nc, bf);
    same(what, m2, m1, (size_t)N, 0);
    same(what, r2, r1, (size_t)N, 0);
    void *e1 = copy_of(d0, nc, bf), *e2 = copy_of(d0, nc, bf);
    TRI_LAUNCH(layernorm_backward_input_kernel, 1, 1, e1, bf, g, bf, x, bf, w, bf, m1, r1, N, C);
    tri_emu_launch(grid, block,
                   [&] { layernorm_backward_input_fast_kernel(e2, bf, g, bf, x, bf, w, bf, m1, r1, N, C); });
    same(what, e2, e1, nc, bf);
    /* RMSNorm forward and input gradient */
    TRI_LAUNCH(rmsnorm_forward_kernel, 1, 1, o1, bf, r1, x, bf, w, bf, N, C, 1e-5f);
    tri_emu_launch(grid, block, [&] { rmsnorm_forward_fast_kernel(o2, bf, r2, x, bf, w, bf, N, C, 1e-5f); });
    same(what, o2, o1, nc, bf);
    same(what, r2, r1, (size_t)N, 0);
    e1 = copy_of(d0, nc, bf), e2 = copy_of(d0, nc, bf);
    TRI_LAUNCH(rmsnorm_backward_input_kernel, 1, 1, e1, bf, g, bf, x, bf, w, bf, r1, N, C);
    tri_emu_launch(grid, block, [&] { rmsnorm_backward_input_fast_kernel(e2, bf, g, bf, x, bf, w, bf, r1, N, C); });
    same(what, e2, e1, nc, bf);
}

Test(fast_kernels_cpu, norm_rows_same_bits_as_twins)
{
    const int64_t Cs[] = {2, 67, 264, 300, 768, 1600};
    for (size_t z = 0; z < sizeof Cs / sizeof *Cs; z++)
        for (int bf = 0; bf < 2; bf++)
            norm_rows_case(11, Cs[z], bf, 2000 + 10 * z + (uint64_t)bf);
}

/* The residual add fused into the norm after it (add_layernorm / add_rmsnorm_forward_fast_kernel)
 * against the CPU backend's tri_op_add_layernorm_forward / _rmsnorm_forward, which run tri_op_add and
 * then the norm (the op's definition): res, out and the statistics, bit for bit. res in bf16 (each
 * sum rounded before the norm sums it) and fp32, inputs of mixed dtypes, res apart from a and b and
 * in place of a. */
static void residual_norm_case(int64_t N, int64_t C, int rb, int ab, int bb, bool in_place, uint64_t seed)
{
    tri_device *d = ot_device(1);
    char what[128];
    snprintf(what, sizeof what, "N %lld C %lld res %s, a %s, b %s%s", (long long)N, (long long)C,
             rb ? "bf16" : "fp32", ab ? "bf16" : "fp32", bb ? "bf16" : "fp32", in_place ? ", res = a" : "");
    if (in_place)
        ab = rb;
    size_t nc = (size_t)(N * C);
    void *a = rand_typed(nc, ab, -2.0f, 2.0f, seed), *b = rand_typed(nc, bb, -2.0f, 2.0f, seed + 1);
    void *w = rand_typed((size_t)C, rb, 0.5f, 1.5f, seed + 2), *bias = rand_typed((size_t)C, rb, -0.5f, 0.5f, seed + 3);
    void *ca = copy_of(a, nc, ab);
    void *res = in_place ? a : typed(nc, rb, NULL), *cres = in_place ? ca : typed(nc, rb, NULL);
    void *out = typed(nc, rb, NULL), *cout = typed(nc, rb, NULL);
    float *m = (float *)typed((size_t)N, 0, NULL), *cm = (float *)typed((size_t)N, 0, NULL);
    float *r = (float *)typed((size_t)N, 0, NULL), *crs = (float *)typed((size_t)N, 0, NULL);
    tri_tensor tres = tri_tensor_2d(cres, dt(rb), N, C), tout = tri_tensor_2d(cout, dt(rb), N, C);
    tri_tensor ta = tri_tensor_2d(ca, dt(ab), N, C), tb = tri_tensor_2d(b, dt(bb), N, C);
    tri_tensor tw = tri_tensor_1d(w, dt(rb), C), tbias = tri_tensor_1d(bias, dt(rb), C);
    tri_tensor tm = tri_tensor_1d(cm, TRI_F32, N), tr = tri_tensor_1d(crs, TRI_F32, N);
    unsigned grid = (unsigned)tri_warp_grid(N), block = 32 * TRI_ROWS_PER_BLOCK;
    void *a0 = copy_of(a, nc, ab), *ca0 = copy_of(ca, nc, ab); /* the inputs again, for RMSNorm */
    cr_assert_eq(tri_op_add_layernorm_forward(d, tres, tout, tm, tr, ta, tb, tw, tbias), TRI_OK, "%s", tri_error_message());
    tri_emu_launch(grid, block, [&] {
        add_layernorm_forward_fast_kernel(res, rb, out, rb, m, r, a, ab, b, bb, w, rb, bias, rb, N, C);
    });
    same(what, res, cres, nc, rb);
    same(what, out, cout, nc, rb);
    same(what, m, cm, (size_t)N, 0);
    same(what, r, crs, (size_t)N, 0);
    memcpy(a, a0, nc * (ab ? 2 : 4)), memcpy(ca, ca0, nc * (ab ? 2 : 4));
    cr_assert_eq(tri_op_add_rmsnorm_forward(d, tres, tout, tr, ta, tb, tw, 1e-6f), TRI_OK, "%s", tri_error_message());
    tri_emu_launch(grid, block, [&] {
        add_rmsnorm_forward_fast_kernel(res, rb, out, rb, r, a, ab, b, bb, w, rb, N, C, 1e-6f);
    });
    same(what, res, cres, nc, rb);
    same(what, out, cout, nc, rb);
    same(what, r, crs, (size_t)N, 0);
}

Test(fast_kernels_cpu, residual_norm_rows_same_bits_as_cpu)
{
    const int64_t Cs[] = {2, 67, 768, 1600};
    for (size_t z = 0; z < sizeof Cs / sizeof *Cs; z++)
        for (int rb = 0; rb < 2; rb++) {
            uint64_t seed = 2600 + 10 * z + (uint64_t)rb;
            residual_norm_case(11, Cs[z], rb, rb, rb, false, seed);    /* one dtype */
            residual_norm_case(11, Cs[z], rb, !rb, 1, false, seed + 5); /* mixed */
            residual_norm_case(11, Cs[z], rb, rb, 1, true, seed + 7);   /* in place of a */
        }
}

/* Causal softmax rows of B * NH sequences of T (row r is query r % T), forward then backward, in
 * place. */
Test(fast_kernels_cpu, softmax_rows_same_bits_as_twins)
{
    const int64_t Ts[] = {1, 7, 67, 300};
    for (size_t z = 0; z < sizeof Ts / sizeof *Ts; z++)
        for (int bf = 0; bf < 2; bf++) {
            int64_t T = Ts[z], rows = T > 100 ? T : 3 * T; /* one sequence of the long rows: the emulation is slow */
            size_t n = (size_t)(rows * T);
            char what[64];
            snprintf(what, sizeof what, "softmax T %lld %s", (long long)T, bf ? "bf16" : "fp32");
            void *s0 = rand_typed(n, bf, -6.0f, 6.0f, 2100 + z), *a1 = copy_of(s0, n, bf), *a2 = copy_of(s0, n, bf);
            unsigned grid = (unsigned)tri_warp_grid(rows), block = 32 * TRI_ROWS_PER_BLOCK;
            TRI_LAUNCH(causal_softmax_kernel, 1, 1, a1, bf, rows, T);
            tri_emu_launch(grid, block, [&] { causal_softmax_fast_kernel(a2, bf, rows, T); });
            same(what, a2, a1, n, bf);
            void *g0 = rand_typed(n, bf, -1.0f, 1.0f, 2150 + z), *g1 = copy_of(g0, n, bf), *g2 = copy_of(g0, n, bf);
            TRI_LAUNCH(causal_softmax_backward_kernel, 1, 1, g1, bf, a1, bf, rows, T);
            tri_emu_launch(grid, block, [&] { causal_softmax_backward_fast_kernel(g2, bf, a1, bf, rows, T); });
            same(what, g2, g1, n, bf);
        }
}

Test(fast_kernels_cpu, gelu_same_bits_as_twins)
{
    const int64_t counts[] = {1, 1003, 5000};
    for (size_t z = 0; z < sizeof counts / sizeof *counts; z++)
        for (int64_t off = 0; off < 2; off++)
            for (int bf = 0; bf < 2; bf++) {
                int64_t n = counts[z];
                size_t m = (size_t)(n + off), es = bf ? 2 : 4;
                char what[64];
                snprintf(what, sizeof what, "gelu n %lld offset %lld %s", (long long)n, (long long)off,
                         bf ? "bf16" : "fp32");
                char *x = (char *)rand_typed(m, bf, -5.0f, 5.0f, 2200 + z), *g = (char *)rand_typed(m, bf, -1.0f, 1.0f, 2250 + z);
                char *o1 = (char *)typed(m, bf, NULL), *o2 = (char *)typed(m, bf, NULL);
                void *vx = x + off * es, *vg = g + off * es, *v1 = o1 + off * es, *v2 = o2 + off * es;
                bool vec = tri_aligned16_host(vx) && tri_aligned16_host(v2) && tri_aligned16_host(vg);
                TRI_LAUNCH(gelu_forward_kernel, 1, 1, v1, bf, vx, bf, n);
                tri_emu_launch((unsigned)tri_vec8_grid(n), TRI_BLOCK, [&] { gelu_forward_fast_kernel(v2, bf, vx, bf, n, vec); });
                same(what, v2, v1, (size_t)n, bf);
                TRI_LAUNCH(gelu_backward_kernel, 1, 1, v1, bf, vx, bf, vg, bf, n);
                tri_emu_launch((unsigned)tri_vec8_grid(n), TRI_BLOCK,
                               [&] { gelu_backward_fast_kernel(v2, bf, vx, bf, vg, bf, n, vec); });
                same(what, v2, v1, (size_t)n, bf);
            }
}

/* ---- bias + GELU: the fast kernel (8 elements a thread) against its twin and the CPU backend ----
 * OC 1, 7 and 33 (the biases one by one, wrapping inside a thread's 8 at OC < 8) and 8, 64 (the
 * 16-byte bias loads); 1, 5 and 130 rows; inp and out starting 0 or 1 element into their buffers (the
 * vector and the scalar path of the elements), the bias likewise (its vector path off); fp32, bf16 and
 * bf16 inputs into an fp32 out; the backend's launch and one block of 32 (the grid-stride loop turns);
 * in place (out aliases inp). Outputs start NaN. */
static void bias_gelu_case(tri_device *d, int64_t N, int64_t OC, int64_t off, int64_t boff, int ib, int ob,
                           launch_shape ls, uint64_t seed)
{
    int64_t n = N * OC;
    size_t m = (size_t)(n + off), ei = ib ? 2 : 4, eo = ob ? 2 : 4;
    char what[128];
    snprintf(what, sizeof what, "bias_gelu N %lld OC %lld offsets %lld/%lld %s -> %s grid %u", (long long)N,
             (long long)OC, (long long)off, (long long)boff, ib ? "bf16" : "fp32", ob ? "bf16" : "fp32", ls.grid);
    char *x = (char *)rand_typed(m, ib, -4.0f, 4.0f, seed);
    char *b = (char *)rand_typed((size_t)(OC + boff), ib, -2.0f, 2.0f, seed + 1);
    void *vx = x + off * ei, *vb = b + boff * ei;
    void *o0 = (char *)typed(m, ob, NULL) + off * eo, *o1 = (char *)typed(m, ob, NULL) + off * eo;
    void *o2 = (char *)typed(m, ob, NULL) + off * eo;
    cr_assert_eq(tri_op_bias_gelu_forward(d, tri_tensor_2d(o0, dt(ob), N, OC), tri_tensor_2d(vx, dt(ib), N, OC),
                                          tri_tensor_1d(vb, dt(ib), OC)),
                 TRI_OK, "%s: %s", what, tri_error_message());
    TRI_LAUNCH(bias_gelu_forward_kernel, 1, 1, o1, ob, vx, ib, vb, ib, n, OC);
    same(what, o1, o0, (size_t)n, ob);
    bool vec = tri_aligned16_host(vx) && tri_aligned16_host(o2), bias_vec = tri_aligned16_host(vb) && OC % 8 == 0;
    tri_emu_launch(ls.grid, ls.block,
                   [&] { bias_gelu_forward_fast_kernel(o2, ob, vx, ib, vb, ib, n, OC, vec, bias_vec); });
    same(what, o2, o1, (size_t)n, ob);
    if (ib == ob) { /* in place */
        void *xi = copy_of(x, m, ib), *vxi = (char *)xi + off * ei;
        tri_emu_launch(ls.grid, ls.block,
                       [&] { bias_gelu_forward_fast_kernel(vxi, ib, vxi, ib, vb, ib, n, OC, vec, bias_vec); });
        same(what, vxi, o0, (size_t)n, ob);
    }
}

Test(fast_kernels_cpu, bias_gelu_same_bits_as_twin_and_cpu)
{
    const int64_t OCs[] = {1, 7, 8, 33, 64}, Ns[] = {1, 5, 130};
    const int precs[][2] = {{0, 0}, {1, 1}, {1, 0}};
    tri_device *d = ot_device(1);
    for (size_t k = 0; k < sizeof OCs / sizeof *OCs; k++)
        for (size_t r = 0; r < sizeof Ns / sizeof *Ns; r++)
            for (int64_t off = 0; off < 2; off++)
                for (int64_t boff = 0; boff < 2; boff++)
                    for (size_t q = 0; q < sizeof precs / sizeof *precs; q++) {
                        int64_t n = Ns[r] * OCs[k];
                        uint64_t seed = 2500 + 10 * k + r;
                        bias_gelu_case(d, Ns[r], OCs[k], off, boff, precs[q][0], precs[q][1],
                                       launch_shape{(unsigned)tri_vec8_grid(n), TRI_BLOCK}, seed);
                        bias_gelu_case(d, Ns[r], OCs[k], off, boff, precs[q][0], precs[q][1], launch_shape{1, 32},
                                       seed);
                    }
}

/* ---- the Llama family's element-wise kernels: SwiGLU and the rotary embedding ----
 * Block per row against the twins (thread per element), bit for bit: F and half multiples of 8 (the
 * vector path) and not (the scalar path), more rows than one launch's blocks in the second shape (so
 * the grid-stride loop over rows turns), rows whose heads start off alignment (W odd), positions
 * wrapping around T from row0, forward and backward, fp32 and bf16. */
Test(fast_kernels_cpu, llama_elementwise_same_bits_as_twins)
{
    const int64_t Fs[] = {5, 64, 1000};
    for (size_t z = 0; z < sizeof Fs / sizeof *Fs; z++)
        for (int bf = 0; bf < 2; bf++) {
            int64_t N = 7, F = Fs[z];
            size_t ng = (size_t)(N * 2 * F), no = (size_t)(N * F);
            char what[64];
            snprintf(what, sizeof what, "swiglu N %lld F %lld %s", (long long)N, (long long)F, bf ? "bf16" : "fp32");
            void *gu = rand_typed(ng, bf, -4.0f, 4.0f, 2300 + z), *dout = rand_typed(no, bf, -1.0f, 1.0f, 2310 + z);
            void *o1 = typed(no, bf, NULL), *o2 = typed(no, bf, NULL), *d1 = typed(ng, bf, NULL), *d2 = typed(ng, bf, NULL);
            TRI_LAUNCH(swiglu_forward_kernel, 1, 1, o1, bf, gu, bf, N, F);
            tri_emu_launch(3, TRI_BLOCK, [&] { swiglu_forward_fast_kernel(o2, bf, gu, bf, N, F); });
            same(what, o2, o1, no, bf);
            TRI_LAUNCH(swiglu_backward_kernel, 1, 1, d1, bf, gu, bf, dout, bf, N, F);
            tri_emu_launch(3, TRI_BLOCK, [&] { swiglu_backward_fast_kernel(d2, bf, gu, bf, dout, bf, N, F); });
            same(what, d2, d1, ng, bf);
        }
    /* half, n_heads, W (columns of x, at least 2 half n_heads) */
    const int64_t shapes[][3] = {{4, 3, 24}, {32, 2, 128}, {32, 2, 131}, {64, 3, 400}, {12, 1, 24}};
    /* (T, cp, cp_rank): whole sequences, and context parallelism's chunks (positions_math.h) */
    static const int seqs[][3] = {{4, 1, 0}, {8, 2, 0}, {8, 2, 1}, {16, 4, 2}};
    for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++)
        for (size_t q = 0; q < sizeof seqs / sizeof *seqs; q++)
        for (int bf = 0; bf < 2; bf++)
            for (int backward = 0; backward < 2; backward++) {
                int64_t half = shapes[z][0], heads = shapes[z][1], W = shapes[z][2], N = 9, T = seqs[q][0], row0 = 3,
                        P = T + 1;
                int cp = seqs[q][1], cp_rank = seqs[q][2];
                char what[128];
                snprintf(what, sizeof what, "rope half %lld heads %lld W %lld T %lld cp %d rank %d %s%s",
                         (long long)half, (long long)heads, (long long)W, (long long)T, cp, cp_rank, bf ? "bf16" : "fp32",
                         backward ? " backward" : "");
                float *cs = (float *)rand_typed((size_t)(P * half), 0, -1.0f, 1.0f, 2400 + z);
                float *sn = (float *)rand_typed((size_t)(P * half), 0, -1.0f, 1.0f, 2410 + z);
                void *x0 = rand_typed((size_t)(N * W), bf, -2.0f, 2.0f, 2420 + z);
                void *x1 = copy_of(x0, (size_t)(N * W), bf), *x2 = copy_of(x0, (size_t)(N * W), bf);
                TRI_LAUNCH(rope_kernel, 1, 1, x1, bf, cs, sn, N, W, heads, half, T, row0, cp, cp_rank, backward);
                tri_emu_launch(4, 64, [&] {
                    rope_fast_kernel(x2, bf, cs, sn, N, W, heads, half, T, row0, cp, cp_rank, backward);
                });
                same(what, x2, x1, (size_t)(N * W), bf);
            }
}

/* ---- the embedding backward's token links: the sort against the O(N^2) scan ----
 * cuda/embedding/token_links_fast.cuh (a bitonic tile sort in shared memory, then merge passes by
 * rank, the last writing the links) must give exactly the arrays of token_links_kernel, the simple
 * twin, for: random tokens with many repeats, all equal, all distinct (ascending and descending),
 * the int32 extremes (the key's sign flip), N = 1, 2, not a power of two, one tile exactly and one
 * over (4096, 4097), and micro-batch sizes 8192 and 20000 (two and five tiles: one and three
 * merge passes). The launches are embedding.cu's (a block of TRI_LINKS_THREADS a tile) and a grid
 * of one block for every kernel (the tile loop and the grid-stride loop turn); next and first start
 * as 0x5a5a5a5a, so an element no kernel writes fails. */
static void links_case(const char *what, const int32_t *tok, int64_t N)
{
    int32_t *want_next = ot_ints((size_t)N), *want_first = ot_ints((size_t)N);
    TRI_LAUNCH(token_links_kernel, tri_grid_for(N, TRI_BLOCK), TRI_BLOCK, want_next, want_first, tok, N);
    for (int one_block = 0; one_block < 2; one_block++) {
        int32_t *next = ot_ints((size_t)N), *first = ot_ints((size_t)N);
        memset(next, 0x5a, (size_t)N * 4);
        memset(first, 0x5a, (size_t)N * 4);
        uint64_t *src = (uint64_t *)(void *)ot_floats((size_t)(4 * N)), *dst = src + N;
        unsigned tiles = one_block ? 1u : (unsigned)((N + TRI_LINKS_TILE - 1) / TRI_LINKS_TILE);
        tri_emu_launch(tiles, TRI_LINKS_THREADS, [&] { token_links_tile_kernel(src, next, first, tok, N); });
        int merges = 0;
        for (int64_t w = TRI_LINKS_TILE; w < N; w *= 2, merges++) {
            int last = 2 * w >= N;
            unsigned grid = one_block ? 1u : (unsigned)tri_grid_for(N, TRI_BLOCK);
            tri_emu_launch(grid, TRI_BLOCK, [&] { token_links_merge_kernel(dst, next, first, src, N, w, last); });
            uint64_t *t = src;
            src = dst;
            dst = t;
        }
        cr_assert_eq(merges, tri_links_merges(N), "%s: %d merge passes, launch_shapes.h says %d", what, merges,
                     tri_links_merges(N));
        for (int64_t n = 0; n < N; n++) {
            cr_assert_eq(next[n], want_next[n], "%s N %lld%s: next[%lld] %d, the scan's %d", what, (long long)N,
                         one_block ? " (one block)" : "", (long long)n, next[n], want_next[n]);
            cr_assert_eq(first[n], want_first[n], "%s N %lld%s: first[%lld] %d, the scan's %d", what, (long long)N,
                         one_block ? " (one block)" : "", (long long)n, first[n], want_first[n]);
        }
    }
}

Test(fast_kernels_cpu, token_links_same_as_twin)
{
    /* the twin itself on a hand-worked case */
    const int32_t hand[6] = {5, 3, 5, 5, 3, 9};
    const int32_t hand_next[6] = {2, 4, 3, -1, -1, -1}, hand_first[6] = {1, 1, 0, 0, 0, 1};
    int32_t *hn = ot_ints(6), *hf = ot_ints(6);
    TRI_LAUNCH(token_links_kernel, 1, 32, hn, hf, hand, (int64_t)6);
    cr_assert(memcmp(hn, hand_next, sizeof hand_next) == 0 && memcmp(hf, hand_first, sizeof hand_first) == 0,
              "token_links_kernel on 5 3 5 5 3 9");
    links_case("hand-worked", hand, 6);

    const int64_t sizes[] = {1, 2, 3, 100, 1000, 4095, 4096, 4097, 8192, 20000};
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        int64_t N = sizes[z];
#if defined(__SANITIZE_ADDRESS__)
        /* Under the sanitizers (the test command's second stage) N 8192 and 20000 are left out: they
         * run the tile sort and the merge passes of N 4097 (two tiles, a partial one, a merge) for
         * more passes, and took 30 of this test's 40 s there. The Release stage runs every size. */
        if (N > 4097)
            continue;
#endif
        int32_t *rnd = ot_ints((size_t)N), *eq = ot_ints((size_t)N), *up = ot_ints((size_t)N), *down = ot_ints((size_t)N);
        int32_t *ext = ot_ints((size_t)N);
        uint64_t s = 1234 + (uint64_t)N;
        for (int64_t n = 0; n < N; n++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            rnd[n] = (int32_t)((s >> 33) % 50257 % (N / 8 + 3)); /* about 8 repeats a token */
            eq[n] = 7;
            up[n] = (int32_t)n;
            down[n] = (int32_t)(N - n) * 3;
            const int32_t pick[4] = {INT32_MIN, INT32_MAX, -1, 0};
            ext[n] = pick[(s >> 40) % 4];
        }
        links_case("random, repeating", rnd, N);
        links_case("all equal", eq, N);
        links_case("all distinct, ascending", up, N);
        links_case("all distinct, descending", down, N);
        links_case("int32 extremes", ext, N);
    }
}

/* ---- the MoE router's capacity: the sort against the O((NK)^2) scan ----
 * cuda/moe/capacity_fast.cuh (keys tile-sorted, merged, a thread per key and per expert) must give
 * exactly moe_router_keep_kernel's kept_idx and moe_router_count_kernel's counts, for both drop
 * policies and no capacity, with weights on a grid of 8 values (many ties, broken by token), -0 and
 * +0 (equal), NaN (rank 0 on the twin, in no other's count), E 1 to 64, NK = 1 to 10400 (one tile,
 * one over, three tiles: two merge passes; tests/gpu/test_gpu_ops.c runs NK 20000 against the CPU
 * backend), under the backend's launches and one block each (the loops turn). kept starts as
 * 0x5a5a5a5a: a selection no kernel writes fails. */
static void capacity_case(const char *what, int64_t N, int K, int64_t E, int cf_first, uint64_t seed)
{
    int64_t NK = N * K;
    cr_assert(tri_moe_cap_fits(NK, E), "%s: the key holds E %lld and NK %lld", what, (long long)E, (long long)NK);
    int32_t *idx = ot_ints((size_t)NK);
    float *w = ot_floats((size_t)NK);
    uint64_t s = seed;
    for (int64_t n = 0; n < N; n++)
        for (int j = 0; j < K; j++) { /* K distinct experts a token, skewed to the low ones */
            int32_t e;
            bool dup;
            do {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                e = (int32_t)((s >> 33) % (uint64_t)E);
                e = (s >> 60) < 6 ? e / 2 : e;
                dup = false;
                for (int i = 0; i < j; i++)
                    dup = dup || idx[n * K + i] == e;
            } while (dup);
            idx[n * K + j] = e;
            int q = (int)((s >> 20) % 9);
            w[n * K + j] = q == 8 ? ((s >> 40) % 2 ? -0.0f : NAN) : (float)q / 8.0f;
        }
    for (int policy = 0; policy < 2; policy++)
        for (int cf = cf_first; cf < 3; cf++) {
            int64_t cap = cf == 0 ? 0 : tri_moe_capacity(N, K, E, cf == 1 ? 1.0 : 0.5);
            int32_t *want = ot_ints((size_t)NK), *wtok = ot_ints((size_t)E), *wrout = ot_ints((size_t)E);
            TRI_LAUNCH(moe_router_keep_kernel, tri_grid_for(NK, TRI_BLOCK), TRI_BLOCK, want, idx, w, N, K, cap, policy);
            TRI_LAUNCH(moe_router_count_kernel, 1, 32, wtok, wrout, idx, want, N, K, E);
            int pb = tri_moe_cap_pos_bits(NK);
            for (int one_block = 0; one_block < 2; one_block++) {
                int32_t *kept = ot_ints((size_t)NK), *tok = ot_ints((size_t)E), *rout = ot_ints((size_t)E);
                memset(kept, 0x5a, (size_t)NK * 4);
                uint64_t *src = (uint64_t *)(void *)ot_floats((size_t)(4 * NK)), *dst = src + NK;
                unsigned tiles = one_block ? 1u : (unsigned)((NK + TRI_LINKS_TILE - 1) / TRI_LINKS_TILE);
                tri_emu_launch(tiles, TRI_LINKS_THREADS,
                               [&] { moe_capacity_tile_kernel(src, idx, w, NK, policy, pb); });
                for (int64_t wd = TRI_LINKS_TILE; wd < NK; wd *= 2) {
                    unsigned grid = one_block ? 1u : (unsigned)tri_grid_for(NK, TRI_BLOCK);
                    tri_emu_launch(grid, TRI_BLOCK, [&] { moe_capacity_merge_kernel(dst, src, NK, wd); });
                    uint64_t *t = src;
                    src = dst;
                    dst = t;
                }
                unsigned g1 = one_block ? 1u : (unsigned)tri_grid_for(NK, TRI_BLOCK);
                tri_emu_launch(g1, TRI_BLOCK, [&] { moe_capacity_keep_kernel(kept, src, NK, cap, pb); });
                tri_emu_launch(1, 32, [&] { moe_capacity_count_kernel(tok, rout, src, NK, E, cap, pb); });
                for (int64_t i = 0; i < NK; i++)
                    cr_assert_eq(kept[i], want[i], "%s policy %d capacity %lld%s: kept[%lld] %d, the twin's %d", what,
                                 policy, (long long)cap, one_block ? " (one block)" : "", (long long)i, kept[i],
                                 want[i]);
                for (int64_t e = 0; e < E; e++)
                    cr_assert(tok[e] == wtok[e] && rout[e] == wrout[e],
                              "%s policy %d capacity %lld: expert %lld kept %d routed %d, the twin's %d %d", what,
                              policy, (long long)cap, (long long)e, tok[e], rout[e], wtok[e], wrout[e]);
            }
        }
}

Test(fast_kernels_cpu, moe_capacity_same_as_twin)
{
    /* the order code on hand-worked weights: descending, -0 == +0, NaN last */
    cr_assert(tri_moe_cap_code(1.0f, 0) < tri_moe_cap_code(0.5f, 0)
                  && tri_moe_cap_code(0.5f, 0) < tri_moe_cap_code(0.0f, 0)
                  && tri_moe_cap_code(0.0f, 0) == tri_moe_cap_code(-0.0f, 0)
                  && tri_moe_cap_code(-0.0f, 0) < tri_moe_cap_code(-1.0f, 0)
                  && tri_moe_cap_code(-INFINITY, 0) < tri_moe_cap_code(NAN, 0) && tri_moe_cap_code(3.0f, 1) == 0,
              "the capacity's order codes");
    cr_assert(!tri_moe_cap_fits((int64_t)1 << 24, 257) && tri_moe_cap_fits((int64_t)1 << 24, 256),
              "the key: E 256 at 2^24 selections, not 257");
    capacity_case("N 1 K 1 E 1", 1, 1, 1, 0, 5);
    capacity_case("N 203 K 2 E 8", 203, 2, 8, 0, 6);
    capacity_case("N 97 K 5 E 5", 97, 5, 5, 0, 7);
    capacity_case("N 2048 K 2 E 8 (one tile)", 2048, 2, 8, 0, 8);
    capacity_case("N 4097 K 1 E 64 (a tile and one)", 4097, 1, 64, 1, 9);
#if !defined(__SANITIZE_ADDRESS__) /* the twin's (NK)^2: the Release stage only, as the token links */
    capacity_case("N 1300 K 8 E 64 (three tiles)", 1300, 8, 64, 2, 10);
#endif
}

/* ---- the MoE counting sort and row copies: the fast forms against their twins ----
 * moe_sort_fast_kernel (counts, then placement, a warp per chunk) and moe_scan_fast_kernel (one
 * block, tiles of 1024 with a carry) against moe_count_kernel, moe_scan_kernel and moe_place_kernel:
 * the same counts(E, nch) after the scan, tokens_per_expert, row_id_map and sorted_indices, with
 * dropped selections (-1), an expert with no selection, chunks of 1024 and of 64 (E x nch over one
 * tile of the scan: 2, 5 and 20 tiles), E 1 to 1024; outputs start 0x5a5a5a5a. The spread and the
 * combine a warp per row against a thread per element, fp32 and bf16, C 1, 5, 8, 67, 520 (vector
 * pieces, a tail, rows off 16-byte alignment), with weights and without. */
static void sort_case(const char *what, int64_t NK, int64_t K, int64_t E, int64_t chunk, uint64_t seed)
{
    int32_t *idx = ot_ints((size_t)NK);
    float *r = ot_uniform((size_t)NK, 0, 1, seed);
    for (int64_t i = 0; i < NK; i++)
        idx[i] = r[i] < 0.1f ? -1 : (int32_t)((i * 7 + i / K) % (E > 1 ? E - 1 : 1));
    int64_t nch = tri_moe_chunks(NK, chunk);
    int32_t *wc = ot_ints((size_t)(E * nch)), *wt = ot_ints((size_t)E), *wr = ot_ints((size_t)NK),
            *ws = ot_ints((size_t)NK);
    int32_t *gc = ot_ints((size_t)(E * nch)), *gt = ot_ints((size_t)E), *gr = ot_ints((size_t)NK),
            *gs = ot_ints((size_t)NK);
    for (int64_t i = 0; i < NK; i++)
        wr[i] = ws[i] = gr[i] = gs[i] = -1;
    memset(gc, 0x5a, (size_t)(E * nch) * 4);
    memset(gt, 0x5a, (size_t)E * 4);
    TRI_LAUNCH(moe_count_kernel, tri_grid_for(E * nch, TRI_BLOCK), TRI_BLOCK, wc, idx, NK, E, nch, chunk);
    TRI_LAUNCH(moe_scan_kernel, 1, 1, wc, wt, E, nch);
    TRI_LAUNCH(moe_place_kernel, tri_grid_for(E * nch, TRI_BLOCK), TRI_BLOCK, wr, ws, idx, wc, NK, E, nch, chunk);
    unsigned grid = (unsigned)((nch + TRI_ROWS_PER_BLOCK - 1) / TRI_ROWS_PER_BLOCK);
    grid = grid > 2 ? 2 : grid;
    tri_emu_launch(grid, 32 * TRI_ROWS_PER_BLOCK,
                   [&] { moe_sort_fast_kernel(gc, NULL, NULL, NULL, idx, NK, E, nch, chunk); });
    tri_emu_launch(1, TRI_MOE_SCAN_THREADS, [&] { moe_scan_fast_kernel(gc, gt, E, nch); });
    tri_emu_launch(grid, 32 * TRI_ROWS_PER_BLOCK,
                   [&] { moe_sort_fast_kernel(NULL, gr, gs, gc, idx, NK, E, nch, chunk); });
    cr_assert(memcmp(gc, wc, (size_t)(E * nch) * 4) == 0, "%s: the scanned counts differ from the twin's", what);
    for (int64_t e = 0; e < E; e++)
        cr_assert_eq(gt[e], wt[e], "%s: tokens_per_expert[%lld] %d, the twin's %d", what, (long long)e, gt[e], wt[e]);
    for (int64_t i = 0; i < NK; i++) {
        cr_assert_eq(gr[i], wr[i], "%s: row_id_map[%lld] %d, the twin's %d", what, (long long)i, gr[i], wr[i]);
        cr_assert_eq(gs[i], ws[i], "%s: sorted_indices[%lld] %d, the twin's %d", what, (long long)i, gs[i], ws[i]);
    }
}

static void rows_case(int64_t N, int64_t K, int64_t C, int bf, int off, uint64_t seed)
{
    char what[96];
    snprintf(what, sizeof what, "moe rows N %lld K %lld C %lld %s off %d", (long long)N, (long long)K, (long long)C,
             bf ? "bf16" : "fp32", off);
    int64_t P = N * K;
    int32_t *rows = ot_ints((size_t)P), *sorted = ot_ints((size_t)P);
    float *r = ot_uniform((size_t)P, 0, 1, seed);
    int64_t R = 0;
    for (int64_t i = 0; i < P; i++) { /* a permutation of the kept selections, in reverse, padding after */
        sorted[i] = -1;
        rows[i] = r[i] < 0.2f ? -1 : 0;
    }
    for (int64_t i = P - 1; i >= 0; i--)
        if (rows[i] == 0) {
            rows[i] = (int32_t)R;
            sorted[R++] = (int32_t)i;
        }
    float *w = ot_uniform((size_t)P, -1, 1, seed + 1);
    int esz = bf ? 2 : 4;
    void *x = (char *)typed((size_t)(N * C + 1), bf, ot_uniform((size_t)(N * C + 1), -2, 2, seed + 2)) + off * esz;
    void *y = (char *)typed((size_t)(P * C + 1), bf, ot_uniform((size_t)(P * C + 1), -2, 2, seed + 3)) + off * esz;
    for (int weighted = 0; weighted < 2; weighted++) {
        const float *wp = weighted ? w : NULL;
        void *a = typed((size_t)(P * C), bf, NULL), *b = typed((size_t)(P * C), bf, NULL);
        TRI_LAUNCH(moe_spread_kernel, tri_grid_for(P * C, TRI_BLOCK), TRI_BLOCK, a, bf, x, bf, sorted, wp, P, C, K);
        tri_emu_launch(2, 32 * TRI_ROWS_PER_BLOCK, [&] { moe_spread_fast_kernel(b, bf, x, bf, sorted, wp, P, C, K); });
        same(what, b, a, (size_t)(P * C), bf);
        void *c = typed((size_t)(N * C), bf, NULL), *d = typed((size_t)(N * C), bf, NULL);
        TRI_LAUNCH(moe_combine_kernel, tri_grid_for(N * C, TRI_BLOCK), TRI_BLOCK, c, bf, y, bf, rows, wp, N, C, K);
        tri_emu_launch(2, 32 * TRI_ROWS_PER_BLOCK, [&] { moe_combine_fast_kernel(d, bf, y, bf, rows, wp, N, C, K); });
        same(what, d, c, (size_t)(N * C), bf);
    }
}

Test(fast_kernels_cpu, moe_dispatch_same_as_twin)
{
    sort_case("NK 3000 E 8", 3000, 2, 8, TRI_MOE_CHUNK, 1);
    sort_case("NK 1 E 1", 1, 1, 1, TRI_MOE_CHUNK, 2);
    sort_case("NK 20000 E 64 chunk 1024", 20000, 8, 64, TRI_MOE_CHUNK, 3);
    sort_case("NK 20000 E 64 chunk 64", 20000, 8, 64, 64, 4);
    sort_case("NK 5000 E 1024 chunk 1024", 5000, 4, 1024, TRI_MOE_CHUNK, 5);
    for (int bf = 0; bf < 2; bf++)
        for (int off = 0; off < 2; off++) {
            rows_case(37, 2, 520, bf, off, 10);
            rows_case(19, 4, 67, bf, off, 11);
            rows_case(50, 1, 8, bf, off, 12);
            rows_case(9, 3, 5, bf, off, 13);
            rows_case(7, 2, 1, bf, off, 14);
        }
}

/* ---- top-k selection: the device radix select against the CPU's loop ----
 * cuda/compress/topk_fast.cuh's launches (four histogram passes, each followed by its choice, the
 * chunks' counts, their two scans, the emission) must give tri_compress_topk_select's payload word
 * for word, and so must the twin (compress_topk_select_kernel, the same loop on one thread): random
 * values (k 1, 1%, a half, n), magnitudes on a grid of three values with random signs (T's ties
 * straddle chunks, taken from the lower index), zeros and -0 (T 0), NaN and infinities (NaN's key is
 * the largest), denormals, n 1, one chunk, one chunk and one, under the backend's grids and one
 * block each (the loops turn). The payload starts 0x5a5a5a5a, so a pair nobody writes fails. */
static void topk_case(const char *what, const float *e, int64_t n, int64_t k)
{
    int32_t *want = ot_ints((size_t)(2 * k)), *twin = ot_ints((size_t)(2 * k));
    tri_compress_topk_select(e, n, k, want);
    TRI_LAUNCH(compress_topk_select_kernel, 1, 1, twin, e, n, k);
    cr_assert(memcmp(twin, want, (size_t)(2 * k) * 4) == 0, "%s k %lld: the twin's payload differs", what,
              (long long)k);
    int64_t nch = tri_topk_chunks(n);
    for (int one_block = 0; one_block < 2; one_block++) {
        int64_t G = one_block ? 1 : tri_topk_hist_grid(n), grid = one_block ? 1 : nch;
        int64_t *scratch = (int64_t *)(void *)ot_ints((size_t)(2 * (4 + 2 * nch) + 2)), *state, *counts;
        state = (int64_t *)(((uintptr_t)scratch + 7) & ~(uintptr_t)7);
        counts = state + 4;
        uint32_t *part = (uint32_t *)ot_ints((size_t)(256 * G));
        int32_t *got = ot_ints((size_t)(2 * k));
        memset(got, 0x5a, (size_t)(2 * k) * 4);
        for (int shift = TRI_TOPK_FIRST_SHIFT; shift >= 0; shift -= 8) {
            tri_emu_launch((unsigned)G, TRI_TOPK_THREADS, [&] { compress_topk_hist_kernel(part, e, n, state, shift); });
            tri_emu_launch(1, TRI_TOPK_THREADS, [&] { compress_topk_digit_kernel(state, part, G, shift, k); });
        }
        tri_emu_launch((unsigned)grid, TRI_TOPK_THREADS, [&] { compress_topk_count_kernel(counts, e, n, nch, state); });
        tri_emu_launch(1, TRI_TOPK_SCAN_THREADS, [&] { compress_topk_scan_kernel(counts, nch); });
        tri_emu_launch(1, TRI_TOPK_SCAN_THREADS, [&] { compress_topk_scan_kernel(counts + nch, nch); });
        tri_emu_launch((unsigned)grid, TRI_TOPK_THREADS,
                       [&] { compress_topk_emit_kernel(got, e, n, nch, state, counts); });
        for (int64_t j = 0; j < 2 * k; j++)
            cr_assert_eq(got[j], want[j], "%s k %lld%s: payload word %lld is %d, the CPU's %d", what, (long long)k,
                         one_block ? " (one block)" : "", (long long)j, got[j], want[j]);
    }
}

Test(fast_kernels_cpu, topk_select_same_as_cpu)
{
    /* the shared slots: one chunk's load and the threads' runs each cover every slot once */
    cr_assert_eq(tri_topk_slot(31), 31);
    cr_assert_eq(tri_topk_slot(32), 33);
    cr_assert_eq(tri_topk_run_at(3, 5), 3 * TRI_TOPK_PER_THREAD + 5);
    int64_t n = 3 * TRI_TOPK_CHUNK + 5;
    float *u = ot_uniform((size_t)n, -1, 1, 31), *grid3 = ot_floats((size_t)n), *zeros = ot_floats((size_t)n);
    float *odd = ot_floats((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float m = u[i] < -0.33f ? 0.25f : (u[i] < 0.33f ? 0.5f : 1.0f);
        grid3[i] = (i * 7919) % 3 == 0 ? -m : m;
        zeros[i] = i % 5 == 0 ? -0.0f : (i % 97 == 3 ? 1e-3f * (float)(i % 11) : 0.0f);
        odd[i] = i % 1000 == 7 ? NAN : (i % 1500 == 8 ? -INFINITY : (i % 9 == 0 ? 1e-41f * (float)(i % 7) : u[i]));
    }
    odd[n - 1] = INFINITY;
    const int64_t ks[] = {1, n / 100, n / 2, n};
    for (int j = 0; j < 4; j++) {
        topk_case("uniform", u, n, ks[j]);
        topk_case("three magnitudes", grid3, n, ks[j]);
    }
    topk_case("three magnitudes", grid3, n, n / 3 + 17); /* T 0.5: ties straddle chunks */
    topk_case("zeros and -0", zeros, n, 200);             /* T 0: the first zeros by index */
    topk_case("NaN, infinities, denormals", odd, n, 20);
    topk_case("NaN, infinities, denormals", odd, n, n / 2);
    topk_case("n 1", u, 1, 1);
    topk_case("one chunk", u, TRI_TOPK_CHUNK, 41);
    topk_case("one chunk and one", grid3, TRI_TOPK_CHUNK + 1, TRI_TOPK_CHUNK / 2);
}

/* ---- PowerSGD's Gram-Schmidt: a block a matrix against the CPU's loop ----
 * orthonormalize_rows_fast_kernel (thread t: slot t of each dot product, the slots halved in shared
 * memory) must give tri_orthonormalize_rows's bits, and so must the twin (one thread): rows shorter
 * than the block, of exactly one block, of a block and one, of several turns of the loop, one row,
 * more rows than columns (rank 4 of 3: the fourth row is rounding noise normalised), a zero row (it
 * stays zero: the epsilon). x starts from the same values for each form. */
static void gram_schmidt_case(int64_t r, int64_t n, bool zero_row, uint64_t seed)
{
    float *x0 = ot_uniform((size_t)(r * n), -1, 1, seed);
    if (zero_row)
        memset(x0 + (r - 1) * n, 0, (size_t)n * 4);
    size_t m = (size_t)(r * n);
    float *want = (float *)copy_of(x0, m, 0), *twin = (float *)copy_of(x0, m, 0), *got = (float *)copy_of(x0, m, 0);
    tri_orthonormalize_rows(want, r, n);
    TRI_LAUNCH(orthonormalize_rows_kernel, 1, 1, twin, r, n);
    tri_emu_launch(1, TRI_GS_SLOTS, [&] { orthonormalize_rows_fast_kernel(got, r, n); });
    char what[96];
    snprintf(what, sizeof what, "gram-schmidt r %lld n %lld%s (twin)", (long long)r, (long long)n,
             zero_row ? ", a zero row" : "");
    same(what, twin, want, m, 0);
    snprintf(what, sizeof what, "gram-schmidt r %lld n %lld%s (block)", (long long)r, (long long)n,
             zero_row ? ", a zero row" : "");
    same(what, got, want, m, 0);
}

/* out[t] = the block total of acc(TRI_GS_SLOTS) as thread t sees it */
__global__ void gs_total_probe_kernel(double *out, const double *acc)
{
    __shared__ double part[TRI_GS_SLOTS];
    int t = (int)threadIdx.x;
    out[t] = tri_gs_block_total(part, acc[t], t);
}

Test(fast_kernels_cpu, gram_schmidt_same_bits_as_cpu)
{
    /* the block's total in tri_slots_halve's order, which random rows (their double sums rounded to
     * float) cannot tell from another: slots 1, 2^-53, 0, 2^-53, 0, ... sum to 1 + 2^-52 by halving
     * (slot 1 + slot 3 first) and to 1 in index order (each 2^-53 a tie rounded to even) */
    double acc[TRI_GS_SLOTS] = {1.0, 0x1p-53, 0.0, 0x1p-53}, halved[TRI_GS_SLOTS], out[TRI_GS_SLOTS];
    memcpy(halved, acc, sizeof acc);
    cr_assert_eq(tri_slots_halve(halved, TRI_GS_SLOTS), 1.0 + 0x1p-52);
    tri_emu_launch(1, TRI_GS_SLOTS, [&] { gs_total_probe_kernel(out, acc); });
    for (int t = 0; t < TRI_GS_SLOTS; t++)
        cr_assert_eq(out[t], 1.0 + 0x1p-52, "thread %d's block total %.17g", t, out[t]);

    /* the slot order on a hand-worked case of TRI_GS_SLOTS + 1 elements: products 1, -1, 0, ..., 0,
     * 2^-60. The last joins slot 0, where 1 + 2^-60 rounds to 1, and the halving then adds -1: 0.
     * Index order would give (1 - 1) + 2^-60. */
    float a[TRI_GS_SLOTS + 1], b[TRI_GS_SLOTS + 1];
    for (int i = 0; i <= TRI_GS_SLOTS; i++)
        a[i] = b[i] = 0.0f;
    a[0] = 1.0f, b[0] = 1.0f, a[1] = 1.0f, b[1] = -1.0f, a[TRI_GS_SLOTS] = 0x1p-30f, b[TRI_GS_SLOTS] = 0x1p-30f;
    cr_assert_eq(tri_gs_dot(a, b, TRI_GS_SLOTS + 1), 0.0, "slot 0 holds 1 + 2^-60 = 1, slot 1 -1");
    gram_schmidt_case(4, 777, false, 51);
    gram_schmidt_case(1, 1, false, 52);
    gram_schmidt_case(4, TRI_GS_SLOTS, false, 53);
    gram_schmidt_case(2, TRI_GS_SLOTS + 1, true, 54);
    gram_schmidt_case(3, 5000, false, 55);
    gram_schmidt_case(4, 3, false, 56);
    gram_schmidt_case(8, 300, true, 57);
}

/* ---- 1bit and qsgd: the block scales a warp a block, 1bit's sign words by ballots, qsgd's codes
 * staged a warp ----
 * compress_scale_fast_kernel, compress_sign_words_fast_kernel and compress_qsgd_words_fast_kernel
 * must write the simple twins' words
 * (compress_scale_kernel, compress_pack_kernel; tests/test_cuda_kernels_cpu.c holds those to the
 * CPU backend): blocks of 256, 100, 33 and 1 elements, n with a partial block and a partial word, a
 * block longer than a warp's pass and one shorter, -0 (not negative), NaN and infinities; both
 * launch shapes (the backend's and one block: the loops turn). The payload starts 0x5a5a5a5a. The
 * emulation's double shuffle and ballot are checked on their own first. */
__global__ void warp_probe_kernel(double *sum, uint32_t *votes, const double *v)
{
    int t = (int)threadIdx.x;
    double acc = v[t];
    for (int k = 16; k > 0; k >>= 1)
        acc += __shfl_xor_sync(TRI_WARP_FULL, acc, k);
    sum[t] = acc;
    votes[t] = __ballot_sync(TRI_WARP_FULL, t % 3 == 0 || t == 31);
}

static void sign_case(int64_t n, int block, int levels, uint64_t seed)
{
    float *e = ot_uniform((size_t)n, -1, 1, seed);
    for (int64_t i = 0; i < n; i += 37)
        e[i] = i % 74 ? -0.0f : 0.0f;
    if (n > 50)
        e[7] = NAN, e[41] = -INFINITY, e[n - 1] = INFINITY;
    int64_t nb = tri_compress_blocks(n, block), words = tri_compress_words(n, block, levels);
    int32_t *want = ot_ints((size_t)words);
    TRI_LAUNCH(compress_scale_kernel, tri_grid_for(nb, TRI_BLOCK), TRI_BLOCK, want, e, n, block, levels);
    TRI_LAUNCH(compress_pack_kernel, tri_grid_for(words - nb, TRI_BLOCK), TRI_BLOCK, want, e, n, block, levels,
               (uint64_t)9, (uint64_t)4);
    for (int one_block = 0; one_block < 2; one_block++) {
        int32_t *got = ot_ints((size_t)words);
        memset(got, 0x5a, (size_t)words * 4);
        unsigned g1 = one_block ? 1u : (unsigned)((nb + TRI_ROWS_PER_BLOCK - 1) / TRI_ROWS_PER_BLOCK);
        tri_emu_launch(g1, 32 * TRI_ROWS_PER_BLOCK, [&] { compress_scale_fast_kernel(got, e, n, block, levels); });
        int64_t nw = words - nb;
        unsigned g2 = one_block ? 1u : (unsigned)((nw + 32 * TRI_ROWS_PER_BLOCK - 1) / (32 * TRI_ROWS_PER_BLOCK));
        if (levels == 0)
            tri_emu_launch(g2, 32 * TRI_ROWS_PER_BLOCK, [&] { compress_sign_words_fast_kernel(got, e, n, block); });
        else
            tri_emu_launch(g2, 32 * TRI_ROWS_PER_BLOCK, [&] {
                compress_qsgd_words_fast_kernel(got, e, n, block, levels, (uint64_t)9, (uint64_t)4);
            });
        for (int64_t j = 0; j < words; j++)
            cr_assert_eq(got[j], want[j], "n %lld block %d levels %d%s: word %lld is %08x, the twin's %08x", (long long)n,
                         block, levels, one_block ? " (one block)" : "", (long long)j, (unsigned)got[j],
                         (unsigned)want[j]);
    }
}

Test(fast_kernels_cpu, compress_pack_same_bits_as_twins)
{
    double v[32], sum[32];
    uint32_t votes[32];
    for (int t = 0; t < 32; t++)
        v[t] = t == 0 ? 1.0 : (t == 8 || t == 24 ? 0x1p-53 : 0.0);
    tri_emu_launch(1, 32, [&] { warp_probe_kernel(sum, votes, v); });
    for (int t = 0; t < 32; t++) {
        /* halving: lanes 8 and 24 meet first (2^-52), then lane 0's 1: 1 + 2^-52; in index order each
         * 2^-53 would round away against 1 */
        cr_assert_eq(sum[t], 1.0 + 0x1p-52, "lane %d's double shuffle sum %.17g", t, sum[t]);
        cr_assert_eq(votes[t], 0x80000000u | 0x49249249u, "lane %d's ballot %08x", t, votes[t]);
    }
    /* the slot order where fp32 sees it: a block of 64 holding 1 and 2^-24 (slot 0) and 2^-53 twice
     * (slot 1). Index order absorbs each 2^-53 (ties to even) and ends on 1 + 2^-24 exactly, whose
     * mean rounds (a tie) to 1/64; the slots keep 2^-52 beside it, and the mean rounds up. */
    float blk[64] = {0};
    blk[0] = 1.0f, blk[32] = 0x1p-24f, blk[1] = blk[33] = 0x1p-53f;
    float want_scale = (1.0f + 0x1p-23f) / 64.0f;
    cr_assert_eq(tri_compress_block_scale(blk, 64, 0, 64, 0), want_scale, "the CPU's scale in slot order");
    int32_t word = 0;
    tri_emu_launch(1, 32, [&] { compress_scale_fast_kernel(&word, blk, 64, 64, 0); });
    cr_assert_eq(tri_compress_word_float(word), want_scale, "the warp's scale %.9g", tri_compress_word_float(word));
    const int blocks[] = {256, 100, 33, 1};
    for (int k = 0; k < 4; k++) {
        sign_case(10007, blocks[k], 0, 60 + (uint64_t)k);
        sign_case(10007, blocks[k], 7, 70 + (uint64_t)k);
    }
    sign_case(31, 256, 0, 80);        /* one partial word, one short block */
    sign_case(32 * 33 + 5, 64, 0, 81); /* 34 words: a warp's 32 and two */
    sign_case(9000, 256, 2, 82);
    /* qsgd at every code width class: 2 bits (one level: a warp's most codes), 3 and 5 (codes straddle
     * words), 4, 8, 9, 22 (one code over two words) */
    const int levels[] = {1, 3, 7, 15, 100, 255, 1 << 20}; /* --qsgd-levels at most 2^20 */
    for (int k = 0; k < 7; k++) {
        sign_case(10007, 256, levels[k], 90 + (uint64_t)k);
        sign_case(333, 33, levels[k], 100 + (uint64_t)k); /* fewer than a warp's 32 words */
    }
    sign_case(1, 1, 3, 110);
}
