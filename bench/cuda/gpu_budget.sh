# bench/cuda/gpu_budget.sh - sourced by the GPU check scripts (gpu_check.sh, gpu_check_rest.sh,
# cp_attention.sh): everything printed goes to the screen and to $O/all.log ($OUT, or /tmp/out), the
# packed archives of bench/cuda/gpu_pack.sh are unpacked once, and each step's `timeout "$(tmo N)"`
# takes N seconds or what is left of BUDGET seconds (the caller sets its default) less 5, at
# least 3, so that the whole script ends inside its device booking; `el WHAT` prints a step's header
# with the seconds since the start.
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee "$O/all.log") 2>&1
for a in bin data; do
  [ -d $a ] || [ ! -f $a.tar.xz ] || tar -xJf $a.tar.xz || { echo "gpu_budget: unpacking $a.tar.xz failed"; exit 1; }
done
D=$(( $(date +%s) + ${BUDGET:-300} ))
tmo() { local r=$(( D - $(date +%s) - 5 )); [ "$r" -lt 3 ] && r=3; [ "$r" -gt "$1" ] && echo "$1" || echo "$r"; }
t0=$(date +%s); el() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
