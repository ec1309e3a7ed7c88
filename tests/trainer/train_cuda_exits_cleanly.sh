#!/usr/bin/env bash
# A short training run on cuda ends with exit 0 and without c10d's "destroy_process_group() was not called"
# warning: the trainer shuts its NCCL world group down after a finished run (trainer/loop/train_loop.cpp). Exit 77
# (ctest: skipped) without a GPU. Usage: train_cuda_exits_cleanly.sh ENGINERY_EXE DEMO_TOML
set -u
exe=$1 config=$2
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
NCCL_NVLS_ENABLE=0 "$exe" train --config "$config" --nproc 1 --set trainer.device=cuda \
  --set trainer.total_training_steps=5 --set trainer.test_freq=-1 --set trainer.save_freq=-1 \
  --set trainer.val_before_train=false --set "trainer.default_local_dir=\"$out/run\"" > "$out/log" 2>&1
rc=$?
cat "$out/log"
[ "$rc" -eq 0 ] || { echo "FAIL: exit $rc"; exit 1; }
if grep -q "destroy_process_group" "$out/log"; then echo "FAIL: the run warned about destroy_process_group"; exit 1; fi
echo "PASS"
