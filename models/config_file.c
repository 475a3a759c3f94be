/* models/config_file.c - reading a model config file and naming the model (see config_file.h). */
#include "models/config_file.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/file.h"
#include "engine/core/status.h"

#define MAX_CONFIG_BYTES (1 << 20)

int tri_model_read_config(const char *path, char **text)
{
    *text = NULL;
    FILE *f = NULL;
    int orc = tri_file_fopen_read(path, &f);
    if (orc)
        return tri_error_context(orc, "model config");
    char *buf = malloc(MAX_CONFIG_BYTES + 1);
    if (!buf) {
        fclose(f);
        return TRI_ERR(TRI_ENOMEM, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, MAX_CONFIG_BYTES + 1, f);
    int rd_err = ferror(f);
    fclose(f);
    int rc = TRI_OK;
    if (rd_err)
        rc = TRI_ERR(TRI_EIO, "cannot read model config %s: %s", path, strerror(errno));
    else if (n > MAX_CONFIG_BYTES)
        rc = TRI_ERR(TRI_EINVAL, "%s: larger than %d bytes; not a model config", path, MAX_CONFIG_BYTES);
    else if (memchr(buf, '\0', n))
        rc = TRI_ERR(TRI_EINVAL, "%s: contains a NUL byte; not a JSON model config", path);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *text = buf;
    return TRI_OK;
}


void tri_model_name_of(char *name, size_t cap, const char *source)
{
    const char *base = strrchr(source, '/');
    snprintf(name, cap, "%s", base ? base + 1 : source);
    char *dot = strrchr(name, '.');
    if (dot && strcmp(dot, ".json") == 0)
        *dot = '\0';
}

const char *tri_config_value_text(const cJSON *item, char *buf, size_t cap)
{
    char *s = cJSON_PrintUnformatted(item);
    snprintf(buf, cap, "%s", s ? s : "?");
    if (cap > 60 && strlen(buf) > 60)
        strcpy(buf + 57, "...");
    cJSON_free(s);
    return buf;
}

int tri_config_get_int(const cJSON *root, const char *key, int max, int *out, const char *src)
{
    char v[96];
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!item)
        return TRI_ERR(TRI_EINVAL, "%s: missing required key \"%s\" (a positive integer)", src, key);
    if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble))
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, expected a positive integer", src, key,
                       tri_config_value_text(item, v, sizeof v));
    if (item->valuedouble < 1 || item->valuedouble > max)
        return TRI_ERR(TRI_EINVAL, "%s: \"%s\" is %s, expected an integer in [1, %d]", src, key,
                       tri_config_value_text(item, v, sizeof v), max);
    *out = (int)item->valuedouble;
    return TRI_OK;
}

int tri_config_check_unique(const cJSON *root, const char *src)
{
    for (const cJSON *a = root->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && strcmp(a->string, b->string) == 0)
                return TRI_ERR(TRI_EINVAL, "%s: key \"%s\" appears more than once", src, a->string);
    return TRI_OK;
}
