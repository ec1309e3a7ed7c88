#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, in one device call (carry .deps): FP8 matmuls (issue 20) and
# offload_outside_modes (issue 17) on CUDA. Builds the engine, the bench and the two GPU test binaries while the
# shape's inputs are made, runs the FP8 and offload GPU tests, then the engine-only rows of run_gpu_bench.sh in bf16
# and each FP8 recipe, once per activation-checkpointing setting, and the 50-step loss curves of run_fp8_curve.sh.
# No rows or curves start after DEADLINE seconds. Prints what matters to stdout; the logs and rows are under OUT.
#   Usage: scripts/gpu/check_fp8.sh OUT [shape]   (default 1.5B)
#   FP8_RECIPES (default "tensorwise"; "tensorwise delayed" for both), FP8_AC: the BENCH_AC values of the row runs,
#   in order (default "both"; e.g. "mlp off"), DEADLINE (default 560), OFFLOAD_TESTS=0 skips the offload tests.
out=${1:?usage: check_fp8.sh OUT [shape]}
shape=${2:-1.5B}
recipes=${FP8_RECIPES:-tensorwise}
deadline=${DEADLINE:-560}
mkdir -p "$out"
source scripts/gpu/setup.sh
set +e +o pipefail
export NCCL_NVLS_ENABLE=0
start=$SECONDS
left() { echo $((deadline - (SECONDS - start))); }
[ -f /tmp/bench-$shape/tokens.bin ] ||
  (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir /tmp/bench-$shape) > "$out/inputs.log" 2>&1 &
inputs=$!
if ! scripts/gpu/build.sh build-gpu enginery_fsdp bench_engine_train fsdp_gpu_test fsdp_offload_gpu_test \
    > "$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  exit 1
fi
wait $inputs
echo "== build and inputs: $((SECONDS - start)) s"
echo "== GPU tests"
timeout 180 build-gpu/bin/fsdp_gpu_test --gtest_filter='GpuFp8*:Recipes/GpuFp8Recipe*' > "$out/fp8-tests.log" 2>&1
grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|fp8 vs|  Actual|error:" "$out/fp8-tests.log" | head -40
if [ "${OFFLOAD_TESTS:-1}" != 0 ]; then
  timeout 240 build-gpu/bin/fsdp_offload_gpu_test > "$out/offload-tests.log" 2>&1
  grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|offload|  Actual" "$out/offload-tests.log" | head -40
fi
for ac in ${FP8_AC:-both}; do
  echo "== engine rows, bf16 and $recipes, AC $ac: $((SECONDS - start)) s"
  [ "$(left)" -lt 60 ] && { echo "deadline: no AC $ac rows"; continue; }
  BENCH_BUDGET=1 BENCH_REFERENCE=0 BENCH_FP8=1 BENCH_FP8_RECIPES="$recipes" BENCH_AC=$ac BENCH_SWEEP= \
    BENCH_DEADLINE=$(left) bench/gpu/run_gpu_bench.sh "$out/bench" $shape 2>&1 | grep -E "^\||failed|goal|^- |skipped" |
    head -20
done
echo "== loss curves: $((SECONDS - start)) s"
if [ "$(left)" -ge 60 ]; then
  timeout "$(left)" bench/gpu/run_fp8_curve.sh "$out/curve" $shape 50 "$recipes" 2>&1 | tail -20
else
  echo "deadline: no loss curves"
fi
echo "== total: $((SECONDS - start)) s"
