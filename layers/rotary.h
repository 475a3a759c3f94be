/* layers/rotary.h - the rotary position embedding's tables (Su et al. 2021), as Hugging Face builds them.
 *
 * The device ops (tri_op_rope_forward / _backward, engine/device/device.h) rotate q and k with cos
 * and sin tables (positions, HS/2) fp32; these host functions compute them once per model, in
 * fp32 in the order of Hugging Face's LlamaRotaryEmbedding: inv_freq_i = 1 / theta^(2i / HS), with
 * Llama 3's rope_scaling ("rope_type": "llama3", transformers' _compute_llama3_parameters) when
 * given: wavelengths 2 pi / inv_freq longer than original_max_position_embeddings / low_freq_factor
 * are divided by factor, those shorter than original / high_freq_factor kept, those between
 * interpolated smoothly; then angle = position * inv_freq_i (fp32) and its cosine and sine. */
#ifndef TRIDENT_LAYERS_ROTARY_H
#define TRIDENT_LAYERS_ROTARY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tri_rope_scaling {
    bool llama3;                      /* false: plain theta^(-2i/HS) */
    float factor, low_freq_factor, high_freq_factor;
    int64_t original_max_positions;   /* original_max_position_embeddings */
} tri_rope_scaling;

/* inv_freq[i] for i < HS/2 (HS even); scaling NULL or !llama3: unscaled. */
void tri_rope_inv_freq(float *inv_freq, int64_t HS, double theta, const tri_rope_scaling *scaling);

/* cos, sin (positions, half) row-major: cos(p * inv_freq[i]), sin(p * inv_freq[i]) with the angle
 * rounded to fp32 first (as Hugging Face's fp32 product), the functions evaluated in double and
 * rounded once. */
void tri_rope_tables(float *cos_out, float *sin_out, int64_t positions, int64_t half, const float *inv_freq);

#endif
