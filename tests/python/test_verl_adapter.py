"""enginery.verl against the contract of verl's engines (verl/workers/engine/base.py and its FSDP engine), on CPU
with the built-in tiny Qwen2: verl's constructor and method set, its no-padding batch (jagged nested tensors, handed
to the engine as views), loss_function(model_output=, data=, dp_group=), the result
{"model_output", "loss": [per micro-batch], "metrics": {name: [per micro-batch]}}, and the same numbers as the
engine driven directly (enginery.new_engine) on the equivalent padded batch."""
import math

import enginery
import pytest
import torch
from enginery import verl as enginery_verl

import common
import verl_common

MODEL = {"path": "builtin:qwen2-tiny"}
ENGINE = {"strategy": "enginery_fsdp", "micro_batch_size_per_gpu": 2, "mixed_precision": {"param_dtype": "fp32"}}
OPTIM = {"lr": 1e-2, "weight_decay": 0.0}


def adapter(cls=enginery_verl.LanguageModelEngine, **extra):
    engine = cls(model_config=MODEL, engine_config={**ENGINE, **extra}, optimizer_config=OPTIM,
                 checkpoint_config=None, device="cpu", plugin_dirs=[common.PLUGIN_DIR])
    engine.initialize()
    return engine


def direct(model_type="language_model"):
    engine = enginery.new_engine(model_type, "fsdp", "cpu", common.CONFIG)
    engine.initialize()
    return engine


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)


def test_log_probs_are_the_engines_in_verls_layout_and_order():
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    data["calculate_entropy"] = True
    engine = adapter()
    with engine.eval_mode():
        assert engine.mode == "eval"
        out = engine.infer_batch(data)
    assert engine.mode is None
    assert set(out) == {"model_output", "loss", "metrics"} and out["loss"] == [] and out["metrics"] == {}
    plain = direct().infer_batch({**verl_common.plain_batch(prompts, responses), "calculate_entropy": True})
    for name in ("log_probs", "entropy"):
        got = out["model_output"][name]
        assert got.is_nested and got.layout == torch.jagged
        assert got.offsets() is data["input_ids"].offsets()  # views on verl's offsets: its ragged dimension
        want = plain["model_output"][name]
        for r, row in enumerate(verl_common.rows_of(got)):
            n = prompts[r].shape[0] + responses[r].shape[0]
            assert row.shape == (n,)
            assert torch.equal(row[: n - 1], want[r, 1:n]), (name, r)  # position t: token t + 1
            assert row[n - 1] == 0


def test_value_model_values_per_token():
    prompts, responses = verl_common.sequences()
    engine = adapter(enginery_verl.ValueModelEngine)
    out = engine.infer_batch(verl_common.verl_batch(prompts, responses))
    want = direct("value_model").infer_batch(verl_common.plain_batch(prompts, responses))["model_output"]["values"]
    for r, row in enumerate(out["model_output"]["values"]):
        n = prompts[r].shape[0] + responses[r].shape[0]
        assert torch.equal(row, want[r, :n]), r


def test_train_batch_as_verl_and_as_the_engine_directly():
    """verl's SFT loss through the adapter equals the engine's own SFT loss on the padded batch, step for step."""
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    plain = verl_common.plain_batch(prompts, responses)
    engine, reference = adapter(), direct()
    calls = []

    def loss_function(model_output, data, dp_group):  # verl calls it by keyword, with these three names
        calls.append((sorted(model_output), data["batch_num_tokens"], data["dp_size"], dp_group))
        return verl_common.sft_loss(model_output, data, dp_group)

    with engine.train_mode():
        for step in range(3):
            out = engine.train_batch(data, loss_function)
            want = reference.train_batch(plain, common.sft_loss)
            assert len(out["loss"]) == 2 and all(isinstance(v, float) for v in out["loss"])  # two micro-batches
            assert close(sum(out["loss"]), float(want["loss"])), step
            assert close(out["metrics"]["grad_norm"], want["grad_norm"]), step
            assert out["metrics"]["tokens"] == [float(data["loss_mask"][:2].sum()), float(data["loss_mask"][2:].sum())]
            # verl's train_batch leaves the schedule to the worker; the engine's own train_batch steps it
            assert close(engine.lr_scheduler_step(), want["lr"]), step
    assert calls[0] == (["log_probs"], float(data["loss_mask"].sum()), 1, None)


def test_per_call_micro_batching_is_honoured():
    """verl sends micro_batch_size_per_gpu / use_dynamic_bsz / max_token_len_per_gpu with each call: they cut that
    call's micro-batches (one loss per micro-batch), the sum stays the global token mean."""
    prompts, responses = verl_common.sequences()
    engine = adapter()
    configured = engine.infer_batch(verl_common.verl_batch(prompts, responses), verl_common.sft_loss)
    assert len(configured["loss"]) == 2
    per_row = verl_common.verl_batch(prompts, responses)
    per_row["micro_batch_size_per_gpu"] = 1
    split = engine.infer_batch(per_row, verl_common.sft_loss)
    assert len(split["loss"]) == 4 and close(sum(split["loss"]), sum(configured["loss"]))
    dynamic = verl_common.verl_batch(prompts, responses)
    dynamic["use_dynamic_bsz"], dynamic["max_token_len_per_gpu"] = True, 1000
    assert len(engine.infer_batch(dynamic, verl_common.sft_loss)["loss"]) == 1
    bad = verl_common.verl_batch(prompts, responses)
    bad["micro_batch_size_per_gpu"] = 0
    with pytest.raises(enginery.EngineryError, match="micro_batch_size_per_gpu"):
        engine.infer_batch(bad, verl_common.sft_loss)


def test_the_loss_sees_its_micro_batchs_rows_with_outputs_nested_on_their_offsets():
    """The engine's loop names each micro-batch's rows (ctx.rows; dynamic micro-batches group rows out of order):
    verl's loss gets those rows of verl's batch and the outputs as nested tensors on their offsets, each row the
    whole call's outputs for that row."""
    prompts, responses = verl_common.sequences(prompt=(3, 9, 2, 8), response=(6, 7, 3, 5))  # 9, 16, 5 and 13 tokens
    engine = adapter()
    whole = engine.infer_batch(verl_common.verl_batch(prompts, responses))["model_output"]["log_probs"].unbind()
    data = verl_common.verl_batch(prompts, responses)
    every_row = data["input_ids"].unbind()
    data["use_dynamic_bsz"], data["max_token_len_per_gpu"] = True, 18
    seen = []

    def loss_function(model_output, data, dp_group):
        log_probs = model_output["log_probs"]
        assert log_probs.is_nested and log_probs.layout == torch.jagged
        assert torch.equal(log_probs.offsets(), data["input_ids"].offsets())
        seen.append([int(n) for n in data["input_ids"].offsets().diff()])
        for row, ids in zip(log_probs.unbind(), data["input_ids"].unbind()):
            r = next(i for i, t in enumerate(every_row) if t.shape == ids.shape and torch.equal(t, ids))
            # The same row's log-probs, computed in a micro-batch of other rows: equal up to the fp32 rounding of the
            # CPU's matmul kernels, whose blocking depends on how many rows they get (AVX-512 machines round the
            # two shapes apart; AVX2 ones happen not to). A row placed at another row's offsets is off by whole nats.
            torch.testing.assert_close(row, whole[r], rtol=1e-5, atol=1e-5, msg=f"row {r}")
        return verl_common.sft_loss(model_output, data, dp_group)

    out = engine.infer_batch(data, loss_function)
    assert len(out["loss"]) == len(seen) > 1
    assert sorted(n for lengths in seen for n in lengths) == [5, 9, 13, 16]


def test_grpo_step_lowers_the_loss_of_positive_advantages():
    prompts, responses = verl_common.sequences()
    engine = adapter()
    data = verl_common.verl_batch(prompts, responses)
    with engine.eval_mode():
        old = engine.infer_batch(data)["model_output"]["log_probs"]
    data["old_log_probs"] = verl_common.response_part(old, data)
    data["advantages"] = torch.tensor([1.0, -1.0, 1.0, -1.0]).unsqueeze(1).expand(4, 7).contiguous()
    losses = []
    with engine.train_mode():
        for _ in range(3):
            out = engine.train_batch(data, verl_common.pg_loss)
            engine.lr_scheduler_step()
            losses.append(sum(out["loss"]))
            assert len(out["metrics"]["ratio_mean"]) == 2
    assert losses[-1] < losses[0], losses


def test_checkpoint_round_trip_with_verls_signature(tmp_path):
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    engine = adapter()
    engine.train_batch(data, verl_common.sft_loss)
    engine.save_checkpoint(str(tmp_path / "global_step_1"), hdfs_path=None, global_step=1, max_ckpt_to_keep=None)
    want = engine.train_batch(data, verl_common.sft_loss)
    fresh = adapter()
    fresh.load_checkpoint(str(tmp_path / "global_step_1"), hdfs_path=None, del_local_after_load=True)
    got = fresh.train_batch(data, verl_common.sft_loss)
    assert got["loss"] == want["loss"] and got["metrics"]["grad_norm"] == want["metrics"]["grad_norm"]
    with pytest.raises(enginery.EngineryError, match="hdfs_path"):
        engine.save_checkpoint(str(tmp_path / "x"), hdfs_path="hdfs://somewhere")


def test_verl_method_set_and_topology():
    engine = adapter()
    for name in ("initialize", "train_mode", "eval_mode", "forward_backward_batch", "train_batch", "infer_batch",
                 "optimizer_zero_grad", "optimizer_step", "lr_scheduler_step", "get_per_tensor_param", "to",
                 "save_checkpoint", "load_checkpoint", "get_data_parallel_rank", "get_data_parallel_size",
                 "get_data_parallel_group", "is_mp_src_rank_with_outputs"):
        assert callable(getattr(engine, name)), name
    assert (engine.get_data_parallel_rank(), engine.get_data_parallel_size()) == (0, 1)
    assert engine.get_data_parallel_group() is None  # no torch.distributed group in this process
    assert engine.is_mp_src_rank_with_outputs()
    assert engine.is_param_offload_enabled is False and engine.is_optimizer_offload_enabled is False
    engine.to("cpu", model=True, optimizer=True, grad=True)
    with pytest.raises(enginery.EngineryError, match="model=True"):
        engine.to("cpu", model=False, optimizer=True, grad=False)


@pytest.mark.parametrize("change, named", [
    ({"temperature": 0.0}, "temperature"),
    ({"temperature": torch.tensor([0.7, 0.7, 1.0, 1.0])}, "temperature"),  # one temperature per batch
    ({"loss_mask": None}, "loss_mask"),
    ({"calculate_entropy": "yes"}, "calculate_entropy"),
    ({"pad_mode": "left_right"}, "pad_mode"),
])
def test_unsupported_batch_entries_are_named(change, named):
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    engine = adapter()
    with pytest.raises(enginery.EngineryError, match=named):
        engine.infer_batch(data)


@pytest.mark.parametrize("temperature, named", [
    (0.0, "batch metadata 'temperature': = 0.000000 (allowed: a finite number > 0)"),
    (float("nan"), "batch metadata 'temperature': = nan (allowed: a finite number > 0)"),
    (True, "batch metadata 'temperature': must be a number (allowed: a finite number > 0)"),
])
def test_temperature_value_is_checked_by_the_engine(temperature, named):
    """The adapter hands verl's temperature on as one value per call and leaves its check to the engine
    (batch_temperature, docs/ARCHITECTURE.md "One step"); it re-checked the value itself before (issue 43)."""
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    data["temperature"] = temperature
    with pytest.raises(enginery.EngineryError) as error:
        adapter().infer_batch(data)
    assert named in str(error.value)


def test_verl_config_fields_are_read_by_the_engines_own_keys():
    """A verl config dataclass field is read when the engine reads the key of its name (engine_config_keys), with no
    list of verl names in the adapter: a field enginery reads but verl's FSDPOptimizerConfig lacks (eps), added by a
    subclass, reaches the engine; it was refused as not implemented before (issue 43)."""
    import dataclasses
    config_module = pytest.importorskip("verl.workers.config")
    keys = enginery.engine_config_keys()
    for key in ("model.path", "engine.mixed_precision.param_dtype", "optim.eps", "optim.total_training_steps",
                "checkpoint.save_contents"):
        assert key in keys, key
    assert "model.tokenizer_path" not in keys  # parsed, never read (config/unread_keys.cpp)

    @dataclasses.dataclass
    class WithEps(config_module.FSDPOptimizerConfig):
        eps: float = 1e-8

    engine = enginery_verl.LanguageModelEngine(model_config=MODEL, engine_config=ENGINE,
                                               optimizer_config=WithEps(lr=1e-3, eps=1e-6), device="cpu",
                                               plugin_dirs=[common.PLUGIN_DIR])
    engine.initialize()
    assert engine._engine.optimizer_hyperparameters["eps"] == 1e-6


def _rows_changed(key, row, change):
    """A change of verl's batch: row `row` of the jagged entry `key` replaced by change(that row)."""
    def apply(data):
        rows = list(verl_common.rows_of(data[key]))
        rows[row] = change(rows[row])
        return {**data, key: verl_common.nested(rows)}
    return apply


def _all_rows(key, change):
    def apply(data):
        return {**data, key: verl_common.nested(change(r) for r in verl_common.rows_of(data[key]))}
    return apply


def _response_mask_at(row, column, value):
    def apply(data):
        mask = data["loss_mask"].clone()
        mask[row, column] = value
        return {**data, "loss_mask": mask}
    return apply


def _sft_layout_with_short_row(data):
    """verl's SFT layout: loss_mask jagged like input_ids; its row 1 one entry short."""
    masks = [torch.ones(t.shape[0]) for t in verl_common.rows_of(data["input_ids"])]
    masks[1] = masks[1][1:]
    return {**data, "loss_mask": verl_common.nested(masks)}


def _nested_positions_of_other_lengths(data):
    positions = [torch.arange(t.shape[0] + (1 if i == 3 else 0)) for i, t in enumerate(data["input_ids"].unbind())]
    return {**data, "position_ids": verl_common.nested(positions)}


# The rows of verl_common.sequences(): 9, 8, 9 and 9 tokens, responses of 6, 3, 7 and 5 (loss_mask [4, 7]).
@pytest.mark.parametrize("change, message", [
    # position_ids of another length than input_ids' row: trained with the missing positions 0 (shorter) or a
    # tensor-size RuntimeError (longer) before; verl's engine refuses both
    (_rows_changed("position_ids", 2, lambda p: p[:7]),
     "batch['position_ids'] row 2 has 7 entries, input_ids 9 (allowed: one entry per token of input_ids)"),
    (_rows_changed("position_ids", 0, lambda p: torch.arange(11)), "batch['position_ids'] row 0 has 11 entries"),
    (_nested_positions_of_other_lengths, "batch['position_ids'] row 3 has 10 entries, input_ids 9"),
    (_all_rows("position_ids", lambda p: p.float()), "batch['position_ids'] row 0 has dtype torch.float32"),
    # float ids were cast (12.7 -> 12) and trained; an unsigned 2**64 - 1 was cast to -1 (a bare IndexError)
    (_all_rows("input_ids", lambda t: t.float() + 0.7),
     "batch['input_ids'] row 0 has dtype torch.float32 (allowed: torch.int64, torch.int32)"),
    (_all_rows("input_ids", lambda t: torch.full_like(t, 2**64 - 1, dtype=torch.uint64)),
     "batch['input_ids'] row 0 has dtype torch.uint64"),
    # an id past the vocabulary (256): a bare "IndexError: index out of range in self" before
    (_rows_changed("input_ids", 3, lambda t: t.index_fill(0, torch.tensor([4]), 256)),
     "batch['input_ids'] row 3: token 4 is 256, outside the model's vocabulary of 256 tokens (allowed: token ids "
     "0..255)"),
    # verl's response mask goes to the engine per sequence: the check names its row and column
    (_response_mask_at(2, 3, 0.5), "batch['loss_mask'] row 2: token 3 is 0.5 (allowed: 0 or 1 per token)"),
    (lambda d: {**d, "loss_mask": torch.zeros(4, 7)}, "batch['loss_mask']: has no target token"),
    (_sft_layout_with_short_row, "batch['loss_mask'] row 1 has 7 entries, input_ids 8"),
    # verl's per-response-token loss inputs are as wide as the response mask, or jagged like the responses
    (lambda d: {**d, "old_log_probs": torch.zeros(4, 6)},
     "batch['old_log_probs'] has shape [4, 6], loss_mask [4, 7] (allowed: one entry per response token, as "
     "loss_mask)"),
    (lambda d: {**d, "advantages": verl_common.nested(torch.zeros(n) for n in (5, 3, 7, 5))},
     "batch['advantages'] row 0 has 5 entries, the responses 6"),
    # rows that are not a jagged tensor, an empty row and tensors without values: vague errors before
    (lambda d: {**d, "input_ids": list(d["input_ids"].unbind())}, "batch['input_ids'] is a list (allowed: a jagged "
     "nested tensor (verl's no-padding layout) or a padded tensor)"),
    (_rows_changed("input_ids", 2, lambda t: t[:0]), "batch['input_ids'] row 2 has shape [0]"),
    (lambda d: {**d, "input_ids": d["input_ids"].to("meta")}, "batch['input_ids'] is on the meta device"),
])
def test_a_bad_verl_batch_is_refused_by_field_and_row_before_any_work(change, message):
    """verl's batch is checked at least as strictly as verl's engine checks it, each refusal naming the field and
    the row, before any work: the next step equals a fresh engine's first."""
    prompts, responses = verl_common.sequences()
    expected = adapter().train_batch(verl_common.verl_batch(prompts, responses), verl_common.sft_loss)
    engine = adapter()
    with pytest.raises(enginery.EngineryError) as error:
        engine.train_batch(change(verl_common.verl_batch(prompts, responses)), verl_common.sft_loss)
    assert message in str(error.value)
    got = engine.train_batch(verl_common.verl_batch(prompts, responses), verl_common.sft_loss)
    assert got["loss"] == expected["loss"]
    assert got["metrics"]["grad_norm"] == expected["metrics"]["grad_norm"]


@pytest.mark.parametrize("engine_config, named", [
    ({"no_such_key": 1}, "engine.no_such_key"),
    ({"strategy": "fsdp"}, "engine_config.strategy"),   # verl's own fsdp: not a name this adapter registers
    ({"forward_prefetch": True}, "engine.forward_prefetch"),  # verl's key, not implemented by the fsdp engine
])
def test_unknown_or_unsupported_config_keys_are_named(engine_config, named):
    with pytest.raises(enginery.EngineryError, match=named):
        enginery_verl.LanguageModelEngine(model_config=MODEL, engine_config={**ENGINE, **engine_config},
                                          optimizer_config=OPTIM, device="cpu", plugin_dirs=[common.PLUGIN_DIR])


def test_registration_with_a_registry_shaped_like_verls():
    class BaseEngine:  # verl's registry asserts subclasses of its BaseEngine
        pass

    class EngineRegistry:
        _engines = {}

        @classmethod
        def register(cls, model_type, backend, device="cuda"):
            def decorator(engine_class):
                assert issubclass(engine_class, BaseEngine)
                for b in backend:
                    for d in device:
                        cls._engines.setdefault(model_type, {}).setdefault(b, {})[d] = engine_class
                return engine_class
            return decorator

    classes = enginery_verl.register(EngineRegistry, BaseEngine)
    assert enginery_verl.register(EngineRegistry, BaseEngine) is classes  # idempotent
    for model_type in ("language_model", "value_model"):
        assert set(EngineRegistry._engines[model_type]) == {"enginery_fsdp", "enginery_fsdp2", "enginery_veomni"}
        assert EngineRegistry._engines[model_type]["enginery_fsdp"]["cpu"] is classes[model_type]
    # verl's EngineRegistry.new(model_type, backend, *args, **kwargs) calls the class with the config kwargs only.
    engine = EngineRegistry._engines["language_model"]["enginery_fsdp2"]["cpu"](
        model_config=MODEL, engine_config={**ENGINE, "strategy": "enginery_fsdp2"}, optimizer_config=OPTIM,
        checkpoint_config=None, device="cpu", plugin_dirs=[common.PLUGIN_DIR])
    assert engine.backend == "fsdp2" and engine.model_type == "language_model"


def test_per_tensor_params_are_the_hf_checkpoints_tensors(tmp_path):
    """get_per_tensor_param's names, shapes and values equal the Hugging Face checkpoint the engine exports, and the
    tensors are the caller's: held to the end of the generator and then overwritten, they leave the engine's weights
    as they were (one rank, fp32: the stream hands out copies, never views of the masters)."""
    engine = enginery_verl.LanguageModelEngine(
        model_config=MODEL, engine_config=ENGINE, optimizer_config=OPTIM, device="cpu",
        checkpoint_config={"save_contents": ["model", "optimizer", "extra", "hf_model"]},
        plugin_dirs=[common.PLUGIN_DIR])
    engine.initialize()
    prompts, responses = verl_common.sequences()
    engine.train_batch(verl_common.verl_batch(prompts, responses), verl_common.sft_loss)
    engine.save_checkpoint(str(tmp_path / "ckpt"), global_step=1)
    generator, peft_config = engine.get_per_tensor_param()
    assert peft_config is None
    params = dict(generator)
    hf = verl_common.read_safetensors_dir(str(tmp_path / "ckpt" / "huggingface"))
    assert sorted(params) == sorted(hf)
    for name, tensor in hf.items():
        assert params[name].dtype == torch.float32 and torch.equal(params[name].cpu(), tensor), name
    for tensor in params.values():
        tensor.fill_(7.0)
    for name, tensor in engine.get_per_tensor_param()[0]:
        assert torch.equal(tensor.cpu(), hf[name]), name
    bf16 = dict(engine.get_per_tensor_param(dtype=torch.bfloat16)[0])
    assert all(t.dtype == torch.bfloat16 for t in bf16.values()) and sorted(bf16) == sorted(hf)
    buckets = list(engine._engine.weight_buckets(torch.float32, 1 << 16))
    names = [entry[0] for _, entries in buckets for entry in entries]
    assert sorted(names) == sorted(hf)
    for buffer, entries in buckets:
        for name, offset, numel, shape in entries:
            assert torch.equal(buffer[offset: offset + numel].view(shape).cpu(), hf[name]), name


class _RecordingEngine:
    """The adapter's enginery engine with its to() calls recorded (everything else passes through)."""

    def __init__(self, inner):
        self._inner = inner
        self.moves = []

    def to(self, device, model=True, optimizer=True, grad=True):
        self.moves.append((device, model, optimizer, grad))
        self._inner.to(device, model, optimizer, grad)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _storage(engine):
    """Where this rank's master weights live now: a move of the model copies them into fresh storage (on CPU too)."""
    return [p.data_ptr() for p in engine.module.parameters()]


def test_offload_outside_modes_moves_the_state_around_each_outermost_context():
    """engine_config offload_outside_modes reaches the engine's mode guards (engine_driver/mode_guard.h): each
    outermost context brings the model (a move copies it, so its storage changes on the CPU too) and its exit sends
    it back; a context inside another moves nothing; engine.mode follows the contexts as verl's do. Which parts each
    mode moves (train: model, optimizer, grad; eval: the model) is fsdp_mode_offload_test's, on a recording engine."""
    engine = adapter(offload_outside_modes=True)
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    outside = _storage(engine)
    assert outside and engine.mode is None
    with engine.train_mode():
        inside = _storage(engine)
        assert all(a != b for a, b in zip(inside, outside)) and engine.mode == "train"
        engine.train_batch(data, verl_common.sft_loss)
        with engine.eval_mode():
            assert engine.mode == "eval"
            engine.infer_batch(data)
        assert _storage(engine) == inside and engine.mode == "train"
    assert engine.mode is None
    back = _storage(engine)
    assert all(a != b for a, b in zip(back, inside))
    with engine.eval_mode():
        assert all(a != b for a, b in zip(_storage(engine), back))
        engine.infer_batch(data)
    plain = adapter()
    before = _storage(plain)
    with plain.train_mode():
        assert _storage(plain) == before  # without the option nothing moves


def test_offload_outside_modes_changes_no_number():
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    results = []
    for offload in (False, True):
        engine = adapter(offload_outside_modes=offload)
        steps = []
        for _ in range(2):
            with engine.train_mode():
                steps.append(engine.train_batch(data, verl_common.sft_loss))
        with engine.eval_mode():
            log_probs = engine.infer_batch(data)["model_output"]["log_probs"]
        results.append((steps, log_probs))
    (plain, plain_lp), (moved, moved_lp) = results
    for a, b in zip(plain, moved):
        assert a["loss"] == b["loss"] and a["metrics"]["grad_norm"] == b["metrics"]["grad_norm"]
    assert all(torch.equal(x, y) for x, y in zip(verl_common.rows_of(plain_lp), verl_common.rows_of(moved_lp)))


def test_offload_outside_modes_is_refused_by_name_before_any_work():
    """A value that is not a boolean is named by the engine's backend option, before any work. (A backend that does
    not list the option is refused by the engine's config check, conformance's for every engine.)"""
    with pytest.raises(enginery.EngineryError, match=r"engine\.fsdp\.offload_outside_modes: 'yes' has the wrong type"):
        enginery_verl.LanguageModelEngine(
            model_config=MODEL, engine_config={**ENGINE, "offload_outside_modes": "yes"}, optimizer_config=OPTIM,
            device="cpu", plugin_dirs=[common.PLUGIN_DIR])
    adapter(offload_outside_modes=False)  # off: nothing to check


# --- what verl's own engine tests found (issue: verl's engine tests pass on enginery); each fails on the old adapter


def _grad_norm(module):
    return math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in module.parameters() if p.grad is not None))


def test_gradients_survive_a_train_block_that_does_not_zero_them():
    """verl's train_mode(zero_grad_on_exit=False) (its Tinker worker's split step): the gradients of one block are
    those the next block steps with; the default block and a block that raises zero them, as verl's contexts do.
    The old adapter zeroed on every exit, so the step saw a zero gradient (grad norm 0.0)."""
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    engine, reference = adapter(), adapter()
    with engine.train_mode(zero_grad_on_exit=False):
        engine.forward_backward_batch(data, verl_common.sft_loss)
    held = _grad_norm(engine.module)
    assert held > 0
    with engine.train_mode(zero_grad_on_exit=True):
        norm = engine.optimizer_step()
    assert close(norm, held)
    with reference.train_mode():
        want = reference.train_batch(data, verl_common.sft_loss)["metrics"]["grad_norm"]
    assert close(norm, want)
    assert all(p.grad is None for p in engine.module.parameters())
    with engine.train_mode():
        engine.forward_backward_batch(data, verl_common.sft_loss)
    assert all(p.grad is None for p in engine.module.parameters())
    with pytest.raises(ZeroDivisionError):
        with engine.train_mode(zero_grad_on_exit=False):
            engine.forward_backward_batch(data, verl_common.sft_loss)
            1 / 0
    assert all(p.grad is None for p in engine.module.parameters())
    with pytest.raises(enginery.EngineryError, match=r"train_mode\(zero_grad=...\).*zero_grad_on_exit"):
        engine.train_mode(zero_grad=False)


def test_disable_auto_offload_leaves_the_moves_to_the_caller():
    engine = adapter(offload_outside_modes=True)
    prompts, responses = verl_common.sequences()
    engine.to("cpu")  # verl's worker.to("device") / to("cpu") around such a block; on the CPU both are the host
    placed = _storage(engine)
    assert placed
    with engine.train_mode(disable_auto_offload=True):
        assert _storage(engine) == placed
        engine.train_batch(verl_common.verl_batch(prompts, responses), verl_common.sft_loss)
    placed = _storage(engine)
    with engine.eval_mode(disable_auto_offload=True):
        assert _storage(engine) == placed
        engine.infer_batch(verl_common.verl_batch(prompts, responses))


def test_model_outputs_of_a_training_call_only_when_asked_for():
    """verl's engine drops a training forward_backward's model_output unless return_model_output is set (its Tinker
    worker sets it); an inference call always returns them."""
    prompts, responses = verl_common.sequences()
    engine = adapter()
    with engine.train_mode():
        out = engine.forward_backward_batch(verl_common.verl_batch(prompts, responses), verl_common.sft_loss)
        assert out["model_output"] == {} and len(out["loss"]) == 2
        asked = verl_common.verl_batch(prompts, responses)
        asked["return_model_output"] = True
        out = engine.forward_backward_batch(asked, verl_common.sft_loss)
        assert [row.shape[0] for row in out["model_output"]["log_probs"]] == \
            [p.shape[0] + r.shape[0] for p, r in zip(prompts, responses)]
    with engine.eval_mode():
        assert "log_probs" in engine.infer_batch(verl_common.verl_batch(prompts, responses))["model_output"]


def test_metrics_gather_as_verls_engine_gathers_them():
    """A loss returning verl Metric values gets one Metric per key holding every micro-batch's value (verl's
    append_to_dict), which verl's workers all-gather and reduce with Metric.aggregate_dp; plain values and lists
    become one list. The old adapter kept a list of Metric, which verl's reduce cannot add up."""
    from verl.utils.metric.utils import Metric

    def loss_function(model_output, data, dp_group):
        loss, _ = verl_common.sft_loss(model_output, data, dp_group)
        tokens = float(data["loss_mask"].sum())
        return loss, {"tokens": Metric("sum", tokens), "peak": Metric("max", tokens), "plain": tokens,
                      "listed": [tokens, tokens]}

    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    engine = adapter()
    with engine.train_mode():
        metrics = engine.forward_backward_batch(data, loss_function)["metrics"]
    per_micro = [float(data["loss_mask"][:2].sum()), float(data["loss_mask"][2:].sum())]
    assert isinstance(metrics["tokens"], Metric) and metrics["tokens"].values == per_micro
    assert metrics["tokens"].aggregate() == sum(per_micro) and metrics["peak"].aggregate() == max(per_micro)
    assert metrics["plain"] == per_micro and metrics["listed"] == [per_micro[0]] * 2 + [per_micro[1]] * 2
    # what verl's worker does with the ranks' gathered Metrics: a sum over micro-batches, a mean over ranks
    assert Metric.aggregate_dp([metrics["tokens"], metrics["tokens"]]) == sum(per_micro)


def test_module_is_this_ranks_parameters_and_gradients():
    """engine.module: every Hugging Face name once, each piece the engine's own fp32 master (a write through it
    changes what get_per_tensor_param gathers), no gradient before the first backward, as FSDP2 starts (that its
    gradients are the ones optimizer_step measures: test_gradients_survive_a_train_block_that_does_not_zero_them)."""
    engine = adapter()
    names = [name for name, _ in engine.get_per_tensor_param()[0]]
    full = dict(engine.get_per_tensor_param()[0])
    module = engine.module
    assert [name for name, _ in module.named_parameters()] == names
    for name, parameter in module.named_parameters():
        assert parameter.dtype == torch.float32 and parameter.requires_grad and parameter.grad is None
        assert torch.equal(parameter.detach().reshape(-1), full[name].reshape(-1))  # one rank: the whole tensor
    first_name, first = next(iter(module.named_parameters()))
    with torch.no_grad():
        first.add_(1.0)
    assert torch.equal(dict(engine.get_per_tensor_param()[0])[first_name], full[first_name] + 1.0)


def test_optimizer_param_groups_steer_the_next_step():
    """engine.optimizer.param_groups as verl's Tinker worker writes them (its _apply_optim_step_params): the next
    step uses the written lr, betas, eps and weight decay, equal to an engine configured with them; the schedule's
    lr comes back at the next lr_scheduler_step, as a torch scheduler overwrites a hand-written lr."""
    from verl.workers.engine_workers_tinker import _apply_optim_step_params
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    written = {"lr": 5e-3, "betas": (0.8, 0.9), "eps": 1e-7, "weight_decay": 0.02}
    engine = adapter()
    configured = enginery_verl.LanguageModelEngine(
        model_config=MODEL, engine_config=ENGINE, optimizer_config={**OPTIM, **written}, checkpoint_config=None,
        device="cpu", plugin_dirs=[common.PLUGIN_DIR])
    configured.initialize()
    group = engine.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (OPTIM["lr"], (0.9, 0.999), 0.0)
    _apply_optim_step_params(engine.optimizer, written)
    for key, value in written.items():
        assert engine.optimizer.param_groups[0][key] == pytest.approx(value)
    for e in (engine, configured):
        with e.train_mode():
            e.train_batch(data, verl_common.sft_loss)
    got, want = dict(engine.get_per_tensor_param()[0]), dict(configured.get_per_tensor_param()[0])
    assert all(torch.equal(got[name], want[name]) for name in want)
    assert engine.optimizer.param_groups[0]["lr"] == written["lr"]
    assert close(engine.lr_scheduler_step(), OPTIM["lr"]) and engine.optimizer.param_groups[0]["lr"] == OPTIM["lr"]
    with pytest.raises(enginery.EngineryError, match=r"betas\[1\] = 1 .*0 <= beta < 1"):
        engine.optimizer.param_groups[0]["betas"] = (0.9, 1.0)
    with pytest.raises(enginery.EngineryError, match=r"param_group\['amsgrad'\] written"):
        engine.optimizer.param_groups[0]["amsgrad"] = True


def test_weight_export_outside_modes_brings_the_model_and_sends_it_back():
    """With offload_outside_modes, verl's weight sync runs outside the contexts, where the model waits in host memory
    (the GPU engine refuses to gather it there): the export brings the model alone and sends it back once the
    generator is exhausted, as verl's engine loads an offloaded model for its export. Inside a context, no move."""
    engine = adapter(offload_outside_modes=True)
    spy = engine._engine = _RecordingEngine(engine._engine)
    spy.moves.clear()
    generator, _ = engine.get_per_tensor_param()
    assert spy.moves == []  # lazy, as verl's: nothing moves before the first tensor is asked for
    names = [name for name, _ in generator]
    assert names and spy.moves == [("cpu", True, False, False)] * 2  # engine.device, then back to the host
    spy.moves.clear()
    with engine.eval_mode():
        spy.moves.clear()
        assert [name for name, _ in engine.get_per_tensor_param()[0]] == names
        assert spy.moves == []


def test_module_gradients_with_the_masters_offloaded():
    """engine.param_offload keeps the shard gradients' host buffer through a zero grad: still no gradient reads
    back after it (None, as FSDP2's set_to_none), and the one written by a backward is the one the step measures."""
    prompts, responses = verl_common.sequences()
    engine = adapter(param_offload=True)
    assert all(p.grad is None for p in engine.module.parameters())
    with engine.train_mode(zero_grad_on_exit=False):
        engine.forward_backward_batch(verl_common.verl_batch(prompts, responses), verl_common.sft_loss)
    held = _grad_norm(engine.module)
    with engine.train_mode():
        assert close(engine.optimizer_step(), held)
    assert all(p.grad is None for p in engine.module.parameters())
