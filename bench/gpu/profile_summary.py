#!/usr/bin/env python3
"""Where the GPU time of one profiled training step goes, from a kineto chrome trace (the engine's
bench_engine_train --profile, or reference_fsdp2.py --profile). Prints GPU busy time, time per phase (forward,
backward, optimizer, ... from the user annotations the launches fall in), per kernel class, per launching
top-level op, per innermost annotation, and the top kernels.

  python3 bench/gpu/profile_summary.py TRACE.json[.gz] [--top 25]
"""
import argparse
import bisect
import collections
import gzip
import json
import re

PHASES = ["enginery::forward", "enginery::backward", "enginery::after_backward", "enginery::optimizer_step",
          "ref::forward", "ref::backward", "ref::clip", "ref::optimizer"]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def kernel_class(name):
    n = name.lower()
    if "nccl" in n:
        return "nccl"
    if any(k in n for k in ("flash", "fmha", "attention", "cudnn")):
        return "attention"
    if any(k in n for k in ("gemm", "cutlass", "xmma", "nvjet", "sm90_", "cublas", "matmul")):
        return "gemm"
    if "adam" in n:
        return "optimizer"
    if "norm" in n:
        return "norm"
    if any(k in n for k in ("reduce", "softmax", "logsumexp")):
        return "reduce/softmax"
    if any(k in n for k in ("elementwise", "vectorized", "unrolled", "foreach", "copy", "cat", "index", "scatter",
                            "gather", "fill")):
        return "elementwise/copy"
    return "other"


def short(name, width=110):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[:width - 3] + "..."


class Intervals:
    """Nested intervals of one thread: the chain of intervals containing a time point, outermost first."""

    def __init__(self, events):
        self.events = sorted(events, key=lambda e: (e["ts"], -e.get("dur", 0)))
        self.starts = [e["ts"] for e in self.events]
        self.parent = []
        stack = []
        for i, e in enumerate(self.events):
            while stack and self.events[stack[-1]]["ts"] + self.events[stack[-1]].get("dur", 0) < e["ts"]:
                stack.pop()
            self.parent.append(stack[-1] if stack else -1)
            stack.append(i)

    def containing(self, ts):
        i = bisect.bisect_right(self.starts, ts) - 1
        out = []
        while i >= 0:
            e = self.events[i]
            if e["ts"] + e.get("dur", 0) >= ts:
                out.append(e)
            i = self.parent[i]
        return out[::-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    ev = [e for e in load(args.trace) if e.get("ph") == "X"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
               and "correlation" in e.get("args", {})}
    by_tid = collections.defaultdict(list)
    for e in ev:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            by_tid[(e["pid"], e["tid"])].append(e)
    trees = {k: Intervals(v) for k, v in by_tid.items()}
    phase_iv = sorted([e for e in ev if e.get("cat") == "user_annotation" and e["name"] in PHASES],
                      key=lambda e: e["ts"])

    if not gpu:
        print("no GPU events in", args.trace)
        return
    busy = sum(e["dur"] for e in gpu)
    span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    print(f"trace {args.trace}: GPU busy {busy / 1e3:.1f} ms over a span of {span / 1e3:.1f} ms "
          f"({100 * busy / span:.0f}% busy), {len(gpu)} GPU events")

    per_phase, per_class, per_top, per_annot, per_kernel = (collections.Counter() for _ in range(5))
    counts = collections.Counter()
    for k in gpu:
        d = k["dur"]
        cls = kernel_class(k["name"]) if k.get("cat") == "kernel" else k["cat"]
        per_class[cls] += d
        per_kernel[k["name"]] += d
        counts[k["name"]] += 1
        launch = runtime.get(k.get("args", {}).get("correlation"))
        phase, top, annot = "unattributed", "unattributed", "-"
        if launch is not None:
            ts = launch["ts"]
            for p in phase_iv:
                if p["ts"] <= ts <= p["ts"] + p["dur"]:
                    phase = p["name"]
            stack = trees.get((launch["pid"], launch["tid"]))
            if stack is not None:
                chain = stack.containing(ts)
                ops = [c for c in chain if c.get("cat") == "cpu_op"]
                if ops:
                    top = ops[0]["name"]
                    if top.startswith("autograd::engine::evaluate_function") or len(ops) == 1:
                        top = ops[0]["name"] if len(ops) == 1 else ops[0]["name"] + " > " + ops[1]["name"]
                ann = [c for c in chain if c.get("cat") == "user_annotation"]
                if ann:
                    annot = ann[-1]["name"]
        per_phase[phase] += d
        per_top[top] += d
        per_annot[annot] += d

    def table(title, counter, n):
        print(f"\n{title}")
        for name, d in counter.most_common(n):
            print(f"  {d / 1e3:9.2f} ms {100 * d / busy:5.1f}%  {short(name)}")

    table("by phase (launch inside the annotation)", per_phase, 20)
    table("by kernel class", per_class, 20)
    table("by innermost user annotation", per_annot, 20)
    table("by launching top-level op", per_top, args.top)
    print(f"\ntop {args.top} kernels")
    for name, d in per_kernel.most_common(args.top):
        print(f"  {d / 1e3:9.2f} ms {100 * d / busy:5.1f}% x{counts[name]:<5d} {short(name)}")


if __name__ == "__main__":
    main()
