#!/usr/bin/env python3
"""What fusing a decoder layer's projections would save (issue 20, "fewer, larger GEMMs"), measured before building
it: per shape, the bf16 GEMMs of the q/k/v projections and of the gate/up projections as the engine runs them (one
GEMM per weight: forward, input gradient, weight gradient) against one GEMM over the concatenated weights, at the
bench's tokens per micro-batch (2 x 4096). The input-gradient sum of separate GEMMs (autograd adds them) is counted
as the engine pays it. Prints a table of milliseconds per layer and per step (x layers); writes nothing else.

Usage: python3 bench/gpu/gemm_fusion_probe.py [--shapes 0.5B 1.5B 3B] [--tokens 8192] [--iters 50]
"""
import argparse

import torch

from reference_fsdp2 import SHAPES


def time_ms(fn, iters):
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def projections(x, weights, grad_outs):
    """Forward, input gradient and weight gradients of y_i = x @ w_i^T, one GEMM per weight."""
    for w in weights:
        torch.mm(x, w.t())
    dx = None
    for w, g in zip(weights, grad_outs):
        d = torch.mm(g, w)
        dx = d if dx is None else dx.add_(d)
    for g in grad_outs:
        torch.mm(g.t(), x)


def probe(shape, tokens, iters):
    s = SHAPES[shape]
    hidden, inter = s["hidden_size"], s["intermediate_size"]
    head_dim = hidden // s["num_attention_heads"]
    kv = s["num_key_value_heads"] * head_dim
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.randn(tokens, hidden, **bf16)
    rows = {}
    for group, outs in (("q/k/v", [hidden, kv, kv]), ("gate/up", [inter, inter])):
        weights = [torch.randn(n, hidden, **bf16) * 0.02 for n in outs]
        grads = [torch.randn(tokens, n, **bf16) for n in outs]
        fused_w = torch.cat(weights)
        fused_g = torch.cat(grads, dim=1)
        separate = time_ms(lambda: projections(x, weights, grads), iters)
        fused = time_ms(lambda: projections(x, [fused_w], [fused_g]), iters)
        rows[group] = (separate, fused)
    return s["num_hidden_layers"], rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=["0.5B", "1.5B", "3B"])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--iters", type=int, default=50)
    a = parser.parse_args()
    print(f"GEMMs of one micro-batch ({a.tokens} tokens), bf16, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape | group | separate ms/layer | fused ms/layer | saved ms/step (x layers) | fused / separate |")
    print("|---|---|---|---|---|---|")
    for shape in a.shapes:
        layers, rows = probe(shape, a.tokens, a.iters)
        for group, (separate, fused) in rows.items():
            print(f"| {shape} | {group} | {separate:.3f} | {fused:.3f} | {(separate - fused) * layers:.2f} | "
                  f"{fused / separate:.3f} |")


if __name__ == "__main__":
    main()
