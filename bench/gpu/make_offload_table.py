#!/usr/bin/env python3
"""Turns results.jsonl of run_offload_bench.sh into the offload table (markdown): per shape, enginery resident,
enginery with param + optimizer offload and PyTorch FSDP2 + CPUOffloadPolicy, with the two ratios the issue sets
goals for (offloaded tokens/s over FSDP2 + CPUOffloadPolicy's, >= 2x; offloaded step time over the resident one,
<= 1.5x) and the loss agreement step by step (same weights, same tokens)."""
import datetime
import json
import sys

from machine import gpu_machine


def max_loss_diff(a, b):
    n = min(len(a["losses"]), len(b["losses"]))
    return f"{max(abs(x - y) for x, y in zip(a['losses'][:n], b['losses'][:n])):.4f} ({n} steps)" if n else "-"


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print(f"Date: {datetime.date.today()}, machine: {gpu_machine()}, seq 4096, micro-batch 2, bf16 compute / fp32 "
          "master, activation checkpointing as recorded\n")
    print("| shape | micro-batches / step | impl | tokens/s | step s | peak GPU GiB | peak host GiB | final loss | tokens/s vs FSDP2+offload |"
          " step vs enginery resident | max loss diff vs enginery resident | max loss diff vs FSDP2+offload |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for shape, k in sorted({(r["shape"], r.get("micro_batches", 1)) for r in rows}):
        group = [r for r in rows if r["shape"] == shape and r.get("micro_batches", 1) == k]
        ref = next((r for r in group if r["impl"].startswith("pytorch")), None)
        resident = next((r for r in group if r["impl"].startswith("enginery") and "offload" not in r["impl"]), None)
        for r in group:
            step_s = r["mbs"] * k * r["seq"] * r["world"] / r["tokens_per_s"]
            speed = f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if ref and r is not ref else "-"
            slow = f"{resident['tokens_per_s'] / r['tokens_per_s']:.2f}x" if resident and r is not resident else "-"
            d_res = max_loss_diff(r, resident) if resident and r is not resident else "-"
            d_ref = max_loss_diff(r, ref) if ref and r is not ref else "-"
            print(f"| {shape} | {k} | {r['impl']} | {r['tokens_per_s']:.0f} | {step_s:.2f} | {r['peak_mem_gib']:.1f} | "
                  f"{r.get('peak_host_gib', 0):.1f} | {r['final_loss']:.4f} | {speed} | {slow} | {d_res} | {d_ref} |")


if __name__ == "__main__":
    main(sys.argv[1])
