"""The ranks of test_engine_ports.py (processes of torch.multiprocessing's spawn, running `serve`), meeting at a
file:// rendezvous as verl's tests/models/test_engine.py's do: one function per ported worker of verl's, each
building the engine of the test's strategy (verl's own fsdp/fsdp2, the control, or enginery's) through verl's
EngineRegistry. On the CPU each rank installs verl's CPU platform and verl's fsdp2 engine for "cpu" (verl_cpu.py)
before any verl engine module resolves the device, and the group is Gloo (what verl's platform names as its
communication backend)."""
import os
import sys

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: E402
import verl_cpu  # noqa: E402

VERL_STRATEGIES = ("fsdp", "fsdp2")


def serve(rank, tasks, results):
    """One rank kept for many tests (test_engine_ports.Ranks): runs each (function, args) of `tasks` as this rank,
    and puts (rank, None) or (rank, the traceback) on `results`; None ends it. A process keeps its rank: verl's
    engine built in a process that was another rank before loads random weights instead of the checkpoint's."""
    import faulthandler
    import traceback
    while (task := tasks.get()) is not None:
        fn, args, dump_after_s = task
        faulthandler.dump_traceback_later(dump_after_s)  # where a rank hangs, before the test gives up on it
        try:
            fn(rank, *args)
            results.put((rank, None))
        except BaseException:
            results.put((rank, traceback.format_exc()))
        finally:
            faulthandler.cancel_dump_traceback_later()


def _init_process_group(rank, world_size, rendezvous_file):
    if conftest.DEVICE == "cpu":
        verl_cpu.use_cpu_platform()
        verl_cpu.register_verl_fsdp_on_cpu()
    from verl.utils.device import get_nccl_backend, get_torch_device
    get_torch_device().set_device(rank)
    dist.init_process_group(backend=get_nccl_backend(), init_method=f"file://{rendezvous_file}", rank=rank,
                            world_size=world_size)


def _engine_config(strategy, **fields):
    """verl's FSDPEngineConfig for verl's own strategies, as verl's test builds it; enginery's EngineryEngineConfig
    (conftest.engine_config) with the same fields for enginery's."""
    if strategy in VERL_STRATEGIES:
        from verl.workers.config import FSDPEngineConfig
        return FSDPEngineConfig(strategy=strategy, **fields)
    return conftest.engine_config(strategy=strategy, **fields)


def _new_engine(model_config, engine_config, optimizer_config):
    from verl.trainer.config import CheckpointConfig
    from verl.workers.engine import EngineRegistry
    engine = EngineRegistry.new(model_type="language_model", backend=engine_config.strategy, model_config=model_config,
                                engine_config=engine_config, optimizer_config=optimizer_config,
                                checkpoint_config=CheckpointConfig())
    engine.initialize()
    return engine


def _device():
    # verl's test builds torch.device(device_name, current_device()); verl's CPU platform answers "cpu" for the
    # current device, which torch.device does not take as an index.
    if conftest.DEVICE == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


# --- test_fsdp_engine_split_forward_backward_and_optimizer_step's helpers, as verl's test has them ---
def _local_tensor(tensor):
    from torch.distributed.tensor import DTensor
    if isinstance(tensor, DTensor):
        return tensor.to_local()
    return tensor


def _snapshot_trainable_params(module):
    return [_local_tensor(param).detach().float().clone() for param in module.parameters() if param.requires_grad]


def _param_delta_norm(module, before):
    total = torch.zeros((), device=_device())
    for param, param_before in zip((p for p in module.parameters() if p.requires_grad), before, strict=True):
        param_local = _local_tensor(param).detach().float()
        total += (param_local - param_before.to(param_local.device)).pow(2).sum()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.sqrt()


def _grad_norm(module):
    total = torch.zeros((), device=_device())
    for param in module.parameters():
        if param.grad is None:
            continue
        grad = _local_tensor(param.grad).detach().float()
        total += grad.pow(2).sum()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.sqrt()


def _has_any_grad(module):
    any_grad = torch.tensor(int(any(param.grad is not None for param in module.parameters())), device=_device())
    dist.all_reduce(any_grad, op=dist.ReduceOp.SUM)
    return any_grad.item() > 0


def _make_split_step_batch(config, engine_config, world_size):
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding
    batch_size = 2
    seq_len = 8
    response_length = 4
    input_ids = torch.arange(batch_size * seq_len, dtype=torch.long).reshape(batch_size, seq_len)
    input_ids = input_ids.remainder(config.hf_config.vocab_size)
    attention_mask = torch.ones_like(input_ids)
    position_ids = torch.arange(seq_len, dtype=torch.long).expand(batch_size, seq_len)
    responses = input_ids[:, -response_length:]
    response_mask = torch.ones_like(responses)

    data = DataProto.from_single_dict(
        {
            "input_ids": input_ids,
            "prompts": input_ids[:, : seq_len - response_length],
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": responses,
            "response_mask": response_mask,
            "old_log_probs": torch.zeros_like(responses, dtype=torch.float32),
            "advantages": torch.ones_like(responses, dtype=torch.float32),
        },
        meta_info={"temperature": 1.0},
    )
    data_td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(
        data_td,
        global_batch_size=batch_size * world_size,
        use_remove_padding=config.get("use_remove_padding", False),
        use_dynamic_bsz=engine_config.use_dynamic_bsz,
        max_token_len_per_gpu=engine_config.max_token_len_per_gpu,
        micro_batch_size_per_gpu=engine_config.micro_batch_size_per_gpu,
        use_fused_kernels=engine_config.use_fused_kernels,
    )
    return data_td


def _local_grads(module):
    return [None if p.grad is None else _local_tensor(p.grad).detach().double().clone()
            for p in module.parameters() if p.requires_grad]


def _adamw_first_step_mismatch(module, before, grads, grad_norm, clip_grad, params):
    """The largest distance (all ranks) of this rank's parameters after the optimizer's first step from AdamW's
    first step in float64 with `params` (lr, eps, weight decay) on the gradients clipped to `clip_grad` as torch's
    clip_grad_norm_ clips them: p (1 - lr wd) - lr g / (|g| + eps), bias correction making the moments g and g^2
    whatever the betas. Each distance is in units of 4 fp32 roundings of the parameter plus 1e-9."""
    scale = min(1.0, clip_grad / (grad_norm + 1e-6))
    worst = torch.zeros((), dtype=torch.float64, device=_device())
    for param, p0, g in zip((p for p in module.parameters() if p.requires_grad), before, grads, strict=True):
        if g is None:
            continue
        p0 = p0.double().to(g.device)
        g = g * scale
        want = p0 * (1 - params["lr"] * params["weight_decay"]) - params["lr"] * g / (g.abs() + params["eps"])
        got = _local_tensor(param).detach().double().to(g.device)
        tolerance = 4 * torch.finfo(torch.float32).eps * want.abs() + 1e-9
        if got.numel():
            worst = torch.maximum(worst, ((got - want).abs() / tolerance).max().to(worst.device))
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return worst.item()


def split_training_primitives(rank, world_size, rendezvous_file, model_path, strategy):
    """verl's _split_training_primitives_fsdp_worker, for `strategy`."""
    _init_process_group(rank, world_size, rendezvous_file)
    from functools import partial

    from verl.workers.config import ActorConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine_workers_tinker import _apply_optim_step_params
    from verl.workers.utils.losses import ppo_loss

    model_config = HFModelConfig(
        path=model_path,
        load_tokenizer=False,
        override_config={"attn_implementation": "sdpa"},
        use_remove_padding=True,
    )
    engine_config = _engine_config(
        strategy,
        forward_only=False,
        fsdp_size=world_size,
        ulysses_sequence_parallel_size=1,
        use_remove_padding=True,
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=2,
        max_token_len_per_gpu=128,
    )
    optimizer_config = FSDPOptimizerConfig(lr=1e-3, lr_scheduler_type="constant")
    engine = _new_engine(model_config, engine_config, optimizer_config)

    actor_config = ActorConfig(strategy=strategy, rollout_n=1, ppo_micro_batch_size_per_gpu=-1)
    loss_fn = partial(ppo_loss, config=actor_config)
    before = _snapshot_trainable_params(engine.module)

    with engine.train_mode(zero_grad_on_exit=False):
        engine.optimizer_zero_grad()
        output_1 = engine.forward_backward_batch(
            _make_split_step_batch(model_config, engine_config, world_size),
            loss_function=loss_fn,
            forward_only=False,
        )
    if engine.is_mp_src_rank_with_outputs():
        assert "grad_norm" not in output_1["metrics"]
    grad_norm_1 = _grad_norm(engine.module)
    assert grad_norm_1.item() > 0, "no gradient after forward_backward_batch in train_mode(zero_grad_on_exit=False)"
    assert _param_delta_norm(engine.module, before).item() == pytest.approx(0.0, abs=0.0)

    with engine.train_mode(zero_grad_on_exit=False):
        output_2 = engine.forward_backward_batch(
            _make_split_step_batch(model_config, engine_config, world_size),
            loss_function=loss_fn,
            forward_only=False,
        )
    if engine.is_mp_src_rank_with_outputs():
        assert "grad_norm" not in output_2["metrics"]
    grad_norm_2 = _grad_norm(engine.module)
    assert grad_norm_2.item() > grad_norm_1.item() * 1.5, (grad_norm_1.item(), grad_norm_2.item())
    assert _param_delta_norm(engine.module, before).item() == pytest.approx(0.0, abs=0.0)
    accumulated = _local_grads(engine.module)

    optim_step_params = {
        "lr": 5e-4,
        "betas": (0.8, 0.9),
        "eps": 1e-7,
        "weight_decay": 0.02,
    }
    with engine.train_mode(zero_grad_on_exit=True):
        _apply_optim_step_params(engine.optimizer, optim_step_params)
        grad_norm = engine.optimizer_step()

    assert grad_norm > 0, grad_norm
    for param_group in engine.optimizer.param_groups:
        assert param_group["lr"] == pytest.approx(optim_step_params["lr"])
        assert param_group["betas"] == pytest.approx(optim_step_params["betas"])
        assert param_group["eps"] == pytest.approx(optim_step_params["eps"])
        assert param_group["weight_decay"] == pytest.approx(optim_step_params["weight_decay"])
    assert _param_delta_norm(engine.module, before).item() > 0
    assert not _has_any_grad(engine.module), "a .grad left after train_mode(zero_grad_on_exit=True)"

    # Beyond verl's test: the step took the overriding values (the param_groups above could be a copy that the
    # engine never reads). Its norm is the accumulated gradients' (nothing touched them since), and the step is
    # AdamW's first from the snapshot.
    assert grad_norm == pytest.approx(grad_norm_2.item(), rel=1e-5)
    worst = _adamw_first_step_mismatch(engine.module, before, accumulated, grad_norm, optimizer_config.clip_grad,
                                       optim_step_params)
    assert worst <= 1.0, f"the step is {worst:.3g} tolerances away from AdamW's with the overriding lr/eps/wd"

    dist.barrier()
    dist.destroy_process_group()


def autocast_dtype(rank, world_size, rendezvous_file, model_path, strategy):
    """verl's _autocast_dtype_worker (regression test of verl's #5932), for `strategy`."""
    _init_process_group(rank, world_size, rendezvous_file)
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    from verl.workers.config import FSDPOptimizerConfig, HFModelConfig

    model_config = HFModelConfig(
        path=model_path,
        load_tokenizer=False,
        override_config={"attn_implementation": "sdpa"},
    )

    def build_engine(mixed_precision):
        engine_config = _engine_config(
            strategy,
            forward_only=False,
            fsdp_size=world_size,
            ulysses_sequence_parallel_size=1,
            mixed_precision=mixed_precision,
        )
        return _new_engine(model_config, engine_config, FSDPOptimizerConfig())

    # bf16 (default) resolves to torch.bfloat16, no scaler needed
    engine = build_engine({"param_dtype": "bf16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"})
    assert engine._autocast_dtype == torch.bfloat16, f"expected bf16, got {engine._autocast_dtype}"
    assert engine.scaler is None, "bf16 should not create a scaler"

    # fp32 resolves to torch.float32 (forward_step will use nullcontext), no scaler
    engine = build_engine({"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"})
    assert engine._autocast_dtype == torch.float32, f"expected fp32, got {engine._autocast_dtype}"
    assert engine.scaler is None, "fp32 should not create a scaler"

    # fp16 gets a ShardedGradScaler for loss scaling during backward
    engine = build_engine({"param_dtype": "fp16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"})
    assert engine._autocast_dtype == torch.float16, f"expected fp16, got {engine._autocast_dtype}"
    assert isinstance(engine.scaler, ShardedGradScaler), "fp16 must create a ShardedGradScaler"

    dist.barrier()
    dist.destroy_process_group()


def per_tensor_param(rank, world_size, rendezvous_file, strategy, model_path, sp_size, attn_implementation):
    """verl's _worker of test_per_tensor_generator, for `strategy` and Ulysses degree `sp_size`; beyond verl's
    test, every value equals the saved Hugging Face weight (nothing trained yet: the engine yields what it
    loaded)."""
    _init_process_group(rank, world_size, rendezvous_file)
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from verl.workers.config import FSDPOptimizerConfig, HFModelConfig

    ref_model_config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        ref_model = AutoModelForCausalLM.from_config(ref_model_config)

    override = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    model_config = HFModelConfig(path=model_path, load_tokenizer=False, override_config=override)
    engine_config = _engine_config(strategy, forward_only=False, fsdp_size=4,
                                   ulysses_sequence_parallel_size=sp_size)
    engine = _new_engine(model_config, engine_config, FSDPOptimizerConfig())

    per_tensor_params, _ = engine.get_per_tensor_param()

    # transformers 5 holds a MoE's experts fused (mlp.experts.gate_up_proj [E, 2I, H], down_proj [E, H, I]) where
    # checkpoints on disk and verl's engine name each expert (verl unfuses them for vLLM with unfuse_moe_params):
    # verl's test, which reads the fused state_dict, fails its own engine there. The reference names are the
    # state_dict's as verl unfuses them (no change for a dense model).
    from verl.workers.engine.fsdp.utils import unfuse_moe_params
    ref_state_dict = dict(unfuse_moe_params(ref_model.state_dict().items(), ref_model_config.model_type))
    saved = load_file(os.path.join(model_path, "model.safetensors"))

    seen = []
    for key, value in per_tensor_params:
        assert key in ref_state_dict, f"{key} not in ref_state_dict"
        assert value.shape == ref_state_dict[key].shape, (
            f"{key} shape not equal, {value.shape} != {ref_state_dict[key].shape}"
        )
        assert value.dtype == saved[key].dtype, f"{key}: {value.dtype} != the saved {saved[key].dtype}"
        differs = (value.cpu() != saved[key]).sum().item()
        assert differs == 0, f"{key}: {differs} of {value.numel()} elements differ from the saved weight"
        seen.append(key)
    assert sorted(seen) == sorted(saved), "not every saved weight was yielded once"

    dist.barrier()
    dist.destroy_process_group()
