#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, after scripts/gpu/build.sh: the verl adapter (enginery.verl) on
# the GPU over NCCL in bf16, its log-probs against `enginery logprobs --dtype bf16 --device cuda` and its
# get_per_tensor_param names against the model's (tests/python/test_verl_cuda.py), then the CPU contract tests with
# PyTorch 2.x's jagged nested tensors (tests/python/test_verl_layout.py, test_verl_adapter.py).
# Usage: scripts/gpu/check_verl_adapter.sh [BUILD_DIR (default build-gpu)] [MODEL (default builtin:qwen2-tiny)]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/setup.sh >/dev/null
BUILD=$(cd "${1:-build-gpu}" && pwd)
export ENGINERY_VERL_MODEL=${2:-builtin:qwen2-tiny}
export PYTHONPATH="$BUILD/python" ENGINERY_PLUGIN_DIR="$BUILD/plugins" ENGINERY_EXE="$BUILD/bin/enginery"
export PYTHONDONTWRITEBYTECODE=1
cd tests/python
python3 -m pytest -q -s -p no:cacheprovider test_verl_cuda.py
python3 -m pytest -q -p no:cacheprovider test_verl_metadata.py test_verl_layout.py test_verl_adapter.py
