"""One rank of test_two_ranks.py, started by `python3 -m torch.distributed.run --nproc_per_node 2`: trains its
half of the parity batch over the Gloo group the launcher's environment describes, saves a checkpoint together
with the other rank, and writes what it saw to <out_dir>/rank<r>.json."""
import json
import os
import sys

import torch.distributed as dist

import enginery

import common


def main(out_dir):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    common.require_plugins()
    engine = enginery.new_engine("language_model", "fsdp", "cpu", common.CONFIG)
    engine.initialize()
    half = common.rows(common.parity_batch(), 2 * rank, 2 * rank + 2)
    losses, grad_norms = [], []
    with engine.train_mode():
        for _ in range(3):
            out = engine.train_batch(half, common.sft_loss)
            losses.append(float(out["loss"]))
            grad_norms.append(out["grad_norm"])
    engine.save_checkpoint(os.path.join(out_dir, "global_step_3"), 3)
    report = {"rank": engine.get_data_parallel_rank(), "size": engine.get_data_parallel_size(),
              "losses": losses, "grad_norms": grad_norms}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
