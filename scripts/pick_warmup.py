#!/usr/bin/env python3
"""The warm-up checkpoint `make demo-rl` starts GRPO from: the first one whose held-out exact match reached MIN
(default 0.25), read from the SFT run's metrics.jsonl. The demo learns the carries in an abrupt transition whose
step varies over seeds (400 to 1100 on the GPU, docs/BENCHMARKS.md, "mixed-precision fidelity"), so a fixed
stopping step leaves some seeds at 0%, from which GRPO gains nothing, and others at 100%, where it has nothing left
to gain; the first checkpoint past MIN has found the carries with room left for RL. The SFT run must save where it
evaluates (save_freq = test_freq) and keep its checkpoints (max_ckpt_to_keep = 0) with the Hugging Face export.

Prints the checkpoint's Hugging Face folder. Exits 1, naming the run and its best accuracy, when no saved checkpoint
reached MIN. Usage: pick_warmup.py RUN_DIR [MIN]
"""
import json
import sys
from pathlib import Path


def pick(run_dir, minimum):
    run = Path(run_dir)
    metrics = run / "metrics.jsonl"
    if not metrics.exists():
        raise SystemExit(f"pick_warmup.py: {metrics} does not exist; RUN_DIR is the SFT run's output folder")
    best = (None, -1.0)
    for line in metrics.read_text().splitlines():
        try:
            m = json.loads(line)
        except json.JSONDecodeError:  # the last line of a run that was killed mid-write
            continue
        accuracy = m.get("accuracy")
        if accuracy is None:
            continue
        export = run / f"global_step_{m['step']}" / "actor" / "huggingface"
        if not export.is_dir():
            continue
        if accuracy >= minimum:
            return export, accuracy
        if accuracy > best[1]:
            best = (m["step"], accuracy)
    if best[0] is None:
        raise SystemExit(f"pick_warmup.py: no evaluated step of {run} has a saved Hugging Face export; run the SFT "
                         f"with trainer.save_freq = trainer.test_freq and \"hf_model\" in checkpoint.save_contents")
    raise SystemExit(f"pick_warmup.py: no checkpoint of {run} reached {100 * minimum:.0f}% held-out exact match "
                     f"(best: {100 * best[1]:.1f}% at step {best[0]}); train longer or lower MIN")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit("usage: pick_warmup.py RUN_DIR [MIN]")
    export, accuracy = pick(sys.argv[1], float(sys.argv[2]) if len(sys.argv) == 3 else 0.25)
    print(f"pick_warmup.py: {export} ({100 * accuracy:.1f}% held-out exact match)", file=sys.stderr)
    print(export)
