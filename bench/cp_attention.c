/* bench/cp_attention.c - context parallelism's attention (layers/cp_attention.c) against one rank, in one run:
 * issue 34's benchmark.
 *
 * The tiny Llama's attention shape (models/llama-tiny-byte.json: 4 query heads and 2 key/value heads of
 * 64) at seq-length 8192, micro-batch 1, fp32, forward + backward: one rank with a 2-thread device
 * (tri_op_flash_attention_forward / _backward over the whole sequence) against cp 2 on 2 thread ranks
 * of one thread each (the same cores), for each --cp-comm-type (p2p: the ring, Liu et al. 2023 in
 * Megatron-Core's form; all_gather: Llama 3's) and deterministic mode. Thread ranks
 * (tri_run_thread_ranks), not MPI processes: the ranks' transfers are the thread comm's copies between
 * their buffers (what Open MPI's shared-memory transport does on one machine too), its non-blocking p2p
 * overlaps them with the ranks' compute, and no launcher is needed; the measured waits are the comm's
 * own clock (tri_comm_seconds: wall seconds inside comm calls, the exposed time).
 * The machine may be shared: --iters rounds each time the one rank and every mode once, in turn (the
 * first round also warms each up), so a change of load hits them alike; the best round of each counts.
 * Prints per mode: ms per forward + backward (best of --iters, each the slower rank's), the parallel
 * efficiency one-rank ms / cp ms (1: perfect; the target >= 0.85 for p2p), the exposed
 * communication as a share of the cp attention time (the slower rank's seconds waiting in comm calls /
 * its time; target <= 0.20), and the payload bytes each rank sent per kind against
 * tri_cp_layer_traffic (must be equal: a mismatch exits 1). Not a test: no threshold on time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "layers/cp_attention.h"
#include "partitioner/context_parallel.h"
#include "tools/cli/flags.h"

#define MAXCP 8

typedef struct cfg {
    int B, T, NH, NH_kv, HS, cp, iters, threads;
    int warm; /* untimed iterations before the timed one (the first round only) */
    const char *modes;
} cfg;

/* A device buffer of `shape` filled with uniform values in [-1, 1) (seed), or zeros (seed 0). */
static int buffer(tri_device *d, tri_tensor *t, tri_tensor shape, uint64_t seed)
{
    size_t bytes = (size_t)tri_tensor_numel(shape) * sizeof(float);
    *t = shape;
    t->data = NULL;
    int rc = tri_device_alloc(d, &t->data, bytes ? bytes : 4);
    float *host = rc ? NULL : calloc(bytes / sizeof(float) + 1, sizeof(float));
    if (!rc && !host)
        rc = TRI_ERR(TRI_ENOMEM, "bench_cp_attention: out of host memory");
    for (int64_t i = 0; !rc && seed && i < tri_tensor_numel(shape); i++)
        host[i] = 2.0f * (float)tri_rng_uniform(seed, 0, (uint64_t)i) - 1.0f;
    if (!rc) rc = tri_device_copy_from_host(d, *t, host);
    free(host);
    return rc;
}

/* The attention's buffers of one rank: T rows (the whole sequence, or a cp rank's T / cp). */
typedef struct bufs {
    tri_tensor qkv, dout, out, lse, dqkv, delta, act, f32;
} bufs;

static int make_bufs(tri_device *d, const cfg *p, int64_t T, int64_t act_n, int64_t f32_n, uint64_t seed, bufs *b)
{
    int64_t W = (int64_t)(p->NH + 2 * p->NH_kv) * p->HS, C = (int64_t)p->NH * p->HS;
    memset(b, 0, sizeof *b);
    int rc = buffer(d, &b->qkv, tri_tensor_3d(NULL, TRI_F32, p->B, T, W), seed);
    if (!rc) rc = buffer(d, &b->dout, tri_tensor_3d(NULL, TRI_F32, p->B, T, C), seed + 1);
    if (!rc) rc = buffer(d, &b->out, tri_tensor_3d(NULL, TRI_F32, p->B, T, C), 0);
    if (!rc) rc = buffer(d, &b->dqkv, tri_tensor_3d(NULL, TRI_F32, p->B, T, W), 0);
    if (!rc) rc = buffer(d, &b->lse, tri_tensor_3d(NULL, TRI_F32, p->B, p->NH, T), 0);
    if (!rc) rc = buffer(d, &b->delta, tri_tensor_3d(NULL, TRI_F32, p->B, p->NH, T), 0);
    if (!rc) rc = buffer(d, &b->act, tri_tensor_1d(NULL, TRI_F32, act_n), 0);
    if (!rc) rc = buffer(d, &b->f32, tri_tensor_1d(NULL, TRI_F32, f32_n), 0);
    return rc;
}

static void free_bufs(tri_device *d, bufs *b)
{
    tri_tensor *all[] = {&b->qkv, &b->dout, &b->out, &b->lse, &b->dqkv, &b->delta, &b->act, &b->f32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]->data)
            tri_device_free(d, all[i]->data);
}

/* One cp configuration on thread ranks. */
typedef struct cp_run {
    const cfg *p;
    tri_cp_comm_type type;
    bool det;
    double rank_s[MAXCP], rank_comm[MAXCP]; /* this iteration, per rank */
    double best_s, best_comm;               /* the best iteration: the slower rank's time and wait */
    uint64_t bytes[MAXCP][TRI_COMM_KINDS];  /* payload of one iteration, per rank and kind */
} cp_run;

static int rank_fn(int rank, int size, tri_comm *comm, void *arg)
{
    cp_run *r = arg;
    const cfg *p = r->p;
    tri_device *d = NULL;
    int64_t T_l = p->T / size, act_n = 0, f32_n = 0;
    tri_cp cp = {comm, size, rank, r->type, r->det};
    tri_cp_shape s = {{p->B, T_l, p->NH, p->NH_kv, p->HS}, TRI_F32};
    bufs b;
    int rc = tri_device_cpu_create(&d, 1);
    if (!rc) rc = tri_cp_scratch_numel(&cp, &s, &act_n, &f32_n);
    if (!rc) rc = make_bufs(d, p, T_l, act_n, f32_n, 100 + (uint64_t)rank * 10, &b);
    tri_cp_scratch sc = {b.act, b.f32};
    for (int it = 0; it < p->warm + 1 && !rc; it++) { /* the first p->warm are warm-ups */
        rc = tri_comm_barrier(comm);
        uint64_t before[TRI_COMM_KINDS];
        for (int k = 0; k < TRI_COMM_KINDS; k++)
            before[k] = tri_comm_bytes(comm, (tri_comm_kind)k);
        double w0 = tri_comm_seconds(comm, TRI_COMM_KINDS), t0 = tri_now_s();
        if (!rc) rc = tri_cp_attention_forward(d, &cp, b.out, b.lse, b.qkv, &sc);
        if (!rc) rc = tri_cp_attention_backward(d, &cp, b.dqkv, b.delta, b.dout, b.qkv, b.out, b.lse, &sc);
        r->rank_s[rank] = tri_now_s() - t0;
        r->rank_comm[rank] = tri_comm_seconds(comm, TRI_COMM_KINDS) - w0;
        for (int k = 0; k < TRI_COMM_KINDS; k++)
            r->bytes[rank][k] = tri_comm_bytes(comm, (tri_comm_kind)k) - before[k];
        int rb = tri_comm_barrier(comm);
        rc = rc ? rc : rb;
        if (!rc && rank == 0 && it >= p->warm) {
            double slow = 0, wait = 0;
            for (int q = 0; q < size; q++) {
                slow = r->rank_s[q] > slow ? r->rank_s[q] : slow;
                wait = r->rank_comm[q] > wait ? r->rank_comm[q] : wait;
            }
            if (slow < r->best_s) {
                r->best_s = slow;
                r->best_comm = wait;
            }
        }
        rb = tri_comm_barrier(comm); /* rank 0 has read every rank's numbers */
        rc = rc ? rc : rb;
    }
    if (d) {
        free_bufs(d, &b);
        tri_device_destroy(d);
    }
    return rc;
}

/* One rank over the whole sequence on a device of p->threads threads: ms per forward + backward. */
static int one_rank(const cfg *p, double *best_s)
{
    tri_device *d = NULL;
    bufs b;
    int rc = tri_device_cpu_create(&d, p->threads);
    if (!rc) rc = make_bufs(d, p, p->T, 1, 1, 100, &b);
    for (int it = 0; it < p->warm + 1 && !rc; it++) {
        double t0 = tri_now_s();
        rc = tri_op_flash_attention_forward(d, b.out, b.lse, b.qkv);
        if (!rc) rc = tri_op_flash_attention_backward(d, b.dqkv, b.delta, b.dout, b.qkv, b.out, b.lse);
        double t = tri_now_s() - t0;
        if (it >= p->warm && t < *best_s)
            *best_s = t;
    }
    if (d) {
        free_bufs(d, &b);
        tri_device_destroy(d);
    }
    return rc;
}

/* The run of one mode ("p2p", "all_gather", "deterministic"). */
static int mode_of(const cfg *p, const char *mode, cp_run *r)
{
    *r = (cp_run){.p = p, .best_s = 1e30};
    if (!strcmp(mode, "p2p"))
        r->type = TRI_CP_COMM_P2P;
    else if (!strcmp(mode, "all_gather"))
        r->type = TRI_CP_COMM_ALL_GATHER;
    else if (!strcmp(mode, "deterministic"))
        r->type = TRI_CP_COMM_P2P, r->det = true;
    else
        return TRI_ERR(TRI_EINVAL, "bench_cp_attention: --modes entry '%s': expected p2p, all_gather or deterministic",
                       mode);
    return TRI_OK;
}

/* Prints a mode's line; *bad counts byte mismatches. */
static void report(const cfg *p, const char *mode, const cp_run *rr, double one_s, int *bad)
{
    cp_run r = *rr;
    tri_cp_dims dims = {.B = p->B, .T = p->T, .cp = p->cp, .C_l = (int64_t)p->NH * p->HS,
                        .C_kv_l = (int64_t)p->NH_kv * p->HS, .NH_l = p->NH, .e = 4, .type = r.type,
                        .deterministic = r.det};
    uint64_t f[TRI_COMM_KINDS], bw[TRI_COMM_KINDS], planned = 0, sent = 0;
    int steps, mismatch = 0;
    tri_cp_layer_traffic(&dims, f, bw, &steps);
    for (int k = 0; k < TRI_COMM_KINDS; k++) {
        planned += f[k] + bw[k];
        for (int q = 0; q < p->cp; q++)
            mismatch += r.bytes[q][k] != f[k] + bw[k];
    }
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        sent += r.bytes[0][k];
    *bad += mismatch;
    printf("cp %d %-13s %9.1f ms  efficiency %.3f  exposed comm %6.1f ms = %.3f of the attention  bytes a rank "
           "%llu (planned %llu%s)\n", p->cp, mode, r.best_s * 1e3, one_s / r.best_s, r.best_comm * 1e3,
           r.best_comm / r.best_s, (unsigned long long)sent, (unsigned long long)planned,
           mismatch ? ": MISMATCH" : ", equal on every rank and kind");
}

int main(int argc, char **argv)
{
    cfg p = {.B = 1, .T = 8192, .NH = 4, .NH_kv = 2, .HS = 64, .cp = 2, .iters = 3, .threads = 2,
             .modes = "p2p,all_gather,deterministic"};
    tri_flag flags[] = {
        {"seq-length", TRI_FLAG_INT, &p.T, "T, the whole sequence (a multiple of 2 cp x 64)", 128, 1 << 22, NULL, false},
        {"micro-batch-size", TRI_FLAG_INT, &p.B, "sequences (B)", 1, 1 << 16, NULL, false},
        {"num-attention-heads", TRI_FLAG_INT, &p.NH, "query heads", 1, 1 << 12, NULL, false},
        {"num-query-groups", TRI_FLAG_INT, &p.NH_kv, "key/value heads (divides the query heads)", 1, 1 << 12, NULL, false},
        {"head-size", TRI_FLAG_INT, &p.HS, "head size", 1, 1 << 12, NULL, false},
        {"context-parallel-size", TRI_FLAG_INT, &p.cp, "cp: thread ranks of one thread each", 2, MAXCP, NULL, false},
        {"threads", TRI_FLAG_INT, &p.threads, "the one rank's threads (the same cores as cp ranks of one)", 1, 1 << 12,
         NULL, false},
        {"modes", TRI_FLAG_STRING, &p.modes, "comma-separated: p2p, all_gather, deterministic", 0, 0, NULL, false},
        {"iters", TRI_FLAG_INT, &p.iters, "timed repetitions (the best is printed)", 1, 1 << 20, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_cp_attention: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_cp_attention",
                        "Context-parallel attention (cp ranks of one thread) against one rank of cp threads: "
                        "efficiency, exposed comm, bytes against the plan.");
        return rc ? 2 : 0;
    }
    double one_s = 1e30;
    int bad = 0, nm = 0;
    char *list = strdup(p.modes), *save = NULL, *names[8];
    cp_run runs[8];
    for (char *tok = list ? strtok_r(list, ",", &save) : NULL; tok && !rc && nm < 8; tok = strtok_r(NULL, ",", &save)) {
        names[nm] = tok;
        rc = mode_of(&p, tok, &runs[nm++]);
    }
    for (int round = 0; round < p.iters && !rc; round++) {
        p.warm = round == 0;
        rc = one_rank(&p, &one_s);
        for (int m = 0; m < nm && !rc; m++)
            rc = tri_run_thread_ranks(p.cp, rank_fn, &runs[m]);
    }
    if (!rc) {
        printf("cp attention: B %d T %d, %d query / %d key-value heads of %d, fp32, forward + backward, best of %d "
               "rounds; one rank on %d threads %.1f ms\n", p.B, p.T, p.NH, p.NH_kv, p.HS, p.iters, p.threads,
               one_s * 1e3);
        for (int m = 0; m < nm; m++)
            report(&p, names[m], &runs[m], one_s, &bad);
    }
    free(list);
    if (rc) {
        fprintf(stderr, "bench_cp_attention: %s\n", tri_error_message());
        return 1;
    }
    if (bad) {
        fprintf(stderr, "bench_cp_attention: %d byte counts differ from tri_cp_layer_traffic\n", bad);
        return 1;
    }
    return 0;
}
