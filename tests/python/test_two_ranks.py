"""Two ranks launched as torch.distributed.run launches them, over Gloo, each driving its engine from Python with half the batch,
train as one process with the whole batch does: the engine takes the caller's process group, its losses sum to the
global token mean and every rank sees the same grad norm."""
import json
import math
import os
import socket
import subprocess
import sys

import enginery
import torch

import common

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "two_rank_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_process_steps():
    engine = enginery.new_engine("language_model", "fsdp", "cpu", common.CONFIG)
    engine.initialize()
    batch = common.parity_batch()
    outs = [engine.train_batch(batch, common.sft_loss) for _ in range(3)]
    return [float(out["loss"]) for out in outs], [out["grad_norm"] for out in outs]


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)


def launch_two_ranks(tmp_path, worker=WORKER):
    """Two ranks under torch.distributed.run; returns its exit code and the tail of its output."""
    port = str(free_port())
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", port, worker, str(tmp_path)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240)
    return run.returncode, run.stdout[-4000:] + run.stderr[-4000:]


def test_two_ranks_train_as_one(tmp_path):
    code, output = launch_two_ranks(tmp_path)
    assert code == 0, output
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert ranks[0]["grad_norms"] == ranks[1]["grad_norms"]  # one global norm
    assert (tmp_path / "global_step_3" / "metadata.json").exists()

    losses, grad_norms = one_process_steps()
    for step in range(3):
        assert close(ranks[0]["losses"][step] + ranks[1]["losses"][step], losses[step]), step
        assert close(ranks[0]["grad_norms"][step], grad_norms[step]), step
