#!/usr/bin/env python3
"""Checks that a Hugging Face directory exported by enginery loads in transformers and gives the same log-probs.

Inputs: the exported directory (config.json + safetensors, e.g. <run>/global_step_N/actor/huggingface), the token
file given to `enginery logprobs --tokens` (a JSON list of token-id lists) and the file `enginery logprobs --out`
wrote for that directory ({"log_probs": [[...]], ...} with log_probs[i][t] = log p(tokens[i][t+1] | tokens[i][:t+1])).
transformers recomputes the same values in fp32 (TF32 off) and the script compares them elementwise.

Prints PASS or FAIL with the largest difference; exits 0 on PASS, 1 on FAIL, 2 on bad input.

Usage: python3 check_hf_export.py HF_DIR TOKENS_JSON LOGPROBS_JSON [--atol 1e-4] [--device cuda|cpu]
"""
import argparse
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("tokens")
    ap.add_argument("logprobs")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(a.tokens) as f:
        tokens = json.load(f)
    with open(a.logprobs) as f:
        expected = json.load(f)["log_probs"]
    if len(expected) != len(tokens):
        print(f"FAIL: {a.logprobs} has {len(expected)} sequences, {a.tokens} has {len(tokens)}")
        return 2

    model = AutoModelForCausalLM.from_pretrained(a.hf_dir, dtype=torch.float32).to(a.device).eval()
    worst = 0.0
    failed = []
    with torch.no_grad():
        for i, seq in enumerate(tokens):
            if len(expected[i]) != len(seq) - 1:
                print(f"FAIL: sequence {i}: {len(expected[i])} log-probs for {len(seq)} tokens")
                return 2
            if len(seq) < 2:
                continue
            ids = torch.tensor([seq], device=a.device)
            logits = model(input_ids=ids).logits[0].double()
            logp = torch.log_softmax(logits, -1)
            got = logp[:-1].gather(-1, ids[0, 1:, None])[:, 0].cpu()
            diff = (got - torch.tensor(expected[i], dtype=torch.float64)).abs().max().item()
            worst = max(worst, diff)
            if not diff <= a.atol:  # also catches NaN
                failed.append((i, diff))
    n = sum(max(len(s) - 1, 0) for s in tokens)
    if failed:
        print(f"FAIL: {len(failed)} of {len(tokens)} sequences differ by more than {a.atol} "
              f"(first: sequence {failed[0][0]}, {failed[0][1]:.3g}); max |diff| {worst:.3g} over {n} tokens")
        return 1
    print(f"PASS: {len(tokens)} sequences, {n} tokens, max |log-prob diff| {worst:.3g} <= {a.atol} "
          f"(transformers on {a.device} vs enginery logprobs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
