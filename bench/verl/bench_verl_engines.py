#!/usr/bin/env python3
"""verl's own FSDP engine (backend fsdp2) against enginery (backend enginery_fsdp2), both built and driven through
verl's EngineRegistry exactly as verl's TrainingWorker drives an engine, on the CPU (issue 32, item 9):

    EngineRegistry.new(model_type="language_model", backend=..., model_config=HFModelConfig(...),
                       engine_config=..., optimizer_config=FSDPOptimizerConfig(...), checkpoint_config=...)
    engine.initialize()
    with engine.train_mode():
        engine.train_batch(batch, partial(ppo_loss, ActorConfig(...)))      # or partial(sft_loss, config=None)
    engine.lr_scheduler_step()

Same weights (one HF directory written by transformers from a fixed seed), same batches (PPO: DataProto ->
to_tensordict -> verl.workers.utils.padding.left_right_2_no_padding, as verl's trainer builds them; SFT: the
no-padding layout of verl's SFT collator), same dtype, same optimizer config. Each (engine, dtype, round) runs in
a process of its own, one after the other (they do not share the cores), the engines alternating round by round,
each process a one-rank Gloo group initialized by this script; peak memory is that process's peak RSS (getrusage ru_maxrss), also shown above its RSS just before the
engine is built (imports, the batches and the Gloo group are in that baseline, the same for both engines: `import
verl` loads enginery's plugin in both processes).

verl has no CPU platform: each process installs the one of tests/verl/verl_cpu.py and registers verl's FSDP
engine under device "cpu" before verl's engine modules are imported (verl's plugin entry points, which import
them, are loaded right after, by the same loop verl runs at import), so every module of verl sees the "cpu"
platform.

    PYTHONPATH=build/python .venv/bin/python bench/verl/bench_verl_engines.py --threads 1 --dtypes fp32,bf16 \
        --quiet-wait 60 --out table.md

Not a test: step times depend on the machine and its load. See bench/verl/README.md.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKENDS = {"verl": "fsdp2", "enginery": "enginery_fsdp2"}
LABELS = {"verl": "verl FSDPEngine (fsdp2)", "enginery": "enginery (enginery_fsdp2)"}


def log(*args):
    print(*args, flush=True)


# --------------------------------------------------------------------------------------------------------------
# Inputs: the HF directory and the token data of every step, written once by the parent process.
# --------------------------------------------------------------------------------------------------------------
def write_model(path, args):
    import torch
    import transformers
    config = transformers.Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(1024, args.prompt_len[1] + args.response_len[1]), tie_word_embeddings=False)
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def token_log_probs(model, ids):
    """log p(ids[t + 1] | ids[:t + 1]) for t = 0 .. n-2 of one unpadded sequence."""
    import torch
    logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)


def write_data(path, model_dir, args):
    """Per step: prompts, responses (token lists) and, for PPO, advantages (one per sequence, token-level after
    masking) and old log-probs: the responses' log-probs under the initial weights (transformers, fp32) plus
    Gaussian noise (--old-logprob-noise), standing in for a rollout engine's log-probs. Without the noise the
    importance ratio of the first step would be 1 and its loss -mean(advantage) whatever the engine computed; with
    it the first loss depends on the engine's log-probs, and the clip range cuts some tokens."""
    import random

    import torch
    import transformers
    rng = random.Random(args.seed)
    steps = []
    for _ in range(args.warmup + args.steps):
        prompts = [[rng.randrange(1, args.vocab) for _ in range(rng.randint(*args.prompt_len))]
                   for _ in range(args.rows)]
        responses = [[rng.randrange(1, args.vocab) for _ in range(rng.randint(*args.response_len))]
                     for _ in range(args.rows)]
        steps.append({"prompts": prompts, "responses": responses,
                      "advantages": [rng.gauss(0.0, 1.0) for _ in range(args.rows)]})
    if args.loss == "ppo":
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                                  attn_implementation="sdpa")
        model.eval()
        noise = torch.Generator().manual_seed(args.seed)
        with torch.no_grad():
            for step in steps:
                step["old_log_probs"] = [
                    token_log_probs(model, p + r)[len(p) - 1:] + args.old_logprob_noise * torch.randn(len(r),
                                                                                                      generator=noise)
                    for p, r in zip(step["prompts"], step["responses"])]
    torch.save(steps, path)


# --------------------------------------------------------------------------------------------------------------
# One engine in its own process.
# --------------------------------------------------------------------------------------------------------------
def rss_kib(field="VmRSS"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def ppo_batch(step, micro_batch):
    """verl's PPO actor batch of one step (tests/verl/verl_batches.py)."""
    import verl_batches
    return verl_batches.ppo_batch(step["prompts"], step["responses"], step["old_log_probs"], step["advantages"],
                                  micro_batch)


def sft_batch(step, micro_batch):
    """verl's SFT batch of one step (tests/verl/verl_batches.py)."""
    import verl_batches
    return verl_batches.sft_batch(step["prompts"], step["responses"], micro_batch)


def import_verl_on_cpu():
    """verl with the CPU platform of tests/verl/verl_cpu.py installed before any of verl's engine modules is
    imported: verl's plugin entry points (enginery's among them) import those modules, so `import verl` runs with
    them held back, the platform goes in, then they are loaded by the loop verl itself runs at import."""
    os.environ["VERL_ENGINE_DEVICE"] = "cpu"
    policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    os.environ["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    sys.path.insert(0, os.path.join(ROOT, "tests", "verl"))
    import verl  # noqa: F401
    import verl_cpu
    verl_cpu.use_cpu_platform()
    verl_cpu.register_verl_fsdp_on_cpu()
    os.environ["VERL_USE_EXTERNAL_PLUGINS"] = policy
    from importlib.metadata import entry_points
    wanted = None if policy == "auto" else set() if policy == "none" else {n.strip() for n in policy.split(",")}
    for entry in entry_points(group="verl.plugins"):
        if wanted is None or entry.name in wanted:
            entry.load()
    import verl.workers.engine.fsdp.transformer_impl as verl_fsdp
    assert verl_fsdp.device_name == "cpu", verl_fsdp.device_name


def child(args):
    import warnings
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    import_verl_on_cpu()
    from functools import partial

    import torch
    import torch.distributed as dist
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import ActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.utils.losses import ppo_loss, sft_loss

    from enginery.verl.engine_config import EngineryEngineConfig

    engine_name, dtype, work, tag = args.child
    if args.threads:
        torch.set_num_threads(args.threads)
    backend = BACKENDS[engine_name]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)

    steps = torch.load(os.path.join(work, "data.pt"))
    make = ppo_batch if args.loss == "ppo" else sft_batch
    batches = [make(step, args.micro_batch) for step in steps]
    tokens = [sum(len(p) + len(r) for p, r in zip(s["prompts"], s["responses"])) for s in steps]
    if args.loss == "ppo":
        loss_fn = partial(ppo_loss, ActorConfig(strategy=backend, rollout_n=1,
                                                ppo_micro_batch_size_per_gpu=args.micro_batch))
    else:
        loss_fn = partial(sft_loss, config=None)

    # The same precision for both: fp32 master weights (model_dtype), compute in `dtype`, fp32 reductions.
    mixed = {"param_dtype": dtype, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    if engine_name == "verl":
        engine_config = FSDPEngineConfig(strategy="fsdp2", use_torch_compile=False, mixed_precision=mixed,
                                         model_dtype="fp32")
    else:
        engine_config = EngineryEngineConfig(strategy="enginery_fsdp2", mixed_precision=mixed, model_dtype="fp32")
    model_config = HFModelConfig(path=os.path.join(work, "model"), load_tokenizer=False,
                                 override_config={"attn_implementation": "sdpa"},
                                 enable_gradient_checkpointing=False)
    optimizer_config = FSDPOptimizerConfig(lr=args.lr, weight_decay=0.01, clip_grad=1.0,
                                           total_training_steps=len(batches))
    name = f"[{engine_name} {dtype} {tag}]"
    rss_before = rss_kib()
    log(f"  {name} imports, Gloo group and batches {time.perf_counter() - start:.1f} s, RSS "
        f"{rss_before / 2**20:.3f} GiB; building the engine")

    t0 = time.perf_counter()
    engine = EngineRegistry.new(model_type="language_model", backend=backend, model_config=model_config,
                                engine_config=engine_config, optimizer_config=optimizer_config,
                                checkpoint_config=CheckpointConfig())
    engine.initialize()
    init_s = time.perf_counter() - t0
    rss_init = rss_kib()
    log(f"  {name} {type(engine).__name__} initialized in {init_s:.1f} s, RSS {rss_init / 2**20:.3f} GiB")

    times, cpu, losses, grad_norms, loads = [], [], [], [], []
    for i, batch in enumerate(batches):
        loads.append(os.getloadavg()[0])
        with engine.train_mode():  # as verl's TrainingWorker: one train_mode() per train_batch
            t, c = time.perf_counter(), time.process_time()
            out = engine.train_batch(batch, loss_fn)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        engine.lr_scheduler_step()
        losses.append(float(sum(out["loss"])))  # one loss per micro-batch, each its share of the batch's
        grad_norms.append(float(out["metrics"]["grad_norm"]))
        what = "warm-up" if i < args.warmup else "timed"
        log(f"  {name} step {i + 1}/{len(batches)} ({what}): {times[-1]:.3f} s (CPU {cpu[-1]:.2f} s), loss "
            f"{losses[-1]:.6f}, grad norm {grad_norms[-1]:.6f}")
    result = {
        "engine": engine_name, "backend": backend, "dtype": dtype, "tag": tag, "engine_class": type(engine).__name__,
        "step_s": times, "cpu_s": cpu, "loadavg_1min": loads, "warmup": args.warmup, "tokens": tokens,
        "loss": losses, "grad_norm": grad_norms, "init_s": init_s,
        "rss_before_engine_kib": rss_before, "rss_after_init_kib": rss_init,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vm_hwm_kib": rss_kib("VmHWM"),
        "threads": torch.get_num_threads()}
    with open(os.path.join(work, f"result-{engine_name}-{dtype}-{tag}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------
# The parent: inputs, one process per (engine, dtype, round), the table.
# --------------------------------------------------------------------------------------------------------------
def run_child(argv, engine, dtype, work, tag):
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--child", engine, dtype, work, tag]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        tail = (tail + [line])[-60:]
        if line.startswith("  ["):
            log(line)
    if proc.wait() != 0:
        log("\n".join(tail))
        raise SystemExit(f"{engine} {dtype} {tag}: the engine's process failed (exit {proc.returncode}); its "
                         f"output above")
    with open(os.path.join(work, f"result-{engine}-{dtype}-{tag}.json")) as f:
        return json.load(f)


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
    """Waits up to limit_s for another process's load on the machine to fall under `threshold` cores; returns the
    busy cores seen last."""
    deadline = time.monotonic() + limit_s
    busy = busy_cores()
    if busy > threshold and limit_s > 0:
        log(f"  waiting up to {limit_s:.0f} s for the machine to go quiet ({busy:.1f} cores busy elsewhere)")
        while busy > threshold and time.monotonic() < deadline:
            busy = busy_cores(2.0)
        log(f"  {busy:.1f} cores busy elsewhere; starting")
    return busy


def gib(kib):
    return kib / 2**20


def summary(runs):
    """One engine at one dtype over its rounds: timed steps pooled; memory: the largest peak of its processes."""
    timed = [t for r in runs for t in r["step_s"][r["warmup"]:]]
    cpu = [t for r in runs for t in r["cpu_s"][r["warmup"]:]]
    tokens = sum(sum(r["tokens"][r["warmup"]:]) for r in runs)
    first = runs[0]
    return {
        "median_s": statistics.median(timed), "min_s": min(timed), "max_s": max(timed),
        "round_medians": [statistics.median(r["step_s"][r["warmup"]:]) for r in runs],
        "cpu_median_s": statistics.median(cpu), "tokens_per_s": tokens / sum(timed),
        "peak_rss_kib": max(r["peak_rss_kib"] for r in runs),
        "engine_rss_kib": max(r["peak_rss_kib"] - r["rss_before_engine_kib"] for r in runs),
        "init_s": statistics.median(r["init_s"] for r in runs),
        "loss": first["loss"], "grad_norm": first["grad_norm"],
        "same_losses_every_round": all(r["loss"] == first["loss"] for r in runs),
        "load": [x for r in runs for x in r["loadavg_1min"][r["warmup"]:]],
        "busy_before": [r.get("busy_cores_before", 0.0) for r in runs],
    }


def table(results, args, params, versions):
    lines = []
    add = lines.append
    first = results[0]
    n_tok = first["tokens"]
    n_steps = len(first["loss"])
    ppo_note = (f" (old log-probs: the initial weights' plus noise of sd {args.old_logprob_noise})"
                if args.loss == "ppo" else "")
    add(f"Qwen2 {params / 1e6:.1f}M parameters (hidden {args.hidden}, {args.layers} layers, intermediate "
        f"{args.intermediate}, {args.heads} heads / {args.kv_heads} kv heads, vocab {args.vocab}, untied), random "
        f"init (seed {args.seed}); verl's {args.loss}_loss{ppo_note}; {args.rows} sequences per step (prompts "
        f"{args.prompt_len[0]}-{args.prompt_len[1]}, responses {args.response_len[0]}-{args.response_len[1]} tokens: "
        f"{min(n_tok)}-{max(n_tok)} tokens per step, no padding), {args.micro_batch} rows per micro-batch; "
        f"AdamW lr {args.lr}, weight decay 0.01, clip 1.0; {args.warmup} warm-up + {args.steps} timed steps per "
        f"process, {args.rounds} round(s) per engine alternating verl, enginery; one Gloo rank, "
        f"{first['threads']} torch threads; {versions}.")
    add("")
    add(f"| dtype | engine | step s, median | min - max | per-round medians | CPU s / step | tokens/s | "
        f"peak RSS GiB | peak - RSS before build GiB | init s | loss step 1 | loss step {n_steps} | "
        f"grad norm step 1 |")
    add("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    summaries = {}
    for dtype in args.dtypes:
        for engine in args.engines:
            runs = [r for r in results if r["engine"] == engine and r["dtype"] == dtype]
            if not runs:
                continue
            s = summaries[(engine, dtype)] = summary(runs)
            add(f"| {dtype} | {LABELS[engine]} | {s['median_s']:.3f} | {s['min_s']:.3f} - {s['max_s']:.3f} | "
                f"{', '.join(f'{m:.3f}' for m in s['round_medians'])} | {s['cpu_median_s']:.2f} | "
                f"{s['tokens_per_s']:.0f} | {gib(s['peak_rss_kib']):.3f} | {gib(s['engine_rss_kib']):.3f} | "
                f"{s['init_s']:.1f} | {s['loss'][0]:.6f} | {s['loss'][-1]:.6f} | {s['grad_norm'][0]:.6f} |")
        v, e = summaries.get(("verl", dtype)), summaries.get(("enginery", dtype))
        if v and e:
            add(f"| {dtype} | **enginery / verl** | **{e['median_s'] / v['median_s']:.2f}x** | | | "
                f"{e['cpu_median_s'] / v['cpu_median_s']:.2f}x | {e['tokens_per_s'] / v['tokens_per_s']:.2f}x | "
                f"{e['peak_rss_kib'] / v['peak_rss_kib']:.2f}x | {e['engine_rss_kib'] / v['engine_rss_kib']:.2f}x | "
                f"{e['init_s'] / v['init_s']:.2f}x | | | |")
    add("")
    for dtype in args.dtypes:
        v, e = summaries.get(("verl", dtype)), summaries.get(("enginery", dtype))
        if v and e:
            d = [abs(a - b) for a, b in zip(e["loss"], v["loss"])]
            g = abs(e["grad_norm"][0] - v["grad_norm"][0])
            add(f"- {dtype}: loss step 1 differs by {d[0]:.2e} (relative {d[0] / abs(v['loss'][0]):.2e}), at most "
                f"{max(d):.2e} over the {len(d)} steps; grad norm step 1 by {g:.2e} (relative "
                f"{g / v['grad_norm'][0]:.2e}). Losses per step, verl: "
                f"{', '.join(f'{x:.6f}' for x in v['loss'])}; enginery: {', '.join(f'{x:.6f}' for x in e['loss'])}.")
    loads = [x for s in summaries.values() for x in s["load"]]
    repeat = [f"{LABELS[k[0]]} {k[1]}" for k, s in summaries.items() if not s["same_losses_every_round"]]
    busy = [x for s in summaries.values() for x in s["busy_before"]]
    add(f"- Load average (1 min) at the timed steps: {min(loads):.2f} - {max(loads):.2f} on {os.cpu_count()} "
        f"cores (this benchmark's own process included); other processes kept {min(busy):.1f} - {max(busy):.1f} "
        f"cores busy in the second before each engine's process started." + (f" Losses differed between rounds for: {', '.join(repeat)}." if repeat else
                     " Every round of an engine gave the same losses, bit for bit."))
    return "\n".join(lines)


def parse_range(text):
    lo, hi = (int(x) for x in text.split(","))
    return lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rows", type=int, default=8, help="sequences per step")
    ap.add_argument("--micro-batch", type=int, default=4, help="rows per micro-batch (micro_batch_size_per_gpu)")
    ap.add_argument("--prompt-len", type=parse_range, default=(16, 64), help="min,max prompt tokens")
    ap.add_argument("--response-len", type=parse_range, default=(32, 160), help="min,max response tokens")
    ap.add_argument("--loss", choices=("ppo", "sft"), default="ppo")
    ap.add_argument("--old-logprob-noise", type=float, default=0.1,
                    help="PPO: sd of the Gaussian noise added to the old log-probs (0: ratio 1 at the first step)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per process")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2,
                    help="processes per engine and dtype, alternating the engines (a shared machine's load moves)")
    ap.add_argument("--quiet-wait", type=float, default=0,
                    help="before each process, wait up to this many seconds for other processes to leave the cores")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads in each process (0: torch's)")
    ap.add_argument("--dtypes", type=lambda s: s.split(","), default=["fp32"],
                    help="compute dtypes, fp32 and/or bf16, e.g. fp32,bf16")
    ap.add_argument("--engines", type=lambda s: s.split(","), default=["verl", "enginery"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", help="directory for the model, the data and the results (default: a temporary one)")
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument("--json", help="also write every process's raw result (one JSON object per line) here")
    ap.add_argument("--child", nargs=4, metavar=("ENGINE", "DTYPE", "WORK", "TAG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    for e in args.engines:
        if e not in BACKENDS:
            ap.error(f"--engines: {e} (allowed: {', '.join(BACKENDS)})")
    for d in args.dtypes:
        if d not in ("fp32", "bf16"):
            ap.error(f"--dtypes: {d} (allowed: fp32, bf16)")

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
    log(f"writing the model and {args.warmup + args.steps} batches to {work}")
    params = write_model(os.path.join(work, "model"), args)
    write_data(os.path.join(work, "data.pt"), os.path.join(work, "model"), args)
    versions = f"torch {torch.__version__}, verl {version('verl')}, transformers {transformers.__version__}"
    child_argv = [a for a in sys.argv[1:]]
    results = []
    for dtype in args.dtypes:
        for k in range(args.rounds):
            for engine in args.engines:
                log(f"{LABELS[engine]}, {dtype}, round {k + 1}/{args.rounds}: a process of its own")
                busy = wait_for_quiet(args.quiet_wait)
                r = run_child(child_argv, engine, dtype, work, f"r{k + 1}")
                r["busy_cores_before"] = busy
                results.append(r)
                timed = r["step_s"][args.warmup:]
                log(f"  -> median step {statistics.median(timed):.3f} s, peak RSS {gib(r['peak_rss_kib']):.3f} "
                    f"GiB, loss {r['loss'][0]:.6f} .. {r['loss'][-1]:.6f}")
    text = table(results, args, params, versions)
    log("")
    log(text)
    command = " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), os.getcwd())] + sys.argv[1:])
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# verl's FSDP engine vs enginery through verl's EngineRegistry (CPU)\n\n"
                    f"`{command}` ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)\n\n{text}\n")
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
