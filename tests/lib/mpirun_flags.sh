# shellcheck shell=bash disable=SC2054
# tests/lib/mpirun_flags.sh - sourced by the shell tests that start ranks: mpirun's flags for this
# machine, as tests/CMakeLists.txt's trident_mpi_test gives the MPI programs (and why).
#
# Sets mpirun_flags: --oversubscribe (more ranks than cores), --bind-to none (tests side by side
# share the cores), shared memory only (--mca btl self,vader), --timeout (mpirun_timeout if set
# before sourcing, else 300 s) and one OpenMP thread a rank; in the sanitizer build the sanitizers'
# options go to every rank and Open MPI keeps its components loaded, so LeakSanitizer can name (and
# tests/sanitizer/lsan.supp suppress) their leaks. Exports what Open MPI needs to run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_flags=(--oversubscribe --bind-to none --mca btl self,vader --timeout "${mpirun_timeout:-300}"
              -x OMP_NUM_THREADS=1)
for v in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS; do
  if [ -n "${!v:-}" ]; then mpirun_flags+=(-x "$v"); fi
done
if [ -n "${ASAN_OPTIONS:-}" ]; then mpirun_flags+=(--mca mca_base_component_disable_dlclose 1); fi
