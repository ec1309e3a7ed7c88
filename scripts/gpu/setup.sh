#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root: unpacks the carried .deps/*.deb into /tmp/deps and prints the
# CMake prefix path to use. Usage: source scripts/gpu/setup.sh
set -eo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Plugins load only from directories writable by their owner alone (docs/ARCHITECTURE.md, "Plugins and
# packaging"); the copied tree may arrive group-writable.
chmod -R go-w . 2>/dev/null || true
mkdir -p /tmp/deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
if [ ! -f /usr/include/openssl/evp.h ] && ls .deps/ssl/*.deb >/dev/null 2>&1; then
  for f in .deps/ssl/*.deb; do dpkg -x "$f" /tmp/deps/ssl; done
  export OPENSSL_ROOT_DIR=/tmp/deps/ssl/usr
  export LD_LIBRARY_PATH=/tmp/deps/ssl/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
TORCH_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
export ENGINERY_CMAKE_PREFIX="$TORCH_PREFIX;/tmp/deps/usr;/tmp/deps/usr/lib/x86_64-linux-gnu/cmake;/tmp/deps/usr/share/cmake"
export CPATH=/tmp/deps/usr/include${CPATH:+:$CPATH}
# What `pip wheel` (scripts/gpu/install.sh) hands to CMake: torch itself is found through python3 (EngineryTorch.cmake).
export CMAKE_PREFIX_PATH=/tmp/deps/usr:/tmp/deps/usr/lib/x86_64-linux-gnu/cmake:/tmp/deps/usr/share/cmake${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
