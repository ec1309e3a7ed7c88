#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root, after a build (scripts/gpu/install.sh or build.sh): the fidelity
# harness (bench/fidelity/run_fidelity.py) on cuda, 1 rank per run, several runs at a time on the one GPU (later
# arguments override: --device cpu --nproc 2 runs it on the machine's cores), cut off after SECONDS so the call
# returns what finished. Brings back to OUT: results.jsonl, table.md and every run's metrics.jsonl and
# summary.txt in metrics.tgz; the curves are drawn here (run_fidelity.py --from-results OUT/results.jsonl, after
# unpacking metrics.tgz beside it). FIDELITY_WORK names the work folder (default /tmp/fidelity-<pid>), so a later
# sweep can start from an earlier one's checkpoints (GRPO from each seed's warm-up).
# Usage: scripts/gpu/fidelity.sh OUT BUILD_DIR SECONDS [run_fidelity.py arguments...]
set -u
out=$(realpath -m "$1") build=$(realpath "$2") budget=$3
shift 3
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
work=${FIDELITY_WORK:-/tmp/fidelity-$$}
mkdir -p "$out" "$work"
timeout -k 10 "$budget" python3 bench/fidelity/run_fidelity.py --enginery "$build/bin/enginery" \
  --device cuda --nproc 1 --out "$work" "$@" 2>&1 | grep -v "^\[rank"
cp "$work"/results.jsonl "$work"/table.md "$out"/ 2>/dev/null
(cd "$work" && find runs -name metrics.jsonl -o -name summary.txt | tar czf "$out/metrics.tgz" -T -)
