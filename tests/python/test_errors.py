"""Errors cross into Python as exceptions carrying the C++ message: configuration keys the engine does not know
or does not implement are named, and a Python exception raised inside loss_fn comes back as itself without
leaving the step half done for the next one."""
import enginery
import pytest
import torch

import common


def engine_with(extra):
    return enginery.new_engine("language_model", "fsdp", "cpu", {**common.CONFIG, **extra})


@pytest.mark.parametrize("extra, named", [
    ({"engine.no_such_key": 1}, "engine.no_such_key"),                  # unknown to the schema
    ({"optim.lr": "fast"}, "optim.lr"),                                  # wrong type
    ({"engine.forward_prefetch": True}, "engine.forward_prefetch"),      # not implemented by fsdp (ConfigSupport)
    ({"data.train_batch_size": 8}, "data.train_batch_size"),            # a trainer setting, not an engine's
    ({"engine": {"strategy": "fsdp2"}}, "engine.strategy"),             # disagrees with the backend argument
])
def test_bad_config_key_is_named(extra, named):
    with pytest.raises(enginery.EngineryError) as error:
        engine_with(extra)
    assert named in str(error.value)
    assert isinstance(error.value, RuntimeError)


def test_config_values_arrive_typed_and_other_types_are_refused_by_key():
    """The dict's values reach the config reader as values, not TOML text: a string that would parse as a TOML
    number stays a string (refused for a number key), a torch.dtype gives its name, and a value of another type, or
    an int beyond 64 bits, is refused naming its key."""
    with pytest.raises(enginery.EngineryError, match=r"new_engine config optim\.lr"):
        engine_with({"optim.lr": "1e-2"})
    engine_with({"engine.mixed_precision.param_dtype": torch.float32})
    with pytest.raises(enginery.EngineryError, match=r"optim\.lr is a object .*allowed: bool, int, float, str"):
        engine_with({"optim.lr": object()})
    too_big = r"new_engine config engine\.micro_batch_size_per_gpu: .*does not fit 64 bits"
    with pytest.raises(enginery.EngineryError, match=too_big):
        engine_with({"engine.micro_batch_size_per_gpu": 2 ** 70})


def test_a_bad_cuda_kernel_switch_is_refused_when_the_engine_is_made(monkeypatch):
    # not at the first kernel call inside a forward: the verl path refuses it where `enginery train` does
    monkeypatch.setenv("ENGINERY_CUDA_KERNELS", "swiglu,no_such_kernel")
    with pytest.raises(enginery.EngineryError, match="ENGINERY_CUDA_KERNELS.*no_such_kernel.*log_softmax"):
        engine_with({})


def test_a_cuda_kernel_switch_changed_after_the_first_engine_is_refused(monkeypatch):
    # the kernels read the variable once per process: a later value would be accepted and not honoured
    monkeypatch.delenv("ENGINERY_CUDA_KERNELS", raising=False)
    engine_with({})
    monkeypatch.setenv("ENGINERY_CUDA_KERNELS", "0")
    with pytest.raises(enginery.EngineryError, match="ENGINERY_CUDA_KERNELS is now \"0\".*keeps all on"):
        engine_with({})


def test_unknown_backend_lists_the_registered_ones():
    with pytest.raises(enginery.EngineryError, match="fsdp"):
        enginery.new_engine("language_model", "no_such_backend", "cpu", common.CONFIG)


class LossFailed(Exception):
    pass


def test_raising_loss_fn_propagates_and_the_next_step_works():
    batch = common.parity_batch()
    fresh = engine_with({})
    fresh.initialize()
    expected = fresh.train_batch(batch, common.sft_loss)

    engine = engine_with({})
    engine.initialize()

    def failing(model_output, data, ctx):
        # The first micro-batch completes its backward; the second fails mid-step.
        if ctx.micro_batch_index == 1:
            raise LossFailed("boom")
        return common.sft_loss(model_output, data, ctx)

    with pytest.raises(LossFailed, match="boom"):
        engine.train_batch(batch, failing)
    got = engine.train_batch(batch, common.sft_loss)
    # The failed call changed nothing: the next step is the fresh engine's first, bit for bit.
    assert float(got["loss"]) == float(expected["loss"])
    assert got["grad_norm"] == expected["grad_norm"]


def test_bad_loss_fn_result_and_batch_value_are_named():
    engine = engine_with({})
    engine.initialize()
    batch = common.parity_batch()
    with pytest.raises(enginery.EngineryError, match="loss_fn"):
        engine.forward_backward_batch(batch, lambda out, data: "not a tensor")
    with pytest.raises(enginery.EngineryError, match="bad_entry"):
        engine.forward_backward_batch({**batch, "bad_entry": [1, 2]}, common.sft_loss)
    engine.optimizer_zero_grad()
    out = engine.forward_backward_batch(batch, common.sft_loss)
    assert torch.isfinite(out["loss"])


def test_to_round_trip_on_cpu_and_a_device_the_engine_lacks_is_named():
    batch = common.parity_batch()
    stayed = engine_with({})
    stayed.initialize()
    moved = engine_with({})
    moved.initialize()
    stayed.train_batch(batch, common.sft_loss)
    moved.train_batch(batch, common.sft_loss)
    moved.to("cpu")  # a CPU engine copies its state into fresh storage: the next step must not notice
    moved.to("cpu", model=False, optimizer=True, grad=False)
    want = stayed.train_batch(batch, common.sft_loss)
    got = moved.train_batch(batch, common.sft_loss)
    assert float(got["loss"]) == float(want["loss"])
    assert got["grad_norm"] == want["grad_norm"]
    with pytest.raises(enginery.EngineryError, match="computes on cpu and cannot move its state to cuda"):
        moved.to("cuda")


def test_offload_outside_modes_through_the_module_keeps_the_steps_and_refuses_a_bad_value():
    """[engine.fsdp] offload_outside_modes from a Python config: accepted and checked by the engine (a value that is
    not a boolean is named before any work), and steps inside train_mode() equal an engine without it (on CPU each
    move is a copy; which moves the guards make is checked in fsdp_mode_offload_test)."""
    batch = common.parity_batch()
    plain = engine_with({})
    moving = engine_with({"engine.fsdp.offload_outside_modes": True})
    plain.initialize()
    moving.initialize()
    for _ in range(2):
        with moving.train_mode():
            got = moving.train_batch(batch, common.sft_loss)
        with plain.train_mode():
            want = plain.train_batch(batch, common.sft_loss)
        assert float(got["loss"]) == float(want["loss"])
        assert got["grad_norm"] == want["grad_norm"]
    with pytest.raises(enginery.EngineryError, match="engine.fsdp.offload_outside_modes"):
        engine_with({"engine.fsdp.offload_outside_modes": "yes"})


def _bad(change):
    """common.parity_batch() with `change` applied: a dict of entries (None deletes one), or a function of it."""
    batch = common.parity_batch()
    if callable(change):
        return change(batch)
    for key, value in change.items():
        if value is None:
            del batch[key]
        else:
            batch[key] = value
    return batch


def _with(key, row, token, value):
    def change(batch):
        tensor = batch[key].clone()
        tensor[row, token] = value
        return {**batch, key: tensor}
    return change


_ROWS = torch.arange(16).expand(4, 16)


@pytest.mark.parametrize("change, message", [
    # the vocabulary of builtin:qwen2-tiny is 256: one id past it, and a negative one (the embedding's bare
    # "IndexError: index out of range in self" before)
    (_with("input_ids", 2, 5, 256),
     "batch['input_ids'] row 2: token 5 is 256, outside the model's vocabulary of 256 tokens (allowed: token ids "
     "0..255)"),
    (_with("input_ids", 1, 0, -3), "batch['input_ids'] row 1: token 0 is -3"),
    # float ids were refused only by the embedding's dtype check; unsigned 2**64 - 1 would read back as -1
    ({"input_ids": common.parity_batch()["input_ids"].float() + 0.7},
     "batch['input_ids']: has dtype torch.float32 (allowed: torch.int64, torch.int32)"),
    ({"input_ids": torch.full((4, 16), 2**64 - 1, dtype=torch.uint64)}, "has dtype torch.uint64"),
    # position_ids of another length: a tensor-size RuntimeError inside the model before
    ({"position_ids": _ROWS[:, :10]},
     "batch['position_ids']: has shape [4, 10], input_ids [4, 16] (allowed: one entry per token: input_ids' shape "
     "[4, 16])"),
    ({"position_ids": torch.arange(18).expand(4, 18)}, "batch['position_ids']: has shape [4, 18]"),
    ({"position_ids": _ROWS.float()}, "batch['position_ids']: has dtype torch.float32"),
    # masks are 0 or 1: a weight trained silently
    (_with("loss_mask", 3, 7, 0.5), "batch['loss_mask'] row 3: token 7 is 0.5 (allowed: 0 or 1 per token)"),
    (_with("attention_mask", 0, 2, 2), "batch['attention_mask'] row 0: token 2 is 2 (allowed: 0 or 1 per token)"),
    # row 1 is padding from token 12: a target there has no log-prob, but was counted in the normaliser
    (_with("loss_mask", 1, 13, 1.0), "batch['loss_mask'] row 1: token 13 is a target, but attention_mask marks it "
                                     "as padding (allowed: targets only at real tokens (attention_mask 1))"),
    # no target at all: loss NaN and "grad norm is not finite; skipping" before
    ({"loss_mask": torch.zeros(4, 16)}, "batch['loss_mask']: has no target token"),
    ({"loss_mask": None}, "batch['loss_mask']: is missing, and a loss function counts its targets"),
    ({"attention_mask": None}, "batch['attention_mask']: is missing"),
    ({"old_log_probs": torch.zeros(4, 15)}, "batch['old_log_probs']: has shape [4, 15], input_ids [4, 16]"),
    (lambda b: {**b, "advantages": torch.zeros(4, 16).index_put_((torch.tensor(1), torch.tensor(4)),
                                                                 torch.tensor(float("nan")))},
     "batch['advantages'] row 1: token 4 is nan (allowed: finite numbers at every token, masked ones included"),
    # empty and unreadable batches
    (lambda b: {k: v[:0] for k, v in b.items()}, "batch['input_ids']: has no rows: shape [0, 16]"),
    (lambda b: {}, "batch: holds no tensor"),
    (lambda b: {k: v.to("meta") for k, v in b.items()}, "batch['input_ids']: is on the meta device (allowed: cpu)"),
    ({"scale": torch.tensor(2.0)}, "batch['scale']: is a 0-dim tensor"),
])
def test_a_bad_batch_is_refused_by_field_row_and_allowed_values_before_any_work(change, message):
    """Each refusal names the field, the row and the allowed values, and comes before any work: the next step is a
    fresh engine's first, bit for bit (no forward ran, no gradient or optimizer state changed)."""
    batch = common.parity_batch()
    fresh = engine_with({})
    fresh.initialize()
    expected = fresh.train_batch(batch, common.sft_loss)
    engine = engine_with({})
    engine.initialize()
    with pytest.raises(enginery.EngineryError) as error:
        engine.train_batch(_bad(change), common.sft_loss)
    assert message in str(error.value)
    got = engine.train_batch(batch, common.sft_loss)
    assert float(got["loss"]) == float(expected["loss"])
    assert got["grad_norm"] == expected["grad_norm"]


def test_what_the_checks_accept():
    """The dtypes torch's own embedding and masks take stay accepted, and a forward-only call needs no target."""
    engine = engine_with({})
    engine.initialize()
    batch = common.parity_batch()
    want = float(engine.forward_backward_batch(batch, common.sft_loss, forward_only=True)["loss"])
    for change in ({"input_ids": batch["input_ids"].int()}, {"attention_mask": batch["attention_mask"].bool()},
                   {"loss_mask": batch["loss_mask"].bool()}, {"position_ids": _ROWS.int()}):
        got = engine.forward_backward_batch({**batch, **change}, common.sft_loss, forward_only=True)
        assert float(got["loss"]) == want, change
    out = engine.infer_batch({**batch, "loss_mask": torch.zeros(4, 16)})  # no loss function: nothing to count
    assert out["model_output"]["log_probs"].shape == (4, 16)


def test_int32_ids_train_as_int64_ids_do():
    """int32 input_ids and position_ids are accepted, and engines get them as int64 (host_api/base_engine.cpp,
    [Note: engines get int64 token ids]): the same step, bit for bit."""
    batch = common.parity_batch()
    steps = []
    for change in ({}, {"input_ids": batch["input_ids"].int(), "position_ids": _ROWS.int()}):
        engine = engine_with({})
        engine.initialize()
        steps.append(engine.train_batch({**batch, **change}, common.sft_loss))
    assert float(steps[1]["loss"]) == float(steps[0]["loss"])
    assert steps[1]["grad_norm"] == steps[0]["grad_norm"]


def test_a_nested_tensor_beside_a_padded_input_ids_is_refused_by_name():
    """A nested entry the batch cannot be read by (input_ids padded: no packed rows to match it against) is named,
    not a c10 error from inside the check that would leave the other ranks waiting. A nested input_ids makes the
    batch packed (test_packed.py)."""
    engine = engine_with({})
    engine.initialize()
    batch = common.parity_batch()
    rows = [batch["loss_mask"][i, :16 - i] for i in range(4)]
    nested = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    with pytest.raises(enginery.EngineryError, match=r"batch\['loss_mask'\].*nested"):
        engine.train_batch({**batch, "loss_mask": nested}, common.sft_loss)
