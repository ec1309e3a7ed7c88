#!/usr/bin/env bash
# Run THERE after check_fp8.sh's build (or it builds): one profiled step of the fsdp2 engine in bf16 and with
# engine.fsdp2.fp8 = "tensorwise" on the shape's inputs, each summarised by profile_summary.py into
# OUT/profile-<fp8>.txt, the heads printed.   Usage: bench/gpu/profile_fp8.sh OUT [shape]
out=${1:?usage: profile_fp8.sh OUT [shape]}
shape=${2:-1.5B}
dir=/tmp/bench-$shape
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
[ -f $dir/tokens.bin ] || (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir) > /dev/null 2>&1
for fp8 in off tensorwise; do
  build-gpu/bin/bench_engine_train --model $dir --tokens $dir/tokens.bin --plugin-dir build-gpu/plugins --device cuda \
    --backend fsdp2 --seq 4096 --mbs 2 --warmup 2 --steps 2 --fp8 $fp8 --profile /tmp/profile-$fp8.json \
    > "$out/profile-run-$fp8.log" 2>&1
  python3 bench/gpu/profile_summary.py /tmp/profile-$fp8.json --top 30 > "$out/profile-$fp8.txt" 2>&1
  echo "== fp8 $fp8"
  head -60 "$out/profile-$fp8.txt"
done
