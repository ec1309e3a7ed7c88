#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, in one device call (carry .deps): FP8 matmuls (issue 20) and
# offload_outside_modes (issue 17) on CUDA. Builds the engine, the bench and the two GPU test binaries while the
# shape's inputs are made, runs the FP8 and offload GPU tests, then the engine-only rows of run_gpu_bench.sh in bf16
# and FP8 (AC off and on) and the 50-step loss curves of run_fp8_curve.sh. Prints what matters to stdout; the logs
# and rows are under OUT.   Usage: scripts/gpu/check_fp8.sh OUT [shape]   (default 1.5B)
out=${1:?usage: check_fp8.sh OUT [shape]}
shape=${2:-1.5B}
mkdir -p "$out"
source scripts/gpu/setup.sh
set +e +o pipefail
export NCCL_NVLS_ENABLE=0
start=$SECONDS
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
timeout 180 build-gpu/bin/fsdp_gpu_test --gtest_filter='GpuFp8*' > "$out/fp8-tests.log" 2>&1
grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|fp8 vs|  Actual|error:" "$out/fp8-tests.log" | head -40
timeout 240 build-gpu/bin/fsdp_offload_gpu_test > "$out/offload-tests.log" 2>&1
grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|offload|  Actual" "$out/offload-tests.log" | head -40
echo "== engine rows, bf16 and fp8: $((SECONDS - start)) s"
BENCH_BUDGET=1 BENCH_REFERENCE=0 BENCH_FP8=1 BENCH_SWEEP= bench/gpu/run_gpu_bench.sh "$out/bench" $shape 2>&1 |
  grep -E "^\||failed|goal|^- " | head -20
echo "== loss curves: $((SECONDS - start)) s"
bench/gpu/run_fp8_curve.sh "$out/curve" $shape 50 2>&1 | tail -20
echo "== total: $((SECONDS - start)) s"
