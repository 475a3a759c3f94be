/* models/host_weights.h - a whole model's weights on the host, as read from another program's files
 * (a Hugging Face directory, models/hf.h; llm.c's GPT-2 file, models/gpt_formats.h) before
 * `ckpt import` writes them into a session's parameters. Any model family. */
#ifndef TRIDENT_MODELS_HOST_WEIGHTS_H
#define TRIDENT_MODELS_HOST_WEIGHTS_H

#include "engine/train/param.h"
#include "models/model.h"

typedef struct tri_host_weights {
    tri_model model;                     /* owns its config */
    int n;                               /* the model's parameters, in its global order */
    char (*names)[TRI_PARAM_NAME_MAX];   /* Trident's names (the checkpoint keys) */
    float **data;                        /* each the full logical tensor (embeddings: the real
                                            vocabulary rows, no padding) */
} tri_host_weights;

/* Room for n parameters: names empty, data NULL. TRI_ENOMEM naming `what`. */
int tri_host_weights_alloc(tri_host_weights *w, int n, const char *what);
/* The index of parameter `name`, or -1. */
int tri_host_weights_find(const tri_host_weights *w, const char *name);
/* Frees the tensors, the names and the model's config; *w is zeroed. */
void tri_host_weights_free(tri_host_weights *w);

#endif
