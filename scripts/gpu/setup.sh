#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root: unpacks the carried .deps/*.deb into /tmp/deps and prints the
# CMake prefix path to use. Usage: source scripts/gpu/setup.sh
set -eo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
TORCH_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
export ENGINERY_CMAKE_PREFIX="$TORCH_PREFIX;/tmp/deps/usr;/tmp/deps/usr/lib/x86_64-linux-gnu/cmake;/tmp/deps/usr/share/cmake"
export CPATH=/tmp/deps/usr/include${CPATH:+:$CPATH}
