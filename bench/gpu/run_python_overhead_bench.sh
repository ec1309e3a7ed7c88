#!/usr/bin/env bash
# The Python path's overhead (issue 18, item 5), in one call on the GPU machine, from the repo root:
#   bench/gpu/run_python_overhead_bench.sh [out-dir] [shape (default 1.5B)]
# Builds the Python module, the fsdp plugin and bench_engine_train, makes the shape's random-init checkpoint and
# tokens (make_bench_inputs.py, reused when present), then runs the C++ host (bench_engine_train) and the Python
# path (bench_python_overhead.py) one after the other on the same inputs, twice each alternating, and prints the
# step times and the overhead. Writes results.jsonl into out-dir.
set -eo pipefail
out=${1:-bench/results/python-overhead}; shape=${2:-1.5B}
steps=${BENCH_STEPS:-8}; warmup=${BENCH_WARMUP:-3}
source scripts/gpu/setup.sh >/dev/null
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$out"
rm -f "$out/results.jsonl"
scripts/gpu/build.sh build-gpu enginery_python enginery_fsdp bench_engine_train > "$out/build.log" 2>&1 \
  || { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
dir=/tmp/bench-$shape
[ -f $dir/tokens.bin ] || (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir) \
  > "$out/inputs.log" 2>&1 || { echo "making the $shape checkpoint failed"; tail -20 "$out/inputs.log"; exit 1; }
common="--model $dir --tokens $dir/tokens.bin --plugin-dir build-gpu/plugins --seq 4096 --mbs 2 --steps $steps --warmup $warmup"
for round in 1 2; do
  timeout 200 build-gpu/bin/bench_engine_train $common --device cuda --backend fsdp2 --out "$out/results.jsonl" \
    > "$out/cpp-$round.log" 2>&1 || { echo "C++ host run $round failed"; tail -20 "$out/cpp-$round.log"; }
  PYTHONPATH=build-gpu/python timeout 200 python3 bench/gpu/bench_python_overhead.py $common --out "$out/results.jsonl" \
    > "$out/python-$round.log" 2>&1 || { echo "Python run $round failed"; tail -20 "$out/python-$round.log"; }
done
python3 - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    print(f"{r['impl']:28s} {r['tokens_per_s']:9.0f} tok/s  step {r['mbs'] * r['seq'] / r['tokens_per_s']:.4f} s  "
          f"peak {r['peak_mem_gib']:.2f} GiB  final loss {r['final_loss']:.4f}")
cpp = [r["tokens_per_s"] for r in rows if not r["impl"].endswith("-python")]
py = [r["tokens_per_s"] for r in rows if r["impl"].endswith("-python")]
if cpp and py:
    c, p = max(cpp), max(py)
    print(f"best C++ host {c:.0f} tok/s, best Python {p:.0f} tok/s: Python step time +{100 * (c / p - 1):.2f}%")
PY
