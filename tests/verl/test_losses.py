"""verl's own losses (verl/workers/utils/losses.py) through enginery's train_batch, on batches built as verl builds
them, against a plain torch + transformers computation of the same step from the same weights (fp32, one
process): the loss each returns and the gradient norm before clipping.
- ppo_loss with verl's ActorConfig: DataProto -> to_tensordict -> left_right_2_no_padding, the loss reading the
  micro-batch TensorDict as verl's engine hands it (select(...).to_padded_tensor());
- sft_loss: the no-padding SFT layout of verl's SFT collator (nested input_ids, position_ids and loss_mask);
- value_loss with verl's CriticConfig on a value model (transformers' token classification, one label)."""
from functools import partial

import pytest
import torch
import transformers
import verl_batches
from conftest import engine_config, new_engine, optimizer_config

FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
PROMPTS = [[5, 9, 3], [7, 2], [11, 4, 6, 8]]
RESPONSES = [[12, 30, 7, 2], [40, 3], [9, 9, 21]]
ADVANTAGES = [1.0, -0.5, 0.25]


def fp32_engine(path):
    engine = new_engine(path, engine=engine_config(strategy="enginery_fsdp2", mixed_precision=FP32),
                        optim=optimizer_config(lr=1e-4, clip_grad=1.0, total_training_steps=10))
    engine.initialize()
    return engine


def reference_model(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                              attn_implementation="eager")
    model.train()
    return model


def grad_norm(model):
    return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None)).item()


def token_log_probs(model, ids):
    """log p(ids[t + 1] | ids[:t + 1]) for t = 0 .. n-2, one unpadded sequence at a time."""
    logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)


def ppo_batch(old_log_probs):
    return verl_batches.ppo_batch(PROMPTS, RESPONSES, old_log_probs, ADVANTAGES, micro_batch=2)


def ppo_reference(path):
    """The PPO step of the whole batch in torch + transformers: (old log-probs per row, loss, grad norm). Old
    log-probs are the model's own, so the ratio is 1 (inside the clip range): the loss is -sum(A * ratio) over the
    response tokens / their count, its gradient -A * grad log p."""
    model = reference_model(path)
    with torch.no_grad():
        old = [token_log_probs(model, p + r)[len(p) - 1:] for p, r in zip(PROMPTS, RESPONSES)]
    tokens = sum(map(len, RESPONSES))
    loss = sum((-(a * torch.exp(token_log_probs(model, p + r)[len(p) - 1:] - o))).sum()
               for p, r, a, o in zip(PROMPTS, RESPONSES, ADVANTAGES, old)) / tokens
    loss.backward()
    return old, loss.item(), grad_norm(model)


def test_ppo_loss_through_train_batch_equals_torch_and_transformers(tiny_model_dir):
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss
    old, loss, norm = ppo_reference(tiny_model_dir)
    engine = fp32_engine(tiny_model_dir)
    config = ActorConfig(strategy="enginery_fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=2)
    with engine.train_mode():
        out = engine.train_batch(ppo_batch(old), partial(ppo_loss, config))
    assert sum(out["loss"]) == pytest.approx(loss, rel=1e-5, abs=1e-6)
    assert out["metrics"]["grad_norm"] == pytest.approx(norm, rel=1e-4)


def test_sft_loss_through_train_batch_equals_torch_and_transformers(tiny_model_dir):
    from verl.workers.utils.losses import sft_loss
    model = reference_model(tiny_model_dir)
    # verl's SFT mask is aligned with input_ids: 1 on the response tokens, which are the targets.
    masks = [torch.tensor([0.0] * len(p) + [1.0] * len(r)) for p, r in zip(PROMPTS, RESPONSES)]
    total = sum(float(m.sum()) for m in masks)
    loss = -sum((token_log_probs(model, p + r) * m[1:]).sum() for p, r, m in zip(PROMPTS, RESPONSES, masks)) / total
    loss.backward()

    engine = fp32_engine(tiny_model_dir)
    with engine.train_mode():
        out = engine.train_batch(verl_batches.sft_batch(PROMPTS, RESPONSES, micro_batch=2), partial(sft_loss, config=None))
    assert sum(out["loss"]) == pytest.approx(loss.item(), rel=1e-5)
    assert out["metrics"]["grad_norm"] == pytest.approx(grad_norm(model), rel=1e-4)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_infer_batch_log_probs_and_entropy_equal_transformers(tiny_model_dir, temperature):
    """infer_batch on verl's PPO batch: log-probs (position t: token t + 1) and entropy of every token of each
    sequence, as verl's engine returns them (jagged, the batch's rows in order), against a transformers forward;
    at a temperature, those of logits / temperature, as verl's engine computes them."""
    from verl.utils import tensordict_utils as tu
    model = reference_model(tiny_model_dir)
    data = ppo_batch([torch.zeros(len(r)) for r in RESPONSES])
    tu.assign_non_tensor(data, calculate_entropy=True, temperature=temperature)
    engine = fp32_engine(tiny_model_dir)
    with engine.eval_mode():
        out = engine.infer_batch(data)["model_output"]
    with torch.no_grad():
        for row, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
            ids = p + r
            logits = model(torch.tensor([ids])).logits[0].float() / temperature
            log_softmax = torch.log_softmax(logits, -1)
            want_lp = log_softmax[:-1].gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
            want_entropy = -(log_softmax.exp() * log_softmax).sum(-1)
            got_lp = out["log_probs"][row]
            got_entropy = out["entropy"][row]
            assert got_lp.shape[0] == len(ids)
            assert torch.allclose(got_lp[:-1], want_lp, atol=1e-4), (got_lp, want_lp)
            assert torch.allclose(got_entropy[:-1], want_entropy[:-1], atol=1e-4)


def test_value_loss_through_train_batch_equals_torch_and_transformers(tiny_value_model_dir):
    """verl's value_loss on a value model: verl's critic values of response token j are the head's output at the
    position before it; with old values equal to the current ones the clip is inactive, and the loss is
    0.5 * sum((v - returns)^2) over response tokens / their count."""
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss
    model = transformers.AutoModelForTokenClassification.from_pretrained(tiny_value_model_dir, dtype=torch.float32,
                                                                         attn_implementation="eager")
    returns = [torch.linspace(-1.0, 1.0, len(r)) for r in RESPONSES]
    vpreds = [model(torch.tensor([p + r])).logits[0, len(p) - 1: len(p) + len(r) - 1, 0]
              for p, r in zip(PROMPTS, RESPONSES)]
    tokens = sum(map(len, RESPONSES))
    loss = 0.5 * sum(((v - g) ** 2).sum() for v, g in zip(vpreds, returns)) / tokens
    loss.backward()

    data = ppo_batch([torch.zeros(len(r)) for r in RESPONSES])
    width = data["response_mask"].shape[1]
    pad = lambda rows: torch.stack([torch.nn.functional.pad(t.detach(), (0, width - len(t))) for t in rows])  # noqa: E731
    data["values"] = pad(vpreds)
    data["returns"] = pad(returns)
    engine = new_engine(tiny_value_model_dir, model_type="value_model",
                        engine=engine_config(strategy="enginery_fsdp2", mixed_precision=FP32),
                        optim=optimizer_config(lr=1e-4, total_training_steps=10))
    engine.initialize()
    config = CriticConfig(strategy="enginery_fsdp2", ppo_micro_batch_size_per_gpu=2)
    with engine.train_mode():
        out = engine.train_batch(data, partial(value_loss, config))
    assert sum(out["loss"]) == pytest.approx(loss.item(), rel=1e-5)
    assert out["metrics"]["grad_norm"] == pytest.approx(grad_norm(model), rel=1e-4)
