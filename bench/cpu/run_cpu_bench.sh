#!/usr/bin/env bash
# CPU benchmark of one fsdp2 training step on 2 Gloo ranks (issue 8): tokens/s and peak RSS of rank 0, with
# activation checkpointing off and on, printed against the committed previous result so regressions show without
# a GPU. Not a test: numbers depend on the machine and its load.
#   bench/cpu/run_cpu_bench.sh [BUILD_DIR] [--save]      (cmake target: bench_cpu)
# --save replaces bench/results/cpu-2rank-baseline.jsonl with this run's numbers.
set -eo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
save=${2:-}
baseline=$root/bench/results/cpu-2rank-baseline.jsonl
model=${BENCH_CPU_MODEL:-builtin:qwen2-tiny}
seq=${BENCH_CPU_SEQ:-256}
mbs=${BENCH_CPU_MBS:-2}
steps=${BENCH_CPU_STEPS:-6}
warmup=${BENCH_CPU_WARMUP:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Random tokens below the tiny models' vocabulary (256), int32, enough for every rank and step.
python3 -c "
import array, random
random.seed(0)
n = 2 * $mbs * $seq * ($steps + $warmup + 1)
array.array('i', [random.randrange(256) for _ in range(n)]).tofile(open('$work/tokens.bin', 'wb'))"
port=$((29000 + RANDOM % 1000))
for ac in "" "--ac"; do
  pids=()
  for rank in 0 1; do
    OMP_NUM_THREADS=1 RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$build/bin/bench_engine_train" --model "$model" --tokens "$work/tokens.bin" --plugin-dir "$build/plugins" \
      --device cpu --backend fsdp2 --seq "$seq" --mbs "$mbs" --steps "$steps" --warmup "$warmup" $ac \
      --out "$work/results.jsonl" > "$work/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || { echo "rank $i failed:"; cat "$work/rank$i.log"; exit 1; }
  done
  port=$((port + 1))
done
python3 "$root/bench/cpu/compare.py" "$work/results.jsonl" "$baseline" --model "$model"
if [ "$save" = "--save" ]; then
  cp "$work/results.jsonl" "$baseline"
  echo "saved as $baseline"
fi
