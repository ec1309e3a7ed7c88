"""verl's TrainingWorker and CheckpointHandler driving enginery, as verl's SFT trainer drives them (SPMD, no Ray),
on the CPU over a one-process Gloo group with verl's CPU platform installed (verl_cpu.py):
- the worker builds the engine through EngineRegistry.new from its TrainingWorkerConfig, and its train_batch with
  verl's ppo_loss reports the loss and grad norm of torch + transformers (test_losses.py's reference);
- CheckpointHandler.save_checkpoint / load_checkpoint into a fresh worker resume bitwise: the next step's loss,
  grad norm and every weight equal the uninterrupted run's;
- get_per_tensor_param yields every Hugging Face name of the model with the trained values;
- get_per_tensor_param_shard's pieces, placed by verl's own spec helpers, are get_per_tensor_param's tensors
  bitwise (bf16 by default, fp32 on request); after prime_delta_snapshots and a step,
  get_per_tensor_param_delta_shard carries exactly the elements whose bf16 bytes changed, and applied to the bf16
  seed gives the trained weights; a second delta with no step between is empty. (Two ranks: test_two_ranks.py.)"""
from functools import partial

import pytest
import torch
from conftest import engine_config, model_config, one_rank_group, optimizer_config
from test_losses import FP32, ppo_batch, ppo_reference, reference_model

import verl_shards


cpu_process_group = pytest.fixture(scope="module", autouse=True)(one_rank_group)


def new_worker(path):
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import ActorConfig, TrainingWorkerConfig
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.losses import ppo_loss
    worker = TrainingWorker(TrainingWorkerConfig(
        model_type="language_model", model_config=model_config(path),
        engine_config=engine_config(strategy="enginery_fsdp2", mixed_precision=FP32, micro_batch_size_per_gpu=2,
                                    use_dynamic_bsz=False),
        optimizer_config=optimizer_config(lr=1e-3, total_training_steps=10), checkpoint_config=CheckpointConfig()))
    worker.set_loss_fn(partial(ppo_loss, ActorConfig(strategy="enginery_fsdp2", rollout_n=1,
                                                     ppo_micro_batch_size_per_gpu=2)))
    worker.reset()
    return worker


def step(worker, old):
    metrics = worker.train_batch(ppo_batch(old))["metrics"]
    return metrics["loss"], metrics["grad_norm"]


def weights(worker):
    generator, peft = worker.engine.get_per_tensor_param()
    assert peft is None
    return {name: tensor.clone() for name, tensor in generator}


def test_training_worker_train_batch_equals_torch_and_transformers(tiny_model_dir):
    old, loss, norm = ppo_reference(tiny_model_dir)
    got_loss, got_norm = step(new_worker(tiny_model_dir), old)
    assert got_loss == pytest.approx(loss, rel=1e-5, abs=1e-6)
    assert got_norm == pytest.approx(norm, rel=1e-4)


def test_checkpoint_handler_resumes_bitwise(tiny_model_dir, tmp_path):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.utils.checkpoint.checkpoint_handler import CheckpointHandler
    old, _, _ = ppo_reference(tiny_model_dir)
    loader = StatefulDataLoader(list(range(8)), batch_size=2)

    first = new_worker(tiny_model_dir)
    initial = weights(first)
    step(first, old)
    CheckpointHandler(first.engine, loader, default_local_dir=str(tmp_path)).save_checkpoint(1)
    assert (tmp_path / "global_step_1").is_dir()
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    uninterrupted = step(first, old)
    trained = weights(first)

    second = new_worker(tiny_model_dir)
    resumed_at = CheckpointHandler(second.engine, loader, default_local_dir=str(tmp_path)).load_checkpoint()
    assert resumed_at == 1
    assert step(second, old) == uninterrupted  # loss and grad norm, bitwise
    resumed = weights(second)

    hf_names = set(reference_model(tiny_model_dir).state_dict())
    assert set(trained) == hf_names
    for name, tensor in trained.items():
        assert torch.equal(tensor, resumed[name]), name
        assert not torch.equal(tensor, initial[name]), f"{name} was not trained"


def test_shard_and_delta_export(tiny_model_dir):
    old, _, _ = ppo_reference(tiny_model_dir)
    worker = new_worker(tiny_model_dir)
    engine = worker.engine
    initial = weights(worker)
    assert set(initial) == set(reference_model(tiny_model_dir).state_dict())
    for dtype, got in ((torch.bfloat16, verl_shards.gather_shards(engine.get_per_tensor_param_shard())),
                       (torch.float32, verl_shards.gather_shards(engine.get_per_tensor_param_shard(torch.float32)))):
        assert set(got) == set(initial)
        for name, tensor in initial.items():
            assert got[name].dtype == dtype and torch.equal(got[name], tensor.to(dtype)), name

    engine.prime_delta_snapshots()
    step(worker, old)
    trained = weights(worker)
    seed = {name: tensor.to(torch.bfloat16) for name, tensor in initial.items()}  # what the rollout holds
    before = {name: tensor.clone() for name, tensor in seed.items()}
    changed = verl_shards.apply_delta(engine.get_per_tensor_param_delta_shard(), seed)
    assert set(changed) == set(trained)
    for name, tensor in trained.items():
        assert torch.equal(seed[name], tensor.to(torch.bfloat16)), name
        assert torch.equal(changed[name], verl_shards.changed_positions(before[name], seed[name])), name
    assert sum(map(len, changed.values())) > 0
    again = verl_shards.apply_delta(engine.get_per_tensor_param_delta_shard(), seed)
    assert set(again) == set(trained) and all(len(p) == 0 for p in again.values())


def test_delta_before_prime_is_refused(tiny_model_dir):
    from enginery import EngineryError
    engine = new_worker(tiny_model_dir).engine
    with pytest.raises(EngineryError, match="prime_delta_snapshots"):
        engine.get_per_tensor_param_delta_shard()


def test_engine_without_shard_export_yields_full_tensors(tiny_model_dir):
    """verl's spec allows it (spec.py: no mesh means the local tensor is the whole parameter, rank 0 contributes)."""
    worker = new_worker(tiny_model_dir)
    engine = worker.engine
    engine._exports_shards = False  # what the adapter reads from a manifest without 'shard-export'
    initial = weights(worker)
    with pytest.warns(RuntimeWarning, match="lacks the capability 'shard-export'"):
        generator, peft = engine.get_per_tensor_param_shard()
    pieces = list(generator)
    assert all(spec.mesh is None and spec.place is None and local.numel() == initial[name].numel()
               for name, local, spec in pieces)
    got = verl_shards.gather_shards((iter(pieces), peft))
    assert set(got) == set(initial)
    for name, tensor in initial.items():
        assert torch.equal(got[name], tensor.to(torch.bfloat16)), name
