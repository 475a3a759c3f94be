/* models/hf.c - Hugging Face model directories in and out of Trident, for any family with a
 * Hugging Face mapping (see hf.h).
 *
 * Reading: config.json picks the family and its config; the parameter list comes from the model's
 * one description (tri_model_all_specs, global order); each parameter is looked up in the files
 * under the family's name, checked against the shape the config gives it, widened to float32 and,
 * where the family stores it transposed, turned back to Trident's (out, in). Then every tensor the
 * files hold must be accounted for. Writing runs the same mapping backwards and serializes as
 * transformers' save_pretrained does (the safetensors bytes: checkpoints/safetensors.h; the shard
 * split: huggingface_hub's split_state_dict_into_shards). */
#include "models/hf.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/fsutil.h"
#include "engine/core/status.h"

#define MAX_SHARDS 100000

/* In place (rows, cols) -> (cols, rows) through a scratch copy. */
static int transpose(float *a, int64_t rows, int64_t cols)
{
    float *t = malloc((size_t)(rows * cols) * sizeof *t);
    if (!t)
        return TRI_ERR(TRI_ENOMEM, "out of memory transposing a %lld x %lld matrix", (long long)rows, (long long)cols);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            t[j * rows + i] = a[i * cols + j];
    memcpy(a, t, (size_t)(rows * cols) * sizeof *t);
    free(t);
    return TRI_OK;
}

/* ---- the family's mapping (model.h's hf_ hooks, with their defaults) ---- */

static int hf_shape(const tri_model_family *f, const char *name, int ndim, const int64_t *shape, int64_t *out)
{
    if (f->hf_shape)
        return f->hf_shape(name, ndim, shape, out);
    memcpy(out, shape, (size_t)ndim * sizeof *out);
    return ndim;
}

static bool hf_transposed(const tri_model_family *f, const char *name)
{
    return f->hf_transposed && f->hf_transposed(name);
}

/* A file's tensor name without the family's optional prefix. */
static const char *bare(const tri_model_family *f, const char *name)
{
    size_t n = f->hf_optional_prefix ? strlen(f->hf_optional_prefix) : 0;
    return n && strncmp(name, f->hf_optional_prefix, n) == 0 ? name + n : name;
}

/* ---- reading: config ---- */

/* DIR/config.json as a model of the family its "model_type" names (absent: gpt2). */
static int read_model(const char *dir, tri_model *m)
{
    char path[4200], *text = NULL, type[64] = "gpt2";
    size_t len = 0;
    int rc = tri_fs_join(path, sizeof path, dir, "config.json");
    if (!rc) rc = tri_fs_read_small(path, 1 << 20, &text, &len);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(text);
    const cJSON *t = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
    bool well_formed = cJSON_IsObject(root) && (!t || cJSON_IsString(t));
    if (cJSON_IsString(t))
        snprintf(type, sizeof type, "%s", t->valuestring);
    cJSON_Delete(root);
    const tri_model_family *f = well_formed ? tri_model_family_find(type) : NULL;
    if (!f) { /* the registry's message: bad JSON, or the model types it knows */
        rc = tri_model_parse(m, text, path);
        tri_model_free(m);
        free(text);
        return rc ? rc : TRI_ERR(TRI_EINTERNAL, "%s: model_type \"%s\" not found", path, type);
    }
    if (!f->hf_name) {
        free(text);
        return TRI_ERR(TRI_EINVAL, "%s: model_type \"%s\": Trident has no Hugging Face mapping for %s models", path,
                       type, f->title ? f->title : type);
    }
    rc = tri_model_config_new(f, f->hf_parse ? f->hf_parse : f->parse, text, path, &m->cfg);
    free(text);
    if (rc)
        return rc;
    m->family = f;
    m->owns_cfg = true;
    const char *base = strrchr(dir, '/');
    snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : dir);
    return TRI_OK;
}

/* ---- reading: the safetensors files ---- */

typedef struct hf_files {
    tri_st_file *f;
    int n;
} hf_files;

static void files_close(hf_files *h)
{
    for (int i = 0; i < h->n; i++)
        tri_st_close(&h->f[i]);
    free(h->f);
    h->f = NULL;
    h->n = 0;
}

static int files_add(hf_files *h, const char *path)
{
    tri_st_file *f = realloc(h->f, (size_t)(h->n + 1) * sizeof *f);
    if (!f)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory", path);
    h->f = f;
    int rc = tri_st_open(&h->f[h->n], path);
    h->n += !rc;
    return rc;
}

/* The shards of an index: each file named once, and the index and the files agree on every tensor. */
static int open_index(const char *dir, const char *index, hf_files *h)
{
    char *text = NULL;
    size_t len = 0;
    int rc = tri_fs_read_small(index, 64u << 20, &text, &len);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map))
        rc = TRI_ERR(TRI_ECORRUPT, "%s: expected a JSON object with a \"weight_map\" object", index);
    for (const cJSON *e = rc ? NULL : map->child; e && !rc; e = e->next) {
        if (!cJSON_IsString(e) || !tri_fs_safe_name(e->valuestring)) {
            rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: the weight_map value must be a file name in %s", index,
                         e->string, dir);
            break;
        }
        int k = -1;
        for (int i = 0; i < h->n && k < 0; i++)
            if (strcmp(strrchr(h->f[i].path, '/') + 1, e->valuestring) == 0)
                k = i;
        if (k < 0) {
            char path[4200];
            rc = tri_fs_join(path, sizeof path, dir, e->valuestring);
            if (!rc) rc = files_add(h, path);
            k = h->n - 1;
        }
        if (!rc && !tri_st_find(&h->f[k], e->string))
            rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s is mapped to %s, which does not hold it", index, e->string,
                         e->valuestring);
    }
    for (int i = 0; i < h->n && !rc; i++)
        for (int t = 0; t < h->f[i].n && !rc; t++) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(map, h->f[i].tensors[t].name);
            if (!e || strcmp(e->valuestring, strrchr(h->f[i].path, '/') + 1) != 0)
                rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s is in %s but the index maps it %s%s", index,
                             h->f[i].tensors[t].name, h->f[i].path, e ? "to " : "nowhere", e ? e->valuestring : "");
        }
    cJSON_Delete(root);
    return rc;
}

/* The tensor `hf` (a full name), or the same without the family's optional prefix, in any file. */
static const tri_st_tensor *files_find(const hf_files *h, const tri_model_family *f, const char *hf,
                                       const tri_st_file **file)
{
    for (int i = 0; i < h->n; i++) {
        const tri_st_tensor *t = tri_st_find(&h->f[i], hf);
        if (!t && bare(f, hf) != hf)
            t = tri_st_find(&h->f[i], bare(f, hf));
        if (t) {
            *file = &h->f[i];
            return t;
        }
    }
    return NULL;
}

static void shape_text(char *out, size_t cap, int ndim, const int64_t *shape)
{
    out[0] = '\0';
    for (int d = 0; d < ndim; d++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* Tensor t of file f has the Hugging Face shape (nd, want), or TRI_EINVAL naming both. */
static int check_shape(const tri_st_file *f, const tri_st_tensor *t, int nd, const int64_t *want)
{
    bool same = t->ndim == nd;
    for (int d = 0; same && d < nd; d++)
        same = t->shape[d] == want[d];
    if (same)
        return TRI_OK;
    char got[96], exp[96];
    shape_text(got, sizeof got, t->ndim, t->shape);
    shape_text(exp, sizeof exp, nd, want);
    return TRI_ERR(TRI_EINVAL, "%s: tensor %s has shape (%s); the config needs (%s)", f->path, t->name, got, exp);
}

/* Reads parameter `spec` from the files into *out (Trident's logical shape and layout). */
static int read_param(const hf_files *h, const tri_model_family *fam, const tri_param_spec *spec, float **out)
{
    char hf[TRI_ST_NAME_MAX];
    int64_t shape[TRI_MAX_DIMS], want[TRI_ST_MAX_DIMS];
    fam->hf_name(spec->name, hf, sizeof hf);
    tri_ckpt_logical_shape(spec, shape);
    int nd = hf_shape(fam, spec->name, spec->ndim, shape, want);
    const tri_st_file *f = NULL;
    const tri_st_tensor *t = files_find(h, fam, hf, &f);
    if (!t) {
        char alt[TRI_ST_NAME_MAX + 16] = "", of[TRI_PARAM_NAME_MAX + 32] = "";
        if (bare(fam, hf) != hf)
            snprintf(alt, sizeof alt, " (or %s)", bare(fam, hf));
        if (strcmp(hf, spec->name) != 0)
            snprintf(of, sizeof of, " for Trident's %s", spec->name);
        return TRI_ERR(TRI_EINVAL, "%s: no tensor %s%s%s%s", h->f[0].path, h->n > 1 ? "in any shard: " : "", hf, alt,
                       of);
    }
    int rc = check_shape(f, t, nd, want);
    if (rc)
        return rc;
    int64_t n = tri_st_numel(t);
    *out = malloc((size_t)(n ? n : 1) * sizeof **out);
    if (!*out)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for tensor %s", f->path, t->name);
    rc = tri_st_read_f32(f, t, *out);
    if (!rc && hf_transposed(fam, spec->name)) /* (in, out) -> (out, in) */
        rc = transpose(*out, t->shape[0], t->shape[1]);
    return rc;
}

/* A stored head x (file f) of a tied config has the shape of parameter `spec` it is tied to, and
 * equals its values `tied` (an embedding: stored as it is, not transposed). */
static int check_tied_head(const tri_model_family *fam, const tri_st_file *f, const tri_st_tensor *x,
                           const tri_param_spec *spec, const float *tied)
{
    int64_t shape[TRI_MAX_DIMS], want[TRI_ST_MAX_DIMS], n = 1;
    tri_ckpt_logical_shape(spec, shape);
    for (int d = 0; d < spec->ndim; d++)
        n *= shape[d];
    int rc = check_shape(f, x, hf_shape(fam, spec->name, spec->ndim, shape, want), want);
    if (rc)
        return rc;
    float *head = malloc((size_t)(n ? n : 1) * sizeof *head);
    if (!head)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for tensor %s", f->path, x->name);
    rc = tri_st_read_f32(f, x, head);
    if (!rc && memcmp(head, tied, (size_t)n * sizeof *head) != 0)
        rc = TRI_ERR(TRI_EINVAL, "%s: tensor %s differs from %s; the config ties the LM head to the token embedding "
                     "(tie_word_embeddings)", f->path, x->name, spec->name);
    free(head);
    return rc;
}

/* Every tensor of the files is a parameter read, a buffer the family skips, or a stored tied head
 * equal to what it is tied to. hf: the parameters' names without the optional prefix. */
static int check_leftovers(const hf_files *h, const tri_model *m, const tri_param_spec *specs,
                           char (*hf)[TRI_ST_NAME_MAX], const tri_host_weights *w)
{
    const tri_model_family *f = m->family;
    const char *param = NULL;
    const char *head = f->hf_tied_head ? f->hf_tied_head(m->cfg, &param) : NULL;
    int k = head ? tri_host_weights_find(w, param) : -1;
    if (head && k < 0)
        return TRI_ERR(TRI_EINTERNAL, "%s: the LM head is tied to %s, which is no parameter", m->name, param);
    for (int i = 0; i < h->n; i++)
        for (int t = 0; t < h->f[i].n; t++) {
            const tri_st_tensor *x = &h->f[i].tensors[t];
            const char *name = bare(f, x->name);
            bool known = f->hf_skipped && f->hf_skipped(x->name);
            for (int s = 0; s < w->n && !known; s++)
                known = strcmp(hf[s], name) == 0;
            if (known)
                continue;
            if (!head || strcmp(bare(f, head), name) != 0)
                return TRI_ERR(TRI_EINVAL, "%s: tensor %s is not a %s parameter", h->f[i].path, x->name,
                               f->title ? f->title : f->type);
            int rc = check_tied_head(f, &h->f[i], x, &specs[k], w->data[k]);
            if (rc)
                return rc;
        }
    return TRI_OK;
}

int tri_hf_read(const char *dir, tri_host_weights *w)
{
    memset(w, 0, sizeof *w);
    hf_files h = {0};
    char single[4200], index[4200];
    int rc = read_model(dir, &w->model);
    if (!rc) rc = tri_fs_join(single, sizeof single, dir, "model.safetensors");
    if (!rc) rc = tri_fs_join(index, sizeof index, dir, "model.safetensors.index.json");
    if (!rc) {
        if (tri_fs_exists(single)) /* transformers prefers the single file too */
            rc = files_add(&h, single);
        else if (tri_fs_exists(index))
            rc = open_index(dir, index, &h);
        else
            rc = TRI_ERR(TRI_EINVAL, "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
    }
    if (!rc && h.n == 0)
        rc = TRI_ERR(TRI_EINVAL, "%s: the index lists no shard", index);
    tri_param_spec *specs = NULL;
    char (*hf)[TRI_ST_NAME_MAX] = NULL;
    int n = 0;
    if (!rc) rc = tri_model_all_specs(&w->model, 1, &specs, &n);
    if (!rc) rc = tri_host_weights_alloc(w, n, dir);
    if (!rc && !(hf = calloc((size_t)(n ? n : 1), sizeof *hf)))
        rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", dir);
    const tri_model_family *f = w->model.family;
    for (int i = 0; i < n && !rc; i++) {
        snprintf(w->names[i], sizeof w->names[i], "%s", specs[i].name);
        char full[TRI_ST_NAME_MAX];
        f->hf_name(specs[i].name, full, sizeof full);
        snprintf(hf[i], sizeof hf[i], "%s", bare(f, full));
        rc = read_param(&h, f, &specs[i], &w->data[i]);
    }
    if (!rc) rc = check_leftovers(&h, &w->model, specs, hf, w);
    free(hf);
    free(specs);
    files_close(&h);
    if (rc)
        tri_host_weights_free(w);
    return rc;
}

/* ---- writing ---- */

typedef struct export_ctx {
    tri_ckpt_reader *r;
    const tri_ckpt_tensor *x;
    bool transposed;
} export_ctx;

/* An entry's values: the checkpoint's tensor in the Hugging Face layout. */
static int fill_from_checkpoint(void *ctx, const tri_st_entry *e, float *buf)
{
    const export_ctx *c = ctx;
    float *data = NULL;
    int rc = tri_ckpt_read_tensor(c->r, NULL, c->x->name, &data);
    if (rc)
        return rc;
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->shape[d];
    memcpy(buf, data, (size_t)n * sizeof *buf);
    free(data);
    return c->transposed ? transpose(buf, e->shape[1], e->shape[0]) : TRI_OK; /* (out, in) -> (in, out) */
}

static int write_config(const char *dir, const tri_model *m, tri_st_dtype dtype)
{
    char *text = NULL;
    const char *torch_dtype = dtype == TRI_ST_F32 ? "float32" : dtype == TRI_ST_BF16 ? "bfloat16" : "float16";
    int rc = m->family->hf_config(m->cfg, torch_dtype, &text);
    if (!rc) rc = tri_fs_write_atomic(dir, "config.json", text, strlen(text));
    free(text);
    return rc;
}

/* model.safetensors.index.json as transformers writes it: json.dumps(index, indent=2, sort_keys=True). */
static int write_index(const char *dir, tri_st_entry *e, const int *shard, int n, int n_shards, uint64_t total)
{
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    size_t cap = 256 + (size_t)n * (TRI_ST_NAME_MAX + 64), len = 0;
    char *buf = malloc(cap);
    if (!order || !buf) {
        free(order);
        free(buf);
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for the index", dir);
    }
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++) /* names sorted (insertion sort: a model has at most a few thousand) */
        for (int j = i; j > 0 && strcmp(e[order[j - 1]].name, e[order[j]].name) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    len += (size_t)snprintf(buf + len, cap - len, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n"
                            "  \"weight_map\": {\n", (unsigned long long)total);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "    \"%s\": \"model-%05d-of-%05d.safetensors\"%s\n",
                                e[order[i]].name, shard[order[i]] + 1, n_shards, i + 1 < n ? "," : "");
    len += (size_t)snprintf(buf + len, cap - len, "  }\n}\n");
    int rc = tri_fs_write_atomic(dir, "model.safetensors.index.json", buf, len);
    free(order);
    free(buf);
    return rc;
}

/* Shards in state_dict order as huggingface_hub's split_state_dict_into_shards does: tensors fill
 * the open shard until the next would exceed max; a tensor larger than max is a shard of its own,
 * numbered when it is met (before the open shard, which is numbered when it closes). Returns the
 * number of shards; shard[i] is tensor i's. */
static int assign_shards(const tri_st_entry *e, int n, uint64_t max, int *shard)
{
    int next = 0, first_open = 0; /* tensors [first_open, i) not oversized and unnumbered: the open shard */
    uint64_t size = 0;
    for (int i = 0; i < n; i++)
        shard[i] = -1;
    for (int i = 0; i < n; i++) {
        uint64_t b = tri_st_entry_bytes(&e[i]);
        if (b > max) {
            shard[i] = next++;
            continue;
        }
        if (size + b > max) { /* close the open shard */
            for (int j = first_open; j < i; j++)
                if (shard[j] < 0)
                    shard[j] = next;
            next++;
            first_open = i;
            size = 0;
        }
        size += b;
    }
    bool open = false;
    for (int j = first_open; j < n; j++)
        if (shard[j] < 0) {
            shard[j] = next;
            open = true;
        }
    return next + open;
}

/* The checkpoint's tensors in transformers' state_dict order (order[k]: the k-th tensor's index). */
static void state_dict_order(const tri_model *m, const tri_ckpt_manifest *man, int *order)
{
    int n = man->n_tensors;
    int64_t *key = malloc((size_t)(n ? n : 1) * sizeof *key);
    for (int i = 0; i < n; i++) {
        order[i] = i;
        if (key)
            key[i] = m->family->hf_position ? m->family->hf_position(m->cfg, man->tensors[i].name) : i;
    }
    for (int i = 1; key && i < n; i++) /* stable insertion sort by key */
        for (int j = i; j > 0 && key[order[j - 1]] > key[order[j]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    free(key);
}

int tri_hf_export(tri_ckpt_reader *r, const tri_model *model, const char *dir, tri_st_dtype dtype,
                  uint64_t max_shard_bytes)
{
    const tri_model_family *f = model->family;
    const tri_ckpt_manifest *m = &r->m;
    if (!f->hf_name || !f->hf_config)
        return TRI_ERR(TRI_EINVAL, "%s: Trident has no Hugging Face mapping for model_type \"%s\"", r->dir, f->type);
    int rc = tri_fs_mkdir_p(dir);
    int n = m->n_tensors;
    size_t room = n > 0 ? (size_t)n : 1;
    tri_st_entry *e = calloc(room, sizeof *e);
    export_ctx *ctx = calloc(room, sizeof *ctx);
    int *shard = calloc(room, sizeof *shard);
    int *order = calloc(room, sizeof *order);
    if (!rc && (!e || !ctx || !shard || !order))
        rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", dir);
    if (!rc)
        state_dict_order(model, m, order);
    uint64_t total = 0;
    for (int k = 0; k < n && !rc; k++) {
        const tri_ckpt_tensor *x = &m->tensors[order[k]];
        f->hf_name(x->name, e[k].name, sizeof e[k].name);
        e[k].dtype = dtype;
        e[k].ndim = hf_shape(f, x->name, x->ndim, x->shape, e[k].shape);
        ctx[k] = (export_ctx){.r = r, .x = x, .transposed = hf_transposed(f, x->name)};
        e[k].fill = fill_from_checkpoint;
        e[k].ctx = &ctx[k];
        total += tri_st_entry_bytes(&e[k]);
    }
    int n_shards = rc ? 0 : assign_shards(e, n, max_shard_bytes, shard);
    if (!rc && n_shards > MAX_SHARDS)
        rc = TRI_ERR(TRI_EINVAL, "%s: --max-shard-size %llu bytes makes %d shards (at most %d)", dir,
                     (unsigned long long)max_shard_bytes, n_shards, MAX_SHARDS);
    if (!rc && n_shards > 1) rc = write_index(dir, e, shard, n, n_shards, total);
    tri_st_entry *part = rc ? NULL : malloc(room * sizeof *part);
    if (!rc && !part)
        rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", dir);
    for (int s = 0; s < n_shards && !rc; s++) {
        int k = 0;
        for (int t = 0; t < n; t++)
            if (shard[t] == s)
                part[k++] = e[t];
        char name[64], path[4200];
        if (n_shards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        rc = tri_fs_join(path, sizeof path, dir, name);
        if (!rc) rc = tri_st_write(path, part, k);
    }
    if (!rc) rc = write_config(dir, model, dtype);
    if (!rc) rc = tri_fs_fsync(dir);
    free(part);
    free(order);
    free(shard);
    free(ctx);
    free(e);
    return rc;
}

/* ---- text ---- */

int tri_hf_parse_size(const char *text, uint64_t *bytes)
{
    static const struct { const char *unit; double scale; } units[] = {
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"", 1.0},
    };
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    for (size_t i = 0; errno == 0 && end != text && v > 0 && i < sizeof units / sizeof *units; i++)
        if (strcmp(end, units[i].unit) == 0 && v * units[i].scale < 1.8e19) {
            *bytes = (uint64_t)(v * units[i].scale);
            if (*bytes > 0)
                return TRI_OK;
        }
    return TRI_ERR(TRI_EINVAL, "--max-shard-size '%s': expected a positive size in bytes, or with KB/MB/GB (10^3) or "
                   "KiB/MiB/GiB (2^10) as transformers' max_shard_size takes it, e.g. 5GB", text);
}

void tri_hf_float_text(char *out, size_t cap, double v, bool single)
{
    char digits[48];
    int p = 1; /* significant digits: the fewest that read back */
    for (; p < 17; p++) {
        snprintf(digits, sizeof digits, "%.*e", p - 1, v);
        double back = strtod(digits, NULL);
        if (single ? (float)back == (float)v : back == v)
            break;
    }
    snprintf(digits, sizeof digits, "%.*e", p - 1, v);
    int exp = atoi(strchr(digits, 'e') + 1);
    if (exp < -4 || exp >= 16) { /* repr's exponent form: "1e-05", "1.5e+16" */
        snprintf(out, cap, "%s", digits);
        return;
    }
    int decimals = p - 1 - exp > 0 ? p - 1 - exp : 0;
    snprintf(out, cap, "%.*f%s", decimals, v, decimals ? "" : ".0");
}
