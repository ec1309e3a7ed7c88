"""Every path verl's workers drive an engine through, enginery_fsdp2 beside verl's own fsdp2 engine (the control),
both built by verl's EngineRegistry.new from verl's config objects, on the same tiny Qwen2 and the same batches, in
one process of world size 1: on cuda over NCCL (the ctest entry verl_gpu_workers_gpu, ENGINERY_VERL_DEVICE=cuda),
and by hand on the CPU over Gloo with verl's CPU platform (verl_cpu.py) when ENGINERY_VERL_DEVICE is unset.

- train_batch with verl's ppo_loss (two steps and the lr scheduler's), sft_loss and value_loss (a value model): each
  micro-batch's loss, the grad norm, verl's metrics and the trained weights against verl's engine; fp32 tightly,
  bf16 and fp16 (grad scaler) as no less accurate than verl's against verl's fp32 run;
- infer_batch's log-probs and entropy (calculate_entropy) in fp32, bf16 and fp16 against verl's; one fp16 step
  with the grad scaler: engine.scaler is torch's ShardedGradScaler and reports the scale;
- get_per_tensor_param equals the Hugging Face weights; after a step, get_per_tensor_param_shard's pieces and
  prime_delta_snapshots + get_per_tensor_param_delta_shard put together as verl's delta checkpoint engine does
  (verl_shards.py) give the trained weights;
- to("cpu") / to(device) between modes, by hand and through engine_config offload_outside_modes: the next
  infer_batch and train_batch bitwise those of an engine that never moved, and verl's after the same moves; on cuda
  the device memory in use drops by at least the fp32 weights when the state leaves;
- save_checkpoint -> load_checkpoint into a fresh engine: the next step's losses, grad norm and weights bitwise the
  uninterrupted run's (verl's engine too, as the control).

What catches the adapter's old behaviour:
- assert_on_device (every loss test, on cuda): micro-batches were handed to verl's loss in host memory; verl's
  compute_policy_loss_vanilla then failed with "Expected all tensors to be on the same device, cuda:0 and cpu";
- isinstance(engine.scaler, ShardedGradScaler) (test_fp16_train_step_with_grad_scaler): engine.scaler was a
  read-only view, no ShardedGradScaler;
- the metrics' types (test_ppo_loss_train_batch_fp32_equals_verl_fsdp2): a list of Metric objects per key, where
  verl's engine gathers one Metric per key (its append_to_dict), which verl's reduce_metrics needs;
- model_output == {} after a training train_batch (test_ppo_loss_train_batch_fp32_equals_verl_fsdp2): the model
  outputs came back from training calls, which verl's engine drops unless return_model_output."""
import math
from functools import partial

import pytest
import torch
import transformers
import verl_batches
import verl_shards
from conftest import DEVICE, engine_config, model_config, new_engine, one_rank_group, optimizer_config
from test_losses import reference_model, token_log_probs

# Four rows, two micro-batches of two: verl's engine needs the batch to divide into micro-batches.
STEPS = [
    {"prompts": [[5, 9, 3], [7, 2], [11, 4, 6, 8], [17, 1]],
     "responses": [[12, 30, 7, 2], [40, 3], [9, 9, 21], [3, 50, 60, 70, 80]],
     "advantages": [1.0, -0.5, 0.25, 0.75]},
    {"prompts": [[2, 8], [33, 5, 1], [6, 6], [90, 91, 92]],
     "responses": [[4, 4, 19], [61, 2, 7, 7], [120, 3], [14, 15, 16, 17]],
     "advantages": [-1.0, 0.5, 1.5, -0.25]},
]
MICRO = 2
BACKENDS = ("enginery_fsdp2", "fsdp2")  # enginery's, then verl's own (the control)


process_group = pytest.fixture(scope="module", autouse=True)(one_rank_group)


def mixed(dtype):
    return {"param_dtype": dtype, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def build(backend, path, dtype="fp32", model_type="language_model", **fields):
    """One engine as verl's TrainingWorker builds it: fp32 master weights (model_dtype), compute in `dtype`, fp32
    reductions, verl's optimizer yaml with a learning rate that moves the weights visibly in two steps."""
    if backend == "fsdp2":
        from verl.workers.config import FSDPEngineConfig
        # use_torch_compile would compile verl's entropy function with inductor: the same function, compiled (a C++
        # compiler on the CPU, time on both) for nothing compared here.
        config = FSDPEngineConfig(strategy="fsdp2", use_torch_compile=False, mixed_precision=mixed(dtype),
                                  model_dtype="fp32", **fields)
    else:
        config = engine_config(strategy=backend, mixed_precision=mixed(dtype), **fields)
    engine = new_engine(path, backend, model_type, model=model_config(path), engine=config,
                        optim=optimizer_config(lr=1e-3, clip_grad=1.0, total_training_steps=10))
    engine.initialize()
    return engine


# --- batches -----------------------------------------------------------------------------------------------------
_old_log_probs = {}


def old_log_probs(path, step):
    """A rollout's log-probs of each response: transformers' fp32 ones under the initial weights, moved by a fixed
    amount per token so that the importance ratio is not 1 and PPO's clip (0.2) cuts some tokens: the loss then
    depends on the engine's log-probs, not only on the advantages."""
    if (path, step) not in _old_log_probs:
        model = reference_model(path)
        batch = STEPS[step]
        with torch.no_grad():
            _old_log_probs[path, step] = [
                token_log_probs(model, p + r)[len(p) - 1:] + 0.3 * torch.sin(torch.arange(len(r)) * 1.7 + row)
                for row, (p, r) in enumerate(zip(batch["prompts"], batch["responses"]))]
    return _old_log_probs[path, step]


def ppo_batch(path, step=0):
    s = STEPS[step]
    return verl_batches.ppo_batch(s["prompts"], s["responses"], old_log_probs(path, step), s["advantages"], MICRO)


def infer_batch_data(step=0):
    """The PPO batch as verl's compute_log_prob hands it to infer_batch, with entropy asked for."""
    from verl.utils import tensordict_utils as tu
    s = STEPS[step]
    data = verl_batches.ppo_batch(s["prompts"], s["responses"], [torch.zeros(len(r)) for r in s["responses"]],
                                  s["advantages"], MICRO)
    tu.assign_non_tensor(data, calculate_entropy=True)
    return data


# --- what the loss receives ----------------------------------------------------------------------------------------
def tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors(v)
    elif type(value).__name__ == "TensorDict":
        for key in value.keys():
            yield from tensors(value.get(key))


def assert_on_device(loss_function):
    """verl's loss, first asserting that every tensor it is handed is on the engine's device (verl's own engine
    moves each micro-batch there in its forward_step)."""
    def checked(model_output, data, dp_group=None):
        for where, value in (("model_output", model_output), ("data", data)):
            devices = {t.device.type for t in tensors(value)}
            assert devices == {DEVICE}, f"the loss got {where} tensors on {devices}, the engine is on {DEVICE}"
        return loss_function(model_output=model_output, data=data, dp_group=dp_group)
    return checked


def ppo(backend):
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss
    # One config per engine: ppo_loss writes the batch's global info into it.
    return assert_on_device(partial(ppo_loss, ActorConfig(strategy=backend, rollout_n=1,
                                                          ppo_micro_batch_size_per_gpu=MICRO)))


def metric_values(metric):
    """A verl metric as floats: a Metric's values, or a list's."""
    values = metric.values if hasattr(metric, "aggregation") else metric
    return [float(v) for v in values]


def weights(engine):
    """get_per_tensor_param as {HF name: fp32 tensor in host memory}."""
    generator, peft = engine.get_per_tensor_param()
    assert peft is None
    return {name: tensor.detach().float().cpu().clone() for name, tensor in generator}


def train(engine, data, loss_function):
    with engine.train_mode():
        out = engine.train_batch(data, loss_function)
    engine.lr_scheduler_step()
    return out


def step_result(out):
    return out["loss"], out["metrics"]["grad_norm"]


def rows(nested):
    """Per-row outputs in host memory, fp32, without each row's last position: it predicts past the row (verl's
    log-prob there takes the next packed row's first token as its label), no loss reads it (verl's no_padding_2_padding
    stops a row's response at the position before), and the two engines do not fill it alike."""
    return [t.float().cpu()[:-1] for t in nested.unbind()]


def infer(engine, data):
    with engine.eval_mode():
        out = engine.infer_batch(data)["model_output"]
    return rows(out["log_probs"]), rows(out["entropy"])


def max_diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


# --- losses through train_batch ------------------------------------------------------------------------------------
# fp32: both engines compute the same float32 graph in a different order (enginery's C++ kernels and packing vs
# transformers under FSDP2): differences are rounding, ~1e-7 relative per op; 1e-5 leaves a hundredfold margin and
# still catches any change of formula (a wrong normalisation or a missing token moves the loss by percents).
FP32 = {"rel": 1e-5, "abs": 1e-6}
# Weights after AdamW steps of lr 1e-3: each element moves by about lr a step whatever its gradient's size (Adam
# normalises), so fp32 rounding in a gradient barely moves it; 1e-5 is 1% of one step.
WEIGHT_ATOL = 1e-5
# bf16 / fp16 compute: the engines round at different points (verl even returns its log-probs in bf16), so they are
# not compared with each other but each with verl's fp32 run on the same weights and batches: enginery's error must
# be at most twice verl's own in that format, plus one rounding (the unit roundoff u, 2^-8 for bf16's 8-bit
# significand, 2^-11 for fp16's 11) of the reference value. A kernel computing in less precision than asked, a lost
# fp32 accumulation or a wrong scale gives errors many times verl's.
# [Note: one metric, one accuracy] A step's per-micro-batch values of one metric (its losses, its ppo_kl) are bounded
# by verl's largest error on that metric in the step, not each by verl's error on that one micro-batch: verl's error on
# one value is one draw of its rounding. ppo_kl is a mean of differences of log-probs near -4.85, so its rounding
# scales with those, not with the 0.03 result; on the H100 (2026-12-07) verl's fp16 errors on the two micro-batches
# were 7.5e-5 and 0.7e-6, enginery's 4.5e-5 and 3.8e-5, and a per-value bound failed on verl's lucky draw alone.
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


def assert_as_accurate_as_verl(got, verl, reference, dtype, what, verl_error=None):
    """verl_error: verl's error that bounds each value (default: its error on that value)."""
    got, verl, reference = (torch.as_tensor(x, dtype=torch.float64).flatten() for x in (got, verl, reference))
    if verl_error is None:
        verl_error = (verl - reference).abs()
    bound = 2 * verl_error + UNIT_ROUNDOFF[dtype] * reference.abs() + 1e-6
    error = (got - reference).abs()
    assert bool((error <= bound).all()), (what, f"enginery's error {error.max():.3g}, verl's "
                                                f"{(verl - reference).abs().max():.3g}", got, verl, reference)


def ppo_run(backend, path, dtype):
    """Two PPO steps (verl's train_batch, then its lr_scheduler_step), the trained weights, and the log-probs and
    entropy of the second batch after them."""
    engine = build(backend, path, dtype)
    steps = [train(engine, ppo_batch(path, step), ppo(backend)) for step in range(len(STEPS))]
    return steps, weights(engine), infer(engine, infer_batch_data(1))


def metrics(out):
    """A step's numbers by metric: the micro-batches' losses, the grad norm, verl's actor metrics."""
    values = {"loss": list(out["loss"]), "grad_norm": [out["metrics"]["grad_norm"]]}
    for key in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl"):
        values[key] = metric_values(out["metrics"][key])
    return values


def scalars(out):
    return [v for values in metrics(out).values() for v in values]


def test_ppo_loss_train_batch_fp32_equals_verl_fsdp2(tiny_model_dir):
    (got, got_weights, got_out), (want, want_weights, want_out) = (
        ppo_run(backend, tiny_model_dir, "fp32") for backend in BACKENDS)
    for step, (g, w) in enumerate(zip(got, want)):
        assert len(g["loss"]) == len(w["loss"]) == len(STEPS[step]["prompts"]) // MICRO
        for key, value in w["metrics"].items():  # verl's shapes: one Metric per key where the loss returns Metrics
            assert type(g["metrics"][key]) is type(value), (step, key, g["metrics"][key])
        assert scalars(g) == pytest.approx(scalars(w), **FP32), step
        assert g["model_output"] == {} and w["model_output"] == {}, step  # no return_model_output
    assert sum(metric_values(want[0]["metrics"]["actor/pg_clipfrac"])) > 0  # the clip is exercised
    assert set(got_weights) == set(want_weights)
    for name, tensor in got_weights.items():
        assert torch.allclose(tensor, want_weights[name], rtol=0, atol=WEIGHT_ATOL), name
    assert max_diff(got_out[0], want_out[0]) < 1e-5 and max_diff(got_out[1], want_out[1]) < 1e-5


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_ppo_loss_train_batch_in_low_precision_as_accurate_as_verl_fsdp2(tiny_model_dir, dtype):
    """bf16, and fp16 with the grad scaler: losses, grad norms and metrics of both steps, the trained weights (the
    largest difference over all of them: a step's sign flip in a near-zero gradient moves an element by 2 lr
    wherever it happens) and the log-probs and entropy after training, against verl's fp32 run."""
    reference, verl, got = (ppo_run(backend, tiny_model_dir, d)
                            for backend, d in (("fsdp2", "fp32"), ("fsdp2", dtype), ("enginery_fsdp2", dtype)))
    for step in range(len(STEPS)):
        want = metrics(reference[0][step])
        for key, verl_values in metrics(verl[0][step]).items():  # [Note: one metric, one accuracy]
            verl_error = max(abs(float(v) - float(r)) for v, r in zip(verl_values, want[key]))
            assert_as_accurate_as_verl(metrics(got[0][step])[key], verl_values, want[key], dtype,
                                       f"step {step} {key}", verl_error)
    largest = lambda run: max(float((run[1][n] - t).abs().max()) for n, t in reference[1].items())  # noqa: E731
    assert_as_accurate_as_verl(largest(got), largest(verl), 0.0, dtype, "weights")
    for what, index in (("log_probs", 0), ("entropy", 1)):
        assert_as_accurate_as_verl(torch.cat(got[2][index]), torch.cat(verl[2][index]),
                                   torch.cat(reference[2][index]), dtype, what)


def test_sft_loss_train_batch_equals_verl_fsdp2(tiny_model_dir):
    from verl.workers.utils.losses import sft_loss
    s = STEPS[0]
    results = {}
    for backend in BACKENDS:
        engine = build(backend, tiny_model_dir)
        results[backend] = train(engine, verl_batches.sft_batch(s["prompts"], s["responses"], MICRO),
                                 assert_on_device(partial(sft_loss, config=None)))
    got, want = results["enginery_fsdp2"], results["fsdp2"]
    assert got["loss"] == pytest.approx(want["loss"], **FP32)
    assert got["metrics"]["grad_norm"] == pytest.approx(want["metrics"]["grad_norm"], **FP32)


@pytest.fixture(scope="module")
def value_model_dir(tmp_path_factory):
    """conftest's value model (a Qwen2 token classifier, one label) with classifier_dropout 0, as verl's
    load_valuehead_model sets it: transformers' default (0.1) would make verl's training forward random. verl takes
    load_valuehead_model only for HFModelConfig.model_type "value_model", and there forces flash_attention_2 (no
    flash-attn on either machine; its fallback needs trl): left at "language_model", verl loads the same class,
    AutoModelForTokenClassification, with sdpa."""
    path = tmp_path_factory.mktemp("tiny_qwen2_value_no_dropout")
    config = transformers.Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False, num_labels=1, classifier_dropout=0.0)
    torch.manual_seed(1)
    transformers.AutoModelForTokenClassification.from_config(config).save_pretrained(path)
    return str(path)


def test_value_loss_train_batch_equals_verl_fsdp2(value_model_dir):
    """verl's critic path: a value model, its values by infer_batch (the old values), then value_loss against
    returns; old values equal to the current ones keep the value clip inactive."""
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss
    results = {}
    for backend in BACKENDS:
        engine = build(backend, value_model_dir, model_type="value_model")
        with engine.eval_mode():
            values = engine.infer_batch(infer_batch_data())["model_output"]["values"]
        data = infer_batch_data()
        width = data["response_mask"].shape[1]
        old = []
        for row, (p, r) in enumerate(zip(STEPS[0]["prompts"], STEPS[0]["responses"])):
            # verl's critic value of response token j is the head's output at the position before it.
            v = values[row].float().cpu()[len(p) - 1: len(p) + len(r) - 1]
            old.append(torch.nn.functional.pad(v, (0, width - len(r))))
        data["values"] = torch.stack(old)
        data["returns"] = torch.stack([torch.nn.functional.pad(torch.linspace(-1.0, 1.0, len(r)), (0, width - len(r)))
                                       for r in STEPS[0]["responses"]])
        config = CriticConfig(strategy=backend, ppo_micro_batch_size_per_gpu=MICRO)
        results[backend] = data["values"], train(engine, data, assert_on_device(partial(value_loss, config)))
    (got_values, got), (want_values, want) = results["enginery_fsdp2"], results["fsdp2"]
    assert torch.allclose(got_values, want_values, rtol=0, atol=1e-5)
    assert got["loss"] == pytest.approx(want["loss"], **FP32)
    assert got["metrics"]["grad_norm"] == pytest.approx(want["metrics"]["grad_norm"], **FP32)


# --- log-probs and entropy -----------------------------------------------------------------------------------------
def test_log_probs_and_entropy_fp32_equal_verl_fsdp2(tiny_model_dir):
    """fp32: the same float32 computation in another order; log-probs near -log(128) ~ -4.85 and entropies near
    4.85 agree to float32 rounding over a few hundred terms (~1e-6); 1e-5 allows that and nothing more."""
    got = infer(build("enginery_fsdp2", tiny_model_dir), infer_batch_data())
    want = infer(build("fsdp2", tiny_model_dir), infer_batch_data())
    assert max_diff(got[0], want[0]) < 1e-5
    assert max_diff(got[1], want[1]) < 1e-5


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_log_probs_and_entropy_in_low_precision_as_accurate_as_verl_fsdp2(tiny_model_dir, dtype):
    """infer_batch computing in bf16 / fp16 on the initial weights, against verl's fp32 (assert_as_accurate_as_verl)."""
    reference = infer(build("fsdp2", tiny_model_dir), infer_batch_data())
    verl = infer(build("fsdp2", tiny_model_dir, dtype), infer_batch_data())
    got = infer(build("enginery_fsdp2", tiny_model_dir, dtype), infer_batch_data())
    for what, index in (("log_probs", 0), ("entropy", 1)):
        assert_as_accurate_as_verl(torch.cat(got[index]), torch.cat(verl[index]), torch.cat(reference[index]), dtype,
                                   what)


def test_fp16_train_step_with_grad_scaler(tiny_model_dir):
    """One fp16 PPO step: both engines scale the loss with a ShardedGradScaler (verl's test_engine.py asserts its
    type), step, and report the grad norm of the unscaled gradients. torch's scaler starts at 2^16 and verl's grows
    only after 400 finite steps, so after one step the scale is still 2^16. On the CPU torch disables a
    ShardedGradScaler made for cuda (verl's: scale 1, a pass-through), so the scales are compared where verl's is
    enabled."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    scalers = {}
    for backend in BACKENDS:
        engine = build(backend, tiny_model_dir, "fp16")
        assert isinstance(engine.scaler, ShardedGradScaler), backend
        initial = weights(engine)
        out = train(engine, ppo_batch(tiny_model_dir), ppo(backend))
        assert math.isfinite(out["metrics"]["grad_norm"]), backend
        trained = weights(engine)
        assert any(not torch.equal(t, initial[n]) for n, t in trained.items()), f"{backend}: the step was skipped"
        scalers[backend] = engine.scaler
    assert scalers["enginery_fsdp2"].get_scale() == 2.0 ** 16
    if scalers["fsdp2"].is_enabled():
        assert scalers["enginery_fsdp2"].get_scale() == scalers["fsdp2"].get_scale()


# --- weights out ---------------------------------------------------------------------------------------------------
def test_per_tensor_param_equals_hf_weights(tiny_model_dir):
    """Before any step, get_per_tensor_param is the checkpoint's weights, bitwise, under their Hugging Face names
    (fp32 masters, model_dtype fp32), for both engines."""
    hf = {name: t.detach() for name, t in transformers.AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float32).state_dict().items()}
    for backend in BACKENDS:
        got = weights(build(backend, tiny_model_dir))
        assert set(got) == set(hf), backend
        for name, tensor in hf.items():
            assert torch.equal(got[name], tensor), (backend, name)


def on_host(export):
    """A shard export's pieces in host memory, where verl_shards puts the tensors together (rank 0's consumer);
    where the pieces live is the engine's business (verl's own are on the GPU). World size 1: no gather groups, so
    nothing crosses a process group."""
    generator, peft = export

    def moved():
        for entry in generator:
            yield tuple(x.cpu() if isinstance(x, torch.Tensor) else x for x in entry)
    return moved(), peft


def test_shard_and_delta_export_after_a_step(tiny_model_dir):
    engine = build("enginery_fsdp2", tiny_model_dir)
    initial = weights(engine)
    for dtype, got in ((torch.bfloat16, verl_shards.gather_shards(on_host(engine.get_per_tensor_param_shard()))),
                       (torch.float32, verl_shards.gather_shards(on_host(engine.get_per_tensor_param_shard(
                           torch.float32))))):
        assert set(got) == set(initial)
        for name, tensor in initial.items():
            assert got[name].dtype == dtype and torch.equal(got[name], tensor.to(dtype)), name

    engine.prime_delta_snapshots()
    train(engine, ppo_batch(tiny_model_dir), ppo("enginery_fsdp2"))
    trained = weights(engine)
    seed = {name: tensor.to(torch.bfloat16) for name, tensor in initial.items()}  # what the rollout holds
    before = {name: tensor.clone() for name, tensor in seed.items()}
    changed = verl_shards.apply_delta(on_host(engine.get_per_tensor_param_delta_shard()), seed)
    assert set(changed) == set(trained)
    for name, tensor in trained.items():
        assert torch.equal(seed[name], tensor.to(torch.bfloat16)), name
        assert torch.equal(changed[name], verl_shards.changed_positions(before[name], seed[name])), name
    assert sum(map(len, changed.values())) > 0
    again = verl_shards.apply_delta(on_host(engine.get_per_tensor_param_delta_shard()), seed)
    assert all(len(p) == 0 for p in again.values())

    # The step exported is verl's step: verl's engine trained on the same batch reaches the same weights.
    control = build("fsdp2", tiny_model_dir)
    train(control, ppo_batch(tiny_model_dir), ppo("fsdp2"))
    for name, tensor in weights(control).items():
        assert torch.allclose(trained[name], tensor, rtol=0, atol=WEIGHT_ATOL), name


# --- moving the state between modes --------------------------------------------------------------------------------
def allocated():
    return torch.cuda.memory_allocated() if DEVICE == "cuda" else 0


def moved_run(engine, path, backend, move):
    """Step 0, then `move` (the state out of the device and back, or nothing), an infer_batch, then step 1; with the
    device memory in use just before and after the state left (cuda)."""
    first = step_result(train(engine, ppo_batch(path, 0), ppo(backend)))
    memory = move(engine)
    log_probs = infer(engine, infer_batch_data(1))[0]
    second = step_result(train(engine, ppo_batch(path, 1), ppo(backend)))
    return first, log_probs, second, memory, weights(engine)


def by_hand(engine):
    """verl's manual placement (its workers' to("cpu") / to("device") around phases)."""
    held = allocated()
    engine.to("cpu")
    left = allocated()
    engine.to(DEVICE)
    return held, left


def test_to_cpu_and_back_between_modes(tiny_model_dir):
    """enginery moved by hand and through offload_outside_modes (the state in host memory outside train_mode /
    eval_mode) computes bitwise what an enginery engine that never moved computes: moving is a copy. verl's engine,
    moved by hand the same way, is the control (fp32 tolerance)."""
    stay = moved_run(build("enginery_fsdp2", tiny_model_dir), tiny_model_dir, "enginery_fsdp2", lambda e: None)
    manual = moved_run(build("enginery_fsdp2", tiny_model_dir), tiny_model_dir, "enginery_fsdp2", by_hand)

    offloading = build("enginery_fsdp2", tiny_model_dir, offload_outside_modes=True)
    at_rest = allocated()
    inside = []

    class Probe:
        """ppo's loss, noting the device memory in use while the state is on the device."""
        def __init__(self, loss):
            self.loss = loss

        def __call__(self, **kwargs):
            inside.append(allocated())
            return self.loss(**kwargs)

    first = step_result(train(offloading, ppo_batch(tiny_model_dir, 0), Probe(ppo("enginery_fsdp2"))))
    after = allocated()
    log_probs = infer(offloading, infer_batch_data(1))[0]
    second = step_result(train(offloading, ppo_batch(tiny_model_dir, 1), ppo("enginery_fsdp2")))
    auto = first, log_probs, second, None, weights(offloading)

    verl = moved_run(build("fsdp2", tiny_model_dir), tiny_model_dir, "fsdp2", by_hand)

    for label, run in (("by hand", manual), ("offload_outside_modes", auto)):
        assert run[0] == stay[0] and run[2] == stay[2], label  # losses and grad norms, bitwise
        assert all(torch.equal(a, b) for a, b in zip(run[1], stay[1])), label
        assert all(torch.equal(run[4][name], t) for name, t in stay[4].items()), label
    assert manual[2][0] == pytest.approx(verl[2][0], **FP32)
    assert manual[2][1] == pytest.approx(verl[2][1], **FP32)
    assert max_diff(manual[1], verl[1]) < 1e-5

    if DEVICE == "cuda":
        fp32_weights = 4 * sum(t.numel() for t in stay[4].values())
        for label, (held, left) in (("enginery to()", manual[3]), ("verl to()", verl[3])):
            assert held - left >= fp32_weights, (label, held, left)
        assert min(inside) - at_rest >= fp32_weights, (inside, at_rest)
        assert min(inside) - after >= fp32_weights, (inside, after)


# --- checkpoints ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_resumes_bitwise(tiny_model_dir, tmp_path, backend):
    """save_checkpoint after a step, load_checkpoint into a fresh engine: the next step's losses, grad norm and
    every weight equal the uninterrupted run's bitwise (verl's engine: the control). On cuda too: in fp32 no flash
    kernel runs, and the memory-efficient attention's backward splits keys (its one nondeterministic reduction)
    only past one block of 64 keys, many times these sequences."""
    first = build(backend, tiny_model_dir)
    initial = weights(first)
    train(first, ppo_batch(tiny_model_dir, 0), ppo(backend))
    first.save_checkpoint(str(tmp_path), global_step=1)
    uninterrupted = step_result(train(first, ppo_batch(tiny_model_dir, 1), ppo(backend)))
    trained = weights(first)

    second = build(backend, tiny_model_dir)
    second.load_checkpoint(str(tmp_path))
    assert step_result(train(second, ppo_batch(tiny_model_dir, 1), ppo(backend))) == uninterrupted
    resumed = weights(second)
    assert set(resumed) == set(trained)
    for name, tensor in trained.items():
        assert torch.equal(resumed[name], tensor), name
        assert not torch.equal(tensor, initial[name]), f"{name} was not trained"
