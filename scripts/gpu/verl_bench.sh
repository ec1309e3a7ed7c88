#!/usr/bin/env bash
# bench/verl/bench_verl_engines.py on the GPU machine (issue 42): builds and installs enginery and verl 0.9.1
# (verl_setup.sh), then runs the benchmark with the given arguments; its table and JSON land in OUT.
# HERE, once: scripts/gpu/verl_tests.sh --fetch (fills the git-ignored .deps, .whl, .vwh). THERE:
#   run(command="PYTHONUNBUFFERED=1 scripts/gpu/verl_bench.sh $OUT --model 1.5B", carry=[".deps", ".whl", ".vwh"])
# OUT gets install.log, verl_install.log, bench.log, table.md, results.jsonl and summary.txt. The benchmark is cut
# off at DEADLINE seconds from the start (default 570, inside the device call's 600).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:?usage: verl_bench.sh OUT [bench_verl_engines.py arguments...]}")
shift
source scripts/gpu/verl_setup.sh
[ "$(left)" -gt 60 ] || { note "deadline: no time left for the benchmark"; exit 1; }
timeout -k 10 "$(left)" "$ENGINERY_VENV/bin/python" bench/verl/bench_verl_engines.py --device cuda \
  --work /tmp/bench-verl --out "$out/table.md" --json "$out/results.jsonl" "$@" 2>&1 | tee "$out/bench.log" \
  | grep -vE "^\s*$" | tail -60
rc=${PIPESTATUS[0]}
note "bench_verl_engines.py $*: rc=$rc $((SECONDS - start))s$([ $rc -eq 124 ] && echo ' (cut off at the deadline)')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"
exit $rc
