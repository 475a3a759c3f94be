/* tools/cli/compression_flags.c - the compression flags (see compression_flags.h). */
#include "tools/cli/compression_flags.h"

#include <string.h>

#include "engine/core/log.h"
#include "engine/core/status.h"

void tri_cli_compression_defaults(tri_cli_compression *f)
{
    tri_compression d = tri_compression_defaults();
    *f = (tri_cli_compression){.kind = "none", .reduce = "allgather", .block_size = d.block_size, .qsgd_levels = d.qsgd_levels,
                               .powersgd_rank = d.powersgd_rank, .topk_fraction = d.topk_fraction,
                               .powersgd_start_iter = d.powersgd_start_iter, .start_iter = d.start_iter};
}

int tri_cli_compression_wire_flags(tri_cli_compression *f, tri_flag *t, int n)
{
    t[n++] = (tri_flag){"grad-compression", TRI_FLAG_CHOICE, &f->kind,
                        "compress the data-parallel gradient reduction, with error feedback (the residual of "
                        "what was not sent joins the next step's gradient): 1bit (signs + a scale per block; Seide "
                        "et al. 2014), qsgd (stochastic levels per block; Alistarh et al. 2017), topk (the largest "
                        "entries), powersgd (rank-r matrices; Vogels et al. 2019); ZeRO 0 and 1 only; ignored with "
                        "a warning at dp 1; with --local-sgd-steps it compresses the outer synchronisation's "
                        "reduction of the replicas' parameter change (its own residual; inner steps send nothing) "
                        "and the warm-up's synchronous gradients", 0, 0, "none|1bit|qsgd|topk|powersgd", false};
    t[n++] = (tri_flag){"compression-block-size", TRI_FLAG_INT, &f->block_size,
                        "elements per scale of 1bit and qsgd", 0, 1 << 30, NULL, false};
    t[n++] = (tri_flag){"qsgd-levels", TRI_FLAG_INT, &f->qsgd_levels, "qsgd's levels s per sign (bits per element: "
                        "1 + ceil(log2(s + 1)))", 0, 1 << 20, NULL, false};
    t[n++] = (tri_flag){"topk-fraction", TRI_FLAG_FLOAT, &f->topk_fraction,
                        "fraction of each bucket's entries topk sends, in (0, 1]", -1e9, 1e9, NULL, false};
    t[n++] = (tri_flag){"powersgd-rank", TRI_FLAG_INT, &f->powersgd_rank, "PowerSGD's approximation rank r of each matrix gradient "
                        "(rows x cols) whose factors are under half its size, 2 r (rows + cols) < rows cols; "
                        "vectors and smaller matrices go whole (PyTorch's min_compression_rate 2)", 0,
                        1 << 20, NULL, false};
    t[n++] = (tri_flag){"grad-compression-reduce", TRI_FLAG_CHOICE, &f->reduce,
                        "how 1bit, qsgd and topk payloads cross the data-parallel group: allgather (every rank's "
                        "payload to every rank: bytes per rank grow as dp - 1 payloads) or two-phase (1-bit Adam's "
                        "compressed allreduce, Tang et al. 2021, DeepSpeed's compressed_allreduce: each rank sums and "
                        "re-compresses one chunk, with its own server error feedback, then the chunks are "
                        "all-gathered: about 2 payloads per rank whatever dp; at ZeRO 1 each chunk goes only to the "
                        "ranks whose slice it overlaps, about 1 payload; the sum is then compressed twice); with "
                        "--local-sgd-steps it reduces the outer synchronisation's parameter change",
                        0, 0, "allgather|two-phase", false};
    return n;
}

int tri_cli_compression_flags(tri_cli_compression *f, tri_flag *t, int n)
{
    n = tri_cli_compression_wire_flags(f, t, n);
    t[n++] = (tri_flag){"powersgd-start-iter", TRI_FLAG_INT64, &f->powersgd_start_iter,
                        "iterations reduced uncompressed before PowerSGD starts (PyTorch's start_powerSGD_iter; "
                        "PowerSGD's spelling of --grad-compression-start-iter; iterations, not reductions: with "
                        "--local-sgd-steps the outer synchronisations within the first that many iterations reduce "
                        "uncompressed)", 0, 1e12, NULL, false};
    t[n++] = (tri_flag){"grad-compression-start-iter", TRI_FLAG_INT64, &f->start_iter,
                        "iterations reduced uncompressed (the plain fp32 reduction: the bits of a run without "
                        "compression, no error-feedback residual) before any compressor starts: 1-bit Adam's "
                        "warm-up stage (Tang et al. 2021, who freeze Adam's v at the same N: --adam-freeze-step; "
                        "15-25% of training). For powersgd it sets --powersgd-start-iter (both given: they must "
                        "agree)", 0, 1e12, NULL, false};
    t[n++] = (tri_flag){"reset-compression-state", TRI_FLAG_BOOL, &f->reset_state,
                        "on resume, start the error-feedback residuals from zero (local SGD's outer residual too) "
                        "and draw PowerSGD's Q afresh (checkpoints hold them: the residuals per dp rank, Q per "
                        "(tp, pp)) and accept a checkpoint saved with another --grad-compression or "
                        "--grad-compression-reduce (else refused). Without it, a resume at another dp starts "
                        "each rank's residual from the saved ranks' sum divided by the new dp", 0, 0, NULL, false};
    return n;
}

int tri_cli_compression_fields(const tri_cli_compression *f, tri_compression *c)
{
    int kind = tri_compression_parse(f->kind);
    if (kind < 0)
        return TRI_ERR(TRI_EINVAL, "--grad-compression %s: unknown compressor (none|1bit|qsgd|topk|powersgd)",
                       f->kind ? f->kind : "(null)");
    int reduce = tri_compression_reduce_parse(f->reduce);
    if (reduce < 0)
        return TRI_ERR(TRI_EINVAL, "--grad-compression-reduce %s: unknown reduction (allgather|two-phase)",
                       f->reduce ? f->reduce : "(null)");
    c->kind = (tri_compression_kind)kind;
    c->reduce = (tri_compression_reduce)reduce;
    c->block_size = f->block_size;
    c->qsgd_levels = f->qsgd_levels;
    c->topk_fraction = f->topk_fraction;
    c->powersgd_rank = f->powersgd_rank;
    return TRI_OK;
}

int tri_cli_compression_resolve(const tri_cli_compression *f, int dp, int zero_stage, uint64_t seed,
                                tri_compression *out)
{
    tri_compression c = tri_compression_defaults();
    int rc = tri_cli_compression_fields(f, &c);
    if (rc)
        return rc;
    c.powersgd_start_iter = f->powersgd_start_iter;
    c.start_iter = f->start_iter;
    if (c.kind == TRI_COMPRESS_POWERSGD && f->start_iter_given && f->powersgd_start_iter_given &&
        f->start_iter != f->powersgd_start_iter)
        return TRI_ERR(TRI_EINVAL, "--grad-compression-start-iter %lld and --powersgd-start-iter %lld: both set "
                       "PowerSGD's first compressed iteration; give one, or the same value",
                       (long long)f->start_iter, (long long)f->powersgd_start_iter);
    if (c.kind == TRI_COMPRESS_POWERSGD) { /* one first iteration, in both fields */
        if (f->start_iter_given)
            c.powersgd_start_iter = f->start_iter;
        c.start_iter = c.powersgd_start_iter;
    }
    c.seed = seed;
    rc = tri_compression_check(&c, zero_stage);
    if (rc)
        return rc;
    if (c.kind != TRI_COMPRESS_NONE && dp == 1) {
        tri_log_rank0("warning: --grad-compression %s with dp 1: there is no data-parallel reduction to compress; "
                      "running uncompressed", f->kind);
        c.kind = TRI_COMPRESS_NONE;
        c.reduce = TRI_COMPRESS_REDUCE_ALLGATHER;
    }
    *out = c;
    return TRI_OK;
}
