#!/usr/bin/env bash
# bench/verl/adapter_overhead.py on the GPU machine (issue 43, item 4): builds and installs enginery and verl 0.9.1
# (verl_setup.sh), then measures enginery.verl's per-step overhead against the engine driven directly; its table and
# JSON land in OUT. HERE, once: scripts/gpu/verl_tests.sh --fetch (fills the git-ignored .deps, .whl, .vwh). THERE:
#   run(command="PYTHONUNBUFFERED=1 scripts/gpu/verl_adapter_overhead.sh $OUT --model 1.5B", carry=[".deps", ".whl", ".vwh"])
# OUT gets install.log, verl_install.log, bench.log, table.md, results.jsonl and summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:?usage: verl_adapter_overhead.sh OUT [adapter_overhead.py arguments...]}")
shift
source scripts/gpu/verl_setup.sh
[ "$(left)" -gt 60 ] || { note "deadline: no time left for the benchmark"; exit 1; }
timeout -k 10 "$(left)" "$ENGINERY_VENV/bin/python" bench/verl/adapter_overhead.py --device cuda --out "$out" "$@" \
  2>&1 | tee "$out/bench.log" | grep -vE "^\s*$" | tail -30
rc=${PIPESTATUS[0]}
note "adapter_overhead.py $*: rc=$rc $((SECONDS - start))s$([ $rc -eq 124 ] && echo ' (cut off at the deadline)')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"
exit $rc
