#!/usr/bin/env python3
"""Writes the CPU memory figure's inputs (bench/ulysses/run_ulysses_memory_cpu.sh): a random-init, narrowed
Qwen2-shaped HF checkpoint (fp32, save_pretrained) small enough that one step of one long sequence (8192 tokens)
runs in a minute or two on one core per rank, and an int32 token file below its vocabulary, both from one seed."""
import argparse
import os

import numpy as np
import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=8 * 16384)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    # Qwen2.5's layout (grouped-query attention with 2 KV heads, tied head, head_dim 64) at a narrower width; the
    # query heads (hidden / 64) must divide by the Ulysses size.
    cfg = transformers.Qwen2Config(hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                                   num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                                   num_key_value_heads=2, vocab_size=args.vocab, tie_word_embeddings=True,
                                   max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0)
    model = transformers.Qwen2ForCausalLM(cfg)
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    rng = np.random.default_rng(args.seed)
    rng.integers(0, args.vocab, size=args.tokens, dtype=np.int32).tofile(os.path.join(args.out_dir, "tokens.bin"))


if __name__ == "__main__":
    main()
