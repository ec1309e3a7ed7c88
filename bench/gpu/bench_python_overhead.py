"""The Python path's per-step overhead (issue 18, item 5): the fsdp2 engine driven from Python through
enginery.new_engine + train_batch with a loss written in Python, on the same checkpoint, token windows, config and
timing as bench_engine_train (the C++ host), one JSON line in the same fields. run_python_overhead_bench.sh runs
both in one call and prints the comparison.

Usage: bench_python_overhead.py --model DIR --tokens tokens.bin --plugin-dir DIR [--seq 4096 --mbs 2 --steps 10
       --warmup 3 --ac --out results.jsonl]"""
import argparse
import json
import time

import numpy as np
import torch

import enginery


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--mbs", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--ac", action="store_true")
    p.add_argument("--out", default="")
    a = p.parse_args()

    enginery.load_plugins([a.plugin_dir])
    # bench/bench_common.cpp's engine_args, key for key.
    engine = enginery.new_engine("language_model", "fsdp2", "cuda", {
        "model": {"path": a.model, "enable_gradient_checkpointing": a.ac},
        "engine": {"micro_batch_size_per_gpu": a.mbs,
                   "mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}},
        "optim": {"lr": a.lr, "weight_decay": 0.01, "clip_grad": 1.0, "total_training_steps": a.warmup + a.steps}})
    engine.initialize()

    tokens = torch.from_numpy(np.fromfile(a.tokens, dtype=np.int32).astype(np.int64))

    window = a.mbs * a.seq
    if tokens.numel() < (a.warmup + a.steps) * window:
        raise SystemExit(f"{a.tokens}: {tokens.numel()} tokens, {a.warmup + a.steps} steps need "
                         f"{(a.warmup + a.steps) * window} (--mbs x --seq per step); make a longer file or run fewer steps")

    def batch_for_step(step):  # one process: step k reads window k, as bench_engine_train does at world size 1
        ids = tokens[step * window:(step + 1) * window].view(a.mbs, a.seq).cuda()
        mask = torch.ones_like(ids, dtype=torch.float32)
        mask[:, 0] = 0
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": mask}

    def sft_loss(model_output, data, ctx):
        return -(model_output["log_probs"].float() * data["loss_mask"]).sum() / ctx.global_num_tokens, {}

    torch.cuda.reset_peak_memory_stats()
    losses, seconds = [], []
    with engine.train_mode():
        for step in range(a.warmup + a.steps):
            batch = batch_for_step(step)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = engine.train_batch(batch, sft_loss)
            loss = float(out["loss"])
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            losses.append(loss)
            if step >= a.warmup:
                seconds.append(dt)
            print(f"step {step} loss {loss:.4f} {dt:.3f} s", flush=True)
    tok_s = a.mbs * a.seq / (sum(seconds) / len(seconds))
    result = {"impl": "enginery-fsdp2-python", "seq": a.seq, "mbs": a.mbs, "ac": a.ac, "world": 1,
              "steps": a.steps, "tokens_per_s": tok_s, "step_s": sum(seconds) / len(seconds),
              "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30, "final_loss": losses[-1], "losses": losses}
    print(json.dumps(result), flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
