#!/usr/bin/env bash
# Issue 20's FP8 loss criterion, on the GPU machine after run_gpu_bench.sh built build-gpu and the shape's inputs:
#   bench/gpu/run_fp8_curve.sh OUT [shape] [steps] [recipes]      (defaults 1.5B, 50, "tensorwise")
# The fsdp2 engine from the same random-init checkpoint on the same learnable tokens (make_markov_tokens.py), once
# in bf16 and once per FP8 recipe (engine.fsdp2.fp8 = "tensorwise", "delayed"), lr 3e-4, no warm-up: the loss
# curves go to OUT/fp8-curve.jsonl and compare_curves.py prints them side by side with the largest gaps to bf16.
set -eo pipefail
out=${1:?usage: run_fp8_curve.sh OUT [shape] [steps] [recipes]}
shape=${2:-1.5B}
steps=${3:-50}
recipes=${4:-tensorwise}
dir=/tmp/bench-$shape
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
python3 bench/gpu/make_markov_tokens.py --out $dir/markov.bin --tokens $((steps * 2 * 4096))
for fp8 in off $recipes; do
  build-gpu/bin/bench_engine_train --model $dir --tokens $dir/markov.bin --plugin-dir build-gpu/plugins \
    --device cuda --backend fsdp2 --seq 4096 --mbs 2 --warmup 0 --steps $steps --lr 3e-4 --fp8 $fp8 \
    --out "$out/fp8-curve.jsonl.$fp8" > "$out/fp8-curve-$fp8.log" 2>&1
  sed "s/^{/{\"shape\":\"$shape\",/" "$out/fp8-curve.jsonl.$fp8" >> "$out/fp8-curve.jsonl"
  rm "$out/fp8-curve.jsonl.$fp8"
done
python3 bench/gpu/compare_curves.py "$out/fp8-curve.jsonl"
