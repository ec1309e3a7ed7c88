#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, in one device call (carry .deps): engine.<backend>.fp8 = "delayed"
# (issue 20). Builds the engine, the bench and fsdp_gpu_test while the shape's inputs are made, runs the FP8 GPU
# tests, then the engine-only rows bf16 / tensorwise / delayed with the "mlp" checkpointing policy, the 50-step loss
# curves of bf16 and delayed (run_fp8_curve.sh), and the same rows without checkpointing if time is left before
# DEADLINE seconds. Prints what matters; logs and rows under OUT.
#   Usage: scripts/gpu/check_fp8_delayed.sh OUT [shape]   (default 3B; DEADLINE default 470)
out=${1:?usage: check_fp8_delayed.sh OUT [shape]}
shape=${2:-3B}
deadline=${DEADLINE:-470}
mkdir -p "$out"
source scripts/gpu/setup.sh
set +e +o pipefail
export NCCL_NVLS_ENABLE=0
start=$SECONDS
[ -f /tmp/bench-$shape/tokens.bin ] ||
  (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir /tmp/bench-$shape) > "$out/inputs.log" 2>&1 &
inputs=$!
if ! scripts/gpu/build.sh build-gpu enginery_fsdp bench_engine_train fsdp_gpu_test > "$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
wait $inputs
echo "== build and inputs: $((SECONDS - start)) s"
timeout 120 build-gpu/bin/fsdp_gpu_test --gtest_filter='GpuFp8*:Recipes/GpuFp8Recipe*' > "$out/fp8-tests.log" 2>&1
grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|fp8 vs|  Actual|error:" "$out/fp8-tests.log" | head -40
rows() {  # BENCH_AC value
  local left=$((deadline - (SECONDS - start)))
  [ $left -lt 60 ] && { echo "deadline: no $1 rows"; return; }
  BENCH_BUDGET=1 BENCH_REFERENCE=0 BENCH_FP8=1 BENCH_FP8_RECIPES="tensorwise delayed" BENCH_AC=$1 BENCH_SWEEP= \
    BENCH_DEADLINE=$left bench/gpu/run_gpu_bench.sh "$out/rows" $shape 2>&1 | grep -E "^\| $shape|failed|skipped"
}
echo "== rows, mlp policy: $((SECONDS - start)) s"
rows mlp
echo "== loss curves: $((SECONDS - start)) s"
timeout $((deadline - (SECONDS - start) > 30 ? deadline - (SECONDS - start) : 30)) \
  bench/gpu/run_fp8_curve.sh "$out/curve" $shape 50 delayed 2>&1 | tail -6
echo "== rows, AC off: $((SECONDS - start)) s"
rows off
echo "== total: $((SECONDS - start)) s"
