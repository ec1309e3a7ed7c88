#!/usr/bin/env bash
# Makes the transformers parity fixtures (tests/data/models/hf_*) on a machine with torch + transformers 5.x and
# packs them into one tar: scripts/gpu/make_model_fixtures.sh OUT_DIR
# Unpack with: tar -xf OUT_DIR/model_fixtures.tar -C tests/data/models
set -u
out=${1:?usage: make_model_fixtures.sh OUT_DIR}
work=$(mktemp -d)
python3 "$(dirname "$0")/make_model_fixtures.py" "$work" 2>&1 | tee "$out/make_model_fixtures.log"
rc=${PIPESTATUS[0]}
tar -cf "$out/model_fixtures.tar" -C "$work" .
exit "$rc"
