/* engine/device/ops/embedding_cpu.c - the token and position embeddings on the CPU backend.
 *
 * Forward copies (adds) rows, parallel over rows; backward adds dout's rows into the table,
 * parallel over column blocks with the rows in order, so repeated tokens or positions add in the
 * same order for any thread count. */
#include <string.h>

#include "engine/device/cpu_ops.h"
#include "engine/device/cpu_threads.h"
#include "engine/device/ops/positions_math.h"

/* ---- token embedding ---- */

static void embedding_forward_loop(tri_tensor out, tri_tensor tokens, tri_tensor wte,
                                 int64_t vocab_start)
{
    int64_t N = tri_tensor_numel(tokens), C = tri_tensor_cols(wte), V_l = tri_tensor_rows(wte);
    const int32_t *tok = ids(tokens);
    float *o = fp(out);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t r = (int64_t)tok[n] - vocab_start;
        if (r >= 0 && r < V_l)
            memcpy(o + n * C, fp(wte) + r * C, (size_t)C * sizeof(float));
        else
            memset(o + n * C, 0, (size_t)C * sizeof(float));
    }
}

int tri_cpu_embedding_forward(tri_device *d, tri_tensor out, tri_tensor tokens, tri_tensor wte,
                              int64_t vocab_start)
{
    TRI_ON_THREADS(nthreads(d), embedding_forward_loop(out, tokens, wte, vocab_start));
    return TRI_OK;
}

static void embedding_backward_loop(tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                                  int64_t vocab_start)
{
    int64_t N = tri_tensor_numel(tokens), C = tri_tensor_cols(dwte), V_l = tri_tensor_rows(dwte);
    const int32_t *tok = ids(tokens);
    const float *g = fp(dout);
    float *dw = fp(dwte);
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < C; j0 += TRI_CPU_COL_BLOCK) {
        int64_t j1 = j0 + TRI_CPU_COL_BLOCK < C ? j0 + TRI_CPU_COL_BLOCK : C;
        for (int64_t n = 0; n < N; n++) {
            int64_t r = (int64_t)tok[n] - vocab_start;
            if (r < 0 || r >= V_l)
                continue;
            for (int64_t j = j0; j < j1; j++)
                dw[r * C + j] += g[n * C + j];
        }
    }
}

int tri_cpu_embedding_backward(tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens,
                               int64_t vocab_start)
{
    TRI_ON_THREADS(nthreads(d), embedding_backward_loop(dwte, dout, tokens, vocab_start));
    return TRI_OK;
}

/* ---- position embedding ---- */

static void position_forward_loop(tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0, int cp, int cp_rank)
{
    int64_t N = tri_tensor_rows(out), C = tri_tensor_cols(out);
    float *o = fp(out);
    const float *w = fp(wpe);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *row = w + tri_seq_position(T, row0 + n, cp, cp_rank) * C;
        for (int64_t j = 0; j < C; j++)
            o[n * C + j] += row[j];
    }
}

int tri_cpu_position_forward(tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0, int cp,
                             int cp_rank)
{
    TRI_ON_THREADS(nthreads(d), position_forward_loop(out, wpe, T, row0, cp, cp_rank));
    return TRI_OK;
}

static void position_backward_loop(tri_tensor dwpe, tri_tensor dout, int64_t T, int64_t row0, int cp,
                                   int cp_rank)
{
    int64_t N = tri_tensor_rows(dout), C = tri_tensor_cols(dout);
    const float *g = fp(dout);
    float *dw = fp(dwpe);
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < C; j0 += TRI_CPU_COL_BLOCK) {
        int64_t j1 = j0 + TRI_CPU_COL_BLOCK < C ? j0 + TRI_CPU_COL_BLOCK : C;
        for (int64_t n = 0; n < N; n++) {
            float *row = dw + tri_seq_position(T, row0 + n, cp, cp_rank) * C;
            for (int64_t j = j0; j < j1; j++)
                row[j] += g[n * C + j];
        }
    }
}

int tri_cpu_position_backward(tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T, int64_t row0, int cp,
                              int cp_rank)
{
    TRI_ON_THREADS(nthreads(d), position_backward_loop(dwpe, dout, T, row0, cp, cp_rank));
    return TRI_OK;
}
