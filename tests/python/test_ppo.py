"""A PPO clipped policy loss written in Python (verl's compute_policy_loss_vanilla, without the dual clip) trains
the C++ model: old log-probs from infer_batch, fixed advantages, and the loss falls."""
import enginery
import torch

import common


def ppo_loss(clip_ratio):
    def loss_fn(model_output, data, ctx):
        log_probs = model_output["log_probs"]
        mask = data["loss_mask"].to(log_probs.dtype)
        ratio = torch.exp((log_probs - data["old_log_probs"]).clamp(-20.0, 20.0))
        advantages = data["advantages"]
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio)
        loss = (torch.maximum(unclipped, clipped) * mask).sum() / ctx.global_num_tokens
        clipfrac = ((clipped > unclipped).to(mask.dtype) * mask).sum() / mask.sum().clamp_min(1.0)
        return loss, {"pg_clipfrac": clipfrac.detach(), "micro_batches": ctx.num_micro_batches}
    return loss_fn


def test_python_ppo_loss_trains():
    # Nested tables, as verl's configs come, read like the dotted keys.
    config = {"model": {"path": "builtin:qwen2-tiny"}, "engine": {"micro_batch_size_per_gpu": 2,
              "mixed_precision": {"param_dtype": "fp32"}}, "optim": {"lr": 3e-3, "weight_decay": 0.0}}
    engine = enginery.new_engine("language_model", "fsdp", "cpu", config)
    engine.initialize()
    batch = common.parity_batch()
    with engine.eval_mode():
        assert not engine.is_training
        old = engine.infer_batch(batch)["model_output"]["log_probs"]
    assert engine.is_training  # the previous mode is back
    assert old.shape == batch["input_ids"].shape and not old.requires_grad
    batch["old_log_probs"] = old
    batch["advantages"] = torch.tensor([1.0, 1.0, -1.0, -1.0]).unsqueeze(1).expand(4, 16).contiguous()
    batch["temperature"] = 1.0  # non-tensor metadata travels with the batch

    losses = []
    with engine.train_mode():
        for _ in range(5):
            out = engine.train_batch(batch, ppo_loss(0.2))
            losses.append(float(out["loss"]))
            assert set(out["metrics"]) == {"pg_clipfrac", "micro_batches"}
            assert float(out["metrics"]["micro_batches"]) == 2.0
    # Falls, until the ratios reach the clip range where the loss flattens out.
    assert losses[1] < losses[0] and losses[-1] < losses[0] - 0.01, losses
