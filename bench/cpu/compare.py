#!/usr/bin/env python3
"""Prints the CPU bench's rows (bench/cpu/run_cpu_bench.sh) next to the committed baseline: tokens/s and peak RSS,
with ratios now / baseline, keyed by backend and activation checkpointing."""
import argparse
import json
import os


def rows(path):
    if not os.path.exists(path):
        return {}
    out = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            # Rows compare only under the same settings (a different seq or batch is another benchmark).
            out[(r["impl"], r["ac"], r["seq"], r["mbs"], r["world"])] = r
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("now")
    ap.add_argument("baseline")
    ap.add_argument("--model", default="")
    args = ap.parse_args()
    now, base = rows(args.now), rows(args.baseline)
    first = next(iter(now.values()))
    print(f"CPU step benchmark: {args.model}, {first['world']} Gloo ranks, seq {first['seq']}, micro-batch "
          f"{first['mbs']}, {first['steps']} timed steps (baseline: {os.path.relpath(args.baseline)})\n")
    print("| impl | AC | tokens/s | baseline | ratio | peak RSS GiB | baseline | ratio | final loss | baseline |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(now):
        r, b = now[key], base.get(key)

        def cell(field, fmt):
            return (fmt.format(b[field]), f"{r[field] / b[field]:.2f}x") if b and b[field] else ("-", "-")

        tb, tr = cell("tokens_per_s", "{:.0f}")
        mb, mr = cell("peak_mem_gib", "{:.3f}")
        lb = f"{b['final_loss']:.4f}" if b else "-"
        print(f"| {r['impl']} | {'on' if r['ac'] else 'off'} | {r['tokens_per_s']:.0f} | {tb} | {tr} | "
              f"{r['peak_mem_gib']:.3f} | {mb} | {mr} | {r['final_loss']:.4f} | {lb} |")


if __name__ == "__main__":
    main()
