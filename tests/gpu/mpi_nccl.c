/* tests/gpu/mpi_nccl.c - the NCCL comm against the MPI comm, under mpiexec (one GPU per rank).
 *
 * Every collective of the comm interface runs twice on the same per-rank inputs: on device buffers
 * through the NCCL comm (cuda/comm_nccl.c) and on host buffers through the MPI comm
 * (engine/comm/comm_mpi.c). Results must agree: exactly for max, gathers, broadcast, p2p and integer
 * sums; within 1e-6 normalised error for float sums (the two libraries may add the ranks in other
 * orders). Also: in-place all-gather and reduce-scatter, batched p2p around a ring with two
 * messages per pair (posting order), split into one-rank groups (the device-memory copy path),
 * barrier, the non-blocking collectives (start / test / wait, several in flight, waited for out of
 * order, with compute queued meanwhile), int64 sums (deterministic mode), all-to-all with variable
 * counts (f32 and bf16, gaps between the receive blocks kept, the counts exchange, a one-rank group),
 * and the byte counters. Prints "N passed, N failed"; exits 77 (skip) with too few GPUs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/comm_nccl.h"
#include "engine/comm/comm.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "tests/gpu/mpi_common.h"

static int passed, failed;

static void check(int rank, bool ok, const char *what)
{
    if (ok)
        passed++;
    else {
        failed++;
        fprintf(stderr, "rank %d: FAIL %s (%s)\n", rank, what, tri_error_message());
    }
}

static float *randoms(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * tri_rng_uniform(seed, 0, i) - 1.0);
    return x;
}

/* Device copy of host data (n floats or ints). */
static tri_tensor upload(tri_device *d, tri_dtype dt, size_t n, const void *host)
{
    tri_tensor t = tri_tensor_1d(NULL, dt, (int64_t)n);
    if (tri_device_alloc(d, &t.data, tri_tensor_bytes(t)) || (host && tri_device_copy_from_host(d, t, host))) {
        fprintf(stderr, "upload: %s\n", tri_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return t;
}

static bool same(tri_device *d, tri_tensor t, const void *want)
{
    void *got = malloc(tri_tensor_bytes(t));
    bool ok = tri_device_copy_to_host(d, got, t) == TRI_OK && memcmp(got, want, tri_tensor_bytes(t)) == 0;
    free(got);
    tri_device_free(d, t.data);
    return ok;
}

static bool near(tri_device *d, tri_tensor t, const float *want)
{
    size_t n = (size_t)tri_tensor_numel(t);
    float *got = malloc(n * sizeof *got);
    bool ok = tri_device_copy_to_host(d, got, t) == TRI_OK && gpu_close("nccl vs mpi", got, want, n, 1e-6);
    free(got);
    tri_device_free(d, t.data);
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int skip = mpi_gpu_check(rank, size);
    if (skip) {
        MPI_Finalize();
        return skip;
    }
    tri_device *dev = NULL;
    tri_comm *nccl = NULL, *mpi = NULL;
    MPI_Comm world = MPI_COMM_WORLD;
    if (tri_device_cuda_create(&dev, rank) || tri_comm_nccl_create(&nccl, &world, dev, 60.0) ||
        tri_comm_mpi_create(&mpi, &world)) {
        fprintf(stderr, "rank %d: set-up failed: %s\n", rank, tri_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const size_t n = 100003;
    float *x = randoms(n * (size_t)size, 100 + (uint64_t)rank);

    /* all_reduce: float sum, float max, int sum */
    {
        float *h = malloc(n * sizeof *h);
        memcpy(h, x, n * sizeof *h);
        tri_tensor t = upload(dev, TRI_F32, n, x);
        check(rank, tri_comm_all_reduce(nccl, t, TRI_REDUCE_SUM) == TRI_OK, "nccl all_reduce sum");
        check(rank, tri_comm_all_reduce(mpi, tri_tensor_1d(h, TRI_F32, (int64_t)n), TRI_REDUCE_SUM) == TRI_OK, "mpi all_reduce");
        check(rank, near(dev, t, h), "all_reduce sum f32");
        memcpy(h, x, n * sizeof *h);
        t = upload(dev, TRI_F32, n, x);
        tri_comm_all_reduce(nccl, t, TRI_REDUCE_MAX);
        tri_comm_all_reduce(mpi, tri_tensor_1d(h, TRI_F32, (int64_t)n), TRI_REDUCE_MAX);
        check(rank, same(dev, t, h), "all_reduce max f32");
        int32_t *k = malloc(n * sizeof *k);
        for (size_t i = 0; i < n; i++)
            k[i] = (int32_t)(i * 7 + (size_t)rank);
        t = upload(dev, TRI_I32, n, k);
        tri_comm_all_reduce(nccl, t, TRI_REDUCE_SUM);
        tri_comm_all_reduce(mpi, tri_tensor_1d(k, TRI_I32, (int64_t)n), TRI_REDUCE_SUM);
        check(rank, same(dev, t, k), "all_reduce sum i32");
        free(k);
        free(h);
    }
    /* reduce_scatter: separate buffers and in place (out = in's own slice) */
    {
        size_t total = n * (size_t)size;
        float *h = malloc(n * sizeof *h);
        tri_tensor in = upload(dev, TRI_F32, total, x), out = upload(dev, TRI_F32, n, NULL);
        check(rank, tri_comm_reduce_scatter(nccl, out, in) == TRI_OK, "nccl reduce_scatter");
        tri_comm_reduce_scatter(mpi, tri_tensor_1d(h, TRI_F32, (int64_t)n), tri_tensor_1d(x, TRI_F32, (int64_t)total));
        check(rank, near(dev, out, h), "reduce_scatter");
        tri_tensor mine = tri_tensor_range(in, (int64_t)((size_t)rank * n), (int64_t)n);
        check(rank, tri_comm_reduce_scatter(nccl, mine, in) == TRI_OK, "nccl reduce_scatter in place");
        float *got = malloc(n * sizeof *got);
        check(rank, tri_device_copy_to_host(dev, got, mine) == TRI_OK && gpu_close("rs in place", got, h, n, 1e-6),
              "reduce_scatter in place");
        free(got);
        tri_device_free(dev, in.data);
        free(h);
    }
    /* all_gather: separate and in place; broadcast from the last rank */
    {
        size_t total = n * (size_t)size;
        float *h = malloc(total * sizeof *h);
        tri_tensor in = upload(dev, TRI_F32, n, x), out = upload(dev, TRI_F32, total, NULL);
        check(rank, tri_comm_all_gather(nccl, out, in) == TRI_OK, "nccl all_gather");
        tri_comm_all_gather(mpi, tri_tensor_1d(h, TRI_F32, (int64_t)total), tri_tensor_1d(x, TRI_F32, (int64_t)n));
        check(rank, same(dev, out, h), "all_gather");
        tri_device_free(dev, in.data);
        out = upload(dev, TRI_F32, total, NULL);
        tri_tensor mine = tri_tensor_range(out, (int64_t)((size_t)rank * n), (int64_t)n);
        tri_device_copy_from_host(dev, mine, x);
        check(rank, tri_comm_all_gather(nccl, out, mine) == TRI_OK, "nccl all_gather in place");
        check(rank, same(dev, out, h), "all_gather in place");
        tri_tensor b = upload(dev, TRI_F32, n, x);
        memcpy(h, x, n * sizeof *h);
        tri_comm_broadcast(nccl, b, size - 1);
        tri_comm_broadcast(mpi, tri_tensor_1d(h, TRI_F32, (int64_t)n), size - 1);
        check(rank, same(dev, b, h), "broadcast");
        free(h);
    }
    /* batched p2p around a ring: two messages to the next rank, two from the previous, in one batch */
    {
        int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        tri_tensor s1 = upload(dev, TRI_F32, n, x), s2 = upload(dev, TRI_F32, n / 2, x + n);
        tri_tensor r1 = upload(dev, TRI_F32, n, NULL), r2 = upload(dev, TRI_F32, n / 2, NULL);
        tri_p2p ops[4] = {{true, next, 0, s1}, {false, prev, 0, r1}, {true, next, 0, s2}, {false, prev, 0, r2}};
        check(rank, tri_comm_p2p(nccl, ops, 4) == TRI_OK, "nccl p2p");
        float *want = randoms(n * (size_t)size, 100 + (uint64_t)prev);
        check(rank, same(dev, r1, want), "p2p first message");
        check(rank, same(dev, r2, want + n), "p2p second message (posting order)");
        free(want);
        tri_device_free(dev, s1.data);
        tri_device_free(dev, s2.data);
    }
    /* split into one-rank groups: collectives become local, on device memory */
    {
        tri_comm *solo = NULL;
        check(rank, tri_comm_split(nccl, rank, 0, &solo) == TRI_OK && solo && solo->size == 1, "split");
        if (solo) {
            tri_tensor in = upload(dev, TRI_F32, n, x), out = upload(dev, TRI_F32, n, NULL);
            check(rank, tri_comm_reduce_scatter(solo, out, in) == TRI_OK, "one-rank reduce_scatter");
            check(rank, same(dev, out, x), "one-rank reduce_scatter copies on the device");
            tri_device_free(dev, in.data);
            tri_comm_destroy(solo);
        }
        check(rank, tri_comm_barrier(nccl) == TRI_OK, "barrier");
        check(rank, tri_device_sync(dev) == TRI_OK, "device sync after the comm");
    }
    /* non-blocking collectives (tri_comm_*_start / wait / test, ZeRO's overlap): three in flight at
     * once, waited for out of order, with a kernel queued on the compute stream meanwhile */
    {
        size_t total = n * (size_t)size;
        float *h_ar = malloc(n * sizeof *h_ar), *h_rs = malloc(n * sizeof *h_rs), *h_ag = malloc(total * sizeof *h_ag);
        memcpy(h_ar, x, n * sizeof *h_ar);
        tri_tensor ar = upload(dev, TRI_F32, n, x), rs_in = upload(dev, TRI_F32, total, x);
        tri_tensor rs_out = upload(dev, TRI_F32, n, NULL), ag_in = upload(dev, TRI_F32, n, x);
        tri_tensor ag_out = upload(dev, TRI_F32, total, NULL), busy = upload(dev, TRI_F32, n, x);
        tri_comm_request q[3];
        check(rank, tri_comm_all_reduce_start(nccl, ar, TRI_REDUCE_SUM, &q[0]) == TRI_OK, "nccl all_reduce_start");
        check(rank, tri_comm_reduce_scatter_start(nccl, rs_out, rs_in, &q[1]) == TRI_OK, "nccl reduce_scatter_start");
        check(rank, tri_comm_all_gather_start(nccl, ag_out, ag_in, &q[2]) == TRI_OK, "nccl all_gather_start");
        check(rank, tri_op_scale(dev, busy, 2.0f) == TRI_OK, "compute while the comm runs");
        bool done = false;
        check(rank, tri_comm_test(&q[1], &done) == TRI_OK, "nccl test");
        check(rank, (done ? TRI_OK : tri_comm_wait(&q[1])) == TRI_OK && !tri_comm_pending(&q[1]), "nccl wait (reduce_scatter)");
        check(rank, tri_comm_wait(&q[2]) == TRI_OK, "nccl wait (all_gather)");
        check(rank, tri_comm_wait(&q[0]) == TRI_OK, "nccl wait (all_reduce)");
        tri_comm_request m[3];
        tri_comm_all_reduce_start(mpi, tri_tensor_1d(h_ar, TRI_F32, (int64_t)n), TRI_REDUCE_SUM, &m[0]);
        tri_comm_reduce_scatter_start(mpi, tri_tensor_1d(h_rs, TRI_F32, (int64_t)n), tri_tensor_1d(x, TRI_F32, (int64_t)total), &m[1]);
        tri_comm_all_gather_start(mpi, tri_tensor_1d(h_ag, TRI_F32, (int64_t)total), tri_tensor_1d(x, TRI_F32, (int64_t)n), &m[2]);
        for (int k = 0; k < 3; k++)
            tri_comm_wait(&m[k]);
        check(rank, near(dev, ar, h_ar), "all_reduce_start result");
        check(rank, near(dev, rs_out, h_rs), "reduce_scatter_start result");
        check(rank, same(dev, ag_out, h_ag), "all_gather_start result");
        tri_device_free(dev, rs_in.data);
        tri_device_free(dev, ag_in.data);
        tri_device_free(dev, busy.data);
        free(h_ar);
        free(h_rs);
        free(h_ag);
    }
    /* int64 sums: the fixed-point gradients of deterministic mode, exact */
    {
        int64_t *k = malloc(n * sizeof *k);
        for (size_t i = 0; i < n; i++)
            k[i] = ((int64_t)1 << 40) * (int64_t)(rank + 1) - (int64_t)(i * 977);
        tri_tensor t = upload(dev, TRI_I64, n, k);
        check(rank, tri_comm_all_reduce(nccl, t, TRI_REDUCE_SUM) == TRI_OK, "nccl all_reduce i64");
        tri_comm_all_reduce(mpi, tri_tensor_1d(k, TRI_I64, (int64_t)n), TRI_REDUCE_SUM);
        check(rank, same(dev, t, k), "all_reduce sum i64");
        free(k);
    }
    /* all-to-all with variable counts (expert parallelism's dispatch): f32 and bf16 (raw bits), empty
     * blocks, the last rank sending nothing, receive blocks with gaps that must keep their contents;
     * the counts exchanged through the NCCL comm's host staging; the same on a one-rank group (the
     * device copy of the kept block) */
    {
        int64_t *sc = calloc((size_t)size * 5, sizeof *sc), *sd = sc + size, *rcn = sc + 2 * size;
        int64_t *rd = sc + 3 * size, *rcm = sc + 4 * size;
        for (int dst = 0; dst < size; dst++)
            sc[dst] = rank == size - 1 && size > 1 ? 0 : (int64_t)((rank * 7 + dst * 3 + 1) % 4) * 997;
        int64_t sent = tri_comm_displs(size, sc, sd);
        check(rank, tri_comm_all_to_all_counts(nccl, size, sc, rcn) == TRI_OK, "nccl all_to_all_counts");
        check(rank, tri_comm_all_to_all_counts(mpi, size, sc, rcm) == TRI_OK, "mpi all_to_all_counts");
        check(rank, memcmp(rcn, rcm, (size_t)size * sizeof *rcn) == 0, "all_to_all_counts nccl = mpi");
        int64_t got = 0;
        for (int src = 0; src < size; src++) {
            rd[src] = got + 5; /* five elements of gap before each block */
            got += 5 + rcn[src];
        }
        for (int b = 0; b < 2; b++) {
            tri_dtype dt = b ? TRI_BF16 : TRI_F32;
            size_t es = tri_dtype_size(dt);
            /* bf16: the f32 inputs' bytes seen as twice as many 16-bit elements (any bits) */
            tri_tensor in = upload(dev, dt, (size_t)sent + 1, x), out = upload(dev, dt, (size_t)got + 1, x + n / 2);
            void *h = malloc(((size_t)got + 1) * es);
            memcpy(h, x + n / 2, ((size_t)got + 1) * es);
            check(rank, tri_comm_all_to_all_v(nccl, out, in, size, sc, sd, rcn, rd) == TRI_OK, "nccl all_to_all_v");
            check(rank, tri_comm_all_to_all_v(mpi, tri_tensor_1d(h, dt, got + 1), tri_tensor_1d(x, dt, sent + 1), size,
                                              sc, sd, rcn, rd) == TRI_OK, "mpi all_to_all_v");
            check(rank, same(dev, out, h), b ? "all_to_all_v bf16 (gaps kept)" : "all_to_all_v f32 (gaps kept)");
            tri_device_free(dev, in.data);
            free(h);
        }
        tri_comm *solo = NULL;
        check(rank, tri_comm_split(nccl, rank, 0, &solo) == TRI_OK && solo && solo->size == 1, "split for all_to_all_v");
        if (solo) {
            int64_t c1 = 1000, d_in = 3, d_out = 7;
            tri_tensor in = upload(dev, TRI_F32, 1003, x), out = upload(dev, TRI_F32, 1010, x + n / 2);
            float *h = malloc(1010 * sizeof *h);
            memcpy(h, x + n / 2, 1010 * sizeof *h);
            memcpy(h + 7, x + 3, 1000 * sizeof *h);
            check(rank, tri_comm_all_to_all_v(solo, out, in, 1, &c1, &d_in, &c1, &d_out) == TRI_OK,
                  "one-rank all_to_all_v");
            check(rank, same(dev, out, h), "one-rank all_to_all_v copies the kept block on the device");
            tri_device_free(dev, in.data);
            free(h);
            tri_comm_destroy(solo);
        }
        free(sc);
    }
    /* the wrappers count the same payload whatever the comm */
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        if (k != TRI_COMM_P2P)
            check(rank, tri_comm_bytes(nccl, (tri_comm_kind)k) == tri_comm_bytes(mpi, (tri_comm_kind)k), "byte counters");
    free(x);
    int total_failed = mpi_total_failures(failed);
    if (rank == 0)
        printf("mpi_nccl: %d passed, %d failed\n", passed, total_failed);
    tri_comm_destroy(nccl);
    tri_comm_destroy(mpi);
    tri_device_destroy(dev);
    MPI_Finalize();
    return total_failed ? 1 : 0;
}
