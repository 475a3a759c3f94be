/* models/gpt_formats.h - a GPT's weights in other programs' formats: Hugging Face's model directory
 * (config.json and safetensors, one file or shards with an index, GPT2LMHeadModel's names and
 * Conv1D layout) and llm.c's GPT-2 weight file (gpt2_124M.bin).
 *
 * Trident stores weights (out, in) as Megatron does; Hugging Face's GPT-2 uses Conv1D, (in, out),
 * so the four matrices of a block are transposed on export: c_attn (3C, C) -> (C, 3C), attn
 * c_proj (C, C), mlp c_fc (4C, C) -> (C, 4C), mlp c_proj (C, 4C) -> (4C, C). llm.c keeps (out, in)
 * like Trident, its blocks' tensors stacked over layers, and wte padded to Vp rows of zeros. */
#ifndef TRIDENT_MODELS_GPT_FORMATS_H
#define TRIDENT_MODELS_GPT_FORMATS_H

#include "checkpoints/reader.h"
#include "checkpoints/safetensors.h"
#include "models/config.h"

#define TRI_LLMC_MAGIC 20240326

/* Writes the checkpoint's weights as a safetensors file (float32, vocabulary unpadded, names
 * wte.weight, h.<i>.attn.c_attn.weight, ...). TRI_EIO naming the file. */
int tri_export_safetensors(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out);

/* Writes the checkpoint's weights as an llm.c model file (version 3: wte padded to a multiple of
 * 128 rows with zeros). */
int tri_export_llmc(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out);

/* Weights read from another program's files into Trident's tensors (llm.c or Hugging Face). */
typedef struct tri_gpt_host_weights {
    tri_gpt_config cfg;
    int n;                       /* Trident's parameters, in the model's global order */
    char (*names)[TRI_PARAM_NAME_MAX];
    float **data;                /* each the full logical tensor (wte: the real vocabulary rows) */
    int version, padded_vocab;   /* llm.c's header; 0 for Hugging Face */
} tri_gpt_host_weights;

/* Reads and validates an llm.c model file (version 3, or 1 without padding): header values in range,
 * file size exactly header + parameters, wte's padding rows zero. TRI_EINVAL / TRI_ECORRUPT naming
 * the file and field. */
int tri_llmc_read(const char *path, tri_gpt_host_weights *m);
void tri_gpt_host_weights_free(tri_gpt_host_weights *m);

/* ---- Hugging Face model directories (transformers' save_pretrained of GPT2LMHeadModel) ---- */

/* transformers' name (without the "transformer." prefix) of Trident's parameter `name`: "wte" ->
 * "wte.weight", "h.0.ln_1.w" -> "h.0.ln_1.weight", ".b" -> ".bias". */
void tri_gpt_hf_name(const char *name, char *out, size_t cap);
/* Whether parameter `name` is one of the four matrices transformers keeps as Conv1D (in, out). */
bool tri_gpt_hf_conv1d(const char *name);
/* The Hugging Face shape (into out) of parameter `name` of Trident's logical shape; returns its ndim:
 * c_attn's (3, C, C) / (3, C) are (3C, C) / (3C), and Conv1D matrices are transposed. */
int tri_gpt_hf_shape(const char *name, int ndim, const int64_t *shape, int64_t *out);

/* Default shard size of the export: transformers' max_shard_size "5GB" (5 x 10^9 bytes). */
#define TRI_HF_DEFAULT_SHARD_BYTES 5000000000ull

/* Reads DIR: config.json (GPT2Config; dropout values, which Trident does not train with, are
 * reported on stderr and dropped) and DIR/model.safetensors, or else the shards listed by
 * DIR/model.safetensors.index.json. Names with or without the "transformer." prefix; F32, BF16 and
 * F16 tensors; Conv1D matrices transposed to Trident's (out, in). lm_head.weight, when present, must
 * equal wte (GPT-2 ties them); the attention-mask buffers attn.bias / attn.masked_bias are skipped.
 * A missing tensor, a shape that does not match the config, an unknown tensor, or a tensor the
 * index and the shards disagree on is refused: TRI_EINVAL / TRI_ECORRUPT naming the file and
 * tensor (and the safetensors reader's errors). */
int tri_hf_read(const char *dir, tri_gpt_host_weights *m);

/* Writes the checkpoint as the Hugging Face directory DIR (created; refused when it exists and is
 * not empty): config.json (GPT2Config, torch_dtype from dtype) and the weights under transformers'
 * names ("transformer.h.0.attn.c_attn.weight", ...; lm_head is tied and not stored) in dtype: one
 * model.safetensors when they fit max_shard_bytes, else model-0000i-of-0000n.safetensors filled in
 * parameter order as huggingface_hub's split does (a tensor larger than the limit gets a shard of
 * its own) and model.safetensors.index.json (sorted keys, indent 2, as transformers writes it).
 * Each file's bytes are those the reference safetensors library writes for the same tensors. */
int tri_export_hf(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *dir, tri_st_dtype dtype,
                  uint64_t max_shard_bytes);

/* Parses a size as transformers' max_shard_size: bytes, or a number with KB/MB/GB (powers of 1000)
 * or KiB/MiB/GiB (powers of 1024). TRI_EINVAL naming the text. */
int tri_hf_parse_size(const char *text, uint64_t *bytes);

#endif
