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
}
PEAK_BF16_FLOPS = 989e12  # H200 dense bf16, the denominator


def model_flops_per_token(cfg, seq):
    """6 * non-embedding params + attention (12 * layers * hidden * seq), as in the PaLM / llm.c MFU formula."""
    h, i, L, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = h // heads
    attn = h * (heads * head_dim) + 2 * h * (kv * head_dim) + (heads * head_dim) * h
    mlp = 3 * h * i
    params = L * (attn + mlp) + h * v  # lm_head matmul counts (tied or not)
    return 6 * params + 12 * L * h * seq


def init_rank(seed):
    """NCCL process group from torchrun's environment, this rank's GPU, the seed; returns the rank."""
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(seed)
    return dist.get_rank()


def fsdp2_model_and_optimizer(model_dir, shape, ac, lr):
    """The HF model from `model_dir` (random init of `shape` without one), fp32 master weights, sdpa attention,
    `fully_shard` per decoder layer and on the root with bf16 compute / fp32 reduction, fused AdamW."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if model_dir:
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                     attn_implementation="sdpa").cuda()
    else:
        cfg = Qwen2Config(**shape, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                          attn_implementation="sdpa", torch_dtype=torch.float32)
        with torch.device("cuda"):
            model = Qwen2ForCausalLM(cfg)
    model.train()  # from_pretrained returns eval mode, where transformers skips activation checkpointing
    if ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01, fused=True)
    return model, opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1.5B", choices=sorted(SHAPES))
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ac", action="store_true", help="activation checkpointing per decoder layer")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--model-dir", default="", help="HF dir made by make_bench_inputs.py (same init as the engine)")
    ap.add_argument("--tokens", default="", help="int32 token file made by make_bench_inputs.py (same data)")
    ap.add_argument("--profile", default="", help="after the timed steps, profile one more step into this chrome trace")
    args = ap.parse_args()

    rank = init_rank(args.seed)
    shape = SHAPES[args.shape]
    model, opt = fsdp2_model_and_optimizer(args.model_dir, shape, args.ac, args.lr)

    gen = torch.Generator(device="cuda").manual_seed(args.seed + rank)
    world = dist.get_world_size()
    tokens = None
    if args.tokens:
        import numpy as np
        tokens = torch.from_numpy(np.fromfile(args.tokens, dtype=np.int32).astype(np.int64))
    losses = []
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.warmup + args.steps):
        if tokens is not None:  # the engine bench reads the same rows (bench_engine_train.cpp)
            off = (step * world + rank) * args.mbs * args.seq
            ids = tokens[off:off + args.mbs * args.seq].view(args.mbs, args.seq).cuda()
        else:
            ids = torch.randint(0, shape["vocab_size"], (args.mbs, args.seq), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
        losses.append(out.loss.item())
    if args.profile:
        from torch.profiler import ProfilerActivity, profile, record_function
        off = ((args.warmup + args.steps) * world + rank) * args.mbs * args.seq
        ids = tokens[off:off + args.mbs * args.seq].view(args.mbs, args.seq).cuda()
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
            prof.export_chrome_trace(args.profile)
    tokens_per_step = args.mbs * args.seq * world
    tok_s = tokens_per_step * len(times) / sum(times)
    mfu = tok_s * model_flops_per_token(shape, args.seq) / (PEAK_BF16_FLOPS * world)
    result = dict(impl="pytorch-fsdp2+transformers", shape=args.shape, seq=args.seq, mbs=args.mbs, ac=args.ac,
                  world=world, steps=args.steps, tokens_per_s=tok_s, mfu=mfu,
                  peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30, final_loss=losses[-1], losses=losses,
                  flops_per_token=model_flops_per_token(shape, args.seq),
                  torch=torch.__version__)
    if rank == 0:
        print(json.dumps(result), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
