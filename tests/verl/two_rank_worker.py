"""One rank of test_two_ranks.py, started by torch.distributed.run over Gloo: verl's ppo_loss through train_batch on
this rank's rows of the test's PPO batch (rank 0: rows 0-1, rank 1: row 2). Writes its losses and grad norm to
<out>.rank<k>.json. Usage: two_rank_worker.py MODEL_DIR INPUTS.pt OUT"""
import json
import os
import sys
from functools import partial

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_losses  # noqa: E402

model_dir, inputs, out = sys.argv[1:4]
dist.init_process_group("gloo")
rank = dist.get_rank()
rows = [0, 1] if rank == 0 else [2]
old = torch.load(inputs)
test_losses.PROMPTS[:] = [test_losses.PROMPTS[i] for i in rows]
test_losses.RESPONSES[:] = [test_losses.RESPONSES[i] for i in rows]
test_losses.ADVANTAGES[:] = [test_losses.ADVANTAGES[i] for i in rows]
data = test_losses.ppo_batch([old[i] for i in rows])
from verl.utils import tensordict_utils as tu  # noqa: E402
tu.assign_non_tensor(data, global_batch_size=3)

from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402
engine = test_losses.fp32_engine(model_dir)
config = ActorConfig(strategy="enginery_fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=2)
with engine.train_mode():
    result = engine.train_batch(data, partial(ppo_loss, config))
with open(f"{out}.rank{rank}.json", "w") as f:
    json.dump({"loss": result["loss"], "grad_norm": result["metrics"]["grad_norm"],
               "dp_size": engine.get_data_parallel_size()}, f)
dist.destroy_process_group()
