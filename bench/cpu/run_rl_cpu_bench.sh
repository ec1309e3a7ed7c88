#!/usr/bin/env bash
# The RL-shaped comparison of issue 16 without a GPU: one PPO step of the fsdp2 engine on 2 Gloo ranks with a tiny
# model over a ragged batch (32 sequences, prompts uniform in [16, 64], responses long-tailed with median 64 and
# cap 192: about half of each padded row is padding), padded vs packed (model.use_remove_padding) vs packed +
# dynamic batch size (engine.use_dynamic_bsz). Prints the table of bench/gpu/make_rl_table.py with enginery padded
# as the baseline (Debian has no transformers, so no reference row). Not a test: numbers depend on the machine.
#   bench/cpu/run_rl_cpu_bench.sh [BUILD_DIR] [OUT_DIR]      (cmake target: bench_rl_cpu)
# BENCH_CPU_MODEL (builtin:qwen2-tiny, or an HF directory), BENCH_CPU_STEPS / BENCH_CPU_WARMUP (2 / 1),
# BENCH_CPU_MBS (4), BENCH_CPU_MAX_TOKEN_LEN (1024: one padded micro-batch, 4 rows x 256).
set -eo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=${2:-}
model=${BENCH_CPU_MODEL:-builtin:qwen2-tiny}
steps=${BENCH_CPU_STEPS:-2}
warmup=${BENCH_CPU_WARMUP:-1}
mbs=${BENCH_CPU_MBS:-4}
budget=${BENCH_CPU_MAX_TOKEN_LEN:-1024}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Token ids below the tiny models' vocabulary (256).
python3 "$root/bench/gpu/make_rl_batch.py" --out "$work/batch.safetensors" --num-seqs 32 --vocab 256 \
  --prompt-min 16 --prompt-max 64 --resp-median 64 --resp-cap 192 --resp-min 4
port=$((29000 + RANDOM % 1000))
run() {  # bench_rl_step's mode flags; both ranks, rank 0 appends the JSON line
  local pids=() rank
  for rank in 0 1; do
    OMP_NUM_THREADS=1 RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$build/bin/bench_rl_step" --model "$model" --batch "$work/batch.safetensors" --plugin-dir "$build/plugins" \
      --device cpu --backend fsdp2 --mbs "$mbs" --steps "$steps" --warmup "$warmup" "$@" \
      --out "$work/results.jsonl" > "$work/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  for rank in 0 1; do
    wait "${pids[$rank]}" || { echo "rank $rank failed ($*):"; tail -20 "$work/rank$rank.log"; exit 1; }
  done
  port=$((port + 1))
}
run
run --remove-padding
run --remove-padding --dynamic-bsz --max-token-len "$budget"
if [ -n "$out" ]; then mkdir -p "$out" && cp "$work/results.jsonl" "$out/"; fi
python3 "$root/bench/gpu/make_rl_table.py" "$work/results.jsonl" \
  --machine "CPU ($(nproc) cores), OMP_NUM_THREADS=1 per rank"
