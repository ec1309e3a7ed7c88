#!/usr/bin/env python3
"""Turns results.jsonl of run_gpu_bench.sh into the comparison table (markdown): one row per (shape, AC, impl),
with the engine's ratio to the reference of the same shape and AC setting."""
import datetime
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    ref = {(r["shape"], r["ac"]): r for r in rows if r["impl"].startswith("pytorch")}
    print(f"Date: {datetime.date.today()}, machine: 1x NVIDIA H200, seq 4096, micro-batch 2, bf16 compute / fp32 master\n")
    print("| shape | AC | impl | tokens/s | MFU | peak GiB | final loss | max abs loss diff vs ref | tokens/s vs ref |"
          " memory vs ref |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["shape"], r["ac"], r["impl"])):
        base = ref.get((r["shape"], r["ac"]))
        speed = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "-"
        mem = f"{r['peak_mem_gib'] / base['peak_mem_gib']:.2f}x" if base and base["peak_mem_gib"] else "-"
        # Same weights, same tokens: the loss curves should agree to bf16 tolerance step by step.
        n = min(len(r["losses"]), len(base["losses"])) if base else 0
        dloss = f"{max(abs(a - b) for a, b in zip(r['losses'][:n], base['losses'][:n])):.4f} ({n} steps)" if n else "-"
        print(f"| {r['shape']} | {'on' if r['ac'] else 'off'} | {r['impl']} | {r['tokens_per_s']:.0f} | "
              f"{100 * r['mfu']:.1f}% | {r['peak_mem_gib']:.1f} | {r['final_loss']:.4f} | {dloss} | {speed} | {mem} |")


if __name__ == "__main__":
    main(sys.argv[1])
