#!/usr/bin/env python3
"""Records transformers' greedy generate() on the parity fixtures of tests/models (tests/data/models/hf_*), for
tests/models/test_generation.cpp (Generation.GreedyMatchesTransformersGenerate).

For each fixture model: prompts of mixed lengths, left-padded (pad id 0), generate(do_sample=False) for
MAX_NEW_TOKENS tokens with an eos id that the first prompt emits mid-way (so one sequence stops early and is padded
while the others go on). The same decoding is also run by hand with full forwards (no cache, explicit position ids
= attention-mask cumsum - 1, what enginery's model uses): the script fails if generate() disagrees with it, and
prints the smallest top-1 / top-2 logit margin so a near-tie (which fp32 rounding could flip) is visible.

Writes <fixture>/generate_greedy.json: {"prompts": [[...]], "responses": [[...]], "max_new_tokens", "eos_token_id",
"pad_token_id", "transformers_version", "torch_version"}; a response holds the generated ids up to and including
the first eos, without padding.

Usage: python3 scripts/gpu/make_generate_fixture.py [FIXTURES_DIR]   (default tests/data/models; CPU is enough)
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig

FIXTURES = ["hf_llama_gqa", "hf_qwen2_tied", "hf_qwen3_qknorm"]
PROMPT_LENGTHS = [5, 1, 9, 3]
MAX_NEW_TOKENS = 10
PAD = 0
EOS_STEP = 3  # the first prompt's token at this step becomes the eos id


def prompts_for(seed, vocab):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def left_pad(prompts):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


def trim(row, eos):
    out = []
    for t in row:
        out.append(int(t))
        if eos is not None and t == eos:
            break
    return out


@torch.no_grad()
def greedy_by_hand(model, ids, mask, eos):
    """Full forwards, no cache; finished rows get PAD with mask 0. Returns the responses and the smallest margin."""
    finished = torch.zeros(ids.shape[0], dtype=torch.bool)
    margin = float("inf")
    steps = []
    for _ in range(MAX_NEW_TOKENS):
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1].double()
        top2 = logits.topk(2, -1).values
        live = ~finished
        if live.any():
            margin = min(margin, (top2[live, 0] - top2[live, 1]).min().item())
        nxt = logits.argmax(-1).masked_fill(finished, PAD)
        steps.append(nxt)
        ids = torch.cat([ids, nxt[:, None]], 1)
        mask = torch.cat([mask, live.long()[:, None]], 1)
        if eos is not None:
            finished |= nxt == eos
        if finished.all():
            break
    gen = torch.stack(steps, 1)
    return [trim(r.tolist(), eos) for r in gen], margin


@torch.no_grad()
def hf_generate(model, ids, mask, eos):
    cfg = GenerationConfig(do_sample=False, max_new_tokens=MAX_NEW_TOKENS, eos_token_id=eos, pad_token_id=PAD,
                           num_beams=1)
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    return [trim(r.tolist(), eos) for r in out[:, ids.shape[1]:]]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join("tests", "data", "models")
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    failures = 0
    for seed, name in enumerate(FIXTURES, start=100):
        try:
            d = os.path.join(root, name)
            model = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager").float().eval()
            prompts = prompts_for(seed, model.config.vocab_size)
            ids, mask = left_pad(prompts)
            free, _ = greedy_by_hand(model, ids, mask, None)
            eos = free[0][EOS_STEP]
            expected, margin = greedy_by_hand(model, ids, mask, eos)
            got = hf_generate(model, ids, mask, eos)
            print(name, "eos", eos, "lengths", [len(r) for r in got], "smallest top-1/top-2 margin", margin,
                  flush=True)
            if got != expected:
                print(name, "MISMATCH: generate()", got, "full forwards", expected, flush=True)
                failures += 1
                continue
            if margin < 1e-3:
                print(name, "WARNING: a near-tie; fp32 rounding elsewhere may pick the other token", flush=True)
            with open(os.path.join(d, "generate_greedy.json"), "w") as f:
                json.dump({"transformers_version": transformers.__version__, "torch_version": torch.__version__,
                           "prompts": prompts, "responses": got, "max_new_tokens": MAX_NEW_TOKENS,
                           "eos_token_id": int(eos), "pad_token_id": PAD}, f)
            print(name, "wrote", os.path.join(d, "generate_greedy.json"), flush=True)
        except Exception:  # keep making the others; the failure is reported
            import traceback
            traceback.print_exc()
            failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
