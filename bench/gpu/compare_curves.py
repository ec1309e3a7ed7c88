#!/usr/bin/env python3
"""Prints the loss curves of a results file (rows from bench_engine_train with a "losses" list) side by side, the
first row being the reference: every 5th step, then per other row the largest absolute and relative gap to the
reference and the mean over the last 10 steps of each."""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    ref, others = rows[0], rows[1:]
    names = [r["impl"] for r in rows]
    print("| step | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(rows))
    n = min(len(r["losses"]) for r in rows)
    for i in list(range(0, n, 5)) + ([n - 1] if (n - 1) % 5 else []):
        print(f"| {i} | " + " | ".join(f"{r['losses'][i]:.4f}" for r in rows) + " |")
    tail = lambda r: sum(r["losses"][n - 10:n]) / 10
    print(f"\nmean of the last 10 steps: " + ", ".join(f"{r['impl']} {tail(r):.4f}" for r in rows))
    for r in others:
        gaps = [abs(a - b) for a, b in zip(r["losses"][:n], ref["losses"][:n])]
        rel = max(g / abs(b) for g, b in zip(gaps, ref["losses"][:n]))
        print(f"{r['impl']} vs {ref['impl']}: max |loss gap| {max(gaps):.4f} (step {gaps.index(max(gaps))}), "
              f"max relative {100 * rel:.2f}%, tokens/s {r['tokens_per_s']:.0f} vs {ref['tokens_per_s']:.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
