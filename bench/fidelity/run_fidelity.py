#!/usr/bin/env python3
"""Does bf16 / fp16 train like fp32? The same tiny model from the same init on the same data, once per dtype and
seed (and per CUDA-kernel setting), through `enginery train`; then per dtype the median and spread over seeds of
the final held-out exact match, the final validation loss and the steps to 90%, a statistical verdict against
fp32's seed spread, and every curve overlaid in one PNG (`enginery plot`).

A dtype passes when the median of each of its results lies within the range fp32 spans over the same seeds (with
the reference kernel setting); a kernel setting passes when each dtype's medians lie within that dtype's range
with the reference setting: it trains like the reference as far as the seeds can tell.
One run proves nothing either way (docs/BENCHMARKS.md, "Mixed-precision fidelity").

    bench/fidelity/run_fidelity.py --out runs/fidelity-cpu                 # CPU, 2 ranks, fp32/bf16/fp16, seeds 1-5
    bench/fidelity/run_fidelity.py --device cuda --nproc 1 --jobs 8 --kernels on,off --out OUT

Outputs in --out: runs/<variant>-<dtype>-s<seed>/ (each run's outputs), results.jsonl (one line per run),
table.md (the table printed), curves.png. GRPO configs work too: their held-out exact match is the reward the
verdict reads, and the final training reward (critic/score/mean) is reported beside it.
"""
import argparse
import concurrent.futures
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNEL_SETTINGS = {"on": "1", "off": "0"}  # ENGINERY_CUDA_KERNELS (docs/ARCHITECTURE.md, "CUDA kernels")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--enginery", default=None, help="the enginery command (default: .venv/bin/enginery, else PATH)")
    p.add_argument("--config", default=str(REPO / "examples/demo.toml"))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--nproc", type=int, default=2, help="ranks per run")
    p.add_argument("--dtypes", default="fp32,bf16,fp16", help="dtypes to compare; the first is the reference")
    p.add_argument("--dtype-keys", default="engine.mixed_precision.param_dtype",
                   help="config keys set to the run's dtype (GRPO: add actor_rollout_ref.rollout.dtype)")
    p.add_argument("--seeds", default="1-5", help="data.seed = engine.seed values: 1-5 or 1,3,7")
    p.add_argument("--seed-keys", default="data.seed,engine.seed",
                   help="config keys set to the run's seed (GRPO from one warm-up: engine.seed alone keeps the "
                        "warm-up's held-out pairs)")
    p.add_argument("--kernels", default="on",
                   help="ENGINERY_CUDA_KERNELS settings to run, the first the reference: on, off, or a value the "
                        "variable takes (swiglu,rope / -adamw); cuda only")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time")
    p.add_argument("--set", action="append", default=[], dest="overrides",
                   help="extra --set for every run; {seed} and {dtype} are replaced by the run's (GRPO: model.path "
                        "of each seed's warm-up)")
    p.add_argument("--out", required=True)
    p.add_argument("--target", type=float, default=0.9, help="accuracy whose first step is reported")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    p.add_argument("--require-accuracy", type=float, default=None,
                   help="fail (exit 1) unless every run ends at or above this held-out exact match")
    p.add_argument("--require-gain", type=float, default=None,
                   help="fail (exit 1) unless every run ends at least this much above its first held-out exact "
                        "match (GRPO: above its warm-up)")
    p.add_argument("--require-reward-rise", type=float, default=None,
                   help="GRPO: fail (exit 1) unless every run's sampled reward rises by this much (the mean of its "
                        "last ten steps over that of its first ten)")
    p.add_argument("--from-results", nargs="+", metavar="JSONL",
                   help="run nothing: summarise the results.jsonl files of earlier sweeps (their runs/ folders, "
                        "for the curves, beside each file)")
    return p.parse_args(argv)


def seeds_of(text):
    if "-" in text and "," not in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def enginery_command(given):
    if given:
        return given
    venv = REPO / ".venv/bin/enginery"
    return str(venv) if venv.exists() else "enginery"


def run_name(variant, dtype, seed):
    return f"{variant}-{dtype}-s{seed}"


def kernel_env(setting):
    return KERNEL_SETTINGS.get(setting, setting)


def train(args, variant, dtype, seed, out):
    name = run_name(variant, dtype, seed)
    run_dir = out / "runs" / name
    cmd = [enginery_command(args.enginery), "train", "--config", args.config, "--nproc", str(args.nproc),
           "--fresh-run", "--set", f"trainer.device={args.device}", "--set", f'trainer.experiment_name="{name}"',
           "--set", f'trainer.default_local_dir="{run_dir}"']
    for key in args.seed_keys.split(","):
        cmd += ["--set", f"{key}={seed}"]
    for key in args.dtype_keys.split(","):
        cmd += ["--set", f'{key}="{dtype}"']
    for o in args.overrides:
        cmd += ["--set", o.replace("{seed}", str(seed)).replace("{dtype}", dtype)]
    env = dict(os.environ, ENGINERY_CUDA_KERNELS=kernel_env(variant), NCCL_NVLS_ENABLE="0")
    start = time.time()
    log = out / "logs" / f"{name}.log"
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    result = {"variant": variant, "dtype": dtype, "seed": seed, "rc": rc, "seconds": round(time.time() - start, 1),
              "dir": str(run_dir), "log": str(log)}
    result.update(read_metrics(run_dir / "metrics.jsonl", args.target))
    return result


def metric_rows(path):
    """The rows of a run's metrics.jsonl, a half-written last line skipped; none when there is no file."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def read_metrics(path, target):
    """First and final accuracy, final validation loss, first step at `target` accuracy, final training reward and
    its rise (the mean of the last ten sampled rewards minus that of the first ten)."""
    found = {"first_accuracy": None, "accuracy": None, "val_loss": None, "steps_to_target": None, "reward": None,
             "reward_rise": None, "steps": 0}
    rewards = []
    for m in metric_rows(path):
        found["steps"] = max(found["steps"], m.get("step", 0))
        if m.get("accuracy") is not None:
            if found["first_accuracy"] is None:
                found["first_accuracy"] = m["accuracy"]
            found["accuracy"] = m["accuracy"]
            if found["steps_to_target"] is None and m["accuracy"] >= target:
                found["steps_to_target"] = m["step"]
        if m.get("val_loss") is not None:
            found["val_loss"] = m["val_loss"]
        if m.get("critic/score/mean") is not None:
            found["reward"] = m["critic/score/mean"]
            rewards.append(m["critic/score/mean"])
    k = min(10, len(rewards) // 2)
    if k > 0:
        found["reward_rise"] = statistics.mean(rewards[-k:]) - statistics.mean(rewards[:k])
    return found


@functools.lru_cache(maxsize=None)
def train_curve(run_dir):
    """step -> the training signal: GRPO's sampled reward where there is one, else the training loss. Cached: a
    summary compares each finished run with several others."""
    if not run_dir:
        return {}
    curve = {}
    for m in metric_rows(Path(run_dir) / "metrics.jsonl"):
        value = m.get("critic/score/mean", m.get("loss"))
        if value is not None and "step" in m:
            curve[m["step"]] = value
    return curve


def curve_gap(a, b):
    """Mean |a - b| over the steps both curves have: how far two runs' training went apart over the whole run."""
    steps = a.keys() & b.keys()
    return statistics.mean(abs(a[t] - b[t]) for t in steps) if steps else None


def parting_step(a, b, tolerance=0.01):
    """The first step at which two runs' curves differ by more than `tolerance` of the second's value (None: they
    never do). Rounding differences grow through training; this says for how long two runs stay one run."""
    for t in sorted(a.keys() & b.keys()):
        if abs(a[t] - b[t]) > tolerance * abs(b[t]):
            return t
    return None


def compare_to(rows, reference_rows, measure):
    """`measure`(curve, reference curve) for each run against the reference run of its seed; for the reference itself,
    between its runs of different seeds (the scale a change is measured against: a kernel that moves training less
    than a new seed does is neutral)."""
    curves = {r["seed"]: train_curve(r.get("dir")) for r in reference_rows if r["rc"] == 0}
    if rows is reference_rows:
        seeds = sorted(curves)
        return [measure(curves[s], curves[t]) for i, s in enumerate(seeds) for t in seeds[i + 1:]]
    return [measure(train_curve(r.get("dir")), curves[r["seed"]])
            for r in rows if r["rc"] == 0 and r["seed"] in curves]


def gain(result):
    """Last minus first held-out exact match (0 where either is missing)."""
    first, last = result.get("first_accuracy"), result.get("accuracy")
    return last - first if first is not None and last is not None else 0.0


def spread(values):
    """median [min, max] of the values present, and how many there were."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s, percent=False, digits=3):
    if s is None:
        return "-"
    f = (lambda v: f"{100 * v:.1f}%") if percent else (lambda v: f"{v:.{digits}g}")
    return f"{f(s['median'])} [{f(s['min'])}, {f(s['max'])}]"


def verdict(group, reference):
    """PASS when each result's median lies within the reference's seed range (accuracy, val loss)."""
    if group is reference:
        return "reference"
    checks = []
    for key in ("accuracy", "val_loss"):
        g, r = group[key], reference[key]
        if g is None or r is None:
            continue
        checks.append(r["min"] <= g["median"] <= r["max"])
    if not checks:
        return "no data"
    return "PASS" if all(checks) else "FAIL"


def summarise(results, dtypes, variants, seeds, target):
    rows_of = {(v, d): [r for r in results if r["variant"] == v and r["dtype"] == d] for v in variants for d in dtypes}
    # under the reference kernel setting each dtype is held to fp32; any other setting to the same dtype under the
    # reference setting (what switching kernels changes)
    reference_of = {(v, d): (variants[0], dtypes[0] if v == variants[0] else d) for v, d in rows_of}
    groups = {}
    for key, rows in rows_of.items():
        groups[key] = {
            "runs": len(rows), "failed": sum(r["rc"] != 0 for r in rows),
            "first_accuracy": spread(r.get("first_accuracy") for r in rows),
            "accuracy": spread(r["accuracy"] for r in rows),
            "val_loss": spread(r["val_loss"] for r in rows),
            "steps_to_target": spread(r["steps_to_target"] for r in rows),
            "reached": sum(r["steps_to_target"] is not None for r in rows),
            "reward": spread(r["reward"] for r in rows),
            "reward_rise": spread(r.get("reward_rise") for r in rows),
            "gain": spread(gain(r) for r in rows if r["rc"] == 0),
            "curve_gap": spread(compare_to(rows, rows_of[reference_of[key]], curve_gap)),
            "parts_at": spread(compare_to(rows, rows_of[reference_of[key]], parting_step)),
        }
    columns = ["kernels", "dtype", "runs (failed)", "held-out exact match, first eval", "held-out exact match", "gain",
               "val loss", f"steps to {100 * target:.0f}% (reached)", "final train reward", "its rise",
               "train curve gap", "parts at step", "verdict"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for (variant, dtype), g in groups.items():
        ref = groups[reference_of[(variant, dtype)]]
        lines.append(f"| {variant} | {dtype} | {g['runs']} ({g['failed']}) | {fmt(g['first_accuracy'], True)} | "
                     f"{fmt(g['accuracy'], True)} | {fmt(g['gain'], True)} | "
                     f"{fmt(g['val_loss'])} | {fmt(g['steps_to_target'], digits=4)} ({g['reached']}/{g['runs']}) | "
                     f"{fmt(g['reward'])} | {fmt(g['reward_rise'])} | {fmt(g['curve_gap'])} | "
                     f"{fmt(g['parts_at'], digits=4)} | "
                     f"{verdict(g, ref)} |")
    seeds_text = ",".join(str(s) for s in seeds)
    lines.append("")
    lines.append(f"median [min, max] over seeds {seeds_text}. Verdict: with kernels {variants[0]}, each dtype against "
                 f"{dtypes[0]}; with other kernel settings, each dtype against itself with kernels {variants[0]}. PASS "
                 f"when its medians (accuracy, val loss) lie within the reference's seed range. Train curve gap: mean "
                 f"|difference| of the training loss (GRPO: sampled reward) per step to the reference run of the same "
                 f"seed; in the reference row, between its runs of different seeds. Parts at step: the first step "
                 f"where those curves differ by more than 1% (runs that never do are not counted; - when none does).")
    return "\n".join(lines), groups


def sweep(args, out, variants, dtypes, seeds):
    """Runs every (kernel setting, dtype, seed), appending each result to results.jsonl as it ends."""
    todo = [(v, d, s) for v in variants for d in dtypes for s in seeds]
    print(f"{len(todo)} runs ({len(variants)} kernel settings x {len(dtypes)} dtypes x {len(seeds)} seeds) on "
          f"{args.device}, {args.jobs} at a time; outputs in {out}", flush=True)
    results, start = [], time.time()
    with open(out / "results.jsonl", "w") as log, \
            concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(train, args, v, d, s, out) for v, d, s in todo]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            r = future.result()
            results.append(r)
            log.write(json.dumps(r) + "\n")
            log.flush()
            eta = (time.time() - start) / done * (len(todo) - done)
            acc = "-" if r["accuracy"] is None else f"{100 * r['accuracy']:.1f}%"
            print(f"[{done}/{len(todo)}] {run_name(r['variant'], r['dtype'], r['seed'])}: rc {r['rc']}, "
                  f"accuracy {acc}, val loss {r['val_loss']}, {r['seconds']}s; ETA {eta:.0f}s", flush=True)
    return results


def load_results(files, target):
    """Results of earlier sweeps; each run's folder is looked for under runs/ beside its results file, and where
    its metrics.jsonl is there they are read again (for fields added since, and for another --target)."""
    results = []
    for f in files:
        for line in Path(f).read_text().splitlines():
            r = json.loads(line)
            local = Path(f).resolve().parent / "runs" / Path(r["dir"]).name
            r["dir"] = str(local)
            if (local / "metrics.jsonl").exists():
                r.update(read_metrics(local / "metrics.jsonl", target))
            results.append(r)
    return results


def main(argv):
    args = parse_args(argv)
    out = Path(args.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    if args.from_results:
        results = load_results(args.from_results, args.target)
        # the order --dtypes / --kernels give (the first is the reference), then any others in file order
        def ordered(found, preferred):
            found = list(dict.fromkeys(found))
            return [x for x in preferred if x in found] + [x for x in found if x not in preferred]
        variants = ordered((r["variant"] for r in results), args.kernels.split(","))
        dtypes = ordered((r["dtype"] for r in results), args.dtypes.split(","))
        seeds = sorted({r["seed"] for r in results})
    else:
        dtypes, variants, seeds = args.dtypes.split(","), args.kernels.split(","), seeds_of(args.seeds)
        results = sweep(args, out, variants, dtypes, seeds)
    results.sort(key=lambda r: (variants.index(r["variant"]), dtypes.index(r["dtype"]), r["seed"]))
    table, _ = summarise(results, dtypes, variants, seeds, args.target)
    header = f"{Path(args.config).name} on {args.device}, {args.nproc} rank(s)"
    if args.overrides:
        header += "; --set " + " ".join(args.overrides)
    (out / "table.md").write_text(header + "\n\n" + table + "\n")
    print("\n" + header + "\n\n" + table, flush=True)
    plotted = [f"{r['variant']}/{r['dtype']}={r['dir']}" for r in results
               if r["rc"] == 0 and (Path(r["dir"]) / "metrics.jsonl").exists()]
    if plotted:
        subprocess.run([enginery_command(args.enginery), "plot", *plotted, "-o", str(out / "curves.png")])
    failed = [r for r in results if r["rc"] != 0]
    if args.require_accuracy is not None:
        failed += [r for r in results if r["rc"] == 0 and (r["accuracy"] or 0.0) < args.require_accuracy]
        print(f"bar: every run >= {100 * args.require_accuracy:.0f}% held-out exact match: "
              f"{'PASS' if not failed else 'FAIL'}", flush=True)
    if args.require_gain is not None:
        short = [r for r in results if r["rc"] == 0 and gain(r) < args.require_gain]
        print(f"bar: every run's held-out exact match rises by >= {100 * args.require_gain:.0f} points: "
              f"{'PASS' if not short else 'FAIL'}", flush=True)
        failed += [r for r in short if r not in failed]
    if args.require_reward_rise is not None:
        flat = [r for r in results if r["rc"] == 0 and (r.get("reward_rise") or 0.0) < args.require_reward_rise]
        print(f"bar: every run's sampled reward rises by >= {args.require_reward_rise:g}: "
              f"{'PASS' if not flat else 'FAIL'}", flush=True)
        failed += [r for r in flat if r not in failed]
    for r in failed:
        print(f"  {run_name(r['variant'], r['dtype'], r['seed'])}: rc {r['rc']}, accuracy {r['accuracy']} "
              f"(log: {r['log']})", flush=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
