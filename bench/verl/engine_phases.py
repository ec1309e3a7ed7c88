"""One engine in a process of its own (bench_verl_engines.py starts it): built through verl's EngineRegistry and
driven as verl's TrainingWorker drives it, phase by phase, each phase timed and its peak memory measured; the
result is one JSON file in the work directory.

Phases (in the order given):
- infer:   `with eval_mode(): infer_batch(batch)`, the old/reference log-probs of an RL step;
- entropy: the same with calculate_entropy (the actor's log-probs with entropy);
- ppo:     `with train_mode(): train_batch(batch, ppo_loss)` + lr_scheduler_step(), one optimizer step per batch;
- sft:     the same with sft_loss on the SFT layout of the same sequences;
- export:  the full weights for the rollout engine, `get_per_tensor_param()` consumed as a rollout engine consumes
           it (outside any mode, as verl's weight sync): every tensor materialised on the device in bf16."""
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BACKENDS = {"verl": "fsdp2", "enginery": "enginery_fsdp2"}
PHASES = ("infer", "entropy", "ppo", "sft", "export")


def log(*args):
    print(*args, flush=True)


def import_verl(device):
    """verl, on the CPU with the platform of tests/verl/verl_cpu.py installed before any of verl's engine modules is
    imported: verl's plugin entry points (enginery's among them) import those modules, so `import verl` runs with
    them held back, the platform goes in, then they are loaded by the loop verl itself runs at import."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "verl"))
    if device != "cpu":
        import verl  # noqa: F401
        return
    os.environ["VERL_ENGINE_DEVICE"] = "cpu"
    policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    os.environ["VERL_USE_EXTERNAL_PLUGINS"] = "none"
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


class Memory:
    """Peak memory of a phase: the caching allocator's peak on a GPU (LibTorch inside enginery allocates through
    the same allocator as Python's torch), the process's peak RSS on the CPU (VmHWM, reset through clear_refs)."""

    def __init__(self, device):
        self.cuda = device != "cpu"

    def reset(self):
        import torch
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")

    def now_bytes(self):
        import torch
        return torch.cuda.memory_allocated() if self.cuda else _status_kib("VmRSS") * 1024

    def peak_bytes(self):
        import torch
        return torch.cuda.max_memory_allocated() if self.cuda else _status_kib("VmHWM") * 1024

    def reserved_peak_bytes(self):
        import torch
        return torch.cuda.max_memory_reserved() if self.cuda else 0


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def micro_batching(args):
    """verl's batch metadata for micro-batches: token-budget micro-batches (dynamic bsz) or fixed rows."""
    if args.max_tokens:
        return {"use_dynamic_bsz": True, "max_token_len_per_gpu": args.max_tokens}
    return {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": args.micro_batch}


def build_batch(kind, step, args):
    """A fresh verl batch of one step (an engine may add keys to the one it is handed), on the CPU as verl's
    workers receive it."""
    import verl_batches
    from verl.utils import tensordict_utils as tu
    if kind == "sft":
        batch = verl_batches.sft_batch(step["prompts"], step["responses"], args.micro_batch)
    else:
        batch = verl_batches.ppo_batch(step["prompts"], step["responses"], step["old_log_probs"], step["advantages"],
                                       args.micro_batch)
    tu.assign_non_tensor(batch, calculate_entropy=(kind == "entropy"), **micro_batching(args))
    return batch


def flat(values):
    """A model output (a jagged nested tensor or a plain one) as one float32 CPU vector."""
    return (values.values() if values.is_nested else values).detach().float().reshape(-1).cpu()


def consume_export(engine, device, checksum):
    """The rollout side of a weight sync: every tensor of get_per_tensor_param() materialised on `device` in bf16
    (what a rollout engine loads into its weights). With `checksum`, also each tensor's float64 sum and sum of
    magnitudes (a second pass over the weights: only in the warm-up call)."""
    import torch
    gen, _ = engine.get_per_tensor_param()
    names, numel, sums = [], 0, {}
    for name, tensor in gen:
        t = tensor.to(device=device, dtype=torch.bfloat16, non_blocking=True)
        names.append(name)
        numel += t.numel()
        if checksum:
            sums[name] = torch.stack([t.double().sum(), t.double().abs().sum()])
    return names, numel, {k: v.tolist() for k, v in sums.items()}


def call_phase(phase, engine, batch, loss_fns, device, checksum=False):
    """One call of `phase` as verl's worker makes it; returns what the call returned."""
    if phase in ("infer", "entropy"):
        with engine.eval_mode():
            return engine.infer_batch(batch)
    if phase in ("ppo", "sft"):
        with engine.train_mode():
            out = engine.train_batch(batch, loss_fns[phase])
        engine.lr_scheduler_step()
        return out
    return consume_export(engine, device, checksum)


def run_phase(phase, engine, steps, loss_fns, args, memory, sync, work, tag):
    """Warm-up calls, then timed ones; each call one batch (cycling through the steps' data). With args.profile,
    one more call after them, under the profiler (profile_phase)."""
    import torch
    calls = args.warmup + args.steps
    record = {"warmup": args.warmup, "seconds": [], "tokens": [], "loss": [], "grad_norm": []}
    memory.reset()
    record["memory_at_start"] = memory.now_bytes()
    for i in range(calls):
        step = steps[i % len(steps)]
        tokens = sum(len(p) + len(r) for p, r in zip(step["prompts"], step["responses"]))
        batch = None if phase == "export" else build_batch(phase, step, args)
        sync()
        t0 = time.perf_counter()
        out = call_phase(phase, engine, batch, loss_fns, args.device, checksum=(i == 0))
        sync()
        record["seconds"].append(time.perf_counter() - t0)
        record["tokens"].append(tokens)
        what = "warm-up" if i < args.warmup else "timed"
        extra = ""
        if phase in ("ppo", "sft"):
            record["loss"].append(float(sum(float(x) for x in out["loss"])))
            record["grad_norm"].append(float(out["metrics"]["grad_norm"]))
            extra = f", loss {record['loss'][-1]:.6f}, grad norm {record['grad_norm'][-1]:.4f}"
        elif phase in ("infer", "entropy") and i == 0:
            output = out["model_output"]
            saved = {"log_probs": flat(output["log_probs"])}
            if phase == "entropy":
                saved["entropy"] = flat(output["entropy"])
            torch.save(saved, os.path.join(work, f"{phase}-{tag}.pt"))
            extra = f", mean log-prob {saved['log_probs'].mean():.6f}"
        elif phase == "export" and i == 0:
            names, numel, sums = out
            record.update(names=names, numel=numel, checksum=sums)
            extra = f", {len(names)} tensors, {numel / 1e9:.3f}B values"
        log(f"  [{tag}] {phase} {i + 1}/{calls} ({what}): {record['seconds'][-1]:.3f} s{extra}")
    record["peak_bytes"] = memory.peak_bytes()
    record["reserved_peak_bytes"] = memory.reserved_peak_bytes()
    if args.profile:
        record["profile"] = profile_phase(phase, engine, steps[calls % len(steps)], loss_fns, args, sync, tag,
                                          record)
    return record


def profile_phase(phase, engine, step, loss_fns, args, sync, tag, record):
    """One more call of `phase`, untimed, under torch.profiler (CPU ops + CUDA kernels: enginery's kernels are
    launched by the LibTorch this process loaded, so kineto sees them too). The chrome trace is summarised by
    bench/gpu/profile_summary.py (GPU busy and idle time, kernel time by class, by launching op, top kernels) into
    args.profile/profile-TAG-PHASE.txt, headed by the phase's memory: what was allocated when it began (the
    engine's resident state) and its peak (state + the phase's transient tensors)."""
    import subprocess

    import torch
    from torch.profiler import ProfilerActivity, profile
    os.makedirs(args.profile, exist_ok=True)
    batch = None if phase == "export" else build_batch(phase, step, args)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device != "cpu" else [])
    sync()
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        call_phase(phase, engine, batch, loss_fns, args.device)
        sync()
    wall = time.perf_counter() - t0
    trace = os.path.join(args.profile, f"trace-{tag}-{phase}.json")
    prof.export_chrome_trace(trace)
    summary = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu", "profile_summary.py"), trace,
                              "--top", "20"], capture_output=True, text=True)
    path = os.path.join(args.profile, f"profile-{tag}-{phase}.txt")
    with open(path, "w") as f:
        f.write(f"{tag} {phase}: one profiled call, {wall:.3f} s wall (profiler on); memory allocated at the phase's "
                f"start {record['memory_at_start'] / 2**30:.2f} GiB, peak {record['peak_bytes'] / 2**30:.2f} GiB "
                f"(transient {(record['peak_bytes'] - record['memory_at_start']) / 2**30:.2f} GiB)\n")
        f.write(summary.stdout + summary.stderr)
    subprocess.run(["gzip", "-f", trace])
    log(f"  [{tag}] {phase} profiled: {wall:.3f} s; {path}")
    return {"wall_s": wall, "summary": path}


def main(args):
    """Builds one engine (args.child = ENGINE DTYPE WORK TAG) and runs args.phases on it."""
    import warnings
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    engine_name, dtype, work, tag = args.child
    import_verl(args.device)
    from functools import partial

    import torch
    import torch.distributed as dist
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import ActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.utils.losses import ppo_loss, sft_loss

    from enginery.verl.engine_config import EngineryEngineConfig

    import flash_cross_entropy
    import varlen_attention
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device != "cpu"
    if cuda:
        torch.cuda.set_device(0)
        varlen_attention.register()
        flash_cross_entropy.register()  # verl's log-probs as with flash-attn installed (enginery's own do not use it)
    backend = BACKENDS[engine_name]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(args.port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    memory = Memory(args.device)

    steps = torch.load(os.path.join(work, "data.pt"))
    loss_fns = {"ppo": partial(ppo_loss, ActorConfig(strategy=backend, rollout_n=1,
                                                    ppo_micro_batch_size_per_gpu=args.micro_batch)),
                "sft": partial(sft_loss, config=None)}
    # The same precision for both: fp32 master weights (model_dtype), compute in `dtype`, fp32 reductions.
    mixed = {"param_dtype": dtype, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    verl_options = dict(args.verl_options) if engine_name == "verl" else {}
    if engine_name == "verl":
        engine_config = FSDPEngineConfig(strategy="fsdp2", mixed_precision=mixed, model_dtype="fp32",
                                         use_torch_compile=verl_options.get("use_torch_compile", False))
    else:
        engine_config = EngineryEngineConfig(strategy="enginery_fsdp2", mixed_precision=mixed, model_dtype="fp32",
                                             gradient_checkpointing_policy=args.recompute_policy)
    attention = varlen_attention.NAME if cuda else "sdpa"
    model_config = HFModelConfig(path=os.path.join(work, "model"), load_tokenizer=False,
                                 override_config={"attn_implementation": attention},
                                 enable_gradient_checkpointing=args.activation_checkpointing,
                                 use_liger=verl_options.get("use_liger", False), use_remove_padding=True)
    optimizer_config = FSDPOptimizerConfig(lr=args.lr, weight_decay=0.01, clip_grad=1.0,
                                           total_training_steps=2 * (args.warmup + args.steps))
    log(f"  [{tag}] imports, process group and data {time.perf_counter() - start:.1f} s; building the engine "
        f"({engine_name}: attention {attention}, {verl_options or 'enginery defaults'})")

    memory.reset()
    sync()
    t0 = time.perf_counter()
    engine = EngineRegistry.new(model_type="language_model", backend=backend, model_config=model_config,
                                engine_config=engine_config, optimizer_config=optimizer_config,
                                checkpoint_config=CheckpointConfig())
    engine.initialize()
    sync()
    result = {"engine": engine_name, "backend": backend, "dtype": dtype, "tag": tag, "device": args.device,
              "engine_class": type(engine).__name__, "attention": attention, "verl_options": verl_options,
              "init_s": time.perf_counter() - t0, "init_peak_bytes": memory.peak_bytes(),
              "threads": torch.get_num_threads(), "phases": {}}
    if cuda:
        result["gpu"] = torch.cuda.get_device_name(0)
    log(f"  [{tag}] {result['engine_class']} initialized in {result['init_s']:.1f} s, peak "
        f"{result['init_peak_bytes'] / 2**30:.2f} GiB")
    for phase in args.phases:
        result["phases"][phase] = run_phase(phase, engine, steps, loss_fns, args, memory, sync, work, tag)
    result["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(os.path.join(work, f"result-{tag}.json"), "w") as f:
        json.dump(result, f)
    del engine
    dist.destroy_process_group()
