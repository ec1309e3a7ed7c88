"""What the Python tests share: the engine configuration, the batch (the same integer formula as
reference_steps.cpp's parity_batch), and the losses written in Python."""
import os

import torch

PLUGIN_DIR = os.environ.get("ENGINERY_PLUGIN_DIR", "")

# The built-in tiny Qwen2 in fp32 (no autocast on CPU), two micro-batches of two rows, plain AdamW.
CONFIG = {
    "model.path": "builtin:qwen2-tiny",
    "engine.micro_batch_size_per_gpu": 2,
    "engine.mixed_precision.param_dtype": "fp32",
    "optim.lr": 1e-2,
    "optim.weight_decay": 0.0,
}


def parity_batch():
    """4 rows of 16 tokens; row 1 ends in 4 padding tokens; every other position but 0 is a target."""
    ids = (torch.arange(4).unsqueeze(1) * 7 + torch.arange(16).unsqueeze(0) * 3 + 1).remainder(256)
    attention = torch.ones(4, 16, dtype=torch.long)
    attention[1, 12:] = 0
    loss_mask = attention.to(torch.float)
    loss_mask[:, 0] = 0.0
    return {"input_ids": ids, "attention_mask": attention, "loss_mask": loss_mask}


def rows(batch, begin, end):
    return {name: value[begin:end] if isinstance(value, torch.Tensor) else value for name, value in batch.items()}


def sft_loss(model_output, data, ctx):
    """trainer/loop/losses.cpp's sft_loss, op for op, so the two paths agree bit for bit."""
    log_probs = model_output["log_probs"]
    mask = data["loss_mask"].to(log_probs.dtype)
    return -(log_probs * mask).sum() / ctx.global_num_tokens, {}


def require_plugins():
    import enginery
    assert PLUGIN_DIR, "ENGINERY_PLUGIN_DIR is not set (ctest sets it to <build>/plugins)"
    enginery.load_plugins(PLUGIN_DIR)
