#!/usr/bin/env bash
# Weight export for the rollout (issue 17, item 3), in one call on the GPU machine, from the repo root:
#   bench/gpu/run_export_bench.sh [out-dir] [shapes...]      (default shapes: 1.5B 3B)
# Per shape, one process at a time on one GPU, the same checkpoint (make_bench_inputs.py, reused when present):
#   reference  PyTorch FSDP2: DTensor.full_tensor() per state_dict() entry, then bf16 (verl), and bf16-then-gather
#   enginery   fsdp2 engine: weight_stream(bf16), weight_stream(fp32), WeightBucketer (512 MiB)
# Writes results.jsonl and table.md (make_export_table.py) into out-dir. Expects build-gpu/ built with
# bench_weight_export (scripts/gpu/build.sh build-gpu enginery_fsdp bench_weight_export) unless BUILD=1.
set -eo pipefail
out=${1:-bench/results/export}
shift || true
shapes=${*:-1.5B 3B}
repeat=${BENCH_REPEAT:-5}
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
  (cd bench/gpu && timeout 300 torchrun --nproc-per-node 1 --master-port 29631 reference_export_fsdp2.py \
    --model-dir $dir --shape $shape --repeat $repeat) 2> "$out/reference-$shape.log" \
    | sed "s/^{/{\"shape\": \"$shape\", /" | grep '^{' >> "$out/results.jsonl" \
    || { echo "reference $shape failed:"; tail -20 "$out/reference-$shape.log"; }
  timeout 300 build-gpu/bin/bench_weight_export --model $dir --plugin-dir build-gpu/plugins --device cuda \
    --backend fsdp2 --repeat $repeat 2> "$out/engine-$shape.log" \
    | sed "s/^{/{\"shape\": \"$shape\", /" | grep '^{' >> "$out/results.jsonl" \
    || { echo "engine $shape failed:"; tail -20 "$out/engine-$shape.log"; }
done
python3 bench/gpu/make_export_table.py "$out/results.jsonl" | tee "$out/table.md"
