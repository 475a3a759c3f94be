/* models/model.h - a model family, as the session, the checkpoints and the tools see it.
 *
 * Everything outside a model's own files reaches it through this table: its config (read from a
 * Hugging Face config.json, whose "model_type" names the family), its sizes for the partitioner, its
 * parameter descriptions (the checkpoint keys), and its chunks (engine/train/chunk.h), which the engine
 * drives without knowing the model. A new family is its model files plus one entry in the registry
 * (models/model.c): engine_train, the partitioner, the checkpoint tool, the session
 * (models/session.h) and ZeRO (engine/train/zero.h) then train, preview and checkpoint it unchanged. */
#ifndef TRIDENT_MODELS_MODEL_H
#define TRIDENT_MODELS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/chunk.h"
#include "engine/train/param.h"
#include "engine/train/train_layout.h"
#include "partitioner/transformer.h"

typedef struct tri_model_family {
    const char *type;     /* the config's "model_type", e.g. "gpt2" */
    /* ---- the config (cfg: the family's own struct of config_size bytes, which tri_model_parse
     * allocates and tri_model_free frees). Every entry below takes it as it is: the family's own
     * functions are the table's entries, with no casting trampolines between. ---- */
    size_t config_size;
    /* Parses config JSON text into cfg (source names it in messages): TRI_EINVAL naming the key and
     * value. */
    int (*parse)(void *cfg, const char *json, const char *source);
    /* The architecture as JSON (what a checkpoint records and compares on resume); malloc'd. */
    int (*to_json)(const void *cfg, char **json);
    /* What the partitioner plans with (partitioner/transformer.h): the outline the layout rules read
     * (n_head % tp, T <= n_positions) and the model's ends, and the family's answer for its block
     * (block_cost: parameters, activation bytes, FLOPs and TP traffic under a layout), which the stage
     * split, the memory formulas and the time model compose. cfg is borrowed. */
    tri_transformer (*dims)(const void *cfg);      /* (its vocab_size: the real tokens) */
    int64_t (*num_params)(const void *cfg);        /* the unpadded model's parameters */
    /* Optional: the vocabulary its vocab-parallel layers hold at TP size tp. NULL: the decoders'
     * padding to a multiple of 128 x tp (partitioner/transformer.h tri_padded_vocab). */
    int64_t (*padded_vocab)(const void *cfg, int tp);
    /* ---- parameters ---- */
    int (*num_param_tensors)(const void *cfg);     /* global indices run 0..this-1 */
    /* The descriptions of one chunk at TP size tp, in flat-buffer order (malloc'd). A chunk of every
     * layer, first and last, lists the whole model in global order: the checkpoint's list. */
    int (*param_specs)(const void *cfg, int tp, const tri_chunk_place *place, tri_param_spec **specs, int *n);
    /* ---- chunks ---- */
    /* What the model needs beyond the layout rules (partitioner/constraints.h); no communication. */
    int (*check)(const void *cfg, const tri_train_layout *run, const tri_chunk_place *place);
    /* Builds a chunk (tp_comm and dp_comm of the layout's sizes); *chunk is its engine side. On
     * failure *model is NULL: everything built is released. With dev NULL it only plans: the
     * chunk's arena holds the bytes per category, nothing is allocated and the comms (a tp_comm of
     * the group's rank and size only, dp_comm NULL) are not used. */
    int (*create)(void **model, tri_chunk **chunk, const void *cfg, const tri_train_layout *run,
                  const tri_chunk_place *place, tri_device *dev, tri_comm *tp_comm, tri_comm *dp_comm);
    void (*destroy)(void *model);
    /* Optional: the bytes per memory category create would allocate on TP rank tp_rank, without
     * allocating. NULL: create with dev NULL says it (models/session.c). */
    int (*plan)(const void *cfg, const tri_train_layout *run, const tri_chunk_place *place, int tp_rank,
                size_t bytes[TRI_MEM_KINDS]);
    /* The last chunk, after a forward without training of the micro-batch in slot: logits
     * (vocab_size floats, host) of its token row `row`, gathered over TP (collective over the TP
     * group). */
    int (*logits_row)(void *model, int slot, int64_t row, float *logits);
    /* ---- Hugging Face model directories (models/hf.h: `ckpt import/export --format hf`) ----
     * A family without a Hugging Face mapping leaves hf_name NULL; the optional hooks below it may
     * be NULL where the family needs nothing (the same shape, no transpose, ...). */
    const char *title;    /* the family's name in messages, e.g. "GPT-2" */
    /* The full tensor name transformers saves for parameter `name` (the checkpoint key). */
    void (*hf_name)(const char *name, char *out, size_t cap);
    /* A prefix of hf_name's names that files may omit (GPT-2 hub files: "transformer."); NULL: none. */
    const char *hf_optional_prefix;
    /* Optional: the Hugging Face shape (into out) of parameter `name` of Trident's logical shape;
     * returns its ndim. NULL: the same shape. */
    int (*hf_shape)(const char *name, int ndim, const int64_t *shape, int64_t *out);
    /* Optional: whether the 2-D parameter `name` is stored transposed there ((in, out) where Trident
     * keeps (out, in)). NULL: none is. */
    bool (*hf_transposed)(const char *name);
    /* Optional: the parameter's position in transformers' state_dict order, the order
     * huggingface_hub fills shards in (any increasing keys). NULL: the global order is that order. */
    int64_t (*hf_position)(const void *cfg, const char *name);
    /* Optional: parses a Hugging Face config.json's text into cfg (source names it in messages) where
     * it needs more than parse (e.g. dropping keys Trident does not train with). NULL: parse. */
    int (*hf_parse)(void *cfg, const char *json, const char *source);
    /* config.json as transformers writes it for weights stored as torch_dtype ("float32",
     * "bfloat16", "float16"): the file's whole text, malloc'd. It must read back with hf_parse. */
    int (*hf_config)(const void *cfg, const char *torch_dtype, char **json);
    /* Optional: whether a tensor of the files (its full name) is a buffer, not a parameter, that
     * import skips (e.g. GPT-2's causal mask, Llama's rotary inv_freq). */
    bool (*hf_skipped)(const char *hf_name);
    /* Optional: the name of an LM head the files may store although the config ties it to an
     * embedding (transformers' save_pretrained drops it, other writers keep it), and in *param the
     * parameter it must equal; NULL when the config has no such head. */
    const char *(*hf_tied_head)(const void *cfg, const char **param);
} tri_model_family;

/* A model: its family, its config and its name (for logs and checkpoints: the config file's base
 * name without .json, or the name a checkpoint recorded). */
typedef struct tri_model {
    const tri_model_family *family;
    void *cfg;
    bool owns_cfg;       /* tri_model_load / _parse: tri_model_free frees cfg; a view (e.g.
                            tri_gpt_model) borrows it */
    char name[128];
} tri_model;

/* The family of a "model_type" (NULL when none is registered). */
const tri_model_family *tri_model_family_find(const char *type);

/* Reads a config file: its "model_type" picks the family (absent: "gpt2", as Hugging Face GPT-2
 * configs may omit it). TRI_EIO when it cannot be read, TRI_EINVAL naming the file, the key and the
 * value, or the unknown model_type and the known ones. */
int tri_model_load(tri_model *m, const char *path);
/* The same from JSON text (source names it in messages). */
int tri_model_parse(tri_model *m, const char *json, const char *source);
void tri_model_free(tri_model *m);

/* Shorthands: the family's sizes, real vocabulary and vocabulary padded for tp (padded_vocab), the
 * model's name. */
tri_transformer tri_model_dims(const tri_model *m);
int tri_model_vocab_size(const tri_model *m);
int64_t tri_model_padded_vocab(const tri_model *m, int tp);

/* A new config of family f parsed from json with parse (f->parse or f->hf_parse) into *cfg
 * (malloc'd, f->config_size bytes; NULL on failure). */
int tri_model_config_new(const tri_model_family *f, int (*parse)(void *, const char *, const char *),
                         const char *json, const char *source, void **cfg);
const char *tri_model_name(const tri_model *m);

/* Every parameter of the whole model at TP size tp, in global order (malloc'd): the checkpoint's
 * list of tensors. */
int tri_model_all_specs(const tri_model *m, int tp, tri_param_spec **specs, int *n);

#endif
