/* tests/mpi/comm_mpi.c - the comm contract and the process grid on real Open MPI ranks.
 *
 * tests/test_comm.c holds the thread comm to engine/comm/comm.h's contract; this program holds the MPI
 * comm (tri_comm_mpi_create over MPI_COMM_WORLD) to the same one, with the same checks
 * (tests/commcheck*.c): collectives, batched p2p, split, barrier, byte counters, argument checks,
 * bf16 tensors (sums through the comm's own MPI datatype and user-defined ops),
 * and tri_grid_create for every (tp, pp) dividing the world. It adds what only the MPI comm has to
 * get right: element counts above INT_MAX (MPI counts are int) are refused, not truncated.
 *
 * Usage: mpiexec -n N comm_mpi [check...]   (no names: every check; CTest runs N = 2, 3, 4)
 * Each check's verdict is reduced over the ranks; a failing rank prints what failed. Wrong values
 * leave the ranks in step, so the run goes on to the next check; a comm call failing unexpectedly
 * may leave other ranks blocked, so that rank aborts the job. Exit status 0 only if every check
 * passed on every rank. */
#include <limits.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/comm/grid.h"
#include "engine/core/status.h"
#include "tests/commcheck.h"

/* Counts of INT_MAX + 1 elements and more are refused with TRI_EINVAL before MPI sees them (an int
 * count would wrap: 2^32 + 3 elements to 3). The tensors claim that many elements over a buffer of
 * 8 floats: a refused call never touches them. Local, so it needs no peer; skipped on one rank,
 * where the wrappers copy instead of calling MPI. */
static int check_huge_counts(tri_comm *c)
{
    if (c->size == 1)
        return TRI_OK;
    static float small[8];
    const int64_t wraps = ((int64_t)1 << 32) + 3, negative = (int64_t)INT_MAX + 1;
    int fails = 0;
    char first[512] = "";
    static const char *names[5] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "p2p"};
    for (int k = 0; k < 2; k++) {
        int64_t n = k == 0 ? wraps : negative;
        tri_tensor big = tri_tensor_1d(small, TRI_F32, n);
        tri_tensor all = tri_tensor_1d(small, TRI_F32, n * c->size);
        tri_p2p op = {.send = c->rank == 0, .peer = c->rank == 0 ? 1 : 0, .t = big};
        int rc[5];
        rc[0] = tri_comm_all_reduce(c, big, TRI_REDUCE_SUM);
        rc[1] = tri_comm_reduce_scatter(c, big, all);
        rc[2] = tri_comm_all_gather(c, all, big);
        rc[3] = tri_comm_broadcast(c, big, 0);
        rc[4] = c->rank <= 1 ? tri_comm_p2p(c, &op, 1) : TRI_EINVAL;
        for (int i = 0; i < 5; i++)
            if (rc[i] != TRI_EINVAL && fails++ == 0)
                snprintf(first, sizeof first, "%s of %lld elements returned %s, want EINVAL", names[i],
                         (long long)n, tri_status_name(rc[i]));
    }
    if (fails)
        return TRI_ERR(TRI_EINTERNAL, "huge counts: rank %d: %d wrong; first: %s", c->rank, fails, first);
    return TRI_OK;
}

static int check_grids(tri_comm *c)
{
    return cc_grid_layouts(c);
}

static bool selected(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    enum { MAX_CHECKS = 32 };
    cc_check checks[MAX_CHECKS];
    int n = 0;
    for (int i = 0; i < cc_n_checks && n < MAX_CHECKS - 2; i++)
        checks[n++] = cc_checks[i];
    checks[n++] = (cc_check){"huge_counts", check_huge_counts};
    checks[n++] = (cc_check){"grid", check_grids};
    for (int a = 1; a < argc; a++) { /* every rank sees the same arguments: all stop here or none */
        bool known = false;
        for (int i = 0; i < n; i++)
            known = known || strcmp(argv[a], checks[i].name) == 0;
        if (!known) {
            if (rank == 0)
                fprintf(stderr, "comm_mpi: unknown check '%s'\n", argv[a]);
            MPI_Finalize();
            return 2;
        }
    }

    MPI_Comm world_handle = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    int rc = tri_comm_mpi_create(&world, &world_handle);
    if (rc) {
        fprintf(stderr, "comm_mpi: rank %d: %s\n", rank, tri_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (world->rank != rank || world->size != size)
        fprintf(stderr, "comm_mpi: rank %d of %d: the comm says rank %d of %d\n", rank, size, world->rank,
                world->size);
    int failed = world->rank != rank || world->size != size, ran = 0;
    for (int i = 0; i < n; i++) {
        if (!selected(argc, argv, checks[i].name))
            continue;
        double t0 = MPI_Wtime();
        tri_error_clear();
        rc = checks[i].fn(world);
        if (rc && rc != TRI_EINTERNAL) {
            fprintf(stderr, "comm_mpi: rank %d: check %s: %s: %s; aborting the job\n", rank, checks[i].name,
                    tri_status_name(rc), tri_error_message());
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (rc)
            fprintf(stderr, "comm_mpi: rank %d: FAIL %s: %s\n", rank, checks[i].name, tri_error_message());
        int mine = rc != 0, any = 0;
        MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        failed += any;
        ran++;
        if (rank == 0)
            printf("comm_mpi: %-19s %s on %d ranks (%.2f s)\n", checks[i].name, any ? "FAIL" : "ok", size,
                   MPI_Wtime() - t0);
    }
    if (rank == 0)
        printf("comm_mpi: %d of %d checks passed on %d ranks\n", ran - failed, ran, size);
    tri_comm_destroy(world);
    MPI_Finalize();
    return failed ? 1 : 0;
}
