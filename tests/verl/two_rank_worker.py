"""One rank of test_two_ranks.py, started by torch.distributed.run over Gloo: verl's ppo_loss through train_batch on
this rank's rows of the test's PPO batch (rank 0: rows 0-1, rank 1: row 2), with verl's shard export around the
step (verl_shards.py puts the pieces together on rank 0 as verl's delta checkpoint engine does): the pieces before
the step, then the delta after it, against get_per_tensor_param; and the pieces of a flat-parameter engine
(enginery_fsdp) and of an HSDP one (fsdp_size 1: two replicas). Writes its losses, grad norm and (rank 0) the
names checked and any mismatch to <out>.rank<k>.json. Usage: two_rank_worker.py MODEL_DIR INPUTS.pt OUT"""
import json
import os
import sys
from functools import partial

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_losses  # noqa: E402
import verl_shards  # noqa: E402

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
mismatches = []


def check_shards(label, engine, want):
    """The pieces of `engine` (bf16) put together on rank 0 against `want` ({name: fp32 tensor})."""
    got = verl_shards.gather_shards(engine.get_per_tensor_param_shard())
    if rank == 0:
        mismatches.extend(f"{label}: {name}" for name in set(want) ^ set(got))
        mismatches.extend(f"{label}: {name}" for name in set(want) & set(got)
                          if not torch.equal(got[name], want[name].to(torch.bfloat16)))


engine = test_losses.fp32_engine(model_dir)
initial = dict(engine.get_per_tensor_param()[0])
check_shards("fsdp2 pieces", engine, initial)
engine.prime_delta_snapshots()
config = ActorConfig(strategy="enginery_fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=2)
with engine.train_mode():
    result = engine.train_batch(data, partial(ppo_loss, config))
trained = dict(engine.get_per_tensor_param()[0])
seed = {name: tensor.to(torch.bfloat16) for name, tensor in initial.items()}
before = {name: tensor.clone() for name, tensor in seed.items()}
changed = verl_shards.apply_delta(engine.get_per_tensor_param_delta_shard(), seed)
if rank == 0:
    mismatches.extend(f"delta: {name}" for name, tensor in trained.items()
                      if not torch.equal(seed[name], tensor.to(torch.bfloat16))
                      or not torch.equal(changed[name], verl_shards.changed_positions(before[name], seed[name])))

for label, fields in (("fsdp (flat) pieces", {"strategy": "enginery_fsdp"}),
                      ("hsdp pieces", {"strategy": "enginery_fsdp2", "fsdp_size": 1})):
    other = test_losses.new_engine(model_dir, backend=fields["strategy"], engine=test_losses.engine_config(
        mixed_precision=test_losses.FP32, **fields), optim=test_losses.optimizer_config(total_training_steps=10))
    other.initialize()
    check_shards(label, other, dict(other.get_per_tensor_param()[0]))

with open(f"{out}.rank{rank}.json", "w") as f:
    json.dump({"loss": result["loss"], "grad_norm": result["metrics"]["grad_norm"],
               "dp_size": engine.get_data_parallel_size(), "checked": sorted(trained) if rank == 0 else [],
               "changed": sum(len(c) for c in changed.values()) if rank == 0 else 0, "mismatches": mismatches}, f)
dist.destroy_process_group()
