#!/usr/bin/env bash
# tools/valgrind_4rank.sh [BUILD_DIR] - a 4-rank tiny engine_train (tp 2 x pp 2) under valgrind memcheck.
#
# Builds engine_train for the portable x86-64-v3 level (TRIDENT_MARCH; RelWithDebInfo, -O2 -g) into
# BUILD_DIR (default build-valgrind): valgrind 3.19 cannot decode AVX-512, which -march=native and
# OpenBLAS's Cooperlake kernels emit on this machine, so OpenBLAS is also held to its Haswell (AVX2)
# kernels (OPENBLAS_CORETYPE). The only suppressions are the ones ../shared/NOTES.md measured:
# Open MPI's /usr/share/openmpi/openmpi-valgrind.supp plus one for libpmix's writev. Each rank
# writes BUILD_DIR/valgrind/rank.<pid>.log; the script prints each rank's ERROR SUMMARY and exits
# non-zero when any rank reports a memory error (invalid read/write, uninitialised value, bad free:
# --error-exitcode) or training fails. Leaks: Open MPI 4.1.4 itself loses ~19 KB per rank definitely
# inside MPI_Init/MPI_Finalize (measured here; the NOTES.md suppressions do not cover leaks), so a
# definite leak fails the run only when no Open MPI frame (libmpi, libopen-pal/-rte, PMIx, hwloc,
# an mca component) is on its allocation stack, i.e. when it is ours. Takes a few minutes.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-valgrind}
command -v valgrind >/dev/null || { echo "valgrind_4rank: valgrind not found (apt-get install valgrind)"; exit 1; }
if [ ! -x "$build/bin/engine_train" ] || [ "$src/tools/engine_train.c" -nt "$build/bin/engine_train" ]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRIDENT_MARCH=x86-64-v3 -DTRIDENT_CUDA=OFF > /dev/null
  cmake --build "$build" -j2 --target engine_train tokenize > /dev/null
fi
out="$build/valgrind"
rm -rf "$out"
mkdir -p "$out"
cat > "$out/pmix.supp" <<'SUPP'
{
   pmix_writev
   Memcheck:Param
   writev(vector[...])
   ...
   obj:*/libpmix.so*
}
SUPP
printf '{"n_layer": 2, "n_head": 2, "n_embd": 16, "vocab_size": 257, "n_positions": 16}' > "$out/tiny.json"
head -c 20000 "$src/README.md" > "$out/text.txt"
"$build/bin/tokenize" --input "$out/text.txt" --output-prefix "$out/t" --tokenizer-type ByteLevel \
  --val-fraction 0 > /dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$SECONDS
status=0
mpirun --oversubscribe --bind-to none --mca btl self,vader --timeout 1800 -np 4 \
  -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x OPENBLAS_CORETYPE=Haswell -x OMP_WAIT_POLICY=PASSIVE \
  valgrind --num-callers=40 --error-exitcode=3 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=none \
    --suppressions=/usr/share/openmpi/openmpi-valgrind.supp --suppressions="$out/pmix.supp" \
    --log-file="$out/rank.%p.log" \
  "$build/bin/engine_train" --config "$out/tiny.json" --train-data "$out/t_train.bin" --val-data "$out/t_train.bin" \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 2 \
    --seq-length 8 --train-iters 2 --eval-iters 1 --sample-length 4 --save-dir "$out/run" --save-interval 2 \
    > "$out/train.log" 2>&1 || status=$?
for f in "$out"/rank.*.log; do
  echo "$(basename "$f"): $(grep -m1 'ERROR SUMMARY' "$f" | sed 's/^==[0-9]*== //')"
done
errors=$(grep -h 'ERROR SUMMARY' "$out"/rank.*.log | awk '{s += $4} END {print s + 0}')
ranks=$(grep -l 'ERROR SUMMARY' "$out"/rank.*.log | wc -l)
# definite leaks by owner: a record is Open MPI's when any frame of its stack is
awk '/definitely lost in loss record/ {rec = $0; buf = ""; on = 1; next}
     on && /^==[0-9]+== $/ {
       if (buf ~ /libmpi|libopen-pal|libopen-rte|libpmix|libhwloc|libevent|ompi_|orte_|opal_|PMPI_|mca_/) mpi++
       else { ours++; print rec buf > "/dev/stderr" }
       on = 0; next }
     on {buf = buf "\n" $0}
     END {printf "%d %d\n", ours + 0, mpi + 0}' "$out"/rank.*.log > "$out/leaks.txt" 2> "$out/our_leaks.txt"
read -r our_leaks mpi_leaks < "$out/leaks.txt"
echo "valgrind_4rank: $ranks rank(s) checked, $errors memory error(s), $our_leaks definite leak(s) of ours" \
     "($mpi_leaks inside Open MPI), training status $status, $((SECONDS - start)) s"
[ "$our_leaks" -eq 0 ] || head -40 "$out/our_leaks.txt"
if [ "$status" -ne 0 ] || [ "$errors" -ne 0 ] || [ "$ranks" -ne 4 ] || [ "$our_leaks" -ne 0 ]; then
  tail -5 "$out/train.log"
  exit 1
fi
