/* checkpoints/save.c - atomic, collective save of a trainer (see checkpoint.h). */
#define _XOPEN_SOURCE 700
#include "checkpoints/checkpoint.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/h5.h"
#include "engine/status.h"

/* ---- agreement: every rank returns the same verdict ---- */

/* x (n int32 values) combined over the world with op, through device memory. */
static int reduce_i32(tri_trainer *t, int32_t *x, int64_t n, tri_reduce_op op, int root)
{
    tri_tensor buf = {0};
    int rc = tri_device_alloc(t->dev, &buf.data, (size_t)n * sizeof(int32_t));
    buf = tri_tensor_1d(buf.data, TRI_I32, n);
    if (!rc) rc = tri_device_copy_from_host(t->dev, buf, x);
    if (!rc) rc = root < 0 ? tri_comm_all_reduce(t->grid->world, buf, op) : tri_comm_broadcast(t->grid->world, buf, root);
    if (!rc) rc = tri_device_copy_to_host(t->dev, x, buf);
    tri_device_free(t->dev, buf.data);
    return rc;
}

#define AGREE_MSG 512

int tri_ckpt_agree(tri_trainer *t, int rc)
{
    /* the lowest failing rank, then its status and message to every rank */
    int size = t->grid->world_size;
    int32_t code = rc ? size - t->grid->world_rank : 0; /* the max names the lowest failing rank */
    int arc = reduce_i32(t, &code, 1, TRI_REDUCE_MAX, -1);
    if (arc)
        return rc ? rc : arc;
    if (code == 0)
        return TRI_OK;
    int first = size - code;
    int32_t msg[AGREE_MSG + 1] = {0};
    if (first == t->grid->world_rank) {
        const char *text = tri_error_message();
        msg[0] = rc;
        for (int i = 0; i < AGREE_MSG - 1 && text[i]; i++)
            msg[i + 1] = (unsigned char)text[i];
    }
    arc = reduce_i32(t, msg, AGREE_MSG + 1, TRI_REDUCE_MAX, first);
    if (rc)
        return rc;
    if (arc)
        return arc;
    char text[AGREE_MSG];
    for (int i = 0; i < AGREE_MSG; i++)
        text[i] = (char)msg[i + 1];
    text[AGREE_MSG - 1] = '\0';
    return tri_error_set(msg[0] < 0 ? msg[0] : TRI_EIO, __FILE__, __LINE__, "on rank %d: %s", first, text);
}


void tri_ckpt_logical_shape(const tri_param_spec *s, int64_t *shape)
{
    for (int d = 0; d < s->ndim; d++)
        shape[d] = s->shape[d];
    if (s->ndim > 0 && s->init_rows > 0 && s->init_rows < s->shape[0])
        shape[0] = s->init_rows;
}

void tri_ckpt_run_of(const tri_trainer *t, uint64_t seed, const tri_lr_schedule *lr, tri_ckpt_run *run)
{
    memset(run, 0, sizeof *run);
    run->tp = t->grid->tp;
    run->pp = t->grid->pp;
    run->dp = t->grid->dp;
    run->zero_stage = t->chunks[0]->zero->stage;
    run->v = t->v;
    snprintf(run->schedule, sizeof run->schedule, "%s", t->train_sched->name);
    run->sequence_parallel = t->cfg.sequence_parallel;
    run->deterministic = t->chunks[0]->zero->deterministic;
    run->micro_batch = t->chunks[0]->samples_per_mb;
    run->global_batch = tri_trainer_global_batch(t);
    run->seq_length = t->chunks[0]->window - 1;
    run->seed = seed;
    run->lr = *lr;
    run->adamw = t->opt[0].cfg;
    run->clip_grad = t->cfg.clip_grad;
}

/* Whether this rank stores parameter p (replicated parameters once, on TP rank 0; never the
 * last stage's tied copy of wte). */
static bool stores(const tri_trainer *t, const tri_param *p)
{
    return !p->spec.tied_copy && (!p->tp_replicated || t->grid->tp_rank == 0);
}

static tri_box shard_box(const tri_param *p)
{
    tri_box b = {.ndim = p->spec.ndim};
    for (int d = 0; d < b.ndim; d++) {
        b.off[d] = p->global_offset[d];
        b.shape[d] = p->local_shape[d];
    }
    return b;
}

static int root_attrs(hid_t f, const char *path, const char *kind, const tri_trainer *t, int64_t iteration)
{
    int64_t coords[3] = {t->grid->tp_rank, t->grid->pp_rank, t->grid->dp_rank};
    int64_t version = TRI_CKPT_FORMAT_VERSION;
    int rc = tri_h5_attr_str(f, path, "/", "format", TRI_CKPT_FORMAT);
    if (!rc) rc = tri_h5_attr_i64(f, path, "/", "format_version", 1, &version);
    if (!rc) rc = tri_h5_attr_str(f, path, "/", "kind", kind);
    if (!rc) rc = tri_h5_attr_i64(f, path, "/", "iteration", 1, &iteration);
    if (!rc) rc = tri_h5_attr_i64(f, path, "/", "tp_pp_dp_rank", 3, coords);
    return rc;
}

static int add_piece(tri_ckpt_file *f, int tensor, const tri_box *box, int64_t lo, int64_t hi)
{
    tri_ckpt_piece *v = realloc(f->pieces, (size_t)(f->n_pieces + 1) * sizeof *v);
    if (!v)
        return TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory");
    f->pieces = v;
    f->pieces[f->n_pieces++] = (tri_ckpt_piece){.tensor = tensor, .box = *box, .lo = lo, .hi = hi};
    return TRI_OK;
}

/* The tensor index of parameter p in the manifest, checking its logical shape. */
static int tensor_of(const tri_ckpt_manifest *m, const tri_param *p, int *t)
{
    *t = tri_manifest_tensor(m, p->spec.name);
    if (*t < 0)
        return TRI_ERR(TRI_EINVAL, "checkpoint: parameter %s is not in the model's parameter list", p->spec.name);
    return TRI_OK;
}

/* ---- the model file of a (tp, pp) coordinate: written by dp rank 0, read together by the stage's
 * data-parallel ranks (tri_stage.read_param is collective over dp) ---- */

static int write_model(tri_trainer *t, const tri_ckpt_manifest *m, const char *path, int64_t iteration,
                       bool write, tri_ckpt_file *entry)
{
    hid_t f = -1;
    int rc = write ? tri_h5_create(path, &f) : TRI_OK;
    if (!rc && write) rc = root_attrs(f, path, "model", t, iteration);
    for (int c = 0; c < t->v; c++) {
        tri_stage *st = t->chunks[c];
        for (int i = 0; i < st->layout->n; i++) {
            const tri_param *p = &st->layout->params[i];
            if (!stores(t, p))
                continue;
            float *host = malloc((size_t)p->numel * sizeof *host);
            int prc = host ? TRI_OK : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", p->spec.name);
            /* collective over dp: called by every data-parallel rank even after a write error */
            if (!prc) prc = st->read_param(st->self, i, false, host);
            if (prc && !rc)
                rc = prc;
            int tensor = -1;
            tri_box box = shard_box(p), live;
            if (!rc && write) rc = tensor_of(m, p, &tensor);
            if (!rc && write && tri_box_clip(&box, m->tensors[tensor].shape, &live)) {
                float *data = host;
                if (tri_box_numel(&live) != p->numel) { /* vocabulary padding: keep the real rows */
                    data = malloc((size_t)tri_box_numel(&live) * sizeof *data);
                    if (data)
                        tri_box_copy(&box, 0, p->numel, host, &live, data, NULL);
                    else
                        rc = TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", p->spec.name);
                }
                hid_t ds = -1;
                if (!rc) rc = tri_h5_write_f32(f, path, p->spec.name, live.ndim, live.shape, data, &ds);
                if (!rc) rc = tri_h5_attr_i64(ds, path, p->spec.name, "global_shape", live.ndim, m->tensors[tensor].shape);
                if (!rc) rc = tri_h5_attr_i64(ds, path, p->spec.name, "global_offset", live.ndim, live.off);
                if (ds >= 0)
                    H5Dclose(ds);
                if (!rc) rc = add_piece(entry, tensor, &live, 0, tri_box_numel(&live));
                if (data != host)
                    free(data);
            }
            free(host);
        }
    }
    int crc = write ? tri_h5_close(f, path) : TRI_OK;
    return rc ? rc : crc;
}

/* ---- the optimizer shard of one rank: Adam's m and v over the ranges it owns ---- */

static int write_moment_piece(hid_t f, const char *path, const char *group, const tri_param *p, const float *data,
                              int64_t lo, int64_t hi, const int64_t *gshape)
{
    char name[TRI_PARAM_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s/%s", group, p->spec.name);
    tri_box box = shard_box(p);
    int64_t len = hi - lo, range[2] = {lo, hi};
    hid_t ds = -1;
    int rc = tri_h5_write_f32(f, path, name, 1, &len, data, &ds);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "global_shape", box.ndim, gshape);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "shard_offset", box.ndim, box.off);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "shard_shape", box.ndim, box.shape);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "local_range", 2, range);
    if (ds >= 0)
        H5Dclose(ds);
    return rc;
}

static int write_optim(tri_trainer *t, const tri_ckpt_manifest *m, const char *path, int64_t iteration,
                       tri_ckpt_file *entry)
{
    hid_t f = -1;
    int rc = tri_h5_create(path, &f);
    if (!rc) rc = root_attrs(f, path, "optimizer", t, iteration);
    int64_t step = t->opt[0].step;
    if (!rc) rc = tri_h5_attr_i64(f, path, "/", "step", 1, &step);
    for (int c = 0; c < t->v && !rc; c++) {
        const tri_zero *z = t->chunks[c]->zero;
        const tri_param_layout *L = t->chunks[c]->layout;
        for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
            for (int i = 0; i < L->n && !rc; i++) {
                const tri_param *p = &L->params[i];
                int64_t s, n, at;
                if (!tri_zero_owned_piece(z, k, p, &s, &n, &at) || !stores(t, p))
                    continue;
                int tensor = -1;
                float *buf = malloc((size_t)n * sizeof *buf);
                rc = buf ? tensor_of(m, p, &tensor) : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory");
                const int64_t *gshape = rc ? NULL : m->tensors[tensor].shape;
                int64_t lo = s - p->offset, hi = lo + n;
                if (!rc) rc = tri_device_copy_to_host(t->dev, buf, tri_tensor_range(t->opt[c].m, at, n));
                if (!rc) rc = write_moment_piece(f, path, TRI_CKPT_EXP_AVG, p, buf, lo, hi, gshape);
                if (!rc) rc = tri_device_copy_to_host(t->dev, buf, tri_tensor_range(t->opt[c].v, at, n));
                if (!rc) rc = write_moment_piece(f, path, TRI_CKPT_EXP_AVG_SQ, p, buf, lo, hi, gshape);
                tri_box box = shard_box(p);
                if (!rc) rc = add_piece(entry, tensor, &box, lo, hi);
                free(buf);
            }
        }
    }
    int crc = tri_h5_close(f, path);
    return rc ? rc : crc;
}

/* ---- per-rank files and their manifest fragment ---- */

static void model_name(char *out, size_t cap, int tp, int pp)
{
    snprintf(out, cap, "model_tp%02d_pp%02d.h5", tp, pp);
}

static void optim_name(char *out, size_t cap, int tp, int pp, int dp)
{
    snprintf(out, cap, "optim_tp%02d_pp%02d_dp%03d.h5", tp, pp, dp);
}

static void fragment_name(char *out, size_t cap, int world_rank)
{
    snprintf(out, cap, "fragment_%05d.json", world_rank);
}

static bool writes_optim(const tri_trainer *t)
{
    return t->chunks[0]->zero->stage > 0 || t->grid->dp_rank == 0;
}

/* fsync, size and SHA-256 of a written file into its manifest entry. */
static int seal(const char *dir, tri_ckpt_file *e)
{
    char path[TRI_CKPT_PATH_MAX];
    int rc = tri_fs_join(path, sizeof path, dir, e->name);
    if (!rc) rc = tri_fs_fsync(path);
    if (!rc) rc = tri_sha256_file(path, e->sha256, &e->bytes);
    return rc;
}

static int write_rank_files(tri_trainer *t, const tri_ckpt_manifest *base, const char *tmp, int64_t iteration)
{
    const tri_grid *g = t->grid;
    tri_ckpt_manifest frag = *base;
    frag.n_files = 0;
    frag.files = NULL;
    tri_ckpt_file model = {.kind = TRI_CKPT_MODEL, .tp_rank = g->tp_rank, .pp_rank = g->pp_rank, .dp_rank = -1};
    tri_ckpt_file optim = {.kind = TRI_CKPT_OPTIM, .tp_rank = g->tp_rank, .pp_rank = g->pp_rank,
                           .dp_rank = t->chunks[0]->zero->stage > 0 ? g->dp_rank : 0};
    model_name(model.name, sizeof model.name, g->tp_rank, g->pp_rank);
    optim_name(optim.name, sizeof optim.name, g->tp_rank, g->pp_rank, optim.dp_rank);
    char path[TRI_CKPT_PATH_MAX];
    bool lead = g->dp_rank == 0;
    int rc = tri_fs_join(path, sizeof path, tmp, model.name);
    /* every dp rank takes part in reading the stage's parameters; dp rank 0 writes them */
    int mrc = write_model(t, base, path, iteration, lead && !rc, &model);
    rc = rc ? rc : mrc;
    if (!rc && lead) rc = seal(tmp, &model);
    if (!rc && lead) rc = tri_manifest_add_file(&frag, &model) < 0 ? TRI_ENOMEM : TRI_OK;
    if (!rc && writes_optim(t)) {
        rc = tri_fs_join(path, sizeof path, tmp, optim.name);
        if (!rc) rc = write_optim(t, base, path, iteration, &optim);
        if (!rc) rc = seal(tmp, &optim);
        if (!rc) rc = tri_manifest_add_file(&frag, &optim) < 0 ? TRI_ENOMEM : TRI_OK;
    }
    if (!rc && frag.n_files > 0) {
        char *json = NULL, name[64];
        fragment_name(name, sizeof name, g->world_rank);
        rc = tri_manifest_render(&frag, &json);
        if (!rc) rc = tri_fs_write_atomic(tmp, name, json, strlen(json));
        free(json);
    }
    free(model.pieces);
    free(optim.pieces);
    for (int i = 0; i < frag.n_files; i++)
        free(frag.files[i].pieces);
    free(frag.files);
    return rc;
}

/* ---- rank 0: the manifest from the fragments, the index, the rename, `latest`, pruning ---- */

static int collect_fragments(const tri_trainer *t, const char *tmp, tri_ckpt_manifest *m)
{
    const tri_grid *g = t->grid;
    int rc = TRI_OK;
    /* model files by (pp, tp), then optimizer shards by (pp, tp, dp) */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int pp = 0; pp < g->pp && !rc; pp++)
            for (int tp = 0; tp < g->tp && !rc; tp++)
                for (int dp = 0; dp < g->dp && !rc; dp++) {
                    bool optim_writer = t->chunks[0]->zero->stage > 0 || dp == 0;
                    if (!optim_writer)
                        continue;
                    char name[64], path[TRI_CKPT_PATH_MAX];
                    fragment_name(name, sizeof name, tri_grid_world_rank(g->tp, g->dp, tp, dp, pp));
                    char *json = NULL;
                    tri_ckpt_manifest frag;
                    rc = tri_fs_join(path, sizeof path, tmp, name);
                    if (!rc) rc = tri_fs_read_small(path, TRI_CKPT_MANIFEST_MAX, &json, NULL);
                    if (!rc) rc = tri_manifest_parse(&frag, json, path);
                    free(json);
                    if (rc)
                        break;
                    for (int i = 0; i < frag.n_files && !rc; i++) {
                        tri_ckpt_file_kind want = pass == 0 ? TRI_CKPT_MODEL : TRI_CKPT_OPTIM;
                        if (frag.files[i].kind == want && tri_manifest_add_file(m, &frag.files[i]) < 0)
                            rc = TRI_ENOMEM;
                    }
                    tri_manifest_free(&frag);
                    if (!rc && pass == 1) rc = remove(path) == 0 ? TRI_OK : TRI_ERR(TRI_EIO, "cannot remove %s", path);
                }
    return rc;
}

/* Removes leftovers of interrupted saves and prunes: iter_N.tmp / .trash directories go; of the
 * complete steps older than `iteration`, the newest keep - 1 stay (keep <= 0: all stay). */
static int tidy(const char *save_dir, int64_t iteration, int keep)
{
    DIR *d = opendir(save_dir);
    if (!d)
        return TRI_ERR(TRI_EIO, "cannot list %s", save_dir);
    int64_t *older = NULL;
    int n = 0, cap = 0, rc = TRI_OK;
    struct dirent *e;
    while ((e = readdir(d)) && !rc) {
        char base[TRI_CKPT_NAME_MAX], path[TRI_CKPT_PATH_MAX];
        const char *dot = strchr(e->d_name, '.');
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof base)
            continue;
        memcpy(base, e->d_name, strlen(e->d_name) + 1); /* fits: checked above */
        if (dot)
            base[dot - e->d_name] = '\0';
        int64_t it = tri_ckpt_parse_step_name(base);
        if (it < 0)
            continue;
        if (dot && (strcmp(dot, ".tmp") == 0 || strcmp(dot, ".trash") == 0) && it != iteration) {
            rc = tri_fs_join(path, sizeof path, save_dir, e->d_name);
            if (!rc) rc = tri_fs_remove_tree(path);
        } else if (!dot && it < iteration) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                int64_t *v = realloc(older, (size_t)cap * sizeof *v);
                if (!v) {
                    rc = TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory");
                    break;
                }
                older = v;
            }
            older[n++] = it;
        }
    }
    closedir(d);
    /* keep the newest keep - 1 older steps: remove the others, oldest first */
    for (int removed = 0; !rc && keep > 0 && n - removed > keep - 1; removed++) {
        int oldest = -1;
        for (int i = 0; i < n; i++)
            if (older[i] >= 0 && (oldest < 0 || older[i] < older[oldest]))
                oldest = i;
        char name[64], trash[80], path[TRI_CKPT_PATH_MAX], tpath[TRI_CKPT_PATH_MAX];
        tri_ckpt_step_name(older[oldest], name, sizeof name);
        snprintf(trash, sizeof trash, "%s.trash", name);
        older[oldest] = -1;
        rc = tri_fs_join(path, sizeof path, save_dir, name);
        if (!rc) rc = tri_fs_join(tpath, sizeof tpath, save_dir, trash);
        if (!rc && rename(path, tpath) != 0)
            rc = TRI_ERR(TRI_EIO, "cannot rename %s to %s", path, tpath);
        if (!rc) rc = tri_fs_remove_tree(tpath);
    }
    free(older);
    return rc;
}

/* Whether save_dir's `latest` names step `name`. */
static bool latest_is(const char *save_dir, const char *name)
{
    char step[TRI_CKPT_PATH_MAX], want[TRI_CKPT_PATH_MAX];
    if (tri_fs_join(want, sizeof want, save_dir, name))
        return false;
    int rc = tri_ckpt_resolve(save_dir, step, sizeof step);
    tri_error_clear();
    return rc == TRI_OK && strcmp(step, want) == 0;
}

static int publish(const tri_trainer *t, const char *save_dir, const char *tmp, const char *name,
                   tri_ckpt_manifest *m, const tri_ckpt_save_info *info)
{
    int rc = collect_fragments(t, tmp, m);
    tri_ckpt_file index = {.kind = TRI_CKPT_OTHER, .dp_rank = -1};
    snprintf(index.name, sizeof index.name, "%s", TRI_CKPT_INDEX);
    if (!rc) rc = tri_ckpt_write_index(m, tmp);
    if (!rc) rc = seal(tmp, &index);
    if (!rc) rc = tri_manifest_add_file(m, &index) < 0 ? TRI_ENOMEM : TRI_OK;
    if (!rc) rc = tri_manifest_write(m, tmp);
    if (!rc) rc = tri_fs_fsync(tmp);
    char final[TRI_CKPT_PATH_MAX], trash[TRI_CKPT_PATH_MAX + 8];
    if (!rc) rc = tri_fs_join(final, sizeof final, save_dir, name);
    if (!rc && tri_fs_exists(final)) {
        /* a step of the same number that `latest` does not name: left by a run killed between its
         * rename and its `latest` update, or by an abandoned branch of training */
        if (latest_is(save_dir, name))
            return TRI_ERR(TRI_EINVAL, "%s already exists and is the latest checkpoint; refusing to replace it",
                           final);
        snprintf(trash, sizeof trash, "%s.trash", final);
        if (rename(final, trash) != 0)
            return TRI_ERR(TRI_EIO, "cannot move the old %s aside", final);
        rc = tri_fs_remove_tree(trash);
    }
    if (!rc && rename(tmp, final) != 0)
        rc = TRI_ERR(TRI_EIO, "cannot rename %s to %s", tmp, final);
    if (!rc) rc = tri_fs_fsync(save_dir);
    char line[TRI_CKPT_NAME_MAX + 2];
    snprintf(line, sizeof line, "%.64s\n", name);
    if (!rc) rc = tri_fs_write_atomic(save_dir, TRI_CKPT_LATEST, line, strlen(line));
    if (!rc) rc = tidy(save_dir, info->iteration, info->keep_last);
    return rc;
}

static int make_base(const tri_trainer *t, const tri_ckpt_save_info *info, tri_ckpt_manifest *m)
{
    memset(m, 0, sizeof *m);
    m->format_version = TRI_CKPT_FORMAT_VERSION;
    snprintf(m->trident_version, sizeof m->trident_version, "%s", TRI_CKPT_VERSION);
    m->config_json = (char *)info->config_json;
    snprintf(m->model_name, sizeof m->model_name, "%s", info->model_name ? info->model_name : "");
    tri_ckpt_run_of(t, info->seed, &info->lr, &m->run);
    m->iteration = info->iteration;
    m->consumed_samples = info->iteration * m->run.global_batch;
    m->optimizer_step = t->opt[0].step;
    m->tensors = calloc((size_t)(info->n_specs > 0 ? info->n_specs : 1), sizeof *m->tensors);
    if (!m->tensors)
        return TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory");
    m->n_tensors = info->n_specs;
    for (int i = 0; i < info->n_specs; i++) {
        tri_ckpt_tensor *x = &m->tensors[i];
        snprintf(x->name, sizeof x->name, "%s", info->specs[i].name);
        x->ndim = info->specs[i].ndim;
        tri_ckpt_logical_shape(&info->specs[i], x->shape);
    }
    return TRI_OK;
}

int tri_ckpt_save(tri_trainer *t, const char *save_dir, const tri_ckpt_save_info *info)
{
    const tri_grid *g = t->grid;
    char name[64], tmp_name[80], tmp[TRI_CKPT_PATH_MAX];
    tri_ckpt_step_name(info->iteration, name, sizeof name);
    snprintf(tmp_name, sizeof tmp_name, "%s.tmp", name);
    tri_ckpt_manifest base;
    int rc = make_base(t, info, &base);
    if (!rc) rc = tri_fs_join(tmp, sizeof tmp, save_dir, tmp_name);
    if (!rc && g->world_rank == 0) {
        rc = tri_fs_mkdir_p(save_dir);
        if (!rc) rc = tri_fs_remove_tree(tmp);
        if (!rc) rc = tri_fs_mkdir_p(tmp);
    }
    rc = tri_ckpt_agree(t, rc);
    if (!rc) rc = write_rank_files(t, &base, tmp, info->iteration);
    rc = tri_ckpt_agree(t, rc);
    if (!rc && g->world_rank == 0) {
        tri_ckpt_manifest m = base;
        m.files = NULL;
        m.n_files = 0;
        rc = publish(t, save_dir, tmp, name, &m, info);
        for (int i = 0; i < m.n_files; i++)
            free(m.files[i].pieces);
        free(m.files);
        if (info->progress)
            info->progress(info->progress_ctx, "save", 1, 1);
    }
    free(base.tensors);
    rc = tri_ckpt_agree(t, rc);
    if (rc)
        return tri_error_context(rc, "saving checkpoint %s/%s", save_dir, name);
    return TRI_OK;
}
