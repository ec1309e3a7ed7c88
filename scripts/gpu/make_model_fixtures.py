#!/usr/bin/env python3
"""Makes the transformers parity fixtures of tests/models (tests/data/models/hf_*).

Each fixture is a tiny random model written with save_pretrained (config.json + safetensors) and expected.json with
the per-token log-probs and entropies transformers computes for fixed token lists of mixed lengths, in the layout of
`enginery logprobs`: log_probs[i][t] = log p(tokens[i][t+1] | tokens[i][0..t]), t = 0 .. len-2.

Weights are drawn larger than transformers' default init (std 0.02) so that attention, RoPE (and the llama3
scaling) and the norms change the outputs well beyond the test tolerance; the script prints how much the outputs
move when the rope scaling is dropped, to show the fixture can tell the difference.

Usage: python3 make_model_fixtures.py OUT_DIR   (run on a machine with torch + transformers 5.x; CPU is enough)
"""
import json
import math
import os
import sys

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

TOKEN_LENGTHS = [7, 40, 2, 23, 13]
VOCAB = 128


def token_lists(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in TOKEN_LENGTHS]


def make_config(cls, rope, **kw):
    """rope: dict in the transformers-5 rope_parameters form (rope_type, rope_theta, ...)."""
    try:
        cfg = cls(rope_parameters=dict(rope), **kw)
    except TypeError:
        cfg = None
    rp = getattr(cfg, "rope_parameters", None) if cfg is not None else None
    if not isinstance(rp, dict) or rp.get("rope_type") != rope["rope_type"]:
        # Older transformers: long-standing keys.
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        cfg = cls(rope_theta=rope["rope_theta"], rope_scaling=None if rope["rope_type"] == "default" else scaling,
                  **kw)
    try:
        cfg._attn_implementation = "eager"
    except Exception:  # a read-only property in some versions: the default kernel is fine for fp32 CPU
        pass
    return cfg


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * r)
            elif name.endswith("bias"):
                p.copy_(0.3 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            elif name.startswith("lm_head"):
                p.copy_(r * 2.0 / math.sqrt(p.shape[1]))
            else:
                p.copy_(r * 1.0 / math.sqrt(p.shape[1]))


@torch.no_grad()
def per_sequence(model, tokens):
    lps, ents = [], []
    for seq in tokens:
        ids = torch.tensor([seq])
        logits = model(input_ids=ids).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        lp = logp[:-1].gather(-1, ids[0, 1:, None])[:, 0]
        ent = -(logp.exp() * logp).sum(-1)[:-1]
        lps.append(lp.tolist())
        ents.append(ent.tolist())
    return lps, ents


@torch.no_grad()
def padded(model, tokens, side):
    T = max(len(s) for s in tokens)
    ids = torch.zeros(len(tokens), T, dtype=torch.long)
    mask = torch.zeros(len(tokens), T, dtype=torch.long)
    for i, s in enumerate(tokens):
        if side == "left":
            ids[i, T - len(s):] = torch.tensor(s)
            mask[i, T - len(s):] = 1
        else:
            ids[i, :len(s)] = torch.tensor(s)
            mask[i, :len(s)] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.double()
    logp = torch.log_softmax(logits, -1)
    lps, ents = [], []
    for i, s in enumerate(tokens):
        start = T - len(s) if side == "left" else 0
        lp = logp[i, start:start + len(s) - 1]
        nxt = ids[i, start + 1:start + len(s)]
        lps.append(lp.gather(-1, nxt[:, None])[:, 0].tolist())
        ents.append((-(lp.exp() * lp).sum(-1)).tolist())
    return lps, ents


def max_diff(a, b):
    return max((abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)), default=0.0)


SPECS = {
    # GQA (4 query heads, 2 kv heads), llama3 rope scaling with all three frequency bands hit, untied head,
    # checkpoint sharded by transformers.
    "hf_llama_gqa": dict(
        cls=LlamaConfig, model=LlamaForCausalLM, seed=11, shard="40KB",
        rope={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        kw=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False)),
    # qkv bias, tied embeddings, GQA.
    "hf_qwen2_tied": dict(
        cls=Qwen2Config, model=Qwen2ForCausalLM, seed=22, shard=None,
        rope={"rope_type": "default", "rope_theta": 1000000.0},
        kw=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    # q/k norm, head_dim 16 != hidden 32 / 4 heads, untied.
    "hf_qwen3_qknorm": dict(
        cls=Qwen3Config, model=Qwen3ForCausalLM, seed=33, shard=None,
        rope={"rope_type": "default", "rope_theta": 10000.0},
        kw=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
                tie_word_embeddings=False)),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    failures = 0
    for name, spec in SPECS.items():
        try:
            torch.manual_seed(spec["seed"])
            cfg = make_config(spec["cls"], spec["rope"], **spec["kw"])
            model = spec["model"](cfg).float().eval()
            randomize(model, spec["seed"])
            tokens = token_lists(spec["seed"])
            lps, ents = per_sequence(model, tokens)
            d = os.path.join(out, name)
            if spec["shard"]:
                model.save_pretrained(d, max_shard_size=spec["shard"])
            else:
                model.save_pretrained(d)
            # Reload what was written: the fixture must reproduce the recorded values through transformers too.
            again = spec["model"].from_pretrained(d, attn_implementation="eager").float().eval()
            lps2, _ = per_sequence(again, tokens)
            print(name, "reload max diff", max_diff(lps, lps2), flush=True)
            for side in ("left", "right"):
                pl, pe = padded(model, tokens, side)
                print(name, side, "padding max diff logp", max_diff(lps, pl), "entropy", max_diff(ents, pe),
                      flush=True)
            if spec["rope"]["rope_type"] != "default":
                plain = make_config(spec["cls"], {"rope_type": "default", "rope_theta": spec["rope"]["rope_theta"]},
                                    **spec["kw"])
                m2 = spec["model"](plain).float().eval()
                m2.load_state_dict(model.state_dict())
                l3, _ = per_sequence(m2, tokens)
                print(name, "sensitivity to rope scaling: max diff", max_diff(lps, l3), flush=True)
            mean_ent = sum(sum(e) for e in ents) / sum(len(e) for e in ents)
            print(name, "mean entropy", mean_ent, "log(V)", math.log(VOCAB), flush=True)
            with open(os.path.join(d, "expected.json"), "w") as f:
                json.dump({"transformers_version": transformers.__version__, "torch_version": torch.__version__,
                           "tokens": tokens, "log_probs": lps, "entropy": ents}, f)
            print(name, "files", sorted(os.listdir(d)), flush=True)
            print(name, "config.json", open(os.path.join(d, "config.json")).read(), flush=True)
        except Exception as e:  # keep making the others; the failure is reported
            import traceback
            traceback.print_exc()
            failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
