#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, in one device call (carry .deps): the activation-checkpointing
# policies (engine.<backend>.gradient_checkpointing_policy, issue 20) on CUDA. First the three-way comparison of
# run_gpu_bench.sh in budget mode for the given shapes (both references, the engine with AC off, per layer and
# "mlp", each engine row profiled), then the models' GPU tests and the GEMM fusion probe
# (bench/gpu/gemm_fusion_probe.py). Prints what matters to stdout; the logs, rows and profiles are under OUT.
#   Usage: scripts/gpu/check_recompute.sh OUT [shapes...]   (default 1.5B; BENCH_DEADLINE default 460 s)
out=${1:?usage: check_recompute.sh OUT [shapes...]}
shift
shapes=${*:-1.5B}
mkdir -p "$out"
source scripts/gpu/setup.sh
set +e +o pipefail
export NCCL_NVLS_ENABLE=0
start=$SECONDS
BENCH_BUDGET=1 BENCH_AC=all BENCH_SWEEP= BENCH_PROFILE=1 BENCH_DEADLINE=${BENCH_DEADLINE:-460} \
  bench/gpu/run_gpu_bench.sh "$out/bench" $shapes 2>&1 | grep -E "^\||failed|goal|^- |skipped|build|done" | head -40
echo "== GPU tests: $((SECONDS - start)) s"
scripts/gpu/build.sh build-gpu models_gpu_tests > "$out/build-tests.log" 2>&1 || grep -E "error" "$out/build-tests.log" | head
timeout 60 build-gpu/bin/models_gpu_tests --gtest_filter='RecomputeGpu.*:FusedKernelsGpu.SwigluDown*' \
  > "$out/models-gpu-tests.log" 2>&1
grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Expected|Which is|kept for backward|  Actual" "$out/models-gpu-tests.log" | head -30
echo "== GEMM fusion probe: $((SECONDS - start)) s"
(cd bench/gpu && timeout 60 python3 gemm_fusion_probe.py --iters 20) 2>&1 | tee "$out/gemm-fusion.md"
for f in "$out"/bench/profile-engine-*.txt; do [ -f "$f" ] && { echo "== $f"; head -25 "$f"; }; done
echo "== total: $((SECONDS - start)) s"
