/* tests/test_comm_staged.c - the staged comm (engine/train/comm_staged.h) keeps the comm contract.
 *
 * Ranks that share a GPU talk through a staged comm: device tensors copied to host memory, the MPI
 * comm's operation on them, the result copied back. Here the device is the CPU backend (its "device
 * memory" is host memory, its copies memcpy) and the inner comm the thread comm, so the whole
 * contract battery of tests/commcheck*.c (the one the thread and MPI comms pass: collectives in
 * every dtype, the byte counting convention, p2p matching and mismatches, splits, the grid,
 * non-blocking starts, argument checks) runs through the staging code on 1 to 4 ranks. On a GPU
 * the staging copies are cudaMemcpy and the inner comm MPI; that combination runs in the GPU suite
 * (tests/gpu/mpi_gpt_parallel.c with ranks sharing a GPU). */
#include <criterion/criterion.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/comm_staged.h"
#include "tests/commcheck.h"

typedef struct check_arg {
    cc_check_fn fn;
} check_arg;

/* One rank: its own CPU device and a staged comm over a split of the thread comm (the staged comm
 * owns its inner comm; the thread comm belongs to tri_run_thread_ranks). */
static int run_staged(int rank, int size, tri_comm *c, void *arg)
{
    (void)size;
    tri_device *d = NULL;
    tri_comm *inner = NULL, *s = NULL;
    int rc = tri_device_cpu_create(&d, 1);
    if (!rc) rc = tri_comm_split(c, 0, rank, &inner);
    if (!rc) rc = tri_comm_staged_create(&s, inner, d);
    if (rc) {
        tri_comm_destroy(inner);
    } else {
        if (!s->device_buffers)
            rc = TRI_ERR(TRI_EINTERNAL, "staged comm: device_buffers should be set");
        if (!rc) rc = ((const check_arg *)arg)->fn(s);
        tri_comm_destroy(s);
    }
    tri_device_destroy(d);
    return rc;
}

static void staged_all_sizes(cc_check_fn fn, const char *name)
{
    const int sizes[] = {1, 2, 3, 4};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        check_arg a = {fn};
        int rc = tri_run_thread_ranks(sizes[i], run_staged, &a);
        cr_assert_eq(rc, TRI_OK, "%s through the staged comm on %d ranks: %s: %s", name, sizes[i],
                     tri_status_name(rc), tri_error_message());
    }
}

static int grid_layouts(tri_comm *c)
{
    return cc_grid_layouts(c);
}

Test(comm_staged, all_reduce) { staged_all_sizes(cc_all_reduce, "all_reduce"); }
Test(comm_staged, reduce_scatter) { staged_all_sizes(cc_reduce_scatter, "reduce_scatter"); }
Test(comm_staged, all_gather) { staged_all_sizes(cc_all_gather, "all_gather"); }
Test(comm_staged, broadcast) { staged_all_sizes(cc_broadcast, "broadcast"); }
Test(comm_staged, p2p_ring) { staged_all_sizes(cc_p2p_ring, "p2p ring"); }
Test(comm_staged, p2p_fifo) { staged_all_sizes(cc_p2p_fifo, "p2p fifo"); }
Test(comm_staged, p2p_tags) { staged_all_sizes(cc_p2p_tags, "p2p tags"); }
Test(comm_staged, p2p_pipeline) { staged_all_sizes(cc_p2p_pipeline, "p2p pipeline"); }
Test(comm_staged, p2p_mismatch) { staged_all_sizes(cc_p2p_mismatch, "p2p mismatch"); }
Test(comm_staged, p2p_nonblocking) { staged_all_sizes(cc_p2p_nonblocking, "p2p non-blocking"); }
Test(comm_staged, split) { staged_all_sizes(cc_split, "split"); }
Test(comm_staged, counters) { staged_all_sizes(cc_counters, "counters"); }
Test(comm_staged, arg_checks) { staged_all_sizes(cc_arg_checks, "argument checks"); }
Test(comm_staged, nonblocking) { staged_all_sizes(cc_nonblocking, "non-blocking collectives"); }
Test(comm_staged, bf16) {
    staged_all_sizes(cc_bf16_all_reduce, "bf16 all_reduce");
    staged_all_sizes(cc_bf16_reduce_scatter, "bf16 reduce_scatter");
    staged_all_sizes(cc_bf16_all_gather, "bf16 all_gather");
    staged_all_sizes(cc_bf16_broadcast, "bf16 broadcast");
    staged_all_sizes(cc_bf16_p2p, "bf16 p2p");
}
Test(comm_staged, all_to_all_v) {
    staged_all_sizes(cc_all_to_all_v, "all_to_all_v");
    staged_all_sizes(cc_all_to_all_v_groups, "all_to_all_v in sub-groups");
    staged_all_sizes(cc_all_to_all_v_args, "all_to_all_v argument checks");
}
Test(comm_staged, grid_every_layout) { staged_all_sizes(grid_layouts, "grid layouts"); }
