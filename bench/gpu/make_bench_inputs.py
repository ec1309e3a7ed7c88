#!/usr/bin/env python3
"""Writes what both sides of the GPU benchmark read: a random-init Qwen2.5-shaped (or Qwen3-MoE) HF checkpoint (fp32,
save_pretrained) and an int32 token file, both from one seed, so engine and reference start from the same weights
and see the same data."""
import argparse
import os

import numpy as np
import torch

from reference_fsdp2 import SHAPES, hf_model_class


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--tokens", type=int, default=2 * 4096 * 64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    cls, cfg = hf_model_class(SHAPES[args.shape])
    with torch.device("cuda"):
        model = cls(cfg)
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(args.out_dir, safe_serialization=True, max_shard_size="20GB")
    rng = np.random.default_rng(args.seed)
    rng.integers(0, cfg.vocab_size, size=args.tokens, dtype=np.int32).tofile(os.path.join(args.out_dir, "tokens.bin"))


if __name__ == "__main__":
    main()
