#!/usr/bin/env python3
"""Turns results.jsonl of run_gpu_bench.sh into the comparison table (markdown): one row per (shape, AC, impl), with
each row's ratios to both references of the same shape and AC setting: the eager one (reference_fsdp2.py, what verl
users run) and the compiled one (reference_compiled.py, torchtitan's recipe). Rows of the attention backend sweep
carry their backend in the impl column. Below the table: issue 20's goals, read off the engine's rows."""
import datetime
import json
import sys

from machine import gpu_machine

EAGER, COMPILED = "pytorch-fsdp2+transformers", "pytorch-fsdp2+compile"
SHAPE_ORDER = {"0.5B": 0, "1.5B": 1, "3B": 2}
IMPL_ORDER = {EAGER: 0, COMPILED: 1}


def label(r):
    return r["impl"] + (f" (sdpa={r['sdpa']})" if r.get("sdpa") else "")


def ratio(r, base, key):
    return f"{r[key] / base[key]:.2f}x" if base and base.get(key) else "-"


def loss_diff(r, base):
    """Same weights, same tokens: the loss curves should agree to bf16 tolerance step by step."""
    n = min(len(r["losses"]), len(base["losses"])) if base else 0
    if not n:
        return "-"
    return f"{max(abs(a - b) for a, b in zip(r['losses'][:n], base['losses'][:n])):.4f} ({n} steps)"


def order(r):
    return (SHAPE_ORDER.get(r["shape"], 9), r["ac"], IMPL_ORDER.get(r["impl"], 2), r.get("sdpa", ""))


def goals(rows, compiled):
    """Issue 42's goals outside verl: at 1.5B and 3B, with AC on and off, >= 1.2x the compiled reference's tokens/s
    at <= 0.8x its peak memory; MFU >= 55% at 1.5B (the loss criterion is the table's loss column)."""
    lines = ["", "Issue 42 goals (engine, default attention backend, vs the compiled reference of the same shape and AC):",
             ""]
    for r in sorted(rows, key=order):
        base = compiled.get((r["shape"], r["ac"]))
        if not r["impl"].startswith("enginery") or r.get("sdpa") or r["shape"] not in ("1.5B", "3B") or not base:
            continue
        speed = r["tokens_per_s"] / base["tokens_per_s"]
        mem = r["peak_mem_gib"] / base["peak_mem_gib"]
        line = (f"- {r['shape']} AC {'on' if r['ac'] else 'off'}, {r['impl']}: {speed:.2f}x tokens/s (goal 1.2x: "
                f"{'met' if speed >= 1.2 else 'not met'}), {mem:.2f}x memory (goal <= 0.8x: "
                f"{'met' if mem <= 0.8 else 'not met'})")
        if r["shape"] == "1.5B":
            line += f", MFU {100 * r['mfu']:.1f}% (goal 55%: {'met' if r['mfu'] >= 0.55 else 'not met'})"
        lines.append(line)
    return lines if len(lines) > 3 else []


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    eager = {(r["shape"], r["ac"]): r for r in rows if r["impl"] == EAGER}
    compiled = {(r["shape"], r["ac"]): r for r in rows if r["impl"] == COMPILED}
    torch_version = next((r["torch"] for r in rows if r.get("torch")), "?")
    print(f"Date: {datetime.date.today()}, machine: {gpu_machine()}, PyTorch {torch_version}, seq 4096, micro-batch 2, "
          "bf16 compute / fp32 master\n")
    print("| shape | AC | impl | tokens/s | MFU | peak GiB | final loss | max abs loss diff vs eager ref | "
          "tokens/s vs eager ref | tokens/s vs compiled ref | memory vs eager ref | memory vs compiled ref | "
          "compile s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=order):
        key = (r["shape"], r["ac"])
        e, c = eager.get(key), compiled.get(key)
        compile_s = f"{r['compile_s']:.0f}" if "compile_s" in r else "-"
        print(f"| {r['shape']} | {'on' if r['ac'] else 'off'} | {label(r)} | {r['tokens_per_s']:.0f} | "
              f"{100 * r['mfu']:.1f}% | {r['peak_mem_gib']:.1f} | {r['final_loss']:.4f} | {loss_diff(r, e)} | "
              f"{ratio(r, e, 'tokens_per_s')} | {ratio(r, c, 'tokens_per_s')} | {ratio(r, e, 'peak_mem_gib')} | "
              f"{ratio(r, c, 'peak_mem_gib')} | {compile_s} |")
    for line in goals(rows, compiled):
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
