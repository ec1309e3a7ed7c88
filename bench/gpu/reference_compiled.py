#!/usr/bin/env python3
"""The strongest recipe a user would pick instead of the engine (issue 20): torchtitan's, applied to the same
transformers Qwen2 model, weights and tokens as reference_fsdp2.py.

Per decoder layer, in torchtitan's order: activation checkpointing (checkpoint_wrapper: torch.utils.checkpoint,
non-reentrant, no RNG state, with --ac), torch.compile of the (wrapped) layer, FSDP2 `fully_shard` with
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (the last layer stays unsharded after forward, as
torchtitan does, since backward starts with it). The final norm, lm_head and cross-entropy are one compiled
function, not chunked (torchtitan's loss is not either); `fully_shard` on the root (embedding, tied lm_head, norm);
torch.optim.AdamW(fused=True); gradient clipping at 1.0. Compilation happens in the first warm-up step: tokens/s
counts only the timed steps, and each row reports compile_s (first step minus a timed step) separately, with
inductor's graph-cache hits and misses (a process that finds the graphs compiled by an earlier one compiles faster).

--ac off|on|both: `both` runs AC off, then on, in this one process. --eager-too first runs reference_fsdp2.py's
recipe at the same settings in this process too (run_gpu_bench.sh's budget mode: one process per shape, so the
imports and the NCCL group are paid once). Prints one JSON line per configuration (and appends to --out), in
reference_fsdp2.py's format.

Run on the GPU machine: torchrun --nproc-per-node 1 bench/gpu/reference_compiled.py --shape 1.5B --ac both
"""
import gc
import sys
import traceback

import torch
import torch._dynamo
import torch.distributed as dist
import torch.nn.functional as F

from reference_fsdp2 import (SHAPES, adamw, common_args, emit, hf_model, init_rank, read_tokens, result_row,
                             run_eager, step_ids, timed_training)

IMPL = "pytorch-fsdp2+compile"


def head_loss(h, norm_weight, lm_weight, ids, eps):
    """Final RMSNorm (transformers' rounding: normalise in fp32, round, then scale), lm_head and the mean
    cross-entropy of next-token prediction over the [B, T-1] positions transformers' labels=ids loss averages."""
    x = h[:, :-1].float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    logits = F.linear(norm_weight * x.to(h.dtype), lm_weight)
    return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())


class CompiledCausalLM(torch.nn.Module):
    """transformers' Qwen2 decoder stack driven directly: embedding and rotary tables eager (as in torchtitan),
    the compiled layers, then the compiled head + loss. Returns the loss."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf
        self.head_loss = torch.compile(head_loss)

    def forward(self, ids):
        m = self.hf.model
        h = m.embed_tokens(ids)
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        rope = m.rotary_emb(h, positions)
        for layer in m.layers:
            # No mask: transformers' sdpa path then runs causal attention, as in the eager reference.
            h = layer(h, attention_mask=None, position_ids=positions, position_embeddings=rope, use_cache=False)
            if isinstance(h, tuple):  # transformers 4.x layers return (hidden_states,)
                h = h[0]
        return self.head_loss(h, m.norm.weight, self.hf.lm_head.weight, ids, m.norm.variance_epsilon)


def compiled_model_and_optimizer(args, ac):
    """The recipe's model (see the module docstring) and its fused AdamW."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    hf = hf_model(args.model_dir, SHAPES[args.shape])
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layers = hf.model.layers
    for i in range(len(layers)):
        layer = layers[i]
        if ac:
            layer = checkpoint_wrapper(layer, preserve_rng_state=False)
        layer = torch.compile(layer, fullgraph=args.fullgraph)
        fully_shard(layer, mp_policy=mp, reshard_after_forward=i < len(layers) - 1)
        layers[i] = layer
    model = CompiledCausalLM(hf)
    fully_shard(model, mp_policy=mp)
    return model, adamw(model, args.lr)


def compiled_train_step(model, opt):
    def step(ids):
        loss = model(ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


def configure_dynamo():
    """All 24-36 layers must run compiled: should their guards differ (a recompile per layer), dynamo's default
    limit of 8 compiled versions would silently leave the rest eager."""
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 128)
            break


def run_compiled(args, ac, rank, world, tokens, gen):
    """The recipe at one AC setting; returns its result row."""
    from torch._dynamo.utils import counters

    counters.clear()
    mem_before = torch.cuda.memory_allocated() / 2**30
    model, opt = compiled_model_and_optimizer(args, ac)
    vocab = SHAPES[args.shape]["vocab_size"]
    times, losses, first = timed_training(compiled_train_step(model, opt),
                                          lambda s: step_ids(tokens, s, args, rank, world, vocab, gen),
                                          args.warmup, args.steps)
    mean = sum(times) / len(times)
    return result_row(IMPL, args, ac, world, times, losses, compile_s=max(first - mean, 0.0), first_step_s=first,
                      graph_breaks=sum(counters["graph_break"].values()),
                      compiled_graphs=counters["stats"].get("unique_graphs", 0), fullgraph=args.fullgraph,
                      fxgraph_cache_hits=counters["inductor"].get("fxgraph_cache_hit", 0),
                      fxgraph_cache_misses=counters["inductor"].get("fxgraph_cache_miss", 0),
                      mem_before_gib=mem_before)


def release():
    """Frees what one configuration left, so the next one's peak memory is its own; dynamo's caches too."""
    gc.collect()
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    left = torch.cuda.memory_allocated() / 2**30
    if left > 0.5:
        print(f"reference_compiled: {left:.1f} GiB still allocated between configurations", file=sys.stderr)


def attempt(what, run, rank, out):
    """Runs one configuration and emits its row; a failure is reported and the next configuration still runs (a
    benchmark call that cannot be repeated should keep every row it can get)."""
    try:
        result = run()
    except Exception:  # noqa: BLE001
        print(f"reference_compiled: {what} failed", file=sys.stderr)
        traceback.print_exc()
        result = None
    release()
    if result is not None:
        emit(result, rank, out)


def main():
    ap = common_args(__doc__)
    ap.add_argument("--ac", choices=["off", "on", "both"], default="off",
                    help="activation checkpointing per decoder layer; both: off, then on")
    ap.add_argument("--eager-too", action="store_true",
                    help="first run reference_fsdp2.py's recipe at the same settings in this process")
    ap.add_argument("--fullgraph", action="store_true",
                    help="torch.compile(fullgraph=True) per layer (torchtitan's own model traces whole; transformers' "
                         "layers may not, so the default allows graph breaks and reports their count)")
    args = ap.parse_args()

    rank = init_rank(args.seed)
    world = dist.get_world_size()
    gen = torch.Generator(device="cuda").manual_seed(args.seed + rank)
    tokens = read_tokens(args.tokens)
    settings = {"off": [False], "on": [True], "both": [False, True]}[args.ac]
    if args.eager_too:
        for ac in settings:
            attempt(f"eager, AC {ac}", lambda: run_eager(args, ac, rank, world, tokens, gen)[0], rank, args.out)
    configure_dynamo()
    for ac in settings:
        attempt(f"compiled, AC {ac}", lambda: run_compiled(args, ac, rank, world, tokens, gen), rank, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
