#!/usr/bin/env python3
"""Makes the qwen3_moe parity fixtures of tests/models/test_moe.cpp (tests/data/models/hf_qwen3_moe*).

Each fixture is a tiny random Qwen3MoeForCausalLM written with save_pretrained (config.json + safetensors, the
per-expert tensor names Hugging Face checkpoints use on disk) and expected.json with what transformers computes in
float64 from those weights, in the layout of tests/data/models/hf_* (scripts/gpu/make_model_fixtures.py):
log_probs[i][t] = log p(tokens[i][t+1] | tokens[i][0..t]) and the entropies, for token lists of mixed lengths.
hf_qwen3_moe also holds grads.safetensors: the float64 gradient (stored as float32) of
    sum over sequences and positions of (log_prob + 0.5 * entropy)
with respect to every parameter, and expected.json's "aux_loss": transformers' load_balancing_loss_func of fixed
router logits, with and without an attention mask.

Weights are drawn larger than transformers' default init so that routing, attention and the norms move the outputs
well beyond the test tolerance. Usage: python3 make_moe_fixtures.py OUT_DIR (CPU, torch + transformers 5.x).
"""
import json
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

TOKEN_LENGTHS = [7, 31, 2, 16]
VOCAB = 128
SIZES = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
             tie_word_embeddings=False, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
SPECS = {
    # Qwen3-30B-A3B's routing: renormalised top-k; layer 1 dense through mlp_only_layers.
    "hf_qwen3_moe": dict(seed=44, grads=True, kw=dict(norm_topk_prob=True, mlp_only_layers=[1])),
    # Top-k weights as the softmax gave them; layer 0 dense through decoder_sparse_step.
    "hf_qwen3_moe_sparse_step": dict(seed=55, grads=False, kw=dict(norm_topk_prob=False, decoder_sparse_step=2)),
}


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.2 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            elif name.startswith("lm_head"):
                p.copy_(r * 2.0 / math.sqrt(p.shape[-1]))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(r * 3.0 / math.sqrt(p.shape[-1]))  # confident, distinct routing
            else:
                p.copy_(r * 1.0 / math.sqrt(p.shape[-1]))


def sequence_outputs(model, seq):
    ids = torch.tensor([seq])
    logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
    lp = logp[:-1].gather(-1, ids[0, 1:, None])[:, 0]
    ent = -(logp.exp() * logp).sum(-1)[:-1]
    return lp, ent


def aux_loss_case(seed):
    g = torch.Generator().manual_seed(seed)
    b, t, e, k = 2, 5, SIZES["num_experts"], SIZES["num_experts_per_tok"]
    logits = [torch.randn(b * t, e, generator=g, dtype=torch.float64) for _ in range(2)]
    mask = torch.ones(b, t, dtype=torch.long)
    mask[0, :2] = 0
    mask[1, 4:] = 0
    return {"logits": [x.tolist() for x in logits], "mask": mask.tolist(), "num_experts": e, "top_k": k,
            "masked": load_balancing_loss_func(tuple(logits), e, k, mask).item(),
            "unmasked": load_balancing_loss_func(tuple(logits), e, k, None).item()}


def main():
    out = sys.argv[1]
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    for name, spec in SPECS.items():
        cfg = Qwen3MoeConfig(**SIZES, **spec["kw"])
        cfg._attn_implementation = "eager"
        torch.manual_seed(spec["seed"])
        model = Qwen3MoeForCausalLM(cfg).float().eval()
        randomize(model, spec["seed"])
        d = os.path.join(out, name)
        model.save_pretrained(d)
        os.remove(os.path.join(d, "generation_config.json"))  # nothing reads it; the dense fixtures have none
        # transformers picks torch._grouped_mm for the experts, which takes no float64: its own per-expert loop.
        model = Qwen3MoeForCausalLM.from_pretrained(d, attn_implementation="eager", experts_implementation="eager")
        model = model.double().eval()
        g = torch.Generator().manual_seed(spec["seed"])
        tokens = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in TOKEN_LENGTHS]
        lps, ents, loss = [], [], 0.0
        for seq in tokens:
            lp, ent = sequence_outputs(model, seq)
            lps.append(lp.tolist())
            ents.append(ent.tolist())
            loss = loss + (lp + 0.5 * ent).sum()
        expected = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
                    "tokens": tokens, "log_probs": lps, "entropy": ents}
        if spec["grads"]:
            loss.backward()
            grads = {}
            # The names on disk (per expert), as the fixture's safetensors and enginery's parameters have them.
            for pname, p in model.named_parameters():
                if pname.endswith("mlp.experts.gate_up_proj"):
                    base = pname.removesuffix("gate_up_proj")
                    gate, up = p.grad.chunk(2, dim=1)
                    for e in range(p.shape[0]):
                        grads[f"{base}{e}.gate_proj.weight"] = gate[e].contiguous()
                        grads[f"{base}{e}.up_proj.weight"] = up[e].contiguous()
                elif pname.endswith("mlp.experts.down_proj"):
                    base = pname.removesuffix("down_proj")
                    for e in range(p.shape[0]):
                        grads[f"{base}{e}.down_proj.weight"] = p.grad[e].contiguous()
                else:
                    grads[pname] = p.grad.contiguous()
            # float32 on disk (enginery reads no F64): 6e-8 relative rounding, far inside the test bar of 1e-6.
            save_file({k: v.float() for k, v in grads.items()}, os.path.join(d, "grads.safetensors"))
            expected["aux_loss"] = aux_loss_case(spec["seed"])
            print(name, "grad tensors", len(grads), flush=True)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(name, "files", sorted(os.listdir(d)), flush=True)


if __name__ == "__main__":
    main()
