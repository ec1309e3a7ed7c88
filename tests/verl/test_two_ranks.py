"""Two ranks under `torch.distributed.run --nproc-per-node 2` over Gloo, each with its rows of the PPO batch of
test_losses.py through verl's ppo_loss: the ranks' losses add up to the one-process torch + transformers loss of the
whole batch, and both report its grad norm (verl's loss times dp_size over the global token count, enginery's
gradients summed over ranks). Around the step, verl's shard export (two_rank_worker.py): the two ranks' pieces, and
the delta after the step, put together as verl's delta checkpoint engine does, are get_per_tensor_param's weights
bitwise (bf16) for every Hugging Face name, also with a flat-parameter engine and an HSDP one. With verl's
ulysses_sequence_parallel_size=2 (ulysses_worker.py) the two ranks are one sequence group sharing the whole batch,
and each reports the one-process loss and grad norm."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from test_losses import ppo_reference, reference_model


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_ranks(worker, tiny_model_dir, tmp_path):
    """`worker` on two Gloo ranks with the PPO batch's reference old log-probs; (reference loss, reference grad
    norm, each rank's result)."""
    old, loss, norm = ppo_reference(tiny_model_dir)
    torch.save(old, tmp_path / "old.pt")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), worker)
    run = subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-m", "torch.distributed.run", "--nnodes", "1",
                          "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                          worker, tiny_model_dir, str(tmp_path / "old.pt"), str(tmp_path / "result")],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return loss, norm, [json.loads((tmp_path / f"result.rank{k}.json").read_text()) for k in range(2)]


def test_two_gloo_ranks_equal_one_process(tiny_model_dir, tmp_path):
    loss, norm, ranks = run_two_ranks("two_rank_worker.py", tiny_model_dir, tmp_path)
    assert all(r["dp_size"] == 2 for r in ranks)
    # verl's loss multiplies by dp_size (FSDP averages gradients over ranks); per rank it is that rank's share.
    assert sum(sum(r["loss"]) for r in ranks) / 2 == pytest.approx(loss, rel=1e-5, abs=1e-6)
    for r in ranks:
        assert r["grad_norm"] == pytest.approx(norm, rel=1e-4)
    assert ranks[0]["checked"] == sorted(reference_model(tiny_model_dir).state_dict())
    assert ranks[0]["changed"] > 0
    assert ranks[0]["mismatches"] == []


def test_ulysses_sequence_group_equals_one_process(tiny_model_dir, tmp_path):
    """verl's ulysses_sequence_parallel_size=2 on two ranks: one sequence group (data-parallel size 1) whose ranks
    share the whole batch and split its tokens. Each reports the whole batch's loss (verl's loss times dp_size 1)
    and both the one-process grad norm; the first rank is the group's output rank, as in verl's engine."""
    loss, norm, ranks = run_two_ranks("ulysses_worker.py", tiny_model_dir, tmp_path)
    for r in ranks:
        assert (r["dp_size"], r["dp_group_size"]) == (1, 1)
        assert sum(r["loss"]) == pytest.approx(loss, rel=1e-5, abs=1e-6)
    assert ranks[0]["grad_norm"] == pytest.approx(norm, rel=1e-4)
    assert [r["output_rank"] for r in ranks] == [True, False]
