#!/usr/bin/env bash
# Trains a few steps with `enginery train`, saving a checkpoint with save_contents including hf_model, then checks
# the exported Hugging Face directory with transformers (check_hf_export.py) against `enginery logprobs` on it.
# Usage: scripts/gpu/check_hf_export.sh [BUILD_DIR (default build-gpu)] [MODEL (default builtin:qwen2-tiny)]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-builtin:qwen2-tiny}
OUT=$(mktemp -d /tmp/enginery_hf_export.XXXXXX)
"$BUILD/bin/enginery" train --config examples/demo.toml --nproc 1 \
  --set "model.path=$MODEL" --set trainer.total_training_steps=3 --set trainer.save_freq=3 --set trainer.test_freq=-1 \
  --set "trainer.default_local_dir=$OUT/run" \
  --set 'checkpoint.save_contents=["model","optimizer","extra","hf_model"]'
HF="$OUT/run/global_step_3/actor/huggingface"
python3 - "$HF/config.json" "$OUT/tokens.json" <<'PY'
import json, random, sys
vocab = json.load(open(sys.argv[1]))["vocab_size"]
rng = random.Random(0)
json.dump([[rng.randrange(vocab) for _ in range(n)] for n in (7, 40, 2, 23, 13)], open(sys.argv[2], "w"))
PY
"$BUILD/bin/enginery" logprobs --model "$HF" --tokens "$OUT/tokens.json" --out "$OUT/logprobs.json" --dtype fp32 --device cpu
python3 scripts/gpu/check_hf_export.py "$HF" "$OUT/tokens.json" "$OUT/logprobs.json"
