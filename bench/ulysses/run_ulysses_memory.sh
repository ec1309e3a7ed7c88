#!/usr/bin/env bash
# Run THERE (a machine with 2 GPUs), from the repo root, in one device call (carry .deps): what Ulysses sequence
# parallelism ([engine.<backend>] ulysses_sequence_parallel_size, docs/ARCHITECTURE.md "Sequence parallelism")
# buys at one long sequence. Builds the plugin, bench_engine_train and fsdp_ulysses_gpu_test while it writes a
# random-init Qwen2.5-shaped checkpoint (bench/gpu/make_bench_inputs.py); runs the 2-GPU equivalence test; then per
# run one training step of one sequence of SEQ tokens (mbs 1, 1 warm-up + 2 timed steps) on 2 ranks, without
# Ulysses (2 data-parallel ranks, a sequence each) and with size 2 (one sequence group, both ranks on one sequence:
# the same tokens per step for the pair of GPUs). Prints the table (peak CUDA memory allocated per rank, tokens/s,
# loss) and leaves the logs and results.jsonl under OUT.
#   Usage: bench/ulysses/run_ulysses_memory.sh OUT [shape] [runs...]
#   shape: a key of bench/gpu/reference_fsdp2.py's SHAPES (default 1.5B); runs: SEQ:ac with ac off|on (activation
#   checkpointing per layer), default "16384:off 32768:off 32768:on". No run starts after BENCH_DEADLINE seconds
#   (default 540).
#   On a machine without 2 GPUs: run_ulysses_memory.sh --cpu OUT [SEQ:off|on ...] runs the same figure on 2 Gloo CPU
#   ranks (run_ulysses_memory_cpu.sh, a narrowed model; peak resident set per rank) with this checkout's build/.
if [ "$1" = --cpu ]; then
  shift
  cpu_out=${1:?usage: run_ulysses_memory.sh --cpu OUT [SEQ:off|on ...]}
  shift
  exec "$(dirname "$0")/run_ulysses_memory_cpu.sh" "$cpu_out" "$(cd "$(dirname "$0")/../.." && pwd)/build" "$@"
fi
out=${1:?usage: run_ulysses_memory.sh OUT [shape] [SEQ:off|on ...]}
shape=${2:-1.5B}
shift 2 2>/dev/null || shift $#
runs=${*:-16384:off 32768:off 32768:on}
mkdir -p "$out"
source scripts/gpu/setup.sh
set +e +o pipefail
export NCCL_NVLS_ENABLE=0
start=$SECONDS
deadline=${BENCH_DEADLINE:-540}
scripts/gpu/build.sh build-gpu enginery_fsdp bench_engine_train fsdp_ulysses_gpu_test > "$out/build.log" 2>&1 &
build=$!
dir=/tmp/bench-$shape
[ -f $dir/tokens.bin ] || (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir) \
  > "$out/inputs.log" 2>&1 || { echo "inputs failed"; tail -20 "$out/inputs.log"; }
wait $build || { echo "build failed"; grep -E "error" "$out/build.log" | head -20; tail -20 "$out/build.log"; exit 1; }
echo "== build and inputs: $((SECONDS - start)) s"
timeout 150 build-gpu/bin/fsdp_ulysses_gpu_test > "$out/gpu-test.log" 2>&1
grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|  Actual" "$out/gpu-test.log" | head -30
echo "== GPU test: $((SECONDS - start)) s"
for run in $runs; do
  seq=${run%%:*} ac=""
  [ "${run##*:}" = on ] && ac="--ac"
  for sp in 1 2; do
    if [ $((SECONDS - start)) -gt "$deadline" ]; then echo "skipped (deadline): seq $seq ${run##*:} sp $sp"; continue; fi
    tag=$seq-ac-${run##*:}-sp$sp
    timeout 180 torchrun --nproc-per-node 2 --master-port 29621 --no-python build-gpu/bin/bench_engine_train \
      --model $dir --tokens $dir/tokens.bin --plugin-dir build-gpu/plugins --device cuda --backend fsdp2 \
      --seq $seq --mbs 1 --steps 2 --warmup 1 $ac --ulysses $sp --out "$out/results.jsonl" > "$out/engine-$tag.log" 2>&1 \
      || { echo "failed or cut: $tag"; grep -iE "out of memory|error" "$out/engine-$tag.log" | head -3; }
  done
done
python3 - "$out/results.jsonl" "$shape" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
print(f"\n{sys.argv[2]}, 2 GPUs, one sequence per data-parallel rank and step (mbs 1)\n")
print("| seq | AC | ulysses | peak allocated GiB / rank | tokens/s (pair) | rank 0 loss |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['seq']} | {'on' if r['ac'] else 'off'} | {r.get('ulysses', 1)} | {r['peak_mem_gib']:.2f} | "
          f"{r['tokens_per_s']:.0f} | {r['final_loss']:.4f} |")
PY
echo "== total: $((SECONDS - start)) s"
