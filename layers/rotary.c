/* layers/rotary.c - rotary embedding tables (see rotary.h). */
#include "layers/rotary.h"

#include <math.h>

#define TRI_TWO_PI 6.283185307179586

void tri_rope_inv_freq(float *inv_freq, int64_t HS, double theta, const tri_rope_scaling *s)
{
    float base = (float)theta;
    for (int64_t i = 0; i < HS / 2; i++) {
        float inv = 1.0f / powf(base, (float)(2 * i) / (float)HS);
        if (s && s->llama3) {
            float old = (float)s->original_max_positions;
            float low_wavelen = old / s->low_freq_factor, high_wavelen = old / s->high_freq_factor;
            float wavelen = (float)TRI_TWO_PI / inv;
            float scaled = wavelen > low_wavelen ? inv / s->factor : inv;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) { /* medium: interpolate */
                float smooth = (old / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
                scaled = (1.0f - smooth) * scaled / s->factor + smooth * scaled;
            }
            inv = scaled;
        }
        inv_freq[i] = inv;
    }
}

void tri_rope_tables(float *cos_out, float *sin_out, int64_t positions, int64_t half, const float *inv_freq)
{
    for (int64_t p = 0; p < positions; p++)
        for (int64_t i = 0; i < half; i++) {
            float angle = (float)p * inv_freq[i];
            cos_out[p * half + i] = (float)cos((double)angle);
            sin_out[p * half + i] = (float)sin((double)angle);
        }
}
