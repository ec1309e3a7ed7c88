#!/usr/bin/env bash
# Issue 8, one call on the GPU machine: where the time of one training step goes, engine and reference side by side.
#   bench/gpu/profile_run.sh OUT-DIR
# Builds the engine bench while it makes the 1.5B inputs, probes the ATen ops the engine could use
# (api_probe.py), profiles one reference step (transformers + FSDP2, AC off) and one engine step (fsdp2, AC off)
# with kineto, and writes per-phase / per-kernel summaries (profile_summary.py) plus the gzipped traces.
set -o pipefail
out=${1:?usage: profile_run.sh OUT-DIR}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
dir=/tmp/bench-1.5B
steps=${BENCH_STEPS:-4}
warmup=${BENCH_WARMUP:-2}
scripts/gpu/build.sh build-gpu enginery_fsdp bench_engine_train > "$out/build.log" 2>&1 &
build=$!
{
  (cd bench/gpu && python3 make_bench_inputs.py --shape 1.5B --out-dir $dir)
  timeout 120 python3 bench/gpu/api_probe.py
  for ac in "" "--ac"; do
    prof=""; [ -z "$ac" ] && prof="--profile /tmp/ref_trace.json"
    timeout 150 torchrun --nproc-per-node 1 --master-port 29611 bench/gpu/reference_fsdp2.py --shape 1.5B \
      --model-dir $dir --tokens $dir/tokens.bin --seq 4096 --mbs 2 --steps $steps --warmup $warmup $ac $prof \
      --out "$out/results.jsonl"
  done
} > "$out/ref.log" 2>&1
wait $build || { echo "build failed"; tail -40 "$out/build.log"; }
fpt=$(python3 -c "import json;print([json.loads(l) for l in open('$out/results.jsonl')][0]['flops_per_token'])" 2>/dev/null || echo 0)
timeout 200 build-gpu/bin/bench_engine_train --model $dir --tokens $dir/tokens.bin --plugin-dir build-gpu/plugins \
  --device cuda --backend fsdp2 --seq 4096 --mbs 2 --steps $steps --warmup $warmup --flops-per-token "$fpt" \
  --profile /tmp/eng_trace.json > "$out/engine.log" 2>&1
for side in ref eng; do
  [ -f /tmp/${side}_trace.json ] || continue
  python3 bench/gpu/profile_summary.py /tmp/${side}_trace.json --top 30 > "$out/${side}_profile.txt" 2>&1
  gzip -c /tmp/${side}_trace.json > "$out/${side}_trace.json.gz"
done
cat "$out/engine.log" | tail -5
head -60 "$out/eng_profile.txt" "$out/ref_profile.txt"
