#!/usr/bin/env bash
# Run HERE (the Debian machine): downloads the header-only dependencies the GPU machine lacks into .deps/
# (git-ignored), to be named in the device tool's `carry` and unpacked there by scripts/gpu/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps
cd .deps
# GoogleTest is not carried: the GPU machine has its own, and mixing its library with our headers crashes tests.
for p in libtomlplusplus-dev nlohmann-json3-dev libcli11-dev; do
  ls ${p}_*.deb >/dev/null 2>&1 || apt-get download "$p"
done
# OpenSSL's libcrypto (SHA-256 of plugins and checkpoints), unpacked there only when the machine has no headers.
mkdir -p ssl
for p in libssl-dev libssl3; do
  ls ssl/${p}_*.deb >/dev/null 2>&1 || (cd ssl && apt-get download "$p")
done
ls -la . ssl
