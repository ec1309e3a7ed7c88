#!/usr/bin/env python3
"""The reference for weight export (issue 17, item 3): what verl does to hand FSDP2 weights to its rollout engine.

The same checkpoint as the engine (make_bench_inputs.py), sharded as reference_fsdp2.py shards it (fully_shard per
decoder layer and on the root, fp32 master parameters). Modes, each timed over --repeat full exports after one
warm-up:
  verl_full_tensor   for every state_dict() entry: DTensor.full_tensor() (fp32 all-gather), then .to(bfloat16)
                     for the rollout, one parameter at a time (verl's per-tensor generator)
  cast_then_gather   the strongest per-parameter variant: the local shard cast to bf16 first, then full_tensor()
                     (half the bytes gathered)
Tied embeddings appear once (lm_head.weight is model.embed_tokens.weight): the duplicate entry is skipped, as the
engine exports the HF names a checkpoint holds. One JSON line per mode, the fields of bench_weight_export.

Run: torchrun --nproc-per-node 1 bench/gpu/reference_export_fsdp2.py --model-dir DIR --out results.jsonl
"""
import argparse
import json
import time

import torch
from torch.distributed.tensor import DTensor

from reference_fsdp2 import SHAPES, fsdp2_model_and_optimizer, init_rank


def unique_entries(model):
    seen, out = set(), []
    for name, p in model.state_dict().items():
        local = p.to_local() if isinstance(p, DTensor) else p
        if local.data_ptr() in seen:
            continue
        seen.add(local.data_ptr())
        out.append((name, p))
    return out


def export(entries, mode, checksum):
    tensors, nbytes, total = 0, 0, 0.0
    for _, p in entries:
        if mode == "verl_full_tensor":
            full = (p.full_tensor() if isinstance(p, DTensor) else p).to(torch.bfloat16)
        else:
            full = p.to(torch.bfloat16).full_tensor() if isinstance(p, DTensor) else p.to(torch.bfloat16)
        tensors += 1
        nbytes += full.numel() * full.element_size()
        if checksum:
            total += full.double().sum().item()
        del full
    return tensors, nbytes, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--shape", default="1.5B", choices=sorted(SHAPES))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rank = init_rank(0)
    model, _ = fsdp2_model_and_optimizer(args.model_dir, SHAPES[args.shape], ac=False, lr=1e-5)
    entries = unique_entries(model)
    for mode in ("verl_full_tensor", "cast_then_gather"):
        tensors, nbytes, checksum = export(entries, mode, checksum=True)  # also the warm-up
        seconds, extra = [], 0.0
        for _ in range(args.repeat):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            export(entries, mode, checksum=False)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t0)
            extra = max(extra, (torch.cuda.max_memory_allocated() - before) / 2**30)
        result = dict(impl="fsdp2", mode=mode, world=torch.distributed.get_world_size(),
                      seconds=sum(seconds) / len(seconds), extra_peak_gib=extra, tensors=tensors, bytes=nbytes,
                      checksum=checksum)
        if rank == 0:
            print(json.dumps(result), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(result) + "\n")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
