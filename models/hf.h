/* models/hf.h - Hugging Face model directories in and out of Trident, for any model family with a
 * Hugging Face mapping (the hf_ hooks of models/model.h: GPT-2's GPT2LMHeadModel, the Llama
 * family's LlamaForCausalLM).
 *
 * A directory is what transformers' save_pretrained writes: config.json (its "model_type" picks
 * the family) and the weights as safetensors (checkpoints/safetensors.h), one model.safetensors or
 * shards model-0000i-of-0000n.safetensors listed by model.safetensors.index.json. The family maps
 * names (and, for GPT-2's Conv1D matrices, shapes and a transpose); everything else here (reading
 * and checking the files, the shard split, the index) is the same for every family. */
#ifndef TRIDENT_MODELS_HF_H
#define TRIDENT_MODELS_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoints/reader.h"
#include "checkpoints/safetensors.h"
#include "models/host_weights.h"
#include "models/model.h"

/* Default shard size of the export: transformers' max_shard_size "5GB" (5 x 10^9 bytes). */
#define TRI_HF_DEFAULT_SHARD_BYTES 5000000000ull

/* Reads DIR: config.json (its model_type, absent meaning gpt2, picks the family; the family's
 * hf_parse reads it) and DIR/model.safetensors, or else the shards listed by
 * DIR/model.safetensors.index.json. F32, BF16 and F16 tensors, under the family's names (with or
 * without its optional prefix), in its shapes (transposed where it says so) into Trident's
 * logical tensors in w (w->model owns the config; its name is DIR's base name). Every tensor of
 * the files must be a parameter, a buffer the family skips, or a stored tied LM head equal to what
 * it is tied to. A missing tensor, a shape that does not match the config, an unknown tensor, or
 * a tensor the index and the shards disagree on is refused: TRI_EINVAL / TRI_ECORRUPT naming the
 * file and tensor (and the safetensors reader's errors). */
int tri_hf_read(const char *dir, tri_host_weights *w);

/* Writes checkpoint r of `model` as the Hugging Face directory DIR (created; whether it may be
 * written is the caller's rule, tools/cli/outputs.h: ckpt writes into a fresh temporary beside
 * the target): config.json (the family's hf_config,
 * torch_dtype from dtype) and the weights under the family's names in dtype (a tied head is not
 * stored): one model.safetensors when they fit max_shard_bytes, else
 * model-0000i-of-0000n.safetensors filled in transformers' state_dict order as huggingface_hub's
 * split does (a tensor larger than the limit gets a shard of its own) and
 * model.safetensors.index.json (sorted keys, indent 2, as transformers writes it). Each file's
 * bytes are those the reference safetensors library writes for the same tensors. TRI_EINVAL when
 * the family has no Hugging Face mapping. */
int tri_hf_export(tri_ckpt_reader *r, const tri_model *model, const char *dir, tri_st_dtype dtype,
                  uint64_t max_shard_bytes);

/* Parses a size as transformers' max_shard_size: bytes, or a number with KB/MB/GB (powers of 1000)
 * or KiB/MiB/GiB (powers of 1024). TRI_EINVAL naming the text. */
int tri_hf_parse_size(const char *text, uint64_t *bytes);

/* A float as Python's json.dumps writes it (repr: the shortest digits that read back as v, or as
 * the float32 (float)v when single; "10000.0", "1e-05"), for config.json files. */
void tri_hf_float_text(char *out, size_t cap, double v, bool single);

#endif
