#!/usr/bin/env bash
# Run HERE (the Debian machine): downloads what the GPU machine lacks into .deps/ (header-only Debian packages) and
# .whl/ (the build backend's wheels, at requirements.txt's pins), both git-ignored, to be named in the device tool's
# `carry` and unpacked there by scripts/gpu/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps
cd .deps
# GoogleTest is not carried: the GPU machine has its own, and mixing its library with our headers crashes tests.
# Gloo's headers (PyPI's torch ships none): the CPU process group, so a CUDA build also trains on trainer.device=cpu.
for p in libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libgloo-dev; do
  ls ${p}_*.deb >/dev/null 2>&1 || apt-get download "$p"
done
# OpenSSL's libcrypto (SHA-256 of plugins and checkpoints), unpacked there only when the machine has no headers.
mkdir -p ssl
for p in libssl-dev libssl3; do
  ls ssl/${p}_*.deb >/dev/null 2>&1 || (cd ssl && apt-get download "$p")
done
ls -la . ssl
cd ..
mkdir -p .whl
pins=$(grep -E '^(scikit-build-core|pathspec|packaging)==' requirements.txt)
pip download --no-deps -q -d .whl $pins
ls -la .whl
