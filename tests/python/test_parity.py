"""The Python-driven engine and the C++ host path give the same loss, grad norm, lr and parameters, bit for bit,
after 3 steps on the same batch."""
import os
import subprocess

import pytest

import enginery

import common

REFERENCE_EXE = os.environ.get("ENGINERY_PYTHON_REFERENCE", "")


def cpp_steps(checkpoint, steps):
    # The C++ host reads `--set`-style overrides: TOML values (common.CONFIG holds strings and numbers).
    overrides = [f'{key}="{value}"' if isinstance(value, str) else f"{key}={value!r}"
                 for key, value in common.CONFIG.items()]
    run = subprocess.run([REFERENCE_EXE, common.PLUGIN_DIR, str(checkpoint), str(steps), "engine.strategy=fsdp",
                          *overrides], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return [tuple(float.fromhex(word) for word in line.split()) for line in run.stdout.splitlines()]


def python_steps(checkpoint):
    engine = enginery.new_engine("language_model", "fsdp", "cpu", common.CONFIG)
    engine.initialize()
    batch = common.parity_batch()
    steps = []
    with engine.train_mode():
        # Two steps through the single calls, the third through train_batch: both must match the host's loop.
        for _ in range(2):
            engine.optimizer_zero_grad()
            out = engine.forward_backward_batch(batch, common.sft_loss)
            grad_norm = engine.optimizer_step()
            lr = engine.lr_scheduler_step()
            steps.append((float(out["loss"]), grad_norm, lr))
        out = engine.train_batch(batch, common.sft_loss)
        steps.append((float(out["loss"]), out["grad_norm"], out["lr"]))
    engine.save_checkpoint(str(checkpoint), 3)
    return steps


def test_python_path_equals_cpp_path_bitwise(tmp_path):
    assert REFERENCE_EXE, "ENGINERY_PYTHON_REFERENCE is not set (ctest sets it)"
    expected = cpp_steps(tmp_path / "cpp", 3)
    got = python_steps(tmp_path / "py")
    assert len(expected) == 3
    assert got == expected  # exact: loss, grad norm and lr of every step
    assert expected[2][0] < expected[0][0]  # and it trained
    for name in ("model_rank_0.bin", "optim_rank_0.bin"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cpp" / name).read_bytes(), name


def test_loss_graph_reaches_the_model():
    """A loss built in Python from the model's log-probs backpropagates into the C++ parameters: a zero loss
    with the graph attached gives a zero grad norm, the SFT loss a positive one."""
    engine = enginery.new_engine("language_model", "fsdp", "cpu", common.CONFIG)
    engine.initialize()
    batch = common.parity_batch()
    engine.optimizer_zero_grad()
    engine.forward_backward_batch(batch, lambda out, data: (out["log_probs"].sum() * 0.0, {}))
    assert engine.optimizer_step() == 0.0
    engine.optimizer_zero_grad()
    engine.forward_backward_batch(batch, common.sft_loss)
    assert engine.optimizer_step() > 0.0


def test_plugins_lists_the_fsdp_engine():
    engines = enginery.plugins()
    keys = {(e["model_type"], e["backend"], e["device"]) for e in engines}
    assert ("language_model", "fsdp", "cpu") in keys
    assert all(e["plugin"] for e in engines)
    assert enginery.load_plugins(common.PLUGIN_DIR) == []  # searched already: nothing loads twice


def test_load_plugins_refuses_a_folder_that_does_not_exist_or_holds_none(tmp_path):
    missing = tmp_path / "no_such_dir"
    with pytest.raises(enginery.EngineryError, match=f"load_plugins {missing} does not exist"):
        enginery.load_plugins(missing)
    with pytest.raises(enginery.EngineryError, match=f"load_plugins {tmp_path} holds no plugin"):
        enginery.load_plugins(tmp_path)


def test_data_parallel_rank_and_size_alone():
    engine = enginery.new_engine("language_model", "fsdp", "cpu", common.CONFIG)
    assert (engine.get_data_parallel_rank(), engine.get_data_parallel_size()) == (0, 1)
