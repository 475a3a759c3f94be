/* tests/moe_harness.c - a one-chunk MoE model with its routers zeroed (see moe_harness.h). */
#include "tests/moe_harness.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

int tu_moe_chunk_open(tu_moe_chunk *c, const tri_model *m, int B, int T, const tu_layout *l, tri_comm *world)
{
    memset(c, 0, sizeof *c);
    const tri_llama_config *cfg = m->cfg;
    int layers = cfg->num_hidden_layers;
    int rc = tu_model_layout_resolve(m, B, T, l, 1, &c->run);
    if (!rc) rc = tri_device_cpu_create(&c->dev, 1);
    tri_chunk_place place = {.layer_start = 0, .layer_end = layers, .first = true, .last = true, .n_slots = 1,
                             .seed = 7};
    if (!rc) rc = tri_llama_create(&c->model, &c->chunk, m->cfg, &c->run, &place, c->dev, world, world);
    c->ll = c->model;
    int32_t *windows = malloc((size_t)B * (T + 1) * sizeof *windows);
    if (!rc && !windows)
        rc = TRI_ERR(TRI_ENOMEM, "tu_moe_chunk_open: out of memory");
    for (int i = 0; !rc && i < B * (T + 1); i++)
        windows[i] = (i * 7) % 100;
    if (!rc) rc = tri_decoder_load_batch(&c->ll->d, 0, windows);
    free(windows);
    /* a first pass binds the blocks' views (ZeRO 0 keeps them), then the routers are zeroed */
    if (!rc) rc = tri_chunk_forward(c->chunk, 0, true, 1.0f / (float)(B * T));
    for (int k = 0; k < layers && !rc; k++)
        if (tri_llama_layer_is_sparse(cfg, k))
            rc = tri_op_fill(c->dev, c->ll->w.h[k].moe.router_w, 0.0f);
    if (rc)
        tu_moe_chunk_close(c);
    return rc;
}

void tu_moe_chunk_close(tu_moe_chunk *c)
{
    if (c->model)
        tri_decoder_free(c->model);
    tri_device_destroy(c->dev);
    memset(c, 0, sizeof *c);
}
