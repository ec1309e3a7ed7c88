"""A GRPO-style step driven from Python: no sampling here, the responses and their rewards are given (a rollout
engine produced them). Group-normalised advantages, old log-probs from one forward, then a clipped policy-gradient
step on the C++ engine. Run after `make demo` or `pip install .` (the package's own plugins are loaded; a plugin
folder given as the first argument is searched first):
    .venv/bin/python examples/python/grpo_step.py
"""
import sys

import torch

import enginery

enginery.load_plugins(sys.argv[1:])
engine = enginery.new_engine("language_model", "fsdp", "cpu", {"model.path": "builtin:qwen2-tiny", "optim.lr": 1e-5,
                                                                "engine.mixed_precision.param_dtype": "fp32"})
engine.initialize()

# Two prompts, two responses each: [prompt | response] right-padded; targets are the response tokens.
group, prompt_len = 2, 4
tokens = torch.randint(0, 256, (4, 12), generator=torch.Generator().manual_seed(0))
attention = torch.ones(4, 12, dtype=torch.long)
attention[1, 10:] = 0
loss_mask = attention.float()
loss_mask[:, :prompt_len] = 0.0
rewards = torch.tensor([1.0, 0.0, 0.3, 0.9])

# GRPO: each response's advantage is its reward against its group's mean and spread.
by_group = rewards.view(-1, group)
advantages = ((by_group - by_group.mean(1, keepdim=True)) / (by_group.std(1, keepdim=True) + 1e-6)).view(-1)
batch = {"input_ids": tokens, "attention_mask": attention, "loss_mask": loss_mask,
         "advantages": advantages.unsqueeze(1).expand(4, 12).contiguous()}
batch["old_log_probs"] = engine.infer_batch(batch)["model_output"]["log_probs"]


def grpo_loss(model_output, data, ctx, clip=0.2):
    ratio = torch.exp(model_output["log_probs"] - data["old_log_probs"])
    adv = data["advantages"]
    per_token = -torch.minimum(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip))
    return (per_token * data["loss_mask"]).sum() / ctx.global_num_tokens, {}  # the global token mean


out = engine.train_batch(batch, grpo_loss)
print(f"loss {float(out['loss']):.4f}  grad_norm {out['grad_norm']:.4f}  lr {out['lr']:.2e}")
