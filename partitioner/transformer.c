/* partitioner/transformer.c - sizes of a transformer's pieces (see transformer.h). */
#include "partitioner/transformer.h"

#include <stdio.h>

int64_t tri_padded_vocab(int64_t vocab_size, int tp)
{
    int64_t m = 128 * (int64_t)tp;
    return (vocab_size + m - 1) / m * m;
}

int64_t tri_transformer_head_dim(const tri_transformer *m)
{
    return m->head_dim > 0 ? m->head_dim : m->n_embd / m->n_head;
}

int64_t tri_transformer_q_width(const tri_transformer *m)
{
    return m->n_head * tri_transformer_head_dim(m);
}

int64_t tri_transformer_kv_width(const tri_transformer *m)
{
    return (m->n_kv_head > 0 ? m->n_kv_head : m->n_head) * tri_transformer_head_dim(m);
}

int64_t tri_transformer_ffn(const tri_transformer *m)
{
    return m->ffn_hidden > 0 ? m->ffn_hidden : 4 * m->n_embd;
}

double tri_block_matmul_params(const tri_transformer *m)
{
    double C = (double)m->n_embd, Q = (double)tri_transformer_q_width(m), KV = (double)tri_transformer_kv_width(m);
    double F = (double)tri_transformer_ffn(m);
    return C * (Q + 2.0 * KV) + Q * C + (m->gated_mlp ? 3.0 : 2.0) * C * F;
}

double tri_transformer_kv_local(const tri_transformer *m, int tp)
{
    double kv = (double)tri_transformer_kv_width(m) / tp, hs = (double)tri_transformer_head_dim(m);
    return kv > hs ? kv : hs;
}

double tri_block_params_local(const tri_transformer *m, int tp)
{
    double C = (double)m->n_embd, t = tp;
    if (m->llama_block) {
        double Q_l = (double)tri_transformer_q_width(m) / t, F_l = (double)tri_transformer_ffn(m) / t;
        return C * (Q_l + 2.0 * tri_transformer_kv_local(m, tp)) + Q_l * C + 3.0 * C * F_l + 2.0 * C;
    }
    /* GPT-2: c_attn's and c_fc's biases split (3C + 4C), ln_1, ln_2 and two row-parallel biases whole */
    double Q = (double)tri_transformer_q_width(m), KV = (double)tri_transformer_kv_width(m);
    return (tri_block_matmul_params(m) + Q + 2.0 * KV + (double)tri_transformer_ffn(m)) / t + 6.0 * C;
}

double tri_position_params(const tri_transformer *m)
{
    return m->llama_block ? 0.0 : (double)m->n_positions * (double)m->n_embd;
}

double tri_final_norm_params(const tri_transformer *m)
{
    return (m->llama_block ? 1.0 : 2.0) * (double)m->n_embd;
}

void tri_transformer_block_text(const tri_transformer *m, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (m->llama_block)
        snprintf(buf, cap, " (%lld key/value), head size %lld, SwiGLU %lld",
                 (long long)(tri_transformer_kv_width(m) / tri_transformer_head_dim(m)), (long long)tri_transformer_head_dim(m),
                 (long long)tri_transformer_ffn(m));
}
