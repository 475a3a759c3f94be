/* tools/cli/fault.h - the command line's side of fault handling: SIGTERM/SIGINT as a stop request,
 * the run-identity text every rank compares, and the hidden test-only fault injections.
 *
 * A signal handler may only set a flag (sig_atomic_t): the trainer reads it at the step boundary
 * and the ranks agree on it (engine/train/fault.h), so every rank stops after the same step. The flag is
 * the one global of the tools: a signal handler has no other place to write. */
#ifndef TRIDENT_TOOLS_CLI_FAULT_H
#define TRIDENT_TOOLS_CLI_FAULT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/train/fault.h"
#include "engine/train/train.h"
#include "tools/cli/flags.h"

/* Installs the SIGTERM, SIGINT and SIGUSR1 handlers (the first signal sets the stop flag; a second
 * SIGINT restores the default action, so a second Ctrl-C kills). Open MPI's mpirun forwards SIGUSR1
 * to every rank at once, but answers its own SIGTERM by signalling the ranks only after
 * odls_base_sigkill_timeout (1 s) and killing them 1 s later. */
void tri_cli_stop_signals_install(void);

/* The stop flag itself, for tri_comm_set_alert. */
const volatile sig_atomic_t *tri_cli_stop_flag(void);

/* The signal that asked to stop (SIGTERM, SIGINT, SIGUSR1), or 0. */
int tri_cli_stop_signal(void);

/* Test-only fault injection, from environment variables (absent: none; not in --help):
 *   TRIDENT_INJECT_NAN="RANK:ITER[:N]"    world rank RANK's gradients get a NaN at iterations ITER ..
 *                                         ITER + N - 1 (N = 1 by default)
 *   TRIDENT_INJECT_STALL="RANK:ITER:SEC"  world rank RANK sleeps SEC seconds before iteration ITER
 *   TRIDENT_INJECT_IDENTITY="RANK[:W]"    world rank RANK's identity text gets an extra line: at
 *                                         start (W = 1, the default) or on resume (W = 2)
 * TRI_EINVAL names a malformed value. */
typedef struct tri_cli_injection {
    int nan_rank, stall_rank, identity_rank;  /* -1: none */
    int identity_which;                       /* 1: the start check, 2: the resume check */
    int64_t nan_iter, nan_count, stall_iter;
    double stall_s;
} tri_cli_injection;

int tri_cli_injection_read(tri_cli_injection *inj);

/* The trainer's after_grads hook (engine/train/train.h) for TRIDENT_INJECT_NAN; ctx is the
 * tri_cli_injection. At the injected iterations world rank nan_rank's first owned gradient becomes a
 * NaN after every reduction, as a faulty device would leave it. */
int tri_cli_injection_nan_hook(void *ctx, tri_trainer *t, int64_t iter);

/* Sleeps for the stall injected at iteration iter on world rank `rank`, if any. */
void tri_cli_injection_stall(const tri_cli_injection *inj, int rank, int64_t iter);

/* The canonical identity text of a run: "world_size=N" then one "flag=value" line per flag (in
 * table order, every flag whether given or defaulted, except those listed in `skip`, a
 * "|"-separated list of flag names whose value may differ between ranks), then `extra`.
 * *out is malloc'd. */
int tri_cli_identity_text(const tri_flag *flags, int n, const char *skip, int world_size, const char *extra,
                          char **out);

#endif
