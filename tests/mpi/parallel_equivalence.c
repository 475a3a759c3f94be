/* tests/mpi/parallel_equivalence.c - tensor and pipeline parallelism over real MPI.
 *
 * Run under `mpiexec -n TP*PP parallel_equivalence --tp TP [--sp] [--schedule S]`: the ranks train
 * a GPT (8 layers) at tensor-parallel size TP and pipeline size PP over the MPI comm; world rank 0
 * also runs references in-process on thread ranks. Against one rank (tp = pp = 1), as
 * tests/test_tp.c checks on thread ranks: loss and every gathered gradient within 1e-5 relative,
 * the step losses within 1e-4, the TP byte counters equal to the analytic traffic (one stage).
 * Against pp = 1 at the same TP (tests/test_pp.c): losses, gradients and final weights
 * bit-identical. Exits 0 only if every check passes. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm.h"
#include "engine/status.h"
#include "partitioner/traffic.h"
#include "tests/harness.h"

enum { B = 2, T = 12, STEPS = 6, MICRO = 4 };

typedef struct opts {
    int tp;
    bool sp;
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

static int compare_identical(const tu_result *ref, const tu_result *got)
{
    int bad = 0;
    if (memcmp(&got->grad_loss, &ref->grad_loss, sizeof(double)) || memcmp(got->losses, ref->losses, sizeof got->losses)) {
        printf("FAIL losses differ from pp = 1's\n");
        bad++;
    }
    for (int i = 0; i < ref->n; i++)
        if (memcmp(got->grads[i], ref->grads[i], (size_t)ref->numel[i] * sizeof(float)) ||
            memcmp(got->weights[i], ref->weights[i], (size_t)ref->numel[i] * sizeof(float))) {
            printf("FAIL %s: gradient or final weights differ from pp = 1's\n", ref->names[i]);
            bad++;
        }
    printf("vs pp = 1 at the same tp: %s\n", bad ? "DIFFERENT" : "losses, gradients and weights bit-identical");
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
        else if (strcmp(argv[i], "--sp") == 0)
            o->sp = true;
        else if (strcmp(argv[i], "--schedule") == 0 && i + 1 < argc)
            o->schedule = argv[++i];
        else
            return -1;
    }
    return o->tp >= 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    opts o;
    MPI_Comm mw = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    if (parse(argc, argv, &o) || tri_comm_mpi_create(&world, &mw)) {
        fprintf(stderr, "usage: mpiexec -n TP*PP parallel_equivalence --tp TP [--sp] [--schedule S]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int pp = world->size / o.tp, bad = 0;
    tri_gpt_config cfg = tu_tiny_config();
    cfg.n_layer = 8;
    int32_t *w = tu_make_windows((int64_t)STEPS * B * MICRO, T, cfg.vocab_size, 17);
    tu_layout lay = {.tp = o.tp, .pp = pp, .sp = o.sp, .n_micro = MICRO, .schedule = o.schedule,
                     .layers_per_virtual_stage = strcmp(o.schedule, "interleaved") == 0 ? cfg.n_layer / (2 * pp) : 0};
    tu_layout one = {.tp = 1, .pp = 1, .n_micro = MICRO}, same_tp = {.tp = o.tp, .pp = 1, .sp = o.sp, .n_micro = MICRO};
    tu_result ref1, ref_tp, got;
    memset(&ref1, 0, sizeof ref1);
    memset(&ref_tp, 0, sizeof ref_tp);
    if (tu_run_gpt_rank(world, &cfg, B, T, &lay, w, STEPS, &got)) {
        printf("FAIL rank %d: %s\n", world->rank, tri_error_message());
        bad++;
    }
    if (world->rank == 0 && !bad) {
        printf("tp=%d pp=%d%s %s over MPI:\n", o.tp, pp, o.sp ? " sp" : "", o.schedule);
        if (tu_run_gpt(&cfg, B, T, &one, w, STEPS, &ref1) || tu_run_gpt(&cfg, B, T, &same_tp, w, STEPS, &ref_tp)) {
            printf("FAIL a reference run: %s\n", tri_error_message());
            bad++;
        } else {
            bad += compare_close(&cfg, &ref1, &got);
            if (pp > 1)
                bad += compare_identical(&ref_tp, &got);
            else
                bad += compare_traffic(&cfg, &lay, &got);
        }
    }
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    tu_result_free(&ref1);
    tu_result_free(&ref_tp);
    tu_result_free(&got);
    free(w);
    tri_comm_destroy(world);
    MPI_Finalize();
    return all ? 1 : 0;
}
