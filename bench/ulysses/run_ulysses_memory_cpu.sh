#!/usr/bin/env bash
# The CPU counterpart of run_ulysses_memory.sh (run_ulysses_memory.sh --cpu runs it; the same comparison): what
# Ulysses sequence parallelism ([engine.<backend>] ulysses_sequence_parallel_size, docs/ARCHITECTURE.md "Sequence
# parallelism") buys at one long sequence, on 2 Gloo ranks of one thread each, for machines without 2 GPUs. Writes a
# narrowed random-init Qwen2 checkpoint (bench/ulysses/make_cpu_inputs.py: hidden 128, 2 layers, 2 query / 2 KV heads
# of 64, vocabulary 4096); then per run one training step of one sequence of SEQ tokens (mbs 1, 1 warm-up + 1 timed
# step) on 2 ranks, without Ulysses (2 data-parallel ranks, a whole sequence each) and with size 2 (one sequence
# group: each rank holds half of one sequence). Peak memory is each rank process's peak resident set (VmHWM, from
# /usr/bin/time), everything the rank holds: its FSDP shard of parameters, gradients and AdamW state, the gathered
# layer, activations, the libraries. Prints the table and leaves the logs and results.jsonl under OUT. Not a test:
# numbers depend on the machine and its load.
#   Usage: bench/ulysses/run_ulysses_memory_cpu.sh OUT [BUILD_DIR] [runs...]
#   runs: SEQ:ac with ac off|on (activation checkpointing per layer), default "64:off 8192:off 8192:on" (the first
#   is the floor: what a rank holds whatever the length; about 9 minutes on 2 shared cores).
set -o pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: run_ulysses_memory_cpu.sh OUT [BUILD_DIR] [SEQ:off|on ...]}
build=${2:-$root/build}
shift 2 2>/dev/null || shift $#
runs=${*:-64:off 8192:off 8192:on}
python=${PYTHON:-$root/.venv/bin/python}
mkdir -p "$out"
out=$(cd "$out" && pwd)
dir=${BENCH_CPU_MODEL_DIR:-/tmp/enginery-ulysses-cpu-model}
[ -f "$dir/tokens.bin" ] || OMP_NUM_THREADS=1 "$python" "$root/bench/ulysses/make_cpu_inputs.py" --out-dir "$dir" \
  > "$out/inputs.log" 2>&1 || { echo "inputs failed"; tail -20 "$out/inputs.log"; exit 1; }
port=$((29000 + RANDOM % 1000))
start=$SECONDS
for run in $runs; do
  seq=${run%%:*} ac=""
  [ "${run##*:}" = on ] && ac="--ac"
  for sp in 1 2; do
    tag=$seq-ac-${run##*:}-sp$sp
    pids=()
    for rank in 0 1; do
      OMP_NUM_THREADS=1 RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        /usr/bin/time -f "%M" -o "$out/maxrss-$tag-rank$rank" \
        "$build/bin/bench_engine_train" --model "$dir" --tokens "$dir/tokens.bin" --plugin-dir "$build/plugins" \
        --device cpu --backend fsdp2 --seq "$seq" --mbs 1 --steps 1 --warmup 1 $ac --ulysses $sp \
        --out "$out/run-$tag.jsonl" > "$out/engine-$tag-rank$rank.log" 2>&1 &
      pids+=($!)
    done
    for i in 0 1; do wait "${pids[$i]}" || { echo "rank $i failed: $tag"; tail -5 "$out/engine-$tag-rank$i.log"; }; done
    port=$((port + 1))
    # The engine's row (rank 0) with every rank's peak resident set added.
    [ -f "$out/run-$tag.jsonl" ] && "$python" - "$out/run-$tag.jsonl" "$out/maxrss-$tag-rank0" "$out/maxrss-$tag-rank1" \
      >> "$out/results.jsonl" <<'PY'
import json, sys
row = json.loads(open(sys.argv[1]).read().splitlines()[-1])
row["peak_rss_gib_per_rank"] = [int(open(p).read().split()[-1]) / 2**20 for p in sys.argv[2:]]
row["device"] = "cpu (2 Gloo ranks, 1 thread each)"
print(json.dumps(row))
PY
    echo "== $tag: $((SECONDS - start)) s"
  done
done
"$python" - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
# A short sequence's run is the floor: what a rank holds whatever the length (libraries, its FSDP shard of parameters,
# gradients and AdamW state, the gathered layer). Above it is what the sequence costs, the part Ulysses divides.
floor = {}
for r in rows:
    sp = r.get("ulysses", 1)
    if sp not in floor or r["seq"] < floor[sp]["seq"]:
        floor[sp] = r
print("\nnarrowed Qwen2 (hidden 128, 2 layers, vocab 4096), CPU, 2 Gloo ranks x 1 thread, mbs 1\n")
print("| seq | AC | ulysses | sequences / step (pair) | tokens held / rank | peak RSS GiB rank 0 | peak RSS GiB rank 1 "
      "| above the floor GiB, max rank | tokens/s (pair) | step s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    sp = r.get("ulysses", 1)
    seqs = r["world"] // sp
    tok_s = r["tokens_per_s"]
    f = floor[sp]
    above = (f"{max(p - q for p, q in zip(r['peak_rss_gib_per_rank'], f['peak_rss_gib_per_rank'])):.3f}"
             if r["seq"] > f["seq"] else f"(floor, seq {f['seq']})")
    print(f"| {r['seq']} | {'on' if r['ac'] else 'off'} | {sp} | {seqs} | {r['seq'] // sp} | "
          f"{r['peak_rss_gib_per_rank'][0]:.3f} | {r['peak_rss_gib_per_rank'][1]:.3f} | {above} | {tok_s:.0f} | "
          f"{r['seq'] * seqs / tok_s:.1f} |")
PY
echo "== total: $((SECONDS - start)) s"
