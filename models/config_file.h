/* models/config_file.h - a model config file as text, and the model's name from its path.
 *
 * Shared by the registry (models/model.c), which reads "model_type" to pick the family, and each
 * family's parser (e.g. models/config.c); nothing here knows a family. */
#ifndef TRIDENT_MODELS_CONFIG_FILE_H
#define TRIDENT_MODELS_CONFIG_FILE_H

#include <stddef.h>

typedef struct cJSON cJSON;

/* A config file's text (at most 1 MiB, no NUL byte), malloc'd. TRI_EIO when it cannot be read,
 * TRI_EINVAL naming the file when it is too large or binary. */
int tri_model_read_config(const char *path, char **text);

/* A model's name from its config's path: the base name without .json. */
void tri_model_name_of(char *name, size_t cap, const char *source);

/* A JSON value as text for messages (at most 60 characters, "..." when cut), in buf. */
const char *tri_config_value_text(const cJSON *item, char *buf, size_t cap);

/* root[key] as an integer in [1, max]: TRI_EINVAL naming src, the key and the value when it is
 * missing, not an integer or out of range. */
int tri_config_get_int(const cJSON *root, const char *key, int max, int *out, const char *src);

/* Every key of the object root once: TRI_EINVAL naming src and the repeated key (JSON allows
 * repeats, and a parser would silently take one of them). */
int tri_config_check_unique(const cJSON *root, const char *src);

#endif
