#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, in one device call: builds the whole tree against PyTorch's
# LibTorch and runs every check that needs CUDA, each step logged to OUT/<step>.log and summarised in
# OUT/summary.txt. Usage: scripts/gpu/verify.sh OUT   (carry .deps; see scripts/gpu/fetch_deps.sh)
out=${1:?usage: verify.sh OUT}
mkdir -p "$out"
source scripts/gpu/setup.sh
set +e +o pipefail
export NCCL_NVLS_ENABLE=0

source scripts/gpu/steps.sh

step build 300 scripts/gpu/build.sh build-gpu
step ctest_gpu 120 bash -c 'cd build-gpu && ctest -L gpu --output-on-failure'
step registry_tests 60 build-gpu/bin/registry_tests
step models_tests 90 build-gpu/bin/models_tests
step conformance_fsdp2_cuda 120 build-gpu/bin/enginery conformance --plugin-dir build-gpu/plugins --backend fsdp2 \
  --device cuda
step conformance_veomni_cuda 120 build-gpu/bin/enginery conformance --plugin-dir build-gpu/plugins --backend veomni \
  --device cuda
step hf_export_transformers 120 scripts/gpu/check_hf_export.sh build-gpu
step verl_adapter_nccl 200 scripts/gpu/check_verl_adapter.sh build-gpu
nvidia-smi --query-gpu=name,memory.total --format=csv > "$out/gpu.txt" 2>&1
cat "$summary"
