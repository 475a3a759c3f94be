/* models/gpt_formats.c - the single-file safetensors export, llm.c import and export (see
 * gpt_formats.h; Hugging Face directories are hf.c's, GPT-2's names and shapes there gpt_hf.c's). */
#include "models/gpt_formats.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/file.h"
#include "engine/core/status.h"
#include "models/gpt.h"

static int write_all(FILE *f, const void *p, size_t n, const char *path)
{
    if (fwrite(p, 1, n, f) != n)
        return TRI_ERR(TRI_EIO, "cannot write %s: %s", path, strerror(errno));
    return TRI_OK;
}

int tri_export_safetensors(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out)
{
    const tri_ckpt_manifest *m = &r->m;
    cJSON *header = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(header, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    cJSON_AddStringToObject(meta, "source", "Trident checkpoint");
    cJSON_AddStringToObject(meta, "config", m->config_json ? m->config_json : "{}");
    int64_t offset = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        const tri_ckpt_tensor *x = &m->tensors[t];
        char name[TRI_PARAM_NAME_MAX + 16];
        tri_gpt_hf_name(x->name, name, sizeof name);
        int64_t n = 1, shape[TRI_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++)
            n *= x->shape[d];
        int nd = tri_gpt_hf_shape(x->name, x->ndim, x->shape, shape);
        cJSON *e = cJSON_AddObjectToObject(header, name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *s = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < nd; d++)
            cJSON_AddItemToArray(s, cJSON_CreateNumber((double)shape[d]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(offset + 4 * n)));
        offset += 4 * n;
    }
    char *text = cJSON_PrintUnformatted(header);
    cJSON_Delete(header);
    if (!text)
        return TRI_ERR(TRI_ENOMEM, "safetensors: out of memory for the header");
    size_t len = strlen(text), padded = (len + 7) / 8 * 8; /* data aligned to 8 bytes */
    uint64_t hlen = (uint64_t)padded;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hlen >> (8 * i));
    FILE *f = fopen(out, "wb");
    if (!f) {
        free(text);
        return TRI_ERR(TRI_EIO, "cannot create %s: %s", out, strerror(errno));
    }
    int rc = write_all(f, le, 8, out);
    if (!rc) rc = write_all(f, text, len, out);
    for (size_t i = len; i < padded && !rc; i++)
        rc = write_all(f, " ", 1, out);
    free(text);
    for (int t = 0; t < m->n_tensors && !rc; t++) {
        const tri_ckpt_tensor *x = &m->tensors[t];
        float *data = NULL;
        rc = tri_ckpt_read_tensor(r, NULL, x->name, &data);
        if (rc)
            break;
        int64_t n = 1;
        for (int d = 0; d < x->ndim; d++)
            n *= x->shape[d];
        if (tri_gpt_hf_conv1d(x->name)) { /* (out, in) -> (in, out) */
            int64_t rows = x->ndim == 3 ? x->shape[0] * x->shape[1] : x->shape[0], cols = n / rows;
            float *tr = malloc((size_t)n * sizeof *tr);
            if (!tr) {
                free(data);
                rc = TRI_ERR(TRI_ENOMEM, "safetensors: out of memory for %s", x->name);
                break;
            }
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++)
                    tr[j * rows + i] = data[i * cols + j];
            free(data);
            data = tr;
        }
        rc = write_all(f, data, (size_t)n * sizeof *data, out);
        free(data);
    }
    if (fclose(f) != 0 && !rc)
        rc = TRI_ERR(TRI_EIO, "cannot write %s: %s", out, strerror(errno));
    (void)cfg;
    return rc;
}

/* ---- llm.c ---- */

/* llm.c's 16 tensors in file order, as (Trident block suffix or top-level name, per-layer or not). */
typedef struct llmc_tensor {
    const char *name;     /* Trident's name; for per-layer tensors the suffix after "h.<i>." */
    bool per_layer;
} llmc_tensor;

static const llmc_tensor llmc_order[16] = {
    {"wte", false}, {"wpe", false}, {"ln_1.w", true}, {"ln_1.b", true}, {"attn.c_attn.w", true},
    {"attn.c_attn.b", true}, {"attn.c_proj.w", true}, {"attn.c_proj.b", true}, {"ln_2.w", true},
    {"ln_2.b", true}, {"mlp.c_fc.w", true}, {"mlp.c_fc.b", true}, {"mlp.c_proj.w", true},
    {"mlp.c_proj.b", true}, {"ln_f.w", false}, {"ln_f.b", false},
};

/* Elements of llm.c tensor k for one layer (or whole, when not per layer); wte with Vp rows. */
static int64_t llmc_numel(int k, int64_t Vp, int64_t maxT, int64_t C)
{
    static const int64_t per_c2[16] = {0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 4, 0, 4, 0, 0, 0};
    static const int64_t per_c[16] = {0, 0, 1, 1, 0, 3, 0, 1, 1, 1, 0, 4, 0, 1, 1, 1};
    if (k == 0)
        return Vp * C;
    if (k == 1)
        return maxT * C;
    return per_c2[k] * C * C + per_c[k] * C;
}

int tri_export_llmc(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out)
{
    int64_t C = cfg->n_embd, V = cfg->vocab_size, Vp = (V + 127) / 128 * 128, L = cfg->n_layer;
    int32_t header[256] = {0};
    header[0] = TRI_LLMC_MAGIC;
    header[1] = 3;
    header[2] = cfg->n_positions;
    header[3] = cfg->vocab_size;
    header[4] = cfg->n_layer;
    header[5] = cfg->n_head;
    header[6] = cfg->n_embd;
    header[7] = (int32_t)Vp;
    FILE *f = fopen(out, "wb");
    if (!f)
        return TRI_ERR(TRI_EIO, "cannot create %s: %s", out, strerror(errno));
    int rc = write_all(f, header, sizeof header, out);
    for (int k = 0; k < 16 && !rc; k++)
        for (int64_t l = 0; l < (llmc_order[k].per_layer ? L : 1) && !rc; l++) {
            char name[TRI_PARAM_NAME_MAX];
            if (llmc_order[k].per_layer)
                snprintf(name, sizeof name, "h.%lld.%s", (long long)l, llmc_order[k].name);
            else
                snprintf(name, sizeof name, "%s", llmc_order[k].name);
            float *data = NULL;
            rc = tri_ckpt_read_tensor(r, NULL, name, &data);
            if (!rc) {
                int64_t n = k == 0 ? V * C : llmc_numel(k, Vp, cfg->n_positions, C);
                rc = write_all(f, data, (size_t)n * sizeof *data, out);
            }
            for (int64_t i = V * C; !rc && k == 0 && i < Vp * C; i++) /* padding rows: zeros */
                rc = write_all(f, &(float){0.0f}, sizeof(float), out);
            free(data);
        }
    if (fclose(f) != 0 && !rc)
        rc = TRI_ERR(TRI_EIO, "cannot write %s: %s", out, strerror(errno));
    return rc;
}

/* The header's model (cfg), version and padded vocabulary, validated. */
static int check_header(const char *path, const int32_t *h, tri_gpt_config *cfg, int *version, int *padded)
{
    if (h[0] != TRI_LLMC_MAGIC)
        return TRI_ERR(TRI_ECORRUPT, "%s: magic %d is not llm.c's model magic %d", path, h[0], TRI_LLMC_MAGIC);
    if (h[1] != 3 && h[1] != 1)
        return TRI_ERR(TRI_EINVAL, "%s: version %d; expected 3 (fp32, padded vocabulary) or 1 (fp32)", path, h[1]);
    const char *names[6] = {"max_seq_len", "vocab_size", "num_layers", "num_heads", "channels", "padded_vocab_size"};
    const int32_t max[6] = {1 << 20, 1 << 24, 4096, 4096, 1 << 16, 1 << 24};
    for (int i = 0; i < 6; i++) {
        int32_t v = h[2 + i];
        if (i == 5 && h[1] == 1)
            continue;
        if (v < 1 || v > max[i])
            return TRI_ERR(TRI_ECORRUPT, "%s: header field %s = %d is outside [1, %d]", path, names[i], v, max[i]);
    }
    *version = h[1];
    *padded = h[1] == 3 ? h[7] : h[3];
    if (*padded < h[3])
        return TRI_ERR(TRI_ECORRUPT, "%s: padded_vocab_size %d is below vocab_size %d", path, *padded, h[3]);
    if (h[6] % h[5] != 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: channels %d is not divisible by num_heads %d", path, h[6], h[5]);
    *cfg = (tri_gpt_config){.n_positions = h[2], .vocab_size = h[3], .n_layer = h[4], .n_head = h[5],
                            .n_embd = h[6], .init_std = 0.02f};
    const char *base = strrchr(path, '/');
    snprintf(cfg->name, sizeof cfg->name, "%s", base ? base + 1 : path);
    return TRI_OK;
}

/* w->model: GPT-2 of config cfg (a copy it owns). */
static int gpt_model_of(tri_host_weights *w, const tri_gpt_config *cfg)
{
    tri_gpt_config *own = malloc(sizeof *own);
    if (!own)
        return TRI_ERR(TRI_ENOMEM, "out of memory for a model config");
    *own = *cfg;
    w->model = tri_gpt_model(own);
    w->model.owns_cfg = true;
    return TRI_OK;
}

int tri_llmc_read(const char *path, tri_host_weights *w, int *version, int *padded_vocab)
{
    memset(w, 0, sizeof *w);
    tri_gpt_config cfg = {0};
    FILE *f = NULL;
    int orc = tri_file_fopen_read(path, &f);
    if (orc)
        return orc;
    int32_t h[256];
    int rc = fread(h, sizeof h, 1, f) == 1 ? check_header(path, h, &cfg, version, padded_vocab)
                                           : TRI_ERR(TRI_ECORRUPT, "%s: shorter than llm.c's 1024-byte header", path);
    int64_t C = cfg.n_embd, L = cfg.n_layer, Vp = rc ? 0 : *padded_vocab, V = cfg.vocab_size;
    int64_t total = 0;
    for (int k = 0; k < 16 && !rc; k++)
        total += llmc_numel(k, Vp, cfg.n_positions, C) * (llmc_order[k].per_layer ? L : 1);
    float *all = NULL;
    if (!rc) {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        if (size != 1024 + 4 * total)
            rc = TRI_ERR(TRI_ECORRUPT, "%s has %ld bytes; its header says 1024 + 4 x %lld parameters = %lld", path,
                         size, (long long)total, (long long)(1024 + 4 * total));
        all = rc ? NULL : malloc((size_t)total * sizeof *all);
        if (!rc && !all)
            rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory for %lld parameters", path, (long long)total);
        fseek(f, 1024, SEEK_SET);
        if (!rc && fread(all, sizeof *all, (size_t)total, f) != (size_t)total)
            rc = TRI_ERR(TRI_EIO, "error reading %s: %s", path, strerror(errno));
    }
    fclose(f);
    for (int64_t i = V * C; !rc && i < Vp * C; i++)
        if (all[i] != 0.0f)
            rc = TRI_ERR(TRI_EINVAL, "%s: wte's padding row %lld is not zero; llm.c writes zeros there", path,
                         (long long)(i / C));
    if (!rc) rc = gpt_model_of(w, &cfg);
    if (!rc) rc = tri_host_weights_alloc(w, 4 + 12 * (int)L, path);
    /* Trident's global order: wte, wpe, block 0's 12, ..., ln_f.w, ln_f.b */
    int64_t at = 0;
    for (int k = 0; k < 16 && !rc; k++)
        for (int64_t l = 0; l < (llmc_order[k].per_layer ? L : 1) && !rc; l++) {
            int64_t n = llmc_numel(k, Vp, cfg.n_positions, C), keep = k == 0 ? V * C : n;
            int idx = k < 2 ? k : k >= 14 ? 2 + 12 * (int)L + (k - 14) : 2 + 12 * (int)l + (k - 2);
            if (llmc_order[k].per_layer)
                snprintf(w->names[idx], sizeof w->names[idx], "h.%lld.%s", (long long)l, llmc_order[k].name);
            else
                snprintf(w->names[idx], sizeof w->names[idx], "%s", llmc_order[k].name);
            w->data[idx] = malloc((size_t)keep * sizeof(float));
            if (!w->data[idx])
                rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory", path);
            else
                memcpy(w->data[idx], all + at, (size_t)keep * sizeof(float));
            at += n;
        }
    free(all);
    if (rc)
        tri_host_weights_free(w);
    return rc;
}
