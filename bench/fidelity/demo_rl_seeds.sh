#!/usr/bin/env bash
# `make demo-rl` over seeds: for each seed its SFT warm-up (the demo, evaluated and saved every 25 steps), the
# checkpoint scripts/pick_warmup.py picks, then GRPO from it in each dtype (the rollout in the same dtype); the
# table's "first eval" column is the warm-up's held-out exact match, the next one GRPO's at its last step.
# WARMUP_DTYPE=fp32 (the default) starts every dtype's GRPO from one fp32 warm-up per seed (the dtype comparison:
# the same start); WARMUP_DTYPE=each runs the warm-up in each dtype too (`make demo-rl` as a user runs it in that
# dtype; the verdict then compares runs from different starts, and the bar that counts is the gain). All runs of a
# stage go through one harness call, so --jobs runs them side by side. The GRPO stage fails unless every run's
# sampled reward rises by MIN_REWARD_RISE (default 0.03: the mean of its last ten steps over its first ten; a
# ten-step mean of 256 samples varies by about 0.007); the table beside it has each run's held-out gain.
# Usage: bench/fidelity/demo_rl_seeds.sh OUT [SEEDS (default "1 2 3 4 5")] [DTYPES (default fp32)]
#        [run_fidelity.py arguments for both stages, e.g. --device cuda --nproc 1 --jobs 5 --enginery build/bin/enginery]
set -euo pipefail
out=$(realpath -m "$1")
seeds=${2:-1 2 3 4 5}
dtypes=${3:-fp32}
shift $(( $# < 3 ? $# : 3 ))
py=${PYTHON:-python3}
harness=bench/fidelity/run_fidelity.py
case ${WARMUP_DTYPE:-fp32} in
  each) warmup_dtypes=$dtypes warmup="{dtype}" ;;
  *) warmup_dtypes=${WARMUP_DTYPE:-fp32} warmup=${WARMUP_DTYPE:-fp32} ;;
esac
seed_list=$(echo $seeds | tr ' ' ,)
$py $harness --dtypes "$warmup_dtypes" --seeds "$seed_list" --out "$out/sft" --set trainer.test_freq=25 \
  --set trainer.save_freq=25 --set trainer.max_ckpt_to_keep=0 --set 'checkpoint.save_contents=["model","hf_model"]' "$@"
# each picked checkpoint under one name per (dtype, seed), so one GRPO call reaches them all through {dtype}/{seed};
# a warm-up that never got there leaves no link, and its GRPO run fails by name in the table
mkdir -p "$out/warmups"
for d in ${warmup_dtypes//,/ }; do
  for s in $seeds; do
    if picked=$($py scripts/pick_warmup.py "$out/sft/runs/on-$d-s$s" 0.25); then
      ln -sfn "$picked" "$out/warmups/$d-s$s"
    fi
  done
done
$py $harness --config examples/grpo.toml --dtypes "$dtypes" \
  --dtype-keys engine.mixed_precision.param_dtype,actor_rollout_ref.rollout.dtype --seeds "$seed_list" \
  --out "$out/grpo" --set "model.path=\"$out/warmups/$warmup-s{seed}\"" --require-reward-rise "${MIN_REWARD_RISE:-0.03}" "$@"
