/* tests/mpi/tp_equivalence.c - tensor parallelism over real MPI against one rank.
 *
 * Run under `mpiexec -n TP tp_equivalence [--sp]`: the ranks train a tiny GPT at tensor-parallel
 * size TP over the MPI comm; rank 0 also runs the same model on one rank in-process. As in
 * tests/test_tp.c (thread ranks): the loss and every gathered gradient after one step agree within
 * 1e-5 relative, the losses of 20 AdamW steps within 1e-4, and the TP byte counters equal the
 * analytic traffic. Exits 0 only if every check passes. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm.h"
#include "engine/status.h"
#include "partitioner/traffic.h"
#include "tests/harness.h"

enum { B = 2, T = 12, STEPS = 20 };

static double tensor_rel(const float *a, const float *b, int64_t n)
{
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        ref = fmax(ref, fabs((double)b[i]));
    }
    return ref > 0 ? diff / ref : diff;
}

/* Compares on rank 0; returns the number of failed checks. */
static int compare(const tri_gpt_config *cfg, int tp, bool sp, const tu_result *ref, const tu_result *got)
{
    int bad = 0;
    double loss_err = fabs(got->grad_loss - ref->grad_loss) / ref->grad_loss, worst = 0.0, worst_step = 0.0;
    if (loss_err > 1e-5) {
        printf("FAIL loss %.9g vs %.9g\n", got->grad_loss, ref->grad_loss);
        bad++;
    }
    for (int i = 0; i < ref->n; i++) {
        int64_t n = strcmp(ref->names[i], "wte") == 0 ? (int64_t)cfg->vocab_size * ref->cols[i] : ref->numel[i];
        double e = tensor_rel(got->grads[i], ref->grads[i], n);
        worst = fmax(worst, e);
        if (e > 1e-5) {
            printf("FAIL gradient of %s differs by %g\n", ref->names[i], e);
            bad++;
        }
    }
    for (int s = 0; s < STEPS; s++) {
        double e = fabs(got->losses[s] - ref->losses[s]) / ref->losses[s];
        worst_step = fmax(worst_step, e);
        if (e > 1e-4) {
            printf("FAIL step %d loss %g vs %g\n", s + 1, got->losses[s], ref->losses[s]);
            bad++;
        }
    }
    tri_transformer dims = tri_gpt_dims(cfg);
    tri_layout_shape shape = {.tp = tp, .pp = 1, .dp = 1, .sequence_parallel = sp, .B = B, .T = T, .n_micro = 1};
    tri_stage_place place = {.layer_start = 0, .layer_end = cfg->n_layer, .first = true, .last = true};
    uint64_t want[TRI_COMM_KINDS];
    tri_tp_step_traffic(&dims, &shape, &place, want);
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        if (got->tp_bytes[k] != want[k]) {
            printf("FAIL %s moved %llu bytes, analytic %llu\n", tri_comm_kind_name((tri_comm_kind)k),
                   (unsigned long long)got->tp_bytes[k], (unsigned long long)want[k]);
            bad++;
        }
    printf("tp=%d sp=%d over MPI: loss diff %.2g, max gradient diff %.2g, max loss diff over %d steps %.2g, "
           "TP bytes %s analytic\n", tp, sp, loss_err, worst, STEPS, worst_step, bad ? "vs" : "=");
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    bool sp = argc > 1 && strcmp(argv[1], "--sp") == 0;
    MPI_Comm mw = MPI_COMM_WORLD;
    tri_comm *world = NULL;
    int bad = 0;
    if (tri_comm_mpi_create(&world, &mw)) {
        fprintf(stderr, "tp_equivalence: %s\n", tri_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int tp = world->size;
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows(STEPS * B, T, cfg.vocab_size, 99);
    tu_result ref, got;
    memset(&ref, 0, sizeof ref);
    tu_layout one = {.tp = 1}, lay = {.tp = tp, .sp = sp};
    if (world->rank == 0 && tu_run_gpt(&cfg, B, T, &one, w, STEPS, &ref)) {
        printf("FAIL the one-rank reference: %s\n", tri_error_message());
        bad++;
    }
    if (tu_run_gpt_rank(world, &cfg, B, T, &lay, w, STEPS, &got)) {
        printf("FAIL rank %d: %s\n", world->rank, tri_error_message());
        bad++;
    }
    if (world->rank == 0 && !bad)
        bad += compare(&cfg, tp, sp, &ref, &got);
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    tu_result_free(&ref);
    tu_result_free(&got);
    free(w);
    tri_comm_destroy(world);
    MPI_Finalize();
    return all ? 1 : 0;
}
