"""verl's TrainingWorker and CheckpointHandler driving enginery, as verl's SFT trainer drives them (SPMD, no Ray),
on the CPU over a one-process Gloo group with verl's CPU platform installed (verl_cpu.py):
- the worker builds the engine through EngineRegistry.new from its TrainingWorkerConfig, and its train_batch with
  verl's ppo_loss reports the loss and grad norm of torch + transformers (test_losses.py's reference);
- CheckpointHandler.save_checkpoint / load_checkpoint into a fresh worker resume bitwise: the next step's loss,
  grad norm and every weight equal the uninterrupted run's;
- get_per_tensor_param yields every Hugging Face name of the model with the trained values."""
import os
import socket
from functools import partial

import pytest
import torch
import torch.distributed as dist
from conftest import engine_config, model_config, optimizer_config
from test_losses import FP32, ppo_batch, ppo_reference, reference_model

import verl_cpu


@pytest.fixture(scope="module", autouse=True)
def cpu_process_group():
    verl_cpu.use_cpu_platform()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    yield
    dist.destroy_process_group()


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
