/* tests/commcheck.h - comm semantics checks written once, run on every comm implementation.
 *
 * The same checks run on thread ranks in the Criterion suite (tests/test_comm.c) and on Open MPI
 * ranks in the mpiexec program (tests/mpi/comm_mpi.c), so both comms are held to one contract:
 * engine/comm/comm.h's semantics and byte-counting convention, and the process grid of engine/comm/grid.h.
 *
 * Every check is collective over the comm it gets (every rank calls it, with the same arguments)
 * and works for any group size (p2p checks do nothing on one rank). It returns TRI_OK, or
 * TRI_EINTERNAL when a result was wrong, the message naming the check, the rank and the first wrong
 * value: a wrong value does not stop the check, which goes on with the same sequence of calls, so
 * the ranks are still in step and the caller may run the next check. Any other status is a comm
 * call that failed unexpectedly (or a group missing on this rank): the other ranks may be blocked,
 * and the caller must abort them (tri_run_thread_ranks does; the MPI program calls MPI_Abort).
 * Values are small integers, exact in f32 whatever order a comm sums in (MPI picks its own); the
 * bf16 checks add values whose sums need rounding, with a bound every comm meets.
 * The implementation: commcheck.c (collectives, barrier, counters, argument checks),
 * commcheck_p2p.c, commcheck_groups.c (split, grid), commcheck_async.c (non-blocking collectives),
 * commcheck_bf16.c (bf16 tensors), commcheck_a2a.c (all-to-all with variable counts), commcheck_util.h (shared helpers). */
#ifndef TRIDENT_TESTS_COMMCHECK_H
#define TRIDENT_TESTS_COMMCHECK_H

#include "engine/comm/comm.h"

typedef int (*cc_check_fn)(tri_comm *c);

typedef struct cc_check {
    const char *name;
    cc_check_fn fn;
} cc_check;

/* all_reduce SUM and MAX, f32 and i32, several shapes including an empty one; in place, nothing
 * outside the tensor written, one call of numel * 4 bytes counted. (In every check, a group of one
 * rank counts nothing: comm.h.) */
int cc_all_reduce(tri_comm *c);
/* Each rank gets its slice of the sum; `in` is left unchanged; `out` may alias this rank's slice
 * of `in`; size * n * 4 bytes counted. */
int cc_reduce_scatter(tri_comm *c);
/* The ranks' parts concatenated in rank order, also when `in` is this rank's slot of `out`;
 * size * n * 4 bytes counted. */
int cc_all_gather(tri_comm *c);
/* From every root, both dtypes; n * 4 bytes counted on every rank. */
int cc_broadcast(tri_comm *c);
/* One batch per rank: send to next, receive from previous (odd ranks post the receive first). */
int cc_p2p_ring(tri_comm *c);
/* Several messages between the same pair, of equal and different sizes, in both directions within
 * one batch: they match in posting order. */
int cc_p2p_fifo(tri_comm *c);
/* Messages match by (sender, receiver, tag): a receive takes the oldest message with its tag, so
 * a later message with another tag can overtake; tags 0 and 1023 (the bounds) work. */
int cc_p2p_tags(tri_comm *c);
/* The ranks as pipeline stages: each batch sends activations forward and gradients backward and
 * receives both, the way the 1F1B steady state does, for three micro-batches. */
int cc_p2p_pipeline(tri_comm *c);
/* A receive larger or smaller than the message: the receiver gets TRI_ECOMM naming p2p, the sender
 * completes, and the pair can go on exchanging messages. */
int cc_p2p_mismatch(tri_comm *c);
/* tri_comm_p2p_start: context parallelism's double-buffered ring (4 rounds, the block in hand read
 * while the next travels) beside a reverse ring and a blocking batch, completed by test and wait:
 * values from the right ranks, bytes counted at the start, requests cleared, a refused start
 * (peer = self) counting nothing and leaving no request. */
int cc_p2p_nonblocking(tri_comm *c);
/* Colors and keys, reversed keys, equal keys (parent order), color < 0 (NULL), nested splits, and a
 * split of a one-rank comm: sizes, ranks and members (gathered through the new comm). */
int cc_split(tri_comm *c);
/* Ranks leave a barrier only after the last one, which arrives 300 ms late, has entered (300 ms of
 * run time on groups of 2 or more). */
int cc_barrier(tri_comm *c);
/* The counters against hand-computed payloads (zero on one rank), tri_comm_bytes, reset and kind
 * names. */
int cc_counters(tri_comm *c);
/* Wrapper argument checks: size mismatches, bad root, bad peer, a tag outside [0, 1023], a dtype
 * outside tri_dtype, a bad reduce op, a negative batch size: TRI_EINVAL naming the op, nothing
 * counted. Local: no rank communicates. */
int cc_arg_checks(tri_comm *c);

/* Reduce-scatter (separate and in place), all-gather and all-reduce started together with a
 * blocking all-reduce among them, completed by test and by waits in another order: exact sums,
 * bytes counted at the start, requests cleared (commcheck_async.c). */
int cc_nonblocking(tri_comm *c);

/* bf16 tensors (commcheck_bf16.c; engine/comm/comm.h "Dtypes"), each counting numel * 2 bytes as its
 * kind prescribes. all_reduce: small-integer sums exact, sums that need rounding within bf16
 * rounding of the exact sum (and exactly the rounded sum on groups of 1 or 2), max exact, several
 * shapes including an empty one. reduce_scatter: the same sums, separate and in place, `in` left
 * unchanged. all_gather and broadcast: any 16 bits (NaNs included) moved unchanged. */
int cc_bf16_all_reduce(tri_comm *c);
int cc_bf16_reduce_scatter(tri_comm *c);
int cc_bf16_all_gather(tri_comm *c);
int cc_bf16_broadcast(tri_comm *c);
/* A ring whose batches carry a 37-element bf16 message beside an f32 one; receives of 3 and 5
 * elements for messages of 5 and 3 fail with TRI_ECOMM naming the sender, and the pair goes on. */
int cc_bf16_p2p(tri_comm *c);
/* bf16 all-reduces (sum and max), an in-place reduce-scatter and all-gather left in flight with a
 * blocking bf16 all-reduce among them, completed by test and by waits in reverse. */
int cc_bf16_nonblocking(tri_comm *c);

/* All-to-all with variable counts (commcheck_a2a.c): f32, bf16, i32 and i64, three count matrices
 * each (empty blocks, a rank sending nothing, a rank receiving nothing), blocks at scattered
 * displacements: every received element against its source rank and index, nothing else written,
 * the input unchanged, the bytes sent to other ranks counted; the receive counts from
 * tri_comm_all_to_all_counts. _groups: the same in the two groups split by rank parity (keys
 * reversed), the parent comm counting none of it. _args: every refused argument (n != size, negative
 * counts or displacements, blocks past a buffer, overlapping receive blocks, in = out, dtype
 * mismatch, the kept block's counts differing) is TRI_EINVAL naming the value, nothing counted; and
 * tri_comm_displs. */
int cc_all_to_all_v(tri_comm *c);
int cc_all_to_all_v_groups(tri_comm *c);
int cc_all_to_all_v_args(tri_comm *c);

/* Every check above, in that order. */
extern const cc_check cc_checks[];
extern const int cc_n_checks;

/* tri_grid_create(world, tp, pp): coordinates from Megatron's order (derived here by enumeration,
 * not by the grid's formula), every group's size, this rank's rank in it and its members in order;
 * the embedding group holds the first and last stage of each pipeline and is NULL on middle
 * stages. */
int cc_grid(tri_comm *world, int tp, int pp);
/* cc_grid for every (tp, pp) with tp * pp dividing the world size, and TRI_EINVAL (no group made)
 * for layouts that do not divide it. */
int cc_grid_layouts(tri_comm *world);

#endif
