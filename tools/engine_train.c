/* tools/engine_train.c - trains a GPT with tensor, pipeline and data parallelism.
 *
 * Launched directly for one rank or with `mpirun -np N` (world = tp x pp x dp). Flags follow
 * Megatron-LM's names. Every rank validates flags, config, data and the memory plan before any
 * collective (tools/cli/validate.h), so a bad input gives one clear message (from rank 0) and a
 * non-zero exit on every rank, never a hang; after that a failure on any rank aborts all ranks.
 * Progress goes to stdout on rank 0: the plan, one line per iteration (loss, for a model with
 * experts its aux loss, expert load and dropped fraction (engine/train/moe_stats.h), lr, grad norm,
 * ms/iter with its split into compute and communication, tokens/s, achieved GFLOP/s by Narayanan
 * et al. 2021 eq. 3 without recomputation, ETA), validation loss at each eval interval, and a
 * sample at the end. The same figures, per-rank times and the straggler are appended as JSON lines
 * to SAVE_DIR/metrics.jsonl (tools/cli/train_metrics.h). With --save-interval N a checkpoint is
 * saved to SAVE_DIR/iter_<N>/ every N iterations and at the end; --load DIR resumes from DIR's
 * latest checkpoint (any layout) and trains on to --train-iters (checkpoints/). */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/comm/grid.h"
#include "checkpoints/fsutil.h"
#include "engine/core/clock.h"
#include "engine/core/file.h"
#include "engine/core/log.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/data/dataloader.h"
#include "engine/device/device.h"
#include "engine/train/fault.h"
#include "engine/train/onebit_adam.h"
#include "engine/train/optimizer.h"
#include "engine/train/step_time.h"
#include "engine/train/train.h"
#include "models/config.h"
#include "models/generate.h"
#include "models/model.h"
#include "models/preview.h"
#include "models/session.h"
#include "models/session_checkpoint.h"
#include "models/tokenizer.h"
#include "partitioner/flops.h"
#include "tools/cli/backend.h"
#include "tools/cli/compression_flags.h"
#include "tools/cli/fault.h"
#include "tools/cli/flags.h"
#include "tools/cli/layout_flags.h"
#include "tools/cli/local_sgd_flags.h"
#include "tools/cli/outputs.h"
#include "tools/cli/threads.h"
#include "tools/cli/train_metrics.h"
#include "tools/cli/validate.h"


typedef struct args {
    const char *config, *train_data, *val_data, *save_dir, *device, *comm;
    const char *tokenizer_type, *vocab_file, *merge_file, *lr_decay_style, *load, *optimizer;
    tri_cli_layout layout;                      /* the layout flags (tools/cli/layout_flags.h) */
    int threads;
    int64_t train_iters, lr_warmup_iters, lr_decay_iters, seed;
    float lr, min_lr, weight_decay, clip_grad, beta1, beta2, eps;
    float sgd_momentum, lars_eta;               /* --optimizer sgd / lars */
    int64_t adam_freeze_step;                   /* --adam-freeze-step: 0 off (1-bit Adam's freeze_step) */
    bool onebit_adam;                           /* --onebit-adam: 1-bit Adam's compression stage after the freeze */
    bool sgd_nesterov, no_load_optim;
    int eval_interval, eval_iters, log_interval, sample_length, sample_top_k, save_interval, keep_last;
    float sample_temperature, memory_budget_gb, peak_gflops;
    float comm_timeout, spike_zscore;           /* faults: see tools/cli/fault.h, engine/train/fault.h */
    int skip_nonfinite, spike_window;
    int exit_interval;                          /* Megatron-LM's --exit-interval, --exit-duration-in-mins */
    float exit_duration_mins;
    bool quiet;
    bool exit_on_missing_checkpoint, override_scheduler, use_checkpoint_scheduler, async_save;
    tri_cli_local_sgd local_sgd;                /* local SGD / DiLoCo (engine/train/local_sgd.h) */
    tri_cli_compression compression;            /* tools/cli/compression_flags.h */
    bool cuda_graph;                            /* --enable-cuda-graph (engine/train/step_graph.h) */
} args;

typedef struct run {
    args a;
    tri_model model;
    tri_comm *world;
    tri_comm *dev_world;     /* the device's world comm (NCCL for cuda), NULL: world serves */
    double peak_gflops;      /* MFU's denominator per rank (0: unknown) */
    tri_train_layout L;      /* the layout the flags resolve to (partitioner/constraints.h) */
    tri_device *dev;
    tri_session_options sopt;
    tri_session ss;
    tri_dataloader *train, *val;
    tri_tokenizer *tok;
    tri_lr_schedule lr;
    FILE *metrics;
    int64_t start_iter;      /* the first iteration to run: 0, or the loaded checkpoint's */
    bool load_found;         /* --load names a checkpoint (else: no checkpoint yet, start afresh) */
    tri_ckpt_async *saver;   /* --async-save: the background checkpoint writer */
    tri_step_guard guard;    /* agreed non-finite / stop checks at every step (engine/train/fault.h) */
    tri_cli_injection inject;
    bool stopped;            /* stopped early (a signal, --exit-interval/-duration), after saving a checkpoint */
    double started;          /* tri_now_s() at start-up, for --exit-duration-in-mins */
    bool agreed;             /* the error was agreed by every rank: exit without MPI_Abort */
    const tri_flag *flags;   /* the flag table, for the run-identity text */
    int nflags;
} run;

static int resume_agree(run *r);

#define FLAG(name, kind, dst, help, lo, hi) {name, kind, dst, help, lo, hi, NULL, false}
#define CHOICE(name, dst, choices, help) {name, TRI_FLAG_CHOICE, dst, help, 0, 0, choices, false}

static int make_flags(args *a, tri_flag *f)
{
    int n = 0;
    f[n++] = (tri_flag)FLAG("config", TRI_FLAG_STRING, &a->config, "model config (a Hugging Face config.json; its model_type picks the family), e.g. models/gpt2.json", 0, 0);
    f[n++] = (tri_flag)FLAG("train-data", TRI_FLAG_STRING, &a->train_data, "training token file (llm.c format, from tools/tokenize)", 0, 0);
    f[n++] = (tri_flag)FLAG("val-data", TRI_FLAG_STRING, &a->val_data, "validation token file", 0, 0);
    n = tri_cli_layout_flags(&a->layout, f, n);
    n = tri_cli_compression_flags(&a->compression, f, n);
    f[n++] = (tri_flag)FLAG("deterministic", TRI_FLAG_BOOL, &a->layout.req.deterministic, "same as --deterministic-mode", 0, 0);
    f[n++] = (tri_flag)FLAG("train-iters", TRI_FLAG_INT64, &a->train_iters, "iterations (optimizer updates)", 0, 1e12);
    f[n++] = (tri_flag)FLAG("lr", TRI_FLAG_FLOAT, &a->lr, "peak learning rate", 0, 10);
    f[n++] = (tri_flag)FLAG("min-lr", TRI_FLAG_FLOAT, &a->min_lr, "learning rate at the end of the decay", 0, 10);
    f[n++] = (tri_flag)FLAG("lr-warmup-iters", TRI_FLAG_INT64, &a->lr_warmup_iters, "linear warm-up iterations", 0, 1e12);
    f[n++] = (tri_flag)FLAG("lr-decay-iters", TRI_FLAG_INT64, &a->lr_decay_iters, "iteration where the decay ends (0: train-iters)", 0, 1e12);
    f[n++] = (tri_flag)CHOICE("lr-decay-style", &a->lr_decay_style, "cosine|linear|constant", "learning-rate decay after warm-up");
    f[n++] = (tri_flag)CHOICE("optimizer", &a->optimizer, "adam|sgd|lars|lamb", "adam: AdamW (Loshchilov & Hutter 2019); sgd: SGD with momentum as torch.optim.SGD; lars: SGD momentum with the layer-wise trust ratio eta ||w|| / (||g|| + wd ||w||) (You et al. 2017); lamb: the Adam direction with bias correction and decoupled decay, scaled per tensor by ||w|| / ||update|| (You et al. 2020). Norms are whole tensors' under ZeRO and TP. Biases and norm weights (weight decay off) are excluded from the trust ratio (ratio 1) and from weight decay, as in the papers");
    f[n++] = (tri_flag)FLAG("weight-decay", TRI_FLAG_FLOAT, &a->weight_decay, "weight decay of every optimizer (matrices and embeddings only: biases and norm weights are excluded)", 0, 10);
    f[n++] = (tri_flag)FLAG("adam-beta1", TRI_FLAG_FLOAT, &a->beta1, "AdamW and LAMB beta1", 0, 0.999999);
    f[n++] = (tri_flag)FLAG("adam-beta2", TRI_FLAG_FLOAT, &a->beta2, "AdamW and LAMB beta2", 0, 0.999999);
    f[n++] = (tri_flag)FLAG("adam-eps", TRI_FLAG_FLOAT, &a->eps, "AdamW and LAMB epsilon", 1e-30, 1);
    f[n++] = (tri_flag)FLAG("adam-freeze-step", TRI_FLAG_INT64, &a->adam_freeze_step, "AdamW only: after N optimizer steps (from iteration N on, 0-based, when no step is skipped) the second moment v stops updating, v and its bias correction 1 - beta2^N held, m continuing: 1-bit Adam's two stages (Tang et al. 2021 §3, DeepSpeed's freeze_step). Error feedback compensates a compressor only when the update is linear in the gradient, which Adam's v is not: 1-bit Adam gives --grad-compression-start-iter the same N (Tang et al.: 15-25% of training; on fortunes the warm-up alone did better, docs/grad-compression.md). 0: never frozen (plain AdamW)", 0, 1e12);
    f[n++] = (tri_flag)FLAG("onebit-adam", TRI_FLAG_BOOL, &a->onebit_adam, "1-bit Adam as Tang et al. 2021 run it (Algorithm 1; DeepSpeed's OnebitAdam): with --adam-freeze-step N and --grad-compression 1bit|qsgd|topk|powersgd (the paper's is 1bit; PowerSGD rank 4 on the momentum ended +9% on fortunes where 1bit ended -0.3%: docs/grad-compression.md), updates 1..N are plain AdamW on the full-precision reduction (the compressor's start is N: leave --grad-compression-start-iter, powersgd's --powersgd-start-iter, unset or give N), then the gradients are not reduced: each worker clips its own gradient, updates the momentum with it, and the momentum is all-reduced compressed with error feedback (worker and, with --grad-compression-reduce two-phase, server residuals), the update using the frozen v. ZeRO 0 only; composes with tp, pp, bf16; not with --deterministic-mode, local SGD or cp. dp 1: ignored (frozen AdamW)", 0, 0);
    f[n++] = (tri_flag)FLAG("sgd-momentum", TRI_FLAG_FLOAT, &a->sgd_momentum, "SGD and LARS momentum mu (buf = mu buf + update)", 0, 0.999999);
    f[n++] = (tri_flag)FLAG("sgd-nesterov", TRI_FLAG_BOOL, &a->sgd_nesterov, "SGD and LARS: Nesterov momentum (step with update + mu buf)", 0, 0);
    f[n++] = (tri_flag)FLAG("lars-eta", TRI_FLAG_FLOAT, &a->lars_eta, "LARS trust coefficient eta (You et al. 2017: 0.001)", 1e-12, 1e6);
    f[n++] = (tri_flag)FLAG("clip-grad", TRI_FLAG_FLOAT, &a->clip_grad, "clip the global gradient norm to this (0: off)", 0, 1e9);
    f[n++] = (tri_flag)FLAG("seed", TRI_FLAG_INT64, &a->seed, "seed of initialisation, data order and sampling", 0, 9.2e18);
    f[n++] = (tri_flag)FLAG("eval-interval", TRI_FLAG_INT, &a->eval_interval, "iterations between validation runs (0: only at the end)", 0, 1 << 30);
    f[n++] = (tri_flag)FLAG("eval-iters", TRI_FLAG_INT, &a->eval_iters, "global batches per validation run", 1, 1 << 20);
    f[n++] = (tri_flag)FLAG("log-interval", TRI_FLAG_INT, &a->log_interval, "iterations between progress lines", 1, 1 << 30);
    f[n++] = (tri_flag)FLAG("save-dir", TRI_FLAG_STRING, &a->save_dir, "run directory (metrics.jsonl, checkpoints iter_<N>/ and latest)", 0, 0);
    f[n++] = (tri_flag)FLAG("save-interval", TRI_FLAG_INT, &a->save_interval, "save a checkpoint every N iterations and at the end (0: never)", 0, 1 << 30);
    f[n++] = (tri_flag)FLAG("keep-last", TRI_FLAG_INT, &a->keep_last, "checkpoints kept in --save-dir (0: all)", 0, 1 << 30);
    f[n++] = (tri_flag)FLAG("exit-interval", TRI_FLAG_INT, &a->exit_interval, "save a checkpoint and exit (status 0) after an iteration divisible by N, before --train-iters (0: off); the same command with --load resumes", 0, 1 << 30);
    f[n++] = (tri_flag)FLAG("exit-duration-in-mins", TRI_FLAG_FLOAT, &a->exit_duration_mins, "save a checkpoint and exit (status 0) after the first iteration that ends past this many minutes since start-up (e.g. a little under a Slurm time limit; 0: off)", 0, 1e9);
    f[n++] = (tri_flag)FLAG("async-save", TRI_FLAG_BOOL, &a->async_save, "write checkpoints in the background: the loop is blocked only while each rank copies its shards to host memory (pinned on GPUs); the same guarantees as a synchronous save, at most one save in flight", 0, 0);
    f[n++] = (tri_flag)FLAG("load", TRI_FLAG_STRING, &a->load, "resume from this run directory's latest checkpoint (or a step directory), in any layout; --train-iters stays the total. With no checkpoint there yet, start from scratch with a warning (one job script for the first start and every restart)", 0, 0);
    f[n++] = (tri_flag)FLAG("no-load-optim", TRI_FLAG_BOOL, &a->no_load_optim, "on resume, load the weights only: the optimizer state starts fresh (then another --optimizer may resume the checkpoint)", 0, 0);
    f[n++] = (tri_flag)FLAG("exit-on-missing-checkpoint", TRI_FLAG_BOOL, &a->exit_on_missing_checkpoint, "refuse to start when --load holds no checkpoint", 0, 0);
    f[n++] = (tri_flag)FLAG("use-checkpoint-opt_param-scheduler", TRI_FLAG_BOOL, &a->use_checkpoint_scheduler, "on resume, take the learning-rate schedule (--lr, --min-lr, warm-up, decay iterations and style) from the checkpoint, whatever the flags say", 0, 0);
    f[n++] = (tri_flag)FLAG("override-opt_param-scheduler", TRI_FLAG_BOOL, &a->override_scheduler, "on resume, take the learning-rate schedule from the flags even where the checkpoint's differs (e.g. a larger --train-iters); without either flag a changed schedule is refused", 0, 0);
    f[n++] = (tri_flag)CHOICE("tokenizer-type", &a->tokenizer_type, "ByteLevel|GPT2BPETokenizer", "tokenizer of the sample at the end (not loaded with --sample-length 0)");
    f[n++] = (tri_flag)FLAG("vocab-file", TRI_FLAG_STRING, &a->vocab_file, "GPT-2 encoder.json (read only when sampling)", 0, 0);
    f[n++] = (tri_flag)FLAG("merge-file", TRI_FLAG_STRING, &a->merge_file, "GPT-2 vocab.bpe (read only when sampling)", 0, 0);
    f[n++] = (tri_flag)FLAG("sample-length", TRI_FLAG_INT, &a->sample_length, "tokens sampled at the end (0: none; at most seq-length - 1)", 0, 1 << 20);
    f[n++] = (tri_flag)FLAG("sample-top-k", TRI_FLAG_INT, &a->sample_top_k, "top-k of the sampling", 1, 1 << 20);
    f[n++] = (tri_flag)FLAG("sample-temperature", TRI_FLAG_FLOAT, &a->sample_temperature, "sampling temperature", 1e-3, 100);
    f[n++] = (tri_flag)CHOICE("device", &a->device, "cpu|cuda", "where the math runs");
    f[n++] = (tri_flag)CHOICE("comm", &a->comm, "auto|nccl|mpi", "how cuda ranks talk: NCCL (one GPU per rank), MPI with tensors staged through host memory (ranks sharing a GPU), or auto (NCCL unless a node has more ranks than GPUs)");
    f[n++] = (tri_flag)FLAG("enable-cuda-graph", TRI_FLAG_BOOL, &a->cuda_graph, "cuda: capture each micro-batch's forward and backward as a CUDA graph on the second iteration (the first runs eagerly, so cuBLASLt's plans and every lazy buffer exist) and replay it on later ones: one graph launch where each kernel was a launch. The tokens are uploaded before the graph and the losses read after it; gradient zeroing and reductions, the norm, the optimizer (its per-step lr) and evaluation run uncaptured. Refused on the cpu device, at tp, pp or dp > 1 (the comms are not captured), at --zero-stage 2-3, with --deterministic-mode or --overlap-grad-reduce (host bookkeeping per pass a replay would skip). Default off", 0, 0);
    f[n++] = (tri_flag)FLAG("threads", TRI_FLAG_INT, &a->threads, "CPU threads per rank (0: OMP_NUM_THREADS, else cores / ranks)", 0, 4096);
    f[n++] = (tri_flag)FLAG("memory-budget-gb", TRI_FLAG_FLOAT, &a->memory_budget_gb, "refuse layouts whose planned memory per rank exceeds this many GiB (0: on cpu the machine's physical memory, on cuda no check)", 0, 1e9);
    f[n++] = (tri_flag)FLAG("peak-gflops", TRI_FLAG_FLOAT, &a->peak_gflops, "peak GFLOP/s of one rank, the denominator of MFU (0: the device's: 100 per CPU thread, measured OpenBLAS sgemm here; a GPU's datasheet peak in the run's precision)", 0, 1e9);
    f[n++] = (tri_flag)FLAG("comm-timeout", TRI_FLAG_FLOAT, &a->comm_timeout, "seconds a rank waits in one collective before it names the ranks that do not answer (dead or stalled) and every rank exits non-zero (0: wait forever)", 0, 1e7);
    f[n++] = (tri_flag)FLAG("skip-nonfinite", TRI_FLAG_INT, &a->skip_nonfinite, "skip up to K steps in a row whose loss or gradients are not finite on some rank (no update on any rank); the next one stops the run (0: stop at the first)", 0, 1 << 30);
    f[n++] = (tri_flag)FLAG("skip-loss-spike-zscore", TRI_FLAG_FLOAT, &a->spike_zscore, "skip the update of a step whose loss is more than Z standard deviations above the mean of the last --loss-spike-window losses (0: off)", 0, 1e6);
    f[n++] = (tri_flag)FLAG("loss-spike-window", TRI_FLAG_INT, &a->spike_window, "losses of applied steps the spike z-score is measured against", 2, 1 << 20);
    n = tri_cli_local_sgd_flags(&a->local_sgd, f, n);
    f[n++] = (tri_flag)FLAG("quiet", TRI_FLAG_BOOL, &a->quiet, "no per-iteration lines (summary only)", 0, 0);
    return n;
}

static void defaults(args *a)
{
    memset(a, 0, sizeof *a);
    a->config = "models/gpt2-tiny-byte.json";
    a->train_data = "data/fortunes_byte_train.bin";
    a->val_data = "data/fortunes_byte_val.bin";
    a->save_dir = "runs/latest";
    a->device = "cpu";
    a->tokenizer_type = "ByteLevel";
    a->vocab_file = "data/gpt2/encoder.json";
    a->merge_file = "data/gpt2/vocab.bpe";
    a->lr_decay_style = "cosine";
    tri_cli_layout_defaults(&a->layout);
    tri_cli_compression_defaults(&a->compression);
    a->train_iters = 100;
    a->lr = 6e-4f;
    a->min_lr = 6e-5f;
    a->lr_warmup_iters = 0;
    a->weight_decay = 0.1f;
    a->clip_grad = 1.0f;
    a->beta1 = 0.9f;
    a->optimizer = "adam";
    a->sgd_momentum = 0.9f;
    a->lars_eta = 0.001f;
    a->beta2 = 0.95f;
    a->eps = 1e-8f;
    a->seed = 1234;
    a->eval_interval = 50;
    a->eval_iters = 10;
    a->log_interval = 1;
    a->sample_length = 128;
    a->sample_top_k = 40;
    a->sample_temperature = 1.0f;
    a->comm_timeout = 300.0f;
    a->comm = "auto";
    a->spike_window = 50;
    tri_cli_local_sgd_defaults(&a->local_sgd);
}

/* --local-sgd-steps and the outer optimizer's flags into the session's config (steps 0: off), with the
 * refusal that concerns another flag. */
static int local_sgd_options(run *r)
{
    const args *a = &r->a;
    tri_local_sgd_config *c = &r->sopt.local_sgd;
    int rc = tri_cli_local_sgd_resolve(&a->local_sgd, a->train_iters, r->L.zero_stage, c);
    if (rc || c->steps == 0)
        return rc;
    if (a->spike_zscore > 0)
        rc = TRI_ERR(TRI_EINVAL, "--skip-loss-spike-zscore %g with --local-sgd-steps %d: between synchronisations "
                     "each replica has its own loss, so a spike is not one decision for every rank",
                     (double)a->spike_zscore, c->steps);
    return rc;
}

/* ---- validation: no communication, so every rank reaches the same verdict ---- */

static int validate(run *r)
{
    args *a = &r->a;
    int rc = tri_model_load(&r->model, a->config);
    if (rc)
        return rc;
    /* the layout: the same rules and messages as the partitioner's (one validator) */
    tri_transformer dims = tri_model_dims(&r->model);
    a->layout.gpu = strcmp(a->device, "cuda") == 0;
    rc = tri_cli_layout_resolve(&a->layout, r->flags, r->nflags, r->world->size, &dims, &r->L);
    if (rc)
        return rc;
    /* after the validator's rules, so a bad cp gets its rule's message: what the engine does not run
     * under cp yet (docs/context_parallel.md, "cp in the training engine", Left) */
    if (r->L.cp > 1 && a->compression.kind && strcmp(a->compression.kind, "none") != 0)
        return TRI_ERR(TRI_EINVAL, "--grad-compression %s with --context-parallel-size %d: the compressed reduction "
                       "runs over the dp group, while under cp the gradients reduce over dp x cp (not built; "
                       "train without one of the two)", a->compression.kind, r->L.cp);
    if (r->L.cp > 1 && a->sample_length > 0) { /* generation runs whole sequences on one rank */
        tri_log_rank0("--context-parallel-size %d: no sample at the end (generation does not split the sequence; "
                      "--sample-length %d ignored)", r->L.cp, a->sample_length);
        a->sample_length = 0;
    }
    a->compression.start_iter_given = tri_flags_find(r->flags, r->nflags, "grad-compression-start-iter")->seen;
    a->compression.powersgd_start_iter_given = tri_flags_find(r->flags, r->nflags, "powersgd-start-iter")->seen;
    rc = tri_cli_compression_resolve(&a->compression, r->L.dp, r->L.zero_stage, (uint64_t)a->seed,
                                     &r->L.compression);
    if (rc)
        return rc;
    if (a->onebit_adam && r->L.dp > 1) { /* the warm-up ends at the freeze: the compressor's start */
        if (!a->compression.start_iter_given)
            r->L.compression.start_iter = a->adam_freeze_step;
        if (!a->compression.powersgd_start_iter_given)
            r->L.compression.powersgd_start_iter = a->adam_freeze_step;
    }
    if (a->onebit_adam && r->L.dp <= 1) {
        tri_log_rank0("warning: --onebit-adam with dp 1: there is no data-parallel exchange; running AdamW with the "
                      "frozen variance");
        a->onebit_adam = false;
    }
    if (a->onebit_adam) { /* refused before anything starts (the trainer checks the same) */
        tri_adamw_config oc = {.freeze_step = a->adam_freeze_step, .onebit_adam = true};
        rc = tri_optimizer_parse(a->optimizer, &oc.kind);
        if (!rc) rc = tri_onebit_adam_check(&oc, &r->L.compression, r->L.zero_stage,
                                            a->local_sgd.steps > 1 ? a->local_sgd.steps : 0, r->L.deterministic, r->L.cp);
        if (rc)
            return rc;
    }
    if (a->adam_freeze_step > 0 && strcmp(a->optimizer, "adam") != 0)
        return TRI_ERR(TRI_EINVAL, "--adam-freeze-step %lld with --optimizer %s: freezing the second moment is 1-bit "
                       "Adam's, for --optimizer adam only (sgd and lars keep no second moment; lamb's is not "
                       "frozen)", (long long)a->adam_freeze_step, a->optimizer);
    if (strcmp(r->L.schedule, "zb-h1") == 0)
        return TRI_ERR(TRI_EINVAL, "--pipeline-schedule zb-h1 is modelled by the partitioner only; engine_train runs "
                       "1f1b, gpipe and interleaved");
    if (a->override_scheduler && a->use_checkpoint_scheduler)
        return TRI_ERR(TRI_EINVAL, "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler "
                       "exclude each other: the learning-rate schedule comes from the flags or from the checkpoint");
    if (a->min_lr > a->lr)
        return TRI_ERR(TRI_EINVAL, "--min-lr %g is larger than --lr %g", (double)a->min_lr, (double)a->lr);
    if (strcmp(a->comm, "nccl") == 0 && strcmp(a->device, "cuda") != 0)
        return TRI_ERR(TRI_EINVAL, "--comm nccl needs --device cuda (CPU ranks talk through MPI)");
    if (a->lr_decay_iters == 0)
        a->lr_decay_iters = a->train_iters;
    if (a->lr_warmup_iters >= a->lr_decay_iters && a->lr_warmup_iters > 0)
        return TRI_ERR(TRI_EINVAL, "--lr-warmup-iters %lld must be below the end of the decay, %lld "
                       "(--lr-decay-iters, else --train-iters)", (long long)a->lr_warmup_iters,
                       (long long)a->lr_decay_iters);
    if (a->sample_length > r->L.T - 1)
        a->sample_length = (int)(r->L.T - 1);
    r->sopt.run = (tri_model_run){.layout = r->L, .seed = (uint64_t)a->seed};
    rc = local_sgd_options(r);
    if (rc)
        return rc;
    /* what the model needs beyond the layout rules, then the data */
    rc = tri_model_rank_check(&r->model, &r->sopt.run);
    if (!rc) rc = tri_dataloader_open(&r->train, a->train_data, r->L.T, tri_model_vocab_size(&r->model), (uint64_t)a->seed, true);
    if (!rc) rc = tri_dataloader_open(&r->val, a->val_data, r->L.T, tri_model_vocab_size(&r->model), 0, false);
    /* the tokenizer only decodes the sample at the end: without one, its files are not needed */
    if (rc || a->sample_length == 0)
        return rc;
    if (strcmp(a->tokenizer_type, "ByteLevel") == 0)
        rc = tri_tokenizer_create_byte(&r->tok);
    else
        rc = tri_tokenizer_create_gpt2(&r->tok, a->vocab_file, a->merge_file);
    if (!rc && tri_tokenizer_vocab_size(r->tok) != tri_model_vocab_size(&r->model))
        rc = TRI_ERR(TRI_EINVAL, "--tokenizer-type %s has %d tokens but %s has vocab_size %d",
                     a->tokenizer_type, tri_tokenizer_vocab_size(r->tok), a->config, tri_model_vocab_size(&r->model));
    return rc;
}

/* Whether --load holds a checkpoint (r->load_found). None yet is a fresh start, unless
 * --exit-on-missing-checkpoint (Megatron-LM's flag) asks for the refusal. */
static int probe_load(run *r)
{
    int rc = tri_ckpt_probe(r->a.load, &r->load_found);
    if (rc)
        return tri_error_context(rc, "--load %s", r->a.load);
    if (!r->load_found && r->a.exit_on_missing_checkpoint)
        return TRI_ERR(TRI_EINVAL, "--load %s: no checkpoint there (no '%s' file and no step directory) and "
                       "--exit-on-missing-checkpoint is set", r->a.load, TRI_CKPT_LATEST);
    return TRI_OK;
}

/* The checks of tools/cli/validate.h: overflowing sizes, the memory plan against the budget, and
 * the directories the run reads and writes. No communication. */
static int validate_resources(run *r)
{
    const args *a = &r->a;
    int rc = tri_cli_check_sizes(&r->model, a->config, r->L.global_batch, r->L.T, a->train_iters);
    if (!rc) rc = tri_cli_check_output_dir("save-dir", a->save_dir);
    if (!rc && a->load) rc = probe_load(r);
    tri_cli_input in[5] = {{"--config", a->config}, {"--train-data", a->train_data}, {"--val-data", a->val_data},
                           {"--vocab-file", a->vocab_file}, {"--merge-file", a->merge_file}};
    int n_in = 0;
    for (int i = 0; i < 5; i++)
        if (in[i].path)
            in[n_in++] = in[i];
    if (!rc) rc = tri_cli_check_save_dir(a->save_dir, a->load, in, n_in);
    /* by default a CPU rank's plan is held to the machine's memory; a GPU's size is unknown until
     * the device is made, after this point, so there only --memory-budget-gb applies */
    if (!rc && (a->memory_budget_gb > 0 || strcmp(a->device, "cpu") == 0))
        rc = tri_cli_check_memory(&r->model, &r->sopt.run, a->memory_budget_gb);
    return rc;
}

/* ---- set-up: device, grid, model, optimizer ---- */

static int make_device(run *r)
{
    int threads = r->a.threads;
    if (threads == 0) {
        const char *env = getenv("OMP_NUM_THREADS");
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = env && atoi(env) > 0 ? atoi(env) : (int)(cores / r->world->size > 0 ? cores / r->world->size : 1);
    }
    r->a.threads = threads;
    tri_cli_set_threads(threads);
    return tri_cli_device_create(r->a.device, threads, &r->dev);
}

/* Whether every rank succeeded (rc on this rank): agreed on the MPI world (tri_comm_agree), so a
 * machine without a usable GPU gives a clean exit on every rank, not an abort or a hang in the next
 * collective. *report is set on rank 0 only, so the job prints one message (the lowest failing
 * rank's, naming it). */
static int devices_agree(run *r, int rc, bool *report)
{
    int arc = tri_comm_agree(r->world, rc);
    *report = arc != TRI_OK && (r->world->rank == 0 || r->world->size == 1);
    return arc;
}

static int setup(run *r)
{
    args *a = &r->a;
    r->sopt.clip_grad = a->clip_grad;
    r->sopt.cuda_graph = a->cuda_graph;
    r->sopt.adamw = (tri_adamw_config){.beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps,
                                       .weight_decay = a->weight_decay, .momentum = a->sgd_momentum,
                                       .nesterov = a->sgd_nesterov, .lars_eta = a->lars_eta,
                                       .freeze_step = a->adam_freeze_step, .onebit_adam = a->onebit_adam};
    int orc = tri_optimizer_parse(a->optimizer, &r->sopt.adamw.kind);
    if (orc)
        return orc;
    tri_comm *world = r->dev_world ? r->dev_world : r->world;
    int rc = tri_session_create(&r->ss, world, r->dev, &r->model, &r->sopt);
    if (rc)
        return rc;
    tri_log_set_rank(r->ss.grid.world_rank, r->ss.grid.tp_rank, r->ss.grid.pp_rank, r->ss.grid.dp_rank);
    r->lr = (tri_lr_schedule){.lr = a->lr, .min_lr = a->min_lr, .warmup_iters = a->lr_warmup_iters,
                              .decay_iters = a->lr_decay_iters,
                              .style = strcmp(a->lr_decay_style, "cosine") == 0   ? TRI_LR_COSINE
                                       : strcmp(a->lr_decay_style, "linear") == 0 ? TRI_LR_LINEAR
                                                                                  : TRI_LR_CONSTANT};
    return TRI_OK;
}

static int open_metrics(run *r)
{
    if (r->ss.grid.world_rank != 0)
        return TRI_OK;
    int rc = tri_fs_mkdir_p(r->a.save_dir);
    if (rc)
        return tri_error_context(rc, "--save-dir %s", r->a.save_dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->a.save_dir);
    r->metrics = fopen(path, "a");
    if (!r->metrics)
        return TRI_ERR(TRI_EIO, "cannot open %s: %s", path, strerror(errno));
    return TRI_OK;
}

/* Appends one JSON line of name/value pairs (names NULL-terminated). */
static void metric_line(run *r, const char *kind, int64_t iter, const char **names, const double *values)
{
    if (!r->metrics)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddNumberToObject(o, "iter", (double)iter);
    for (int i = 0; names[i]; i++)
        cJSON_AddNumberToObject(o, names[i], values[i]);
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        fprintf(r->metrics, "%s\n", s);
        fflush(r->metrics);
    }
    cJSON_free(s);
    cJSON_Delete(o);
}

static void print_plan(run *r)
{
    const args *a = &r->a;
    const tri_train_layout *L = &r->L;
    bool bf16 = L->precision == TRI_PRECISION_BF16;
    tri_transformer d = tri_model_dims(&r->model);
    tri_log_rank0("Trident: %s, %d layers, %d heads%s, n_embd %d, vocab %d (padded %lld), %.2fM parameters",
                  tri_model_name(&r->model), (int)d.n_layer, (int)d.n_head, d.block_text, (int)d.n_embd,
                  tri_model_vocab_size(&r->model), (long long)tri_model_padded_vocab(&r->model, L->tp),
                  (double)r->model.family->num_params(r->model.cfg) / 1e6);
    char cp_part[32] = ""; /* "x cp N" only under context parallelism: the line without it is unchanged */
    if (L->cp > 1)
        snprintf(cp_part, sizeof cp_part, " x cp %d", L->cp);
    tri_log_rank0("layout: %d ranks = tp %d%s x pp %d x dp %d%s, ZeRO stage %d; micro-batch %lld x seq %lld, %d "
                  "micro-batches (%s), global batch %lld sequences (%lld tokens)", r->world->size, L->tp,
                  cp_part, L->pp,
                  L->dp, L->sequence_parallel ? " (sequence parallel)" : "", L->zero_stage, (long long)L->B,
                  (long long)L->T, L->n_micro, r->ss.model.train.name, (long long)L->global_batch,
                  (long long)L->global_batch * L->T);
    if (L->cp > 1) /* docs/context_parallel.md, "cp in the training engine" */
        tri_log_rank0("context parallel: cp %d (--cp-comm-type %s%s), each sequence in %d chunks of %lld tokens, "
                      "%lld rows a rank (chunks i and %d-i); gradients and ZeRO over dp x cp = %d ranks",
                      L->cp, L->cp_comm_type == TRI_CP_COMM_ALL_GATHER ? "all_gather" : "p2p",
                      L->deterministic ? "; deterministic mode: every rank's keys, values and gradients gathered, "
                                         "each rank computing its own rows' gradients exactly" : "",
                      2 * L->cp, (long long)(L->T / (2 * L->cp)), (long long)(L->T / L->cp), 2 * L->cp - 1,
                      L->dp * L->cp);
    tri_log_rank0("attention: %s%s; recompute %s%s", L->attention == TRI_ATTENTION_FLASH
                      ? "flash (fused causal attention, FlashAttention-2: no T x T matrix stored)"
                      : "unfused (the T x T softmax materialised)",
                  strcmp(a->layout.attention, "auto") == 0 ? ", --attention-backend auto's choice on this device" : "",
                  tri_recompute_name(L->recompute),
                  tri_layout_recomputes(L) != L->recompute ? " (nothing to drop with flash attention)" : "");
    if (L->overlap_grad_reduce || L->overlap_param_gather || L->deterministic || bf16)
        tri_log_rank0("options:%s%s%s%s", L->overlap_grad_reduce ? " overlapped gradient reduction;" : "",
                      L->overlap_param_gather ? " overlapped parameter all-gather;" : "",
                      L->deterministic ? " deterministic (exact fixed-point gradient sums);" : "",
                      bf16 ? " bf16 mixed precision (fp32 gradients, master weights and moments);" : "");
    const tri_local_sgd_config *ls = &r->sopt.local_sgd;
    if (ls->steps > 0 && ls->outer == TRI_OUTER_NESTEROV)
        tri_log_rank0("local SGD (DiLoCo): %d inner steps per outer synchronisation over dp %d, outer Nesterov "
                      "momentum %g, outer lr %g; %lld synchronous warm-up iterations", ls->steps, L->dp,
                      (double)ls->outer_momentum, (double)ls->outer_lr, (long long)ls->warmup_iters);
    else if (ls->steps > 0)
        tri_log_rank0("local SGD: %d inner steps per outer synchronisation over dp %d, outer step: average, outer "
                      "lr %g; %lld synchronous warm-up iterations", ls->steps, L->dp, (double)ls->outer_lr,
                      (long long)ls->warmup_iters);
    if (r->ss.grid.world_rank == 0) {
        tri_stage_plan_print(stdout, &r->ss.model.plan);
        /* the per-stage plan, as `partitioner` prints it (models/preview.h: one code path) */
        if (tri_model_print_stage_memory(stdout, &r->model, L) != TRI_OK)
            tri_log("engine_train: warning: %s", tri_error_message());
    }
    tri_log_rank0("data: %s (%lld tokens), %s (%lld tokens); device %s, %d thread%s per rank",
                  a->train_data, (long long)tri_dataloader_tokens(r->train), a->val_data,
                  (long long)tri_dataloader_tokens(r->val), a->device, a->threads, a->threads == 1 ? "" : "s");
}

/* Every rank's planned bytes by category beside the device's measured peak (DESIGN.md §7). */
static void print_memory(run *r)
{
    size_t bytes[TRI_MEM_KINDS], total = 0;
    tri_model_rank_memory(&r->ss.model, bytes);
    char line[1024];
    int used = snprintf(line, sizeof line, "memory planned:");
    for (int k = 0; k < TRI_MEM_KINDS; k++) {
        size_t b = bytes[k] + r->ss.trainer.arena.by_kind[k];
        total += b;
        if (b && used < (int)sizeof line)
            used += snprintf(line + used, sizeof line - (size_t)used, " %s %.2f MiB,",
                             tri_mem_kind_name((tri_mem_kind)k), (double)b / 1048576.0);
    }
    tri_log("%s total %.2f MiB; measured peak %.2f MiB (%+.1f%%)", line, (double)total / 1048576.0,
            (double)r->dev->peak_bytes / 1048576.0,
            total ? 100.0 * ((double)r->dev->peak_bytes - (double)total) / (double)total : 0.0);
}

static int evaluate(run *r, int64_t iter)
{
    tri_batch_source src = {.ctx = r->val, .fill = tri_dataloader_fill_ctx};
    double loss = 0.0;
    int rc = tri_trainer_eval(&r->ss.trainer, &src, r->a.eval_iters, &loss);
    if (rc)
        return rc;
    tri_log_rank0("validation at iteration %lld: loss %.4f (perplexity %.2f)", (long long)iter, loss, exp(loss));
    metric_line(r, "eval", iter, (const char *[]){"val_loss", NULL}, (double[]){loss});
    return TRI_OK;
}

/* ---- checkpoints (checkpoints/, through models/session_checkpoint.h) ---- */

static tri_session_ckpt_run ckpt_run(const run *r)
{
    return (tri_session_ckpt_run){.seed = (uint64_t)r->a.seed, .lr = r->lr, .keep_last = r->a.keep_last,
                                  .reset_outer_state = r->a.local_sgd.reset_outer_state,
                                  .reset_compression_state = r->a.compression.reset_state,
                                  .no_load_optim = r->a.no_load_optim,
                              .lr_source = r->a.use_checkpoint_scheduler ? TRI_LR_CHECKPOINT
                                           : r->a.override_scheduler     ? TRI_LR_FLAGS
                                                                         : TRI_LR_SAME};
}

/* A completed save: one log line and a metrics line with the time the training loop was blocked
 * for it (all of it for a synchronous save; the host copy, polls and waits for an asynchronous one). */
static void report_save(run *r, int64_t iteration, double blocked_s, double total_s, bool async)
{
    if (async)
        tri_log_rank0("saved checkpoint %s/iter_%07lld in %.2f s in the background; the training loop was blocked "
                      "%.3f s", r->a.save_dir, (long long)iteration, total_s, blocked_s);
    else
        tri_log_rank0("saved checkpoint %s/iter_%07lld in %.2f s", r->a.save_dir, (long long)iteration, total_s);
    metric_line(r, "save", iteration, (const char *[]){"blocked_s", "total_s", "async", NULL},
                (double[]){blocked_s, total_s, async ? 1 : 0});
}

static void report_async(run *r, const tri_ckpt_async_report *done)
{
    if (done->completed)
        report_save(r, done->iteration, done->blocked_s, done->total_s, true);
}

/* Saves step `iteration`: synchronously, or (--async-save) starts a background save after waiting
 * for the one in flight. */
static int save_checkpoint(run *r, int64_t iteration)
{
    tri_session_ckpt_run cr = ckpt_run(r);
    double t0 = tri_now_s();
    tri_comm_set_phase(r->world, "checkpoint", iteration);
    if (r->saver) {
        tri_ckpt_async_report prev;
        int rc = tri_session_ckpt_save_async(&r->ss, r->saver, r->a.save_dir, &cr, iteration, &prev);
        report_async(r, &prev);
        return rc;
    }
    int rc = tri_session_ckpt_save(&r->ss, r->a.save_dir, &cr, iteration);
    if (!rc)
        report_save(r, iteration, tri_now_s() - t0, tri_now_s() - t0, false);
    return rc;
}

/* --async-save: advances the save in flight, or (wait) waits until it is published: the end of
 * training, a stop. Collective; nothing when no save is in flight. */
static int settle_checkpoint(run *r, int64_t iteration, bool wait)
{
    if (!r->saver || !tri_ckpt_async_busy(r->saver))
        return TRI_OK;
    tri_ckpt_async_report done;
    tri_comm_set_phase(r->world, "checkpoint", iteration);
    int rc = wait ? tri_ckpt_async_wait(r->saver, &done) : tri_ckpt_async_poll(r->saver, &done);
    report_async(r, &done);
    return rc;
}

static int load_checkpoint(run *r)
{
    if (!r->a.load)
        return TRI_OK;
    if (!r->load_found) { /* every rank saw the same (identity_agree) */
        tri_log_rank0("engine_train: warning: --load %s holds no checkpoint yet (no '%s' file); starting from "
                      "scratch (--exit-on-missing-checkpoint refuses instead)", r->a.load, TRI_CKPT_LATEST);
        return TRI_OK;
    }
    tri_session_ckpt_run cr = ckpt_run(r);
    double t0 = tri_now_s();
    tri_comm_set_phase(r->world, "checkpoint", 0);
    int rc = tri_session_ckpt_resume(&r->ss, r->a.load, &cr, &r->start_iter);
    if (!rc) rc = resume_agree(r);
    if (!rc && r->a.use_checkpoint_scheduler) {
        r->lr = cr.lr;
        tri_log_rank0("learning-rate schedule from the checkpoint (--use-checkpoint-opt_param-scheduler): lr %g, "
                      "min lr %g, warm-up %lld, decay to iteration %lld (%s)", (double)r->lr.lr,
                      (double)r->lr.min_lr, (long long)r->lr.warmup_iters, (long long)r->lr.decay_iters,
                      tri_ckpt_lr_style_name(r->lr.style));
    }
    if (!rc)
        tri_log_rank0("resumed from %s at iteration %lld in %.2f s", r->a.load, (long long)r->start_iter,
                      tri_now_s() - t0);
    /* the compression state not loaded: say so rather than resume inexactly in silence (what a load
     * could not restore, tri_ckpt_load_compression warns about itself) */
    if (!rc && r->L.compression.kind != TRI_COMPRESS_NONE && r->L.dp > 1 &&
        (r->a.compression.reset_state || r->a.no_load_optim))
        tri_log_rank0("warning: --grad-compression %s: %s: the error-feedback residuals start from zero%s",
                      tri_compression_name(r->L.compression.kind),
                      r->a.no_load_optim ? "--no-load-optim" : "--reset-compression-state",
                      r->L.compression.kind == TRI_COMPRESS_POWERSGD
                          ? " and PowerSGD's Q is drawn afresh from the seeded RNG (the resumed run is not "
                            "bit-identical to an uninterrupted one)"
                          : "");
    return rc;
}

/* The observability account of the run (tools/cli/train_metrics.h); MFU against --peak-gflops per
 * rank, by default the device's peak (tools/cli/backend.h: 100 GFLOP/s per CPU thread, a GPU's
 * datasheet peak in the run's precision, the table bench_cuda_train uses). */
static int start_metrics(run *r, tri_train_metrics *tm)
{
    r->peak_gflops = r->a.peak_gflops > 0 ? r->a.peak_gflops
                     : tri_cli_device_peak_gflops(r->a.device, r->dev, r->a.threads,
                                                  r->L.precision == TRI_PRECISION_BF16);
    int rc = tri_train_metrics_init(tm, r->metrics, r->world, r->peak_gflops, r->start_iter, r->a.train_iters);
    tm->moe = r->ss.trainer.moe.E > 0 ? &r->ss.trainer.moe : NULL;
    return rc;
}

/* " | aux 0.0123 load 1.35 drop 0.0%" for a model with experts (the step's aux loss apart from the
 * LM loss, plus the z-loss when on; the largest layer load; the dropped selections); "" otherwise. */
static const char *moe_figures(const run *r, char *buf, size_t cap)
{
    buf[0] = '\0';
    const tri_moe_stats *s = &r->ss.trainer.moe;
    if (s->E == 0)
        return buf;
    tri_moe_summary m = tri_moe_stats_summary(s);
    char z[32] = "";
    if (m.z != 0)
        snprintf(z, sizeof z, " z %.4f", m.z);
    snprintf(buf, cap, " | aux %.4f%s load %.2f drop %.1f%%", m.aux, z, m.max_load, 100 * m.drop_frac);
    return buf;
}

/* The throughput of a progress line: GFLOP/s on a CPU; on a GPU TFLOP/s and MFU against the card's peak. */
static const char *throughput(const run *r, double gflops, char *buf, size_t cap)
{
    if (strcmp(r->a.device, "cpu") == 0)
        snprintf(buf, cap, "%6.2f GFLOP/s", gflops);
    else if (r->peak_gflops > 0)
        snprintf(buf, cap, "%6.1f TFLOP/s, MFU %.1f%%", gflops / 1e3, 100.0 * gflops / (r->peak_gflops * r->world->size));
    else
        snprintf(buf, cap, "%6.1f TFLOP/s (MFU: pass --peak-gflops for this card)", gflops / 1e3);
    return buf;
}

/* ", dp 1bit 14.2x" (two-phase: ", dp 1bit two-phase 28.4x"): the last step's compression of this
 * rank's data-parallel gradient reduction (and, when the step ended with local SGD's outer
 * synchronisation, of its deltas' reduction), what the plain reduction sends over the wire bytes the
 * comm counted; "" without compression (or in powersgd's first, uncompressed, iterations, or on local
 * SGD's inner steps). */
static const char *dp_ratio(const run *r, bool outer_sync, char *buf, size_t cap)
{
    uint64_t sent = 0, plain = 0;
    for (int c = 0; c < r->ss.trainer.v; c++) {
        sent += r->ss.trainer.chunks[c]->zero.comp.last_sent;
        plain += r->ss.trainer.chunks[c]->zero.comp.last_plain;
        if (outer_sync && r->sopt.local_sgd.steps > 0) {
            sent += r->ss.trainer.outer[c].comp.last_sent;
            plain += r->ss.trainer.outer[c].comp.last_plain;
        }
    }
    buf[0] = '\0';
    if (r->L.compression.kind != TRI_COMPRESS_NONE && sent > 0)
        snprintf(buf, cap, " | dp %s%s %.1fx", tri_compression_name(r->L.compression.kind),
                 r->L.compression.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE ? " two-phase" : "",
                 (double)plain / (double)sent);
    return buf;
}

/* One progress line on rank 0: the figures, the time split, the ETA, and the straggler when the
 * slowest rank computed over 25% longer than the median. */
static void log_iteration(run *r, const tri_train_metrics *tm, int64_t iter, const tri_step_result *res,
                          const tri_step_time *t, double tps, double gflops)
{
    char eta[32], thr[96], ratio[48], outer[64] = "", moe[96], cp[32] = "";
    if (r->L.cp > 1) /* the exposed context-parallel communication (step_time.h cp_s) */
        snprintf(cp, sizeof cp, ", cp %.0f%%", 100 * t->cp_s / t->step_s);
    if (r->sopt.local_sgd.steps > 0)
        snprintf(outer, sizeof outer, " | %souter syncs %lld", res->outer_sync ? "synced, " : "",
                 (long long)res->outer_syncs);
    tri_log_rank0("iter %6lld/%lld | loss %.4f%s | lr %.3e | grad norm %.3f | %8.1f ms (compute %.0f%%, tp %.0f%%, "
                  "pp %.0f%%, bubble %.0f%%, dp %.0f%%%s)%s | %8.0f tok/s | %s | ETA %s%s", (long long)iter,
                  (long long)r->a.train_iters, res->loss, moe_figures(r, moe, sizeof moe), (double)res->lr,
                  res->grad_norm, t->step_s * 1e3,
                  100 * t->compute_s / t->step_s, 100 * t->tp_s / t->step_s, 100 * t->pp_s / t->step_s,
                  100 * t->bubble_s / t->step_s, 100 * (t->dp_s + t->other_s) / t->step_s, cp,
                  dp_ratio(r, res->outer_sync, ratio, sizeof ratio), tps,
                  throughput(r, gflops, thr, sizeof thr),
                  tri_format_duration(tri_train_metrics_eta(tm, iter), eta, sizeof eta), outer);
    if (r->world->size > 1 && tm->straggler_rank >= 0 && tm->straggler_compute_s > 1.25 * tm->median_compute_s)
        tri_log_rank0("straggler: rank %d computed %.1f ms over the last interval, median %.1f ms (+%.0f%%)",
                      tm->straggler_rank, tm->straggler_compute_s * 1e3, tm->median_compute_s * 1e3,
                      100.0 * (tm->straggler_compute_s / tm->median_compute_s - 1.0));
}

/* ---- faults (engine/train/fault.h, tools/cli/fault.h) ---- */

/* Every rank has the same flags, model, layout and data (an MPMD launch or a node with another
 * config file would otherwise train garbage or hang): a hash of the canonical text, compared. */
static int identity_agree(run *r)
{
    char extra[1024], *json = NULL, *text = NULL;
    int rc = r->model.family->to_json(r->model.cfg, &json);
    if (rc)
        return rc;
    snprintf(extra, sizeof extra, "model=%s\nlayout=tp %d x pp %d x dp %d, %d micro-batches\ntrain_tokens=%lld\n"
             "val_tokens=%lld\ncheckpoint_to_load=%s\n%s", json, r->L.tp, r->L.pp, r->L.dp, r->L.n_micro,
             (long long)tri_dataloader_tokens(r->train), (long long)tri_dataloader_tokens(r->val),
             !r->a.load ? "no --load" : r->load_found ? "found" : "none yet",
             r->inject.identity_rank == r->world->rank && r->inject.identity_which == 1 ? "test_injection=identity\n"
                                                                                      : "");
    free(json);
    /* flags that may differ per rank without changing the run */
    rc = tri_cli_identity_text(r->flags, r->nflags, "threads|quiet|comm-timeout", r->world->size, extra, &text);
    if (!rc) rc = tri_identity_agree(r->world, "flags, model config, layout and data", text);
    free(text);
    r->agreed = rc == TRI_EINVAL; /* a mismatch every rank saw; not a failed collective */
    return rc;
}

/* On resume: every rank loaded the same checkpoint step, identified by its iteration and the SHA-256
 * of its manifest (which holds every file's checksum) as this rank reads it. */
static int resume_agree(run *r)
{
    char text[4400], path[4200], sha[65] = "unreadable";
    for (int k = 0; k < 2; k++) { /* --load names the step directory, or the run directory */
        if (k == 0)
            snprintf(path, sizeof path, "%s/manifest.sha256", r->a.load);
        else
            snprintf(path, sizeof path, "%s/iter_%07lld/manifest.sha256", r->a.load, (long long)r->start_iter);
        FILE *f = NULL;
        if (tri_file_fopen_read(path, &f) != TRI_OK)
            tri_error_clear(); /* the other of the two places */
        int got = f ? fscanf(f, "%64s", sha) : 0;
        if (f)
            fclose(f);
        if (got == 1)
            break;
    }
    snprintf(text, sizeof text, "iteration=%lld\nmanifest_sha256=%s\n%s", (long long)r->start_iter, sha,
             r->inject.identity_rank == r->world->rank && r->inject.identity_which == 2 ? "test_injection=identity\n"
                                                                                         : "");
    int rc = tri_identity_agree(r->world, "checkpoint loaded", text);
    r->agreed = rc == TRI_EINVAL; /* a mismatch every rank saw; not a failed collective */
    return rc;
}

/* A skipped step: logged on rank 0 and counted in metrics.jsonl (kind "skip"). */
static void log_skip(run *r, int64_t iter, const tri_step_result *res)
{
    bool spike = res->action == TRI_STEP_SKIP_SPIKE;
    tri_log_rank0("iter %6lld/%lld | skipped (%s): loss %.4f, grad norm %.3f; %lld non-finite and %lld loss-spike "
                  "steps skipped so far", (long long)iter, (long long)r->a.train_iters,
                  spike ? "loss spike" : "non-finite loss or gradients", res->loss, res->grad_norm,
                  (long long)r->guard.skipped_nonfinite, (long long)r->guard.skipped_spikes);
    metric_line(r, "skip", iter,
                (const char *[]){"nonfinite", "spike", "skipped_nonfinite", "skipped_spikes", NULL},
                (double[]){spike ? 0 : 1, spike ? 1 : 0, (double)r->guard.skipped_nonfinite,
                           (double)r->guard.skipped_spikes});
}

/* --exit-duration-in-mins has passed since start-up. */
static bool out_of_time(const run *r)
{
    return r->a.exit_duration_mins > 0 && tri_now_s() - r->started >= 60.0 * r->a.exit_duration_mins;
}

static int train_loop(run *r)
{
    const args *a = &r->a;
    tri_batch_source src = {.ctx = r->train, .fill = tri_dataloader_fill_ctx};
    tri_transformer dims = tri_model_dims(&r->model);
    double flops = tri_iteration_flops(&dims, r->L.global_batch, r->L.T, false);
    double t_start = tri_now_s(), first_loss = NAN, last_loss = NAN;
    tri_train_metrics tm;
    int rc = start_metrics(r, &tm);
    for (int64_t it = r->start_iter; it < a->train_iters && !rc; it++) {
        double t0 = tri_now_s();
        tri_step_time before = tri_step_time_snapshot(&r->ss.grid);
        tri_step_result res;
        tri_comm_set_phase(r->world, "step", it + 1);
        tri_cli_injection_stall(&r->inject, r->ss.grid.world_rank, it + 1);
        /* a stop requested on any rank stops every rank after this step (agreed in the step) */
        r->guard.stop_requested = tri_cli_stop_signal() != 0 || out_of_time(r);
        rc = tri_trainer_step(&r->ss.trainer, &src, it, tri_lr_at(&r->lr, it + 1), &res);
        r->agreed = rc == TRI_ENONFINITE; /* decided alike on every rank */
        if (rc) {
            if (rc != TRI_ENONFINITE)
                rc = tri_error_context(rc, "iteration %lld", (long long)it + 1);
            break;
        }
        double dt = tri_now_s() - t0;
        tri_step_time after = tri_step_time_snapshot(&r->ss.grid);
        tri_step_time split = tri_step_time_split(&before, &after, dt);
        double tps = (double)(r->L.global_batch * r->L.T) / dt;
        bool log_now = (it + 1) % a->log_interval == 0 || it == r->start_iter || it + 1 == a->train_iters;
        if (res.action != TRI_STEP_APPLY) {
            log_skip(r, it + 1, &res);
        } else {
            if (it == r->start_iter) {
                first_loss = res.loss;
                print_memory(r);
            }
            last_loss = res.loss;
            /* the same on every rank (skips are agreed): its per-rank exchange is a collective */
            rc = tri_train_metrics_step(&tm, it + 1, res.loss, res.lr, res.grad_norm, &split, flops,
                                        (double)(r->L.global_batch * r->L.T), r->dev->peak_bytes, log_now);
            if (!rc && !a->quiet && log_now)
                log_iteration(r, &tm, it + 1, &res, &split, tps, flops / dt / 1e9);
        }
        if (!rc && res.outer_sync)
            metric_line(r, "outer_sync", it + 1, (const char *[]){"outer_sync", "outer_syncs", NULL},
                        (double[]){1, (double)res.outer_syncs});
        if (!rc) rc = settle_checkpoint(r, it + 1, false);
        if (!rc && !res.stop && a->eval_interval > 0 && (it + 1) % a->eval_interval == 0 && it + 1 < a->train_iters) {
            tri_comm_set_phase(r->world, "eval", it + 1);
            rc = evaluate(r, it + 1);
        }
        bool save = a->save_interval > 0 && ((it + 1) % a->save_interval == 0 || it + 1 == a->train_iters);
        bool exit_now = res.stop || (a->exit_interval > 0 && (it + 1) % a->exit_interval == 0 && it + 1 < a->train_iters);
        if (!rc && (save || exit_now))
            rc = save_checkpoint(r, it + 1);
        if (!rc && exit_now)
            rc = settle_checkpoint(r, it + 1, true);
        if (!rc && exit_now) {
            int sig = tri_cli_stop_signal();
            tri_log_rank0("stopped at iteration %lld on a stop request (%s): checkpoint saved; resume with --load %s",
                          (long long)it + 1,
                          !res.stop        ? "--exit-interval"
                          : sig == SIGINT  ? "SIGINT"
                          : sig == SIGTERM ? "SIGTERM"
                          : sig == SIGUSR1 ? "SIGUSR1"
                          : out_of_time(r) ? "--exit-duration-in-mins"
                                           : "a signal or --exit-duration-in-mins on another rank",
                          a->save_dir);
            r->stopped = true;
            tri_train_metrics_free(&tm);
            return TRI_OK;
        }
    }
    tri_train_metrics_free(&tm);
    if (rc)
        return rc;
    double total = tri_now_s() - t_start;
    if (a->train_iters > r->start_iter) {
        tri_log_rank0("trained %lld iterations in %.1f s: loss %.4f -> %.4f (ln vocab = %.4f)",
                      (long long)(a->train_iters - r->start_iter), total, first_loss, last_loss,
                      log((double)tri_model_vocab_size(&r->model)));
        /* what world rank 0 sent over its data-parallel group, as the comm counted it (payload) */
        uint64_t dp_bytes = 0;
        for (int k = 0; k < TRI_COMM_KINDS; k++)
            dp_bytes += r->ss.grid.dp_cp_comm->bytes[k]; /* the gradients' group: dp x cp (dp at cp 1) */
        tri_log_rank0("data-parallel traffic: %.3f MB sent by rank 0 over dp%s in %lld iterations (%.3f MB per "
                      "iteration)%s", (double)dp_bytes / 1e6, r->L.cp > 1 ? " x cp" : "",
                      (long long)(a->train_iters - r->start_iter),
                      (double)dp_bytes / 1e6 / (double)(a->train_iters - r->start_iter),
                      r->sopt.local_sgd.steps > 0 ? "; local SGD's outer synchronisations included" : "");
    }
    const tri_step_graph *g = &r->ss.trainer.graph;
    if (a->cuda_graph)
        tri_log_rank0("cuda graph: %lld graphs captured, %lld graph launches (the first iteration ran eagerly)",
                      (long long)g->captures, (long long)g->launches);
    tri_comm_set_phase(r->world, "eval", a->train_iters);
    rc = evaluate(r, a->train_iters); /* beside the last save's background writes */
    return rc ? rc : settle_checkpoint(r, a->train_iters, true);
}

/* Prints a sampled token's bytes (rank 0). */
static void print_token(void *ctx, int32_t id)
{
    run *r = ctx;
    const char *bytes = NULL;
    size_t len = 0;
    if (r->ss.grid.world_rank == 0 && tri_tokenizer_decode_one(r->tok, id, &bytes, &len) == TRI_OK)
        fwrite(bytes, 1, len, stdout);
}

/* The sample at the end (models/generate.h): --sample-length tokens after an end-of-document token. */
static int generate(run *r)
{
    const args *a = &r->a;
    if (a->sample_length <= 0)
        return TRI_OK;
    tri_generate_options o = {.length = a->sample_length, .top_k = a->sample_top_k,
                              .temperature = a->sample_temperature, .seed = (uint64_t)a->seed,
                              .first = tri_tokenizer_eod(r->tok)};
    tri_log_rank0("sample (top-k %d, temperature %.2f, %d tokens after an end-of-document token):",
                  a->sample_top_k, (double)a->sample_temperature, a->sample_length);
    int rc = tri_generate(&r->ss, &o, print_token, r);
    if (r->ss.grid.world_rank == 0)
        printf("\n");
    fflush(stdout);
    return rc;
}

static void cleanup(run *r)
{
    tri_ckpt_async_destroy(r->saver);
    tri_step_guard_destroy(&r->guard);
    tri_session_destroy(&r->ss);
    tri_model_free(&r->model);
    tri_comm_destroy(r->dev_world);
    tri_device_destroy(r->dev);
    tri_dataloader_close(r->train);
    tri_dataloader_close(r->val);
    tri_tokenizer_destroy(r->tok);
    if (r->metrics)
        fclose(r->metrics);
}

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    MPI_Init(&argc, &argv);
    run r;
    memset(&r, 0, sizeof r);
    r.started = tri_now_s();
    defaults(&r.a);
    tri_flag flags[128]; /* 89 today (make_flags) */
    int nflags = make_flags(&r.a, flags);
    bool help = false;
    MPI_Comm comm_world = MPI_COMM_WORLD;
    int rc = tri_comm_mpi_create(&r.world, &comm_world);
    if (rc) {
        fprintf(stderr, "engine_train: error: %s\n", tri_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    tri_log_set_rank(r.world->rank, 0, 0, 0);
    r.flags = flags;
    r.nflags = nflags;
    tri_comm_set_phase(r.world, "init", 0);
    tri_cli_stop_signals_install();
    tri_comm_set_alert(r.world, tri_cli_stop_flag());
    rc = tri_flags_parse(flags, nflags, argc, argv, &help);
    if (!rc) rc = tri_cli_injection_read(&r.inject);
    if (!rc) rc = tri_step_guard_init(&r.guard, r.a.skip_nonfinite, r.a.spike_zscore, r.a.spike_window);
    tri_comm_set_timeout(r.world, r.a.comm_timeout);
    if (!rc && help) {
        if (r.world->rank == 0)
            tri_flags_usage(stdout, flags, nflags, "engine_train",
                            "Trains a GPT with tensor, pipeline and data parallelism; launch with "
                            "mpirun -np N for N = tp x pp x dp ranks.");
        tri_comm_destroy(r.world);
        MPI_Finalize();
        return 0;
    }
    if (!rc) rc = validate(&r);
    if (!rc) rc = validate_resources(&r);
    bool validated = !rc;
    if (!rc) rc = identity_agree(&r);
    if (rc) {
        /* A refused config or flag: every rank reached the same verdict without communicating, so
         * rank 0 reports it once (a rank that failed alone, e.g. on its own node's files, still makes
         * mpirun end the job). A failed identity agreement: every rank says what it saw. */
        if (validated || r.world->rank == 0 || r.world->size == 1)
            fprintf(stderr, "engine_train: error: %s\n", tri_error_message());
        if (rc == TRI_ETIMEOUT)
            tri_comm_abort(r.world, 1);
        cleanup(&r);
        tri_comm_destroy(r.world);
        MPI_Finalize();
        return 1;
    }
    /* the device, then its world comm (NCCL for cuda: collective), each agreed on by every rank */
    bool report = false;
    rc = devices_agree(&r, make_device(&r), &report);
    if (!rc) rc = devices_agree(&r, tri_cli_device_world(r.a.device, r.a.comm, r.dev, r.a.comm_timeout, &r.dev_world), &report);
    if (rc) {
        if (report)
            fprintf(stderr, "engine_train: error: %s\n", tri_error_message());
        cleanup(&r);
        tri_comm_destroy(r.world);
        MPI_Finalize();
        return 1;
    }
    rc = setup(&r);
    if (!rc) r.ss.trainer.guard = &r.guard;
    if (!rc && r.inject.nan_rank >= 0) {
        r.ss.trainer.after_grads = tri_cli_injection_nan_hook;
        r.ss.trainer.after_grads_ctx = &r.inject;
    }
    if (!rc && r.a.async_save) rc = tri_ckpt_async_create(&r.saver, &r.ss.trainer);
    if (!rc) rc = open_metrics(&r);
    if (!rc) rc = load_checkpoint(&r);
    if (!rc) {
        print_plan(&r);
        rc = train_loop(&r);
    }
    if (!rc && !r.stopped) {
        tri_comm_set_phase(r.world, "sample", 0);
        rc = generate(&r);
    }
    if (rc) {
        tri_log("engine_train: error: %s", tri_error_message());
        if (!r.agreed) /* no rank may be left waiting in a collective; the MPI comm lets the ranks a
                          timeout verdict reached report it first (engine/comm/comm_mpi_health.h) */
            tri_comm_abort(r.world, 1);
    }
    cleanup(&r);
    tri_comm_destroy(r.world);
    MPI_Finalize();
    return rc ? 1 : 0;
}
