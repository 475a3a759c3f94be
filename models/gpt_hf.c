/* models/gpt_hf.c - GPT-2 to and from Hugging Face model directories (see gpt_formats.h).
 *
 * Names: Trident's "wte" / "wpe" are transformers' "transformer.wte.weight" / "...wpe.weight"; a
 * block's "h.<i>.<module>.w" / ".b" are "transformer.h.<i>.<module>.weight" / ".bias". Shapes: the
 * four Conv1D matrices are stored (in, out) there and (out, in) here, and c_attn's (3, C, C) / (3, C)
 * are (C, 3C) / (3C). Everything else is the same array. The parameter list comes from the model's
 * one description (tri_model_all_specs), in its global order, which is also GPT2LMHeadModel's
 * state_dict order, the order huggingface_hub fills shards in. */
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/fsutil.h"
#include "engine/core/status.h"
#include "models/gpt.h"
#include "models/gpt_formats.h"
#include "models/model.h"

#define PREFIX "transformer."
#define MAX_SHARDS 100000

/* ---- names and shapes ---- */

bool tri_gpt_hf_conv1d(const char *name)
{
    size_t n = strlen(name);
    return n > 2 && strcmp(name + n - 2, ".w") == 0 &&
           (strstr(name, ".attn.c_attn.") || strstr(name, ".attn.c_proj.") || strstr(name, ".mlp.c_fc.") ||
            strstr(name, ".mlp.c_proj."));
}

void tri_gpt_hf_name(const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    if (strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0)
        snprintf(out, cap, "%s.weight", name);
    else if (n > 2 && strcmp(name + n - 2, ".w") == 0)
        snprintf(out, cap, "%.*s.weight", (int)(n - 2), name);
    else if (n > 2 && strcmp(name + n - 2, ".b") == 0)
        snprintf(out, cap, "%.*s.bias", (int)(n - 2), name);
    else
        snprintf(out, cap, "%s", name);
}

int tri_gpt_hf_shape(const char *name, int ndim, const int64_t *shape, int64_t *out)
{
    int nd = ndim;
    memcpy(out, shape, (size_t)ndim * sizeof *out);
    if (strstr(name, ".attn.c_attn.")) { /* (3, C, C) -> (3C, C); (3, C) -> (3C) */
        nd = ndim - 1;
        out[0] = shape[0] * shape[1];
        for (int d = 1; d < nd; d++)
            out[d] = shape[d + 1];
    }
    if (tri_gpt_hf_conv1d(name)) {
        int64_t t = out[0];
        out[0] = out[1];
        out[1] = t;
    }
    return nd;
}

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

/* ---- reading: config ---- */

/* The config's dropout keys: Trident trains without dropout, so they are reported and dropped. */
static const char *dropout_keys[] = {"attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"};

static int read_config(const char *dir, tri_gpt_config *cfg)
{
    char path[4200], *text = NULL;
    size_t len = 0;
    int rc = tri_fs_join(path, sizeof path, dir, "config.json");
    if (!rc) rc = tri_fs_read_small(path, 1 << 20, &text, &len);
    if (rc)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return TRI_ERR(TRI_EINVAL, "%s: not a JSON object (a Hugging Face GPT2Config)", path);
    }
    for (size_t i = 0; i < sizeof dropout_keys / sizeof *dropout_keys; i++) {
        cJSON *d = cJSON_DetachItemFromObjectCaseSensitive(root, dropout_keys[i]);
        if (cJSON_IsNumber(d) && d->valuedouble != 0)
            fprintf(stderr, "%s: %s %g dropped (Trident trains without dropout)\n", path, dropout_keys[i],
                    d->valuedouble);
        cJSON_Delete(d);
    }
    char *clean = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    rc = clean ? tri_gpt_config_parse(cfg, clean, path) : TRI_ERR(TRI_ENOMEM, "%s: out of memory", path);
    free(clean);
    if (!rc) {
        const char *base = strrchr(dir, '/');
        snprintf(cfg->name, sizeof cfg->name, "%s", base && base[1] ? base + 1 : dir);
    }
    return rc;
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
    int listed = 0;
    for (const cJSON *e = rc ? NULL : map->child; e && !rc; e = e->next, listed++) {
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

/* The tensor `hf` (with or without the prefix) in any of the files. */
static const tri_st_tensor *files_find(const hf_files *h, const char *hf, const tri_st_file **file)
{
    char prefixed[TRI_ST_NAME_MAX + 16];
    snprintf(prefixed, sizeof prefixed, PREFIX "%s", hf);
    for (int i = 0; i < h->n; i++) {
        const tri_st_tensor *t = tri_st_find(&h->f[i], prefixed);
        if (!t) t = tri_st_find(&h->f[i], hf);
        if (t) {
            *file = &h->f[i];
            return t;
        }
    }
    return NULL;
}

/* Tensors GPT2LMHeadModel keeps that are not parameters: the causal-mask buffers. */
static bool skipped_buffer(const char *name)
{
    size_t n = strlen(name);
    return (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

/* Reads parameter `spec` from the files into *out (Trident's logical shape and layout). */
static int read_param(const hf_files *h, const tri_param_spec *spec, float **out)
{
    char hf[TRI_ST_NAME_MAX];
    int64_t shape[TRI_MAX_DIMS], want[TRI_MAX_DIMS];
    tri_gpt_hf_name(spec->name, hf, sizeof hf);
    tri_ckpt_logical_shape(spec, shape);
    int nd = tri_gpt_hf_shape(spec->name, spec->ndim, shape, want);
    const tri_st_file *f = NULL;
    const tri_st_tensor *t = files_find(h, hf, &f);
    if (!t)
        return TRI_ERR(TRI_EINVAL, "%s: no tensor %s" PREFIX "%s (or %s) for Trident's %s", h->f[0].path,
                       h->n > 1 ? "in any shard: " : "", hf, hf, spec->name);
    bool same = t->ndim == nd;
    for (int d = 0; same && d < nd; d++)
        same = t->shape[d] == want[d];
    if (!same) {
        char got[96] = "", exp[96] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        for (int d = 0; d < nd; d++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", d ? ", " : "", (long long)want[d]);
        return TRI_ERR(TRI_EINVAL, "%s: tensor %s has shape (%s); the config needs (%s)", f->path, t->name, got, exp);
    }
    int64_t n = tri_st_numel(t);
    *out = malloc((size_t)(n ? n : 1) * sizeof **out);
    if (!*out)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for tensor %s", f->path, t->name);
    int rc = tri_st_read_f32(f, t, *out);
    if (!rc && tri_gpt_hf_conv1d(spec->name)) /* (in, out) -> (out, in) */
        rc = transpose(*out, t->shape[0], t->shape[1]);
    return rc;
}

/* Every tensor of the files is a parameter read, a tied lm_head equal to wte, or a skipped buffer. */
static int check_leftovers(const hf_files *h, const tri_param_spec *specs, int n, const float *wte)
{
    for (int i = 0; i < h->n; i++)
        for (int t = 0; t < h->f[i].n; t++) {
            const tri_st_tensor *x = &h->f[i].tensors[t];
            const char *name = strncmp(x->name, PREFIX, strlen(PREFIX)) == 0 ? x->name + strlen(PREFIX) : x->name;
            bool known = skipped_buffer(name);
            for (int s = 0; s < n && !known; s++) {
                char hf[TRI_ST_NAME_MAX];
                tri_gpt_hf_name(specs[s].name, hf, sizeof hf);
                known = strcmp(hf, name) == 0;
            }
            if (known)
                continue;
            if (strcmp(name, "lm_head.weight") != 0)
                return TRI_ERR(TRI_EINVAL, "%s: tensor %s is not a GPT-2 parameter", h->f[i].path, x->name);
            int64_t numel = tri_st_numel(x);
            float *head = malloc((size_t)(numel ? numel : 1) * sizeof *head);
            if (!head)
                return TRI_ERR(TRI_ENOMEM, "%s: out of memory", h->f[i].path);
            int rc = tri_st_read_f32(&h->f[i], x, head);
            const tri_st_tensor *w = NULL;
            const tri_st_file *wf = NULL;
            w = files_find(h, "wte.weight", &wf);
            if (!rc && (tri_st_numel(w) != numel || memcmp(head, wte, (size_t)numel * sizeof *head) != 0))
                rc = TRI_ERR(TRI_EINVAL, "%s: tensor %s differs from wte; GPT-2 ties the LM head to the token "
                             "embedding", h->f[i].path, x->name);
            free(head);
            if (rc)
                return rc;
        }
    return TRI_OK;
}

int tri_hf_read(const char *dir, tri_gpt_host_weights *m)
{
    memset(m, 0, sizeof *m);
    hf_files h = {0};
    char single[4200], index[4200];
    int rc = read_config(dir, &m->cfg);
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
    int n = 0;
    if (!rc) {
        tri_model model = tri_gpt_model(&m->cfg);
        rc = tri_model_all_specs(&model, 1, &specs, &n);
    }
    if (!rc) {
        m->n = n;
        m->names = calloc((size_t)n, sizeof *m->names);
        m->data = calloc((size_t)n, sizeof *m->data);
        if (!m->names || !m->data)
            rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", dir);
    }
    for (int i = 0; i < n && !rc; i++) {
        snprintf(m->names[i], sizeof m->names[i], "%s", specs[i].name);
        rc = read_param(&h, &specs[i], &m->data[i]);
    }
    if (!rc) rc = check_leftovers(&h, specs, n, m->data[0]);
    free(specs);
    files_close(&h);
    if (rc)
        tri_gpt_host_weights_free(m);
    return rc;
}

/* ---- writing ---- */

typedef struct export_ctx {
    tri_ckpt_reader *r;
    const tri_ckpt_tensor *x; /* per entry */
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
    return tri_gpt_hf_conv1d(c->x->name) ? transpose(buf, e->shape[1], e->shape[0]) : TRI_OK; /* (out, in) -> (in, out) */
}

static int write_config(const char *dir, const tri_gpt_config *cfg, tri_st_dtype dtype)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "activation_function", "gelu_new");
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddNumberToObject(o, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "initializer_range", cfg->init_std);
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddNumberToObject(o, "n_ctx", cfg->n_positions);
    cJSON_AddNumberToObject(o, "n_embd", cfg->n_embd);
    cJSON_AddNumberToObject(o, "n_head", cfg->n_head);
    cJSON_AddNullToObject(o, "n_inner");
    cJSON_AddNumberToObject(o, "n_layer", cfg->n_layer);
    cJSON_AddNumberToObject(o, "n_positions", cfg->n_positions);
    cJSON_AddNumberToObject(o, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(o, "summary_first_dropout", 0.0);
    cJSON_AddTrueToObject(o, "tie_word_embeddings");
    cJSON_AddStringToObject(o, "torch_dtype",
                            dtype == TRI_ST_F32 ? "float32" : dtype == TRI_ST_BF16 ? "bfloat16" : "float16");
    cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for config.json", dir);
    size_t len = strlen(text);
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for config.json", dir);
    }
    memcpy(withnl + len, "\n", 2);
    int rc = tri_fs_write_atomic(dir, "config.json", withnl, len + 1);
    free(withnl);
    return rc;
}

/* model.safetensors.index.json as transformers writes it: json.dumps(index, indent=2, sort_keys=True). */
static int write_index(const char *dir, tri_st_entry *e, const int *shard, int n, int n_shards, uint64_t total)
{
    int *order = malloc((size_t)n * sizeof *order);
    char *buf = NULL;
    size_t cap = 256 + (size_t)n * (TRI_ST_NAME_MAX + 64), len = 0;
    buf = malloc(cap);
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

/* Shards in parameter order as huggingface_hub's split_state_dict_into_shards does: tensors fill
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

int tri_export_hf(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *dir, tri_st_dtype dtype,
                  uint64_t max_shard_bytes)
{
    const tri_ckpt_manifest *m = &r->m;
    if (tri_fs_exists(dir)) {
        bool empty = tri_fs_is_dir(dir);
        char probe[4200];
        if (empty && !tri_fs_join(probe, sizeof probe, dir, "config.json"))
            empty = !tri_fs_exists(probe);
        if (empty && !tri_fs_join(probe, sizeof probe, dir, "model.safetensors"))
            empty = !tri_fs_exists(probe);
        if (empty && !tri_fs_join(probe, sizeof probe, dir, "model.safetensors.index.json"))
            empty = !tri_fs_exists(probe);
        if (!empty)
            return TRI_ERR(TRI_EINVAL, "%s exists and holds a model (or is not a directory); export writes a new "
                           "directory", dir);
    }
    int n = m->n_tensors, rc = tri_fs_mkdir_p(dir);
    tri_st_entry *e = calloc((size_t)(n ? n : 1), sizeof *e);
    export_ctx *ctx = calloc((size_t)(n ? n : 1), sizeof *ctx);
    int *shard = calloc((size_t)(n ? n : 1), sizeof *shard);
    if (!rc && (!e || !ctx || !shard))
        rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", dir);
    uint64_t total = 0;
    for (int t = 0; t < n && !rc; t++) {
        const tri_ckpt_tensor *x = &m->tensors[t];
        char hf[TRI_PARAM_NAME_MAX + 8]; /* name + ".weight" */
        tri_gpt_hf_name(x->name, hf, sizeof hf);
        snprintf(e[t].name, sizeof e[t].name, PREFIX "%s", hf);
        e[t].dtype = dtype;
        e[t].ndim = tri_gpt_hf_shape(x->name, x->ndim, x->shape, e[t].shape);
        ctx[t] = (export_ctx){.r = r, .x = x};
        e[t].fill = fill_from_checkpoint;
        e[t].ctx = &ctx[t];
        total += tri_st_entry_bytes(&e[t]);
    }
    int n_shards = rc ? 0 : assign_shards(e, n, max_shard_bytes, shard);
    if (!rc && n_shards > MAX_SHARDS)
        rc = TRI_ERR(TRI_EINVAL, "%s: --max-shard-size %llu bytes makes %d shards (at most %d)", dir,
                     (unsigned long long)max_shard_bytes, n_shards, MAX_SHARDS);
    if (!rc && n_shards > 1) rc = write_index(dir, e, shard, n, n_shards, total);
    tri_st_entry *part = rc ? NULL : malloc((size_t)(n ? n : 1) * sizeof *part);
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
    if (!rc) rc = write_config(dir, cfg, dtype);
    if (!rc) rc = tri_fs_fsync(dir);
    free(part);
    free(shard);
    free(ctx);
    free(e);
    return rc;
}

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
