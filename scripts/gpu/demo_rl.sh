#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, after a build: `make demo-rl` over seeds and dtypes on cuda
# (bench/fidelity/demo_rl_seeds.sh; WARMUP_DTYPE=each for the warm-up in each dtype too), 1 rank per run, several
# runs at a time on the one GPU, cut off after SECONDS. Brings back to OUT: each stage's results.jsonl and table.md
# (sft-*, grpo-*) and every run's metrics.jsonl in metrics.tgz (unpack it beside them to draw the curves here).
# Usage: scripts/gpu/demo_rl.sh OUT BUILD_DIR SECONDS "SEEDS" DTYPES [run_fidelity.py arguments...]
set -u
out=$(realpath -m "$1") build=$(realpath "$2") budget=$3 seeds=$4 dtypes=$5
shift 5
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
work=${DEMO_RL_WORK:-/tmp/demo-rl-$$}
mkdir -p "$out"
timeout -k 10 "$budget" bench/fidelity/demo_rl_seeds.sh "$work" "$seeds" "$dtypes" --device cuda --nproc 1 \
  --enginery "$build/bin/enginery" "$@" 2>&1 | grep -v "^\[rank"
for stage in sft grpo; do
  cp "$work/$stage/results.jsonl" "$out/$stage-results.jsonl" 2>/dev/null
  cp "$work/$stage/table.md" "$out/$stage-table.md" 2>/dev/null
done
(cd "$work" && find . -name metrics.jsonl | tar czf "$out/metrics.tgz" -T -)
