/* tests/gpu/mpi_gpt_parallel.c - tensor, pipeline and data parallelism (ZeRO) on CUDA + NCCL
 * against one GPU.
 *
 * Under mpiexec with one GPU per rank: a tiny GPT (a layer for each of pp = world stages, at least
 * 2) trains a few AdamW steps (clipping on) in every layout the world size allows: tp = world
 * (Megatron's column/row-parallel layers and vocab-parallel loss over NCCL), the same with sequence
 * parallelism, pp = world (1F1B over batched NCCL p2p), dp = world without ZeRO and with ZeRO-1, -2
 * and -3 (reduce-scatter / all-gather over NCCL), ZeRO-2 with --overlap-grad-reduce and
 * --overlap-param-gather (the non-blocking collectives on the communication stream), and
 * deterministic mode at dp = world (fixed-point gradients summed as int64 over NCCL), and compressed
 * reductions (1bit two-phase at ZeRO 1, PowerSGD) with --overlap-grad-reduce against the same run
 * without it (the same bits; PowerSGD beyond dp 2 through MPI within the tolerance). Rank 0 then
 * trains the same model alone (an NCCL comm over MPI_COMM_SELF) on the same global batches (dp x
 * n_micro micro-batches per step).
 * The per-step loss and gradient norm must agree within 1e-4 relative (only the summation order
 * differs), and exactly in deterministic mode, whose sums are order-independent by construction
 * (engine/train/zero.h). With fewer GPUs than ranks (a one-GPU machine) the ranks share the GPUs and
 * talk through the MPI comm staged through host memory (engine_train --comm mpi), the reference
 * too: the same layouts, the same bounds. Prints "N passed, N failed"; exits 77 (skip) without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/comm_nccl.h"
#include "engine/comm/comm.h"
#include "engine/train/comm_staged.h"
#include "engine/comm/grid.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/train/train.h"
#include "models/gpt.h"
#include "models/session.h"
#include "tests/gpu/mpi_common.h"
#include "tests/harness.h"

#define STEPS 3
#define TOL 1e-4

typedef struct layout {
    const char *name;
    int tp, pp;          /* dp = world / (tp * pp) */
    bool sp;
    int n_micro;         /* micro-batches per step and replica */
    int zero;            /* ZeRO stage */
    bool overlap;        /* --overlap-grad-reduce and --overlap-param-gather */
    bool deterministic;  /* fixed-point gradients: must match the one-GPU run exactly */
    tri_compression_kind comp; /* --grad-compression (none: the plain reduction) */
    bool two_phase;      /* --grad-compression-reduce two-phase */
} layout;

typedef struct result {
    double loss[STEPS], norm[STEPS];
} result;

static const tri_gpt_config CFG = {.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 257,
                                   .n_positions = 32, .init_std = 0.02f, .name = "tiny"};
static const int64_t B = 2, T = 16;

static int fill(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    for (int64_t i = 0; i < n * (T + 1); i++)
        w[i] = (int32_t)(tri_rng_uniform(99, (uint64_t)first * (uint64_t)(T + 1) + (uint64_t)i, 0) * CFG.vocab_size);
    return TRI_OK;
}

/* The tiny GPT with a layer for each pipeline stage of pp = world ranks (at least CFG's 2). */
static tri_gpt_config config_for(int world)
{
    tri_gpt_config c = CFG;
    if (world > c.n_layer)
        c.n_layer = world;
    return c;
}

/* Trains STEPS steps of layout l of model cfg on `world`. */
static int train(tri_device *dev, tri_comm *world, const tri_gpt_config *cfg, const layout *l, result *res)
{
    tri_session ss;
    tri_model m = tri_gpt_model(cfg);
    tri_session_options o = {.run = {.seed = 1234}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
    tu_layout lay = {.tp = l->tp, .pp = l->pp, .sp = l->sp, .n_micro = l->n_micro, .zero = l->zero,
                     .deterministic = l->deterministic, .overlap = l->overlap};
    if (l->comp != TRI_COMPRESS_NONE) {
        lay.compression = tri_compression_defaults();
        lay.compression.kind = l->comp;
        lay.compression.reduce = l->two_phase ? TRI_COMPRESS_REDUCE_TWO_PHASE : TRI_COMPRESS_REDUCE_ALLGATHER;
        lay.compression.block_size = 64;
        lay.compression.powersgd_start_iter = 1;
    }
    int rc = tu_layout_resolve(cfg, B, T, &lay, world->size, &o.run.layout);
    if (rc)
        return rc;
    rc = tri_session_create(&ss, world, dev, &m, &o);
    tri_batch_source src = {.ctx = NULL, .fill = fill};
    for (int k = 0; k < STEPS && !rc; k++) {
        tri_step_result r;
        rc = tri_trainer_step(&ss.trainer, &src, k, 1e-3f, &r);
        res->loss[k] = r.loss;
        res->norm[k] = r.grad_norm;
    }
    tri_session_destroy(&ss);
    return rc;
}

static bool agree(const char *name, const result *got, const result *want, double tol)
{
    bool ok = true;
    for (int k = 0; k < STEPS; k++) {
        double el = fabs(got->loss[k] - want->loss[k]) / fabs(want->loss[k]);
        double en = fabs(got->norm[k] - want->norm[k]) / fabs(want->norm[k]);
        ok = ok && el <= tol && en <= tol;
        printf("%s step %d: loss %.7f vs %.7f (%.1e), grad norm %.6f vs %.6f (%.1e)\n", name, k + 1, got->loss[k],
               want->loss[k], el, got->norm[k], want->norm[k], en);
    }
    return ok;
}

/* The one-GPU references trained so far, by what they depend on (the micro-batches of a step and
 * deterministic mode): layouts share them (tp and tp+sp; pp and the ZeRO stages), and a rerun of the
 * same single-rank run gives the same bits, so each is trained once. */
typedef struct reference {
    int n_micro;
    bool deterministic;
    result res;
} reference;

/* One check passes when it passed on every rank. */
static void tally(int ok, int *passed, int *failed)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all)
        (*passed)++;
    else
        (*failed)++;
}

/* The comm over `mpi` for dev: NCCL, or the staged MPI comm when ranks share a GPU. */
static int make_comm(tri_comm **out, MPI_Comm *mpi, tri_device *dev, bool shared)
{
    if (!shared)
        return tri_comm_nccl_create(out, mpi, dev, 120.0);
    tri_comm *inner = NULL;
    int rc = tri_comm_mpi_create(&inner, mpi);
    if (!rc) tri_comm_set_timeout(inner, 120.0);
    if (!rc) rc = tri_comm_staged_create(out, inner, dev);
    if (rc && inner)
        tri_comm_destroy(inner);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bool shared = false;
    int skip = mpi_gpu_check_shared(rank, size, &shared);
    if (skip) {
        MPI_Finalize();
        return skip;
    }
    tri_device *dev = NULL;
    tri_comm *world = NULL;
    MPI_Comm mw = MPI_COMM_WORLD, ms = MPI_COMM_SELF;
    if (tri_device_cuda_create(&dev, rank % tri_cuda_device_count()) || make_comm(&world, &mw, dev, shared)) {
        fprintf(stderr, "rank %d: set-up failed: %s\n", rank, tri_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const layout layouts[] = {
        {.name = "tp", .tp = size, .pp = 1, .n_micro = 1},
        {.name = "tp+sp", .tp = size, .pp = 1, .sp = true, .n_micro = 1},
        {.name = "pp (1f1b)", .tp = 1, .pp = size, .n_micro = 2 * size},
        {.name = "dp", .tp = 1, .pp = 1, .n_micro = 1},
        {.name = "dp ZeRO-1", .tp = 1, .pp = 1, .n_micro = 2, .zero = 1},
        {.name = "dp ZeRO-2", .tp = 1, .pp = 1, .n_micro = 2, .zero = 2},
        {.name = "dp ZeRO-3", .tp = 1, .pp = 1, .n_micro = 2, .zero = 3},
        {.name = "dp ZeRO-2 overlapped", .tp = 1, .pp = 1, .n_micro = 2, .zero = 2, .overlap = true},
        {.name = "dp ZeRO-1 deterministic", .tp = 1, .pp = 1, .n_micro = 2, .zero = 1, .deterministic = true},
    };
    tri_gpt_config cfg = config_for(size);
    int passed = 0, failed = 0, n_refs = 0;
    reference refs[sizeof layouts / sizeof *layouts];
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        const layout *l = &layouts[i];
        int dp = size / (l->tp * l->pp);
        layout one = {.name = "one GPU", .tp = 1, .pp = 1, .n_micro = dp * l->n_micro, .deterministic = l->deterministic};
        result par;
        int rc = train(dev, world, &cfg, l, &par);
        if (rc)
            fprintf(stderr, "rank %d: %s run failed: %s\n", rank, l->name, tri_error_message());
        int ok = rc == TRI_OK;
        if (rank == 0) {
            const reference *ref = NULL;
            for (int r = 0; r < n_refs && !ref; r++)
                if (refs[r].n_micro == one.n_micro && refs[r].deterministic == one.deterministic)
                    ref = &refs[r];
            if (!ref) {
                tri_comm *self = NULL;
                reference *fresh = &refs[n_refs];
                *fresh = (reference){.n_micro = one.n_micro, .deterministic = one.deterministic};
                rc = make_comm(&self, &ms, dev, shared);
                if (!rc) rc = train(dev, self, &cfg, &one, &fresh->res);
                if (rc)
                    fprintf(stderr, "reference run failed: %s\n", tri_error_message());
                tri_comm_destroy(self);
                if (!rc)
                    ref = &refs[n_refs++];
            }
            ok = ok && ref && agree(l->name, &par, &ref->res, l->deterministic ? 0.0 : TOL);
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
        tally(ok, &passed, &failed);
    }
    /* compressed dp reductions started during the backward (--overlap-grad-reduce: the first exchange
     * on the communication stream while the backward goes on, engine/train/zero.c start_compressed)
     * against the same run reducing at the end of the backward: the same ops in the same stream order,
     * so the same bits, but for PowerSGD's all-reduces beyond dp 2 through MPI (staged), whose
     * non-blocking form may sum in another order */
    const layout pairs[][2] = {
        {{.name = "dp ZeRO-1 1bit two-phase", .tp = 1, .pp = 1, .n_micro = 2, .zero = 1, .comp = TRI_COMPRESS_1BIT,
          .two_phase = true},
         {.name = "dp ZeRO-1 1bit two-phase overlapped", .tp = 1, .pp = 1, .n_micro = 2, .zero = 1,
          .comp = TRI_COMPRESS_1BIT, .two_phase = true, .overlap = true}},
        {{.name = "dp PowerSGD", .tp = 1, .pp = 1, .n_micro = 2, .comp = TRI_COMPRESS_POWERSGD},
         {.name = "dp PowerSGD overlapped", .tp = 1, .pp = 1, .n_micro = 2, .comp = TRI_COMPRESS_POWERSGD,
          .overlap = true}},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        result blocking, overlapped;
        int rc = train(dev, world, &cfg, &pairs[i][0], &blocking);
        if (!rc) rc = train(dev, world, &cfg, &pairs[i][1], &overlapped);
        if (rc)
            fprintf(stderr, "rank %d: %s run failed: %s\n", rank, pairs[i][1].name, tri_error_message());
        double tol = pairs[i][0].comp == TRI_COMPRESS_POWERSGD && shared && size > 2 ? TOL : 0.0;
        tally(rc == TRI_OK && (rank != 0 || agree(pairs[i][1].name, &overlapped, &blocking, tol)), &passed, &failed);
    }
    if (rank == 0)
        printf("mpi_gpt_parallel: %d passed, %d failed\n", passed, failed);
    tri_comm_destroy(world);
    tri_device_destroy(dev);
    MPI_Finalize();
    return failed ? 1 : 0;
}
