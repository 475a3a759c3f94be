/* engine/core/status.c - the per-thread error message behind TRI_ERR (see status.h). */
#include "engine/core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MSG_CAP 2048

static _Thread_local char msg[MSG_CAP];

int tri_error_set(int code, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, MSG_CAP, fmt, ap);
    va_end(ap);
    if (n >= 0 && n < MSG_CAP) {
        const char *base = strrchr(file, '/');
        snprintf(msg + n, MSG_CAP - (size_t)n, " (%s:%d)", base ? base + 1 : file, line);
    }
    return code;
}

int tri_error_context(int code, const char *fmt, ...)
{
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t pl = strlen(prefix), ml = strlen(msg);
    if (pl + 2 + ml >= MSG_CAP)
        ml = MSG_CAP - pl - 3;
    memmove(msg + pl + 2, msg, ml);
    msg[pl + 2 + ml] = '\0';
    memcpy(msg, prefix, pl);
    msg[pl] = ':';
    msg[pl + 1] = ' ';
    return code;
}

const char *tri_error_message(void)
{
    return msg;
}

void tri_error_clear(void)
{
    msg[0] = '\0';
}

int tri_error_restore(int code, const char *text)
{
    snprintf(msg, MSG_CAP, "%s", text);
    return code;
}

const char *tri_status_name(int code)
{
    switch (code) {
    case TRI_OK: return "OK";
    case TRI_EINVAL: return "EINVAL";
    case TRI_ENOMEM: return "ENOMEM";
    case TRI_EIO: return "EIO";
    case TRI_ECOMM: return "ECOMM";
    case TRI_EDEVICE: return "EDEVICE";
    case TRI_ENOTSUP: return "ENOTSUP";
    case TRI_ECORRUPT: return "ECORRUPT";
    case TRI_ETIMEOUT: return "ETIMEOUT";
    case TRI_ENONFINITE: return "ENONFINITE";
    case TRI_EINTERNAL: return "EINTERNAL";
    default: return "E?";
    }
}
