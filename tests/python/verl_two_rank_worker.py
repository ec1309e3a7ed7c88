"""One rank of test_verl_two_ranks.py: drives enginery.verl's engine with its half of the verl batch over the Gloo
group torch.distributed.run's environment describes, with verl's SFT loss, and writes what it saw to
<out_dir>/rank<r>.json."""
import json
import os
import sys

import torch.distributed as dist

import common
import test_verl_adapter
import verl_common


def main(out_dir):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    engine = test_verl_adapter.adapter()
    prompts, responses = verl_common.sequences()
    half = slice(2 * rank, 2 * rank + 2)
    data = verl_common.verl_batch(prompts[half], responses[half])
    groups = []

    def loss_function(model_output, data, dp_group):
        groups.append(dp_group is dist.group.WORLD and data["dp_size"] == 2)
        return verl_common.sft_loss(model_output, data, dp_group)

    losses, grad_norms = [], []
    with engine.train_mode():
        for _ in range(3):
            out = engine.train_batch(data, loss_function)
            engine.lr_scheduler_step()
            losses.append(out["loss"])
            grad_norms.append(out["metrics"]["grad_norm"])
    report = {"rank": engine.get_data_parallel_rank(), "size": engine.get_data_parallel_size(), "losses": losses,
              "grad_norms": grad_norms, "groups": all(groups)}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    common.require_plugins()
    main(sys.argv[1])
