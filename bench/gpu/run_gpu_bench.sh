#!/usr/bin/env bash
# The GPU comparison (issues 8 and 20), in one call on the GPU machine, from the repo root:
#   bench/gpu/run_gpu_bench.sh [out-dir] [shapes...]      (default shapes: 1.5B 3B 0.5B, in that order)
# Builds what it needs while it makes one random-init checkpoint + token file per shape, then, per shape and with
# activation checkpointing off and on, one after the other with nothing else running: the eager reference
# (reference_fsdp2.py: transformers + PyTorch FSDP2), the compiled reference (reference_compiled.py: torchtitan's
# recipe) and enginery's fsdp2 engine. After the 1.5B shape, the attention backend sweep: the engine at 1.5B without
# AC once per backend of BENCH_SWEEP (ENGINERY_SDPA_BACKEND, docs/BENCHMARKS.md). Writes results.jsonl and the
# markdown table (make_table.py: ratios to both references) into out-dir, the table again after every run, so a
# call cut short still leaves the rows it finished.
#
# The MoE row (issue 45): shape moe-1B (reference_fsdp2.py's SHAPES: Qwen3-MoE, 64 experts, 8 per token), eager
#   reference only (the compiled recipe is written for the dense shapes) and no backend sweep:
#   BENCH_COMPILED=0 BENCH_SWEEP= bench/gpu/run_gpu_bench.sh bench/results-moe moe-1B
#
# BENCH_BUDGET=1: the whole three-shape run in one ~9-minute device call: 2 warm-up + 5 timed steps, both
#   references of a shape in one process (reference_compiled.py --eager-too: one import, one NCCL group), and no run
#   starts after BENCH_DEADLINE seconds (default 500 here; running ones are cut at it). Shapes run in the order
#   given, the sweep right after 1.5B, so a deadline cuts the least wanted rows (0.5B) first.
# BENCH_STEPS / BENCH_WARMUP: timed and warm-up steps (defaults 10 / 3; budget 5 / 2).
# BENCH_SWEEP: backends of the sweep (default "flash cudnn", the candidates on Hopper; "efficient" adds one more;
#   "" skips it; "math" is slow and memory-hungry).
# BENCH_PROFILE=1: the engine also profiles one more step per run (kineto) and profile_summary.py summarises it.
# BENCH_REFERENCE=0: engine only (a quick iteration). BENCH_COMPILED=0: no compiled reference.
# BENCH_FP8=1: each engine row also with engine.fsdp2.fp8 = "tensorwise", right after it (issue 20);
#   BENCH_FP8_RECIPES="tensorwise delayed" runs one such row per recipe.
# BENCH_AC=off|on|both|mlp|all (default both): which activation-checkpointing settings the engine rows run: off,
#   on (whole layers recomputed), both, mlp (only engine.<backend>.gradient_checkpointing_policy = "mlp": the MLP
#   block recomputed), all (off, on and mlp). The references always run off and on; mlp rows are compared with
#   their AC-on rows.
set -eo pipefail
out=${1:-bench/results}; shift || true
shapes=${*:-1.5B 3B 0.5B}
budget=${BENCH_BUDGET:-0}
if [ "$budget" = 1 ]; then steps=${BENCH_STEPS:-5}; warmup=${BENCH_WARMUP:-2}; deadline=${BENCH_DEADLINE:-500}
else steps=${BENCH_STEPS:-10}; warmup=${BENCH_WARMUP:-3}; deadline=${BENCH_DEADLINE:-0}; fi
sweep=${BENCH_SWEEP-flash cudnn}
if [ -n "${BENCH_FP8_RECIPES:-}" ] && [ "${BENCH_FP8:-0}" != 1 ]; then
  echo "BENCH_FP8_RECIPES=$BENCH_FP8_RECIPES needs BENCH_FP8=1"; exit 1
fi
case ${BENCH_AC:-both} in
  off) engine_acs="off" ;;
  on) engine_acs="layer" ;;
  both) engine_acs="off layer" ;;
  mlp) engine_acs="mlp" ;;
  all) engine_acs="off layer mlp" ;;
  *) echo "BENCH_AC=${BENCH_AC}: off, on, both, mlp or all"; exit 1 ;;
esac
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
start=$SECONDS

# Runs "$@" under a time cap of $1 seconds, shortened to what is left before the deadline; refuses to start with
# less than 20 s left (noted in skipped.txt).
capped() {
  local cap=$1; shift
  if [ "$deadline" != 0 ]; then
    local left=$((deadline - (SECONDS - start)))
    if [ $left -lt 20 ]; then echo "deadline: skipped $*" | tee -a "$out/skipped.txt"; return 1; fi
    [ $cap -gt $left ] && cap=$left
  fi
  timeout $cap "$@"
}

table() { python3 bench/gpu/make_table.py "$out/results.jsonl" > "$out/table.md" 2>/dev/null || true; }

references() {  # shape dir
  local shape=$1 dir=$2 common="--shape $1 --model-dir $2 --tokens $2/tokens.bin --seq 4096 --mbs 2 --steps $steps --warmup $warmup --out $out/results.jsonl"
  [ "${BENCH_REFERENCE:-1}" = 0 ] && return 0
  if [ "$budget" = 1 ] && [ "${BENCH_COMPILED:-1}" != 0 ]; then
    capped 300 torchrun --nproc-per-node 1 --master-port 29611 bench/gpu/reference_compiled.py $common --ac both \
      --eager-too > "$out/reference-$shape.log" 2>&1 || echo "references failed or cut: $shape (see reference-$shape.log)"
    return 0
  fi
  for ac in "" "--ac"; do
    capped 240 torchrun --nproc-per-node 1 --master-port 29611 bench/gpu/reference_fsdp2.py $common $ac \
      > "$out/reference-eager-$shape${ac:+-ac}.log" 2>&1 || echo "eager reference failed or cut: $shape $ac"
  done
  if [ "${BENCH_COMPILED:-1}" != 0 ]; then
    capped 300 torchrun --nproc-per-node 1 --master-port 29611 bench/gpu/reference_compiled.py $common --ac both \
      > "$out/reference-compiled-$shape.log" 2>&1 || echo "compiled reference failed or cut: $shape"
  fi
}

engine() {  # shape dir ac-policy (off, layer, mlp) sdpa-backend ("" = the default choice) [fp8 recipe]
  local shape=$1 dir=$2 sdpa=$4 fp8=${5:-} tag=$1-ac-$3${4:+-$4}${5:+-fp8-$5} prof="" fpt ac=""
  [ "$3" != off ] && ac="--ac --ac-policy $3"
  [ -s "$out/.flops-$shape" ] || (cd bench/gpu && python3 -c \
    "from reference_fsdp2 import SHAPES, model_flops_per_token as f; print(f(SHAPES['$shape'], 4096))") > "$out/.flops-$shape"
  fpt=$(cat "$out/.flops-$shape")
  [ -n "${BENCH_PROFILE:-}" ] && prof="--profile /tmp/eng-$tag.json"
  rm -f "$out/results.jsonl.$tag"
  capped ${BENCH_ENGINE_TIMEOUT:-240} env ENGINERY_SDPA_BACKEND=${sdpa:-auto} build-gpu/bin/bench_engine_train --model $dir \
    --tokens $dir/tokens.bin --plugin-dir build-gpu/plugins --device cuda --backend fsdp2 --seq 4096 --mbs 2 \
    --steps $steps --warmup $warmup $ac $prof ${fp8:+--fp8 $fp8} --flops-per-token "$fpt" --out "$out/results.jsonl.$tag" \
    > "$out/engine-$tag.log" 2>&1 || echo "engine run failed or cut: $tag (see engine-$tag.log)"
  if [ -f "$out/results.jsonl.$tag" ]; then
    sed "s/^{/{\"shape\":\"$shape\",${sdpa:+\"sdpa\":\"$sdpa\",}/" "$out/results.jsonl.$tag" >> "$out/results.jsonl"
    rm "$out/results.jsonl.$tag"
  fi
  if [ -n "$prof" ] && [ -f /tmp/eng-$tag.json ]; then
    python3 bench/gpu/profile_summary.py /tmp/eng-$tag.json --top 30 > "$out/profile-engine-$tag.txt" 2>&1 || true
  fi
}

scripts/gpu/build.sh build-gpu enginery_fsdp bench_engine_train > "$out/build.log" 2>&1 &
build=$!
# Budget mode: while the build runs (the GPU otherwise idle), compile the compiled reference's graphs once per
# shape, untimed, as soon as that shape's inputs exist, so the timed runs below find them in inductor's on-disk
# caches. Its own process group (setsid), stopped when the build is done.
warm=""
if [ "$budget" = 1 ] && [ "${BENCH_REFERENCE:-1}" != 0 ] && [ "${BENCH_COMPILED:-1}" != 0 ]; then
  setsid bash -c "for shape in $shapes; do d=/tmp/bench-\$shape
    while [ ! -f \$d/tokens.bin ]; do sleep 2; done; sleep 2
    torchrun --nproc-per-node 1 --master-port 29612 bench/gpu/reference_compiled.py --shape \$shape --model-dir \$d \
      --tokens \$d/tokens.bin --seq 4096 --mbs 2 --steps 1 --warmup 1 --ac both; done" > "$out/compile-warmup.log" 2>&1 &
  warm=$!
  trap 'kill -- -$warm 2>/dev/null || true' EXIT
fi
inputs=$shapes
[ -n "$sweep" ] && case " $shapes " in *" 1.5B "*) ;; *) inputs="$inputs 1.5B";; esac
for shape in $inputs; do
  dir=/tmp/bench-$shape
  [ -f $dir/tokens.bin ] || (cd bench/gpu && python3 make_bench_inputs.py --shape $shape --out-dir $dir) > /dev/null 2>&1
done
wait $build || { echo "build failed"; tail -30 "$out/build.log"; exit 1; }
if [ -n "$warm" ]; then  # its whole process group, then wait until the GPU is free of it
  kill -- -$warm 2>/dev/null || true
  for _ in $(seq 30); do kill -0 -- -$warm 2>/dev/null || break; sleep 1; done
  wait $warm 2>/dev/null || true
fi
echo "build and inputs: $((SECONDS - start)) s"
for shape in $shapes; do
  dir=/tmp/bench-$shape
  references $shape $dir; table
  for ac in $engine_acs; do
    engine $shape $dir $ac ""
    if [ "${BENCH_FP8:-0}" = 1 ]; then
      for recipe in ${BENCH_FP8_RECIPES:-tensorwise}; do engine $shape $dir "$ac" "" $recipe; done
    fi
  done
  table
  if [ "$shape" = 1.5B ]; then
    for backend in $sweep; do engine 1.5B $dir off $backend; done; table
  fi
  echo "$shape done: $((SECONDS - start)) s"
done
case " $shapes " in *" 1.5B "*) ;; *) for backend in $sweep; do engine 1.5B /tmp/bench-1.5B off $backend; done;; esac
table
echo "total: $((SECONDS - start)) s"
cat "$out/table.md"
