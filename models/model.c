/* models/model.c - the registry of model families and reading a config into one (see model.h). */
#include "models/model.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/config_file.h"
#include "models/gpt.h"
#include "models/llama.h"

/* The registered families: a new one is added here. */
static const tri_model_family *const families[] = {&tri_gpt2_family, &tri_llama_family, &tri_mixtral_family,
                                                     &tri_qwen3_family, &tri_qwen3_moe_family};

const tri_model_family *tri_model_family_find(const char *type)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i]->type, type) == 0)
            return families[i];
    return NULL;
}

/* The config's "model_type" ("gpt2" when absent: *absent set). */
static int model_type(const char *json, const char *source, char *type, size_t cap, bool *absent)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root)
        return TRI_ERR(TRI_EINVAL, "%s: invalid JSON near byte %zu", source, end ? (size_t)(end - json) : (size_t)0);
    const cJSON *t = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
    int rc = TRI_OK;
    *absent = !t;
    if (!t)
        snprintf(type, cap, "gpt2");
    else if (!cJSON_IsString(t))
        rc = TRI_ERR(TRI_EINVAL, "%s: \"model_type\" must be a string (a model family, e.g. \"gpt2\")", source);
    else
        snprintf(type, cap, "%s", t->valuestring);
    cJSON_Delete(root);
    return rc;
}

/* A config without "model_type" that GPT-2 (the default) refused: when another family reads it, the
 * user forgot the key (a Llama config.json written by hand, say); say so instead of GPT-2's complaint
 * about the other family's keys. Returns rc, its message extended either way. */
static int missing_model_type(int rc, const char *json, const char *source, const tri_model_family *tried)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", tri_error_message());
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        if (families[i] == tried)
            continue;
        void *cfg = NULL;
        int frc = tri_model_config_new(families[i], families[i]->parse, json, source, &cfg);
        free(cfg);
        if (frc == TRI_OK)
            return TRI_ERR(rc, "%s: no \"model_type\" key, so it was read as \"%s\" (the default), but its keys "
                           "are a \"%s\" config's: add \"model_type\": \"%s\"", source, tried->type,
                           families[i]->type, families[i]->type);
    }
    tri_error_restore(rc, why);
    return tri_error_context(rc, "no \"model_type\" key (read as \"%s\", the default)", tried->type);
}

int tri_model_parse(tri_model *m, const char *json, const char *source)
{
    *m = (tri_model){0}; /* tri_model_free is safe whatever fails below */
    char type[64];
    bool absent = false;
    int rc = model_type(json, source, type, sizeof type, &absent);
    if (rc)
        return rc;
    const tri_model_family *f = tri_model_family_find(type);
    if (!f) {
        char known[256] = "";
        size_t used = 0;
        for (size_t i = 0; i < sizeof families / sizeof families[0] && used < sizeof known; i++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s\"%s\"", i ? ", " : "", families[i]->type);
        return TRI_ERR(TRI_EINVAL, "%s: \"model_type\" is \"%s\"; expected one of %s", source, type, known);
    }
    rc = tri_model_config_new(f, f->parse, json, source, &m->cfg);
    if (rc && absent)
        return missing_model_type(rc, json, source, f);
    if (rc)
        return rc;
    m->family = f;
    m->owns_cfg = true;
    tri_model_name_of(m->name, sizeof m->name, source);
    return TRI_OK;
}


int tri_model_load(tri_model *m, const char *path)
{
    char *text = NULL;
    *m = (tri_model){0};
    int rc = tri_model_read_config(path, &text);
    if (!rc) rc = tri_model_parse(m, text, path);
    free(text);
    return rc;
}

void tri_model_free(tri_model *m)
{
    if (m->owns_cfg)
        free(m->cfg);
    m->owns_cfg = false;
    m->cfg = NULL;
    m->family = NULL;
}

int tri_model_all_specs(const tri_model *m, int tp, tri_param_spec **specs, int *n)
{
    tri_chunk_place all = {.layer_start = 0, .layer_end = m->family->dims(m->cfg).n_layer, .first = true,
                           .last = true};
    int rc = m->family->param_specs(m->cfg, tp, &all, specs, n);
    for (int i = 0; !rc && i < *n; i++)
        if ((*specs)[i].global_index != i) {
            free(*specs);
            *specs = NULL;
            return TRI_ERR(TRI_EINTERNAL, "%s: parameter %s is at %d, its global index is %d", m->family->type,
                           (*specs)[i].name, i, (*specs)[i].global_index);
        }
    return rc;
}

tri_transformer tri_model_dims(const tri_model *m)
{
    return m->family->dims(m->cfg);
}

int tri_model_vocab_size(const tri_model *m)
{
    return (int)m->family->dims(m->cfg).vocab_size;
}

int64_t tri_model_padded_vocab(const tri_model *m, int tp)
{
    if (m->family->padded_vocab)
        return m->family->padded_vocab(m->cfg, tp);
    return tri_padded_vocab(m->family->dims(m->cfg).vocab_size, tp);
}

int tri_model_config_new(const tri_model_family *f, int (*parse)(void *, const char *, const char *),
                         const char *json, const char *source, void **cfg)
{
    *cfg = NULL;
    void *c = calloc(1, f->config_size);
    if (!c)
        return TRI_ERR(TRI_ENOMEM, "out of memory for a model config");
    int rc = parse(c, json, source);
    if (rc) {
        free(c);
        return rc;
    }
    *cfg = c;
    return TRI_OK;
}

const char *tri_model_name(const tri_model *m)
{
    return m->name;
}
