#!/usr/bin/env bash
# `make demo-rl` over seeds: for each seed its SFT warm-up (the demo, evaluated and saved every 25 steps), the
# checkpoint scripts/pick_warmup.py picks, then GRPO from it in each dtype (the rollout in the same dtype); the
# table's "first eval" column is the warm-up's held-out exact match, the next one GRPO's at its last step.
# Usage: bench/fidelity/demo_rl_seeds.sh OUT [SEEDS (default "1 2 3 4 5")] [DTYPES (default fp32)]
#        [run_fidelity.py arguments for both stages, e.g. --device cuda --nproc 1 --jobs 5 --enginery build/bin/enginery]
set -euo pipefail
out=$(realpath -m "$1")
seeds=${2:-1 2 3 4 5}
dtypes=${3:-fp32}
shift $(( $# < 3 ? $# : 3 ))
py=${PYTHON:-python3}
harness=bench/fidelity/run_fidelity.py
$py $harness --dtypes fp32 --seeds "$(echo $seeds | tr ' ' ,)" --out "$out/sft" --set trainer.test_freq=25 \
  --set trainer.save_freq=25 --set trainer.max_ckpt_to_keep=0 --set 'checkpoint.save_contents=["model","hf_model"]' "$@"
results=()
for s in $seeds; do
  warmup=$($py scripts/pick_warmup.py "$out/sft/runs/on-fp32-s$s" 0.25)
  $py $harness --config examples/grpo.toml --dtypes "$dtypes" \
    --dtype-keys engine.mixed_precision.param_dtype,actor_rollout_ref.rollout.dtype --seeds "$s" \
    --out "$out/grpo-s$s" --set "model.path=\"$warmup\"" "$@"
  results+=("$out/grpo-s$s/results.jsonl")
done
$py $harness --from-results "${results[@]}" --config examples/grpo.toml --dtypes "$dtypes" --out "$out/grpo" "$@"
