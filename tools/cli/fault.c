/* tools/cli/fault.c - stop signals, the run-identity text and test-only fault injection for the
 * training CLI (see fault.h). */
#define _POSIX_C_SOURCE 200809L
#include "tools/cli/fault.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/status.h"

/* The signal that asked to stop: written only by the handler, read at step boundaries. */
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig)
{
    if (stop_signal && sig == SIGINT)
        signal(SIGINT, SIG_DFL); /* a second Ctrl-C kills as usual */
    stop_signal = sig;
}

void tri_cli_stop_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL); /* mpirun forwards SIGUSR1 to every rank at once */
}

const volatile sig_atomic_t *tri_cli_stop_flag(void)
{
    return &stop_signal;
}

int tri_cli_stop_signal(void)
{
    return (int)stop_signal;
}

/* Parses env var `name`, lo..hi numbers >= 0 separated by ':' (e.g. "RANK:ITER"), into v. Returns
 * how many (0: absent), or TRI_EINVAL naming the variable and the expected form. */
static int parse_env(const char *name, int lo, int hi, const char *form, double *v)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    const char *p = s;
    int n = 0;
    for (;;) {
        char *end = NULL;
        double x = strtod(p, &end);
        if (end == p || n == hi || !(x >= 0))
            return TRI_ERR(TRI_EINVAL, "%s=%s: expected %s", name, s, form);
        v[n++] = x;
        if (*end == '\0')
            break;
        if (*end != ':')
            return TRI_ERR(TRI_EINVAL, "%s=%s: expected %s", name, s, form);
        p = end + 1;
    }
    if (n < lo)
        return TRI_ERR(TRI_EINVAL, "%s=%s: expected %s", name, s, form);
    return n;
}

int tri_cli_injection_read(tri_cli_injection *inj)
{
    double v[3] = {0, 0, 0};
    *inj = (tri_cli_injection){.nan_rank = -1, .stall_rank = -1, .identity_rank = -1};
    v[2] = 1;
    int rc = parse_env("TRIDENT_INJECT_NAN", 2, 3, "RANK:ITERATION[:COUNT]", v);
    if (rc < 0)
        return rc;
    if (rc) {
        inj->nan_rank = (int)v[0];
        inj->nan_iter = (int64_t)v[1];
        inj->nan_count = (int64_t)v[2];
    }
    rc = parse_env("TRIDENT_INJECT_STALL", 3, 3, "RANK:ITERATION:SECONDS", v);
    if (rc < 0)
        return rc;
    if (rc) {
        inj->stall_rank = (int)v[0];
        inj->stall_iter = (int64_t)v[1];
        inj->stall_s = v[2];
    }
    v[1] = 1;
    rc = parse_env("TRIDENT_INJECT_IDENTITY", 1, 2, "RANK[:1 at start|:2 on resume]", v);
    if (rc < 0)
        return rc;
    if (rc) {
        inj->identity_rank = (int)v[0];
        inj->identity_which = (int)v[1];
    }
    return TRI_OK;
}

int tri_cli_injection_nan_hook(void *ctx, tri_trainer *t, int64_t iter)
{
    const tri_cli_injection *inj = ctx;
    if (inj->nan_rank != t->grid->world_rank || iter + 1 < inj->nan_iter || iter + 1 >= inj->nan_iter + inj->nan_count)
        return TRI_OK;
    float nan = NAN;
    const tri_zero *z = &t->chunks[0]->zero;
    int64_t start, len, local;
    tri_zero_owned(z, 0, &start, &len, &local);
    return len > 0 ? tri_device_copy_from_host(t->dev, tri_zero_owned_grads(z, start, 1), &nan) : TRI_OK;
}

void tri_cli_injection_stall(const tri_cli_injection *inj, int rank, int64_t iter)
{
    if (inj->stall_rank != rank || inj->stall_iter != iter)
        return;
    fprintf(stderr, "[test injection] rank %d stalls %.1f s before iteration %lld\n", rank, inj->stall_s,
            (long long)iter);
    fflush(stderr);
    struct timespec ts = {(time_t)inj->stall_s, (long)((inj->stall_s - (double)(time_t)inj->stall_s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Whether name is one of the "|"-separated names in list. */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, "|");
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p += len + (p[len] == '|');
    }
    return 0;
}

int tri_cli_identity_text(const tri_flag *flags, int n, const char *skip, int world_size, const char *extra,
                          char **out)
{
    size_t cap = 256 + strlen(extra ? extra : "");
    for (int i = 0; i < n; i++)
        cap += strlen(flags[i].name) + 64 + (flags[i].kind == TRI_FLAG_STRING || flags[i].kind == TRI_FLAG_CHOICE
                                                 ? strlen(*(const char **)flags[i].value ? *(const char **)flags[i].value : "")
                                                 : 0);
    char *s = malloc(cap);
    if (!s)
        return TRI_ERR(TRI_ENOMEM, "run identity: out of memory");
    size_t used = (size_t)snprintf(s, cap, "world_size=%d\n", world_size);
    for (int i = 0; i < n; i++) {
        const tri_flag *f = &flags[i];
        if (listed(skip, f->name))
            continue;
        switch (f->kind) {
        case TRI_FLAG_INT: used += (size_t)snprintf(s + used, cap - used, "%s=%d\n", f->name, *(int *)f->value); break;
        case TRI_FLAG_INT64:
            used += (size_t)snprintf(s + used, cap - used, "%s=%lld\n", f->name, (long long)*(int64_t *)f->value);
            break;
        case TRI_FLAG_FLOAT:
            used += (size_t)snprintf(s + used, cap - used, "%s=%.9g\n", f->name, (double)*(float *)f->value);
            break;
        case TRI_FLAG_BOOL:
            used += (size_t)snprintf(s + used, cap - used, "%s=%d\n", f->name, *(bool *)f->value ? 1 : 0);
            break;
        default: {
            const char *v = *(const char **)f->value;
            used += (size_t)snprintf(s + used, cap - used, "%s=%s\n", f->name, v ? v : "");
        }
        }
    }
    snprintf(s + used, cap - used, "%s", extra ? extra : "");
    *out = s;
    return TRI_OK;
}
