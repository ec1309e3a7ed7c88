"""One rank of test_two_ranks.py's Ulysses test, started by torch.distributed.run over Gloo: an engine with verl's
ulysses_sequence_parallel_size=2 over the two ranks, so both are one sequence group holding the whole PPO batch of
test_losses.py (as verl's dispatch hands every rank of a group its data-parallel rank's rows), through verl's
ppo_loss and train_batch. Writes its losses, grad norm, data-parallel size and group size, and whether it is the
group's output rank to <out>.rank<k>.json. Usage: ulysses_worker.py MODEL_DIR INPUTS.pt OUT"""
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
data = test_losses.ppo_batch(torch.load(inputs))
from verl.utils import tensordict_utils as tu  # noqa: E402
tu.assign_non_tensor(data, global_batch_size=3)

from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

engine = test_losses.new_engine(
    model_dir, engine=test_losses.engine_config(strategy="enginery_fsdp2", mixed_precision=test_losses.FP32,
                                                ulysses_sequence_parallel_size=2),
    optim=test_losses.optimizer_config(lr=1e-4, clip_grad=1.0, total_training_steps=10))
engine.initialize()
config = ActorConfig(strategy="enginery_fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=2)
with engine.train_mode():
    result = engine.train_batch(data, partial(ppo_loss, config))

with open(f"{out}.rank{dist.get_rank()}.json", "w") as f:
    json.dump({"loss": result["loss"], "grad_norm": result["metrics"].get("grad_norm"),
               "dp_size": engine.get_data_parallel_size(),
               "dp_group_size": dist.get_world_size(engine.get_data_parallel_group()),
               "output_rank": engine.is_mp_src_rank_with_outputs()}, f)
dist.destroy_process_group()
