/* models/generate.c - text generation by top-k sampling through the pipeline (see generate.h). */
#include "models/generate.h"

#include <math.h>
#include <stdlib.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"

int tri_sample_top_k(const float *logits, int V, int k, float temperature, tri_rng *rng, int32_t *id)
{
    k = k < V ? k : V;
    int *top = malloc((size_t)k * sizeof *top);
    double *p = malloc((size_t)k * sizeof *p);
    if (!top || !p) {
        free(top);
        free(p);
        return TRI_ERR(TRI_ENOMEM, "out of memory for sampling");
    }
    int n = 0; /* top[0..n) holds the largest logits so far, in decreasing order */
    for (int i = 0; i < V; i++) {
        if (n == k && logits[i] <= logits[top[k - 1]])
            continue;
        int pos = n < k ? n++ : k - 1;
        for (; pos > 0 && logits[top[pos - 1]] < logits[i]; pos--)
            top[pos] = top[pos - 1];
        top[pos] = i;
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        p[j] = exp(((double)logits[top[j]] - (double)logits[top[0]]) / temperature);
        sum += p[j];
    }
    double u = tri_rng_next_uniform(rng) * sum;
    *id = top[n - 1];
    for (int j = 0; j < n; j++) {
        u -= p[j];
        if (u <= 0) {
            *id = top[j];
            break;
        }
    }
    free(top);
    free(p);
    return TRI_OK;
}

/* The id sampled on the last pipeline stage, on every rank of the pipeline. */
static int share_token(const tri_grid *g, int32_t *id)
{
    if (g->pp == 1)
        return TRI_OK;
    return tri_comm_host_broadcast(g->pp_comm, id, TRI_I32, 1, g->pp - 1);
}

int tri_generate(tri_session *s, const tri_generate_options *o, tri_generate_emit emit, void *ctx)
{
    int64_t B = s->model.layout.B, T = s->model.layout.T;
    int V = tri_model_vocab_size(s->model.model);
    if (o->length < 0 || o->length > T - 1)
        return TRI_ERR(TRI_EINVAL, "generate: %d tokens; expected 0 to seq-length - 1 = %lld", o->length,
                       (long long)(T - 1));
    if (o->length == 0)
        return TRI_OK;
    int32_t *windows = calloc((size_t)(B * (T + 1)), sizeof *windows); /* (B, T+1); row 0 is used */
    float *logits = malloc((size_t)V * sizeof *logits);                /* (V,) */
    if (!windows || !logits) {
        free(windows);
        free(logits);
        return TRI_ERR(TRI_ENOMEM, "out of memory for sampling");
    }
    tri_rng rng;
    tri_rng_init(&rng, o->seed, 77);
    windows[0] = o->first;
    int rc = TRI_OK;
    for (int t = 1; t <= o->length && !rc; t++) {
        bool have = false;
        int32_t id = 0;
        rc = tri_model_rank_logits(&s->model, windows, t - 1, logits, &have);
        if (!rc && have)
            rc = tri_sample_top_k(logits, V, o->top_k, o->temperature, &rng, &id);
        if (!rc) rc = share_token(&s->grid, &id);
        if (rc)
            break;
        windows[t] = id;
        emit(ctx, id);
    }
    free(windows);
    free(logits);
    return rc;
}
