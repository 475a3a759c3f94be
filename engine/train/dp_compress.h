/* engine/train/dp_compress.h - the compressed data-parallel gradient reduction that replaces ZeRO's
 * plain one (engine/train/zero.c, stages 0-1) when a compressor is chosen: its state and buffers, and
 * the reduction of one unit's gradient, at once or in three calls that overlap the backward pass
 * (--overlap-grad-reduce: tri_dp_compress_start, _advance, _finish). The options, wire formats and byte counts are
 * engine/train/grad_compression.h's; the element arithmetic engine/device/ops/compress_math.h's.
 *
 * Per unit (one dp-reduction bucket of len elements, the unit's flat range), with g this rank's
 * gradient (already scaled by 1/dp: the loss is divided by dp, so the sum over replicas is the mean
 * gradient) and r its error-feedback residual (Seide et al. 2014; Karimireddy et al. 2019):
 *   1bit, qsgd, topk   e = g + r; c = C(e); r = e - D(c); all-gather the D payloads; the unit's
 *                      gradient (ZeRO 1: the owned slice only) = sum over ranks, in rank order, of
 *                      D(c_rank): every rank gets the same bits whatever the comm's reduction order.
 *   two-phase          (1bit, qsgd, topk with reduce two-phase; Tang et al. 2021 §4) the unit is cut
 *                      into D chunks of whole blocks (tri_compression_chunk); worker: e = g + r,
 *                      c_j = C(e[chunk j]) for each chunk, r = e - D(c); phase 1: c_j to dp rank j
 *                      (one p2p batch); server (rank j, its chunk): s = sum over ranks, in rank order,
 *                      of D(c_j from that rank) + r_s, c_s = C(s), r_s = s - D(c_s) (server error
 *                      feedback, r_s this rank's own); phase 2: all-gather the D c_s (ZeRO 1:
 *                      c_s only to the ranks whose owned slice the chunk overlaps, one p2p batch,
 *                      tri_compression_chunk_read_by); the unit's gradient (ZeRO 1: the owned slice)
 *                      = D(c_s of each chunk): the same bits on every rank.
 *   (every kind)       for the iterations before tri_compression_start_iter the plain reduction,
 *                      residual untouched (PyTorch's powerSGD_hook; 1-bit Adam's warm-up stage)
 *   powersgd           e = g + r; per matrix parameter whose factors are under half its size
 *                      (tri_powersgd_compresses) M (rows x cols) P^T = Q^T M^T, all-reduced (with
 *                      the unit's vectors and smaller matrices, sent whole), rows orthonormalised,
 *                      Q^T = P^T M, all-reduced (Q kept as the next step's warm start), gradient =
 *                      P Q^T, r = e - P Q^T / dp (the local share of the average's error; what is
 *                      sent whole keeps no residual).
 * Everything goes through device and comm ops, so it runs unchanged on CPU and CUDA. Deterministic
 * mode: the rank's exact fixed-point sums are converted to fp32 first, compressed, and the decoded
 * sum (rank order, the same on every rank) converted back into the exact sums, so the layouts
 * that deterministic mode keeps equal (pp, micro-batches, ZeRO 0 vs 1) stay equal with compression.
 *
 * State: the residual r (fp32, the stage's padded length, counted as optimizer memory; its padding is
 * kept zero after every compressed unit, so the per-parameter ranges are all of it) and PowerSGD's
 * Q^T per matrix parameter (fp32, r x cols); two-phase adds the server residual r_s (fp32, the
 * longest chunk of every unit: this rank's chunk; kept zero on the padding). Checkpoints hold all of
 * it (state_shards.h): r per dp rank (error_feedback, and error_feedback_copy for copies that are not
 * the holder), r_s per dp rank (server_error_feedback, parameter-shaped entries that are zero outside
 * the rank's chunks), Q once per (tp, pp) shard (powersgd_q): the all-reduce that makes Q gives every
 * dp rank the same bits, as it does the gradients that keep the replicas' weights equal. */
#ifndef TRIDENT_ENGINE_TRAIN_DP_COMPRESS_H
#define TRIDENT_ENGINE_TRAIN_DP_COMPRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/grad_compression.h"
#include "engine/train/param.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_dp_compress {
    tri_compression c;
    bool on;                  /* a compressor and dp > 1 (else the plain reduction runs) */
    int stage;                /* ZeRO stage (0 or 1) */
    const tri_param_layout *L;
    tri_tensor residual;      /* f32 (padded_numel): r, this rank's error feedback */
    tri_tensor send;          /* i32 (largest unit's payload words): this rank's payload */
    tri_tensor gathered;      /* i32 (dp, largest payload words): every rank's payload */
    /* powersgd */
    tri_tensor q;             /* f32 (q_numel): Q^T of every matrix parameter, r x cols each */
    tri_tensor p;             /* f32 (largest unit's P^T elements + vector elements) */
    int64_t *q_at, *p_at;     /* per parameter: its offset in q (-1: a vector) and in p */
    int64_t q_numel;
    bool q_ready;             /* q holds a warm start (initialised, or loaded) */
    bool residual_ready;      /* residual holds r (zeroed at the first compressed step, or loaded) */
    /* two-phase */
    tri_tensor recv;          /* i32 (dp, chunk payload words): the payloads of this rank's chunk */
    tri_tensor server_send;   /* i32 (chunk payload words): the re-compressed sum of this rank's chunk */
    tri_tensor server_sum;    /* f32 (longest chunk): s, the decoded sum of this rank's chunk */
    tri_tensor server_residual; /* f32 (sum over units of their chunk length): r_s, unit u's at
                                   server_at[u] */
    int64_t *server_at;       /* per unit: its chunk's offset in server_residual */
    tri_p2p *ops;             /* 2 (dp - 1) sends and receives of phase 1 (and of phase 2 at ZeRO 1) */
    /* the last step's reduction, for the log: wire bytes sent, and what the plain reduction sends */
    uint64_t last_sent, last_plain;
    /* each unit's exchange in flight (tri_dp_compress_start ... _finish); with overlap every unit has
     * its own payload slots and P^T, so all of them can be in flight at once */
    bool overlap;
    int64_t *slot_at;         /* per unit: its slot's offset in the payload buffers (0 without overlap),
                                 in units of slot_words (send, recv and gathered hold D slots a unit) */
    int64_t *slot_words;      /* per unit: one rank's payload of it (two-phase: of its longest chunk) */
    int64_t *p_base;          /* powersgd, per unit: its P^T's offset in p (0 without overlap) */
    tri_comm_request *req;    /* per unit: its collective in flight */
    unsigned char *phase;     /* per unit: 0 idle, 1 first exchange started, 2 second exchange started */
    int64_t *iter_of;         /* per unit: the iteration its reduction was started for */
} tri_dp_compress;

/* Takes the buffers (planning or real arena, like every take) for compression c at ZeRO stage over
 * layout L; nothing when c is none or L->dp is 1. With `overlap` (--overlap-grad-reduce) every unit
 * gets its own payload slots and P^T (the sum over units instead of the largest unit's), so that
 * each unit's reduction can be started as the backward pass completes it. TRI_EINVAL from
 * tri_compression_check. */
int tri_dp_compress_take(tri_dp_compress *x, tri_arena *a, const tri_param_layout *L, const tri_compression *c,
                         int stage, bool overlap);
void tri_dp_compress_free(tri_dp_compress *x);
/* A fresh start: the residual is zeroed and Q initialised at the next compressed step. */
void tri_dp_compress_reset(tri_dp_compress *x);

/* Reduces unit u's gradient (f32, the unit's range of grads) over dp for iteration `iter`
 * (0-based): at stage 0 every rank gets the whole sum, at stage 1 its owned slice. Collective over
 * dp. */
int tri_dp_compress_unit(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor grads, int unit, int64_t iter);
/* The same reduction in three calls, so that its exchanges overlap other work (--overlap-grad-reduce,
 * engine/train/zero.c). The ops and their order on the unit are tri_dp_compress_unit's, so the
 * results are its bits wherever the comm's non-blocking collective sums as its blocking one (always
 * for 1bit, qsgd and top-k, whose exchanges are all-gathers and p2p; PowerSGD's all-reduces at dp 2).
 *   start    error feedback, encoding, and the first exchange started: the payloads' all-gather
 *            (1bit, qsgd, topk), phase 1's p2p (two-phase), P's all-reduce (powersgd), or the plain
 *            reduction (before tri_compression_start_iter); non-blocking when `async`.
 *   advance  the second exchange, once the first is complete (it waits for it): two-phase's server
 *            step and phase-2 all-gather, PowerSGD's orthonormalisation, Q = M^T P and Q's all-reduce;
 *            nothing for the other kinds or a unit already advanced.
 *   finish   advances if not yet (blocking), waits, decodes the sum into the unit's gradient.
 * Every rank must make the same calls in the same order (they are collective over dp). g is the
 * unit's range of grads in each call (len elements). */
int tri_dp_compress_start(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit, int64_t iter,
                          bool async);
int tri_dp_compress_advance(tri_dp_compress *x, tri_device *dev, tri_comm *dp, int unit, bool async);
int tri_dp_compress_finish(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit);
/* Whether unit u's reduction is started and not finished. */
bool tri_dp_compress_in_flight(const tri_dp_compress *x, int unit);
/* Polls every exchange in flight (MPI progresses non-blocking collectives only inside its calls). */
int tri_dp_compress_progress(tri_dp_compress *x);
/* Waits for every exchange in flight and forgets the reductions (nothing decoded): before freeing. */
int tri_dp_compress_drain(tri_dp_compress *x);

/* The same on unit u's gradient g alone (f32, the unit's len elements, laid out like the unit's range
 * of the stage's flat buffers): what local SGD's outer step (engine/train/local_sgd.h) reduces, the
 * replicas' parameter change, from a scratch of one unit. Stage 1 leaves the sum in g's owned slice
 * [dp rank * len / dp, + len / dp). TRI_EINVAL for another length. */
int tri_dp_compress_reduce(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit, int64_t iter);

/* The residual's n elements at flat offset `at` into host (zeros before the first compressed step).
 * TRI_EINVAL without compression or past the residual; device errors. */
int tri_dp_compress_residual_read(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, float *host);
/* The residual's n elements at `at` from host (a checkpoint's): the first write zeroes the rest, and
 * the residual counts as ready (not zeroed at the next compressed step). Errors as the read's. */
int tri_dp_compress_residual_write(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, const float *host);

/* PowerSGD: parameter i's Q^T in q (*at, *n = rank x cols elements); false for a vector, or without
 * powersgd. */
bool tri_dp_compress_q_range(const tri_dp_compress *x, int i, int64_t *at, int64_t *n);
/* Q's n elements at `at` into host. Before the first compressed step Q is drawn here, the same draw
 * (seeded by the run's seed, the parameter's name and shard) that step would make, so what is saved
 * is what the run uses. TRI_EINVAL without powersgd or past Q; device errors. */
int tri_dp_compress_q_read(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, float *host);
/* Q's n elements at `at` from host (a checkpoint's): the first write draws every Q (so matrices not
 * written keep the fresh draw) and Q counts as a warm start from then on. Errors as the read's. */
int tri_dp_compress_q_write(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, const float *host);
/* The server residual's values over the flat range [at, at + n) (within one unit's parameter; zero
 * outside this rank's chunk and before the first compressed step) into host, and from host (only the
 * rank's chunk is kept). TRI_EINVAL without two-phase or past the layout; device errors. */
int tri_dp_compress_server_read(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, float *host);
int tri_dp_compress_server_write(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, const float *host);
/* The server residual over the part of the flat range [at, at + n) in this rank's chunk, as a view
 * of server_residual (*view with 0 elements when none of it is), at or after the first compressed
 * step. TRI_EINVAL without two-phase or past the layout. (Local SGD aligns the copies' with it.) */
int tri_dp_compress_server_view(tri_dp_compress *x, int64_t at, int64_t n, tri_tensor *view);

/* Whether the units are reduced uncompressed at iteration iter: without compression, and before
 * tri_compression_start_iter (--grad-compression-start-iter, powersgd's --powersgd-start-iter). */
bool tri_dp_compress_plain(const tri_dp_compress *x, int64_t iter);

/* Zeroes what is not the model's in t over the flat range [lo, hi) of unit `unit` (t's element 0 is
 * flat offset `base`): the layout's padding between the unit's parameters and after the last, and
 * the vocabulary padding rows (tri_param_real_numel). The compressed reduction does this to every
 * residual it keeps; callers use it on a decoded result. Returns a status. */
int tri_dp_compress_zero_padding(const tri_dp_compress *x, tri_device *dev, int unit, tri_tensor t, int64_t base,
                                 int64_t lo, int64_t hi);

#ifdef __cplusplus
}
#endif

#endif
