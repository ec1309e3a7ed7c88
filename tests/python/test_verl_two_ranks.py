"""Two ranks, each with half of a verl batch, train through enginery.verl as one process with the whole batch: verl's
losses scale by dp_size because FSDP averages gradients, the adapter hands the engine (which sums them) the loss
divided by dp_size, so the grad norms agree and the ranks' mean reported loss is the one-process loss."""
import json
import math
import os

from test_two_ranks import launch_two_ranks

import test_verl_adapter
import verl_common

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_two_rank_worker.py")


def test_two_ranks_train_as_one(tmp_path):
    code, output = launch_two_ranks(tmp_path, WORKER)
    assert code == 0, output
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["size"], r["groups"]) for r in ranks] == [(0, 2, True), (1, 2, True)]
    assert ranks[0]["grad_norms"] == ranks[1]["grad_norms"]

    engine = test_verl_adapter.adapter()
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    for step in range(3):
        out = engine.train_batch(data, verl_common.sft_loss)
        engine.lr_scheduler_step()
        mean = (sum(ranks[0]["losses"][step]) + sum(ranks[1]["losses"][step])) / 2
        assert math.isclose(mean, sum(out["loss"]), rel_tol=1e-4, abs_tol=1e-6), step
        assert math.isclose(ranks[0]["grad_norms"][step], out["metrics"]["grad_norm"], rel_tol=1e-4), step
