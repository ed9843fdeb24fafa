#!/usr/bin/env bash
# Idle CPU of a real cluster-head and of a real cluster-worker joined to it (no job), from
# /proc/<pid>/stat over a window: what an idle control plane costs.
#   benchmarks/idle_cpu.sh BIN_DIR [SECONDS]   (BIN_DIR holds cluster-head and cluster-worker)
set -euo pipefail
bin=${1:?usage: idle_cpu.sh BIN_DIR [SECONDS]}
seconds=${2:-30}
dir=$(mktemp -d /tmp/cohort-idle-XXXXXX)
head_pid="" worker_pid=""
cleanup() {
  [[ -n $worker_pid ]] && kill "$worker_pid" 2>/dev/null || true
  [[ -n $head_pid ]] && kill "$head_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
: >"$dir/head.log"; : >"$dir/worker.log"
"$bin/cluster-head" --store "$dir/store" --port 0 >"$dir/head.log" 2>&1 &
head_pid=$!
for _ in $(seq 100); do grep -q "serving on" "$dir/head.log" && break; sleep 0.1; done
address=$(sed -n 's/.*serving on \([^ ]*:[0-9]*\) .*/\1/p' "$dir/head.log" | head -1)
[[ -n $address ]] || { cat "$dir/head.log" >&2; exit 1; }
"$bin/cluster-worker" --address "$address" --credentials "$dir/store/cluster/credentials.json" \
  --name idle0 --num-cpus 2 --num-gpus 0 --worker-program /bin/true >"$dir/worker.log" 2>&1 &
worker_pid=$!
for _ in $(seq 100); do grep -q "joined the leader" "$dir/worker.log" && break; sleep 0.1; done
grep -q "joined the leader" "$dir/worker.log" || { cat "$dir/worker.log" >&2; exit 1; }
sleep 3  # past start-up
hz=$(getconf CLK_TCK)
h0=$(ticks "$head_pid") w0=$(ticks "$worker_pid")
sleep "$seconds"
h1=$(ticks "$head_pid") w1=$(ticks "$worker_pid")
awk -v h=$((h1 - h0)) -v w=$((w1 - w0)) -v hz="$hz" -v s="$seconds" 'BEGIN {
  printf "idle over %d s: cluster-head %.2f%% of a core, cluster-worker %.2f%% of a core\n",
         s, 100 * h / hz / s, 100 * w / hz / s }'
