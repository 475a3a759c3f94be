/* checkpoints/save.c - atomic, collective save of a trainer (see checkpoint.h). */
#define _XOPEN_SOURCE 700
#include "checkpoints/checkpoint.h"
#include "checkpoints/save_steps.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/h5.h"
#include "engine/core/status.h"
#include "engine/train/state_shards.h"

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
    run->ep = t->grid->ep > 1 ? t->grid->ep : 1;
    run->etp = t->grid->etp > 1 ? t->grid->etp : 1;
    run->cp = t->grid->cp > 1 ? t->grid->cp : 1;
    run->zero_stage = t->chunks[0]->zero.stage;
    run->v = t->v;
    snprintf(run->schedule, sizeof run->schedule, "%s", t->train_sched->name);
    run->sequence_parallel = t->cfg.sequence_parallel;
    run->deterministic = t->chunks[0]->zero.deterministic;
    run->micro_batch = t->chunks[0]->samples_per_mb;
    run->global_batch = tri_trainer_global_batch(t);
    run->seq_length = t->chunks[0]->window - 1;
    run->seed = seed;
    run->lr = *lr;
    run->adamw = t->opt[0].cfg;
    run->clip_grad = t->cfg.clip_grad;
    run->local = t->cfg.local;
    run->local.final_iter = 0; /* the run's length, not its state */
    run->compression = t->chunks[0]->zero.comp.on ? t->chunks[0]->zero.comp.c : tri_compression_defaults();
    run->compression.seed = 0; /* the run's seed, recorded as such */
}

static int root_attrs(hid_t f, const char *path, const char *kind, const tri_ckpt_snapshot *s)
{
    int64_t coords[3] = {s->tp_rank, s->pp_rank, s->dp_rank};
    int64_t version = TRI_CKPT_FORMAT_VERSION, iteration = s->iteration;
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

/* ---- the model file of a (tp, pp) coordinate, written by its data-parallel rank 0 ---- */

/* One model entry: the TP shard clipped to the logical shape (wte keeps the real vocabulary rows). */
static int write_model_entry(hid_t f, const char *path, const tri_ckpt_manifest *m, const tri_ckpt_snapshot *s,
                             const tri_ckpt_snap_entry *e, tri_ckpt_file *entry)
{
    const int64_t *gshape = m->tensors[e->tensor].shape;
    tri_box live;
    if (!tri_box_clip(&e->shard, gshape, &live))
        return TRI_OK; /* a shard holding only vocabulary padding */
    const float *data = s->pool + e->data;
    float *clipped = NULL;
    int rc = TRI_OK;
    if (tri_box_numel(&live) != e->hi) {
        clipped = malloc((size_t)tri_box_numel(&live) * sizeof *clipped);
        if (!clipped)
            return TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", e->name);
        tri_box_copy(&e->shard, 0, e->hi, data, &live, clipped, NULL);
        data = clipped;
    }
    hid_t ds = -1;
    rc = tri_h5_write_f32(f, path, e->name, live.ndim, live.shape, data, &ds);
    if (!rc) rc = tri_h5_attr_i64(ds, path, e->name, "global_shape", live.ndim, gshape);
    if (!rc) rc = tri_h5_attr_i64(ds, path, e->name, "global_offset", live.ndim, live.off);
    if (ds >= 0)
        H5Dclose(ds);
    if (!rc) rc = add_piece(entry, e->tensor, &live, 0, tri_box_numel(&live));
    free(clipped);
    return rc;
}

static int write_model(const tri_ckpt_snapshot *s, const tri_ckpt_manifest *m, const char *path,
                       tri_ckpt_file *entry)
{
    hid_t f = -1;
    int rc = tri_h5_create(path, &f);
    if (!rc) rc = root_attrs(f, path, "model", s);
    for (int k = 0; k < s->n_model && !rc; k++)
        rc = write_model_entry(f, path, m, s, &s->model[k], entry);
    int crc = f >= 0 ? tri_h5_close(f, path) : TRI_OK;
    return rc ? rc : crc;
}

/* ---- the optimizer shard of one rank: Adam's m and v, or the momentum buffer, over the ranges it owns ---- */

static int write_moment_piece(hid_t f, const char *path, const char *group, const tri_ckpt_snap_entry *e,
                              const float *data, const int64_t *gshape)
{
    char name[TRI_PARAM_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s/%s", group, e->name);
    int64_t len = e->hi - e->lo, range[2] = {e->lo, e->hi};
    hid_t ds = -1;
    int rc = tri_h5_write_f32(f, path, name, 1, &len, data, &ds);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "global_shape", e->shard.ndim, gshape);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "shard_offset", e->shard.ndim, e->shard.off);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "shard_shape", e->shard.ndim, e->shard.shape);
    if (!rc) rc = tri_h5_attr_i64(ds, path, name, "local_range", 2, range);
    if (ds >= 0)
        H5Dclose(ds);
    return rc;
}

static int write_optim(const tri_ckpt_snapshot *s, const tri_ckpt_manifest *m, const char *path,
                       tri_ckpt_file *entry)
{
    hid_t f = -1;
    int rc = tri_h5_create(path, &f);
    if (!rc) rc = root_attrs(f, path, "optimizer", s);
    int64_t step = s->optimizer_step;
    if (!rc) rc = tri_h5_attr_i64(f, path, "/", "step", 1, &step);
    for (int k = 0; k < s->n_optim && !rc; k++) {
        const tri_ckpt_snap_entry *e = &s->optim[k];
        const int64_t *gshape = m->tensors[e->tensor].shape;
        const float *mom = s->pool + e->data;
        for (int g = 0; g < e->n_groups && !rc; g++)
            rc = write_moment_piece(f, path, e->groups[g], e, mom + g * (e->hi - e->lo), gshape);
        if (!rc) rc = add_piece(entry, e->tensor, &e->shard, e->lo, e->hi);
    }
    int crc = f >= 0 ? tri_h5_close(f, path) : TRI_OK;
    return rc ? rc : crc;
}

/* ---- local SGD: the outer state's slices, and this replica's own weights and moments ---- */

/* Every local entry of kind's groups as "<group>/<name>"; the first group's entries are the file's
 * pieces (the others share their ranges: momentum with the anchor, moments with the weights). */
static int write_local(const tri_ckpt_snapshot *s, const tri_ckpt_manifest *m, const char *path,
                       tri_ckpt_file *entry)
{
    hid_t f = -1;
    bool outer = entry->kind == TRI_CKPT_OUTER;
    int rc = tri_h5_create(path, &f);
    if (!rc) rc = root_attrs(f, path, outer ? "outer" : "replica", s);
    for (int k = 0; k < s->n_local && !rc; k++) {
        const tri_ckpt_snap_entry *e = &s->local[k];
        bool mine = outer ? e->group <= TRI_STATE_OUTER_MOMENTUM : e->group >= TRI_STATE_REPLICA_WEIGHTS;
        if (!mine)
            continue;
        rc = write_moment_piece(f, path, tri_state_group_name((tri_state_group)e->group), e, s->pool + e->data,
                                m->tensors[e->tensor].shape);
        /* the file's pieces: one group per tensor (the error feedback's only without local SGD, whose
         * replica weights cover the same ranges; the outer residual always shares them); a copy's
         * residual and PowerSGD's Q are no box (read back by their own rank) */
        bool local = m->run.local.steps > 0;
        if (!rc && (e->group == TRI_STATE_OUTER_ANCHOR || e->group == TRI_STATE_REPLICA_WEIGHTS ||
                    (e->group == TRI_STATE_EF_RESIDUAL && !local)))
            rc = add_piece(entry, e->tensor, &e->shard, e->lo, e->hi);
    }
    int crc = f >= 0 ? tri_h5_close(f, path) : TRI_OK;
    return rc ? rc : crc;
}

/* ---- per-rank files and their manifest fragment ---- */

static void model_name(char *out, size_t cap, int tp, int pp, int ep)
{
    if (ep > 0) /* an expert-parallel rank's own experts */
        snprintf(out, cap, "model_tp%02d_pp%02d_ep%03d.h5", tp, pp, ep);
    else
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

/* fsync, size and SHA-256 of a written file into its manifest entry. */
static int seal(const char *dir, tri_ckpt_file *e)
{
    char path[TRI_CKPT_PATH_MAX];
    int rc = tri_fs_join(path, sizeof path, dir, e->name);
    if (!rc) rc = tri_fs_fsync(path);
    if (!rc) rc = tri_sha256_file(path, e->sha256, &e->bytes);
    return rc;
}

/* Writes one file (model or optimizer) of this rank, seals it and adds it to the fragment. */
static int write_file(const tri_ckpt_snapshot *s, const tri_ckpt_pending *p, tri_ckpt_manifest *frag,
                      tri_ckpt_file *file)
{
    char path[TRI_CKPT_PATH_MAX];
    int rc = tri_fs_join(path, sizeof path, p->tmp, file->name);
    if (!rc) rc = file->kind == TRI_CKPT_MODEL   ? write_model(s, &p->base, path, file)
                  : file->kind == TRI_CKPT_OPTIM ? write_optim(s, &p->base, path, file)
                                                 : write_local(s, &p->base, path, file);
    if (!rc) rc = seal(p->tmp, file);
    if (!rc) rc = tri_manifest_add_file(frag, file) < 0 ? TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory") : TRI_OK;
    return rc;
}

int tri_ckpt_write_rank_files(const tri_ckpt_snapshot *s, const tri_ckpt_pending *p)
{
    tri_ckpt_manifest frag = p->base;
    frag.n_files = 0;
    frag.files = NULL;
    tri_ckpt_file model = {.kind = TRI_CKPT_MODEL, .tp_rank = s->tp_rank, .pp_rank = s->pp_rank, .dp_rank = -1};
    tri_ckpt_file optim = {.kind = TRI_CKPT_OPTIM, .tp_rank = s->tp_rank, .pp_rank = s->pp_rank,
                           .dp_rank = s->optim_dp};
    model_name(model.name, sizeof model.name, s->tp_rank, s->pp_rank, s->model_ep);
    optim_name(optim.name, sizeof optim.name, s->tp_rank, s->pp_rank, s->optim_dp);
    int rc = TRI_OK;
    if (s->writes_model)
        rc = write_file(s, p, &frag, &model);
    if (!rc && s->writes_optim)
        rc = write_file(s, p, &frag, &optim);
    tri_ckpt_file outer = {.kind = TRI_CKPT_OUTER, .tp_rank = s->tp_rank, .pp_rank = s->pp_rank, .dp_rank = s->dp_rank};
    tri_ckpt_file replica = outer;
    replica.kind = TRI_CKPT_REPLICA;
    snprintf(outer.name, sizeof outer.name, "outer_tp%02d_pp%02d_dp%03d.h5", s->tp_rank, s->pp_rank, s->dp_rank);
    snprintf(replica.name, sizeof replica.name, "replica_tp%02d_pp%02d_dp%03d.h5", s->tp_rank, s->pp_rank, s->dp_rank);
    if (!rc && s->writes_outer)
        rc = write_file(s, p, &frag, &outer);
    if (!rc && s->writes_local)
        rc = write_file(s, p, &frag, &replica);
    free(outer.pieces);
    free(replica.pieces);
    if (!rc && frag.n_files > 0) {
        char *json = NULL, name[64];
        fragment_name(name, sizeof name, s->world_rank);
        rc = tri_manifest_render(&frag, &json);
        if (!rc) rc = tri_fs_write_atomic(p->tmp, name, json, strlen(json));
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

static int collect_fragments(const tri_ckpt_pending *p, tri_ckpt_manifest *m)
{
    int rc = TRI_OK;
    /* model files by (pp, tp), then optimizer shards by (pp, tp, dp), then local SGD's outer and
     * replica files by (pp, tp, dp) */
    static const tri_ckpt_file_kind kinds[] = {TRI_CKPT_MODEL, TRI_CKPT_OPTIM, TRI_CKPT_OUTER, TRI_CKPT_REPLICA};
    bool per_replica = p->base.run.local.steps > 0 || p->base.run.compression.kind != TRI_COMPRESS_NONE;
    int passes = per_replica ? 4 : 2;
    for (int pass = 0; pass < passes && !rc; pass++)
        for (int pp = 0; pp < p->pp && !rc; pp++)
            for (int tp = 0; tp < p->tp && !rc; tp++)
                for (int dp = 0; dp < p->dp && !rc; dp++) {
                    bool optim_writer = p->zero_stage > 0 || dp == 0 || per_replica;
                    char name[64], path[TRI_CKPT_PATH_MAX];
                    fragment_name(name, sizeof name, tri_grid_world_rank(p->tp, p->dp, tp, dp, pp));
                    rc = tri_fs_join(path, sizeof path, p->tmp, name);
                    /* at ZeRO 0 the other dp ranks write a fragment only as an expert-parallel rank's
                     * first replica (its experts' model and optimizer files) */
                    if (rc || (!optim_writer && !tri_fs_exists(path)))
                        continue;
                    char *json = NULL;
                    tri_ckpt_manifest frag;
                    if (!rc) rc = tri_fs_read_small(path, TRI_CKPT_MANIFEST_MAX, &json, NULL);
                    if (!rc) rc = tri_manifest_parse(&frag, json, path);
                    free(json);
                    if (rc)
                        break;
                    for (int i = 0; i < frag.n_files && !rc; i++) {
                        if (frag.files[i].kind == kinds[pass] && tri_manifest_add_file(m, &frag.files[i]) < 0)
                            rc = TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory");
                    }
                    tri_manifest_free(&frag);
                    if (!rc && pass == passes - 1) rc = remove(path) == 0 ? TRI_OK : TRI_ERR(TRI_EIO, "cannot remove %s: %s", path, strerror(errno));
                }
    return rc;
}

/* Removes leftovers of interrupted saves and prunes: iter_N.tmp / .trash directories go; of the
 * complete steps older than `iteration`, the newest keep - 1 stay (keep <= 0: all stay). */
static int tidy(const char *save_dir, int64_t iteration, int keep)
{
    DIR *d = opendir(save_dir);
    if (!d)
        return TRI_ERR(TRI_EIO, "cannot list %s: %s", save_dir, strerror(errno));
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
            rc = TRI_ERR(TRI_EIO, "cannot rename %s to %s: %s", path, tpath, strerror(errno));
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

/* The manifest from the fragments, the index, the rename, `latest`, pruning (see save_steps.h). */
static int publish_into(const tri_ckpt_pending *p, tri_ckpt_manifest *m)
{
    int rc = collect_fragments(p, m);
    tri_ckpt_file index = {.kind = TRI_CKPT_OTHER, .dp_rank = -1};
    snprintf(index.name, sizeof index.name, "%s", TRI_CKPT_INDEX);
    if (!rc) rc = tri_ckpt_write_index(m, p->tmp);
    if (!rc) rc = seal(p->tmp, &index);
    if (!rc) rc = tri_manifest_add_file(m, &index) < 0 ? TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory") : TRI_OK;
    if (!rc) rc = tri_manifest_write(m, p->tmp);
    if (!rc) rc = tri_fs_fsync(p->tmp);
    char final[TRI_CKPT_PATH_MAX], trash[TRI_CKPT_PATH_MAX + 8];
    if (!rc) rc = tri_fs_join(final, sizeof final, p->save_dir, p->name);
    if (!rc && tri_fs_exists(final)) {
        /* a step of the same number that `latest` does not name: left by a run killed between its
         * rename and its `latest` update, or by an abandoned branch of training */
        if (latest_is(p->save_dir, p->name))
            return TRI_ERR(TRI_EINVAL, "%s already exists and is the latest checkpoint; refusing to replace it",
                           final);
        snprintf(trash, sizeof trash, "%s.trash", final);
        if (rename(final, trash) != 0)
            return TRI_ERR(TRI_EIO, "cannot move the old %s aside: %s", final, strerror(errno));
        rc = tri_fs_remove_tree(trash);
    }
    if (!rc && rename(p->tmp, final) != 0)
        rc = TRI_ERR(TRI_EIO, "cannot rename %s to %s: %s", p->tmp, final, strerror(errno));
    if (!rc) rc = tri_fs_fsync(p->save_dir);
    char line[TRI_CKPT_NAME_MAX + 2];
    snprintf(line, sizeof line, "%.64s\n", p->name);
    if (!rc) rc = tri_fs_write_atomic(p->save_dir, TRI_CKPT_LATEST, line, strlen(line));
    if (!rc) rc = tidy(p->save_dir, p->iteration, p->keep_last);
    return rc;
}

int tri_ckpt_publish(const tri_ckpt_pending *p)
{
    tri_ckpt_manifest m = p->base;
    m.files = NULL;
    m.n_files = 0;
    int rc = publish_into(p, &m);
    for (int i = 0; i < m.n_files; i++)
        free(m.files[i].pieces);
    free(m.files);
    return rc;
}

static int make_base(const tri_trainer *t, const tri_ckpt_save_info *info, tri_ckpt_manifest *m)
{
    memset(m, 0, sizeof *m);
    m->format_version = TRI_CKPT_FORMAT_VERSION;
    snprintf(m->trident_version, sizeof m->trident_version, "%s", TRI_CKPT_VERSION);
    m->config_json = strdup(info->config_json ? info->config_json : "{}");
    snprintf(m->model_name, sizeof m->model_name, "%s", info->model_name ? info->model_name : "");
    tri_ckpt_run_of(t, info->seed, &info->lr, &m->run);
    m->iteration = info->iteration;
    m->consumed_samples = info->iteration * m->run.global_batch;
    m->optimizer_step = t->opt[0].step;
    m->outer_syncs = t->outer_syncs;
    m->replicas_equal = !t->replicas_apart;
    m->residual_copies = m->run.compression.kind != TRI_COMPRESS_NONE;
    m->powersgd_q = m->run.compression.kind == TRI_COMPRESS_POWERSGD;
    m->outer_powersgd_q = m->powersgd_q && m->run.local.steps > 0;
    m->tensors = calloc((size_t)(info->n_specs > 0 ? info->n_specs : 1), sizeof *m->tensors);
    if (!m->tensors || !m->config_json)
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

int tri_ckpt_pending_begin(tri_ckpt_pending *p, tri_trainer *t, const char *save_dir,
                           const tri_ckpt_save_info *info)
{
    const tri_grid *g = t->grid;
    memset(p, 0, sizeof *p);
    p->iteration = info->iteration;
    p->keep_last = info->keep_last;
    p->tp = g->tp;
    p->pp = g->pp;
    p->dp = g->dp * (g->cp > 1 ? g->cp : 1); /* the files' replicas: dp x cp (checkpoint.h) */
    p->zero_stage = t->chunks[0]->zero.stage;
    p->lead = g->world_rank == 0;
    tri_ckpt_step_name(info->iteration, p->name, sizeof p->name);
    char tmp_name[80];
    snprintf(tmp_name, sizeof tmp_name, "%s.tmp", p->name);
    int rc = make_base(t, info, &p->base);
    if (!rc && (size_t)snprintf(p->save_dir, sizeof p->save_dir, "%s", save_dir) >= sizeof p->save_dir)
        rc = TRI_ERR(TRI_EINVAL, "checkpoint directory %s: path too long", save_dir);
    if (!rc) rc = tri_fs_join(p->tmp, sizeof p->tmp, save_dir, tmp_name);
    if (!rc && p->lead) {
        rc = tri_fs_mkdir_p(save_dir);
        if (!rc) rc = tri_fs_remove_tree(p->tmp);
        if (!rc) rc = tri_fs_mkdir_p(p->tmp);
    }
    return tri_comm_agree(t->grid->world, rc);
}

int tri_ckpt_pending_abandon(const tri_ckpt_pending *p, int rc)
{
    if (!p->lead || !p->tmp[0] || !tri_fs_exists(p->tmp))
        return rc;
    char why[2048], msg[4096 + TRI_CKPT_PATH_MAX];
    snprintf(why, sizeof why, "%s", tri_error_message());
    if (tri_fs_remove_tree(p->tmp) == TRI_OK)
        snprintf(msg, sizeof msg, "%s; the partial step %s was removed (the last good step and `latest` are "
                 "untouched)", why, p->tmp);
    else
        snprintf(msg, sizeof msg, "%s; the partial step %s could not be removed (%s); the last good step and "
                 "`latest` are untouched", why, p->tmp, tri_error_message());
    return tri_error_restore(rc, msg);
}

void tri_ckpt_pending_free(tri_ckpt_pending *p)
{
    free(p->base.config_json);
    free(p->base.tensors);
    memset(p, 0, sizeof *p);
}

int tri_ckpt_save(tri_trainer *t, const char *save_dir, const tri_ckpt_save_info *info)
{
    tri_ckpt_pending p;
    int rc = tri_ckpt_pending_begin(&p, t, save_dir, info); /* agreed: every rank goes on, or none */
    if (!rc) {
        tri_ckpt_snapshot snap = {0};
        rc = tri_ckpt_snapshot_take(&snap, t, &p.base, info->iteration);
        if (!rc) rc = tri_ckpt_write_rank_files(&snap, &p);
        tri_ckpt_snapshot_free(&snap);
        rc = tri_comm_agree(t->grid->world, rc);
        if (!rc && p.lead) {
            rc = tri_ckpt_publish(&p);
            if (info->progress)
                info->progress(info->progress_ctx, "save", 1, 1);
        }
        rc = tri_comm_agree(t->grid->world, rc);
    }
    if (rc)
        rc = tri_ckpt_pending_abandon(&p, tri_error_context(rc, "saving checkpoint %s/%s", save_dir, p.name));
    tri_ckpt_pending_free(&p);
    return rc;
}
