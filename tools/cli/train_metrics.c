/* tools/cli/train_metrics.c - metrics JSON lines, time split, stragglers, ETA (see train_metrics.h). */
#include "tools/cli/train_metrics.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/status.h"
#include "engine/core/tensor.h"

#define FIELDS 4 /* per rank: compute_s, wait_s, mem_mib, steps */

int tri_train_metrics_init(tri_train_metrics *m, FILE *out, tri_comm *world, double peak_gflops_per_rank,
                           int64_t first_iter, int64_t last_iter)
{
    memset(m, 0, sizeof *m);
    m->out = out;
    m->world = world;
    m->peak_flops = peak_gflops_per_rank * 1e9 * world->size;
    m->first_iter = first_iter;
    m->last_iter = last_iter;
    m->t_start = tri_now_s();
    m->straggler_rank = -1;
    m->gathered = calloc((size_t)world->size * FIELDS, sizeof *m->gathered);
    return m->gathered ? TRI_OK : TRI_ERR(TRI_ENOMEM, "metrics: out of memory for %d ranks", world->size);
}

void tri_train_metrics_free(tri_train_metrics *m)
{
    free(m->gathered);
    m->gathered = NULL;
}

double tri_train_metrics_eta(const tri_train_metrics *m, int64_t iter)
{
    int64_t done = iter - m->first_iter;
    if (done <= 0)
        return 0.0;
    return (tri_now_s() - m->t_start) / (double)done * (double)(m->last_iter - iter);
}

const char *tri_format_duration(double s, char *buf, size_t cap)
{
    if (!(s >= 0.0) || s > 1e9)
        snprintf(buf, cap, "?");
    else if (s >= 3600.0)
        snprintf(buf, cap, "%dh%02dm%02ds", (int)(s / 3600), (int)fmod(s / 60, 60), (int)fmod(s, 60));
    else if (s >= 60.0)
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, cap, "%.1fs", s);
    return buf;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* All ranks' interval figures; the straggler is the rank with the most compute seconds. */
static int exchange(tri_train_metrics *m, size_t mem_peak_bytes, int steps)
{
    int n = m->world->size;
    float mine[FIELDS] = {(float)m->interval.compute_s, (float)tri_step_time_wait(&m->interval),
                          (float)((double)mem_peak_bytes / 1048576.0), (float)steps};
    int rc = tri_comm_all_gather(m->world, tri_tensor_1d(m->gathered, TRI_F32, (int64_t)n * FIELDS),
                                 tri_tensor_1d(mine, TRI_F32, FIELDS));
    if (rc)
        return rc;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c)
        return TRI_ERR(TRI_ENOMEM, "metrics: out of memory");
    m->straggler_rank = 0;
    for (int r = 0; r < n; r++) {
        c[r] = m->gathered[r * FIELDS];
        if (c[r] > m->gathered[m->straggler_rank * FIELDS])
            m->straggler_rank = r;
    }
    m->straggler_compute_s = m->gathered[m->straggler_rank * FIELDS];
    qsort(c, (size_t)n, sizeof *c, by_value);
    m->median_compute_s = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    m->interval = (tri_step_time){0};
    return TRI_OK;
}

static cJSON *rank_array(const float *g, int n, int field)
{
    cJSON *a = cJSON_CreateArray();
    for (int r = 0; r < n && a; r++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(g[r * FIELDS + field]));
    return a;
}

static void add_numbers(cJSON *o, const char *const *names, const double *values, int n)
{
    for (int i = 0; i < n; i++)
        cJSON_AddNumberToObject(o, names[i], isfinite(values[i]) ? values[i] : -1.0);
}

static void write_line(tri_train_metrics *m, int64_t iter, const double *v, const char *const *names, int nv,
                       bool exchanged)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "train");
    cJSON_AddNumberToObject(o, "iter", (double)iter);
    add_numbers(o, names, v, nv);
    if (m->moe && m->moe->E > 0) {
        tri_moe_summary sum = tri_moe_stats_summary(m->moe);
        cJSON_AddNumberToObject(o, "moe_aux_loss", sum.aux);
        cJSON_AddNumberToObject(o, "moe_z_loss", sum.z);
        cJSON_AddNumberToObject(o, "moe_load", sum.max_load);
        cJSON_AddNumberToObject(o, "moe_drop_frac", sum.drop_frac);
        cJSON *layer = cJSON_AddArrayToObject(o, "moe_layer"), *load = cJSON_AddArrayToObject(o, "moe_layer_load"),
              *drop = cJSON_AddArrayToObject(o, "moe_layer_drop_frac");
        for (int l = 0; l < m->moe->n_layers; l++) {
            int64_t routed, kept;
            tri_moe_stats_totals(m->moe, l, &routed, &kept);
            if (routed == 0)
                continue;
            cJSON_AddItemToArray(layer, cJSON_CreateNumber(l));
            cJSON_AddItemToArray(load, cJSON_CreateNumber(tri_moe_stats_load(m->moe, l)));
            cJSON_AddItemToArray(drop, cJSON_CreateNumber((double)(routed - kept) / (double)routed));
        }
    }
    if (exchanged) {
        cJSON *ranks = cJSON_AddObjectToObject(o, "ranks");
        cJSON_AddItemToObject(ranks, "compute_s", rank_array(m->gathered, m->world->size, 0));
        cJSON_AddItemToObject(ranks, "wait_s", rank_array(m->gathered, m->world->size, 1));
        cJSON_AddItemToObject(ranks, "mem_mib", rank_array(m->gathered, m->world->size, 2));
        cJSON_AddNumberToObject(o, "straggler_rank", m->straggler_rank);
        cJSON_AddNumberToObject(o, "straggler_compute_s", m->straggler_compute_s);
        cJSON_AddNumberToObject(o, "median_compute_s", m->median_compute_s);
    }
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        fprintf(m->out, "%s\n", s);
        fflush(m->out);
    }
    cJSON_free(s);
    cJSON_Delete(o);
}

int tri_train_metrics_step(tri_train_metrics *m, int64_t iter, double loss, double lr, double grad_norm,
                           const tri_step_time *t, double flops, double tokens, size_t mem_peak_bytes,
                           bool exchange_now)
{
    tri_step_time_add(&m->interval, t);
    m->steps++;
    if (exchange_now) {
        int rc = exchange(m, mem_peak_bytes, m->steps);
        if (rc)
            return rc;
        m->steps = 0;
    }
    if (!m->out)
        return TRI_OK;
    double dt = t->step_s > 0 ? t->step_s : 1e-9;
    static const char *const names[] = {"loss", "lr", "grad_norm", "ms", "tokens_per_s", "gflops", "mfu",
                                        "step_s", "compute_s", "tp_s", "pp_s", "bubble_s", "dp_s",
                                        "other_s", "mem_mib", "eta_s", "tp_bytes", "pp_bytes", "dp_bytes",
                                        "ep_s", "ep_bytes", "cp_s", "cp_bytes"};
    double v[] = {loss, lr, grad_norm, dt * 1e3, tokens / dt, flops / dt / 1e9,
                  m->peak_flops > 0 ? flops / dt / m->peak_flops : 0.0, t->step_s, t->compute_s, t->tp_s,
                  t->pp_s, t->bubble_s, t->dp_s, t->other_s, (double)mem_peak_bytes / 1048576.0,
                  tri_train_metrics_eta(m, iter), t->tp_bytes, t->pp_bytes, t->dp_bytes, t->ep_s, t->ep_bytes,
                  t->cp_s, t->cp_bytes};
    write_line(m, iter, v, names, (int)(sizeof v / sizeof *v), exchange_now);
    return TRI_OK;
}
