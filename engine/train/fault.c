/* engine/train/fault.c - faults every rank must agree on: the per-step verdict (non-finite values, stop
 * requests), the skip decisions, and the run's identity hash (see fault.h). */
#include "engine/train/fault.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

int tri_step_guard_init(tri_step_guard *g, int skip_nonfinite, double spike_zscore, int spike_window)
{
    memset(g, 0, sizeof *g);
    if (skip_nonfinite < 0)
        return TRI_ERR(TRI_EINVAL, "--skip-nonfinite %d: must be 0 or more", skip_nonfinite);
    if (!(spike_zscore >= 0) || !isfinite(spike_zscore))
        return TRI_ERR(TRI_EINVAL, "--skip-loss-spike-zscore %g: must be a finite number >= 0 (0: off)", spike_zscore);
    if (spike_zscore > 0 && spike_window < 2)
        return TRI_ERR(TRI_EINVAL, "--loss-spike-window %d: needs at least 2 losses", spike_window);
    g->skip_nonfinite = skip_nonfinite;
    g->spike_zscore = spike_zscore;
    g->spike_window = spike_zscore > 0 ? spike_window : 0;
    if (g->spike_window > 0) {
        g->window = calloc((size_t)g->spike_window, sizeof *g->window);
        if (!g->window)
            return TRI_ERR(TRI_ENOMEM, "step guard: out of memory for a window of %d losses", spike_window);
    }
    return TRI_OK;
}

void tri_step_guard_destroy(tri_step_guard *g)
{
    free(g->window);
    g->window = NULL;
}

int tri_step_guard_agree(tri_step_guard *g, tri_comm *world, bool local_bad, tri_step_verdict *v)
{
    int n = world->size + 1;
    memset(v, 0, sizeof *v);
    int32_t *flags = calloc((size_t)n, sizeof *flags);
    if (!flags)
        return TRI_ERR(TRI_ENOMEM, "step guard: out of memory for %d flags", n);
    flags[world->rank] = local_bad ? 1 : 0;
    flags[world->size] = g->stop_requested ? 1 : 0;
    int rc = tri_comm_host_all_reduce(world, flags, TRI_I32, n, TRI_REDUCE_MAX);
    if (!rc) {
        size_t used = 0;
        for (int r = 0; r < world->size; r++) {
            if (!flags[r])
                continue;
            v->n_bad++;
            if (used + 16 >= sizeof v->bad_ranks) {
                if (used + 4 < sizeof v->bad_ranks && !strstr(v->bad_ranks, "..."))
                    used += (size_t)snprintf(v->bad_ranks + used, sizeof v->bad_ranks - used, ", ...");
                continue;
            }
            used += (size_t)snprintf(v->bad_ranks + used, sizeof v->bad_ranks - used, "%s%d", used ? ", " : "", r);
        }
        v->stop = flags[world->size] != 0;
    }
    free(flags);
    return rc;
}

/* Whether loss lies more than spike_zscore standard deviations above the mean of a full window. */
static bool is_spike(const tri_step_guard *g, double loss)
{
    if (g->spike_window == 0 || g->n_window < g->spike_window)
        return false;
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < g->n_window; i++)
        mean += g->window[i];
    mean /= g->n_window;
    for (int i = 0; i < g->n_window; i++)
        var += (g->window[i] - mean) * (g->window[i] - mean);
    double sd = sqrt(var / (g->n_window - 1));
    return sd > 0 && (loss - mean) / sd > g->spike_zscore;
}

int tri_step_guard_decide(tri_step_guard *g, int64_t iter, double loss, const tri_step_verdict *v,
                          tri_step_action *action)
{
    *action = TRI_STEP_APPLY;
    if (v->n_bad > 0 || !isfinite(loss)) {
        g->nonfinite_in_row++;
        if (g->nonfinite_in_row > g->skip_nonfinite) {
            char who[200];
            if (v->n_bad > 0)
                snprintf(who, sizeof who, "non-finite gradients or loss on rank%s %s", v->n_bad > 1 ? "s" : "",
                         v->bad_ranks);
            else
                snprintf(who, sizeof who, "the loss is %g", loss);
            if (g->skip_nonfinite > 0)
                return TRI_ERR(TRI_ENONFINITE, "iteration %lld: %s; no update applied; %d non-finite steps in a row "
                               "exceed --skip-nonfinite %d", (long long)iter, who, g->nonfinite_in_row,
                               g->skip_nonfinite);
            return TRI_ERR(TRI_ENONFINITE, "iteration %lld: %s; no update applied (--skip-nonfinite K skips up "
                           "to K such steps in a row)", (long long)iter, who);
        }
        g->skipped_nonfinite++;
        *action = TRI_STEP_SKIP_NONFINITE;
        return TRI_OK;
    }
    g->nonfinite_in_row = 0;
    if (g->spikes_in_row < TRI_SPIKE_MAX_IN_ROW && is_spike(g, loss)) {
        g->spikes_in_row++;
        g->skipped_spikes++;
        *action = TRI_STEP_SKIP_SPIKE;
        return TRI_OK;
    }
    g->spikes_in_row = 0;
    if (g->spike_window > 0) {
        g->window[g->head] = loss;
        g->head = (g->head + 1) % g->spike_window;
        if (g->n_window < g->spike_window)
            g->n_window++;
    }
    return TRI_OK;
}

uint64_t tri_fnv1a64(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#define IDENTITY_TEXT 4096

/* The first line of mine that differs from theirs (both NUL-terminated), into out. */
static void first_difference(const char *mine, const char *theirs, char *out, size_t n)
{
    while (*mine || *theirs) {
        size_t a = strcspn(mine, "\n"), b = strcspn(theirs, "\n");
        if (a != b || memcmp(mine, theirs, a) != 0) {
            snprintf(out, n, "'%.*s' where rank 0 has '%.*s'", (int)(a < 200 ? a : 200), mine,
                     (int)(b < 200 ? b : 200), theirs);
            return;
        }
        mine += a + (mine[a] == '\n');
        theirs += b + (theirs[b] == '\n');
    }
    snprintf(out, n, "a difference beyond the first %d bytes", IDENTITY_TEXT - 1);
}

int tri_identity_agree(tri_comm *world, const char *what, const char *canonical)
{
    int size = world->size;
    int64_t mine = (int64_t)tri_fnv1a64(canonical, strlen(canonical));
    int64_t *all = calloc((size_t)size, sizeof *all);
    int32_t *text = calloc(IDENTITY_TEXT / 4, sizeof *text);
    if (!all || !text) {
        free(all);
        free(text);
        return TRI_ERR(TRI_ENOMEM, "identity check: out of memory for %d ranks", size);
    }
    all[world->rank] = mine; /* an all-gather as a sum of slots, each filled by one rank */
    int rc = tri_comm_host_all_reduce(world, all, TRI_I64, size, TRI_REDUCE_SUM);
    int n_diff = 0, first = 0;
    char ranks[200] = "";
    size_t used = 0;
    for (int r = 1; r < size && !rc; r++) {
        if (all[r] == all[0])
            continue;
        if (n_diff++ == 0)
            first = r;
        if (used + 16 < sizeof ranks)
            used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%d", used ? ", " : "", r);
    }
    if (!rc && n_diff > 0) {
        /* rank 0's text, so a differing rank can say what differs */
        if (world->rank == 0)
            snprintf((char *)text, IDENTITY_TEXT, "%s", canonical);
        rc = tri_comm_host_broadcast(world, text, TRI_I32, IDENTITY_TEXT / 4, 0);
        if (!rc) {
            char detail[512] = "";
            ((char *)text)[IDENTITY_TEXT - 1] = '\0';
            if (all[world->rank] != all[0])
                first_difference(canonical, (const char *)text, detail, sizeof detail);
            rc = TRI_ERR(TRI_EINVAL, "the ranks disagree on the %s: rank%s %s differ%s from rank 0 (hash %016llx on "
                         "rank %d, %016llx on rank 0)%s%s", what, n_diff > 1 ? "s" : "", ranks, n_diff > 1 ? "" : "s",
                         (unsigned long long)all[first], first, (unsigned long long)all[0],
                         detail[0] ? "; this rank has " : "", detail);
        }
    }
    free(all);
    free(text);
    return rc;
}
