/* models/gpt_formats.h - a GPT's weights in other programs' formats: Hugging Face safetensors
 * (GPT2LMHeadModel's names and Conv1D layout) and llm.c's GPT-2 weight file (gpt2_124M.bin).
 *
 * Trident stores weights (out, in) as Megatron does; Hugging Face's GPT-2 uses Conv1D, (in, out),
 * so the four matrices of a block are transposed on export: c_attn (3C, C) -> (C, 3C), attn
 * c_proj (C, C), mlp c_fc (4C, C) -> (C, 4C), mlp c_proj (C, 4C) -> (4C, C). llm.c keeps (out, in)
 * like Trident, its blocks' tensors stacked over layers, and wte padded to Vp rows of zeros. */
#ifndef TRIDENT_MODELS_GPT_FORMATS_H
#define TRIDENT_MODELS_GPT_FORMATS_H

#include "checkpoints/reader.h"
#include "models/config.h"

#define TRI_LLMC_MAGIC 20240326

/* Writes the checkpoint's weights as a safetensors file (float32, vocabulary unpadded, names
 * wte.weight, h.<i>.attn.c_attn.weight, ...). TRI_EIO naming the file. */
int tri_export_safetensors(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out);

/* Writes the checkpoint's weights as an llm.c model file (version 3: wte padded to a multiple of
 * 128 rows with zeros). */
int tri_export_llmc(tri_ckpt_reader *r, const tri_gpt_config *cfg, const char *out);

/* An llm.c model file read into Trident's tensors. */
typedef struct tri_llmc_model {
    tri_gpt_config cfg;
    int n;                       /* Trident's parameters, in the model's global order */
    char (*names)[TRI_PARAM_NAME_MAX];
    float **data;                /* each the full logical tensor (wte: the real vocabulary rows) */
    int version, padded_vocab;
} tri_llmc_model;

/* Reads and validates an llm.c model file (version 3, or 1 without padding): header values in range,
 * file size exactly header + parameters, wte's padding rows zero. TRI_EINVAL / TRI_ECORRUPT naming
 * the file and field. */
int tri_llmc_read(const char *path, tri_llmc_model *m);
void tri_llmc_free(tri_llmc_model *m);

#endif
