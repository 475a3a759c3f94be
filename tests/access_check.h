/* tests/access_check.h - a model of how a GPU serves one warp's memory access: shared-memory bank
 * conflicts and global-memory 32-byte sectors.
 *
 * The kernels' tests enumerate the 32 byte addresses a warp's lanes give one load or store
 * instruction (from the index functions the kernels themselves call) and ask this model how it is
 * served, so a layout's bank conflicts and partial sectors are found on the CPU, without a GPU or a
 * profiler.
 *
 * Shared memory (NVIDIA, compute capability 5.x and later; CUDA C++ Programming Guide, "Shared
 * Memory" of the compute-capability appendices): 32 banks, each 4 bytes wide; the 4-byte word at
 * byte address a lies in bank (a / 4) mod 32. An access of w bytes a lane is served in phases: w <= 4
 * all 32 lanes at once, w = 8 a half-warp (16 lanes) per phase, w = 16 a quarter-warp (8 lanes) per
 * phase. Inside a phase, lanes reading the same word share it (broadcast), and the phase takes as many
 * cycles as the largest number of distinct words any one bank holds: its conflict degree (1: no
 * conflict; 32: every lane on its own word in one bank). The degree of an access is its worst phase's.
 *
 * Global memory: served in 32-byte sectors (aligned). An access touches the sectors holding any byte
 * its active lanes read or write; it uses whole sectors when every byte of every sector it touches
 * is one a lane asked for (touched sectors x 32 = distinct bytes asked), so no bandwidth is spent on
 * bytes nobody uses. */
#ifndef TRIDENT_TESTS_ACCESS_CHECK_H
#define TRIDENT_TESTS_ACCESS_CHECK_H

#include <stdint.h>

#include <algorithm>
#include <set>
#include <vector>

#define TRI_BANKS 32
#define TRI_BANK_BYTES 4
#define TRI_SECTOR_BYTES 32

/* One warp-wide access: each lane's byte address (meaningful where active), the width a lane
 * (1, 2, 4, 8 or 16 bytes, naturally aligned). */
struct tri_warp_access {
    uint64_t addr[32];
    bool active[32];
    int width;
};

/* An access of `width` bytes with no lane active yet. */
static inline tri_warp_access tri_access(int width)
{
    tri_warp_access a;
    for (int l = 0; l < 32; l++) {
        a.addr[l] = 0;
        a.active[l] = false;
    }
    a.width = width;
    return a;
}

static inline void tri_access_set(tri_warp_access &a, int lane, uint64_t addr)
{
    a.addr[lane] = addr;
    a.active[lane] = true;
}

/* Lanes served together: 32 for accesses of up to 4 bytes, 16 for 8 bytes, 8 for 16 bytes. */
static inline int tri_bank_phase_lanes(int width)
{
    return width <= TRI_BANK_BYTES ? 32 : 32 * TRI_BANK_BYTES / width;
}

/* The conflict degree of a shared-memory access: over its phases, the most distinct 4-byte words
 * one bank holds (0 when no lane is active). */
static inline int tri_bank_conflict_degree(const tri_warp_access &a)
{
    int per = tri_bank_phase_lanes(a.width), worst = 0;
    for (int p0 = 0; p0 < 32; p0 += per) {
        std::set<uint64_t> words[TRI_BANKS];
        for (int l = p0; l < p0 + per; l++) {
            if (!a.active[l])
                continue;
            uint64_t first = a.addr[l] / TRI_BANK_BYTES, last = (a.addr[l] + (uint64_t)a.width - 1) / TRI_BANK_BYTES;
            for (uint64_t w = first; w <= last; w++)
                words[w % TRI_BANKS].insert(w);
        }
        for (int b = 0; b < TRI_BANKS; b++)
            worst = std::max(worst, (int)words[b].size());
    }
    return worst;
}

/* How a global access uses its sectors: sectors touched, the fewest that could hold the bytes asked
 * (distinct bytes / 32, rounded up), and the bytes themselves. */
struct tri_sector_use {
    int sectors, min_sectors, bytes;
    bool whole() const { return sectors * TRI_SECTOR_BYTES == bytes; }
};

static inline tri_sector_use tri_global_sectors(const tri_warp_access &a)
{
    std::set<uint64_t> bytes, sectors;
    for (int l = 0; l < 32; l++)
        if (a.active[l])
            for (int i = 0; i < a.width; i++) {
                bytes.insert(a.addr[l] + (uint64_t)i);
                sectors.insert((a.addr[l] + (uint64_t)i) / TRI_SECTOR_BYTES);
            }
    tri_sector_use u;
    u.sectors = (int)sectors.size();
    u.bytes = (int)bytes.size();
    u.min_sectors = (u.bytes + TRI_SECTOR_BYTES - 1) / TRI_SECTOR_BYTES;
    return u;
}

/* ---- matrix fragments: the standard model of a 16 x 16 tile's load or store ----
 * A WMMA fragment load (load_matrix_sync) or store (store_matrix_sync) reads or writes a 16 x 16
 * tile whose 16 rows of 16 elements (e bytes each) lie `ld` elements apart in shared memory (for a
 * column-major operand the rows are its columns). Which lane moves which element is
 * implementation-defined (the CUDA C++ Programming Guide leaves the fragment layout unspecified), so
 * the check uses the standard analysis, that of ldmatrix (PTX ISA, "ldmatrix"): the tile is cut into
 * 16-byte pieces (16 e / 16 per row), each lane moves one piece an instruction, and each phase of 8
 * lanes moves one column of pieces of 8 consecutive rows (rows 0-7 of piece column 0, rows 8-15 of
 * it, rows 0-7 of piece column 1, ...). A bf16 tile is one instruction (4 phases), an fp32 tile two
 * (8 phases). It is conflict-free when 8 consecutive rows start in 8 different 16-byte bank groups:
 * when the row stride in bytes is an odd multiple of 16. */
static inline std::vector<tri_warp_access> tri_fragment_accesses(uint64_t base, int ld, int elem_bytes)
{
    int pieces_per_row = 16 * elem_bytes / 16, pieces = 16 * pieces_per_row;
    std::vector<tri_warp_access> out;
    for (int q = 0; q < pieces / 32; q++) {
        tri_warp_access a = tri_access(16);
        for (int l = 0; l < 32; l++) {
            int phase = (32 * q + l) / 8, row = 8 * (phase % 2) + l % 8, col_piece = phase / 2;
            tri_access_set(a, l, base + ((uint64_t)row * (uint64_t)ld * (uint64_t)elem_bytes) + 16u * (uint64_t)col_piece);
        }
        out.push_back(a);
    }
    return out;
}

#endif
