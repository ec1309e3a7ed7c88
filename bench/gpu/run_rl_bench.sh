#!/usr/bin/env bash
# The RL-shaped comparison of issue 16, in one call on the GPU machine, from the repo root:
#   bench/gpu/run_rl_bench.sh [out-dir]
# Qwen2.5-1.5B shape (random init, make_bench_inputs.py), one PPO step over 64 sequences from make_rl_batch.py
# (prompts uniform in [128, 1024], responses long-tailed with median ~1000, cap 3072; ~55% of a padded row is
# padding). Rows, one after the other with nothing else running:
#   reference  transformers + PyTorch FSDP2, every micro-batch padded to the batch's row length (verl without
#              remove-padding)
#   enginery   padded; packed (model.use_remove_padding); packed + dynamic batch size
#              (engine.use_dynamic_bsz, engine.max_token_len_per_gpu)
# Writes results.jsonl and table.md (make_rl_table.py) into out-dir.
#
# Settings: 4 rows per micro-batch and activation checkpointing on for every row. A padded micro-batch is then
# 4 x ~4090 tokens, whose logits alone ([4, 4090, 151936] in bf16, plus the fp32 log-softmax over the response
# columns and its gradient) take ~25 GiB on top of ~24 GiB of fp32 weights, gradients and Adam state; with AC the
# layer activations stay a few GiB, so the padded reference fits 140 GiB with a wide margin, and AC is what verl's
# RL recipes run. The dynamic budget of 16384 tokens equals one padded micro-batch (4 x 4096), so the packed rows
# hold as many tokens per micro-batch as the padded ones: any speed-up is padding not computed, not a bigger batch.
# BENCH_STEPS / BENCH_WARMUP (default 3 / 1), BENCH_MBS (4), BENCH_AC (1), BENCH_MAX_TOKEN_LEN (16384),
# BENCH_REFERENCE=0 skips the reference row (then the table's baseline is enginery padded).
set -eo pipefail
out=${1:-bench/results/rl}
steps=${BENCH_STEPS:-3}
warmup=${BENCH_WARMUP:-1}
mbs=${BENCH_MBS:-4}
budget=${BENCH_MAX_TOKEN_LEN:-16384}
ac=""; [ "${BENCH_AC:-1}" = 1 ] && ac="--ac"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$out"
rm -f "$out/results.jsonl"
scripts/gpu/build.sh build-gpu enginery_fsdp bench_rl_step > "$out/build.log" 2>&1 &
build=$!
dir=/tmp/bench-1.5B
# The checkpoint run_gpu_bench.sh makes (same path and seed), so a warm machine reuses it.
[ -f $dir/tokens.bin ] || (cd bench/gpu && python3 make_bench_inputs.py --shape 1.5B --out-dir $dir) \
  > "$out/inputs.log" 2>&1 || { echo "making the checkpoint failed"; tail -20 "$out/inputs.log"; exit 1; }
python3 bench/gpu/make_rl_batch.py --out $dir/rl-batch.safetensors | tee "$out/batch.txt"
wait $build || { echo "build failed"; tail -30 "$out/build.log"; exit 1; }

if [ "${BENCH_REFERENCE:-1}" != 0 ]; then
  timeout ${BENCH_REFERENCE_TIMEOUT:-240} torchrun --nproc-per-node 1 --master-port 29621 \
    bench/gpu/reference_rl_fsdp2.py --model-dir $dir --batch $dir/rl-batch.safetensors --mbs $mbs \
    --steps $steps --warmup $warmup $ac --out "$out/results.jsonl" > "$out/reference.log" 2>&1 \
    || { echo "reference run failed:"; tail -20 "$out/reference.log"; }
fi
run_engine() {  # name, then bench_rl_step's mode flags
  local name=$1; shift
  timeout ${BENCH_ENGINE_TIMEOUT:-180} build-gpu/bin/bench_rl_step --model $dir --batch $dir/rl-batch.safetensors \
    --plugin-dir build-gpu/plugins --device cuda --backend fsdp2 --mbs $mbs --steps $steps --warmup $warmup $ac \
    "$@" --out "$out/results.jsonl" > "$out/engine-$name.log" 2>&1 \
    || { echo "engine run failed: $name"; tail -20 "$out/engine-$name.log"; }
}
run_engine padded
run_engine packed --remove-padding
run_engine packed-dynamic --remove-padding --dynamic-bsz --max-token-len $budget
python3 bench/gpu/make_rl_table.py "$out/results.jsonl" | tee "$out/table.md"
