#!/usr/bin/env bash
# Engine-only FP8 rows on the GPU machine after a build of enginery_fsdp and bench_engine_train: per shape, the
# fsdp2 engine in bf16 and with engine.fsdp2.fp8 = "tensorwise" (AC off unless BENCH_AC=1), one after the other,
# on make_bench_inputs.py's checkpoint and tokens (made when missing). Rows go to OUT/results.jsonl (make_table.py's
# format).
#   bench/gpu/run_fp8_rows.sh OUT [shapes...]    (default 1.5B 3B; BENCH_STEPS / BENCH_WARMUP: 5 / 2;
#   BENCH_AC=1: activation checkpointing on)
out=${1:?usage: run_fp8_rows.sh OUT [shapes...]}
shift
shapes=${*:-1.5B 3B}
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
for shape in $shapes; do
  dir=/tmp/bench-$shape
  [ -f $dir/tokens.bin ] ||
    (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir) > /dev/null 2>&1
  fpt=$(cd bench/gpu && python3 -c \
    "from reference_fsdp2 import SHAPES, model_flops_per_token as f; print(f(SHAPES['$shape'], 4096))")
  for fp8 in off tensorwise; do
    timeout 240 build-gpu/bin/bench_engine_train --model $dir --tokens $dir/tokens.bin --plugin-dir build-gpu/plugins \
      --device cuda --backend fsdp2 --seq 4096 --mbs 2 --steps ${BENCH_STEPS:-5} --warmup ${BENCH_WARMUP:-2} \
      --fp8 $fp8 ${BENCH_AC:+--ac} --flops-per-token "$fpt" --out "$out/row.json" \
      > "$out/engine-$shape-$fp8.log" 2>&1 ||
      echo "engine $shape fp8=$fp8 failed (see engine-$shape-$fp8.log)"
    [ -f "$out/row.json" ] &&
      sed "s/^{/{\"shape\":\"$shape\",/" "$out/row.json" >> "$out/results.jsonl" && rm "$out/row.json"
  done
done
python3 bench/gpu/make_table.py "$out/results.jsonl"
