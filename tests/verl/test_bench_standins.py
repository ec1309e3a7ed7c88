"""bench/verl's stand-in for flash-attn's cross-entropy (flash_cross_entropy.py), which gives verl's engine in the GPU
benchmark the fused log-probs its users with flash-attn get: against float64 math, and through verl's own
logprobs_from_logits against verl's fallback (logprobs_from_logits_v2), values and gradients. Eager on the CPU; on
cuda (ENGINERY_VERL_DEVICE=cuda, the gpu entry) the same functions run compiled, as in the benchmark."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "verl"))
import flash_cross_entropy  # noqa: E402
from conftest import DEVICE  # noqa: E402

ROWS, VOCAB = 11, 37


def inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(ROWS, VOCAB, generator=g) * 3).to(dtype)
    labels = torch.randint(0, VOCAB, (ROWS,), generator=g)
    return logits.to(DEVICE), labels.to(DEVICE)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(flash_cross_entropy, "CHUNK_ROWS", 4)  # 11 rows: two whole chunks and a remainder


@pytest.mark.parametrize("dtype, inplace, compiled", [
    (torch.float32, False, False), (torch.float32, True, False), (torch.bfloat16, False, False),
    (torch.bfloat16, True, False),
    (torch.bfloat16, True, True),  # each chunk's math torch.compile'd, as on the GPU (there always)
])
def test_losses_and_gradients_match_float64(monkeypatch, dtype, inplace, compiled):
    if compiled:
        kernels = {}
        monkeypatch.setattr(flash_cross_entropy, "_kernel", lambda fn, on_cuda: kernels.setdefault(
            fn, torch.compile(fn, dynamic=True, fullgraph=True)))
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
    assert not compiled or len(kernels) == 2  # forward and backward both went through compiled functions


@pytest.mark.parametrize("inplace", [False, True])
def test_verl_takes_it_and_agrees_with_its_own_fallback(monkeypatch, inplace):
    from verl.utils import torch_functional as F
    monkeypatch.setattr(F, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", F.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE)
    monkeypatch.setattr(F, "cross_entropy_loss", getattr(F, "cross_entropy_loss", None), raising=False)
    logits, labels = inputs(torch.float32, seed=1)

    def logprobs_and_grad(fn):
        leaf = logits.clone().requires_grad_(True)
        out = fn(leaf * 1, labels)
        (out * torch.arange(ROWS, device=DEVICE)).sum().backward()
        return out.detach(), leaf.grad

    fallback = logprobs_and_grad(F.logprobs_from_logits_v2)
    calls = []
    original = flash_cross_entropy.cross_entropy_loss
    monkeypatch.setattr(flash_cross_entropy, "cross_entropy_loss", lambda *a, **k: calls.append(k) or original(*a, **k))
    flash_cross_entropy.register()
    fused = logprobs_and_grad(lambda x, y: F.logprobs_from_logits(x, y, inplace_backward=inplace))
    assert calls and calls[0]["inplace_backward"] == inplace  # verl's own dispatch chose the stand-in
    for a, b in zip(fused, fallback):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_what_verl_never_asks_for_is_refused_by_name():
    logits, labels = inputs(torch.float32)
    with pytest.raises(NotImplementedError, match="label_smoothing"):
        flash_cross_entropy.cross_entropy_loss(logits, labels, label_smoothing=0.1)
