#!/usr/bin/env python3
"""The offload reference (issue 17): PyTorch FSDP2 with CPUOffloadPolicy, what verl users run to train a model whose
state does not fit the GPU.

transformers Qwen2ForCausalLM (sdpa attention) loaded on the host from the directory make_bench_inputs.py writes,
`fully_shard` per decoder layer and on the root with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) and
CPUOffloadPolicy(pin_memory=True): sharded fp32 parameters, their gradients and torch.optim.AdamW's state live in
pinned host memory, parameters are copied to the GPU for each all-gather, and the optimizer steps on the CPU.
Same tokens, seq, micro-batch, AdamW settings and clipping as bench_engine_train. Prints one JSON line (and appends
it to --out) with tokens/s, peak GPU and host memory and the loss of every step.

Run on the GPU machine: torchrun --nproc-per-node 1 bench/gpu/reference_offload_fsdp2.py --shape 3B \\
    --model-dir /tmp/bench-3B --tokens /tmp/bench-3B/tokens.bin --ac
"""
import argparse
import json
import resource
import sys
import time

import torch
import torch.distributed as dist

from reference_fsdp2 import SHAPES, init_rank, model_flops_per_token


def offloaded_model_and_optimizer(model_dir, ac, lr, optim_impl):
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    # Loaded on the host: with CPUOffloadPolicy fully_shard keeps the sharded parameters there (pinned) and moves
    # only buffers to the GPU, so the full fp32 model never occupies the GPU.
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    if ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    offload = CPUOffloadPolicy(pin_memory=True)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp, offload_policy=offload)
    fully_shard(model, mp_policy=mp, offload_policy=offload)
    # "default" is what torch.optim.AdamW picks for CPU tensors when nothing is said (verl says nothing);
    # "fused" is the vectorised CPU kernel of PyTorch 2.4+, the strongest host step PyTorch has.
    kwargs = {"fused": True} if optim_impl == "fused" else {"foreach": True} if optim_impl == "foreach" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01, **kwargs)
    return model, opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="3B", choices=sorted(SHAPES))
    ap.add_argument("--model-dir", required=True, help="HF dir made by make_bench_inputs.py (same init as the engine)")
    ap.add_argument("--tokens", required=True, help="int32 token file made by make_bench_inputs.py (same data)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=1, help="gradient accumulation: micro-batches per step")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--ac", action="store_true", help="activation checkpointing per decoder layer")
    ap.add_argument("--optim-impl", default="default", choices=["default", "foreach", "fused"])
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import numpy as np

    if args.micro_batches < 1:
        ap.error(f"--micro-batches must be at least 1, got {args.micro_batches}")
    rank = init_rank(args.seed)
    world = dist.get_world_size()
    model, opt = offloaded_model_and_optimizer(args.model_dir, args.ac, args.lr, args.optim_impl)
    tokens = torch.from_numpy(np.fromfile(args.tokens, dtype=np.int32).astype(np.int64))
    losses, times = [], []
    torch.cuda.reset_peak_memory_stats()
    for step in range(args.warmup + args.steps):
        rows = args.mbs * args.micro_batches
        off = (step * world + rank) * rows * args.seq  # the rows bench_engine_train reads
        if off + rows * args.seq > tokens.numel():
            sys.exit(f"{args.tokens}: {tokens.numel()} tokens, step {step} needs {off + rows * args.seq} "
                     "(make_bench_inputs.py --tokens N makes a longer file)")
        batch = tokens[off:off + rows * args.seq].view(rows, args.seq).cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step_loss = 0.0
        for k, ids in enumerate(batch.split(args.mbs)):
            last = k + 1 == args.micro_batches
            model.set_requires_gradient_sync(last)  # FSDP2's no_sync: reduce (and offload) once per step
            out = model(input_ids=ids, labels=ids)
            # Each micro-batch's loss is its token mean; equal token counts make the mean of means the step's mean.
            (out.loss / args.micro_batches).backward()
            step_loss += out.loss.detach() / args.micro_batches
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt)
        losses.append(float(step_loss))
        if rank == 0:
            print(f"step {step} loss {losses[-1]:.4f} {dt:.2f} s", flush=True)
    shape = SHAPES[args.shape]
    tok_s = args.mbs * args.micro_batches * args.seq * world * len(times) / sum(times)
    result = dict(impl=f"pytorch-fsdp2+cpuoffload({args.optim_impl} adamw)", shape=args.shape, seq=args.seq,
                  mbs=args.mbs, micro_batches=args.micro_batches, ac=args.ac, world=world, steps=args.steps, tokens_per_s=tok_s,
                  step_s=sum(times) / len(times),
                  mfu=tok_s * model_flops_per_token(shape, args.seq) / (989e12 * world),
                  peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30,
                  peak_host_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  final_loss=losses[-1], losses=losses, torch=torch.__version__)
    if rank == 0:
        print(json.dumps(result), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
