# shellcheck shell=bash
# bench/dp_methods/methods.sh - sourced by run.sh and pretrained.sh: the flags that make each
# data-parallel method (how the replicas agree), beside whatever batch, schedule and optimizer a run
# gives them, so that both scripts run the same methods.
#   method_flags NAME   prints NAME's flags; returns 1 for a name that is not one of these methods
method_flags() {
  case "$1" in
    1bit|qsgd|topk) echo "--grad-compression $1" ;;
    powersgd) echo "--grad-compression powersgd --powersgd-rank 4" ;;
    powersgd-rank16) echo "--grad-compression powersgd --powersgd-rank 16" ;;
    localsgd-h16) echo "--local-sgd-steps 16 --outer-optimizer average --outer-lr 1" ;;
    diloco-h16) echo "--local-sgd-steps 16 --outer-optimizer nesterov --outer-lr 0.7 --outer-momentum 0.9" ;;
    *) return 1 ;;
  esac
}
