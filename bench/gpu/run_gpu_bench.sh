#!/usr/bin/env bash
# The GPU comparison of issue 8, in one call on the GPU machine, from the repo root:
#   bench/gpu/run_gpu_bench.sh [out-dir] [shapes...]      (default shapes: 0.5B 1.5B)
# Builds what it needs while it makes one random-init checkpoint + token file per shape, then runs the reference
# (transformers + PyTorch FSDP2) and enginery's fsdp2 engine with activation checkpointing off and on (one after the
# other, nothing else running), and writes results.jsonl plus a markdown table (make_table.py) into out-dir.
# BENCH_PROFILE=1: the engine also profiles one more step per run (kineto) and profile_summary.py summarises it.
# BENCH_REFERENCE=0: engine only (a quick iteration; MFU then uses BENCH_FLOPS_PER_TOKEN, e.g. 11375345664 for
# the 1.5B shape at seq 4096, as reference_fsdp2.py counts it). The table of record always runs both.
set -eo pipefail
out=${1:-bench/results}; shift || true
shapes=${*:-0.5B 1.5B}
steps=${BENCH_STEPS:-10}
warmup=${BENCH_WARMUP:-3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
scripts/gpu/build.sh build-gpu enginery_fsdp bench_engine_train > "$out/build.log" 2>&1 &
build=$!
for shape in $shapes; do
  dir=/tmp/bench-$shape
  [ -f $dir/tokens.bin ] || (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir) > /dev/null 2>&1
done
wait $build || { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
for shape in $shapes; do
  dir=/tmp/bench-$shape
  for ac in "" "--ac"; do
    if [ "${BENCH_REFERENCE:-1}" = 0 ]; then
      echo "{\"flops_per_token\": ${BENCH_FLOPS_PER_TOKEN:-0}}" > /tmp/ref.json
    else
      torchrun --nproc-per-node 1 --master-port 29611 bench/gpu/reference_fsdp2.py --shape $shape --model-dir $dir \
        --tokens $dir/tokens.bin --seq 4096 --mbs 2 --steps $steps --warmup $warmup $ac --out "$out/results.jsonl" \
        | tail -1 > /tmp/ref.json || echo '{}' > /tmp/ref.json
    fi
    fpt=$(python3 -c "import json;print(json.load(open('/tmp/ref.json')).get('flops_per_token',0))")
    prof=""; tag=$shape${ac:+-ac}
    [ -n "${BENCH_PROFILE:-}" ] && prof="--profile /tmp/eng-$tag.json"
    timeout ${BENCH_ENGINE_TIMEOUT:-400} build-gpu/bin/bench_engine_train --model $dir --tokens $dir/tokens.bin --plugin-dir build-gpu/plugins \
      --device cuda --backend fsdp2 --seq 4096 --mbs 2 --steps $steps --warmup $warmup $ac $prof \
      --flops-per-token "$fpt" --out "$out/results.jsonl.$shape" || echo "engine run failed: $shape $ac"
    [ -f "$out/results.jsonl.$shape" ] && sed "s/^{/{\"shape\":\"$shape\",/" "$out/results.jsonl.$shape" >> "$out/results.jsonl" && rm "$out/results.jsonl.$shape"
    if [ -n "$prof" ] && [ -f /tmp/eng-$tag.json ]; then
      python3 bench/gpu/profile_summary.py /tmp/eng-$tag.json --top 30 > "$out/profile-engine-$tag.txt" 2>&1 || true
    fi
  done
done
python3 bench/gpu/make_table.py "$out/results.jsonl" > "$out/table.md"
cat "$out/table.md"
