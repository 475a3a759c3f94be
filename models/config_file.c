/* models/config_file.c - reading a model config file and naming the model (see config_file.h). */
#include "models/config_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

#define MAX_CONFIG_BYTES (1 << 20)

int tri_model_read_config(const char *path, char **text)
{
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return TRI_ERR(TRI_EIO, "cannot open model config %s: %s", path, strerror(errno));
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
        rc = TRI_ERR(TRI_EIO, "cannot read model config %s", path);
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
