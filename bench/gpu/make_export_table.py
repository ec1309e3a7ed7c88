#!/usr/bin/env python3
"""Table of run_export_bench.sh's results.jsonl: per shape, seconds per full export, GB/s of bf16 payload, extra
peak memory, and the speed-up over verl's full_tensor() loop; checksums must agree between rows of one dtype."""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print("| shape | ranks | implementation | mode | s / export | payload GB/s | extra peak GiB | vs verl loop | "
          "checksum |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in sorted({r["shape"] for r in rows}, key=lambda s: float(s.rstrip("B"))):
        of_shape = [r for r in rows if r["shape"] == shape]
        base = next((r for r in of_shape if r["mode"] == "verl_full_tensor"), None)
        for r in of_shape:
            speedup = f"{base['seconds'] / r['seconds']:.2f}x" if base else "-"
            print(f"| {shape} | {r.get('world', 1)} | {r['impl']} | {r['mode']} | {r['seconds']:.3f} | {r['bytes'] / r['seconds'] / 1e9:.1f} "
                  f"| {r['extra_peak_gib']:.2f} | {speedup} | {r['checksum']:.6e} |")


if __name__ == "__main__":
    main(sys.argv[1])
