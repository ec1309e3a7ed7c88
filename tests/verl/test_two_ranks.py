"""Two ranks under `torch.distributed.run --nproc-per-node 2` over Gloo, each with its rows of the PPO batch of
test_losses.py through verl's ppo_loss: the ranks' losses add up to the one-process torch + transformers loss of the
whole batch, and both report its grad norm (verl's loss times dp_size over the global token count, enginery's
gradients summed over ranks)."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from test_losses import ADVANTAGES, PROMPTS, RESPONSES, grad_norm, reference_model, token_log_probs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_equal_one_process(tiny_model_dir, tmp_path):
    model = reference_model(tiny_model_dir)
    sequences = [p + r for p, r in zip(PROMPTS, RESPONSES)]
    with torch.no_grad():
        old = [token_log_probs(model, s)[len(p) - 1:] for s, p in zip(sequences, PROMPTS)]
    tokens = sum(map(len, RESPONSES))
    loss = sum((-(a * torch.exp(token_log_probs(model, s)[len(p) - 1:] - o))).sum()
               for s, p, a, o in zip(sequences, PROMPTS, ADVANTAGES, old)) / tokens
    loss.backward()
    torch.save(old, tmp_path / "old.pt")

    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "two_rank_worker.py")
    run = subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-m", "torch.distributed.run", "--nnodes", "1",
                          "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                          worker, tiny_model_dir, str(tmp_path / "old.pt"), str(tmp_path / "result")],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"result.rank{k}.json").read_text()) for k in range(2)]
    assert all(r["dp_size"] == 2 for r in ranks)
    # verl's loss multiplies by dp_size (FSDP averages gradients over ranks); per rank it is that rank's share.
    assert sum(sum(r["loss"]) for r in ranks) / 2 == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    for r in ranks:
        assert r["grad_norm"] == pytest.approx(grad_norm(model), rel=1e-4)
