/* partitioner/memory_table.c - the per-stage memory table (see memory_table.h). */
#include "partitioner/memory_table.h"

const char *tri_format_bytes(double bytes, char *buf, int cap)
{
    if (bytes >= 1024.0 * 1024.0 * 1024.0)
        snprintf(buf, (size_t)cap, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    else if (bytes >= 1024.0 * 1024.0)
        snprintf(buf, (size_t)cap, "%.2f MiB", bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, (size_t)cap, "%.1f KiB", bytes / 1024.0);
    return buf;
}

void tri_memory_table_print(FILE *f, int pp, const double (*bytes)[TRI_MEM_KINDS], const int *in_flight,
                            double usable, const char *source)
{
    char u[32];
    fprintf(f, "memory per GPU by category (%s)%s%s:\n", source, usable > 0 ? ", usable " : "",
            usable > 0 ? tri_format_bytes(usable, u, sizeof u) : "");
    fprintf(f, "  %-5s %11s %11s %11s %24s %11s %11s %11s%s\n", "stage", "parameters", "gradients", "optimizer",
            in_flight ? "activations (in flight)" : "activations", "comm", "workspace", "total",
            usable > 0 ? "  fits" : "");
    for (int r = 0; r < pp; r++) {
        char b[TRI_MEM_KINDS][32], act[48], tot[32];
        double total = 0.0;
        for (int k = 0; k < TRI_MEM_KINDS; k++) {
            tri_format_bytes(bytes[r][k], b[k], sizeof b[k]);
            total += bytes[r][k];
        }
        if (in_flight)
            snprintf(act, sizeof act, "%s (x%d)", b[TRI_MEM_ACTIVATIONS], in_flight[r]);
        else
            snprintf(act, sizeof act, "%s", b[TRI_MEM_ACTIVATIONS]);
        fprintf(f, "  %-5d %11s %11s %11s %24s %11s %11s %11s%s\n", r, b[TRI_MEM_PARAMS], b[TRI_MEM_GRADS],
                b[TRI_MEM_OPTIMIZER], act, b[TRI_MEM_COMM], b[TRI_MEM_WORKSPACE],
                tri_format_bytes(total, tot, sizeof tot), usable <= 0 ? "" : total <= usable ? "  yes" : "  NO");
    }
}
