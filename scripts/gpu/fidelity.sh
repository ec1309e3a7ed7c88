#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, after a build (scripts/gpu/install.sh or build.sh): the fidelity
# harness (bench/fidelity/run_fidelity.py) on cuda, 1 rank per run, several runs at a time on the one GPU, cut
# off after SECONDS so the call returns what finished. Brings back to OUT: the harness's log, results.jsonl,
# table.md, curves.png, and every run's metrics.jsonl in metrics.tgz (summarise here with --from-results).
# Usage: scripts/gpu/fidelity.sh OUT BUILD_DIR SECONDS [run_fidelity.py arguments...]
set -u
out=$(realpath -m "$1") build=$(realpath "$2") budget=$3
shift 3
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
work=/tmp/fidelity-$$
mkdir -p "$out" "$work"
timeout -k 10 "$budget" python3 bench/fidelity/run_fidelity.py --enginery "$build/bin/enginery" \
  --device cuda --nproc 1 --out "$work" "$@" 2>&1 | tee "$out/fidelity.log"
cp "$work"/results.jsonl "$work"/table.md "$work"/curves.png "$out"/ 2>/dev/null
(cd "$work" && find runs -name metrics.jsonl -o -name summary.txt | tar czf "$out/metrics.tgz" -T -)
