#!/usr/bin/env bash
# Weight export for the rollout (issue 17, item 3), in one call on the GPU machine, from the repo root:
#   bench/gpu/run_export_bench.sh [out-dir] [shapes...]      (default shapes: 1.5B 3B)
# Per shape, one process at a time on one GPU, the same checkpoint (make_bench_inputs.py, reused when present):
#   reference  PyTorch FSDP2: DTensor.full_tensor() per state_dict() entry, then bf16 (verl), and bf16-then-gather
#   enginery   fsdp2 engine: weight_stream(bf16), weight_stream(fp32), WeightBucketer (512 MiB)
# Writes results.jsonl and table.md (make_export_table.py) into out-dir. Expects build-gpu/ built with
# bench_weight_export (scripts/gpu/build.sh build-gpu enginery_fsdp bench_weight_export) unless BUILD=1.
# BENCH_NPROC=N: N ranks on N GPUs of the machine (the reference under torchrun, the engine's ranks started here
# with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* set: torchrun's agent holds MASTER_PORT, which rank 0 of the engine
# serves itself); every rank exports, rank 0 reports.
set -eo pipefail
out=${1:-bench/results/export}
shift || true
shapes=${*:-1.5B 3B}
repeat=${BENCH_REPEAT:-5}
nproc=${BENCH_NPROC:-1}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
rm -f "$out/results.jsonl"
if [ "${BUILD:-0}" = 1 ]; then
  scripts/gpu/build.sh build-gpu enginery_fsdp bench_weight_export > "$out/build.log" 2>&1 \
    || { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
fi
for shape in $shapes; do
  dir=/tmp/bench-$shape
  [ -f $dir/tokens.bin ] || (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir) \
    > "$out/inputs-$shape.log" 2>&1 || { echo "making the $shape checkpoint failed"; tail -20 "$out/inputs-$shape.log"; exit 1; }
  (cd bench/gpu && timeout 300 torchrun --nproc-per-node $nproc --master-port 29631 reference_export_fsdp2.py \
    --model-dir $dir --shape $shape --repeat $repeat) 2> "$out/reference-$shape.log" \
    | sed "s/^{/{\"shape\": \"$shape\", /" | grep '^{' >> "$out/results.jsonl" \
    || { echo "reference $shape failed:"; tail -20 "$out/reference-$shape.log"; }
  for ((rank = nproc - 1; rank >= 0; rank--)); do  # rank 0 last, in the foreground: it reports
    cmd=(env RANK=$rank WORLD_SIZE=$nproc LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=29641 timeout 300
         build-gpu/bin/bench_weight_export --model $dir --plugin-dir build-gpu/plugins --device cuda --backend fsdp2
         --repeat $repeat)
    if [ $rank -gt 0 ]; then "${cmd[@]}" > /dev/null 2> "$out/engine-$shape-rank$rank.log" & continue; fi
    "${cmd[@]}" 2> "$out/engine-$shape.log" | sed "s/^{/{\"shape\": \"$shape\", /" | grep '^{' \
      >> "$out/results.jsonl" || { echo "engine $shape failed:"; tail -20 "$out/engine-$shape.log"; }
    wait
  done
done
python3 bench/gpu/make_export_table.py "$out/results.jsonl" | tee "$out/table.md"
