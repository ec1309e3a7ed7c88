#!/usr/bin/env python3
"""verl's own FSDP engine (backend fsdp2) against enginery (backend enginery_fsdp2), both built and driven through
verl's EngineRegistry as verl's TrainingWorker drives an engine, phase by phase of an RL step: log-probs
(infer_batch, with and without entropy), the PPO update and an SFT update (train_batch), the weight export to the
rollout engine (get_per_tensor_param), plus initialize(); time and peak memory of each, the two engines' losses,
log-probs and exported weights compared. On the GPU (--device cuda: the run of record, README's headline table)
or the CPU (--device cpu: a small model, one Gloo rank).

Same weights (one HF directory written by transformers from a fixed seed), same batches (PPO: DataProto ->
to_tensordict -> left_right_2_no_padding, as verl's trainer builds them; SFT: the no-padding layout of verl's SFT
collator), same precision and optimizer config. verl's engine gets the strongest configuration its users set that
this machine runs (--verl-options; on the GPU: varlen flash attention, liger kernels, torch.compile, dynamic batch
size). Each (engine, dtype, round) runs in a process of its own, one after the other (engine_phases.py); the engines
alternate round by round.

    # GPU (bench/verl/README.md has the device call that builds enginery and installs verl there first):
    python bench/verl/bench_verl_engines.py --device cuda --model 1.5B --out table.md --json results.jsonl
    # CPU:
    PYTHONPATH=build/python .venv/bin/python bench/verl/bench_verl_engines.py --threads 1 --dtypes fp32,bf16

Not a test: times depend on the machine and its load. See bench/verl/README.md.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engine_phases  # noqa: E402
import verl_inputs  # noqa: E402

LABELS = {"verl": "verl FSDPEngine (fsdp2)", "enginery": "enginery (enginery_fsdp2)"}
VERL_OPTIONS = ("use_liger", "use_torch_compile")
# What flash-attn would give verl's engine on the GPU, where it cannot be installed.
STANDINS = (" (aten varlen flash kernel as flash-attn, bench/verl/varlen_attention.py), log-probs through a fused "
            "cross-entropy in place of the flash-attn Triton kernel (bench/verl/flash_cross_entropy.py)")
# issue 42's goals, enginery against verl's engine on the GPU: (least speed-up, most memory ratio) per phase, and
# the export's own time bound (seconds, for the 1.5B model).
GOALS = {"ppo": (5.0, 0.6), "sft": (5.0, 0.6), "infer": (3.0, None), "entropy": (3.0, None),
         "export": (5.0, None)}
EXPORT_SECONDS_1_5B = 0.2


def log(*args):
    print(*args, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_child(argv, engine, dtype, work, tag, verl_options):
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--port", str(free_port()),
           "--verl-options", ",".join(f"{k}={int(v)}" for k, v in verl_options.items()) or "none",
           "--child", engine, dtype, work, tag]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        tail = (tail + [line])[-40:]
        if line.startswith("  ["):
            log(line)
    if proc.wait() != 0:
        return None, "\n".join(tail)
    with open(os.path.join(work, f"result-{tag}.json")) as f:
        return json.load(f), None


# What an option's failure names in its traceback: only a failure that names an option is retried without it.
OPTION_TRACES = {"use_liger": ("liger_kernel",), "use_torch_compile": ("torch/_dynamo", "torch/_inductor")}


def run_verl(argv, dtype, work, tag, options):
    """verl's engine with `options`; an option whose code fails here is dropped (and its error kept for the
    table), the way a user would fall back. Any other failure ends the benchmark at once."""
    errors = {}
    while True:
        result, error = run_child(argv, "verl", dtype, work, tag, options)
        if result is not None:
            result["verl_option_errors"] = errors
            return result
        log(error)
        failing = [k for k in VERL_OPTIONS if options.get(k) and any(t in error for t in OPTION_TRACES[k])]
        if not failing:
            raise SystemExit(f"verl {dtype} {tag}: verl's engine failed, and not in the code of an option it was "
                             f"given ({', '.join(k for k in VERL_OPTIONS if options.get(k)) or 'none'}); output above")
        errors[failing[0]] = error.strip().splitlines()[-1][:300]
        log(f"  verl's engine failed in {failing[0]}: retrying without it")
        options = {**options, failing[0]: False}


def busy_cores(seconds=1.0):
    """Cores busy over `seconds` (all processes: call it while this script computes nothing), from /proc/stat."""
    def sample():
        with open("/proc/stat") as f:
            values = [int(x) for x in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # total, idle + iowait
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(1, total1 - total0))


def wait_for_quiet(limit_s, threshold=0.3):
    """Waits up to limit_s for another process's load on the machine to fall under `threshold` cores (a shared CPU
    machine); returns the busy cores seen last."""
    deadline = time.monotonic() + limit_s
    busy = busy_cores()
    if busy > threshold and limit_s > 0:
        log(f"  waiting up to {limit_s:.0f} s for the machine to go quiet ({busy:.1f} cores busy elsewhere)")
        while busy > threshold and time.monotonic() < deadline:
            busy = busy_cores(2.0)
        log(f"  {busy:.1f} cores busy elsewhere; starting")
    return busy


# --------------------------------------------------------------------------------------------------------------
# The table.
# --------------------------------------------------------------------------------------------------------------
def gib(n):
    return n / 2**30


def phase_summary(runs, phase):
    """One engine's phase over its rounds: timed calls pooled; memory: the largest peak of its processes."""
    records = [r["phases"][phase] for r in runs]
    timed = [t for p in records for t in p["seconds"][p["warmup"]:]]
    tokens = sum(sum(p["tokens"][p["warmup"]:]) for p in records)
    return {"median_s": statistics.median(timed), "min_s": min(timed), "max_s": max(timed),
            "tokens_per_s": tokens / sum(timed), "peak": max(p["peak_bytes"] for p in records),
            "first": records[0]}


def verdict(phase, speedup, memory_ratio, seconds, model):
    goal = GOALS.get(phase)
    if goal is None:
        return "", ""
    least, most = goal
    parts, met = [f">= {least:g}x"], speedup >= least
    if most is not None:
        parts.append(f"memory <= {most:g}x")
        met = met and memory_ratio <= most
    if phase == "export" and model == "1.5B":
        parts.append(f"<= {EXPORT_SECONDS_1_5B:g} s")
        met = met and seconds <= EXPORT_SECONDS_1_5B
    return ", ".join(parts), ("met" if met else "**not met**")


def compare_outputs(work, phase, v_tag, e_tag):
    """The first call's per-token outputs of both engines, at every position but each sequence's last: that one
    predicts past the end of its sequence (verl fills it with the log-prob of the next sequence's first token, the
    packed row rolled by one; enginery with 0) and no loss reads it."""
    import torch
    v, e = (torch.load(os.path.join(work, f"{phase}-{t}.pt")) for t in (v_tag, e_tag))
    first = torch.load(os.path.join(work, "data.pt"))[0]
    ends = torch.tensor([len(p) + len(r) for p, r in zip(first["prompts"], first["responses"])]).cumsum(0) - 1
    text = []
    for key in v:
        a, b = v[key].double(), e[key].double()
        if a.shape != b.shape:
            text.append(f"{key}: {a.numel()} values from verl, {b.numel()} from enginery")
            continue
        keep = torch.ones_like(a, dtype=torch.bool)
        keep[ends[ends < a.numel()]] = False
        a, b = a[keep], b[keep]
        d = (a - b).abs()
        text.append(f"{key} differ by {d.mean():.2e} on average, {d.max():.2e} at most (verl's mean {a.mean():.4f})")
    return "; ".join(text)


def table(results, args, params, versions, work):
    lines = []
    add = lines.append
    first = results[0]
    gpu = first.get("gpu", f"CPU, {os.cpu_count()} cores, {first['threads']} torch threads")
    verl_first = next((r for r in results if r["engine"] == "verl"), None)
    shape = verl_inputs.model_shape(args)
    add(f"**{gpu}**. Qwen2 {params / 1e9:.2f}B parameters ({args.model}: hidden {shape['hidden_size']}, "
        f"{shape['num_hidden_layers']} layers, vocab {shape['vocab_size']}, "
        f"{'tied' if shape.get('tie_word_embeddings') else 'untied'}), random init (seed {args.seed}), fp32 master "
        f"weights; {args.rows} sequences per batch (prompts {args.prompt_len[0]}-{args.prompt_len[1]} tokens, "
        f"responses {args.response_len[0]}-{args.response_len[1]}"
        f"{f' log-normal around {args.response_median}' if args.response_median else ''}; "
        f"{min(min(p['tokens']) for r in results for p in r['phases'].values())}-"
        f"{max(max(p['tokens']) for r in results for p in r['phases'].values())} tokens per batch, no padding); "
        f"{'dynamic batch size, ' + str(args.max_tokens) + ' tokens per micro-batch' if args.max_tokens else str(args.micro_batch) + ' rows per micro-batch'}; "
        f"activation checkpointing {'on' if args.activation_checkpointing else 'off'}"
        f"{' (enginery recomputes the MLP block only: gradient_checkpointing_policy = mlp)' if args.recompute_policy == 'mlp' else ''}"
        f"; verl's ppo_loss / sft_loss; "
        f"AdamW lr {args.lr}, clip 1.0; {args.warmup} warm-up + {args.steps} timed calls per phase, "
        f"{args.rounds} round(s) per engine; one process per engine and round; {versions}.")
    if verl_first:
        opts = verl_first["verl_options"]
        add("")
        add(f"verl's engine: attention `{verl_first['attention']}`"
            f"{STANDINS if verl_first['attention'] != 'sdpa' else ''}, "
            f"use_remove_padding, {', '.join(f'{k}={v}' for k, v in opts.items()) or 'no further options'}."
            + "".join(f" {k} does not run here: `{err}`." for k, err in verl_first["verl_option_errors"].items()))
    for dtype in args.dtypes:
        runs = {e: [r for r in results if r["engine"] == e and r["dtype"] == dtype] for e in args.engines}
        if not all(runs.values()):
            continue
        add("")
        add(f"{dtype} compute:")
        add("")
        add("| phase | engine | s per call, median (min - max) | tokens/s | peak memory GiB | speed-up | memory | "
            "goal | verdict |")
        add("|---|---|---|---|---|---|---|---|---|")
        init = {e: (statistics.median(r["init_s"] for r in rs), max(r["init_peak_bytes"] for r in rs))
                for e, rs in runs.items()}
        for e in args.engines:
            add(f"| initialize() | {LABELS[e]} | {init[e][0]:.1f} | | {gib(init[e][1]):.2f} | | | | |")
        summaries = {}
        for phase in (p for p in engine_phases.PHASES if p in args.phases):
            s = summaries[phase] = {e: phase_summary(rs, phase) for e, rs in runs.items()}
            for e in args.engines:
                x = s[e]
                rate = "" if phase == "export" else f"{x['tokens_per_s']:.0f}"
                add(f"| {phase} | {LABELS[e]} | {x['median_s']:.3f} ({x['min_s']:.3f} - {x['max_s']:.3f}) | "
                    f"{rate} | {gib(x['peak']):.2f} | | | | |")
            if "verl" in s and "enginery" in s:
                v, e = s["verl"], s["enginery"]
                speedup, mem = v["median_s"] / e["median_s"], e["peak"] / v["peak"]
                goal, met = verdict(phase, speedup, mem, e["median_s"], args.model) if args.device != "cpu" \
                    else ("", "")
                add(f"| {phase} | **enginery / verl** | | | | **{speedup:.2f}x** | {mem:.2f}x | {goal} | {met} |")
        add("")
        trained = [p for p in args.phases if p in ("ppo", "sft")]
        before = [p for p in args.phases if p not in ("ppo", "sft")
                  and (not trained or args.phases.index(p) < args.phases.index(trained[0]))]
        if before:
            add(f"- Memory of {', '.join(before)}: measured before any optimizer step of that process. enginery "
                f"allocates AdamW's moments at initialize(), torch (verl's engine) at the first step, so verl's "
                f"peaks there lack its optimizer state (2 x 4 bytes a parameter), which an RL loop holds after its "
                f"first step.")
        if not ("verl" in runs and "enginery" in runs):
            continue
        v_tag, e_tag = runs["verl"][0]["tag"], runs["enginery"][0]["tag"]
        for phase in ("ppo", "sft"):
            if phase in summaries:
                v, e = summaries[phase]["verl"]["first"], summaries[phase]["enginery"]["first"]
                d = [abs(a - b) for a, b in zip(v["loss"], e["loss"])]
                add(f"- {phase}: losses per call, verl {', '.join(f'{x:.5f}' for x in v['loss'])}; enginery "
                    f"{', '.join(f'{x:.5f}' for x in e['loss'])} (largest difference {max(d):.2e}); grad norms, verl "
                    f"{', '.join(f'{x:.4f}' for x in v['grad_norm'])}; enginery "
                    f"{', '.join(f'{x:.4f}' for x in e['grad_norm'])}.")
        for phase in ("infer", "entropy"):
            if phase in summaries:
                add(f"- {phase} (first call, initial weights unless a training phase ran before): "
                    f"{compare_outputs(work, phase, v_tag, e_tag)}.")
        if "export" in summaries:
            v, e = summaries["export"]["verl"]["first"], summaries["export"]["enginery"]["first"]
            common = sorted(set(v["names"]) & set(e["names"]))
            # |difference of the sums| over the sum of magnitudes: a tensor whose sum is near 0 (a bias, most
            # weights of a random init) would make a relative difference of the sums meaningless.
            rel = max((abs(v["checksum"][n][0] - e["checksum"][n][0]) / max(1e-30, v["checksum"][n][1])
                       for n in common), default=0.0)
            only_v, only_e = sorted(set(v["names"]) - set(e["names"])), sorted(set(e["names"]) - set(v["names"]))
            add(f"- export: verl {len(v['names'])} tensors ({v['numel'] / 1e9:.3f}B values), enginery "
                f"{len(e['names'])} ({e['numel'] / 1e9:.3f}B); {len(common)} names in common, their bf16 sums differ "
                f"by {rel:.1e} of the tensor's sum of magnitudes at most; only verl's: {only_v or 'none'}; only enginery's: "
                f"{only_e or 'none'}.")
    return "\n".join(lines)


def parse_range(text):
    lo, hi = (int(x) for x in text.split(","))
    return lo, hi


def parse_options(text):
    if text in ("", "none"):
        return {}
    out = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name not in VERL_OPTIONS:
            raise argparse.ArgumentTypeError(f"{name} (allowed: {', '.join(VERL_OPTIONS)})")
        out[name] = value != "0"
    return out


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model", choices=("custom", *sorted(verl_inputs.SHAPES)), default=None,
                    help="a released Qwen2.5 shape (random weights) or custom (the shape flags); default: 1.5B on "
                         "cuda, custom on cpu")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rows", type=int, default=None, help="sequences per batch (default 64 on cuda, 8 on cpu)")
    ap.add_argument("--micro-batch", type=int, default=4, help="rows per micro-batch without --max-tokens")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="dynamic batch size: tokens per micro-batch (default 16384 on cuda; 0 = fixed rows)")
    ap.add_argument("--prompt-len", type=parse_range, default=None, help="min,max prompt tokens")
    ap.add_argument("--response-len", type=parse_range, default=None, help="min,max response tokens")
    ap.add_argument("--response-median", type=int, default=None,
                    help="log-normal response lengths around this median (default 1000 on cuda; none: uniform)")
    ap.add_argument("--phases", type=lambda s: s.split(","), default=list(engine_phases.PHASES))
    ap.add_argument("--activation-checkpointing", type=int, choices=(0, 1), default=None,
                    help="enable_gradient_checkpointing for both (default 1 on cuda, as verl's default; 0 on cpu)")
    ap.add_argument("--recompute-policy", choices=("layer", "mlp"), default="layer",
                    help="what enginery recomputes under activation checkpointing (its engine config's "
                         "gradient_checkpointing_policy: whole layers, as verl's engine, or the MLP block only)")
    ap.add_argument("--verl-options", type=parse_options, default=None,
                    help=f"verl's speed options, e.g. use_liger=1,use_torch_compile=1 (allowed: "
                         f"{', '.join(VERL_OPTIONS)}; default: all on cuda, none on cpu)")
    ap.add_argument("--old-logprob-noise", type=float, default=0.1,
                    help="PPO: sd of the Gaussian noise added to the old log-probs (0: ratio 1 at the first step)")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--steps", type=int, default=None, help="timed calls per phase (default 2 on cuda, 6 on cpu)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=None,
                    help="processes per engine and dtype, alternating the engines (default 1 on cuda, 2 on cpu)")
    ap.add_argument("--quiet-wait", type=float, default=0,
                    help="before each process, wait up to this many seconds for other processes to leave the cores")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads in each process (0: torch's)")
    ap.add_argument("--dtypes", type=lambda s: s.split(","), default=None,
                    help="compute dtypes, fp32 and/or bf16 (default bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--engines", type=lambda s: s.split(","), default=["verl", "enginery"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", help="directory for the model, the data and the results (default: a temporary one)")
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument("--json", help="also write every process's raw result (one JSON object per line) here")
    ap.add_argument("--profile", help="after each phase's timed calls, one more call under torch.profiler; its "
                                      "summary (GPU busy/idle, kernel time by class and op) and gzipped trace go "
                                      "to this directory (engine_phases.profile_phase)")
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=4, metavar=("ENGINE", "DTYPE", "WORK", "TAG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.profile:
        args.profile = os.path.abspath(args.profile)
    cuda = args.device == "cuda"
    defaults = dict(model="1.5B" if cuda else "custom", rows=64 if cuda else 8, max_tokens=16384 if cuda else 0,
                    prompt_len=(64, 512) if cuda else (16, 64), response_len=(16, 3072) if cuda else (32, 160),
                    response_median=1000 if cuda else None, activation_checkpointing=int(cuda),
                    verl_options={k: True for k in VERL_OPTIONS} if cuda else {}, steps=2 if cuda else 6,
                    rounds=1 if cuda else 2, dtypes=["bf16"] if cuda else ["fp32"])
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.activation_checkpointing = bool(args.activation_checkpointing)
    if args.recompute_policy != "layer" and not args.activation_checkpointing:
        ap.error(f"--recompute-policy {args.recompute_policy} chooses what checkpointing recomputes: add "
                 f"--activation-checkpointing 1 (checkpointing is off by default on cpu)")
    args.batches = args.warmup + args.steps
    for e in args.engines:
        if e not in engine_phases.BACKENDS:
            ap.error(f"--engines: {e} (allowed: {', '.join(engine_phases.BACKENDS)})")
    for d in args.dtypes:
        if d not in ("fp32", "bf16"):
            ap.error(f"--dtypes: {d} (allowed: fp32, bf16)")
    for p in args.phases:
        if p not in engine_phases.PHASES:
            ap.error(f"--phases: {p} (allowed: {', '.join(engine_phases.PHASES)})")
    return args


def child_argv():
    """The parent's arguments for a child, less those the parent sets per child."""
    out, skip = [], 0
    for a in sys.argv[1:]:
        if skip:
            skip -= 1
        elif a in ("--verl-options", "--port"):
            skip = 1
        elif a.startswith(("--verl-options=", "--port=")):
            continue
        else:
            out.append(a)
    return out


def main():
    args = parse_args()
    if args.child:
        return engine_phases.main(args)
    from importlib.metadata import version

    import torch
    import transformers
    total = time.perf_counter()
    tmp = None
    work = args.work
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_verl_engines_")
        work = tmp.name
    os.makedirs(work, exist_ok=True)
    params = verl_inputs.prepare(work, args)
    versions = f"torch {torch.__version__}, verl {version('verl')}, transformers {transformers.__version__}"
    argv = child_argv()
    results = []
    for dtype in args.dtypes:
        for k in range(args.rounds):
            for engine in args.engines:
                tag = f"{engine}-{dtype}-r{k + 1}"
                log(f"{LABELS[engine]}, {dtype}, round {k + 1}/{args.rounds}: a process of its own")
                busy = wait_for_quiet(args.quiet_wait) if args.device == "cpu" else 0.0
                if engine == "verl":
                    r = run_verl(argv, dtype, work, tag, args.verl_options)
                else:
                    r, error = run_child(argv, engine, dtype, work, tag, {})
                    if r is None:
                        log(error)
                        raise SystemExit(f"{tag}: the engine's process failed; its output above")
                r["busy_cores_before"] = busy
                results.append(r)
    text = table(results, args, params, versions, work)
    log("")
    log(text)
    command = " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), os.getcwd())] + sys.argv[1:])
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# verl's FSDP engine vs enginery through verl's EngineRegistry, per phase of an RL step\n\n"
                    f"`{command}` ({time.strftime('%Y-%m-%d %H:%M')})\n\n{text}\n")
        log(f"\ntable written to {args.out}")
    if args.json:
        with open(args.json, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    log(f"total {time.perf_counter() - total:.0f} s")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
