/* tools/cli/threads.h - the process's OpenMP and OpenBLAS threads (tools and benchmarks).
 *
 * Apart from tools/cli/backend.h, which may bring the CUDA backend: a program that only sets its
 * threads (ckpt, tokenize) links no CUDA library and registers no kernel when it starts. */
#ifndef TRIDENT_TOOLS_CLI_THREADS_H
#define TRIDENT_TOOLS_CLI_THREADS_H

/* OpenMP threads that busy-wait between loops take the cores from OpenBLAS's threads; libgomp reads
 * OMP_WAIT_POLICY only when it loads, so when it is unset this sets it to PASSIVE and re-executes
 * the program (same arguments, same process) before anything else runs. Call first in main. */
void tri_cli_passive_openmp(char **argv);

/* Sets the process-wide OpenMP and OpenBLAS thread counts. */
void tri_cli_set_threads(int threads);

#endif
