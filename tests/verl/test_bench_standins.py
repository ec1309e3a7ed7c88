"""bench/verl's stand-in for flash-attn's cross-entropy (flash_cross_entropy.py), which gives verl's engine in the GPU
benchmark the fused log-probs its users with flash-attn get: against float64 math, through verl's own
logprobs_from_logits against verl's fallback (logprobs_from_logits_v2), values and gradients, and inside verl's own
fsdp2 engine (a PPO step and log-probs after it, against the same engine on its fallback). Eager on the CPU; on
cuda (ENGINERY_VERL_DEVICE=cuda, the gpu entry) the same functions run compiled, as in the benchmark."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "verl"))
import flash_cross_entropy  # noqa: E402
from conftest import DEVICE, model_config, new_engine, one_rank_group, optimizer_config  # noqa: E402

process_group = pytest.fixture(scope="module", autouse=True)(one_rank_group)

ROWS, VOCAB = 11, 37


def inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(ROWS, VOCAB, generator=g) * 3).to(dtype)
    labels = torch.randint(0, VOCAB, (ROWS,), generator=g)
    return logits.to(DEVICE), labels.to(DEVICE)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(flash_cross_entropy, "CHUNK_ROWS", 4)  # 11 rows: two whole chunks and a remainder


@pytest.fixture
def register_recorded(monkeypatch):
    """register() as the benchmark calls it, verl's two globals put back afterwards; returns a function that
    registers the stand-in and gives the list of its calls' keyword arguments."""
    from verl.utils import torch_functional as F
    monkeypatch.setattr(F, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", F.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE)
    monkeypatch.setattr(F, "cross_entropy_loss", getattr(F, "cross_entropy_loss", None), raising=False)

    def register():
        calls = []
        original = flash_cross_entropy.cross_entropy_loss
        monkeypatch.setattr(flash_cross_entropy, "cross_entropy_loss",
                            lambda *a, **k: calls.append(k) or original(*a, **k))
        flash_cross_entropy.register()
        return calls
    return register


@pytest.mark.parametrize("dtype, inplace, compiled", [
    (torch.float32, False, False), (torch.float32, True, False), (torch.bfloat16, False, False),
    (torch.bfloat16, True, False),
    (torch.bfloat16, True, True),  # each chunk's math torch.compile'd, as on the GPU (there always)
])
def test_losses_and_gradients_match_float64(monkeypatch, dtype, inplace, compiled):
    compiled_fns = []
    if compiled:
        monkeypatch.setattr(flash_cross_entropy, "_kernel",
                            lambda fn, on_cuda: compiled_fns.append(fn) or flash_cross_entropy._compile(fn))
    logits, labels = inputs(dtype)
    labels[5] = -100  # ignored: loss 0, no gradient
    leaf = logits.clone().requires_grad_(True)
    x = leaf * 1  # a non-leaf, as verl's logits are: the in-place backward writes into it
    losses, z = flash_cross_entropy.cross_entropy_loss(x, labels, inplace_backward=inplace)
    weights = torch.linspace(0.5, 2.0, ROWS, device=DEVICE)
    (losses * weights).sum().backward()

    ref = logits.double().requires_grad_(True)
    safe = labels.clamp(min=0)
    ref_losses = (torch.logsumexp(ref, -1) - ref.gather(1, safe[:, None]).squeeze(1)) * (labels != -100)
    (ref_losses * weights.double()).sum().backward()
    assert losses.dtype == torch.float32 and z.abs().sum() == 0
    torch.testing.assert_close(losses.double(), ref_losses.detach(), rtol=1e-6, atol=1e-6)
    assert losses[5] == 0 and leaf.grad[5].abs().sum() == 0
    tol = 1e-6 if dtype == torch.float32 else 1e-2  # the gradient is written in the logits' dtype
    torch.testing.assert_close(leaf.grad.double(), ref.grad, rtol=tol, atol=tol)
    assert len(compiled_fns) == (2 if compiled else 0)  # forward and backward both through compiled functions


@pytest.mark.parametrize("inplace", [False, True])
def test_verl_takes_it_and_agrees_with_its_own_fallback(register_recorded, inplace):
    from verl.utils import torch_functional as F
    logits, labels = inputs(torch.float32, seed=1)

    def logprobs_and_grad(fn):
        leaf = logits.clone().requires_grad_(True)
        out = fn(leaf * 1, labels)
        (out * torch.arange(ROWS, device=DEVICE)).sum().backward()
        return out.detach(), leaf.grad

    fallback = logprobs_and_grad(F.logprobs_from_logits_v2)
    calls = register_recorded()
    fused = logprobs_and_grad(lambda x, y: F.logprobs_from_logits(x, y, inplace_backward=inplace))
    assert calls and calls[0]["inplace_backward"] == inplace  # verl's own dispatch chose the stand-in
    for a, b in zip(fused, fallback):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_verls_own_engine_steps_through_it_as_through_its_fallback(tiny_model_dir, register_recorded):
    """verl's fsdp2 engine, PPO train_batch then infer_batch, with the stand-in registered as the benchmark does:
    verl's engine calls it with its logits, asking for the in-place backward in training, and its autograd graph
    takes the gradient written into the logits. In fp32 the loss, grad norm and log-probs after the step equal
    those of verl's own per-token fallback (the stand-in unregistered)."""
    from functools import partial

    from test_losses import ADVANTAGES, FP32, PROMPTS, RESPONSES
    from verl.workers.config import ActorConfig, FSDPEngineConfig
    from verl.workers.utils.losses import ppo_loss

    import verl_batches
    old = [torch.full((len(r),), -4.0) for r in RESPONSES]  # the ratio away from 1: the loss depends on the log-probs

    def step():
        engine = new_engine(tiny_model_dir, backend="fsdp2", model=model_config(tiny_model_dir, use_remove_padding=True),
                            engine=FSDPEngineConfig(strategy="fsdp2", fsdp_size=1, forward_only=False,
                                                    mixed_precision=FP32, use_torch_compile=False),
                            optim=optimizer_config(lr=1e-3, total_training_steps=4))
        engine.initialize()
        batch = verl_batches.ppo_batch(PROMPTS, RESPONSES, old, ADVANTAGES, micro_batch=1)  # verl's: rows % 1
        config = ActorConfig(strategy="fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
        with engine.train_mode():
            out = engine.train_batch(batch.to(DEVICE), partial(ppo_loss, config))
        with engine.eval_mode():
            after = engine.infer_batch(verl_batches.ppo_batch(PROMPTS, RESPONSES, old, ADVANTAGES,
                                                              micro_batch=1).to(DEVICE))["model_output"]
        return out, [after["log_probs"][row].cpu() for row in range(len(PROMPTS))]

    fallback, fallback_after = step()
    calls = register_recorded()
    fused, fused_after = step()
    assert [c["inplace_backward"] for c in calls] == [True] * 6  # 3 micro-batches of training, then 3 of infer
    assert fused["loss"] == pytest.approx(fallback["loss"], rel=1e-5)
    assert fused["metrics"]["grad_norm"] == pytest.approx(fallback["metrics"]["grad_norm"], rel=1e-5)
    assert fallback["metrics"]["grad_norm"] > 0
    for a, b in zip(fused_after, fallback_after):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_what_verl_never_asks_for_is_refused_by_name():
    logits, labels = inputs(torch.float32)
    with pytest.raises(NotImplementedError, match="label_smoothing"):
        flash_cross_entropy.cross_entropy_loss(logits, labels, label_smoothing=0.1)
