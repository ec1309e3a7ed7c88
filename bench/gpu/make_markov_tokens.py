#!/usr/bin/env python3
"""Writes a learnable int32 token file (the bench's .bin layout) for loss-curve comparisons: a first-order Markov
chain over the first --used ids of the vocabulary, each id followed by one of --successors fixed ids chosen
uniformly. A model can bring its loss from ln(vocab) down towards ln(successors), so a precision change that hurts
learning shows in 50 steps; random tokens (make_bench_inputs.py) only measure speed."""
import argparse

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=50 * 2 * 4096)
    ap.add_argument("--used", type=int, default=4096)
    ap.add_argument("--successors", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    table = rng.integers(0, args.used, size=(args.used, args.successors))
    picks = rng.integers(0, args.successors, size=args.tokens)
    out = np.empty(args.tokens, dtype=np.int32)
    t = int(rng.integers(0, args.used))
    for i in range(args.tokens):
        out[i] = t
        t = table[t, picks[i]]
    out.tofile(args.out)


if __name__ == "__main__":
    main()
