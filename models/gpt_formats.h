/* models/gpt_formats.h - a GPT's weights in other programs' formats: Hugging Face's names and
 * Conv1D layout (GPT2LMHeadModel; the directories themselves are models/hf.h's, for any family),
 * a plain safetensors file of them, and llm.c's GPT-2 weight file (gpt2_124M.bin).
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
#include "models/host_weights.h"

#define TRI_LLMC_MAGIC 20240326

/* Writes the checkpoint's weights as a safetensors file (float32, vocabulary unpadded, names
 * wte.weight, h.<i>.attn.c_attn.weight, ...). TRI_EIO naming the file. */
int tri_export_safetensors(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out);

/* Writes the checkpoint's weights as an llm.c model file (version 3: wte padded to a multiple of
 * 128 rows with zeros). */
int tri_export_llmc(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out);

/* Reads and validates an llm.c model file (version 3, or 1 without padding): header values in range,
 * file size exactly header + parameters, wte's padding rows zero. Into w: a GPT-2 model (named after
 * the file) and its tensors; *version and *padded_vocab are the header's. TRI_EINVAL / TRI_ECORRUPT
 * naming the file and field. */
int tri_llmc_read(const char *path, tri_host_weights *w, int *version, int *padded_vocab);

/* ---- GPT-2's Hugging Face mapping (GPT2LMHeadModel; the family's hf_ hooks, models/model.h) ---- */

/* The prefix of GPT2LMHeadModel's names, which the hub's gpt2 files omit. */
#define TRI_GPT_HF_PREFIX "transformer."

/* transformers' name (without the "transformer." prefix) of Trident's parameter `name`: "wte" ->
 * "wte.weight", "h.0.ln_1.w" -> "h.0.ln_1.weight", ".b" -> ".bias". */
void tri_gpt_hf_name(const char *name, char *out, size_t cap);
/* The same with the prefix, as save_pretrained of GPT2LMHeadModel writes it. */
void tri_gpt_hf_full_name(const char *name, char *out, size_t cap);
/* Whether parameter `name` is one of the four matrices transformers keeps as Conv1D (in, out). */
bool tri_gpt_hf_conv1d(const char *name);
/* The Hugging Face shape (into out) of parameter `name` of Trident's logical shape; returns its ndim:
 * c_attn's (3, C, C) / (3, C) are (3C, C) / (3C), and Conv1D matrices are transposed. */
int tri_gpt_hf_shape(const char *name, int ndim, const int64_t *shape, int64_t *out);
/* Whether a tensor of GPT2LMHeadModel's files is a causal-mask buffer (attn.bias, attn.masked_bias),
 * not a parameter. */
bool tri_gpt_hf_skipped(const char *name);
/* Parses a GPT2Config (source names it in messages): dropout values, which Trident does not train
 * with, are reported on stderr and dropped; the rest is tri_gpt_config_parse's. */
int tri_gpt_hf_parse_config(void *cfg, const char *json, const char *source);
/* config.json as transformers writes a GPT2Config for weights stored as torch_dtype (malloc'd). */
int tri_gpt_hf_config(const void *cfg, const char *torch_dtype, char **json);

#endif
