#!/usr/bin/env bash
# Runs cohort-comm-bench (NCCL through cohort's process_group, one process per GPU) and then
# torch.distributed's NCCL on the same sizes, and prints both tables. Needs a CUDA build of
# cohort (COHORT_CUDA=ON):
#   benchmarks/gpu_comm_bench.sh BUILD_DIR [WORLD_SIZE] [extra cohort-comm-bench args...]
set -euo pipefail
build=${1:?usage: gpu_comm_bench.sh BUILD_DIR [WORLD_SIZE] [args...]}
world=${2:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
shift $(( $# >= 2 ? 2 : 1 ))
bench="$build/bin/cohort-comm-bench"
[[ -x "$bench" ]] || { echo "gpu_comm_bench.sh: $bench not found (build target cohort-comm-bench)" >&2; exit 1; }
port=$(( 29600 + RANDOM % 200 ))
# The rendezvous store serves only clients holding its secret: one for this run's ranks.
COHORT_STORE_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export COHORT_STORE_SECRET
pids=()
for (( r = world - 1; r >= 1; r-- )); do
  "$bench" --rank "$r" --world-size "$world" --store "127.0.0.1:$port" --backend nccl --device "cuda:$r" "$@" \
    > "/tmp/cohort-comm-bench.$r.log" 2>&1 &
  pids+=($!)
done
status=0
"$bench" --rank 0 --world-size "$world" --store "127.0.0.1:$port" --backend nccl --device cuda:0 "$@" || status=$?
for p in "${pids[@]}"; do wait "$p" || status=$?; done
if (( status != 0 )); then
  for (( r = 1; r < world; r++ )); do echo "--- rank $r"; cat "/tmp/cohort-comm-bench.$r.log"; done >&2
  exit "$status"
fi
python3 "$(dirname "$0")/torch_comm_bench.py" --world-size "$world"
