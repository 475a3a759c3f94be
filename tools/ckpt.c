/* tools/ckpt.c - inspects and converts Trident checkpoints, offline on one CPU process.
 *
 *   ckpt inspect DIR             the latest step of a run directory (or a step directory): metadata,
 *                                layout, every file's SHA-256 status, every tensor's shape, dtype,
 *                                norms of weights and Adam moments, and checksum status
 *   ckpt reshard --tensor-model-parallel-size T --pipeline-model-parallel-size P
 *                --data-parallel-size D [--zero-stage Z] [--expert-model-parallel-size EP]
 *                [--expert-tensor-parallel-size ETP] SRC OUT
 *                                SRC rewritten for another layout as the run directory OUT (the
 *                                T x P x D ranks run as threads of this process: each loads its
 *                                shard from SRC exactly as a resumed run would, then they save);
 *                                a MoE checkpoint's experts go from the source's ep (its manifest)
 *                                to EP ranks of E / EP experts each, keyed by name (any ep -> any ep),
 *                                each expert's moe_intermediate_size in ETP slices (any etp -> any etp;
 *                                the files a training run at that layout writes)
 *   ckpt merge SRC OUT.h5        one HDF5 file with full tensors (weights, exp_avg/, exp_avg_sq/ or
 *                                momentum_buffer/ for SGD and LARS)
 *   ckpt export --format safetensors|llmc SRC OUT
 *                                GPT-2: Hugging Face names and Conv1D layout, or llm.c's model file
 *   ckpt export --format hf [--dtype fp32|bf16|fp16] [--max-shard-size 5GB] SRC DIR
 *                                a Hugging Face model directory (config.json, model.safetensors or
 *                                shards with model.safetensors.index.json), as save_pretrained writes
 *                                (GPT-2 or Llama)
 *   ckpt import --format llmc GPT2.bin OUT
 *   ckpt import --format hf DIR OUT
 *                                llm.c's GPT-2 weights, or a Hugging Face directory (GPT-2 or Llama:
 *                                config.json's model_type), as step 0 of run directory OUT (with
 *                                OUT/config.json), to fine-tune with
 *                                engine_train --config OUT/config.json --load OUT in any layout
 *
 * No command destroys what it reads: every output is checked first (tools/cli/outputs.h: never an
 * input, inside one or containing one, through symlinks; never a directory that holds a run, nor one
 * that holds a model unless --force), written under a temporary name beside it and moved into place
 * only when complete, so a failure leaves the target as it was (docs/ckpt-safety.md).
 * Long conversions print a progress bar on stderr. Errors name the file and the tensor. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/fsutil.h"
#include "checkpoints/h5.h"
#include "checkpoints/reader.h"
#include "engine/core/clock.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/state_shards.h"
#include "models/gpt.h"
#include "models/gpt_formats.h"
#include "models/hf.h"
#include "models/host_weights.h"
#include "models/model.h"
#include "models/session.h"
#include "models/session_checkpoint.h"
#include "partitioner/constraints.h"
#include "tools/cli/flags.h"
#include "tools/cli/outputs.h"
#include "tools/cli/threads.h"
#include "tools/cli/train_metrics.h"

typedef struct args {
    int tp, pp, dp, zero, ep, etp; /* reshard's target layout (zero, ep, etp -1: the checkpoint's) */
    const char *format, *schedule, *dtype, *max_shard_size;
    int64_t seed;
    bool quiet, force;
} args;

#define FLAG(name, kind, dst, help, lo, hi) {name, kind, dst, help, lo, hi, NULL, false}

/* ---- progress bar (stderr) ---- */

static bool quiet_progress;

/* A bar with the elapsed time and the ETA at the pace so far (the clock restarts with each new
 * phase, e.g. verify, then load). */
static void progress(void *ctx, const char *what, int64_t done, int64_t total)
{
    static const char *phase;
    static double t_start;
    (void)ctx;
    if (quiet_progress || total <= 0 || !isatty(2))
        return;
    if (!phase || strcmp(phase, what) != 0) {
        phase = what;
        t_start = tri_now_s();
    }
    int width = 40, fill = (int)(width * done / total);
    char bar[48], el[32], eta[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    double elapsed = tri_now_s() - t_start;
    fprintf(stderr, "\r%-8s [%s] %3d%% %s, ETA %s  ", what, bar, (int)(100 * done / total),
            tri_format_duration(elapsed, el, sizeof el),
            done > 0 ? tri_format_duration(elapsed / (double)done * (double)(total - done), eta, sizeof eta) : "?");
    if (done >= total)
        fprintf(stderr, "\n");
    fflush(stderr);
}

/* ---- outputs: checked, staged beside the target, moved into place when complete ---- */

/* The output rule for out against the command's inputs, then tmp: the temporary name beside out
 * that the command writes (a file, or a directory it creates). */
static int begin_output(const args *a, const char *out, bool is_dir, const tri_cli_input *in, int n, char *tmp,
                        size_t cap)
{
    tri_cli_output o = {.name = "OUT", .path = out, .is_dir = is_dir, .force = a->force};
    int rc = tri_cli_check_output(&o, in, n);
    if (!rc) rc = tri_fs_temp_beside(out, tmp, cap);
    return rc;
}

/* Whether name is a Hugging Face weight file: model.safetensors, its index, or a shard. */
static bool is_weight_file(const char *name)
{
    int a = 0, b = 0, end = 0;
    return strcmp(name, "model.safetensors") == 0 || strcmp(name, "model.safetensors.index.json") == 0 ||
           (sscanf(name, "model-%5d-of-%5d.safetensors%n", &a, &b, &end) == 2 && name[end] == '\0');
}

/* Export --format hf --force replaced the model in out by the one staged in tmp: the old model's weight
 * files that the new one does not have (a single file where the new one is sharded, shards of another
 * count) would mislead a loader, so they go once the new files are in place. new_names: tmp's
 * entries, read before it was published. */
static int remove_stale_weights(const char *out, char *const *new_names, int n_new)
{
    DIR *d = opendir(out);
    if (!d)
        return TRI_ERR(TRI_EIO, "cannot open %s: %s", out, strerror(errno));
    int rc = TRI_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d)) != NULL) {
        bool kept = !is_weight_file(e->d_name);
        for (int k = 0; k < n_new && !kept; k++)
            kept = strcmp(new_names[k], e->d_name) == 0;
        char p[TRI_CKPT_PATH_MAX];
        if (!kept && !(rc = tri_fs_join(p, sizeof p, out, e->d_name)) && unlink(p) != 0)
            rc = TRI_ERR(TRI_EIO, "cannot remove the replaced model's %s: %s", p, strerror(errno));
    }
    closedir(d);
    return rc;
}

/* The names of directory dir's entries (malloc'd; *n of them). */
static char **entry_names(const char *dir, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    char **v = NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char **w = realloc(v, (size_t)(*n + 1) * sizeof *v);
        if (!w)
            break;
        v = w;
        v[(*n)++] = strdup(e->d_name);
    }
    if (d)
        closedir(d);
    return v;
}

/* rc TRI_OK: tmp becomes out. Otherwise tmp is removed, and the message says whether it could be. */
static int end_output(int rc, const char *tmp, const char *out)
{
    if (!rc)
        return tri_fs_publish(tmp, out);
    if (!tri_fs_exists(tmp))
        return rc;
    char why[2048], msg[4096 + 2 * TRI_CKPT_PATH_MAX];
    snprintf(why, sizeof why, "%s", tri_error_message());
    if (tri_fs_remove_tree(tmp) == TRI_OK)
        snprintf(msg, sizeof msg, "%s; %s untouched (the partial output %s was removed)", why, out, tmp);
    else
        snprintf(msg, sizeof msg, "%s; %s untouched, but the partial output %s could not be removed: %s", why, out,
                 tmp, tri_error_message());
    return tri_error_restore(rc, msg);
}

/* ---- inspect ---- */

static double norm_of(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return sqrt(s);
}

static void shape_text(const tri_ckpt_tensor *t, char *out, size_t cap)
{
    out[0] = '\0';
    for (int d = 0; d < t->ndim; d++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%lld", d ? " x " : "", (long long)t->shape[d]);
}

/* Whether every file holding a piece of tensor t verified. */
static bool tensor_verified(const tri_ckpt_reader *r, int t, const int *file_rc)
{
    for (int f = 0; f < r->m.n_files; f++)
        for (int k = 0; k < r->m.files[f].n_pieces; k++)
            if (r->m.files[f].pieces[k].tensor == t && file_rc[f] != TRI_OK)
                return false;
    return true;
}

static int inspect(const char *path)
{
    tri_ckpt_reader r;
    int rc = tri_ckpt_reader_open(&r, path);
    if (rc)
        return rc;
    const tri_ckpt_manifest *m = &r.m;
    const tri_ckpt_run *run = &m->run;
    printf("checkpoint %s\n", r.dir);
    printf("format %s version %d, written by Trident %s\n", TRI_CKPT_FORMAT, m->format_version, m->trident_version);
    printf("model %s: %s\n", m->model_name, m->config_json);
    printf("iteration %lld, consumed samples %lld, optimizer step %lld\n", (long long)m->iteration,
           (long long)m->consumed_samples, (long long)m->optimizer_step);
    char eps[96] = "";
    int n_eps = run->ep > 1 ? snprintf(eps, sizeof eps, ", expert parallel %d", run->ep) : 0;
    if (run->etp > 1)
        snprintf(eps + n_eps, sizeof eps - (size_t)n_eps, ", expert tensor parallel %d", run->etp);
    char cps[96] = ""; /* the optimizer files' dp index is the rank in dp x cp (checkpoint manifest.h) */
    if (run->cp > 1)
        snprintf(cps, sizeof cps, " x cp %d (files indexed by the rank in dp x cp = %d)", run->cp, run->dp * run->cp);
    printf("layout: tp %d x pp %d x dp %d%s, ZeRO %d, schedule %s (%d chunk%s per rank)%s%s%s\n", run->tp, run->pp,
           run->dp, cps, run->zero_stage, run->schedule, run->v, run->v == 1 ? "" : "s",
           run->sequence_parallel ? ", sequence parallel" : "", run->deterministic ? ", deterministic mode" : "", eps);
    printf("batch: micro %lld, global %lld, sequence %lld; seed %llu (counter-based RNG: no other state)\n",
           (long long)run->micro_batch, (long long)run->global_batch, (long long)run->seq_length,
           (unsigned long long)run->seed);
    printf("lr: %s from %g to %g, warm-up %lld, decay until %lld; AdamW beta1 %g beta2 %g eps %g weight decay %g, "
           "clip %g\n", tri_ckpt_lr_style_name(run->lr.style), (double)run->lr.lr, (double)run->lr.min_lr,
           (long long)run->lr.warmup_iters, (long long)run->lr.decay_iters, (double)run->adamw.beta1,
           (double)run->adamw.beta2, (double)run->adamw.eps, (double)run->adamw.weight_decay, (double)run->clip_grad);
    int *file_rc = calloc((size_t)m->n_files, sizeof *file_rc);
    int64_t total = 0, done = 0, bad = 0;
    for (int f = 0; f < m->n_files; f++)
        total += m->files[f].bytes;
    printf("files:\n");
    for (int f = 0; f < m->n_files; f++) {
        const tri_ckpt_file *x = &m->files[f];
        file_rc[f] = tri_ckpt_reader_verify(&r, f);
        done += x->bytes;
        progress(NULL, "verify", done, total);
        char where[64] = "";
        if (x->kind == TRI_CKPT_MODEL)
            snprintf(where, sizeof where, "tp %d pp %d", x->tp_rank, x->pp_rank);
        else if (x->kind == TRI_CKPT_OPTIM)
            snprintf(where, sizeof where, "tp %d pp %d dp %d", x->tp_rank, x->pp_rank, x->dp_rank);
        printf("  %-28s %-9s %-18s %10.2f MiB  %3d pieces  sha256 %s\n", x->name,
               x->kind == TRI_CKPT_MODEL ? "model" : x->kind == TRI_CKPT_OPTIM ? "optimizer" : "index", where,
               (double)x->bytes / 1048576.0, x->n_pieces, file_rc[f] ? "MISMATCH" : "ok");
        if (file_rc[f]) {
            printf("    %s\n", tri_error_message());
            bad++;
        }
    }
    const char *groups[3];
    int n_groups = tri_ckpt_state_groups(m, groups);
    printf("optimizer %s\n", m->run.adamw.kind == TRI_OPT_ADAM ? "adamw" : tri_optimizer_name(m->run.adamw.kind));
    printf("tensors (%d):\n  %-22s %-16s %-8s %12s %15s %12s  %s\n", m->n_tensors, "name", "shape", "dtype", "norm",
           groups[1], n_groups > 2 ? groups[2] : "-", "checksum");
    for (int t = 0; t < m->n_tensors; t++) {
        const tri_ckpt_tensor *x = &m->tensors[t];
        char shape[64];
        double norms[3] = {NAN, NAN, NAN};
        shape_text(x, shape, sizeof shape);
        bool ok = tensor_verified(&r, t, file_rc);
        int64_t n = 1;
        for (int d = 0; d < x->ndim; d++)
            n *= x->shape[d];
        for (int g = 0; g < n_groups && ok; g++) {
            float *data = NULL;
            int trc = tri_ckpt_read_tensor(&r, groups[g], x->name, &data);
            if (trc) {
                printf("    %s\n", tri_error_message());
                ok = false;
                break;
            }
            norms[g] = norm_of(data, n);
            free(data);
        }
        printf("  %-22s %-16s %-8s %12.6g %15.6g %12.6g  %s\n", x->name, shape, "float32", norms[0], norms[1],
               norms[2], ok ? "ok" : "FAILED");
        bad += !ok;
    }
    free(file_rc);
    tri_ckpt_reader_close(&r);
    if (bad)
        return TRI_ERR(TRI_ECORRUPT, "%s: %lld files or tensors failed verification", path, (long long)bad);
    return TRI_OK;
}

/* ---- merge: one HDF5 file with full tensors ---- */

static int merge(const args *a, const char *src, const char *out)
{
    tri_ckpt_reader r;
    char tmp[TRI_CKPT_PATH_MAX];
    int rc = tri_ckpt_reader_open(&r, src);
    if (rc)
        return rc;
    tri_cli_input in[2] = {{"SRC", src}, {"the checkpoint step", r.dir}};
    rc = begin_output(a, out, false, in, 2, tmp, sizeof tmp);
    if (rc) {
        tri_ckpt_reader_close(&r);
        return rc;
    }
    hid_t f = -1;
    rc = tri_h5_create(tmp, &f);
    char *json = NULL;
    if (!rc) rc = tri_manifest_render(&r.m, &json);
    if (!rc) rc = tri_h5_attr_str(f, tmp, "/", "manifest", json);
    free(json);
    const char *groups[3];
    int n_groups = tri_ckpt_state_groups(&r.m, groups);
    for (int t = 0; t < r.m.n_tensors && !rc; t++) {
        const tri_ckpt_tensor *x = &r.m.tensors[t];
        for (int g = 0; g < n_groups && !rc; g++) {
            float *data = NULL;
            char name[TRI_PARAM_NAME_MAX + 32];
            snprintf(name, sizeof name, "%s%s%s", groups[g] ? groups[g] : "", groups[g] ? "/" : "", x->name);
            rc = tri_ckpt_read_tensor(&r, groups[g], x->name, &data);
            if (!rc) rc = tri_h5_write_f32(f, tmp, name, x->ndim, x->shape, data, NULL);
            free(data);
        }
        progress(NULL, "merge", t + 1, r.m.n_tensors);
    }
    int crc = f >= 0 ? tri_h5_close(f, tmp) : TRI_OK;
    tri_ckpt_reader_close(&r);
    return end_output(rc ? rc : crc, tmp, out);
}

/* ---- export ---- */

/* The checkpoint's model: its recorded config (any registered family) and name. */
static int model_of(const tri_ckpt_manifest *m, tri_model *model, const char *dir)
{
    int rc = tri_model_parse(model, m->config_json, dir);
    if (!rc)
        snprintf(model->name, sizeof model->name, "%s", m->model_name);
    return rc;
}

static int export_weights(const args *a, const char *src, const char *out)
{
    const char *format = a->format;
    tri_ckpt_reader r;
    tri_model model = {0};
    int rc = tri_ckpt_reader_open(&r, src);
    if (rc)
        return rc;
    r.progress = progress;
    rc = tri_ckpt_reader_verify_all(&r);
    if (!rc) rc = model_of(&r.m, &model, r.dir);
    bool hf = strcmp(format, "hf") == 0;
    const tri_gpt_config *cfg = rc ? NULL : tri_gpt_config_of(&model);
    if (!rc && !hf && !cfg)
        rc = TRI_ERR(TRI_EINVAL, "%s: export --format %s writes GPT-2 weights; this checkpoint's model_type is \"%s\"",
                     r.dir, format, model.family->type);
    uint64_t shard_bytes = TRI_HF_DEFAULT_SHARD_BYTES;
    if (!rc && a->max_shard_size) rc = tri_hf_parse_size(a->max_shard_size, &shard_bytes);
    tri_st_dtype dtype = strcmp(a->dtype, "bf16") == 0 ? TRI_ST_BF16 : strcmp(a->dtype, "fp16") == 0 ? TRI_ST_F16
                                                                                                  : TRI_ST_F32;
    if (!rc && !hf && (a->max_shard_size || dtype != TRI_ST_F32))
        rc = TRI_ERR(TRI_EINVAL, "--dtype and --max-shard-size apply to --format hf, not %s", format);
    if (!rc && a->force && !hf)
        rc = TRI_ERR(TRI_EINVAL, "--force applies to directory outputs (export --format hf); a file output is "
                     "replaced once the new file is complete");
    tri_cli_input in[2] = {{"SRC", src}, {"the checkpoint step", r.dir}};
    char tmp[TRI_CKPT_PATH_MAX];
    if (!rc) rc = begin_output(a, out, hf, in, 2, tmp, sizeof tmp);
    if (rc) {
        tri_model_free(&model);
        tri_ckpt_reader_close(&r);
        return rc;
    }
    if (strcmp(format, "safetensors") == 0)
        rc = tri_export_safetensors(&r, cfg, tmp);
    else if (strcmp(format, "llmc") == 0)
        rc = tri_export_llmc(&r, cfg, tmp);
    else
        rc = tri_hf_export(&r, &model, tmp, dtype, shard_bytes);
    tri_model_free(&model);
    tri_ckpt_reader_close(&r);
    bool replacing = !rc && hf && a->force && tri_fs_is_dir(out);
    int n_new = 0;
    char **new_names = replacing ? entry_names(tmp, &n_new) : NULL;
    rc = end_output(rc, tmp, out);
    if (!rc && replacing) rc = remove_stale_weights(out, new_names, n_new);
    for (int k = 0; k < n_new; k++)
        free(new_names[k]);
    free(new_names);
    return rc;
}

/* ---- reshard and import: T x P x D thread ranks of this process, each a session ---- */

typedef struct job {
    tri_model model;
    tri_ckpt_manifest src;      /* the source's manifest (run settings), NULL files */
    const char *load;           /* reshard: the source; NULL for import */
    const tri_host_weights *weights; /* import: the weights */
    const char *out;
    tri_train_layout layout;    /* the target layout (partitioner/constraints.h resolved it) */
    uint64_t seed;
    bool expert_bias;           /* reshard: the source holds DeepSeek-V3's expert bias (carried) */
} job;

/* The target layout: tp x pp x dp ranks (experts over ep of them, each expert in etp slices; sequence
 * parallelism at tp > 1 when `sp`) at ZeRO stage `zero` with the given schedule, a global batch and
 * sequence length of the source run, micro-batches of `micro`, through the one validator the other
 * tools use (it names --expert-tensor-parallel-size when etp x ep does not divide tp x dp). */
static int target_layout(const tri_model *model, int tp, int pp, int dp, int ep, int etp, bool sp, int zero,
                         const char *schedule, int64_t micro, int64_t global, int64_t T, tri_train_layout *out)
{
    tri_layout_request req = {.num_gpus = tp * pp * dp, .tp = tp, .pp = pp, .ep = ep, .etp = etp,
                              .sequence_parallel = sp, .micro_batch = micro, .global_batch = global,
                              .seq_length = T, .zero_stage = zero, .schedule = schedule,
                              .first_layers = -1, .last_layers = -1};
    tri_transformer dims = tri_model_dims(model);
    return tri_layout_resolve(&dims, &req, out);
}

/* Import: the read tensors into the weights the trainer's owners list (engine/train/state_shards.h;
 * tp 1, pp 1: whole tensors; the embedding's padding rows zero). */
static int write_weights(tri_session *s, const tri_host_weights *m)
{
    tri_state_shard *sh = NULL;
    int n_sh = 0;
    int rc = tri_trainer_state_shards(&s->trainer, &sh, &n_sh);
    for (int i = 0; i < n_sh && !rc; i++) {
        const tri_param *p = sh[i].param;
        if (sh[i].group != TRI_STATE_WEIGHTS)
            continue;
        int k = tri_host_weights_find(m, p->spec.name);
        if (k < 0) {
            rc = TRI_ERR(TRI_EINVAL, "import: no tensor for %s", p->spec.name);
            break;
        }
        float *host = calloc((size_t)p->numel, sizeof *host);
        if (!host) {
            rc = TRI_ERR(TRI_ENOMEM, "import: out of memory for %s", p->spec.name);
            break;
        }
        int64_t shape[TRI_MAX_DIMS], n = 1;
        tri_ckpt_logical_shape(&p->spec, shape);
        for (int d = 0; d < p->spec.ndim; d++)
            n *= shape[d];
        memcpy(host, m->data[k], (size_t)n * sizeof *host);
        rc = tri_trainer_state_write(&s->trainer, &sh[i], host);
        free(host);
    }
    free(sh);
    return rc;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    job *j = arg;
    const tri_ckpt_run *sr = &j->src.run;
    tri_session_options o = {.run = {.layout = j->layout, .seed = sr->seed}, .clip_grad = sr->clip_grad,
                                 .adamw = sr->adamw, .local_sgd = sr->local}; /* local SGD's state resharded too */
    tri_session_ckpt_run cr = {.seed = sr->seed, .lr = sr->lr};
    tri_device *dev = NULL;
    tri_session s;
    if (rank != 0)
        tri_log_set_quiet(true);
    /* the compressed dp reduction's error feedback: carried into a target whose ZeRO stage compresses
     * and whose dp is over 1 (at another dp each rank's residual is the saved ranks' sum divided by
     * the target's dp, tri_ckpt_load_compression); else dropped with a warning (the output records no
     * compressor, and a resume starts the residuals from zero). Each copy's own residual is carried
     * when tp and pp stay too, otherwise the load warns and the output holds what a resume would start
     * from, the stored copy's residual; PowerSGD's Q is carried into any layout (resharded at another
     * tp, engine/train/powersgd_q.h) */
    if (j->load && sr->compression.kind != TRI_COMPRESS_NONE) {
        tri_compression c = sr->compression;
        c.seed = sr->seed;
        if (j->layout.dp > 1 && tri_compression_check(&c, j->layout.zero_stage) == TRI_OK) {
            o.run.layout.compression = c;
        } else {
            tri_error_clear();
            cr.reset_compression_state = true;
            if (rank == 0)
                fprintf(stderr, "warning: the checkpoint's --grad-compression %s error feedback (dp %d, ZeRO %d) "
                        "has no compressed reduction in the target (dp %d, ZeRO %d), which drops it: a resumed run "
                        "starts it from zero\n", tri_compression_name(c.kind), sr->dp, sr->zero_stage, j->layout.dp,
                        j->layout.zero_stage);
        }
    }
    int rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&s, world, dev, &j->model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    int64_t iteration = 0;
    double t0 = tri_now_s();
    if (j->load)
        rc = tri_session_ckpt_resume(&s, j->load, &cr, &iteration);
    else
        rc = write_weights(&s, j->weights);
    if (!rc && rank == 0)
        fprintf(stderr, "%s in %.2f s; saving\n", j->load ? "loaded" : "imported", tri_now_s() - t0);
    if (!rc) rc = tri_session_ckpt_save(&s, j->out, &cr, iteration);
    tri_session_destroy(&s);
    tri_device_destroy(dev);
    return rc;
}

/* Resharding once the source is read: the target layout, then T x P x D thread ranks. */
static int reshard_to(const args *a, const char *src, job *j, int zero)
{
    int64_t global = j->src.run.global_batch;
    if (global % a->dp != 0)
        return TRI_ERR(TRI_EINVAL, "--data-parallel-size %d does not divide the checkpoint's global batch %lld",
                       a->dp, (long long)global);
    int64_t micro = global % (j->src.run.micro_batch * a->dp) == 0 ? j->src.run.micro_batch : 1;
    int src_ep = j->src.run.ep > 1 ? j->src.run.ep : 1, ep = a->ep < 0 ? src_ep : a->ep;
    int src_etp = j->src.run.etp > 1 ? j->src.run.etp : 1, etp = a->etp < 0 ? src_etp : a->etp;
    /* not asked: the checkpoint's etp where it folds into the target's stage (etp x ep dividing tp x dp),
     * else whole experts (etp 1), as before etp was recorded */
    if (a->etp < 0 && etp > 1 && ((int64_t)a->tp * a->dp) % ((int64_t)etp * ep) != 0) {
        fprintf(stderr, "note: the checkpoint's expert tensor parallelism (etp %d) does not fold into tp x dp = %d x "
                "%d over ep %d: resharding to etp 1 (--expert-tensor-parallel-size chooses)\n", etp, a->tp, a->dp, ep);
        etp = 1;
    }
    /* a MoE model at tp > 1 runs with sequence parallelism (Megatron-Core's rule), a dense one as its source */
    bool sp = a->tp > 1 && (j->src.run.sequence_parallel || tri_model_dims(&j->model).n_experts > 0);
    /* the validator names --expert-model-parallel-size when it does not divide num_experts or the dp,
     * and --expert-tensor-parallel-size when etp x ep does not divide tp x dp; the family's check
     * (tri_model_rank_check) names it when it does not divide moe_intermediate_size */
    int rc = target_layout(&j->model, a->tp, a->pp, a->dp, ep, etp, sp, zero, a->schedule, micro, global,
                           j->src.run.seq_length, &j->layout);
    j->layout.moe.expert_bias = j->expert_bias; /* the bias is state: kept as it was */
    j->layout.deterministic = j->src.run.deterministic; /* recorded as the source's, as a run there would */
    tri_model_run probe = {.layout = j->layout};
    if (!rc) rc = tri_model_rank_check(&j->model, &probe);
    if (rc)
        return rc;
    fprintf(stderr, "resharding %s (tp %d x pp %d x dp %d, ep %d, etp %d, ZeRO %d) to tp %d x pp %d x dp %d, ep %d, "
            "etp %d, ZeRO %d on %d thread ranks\n", src, j->src.run.tp, j->src.run.pp, j->src.run.dp, src_ep, src_etp,
            j->src.run.zero_stage, a->tp, a->pp, a->dp, ep, etp, zero, a->tp * a->pp * a->dp);
    return tri_run_thread_ranks(a->tp * a->pp * a->dp, run_rank, j);
}

static int reshard(const args *a, const char *src, const char *out)
{
    tri_ckpt_reader r;
    int rc = tri_ckpt_reader_open(&r, src);
    if (rc)
        return rc;
    r.progress = progress;
    char tmp[TRI_CKPT_PATH_MAX];
    tri_cli_input in[2] = {{"SRC", src}, {"the checkpoint step", r.dir}};
    if (a->force)
        rc = TRI_ERR(TRI_EINVAL, "--force does not apply to reshard: it writes a new run directory");
    if (!rc) rc = begin_output(a, out, true, in, 2, tmp, sizeof tmp);
    if (rc) {
        tri_ckpt_reader_close(&r);
        return rc;
    }
    job j = {.load = src, .out = tmp};
    int zero = a->zero;
    rc = tri_ckpt_reader_verify_all(&r);
    if (!rc) rc = model_of(&r.m, &j.model, r.dir);
    j.expert_bias = tri_session_ckpt_expert_bias(&r.m) != NULL;
    j.src = r.m;
    j.src.files = NULL;
    j.src.n_files = 0;
    j.src.tensors = NULL;
    j.src.n_tensors = 0;
    j.src.config_json = NULL;
    if (zero < 0)
        zero = r.m.run.zero_stage;
    tri_ckpt_reader_close(&r);
    if (!rc) rc = reshard_to(a, src, &j, zero);
    tri_model_free(&j.model);
    return end_output(rc, tmp, out);
}

static int import_weights(const args *a, const char *src, const char *out)
{
    tri_host_weights w;
    int version = 0, padded = 0;
    bool hf = strcmp(a->format, "hf") == 0;
    if (!hf && strcmp(a->format, "llmc") != 0)
        return TRI_ERR(TRI_EINVAL, "ckpt import reads --format llmc files or --format hf directories");
    if (a->force)
        return TRI_ERR(TRI_EINVAL, "--force does not apply to import: it writes a new run directory");
    char tmp[TRI_CKPT_PATH_MAX];
    tri_cli_input in[1] = {{"SRC", src}};
    int rc = begin_output(a, out, true, in, 1, tmp, sizeof tmp);
    if (!rc) rc = hf ? tri_hf_read(src, &w) : tri_llmc_read(src, &w, &version, &padded);
    if (rc)
        return rc;
    job j = {.weights = &w, .out = tmp, .model = w.model};
    j.model.owns_cfg = false; /* a view: w owns the config */
    j.src.run = (tri_ckpt_run){.global_batch = 1, .micro_batch = 1, .seq_length = 1, .seed = (uint64_t)a->seed,
                               .clip_grad = 1.0f,
                               .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
                               .lr = {.lr = 6e-4f, .min_lr = 6e-5f, .decay_iters = 1, .style = TRI_LR_COSINE}};
    tri_transformer d = tri_model_dims(&w.model);
    char source[64];
    if (hf)
        snprintf(source, sizeof source, "Hugging Face %s", w.model.family->title);
    else
        snprintf(source, sizeof source, "llm.c version %d", version);
    fprintf(stderr, "%s: %s, %lld layers, %lld heads, hidden size %lld, vocab %d", src, source, (long long)d.n_layer,
            (long long)d.n_head, (long long)d.n_embd, tri_model_vocab_size(&w.model));
    if (!hf)
        fprintf(stderr, " (padded %d)", padded);
    fprintf(stderr, ", %lld positions\n", (long long)d.n_positions);
    rc = target_layout(&j.model, 1, 1, 1, 1, 1, false, 0, NULL, 1, 1, 1, &j.layout);
    if (!rc) rc = tri_run_thread_ranks(1, run_rank, &j);
    char *json = NULL;
    if (!rc) rc = w.model.family->to_json(w.model.cfg, &json);
    if (!rc) {
        size_t n = strlen(json);
        char *line = malloc(n + 2);
        rc = line ? TRI_OK : TRI_ERR(TRI_ENOMEM, "out of memory for config.json");
        if (line) {
            snprintf(line, n + 2, "%s\n", json);
            rc = tri_fs_write_atomic(tmp, "config.json", line, strlen(line));
        }
        free(line);
    }
    free(json);
    tri_host_weights_free(&w);
    return end_output(rc, tmp, out);
}

/* ---- command line ---- */

static int make_flags(args *a, tri_flag *f)
{
    int n = 0;
    f[n++] = (tri_flag)FLAG("tensor-model-parallel-size", TRI_FLAG_INT, &a->tp, "reshard: tensor-parallel size", 1, 4096);
    f[n++] = (tri_flag)FLAG("pipeline-model-parallel-size", TRI_FLAG_INT, &a->pp, "reshard: pipeline-parallel size", 1, 4096);
    f[n++] = (tri_flag)FLAG("data-parallel-size", TRI_FLAG_INT, &a->dp, "reshard: data-parallel size", 1, 4096);
    f[n++] = (tri_flag)FLAG("zero-stage", TRI_FLAG_INT, &a->zero, "reshard: ZeRO stage (-1: the checkpoint's)", -1, 3);
    f[n++] = (tri_flag)FLAG("expert-model-parallel-size", TRI_FLAG_INT, &a->ep, "reshard: expert-parallel size of a MoE checkpoint, dividing num_experts and the data-parallel size (-1: the checkpoint's; dense: 1)", -1, 4096);
    f[n++] = (tri_flag)FLAG("expert-tensor-parallel-size", TRI_FLAG_INT, &a->etp, "reshard: expert-tensor-parallel size of a MoE checkpoint: each expert's moe_intermediate_size in etp slices, etp x ep dividing tp x dp (-1: the checkpoint's where it divides, else 1; dense: 1)", -1, 4096);
    f[n++] = (tri_flag)((tri_flag){"pipeline-schedule", TRI_FLAG_CHOICE, &a->schedule, "reshard: pipeline schedule",
                                   0, 0, "1f1b|gpipe", false});
    f[n++] = (tri_flag)((tri_flag){"format", TRI_FLAG_CHOICE, &a->format, "export/import: file format", 0, 0,
                                   "safetensors|llmc|hf", false});
    f[n++] = (tri_flag)((tri_flag){"dtype", TRI_FLAG_CHOICE, &a->dtype, "export --format hf: the stored dtype", 0, 0,
                                   "fp32|bf16|fp16", false});
    f[n++] = (tri_flag)FLAG("max-shard-size", TRI_FLAG_STRING, &a->max_shard_size,
                            "export --format hf: largest shard, as transformers' max_shard_size (default 5GB)", 0, 0);
    f[n++] = (tri_flag)FLAG("seed", TRI_FLAG_INT64, &a->seed, "import: the seed recorded for the run", 0, 9.2e18);
    f[n++] = (tri_flag)FLAG("quiet", TRI_FLAG_BOOL, &a->quiet, "no progress bars", 0, 0);
    f[n++] = (tri_flag)FLAG("force", TRI_FLAG_BOOL, &a->force,
                            "export --format hf: replace a model directory (once the new model is complete); "
                            "never an input, never a run", 0, 0);
    return n;
}

static const char *usage_text =
    "Inspects and converts Trident checkpoints, offline on one CPU process.\n"
    "  ckpt inspect DIR                      metadata, files and tensors of DIR's latest step (or step DIR)\n"
    "  ckpt reshard --tensor-model-parallel-size T --pipeline-model-parallel-size P --data-parallel-size D\n"
    "               [--zero-stage Z] [--expert-model-parallel-size EP] [--expert-tensor-parallel-size ETP] SRC OUT\n"
    "  ckpt merge SRC OUT.h5                 one HDF5 file with the full tensors\n"
    "  ckpt export --format safetensors|llmc SRC OUT\n"
    "  ckpt export --format hf [--dtype fp32|bf16|fp16] [--max-shard-size 5GB] SRC DIR (a Hugging Face model directory)\n"
    "  ckpt import --format llmc GPT2.bin OUT (llm.c weights as step 0 of run directory OUT)\n"
    "  ckpt import --format hf DIR OUT        (a Hugging Face GPT-2 or Llama directory as step 0 of run directory OUT)";

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    args a = {.tp = 1, .pp = 1, .dp = 1, .zero = -1, .ep = -1, .etp = -1, .format = "safetensors", .schedule = "1f1b", .seed = 1234,
              .dtype = "fp32"};
    tri_flag flags[16];
    int nflags = make_flags(&a, flags);
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        tri_flags_usage(stdout, flags, nflags, "ckpt COMMAND", usage_text);
        return argc < 2 ? 2 : 0;
    }
    /* positionals apart from flags (a flag that takes a value consumes the next word) */
    const char *cmd = argv[1], *pos[4] = {0};
    char *fargv[64] = {argv[0]};
    int fargc = 1, npos = 0;
    for (int i = 2; i < argc && fargc < 62; i++) {
        if (argv[i][0] == '-' && argv[i][1]) {
            fargv[fargc++] = argv[i];
            const char *name = argv[i] + strspn(argv[i], "-");
            const tri_flag *f = tri_flags_find(flags, nflags, name);
            if (f && f->kind != TRI_FLAG_BOOL && !strchr(argv[i], '=') && i + 1 < argc)
                fargv[fargc++] = argv[++i];
        } else if (npos < 4) {
            pos[npos++] = argv[i];
        }
    }
    bool help = false;
    int rc = tri_flags_parse(flags, nflags, fargc, fargv, &help);
    if (!rc && help) {
        tri_flags_usage(stdout, flags, nflags, "ckpt COMMAND", usage_text);
        return 0;
    }
    quiet_progress = a.quiet;
    tri_cli_set_threads(1);
    int need = strcmp(cmd, "inspect") == 0 ? 1 : 2;
    if (!rc && npos != need)
        rc = TRI_ERR(TRI_EINVAL, "ckpt %s takes %d path%s, got %d (see ckpt -h)", cmd, need, need == 1 ? "" : "s", npos);
    if (!rc) {
        if (strcmp(cmd, "inspect") == 0)
            rc = inspect(pos[0]);
        else if (strcmp(cmd, "merge") == 0)
            rc = merge(&a, pos[0], pos[1]);
        else if (strcmp(cmd, "export") == 0)
            rc = export_weights(&a, pos[0], pos[1]);
        else if (strcmp(cmd, "reshard") == 0)
            rc = reshard(&a, pos[0], pos[1]);
        else if (strcmp(cmd, "import") == 0)
            rc = import_weights(&a, pos[0], pos[1]);
        else
            rc = TRI_ERR(TRI_EINVAL, "unknown command '%s' (inspect, reshard, merge, export, import)", cmd);
    }
    if (rc) {
        fprintf(stderr, "ckpt %s: error: %s\n", cmd, tri_error_message());
        return 1;
    }
    return 0;
}
