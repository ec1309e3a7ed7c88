#!/usr/bin/env bash
# The offload comparison of issue 17 (engine.param_offload + engine.optimizer_offload) in one call on the GPU
# machine, from the repo root:
#   bench/gpu/run_offload_bench.sh [out-dir] [shapes...]   (default 3B; at 7B a 128 GiB host holds one offload key only)
# Builds what it needs while it makes the random-init checkpoint + token file, then runs, one after the other:
# enginery fsdp2 resident, enginery fsdp2 with both offload keys and the optimizer step streamed through the GPU,
# the same with the step on the host — all the same BENCH_STEPS steps, so their losses compare step by step — and
# PyTorch FSDP2 + CPUOffloadPolicy (fewer steps: its CPU AdamW takes seconds a step), and writes results.jsonl
# plus a markdown table (make_offload_table.py) into out-dir.
# BENCH_AC=0 turns activation checkpointing off (on by default: the resident 3B run needs it to fit 141 GB with
# room to spare); BENCH_REF_OPTIM=fused|foreach|default picks the reference's torch.optim.AdamW implementation
# (default: what torch picks for CPU tensors, as verl runs it). BENCH_GPU_TEST=1 (default) also builds and runs the
# offload GPU tests first (tests/fsdp/fsdp_offload_gpu_test.cpp, about a minute), output in out-dir/gpu_test.log.
# BENCH_MODES picks the engine rows (default "resident device host"; also "params" and "optimizer": one offload
# key alone, for shapes whose full offload does not fit the host). BENCH_MICRO_BATCHES="1 8" runs every row once
# per count of micro-batches per step (gradient accumulation, as in verl's mini-batches); BENCH_REF=0 skips the
# PyTorch reference.
set -eo pipefail
out=${1:-bench/results/offload}; shift || true
shapes=${*:-3B}
steps=${BENCH_STEPS:-20}
warmup=${BENCH_WARMUP:-2}
ref_steps=${BENCH_REF_STEPS:-4}
ref_warmup=${BENCH_REF_WARMUP:-1}
ac=""; [ "${BENCH_AC:-1}" = 1 ] && ac="--ac"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
targets="enginery_fsdp bench_engine_train"
[ "${BENCH_GPU_TEST:-1}" = 1 ] && targets="$targets fsdp_offload_gpu_test"
scripts/gpu/build.sh build-gpu $targets > "$out/build.log" 2>&1 &
build=$!
for shape in $shapes; do
  dir=/tmp/bench-$shape
  # A token file from an earlier call may be too short for BENCH_MICRO_BATCHES x BENCH_STEPS: made again then.
  [ "$(stat -c %s $dir/tokens.bin 2>/dev/null || echo 0)" -ge $((2 * 4096 * 512 * 4)) ] ||
    (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir --tokens $((2 * 4096 * 512))) \
    > /dev/null 2>&1
done
wait $build || { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
if [ "${BENCH_GPU_TEST:-1}" = 1 ]; then
  timeout 300 build-gpu/bin/fsdp_offload_gpu_test > "$out/gpu_test.log" 2>&1 || echo "GPU offload tests FAILED"
  grep -E "^\[  (PASSED|FAILED) |^offload|GB offloaded|param diff" "$out/gpu_test.log" || tail -20 "$out/gpu_test.log"
fi
for shape in $shapes; do
  dir=/tmp/bench-$shape
  modes=()
  for m in ${BENCH_MODES:-resident device host}; do
    case $m in
      resident) modes+=("") ;;
      device) modes+=("--param-offload --optimizer-offload --offload-step device") ;;
      host) modes+=("--param-offload --optimizer-offload --offload-step host") ;;
      params) modes+=("--param-offload") ;;
      optimizer) modes+=("--optimizer-offload") ;;
      *) echo "BENCH_MODES: unknown mode '$m' (allowed: resident device host params optimizer)"; exit 2 ;;
    esac
  done
  for k in ${BENCH_MICRO_BATCHES:-1}; do
    for offload in "${modes[@]}"; do
      timeout ${BENCH_ENGINE_TIMEOUT:-240} build-gpu/bin/bench_engine_train --model $dir --tokens $dir/tokens.bin \
        --plugin-dir build-gpu/plugins --device cuda --backend fsdp2 --seq 4096 --mbs 2 --micro-batches $k \
        --steps $steps --warmup $warmup $ac $offload --out "$out/results.jsonl.$shape" ||
        echo "engine run failed: $shape $k $offload"
    done
    [ "${BENCH_REF:-1}" = 1 ] || continue
    timeout ${BENCH_REF_TIMEOUT:-300} torchrun --nproc-per-node 1 --master-port 29612 \
      bench/gpu/reference_offload_fsdp2.py --shape $shape --model-dir $dir --tokens $dir/tokens.bin --seq 4096 \
      --mbs 2 --micro-batches $k --steps $ref_steps --warmup $ref_warmup $ac \
      --optim-impl ${BENCH_REF_OPTIM:-default} --out "$out/results.jsonl.$shape" || echo "reference run failed: $shape $k"
  done
  # The engine's lines carry no shape; the reference's repeats the same one (json keeps the last).
  [ -f "$out/results.jsonl.$shape" ] && sed "s/^{/{\"shape\":\"$shape\",/" "$out/results.jsonl.$shape" \
    >> "$out/results.jsonl" && rm "$out/results.jsonl.$shape"
done
python3 bench/gpu/make_offload_table.py "$out/results.jsonl" > "$out/table.md"
cat "$out/table.md"
