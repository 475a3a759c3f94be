/* tests/test_access_patterns.cpp - the memory access patterns of the CUDA kernels' main loops,
 * checked on the CPU: shared-memory bank conflicts and global-memory sectors.
 *
 * tests/access_check.h models how a warp's access is served (32 banks of 4 bytes, 16-byte accesses
 * a quarter-warp a phase, 8-byte a half-warp; global memory in 32-byte sectors). The model is tested
 * first on patterns whose answer is known. Then, for the tiled attention (cuda/attention/
 * flash_mma.kern.h: bf16 on the tensor cores, fp32 on the CUDA cores, head sizes 32 to 128), every
 * access of the three kernels' main loops is enumerated for the 32 lanes of each warp through the
 * index functions the kernels call (flash_strides, flash_stage_rc, flash_rows_rc,
 * flash_softmax_rc, flash_frag_at, the layouts' offsets; the SIMT fragments' tri_sfrag_*_at of
 * cuda/kernels/mma_shim.h; a WMMA fragment in the standard model of access_check.h, as its lanes'
 * addresses are implementation-defined), and the test asserts that every shared-memory access is at
 * most 2-way conflicted and that the global loads and stores of the tiles and outputs use whole
 * 32-byte sectors (the cp.async tile stores: conflict-free), and that the layouts with their second
 * tile buffers fit the A100's 163 KiB. The embedding backward's token-links sort
 * (cuda/embedding/token_links_fast.cuh) is checked the same way through tri_links_slot and
 * tri_links_pair_lo; the MoE counting sort and scan (cuda/moe/dispatch_fast.cuh) through
 * tri_moe_warp_slot, tri_moe_run_at and tri_block_scan_slot; the top-k emission's staged chunk
 * (cuda/compress/topk_fast.cuh) through tri_topk_slot, tri_topk_load_at and tri_topk_run_at; qsgd's
 * staged codes (cuda/compress/compress_fast.cuh) through tri_qsgd_slot. The row kernels (norms, softmax,
 * classifier, the MoE row copies) and the column
 * sums (cuda/matmul/colsum_index.h) go through the sector check too, below. With
 * TRIDENT_TEST_VERBOSE=1 it prints each access's worst degree. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "cuda/attention/flash_mma.kern.h"
#include "cuda/compress/compress_fast.cuh"
#include "cuda/compress/topk_fast.cuh"
#include "cuda/crossentropy/crossentropy_fast.cuh"
#include "cuda/embedding/token_links_fast.cuh"
#include "cuda/matmul/colsum_index.h"
#include "cuda/moe/dispatch_fast.cuh"
#include "cuda/warp.cuh"
#include "tests/access_check.h"

TestSuite(access_patterns);

/* ---- the model on known patterns ---- */

/* lane l at base + l * stride bytes, width w */
static tri_warp_access strided(uint64_t base, uint64_t stride, int w)
{
    tri_warp_access a = tri_access(w);
    for (int l = 0; l < 32; l++)
        tri_access_set(a, l, base + (uint64_t)l * stride);
    return a;
}

Test(access_patterns, model_banks)
{
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 4, 4)), 1, "consecutive floats");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 8, 4)), 2, "every other float");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 128, 4)), 32, "a float every 32");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 132, 4)), 1, "a float every 33");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 0, 4)), 1, "one word for every lane: broadcast");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 2, 2)), 1, "consecutive bf16: two a word");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 16, 16)), 1, "16-byte vectors, contiguous");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 32, 16)), 2, "16-byte vectors every 32 bytes");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 128, 16)), 8, "16-byte vectors every 128 bytes");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 144, 16)), 1, "16-byte vectors every 144 bytes");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 8, 8)), 1, "8-byte vectors, contiguous");
    cr_assert_eq(tri_bank_conflict_degree(strided(0, 256, 8)), 16, "8-byte vectors every 256 bytes");
    tri_warp_access half = strided(0, 128, 4);
    for (int l = 16; l < 32; l++)
        half.active[l] = false;
    cr_assert_eq(tri_bank_conflict_degree(half), 16, "16 lanes a row of 32 floats apart");
    /* quarter-warps are served apart: lanes 0 and 8 on the same 16 bytes' bank group do not meet */
    tri_warp_access q = tri_access(16);
    for (int l = 0; l < 32; l++)
        tri_access_set(q, l, (uint64_t)(l % 8) * 16 + (uint64_t)(l / 8) * 4096);
    cr_assert_eq(tri_bank_conflict_degree(q), 1, "each quarter-warp conflict-free");
}

Test(access_patterns, model_sectors)
{
    tri_sector_use u = tri_global_sectors(strided(0, 4, 4));
    cr_assert(u.sectors == 4 && u.min_sectors == 4 && u.whole(), "128 contiguous bytes: 4 whole sectors");
    u = tri_global_sectors(strided(4, 4, 4));
    cr_assert(u.sectors == 5 && u.min_sectors == 4 && !u.whole(), "off by 4 bytes: 5 sectors");
    u = tri_global_sectors(strided(0, 8, 4));
    cr_assert(u.sectors == 8 && !u.whole(), "every other float: half of 8 sectors");
    u = tri_global_sectors(strided(0, 16, 16));
    cr_assert(u.sectors == 16 && u.whole(), "512 contiguous bytes in 16-byte pieces");
    u = tri_global_sectors(strided(0, 2, 2));
    cr_assert(u.sectors == 2 && u.whole(), "32 consecutive bf16");
}

Test(access_patterns, model_fragments)
{
    /* bf16 rows of 128 bytes: 8 rows of a phase on one bank group (8-way); 144 bytes: none */
    std::vector<tri_warp_access> f = tri_fragment_accesses(0, 64, 2);
    cr_assert_eq(f.size(), 1u);
    cr_assert_eq(tri_bank_conflict_degree(f[0]), 8);
    cr_assert_eq(tri_bank_conflict_degree(tri_fragment_accesses(0, 72, 2)[0]), 1);
    /* fp32: two instructions; rows of 256 bytes 8-way, 272 bytes conflict-free */
    f = tri_fragment_accesses(0, 64, 4);
    cr_assert_eq(f.size(), 2u);
    cr_assert_eq(tri_bank_conflict_degree(f[1]), 8);
    cr_assert_eq(tri_bank_conflict_degree(tri_fragment_accesses(0, 68, 4)[1]), 1);
    /* every element of the tile moved exactly once */
    std::set<uint64_t> bytes;
    for (const tri_warp_access &a : tri_fragment_accesses(1024, 68, 4))
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 16; i++)
                cr_assert(bytes.insert(a.addr[l] + (uint64_t)i).second);
    cr_assert_eq(bytes.size(), 16u * 16u * 4u);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 64; c++)
            cr_assert(bytes.count(1024u + (uint64_t)(r * 68 * 4 + c)));
}

/* ---- the tiled attention ---- */

/* The worst shared-memory degree and the global sector use found for each named access. */
struct access_log {
    std::map<std::string, int> degree;
    std::map<std::string, std::pair<int, int>> sectors; /* worst (touched, minimum) */
    std::map<std::string, bool> whole;

    void shared(const std::string &name, const tri_warp_access &a)
    {
        int d = tri_bank_conflict_degree(a);
        if (!degree.count(name) || d > degree[name])
            degree[name] = d;
    }
    void global(const std::string &name, const tri_warp_access &a)
    {
        tri_sector_use u = tri_global_sectors(a);
        bool ok = u.whole();
        if (!whole.count(name) || !ok || u.sectors - u.min_sectors > sectors[name].first - sectors[name].second)
            sectors[name] = std::make_pair(u.sectors, u.min_sectors);
        whole[name] = whole.count(name) ? whole[name] && ok : ok;
    }
};

/* Kinds of matrix fragment access. */
enum frag_kind { FRAG_A, FRAG_B_ROW, FRAG_B_COL, FRAG_ACC };

/* A fragment's load or store at byte `base` (row stride ld elements of e bytes): the SIMT
 * fragments' own lane addresses (fp32), WMMA's in the standard model (bf16 operands, fp32
 * accumulators). */
template <class P>
static void fragment(access_log &log, const std::string &name, uint64_t base, int ld, frag_kind kind)
{
    const bool simt = sizeof(typename P::elem) == 4;
    int e = kind == FRAG_ACC ? 4 : (int)sizeof(typename P::elem);
    if (!simt) {
        for (const tri_warp_access &a : tri_fragment_accesses(base, ld, e))
            log.shared(name, a);
        return;
    }
    unsigned u = (unsigned)ld;
    if (kind == FRAG_ACC) { /* rows r and r + 8 */
        for (int i = 0; i < 2; i++) {
            tri_warp_access a = tri_access(16);
            for (int l = 0; l < 32; l++)
                tri_access_set(a, l, base + 4u * tri_sfrag_acc_at(l, i, u));
            log.shared(name, a);
        }
        return;
    }
    for (int k0 = 0; k0 < 16; k0 += 4) /* tri_mma's steps of 4 k: a's two loads, b's four */
        for (int i = 0; i < (kind == FRAG_A ? 2 : 4); i++) {
            tri_warp_access a = tri_access(16);
            for (int l = 0; l < 32; l++)
                tri_access_set(a, l, base + 4u * (kind == FRAG_A       ? tri_sfrag_a_at(l, k0, i, u)
                                                  : kind == FRAG_B_ROW ? tri_sfrag_b_row_at(l, k0, i, u)
                                                                       : tri_sfrag_b_col_at(l, k0, i, u)));
            log.shared(name, a);
        }
}

/* One problem's coordinates for the global addresses: B 2, T 200, 4 query heads on 2 key/value
 * heads, sequence 1, query head 3 (key/value head 1), query tile 2, key tile 1. Global buffers start
 * 256-byte aligned (cudaMalloc), at address 0 here. */
template <int HS>
struct problem {
    tri_flash_dims d = {2, 200, 4, 2, HS};
    int64_t b = 1, h = 3, g = 1, i0 = 128, j0 = 64;
};

/* issue_tile's 16-byte asynchronous copies (cp.async) of a tile: global loads from element src (row
 * stride ld) and shared stores at byte dst (and at dst2, the second buffer, when it is another). Every
 * shared store must be 16 bytes wide and conflict-free (checked in check_flash). */
template <class P, int HS>
static void stage(access_log &log, const char *what, uint64_t dst, int64_t src, int64_t ld, uint64_t dst2 = ~0ull)
{
    constexpr int E = (int)sizeof(typename P::elem), G = (int)sizeof(typename P::global);
    for (int w = 0; w < WARPS; w++)
        for (int s = 0; s < flash_stage_steps(HS, E); s++) {
            tri_warp_access sh = tri_access(16), sh2 = tri_access(16), gl = tri_access(16);
            for (int l = 0; l < 32; l++) {
                flash_rc e = flash_stage_rc(32 * w + l, s, HS, E);
                tri_access_set(sh, l, dst + (uint64_t)(flash_at(e, flash_strides<P, HS>::LD) * E));
                tri_access_set(sh2, l, dst2 + (uint64_t)(flash_at(e, flash_strides<P, HS>::LD) * E));
                tri_access_set(gl, l, (uint64_t)((src + e.r * ld + e.c) * G));
            }
            log.shared(std::string("cp.async store ") + what, sh);
            if (dst2 != ~0ull && dst2 != dst)
                log.shared(std::string("cp.async store ") + what + " (second buffer)", sh2);
            log.global(std::string("tile load ") + what, gl);
        }
}

/* rows_times_rows_t: c (fp32 scores at byte c, warp w's rows) = a rows . b rows^T */
template <class P, int HS>
static void scores(access_log &log, const char *what, uint64_t c, uint64_t a, uint64_t b)
{
    typedef flash_strides<P, HS> S;
    const uint64_t E = sizeof(typename P::elem);
    for (int n = 0; n < TILE / 16; n++) {
        for (int k = 0; k < HS / 16; k++) {
            fragment<P>(log, std::string(what) + " a", a + E * (uint64_t)flash_frag_at(0, k, S::LD), S::LD, FRAG_A);
            fragment<P>(log, std::string(what) + " b", b + E * (uint64_t)flash_frag_at(n, k, S::LD), S::LD,
                        FRAG_B_COL);
        }
        fragment<P>(log, std::string(what) + " store", c + 4u * (uint64_t)flash_frag_at(0, n, S::LS), S::LS, FRAG_ACC);
    }
}

/* accumulate_p_times: P (byte p, warp w's rows) . m (byte m) */
template <class P, int HS>
static void p_times(access_log &log, const char *what, uint64_t p, uint64_t m)
{
    typedef flash_strides<P, HS> S;
    const uint64_t E = sizeof(typename P::elem);
    for (int k = 0; k < TILE / 16; k++) {
        fragment<P>(log, std::string(what) + " a", p + E * (uint64_t)flash_frag_at(0, k, S::LP), S::LP, FRAG_A);
        for (int n = 0; n < HS / 16; n++)
            fragment<P>(log, std::string(what) + " b", m + E * (uint64_t)flash_frag_at(k, n, S::LD), S::LD,
                        FRAG_B_ROW);
    }
}

/* store_rows: the accumulator's fragments to the stage (byte st, warp w's), the stage read back and
 * stored to global element dst (row stride ld). */
template <class P, int HS>
static void store_rows_access(access_log &log, const char *what, uint64_t st, int64_t dst, int64_t ld)
{
    constexpr int LST = flash_strides<P, HS>::LSTAGE, G = (int)sizeof(typename P::global);
    for (int n = 0; n < HS / 16; n++)
        fragment<P>(log, std::string(what) + " stage store", st + 4u * (uint64_t)flash_frag_at(0, n, LST), LST,
                    FRAG_ACC);
    for (int s = 0; s < WROWS * HS / 32; s++) {
        tri_warp_access sh = tri_access(4), gl = tri_access(G);
        for (int l = 0; l < 32; l++) {
            flash_rc e = flash_rows_rc(l, s, HS);
            tri_access_set(sh, l, st + 4u * (uint64_t)flash_at(e, LST));
            tri_access_set(gl, l, (uint64_t)((dst + e.r * ld + e.c) * G));
        }
        log.shared(std::string(what) + " stage read", sh);
        log.global(std::string(what) + " store", gl);
    }
}

/* The online softmax of warp w: its score rows at byte s read, P at byte p stored (16-byte pieces),
 * the rows' m and l at byte m read (two lanes a row) and written (the high half's lanes). */
template <class P, int HS>
static void softmax(access_log &log, int w, uint64_t s, uint64_t p, uint64_t m)
{
    typedef flash_strides<P, HS> S;
    const int E = (int)sizeof(typename P::elem), PER = 16 / E;
    for (int u = 0; u < TILE / 2 / 4; u++) {
        tri_warp_access rd = tri_access(16);
        for (int l = 0; l < 32; l++)
            tri_access_set(rd, l, s + 4u * (uint64_t)flash_at(flash_softmax_rc(l, u, 4), S::LS));
        log.shared("softmax score read", rd);
    }
    for (int u = 0; u < TILE / 2 / PER; u++) {
        tri_warp_access wr = tri_access(16);
        for (int l = 0; l < 32; l++)
            tri_access_set(wr, l, p + (uint64_t)(E * flash_at(flash_softmax_rc(l, u, PER), S::LP)));
        log.shared("softmax P store", wr);
    }
    tri_warp_access rd = tri_access(4), wr = tri_access(4);
    for (int l = 0; l < 32; l++) {
        uint64_t at = m + 4u * (uint64_t)(w * WROWS + flash_softmax_rc(l, 0, 4).r);
        tri_access_set(rd, l, at);
        if (l / WROWS)
            tri_access_set(wr, l, at);
    }
    log.shared("softmax m, l read", rd);
    log.shared("softmax m, l, alpha store", wr);
}

template <class P, int HS>
static void forward_accesses(access_log &log)
{
    typedef fwd_layout<P, HS> L;
    typedef flash_strides<P, HS> S;
    const int G = (int)sizeof(typename P::global);
    problem<HS> pr;
    int64_t W = tri_flash_width(pr.d), C = pr.d.NH * HS;
    stage<P, HS>(log, "q", L::q, tri_flash_q_at(pr.d, pr.b, pr.i0, pr.h), W);
    stage<P, HS>(log, "k", L::k, tri_flash_k_at(pr.d, pr.b, pr.j0, pr.g), W, L::k1);
    stage<P, HS>(log, "v", L::v, tri_flash_v_at(pr.d, pr.b, pr.j0, pr.g), W, L::v1);
    for (int w = 0; w < WARPS; w++) {
        uint64_t sw = L::s + 4u * (uint64_t)(w * WROWS * S::LS), pw = L::p + L::E * (uint64_t)(w * WROWS * S::LP),
                 ow = L::o + 4u * (uint64_t)(w * WROWS * S::LO);
        scores<P, HS>(log, "S = Q K^T", sw, L::q + L::E * (uint64_t)(w * WROWS * S::LD), L::k);
        softmax<P, HS>(log, w, sw, pw, L::m);
        for (int s = 0; s < WROWS * HS / 32; s++) {
            tri_warp_access o = tri_access(4), a = tri_access(4), out = tri_access(G);
            for (int l = 0; l < 32; l++) {
                flash_rc e = flash_rows_rc(l, s, HS);
                tri_access_set(o, l, ow + 4u * (uint64_t)flash_at(e, S::LO));
                tri_access_set(a, l, L::alpha + 4u * (uint64_t)(w * WROWS + e.r));
                tri_access_set(out, l, (uint64_t)((pr.b * pr.d.T + pr.i0 + w * WROWS + e.r) * C + pr.h * HS + e.c) *
                                           (uint64_t)G);
            }
            log.shared("O rescale (and output read)", o);
            log.shared("alpha read", a);
            log.global("out store", out);
        }
        for (int n = 0; n < HS / 16; n++)
            fragment<P>(log, "O fragment load/store", ow + 4u * (uint64_t)flash_frag_at(0, n, S::LO), S::LO, FRAG_ACC);
        p_times<P, HS>(log, "O += P V", pw, L::v);
        if (L::double_buffered) {
            scores<P, HS>(log, "S = Q K^T", sw, L::q + L::E * (uint64_t)(w * WROWS * S::LD), L::k1);
            p_times<P, HS>(log, "O += P V", pw, L::v1);
        }
    }
}

template <class P, int HS>
static void backward_accesses(access_log &log)
{
    typedef bwd_layout<P, HS> L;
    typedef flash_strides<P, HS> S;
    const int E = (int)sizeof(typename P::elem);
    problem<HS> pr;
    int64_t W = tri_flash_width(pr.d), C = pr.d.NH * HS;
    /* dk/dv: k, v in t0, t1; q, dout in t2, t3. dq: q, dout in t0, t1; k, v in t2, t3. */
    stage<P, HS>(log, "k", L::t0, tri_flash_k_at(pr.d, pr.b, pr.j0, pr.g), W);
    stage<P, HS>(log, "v", L::t1, tri_flash_v_at(pr.d, pr.b, pr.j0, pr.g), W);
    stage<P, HS>(log, "q", L::t2, tri_flash_q_at(pr.d, pr.b, pr.i0, pr.h), W, L::t2b);
    stage<P, HS>(log, "dout", L::t3, (pr.b * pr.d.T + pr.i0) * C + pr.h * HS, C, L::t3b);
    for (int w = 0; w < WARPS; w++) {
        uint64_t sw = L::s + 4u * (uint64_t)(w * WROWS * S::LS), dpw = L::dp + 4u * (uint64_t)(w * WROWS * S::LS),
                 pw = L::p + (uint64_t)(E * w * WROWS * S::LP), dsw = L::ds + (uint64_t)(E * w * WROWS * S::LP),
                 rows = (uint64_t)(E * w * WROWS * S::LD);
        scores<P, HS>(log, "S^T = K Q^T, S = Q K^T", sw, L::t0 + rows, L::t2);
        scores<P, HS>(log, "dP^T = V dout^T, dP = dout V^T", dpw, L::t1 + rows, L::t3);
        for (int keys_are_rows = 0; keys_are_rows < 2; keys_are_rows++)
            for (int s = 0; s < WROWS * TILE / 32; s++) {
                tri_warp_access rs = tri_access(4), rdp = tri_access(4), wp = tri_access(E), wds = tri_access(E),
                                st = tri_access(4);
                for (int l = 0; l < 32; l++) {
                    flash_rc e = flash_rows_rc(l, s, TILE);
                    int qi = keys_are_rows ? e.c : w * WROWS + e.r;
                    tri_access_set(rs, l, sw + 4u * (uint64_t)flash_at(e, S::LS));
                    tri_access_set(rdp, l, dpw + 4u * (uint64_t)flash_at(e, S::LS));
                    tri_access_set(wp, l, pw + (uint64_t)(E * flash_at(e, S::LP)));
                    tri_access_set(wds, l, dsw + (uint64_t)(E * flash_at(e, S::LP)));
                    tri_access_set(st, l, L::lse + 4u * (uint64_t)qi);
                }
                log.shared("P, dS: score read", rs);
                log.shared("P, dS: dP read", rdp);
                log.shared("P, dS: P store", wp);
                log.shared("P, dS: dS store", wds);
                log.shared("P, dS: lse, delta read", st);
            }
        p_times<P, HS>(log, "dV += P^T dout", pw, L::t3);
        p_times<P, HS>(log, "dK += dS^T Q", dsw, L::t2);
        p_times<P, HS>(log, "dQ += dS K", dsw, L::t2);
        if (L::double_buffered) { /* the streaming tiles' second buffers, read as the first */
            scores<P, HS>(log, "S^T = K Q^T, S = Q K^T", sw, L::t0 + rows, L::t2b);
            scores<P, HS>(log, "dP^T = V dout^T, dP = dout V^T", dpw, L::t1 + rows, L::t3b);
            p_times<P, HS>(log, "dV += P^T dout", pw, L::t3b);
            p_times<P, HS>(log, "dK += dS^T Q", dsw, L::t2b);
            p_times<P, HS>(log, "dQ += dS K", dsw, L::t2b);
        }
        uint64_t st = L::s + 4u * (uint64_t)(w * WROWS * S::LSTAGE);
        int64_t row0 = pr.j0 + w * WROWS;
        store_rows_access<P, HS>(log, "dk", st, tri_flash_k_at(pr.d, pr.b, row0, pr.g), W);
        store_rows_access<P, HS>(log, "dq", st, tri_flash_q_at(pr.d, pr.b, pr.i0 + w * WROWS, pr.h), W);
    }
}

/* Every access of precision P at head size HS: at most 2-way, whole sectors; the table printed
 * when verbose or failing. */
template <class P, int HS>
static bool check_flash(void)
{
    access_log log;
    forward_accesses<P, HS>(log);
    backward_accesses<P, HS>(log);
    bool ok = true;
    for (auto &kv : log.degree) /* the cp.async stores conflict-free, everything else at most 2-way */
        ok = ok && kv.second <= (kv.first.rfind("cp.async", 0) == 0 ? 1 : 2);
    for (auto &kv : log.whole)
        ok = ok && kv.second;
    const char *form = sizeof(typename P::elem) == 2 ? "bf16 mma" : "fp32 simt";
    if (!ok || getenv("TRIDENT_TEST_VERBOSE")) {
        fprintf(stderr, "%s HS %d: shared memory %zu B forward, %zu B backward (double-buffered: %d, %d)\n", form, HS,
                fwd_layout<P, HS>::bytes, bwd_layout<P, HS>::bytes, (int)fwd_layout<P, HS>::double_buffered,
                (int)bwd_layout<P, HS>::double_buffered);
        for (auto &kv : log.degree)
            fprintf(stderr, "  %s %-40s %2d-way\n", kv.second <= 2 ? "ok  " : "FAIL", kv.first.c_str(), kv.second);
        for (auto &kv : log.whole)
            fprintf(stderr, "  %s %-40s %d sectors for %d\n", kv.second ? "ok  " : "FAIL", kv.first.c_str(),
                    log.sectors[kv.first].first, log.sectors[kv.first].second);
    }
    return ok;
}

Test(access_patterns, flash_bf16)
{
    bool ok = check_flash<tri_flash_bf16_mma, 32>();
    ok = check_flash<tri_flash_bf16_mma, 64>() && ok;
    ok = check_flash<tri_flash_bf16_mma, 80>() && ok;
    ok = check_flash<tri_flash_bf16_mma, 96>() && ok;
    ok = check_flash<tri_flash_bf16_mma, 128>() && ok;
    cr_assert(ok, "an access of the bf16 tiled attention is over 2-way or uses partial sectors");
}

/* The shared memory of every instantiation: the second streaming buffers only where the whole fits
 * the A100's 163 KiB (TRI_FLASH_SMEM_MAX), and then appended after the single-buffered layout;
 * bf16 (the training path) double-buffered at every head size, fp32 at HS <= 80. */
template <class P, int HS>
static void smem_fits(bool want_double)
{
    typedef fwd_layout<P, HS> F;
    typedef bwd_layout<P, HS> B;
    cr_assert_eq(F::double_buffered, want_double, "forward HS %d", HS);
    cr_assert_eq(B::double_buffered, want_double, "backward HS %d", HS);
    if (want_double) {
        cr_assert(F::bytes <= TRI_FLASH_SMEM_MAX && B::bytes <= TRI_FLASH_SMEM_MAX);
        cr_assert(F::k1 == F::single && F::v1 == F::k1 + F::tile && F::bytes == F::v1 + F::tile);
        cr_assert(B::t2b == B::single && B::t3b == B::t2b + B::tile && B::bytes == B::t3b + B::tile);
    } else {
        cr_assert(F::k1 == F::k && F::v1 == F::v && F::bytes == F::single);
        cr_assert(B::t2b == B::t2 && B::t3b == B::t3 && B::bytes == B::single);
    }
}

Test(access_patterns, flash_shared_memory)
{
    smem_fits<tri_flash_bf16_mma, 32>(true);
    smem_fits<tri_flash_bf16_mma, 64>(true);
    smem_fits<tri_flash_bf16_mma, 80>(true);
    smem_fits<tri_flash_bf16_mma, 96>(true);
    smem_fits<tri_flash_bf16_mma, 128>(true);
    smem_fits<tri_flash_fp32_simt, 32>(true);
    smem_fits<tri_flash_fp32_simt, 64>(true);
    smem_fits<tri_flash_fp32_simt, 80>(true);
    smem_fits<tri_flash_fp32_simt, 96>(false);
    smem_fits<tri_flash_fp32_simt, 128>(false);
}

Test(access_patterns, flash_fp32)
{
    bool ok = check_flash<tri_flash_fp32_simt, 32>();
    ok = check_flash<tri_flash_fp32_simt, 64>() && ok;
    ok = check_flash<tri_flash_fp32_simt, 80>() && ok;
    ok = check_flash<tri_flash_fp32_simt, 96>() && ok;
    ok = check_flash<tri_flash_fp32_simt, 128>() && ok;
    cr_assert(ok, "an access of the fp32 tiled attention is over 2-way or uses partial sectors");
}

/* ---- the row kernels: norms, causal softmax, cross-entropy (the classifier), the MoE weight gradient ----
 * A warp per row (layernorm_fast.cuh, rmsnorm_fast.cuh, softmax_fast.cuh, cross-entropy's row max,
 * dispatch_fast.cuh) or a block of TRI_CE_WARPS warps per row (cross-entropy's sum of exponentials,
 * gradient and fused classifier): thread t's 8 elements of a pass start at tri_row_first(t), value
 * k at tri_row_at(k) after it, moved by tri_row_load8 / tri_row_store8 in TRI_ROW_PIECES accesses of
 * 4 elements at tri_row_piece(q) (cuda/warp.cuh). No shared memory in their loops (the block form's
 * warp sums: one word a warp, read by all as a broadcast). The rows start 32-byte aligned (C x element
 * size a multiple of 32, as GPT-2's 768 and a vocabulary padded to 50304). Each access is 512
 * contiguous bytes (fp32) or 256 (bf16): 16 or 8 whole sectors. The test asserts whole sectors per
 * access and per pass, for both dtypes, and that a pass's accesses take every element of the warp's
 * span once, in the places tri_row_at says (so the loads and the slot sums agree). Before 2026-11-29
 * a lane's fp32 values were two 16-byte accesses at 8l and 8l+4: 32 sectors for 16 each. */

/* One pass of warp w (threads 32 w .. 32 w + 31 of those sharing the row) at element first of a row
 * starting at byte row. */
static void row_pass(int bf16, uint64_t row, int w, int64_t first, std::vector<tri_sector_use> &per_access,
                     tri_sector_use &pass)
{
    int e = bf16 ? 2 : 4;
    std::vector<uint64_t> elems;
    for (int q = 0; q < TRI_ROW_PIECES; q++) {
        tri_warp_access a = tri_access(4 * e);
        for (int l = 0; l < 32; l++)
            tri_access_set(a, l, row + (uint64_t)((first + tri_row_first(32 * w + l) + tri_row_piece(q)) * e));
        per_access.push_back(tri_global_sectors(a));
    }
    for (int l = 0; l < 32; l++)
        for (int k = 0; k < 8; k++) {
            int64_t at = tri_row_at(k);
            cr_assert_eq(at, tri_row_piece(k / 4) + k % 4, "value %d of a lane is not where its access puts it", k);
            elems.push_back((uint64_t)(first + tri_row_first(32 * w + l) + at));
        }
    std::sort(elems.begin(), elems.end());
    for (size_t j = 0; j < elems.size(); j++)
        cr_assert_eq(elems[j], (uint64_t)(first + TRI_ROW_SLOTS * w) + j, "warp %d's pass does not take its span once",
                     w);
    std::set<uint64_t> sectors; /* the pass: every byte of the lanes' 8 elements */
    for (uint64_t x : elems)
        for (int i = 0; i < e; i++)
            sectors.insert((row + x * (uint64_t)e + (uint64_t)i) / TRI_SECTOR_BYTES);
    pass.sectors = (int)sectors.size();
    pass.bytes = (int)elems.size() * e;
    pass.min_sectors = (pass.bytes + TRI_SECTOR_BYTES - 1) / TRI_SECTOR_BYTES;
}

/* Rows of C elements, row r at byte r C e; `warps` warps share a row, passes `span` elements apart. */
static void check_rows(const char *what, int bf16, int64_t C, int warps, int64_t span)
{
    int e = bf16 ? 2 : 4;
    for (int64_t r = 0; r < 3; r++)
        for (int w = 0; w < warps; w++)
            for (int64_t first = 0; first + TRI_ROW_SLOTS * (w + 1) <= C; first += span) {
                std::vector<tri_sector_use> acc;
                tri_sector_use pass;
                row_pass(bf16, (uint64_t)(r * C * e), w, first, acc, pass);
                cr_assert(pass.whole(), "%s %s: a pass uses %d sectors for %d bytes", what, bf16 ? "bf16" : "fp32",
                          pass.sectors, pass.bytes);
                for (const tri_sector_use &u : acc)
                    cr_assert(u.whole() && u.sectors == 4 * e, "%s %s: an access uses %d sectors for %d bytes", what,
                              bf16 ? "bf16" : "fp32", u.sectors, u.bytes);
            }
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s %s C %lld: whole sectors a pass and an access (%d of them, %d bytes)\n", what,
                bf16 ? "bf16" : "fp32", (long long)C, 4 * e, 128 * e);
}

Test(access_patterns, row_kernels)
{
    for (int bf16 = 0; bf16 < 2; bf16++) {
        /* the MoE permutation, combine and their backwards: a warp a row of C (Mixtral's 4096, a
         * Qwen3-MoE expert's 768), the same passes */
        check_rows("moe row copies (a warp a row)", bf16, 768, 1, TRI_ROW_SLOTS);
        check_rows("moe row copies (a warp a row)", bf16, 4096, 1, TRI_ROW_SLOTS);
        check_rows("norms, softmax, row max (a warp a row)", bf16, 768, 1, TRI_ROW_SLOTS);
        check_rows("norms, softmax, row max (a warp a row)", bf16, 4096, 1, TRI_ROW_SLOTS);
        check_rows("cross-entropy (a block a row)", bf16, 50304, TRI_CE_WARPS, TRI_CE_SLOTS);
    }
}

/* ---- the token links' tile sort (cuda/embedding/token_links_fast.cuh) ----
 * A tile of TRI_LINKS_TILE 8-byte keys in shared memory, TRI_LINKS_THREADS threads. Every warp's
 * accesses: the strided passes (the load's shared store, the links' reads of a slot and its two
 * neighbours, the store of the sorted keys) at tri_links_slot, and both reads and writes of every
 * bitonic step j = 1 .. TILE / 2 at tri_links_pair_lo(p, j) and + j. 8-byte accesses are served a
 * half-warp a phase: strided passes 1-way; bitonic steps j >= 16 1-way, j < 16 2-way (16 lanes
 * spread over 32 words). Global: the token loads (4 bytes a lane) and the key stores (8 bytes)
 * of a warp cover whole sectors, as the merge passes' key loads (a thread per key, consecutive).
 * The merge's stores and the links' writes (next[pos], first[pos]) go where the data sends them,
 * so they are not asserted. */
Test(access_patterns, token_links_sort)
{
    int worst_slot = 0, worst_step = 0;
    const int per = TRI_LINKS_TILE / TRI_LINKS_THREADS;
    for (int w = 0; w < TRI_LINKS_THREADS / 32; w++) {
        for (int r = 0; r < per; r++)
            for (int shift = -1; shift <= 1; shift++) {
                tri_warp_access a = tri_access(8);
                for (int l = 0; l < 32; l++) {
                    int slot = tri_links_slot(32 * w + l, r) + shift;
                    if (slot >= 0 && slot < TRI_LINKS_TILE)
                        tri_access_set(a, l, (uint64_t)slot * 8u);
                }
                worst_slot = std::max(worst_slot, tri_bank_conflict_degree(a));
            }
        for (int r = 0; r < per; r++) {
            tri_warp_access tok = tri_access(4), key = tri_access(8);
            for (int l = 0; l < 32; l++) {
                int slot = tri_links_slot(32 * w + l, r);
                tri_access_set(tok, l, 4096u + (uint64_t)slot * 4u);
                tri_access_set(key, l, 65536u + (uint64_t)slot * 8u);
            }
            cr_assert(tri_global_sectors(tok).whole(), "token links: a warp's token load uses partial sectors");
            cr_assert(tri_global_sectors(key).whole(), "token links: a warp's key store or load uses partial sectors");
        }
        for (int j = 1; j < TRI_LINKS_TILE; j <<= 1)
            for (int p0 = 0; p0 < TRI_LINKS_TILE / 2; p0 += TRI_LINKS_THREADS)
                for (int hi = 0; hi < 2; hi++) {
                    tri_warp_access a = tri_access(8);
                    for (int l = 0; l < 32; l++)
                        tri_access_set(a, l, (uint64_t)(tri_links_pair_lo(p0 + 32 * w + l, j) + hi * j) * 8u);
                    int deg = tri_bank_conflict_degree(a);
                    if (getenv("TRIDENT_TEST_VERBOSE") && w == 0 && p0 == 0 && hi == 0)
                        fprintf(stderr, "token links bitonic step j %d: %d-way\n", j, deg);
                    worst_step = std::max(worst_step, deg);
                }
    }
    cr_assert_eq(worst_slot, 1, "token links: a strided pass of the tile is %d-way", worst_slot);
    cr_assert(worst_step <= 2, "token links: a bitonic step is %d-way (at most 2 expected)", worst_step);
    cr_assert_eq(worst_step, 2, "token links: the steps below 16 are 2-way in this model, found %d", worst_step);
}

/* ---- the column sums: the bias gradient, layernorm's dw and db, RMSNorm's dw ----
 * The two passes of cuda/matmul/colsum.kern.h and the norms' first passes, through
 * cuda/matmul/colsum_index.h (the functions the kernels call): a warp is 32 consecutive threads of
 * a grid-stride loop (blocks of TRI_BLOCK = 256 threads, a multiple of 32). First pass: at each row
 * step k of its chunk, lane l reads element (begin + k, j) of the input (fp32 or bf16), and the
 * norms read the row's mean and rstd (one address for the warp); then it writes its chunk sum.
 * Second pass: lane l reads the chunk sums of column j in chunk order and loads and stores the
 * accumulator j once. No shared memory. Widths that are multiples of 32 use whole sectors in every
 * access (GPT-2's 768, 2304, 3072 and their splits by tp 2, 4, 8; Llama's 4096); a width that is
 * not puts a warp across two chunks, rows TRI_COL_CHUNK apart, and the model must see the partial
 * sectors at that seam. */
struct colsum_use {
    bool whole = true, uniform_stats = true;
    int worst_sectors = 0, worst_min = 0;
    void global(const tri_warp_access &a)
    {
        tri_sector_use u = tri_global_sectors(a);
        if (!u.whole() && whole) {
            worst_sectors = u.sectors;
            worst_min = u.min_sectors;
        }
        whole = whole && u.whole();
    }
};

static colsum_use colsum_accesses(int64_t N, int64_t C, int bf16)
{
    colsum_use use;
    const int e = bf16 ? 2 : 4;
    const int64_t total = tri_col_chunks(N) * C;
    for (int64_t w0 = 0; w0 < total; w0 += 32) {
        for (int k = 0; k < TRI_COL_CHUNK; k++) {
            tri_warp_access in = tri_access(e), stats = tri_access(4);
            bool any = false;
            for (int l = 0; l < 32 && w0 + l < total; l++) {
                tri_col_cell c = tri_col_cell_of(w0 + l, N, C);
                if (c.begin + k >= c.end)
                    continue;
                tri_access_set(in, l, (uint64_t)(tri_col_at(c.begin + k, c.j, C) * e));
                tri_access_set(stats, l, (uint64_t)(4 * (c.begin + k)));
                any = true;
            }
            if (!any)
                continue;
            use.global(in);
            std::set<uint64_t> addrs;
            for (int l = 0; l < 32; l++)
                if (stats.active[l])
                    addrs.insert(stats.addr[l]);
            use.uniform_stats = use.uniform_stats && addrs.size() == 1;
        }
        tri_warp_access part = tri_access(4);
        for (int l = 0; l < 32 && w0 + l < total; l++) {
            tri_col_cell c = tri_col_cell_of(w0 + l, N, C);
            tri_access_set(part, l, (uint64_t)(4 * tri_col_at(c.c, c.j, C)));
        }
        use.global(part);
    }
    for (int64_t j0 = 0; j0 < C; j0 += 32) { /* the second pass: a thread per column */
        tri_warp_access acc = tri_access(e);
        for (int l = 0; l < 32 && j0 + l < C; l++)
            tri_access_set(acc, l, (uint64_t)((j0 + l) * e));
        use.global(acc);
        for (int64_t c = 0; c < tri_col_chunks(N); c++) {
            tri_warp_access part = tri_access(4);
            for (int l = 0; l < 32 && j0 + l < C; l++)
                tri_access_set(part, l, (uint64_t)(4 * tri_col_at(c, j0 + l, C)));
            use.global(part);
        }
    }
    return use;
}

Test(access_patterns, column_sums)
{
    /* the cells: every (chunk, column) once, chunks of TRI_COL_CHUNK rows, the last one shorter */
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int64_t idx = 0; idx < tri_col_chunks(200) * 96; idx++) {
        tri_col_cell c = tri_col_cell_of(idx, 200, 96);
        cr_assert(seen.insert(std::make_pair(c.c, c.j)).second);
        cr_assert(c.begin == c.c * TRI_COL_CHUNK && c.end == (c.c == 3 ? 200 : c.begin + TRI_COL_CHUNK));
        cr_assert_eq(tri_col_at(c.c, c.j, 96), idx, "a thread writes its own chunk sum");
    }
    cr_assert_eq(seen.size(), 4u * 96u);
    const int64_t widths[] = {768, 2304, 3072, 1152, 576, 384, 288, 96, 4096};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int64_t C : widths) {
            colsum_use u = colsum_accesses(200, C, bf16); /* 4 chunks, the last of 8 rows */
            cr_assert(u.whole, "%s C %lld: an access uses %d sectors for %d", bf16 ? "bf16" : "fp32", (long long)C,
                      u.worst_sectors, u.worst_min);
            cr_assert(u.uniform_stats, "C %lld: a warp reads the statistics of two rows", (long long)C);
        }
    /* widths off 32: a warp straddles two chunks; the model sees it */
    colsum_use odd = colsum_accesses(200, 100, 0);
    cr_assert(!odd.whole && !odd.uniform_stats, "C 100: a warp across two chunks must show partial sectors");
    if (getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "column sums: whole sectors and one statistics address a warp at C = 96 .. 4096; "
                        "C 100: %d sectors for %d at a chunk seam\n",
                odd.worst_sectors, odd.worst_min);
}

/* The worst bank conflict of the block scan's steps (cuda/kernels/block_reduce.cuh) for warp w of a
 * block of `threads`, words of `bytes`: each active lane at tri_block_scan_slot(t, d). */
static int block_scan_degree(int w, int threads, unsigned bytes)
{
    int worst = 0;
    for (int d = 1; d < threads; d <<= 1) {
        tri_warp_access a = tri_access((int)bytes);
        for (int l = 0; l < 32; l++)
            if (32 * w + l >= d)
                tri_access_set(a, l, (uint64_t)tri_block_scan_slot(32 * w + l, d) * bytes);
        worst = std::max(worst, tri_bank_conflict_degree(a));
    }
    return worst;
}

/* ---- the MoE counting sort (cuda/moe/dispatch_fast.cuh) ----
 * moe_sort_fast_kernel, per warp w of a block: each lane stores its expert at tri_moe_warp_slot(w,
 * lane) (4-byte words, consecutive: 1-way), then all lanes read the same slot j together (a
 * broadcast: 1-way), and the warp's running counts are set and copied out at tri_moe_run_at(w, e, E)
 * for e = lane, lane + 32, ... (consecutive: 1-way; the adds of a step's last lanes go where the
 * experts send them, so they are not asserted). moe_scan_fast_kernel: thread t at its word t and at
 * tri_block_scan_slot(t, d) for every distance d (consecutive words of the active lanes: 1-way); its
 * tile of counts loaded and stored a thread a word, consecutive (whole sectors). */
Test(access_patterns, moe_counting_sort)
{
    int worst = 0;
    for (int w = 0; w < TRI_ROWS_PER_BLOCK; w++) {
        tri_warp_access st = tri_access(4);
        for (int l = 0; l < 32; l++)
            tri_access_set(st, l, (uint64_t)tri_moe_warp_slot(w, l) * 4u);
        worst = std::max(worst, tri_bank_conflict_degree(st));
        for (int j = 0; j < 32; j++) {
            tri_warp_access rd = tri_access(4);
            for (int l = 0; l < 32; l++)
                tri_access_set(rd, l, (uint64_t)tri_moe_warp_slot(w, j) * 4u);
            worst = std::max(worst, tri_bank_conflict_degree(rd));
        }
        const int64_t Es[] = {8, 60, 128, 1024};
        for (int64_t E : Es)
            for (int64_t e0 = 0; e0 < E; e0 += 32) {
                tri_warp_access run = tri_access(4);
                for (int l = 0; l < 32; l++)
                    if (e0 + l < E)
                        tri_access_set(run, l, 65536u + (uint64_t)tri_moe_run_at(w, e0 + l, E) * 4u);
                worst = std::max(worst, tri_bank_conflict_degree(run));
            }
    }
    cr_assert_eq(worst, 1, "moe counting sort: a shared access is %d-way", worst);
    int worst_scan = 0;
    for (int w = 0; w < TRI_MOE_SCAN_THREADS / 32; w++) {
        tri_warp_access own = tri_access(4), tile = tri_access(4);
        for (int l = 0; l < 32; l++) {
            tri_access_set(own, l, (uint64_t)(32 * w + l) * 4u);
            tri_access_set(tile, l, 4096u + (uint64_t)(32 * w + l) * 4u);
        }
        worst_scan = std::max(worst_scan, tri_bank_conflict_degree(own));
        cr_assert(tri_global_sectors(tile).whole(), "moe scan: a warp's count load or store uses partial sectors");
        worst_scan = std::max(worst_scan, block_scan_degree(w, TRI_MOE_SCAN_THREADS, 4));
    }
    cr_assert_eq(worst_scan, 1, "moe scan: a shared access is %d-way", worst_scan);
}

/* ---- the top-k emission's staged chunk (cuda/compress/topk_fast.cuh) ----
 * compress_topk_emit_kernel loads a chunk a round at a time, thread t at tri_topk_load_at(t, r)
 * (consecutive floats of e: whole sectors), into tri_topk_slot of it, then each thread walks its run
 * of TRI_TOPK_PER_THREAD elements at tri_topk_slot(tri_topk_run_at(t, j)). Both shared accesses
 * are 1-way; without the padding word every 32 the runs' reads would be 16-way (lanes 2 apart on
 * one bank). The scans of the threads' int64 counts (tri_block_scan_slot) read consecutive 8-byte
 * words. */
Test(access_patterns, topk_emission)
{
    int worst = 0, unpadded = 0;
    for (int w = 0; w < TRI_TOPK_THREADS / 32; w++) {
        for (int k = 0; k < TRI_TOPK_PER_THREAD; k++)
            for (int runs = 0; runs < 2; runs++) { /* round k of the load, then element k of the runs */
                tri_warp_access slots = tri_access(4), plain = tri_access(4);
                for (int l = 0; l < 32; l++) {
                    int p = runs ? tri_topk_run_at(32 * w + l, k) : tri_topk_load_at(32 * w + l, k);
                    tri_access_set(slots, l, (uint64_t)tri_topk_slot(p) * 4u);
                    tri_access_set(plain, l, (uint64_t)p * 4u);
                }
                worst = std::max(worst, tri_bank_conflict_degree(slots));
                if (runs)
                    unpadded = std::max(unpadded, tri_bank_conflict_degree(plain));
                else
                    cr_assert(tri_global_sectors(plain).whole(), "top-k: a warp's chunk load uses partial sectors");
            }
        worst = std::max(worst, block_scan_degree(w, TRI_TOPK_THREADS, 8));
    }
    cr_assert_eq(worst, 1, "top-k emission: a shared access is %d-way", worst);
    cr_assert_eq(unpadded, 16, "top-k emission: the runs' reads unpadded would be %d-way, not 16", unpadded);
}

/* ---- qsgd's staged codes (cuda/compress/compress_fast.cuh) ----
 * compress_qsgd_words_fast_kernel: the warp whose 32 words start at w0 writes code i at
 * tri_qsgd_slot(i, w0, bits), lane l the codes first + l + 32 k; then lane j reads its word's codes,
 * (w0 + j) 32 / bits + m for m = 0, 1, ..., 32 / bits apart across the lanes. At every code width of
 * --qsgd-levels (2 to 22 bits) and word offsets that start the warp's first code mid-word, both are
 * at most 2-way (1-way where bits divides 32); unpadded, the reads at 2 bits would be 16-way. */
Test(access_patterns, qsgd_staged_codes)
{
    int worst_pow2 = 0, worst = 0, unpadded = 0;
    for (int bits = 2; bits <= 22; bits++)
        for (int64_t w0 = 0; w0 < 32 * 8; w0 += 32) {
            int64_t first = w0 * 32 / bits, last = ((w0 + 32) * 32 - 1) / bits;
            cr_assert_leq(tri_qsgd_slot(last, w0, bits), TRI_QSGD_WARP_SLOTS - 1, "bits %d: the codes overflow", bits);
            int degree = 0;
            for (int64_t k = 0; first + 32 * k <= last; k++) {
                tri_warp_access a = tri_access(4);
                for (int l = 0; l < 32 && first + l + 32 * k <= last; l++)
                    tri_access_set(a, l, (uint64_t)tri_qsgd_slot(first + l + 32 * k, w0, bits) * 4u);
                degree = std::max(degree, tri_bank_conflict_degree(a));
            }
            for (int m = 0; m <= 32 / bits + 1; m++) { /* lane j's codes: those of bits 32 (w0 + j) .. + 31 */
                tri_warp_access a = tri_access(4), plain = tri_access(4);
                for (int j = 0; j < 32; j++) {
                    int64_t i = (w0 + j) * 32 / bits + m;
                    if (i > ((w0 + j) * 32 + 31) / bits)
                        continue;
                    tri_access_set(a, j, (uint64_t)tri_qsgd_slot(i, w0, bits) * 4u);
                    tri_access_set(plain, j, (uint64_t)(i - first) * 4u);
                }
                degree = std::max(degree, tri_bank_conflict_degree(a));
                if (bits == 2)
                    unpadded = std::max(unpadded, tri_bank_conflict_degree(plain));
            }
            if (32 % bits == 0)
                worst_pow2 = std::max(worst_pow2, degree);
            worst = std::max(worst, degree);
        }
    cr_assert_eq(worst_pow2, 1, "qsgd staged codes at 2, 4, 8 or 16 bits: a shared access is %d-way", worst_pow2);
    cr_assert_leq(worst, 2, "qsgd staged codes: a shared access is %d-way", worst);
    cr_assert_eq(unpadded, 16, "qsgd staged codes: the 2-bit reads unpadded would be %d-way, not 16", unpadded);
}
