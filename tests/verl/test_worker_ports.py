"""verl's worker-level engine tests (verl's tests/models/test_engine.py, verl 0.9.1) ported to enginery: verl's own
TrainingWorker / TinkerTrainingWorker (SPMD: the worker's methods called in this process, no Ray) on enginery's
backend "enginery_fsdp2" and, as the control, on verl's own "fsdp2" engine. CPU: a one-process Gloo group with
verl's CPU platform (verl_cpu.py); cuda (conftest.DEVICE): a one-process NCCL group.

Changed from verl's test only where this machine forces it: a tiny Qwen2 written by transformers instead of SmolLM2
from the hub; world size 1; sdpa instead of flash_attention_2 (no flash-attn here), which for the control's critic
means replacing verl's load_valuehead_model, hard-wired to flash_attention_2; without flash-attn verl's engine
returns bf16 log-probs, so the dtype half of verl's check_dtype holds on enginery's side only; and no
grad_offload=True: verl 0.9.1's EngineConfig has no such field (FSDPEngineConfig(grad_offload=True) raises
"TypeError: FSDPEngineConfig.__init__() got an unexpected keyword argument 'grad_offload'"), the gradient moving
with TrainingWorker.to(grad=True), its default, which the manual path below uses.

- test_actor_engine: verl's config (param/optimizer offload, dynamic batch size, max_token_len_per_gpu 500,
  infer_max_token_len_per_gpu 1000), infer_batch's log-probs against transformers (verl's assert_close on the
  masked mean), then ppo_loss train_batch with automatic load/offload and the manual path (disable_auto_offload,
  to("device"), train_batch, to("cpu")). Beyond verl's prints: the first step's loss is -masked_mean(advantages)
  (the old log-probs are the model's own: ratio 1), and the second step, on the weights the first one changed, sees
  a non-zero ppo_kl.
- test_critic_engine: the value model's infer_batch values against transformers' token classification, then a
  value_loss train_batch whose loss is 0.5 * masked_mean((values - returns)^2) of the values just inferred.
- test_train_mini_batch_metrics_reduce_as_verl_trainer[_critic]: train_mini_batch with ppo_loss / value_loss as
  verl's PPO trainer sends it (mini_batch_size, epochs, seed, dataloader_kwargs), then the trainer's rename_dict and
  verl.utils.metric.reduce_metrics: enginery's reduced metrics have the control's keys and, fp32 both, its values.
- test_tinker_split_step: TinkerTrainingWorker's optimizer_zero_grad(), forward_backward(data) twice,
  optimizer_step(optim_step_params), with verl's own assertions of its split-step test (gradients survive between
  the calls, weights change only at the step, the param groups carry the step's params, no gradient after it); the
  accumulated gradient exactly twice one pass's; each step's grad norm that of the gradient read off engine.module;
  the weights after two steps torch's AdamW (float64) with the step's lr, betas, eps and weight_decay; enginery's
  grad norms and returned log-probs the control's.

What fails on enginery's earlier adapter (forward_backward_batch metrics as one list of Metric objects per key, no
engine.module / engine.optimizer, train_mode(**kwargs) ignored, return_model_output ignored):
- test_train_mini_batch_*: reduce_metrics raises "TypeError: unsupported operand type(s) for +: 'Metric' and
  'Metric'" (train_mini_batch flattens the per-rank lists of lists into a list of Metrics);
- test_actor_engine / test_critic_engine: the train_batch metrics folded as train_mini_batch folds them raise
  "TypeError: unsupported operand type(s) for /: 'Metric' and 'int'";
- test_tinker_split_step: engine.module missing; with it, the grads zeroed on leaving
  train_mode(zero_grad_on_exit=False) fail "norm(grad_1) > 0", a missing log_probs output fails its assertion,
  param_groups writes that do not reach the step fail the AdamW comparison."""
from functools import partial
from itertools import chain

import numpy as np
import pytest
import torch
import transformers
from conftest import DEVICE, model_config, one_rank_group


BACKENDS = ["enginery_fsdp2", "fsdp2"]
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
# verl's create_training_config, less grad_offload (module docstring).
VERL_ENGINE_KWARGS = dict(param_offload=True, optimizer_offload=True, use_dynamic_bsz=True, use_remove_padding=True,
                          max_token_len_per_gpu=500, infer_max_token_len_per_gpu=1000)


process_group = pytest.fixture(scope="module", autouse=True)(one_rank_group)


@pytest.fixture(autouse=True)
def value_model_without_flash_attn(monkeypatch):
    """verl's load_valuehead_model (its FSDP engine's value-model loader) asks transformers for flash_attention_2
    whatever the model config says; without flash-attn (this CPU machine) the control's critic gets sdpa, the
    attention the model config asks for."""
    try:
        import flash_attn  # noqa: F401
        return
    except ImportError:
        pass
    import verl.utils.model

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        return transformers.AutoModelForTokenClassification.from_pretrained(
            local_path, torch_dtype=torch_dtype, config=model_config, attn_implementation="sdpa",
            trust_remote_code=trust_remote_code)
    monkeypatch.setattr(verl.utils.model, "load_valuehead_model", load_valuehead_model)


@pytest.fixture(scope="module")
def value_model_dir(tiny_model_dir, tmp_path_factory):
    """verl's create_value_model: the language model's config with one label and no classifier dropout."""
    config = transformers.AutoConfig.from_pretrained(tiny_model_dir)
    config.num_labels = 1
    config.classifier_dropout = 0
    config.tie_word_embeddings = False
    torch.manual_seed(2)
    model = transformers.AutoModelForTokenClassification.from_config(config)
    path = str(tmp_path_factory.mktemp("tiny_qwen2_critic"))
    model.save_pretrained(path)
    return path


def engine_config(backend, **fields):
    from verl.workers.config import FSDPEngineConfig

    from enginery.verl.engine_config import EngineryEngineConfig
    if backend == "fsdp2":
        return FSDPEngineConfig(forward_only=False, fsdp_size=1, strategy=backend, ulysses_sequence_parallel_size=1,
                                **fields)
    return EngineryEngineConfig(forward_only=False, fsdp_size=1, strategy=backend, **fields)


def training_config(model_type, backend, path, engine_fields=VERL_ENGINE_KWARGS, optimizer_fields=None):
    """verl's create_training_config for one device."""
    from verl.workers.config import FSDPOptimizerConfig, TrainingWorkerConfig
    return TrainingWorkerConfig(model_type=model_type, model_config=model_config(path, use_remove_padding=True),
                                engine_config=engine_config(backend, **engine_fields),
                                optimizer_config=FSDPOptimizerConfig(**(optimizer_fields or {})),
                                checkpoint_config=None)


def new_worker(config, cls=None):
    from verl.workers.engine_workers import TrainingWorker
    worker = (cls or TrainingWorker)(config)
    worker.reset()
    return worker


def verl_batch(vocab_size):
    """verl's batch of test_actor_engine / test_critic_engine: 8 rows of 32 tokens, left padding, the second half the
    response. Returns (DataProto, responses, response_mask)."""
    from verl import DataProto
    from verl.utils.model import compute_position_id_with_mask, create_random_mask
    batch_size, seqlen = 8, 32
    response_length = seqlen // 2
    torch.manual_seed(1)
    np.random.seed(1)
    input_ids = torch.randint(0, vocab_size, (batch_size, seqlen))
    attention_mask = create_random_mask(input_ids=input_ids, max_ratio_of_valid_token=0.8,
                                        max_ratio_of_left_padding=0.2, min_ratio_of_valid_token=0.6)
    position_ids = compute_position_id_with_mask(attention_mask)
    global_token_num = torch.sum(attention_mask, dim=-1).tolist()
    responses = input_ids[:, response_length:]
    response_mask = attention_mask[:, response_length:]
    assert torch.all(response_mask[:, 0] == 1)
    data = DataProto.from_single_dict(
        {"input_ids": input_ids, "prompts": input_ids[:, :response_length], "attention_mask": attention_mask,
         "position_ids": position_ids, "responses": responses, "response_mask": response_mask},
        meta_info={"temperature": 1.0, "global_token_num": global_token_num, "compute_loss": False})
    return data, responses, response_mask


def no_padding(data):
    from verl.workers.utils.padding import left_right_2_no_padding
    return left_right_2_no_padding(data.to_tensordict())


def reduced(output):
    """One train_batch's metrics folded as verl's train_mini_batch folds each of its train_batch outputs (a list of
    the dp ranks' Metrics through Metric.aggregate_dp, other lists flattened), then verl's reduce_metrics."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import Metric, reduce_metrics
    metrics = {}
    for key, val in tu.get(output, "metrics").items():
        if isinstance(val, list):
            val = Metric.aggregate_dp(val) if isinstance(val[0], Metric) else list(chain.from_iterable(val))
        metrics[key] = val
    return reduce_metrics(metrics)


def masked_mean(values, mask):
    return float((values * mask).sum() / mask.sum())


@pytest.mark.parametrize("backend", BACKENDS)
def test_actor_engine(backend, tiny_model_dir):
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.utils.torch_functional import logprobs_from_logits_naive
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss, sft_loss
    from verl.workers.utils.padding import no_padding_2_padding

    config = training_config("language_model", backend, tiny_model_dir)
    worker = new_worker(config)
    worker.set_loss_fn(partial(sft_loss, config=config))

    data, responses, response_mask = verl_batch(config.model_config.hf_config.vocab_size)
    response_length = responses.shape[1]
    data_td = no_padding(data)
    output = worker.infer_batch(data_td)
    logprobs = no_padding_2_padding(tu.get(output, "log_probs").cpu(), data_td)
    output = DataProto.from_single_dict({"old_log_probs": logprobs})

    input_ids, attention_mask = data.batch["input_ids"], data.batch["attention_mask"]
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.bfloat16)
    hf_output = hf_model(input_ids, attention_mask=attention_mask)
    hf_logprobs = logprobs_from_logits_naive(hf_output.logits[:, -response_length - 1: -1, :].float(),
                                             input_ids[:, -response_length:])
    hf_logprobs_mean = torch.mean(hf_logprobs * response_mask)
    engine_logprobs_mean = torch.mean(output.batch["old_log_probs"] * response_mask)
    # verl's engine returns fp32 log-probs through flash-attn's cross entropy; without flash-attn (this CPU machine)
    # its fallback keeps the bf16 logits' dtype, so the dtype half of verl's check holds for verl's engine only
    # where flash-attn is. enginery's log-probs are fp32 everywhere: its side keeps verl's check whole.
    from verl.utils.torch_functional import FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE
    check_dtype = backend != "fsdp2" or FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE
    torch.testing.assert_close(hf_logprobs_mean, engine_logprobs_mean, atol=1e-3, rtol=1e-2, check_dtype=check_dtype)

    data = data.union(output)
    data.batch["advantages"] = torch.rand_like(responses, dtype=torch.float32)
    data.batch["ref_log_prob"] = torch.rand_like(responses, dtype=torch.float32)
    actor_config = ActorConfig(strategy=backend, rollout_n=1, ppo_micro_batch_size_per_gpu=-1)
    worker.set_loss_fn(partial(ppo_loss, config=actor_config))
    data_td = no_padding(data)

    # auto load/offload
    tu.assign_non_tensor(data_td, global_batch_size=data_td.shape[0])
    first = reduced(worker.train_batch(data_td))
    # The old log-probs are this model's own (same weights, same bf16 forward): ratio 1, no clipping, so verl's
    # token-mean pg loss is -masked_mean(advantages); the bound covers the ratio's bf16 noise.
    assert first["loss"] == pytest.approx(-masked_mean(data.batch["advantages"], response_mask), abs=1e-3)
    assert abs(first["actor/ppo_kl"]) < 1e-3
    assert np.isfinite(first["grad_norm"]) and first["grad_norm"] > 0

    # manual load/offload
    tu.assign_non_tensor(data_td, disable_auto_offload=True)
    worker.to("device")
    second = reduced(worker.train_batch(data_td))
    worker.to("cpu")
    assert set(second) == set(first)
    assert np.isfinite(second["loss"]) and np.isfinite(second["grad_norm"]) and second["grad_norm"] > 0
    # The first step moved the weights (lr 1e-3): the second step's log-probs are no longer the old ones.
    assert abs(second["actor/ppo_kl"]) > 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_critic_engine(backend, value_model_dir):
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.utils.device import get_device_name
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss
    from verl.workers.utils.padding import no_padding_2_padding

    config = training_config("value_model", backend, value_model_dir)
    worker = new_worker(config)

    data, responses, response_mask = verl_batch(config.model_config.hf_config.vocab_size)
    response_length = responses.shape[1]
    data_td = no_padding(data)
    output = worker.infer_batch(data_td)
    values = no_padding_2_padding(tu.get(output, "values").float().cpu(), data_td)
    output = DataProto.from_single_dict({"values": values})

    device_name = get_device_name()
    input_ids, attention_mask = data.batch["input_ids"], data.batch["attention_mask"]
    # sdpa: verl's flash_attention_2 needs flash-attn and a GPU.
    with torch.device(device_name), torch.autocast(device_type=device_name, dtype=torch.bfloat16):
        hf_model = transformers.AutoModelForTokenClassification.from_pretrained(
            value_model_dir, torch_dtype=torch.float32, attn_implementation="sdpa")
        hf_output = hf_model(input_ids.to(device=device_name), attention_mask=attention_mask.to(device=device_name))
        hf_values = hf_output.logits[:, -response_length - 1: -1, :].float().squeeze(-1).cpu()
    hf_values_mean = torch.mean(hf_values * response_mask)
    engine_values = torch.mean(output.batch["values"] * response_mask)
    torch.testing.assert_close(hf_values_mean, engine_values, atol=1e-2, rtol=1e-2)

    data = data.union(output)
    data.batch["returns"] = torch.rand_like(responses, dtype=torch.float32)
    critic_config = CriticConfig(strategy=backend, rollout_n=1, ppo_micro_batch_size_per_gpu=-1,
                                 model=config.model_config)
    worker.set_loss_fn(partial(value_loss, config=critic_config))
    data_td = no_padding(data)
    tu.assign_non_tensor(data_td, global_batch_size=data_td.shape[0])
    metrics = reduced(worker.train_batch(data_td))
    # The old values are this model's own: no value clipping, so verl's token-mean loss is
    # 0.5 * masked_mean((values - returns)^2); the bound covers the bf16 forward's noise.
    want = 0.5 * masked_mean((values - data.batch["returns"]) ** 2, response_mask)
    assert metrics["loss"] == pytest.approx(want, rel=1e-3)
    assert metrics["critic/vf_loss"] == pytest.approx(want, rel=1e-3)
    assert np.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0


# --- train_mini_batch and the PPO trainer's metric reduction, enginery against verl's engine (fp32) ---

MINI_BATCH, EPOCHS, LR = 4, 2, 1e-4
# Same weights, same batch, fp32 in both engines, so only the order of fp32 sums differs: about 1e-7 of the summed
# terms, which are of order 1 while the loss and ppo_kl they cancel to are of order 1e-2 (measured: 4e-6 relative at
# most). The later mini-batches start from weights one to three AdamW steps of lr 1e-4 apart by that much.
REL = 1e-4


def mini_batch_run(backend, path, model_type, loss_fn, data):
    """One train_mini_batch as verl's PPO trainer sends it (ray_trainer._update_actor / _update_critic), metrics
    reduced as its fit() reduces them."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.metric import reduce_metrics
    from verl.utils.py_functional import rename_dict
    worker = new_worker(training_config(model_type, backend, path, dict(VERL_ENGINE_KWARGS, mixed_precision=FP32),
                                        {"lr": LR}))
    worker.set_loss_fn(loss_fn)
    data_td = no_padding(data)
    extra = {"calculate_entropy": False, "compute_loss": True} if model_type == "language_model" else {}
    tu.assign_non_tensor(data_td, global_batch_size=MINI_BATCH, mini_batch_size=MINI_BATCH, epochs=EPOCHS, seed=42,
                         dataloader_kwargs={"shuffle": True}, **extra)
    output = tu.get(worker.train_mini_batch(data_td), "metrics")
    role = "actor/" if model_type == "language_model" else "critic/"
    output = rename_dict(output, role)
    output[f"perf/mfu/{role[:-1]}"] = output.pop(f"{role}mfu")
    return reduce_metrics(output)


def assert_same_metrics(got, want, compared):
    assert set(got) == set(want)
    for key in compared:
        assert got[key] == pytest.approx(want[key], rel=REL, abs=1e-7), key


def test_train_mini_batch_metrics_reduce_as_verl_trainer(tiny_model_dir):
    from verl.utils.torch_functional import logprobs_from_logits_naive
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss
    data, responses, response_mask = verl_batch(128)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        logits = model(data.batch["input_ids"], attention_mask=data.batch["attention_mask"]).logits
    length = responses.shape[1]
    # Old log-probs off the model's by N(0, 0.1): ratios outside [0.8, 1.2] on some tokens, so clipfrac and
    # ppo_kl are not zero.
    torch.manual_seed(3)
    old = logprobs_from_logits_naive(logits[:, -length - 1: -1].float(), responses) + 0.1 * torch.randn(responses.shape)
    data.batch["old_log_probs"] = old
    data.batch["advantages"] = torch.randn(responses.shape)
    runs = {}
    for backend in BACKENDS:
        config = ActorConfig(strategy=backend, rollout_n=1, ppo_micro_batch_size_per_gpu=-1)
        runs[backend] = mini_batch_run(backend, tiny_model_dir, "language_model", partial(ppo_loss, config=config),
                                       data)
    got, want = runs["enginery_fsdp2"], runs["fsdp2"]
    assert want["actor/pg_clipfrac"] > 0 and want["actor/ppo_kl"] != 0
    assert_same_metrics(got, want, ["actor/loss", "actor/grad_norm", "actor/lr", "actor/pg_loss",
                                    "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"])


def test_train_mini_batch_metrics_reduce_as_verl_trainer_critic(value_model_dir):
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss
    data, responses, response_mask = verl_batch(128)
    torch.manual_seed(3)
    # Old values far from the model's (|v| ~ 0.1): vf_clipfrac not zero.
    data.batch["values"] = torch.randn(responses.shape)
    data.batch["returns"] = torch.randn(responses.shape)
    runs = {}
    for backend in BACKENDS:
        config = CriticConfig(strategy=backend, rollout_n=1, ppo_micro_batch_size_per_gpu=-1,
                              model=model_config(value_model_dir, use_remove_padding=True))
        runs[backend] = mini_batch_run(backend, value_model_dir, "value_model", partial(value_loss, config=config),
                                       data)
    got, want = runs["enginery_fsdp2"], runs["fsdp2"]
    assert want["critic/vf_clipfrac"] > 0
    assert_same_metrics(got, want, ["critic/loss", "critic/grad_norm", "critic/lr", "critic/vf_loss",
                                    "critic/vf_clipfrac", "critic/vpred_mean"])


# --- TinkerTrainingWorker's split step ---

OPTIM_STEP_PARAMS = {"lr": 5e-4, "betas": (0.8, 0.9), "eps": 1e-7, "weight_decay": 0.02}


def split_step_batch(vocab_size, engine_cfg):
    """verl's _make_split_step_batch (world size 1)."""
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    batch_size, seq_len, response_length = 2, 8, 4
    input_ids = torch.arange(batch_size * seq_len, dtype=torch.long).reshape(batch_size, seq_len) % vocab_size
    responses = input_ids[:, -response_length:]
    data = DataProto.from_single_dict(
        {"input_ids": input_ids, "prompts": input_ids[:, :seq_len - response_length],
         "attention_mask": torch.ones_like(input_ids),
         "position_ids": torch.arange(seq_len, dtype=torch.long).expand(batch_size, seq_len),
         "responses": responses, "response_mask": torch.ones_like(responses),
         "old_log_probs": torch.zeros_like(responses, dtype=torch.float32),
         "advantages": torch.ones_like(responses, dtype=torch.float32)},
        meta_info={"temperature": 1.0})
    data_td = no_padding(data)
    tu.assign_non_tensor(data_td, global_batch_size=batch_size, use_remove_padding=True,
                         use_dynamic_bsz=engine_cfg.use_dynamic_bsz,
                         max_token_len_per_gpu=engine_cfg.max_token_len_per_gpu,
                         micro_batch_size_per_gpu=engine_cfg.micro_batch_size_per_gpu,
                         use_fused_kernels=engine_cfg.use_fused_kernels)
    return data_td


def local(tensor):
    from torch.distributed.tensor import DTensor
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def snapshot(module):
    return {name: local(p).detach().double().cpu().clone() for name, p in module.named_parameters() if p.requires_grad}


def grads(module):
    return {name: local(p.grad).detach().double().cpu().clone() for name, p in module.named_parameters()
            if p.grad is not None}


def norm(tensors):
    return float(torch.sqrt(sum((t ** 2).sum() for t in tensors.values()))) if tensors else 0.0


def delta_norm(module, before):
    return norm({name: local(p).detach().double().cpu() - before[name] for name, p in module.named_parameters()
                 if p.requires_grad})


def adamw(w, clipped_grads, lr, betas, eps, weight_decay):
    """torch's AdamW (decoupled weight decay, bias-corrected moments) from fresh state over `clipped_grads`, float64."""
    (b1, b2), m, v = betas, torch.zeros_like(w), torch.zeros_like(w)
    for t, g in enumerate(clipped_grads, 1):
        w = w * (1 - lr * weight_decay)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        w = w - lr / (1 - b1 ** t) * m / ((v / (1 - b2 ** t)).sqrt() + eps)
    return w


def clipped(grad, grad_norm):
    """verl's clip_grad 1.0 (torch's clip_grad_norm_ coefficient)."""
    return {name: g * min(1.0, 1.0 / (grad_norm + 1e-6)) for name, g in grad.items()}


def tinker_run(backend, path):
    """verl's split-step test on the worker: returns the two steps' grad norms and every forward_backward's
    response log-probs."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import ActorConfig
    from verl.workers.engine_workers_tinker import TinkerTrainingWorker
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding
    # verl's split-step engine and optimizer config, fp32 so that the two engines' numbers compare.
    fields = dict(use_remove_padding=True, use_dynamic_bsz=False, micro_batch_size_per_gpu=2,
                  max_token_len_per_gpu=128, mixed_precision=FP32)
    config = training_config("language_model", backend, path, fields, {"lr": 1e-3, "lr_scheduler_type": "constant"})
    worker = new_worker(config, TinkerTrainingWorker)
    worker.set_loss_fn(partial(ppo_loss, config=ActorConfig(strategy=backend, rollout_n=1,
                                                            ppo_micro_batch_size_per_gpu=-1)))
    engine = worker.engine
    batch = partial(split_step_batch, config.model_config.hf_config.vocab_size, worker.engine_config)
    before = snapshot(engine.module)

    worker.optimizer_zero_grad()
    out_1 = worker.forward_backward(batch())
    assert "grad_norm" not in tu.get(out_1, "metrics")
    assert "log_probs" in out_1.keys()  # TinkerTrainingWorker asks for them: return_model_output=True
    grad_1 = grads(engine.module)
    assert norm(grad_1) > 0
    assert delta_norm(engine.module, before) == 0.0

    out_2 = worker.forward_backward(batch())
    assert "grad_norm" not in tu.get(out_2, "metrics")
    grad_2 = grads(engine.module)
    assert norm(grad_2) > norm(grad_1) * 1.5
    # The same batch twice: the accumulated gradient is twice one pass's (deterministic fp32 forward).
    assert norm(grad_2) == pytest.approx(2 * norm(grad_1), rel=1e-6)
    assert delta_norm(engine.module, before) == 0.0

    norm_1 = float(worker.optimizer_step(optim_step_params=dict(OPTIM_STEP_PARAMS))["grad_norm"])
    assert norm_1 > 0
    for group in engine.optimizer.param_groups:
        assert group["lr"] == pytest.approx(OPTIM_STEP_PARAMS["lr"])
        assert group["betas"] == pytest.approx(OPTIM_STEP_PARAMS["betas"])
        assert group["eps"] == pytest.approx(OPTIM_STEP_PARAMS["eps"])
        assert group["weight_decay"] == pytest.approx(OPTIM_STEP_PARAMS["weight_decay"])
    assert delta_norm(engine.module, before) > 0
    assert not any(p.grad is not None for p in engine.module.parameters())
    # The step's norm is the accumulated gradient's, before clipping.
    assert norm_1 == pytest.approx(norm(grad_2), rel=1e-5)
    step_1 = snapshot(engine.module)

    # A second split step on the new weights, for the AdamW check below to see the betas.
    worker.optimizer_zero_grad()
    out_3 = worker.forward_backward(batch())
    grad_3 = grads(engine.module)
    norm_2 = float(worker.optimizer_step(optim_step_params=dict(OPTIM_STEP_PARAMS))["grad_norm"])
    assert norm_2 == pytest.approx(norm(grad_3), rel=1e-5)
    step_2 = snapshot(engine.module)

    # The weights are AdamW's with the step's params, from the gradients read off engine.module before each step:
    # the first step checks lr, eps and weight_decay (bias correction takes the betas out of it), the second the
    # betas too. fp32 weights: a few units in the last place of each weight.
    g_1, g_2 = clipped(grad_2, norm_1), clipped(grad_3, norm_2)
    for name, w in before.items():
        zero = torch.zeros_like(w)
        for got, gs in ((step_1, [g_1.get(name, zero)]), (step_2, [g_1.get(name, zero), g_2.get(name, zero)])):
            torch.testing.assert_close(got[name], adamw(w, gs, **OPTIM_STEP_PARAMS), rtol=3e-7, atol=1e-9,
                                       msg=name)

    # Tinker's forward_backward returns the log-probs (return_model_output): compared where the loss reads them,
    # on the response tokens.
    data_td = batch()
    return [norm_1, norm_2], [no_padding_2_padding(tu.get(out, "log_probs").detach().cpu().float(), data_td)
                              for out in (out_1, out_2, out_3)]


def test_tinker_split_step(tiny_model_dir):
    got_norms, got_log_probs = tinker_run("enginery_fsdp2", tiny_model_dir)
    want_norms, want_log_probs = tinker_run("fsdp2", tiny_model_dir)
    assert got_norms == pytest.approx(want_norms, rel=1e-5)
    for got, want in zip(got_log_probs, want_log_probs):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
