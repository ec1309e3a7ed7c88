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
