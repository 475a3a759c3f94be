/* engine/core/log.h - log lines carrying the rank coordinates [tp,pp,dp].
 *
 * The coordinates are per thread (ranks run as threads in tests). tri_log_rank0 prints only on
 * world rank 0, for progress; tri_log prints on every rank, for errors and per-rank facts. */
#ifndef TRIDENT_ENGINE_CORE_LOG_H
#define TRIDENT_ENGINE_CORE_LOG_H

#include "engine/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets this thread's coordinates (world rank, tp, pp and dp rank) for later log lines. */
void tri_log_set_rank(int world_rank, int tp_rank, int pp_rank, int dp_rank);
/* Silences tri_log_rank0 (tests) or restores it. */
void tri_log_set_quiet(bool quiet);
bool tri_log_is_rank0(void);

/* "[tp,pp,dp] message" to stderr. */
void tri_log(const char *fmt, ...) TRI_PRINTF(1, 2);
/* The message to stdout on world rank 0 only, with no prefix. */
void tri_log_rank0(const char *fmt, ...) TRI_PRINTF(1, 2);

#ifdef __cplusplus
}
#endif

#endif
