/* partitioner/kernel_time.c - the kernel-time model (see kernel_time.h). */
#include "partitioner/kernel_time.h"

#include <string.h>

#include "engine/core/status.h"

const char *tri_bound_name(tri_bound b)
{
    return b == TRI_BOUND_COMPUTE ? "compute" : b == TRI_BOUND_LAUNCH ? "launch" : "memory";
}

tri_kernel_rates tri_kernel_rates_of(const tri_hardware *hw)
{
    return (tri_kernel_rates){.tc_flops = hw->peak_bf16 * hw->eff.gemm,
                              .cc_flops = hw->peak_fp32 * hw->eff.gemm,
                              .bytes = hw->mem_bw * hw->eff.memory,
                              .launch_s = hw->launch_s,
                              .graph_node_s = TRI_GRAPH_NODE_S};
}

/* The two roofs of one kernel, seconds. */
static void roofs(const tri_kernel_cost *k, const tri_kernel_rates *r, double *compute, double *memory)
{
    *compute = (k->flops_tc > 0 ? k->flops_tc / r->tc_flops : 0.0) + (k->flops > 0 ? k->flops / r->cc_flops : 0.0);
    *memory = k->bytes > 0 ? k->bytes / r->bytes : 0.0;
}

/* A kernel's launch cost: a launch's, or a graph node's. */
static double launch_of(const tri_kernel_cost *k, const tri_kernel_rates *r)
{
    return k->graph_node ? r->graph_node_s : r->launch_s;
}

double tri_kernel_seconds(const tri_kernel_cost *k, const tri_kernel_rates *r, tri_bound *bound)
{
    double compute, memory, launch = launch_of(k, r);
    roofs(k, r, &compute, &memory);
    double work = compute > memory ? compute : memory;
    if (bound)
        *bound = launch > work ? TRI_BOUND_LAUNCH : compute > memory ? TRI_BOUND_COMPUTE : TRI_BOUND_MEMORY;
    return work + launch;
}

static tri_op_time *row_of(tri_step_prediction *p, const char *op)
{
    for (int i = 0; i < p->n; i++)
        if (p->row[i].op == op || strcmp(p->row[i].op, op) == 0)
            return &p->row[i];
    if (p->n == TRI_OP_TIME_ROWS)
        return NULL;
    tri_op_time *t = &p->row[p->n++];
    *t = (tri_op_time){.op = op};
    return t;
}

int tri_kernel_time_predict(const tri_kernel_cost *k, int64_t n, const tri_kernel_rates *r, tri_step_prediction *out)
{
    memset(out, 0, sizeof *out);
    int64_t last_call = -1;
    const char *last_op = NULL;
    for (int64_t i = 0; i < n; i++) {
        tri_op_time *t = row_of(out, k[i].op);
        if (!t)
            return TRI_ERR(TRI_EINVAL, "kernel-time model: more than %d ops", TRI_OP_TIME_ROWS);
        if (k[i].call != last_call || k[i].op != last_op) {
            t->calls++;
            t->launch_s += r->call_s;
        }
        last_call = k[i].call, last_op = k[i].op;
        double compute, memory;
        roofs(&k[i], r, &compute, &memory);
        if (compute > memory)
            t->compute_s += compute;
        else
            t->memory_s += memory;
        t->launch_s += launch_of(&k[i], r);
        out->graph_nodes += k[i].graph_node;
        t->launches++;
        t->bytes += k[i].bytes;
        t->flops += k[i].flops_tc + k[i].flops;
    }
    for (int i = 0; i < out->n; i++) {
        tri_op_time *t = &out->row[i];
        t->seconds = t->compute_s + t->memory_s + t->launch_s;
        t->bound = t->launch_s > t->compute_s && t->launch_s > t->memory_s ? TRI_BOUND_LAUNCH
                   : t->compute_s > t->memory_s                            ? TRI_BOUND_COMPUTE
                                                                           : TRI_BOUND_MEMORY;
        out->seconds += t->seconds;
    }
    for (int i = 1; i < out->n; i++) /* insertion sort by seconds, largest first */
        for (int j = i; j > 0 && out->row[j].seconds > out->row[j - 1].seconds; j--) {
            tri_op_time s = out->row[j];
            out->row[j] = out->row[j - 1];
            out->row[j - 1] = s;
        }
    return TRI_OK;
}

const tri_op_time *tri_step_prediction_find(const tri_step_prediction *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->row[i].op, name) == 0)
            return &p->row[i];
    return NULL;
}

void tri_step_prediction_report(const tri_step_prediction *p, FILE *f)
{
    int w = 22; /* the name column: as wide as the longest name */
    for (int i = 0; i < p->n; i++)
        if ((int)strlen(p->row[i].op) > w)
            w = (int)strlen(p->row[i].op);
    fprintf(f, "%-*s %10s %10s %7s %9s %10s %10s  %s\n", w, "op", "calls", "ms", "share", "launches", "GB", "GFLOP",
            "bound");
    int64_t calls = 0, launches = 0;
    double bytes = 0, flops = 0;
    for (int i = 0; i < p->n; i++) {
        const tri_op_time *t = &p->row[i];
        fprintf(f, "%-*s %10lld %10.3f %6.1f%% %9lld %10.3f %10.1f  %s\n", w, t->op, (long long)t->calls,
                t->seconds * 1e3, p->seconds > 0 ? 100.0 * t->seconds / p->seconds : 0.0, (long long)t->launches,
                t->bytes / 1e9, t->flops / 1e9, tri_bound_name(t->bound));
        calls += t->calls, launches += t->launches, bytes += t->bytes, flops += t->flops;
    }
    fprintf(f, "%-*s %10lld %10.3f %7s %9lld %10.3f %10.1f\n", w, "total", (long long)calls, p->seconds * 1e3, "",
            (long long)launches, bytes / 1e9, flops / 1e9);
}
