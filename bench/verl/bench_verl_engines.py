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
no-padding layout of verl's SFT collator), same dtype, same optimizer config. Each (engine, dtype) runs in a
process of its own, one after the other (the two cores are not shared), a one-rank Gloo group initialized by this
script; peak memory is that process's peak RSS (getrusage ru_maxrss), also shown above its RSS just before the
engine is built (imports, the batches and the Gloo group are in that baseline, the same for both engines: `import
verl` loads enginery's plugin in both processes).

verl has no CPU platform: each process installs the one of tests/verl/verl_cpu.py and registers verl's FSDP
engine under device "cpu" before verl's engine modules are imported (verl's plugin entry points, which import
them, are loaded right after, by the same loop verl runs at import), so every module of verl sees the "cpu"
platform.

    PYTHONPATH=build/python .venv/bin/python bench/verl/bench_verl_engines.py --out table.md

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
    masking) and the old log-probs of the responses under the initial weights (transformers, fp32), so the
    importance ratio starts at 1 and the clip range matters only as the weights move."""
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
        with torch.no_grad():
            for step in steps:
                step["old_log_probs"] = [token_log_probs(model, p + r)[len(p) - 1:]
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
    """verl's PPO actor batch: left-padded prompts, right-padded responses, DataProto -> to_tensordict ->
    left_right_2_no_padding, and the non-tensor entries verl's actor worker sets."""
    import torch
    from verl.protocol import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding
    prompts_list, responses_list = step["prompts"], step["responses"]
    rows, p_len, r_len = len(prompts_list), max(map(len, prompts_list)), max(map(len, responses_list))
    prompts = torch.zeros(rows, p_len, dtype=torch.long)
    responses = torch.zeros(rows, r_len, dtype=torch.long)
    attention = torch.zeros(rows, p_len + r_len, dtype=torch.long)
    response_mask = torch.zeros(rows, r_len)
    old = torch.zeros(rows, r_len)
    for i, (p, r) in enumerate(zip(prompts_list, responses_list)):
        prompts[i, p_len - len(p):] = torch.tensor(p)
        responses[i, :len(r)] = torch.tensor(r)
        attention[i, p_len - len(p): p_len + len(r)] = 1
        response_mask[i, :len(r)] = 1
        old[i, :len(r)] = step["old_log_probs"][i]
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    advantages = torch.tensor(step["advantages"]).unsqueeze(-1) * response_mask
    batch = DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], -1),
        "attention_mask": attention, "position_ids": position_ids, "response_mask": response_mask,
        "old_log_probs": old, "advantages": advantages})
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(data, temperature=1.0, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch,
                         calculate_entropy=False, global_batch_size=rows, pad_mode="no_padding")
    return data


def sft_batch(step, micro_batch):
    """verl's SFT batch (its no-padding collator's layout): nested input_ids, position_ids and a loss mask aligned
    with input_ids, 1 on the response tokens."""
    import torch
    from verl.utils import tensordict_utils as tu
    ids = [torch.tensor(p + r) for p, r in zip(step["prompts"], step["responses"])]
    masks = [torch.tensor([0.0] * len(p) + [1.0] * len(r)) for p, r in zip(step["prompts"], step["responses"])]
    nested = lambda rows: torch.nested.as_nested_tensor(rows, layout=torch.jagged)  # noqa: E731
    return tu.get_tensordict({"input_ids": nested(ids), "position_ids": nested([torch.arange(len(t)) for t in ids]),
                              "loss_mask": nested(masks)},
                             {"temperature": 1.0, "use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro_batch,
                              "pad_mode": "no_padding", "calculate_entropy": False})


def import_verl_on_cpu():
    """verl with the CPU platform of tests/verl/verl_cpu.py installed before any of verl's engine modules is
    imported: verl's plugin entry points (enginery's among them) import those modules, so `import verl` runs with
    them held back, the platform goes in, then they are loaded by the loop verl itself runs at import."""
    os.environ["VERL_ENGINE_DEVICE"] = "cpu"
    held = os.environ.get("VERL_USE_EXTERNAL_PLUGINS")
    os.environ["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    sys.path.insert(0, os.path.join(ROOT, "tests", "verl"))
    import verl  # noqa: F401
    import verl_cpu
    verl_cpu.use_cpu_platform()
    if held is None:
        del os.environ["VERL_USE_EXTERNAL_PLUGINS"]
    else:
        os.environ["VERL_USE_EXTERNAL_PLUGINS"] = held
    verl_cpu.register_verl_fsdp_on_cpu()
    from importlib.metadata import entry_points
    for entry in entry_points(group="verl.plugins"):
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

    engine_name, dtype, work = args.child
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
    rss_before = rss_kib()
    log(f"  [{engine_name} {dtype}] imports and batches {time.perf_counter() - start:.1f} s, "
        f"RSS {rss_before / 2**20:.3f} GiB; building the engine")

    t0 = time.perf_counter()
    engine = EngineRegistry.new(model_type="language_model", backend=backend, model_config=model_config,
                                engine_config=engine_config, optimizer_config=optimizer_config,
                                checkpoint_config=CheckpointConfig())
    engine.initialize()
    init_s = time.perf_counter() - t0
    rss_init = rss_kib()
    log(f"  [{engine_name} {dtype}] {type(engine).__name__} initialized in {init_s:.1f} s, "
        f"RSS {rss_init / 2**20:.3f} GiB")

    times, losses, grad_norms = [], [], []
    for i, batch in enumerate(batches):
        with engine.train_mode():
            t = time.perf_counter()
            out = engine.train_batch(batch, loss_fn)
            times.append(time.perf_counter() - t)
        engine.lr_scheduler_step()
        losses.append(float(sum(out["loss"])))
        grad_norms.append(float(out["metrics"]["grad_norm"]))
        what = "warm-up" if i < args.warmup else "timed"
        log(f"  [{engine_name} {dtype}] step {i + 1}/{len(batches)} ({what}): {times[-1]:.3f} s, "
            f"loss {losses[-1]:.6f}, grad norm {grad_norms[-1]:.6f}, micro-batch losses {len(out['loss'])}")
    timed = times[args.warmup:]
    result = {
        "engine": engine_name, "backend": backend, "dtype": dtype, "engine_class": type(engine).__name__,
        "step_s": times, "timed_s": timed, "median_s": statistics.median(timed), "min_s": min(timed),
        "max_s": max(timed), "tokens": tokens, "timed_tokens": sum(tokens[args.warmup:]),
        "loss": losses, "grad_norm": grad_norms, "init_s": init_s,
        "rss_before_engine_kib": rss_before, "rss_after_init_kib": rss_init,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vm_hwm_kib": rss_kib("VmHWM"),
        "threads": torch.get_num_threads()}
    with open(os.path.join(work, f"result-{engine_name}-{dtype}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------
# The parent: inputs, one process per (engine, dtype), the table.
# --------------------------------------------------------------------------------------------------------------
def run_child(argv, engine, dtype, work):
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--child", engine, dtype, work]
    env = dict(os.environ)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    tail = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        tail = (tail + [line])[-60:]
        if line.startswith("  ["):
            log(line)
    if proc.wait() != 0:
        log("\n".join(tail))
        raise SystemExit(f"{engine} {dtype}: the engine's process failed (exit {proc.returncode}); its output above")
    with open(os.path.join(work, f"result-{engine}-{dtype}.json")) as f:
        return json.load(f)


def gib(kib):
    return kib / 2**20


def table(results, args, params, versions):
    lines = []
    add = lines.append
    first = results[0]
    n_tok = first["tokens"]
    add(f"Qwen2 {params / 1e6:.1f}M parameters (hidden {args.hidden}, {args.layers} layers, intermediate "
        f"{args.intermediate}, {args.heads} heads / {args.kv_heads} kv, vocab {args.vocab}), random init, seed "
        f"{args.seed}; {args.loss} loss; {args.rows} sequences per step (prompts {args.prompt_len[0]}-"
        f"{args.prompt_len[1]}, responses {args.response_len[0]}-{args.response_len[1]} tokens; "
        f"{min(n_tok)}-{max(n_tok)} tokens per step, no padding), micro-batch {args.micro_batch} rows; "
        f"AdamW lr {args.lr}, clip 1.0; {args.warmup} warm-up + {args.steps} timed steps; one Gloo rank, "
        f"{first['threads']} torch threads; {versions}.")
    add("")
    add("| dtype | engine | step s (median) | min - max | tokens/s | peak RSS GiB | peak - RSS before build GiB | "
        "init s | loss step 1 | loss step " + str(len(first["loss"])) + " | grad norm step 1 |")
    add("|---|---|---|---|---|---|---|---|---|---|---|")
    by = {(r["engine"], r["dtype"]): r for r in results}
    for dtype in args.dtypes:
        pair = [by.get((e, dtype)) for e in args.engines]
        for r in pair:
            if r is None:
                continue
            tps = r["timed_tokens"] / sum(r["timed_s"])
            add(f"| {dtype} | {LABELS[r['engine']]} | {r['median_s']:.3f} | {r['min_s']:.3f} - {r['max_s']:.3f} | "
                f"{tps:.0f} | {gib(r['peak_rss_kib']):.3f} | {gib(r['peak_rss_kib'] - r['rss_before_engine_kib']):.3f} "
                f"| {r['init_s']:.1f} | {r['loss'][0]:.6f} | {r['loss'][-1]:.6f} | {r['grad_norm'][0]:.6f} |")
        v, e = by.get(("verl", dtype)), by.get(("enginery", dtype))
        if v and e:
            inc = lambda r: r["peak_rss_kib"] - r["rss_before_engine_kib"]  # noqa: E731
            add(f"| {dtype} | **enginery / verl** | **{e['median_s'] / v['median_s']:.2f}x** | | "
                f"{(e['timed_tokens'] / sum(e['timed_s'])) / (v['timed_tokens'] / sum(v['timed_s'])):.2f}x | "
                f"{e['peak_rss_kib'] / v['peak_rss_kib']:.2f}x | {inc(e) / inc(v):.2f}x | "
                f"{e['init_s'] / v['init_s']:.2f}x | | | |")
    add("")
    for dtype in args.dtypes:
        v, e = by.get(("verl", dtype)), by.get(("enginery", dtype))
        if v and e:
            d = [abs(a - b) for a, b in zip(e["loss"], v["loss"])]
            g = abs(e["grad_norm"][0] - v["grad_norm"][0])
            add(f"{dtype}: |loss enginery - loss verl| step 1 {d[0]:.2e} (relative {d[0] / abs(v['loss'][0]):.2e}), "
                f"largest over the {len(d)} steps {max(d):.2e}; grad norm step 1 differs by {g:.2e} "
                f"(relative {g / v['grad_norm'][0]:.2e}).")
            add(f"{dtype} losses per step, verl: {', '.join(f'{x:.6f}' for x in v['loss'])}")
            add(f"{dtype} losses per step, enginery: {', '.join(f'{x:.6f}' for x in e['loss'])}")
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
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=6, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--dtypes", type=lambda s: s.split(","), default=["fp32"], help="fp32 and/or bf16, e.g. fp32,bf16")
    ap.add_argument("--engines", type=lambda s: s.split(","), default=["verl", "enginery"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", help="directory for the model, the data and the results (default: a temporary one)")
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument("--json", help="also write the raw results (one JSON object per line) here")
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "DTYPE", "WORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    for e in args.engines:
        if e not in BACKENDS:
            ap.error(f"--engines: {e} (allowed: {', '.join(BACKENDS)})")
    for d in args.dtypes:
        if d not in ("fp32", "bf16"):
            ap.error(f"--dtypes: {d} (allowed: fp32, bf16)")

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
    from importlib.metadata import version
    versions = f"torch {torch.__version__}, verl {version('verl')}, transformers {transformers.__version__}"
    child_argv = [a for a in sys.argv[1:]]
    results = []
    for dtype in args.dtypes:
        for engine in args.engines:
            log(f"{LABELS[engine]}, {dtype}: own process")
            results.append(run_child(child_argv, engine, dtype, work))
            r = results[-1]
            log(f"  -> median step {r['median_s']:.3f} s, peak RSS {gib(r['peak_rss_kib']):.3f} GiB, "
                f"loss {r['loss'][0]:.6f} .. {r['loss'][-1]:.6f}")
    text = table(results, args, params, versions)
    log("")
    log(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# verl's FSDP engine vs enginery through verl's EngineRegistry (CPU)\n\n"
                    f"Command: `{' '.join([os.path.relpath(sys.argv[0])] + sys.argv[1:])}`\n\n{text}\n")
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
