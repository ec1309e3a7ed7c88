#!/usr/bin/env python3
"""The reference the engine is measured against (issue 8): what verl users run today.

transformers Qwen2ForCausalLM (sdpa attention, random init) + torch FSDP2 `fully_shard` per decoder layer and on the
root, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), torch.optim.AdamW (fused), optional activation
checkpointing per layer. Prints one JSON line per configuration to stdout (and appends to --out).

Run on the GPU machine: torchrun --nproc-per-node 1 bench/gpu/reference_fsdp2.py --shape 1.5B --seq 4096 --mbs 2
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

SHAPES = {
    # Qwen2.5 shapes (config.json of the released checkpoints); weights are random.
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "3B": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    # 7.6B parameters: fp32 masters, gradients and both AdamW moments are 122 GB, more than a 128 GiB host holds
    # with everything offloaded (bench/gpu/run_offload_bench.sh runs it only when asked).
    "7B": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    # A small Qwen3-MoE (issue 45): Qwen3-30B-A3B's routing (8 of 128 experts would not fit the scale; 8 of 64,
    # renormalised) and head layout at hidden 1024, every layer sparse: 0.95B parameters, 0.26B used per token
    # (the head included).
    "moe-1B": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=16,
                   num_key_value_heads=4, head_dim=64, vocab_size=151936, tie_word_embeddings=False,
                   num_experts=64, num_experts_per_tok=8, moe_intermediate_size=256, norm_topk_prob=True),
}
PEAK_BF16_FLOPS = 989e12  # dense bf16 of an H100 SXM and an H200 alike (the MFU denominator)


def model_flops_per_token(cfg, seq):
    """6 * non-embedding params + attention (12 * layers * hidden * seq), as in the PaLM / llm.c MFU formula; for a
    MoE shape the params a token uses: its top-k experts and the router."""
    h, i, L, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim", h // heads)
    attn = h * (heads * head_dim) + 2 * h * (kv * head_dim) + (heads * head_dim) * h
    mlp = 3 * h * i
    if "num_experts" in cfg:
        mlp = cfg["num_experts_per_tok"] * 3 * h * cfg["moe_intermediate_size"] + h * cfg["num_experts"]
    params = L * (attn + mlp) + h * v  # lm_head matmul counts (tied or not)
    return 6 * params + 12 * L * h * seq


def hf_model_class(shape, **config):
    """The transformers model class of a SHAPES entry and its config (with `config` added): Qwen3-MoE for the MoE
    shapes, Qwen2 for the others."""
    import transformers
    config = dict(max_position_embeddings=32768, rms_norm_eps=1e-6, **config)
    if "num_experts" in shape:
        return transformers.Qwen3MoeForCausalLM, transformers.Qwen3MoeConfig(
            **shape, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **config)
    return transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**shape, rope_theta=1000000.0, **config)


def init_rank(seed):
    """NCCL process group from torchrun's environment, this rank's GPU, the seed; returns the rank."""
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(seed)
    return dist.get_rank()


def hf_model(model_dir, shape):
    """The HF model from `model_dir` (random init of `shape` without one): fp32 master weights, sdpa attention, on
    the GPU, in training mode."""
    from transformers import AutoModelForCausalLM

    if model_dir:
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                     attn_implementation="sdpa").cuda()
    else:
        cls, cfg = hf_model_class(shape, attn_implementation="sdpa", torch_dtype=torch.float32)
        with torch.device("cuda"):
            model = cls(cfg)
    model.train()  # from_pretrained returns eval mode, where transformers skips activation checkpointing
    return model


def adamw(model, lr):
    """The optimizer of both references: torch's fused AdamW."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01, fused=True)


def fsdp2_model_and_optimizer(model_dir, shape, ac, lr):
    """hf_model(), `fully_shard` per decoder layer and on the root with bf16 compute / fp32 reduction, fused AdamW."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = hf_model(model_dir, shape)
    if ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model, adamw(model, lr)


def read_tokens(path):
    """The int32 token file of make_bench_inputs.py as int64 (None without one: random tokens then)."""
    if not path:
        return None
    import numpy as np
    return torch.from_numpy(np.fromfile(path, dtype=np.int32).astype(np.int64))


def step_ids(tokens, step, args, rank, world, vocab, gen):
    """Step `step`'s [mbs, seq] input of this rank: the rows bench_engine_train.cpp reads from the same file."""
    if tokens is None:
        return torch.randint(0, vocab, (args.mbs, args.seq), device="cuda", generator=gen)
    off = (step * world + rank) * args.mbs * args.seq
    return tokens[off:off + args.mbs * args.seq].view(args.mbs, args.seq).cuda()


def timed_training(train_step, ids_for_step, warmup, steps):
    """Runs warmup + steps of `train_step(ids) -> loss` (forward, backward, clip, optimizer step), each timed alone
    between synchronisations. Returns (times of the timed steps, every step's loss, the first step's seconds)."""
    torch.cuda.reset_peak_memory_stats()
    times, losses, first = [], [], 0.0
    for step in range(warmup + steps):
        ids = ids_for_step(step)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = train_step(ids)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        if step == 0:
            first = elapsed
        if step >= warmup:
            times.append(elapsed)
        losses.append(loss.item())
    return times, losses, first


def result_row(impl, args, ac, world, times, losses, **extra):
    """The JSON line every row of results.jsonl has (make_table.py reads it)."""
    shape = SHAPES[args.shape]
    tok_s = args.mbs * args.seq * world * len(times) / sum(times)
    return dict(impl=impl, shape=args.shape, seq=args.seq, mbs=args.mbs, ac=ac, world=world, steps=len(times),
                tokens_per_s=tok_s, mfu=tok_s * model_flops_per_token(shape, args.seq) / (PEAK_BF16_FLOPS * world),
                peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30, final_loss=losses[-1], losses=losses,
                flops_per_token=model_flops_per_token(shape, args.seq), torch=torch.__version__, **extra)


def emit(result, rank, out):
    """One JSON line on stdout (rank 0), appended to `out` when given."""
    if rank != 0:
        return
    print(json.dumps(result), flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(result) + "\n")


def eager_train_step(model, opt):
    """One step of this recipe: transformers' own loss (labels = inputs, shifted inside), clip at 1.0, AdamW."""
    def step(ids):
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss.detach()
    return step


def run_eager(args, ac, rank, world, tokens, gen):
    """This recipe at one AC setting: builds, trains warmup + steps, returns the result row and the model."""
    shape = SHAPES[args.shape]
    model, opt = fsdp2_model_and_optimizer(args.model_dir, shape, ac, args.lr)
    times, losses, _ = timed_training(eager_train_step(model, opt),
                                      lambda s: step_ids(tokens, s, args, rank, world, shape["vocab_size"], gen),
                                      args.warmup, args.steps)
    return result_row("pytorch-fsdp2+transformers", args, ac, world, times, losses), model, opt


def profile_step(model, opt, ids, path, rank):
    """One more step under the profiler, its chrome trace written to `path` (profile_summary.py reads it)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("ref::forward"):
            out = model(input_ids=ids, labels=ids)
        with record_function("ref::backward"):
            out.loss.backward()
        with record_function("ref::clip"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with record_function("ref::optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    if rank == 0:
        prof.export_chrome_trace(path)


def common_args(description):
    """The flags both reference scripts take (same shapes, inputs and step counts as the engine's bench)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--shape", default="1.5B", choices=sorted(SHAPES))
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--model-dir", default="", help="HF dir made by make_bench_inputs.py (same init as the engine)")
    ap.add_argument("--tokens", default="", help="int32 token file made by make_bench_inputs.py (same data)")
    return ap


def main():
    ap = common_args(__doc__)
    ap.add_argument("--ac", action="store_true", help="activation checkpointing per decoder layer")
    ap.add_argument("--profile", default="", help="after the timed steps, profile one more step into this chrome trace")
    args = ap.parse_args()

    rank = init_rank(args.seed)
    world = dist.get_world_size()
    gen = torch.Generator(device="cuda").manual_seed(args.seed + rank)
    tokens = read_tokens(args.tokens)
    result, model, opt = run_eager(args, args.ac, rank, world, tokens, gen)
    if args.profile:
        ids = step_ids(tokens, args.warmup + args.steps, args, rank, world, SHAPES[args.shape]["vocab_size"], gen)
        profile_step(model, opt, ids, args.profile, rank)
    emit(result, rank, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
