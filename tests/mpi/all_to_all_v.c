/* tests/mpi/all_to_all_v.c - all-to-all with variable counts on real Open MPI ranks, in the pattern
 * expert parallelism uses it: token dispatch to the experts' ranks and the combine back (GShard,
 * Lepikhin et al. 2020; Megatron-Core's MoEAlltoAllTokenDispatcher).
 *
 * The comm contract of tri_comm_all_to_all_v (every element against its source and index, gaps left
 * alone, argument refusals) runs on the MPI comm in tests/mpi/comm_mpi.c with the other contract
 * checks (tests/commcheck_a2a.c). This program adds a round trip through the comm on the world and on
 * groups split from it (contiguous pairs of ranks, as expert-parallel groups inside data-parallel
 * ones; and the two parity classes), in f32 and bf16:
 * - every rank holds T tokens of C channels (T differs per rank; the last rank of the world has none)
 *   and routes each to K = 2 of E = 2 * size experts drawn from a hash of (source world rank, token),
 *   expert e living on group rank e / 2;
 * - it packs the token copies by destination rank, exchanges the counts (tri_comm_all_to_all_counts),
 *   dispatches (all_to_all_v); each receiver recomputes every sender's routing and checks every
 *   received element against x(source world rank, token, channel);
 * - the "expert" multiplies its rows by e + 1; the combine (all_to_all_v with the counts swapped)
 *   returns them, and each rank checks y[t] = x[t] * (e1 + 1) + x[t] * (e2 + 1) per channel (all
 *   values small integers: exact in bf16 too);
 * - the bytes counted under all_to_all are exactly the dispatched and combined elements sent to the
 *   other ranks, and the count exchange one all-reduce of size * size int64.
 *
 * Usage: mpiexec -n N all_to_all_v   (CTest runs N = 2 and 4). Exit status 0 only if every case
 * passed on every rank; a comm call failing unexpectedly aborts the job. */
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/math.h"
#include "engine/core/status.h"

enum { C = 3, K = 2 };

static uint32_t mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}

/* Tokens on world rank w (the last world rank has none). */
static int tokens_of(int w, int world)
{
    return w == world - 1 && world > 1 ? 0 : 5 + 3 * w;
}

/* The k-th expert (of E) token t of world rank w goes to: two different experts. */
static int expert_of(int w, int t, int k, int E)
{
    int e1 = (int)(mix((uint32_t)(w * 7919 + t)) % (uint32_t)E);
    if (k == 0)
        return e1;
    return (e1 + 1 + (int)(mix((uint32_t)(w * 104729 + t + 17)) % (uint32_t)(E - 1))) % E;
}

/* Channel ch of token t on world rank w: an integer in [-15, 15] (x * 9 stays exact in bf16). */
static float x_of(int w, int t, int ch)
{
    return (float)((int)(mix((uint32_t)(w * 31 + t * 3 + ch + 1000)) % 31u) - 15);
}

static float get(const void *p, tri_dtype dt, int64_t i)
{
    return dt == TRI_BF16 ? tri_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void put(void *p, tri_dtype dt, int64_t i, float v)
{
    if (dt == TRI_BF16)
        ((uint16_t *)p)[i] = tri_float_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

typedef struct verdict {
    int fails;
    char first[512];
} verdict;

static void fail(verdict *v, const char *fmt, ...) TRI_PRINTF(2, 3);
static void fail(verdict *v, const char *fmt, ...)
{
    if (v->fails++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->first, sizeof v->first, fmt, ap);
        va_end(ap);
    }
}

/* A round trip on group g whose rank r is world rank members[r]; world_size for the token counts. */
static int round_trip(verdict *v, tri_comm *g, const int *members, int world_size, tri_dtype dt, const char *name)
{
    int n = g->size, me = g->rank, w = members[me], E = 2 * n;
    int T = tokens_of(w, world_size);
    size_t es = tri_dtype_size(dt);
    int64_t *sc = calloc((size_t)n * 4, sizeof *sc), *sd = sc + n, *rcnt = sc + 2 * n, *rd = sc + 3 * n;
    /* rows sent, packed by destination rank, then by token, then by k: (token, k) of each row */
    int *row_t = malloc(sizeof(int) * (size_t)(T * K + 1)), *row_e = malloc(sizeof(int) * (size_t)(T * K + 1));
    void *send = malloc((size_t)(T * K * C + 1) * es), *back = malloc((size_t)(T * K * C + 1) * es);
    if (!sc || !row_t || !row_e || !send || !back)
        return TRI_ERR(TRI_ENOMEM, "out of memory");
    int rows = 0;
    for (int dst = 0; dst < n; dst++) {
        int first = rows;
        for (int t = 0; t < T; t++)
            for (int k = 0; k < K; k++) {
                int e = expert_of(w, t, k, E);
                if (e / 2 != dst)
                    continue;
                for (int ch = 0; ch < C; ch++)
                    put(send, dt, (int64_t)rows * C + ch, x_of(w, t, ch));
                row_t[rows] = t;
                row_e[rows++] = e;
            }
        sc[dst] = (int64_t)(rows - first) * C;
    }
    tri_comm_displs(n, sc, sd);
    tri_comm_reset_counters(g);
    int rc = tri_comm_all_to_all_counts(g, n, sc, rcnt);
    int64_t total = rc ? 0 : tri_comm_displs(n, rcnt, rd);
    void *recv = malloc((size_t)(total + 1) * es);
    if (!rc && !recv)
        rc = TRI_ERR(TRI_ENOMEM, "out of memory");
    if (!rc) rc = tri_comm_all_to_all_v(g, tri_tensor_1d(recv, dt, total), tri_tensor_1d(send, dt, (int64_t)rows * C),
                                        n, sc, sd, rcnt, rd);
    if (rc) {
        free(sc), free(row_t), free(row_e), free(send), free(back), free(recv);
        return rc;
    }
    /* every received element, from the sender's routing recomputed here; then the expert's scaling */
    for (int src = 0; src < n; src++) {
        int ws = members[src], at = 0, bad = 0;
        for (int t = 0; t < tokens_of(ws, world_size); t++)
            for (int k = 0; k < K; k++) {
                int e = expert_of(ws, t, k, E);
                if (e / 2 != me)
                    continue;
                for (int ch = 0; ch < C; ch++) {
                    int64_t i = rd[src] + (int64_t)at * C + ch;
                    if (i >= rd[src] + rcnt[src]) {
                        bad = 1;
                        continue;
                    }
                    float got = get(recv, dt, i), want = x_of(ws, t, ch);
                    if (got != want && !bad++)
                        fail(v, "%s %s: rank %d got %g from world rank %d (token %d channel %d), want %g", name,
                             tri_dtype_name(dt), w, got, ws, t, ch, want);
                    put(recv, dt, i, want * (float)(e + 1));
                }
                at++;
            }
        if ((int64_t)at * C != rcnt[src])
            fail(v, "%s %s: rank %d received %lld elements from world rank %d, want %lld", name, tri_dtype_name(dt), w,
                 (long long)rcnt[src], ws, (long long)at * C);
    }
    /* combine: the same blocks back, counts and displacements swapped */
    rc = tri_comm_all_to_all_v(g, tri_tensor_1d(back, dt, (int64_t)rows * C), tri_tensor_1d(recv, dt, total), n, rcnt,
                               rd, sc, sd);
    if (!rc) {
        float *y = calloc((size_t)(T * C + 1), sizeof *y);
        for (int r = 0; r < rows; r++)
            for (int ch = 0; ch < C; ch++)
                y[row_t[r] * C + ch] += get(back, dt, (int64_t)r * C + ch);
        for (int t = 0; t < T; t++)
            for (int ch = 0; ch < C; ch++) {
                float want = x_of(w, t, ch) * (float)(expert_of(w, t, 0, E) + 1 + expert_of(w, t, 1, E) + 1);
                if (y[t * C + ch] != want) {
                    fail(v, "%s %s: rank %d token %d channel %d combined to %g, want %g", name, tri_dtype_name(dt),
                         w, t, ch, y[t * C + ch], want);
                    t = T;
                    break;
                }
            }
        free(y);
        uint64_t want_a2a = 0;
        for (int r = 0; r < n; r++)
            want_a2a += r == me ? 0 : (uint64_t)(sc[r] + rcnt[r]) * es;
        uint64_t want_ar = n > 1 ? (uint64_t)n * n * 8 : 0;
        if (tri_comm_bytes(g, TRI_COMM_ALL_TO_ALL) != want_a2a || tri_comm_wire_bytes(g, TRI_COMM_ALL_TO_ALL) != want_a2a ||
            tri_comm_bytes(g, TRI_COMM_ALL_REDUCE) != want_ar)
            fail(v, "%s %s: rank %d counted %llu all_to_all bytes (wire %llu) and %llu all_reduce bytes, want %llu "
                 "and %llu", name, tri_dtype_name(dt), w, (unsigned long long)tri_comm_bytes(g, TRI_COMM_ALL_TO_ALL),
                 (unsigned long long)tri_comm_wire_bytes(g, TRI_COMM_ALL_TO_ALL),
                 (unsigned long long)tri_comm_bytes(g, TRI_COMM_ALL_REDUCE), (unsigned long long)want_a2a,
                 (unsigned long long)want_ar);
    }
    free(sc), free(row_t), free(row_e), free(send), free(back), free(recv);
    return rc;
}

/* The group of world ranks with `color` (key = world rank), its members in rank order. */
static int run_split(verdict *v, tri_comm *world, int color, const char *name)
{
    tri_comm *g = NULL;
    int rc = tri_comm_split(world, color, world->rank, &g);
    if (rc)
        return rc;
    int *colors = malloc(sizeof(int) * (size_t)world->size), *members = malloc(sizeof(int) * (size_t)world->size);
    MPI_Allgather(&color, 1, MPI_INT, colors, 1, MPI_INT, MPI_COMM_WORLD);
    int n = 0;
    for (int r = 0; r < world->size; r++)
        if (colors[r] == color)
            members[n++] = r;
    if (n != g->size || members[g->rank] != world->rank)
        fail(v, "%s: world rank %d is rank %d of %d, want rank of %d", name, world->rank, g->rank, g->size, n);
    for (int d = 0; d < 2 && !rc; d++)
        rc = round_trip(v, g, members, world->size, d ? TRI_BF16 : TRI_F32, name);
    tri_comm_destroy(g);
    free(colors);
    free(members);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm handle = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    int rc = tri_comm_mpi_create(&world, &handle);
    if (rc) {
        fprintf(stderr, "all_to_all_v: %s\n", tri_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    static const char *names[] = {"world", "pairs", "parity"};
    int failed = 0;
    for (int i = 0; i < 3; i++) {
        verdict v = {0};
        int color = i == 0 ? 0 : i == 1 ? world->rank / 2 : world->rank % 2;
        rc = run_split(&v, world, color, names[i]);
        if (rc) {
            fprintf(stderr, "all_to_all_v: rank %d: %s: %s: %s; aborting the job\n", world->rank, names[i],
                    tri_status_name(rc), tri_error_message());
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (v.fails)
            fprintf(stderr, "all_to_all_v: rank %d: FAIL %s: %d wrong; first: %s\n", world->rank, names[i], v.fails,
                    v.first);
        int mine = v.fails > 0, any = 0;
        MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        failed += any;
        if (world->rank == 0)
            printf("all_to_all_v: %-6s %s on %d ranks\n", names[i], any ? "FAIL" : "ok", world->size);
    }
    tri_comm_destroy(world);
    MPI_Finalize();
    return failed ? 1 : 0;
}
