/* tests/mpi/parallel_equivalence.c - tensor, pipeline and data parallelism over real MPI.
 *
 * Run under `mpiexec -n TP*PP*DP parallel_equivalence --tp TP [--pp PP] [--sp] [--schedule S]
 * [--zero Z] [--overlap] [--deterministic]` (PP defaults to world / TP, so DP to 1): the ranks train
 * a GPT (8 layers) over the MPI comm, with the same global batch whatever DP is; world rank 0 also
 * runs references in-process on thread ranks. Against one rank (tp = pp = dp = 1), as
 * tests/test_tp.c checks on thread ranks: loss and every gathered gradient within 1e-5 relative,
 * the step losses within 1e-4, the TP byte counters equal to the analytic traffic (one stage), the
 * DP byte counters equal to partitioner/traffic.h's. Against pp = 1 at the same TP (tests/test_pp.c,
 * dp = 1): losses, gradients and final weights bit-identical. With --deterministic, bit-identical to
 * the deterministic run at tp = TP, pp = dp = 1 whatever PP, DP and ZeRO stage (tests/test_deterministic.c).
 * With --overlap the ZeRO reductions and all-gathers are really in flight while the ranks compute
 * (MPI non-blocking collectives), unlike on thread ranks. With --staged the ranks talk through the
 * staged comm (engine/train/comm_staged.h, what ranks sharing a GPU use: tensors copied to host
 * buffers, the MPI comm's operation, copied back; here the CPU device's copies) with the same
 * checks. With --optimizer sgd|lars|lamb every run (and reference) trains with that optimizer
 * instead of AdamW: LARS's and LAMB's whole-tensor trust ratios over real MPI (engine/train/trust_ratio.h).
 * Exits 0 only if every check passes. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/comm_staged.h"
#include "engine/train/optimizer.h"
#include "partitioner/traffic.h"
#include "tests/harness.h"

enum { B = 2, T = 12, STEPS = 6, MICRO = 4 };

typedef struct opts {
    int tp, pp, zero;
    int optimizer;                 /* tri_optimizer_kind */
    bool sp, overlap, deterministic, staged;
    const char *schedule;
} opts;

static int compare_close(const tri_gpt_config *cfg, const tu_result *ref, const tu_result *got)
{
    int bad = 0;
    double loss_err = fabs(got->grad_loss - ref->grad_loss) / ref->grad_loss, worst = 0.0, worst_step = 0.0;
    if (loss_err > 1e-5) {
        printf("FAIL loss %.9g vs one rank's %.9g\n", got->grad_loss, ref->grad_loss);
        bad++;
    }
    for (int i = 0; i < ref->n; i++) {
        int64_t n = strcmp(ref->names[i], "wte") == 0 ? (int64_t)cfg->vocab_size * ref->cols[i] : ref->numel[i];
        double e = tu_tensor_rel(got->grads[i], ref->grads[i], n);
        worst = fmax(worst, e);
        if (e > 1e-5) {
            printf("FAIL gradient of %s differs from one rank's by %g\n", ref->names[i], e);
            bad++;
        }
    }
    for (int s = 0; s < STEPS; s++) {
        double e = fabs(got->losses[s] - ref->losses[s]) / ref->losses[s];
        worst_step = fmax(worst_step, e);
        if (e > 1e-4) {
            printf("FAIL step %d loss %g vs one rank's %g\n", s + 1, got->losses[s], ref->losses[s]);
            bad++;
        }
    }
    printf("vs one rank: loss diff %.2g, max gradient diff %.2g, max loss diff over %d steps %.2g\n", loss_err,
           worst, STEPS, worst_step);
    return bad;
}

static int compare_dp_traffic(const tu_result *got)
{
    int bad = 0;
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        if (got->dp_bytes[k] != got->dp_expected[k]) {
            printf("FAIL DP %s moved %llu bytes, analytic %llu\n", tri_comm_kind_name((tri_comm_kind)k),
                   (unsigned long long)got->dp_bytes[k], (unsigned long long)got->dp_expected[k]);
            bad++;
        }
    printf("DP bytes %s analytic; rank 0 started %llu operations non-blocking, used %llu prefetches\n",
           bad ? "differ from" : "=", (unsigned long long)got->overlap_started,
           (unsigned long long)got->prefetches_used);
    return bad;
}

static int compare_identical(const tu_result *ref, const tu_result *got)
{
    int bad = 0;
    if (memcmp(&got->grad_loss, &ref->grad_loss, sizeof(double)) || memcmp(got->losses, ref->losses, sizeof got->losses)) {
        printf("FAIL losses differ from pp = dp = 1's\n");
        bad++;
    }
    for (int i = 0; i < ref->n; i++)
        if (memcmp(got->grads[i], ref->grads[i], (size_t)ref->numel[i] * sizeof(float)) ||
            memcmp(got->weights[i], ref->weights[i], (size_t)ref->numel[i] * sizeof(float))) {
            printf("FAIL %s: gradient or final weights differ from pp = dp = 1's\n", ref->names[i]);
            bad++;
        }
    printf("vs pp = dp = 1 at the same tp: %s\n", bad ? "DIFFERENT" : "losses, gradients and weights bit-identical");
    return bad;
}

static int compare_traffic(const tri_gpt_config *cfg, const tu_layout *l, const tu_result *got)
{
    tri_transformer dims = tri_gpt_dims(cfg);
    tri_layout_shape shape = {.tp = l->tp, .pp = 1, .dp = 1, .sequence_parallel = l->sp, .B = B, .T = T,
                              .n_micro = l->n_micro};
    tri_stage_place place = {.layer_start = 0, .layer_end = cfg->n_layer, .first = true, .last = true};
    uint64_t want[TRI_COMM_KINDS];
    int bad = 0;
    tri_tp_step_traffic(&dims, &shape, &place, want);
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        if (got->tp_bytes[k] != want[k]) {
            printf("FAIL %s moved %llu bytes, analytic %llu\n", tri_comm_kind_name((tri_comm_kind)k),
                   (unsigned long long)got->tp_bytes[k], (unsigned long long)want[k]);
            bad++;
        }
    printf("TP bytes %s analytic\n", bad ? "differ from" : "=");
    return bad;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.tp = 1, .schedule = "1f1b"};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tp") == 0 && i + 1 < argc)
            o->tp = atoi(argv[++i]);
        else if (strcmp(argv[i], "--pp") == 0 && i + 1 < argc)
            o->pp = atoi(argv[++i]);
        else if (strcmp(argv[i], "--zero") == 0 && i + 1 < argc)
            o->zero = atoi(argv[++i]);
        else if (strcmp(argv[i], "--overlap") == 0)
            o->overlap = true;
        else if (strcmp(argv[i], "--deterministic") == 0)
            o->deterministic = true;
        else if (strcmp(argv[i], "--sp") == 0)
            o->sp = true;
        else if (strcmp(argv[i], "--staged") == 0)
            o->staged = true;
        else if (strcmp(argv[i], "--schedule") == 0 && i + 1 < argc)
            o->schedule = argv[++i];
        else if (strcmp(argv[i], "--optimizer") == 0 && i + 1 < argc) {
            tri_optimizer_kind k;
            if (tri_optimizer_parse(argv[++i], &k))
                return -1;
            o->optimizer = (int)k;
        } else
            return -1;
    }
    return o->tp >= 1 && o->pp >= 0 && o->zero >= 0 && o->zero <= 3 ? 0 : -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    opts o;
    MPI_Comm mw = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    if (parse(argc, argv, &o) || tri_comm_mpi_create(&world, &mw)) {
        fprintf(stderr, "usage: mpiexec -n TP*PP*DP parallel_equivalence --tp TP [--pp PP] [--sp] [--schedule S] "
                        "[--zero Z] [--overlap] [--deterministic] [--staged] [--optimizer adam|sgd|lars|lamb]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    tri_device *stage_dev = NULL;
    if (o.staged) {
        tri_comm *staged = NULL;
        if (tri_device_cpu_create(&stage_dev, 1) || tri_comm_staged_create(&staged, world, stage_dev)) {
            fprintf(stderr, "parallel_equivalence: staged comm: %s\n", tri_error_message());
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        world = staged;
    }
    int pp = o.pp > 0 ? o.pp : world->size / o.tp, dp = world->size / (o.tp * pp), bad = 0;
    if (o.tp * pp * dp != world->size || MICRO % dp) {
        fprintf(stderr, "parallel_equivalence: %d ranks is not tp %d x pp %d x dp (dividing %d)\n", world->size, o.tp,
                pp, MICRO);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    tri_gpt_config cfg = tu_tiny_config();
    cfg.n_layer = 8;
    int32_t *w = tu_make_windows((int64_t)STEPS * B * MICRO, T, cfg.vocab_size, 17);
    tu_layout lay = {.tp = o.tp, .pp = pp, .dp = dp, .sp = o.sp, .n_micro = MICRO / dp, .schedule = o.schedule,
                     .layers_per_virtual_stage = strcmp(o.schedule, "interleaved") == 0 ? cfg.n_layer / (2 * pp) : 0,
                     .zero = o.zero, .overlap = o.overlap, .deterministic = o.deterministic, .optimizer = o.optimizer};
    tu_layout one = {.tp = 1, .pp = 1, .n_micro = MICRO, .optimizer = o.optimizer};
    tu_layout same_tp = {.tp = o.tp, .pp = 1, .sp = o.sp, .n_micro = MICRO, .deterministic = o.deterministic,
                         .optimizer = o.optimizer};
    tu_result ref1, ref_tp, got;
    memset(&ref1, 0, sizeof ref1);
    memset(&ref_tp, 0, sizeof ref_tp);
    if (tu_run_gpt_rank(world, &cfg, B, T, &lay, w, STEPS, &got)) {
        printf("FAIL rank %d: %s\n", world->rank, tri_error_message());
        bad++;
    }
    if (world->rank == 0 && !bad) {
        printf("tp=%d pp=%d dp=%d%s %s ZeRO-%d%s%s over MPI%s, %s:\n", o.tp, pp, dp, o.sp ? " sp" : "", o.schedule,
               o.zero, o.overlap ? " overlap" : "", o.deterministic ? " deterministic" : "",
               o.staged ? " (staged through host copies)" : "", tri_optimizer_name((tri_optimizer_kind)o.optimizer));
        if (tu_run_gpt(&cfg, B, T, &one, w, STEPS, &ref1) || tu_run_gpt(&cfg, B, T, &same_tp, w, STEPS, &ref_tp)) {
            printf("FAIL a reference run: %s\n", tri_error_message());
            bad++;
        } else {
            bad += compare_close(&cfg, &ref1, &got);
            if ((pp > 1 && dp == 1) || o.deterministic)
                bad += compare_identical(&ref_tp, &got);
            if (pp == 1 && dp == 1)
                bad += compare_traffic(&cfg, &lay, &got);
            if (dp > 1)
                bad += compare_dp_traffic(&got);
        }
    }
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    tu_result_free(&ref1);
    tu_result_free(&ref_tp);
    tu_result_free(&got);
    free(w);
    tri_comm_destroy(world); /* the staged comm destroys the MPI comm inside it */
    tri_device_destroy(stage_dev);
    MPI_Finalize();
    return all ? 1 : 0;
}
