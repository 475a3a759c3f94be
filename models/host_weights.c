/* models/host_weights.c - a whole model's weights on the host (see host_weights.h). */
#include "models/host_weights.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

int tri_host_weights_alloc(tri_host_weights *w, int n, const char *what)
{
    w->n = n;
    w->names = calloc((size_t)(n ? n : 1), sizeof *w->names);
    w->data = calloc((size_t)(n ? n : 1), sizeof *w->data);
    if (!w->names || !w->data)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for %d tensors", what, n);
    return TRI_OK;
}

int tri_host_weights_find(const tri_host_weights *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->names[i], name) == 0)
            return i;
    return -1;
}

void tri_host_weights_free(tri_host_weights *w)
{
    for (int i = 0; w->data && i < w->n; i++)
        free(w->data[i]);
    free(w->data);
    free(w->names);
    tri_model_free(&w->model);
    memset(w, 0, sizeof *w);
}
