/* checkpoints/manifest.c - manifest JSON: render, strict parse, write, verified read (see manifest.h). */
#include "checkpoints/manifest.h"

#include <cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "engine/core/status.h"

/* The manifest's optimizer.type by tri_optimizer_kind: AdamW keeps the name it always had ("adamw",
 * every checkpoint before --optimizer), so those manifests read as before. */
static const char *const optimizer_types[] = {"adamw", "sgd", "lars", "lamb"};

const char *tri_ckpt_lr_style_name(tri_lr_style s)
{
    return s == TRI_LR_COSINE ? "cosine" : s == TRI_LR_LINEAR ? "linear" : "constant";
}

static const char *kind_name(tri_ckpt_file_kind k)
{
    return k == TRI_CKPT_MODEL ? "model" : k == TRI_CKPT_OPTIM ? "optimizer" : k == TRI_CKPT_OUTER ? "outer"
           : k == TRI_CKPT_REPLICA ? "replica" : "other";
}

/* ---- rendering ---- */

static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static cJSON *render_piece(const tri_ckpt_manifest *m, const tri_ckpt_piece *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tensor", m->tensors[p->tensor].name);
    cJSON_AddItemToObject(o, "offset", int_array(p->box.off, p->box.ndim));
    cJSON_AddItemToObject(o, "shape", int_array(p->box.shape, p->box.ndim));
    cJSON_AddItemToObject(o, "range", int_array((int64_t[]){p->lo, p->hi}, 2));
    return o;
}

static cJSON *render_file(const tri_ckpt_manifest *m, const tri_ckpt_file *f)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", f->name);
    cJSON_AddStringToObject(o, "kind", kind_name(f->kind));
    cJSON_AddNumberToObject(o, "tp", f->tp_rank);
    cJSON_AddNumberToObject(o, "pp", f->pp_rank);
    cJSON_AddNumberToObject(o, "dp", f->dp_rank);
    cJSON_AddNumberToObject(o, "bytes", (double)f->bytes);
    cJSON_AddStringToObject(o, "sha256", f->sha256);
    cJSON *pieces = cJSON_AddArrayToObject(o, "pieces");
    for (int i = 0; i < f->n_pieces; i++)
        cJSON_AddItemToArray(pieces, render_piece(m, &f->pieces[i]));
    return o;
}

int tri_manifest_render(const tri_ckpt_manifest *m, char **json)
{
    *json = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *config = m->config_json ? cJSON_Parse(m->config_json) : cJSON_CreateObject();
    if (!root || !config) {
        cJSON_Delete(root);
        cJSON_Delete(config);
        return TRI_ERR(TRI_EINVAL, "manifest: the model config is not valid JSON");
    }
    const tri_ckpt_run *r = &m->run;
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, r->seed);
    cJSON_AddStringToObject(root, "format", TRI_CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "format_version", TRI_CKPT_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "trident_version", TRI_CKPT_VERSION);
    cJSON_AddStringToObject(root, "model_name", m->model_name);
    cJSON_AddItemToObject(root, "config", config);
    cJSON_AddNumberToObject(root, "iteration", (double)m->iteration);
    cJSON *layout = cJSON_AddObjectToObject(root, "layout");
    cJSON_AddNumberToObject(layout, "tp", r->tp);
    cJSON_AddNumberToObject(layout, "pp", r->pp);
    cJSON_AddNumberToObject(layout, "dp", r->dp);
    cJSON_AddNumberToObject(layout, "zero_stage", r->zero_stage);
    cJSON_AddNumberToObject(layout, "virtual_chunks", r->v);
    cJSON_AddStringToObject(layout, "schedule", r->schedule);
    cJSON_AddBoolToObject(layout, "sequence_parallel", r->sequence_parallel);
    cJSON_AddBoolToObject(layout, "deterministic", r->deterministic);
    if (r->ep > 1) /* only then: dense and ep 1 manifests stay as they were */
        cJSON_AddNumberToObject(layout, "expert_model_parallel_size", r->ep);
    if (r->etp > 1) /* likewise: etp 1 manifests stay as they were */
        cJSON_AddNumberToObject(layout, "expert_tensor_parallel_size", r->etp);
    if (r->cp > 1) /* likewise: cp 1 manifests stay as they were */
        cJSON_AddNumberToObject(layout, "context_parallel_size", r->cp);
    cJSON *batch = cJSON_AddObjectToObject(root, "batch");
    cJSON_AddNumberToObject(batch, "micro_batch", (double)r->micro_batch);
    cJSON_AddNumberToObject(batch, "global_batch", (double)r->global_batch);
    cJSON_AddNumberToObject(batch, "seq_length", (double)r->seq_length);
    cJSON *data = cJSON_AddObjectToObject(root, "data");
    cJSON_AddNumberToObject(data, "consumed_samples", (double)m->consumed_samples);
    cJSON *rng = cJSON_AddObjectToObject(root, "rng");
    cJSON_AddStringToObject(rng, "seed", seed);
    cJSON_AddStringToObject(rng, "state", "none: Trident's generator is counter-based; initialisation and data "
                            "order are pure functions of (seed, indices), so the seed and the iteration "
                            "are the whole state");
    cJSON *lr = cJSON_AddObjectToObject(root, "lr_schedule");
    cJSON_AddNumberToObject(lr, "lr", r->lr.lr);
    cJSON_AddNumberToObject(lr, "min_lr", r->lr.min_lr);
    cJSON_AddNumberToObject(lr, "warmup_iters", (double)r->lr.warmup_iters);
    cJSON_AddNumberToObject(lr, "decay_iters", (double)r->lr.decay_iters);
    cJSON_AddStringToObject(lr, "style", tri_ckpt_lr_style_name(r->lr.style));
    cJSON *opt = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddStringToObject(opt, "type", optimizer_types[r->adamw.kind]);
    cJSON_AddNumberToObject(opt, "step", (double)m->optimizer_step);
    cJSON_AddNumberToObject(opt, "beta1", r->adamw.beta1);
    cJSON_AddNumberToObject(opt, "beta2", r->adamw.beta2);
    cJSON_AddNumberToObject(opt, "eps", r->adamw.eps);
    cJSON_AddNumberToObject(opt, "weight_decay", r->adamw.weight_decay);
    cJSON_AddNumberToObject(opt, "clip_grad", r->clip_grad);
    if (r->adamw.kind == TRI_OPT_SGD || r->adamw.kind == TRI_OPT_LARS) {
        cJSON_AddNumberToObject(opt, "momentum", r->adamw.momentum);
        cJSON_AddBoolToObject(opt, "nesterov", r->adamw.nesterov);
    }
    if (r->adamw.kind == TRI_OPT_LARS)
        cJSON_AddNumberToObject(opt, "lars_eta", r->adamw.lars_eta);
    if (r->adamw.kind == TRI_OPT_ADAM && r->adamw.freeze_step > 0) /* only then (absent: 0, never frozen) */
        cJSON_AddNumberToObject(opt, "freeze_step", (double)r->adamw.freeze_step);
    if (r->adamw.kind == TRI_OPT_ADAM && r->adamw.onebit_adam) /* only then (absent: false) */
        cJSON_AddBoolToObject(opt, "onebit_adam", true);
    cJSON_AddStringToObject(opt, "master_weights", "model");
    if (r->local.steps > 0) { /* only then: other manifests stay as they were */
        cJSON *ls = cJSON_AddObjectToObject(root, "local_sgd");
        cJSON_AddNumberToObject(ls, "steps", r->local.steps);
        cJSON_AddStringToObject(ls, "outer_optimizer", tri_outer_kind_name(r->local.outer));
        cJSON_AddNumberToObject(ls, "outer_lr", r->local.outer_lr);
        cJSON_AddNumberToObject(ls, "outer_momentum", r->local.outer_momentum);
        cJSON_AddNumberToObject(ls, "warmup_iters", (double)r->local.warmup_iters);
        cJSON_AddNumberToObject(ls, "outer_syncs", (double)m->outer_syncs);
        cJSON_AddBoolToObject(ls, "replicas_equal", m->replicas_equal);
    }
    if (r->compression.kind != TRI_COMPRESS_NONE) { /* only then, like local_sgd */
        const tri_compression *c = &r->compression;
        cJSON *gc = cJSON_AddObjectToObject(root, "grad_compression");
        cJSON_AddStringToObject(gc, "kind", tri_compression_name(c->kind));
        cJSON_AddNumberToObject(gc, "block_size", c->block_size);
        cJSON_AddNumberToObject(gc, "qsgd_levels", c->qsgd_levels);
        cJSON_AddNumberToObject(gc, "topk_fraction", c->topk_fraction);
        cJSON_AddNumberToObject(gc, "powersgd_rank", c->powersgd_rank);
        cJSON_AddNumberToObject(gc, "powersgd_start_iter", (double)c->powersgd_start_iter);
        if (c->kind != TRI_COMPRESS_POWERSGD && c->start_iter > 0) /* only then (absent: 0) */
            cJSON_AddNumberToObject(gc, "start_iter", (double)c->start_iter);
        bool two_phase = c->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE;
        if (two_phase) /* only then: allgather manifests stay as they were (absent: allgather) */
            cJSON_AddStringToObject(gc, "reduce", tri_compression_reduce_name(c->reduce));
        bool outer = r->local.steps > 0; /* local SGD: the outer reduction's residual too */
        char state[256];
        snprintf(state, sizeof state, "error_feedback%s%s%s per dp rank (replica files)%s%s%s",
                 two_phase ? " and server_error_feedback" : "", outer ? " and outer_error_feedback" : "",
                 outer && two_phase ? " and outer_server_error_feedback" : "",
                 m->powersgd_q ? "; powersgd_q" : "", m->outer_powersgd_q ? " and outer_powersgd_q" : "",
                 m->powersgd_q ? " per (tp, pp) from dp rank 0" : "");
        cJSON_AddStringToObject(gc, "state", state);
        /* optional (absent in older checkpoints: false): every copy's own residual is held
         * (error_feedback_copy), PowerSGD's Q is held (powersgd_q), and under local SGD the outer
         * reduction's (outer_powersgd_q) */
        cJSON_AddBoolToObject(gc, "residual_copies", m->residual_copies);
        if (c->kind == TRI_COMPRESS_POWERSGD)
            cJSON_AddBoolToObject(gc, "powersgd_q", m->powersgd_q);
        if (c->kind == TRI_COMPRESS_POWERSGD && outer)
            cJSON_AddBoolToObject(gc, "outer_powersgd_q", m->outer_powersgd_q);
    }
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    for (int i = 0; i < m->n_tensors; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", m->tensors[i].name);
        cJSON_AddStringToObject(t, "dtype", "float32");
        cJSON_AddItemToObject(t, "shape", int_array(m->tensors[i].shape, m->tensors[i].ndim));
        cJSON_AddItemToArray(tensors, t);
    }
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int i = 0; i < m->n_files; i++)
        cJSON_AddItemToArray(files, render_file(m, &m->files[i]));
    *json = cJSON_Print(root);
    cJSON_Delete(root);
    return *json ? TRI_OK : TRI_ERR(TRI_ENOMEM, "manifest: out of memory rendering JSON");
}

/* ---- parsing: every field typed and in range ---- */

typedef struct parser {
    const char *src;
} parser;

static int bad(const parser *p, const char *field, const char *what)
{
    return TRI_ERR(TRI_ECORRUPT, "%s: field '%s' %s", p->src, field, what);
}

static const cJSON *get(const parser *p, const cJSON *o, const char *key, int *rc)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && !*rc)
        *rc = bad(p, key, "is missing");
    return v;
}

static void get_i64(const parser *p, const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    int *rc)
{
    const cJSON *v = get(p, o, key, rc);
    if (*rc)
        return;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) {
        char what[128];
        snprintf(what, sizeof what, "must be an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        *rc = bad(p, key, what);
        return;
    }
    *out = (int64_t)d;
}

static void get_int(const parser *p, const cJSON *o, const char *key, int lo, int hi, int *out, int *rc)
{
    int64_t v = 0;
    get_i64(p, o, key, lo, hi, &v, rc);
    if (!*rc)
        *out = (int)v;
}

static void get_float(const parser *p, const cJSON *o, const char *key, float *out, int *rc)
{
    const cJSON *v = get(p, o, key, rc);
    if (*rc)
        return;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        *rc = bad(p, key, "must be a finite number");
        return;
    }
    *out = (float)v->valuedouble;
}

static void get_str(const parser *p, const cJSON *o, const char *key, char *out, size_t cap, int *rc)
{
    const cJSON *v = get(p, o, key, rc);
    if (*rc)
        return;
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap) {
        char what[64];
        snprintf(what, sizeof what, "must be a string of fewer than %zu characters", cap);
        *rc = bad(p, key, what);
        return;
    }
    snprintf(out, cap, "%s", v->valuestring);
}

static const cJSON *get_obj(const parser *p, const cJSON *o, const char *key, int *rc)
{
    const cJSON *v = get(p, o, key, rc);
    if (!*rc && !cJSON_IsObject(v))
        *rc = bad(p, key, "must be an object");
    return *rc ? NULL : v;
}

/* An array of n integers in [lo, hi] (n = -1: 1..TRI_MAX_DIMS of them, count in *n_out). */
static void get_ints(const parser *p, const cJSON *o, const char *key, int n, int64_t lo, int64_t hi,
                     int64_t *out, int *n_out, int *rc)
{
    const cJSON *v = get(p, o, key, rc);
    if (*rc)
        return;
    int size = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (size < 1 || size > TRI_MAX_DIMS || (n >= 0 && size != n)) {
        *rc = bad(p, key, "must be an array of the expected length");
        return;
    }
    for (int i = 0; i < size; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) {
            *rc = bad(p, key, "must hold integers in range");
            return;
        }
        out[i] = (int64_t)d;
    }
    if (n_out)
        *n_out = size;
}

#define MAX_DIM ((int64_t)1 << 40)

static int parse_tensors(const parser *p, const cJSON *arr, tri_ckpt_manifest *m)
{
    int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > 1000000)
        return bad(p, "tensors", "must be a non-empty array");
    m->tensors = calloc((size_t)n, sizeof *m->tensors);
    if (!m->tensors)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory", p->src);
    m->n_tensors = n;
    int rc = TRI_OK;
    for (int i = 0; i < n && !rc; i++) {
        const cJSON *t = cJSON_GetArrayItem(arr, i);
        tri_ckpt_tensor *x = &m->tensors[i];
        char dtype[16] = "";
        if (!cJSON_IsObject(t))
            return bad(p, "tensors", "must hold objects");
        get_str(p, t, "name", x->name, sizeof x->name, &rc);
        get_str(p, t, "dtype", dtype, sizeof dtype, &rc);
        get_ints(p, t, "shape", -1, 1, MAX_DIM, x->shape, &x->ndim, &rc);
        if (!rc && strcmp(dtype, "float32") != 0)
            rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s has dtype '%s'; this build reads float32", p->src, x->name, dtype);
        for (int j = 0; j < i && !rc; j++)
            if (strcmp(m->tensors[j].name, x->name) == 0)
                rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s is listed twice", p->src, x->name);
    }
    return rc;
}

static int parse_piece(const parser *p, const cJSON *o, const tri_ckpt_manifest *m, const char *file,
                       tri_ckpt_piece *pc)
{
    char name[TRI_PARAM_NAME_MAX] = "";
    int rc = TRI_OK, nd = 0;
    int64_t range[2] = {0, 0};
    if (!cJSON_IsObject(o))
        return bad(p, "pieces", "must hold objects");
    get_str(p, o, "tensor", name, sizeof name, &rc);
    if (rc)
        return rc;
    pc->tensor = tri_manifest_tensor(m, name);
    if (pc->tensor < 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: file %s stores tensor %s, which the manifest does not list", p->src,
                       file, name);
    const tri_ckpt_tensor *t = &m->tensors[pc->tensor];
    get_ints(p, o, "offset", t->ndim, 0, MAX_DIM, pc->box.off, &nd, &rc);
    get_ints(p, o, "shape", t->ndim, 1, MAX_DIM, pc->box.shape, &nd, &rc);
    get_ints(p, o, "range", 2, 0, (int64_t)1 << 62, range, NULL, &rc);
    if (rc)
        return tri_error_context(rc, "file %s, tensor %s", file, name);
    pc->box.ndim = t->ndim;
    pc->lo = range[0];
    pc->hi = range[1];
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (pc->box.shape[d] > MAX_DIM / (numel > 0 ? numel : 1))
            return TRI_ERR(TRI_ECORRUPT, "%s: file %s, tensor %s: the piece is too large", p->src, file, name);
        numel *= pc->box.shape[d];
    }
    if (pc->lo >= pc->hi || pc->hi > numel)
        return TRI_ERR(TRI_ECORRUPT, "%s: file %s, tensor %s: range [%lld, %lld) is not inside its %lld elements",
                       p->src, file, name, (long long)pc->lo, (long long)pc->hi, (long long)numel);
    return TRI_OK;
}

static int parse_file(const parser *p, const cJSON *o, tri_ckpt_manifest *m, tri_ckpt_file *f)
{
    char kind[16] = "";
    int rc = TRI_OK;
    if (!cJSON_IsObject(o))
        return bad(p, "files", "must hold objects");
    get_str(p, o, "name", f->name, sizeof f->name, &rc);
    get_str(p, o, "kind", kind, sizeof kind, &rc);
    get_int(p, o, "tp", 0, 1 << 20, &f->tp_rank, &rc);
    get_int(p, o, "pp", 0, 1 << 20, &f->pp_rank, &rc);
    get_int(p, o, "dp", -1, 1 << 20, &f->dp_rank, &rc);
    get_i64(p, o, "bytes", 0, MAX_DIM * 64, &f->bytes, &rc);
    get_str(p, o, "sha256", f->sha256, sizeof f->sha256, &rc);
    if (rc)
        return rc;
    if (!tri_fs_safe_name(f->name) || strcmp(f->name, TRI_CKPT_MANIFEST) == 0 ||
        strcmp(f->name, TRI_CKPT_MANIFEST_SUM) == 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: file name '%s' is not a plain file name of the checkpoint's "
                       "directory", p->src, f->name);
    if (!tri_sha256_valid_hex(f->sha256))
        return TRI_ERR(TRI_ECORRUPT, "%s: file %s: sha256 is not 64 lowercase hex digits", p->src, f->name);
    f->kind = strcmp(kind, "model") == 0 ? TRI_CKPT_MODEL : strcmp(kind, "optimizer") == 0 ? TRI_CKPT_OPTIM
              : strcmp(kind, "other") == 0 ? TRI_CKPT_OTHER : strcmp(kind, "outer") == 0 ? TRI_CKPT_OUTER
              : strcmp(kind, "replica") == 0 ? TRI_CKPT_REPLICA : (tri_ckpt_file_kind)-1;
    if ((int)f->kind < 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: file %s has kind '%s' (expected model, optimizer, outer, replica or "
                       "other)", p->src, f->name, kind);
    const cJSON *pieces = get(p, o, "pieces", &rc);
    if (rc)
        return rc;
    if (!cJSON_IsArray(pieces))
        return bad(p, "pieces", "must be an array");
    f->n_pieces = cJSON_GetArraySize(pieces);
    f->pieces = calloc((size_t)(f->n_pieces > 0 ? f->n_pieces : 1), sizeof *f->pieces);
    if (!f->pieces)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory", p->src);
    for (int i = 0; i < f->n_pieces && !rc; i++) {
        rc = parse_piece(p, cJSON_GetArrayItem(pieces, i), m, f->name, &f->pieces[i]);
        for (int j = 0; j < i && !rc; j++)
            if (f->pieces[j].tensor == f->pieces[i].tensor)
                rc = TRI_ERR(TRI_ECORRUPT, "%s: file %s stores tensor %s twice", p->src, f->name,
                             m->tensors[f->pieces[i].tensor].name);
    }
    return rc;
}

static int parse_run(const parser *p, const cJSON *root, tri_ckpt_manifest *m)
{
    int rc = TRI_OK;
    tri_ckpt_run *r = &m->run;
    const cJSON *layout = get_obj(p, root, "layout", &rc);
    const cJSON *batch = rc ? NULL : get_obj(p, root, "batch", &rc);
    const cJSON *data = rc ? NULL : get_obj(p, root, "data", &rc);
    const cJSON *rng = rc ? NULL : get_obj(p, root, "rng", &rc);
    const cJSON *lr = rc ? NULL : get_obj(p, root, "lr_schedule", &rc);
    const cJSON *opt = rc ? NULL : get_obj(p, root, "optimizer", &rc);
    if (rc)
        return rc;
    get_int(p, layout, "tp", 1, 1 << 20, &r->tp, &rc);
    get_int(p, layout, "pp", 1, 1 << 20, &r->pp, &rc);
    get_int(p, layout, "dp", 1, 1 << 20, &r->dp, &rc);
    get_int(p, layout, "zero_stage", 0, 3, &r->zero_stage, &rc);
    get_int(p, layout, "virtual_chunks", 1, 1 << 20, &r->v, &rc);
    get_str(p, layout, "schedule", r->schedule, sizeof r->schedule, &rc);
    const cJSON *sp = rc ? NULL : get(p, layout, "sequence_parallel", &rc);
    if (!rc && !cJSON_IsBool(sp))
        rc = bad(p, "sequence_parallel", "must be true or false");
    if (!rc)
        r->sequence_parallel = cJSON_IsTrue(sp);
    const cJSON *det = rc ? NULL : get(p, layout, "deterministic", &rc);
    if (!rc && !cJSON_IsBool(det))
        rc = bad(p, "deterministic", "must be true or false");
    if (!rc)
        r->deterministic = cJSON_IsTrue(det);
    r->ep = 1; /* optional: absent in dense, ep 1 and older checkpoints */
    if (!rc && cJSON_GetObjectItemCaseSensitive(layout, "expert_model_parallel_size"))
        get_int(p, layout, "expert_model_parallel_size", 1, 1 << 20, &r->ep, &rc);
    r->etp = 1; /* optional: absent at etp 1 and in older checkpoints */
    if (!rc && cJSON_GetObjectItemCaseSensitive(layout, "expert_tensor_parallel_size"))
        get_int(p, layout, "expert_tensor_parallel_size", 1, 1 << 20, &r->etp, &rc);
    r->cp = 1; /* optional: absent at cp 1 and in older checkpoints */
    if (!rc && cJSON_GetObjectItemCaseSensitive(layout, "context_parallel_size"))
        get_int(p, layout, "context_parallel_size", 1, 1 << 20, &r->cp, &rc);
    get_i64(p, batch, "micro_batch", 1, MAX_DIM, &r->micro_batch, &rc);
    get_i64(p, batch, "global_batch", 1, MAX_DIM, &r->global_batch, &rc);
    get_i64(p, batch, "seq_length", 1, MAX_DIM, &r->seq_length, &rc);
    get_i64(p, data, "consumed_samples", 0, MAX_DIM * 1024, &m->consumed_samples, &rc);
    char seed[32] = "", style[16] = "";
    get_str(p, rng, "seed", seed, sizeof seed, &rc);
    char *end = NULL;
    if (!rc) {
        r->seed = strtoull(seed, &end, 10);
        if (!seed[0] || *end || seed[0] == '-')
            rc = bad(p, "seed", "must be a decimal integer string");
    }
    get_float(p, lr, "lr", &r->lr.lr, &rc);
    get_float(p, lr, "min_lr", &r->lr.min_lr, &rc);
    get_i64(p, lr, "warmup_iters", 0, MAX_DIM, &r->lr.warmup_iters, &rc);
    get_i64(p, lr, "decay_iters", 0, MAX_DIM, &r->lr.decay_iters, &rc);
    get_str(p, lr, "style", style, sizeof style, &rc);
    if (!rc) {
        if (strcmp(style, "cosine") == 0)
            r->lr.style = TRI_LR_COSINE;
        else if (strcmp(style, "linear") == 0)
            r->lr.style = TRI_LR_LINEAR;
        else if (strcmp(style, "constant") == 0)
            r->lr.style = TRI_LR_CONSTANT;
        else
            rc = bad(p, "style", "must be cosine, linear or constant");
    }
    get_i64(p, opt, "step", 0, MAX_DIM, &m->optimizer_step, &rc);
    get_float(p, opt, "beta1", &r->adamw.beta1, &rc);
    get_float(p, opt, "beta2", &r->adamw.beta2, &rc);
    get_float(p, opt, "eps", &r->adamw.eps, &rc);
    get_float(p, opt, "weight_decay", &r->adamw.weight_decay, &rc);
    get_float(p, opt, "clip_grad", &r->clip_grad, &rc);
    /* the optimizer: "adamw" (every checkpoint before --optimizer), "sgd", "lars" or "lamb" */
    char type[16] = "";
    get_str(p, opt, "type", type, sizeof type, &rc);
    int kind = -1;
    for (int k = TRI_OPT_ADAM; k <= TRI_OPT_LAMB && !rc; k++)
        if (strcmp(type, optimizer_types[k]) == 0)
            kind = k;
    if (!rc && kind < 0)
        rc = bad(p, "type", "must be adamw, sgd, lars or lamb");
    if (!rc)
        r->adamw.kind = (tri_optimizer_kind)kind;
    if (!rc && (r->adamw.kind == TRI_OPT_SGD || r->adamw.kind == TRI_OPT_LARS)) {
        get_float(p, opt, "momentum", &r->adamw.momentum, &rc);
        const cJSON *nes = rc ? NULL : get(p, opt, "nesterov", &rc);
        if (!rc && !cJSON_IsBool(nes))
            rc = bad(p, "nesterov", "must be true or false");
        if (!rc)
            r->adamw.nesterov = cJSON_IsTrue(nes);
    }
    if (!rc && r->adamw.kind == TRI_OPT_LARS)
        get_float(p, opt, "lars_eta", &r->adamw.lars_eta, &rc);
    if (!rc && r->adamw.kind == TRI_OPT_ADAM && cJSON_GetObjectItemCaseSensitive(opt, "freeze_step"))
        get_i64(p, opt, "freeze_step", 0, MAX_DIM, &r->adamw.freeze_step, &rc); /* optional: absent is 0 */
    const cJSON *onebit = cJSON_GetObjectItemCaseSensitive(opt, "onebit_adam"); /* optional: absent is false */
    if (!rc && onebit && !cJSON_IsBool(onebit))
        rc = bad(p, "onebit_adam", "must be true or false");
    if (!rc && onebit)
        r->adamw.onebit_adam = cJSON_IsTrue(onebit);
    /* local SGD's state: optional (absent in every other checkpoint) */
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "local_sgd");
    if (!rc && ls) {
        char outer[16] = "";
        const cJSON *eq = NULL;
        get_int(p, ls, "steps", 1, 1 << 30, &r->local.steps, &rc);
        get_str(p, ls, "outer_optimizer", outer, sizeof outer, &rc);
        get_float(p, ls, "outer_lr", &r->local.outer_lr, &rc);
        get_float(p, ls, "outer_momentum", &r->local.outer_momentum, &rc);
        get_i64(p, ls, "outer_syncs", 0, MAX_DIM, &m->outer_syncs, &rc);
        if (!rc && cJSON_GetObjectItemCaseSensitive(ls, "warmup_iters"))
            get_i64(p, ls, "warmup_iters", 0, MAX_DIM, &r->local.warmup_iters, &rc);
        if (!rc) eq = get(p, ls, "replicas_equal", &rc);
        if (!rc && !cJSON_IsBool(eq))
            rc = bad(p, "replicas_equal", "must be true or false");
        if (!rc)
            m->replicas_equal = cJSON_IsTrue(eq);
        if (!rc && tri_outer_kind_parse(outer, &r->local.outer) != TRI_OK) {
            tri_error_clear();
            rc = bad(p, "outer_optimizer", "must be average or nesterov");
        }
    }
    /* the compressed dp reduction: optional (absent: none) */
    const cJSON *gc = cJSON_GetObjectItemCaseSensitive(root, "grad_compression");
    if (!rc && gc) {
        char ckind[16] = "";
        tri_compression *c = &r->compression;
        *c = tri_compression_defaults();
        get_str(p, gc, "kind", ckind, sizeof ckind, &rc);
        get_int(p, gc, "block_size", 1, 1 << 30, &c->block_size, &rc);
        get_int(p, gc, "qsgd_levels", 1, 1 << 30, &c->qsgd_levels, &rc);
        get_float(p, gc, "topk_fraction", &c->topk_fraction, &rc);
        get_int(p, gc, "powersgd_rank", 1, 1 << 30, &c->powersgd_rank, &rc);
        get_i64(p, gc, "powersgd_start_iter", 0, MAX_DIM, &c->powersgd_start_iter, &rc);
        static const char *const flags[3] = {"residual_copies", "powersgd_q", "outer_powersgd_q"};
        bool *dst[3] = {&m->residual_copies, &m->powersgd_q, &m->outer_powersgd_q};
        for (int f = 0; f < 3 && !rc; f++) { /* optional: absent in older checkpoints (false) */
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(gc, flags[f]);
            if (b && !cJSON_IsBool(b))
                rc = bad(p, flags[f], "must be true or false");
            *dst[f] = cJSON_IsTrue(b);
        }
        if (!rc && cJSON_GetObjectItemCaseSensitive(gc, "start_iter")) /* optional: absent is 0 */
            get_i64(p, gc, "start_iter", 0, MAX_DIM, &c->start_iter, &rc);
        int k = rc ? -1 : tri_compression_parse(ckind);
        if (!rc && k <= (int)TRI_COMPRESS_NONE)
            rc = bad(p, "kind", "must be 1bit, qsgd, topk or powersgd");
        if (!rc)
            c->kind = (tri_compression_kind)k;
        const cJSON *red = cJSON_GetObjectItemCaseSensitive(gc, "reduce"); /* optional: absent is allgather */
        int rd = !red ? (int)TRI_COMPRESS_REDUCE_ALLGATHER
                      : cJSON_IsString(red) ? tri_compression_reduce_parse(red->valuestring) : -1;
        if (!rc && rd < 0)
            rc = bad(p, "reduce", "must be allgather or two-phase");
        if (!rc)
            c->reduce = (tri_compression_reduce)rd;
    }
    return rc;
}

int tri_manifest_parse(tri_ckpt_manifest *m, const char *json, const char *source)
{
    memset(m, 0, sizeof *m);
    parser p = {source};
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return TRI_ERR(TRI_ECORRUPT, "%s: not a JSON object", source);
    }
    int rc = TRI_OK;
    char format[64] = "";
    get_str(&p, root, "format", format, sizeof format, &rc);
    if (!rc && strcmp(format, TRI_CKPT_FORMAT) != 0)
        rc = TRI_ERR(TRI_ECORRUPT, "%s: format '%s' is not %s", source, format, TRI_CKPT_FORMAT);
    get_int(&p, root, "format_version", 1, 1 << 20, &m->format_version, &rc);
    if (!rc && m->format_version != TRI_CKPT_FORMAT_VERSION)
        rc = TRI_ERR(TRI_EINVAL, "%s: format version %d; this build reads version %d", source, m->format_version,
                     TRI_CKPT_FORMAT_VERSION);
    get_str(&p, root, "trident_version", m->trident_version, sizeof m->trident_version, &rc);
    get_str(&p, root, "model_name", m->model_name, sizeof m->model_name, &rc);
    const cJSON *config = rc ? NULL : get_obj(&p, root, "config", &rc);
    if (!rc) {
        m->config_json = cJSON_PrintUnformatted(config);
        if (!m->config_json)
            rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", source);
    }
    get_i64(&p, root, "iteration", 0, MAX_DIM, &m->iteration, &rc);
    if (!rc) rc = parse_run(&p, root, m);
    const cJSON *tensors = rc ? NULL : get(&p, root, "tensors", &rc);
    if (!rc && !cJSON_IsArray(tensors))
        rc = bad(&p, "tensors", "must be an array");
    if (!rc) rc = parse_tensors(&p, tensors, m);
    const cJSON *files = rc ? NULL : get(&p, root, "files", &rc);
    if (!rc && (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1))
        rc = bad(&p, "files", "must be a non-empty array");
    if (!rc) {
        int n = cJSON_GetArraySize(files);
        m->files = calloc((size_t)n, sizeof *m->files);
        if (!m->files)
            rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", source);
        for (int i = 0; i < n && !rc; i++) {
            m->n_files = i + 1;
            rc = parse_file(&p, cJSON_GetArrayItem(files, i), m, &m->files[i]);
            for (int j = 0; j < i && !rc; j++)
                if (strcmp(m->files[j].name, m->files[i].name) == 0)
                    rc = TRI_ERR(TRI_ECORRUPT, "%s: file %s is listed twice", source, m->files[i].name);
        }
    }
    cJSON_Delete(root);
    if (rc)
        tri_manifest_free(m);
    return rc;
}

/* ---- files ---- */

int tri_manifest_write(const tri_ckpt_manifest *m, const char *dir)
{
    char *json = NULL;
    int rc = tri_manifest_render(m, &json);
    if (rc)
        return rc;
    size_t n = strlen(json);
    char sum[TRI_SHA256_HEX + 64];
    char hex[TRI_SHA256_HEX];
    tri_sha256_buffer(json, n, hex);
    snprintf(sum, sizeof sum, "%s  %s\n", hex, TRI_CKPT_MANIFEST);
    rc = tri_fs_write_atomic(dir, TRI_CKPT_MANIFEST, json, n);
    if (!rc) rc = tri_fs_write_atomic(dir, TRI_CKPT_MANIFEST_SUM, sum, strlen(sum));
    free(json);
    return rc;
}

int tri_manifest_read(tri_ckpt_manifest *m, const char *dir)
{
    memset(m, 0, sizeof *m);
    char sum_path[4096], path[4096];
    int rc = tri_fs_join(sum_path, sizeof sum_path, dir, TRI_CKPT_MANIFEST_SUM);
    if (!rc) rc = tri_fs_join(path, sizeof path, dir, TRI_CKPT_MANIFEST);
    if (rc)
        return rc;
    char *sum = NULL, *json = NULL;
    size_t n = 0, sn = 0;
    rc = tri_fs_read_small(sum_path, 256, &sum, &sn);
    if (rc)
        return tri_error_context(TRI_ECORRUPT, "%s is not a complete checkpoint", dir);
    /* exactly "<64 hex>  manifest.json\n" */
    char expect_tail[64];
    snprintf(expect_tail, sizeof expect_tail, "  %s\n", TRI_CKPT_MANIFEST);
    char hex[TRI_SHA256_HEX];
    if (sn != 64 + strlen(expect_tail) || strcmp(sum + 64, expect_tail) != 0) {
        free(sum);
        return TRI_ERR(TRI_ECORRUPT, "%s: expected one line '<sha256>  %s'", sum_path, TRI_CKPT_MANIFEST);
    }
    memcpy(hex, sum, 64);
    hex[64] = '\0';
    free(sum);
    if (!tri_sha256_valid_hex(hex))
        return TRI_ERR(TRI_ECORRUPT, "%s: the digest is not 64 lowercase hex digits", sum_path);
    rc = tri_fs_read_small(path, TRI_CKPT_MANIFEST_MAX, &json, &n);
    if (rc)
        return tri_error_context(TRI_ECORRUPT, "%s is not a complete checkpoint", dir);
    char got[TRI_SHA256_HEX];
    tri_sha256_buffer(json, n, got);
    if (strcmp(got, hex) != 0) {
        free(json);
        return TRI_ERR(TRI_ECORRUPT, "%s: SHA-256 %s does not match %s (%s): the manifest is corrupt", path, got,
                       sum_path, hex);
    }
    if (strlen(json) != n) {
        free(json);
        return TRI_ERR(TRI_ECORRUPT, "%s holds a NUL byte", path);
    }
    rc = tri_manifest_parse(m, json, path);
    free(json);
    return rc;
}

void tri_manifest_free(tri_ckpt_manifest *m)
{
    for (int i = 0; i < m->n_files; i++)
        free(m->files[i].pieces);
    free(m->files);
    free(m->tensors);
    free(m->config_json);
    memset(m, 0, sizeof *m);
}

int tri_manifest_tensor(const tri_ckpt_manifest *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return i;
    return -1;
}

int tri_manifest_add_file(tri_ckpt_manifest *m, const tri_ckpt_file *f)
{
    tri_ckpt_file *v = realloc(m->files, (size_t)(m->n_files + 1) * sizeof *v);
    if (!v)
        return TRI_ERR(TRI_ENOMEM, "manifest: out of memory");
    m->files = v;
    tri_ckpt_file *dst = &m->files[m->n_files];
    *dst = *f;
    dst->pieces = malloc((size_t)(f->n_pieces > 0 ? f->n_pieces : 1) * sizeof *dst->pieces);
    if (!dst->pieces)
        return TRI_ERR(TRI_ENOMEM, "manifest: out of memory");
    if (f->n_pieces > 0)
        memcpy(dst->pieces, f->pieces, (size_t)f->n_pieces * sizeof *dst->pieces);
    return m->n_files++;
}
