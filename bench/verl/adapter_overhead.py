"""The per-step overhead of enginery.verl (issue 43, item 4): the same engine, the same batch, driven two ways in
one process, call after call alternating:

- adapter: verl's calls on enginery.verl's engine (`with eval_mode(): infer_batch(td)`, `with train_mode():
  train_batch(td, sft_loss)`), `td` verl's no-padding TensorDict (tests/verl/verl_batches.py) and the loss verl's
  own sft_loss;
- direct:  the engine behind it (`adapter._engine`, the Python extension's Engine) on the batch the contract takes
  (`contract_batch`: built once, before timing) with the same loss written for the contract's layout.

Phases: infer (log-probs), entropy (log-probs and entropy), sft (zero grad, forward and backward, optimizer step).
Each timed call is synchronised before and after; the table gives the median of each side, the difference per call
and the adapter's share of the step, which must stay under 2% (exit status 1 otherwise). On one GPU:

    PYTHONPATH=build/python python bench/verl/adapter_overhead.py --device cuda --model 1.5B --out DIR

(scripts/gpu/verl_adapter_overhead.sh builds, installs and runs it on the GPU machine.) On the CPU, a smoke run:
`--device cpu --model custom --rows 4 --response-len 8 24 --prompt-len 4 8 --calls 2`."""
import argparse
import functools
import json
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from engine_phases import import_verl  # noqa: E402
from verl_inputs import model_shape, write_model  # noqa: E402

PHASES = ("infer", "entropy", "sft")
LIMIT = 0.02  # the adapter's share of a step that issue 43 allows


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="1.5B", help="a released Qwen2.5 shape (0.5B, 1.5B, 3B, 7B) or custom")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--prompt-len", type=int, nargs=2, default=(64, 512))
    p.add_argument("--response-len", type=int, nargs=2, default=(128, 3072))
    p.add_argument("--max-tokens", type=int, default=16384, help="verl's dynamic batch size budget per micro-batch")
    p.add_argument("--calls", type=int, default=6, help="timed calls per side and phase")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="/tmp/bench-adapter-overhead")
    p.add_argument("--out", default=None, help="folder for table.md and results.jsonl")
    args = p.parse_args()
    args.response_median = None  # verl_inputs' write_model reads the prompt/response ranges for max positions
    return args


def sequences(args):
    """(prompt, response) token lists of one batch, the same on every run with the same arguments."""
    rng = random.Random(args.seed)
    vocab = model_shape(args)["vocab_size"]
    draw = lambda lo, hi: [rng.randrange(1, vocab) for _ in range(rng.randint(lo, hi))]  # noqa: E731
    return [(draw(*args.prompt_len), draw(*args.response_len)) for _ in range(args.rows)]


def verl_batch(pairs, args, entropy):
    """verl's no-padding SFT TensorDict, with the worker's per-call metadata (dynamic batch size)."""
    import verl_batches
    from verl.utils import tensordict_utils as tu
    td = verl_batches.sft_batch([p for p, _ in pairs], [r for _, r in pairs], 1)
    tu.assign_non_tensor(td, use_dynamic_bsz=True, max_token_len_per_gpu=args.max_tokens, calculate_entropy=entropy)
    return td


def contract_batch(pairs, args, entropy, device):
    """The same sequences in the form the engine's contract takes (host_api/batch.h), built once, outside timing."""
    import torch
    ids = [torch.tensor(p + r) for p, r in pairs]
    width = max(len(t) for t in ids)
    input_ids = torch.zeros(len(ids), width, dtype=torch.long)
    attention = torch.zeros(len(ids), width, dtype=torch.long)
    loss_mask = torch.zeros(len(ids), width)
    for i, ((p, r), t) in enumerate(zip(pairs, ids)):
        input_ids[i, :len(t)] = t
        attention[i, :len(t)] = 1
        loss_mask[i, len(p):len(t)] = 1.0  # a response token is a target at its own position
    loss_mask[:, 0] = 0.0
    batch = {"input_ids": input_ids, "attention_mask": attention, "loss_mask": loss_mask}
    batch = {k: v.to(device) for k, v in batch.items()}
    batch.update(use_dynamic_bsz=True, max_token_len_per_gpu=args.max_tokens, calculate_entropy=entropy)
    return batch


def direct_sft_loss(model_output, micro_batch, ctx):
    """verl's sft_loss in the contract's layout: the target tokens' negative log-likelihood summed over the
    micro-batch, divided by the call's target tokens of every rank."""
    loss = -(model_output["log_probs"] * micro_batch["loss_mask"]).sum() / ctx.global_num_tokens
    return loss, {}


def build_engine(model_dir, args):
    from enginery.verl import LanguageModelEngine
    cuda = args.device != "cpu"
    engine = LanguageModelEngine(
        model_config={"path": model_dir, "enable_gradient_checkpointing": cuda, "use_remove_padding": True},
        engine_config={"strategy": "enginery_fsdp2",
                       "mixed_precision": {"param_dtype": "bf16" if cuda else "fp32"}},
        optimizer_config={"lr": 1e-6, "weight_decay": 0.0}, device=args.device)
    engine.initialize()
    return engine


def timed(call, sync):
    sync()
    start = time.perf_counter()
    call()
    sync()
    return time.perf_counter() - start


def calls(engine, pairs, args):
    """phase -> (adapter call, direct call), each one whole step as a verl worker makes it."""
    import verl.workers.utils.losses as losses
    sft_loss = functools.partial(losses.sft_loss, None)  # its no-padding branch reads no config
    inner = engine._engine
    batches = {phase: (verl_batch(pairs, args, phase == "entropy"),
                       contract_batch(pairs, args, phase == "entropy", args.device)) for phase in PHASES}

    def adapter(phase):
        td = batches[phase][0]
        if phase == "sft":
            with engine.train_mode():
                engine.train_batch(td, sft_loss)
        else:
            with engine.eval_mode():
                engine.infer_batch(td)

    def direct(phase):
        batch = batches[phase][1]
        if phase == "sft":
            with inner.train_mode():
                inner.optimizer_zero_grad()
                inner.forward_backward_batch(batch, direct_sft_loss, False)
                inner.optimizer_step()
                inner.optimizer_zero_grad()  # verl's train context zeroes on exit; so does the adapter's
        else:
            with inner.eval_mode():
                inner.infer_batch(batch, None)

    return {phase: (functools.partial(adapter, phase), functools.partial(direct, phase)) for phase in PHASES}


def main():
    args = parse_args()
    import_verl(args.device)
    import torch
    sync = torch.cuda.synchronize if args.device != "cpu" else (lambda: None)
    os.makedirs(args.work, exist_ok=True)
    model_dir = os.path.join(args.work, f"model-{args.model}")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        print(f"writing the {args.model} model to {model_dir}", flush=True)
        write_model(model_dir, args, args.device)
    pairs = sequences(args)
    tokens = sum(len(p) + len(r) for p, r in pairs)
    engine = build_engine(model_dir, args)
    rows, failed = [], False
    for phase, (adapter, direct) in calls(engine, pairs, args).items():
        for _ in range(args.warmup):
            adapter()
            direct()
        times = {"adapter": [], "direct": []}
        for i in range(args.calls):  # alternating, each side first every other call
            order = (("adapter", adapter), ("direct", direct)) if i % 2 == 0 else (("direct", direct),
                                                                                    ("adapter", adapter))
            for side, call in order:
                times[side].append(timed(call, sync))
        a, d = statistics.median(times["adapter"]), statistics.median(times["direct"])
        share = (a - d) / d
        failed = failed or share >= LIMIT
        rows.append({"phase": phase, "model": args.model, "device": args.device, "rows": args.rows,
                     "tokens": tokens, "adapter_s": a, "direct_s": d, "overhead_ms": 1e3 * (a - d),
                     "overhead_share": share, "adapter_all_s": times["adapter"], "direct_all_s": times["direct"]})
        print(f"{phase:8s} adapter {a:.4f} s  direct {d:.4f} s  overhead {1e3 * (a - d):+.1f} ms "
              f"({100 * share:+.2f}% of the step)", flush=True)
    table = ["| phase | adapter (s) | direct (s) | overhead per call | share of the step |", "|---|---|---|---|---|"]
    table += [f"| {r['phase']} | {r['adapter_s']:.4f} | {r['direct_s']:.4f} | {r['overhead_ms']:+.1f} ms | "
              f"{100 * r['overhead_share']:+.2f}% |" for r in rows]
    device = torch.cuda.get_device_name() if args.device != "cpu" else "cpu"
    head = (f"enginery.verl vs the engine directly: {args.model}, {args.rows} sequences, {tokens} tokens, "
            f"micro-batches of <= {args.max_tokens} tokens, {device}; median of {args.calls} calls each; limit "
            f"{100 * LIMIT:.0f}%: {'FAILED' if failed else 'met'}")
    print(head + "\n" + "\n".join(table), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write(head + "\n\n" + "\n".join(table) + "\n")
        with open(os.path.join(args.out, "results.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
