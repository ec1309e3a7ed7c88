#!/usr/bin/env python3
"""Turns the results.jsonl of run_rl_bench.sh / run_rl_cpu_bench.sh (one JSON line per row, from bench_rl_step or
reference_rl_fsdp2.py) into the markdown table of issue 16, then checks what the rows must satisfy:
  - every row's first loss (the untrained policy's, before any update) agrees with the baseline's within --tol
    (bf16 compute: log-probs differ by ~1e-2 per token between implementations, far less in the token mean);
  - the goal: packed + dynamic batch size at least 2x the baseline's valid tokens/s at no more peak memory.
The baseline is the reference row (transformers + FSDP2, padded) when there is one, else enginery's padded row."""
import argparse
import datetime
import json
import sys

from machine import gpu_machine


def baseline_of(rows):
    for want in (lambda r: r["impl"].startswith("pytorch"), lambda r: r["mode"] == "padded"):
        found = [r for r in rows if want(r)]
        if found:
            return found[0]
    return rows[0]


def table(rows, base, machine):
    first = rows[0]
    pad = 100 * (1 - first["valid_tokens"] / first["padded_tokens"])
    print(f"Date: {datetime.date.today()}, machine: {machine}, {first['world']} rank(s); one PPO step over "
          f"{first['num_seqs']} sequences, {first['valid_tokens']} valid of {first['padded_tokens']} padded tokens "
          f"({pad:.0f}% padding); step time = mean of {first['steps']} timed steps\n")
    print("| impl | mode | micro-batches | AC | step s | valid tokens/s | vs baseline | peak GiB | memory vs baseline "
          "| first loss | grad norm |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        micro = f"<= {r['max_token_len']} tokens" if r.get("max_token_len") else f"{r['mbs']} rows"
        mem = f"{r['peak_mem_gib'] / base['peak_mem_gib']:.2f}x" if base["peak_mem_gib"] else "-"
        print(f"| {r['impl']} | {r['mode']} | {micro} | {'on' if r['ac'] else 'off'} | {r['step_s']:.3f} | "
              f"{r['valid_tokens_per_s']:.0f} | {r['valid_tokens_per_s'] / base['valid_tokens_per_s']:.2f}x | "
              f"{r['peak_mem_gib']:.2f} | {mem} | {r['first_loss']:.6f} | {r['grad_norm']:.4f} |")


def checks(rows, base, tol):
    """Prints the loss agreement and the goal; returns whether the losses agree."""
    diffs = [abs(r["first_loss"] - base["first_loss"]) for r in rows]
    agree = max(diffs) <= tol
    print(f"\nfirst-step losses: max |diff| vs baseline {max(diffs):.2e} (tolerance {tol:g}): "
          f"{'agree' if agree else 'DISAGREE'}")
    best = [r for r in rows if r["mode"] == "packed+dynamic"]
    if best and best[0] is not base:
        b = best[0]
        speed = b["valid_tokens_per_s"] / base["valid_tokens_per_s"]
        mem_ok = b["peak_mem_gib"] <= base["peak_mem_gib"]
        print(f"goal (packed + dynamic >= 2x baseline valid tokens/s, no more peak memory): {speed:.2f}x, "
              f"{b['peak_mem_gib']:.2f} vs {base['peak_mem_gib']:.2f} GiB: "
              f"{'met' if speed >= 2 and mem_ok else 'not met'}")
    return agree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--machine", default=None, help="the GPU named in the header (default: nvidia-smi's)")
    ap.add_argument("--tol", type=float, default=1e-2, help="largest |first loss - baseline first loss| accepted")
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.results) if line.strip()]
    if not rows:
        sys.exit(f"{args.results}: no rows")
    base = baseline_of(rows)
    table(rows, base, args.machine or gpu_machine())
    sys.exit(0 if checks(rows, base, args.tol) else 1)


if __name__ == "__main__":
    main()
