#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root: configures and builds against PyTorch's LibTorch with CUDA.
# Usage: [ENGINERY_BUILD_TYPE=RelWithDebInfo] scripts/gpu/build.sh [build-dir] [targets...]
set -eo pipefail
source scripts/gpu/setup.sh
build=${1:-build-gpu}; shift || true
# nvcc builds enginery's kernels (kernels/cuda); without it the build still works, on ATen's kernels.
nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${ENGINERY_BUILD_TYPE:-Release} -DCMAKE_PREFIX_PATH="$ENGINERY_CMAKE_PREFIX" \
  -DTORCH_CUDA_ARCH_LIST=9.0 -DENGINERY_WITH_NCCL=ON -DENGINERY_PYTHON_EXECUTABLE="$(command -v python3)" ${nvcc_path:+-DCMAKE_CUDA_COMPILER=$nvcc_path}
if [ $# -gt 0 ]; then cmake --build "$build" -j "$(nproc)" --target "$@"; else cmake --build "$build" -j "$(nproc)"; fi
