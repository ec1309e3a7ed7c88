#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, in one device call: installs enginery as a user does
# (scripts/gpu/install.sh: pip wheel + pip install against the machine's torch 2.11), then from another folder with
# no enginery environment variable trains a tiny model on cuda through the installed `enginery` command and through
# `import enginery`, trains on cpu over Gloo with the same CUDA build, and runs the ctest label gpu. Each step logs
# to OUT/<step>.log; OUT/summary.txt has one line per step. Usage: scripts/gpu/check_install.sh OUT
# (carry .deps and .whl: scripts/gpu/fetch_deps.sh)
out=$(realpath -m "${1:?usage: check_install.sh OUT}")
mkdir -p "$out"
repo=$PWD
source scripts/gpu/steps.sh
step install 420 bash -c "source scripts/gpu/install.sh build-gpu"
venv=/tmp/enginery-venv
elsewhere=$(mktemp -d)
cd "$elsewhere"
step train_cuda_bf16 240 env -u ENGINERY_PLUGIN_PATH "$venv/bin/enginery" train --config "$repo/examples/demo.toml" \
  --nproc 1 --set trainer.device=cuda --set engine.mixed_precision.param_dtype=bf16 \
  --set trainer.total_training_steps=100 --set trainer.test_freq=100 --set trainer.save_freq=-1 \
  --set "trainer.default_local_dir=\"$out/train_cuda_bf16\""
step train_cpu_gloo_2ranks 240 env -u ENGINERY_PLUGIN_PATH "$venv/bin/enginery" train --config "$repo/examples/demo.toml" \
  --nproc 2 --set trainer.device=cpu --set trainer.total_training_steps=20 --set trainer.test_freq=-1 \
  --set trainer.save_freq=-1 --set trainer.val_before_train=false --set "trainer.default_local_dir=\"$out/train_cpu\""
step python_cuda 120 env -u ENGINERY_PLUGIN_PATH "$venv/bin/python" -c "
import enginery, torch
print('enginery', enginery.__version__, 'torch', torch.__version__, 'plugins', enginery.load_plugins())
engine = enginery.new_engine('language_model', 'fsdp2', 'cuda', {'model.path': 'builtin:qwen2-tiny'})
engine.initialize()
print('engine on cuda:', type(engine).__name__)
"
cd "$repo"
step ctest_gpu 300 bash -c "cd build-gpu && ctest -L gpu --output-on-failure"
nvidia-smi --query-gpu=name,memory.total --format=csv > "$out/gpu.txt" 2>&1
cat "$summary"
