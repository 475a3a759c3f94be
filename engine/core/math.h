/* engine/core/math.h - the arithmetic every device op shares, written once.
 *
 * These inline functions compile as C for the CPU backend and as __host__ __device__ functions for
 * the CUDA backend (cuda/), so the CPU tests exercise the exact arithmetic the GPU kernels run: exp,
 * bf16 round-to-nearest-even (as torch and CUDA's __float2bfloat16), fp32/bf16 storage (tri_load,
 * tri_store), the fixed orders in which every backend sums a row, a column and a flat range, and
 * fixed point. Each op family's own per-element and per-row arithmetic (layernorm, GELU, softmax,
 * cross-entropy, AdamW ...) is beside its ops, in engine/device/ops/<family>_math.h, written on these.
 * Rows are contiguous arrays; nothing here allocates or knows about threads. */
#ifndef TRIDENT_ENGINE_CORE_MATH_H
#define TRIDENT_ENGINE_CORE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TRI_HD static inline __host__ __device__
#else
#define TRI_HD static inline
#endif


/* ---- exp ----
 * exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2] (Cody & Waite 1980
 * two-constant reduction), exp(r) by the Cephes expf minimax polynomial (Moshier 1989); relative
 * error below 2e-7 over the range. Branch-free so loops over it vectorize (libm's expf does not
 * without -ffast-math). Inputs are clamped to [-87.3, 88.3] (results ~1e-38 and ~2e38 at the
 * ends); NaN propagates. */
TRI_HD float tri_expf(float x)
{
    float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    xc = xc == xc ? xc : 0.0f; /* NaN takes the integer path with 0 and is restored at the end */
    float k = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x == x ? y : x;
}

/* ---- log ----
 * log(x) = e ln 2 + log(m) with x = m 2^e, m in [sqrt(1/2), sqrt(2)) from the float's bits, and
 * log(m) = f - f^2 / 2 + f^3 P(f), f = m - 1, by the Cephes logf minimax polynomial (Moshier 1989);
 * e ln 2 in two parts (Cody & Waite 1980). Relative error below 1.4e-7 over the positive floats
 * (tests/test_math.c). 0 gives -inf, a negative x NaN, +inf +inf, NaN itself; subnormals are scaled
 * by 2^23 first. libm's logf and CUDA's logf may differ in the last bit: what a backend must match
 * bit for bit takes this one. */
TRI_HD float tri_logf(float x)
{
    if (x != x || x == INFINITY)
        return x;
    if (x <= 0.0f)
        return x == 0.0f ? -INFINITY : NAN;
    float scaled = 0.0f;
    if (x < 1.17549435e-38f) { /* subnormal */
        x = x * 8388608.0f;
        scaled = -23.0f;
    }
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    int32_t e = (int32_t)((u >> 23) & 0xffu) - 126; /* x = m 2^e, m in [1/2, 1) */
    u = (u & 0x007fffffu) | 0x3f000000u;
    float m;
    memcpy(&m, &u, sizeof m);
    if (m < 0.707106781186547524f) {
        e -= 1;
        m = m + m - 1.0f;
    } else {
        m = m - 1.0f;
    }
    float k = (float)e + scaled;
    float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    y = y + k * -2.12194440e-4f;
    y = y - 0.5f * z;
    float r = m + y;
    return r + k * 0.693359375f;
}

/* ---- bf16: the high 16 bits of an fp32, rounded to nearest even; NaN stays NaN ---- */
TRI_HD uint16_t tri_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

TRI_HD float tri_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- storage of floating tensors: fp32 or bf16, computed in fp32 ----
 * Mixed precision (Micikevicius et al. 2018; bf16 as Megatron-LM's --bf16) stores activations and
 * weights as bf16 and computes in fp32: an op widens every element it reads (exact) and rounds
 * every element it writes to nearest even. `bf16` says how the array is stored: 0 fp32, 1 bf16
 * (raw bits as uint16_t). Kernels take one such flag per floating argument. */
TRI_HD float tri_load(const void *p, int bf16, int64_t i)
{
    return bf16 ? tri_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

TRI_HD void tri_store(void *p, int bf16, int64_t i, float v)
{
    if (bf16)
        ((uint16_t *)p)[i] = tri_float_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* The value bf16 storage keeps of x (x rounded to bf16 and widened back). */
TRI_HD float tri_round_bf16(float x)
{
    return tri_bf16_to_float(tri_float_to_bf16(x));
}

/* The address of element i of an array stored as `bf16` says (a row's start, for the row functions
 * below). Takes a const pointer and returns a plain one, as strchr does: the caller keeps constness. */
TRI_HD void *tri_at(const void *p, int bf16, int64_t i)
{
    return (void *)((uintptr_t)p + (uintptr_t)(i * (bf16 ? 2 : 4)));
}

/* ---- row reductions: the order every backend sums a row in (DESIGN.md §11) ----
 * A row of n values is summed over TRI_ROW_SLOTS = 256 slots: value i goes to slot i % 256, and each
 * slot adds its values in index order, starting from 0. The slots are then combined by a fixed tree:
 * inside each group of TRI_ROW_GROUP = 8 consecutive slots by halving (slot s += slot s + k for
 * k = 4, 2, 1), then the 32 group sums by halving (group g += group g + k for k = 16, 8, 4, 2, 1).
 * This is the order a CUDA warp sums a row in: lane l holds slots 8l .. 8l+7 in registers (one
 * 16-byte load of 8 bf16, or two of 4 floats, per 256 values), reduces its 8 registers, then the 32
 * lanes by __shfl_xor_sync with offsets 16 .. 1 (a + b == b + a in IEEE arithmetic, so every lane
 * ends with the bits of slot 0). On a CPU the 256 slots are vector adds with no reassociation. The
 * simple kernels and the CPU backend call the row functions below, the fast kernels
 * (cuda/<family>/..._fast.cuh) run the same sums a warp per row, so the three agree bit for bit
 * (kernels are built without FMA contraction, as the CPU code is). */
#define TRI_ROW_SLOTS 256
#define TRI_ROW_GROUP 8
#define TRI_ROW_LANES 32

/* The sum of one group of TRI_ROW_GROUP slot sums r[0..8) by halving; r is overwritten. */
TRI_HD float tri_row_group_combine(float *r)
{
    for (int k = TRI_ROW_GROUP / 2; k >= 1; k /= 2)
        for (int s = 0; s < k; s++)
            r[s] += r[s + k];
    return r[0];
}

/* The row sum from its TRI_ROW_SLOTS slot sums acc[0..256) (overwritten): groups, then lanes. */
TRI_HD float tri_row_slots_combine(float *acc)
{
    for (int g = 0; g < TRI_ROW_LANES; g++)
        tri_row_group_combine(acc + g * TRI_ROW_GROUP);
    for (int k = TRI_ROW_LANES / 2; k >= 1; k /= 2)
        for (int g = 0; g < k; g++)
            acc[g * TRI_ROW_GROUP] += acc[(g + k) * TRI_ROW_GROUP];
    return acc[0];
}

TRI_HD void tri_row_slots_zero(float *acc)
{
    for (int s = 0; s < TRI_ROW_SLOTS; s++)
        acc[s] = 0.0f;
}

/* How many of the n values from index i0 fall in this pass over the slots: min(n - i0, 256). A
 * plain bound keeps the slot loops countable, so a C compiler vectorizes them. */
TRI_HD int64_t tri_row_slots_span(int64_t i0, int64_t n)
{
    return n - i0 < TRI_ROW_SLOTS ? n - i0 : TRI_ROW_SLOTS;
}

/* ---- column reductions: the order every backend sums a column over rows (bias and layernorm
 * parameter gradients) ----
 * Rows are taken in chunks of TRI_COL_CHUNK = 64 (the last may be shorter); each chunk's column sum
 * starts from 0 and adds its rows in order; the accumulator (the gradient's previous value) then adds
 * the chunk sums in chunk order. A GPU computes the chunk sums in parallel (a thread per chunk and
 * column, coalesced along the row) and a second pass adds them in order; the CPU walks the same
 * chunks; the simple kernel does both in one thread per column. */
#define TRI_COL_CHUNK 64

/* Number of TRI_COL_CHUNK row chunks of N rows. */
TRI_HD int64_t tri_col_chunks(int64_t N)
{
    return (N + TRI_COL_CHUNK - 1) / TRI_COL_CHUNK;
}

/* ---- row functions (engine/device/ops/<family>_math.h): each takes its rows as fp32 or bf16 storage
 * (a `_bf16` flag per row, 0 or 1, tri_load / tri_store above) and computes in fp32. The fp32 names
 * beside them are the same function with every flag 0: the CPU backend calls those, the CUDA
 * kernels the flagged form, so both run one text. A row written and then read again inside a
 * function (the softmax's probabilities, in place over the scores) is read back as stored: in bf16
 * it is rounded in between. */

/* ---- reductions over a range of a flat buffer (gradient norm, non-finite check) ----
 * In double, over TRI_LANES interleaved lanes combined in order: the CPU backend sums its fixed
 * chunks with these, the CUDA kernels their chunks, so each chunk's sum is the same arithmetic. */
#define TRI_LANES 8 /* also the lanes of the cross-entropy row max (engine/device/ops/crossentropy_math.h) */

TRI_HD int tri_isfinite(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
}

/* sum of x[i]^2 for i in [lo, hi) */
TRI_HD double tri_sum_squares_range_mixed(const void *x, int bf16, int64_t lo, int64_t hi)
{
    double lane[TRI_LANES] = {0};
    int64_t i = lo;
    for (; i + TRI_LANES <= hi; i += TRI_LANES)
        for (int k = 0; k < TRI_LANES; k++) {
            float v = tri_load(x, bf16, i + k);
            lane[k] += (double)v * v;
        }
    for (; i < hi; i++) {
        float v = tri_load(x, bf16, i);
        lane[0] += (double)v * v;
    }
    double acc = 0.0;
    for (int k = 0; k < TRI_LANES; k++)
        acc += lane[k];
    return acc;
}

TRI_HD double tri_sum_squares_range(const float *x, int64_t lo, int64_t hi)
{
    return tri_sum_squares_range_mixed(x, 0, lo, hi);
}

/* number of NaN or Inf among x[lo, hi) (exact in double up to 2^53) */
TRI_HD double tri_count_nonfinite_range_mixed(const void *x, int bf16, int64_t lo, int64_t hi)
{
    double n = 0.0;
    for (int64_t i = lo; i < hi; i++)
        n += tri_isfinite(tri_load(x, bf16, i)) ? 0.0 : 1.0;
    return n;
}

TRI_HD double tri_count_nonfinite_range(const float *x, int64_t lo, int64_t hi)
{
    return tri_count_nonfinite_range_mixed(x, 0, lo, hi);
}

/* The total of n_chunks chunk sums part[0 .. n_chunks) (sum_squares, count_nonfinite): in
 * TRI_CHUNK_SLOTS = 256 slots, chunk c in slot c % 256, each slot adding its chunks in order from 0;
 * then the slots by halving (slot s += slot s + k for k = 128, 64, ..., 1). A block of 256 GPU
 * threads runs exactly this (a thread per slot, then a tree in shared memory), one thread or the
 * CPU the same loops; the chunking itself depends only on the element count. */
#define TRI_CHUNK_SLOTS 256

/* slot[0] = the sum of slot(slots) (a power of two; overwritten) by halving: slot s += slot s + k
 * for k = slots / 2, ..., 1 (s < k). The tree a block of `slots` GPU threads adds its slots by
 * (cuda/kernels/block_reduce.cuh tri_block_halve); also the compressors' block scales and
 * Gram-Schmidt's dot products (engine/device/ops/compress_math.h). */
TRI_HD double tri_slots_halve(double *slot, int slots)
{
    for (int k = slots / 2; k >= 1; k /= 2)
        for (int s = 0; s < k; s++)
            slot[s] += slot[s + k];
    return slot[0];
}

TRI_HD double tri_chunks_total(const double *part, int64_t n_chunks)
{
    double acc[TRI_CHUNK_SLOTS];
    for (int s = 0; s < TRI_CHUNK_SLOTS; s++)
        acc[s] = 0.0;
    for (int64_t c = 0; c < n_chunks; c++)
        acc[c % TRI_CHUNK_SLOTS] += part[c];
    return tri_slots_halve(acc, TRI_CHUNK_SLOTS);
}

/* ---- fixed point: exact, order-independent sums (deterministic mode) ----
 * A gradient contribution x becomes round(x * 2^bits) as an int64; integer sums are exact, so any
 * grouping of them (micro-batches, data-parallel ranks, ZeRO shards) gives the same bits. */
#define TRI_FIXED_LIMIT 4611686018427387904.0 /* 2^62: headroom for sums of up to 2 values */

/* 2^e as a double, for |e| <= 1022: built from its exponent bits, so the conversions below multiply
 * (exact: a power of two) instead of calling ldexp per element (10x slower on the CPU, and the same
 * value). */
TRI_HD double tri_pow2(int e)
{
    uint64_t u = (uint64_t)(1023 + e) << 52;
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* *out = round(x * 2^bits); returns 0 (and *out = 0) when x is not finite or out of range. */
TRI_HD int tri_fixed_from_float(float x, int bits, int64_t *out)
{
    double v = (double)x * tri_pow2(bits);
    if (!(v > -TRI_FIXED_LIMIT && v < TRI_FIXED_LIMIT)) {
        *out = 0;
        return 0;
    }
    *out = (int64_t)llrint(v);
    return 1;
}

/* a + b modulo 2^64 (two's complement). Modular sums are associative, so any grouping still gives
 * the same bits; only a final sum beyond int64 range is wrong, and there each term is < 2^62. */
TRI_HD int64_t tri_fixed_add(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

TRI_HD float tri_fixed_to_float(int64_t a, int bits)
{
    return (float)((double)a * tri_pow2(-bits));
}

/* w (192-bit unsigned, little-endian words) += the exact sum of round(x[i] * 2^bits)^2 over
 * [lo, hi); returns how many elements were not representable (left out). */
TRI_HD int64_t tri_fixed_sum_squares_range(const float *x, int bits, int64_t lo, int64_t hi, uint64_t w[3])
{
    int64_t bad = 0;
    for (int64_t i = lo; i < hi; i++) {
        int64_t a;
        if (!tri_fixed_from_float(x[i], bits, &a)) {
            bad++;
            continue;
        }
        uint64_t m = a < 0 ? (uint64_t)0 - (uint64_t)a : (uint64_t)a;
        unsigned __int128 sq = (unsigned __int128)m * m;
        uint64_t lo64 = (uint64_t)sq, hi64 = (uint64_t)(sq >> 64);
        uint64_t s0 = w[0] + lo64;
        uint64_t c0 = s0 < lo64;
        uint64_t s1 = w[1] + hi64 + c0;
        uint64_t c1 = s1 < hi64 || (c0 && s1 == hi64);
        w[0] = s0;
        w[1] = s1;
        w[2] += c1;
    }
    return bad;
}

#endif

