#!/usr/bin/env python3
"""The RL-step reference of issue 16: what verl runs without remove-padding. transformers + PyTorch FSDP2
(reference_fsdp2.py's setup: fully_shard per layer, bf16 compute / fp32 reduction, fused AdamW, optional activation
checkpointing) trains one PPO step over the batch of make_rl_batch.py, every micro-batch of --mbs rows at the
batch's full padded length. Prints the same JSON line as bench_rl_step (valid tokens/s, peak memory, first loss).

The loss is trainer/loop/losses.cpp's ppo_policy_loss, term for term: log_probs[b, t] = log p(ids[b, t] | ids[b, <t])
(logits[:, t - 1] predict ids[:, t]); ratio = exp(clamp(log_probs - old, -20, 20)); per token
max(-A r, -A clip(r, 1 - c, 1 + c)), and for A < 0 at most -3 A (dual clip); summed over loss_mask and divided by
the global number of target tokens (loss_mask[:, 1:] summed over every micro-batch and rank), so the micro-batch
losses add up to the global token mean. Position ids are cumsum(attention_mask) - 1, clamped at 0, as the engine
and verl derive them.

Run on the GPU machine: torchrun --nproc-per-node 1 bench/gpu/reference_rl_fsdp2.py --model-dir DIR --batch FILE
"""
import argparse
import json
import time

import torch
import torch.distributed as dist

from reference_fsdp2 import fsdp2_model_and_optimizer, init_rank

CLIP_RATIO_C = 3.0  # the trainer's dual-clip default (config/train_config.h)


def rank_rows(path, rank, world):
    """This rank's contiguous share of the batch (as bench_rl_step splits it), on the GPU, and the global sizes."""
    from safetensors.torch import load_file

    full = load_file(path)
    n = full["input_ids"].shape[0]
    lo, hi = rank * n // world, (rank + 1) * n // world
    rows = {k: v[lo:hi].cuda() for k, v in full.items()}
    sizes = dict(num_seqs=n, valid_tokens=int(full["attention_mask"].sum()),
                 padded_tokens=full["attention_mask"].numel())
    # The first column that holds a target anywhere: logits before it predict nothing the loss reads (verl slices
    # the logits to the response the same way).
    sizes["first_target"] = max(1, int((full["loss_mask"] > 0).any(0).nonzero()[0]))
    return rows, sizes


def ppo_loss(log_probs, mb, global_tokens, clip):
    mask, old, adv = mb["loss_mask"], mb["old_log_probs"], mb["advantages"]
    ratio = torch.exp((log_probs - old).clamp(-20.0, 20.0))
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip, 1.0 + clip)
    clipped = torch.maximum(pg1, pg2)
    per_token = torch.where(adv < 0, torch.minimum(-adv * CLIP_RATIO_C, clipped), clipped)
    # where, not a product: equal for finite values, and padding positions can never turn the sum into NaN.
    return torch.where(mask > 0, per_token, 0.0).sum() / global_tokens


def micro_batch_loss(model, mb, first, global_tokens, clip):
    """Forward of one micro-batch (full padded rows) and its share of the loss."""
    ids, attn = mb["input_ids"], mb["attention_mask"]
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).logits
    lf = logits[:, first - 1:-1].float()
    log_probs = lf.gather(-1, ids[:, first:, None]).squeeze(-1) - torch.logsumexp(lf, dim=-1)
    tail = {k: mb[k][:, first:] for k in ("loss_mask", "old_log_probs", "advantages")}
    return ppo_loss(log_probs, tail, global_tokens, clip)


def train_step(model, opt, rows, mbs, first, clip):
    """One optimizer step over this rank's rows; returns (global loss, grad norm before clipping)."""
    world = dist.get_world_size()
    count = rows["loss_mask"][:, 1:].sum().double()
    dist.all_reduce(count)
    global_tokens = count.item()
    n = rows["input_ids"].shape[0]
    total = torch.zeros((), device="cuda", dtype=torch.float64)
    for lo in range(0, n, mbs):
        mb = {k: v[lo:lo + mbs] for k, v in rows.items()}
        loss = micro_batch_loss(model, mb, first, global_tokens, clip)
        loss.backward()
        total += loss.detach().double()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    opt.step()
    opt.zero_grad(set_to_none=True)
    if world > 1:
        dist.all_reduce(total)
    return total.item(), norm.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True, help="HF dir made by make_bench_inputs.py (same init as the engine)")
    ap.add_argument("--batch", required=True, help="safetensors batch made by make_rl_batch.py (same data)")
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--ac", action="store_true", help="activation checkpointing per decoder layer")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--clip-ratio", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    rank = init_rank(args.seed)
    world = dist.get_world_size()
    model, opt = fsdp2_model_and_optimizer(args.model_dir, None, args.ac, args.lr)
    rows, sizes = rank_rows(args.batch, rank, world)

    torch.cuda.reset_peak_memory_stats()
    losses, norms, times = [], [], []
    for step in range(args.warmup + args.steps):  # the same batch every step, as bench_rl_step
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss, norm = train_step(model, opt, rows, args.mbs, sizes["first_target"], args.clip_ratio)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(dt)
        losses.append(loss)
        norms.append(norm)
        if rank == 0:
            print(f"step {step} loss {loss} grad_norm {norm} {dt:.3f} s", flush=True)
    import transformers

    step_s = sum(times) / len(times)
    result = dict(impl="pytorch-fsdp2+transformers", mode="padded", device="cuda", world=world, mbs=args.mbs,
                  ac=args.ac, max_token_len=0, num_seqs=sizes["num_seqs"], valid_tokens=sizes["valid_tokens"],
                  padded_tokens=sizes["padded_tokens"], steps=args.steps, step_s=step_s, step_times=times,
                  valid_tokens_per_s=sizes["valid_tokens"] / step_s,
                  peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30, first_loss=losses[0], losses=losses,
                  grad_norm=norms[0], grad_norms=norms, torch=torch.__version__,
                  transformers=transformers.__version__)
    if rank == 0:
        print(json.dumps(result), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(result) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
