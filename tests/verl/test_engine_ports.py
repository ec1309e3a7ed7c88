"""verl's engine tests (verl's tests/models/test_engine.py, verl 0.9.1) ported: each runs for enginery's backends and,
in the same test, for verl's own FSDP engine (the control, strategy "fsdp2"; "fsdp" too where verl can build it).
The ranks (engine_ports_worker.py) are processes started by torch.multiprocessing's spawn, meeting at a file://
rendezvous as verl's do, but kept for the module rather than spawned per test (Ranks says why): two over Gloo on
the CPU, one over NCCL on cuda (the GPU machine has one GPU; verl's tests use 2 and 8). The models are verl's
Qwen3 configs, shrunk where verl's are full size (the CPU forces it); verl's engine gets sdpa attention where verl's
test leaves verl's default flash_attention_2, which is not installed.

- test_tinker_workers_expose_split_training_primitives: verl's Tinker workers (pure verl).
- test_fsdp_engine_split_forward_backward_and_optimizer_step: verl's split step (Tinker's primitives) on the
  engine's module and optimizer: grads survive a train_mode(zero_grad_on_exit=False) block and accumulate over two
  forward_backward_batch calls (norm 2 > 1.5 x norm 1) without touching the weights, no grad_norm metric before the
  step, the param_groups written by verl's _apply_optim_step_params are read back after optimizer_step, the weights
  changed, and train_mode(zero_grad_on_exit=True) leaves no grad. Beyond verl's test: optimizer_step returns the
  accumulated gradients' norm, and the weights after it are AdamW's first step in float64 with the overriding lr,
  eps and weight decay. On enginery before its module/optimizer/train_mode work (issue 40), these fail at:
  engine.module or engine.optimizer missing (AttributeError in _snapshot_trainable_params / _apply_optim_step_params);
  grads zeroed on leaving every train_mode (`grad_norm_1.item() > 0` or `grad_norm_2 > 1.5 x grad_norm_1`);
  .grad not the engine's gradient (the same two, or the grad-norm equality); a .grad left after a zeroing
  (`not _has_any_grad`); param_groups that the step does not read (the AdamW comparison); max_token_len_per_gpu
  refused without use_dynamic_bsz (an EngineryError naming engine.max_token_len_per_gpu, building the engine).
  A rank that hangs is reported with its stack (Ranks): verl's workers end with dist.destroy_process_group() and
  then free the engine.
- test_fsdp2_autocast_dtype_honors_mixed_precision: verl's #5932 regression test: _autocast_dtype follows
  mixed_precision.param_dtype (bf16/fp32/fp16), no scaler for bf16 and fp32, and for fp16 an instance of torch's
  ShardedGradScaler (enginery's former read-only view fails `isinstance(engine.scaler, ShardedGradScaler)`).
- test_per_tensor_generator: get_per_tensor_param's names and shapes against a meta-device transformers model's
  state_dict, with fsdp_size 4 above the world size (verl reads it as the whole world; an engine refusing it fails
  building the engine); beyond verl's test, every value equals the saved Hugging Face weight bitwise and every saved
  weight comes once. verl's test also runs Ulysses sequence parallelism (ulysses_sequence_parallel_size=2), for
  verl's control and enginery's backends alike where the world has 2 ranks (the CPU's; skipped on one GPU), and
  Qwen3MoeConfig (here shrunk to 4 experts, 2 per token). On enginery before its Ulysses work (issue 45) the
  enginery sp=2 cases failed building the engine: "EngineryEngineConfig got an unexpected keyword
  'ulysses_sequence_parallel_size'"; before its Qwen3-MoE work (issue 45) the qwen3_moe cases failed building it:
  "unknown model_type 'qwen3_moe' (allowed: llama, qwen2, qwen3)". Under transformers 5 the meta model's state_dict
  holds the experts fused (mlp.experts.gate_up_proj) while verl's engine yields them per expert, the checkpoint's
  names (verl's unfuse_moe_params): verl's own test fails its own engine there ("model.layers.0.mlp.experts.0.
  gate_proj.weight not in ref_state_dict"), so the reference names are the state_dict's as verl unfuses them.
"""
import os
import queue
import time

import pytest
import torch
import torch.multiprocessing as mp
from conftest import DEVICE
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

import engine_ports_worker
import verl_cpu

WORLD_SIZE = 2 if DEVICE == "cpu" else 1
# verl's own fsdp2 engine is the control; its fsdp (FSDP1) too on cuda: verl builds FSDP1 with
# sync_module_states=True, which torch refuses on the CPU (registered there for "cpu", verl's engine fails so).
STRATEGIES = ["fsdp2", "fsdp", "enginery_fsdp2", "enginery_fsdp"]
FSDP1_ON_CPU = ("verl's fsdp (FSDP1) control cannot run on the CPU: ValueError: The module has CPU parameters or "
                "buffers when `sync_module_states=True`, which requires them to be on GPU. Please specify the "
                "`device_id` argument or move the module to GPU before passing it to FSDP.")


def tiny_qwen3(**fields):
    """verl's Qwen3Config(num_hidden_layers=2) at test_fsdp_engine_split_forward_backward_and_optimizer_step's
    sizes (verl's other two tests use the full default sizes: 151936 tokens, hidden 4096)."""
    sizes = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=4)
    return Qwen3Config(**{**sizes, **fields})


def tiny_qwen3_moe(**fields):
    """verl's Qwen3MoeConfig(num_hidden_layers=2) at tiny_qwen3's sizes, with 4 experts of which 2 per token (verl's
    uses the default 128 and 8)."""
    sizes = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    return Qwen3MoeConfig(**{**sizes, **fields})


def create_actor_model(tmp_path, config):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    path = os.path.join(tmp_path, "test_model")
    model.save_pretrained(path)
    config.save_pretrained(path)
    return path


class Ranks:
    """WORLD_SIZE processes started by torch.multiprocessing's spawn, one per rank, kept for the whole module: each
    test runs its worker on every rank at once with a fresh file:// rendezvous, as verl's mp.spawn does, without
    paying the ranks' start per test (importing torch, transformers and verl takes longer than the tests' work on
    two CPU cores). A failure, a dead rank or a timeout stops the ranks (another may wait in a collective) and the
    next test starts new ones."""

    TIMEOUT_S = 150

    def __init__(self):
        self._processes = []

    def _start(self):
        context = mp.get_context("spawn")
        self._results = context.Queue()
        self._tasks = [context.Queue() for _ in range(WORLD_SIZE)]
        self._processes = [context.Process(target=engine_ports_worker.serve, args=(rank, tasks, self._results),
                                           daemon=True) for rank, tasks in enumerate(self._tasks)]
        for process in self._processes:
            process.start()

    def run(self, fn, tmp_path, name, *args):
        rendezvous_file = str(tmp_path / name)
        os.makedirs(os.path.dirname(rendezvous_file), exist_ok=True)
        if not self._processes:
            self._start()
        for tasks in self._tasks:
            tasks.put((fn, (WORLD_SIZE, rendezvous_file, *args), self.TIMEOUT_S - 20))
        deadline = time.monotonic() + self.TIMEOUT_S
        waiting = set(range(WORLD_SIZE))
        while waiting:
            try:
                rank, error = self._results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r in waiting if not self._processes[r].is_alive()]
                if dead or time.monotonic() > deadline:
                    what = (f"rank {dead[0]} died (exit code {self._processes[dead[0]].exitcode})" if dead else
                            f"rank(s) {sorted(waiting)} gave no answer in {self.TIMEOUT_S} s (the captured stderr "
                            f"has their Python stacks; one at serve's fn(...) line hangs freeing the worker's locals)")
                    self.close()
                    pytest.fail(f"{fn.__name__}: {what}", pytrace=False)
                continue
            waiting.discard(rank)
            if error is not None:
                self.close()
                pytest.fail(f"{fn.__name__}, rank {rank}:\n{error}", pytrace=False)

    def close(self):
        for process in self._processes:
            process.kill()
            process.join()
        self._processes = []


@pytest.fixture(scope="module")
def ranks():
    ranks = Ranks()
    yield ranks
    ranks.close()


def skip_unbuildable_control(strategy):
    if strategy == "fsdp" and DEVICE == "cpu":
        pytest.skip(FSDP1_ON_CPU)


def test_tinker_workers_expose_split_training_primitives():
    if DEVICE == "cpu":
        verl_cpu.use_cpu_platform()
    from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker
    from verl.workers.engine_workers_tinker import TinkerActorRolloutRefWorker, TinkerTrainingWorker

    assert issubclass(TinkerTrainingWorker, TrainingWorker)
    assert issubclass(TinkerActorRolloutRefWorker, ActorRolloutRefWorker)

    for name in ("optimizer_zero_grad", "forward_backward", "optimizer_step"):
        assert name not in TrainingWorker.__dict__
        assert name in TinkerTrainingWorker.__dict__
        assert name not in ActorRolloutRefWorker.__dict__
        assert name in TinkerActorRolloutRefWorker.__dict__


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fsdp_engine_split_forward_backward_and_optimizer_step(strategy, tmp_path, ranks):
    skip_unbuildable_control(strategy)
    model_path = create_actor_model(
        tmp_path,
        Qwen3Config(
            vocab_size=128,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
        ),
    )
    ranks.run(engine_ports_worker.split_training_primitives, tmp_path,
              f"rdzv_split_training_primitives_{strategy}", model_path, strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fsdp2_autocast_dtype_honors_mixed_precision(strategy, tmp_path, ranks):
    skip_unbuildable_control(strategy)
    model_path = create_actor_model(tmp_path, tiny_qwen3())
    ranks.run(engine_ports_worker.autocast_dtype, tmp_path, "rdzv_autocast", model_path, strategy)


@pytest.mark.parametrize("config", [tiny_qwen3, tiny_qwen3_moe], ids=["qwen3", "qwen3_moe"])
@pytest.mark.parametrize("strategy, sp_size", [("fsdp2", 1), ("fsdp2", 2), ("fsdp", 1), ("fsdp", 2),
                                               ("enginery_fsdp2", 1), ("enginery_fsdp2", 2), ("enginery_fsdp", 1),
                                               ("enginery_fsdp", 2)])
def test_per_tensor_generator(strategy, sp_size, config, tmp_path, ranks):
    skip_unbuildable_control(strategy)
    if sp_size > WORLD_SIZE:
        pytest.skip(f"Ulysses degree {sp_size} needs {sp_size} ranks; {WORLD_SIZE} on {DEVICE}")
    model_path = create_actor_model(tmp_path, config())
    # verl's engine builds the model with flash_attention_2 unless told otherwise; enginery has its own attention
    # and takes verl's model config as verl's test writes it.
    attention = "sdpa" if strategy in engine_ports_worker.VERL_STRATEGIES else None
    ranks.run(engine_ports_worker.per_tensor_param, tmp_path, "rdzv_mask", strategy, model_path, sp_size, attention)
